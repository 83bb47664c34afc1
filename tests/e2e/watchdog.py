#!/usr/bin/env python3
"""The collectives' watchdog: a frozen rank ends the job with a message.

tiny-llama over 4 data-parallel ranks trains with --collective-timeout 5;
after it has logged two steps, one rank is stopped (SIGSTOP). Within the
timeout + 10 s, mpirun and every rank have exited, mpirun with a non-zero
status, and the others' error names the collective timeout and the stopped
rank as not arrived (the stopped rank's own, when the launcher resumed it
long enough to print one, says that it did not run for most of its wait). Every rank still there at the end (the stopped one
too) is killed, so that none is left behind. First, SIGTERM to `braid train
--dp 2` ends its mpirun and ranks with it and removes its temporary plan.

  watchdog.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import os
import signal
import subprocess
import sys
import time

from harness import Setup, mpirun, run

TIMEOUT = 5  # --collective-timeout, seconds
STOPPED = 2  # the rank stopped


def fail(message):
    sys.exit(f"FAILED: {message}")


def rank_pids(parent):
    """world rank -> pid of the ranks mpirun started (its children)."""
    p = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True)
    ranks = {}
    for pid in p.stdout.split():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK" in env:
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return ranks


def alive(pid):
    """Whether `pid` runs (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    setup = Setup()
    b, w = setup.b, setup.w
    data = setup.dataset(200_000)
    job = w("watchdog.textproto")
    with open(job, "w") as f:
        f.write('model { preset: "tiny-llama" }\n'
                "parallel { dp: 4 micro_batch_size: 2 }\n"
                "train { steps: 1000 lr: 3e-3 warmup_steps: 2 seed: 1 }\n"
                "data { seq_length: 64 }\n")
    plan = w("watchdog.plan")
    run([b("braidc"), job, "--emit=plan", "-o", plan])
    check_braid_train_sigterm(setup, data, job)

    out_path, err_path = w("watchdog.out"), w("watchdog.err")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            mpirun(4) + [b("braid-run"), plan, "--data", data, "--log-every", "1",
                         "--collective-timeout", str(TIMEOUT)],
            stdout=out, stderr=err, start_new_session=True)
    ranks = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [l for l in open(out_path) if l.startswith("step ")]
            if len(steps) >= 2:
                ranks = rank_pids(proc.pid)
                if len(ranks) == 4:
                    break
            time.sleep(0.05)
        if len(ranks) != 4:
            fail(f"the job did not log two steps with 4 ranks running in 120 s "
                 f"(exit {proc.poll()}):\n{open(out_path).read()}\n{open(err_path).read()}")
        stopped = ranks[STOPPED]
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=TIMEOUT + 10)
        except subprocess.TimeoutExpired:
            fail(f"the job still runs {TIMEOUT + 10} s after rank {STOPPED} was stopped "
                 f"(--collective-timeout {TIMEOUT}):\n{open(err_path).read()}")
        elapsed = time.monotonic() - t0
        # The ranks go with mpirun (it kills them when one aborts).
        for _ in range(100):
            left = [r for r, pid in ranks.items() if alive(pid)]
            if not left:
                break
            time.sleep(0.05)
        if left:
            fail(f"ranks {left} still run after mpirun exited")
        if rc == 0:
            fail(f"mpirun exited 0 after rank {STOPPED} was stopped")
        errors = [l for l in open(err_path) if "collective timeout" in l]
        if not errors:
            fail(f"no rank reported the collective timeout:\n{open(err_path).read()}")
        # The launcher resumes the stopped rank (SIGCONT) to end it; if it
        # runs long enough to time out itself, its line says that it did not
        # run for most of its wait. Every other rank's names it as absent.
        others = []
        # Rank 2 may stop in any of the step's collectives over the four
        # ranks: the gradients' all-reduce over 'dp', or the agreement on
        # stopping over every axis of the mesh ('dp,tp'; tp is 1 here).
        for line in errors:
            if ("over 'dp'" not in line and "over 'dp,tp'" not in line) \
                    or "on the group of ranks 0,1,2,3" not in line:
                fail(f"the timeout does not name the axis 'dp' and the group "
                     f"of ranks 0,1,2,3:\n{line}")
            if f"rank {STOPPED}: " in line:
                if "this rank did not run for" not in line:
                    fail(f"rank {STOPPED}'s own timeout does not say it was stopped:\n{line}")
                continue
            others.append(line)
            # Not arrived; or arrived, stopped inside the collective and
            # resumed by the launcher before this rank asked.
            if (f"rank {STOPPED} had not arrived" not in line
                    and not (f"rank {STOPPED} had arrived, in " in line
                             and "but did not run for" in line)):
                fail(f"the timeout does not name rank {STOPPED} as not arrived "
                     f"or as stopped in its wait:\n{line}")
        if not others:
            fail(f"only the stopped rank reported the timeout:\n{open(err_path).read()}")
        print(f"rank {STOPPED} stopped: the job exited {rc} after {elapsed:.1f} s "
              f"(--collective-timeout {TIMEOUT}); {len(errors)} rank(s) said:\n{others[0]}",
              end="")
    finally:
        # mpirun gives its ranks process groups of their own: each is killed
        # by its pid (a stopped one too: SIGKILL ends it).
        kill_all(ranks.values(), proc)


def kill_all(pids, proc):
    """SIGKILL to every pid still alive, and to proc's process group."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def children(pid):
    p = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(c) for c in p.stdout.split()]


def check_braid_train_sigterm(setup, data, job):
    """SIGTERM to braid train (a scheduler's, `timeout`'s) ends its mpirun
    and ranks too, and braid removes its temporary plan before it exits
    with 128 + 15."""
    b, w = setup.b, setup.w
    tmp = w("sigterm-tmp")
    os.makedirs(tmp, exist_ok=True)
    for name in os.listdir(tmp):
        os.remove(os.path.join(tmp, name))
    log = w("sigterm.out")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [b("braid"), "train", job, "--data", data, "--dp", "2",
             "--log-every", "1", "--threads", "1"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, TMPDIR=tmp))
    started = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if any(l.startswith("step ") for l in open(log)):
                launched = children(proc.pid)
                started = launched + [r for m in launched for r in children(m)]
                if len(started) >= 3:  # mpirun and its two ranks
                    break
            time.sleep(0.05)
        if len(started) < 3:
            fail(f"braid train --dp 2 did not log a step with its ranks "
                 f"running in 120 s:\n{open(log).read()}")
        if not os.listdir(tmp):
            fail("braid train made no temporary plan in $TMPDIR")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"braid train still runs 60 s after SIGTERM:\n{open(log).read()}")
        if rc != 128 + signal.SIGTERM:
            fail(f"braid train exited {rc} after SIGTERM, expected 143")
        left = [pid for pid in started if alive(pid)]
        if left:
            fail(f"processes {left} (mpirun or ranks) outlived braid train")
        if os.listdir(tmp):
            fail(f"braid train left {os.listdir(tmp)} in $TMPDIR")
        print("braid train --dp 2 under SIGTERM: mpirun and its ranks ended "
              "with it, its temporary plan removed, exit 143")
    finally:
        kill_all(started, proc)


if __name__ == "__main__":
    main()
