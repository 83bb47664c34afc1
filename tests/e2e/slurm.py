#!/usr/bin/env python3
"""braid-run under a real Slurm: `srun -n 4` trains the serial run's losses.

The test starts a one-node Slurm of its own: a munge key and a slurm.conf
written into a fresh directory, munged, slurmctld and slurmd in the
foreground as its own processes (their state, spool, logs and sockets in
that directory, their ports free ones), and stops every one of them, and
every process they started, on every way out. Then:

  - tiny-llama over dp 2 x tp 2 (micro-batch 2), `srun --mpi=pmix -n 4
    braid-run`, has the per-step losses of the serial plan (dp 1, tp 1,
    micro-batch 4: the same global batch) within 1e-5 relative;
  - with --cuda-emulated, the same under braid-run-emulated --device cuda,
    whose ranks take their rank, size and local rank from srun's variables
    (the rendezvous NCCL's bootstrap reads), within the 1e-4 the CUDA
    emulation keeps to the CPU in fp32 (tests/e2e/cuda_train.py);
  - `srun -n 3` of the 4-rank plan fails, saying to start it with srun -n 4.

When Slurm cannot run here (not installed, no PMIx plugin, a daemon that
does not start, a step that cannot launch), the test says exactly why, runs
the rendezvous of 4 processes given the variables srun sets
(--rendezvous-tests, SlurmRendezvous.*) and exits 77 (skipped), never 0.

  slurm.py --bin BUILD/bin --work DIR --corpus TEXT
           [--rendezvous-tests BIN] [--cuda-emulated]
"""

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import Setup, run

SKIPPED = 77
TOLERANCE = 1e-5  # CPU, any layout against the serial run
EMULATED_TOLERANCE = 1e-4  # the CUDA emulation against the CPU, fp32
RANKS = 4
# The environment variable that marks every process the test's Slurm
# starts (the daemons, the steps' slurmstepd and their tasks), so that all
# of them are found and stopped at the end.
MARK = "BRAID_SLURM_TEST"


def die_with_parent():
    """In a child, before it runs its program: it is killed when the test's
    process ends, however that ends (ctest's timeout included)."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class CannotRun(Exception):
    """Slurm does not run here; the message says why."""


def fail(message):
    sys.exit(f"FAILED: {message}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)\n"


class Slurm:
    """A one-node Slurm in a directory of its own."""

    DAEMONS = ("munged", "slurmctld", "slurmd")
    CLIENTS = ("srun", "sinfo", "squeue", "scancel")

    def __init__(self):
        # Short: munge's socket path must fit a sockaddr_un (108 bytes).
        self.dir = tempfile.mkdtemp(prefix="braid-slurm-")
        self.procs = []  # (name, Popen)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_",
                                         "PMIX_", "PMI_", "OMPI_"))}
        self.env["SLURM_CONF"] = self.p("slurm.conf")
        self.env[MARK] = self.dir

    def p(self, *names):
        return os.path.join(self.dir, *names)

    def start(self):
        """Starts the daemons and waits for the node; raises CannotRun."""
        # The daemons are in /usr/sbin, which a user's PATH may lack.
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        self.tools = {t: shutil.which(t, path=path)
                      for t in self.DAEMONS + self.CLIENTS}
        missing = [t for t, found in self.tools.items() if not found]
        if missing:
            raise CannotRun(f"{', '.join(missing)} not found (PATH, /usr/sbin): "
                            "install Debian's slurmctld, slurmd, slurm-client "
                            "and munge (scripts/setup.sh does)")
        os.chmod(self.dir, 0o755)
        for d in ("key", "sock", "state", "spool", "log"):
            os.mkdir(self.p(d))
        # munged refuses a key directory others may read, and a socket
        # directory others may not enter.
        os.chmod(self.p("key"), 0o700)
        os.chmod(self.p("sock"), 0o755)
        key = self.p("key", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as f:
            f.write(os.urandom(1024))
        self.munge_socket = self.p("sock", "munge.socket")
        self.launch("munged", ["munged", "--foreground",
                               f"--socket={self.munge_socket}",
                               f"--key-file={key}",
                               f"--log-file={self.p('log', 'munged.log')}",
                               f"--pid-file={self.p('munged.pid')}",
                               f"--seed-file={self.p('munged.seed')}"])
        self.wait(lambda: os.path.exists(self.munge_socket), 10,
                  "munged made no socket")
        self.write_conf()
        self.launch("slurmctld", ["slurmctld", "-D", "-f", self.p("slurm.conf")])
        self.launch("slurmd", ["slurmd", "-D", "-f", self.p("slurm.conf")])
        self.wait(self.node_idle, 30, "the node did not come up idle")
        p = self.client(["srun", "--mpi=list"])
        if "pmix" not in p.stdout + p.stderr:
            raise CannotRun("this Slurm has no PMIx plugin (srun --mpi=list: "
                            f"{' '.join((p.stdout + p.stderr).split())}), which Open "
                            "MPI needs under srun")
        # A plain step: Slurm launches tasks here at all.
        p = self.client(["srun", "-n", str(RANKS), "-t", "1", "printenv",
                         "SLURM_PROCID"], timeout=60)
        if p.returncode != 0 or sorted(p.stdout.split()) != [str(r) for r in range(RANKS)]:
            raise CannotRun(f"srun -n {RANKS} printenv SLURM_PROCID exited with "
                            f"{p.returncode}: {p.stdout}{p.stderr}"
                            f"slurmd's log:\n{tail(self.p('log', 'slurmd.out'))}")

    def write_conf(self):
        host = socket.gethostname().split(".")[0]
        user = getpass.getuser()
        d = self.p
        with open(d("slurm.conf"), "w") as f:
            f.write(f"""ClusterName=braidtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d('state')}
SlurmdSpoolDir={d('spool')}
SlurmctldLogFile={d('log', 'slurmctld.log')}
SlurmdLogFile={d('log', 'slurmd.log')}
SlurmctldPidFile={d('slurmctld.pid')}
SlurmdPidFile={d('slurmd.pid')}
MailProg=/bin/true
# No cgroups, no accounting: what a container without systemd allows.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# {RANKS} tasks, whatever the cores: the node is what this file says.
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={max(RANKS, os.cpu_count() or 1)} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=10 State=UP
""")

    def launch(self, name, cmd):
        out = open(self.p("log", f"{name}.out"), "w")
        proc = subprocess.Popen([self.tools[cmd[0]]] + cmd[1:], stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env,
                                start_new_session=True,
                                preexec_fn=die_with_parent)
        out.close()
        self.procs.append((name, proc))

    def wait(self, ready, seconds, what):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise CannotRun(f"{name} exited with {proc.returncode}:\n"
                                    f"{tail(self.p('log', name + '.out'))}")
            if ready():
                return
            time.sleep(0.2)
        logs = "".join(f"{name}:\n{tail(self.p('log', name + '.out'))}"
                       for name, _ in self.procs)
        raise CannotRun(f"{what} within {seconds} s\n{logs}")

    def node_idle(self):
        p = self.client(["sinfo", "-h", "-N", "-o", "%T"])
        return p.returncode == 0 and p.stdout.split() == ["idle"]

    def client(self, cmd, timeout=30, **kw):
        try:
            return subprocess.run([self.tools[cmd[0]]] + cmd[1:],
                                  capture_output=True, text=True,
                                  env=self.env, timeout=timeout, **kw)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(
                cmd, 124, e.stdout or "", (e.stderr or "") +
                f"\n(killed after {timeout} s)")

    def srun(self, args, timeout=120, kill_on_bad_exit=True):
        """Runs one job step; its tasks get the time limit and are killed
        with it."""
        cmd = ["srun", "--mpi=pmix", "-t", "3",
               f"--kill-on-bad-exit={int(kill_on_bad_exit)}"] + args
        proc = subprocess.Popen([self.tools["srun"]] + cmd[1:],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env,
                                start_new_session=True,
                                preexec_fn=die_with_parent)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.client(["scancel", "--full", "--user", getpass.getuser()])
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            fail(f"{' '.join(cmd)} did not end within {timeout} s\n{out}\n{err}")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def stop(self):
        """Cancels every job, then stops the daemons and every process
        that carries the mark (slurmstepd and tasks included)."""
        if any(name == "slurmctld" and p.poll() is None for name, p in self.procs):
            self.client(["scancel", "--full", "--user", getpass.getuser()],
                        timeout=10)
        for name, proc in reversed(self.procs):
            # Each daemon leads a process group of its own (slurmctld's
            # slurmscriptd is in it).
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    pass
        for pid in self.marked():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def marked(self):
        """Processes other than this one that the test's Slurm started:
        those whose environment has the mark (the daemons, the tasks) or
        that hold a file of its directory open (slurmstepd, which empties
        its environment but keeps slurmd's log open)."""
        mark = f"{MARK}={self.dir}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    ours = mark in f.read().split(b"\0")
                fds = f"/proc/{entry}/fd"
                for fd in [] if ours else os.listdir(fds):
                    try:
                        target = os.readlink(os.path.join(fds, fd))
                    except OSError:
                        continue
                    if target.startswith(self.dir + "/"):
                        ours = True
                        break
            except OSError:
                continue
            if ours:
                pids.append(int(entry))
        return pids


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def compare(name, got, want, tolerance):
    if len(got) != len(want):
        fail(f"{name}: {len(got)} steps' losses, the serial run has {len(want)}")
    for step, (g, w) in enumerate(zip(got, want), 1):
        if abs(g - w) > tolerance * abs(w):
            fail(f"{name}: step {step}'s loss {g} is not the serial run's {w} "
                 f"(within {tolerance} relative)")
    print(f"{name}: {len(got)} steps' losses within {tolerance} relative of "
          "the serial run's")


def fallback(setup, why):
    """Slurm did not run: the rendezvous through srun's variables, and 77."""
    print(f"real Slurm did not run: {why}")
    tests = setup.args.rendezvous_tests
    if not tests:
        print("no --rendezvous-tests given: nothing else to run")
        sys.exit(SKIPPED)
    p = subprocess.run([tests, "--gtest_filter=SlurmRendezvous.*"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"the rendezvous through srun's variables:\n{p.stdout}{p.stderr}")
    print("instead: 4 processes given the variables srun sets met through "
          "them (SlurmRendezvous.*); skipped, since Slurm itself did not run")
    sys.exit(SKIPPED)


def main():
    def options(ap):
        ap.add_argument("--rendezvous-tests")
        ap.add_argument("--cuda-emulated", action="store_true")

    setup = Setup(options)
    b, w = setup.b, setup.w
    # A SIGTERM (a timeout) still stops the daemons: through the finally.
    signal.signal(signal.SIGTERM, lambda *_: fail("stopped by SIGTERM"))
    data = setup.dataset(100_000)
    plans = {}
    for name, parallel in (("serial", "dp: 1 tp: 1 micro_batch_size: 4"),
                           ("parallel", "dp: 2 tp: 2 micro_batch_size: 2")):
        job = w(f"{name}.textproto")
        with open(job, "w") as f:
            f.write('model { preset: "tiny-llama" }\n'
                    f"parallel {{ {parallel} }}\n"
                    "train { steps: 5 }\n"
                    "data { seq_length: 32 }\n")
        plans[name] = w(f"{name}.plan")
        run([b("braidc"), job, "--emit=plan", "-o", plans[name]])
    run([b("braid-run"), plans["serial"], "--data", data,
         "--metrics-out", w("serial.jsonl")])
    serial = losses(w("serial.jsonl"))

    slurm = Slurm()
    try:
        try:
            slurm.start()
        except CannotRun as e:
            why = str(e)
        else:
            why = None
            print(f"Slurm up: munged, slurmctld and slurmd in {slurm.dir}")
            runs = [("srun -n 4 braid-run", b("braid-run"), [],
                     w("parallel.jsonl"), TOLERANCE)]
            if setup.args.cuda_emulated:
                runs.append(("srun -n 4 braid-run-emulated --device cuda",
                             b("braid-run-emulated"), ["--device", "cuda"],
                             w("emulated.jsonl"), EMULATED_TOLERANCE))
            for name, tool, extra, metrics, tolerance in runs:
                if os.path.exists(metrics):
                    os.remove(metrics)
                p = slurm.srun(["-n", str(RANKS), tool, plans["parallel"],
                                "--data", data, "--metrics-out", metrics] + extra)
                if p.returncode != 0:
                    fail(f"{name} exited with {p.returncode}\n{p.stdout}\n"
                         f"{p.stderr}\nslurmd's log:\n"
                         f"{tail(slurm.p('log', 'slurmd.log'))}")
                compare(name, losses(metrics), serial, tolerance)
            # Too few tasks: every one says how many to start.
            p = slurm.srun(["-n", "3", b("braid-run"), plans["parallel"],
                            "--data", data], kill_on_bad_exit=False)
            want = ("the plan is for 4 ranks (dp 2 x tp 2) but the job has 3: "
                    "start it with srun -n 4")
            if p.returncode == 0 or p.stderr.count(want) != 3:
                fail(f"srun -n 3 of the 4-rank plan: exit {p.returncode}, "
                     f"wanted '{want}' from each task:\n{p.stderr}")
            print("srun -n 3 of the 4-rank plan: each task says to start 4")
    finally:
        slurm.stop()
    # SIGKILL is not instant: give the last of them a moment to go.
    deadline = time.monotonic() + 5
    while (left := slurm.marked()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        fail(f"processes of the test's Slurm still run after it stopped: {left}")
    if why:
        fallback(setup, why)
    print("PASSED")


if __name__ == "__main__":
    main()
