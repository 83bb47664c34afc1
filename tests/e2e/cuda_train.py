#!/usr/bin/env python3
"""braid-run --device cuda against --device cpu: the CUDA backend's training
acceptance.

Trains the same plans, from the same seeded weights on the same samples, for
20 steps (--steps) on the CPU and on the GPU, and compares the losses step by
step:

  llama-fp32   tiny-llama, fp32, one micro-batch of 4       within 1e-4 rel.
  gpt2-fp32    tiny-gpt2 (LayerNorm, GeLU, learned positions, biases), fp32,
               two micro-batches of 2 (gradient accumulation) within 1e-4
  llama-bf16   tiny-llama in mixed precision on the GPU against the fp32
               plan on the CPU                               within 2e-2
  llama-fp16   the same in fp16 with dynamic loss scaling    within 2e-2
  llama-packed-fp32, gpt2-packed-fp32
               instruction data packed several conversations a sample
               (data.pack: positions restarting per conversation, attention
               inside each, RoPE or learned positions at them)  within 1e-4
  llama-packed-bf16  the same in mixed precision             within 2e-2

then trains llama-fp32 again with --cuda-graphs off (each kernel launched
rather than the functions replayed as captured graphs, the default), whose
losses must be the graphs' (within 1e-6 relative), then trains
llama-fp16-overflow, whose first steps overflow and are
skipped: a skipped step is no update, so each step's learning rate must be
the fp32 run's at the step that counts only the updates before it (the
schedule, and AdamW's bias correction with it, wait for the updates).
Resumes llama-fp32, llama-bf16 and llama-fp16-overflow on the GPU from the
checkpoints their runs saved halfway (after step 10; the master weights and
moments of mixed precision, and the loss scaler's state, included) and
checks that steps 11-20 repeat the uninterrupted run's losses and loss
scales (within 1e-5 relative: float atomics may sum in another order on a
GPU), and runs llama-fp32 on the GPU for 4 steps with --profile (CUDA events
per kernel) and checks
that the kernels' share of the step is reported, and with --trace, whose
timeline tests/lit/tools/Inputs/check_trace.py checks (every kernel inside
the call that ran it, in that call's part of the step), with the kernels
one after another as the stream runs them.

  cuda_train.py --bin BUILD/bin --work DIR --corpus TEXT [--inputs DIR]
                [--braid-run NAME] [--parallel [--share-gpu]]
                [--launcher mpirun|own] [--steps N]
  cuda_train.py --bin BUILD/bin --work DIR --corpus TEXT --prepare DIR

Without a GPU (braid-run says there is no CUDA device, or the build has no
CUDA backend) it exits 77, which ctest counts as skipped. --prepare compiles
the plans and the dataset into DIR and exits, for a machine that has a GPU
but no braidc; --inputs runs from such a DIR. --braid-run names the binary
that runs the plans (braid-run-emulated: the CUDA backend under the CUDA
emulation, on the CPU, where the same tolerances hold; e2e.cuda_train_emulated
trains 10 steps, resumed from step 5, as an emulated step costs about 2 s). --parallel also
trains the plans of PARALLEL over 2 ranks (mpirun) on both devices and
compares their losses: data, tensor and sequence parallelism, pipeline
stages and ZeRO, in fp32 (within 1e-4 of the CPU) and in bf16 (within 2e-2
of the CPU's fp32 run of the same layout); for the pipeline's plan also
that the stages' calls, which send and receive, ran as CUDA graphs between
their sends and receives (braid-run's "cuda graphs:" line). On the GPU the ranks talk
through NCCL (runtime/cuda/NcclCommunicator.h): the first of PARALLEL's
plans meets through the rendezvous of RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (set from mpirun's rank and size, and a free port here), the
others get NCCL's id through MPI, as braid-run does in a job mpirun started
(with no MASTER_ADDR or MASTER_PORT set); under the emulation the same code
runs on the emulated NCCL.

Where there is no mpirun, or with --launcher own (a GPU machine without
MPI, running a bundle of --prepare, which then also trains PARALLEL's CPU
plans over 2 ranks and keeps their losses in DIR/cpu-parallel.json), the
script starts the ranks itself, torchrun-style (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT), all through the rendezvous, and
compares with the kept CPU losses. --share-gpu puts every rank on GPU 0 (LOCAL_RANK 0), each its own
host to NCCL (NCCL_HOSTID), whose network transport then carries their
messages over the loopback interface: the whole NCCL path but NVLink and
shared memory, on a machine with one GPU (NCCL refuses two ranks of one host
on one GPU).
"""

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lit", "tools", "Inputs"))
import check_trace  # noqa: E402
from harness import Setup, mpirun, run  # noqa: E402

SKIP = 77
STEPS = 20
# Several ranks start under mpirun where there is one, else on their own
# (--launcher says which).
HAVE_MPIRUN = shutil.which("mpirun") is not None

# name -> (model fields, parallel fields, precision)
JOBS = {
    "llama-fp32": ('preset: "tiny-llama"', "micro_batch_size: 4", ""),
    "gpt2-fp32": ('preset: "tiny-gpt2"',
                  "micro_batch_size: 2 global_batch_size: 4", ""),
    "llama-bf16": ('preset: "tiny-llama"', "micro_batch_size: 4", "BF16"),
    "llama-fp16": ('preset: "tiny-llama"', "micro_batch_size: 4", "FP16"),
    # A loss scale of 2^23 overflows fp16's gradients for the first steps
    # (halving at each: hysteresis 1), which are skipped.
    "llama-fp16-overflow": ('preset: "tiny-llama"', "micro_batch_size: 4",
                            "FP16 initial_loss_scale: 8388608 hysteresis: 1"),
}
# Packed instruction data (data.pack), on the dataset "instr" rather than
# "data": name -> (model fields, parallel fields, precision).
PACKED = {
    "llama-packed-fp32": ('preset: "tiny-llama"', "micro_batch_size: 4", ""),
    "gpt2-packed-fp32": ('preset: "tiny-gpt2"',
                         "micro_batch_size: 2 global_batch_size: 4", ""),
    "llama-packed-bf16": ('preset: "tiny-llama"', "micro_batch_size: 4",
                          "BF16"),
}
JOBS.update(PACKED)
# Over 2 ranks (--parallel): name -> (model, parallel fields, precision,
# CPU plan, relative tolerance), trained for PARALLEL_STEPS; those of
# PARALLEL_RESUMED also resumed from their checkpoint of PARALLEL_RESUME_AT.
PARALLEL_STEPS = 8
PARALLEL_RESUME_AT = 4
PARALLEL_RESUMED = ("llama-dp2-zero1-bf16", "llama-dp2-zero3-bf16")
PARALLEL = {
    # The gradients' sums started in buckets of 20 KB during the backward
    # (on the stream of collectives).
    "llama-dp2-fp32": ('preset: "tiny-llama"',
                       "micro_batch_size: 2 dp: 2 grad_bucket_bytes: 20000",
                       "", "llama-dp2-fp32", 1e-4),
    # Vocabulary-parallel embedding and loss, heads split, sequence-parallel
    # gathers and reduce-scatters along the sequence.
    "llama-tp2-sp-fp32": ('preset: "tiny-llama"',
                          "micro_batch_size: 4 tp: 2 sp: true", "",
                          "llama-tp2-sp-fp32", 1e-4),
    "llama-tp2-sp-bf16": ('preset: "tiny-llama"',
                          "micro_batch_size: 4 tp: 2 sp: true", "BF16",
                          "llama-tp2-sp-fp32", 2e-2),
    # LayerNorm, biases and learned positions, sliced along the sequence.
    "gpt2-tp2-sp-fp32": ('preset: "tiny-gpt2"',
                         "micro_batch_size: 4 tp: 2 sp: true", "",
                         "gpt2-tp2-sp-fp32", 1e-4),
    # Two stages, sends and receives, four micro-batches (1F1B).
    "llama-pp2-fp32": ('preset: "tiny-llama"',
                       "micro_batch_size: 1 global_batch_size: 4 pp: 2", "",
                       "llama-pp2-fp32", 1e-4),
    # ZeRO-3: parameters gathered in place, asynchronous collectives.
    "llama-dp2-zero3-fp32": ('preset: "tiny-llama"',
                             "micro_batch_size: 1 global_batch_size: 4 dp: 2 "
                             "zero: 3", "", "llama-dp2-zero3-fp32", 1e-4),
    # ZeRO-1 in mixed precision: f32 masters of this rank's block.
    "llama-dp2-zero1-bf16": ('preset: "tiny-llama"',
                             "micro_batch_size: 2 dp: 2 zero: 1", "BF16",
                             "llama-dp2-zero1-fp32", 2e-2),
    # ZeRO-3 in mixed precision: each rank's block of the bf16 parameters
    # and of their f32 masters.
    "llama-dp2-zero3-bf16": ('preset: "tiny-llama"',
                             "micro_batch_size: 1 global_batch_size: 4 dp: 2 "
                             "zero: 3", "BF16", "llama-dp2-zero3-fp32", 2e-2),
    "llama-dp2-zero1-fp32": ('preset: "tiny-llama"',
                             "micro_batch_size: 2 dp: 2 zero: 1", "", None,
                             None),
}
# (GPU plan, CPU plan, relative tolerance of each step's loss)
COMPARISONS = [
    ("llama-fp32", "llama-fp32", 1e-4),
    ("gpt2-fp32", "gpt2-fp32", 1e-4),
    ("llama-bf16", "llama-fp32", 2e-2),
    ("llama-fp16", "llama-fp32", 2e-2),
    ("llama-packed-fp32", "llama-packed-fp32", 1e-4),
    ("gpt2-packed-fp32", "gpt2-packed-fp32", 1e-4),
    ("llama-packed-bf16", "llama-packed-fp32", 2e-2),
]
NO_DEVICE = ("no CUDA device to run the plan on",
             "this build has no CUDA backend")


CPU_PARALLEL = "cpu-parallel.json"


def prepare(setup, out, references=False):
    """Compiles the plans and the dataset into `out`; with `references`,
    also trains PARALLEL's CPU plans over 2 ranks (mpirun) and writes their
    losses to out/CPU_PARALLEL, for a machine without MPI."""
    os.makedirs(out, exist_ok=True)
    prefix = setup.dataset(200_000)
    for ext in (".bin", ".idx"):
        shutil.copyfile(prefix + ext, os.path.join(out, "data" + ext))
    # Instruction data for PACKED: conversations of 21 to 39 tokens (the
    # plain template's 19 and the byte tokenizer's one a byte), two or
    # three to each sample of 65 tokens.
    rng = random.Random(5)
    records = [{"prompt": "".join(rng.choice("abcdefgh ")
                                  for _ in range(rng.randrange(1, 10))),
                "response": "".join(rng.choice("ijklmnop ")
                                    for _ in range(rng.randrange(1, 12)))}
               for _ in range(400)]
    with open(os.path.join(out, "instr.json"), "w") as f:
        json.dump(records, f)
    run([setup.b("braid-data"), "preprocess", "--handler", "plain",
         "--template", "plain", "--input", os.path.join(out, "instr.json"),
         "--output-prefix", os.path.join(out, "instr"), "--tokenizer", "byte"])
    jobs = [(name, *job, STEPS) for name, job in JOBS.items()]
    jobs += [(name, *job[:3], PARALLEL_STEPS) for name, job in PARALLEL.items()]
    for name, model, parallel, precision, steps in jobs:
        job = os.path.join(out, name + ".textproto")
        with open(job, "w") as f:
            f.write(f"model {{ {model} }}\nparallel {{ {parallel} }}\n"
                    f"train {{ steps: {steps} lr: 1e-3 warmup_steps: 2 seed: 11"
                    + (f" precision: {precision}" if precision else "")
                    + " }\ndata { seq_length: 64"
                    + (" instruction: true pack: true" if name in PACKED
                       else "") + " }\n")
        run([setup.b("braidc"), job, "--emit=plan",
             "-o", os.path.join(out, name + ".plan")])
    if references:
        losses = {}
        for _, _, _, cpu_plan, _ in PARALLEL.values():
            if cpu_plan is not None and cpu_plan not in losses:
                losses[cpu_plan] = train(setup, out, cpu_plan, "cpu",
                                         expect=PARALLEL_STEPS, ranks=2)[0]
        with open(os.path.join(out, CPU_PARALLEL), "w") as f:
            json.dump(losses, f, indent=1)


# Graphs replay the same kernels in the same order: only the order of
# float atomics may differ.
GRAPH_TOLERANCE = 1e-6
RESUME_AT = 10
# The steps of the profiled and the traced run.
TRACED = 4
RESUMED = ("llama-fp32", "llama-bf16", "llama-fp16-overflow")
RESUME_TOLERANCE = 1e-5


def checkpoints(setup, name):
    return setup.w(f"{name}-checkpoints")


def free_port():
    """A TCP port free now, below Linux's ephemeral range (32768-60999), so
    that no socket the kernel numbers (MPI's, in a parallel test run) takes
    it before rank 0 listens on it."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind(("", port))
                return port
            except OSError:
                continue
    sys.exit("FAILED: no free TCP port in [20000, 32768)")


# Each run's metrics records, by (plan, device): the last run's.
RECORDS = {}


def launch(setup, cmd, env, ranks):
    """Starts `ranks` ranks of `cmd` without mpirun, torchrun-style: each
    with its RANK, WORLD_SIZE and LOCAL_RANK, meeting through rank 0's
    rendezvous on a port of this machine; with --share-gpu all on GPU 0,
    each its own host to NCCL. Returns (returncode, rank 0's stdout, the
    ranks' stderr); a rank that fails, or TIMEOUT passing, stops them all."""
    port = str(free_port())
    procs, logs = [], []
    for r in range(ranks):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(ranks),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                 LOCAL_RANK="0" if setup.args.share_gpu else str(r))
        if setup.args.share_gpu:
            e.update(NCCL_HOSTID=f"braid-rank-{r}", NCCL_SOCKET_IFNAME="lo",
                     NCCL_IB_DISABLE="1")
            e.setdefault("NCCL_DEBUG", "WARN")
        out = open(setup.w(f"rank{r}.out"), "w+")
        err = open(setup.w(f"rank{r}.err"), "w+")
        logs.append((out, err))
        procs.append(subprocess.Popen(cmd, env=e, stdout=out, stderr=err))
    deadline = time.monotonic() + TIMEOUT
    rc = 0
    while any(p.poll() is None for p in procs):
        failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            rc = failed[0] if failed else 124
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.1)
    for p in procs:
        p.wait()
        rc = rc or p.returncode
    texts = []
    for out, err in logs:
        out.seek(0)
        err.seek(0)
        texts.append((out.read(), err.read()))
        out.close()
        err.close()
    # What every rank said and how it ended (a signal: negative).
    stderr = "".join(
        f"[rank {r}: exit status {p.returncode}]\n{out}{err}"
        for r, (p, (out, err)) in enumerate(zip(procs, texts)))
    if rc == 124:
        stderr += f"[stopped after {TIMEOUT} s]\n"
    return rc, texts[0][0], stderr


# Seconds a run of several ranks started without mpirun may take.
TIMEOUT = 300


def train(setup, inputs, name, device, extra=(), expect=None, ranks=1,
          bootstrap="mpi"):
    """Runs plan `name` on `device` (on `ranks` ranks under mpirun, or
    started by launch() where there is no mpirun); returns (losses, stdout),
    or None when there is no GPU to run it on. `expect`: the steps it logs.
    `bootstrap` (several ranks on the GPU under mpirun): "tcp", the
    rendezvous of RANK, WORLD_SIZE and MASTER_PORT, or "mpi", NCCL's id over
    MPI with none of those set."""
    expect = STEPS if expect is None else expect
    metrics = setup.w(f"{name}-{device}.jsonl")
    binary = setup.b(setup.args.braid_run if device == "cuda" else "braid-run")
    own = ranks > 1 and not HAVE_MPIRUN
    launcher = mpirun(ranks) if ranks > 1 and not own else []
    env = dict(os.environ)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                "MASTER_PORT"):
        env.pop(var, None)
    if launcher and device == "cuda" and bootstrap == "tcp":
        # Each rank's RANK and WORLD_SIZE from mpirun's; NCCL's ranks meet
        # on a port of this machine (rank 0 listens).
        launcher += ["sh", "-c", 'RANK=$OMPI_COMM_WORLD_RANK '
                     'WORLD_SIZE=$OMPI_COMM_WORLD_SIZE exec "$0" "$@"']
        env["MASTER_PORT"] = str(free_port())
    cmd = [*launcher, binary, os.path.join(inputs, name + ".plan"),
           "--data", os.path.join(inputs, "instr" if name in PACKED
                                  else "data"), "--device", device,
           "--metrics-out", metrics, "--log-every", "5", *extra]
    began = time.monotonic()
    if own:
        rc, stdout, stderr = launch(setup, cmd, env, ranks)
    else:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    print(f"  ran {name} on {device} x{ranks} {' '.join(extra)}: "
          f"{time.monotonic() - began:.1f} s", flush=True)
    if rc != 0:
        if device == "cuda" and any(m in stderr for m in NO_DEVICE):
            return None
        sys.exit(f"FAILED: {' '.join(cmd)}\n{stdout}\n{stderr}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    RECORDS[(name, device)] = records
    losses = [r["loss"] for r in records]
    scales = sorted({r["loss_scale"] for r in records})
    if scales != [1]:
        print(f"  {name} on {device}: loss scales {scales}")
    if len(losses) != expect:
        sys.exit(f"FAILED: {name} on {device}: {len(losses)} steps, not {expect}")
    return losses, stdout


def main():
    setup = Setup(lambda ap: (ap.add_argument("--inputs"),
                              ap.add_argument("--prepare"),
                              ap.add_argument("--braid-run",
                                              default="braid-run"),
                              ap.add_argument("--parallel",
                                              action="store_true"),
                              ap.add_argument("--steps", type=int,
                                              default=STEPS),
                              ap.add_argument("--share-gpu",
                                              action="store_true"),
                              ap.add_argument("--launcher",
                                              choices=("mpirun", "own"))))
    args = setup.args
    global HAVE_MPIRUN, STEPS, RESUME_AT
    STEPS, RESUME_AT = args.steps, args.steps // 2
    if STEPS < 10:
        # The fp16 run overflows for its first 4 steps, which must come
        # before the checkpoint it resumes from (at STEPS / 2).
        sys.exit("--steps: at least 10 (the fp16 run's 4 overflows, then "
                 "updates, before its checkpoint at half the steps)")
    if args.launcher:
        HAVE_MPIRUN = args.launcher == "mpirun"
    if args.prepare:
        prepare(setup, args.prepare, references=True)
        print(f"plans and data in {args.prepare}")
        return 0
    inputs = args.inputs or setup.w("inputs")
    if not args.inputs:
        prepare(setup, inputs)

    failed = False
    cpu = {}
    gpu = {}
    for gpu_plan, cpu_plan, tolerance in COMPARISONS:
        save = []
        if gpu_plan in RESUMED:
            shutil.rmtree(checkpoints(setup, gpu_plan), ignore_errors=True)
            save = ["--save", checkpoints(setup, gpu_plan),
                    "--save-every", str(RESUME_AT)]
        got = train(setup, inputs, gpu_plan, "cuda", save)
        if got is None:
            print("SKIP: no GPU (or no CUDA backend) for braid-run --device cuda")
            return SKIP
        gpu[gpu_plan] = got[0]
        if cpu_plan not in cpu:
            cpu[cpu_plan] = train(setup, inputs, cpu_plan, "cpu")[0]
        want = cpu[cpu_plan]
        worst = max(abs(g - c) / abs(c) for g, c in zip(got[0], want))
        ok = worst <= tolerance
        failed |= not ok
        print(f"{gpu_plan} on the GPU against {cpu_plan} on the CPU, {STEPS} "
              f"steps: largest relative loss difference {worst:.3g} "
              f"(tolerance {tolerance:g}) {'ok' if ok else 'FAILED'}")
        print("  CPU:", " ".join(f"{x:.6f}" for x in want))
        print("  GPU:", " ".join(f"{x:.6f}" for x in got[0]))

    # The same run launching each kernel rather than replaying the
    # functions' captured graphs (the default): the same losses.
    eager = train(setup, inputs, "llama-fp32", "cuda",
                  ["--cuda-graphs", "off"])[0]
    worst = max(abs(a - b) / abs(b) for a, b in zip(eager, gpu["llama-fp32"]))
    ok = worst <= GRAPH_TOLERANCE
    failed |= not ok
    print(f"llama-fp32 on the GPU without CUDA graphs against with: largest "
          f"relative loss difference {worst:.3g} (tolerance "
          f"{GRAPH_TOLERANCE:g}) {'ok' if ok else 'FAILED'}")

    # Skipped steps are no updates: the learning rate of step s is the
    # schedule's at update s - (steps skipped before s).
    name = "llama-fp16-overflow"
    shutil.rmtree(checkpoints(setup, name), ignore_errors=True)
    gpu[name] = train(setup, inputs, name, "cuda",
                      ["--save", checkpoints(setup, name), "--save-every",
                       str(RESUME_AT)])[0]
    records = RECORDS[(name, "cuda")]
    reference = [r["lr"] for r in RECORDS[("llama-fp32", "cpu")]]
    skipped, mismatched = 0, []
    for i, r in enumerate(records):
        if abs(r["lr"] - reference[i - skipped]) > 1e-12 * max(1, r["lr"]):
            mismatched.append(r["step"])
        if i + 1 < len(records) and records[i + 1]["loss_scale"] < r["loss_scale"]:
            skipped += 1
    ok = 0 < skipped < RESUME_AT and not mismatched
    failed |= not ok
    print(f"{name}: {skipped} steps skipped for overflow (loss scales "
          f"{sorted({r['loss_scale'] for r in records}, reverse=True)}); "
          f"learning rates follow the updates"
          f"{'' if not mismatched else f' except at steps {mismatched}'} "
          f"{'ok' if ok else 'FAILED'}")

    if args.parallel:
        if not HAVE_MPIRUN:
            # The CPU's runs of several ranks need MPI: those --prepare kept.
            kept = os.path.join(inputs, CPU_PARALLEL)
            if not os.path.exists(kept):
                sys.exit(f"FAILED: no mpirun to train the CPU plans of "
                         f"several ranks, and no {kept} (--prepare) of them")
            with open(kept) as f:
                cpu.update(json.load(f))
        for k, (name, (_, _, _, cpu_plan, tolerance)) in enumerate(
                PARALLEL.items()):
            if cpu_plan is None:
                continue
            bootstrap = "tcp" if k == 0 or not HAVE_MPIRUN else "mpi"
            save = []
            if name in PARALLEL_RESUMED:
                shutil.rmtree(checkpoints(setup, name), ignore_errors=True)
                save = ["--save", checkpoints(setup, name), "--save-every",
                        str(PARALLEL_RESUME_AT)]
            got, out = train(setup, inputs, name, "cuda", save,
                             expect=PARALLEL_STEPS, ranks=2,
                             bootstrap=bootstrap)
            gpu[name] = got
            if cpu_plan not in cpu:
                cpu[cpu_plan] = train(setup, inputs, cpu_plan, "cpu",
                                      expect=PARALLEL_STEPS, ranks=2)[0]
            want = cpu[cpu_plan]
            worst = max(abs(g - c) / abs(c) for g, c in zip(got, want))
            ok = worst <= tolerance
            failed |= not ok
            where = ("2 ranks sharing the GPU (NCCL over loopback"
                     if args.share_gpu else "2 ranks of the GPU (NCCL")
            print(f"{name} on {where}, its id over "
                  f"{bootstrap.upper()}) against {cpu_plan} on the "
                  f"CPU's, {PARALLEL_STEPS} steps: largest relative loss "
                  f"difference {worst:.3g} (tolerance {tolerance:g}) "
                  f"{'ok' if ok else 'FAILED'}")
            print("  CPU:", " ".join(f"{x:.6f}" for x in want))
            print("  GPU:", " ".join(f"{x:.6f}" for x in got))
            if "-pp" in name:
                # The stages' functions, which send and receive, ran as
                # graphs between their sends and receives (rank 0's log).
                counts = re.findall(r"(\d+) of them sending or receiving, "
                                    r"as (\d+) graphs", out)
                graphed = (len(counts) >= 1 and
                           all(int(c) > 0 and int(g) >= int(c)
                               for c, g in counts))
                failed |= not graphed
                print(f"  {name}: calls that send or receive captured "
                      f"(calls, graphs): {counts} "
                      f"{'ok' if graphed else 'FAILED'}")
        # ZeRO's sharded f32 masters saved and loaded: the resumed run
        # repeats the rest of the whole one.
        for name in PARALLEL_RESUMED:
            step_dir = os.path.join(checkpoints(setup, name),
                                    f"step-{PARALLEL_RESUME_AT:08d}")
            resumed = train(setup, inputs, name, "cuda", ["--load", step_dir],
                            expect=PARALLEL_STEPS - PARALLEL_RESUME_AT,
                            ranks=2)[0]
            whole = gpu[name][PARALLEL_RESUME_AT:]
            worst = max(abs(r - w) / abs(w) for r, w in zip(resumed, whole))
            ok = worst <= RESUME_TOLERANCE
            failed |= not ok
            print(f"{name} on 2 ranks of the GPU resumed at step "
                  f"{PARALLEL_RESUME_AT}: largest relative loss difference "
                  f"from the whole run {worst:.3g} (tolerance "
                  f"{RESUME_TOLERANCE:g}) {'ok' if ok else 'FAILED'}")

    # Resumed from step RESUME_AT's checkpoint: the rest as the whole run's.
    RECORDS_WHOLE = {name: RECORDS[(name, "cuda")] for name in RESUMED}
    for name in RESUMED:
        step_dir = os.path.join(checkpoints(setup, name),
                                f"step-{RESUME_AT:08d}")
        resumed = train(setup, inputs, name, "cuda", ["--load", step_dir],
                        expect=STEPS - RESUME_AT)[0]
        whole = gpu[name][RESUME_AT:]
        worst = max(abs(r - w) / abs(w) for r, w in zip(resumed, whole))
        scales = [r["loss_scale"] for r in RECORDS[(name, "cuda")]]
        whole_scales = [r["loss_scale"] for r in
                        RECORDS_WHOLE[name]][RESUME_AT:]
        ok = worst <= RESUME_TOLERANCE and scales == whole_scales
        failed |= not ok
        print(f"{name} on the GPU resumed at step {RESUME_AT}: largest relative "
              f"loss difference from the whole run {worst:.3g} (tolerance "
              f"{RESUME_TOLERANCE:g}) {'ok' if ok else 'FAILED'}")

    # The kernels' breakdown of a step, from CUDA events (4 steps).
    _, out = train(setup, inputs, "llama-fp32", "cuda",
                   ["--profile", "--steps", str(TRACED)], expect=TRACED)
    lines = [l for l in out.splitlines() if l.startswith("profile:") or
             l.startswith("  ")]
    print("\n".join(lines))
    if not any(l.strip().startswith("LINEAR") for l in lines):
        print("FAILED: --profile on the GPU reports no LINEAR kernels")
        failed = True

    # The timeline of a GPU run: its kernels, timed by CUDA events, on the
    # host's clock, inside the calls that ran them; one stream runs them one
    # after another.
    trace = setup.w("llama-fp32-cuda.trace.json")
    train(setup, inputs, "llama-fp32", "cuda",
          ["--trace", trace, "--steps", str(TRACED)], expect=TRACED)
    try:
        print(check_trace.check(trace, 1, TRACED, 1))
        with open(trace) as f:
            kernels = sorted((e for e in json.load(f)["traceEvents"]
                              if e.get("ph") == "X" and e.get("tid") == 2),
                             key=lambda e: e["ts"])
        for a, b in zip(kernels, kernels[1:]):
            check_trace.expect(b["ts"] >= a["ts"] + a["dur"] - check_trace.EPS,
                               f"kernels overlap on the stream: {a} and {b}")
        print(f"trace of llama-fp32 on the GPU: {len(kernels)} kernels in "
              "stream order ok")
    except check_trace.TraceError as e:
        print(f"FAILED: the trace of llama-fp32 on the GPU: {e}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
