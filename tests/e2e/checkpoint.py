#!/usr/bin/env python3
"""Checkpoints: exact resume, resharding, Hugging Face export, crashes and
corrupt files.

1. Resume: for several layouts, a run of 20 steps that saves at step 10, and
   a second run that loads that checkpoint and runs steps 11-20: every loss
   of the second run (as printed, 9 digits) and every final parameter (bit
   for bit) equals the first run's. The first run's losses also equal those
   of a run that never saves (saving changes nothing). And a single-rank
   run's final parameters are bit for bit the same on 1, 2 and 3 threads
   (rows of 256 tokens: products that OpenBLAS would split between threads,
   which changes their rounding).
2. Resharding: a checkpoint saved under one layout (tp 2 x pp 2, and
   tp 2 x dp 2 with ZeRO-1) loads under others (tp 1 x dp 4, tp 4, pp 2 x
   dp 2 with ZeRO-3); 5 more steps match the saving run's own steps 11-15
   within 1e-5 relative.
3. Hugging Face: a LLaMA checkpoint made here (float32 safetensors and
   config.json) is imported (--init-from, --steps 0 --save) and exported
   (braid-ckpt export): the exported tensors are byte-identical to the
   imported ones, and the config reads back as the same model. A trained
   tiny-llama (tp 2), exported, gives the loss of its own checkpoint on a
   fixed batch, and so do trained GPT-2, Bloom and fused-MLP LLaMA models.
4. A crash during a save (kill -9 of a rank while the save's temporary
   directory is being written): the previous checkpoint stays `latest`,
   verifies, and resumes; the partial one is never picked.
5. Corrupt or mismatched checkpoints are refused, naming the file and the
   tensor: a flipped byte, a truncated file, a missing shard file, another
   model.
6. Model identity: a checkpoint whose tensors have the plan's shapes but
   whose model differs (tiny-llama with 8 heads, 4 kv heads, RoPE theta
   500000) is refused by --load and --init-from, naming each field; so is a
   Hugging Face config.json of another model or without "architectures";
   --allow-model-change accepts a dropout, not a head count.
7. Preemption (preemption()): SIGTERM, --exit-interval and
   --exit-duration-in-mins stop a blended, validated run with a checkpoint
   that resumes bit for bit; TensorBoard reads its events.

  checkpoint.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np

from harness import Setup, mpirun, read_safetensors, run
import hf_reference as ref


def raw_tensors(path):
    """name -> (dtype, shape, bytes) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[8 + n + begin : 8 + n + end])
    return out


def write_safetensors(path, tensors):
    """Writes name -> (shape, list of floats) as F32, in the published layout."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def fail(message):
    sys.exit(f"FAILED: {message}")


def main():
    setup = Setup()
    b, w = setup.b, setup.w
    data = setup.dataset(200_000)

    def job(name, model, parallel, steps=20, warmup=2):
        path = w(name + ".textproto")
        with open(path, "w") as f:
            f.write(f"model {{ {model} }}\nparallel {{ {parallel} }}\n"
                    f"train {{ steps: {steps} lr: 3e-3 warmup_steps: {warmup} seed: 7 }}\n"
                    f"data {{ seq_length: 32 }}\n")
        plan = w(name + ".plan")
        run([b("braidc"), path, "--emit=plan", "-o", plan])
        return plan

    def train(name, plan, ranks, *flags, check=True):
        metrics = w(name + ".jsonl")
        cmd = (mpirun(ranks) if ranks > 1 else []) + [
            b("braid-run"), plan, "--data", data, "--metrics-out", metrics,
            "--log-every", "1000", *flags]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if check and p.returncode != 0:
            fail(f"{' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
        losses = {}
        if os.path.exists(metrics):
            for line in open(metrics):
                row = json.loads(line)
                losses[row["step"]] = row["loss"]
        return losses, p

    def fresh(path):
        shutil.rmtree(path, ignore_errors=True)
        return path

    llama4 = 'preset: "tiny-llama" num_layers: 4 hidden_dropout: 0.1'

    # 1. Resume, bit for bit.
    resume_layouts = [
        ("tp2-dp2", 4, "tp: 2 dp: 2 micro_batch_size: 2"),
        ("pp2", 2, "pp: 2 micro_batch_size: 1 global_batch_size: 4"),
        ("dp2-zero1", 2, "dp: 2 micro_batch_size: 2 zero: 1"),
        ("pp2-tp2-dp2-zero3", 8,
         "pp: 2 tp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
    ]
    for name, ranks, parallel in resume_layouts:
        plan = job(f"resume-{name}", llama4, parallel)
        root = fresh(w(f"resume-{name}-ckpt"))
        plain, _ = train(f"resume-{name}-plain", plan, ranks)
        straight, _ = train(f"resume-{name}-straight", plan, ranks, "--save", root,
                            "--save-every", "10",
                            "--save-params", w(f"resume-{name}-straight.safetensors"))
        resumed, p = train(f"resume-{name}-resumed", plan, ranks, "--load",
                           os.path.join(root, "step-00000010"),
                           "--save-params", w(f"resume-{name}-resumed.safetensors"))
        if plain != straight:
            fail(f"{name}: saving changed the losses")
        if sorted(resumed) != list(range(11, 21)):
            fail(f"{name}: the resumed run ran steps {sorted(resumed)}\n{p.stdout}")
        diffs = [s for s in resumed if resumed[s] != straight[s]]
        if diffs:
            fail(f"{name}: resumed losses differ at steps {diffs}: "
                 f"{[(resumed[s], straight[s]) for s in diffs]}")
        a = raw_tensors(w(f"resume-{name}-straight.safetensors"))
        c = raw_tensors(w(f"resume-{name}-resumed.safetensors"))
        if a != c:
            fail(f"{name}: the resumed run's final parameters differ: "
                 f"{[k for k in a if a[k] != c.get(k)][:5]}")
        print(f"resume {name:20s} steps 11-20 identical to the uninterrupted run "
              f"(losses and {len(a)} parameters bit for bit)")

    # The thread count changes nothing either.
    plan = job("threads", llama4, "micro_batch_size: 8", steps=5)
    on = {}
    for threads in (1, 2, 3):
        train(f"threads-{threads}", plan, 1, "--threads", str(threads),
              "--save-params", w(f"threads-{threads}.safetensors"))
        on[threads] = raw_tensors(w(f"threads-{threads}.safetensors"))
    for threads in (2, 3):
        if on[threads] != on[1]:
            fail(f"the parameters after 5 steps on {threads} threads differ from "
                 f"those on 1: {[k for k in on[1] if on[1][k] != on[threads].get(k)][:5]}")
    print(f"threads: 5 steps on 1, 2 and 3 threads give the same {len(on[1])} "
          "parameters bit for bit")

    # 2. Resharding.
    reshards = [
        ("tp2-pp2", 4, "tp: 2 pp: 2 micro_batch_size: 1 global_batch_size: 4",
         [("tp1-dp4", 4, "dp: 4 micro_batch_size: 1"),
          ("tp4", 4, "tp: 4 micro_batch_size: 4")]),
        ("tp2-dp2-zero1", 4, "tp: 2 dp: 2 micro_batch_size: 2 zero: 1",
         [("pp2-dp2-zero3", 4, "pp: 2 dp: 2 micro_batch_size: 1 global_batch_size: 4 zero: 3"),
          ("serial", 1, "micro_batch_size: 4")]),
    ]
    worst = 0.0
    for name, ranks, parallel, targets in reshards:
        plan = job(f"reshard-{name}", llama4, parallel, steps=15)
        root = fresh(w(f"reshard-{name}-ckpt"))
        original, _ = train(f"reshard-{name}", plan, ranks, "--save", root,
                            "--save-every", "10")
        for target, tranks, tparallel in targets:
            tplan = job(f"reshard-{name}-to-{target}", llama4, tparallel, steps=15)
            losses, p = train(f"reshard-{name}-to-{target}", tplan, tranks, "--load",
                              os.path.join(root, "step-00000010"))
            if sorted(losses) != list(range(11, 16)):
                fail(f"reshard {name} -> {target}: ran steps {sorted(losses)}\n{p.stdout}")
            d = max(abs(losses[s] - original[s]) / abs(original[s]) for s in losses)
            worst = max(worst, d)
            print(f"reshard {name} -> {target}: steps 11-15, largest loss difference {d:.2e}")
            if d > 1e-5:
                fail(f"reshard {name} -> {target}: losses differ by {d:.2e} (limit 1e-5)")

    # 3. Hugging Face: import, export, byte-identical; a trained model's loss.
    hf = fresh(w("hf-in"))
    os.makedirs(hf)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "float32"}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f)
    rng = random.Random(11)
    h, ffn, kv = 64, 176, 32
    shapes = {"model.embed_tokens.weight": [512, h], "model.norm.weight": [h],
              "lm_head.weight": [512, h]}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [h],
                       p + "post_attention_layernorm.weight": [h],
                       p + "self_attn.q_proj.weight": [h, h],
                       p + "self_attn.k_proj.weight": [kv, h],
                       p + "self_attn.v_proj.weight": [kv, h],
                       p + "self_attn.o_proj.weight": [h, h],
                       p + "mlp.gate_proj.weight": [ffn, h],
                       p + "mlp.up_proj.weight": [ffn, h],
                       p + "mlp.down_proj.weight": [h, ffn]})
    tensors = {}
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        tensors[name] = (shape, [rng.gauss(0, 0.02) for _ in range(n)])
    write_safetensors(os.path.join(hf, "model.safetensors"), tensors)
    for fused in (False, True):
        tag = "hf-fused" if fused else "hf"
        hf_job = w(tag + ".textproto")
        with open(hf_job, "w") as f:
            f.write(f'model {{ hf_config: "{os.path.join(hf, "config.json")}" '
                    f'{"fuse_mlp: true" if fused else ""} }}\n'
                    "parallel { tp: 2 micro_batch_size: 4 }\n"
                    "train { steps: 10 lr: 3e-3 seed: 7 }\ndata { seq_length: 32 }\n")
        hf_plan = w(tag + ".plan")
        run([b("braidc"), hf_job, "--emit=plan", "-o", hf_plan])
        root = fresh(w(tag + "-imported"))
        train(tag + "-import", hf_plan, 2, "--init-from", hf, "--steps", "0", "--save", root)
        out = fresh(w(tag + "-out"))
        run([b("braid-ckpt"), "export", root, "--hf", out])
        got, want = raw_tensors(os.path.join(out, "model.safetensors")), raw_tensors(
            os.path.join(hf, "model.safetensors"))
        if got != want:
            fail(f"{tag}: export after import differs: "
                 f"{sorted(set(got) ^ set(want)) or [k for k in want if got[k] != want[k]][:5]}")
        exported = json.load(open(os.path.join(out, "config.json")))
        for key, value in config.items():
            if key in exported and exported[key] != value:
                fail(f"{tag}: exported config.json has {key} = {exported[key]}, not {value}")
        print(f"{tag}: import then export gives the {len(want)} tensors byte for byte")

    def check_shipped(tag, root, out):
        """The export as people ship it (bf16, in shards of 60 KB with
        their index) against the float32 export, both read by the reference's
        own safetensors reader; and the float32 export's logits under the
        reference model (tests/e2e/hf_reference.py, numpy, written from the
        Hugging Face modeling code) against braid generate's on the
        checkpoint."""
        shipped = fresh(w(f"trained-{tag}-hf-bf16"))
        run([b("braid-ckpt"), "export", root, "--hf", shipped, "--dtype", "bf16",
             "--max-shard-size", "60KB"])
        config, fp32 = ref.load_hf_dir(out)
        config16, bf16 = ref.load_hf_dir(shipped)
        if config16.pop("torch_dtype") != "bfloat16" or \
                {**config16, "torch_dtype": config["torch_dtype"]} != config:
            fail(f"{tag}: the bf16 export's config.json is not the float32 one's with "
                 f"torch_dtype bfloat16")
        with open(os.path.join(shipped, "model.safetensors.index.json")) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
        total = sum(2 * a.size for a in bf16.values())
        if len(files) < 2 or index["metadata"]["total_size"] != total or \
                sorted(os.listdir(shipped)) != sorted(files + ["config.json",
                                                               "model.safetensors.index.json"]):
            fail(f"{tag}: the bf16 export's shards {files} and index (total_size "
                 f"{index['metadata']['total_size']}, the tensors' {total})")
        if set(bf16) != set(fp32):
            fail(f"{tag}: the bf16 export has other tensors than the float32 one")
        for name, values in fp32.items():
            want = ref._bf16_to_f32(ref._f32_to_bf16(values))
            if not np.array_equal(bf16[name], want):
                fail(f"{tag}: {name} in bf16 is not its float32 value rounded to "
                     f"nearest even")
        # The exported weights mean what Braid computes from its checkpoint.
        prompt = [5, 17, 42, 9, 100, 3]
        logits = w(f"trained-{tag}-logits.txt")
        run([b("braid"), "generate", root, "--prompt-ids", ",".join(map(str, prompt)),
             "--max-new-tokens", "1", "--greedy", "--print-ids", "--max-seq-len", "16",
             "--logits-out", logits])
        with open(logits) as f:
            got = np.array([float(v) for v in f.readline().split()[1:]])
        want = ref.Reference(config, fp32).next_logits(prompt)
        err = np.max(np.abs(got[:want.size] - want)) / np.max(np.abs(want))
        if got.size != want.size or err > 1e-5:
            fail(f"{tag}: braid generate's logits on the checkpoint differ from the "
                 f"reference's on the export by {err:.2e} of the largest")
        print(f"trained {tag} shipped: bf16 in {len(files)} shards, each tensor its float32 "
              f"value rounded to nearest even; the export's logits under the reference "
              f"within {err:.1e} of Braid's")

    # A trained model, exported, evaluates like its checkpoint: LLaMA (and
    # with its MLP fused, exported split), GPT-2 (Conv1D weights) and Bloom.
    trained = [
        ("tiny-llama", 'preset: "tiny-llama"', 2, "tp: 2 micro_batch_size: 4"),
        ("tiny-llama-fused", 'preset: "tiny-llama" fuse_mlp: true', 2,
         "tp: 2 micro_batch_size: 4"),
        ("tiny-gpt2", 'preset: "tiny-gpt2"', 2, "pp: 2 micro_batch_size: 2 global_batch_size: 4"),
        ("tiny-bloom", "family: BLOOM num_layers: 2 hidden_size: 64 num_heads: 4 vocab_size: 512 "
         "max_seq_len: 128", 2, "dp: 2 micro_batch_size: 2 zero: 1"),
        ("tiny-bloom-tp2", "family: BLOOM num_layers: 2 hidden_size: 64 num_heads: 4 "
         "vocab_size: 512 max_seq_len: 128", 2, "tp: 2 micro_batch_size: 4"),
    ]
    for tag, model, ranks, parallel in trained:
        trained_plan = job(f"trained-{tag}", model, parallel, steps=10)
        root = fresh(w(f"trained-{tag}-ckpt"))
        train(f"trained-{tag}", trained_plan, ranks, "--save", root)
        out = fresh(w(f"trained-{tag}-hf"))
        run([b("braid-ckpt"), "export", root, "--hf", out])
        eval_job = w(f"eval-{tag}-hf.textproto")
        with open(eval_job, "w") as f:
            f.write(f'model {{ hf_config: "{os.path.join(out, "config.json")}" }}\n'
                    "parallel { micro_batch_size: 4 }\n"
                    "train { steps: 1 lr: 3e-3 seed: 7 }\ndata { seq_length: 32 }\n")
        eval_plan = w(f"eval-{tag}-hf.plan")
        run([b("braidc"), eval_job, "--emit=plan", "-o", eval_plan])
        from_hf, _ = train(f"eval-{tag}-from-hf", eval_plan, 1, "--init-from", out)
        serial_plan = job(f"eval-{tag}-braid", model, "micro_batch_size: 4", steps=1, warmup=0)
        from_ckpt, _ = train(f"eval-{tag}-from-ckpt", serial_plan, 1, "--init-from", root)
        d = abs(from_hf[1] - from_ckpt[1]) / abs(from_ckpt[1])
        if d > 1e-6:
            fail(f"{tag}: the exported model's loss {from_hf[1]} is not its checkpoint's "
                 f"{from_ckpt[1]}")
        print(f"trained {tag} exported: loss {from_hf[1]} on a fixed batch, its checkpoint's "
              f"{from_ckpt[1]}")
        check_shipped(tag, root, out)

    # 4. A crash during a save.
    big = 'family: LLAMA num_layers: 2 hidden_size: 512 num_heads: 8 ffn_hidden_size: 1408 vocab_size: 257'
    crash_plan = job("crash", big, "dp: 2 micro_batch_size: 1", steps=1000)
    root = fresh(w("crash-ckpt"))
    log = open(w("crash.log"), "w")
    proc = subprocess.Popen(mpirun(2) + [b("braid-run"), crash_plan, "--data", data,
                                         "--save", root, "--save-every", "1",
                                         "--log-every", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    killed_in = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and killed_in is None and proc.poll() is None:
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            names = []
        committed = [n for n in names if n.startswith("step-")]
        for n in names:
            # A save in progress, after a complete one exists: some rank's
            # file is being written into the temporary directory.
            if n.startswith(".step-") and n.endswith(".tmp") and committed:
                tmp = os.path.join(root, n)
                try:
                    busy = any(f.endswith(".tmp") or f.endswith(".safetensors")
                               for f in os.listdir(tmp))
                except FileNotFoundError:
                    busy = False
                if busy:
                    ranks = subprocess.run(["pgrep", "-f", f"braid-run {crash_plan}"],
                                           capture_output=True, text=True).stdout.split()
                    ranks = [r for r in ranks if int(r) != proc.pid]
                    if ranks:
                        os.kill(int(ranks[-1]), signal.SIGKILL)
                        killed_in = n
                    break
        time.sleep(0.001)
    if killed_in is None:
        proc.kill()
        fail("no save was caught in progress to kill a rank in")
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("the job still runs 60 s after one of its ranks was killed during a save")
    latest = open(os.path.join(root, "latest")).read().strip()
    killed_step = int(killed_in[len(".step-"):-len(".tmp")])
    if int(latest[len("step-"):]) >= killed_step:
        fail(f"latest names {latest} although the save of step {killed_step} was killed")
    p = subprocess.run([b("braid-ckpt"), "inspect", root], capture_output=True, text=True)
    if p.returncode != 0 or "verified:" not in p.stdout or f"checkpoint {os.path.join(root, latest)}" not in p.stdout:
        fail(f"the checkpoint before the crash does not verify:\n{p.stdout}\n{p.stderr}")
    last = int(latest[len("step-"):])
    resumed, p = train("crash-resume", crash_plan, 2, "--load", root, "--steps", str(last + 1))
    if sorted(resumed) != [last + 1]:
        fail(f"resuming after the crash ran {sorted(resumed)}\n{p.stdout}\n{p.stderr}")
    partial = os.path.exists(os.path.join(root, killed_in))
    print(f"crash: a rank killed while saving step {killed_step} ({killed_in} "
          f"{'left behind' if partial else 'gone'}); latest is {latest}, which verifies "
          f"and resumes")

    # 5. Corrupt and mismatched checkpoints.
    good = os.path.join(w("resume-tp2-dp2-ckpt"), "step-00000010")
    plan = w("resume-tp2-dp2.plan")

    def refused(what, directory, *needles, ranks=4, load_plan=plan):
        p = subprocess.run([b("braid-ckpt"), "inspect", directory], capture_output=True,
                           text=True)
        _, q = train("refused", load_plan, ranks, "--load", directory, check=False)
        for proc_, tool in ((p, "braid-ckpt inspect"), (q, "braid-run --load")):
            if proc_.returncode == 0:
                fail(f"{what}: {tool} accepted it")
            for needle in needles:
                if needle not in proc_.stderr:
                    fail(f"{what}: {tool}'s error does not name {needle!r}:\n{proc_.stderr}")
        print(f"{what}: refused ({p.stderr.strip().splitlines()[-1]}; braid-run: "
              f"{next(l for l in q.stderr.splitlines() if needles[0] in l)})")

    manifest = json.load(open(os.path.join(good, "manifest.json")))
    victim = next(t for t in manifest["tensors"] if t["name"] == "model.norm.weight")
    piece = victim["pieces"][0]
    bad = fresh(w("corrupt-flip"))
    shutil.copytree(good, bad)
    path = os.path.join(bad, piece["file"])
    blob = bytearray(open(path, "rb").read())
    header_len = struct.unpack("<Q", blob[:8])[0]
    offsets = json.loads(blob[8 : 8 + header_len])[piece["key"]]["data_offsets"]
    blob[8 + header_len + offsets[0] + 1] ^= 0x40
    open(path, "wb").write(bytes(blob))
    refused("a flipped byte", bad, piece["file"], "model.norm.weight")

    bad = fresh(w("corrupt-truncated"))
    shutil.copytree(good, bad)
    path = os.path.join(bad, "rank-00001.safetensors")
    blob = open(path, "rb").read()
    open(path, "wb").write(blob[: len(blob) - 100])
    refused("a truncated file", bad, "rank-00001.safetensors")

    bad = fresh(w("corrupt-missing"))
    shutil.copytree(good, bad)
    os.remove(os.path.join(bad, "rank-00002.safetensors"))
    refused("a missing shard file", bad, "rank-00002.safetensors")

    other = job("other-model", 'preset: "tiny-gpt2"', "tp: 2 dp: 2 micro_batch_size: 2")
    _, q = train("refused", other, 4, "--load", good, check=False)
    if q.returncode == 0 or "is of another model" not in q.stderr:
        fail(f"another model's checkpoint was not refused:\n{q.stderr}")
    print(f"another model: refused "
          f"({next(l for l in q.stderr.splitlines() if 'another model' in l)[:200]})")
    # 6. Model identity: tensors of the same names and shapes are not the
    # same model. tiny-llama recompiled with 8 heads of 8, 4 kv heads and
    # another RoPE theta has every tensor of the 4-head model in its shape.
    def refused_load(what, plan_, needles, *flags, not_in_stdout=None):
        _, q = train("identity", plan_, 1, *flags, check=False)
        if q.returncode == 0:
            fail(f"{what}: accepted\n{q.stdout}")
        for needle in needles:
            if needle not in q.stderr:
                fail(f"{what}: the error does not name {needle!r}:\n{q.stderr}")
        if not_in_stdout and not_in_stdout in q.stdout:
            fail(f"{what}: {not_in_stdout!r} although refused:\n{q.stdout}")
        said = next(l for l in q.stderr.splitlines() if needles[0] in l)
        print(f"{what}: refused ({said[:220]})")

    heads = job("identity-heads", llama4 + " num_heads: 8 num_kv_heads: 4 rope_theta: 500000",
                "micro_batch_size: 4")
    refused_load("--load of the 4-head model by 8 heads, theta 5e5", heads,
                 ["is of another model", "num_heads is 4 there but 8 here",
                  "num_kv_heads is 2 there but 4 here",
                  "rope_theta is 10000 there but 500000 here"],
                 "--load", good, not_in_stdout="resumed")
    refused_load("--init-from of the 4-head model by 8 heads", heads,
                 ["is of another model", "num_heads is 4 there but 8 here"],
                 "--init-from", good)
    # A dropout may change with --allow-model-change (fine-tuning without
    # it); an architectural field may not.
    no_dropout = job("identity-dropout", 'preset: "tiny-llama" num_layers: 4',
                     "micro_batch_size: 4")
    refused_load("--load with another hidden_dropout", no_dropout,
                 ["hidden_dropout is 0.1 there but 0 here",
                  "--allow-model-change hidden_dropout would accept"],
                 "--load", good)
    losses, p = train("identity-dropout-allowed", no_dropout, 1, "--load", good,
                      "--allow-model-change", "hidden_dropout")
    if sorted(losses) != list(range(11, 21)) or \
            "hidden_dropout (0.1 there, 0 here), as --allow-model-change accepts" \
            not in p.stdout:
        fail(f"--allow-model-change hidden_dropout: ran {sorted(losses)}\n{p.stdout}")
    print("--allow-model-change hidden_dropout: resumed steps 11-20 with a note")
    refused_load("--allow-model-change num_heads", heads,
                 ["--allow-model-change num_heads: num_heads is architectural"],
                 "--load", good, "--allow-model-change", "num_heads")

    # Hugging Face: config.json is imported as braidc imports it and compared.
    hf_serial_job = w("identity-hf.textproto")
    with open(hf_serial_job, "w") as f:
        f.write(f'model {{ hf_config: "{os.path.join(hf, "config.json")}" }}\n'
                "parallel { micro_batch_size: 4 }\n"
                "train { steps: 2 lr: 3e-3 seed: 7 }\ndata { seq_length: 32 }\n")
    hf_serial = w("identity-hf.plan")
    run([b("braidc"), hf_serial_job, "--emit=plan", "-o", hf_serial])
    train("identity-hf-same", hf_serial, 1, "--init-from", hf)
    other_hf = fresh(w("identity-hf-other"))
    shutil.copytree(hf, other_hf)
    with open(os.path.join(other_hf, "config.json"), "w") as f:
        json.dump(dict(config, num_attention_heads=8, rope_theta=500000.0,
                       rms_norm_eps=0.1), f)
    refused_load("--init-from a config.json of 8 heads, theta 5e5, eps 0.1", hf_serial,
                 ["is of another model", "num_heads is 8 there but 4 here",
                  "rope_theta is 500000 there but 10000 here",
                  "norm_eps is 0.1 there but 1e-06 here"],
                 "--init-from", other_hf)
    with open(os.path.join(other_hf, "config.json"), "w") as f:
        json.dump({"hidden_size": 64}, f)
    refused_load("--init-from a config.json of only hidden_size", hf_serial,
                 ['config.json: missing required field "architectures"'],
                 "--init-from", other_hf)

    preemption(setup, data, fail, fresh)
    print("checkpoint: 1 passed, 0 failed")


def preemption(setup, data, fail, fresh):
    """7. Stopping early with a checkpoint, on a blend of two datasets split
    into train, validation and test, with TensorBoard's events: SIGTERM to
    one rank of a 4-rank job stops every rank after the same step with a
    checkpoint of it, exit 0; resumed, the run's losses, validation losses
    and final parameters are the uninterrupted run's, bit for bit, and
    TensorBoard reads every step once. A second SIGTERM during the save
    leaves a whole checkpoint; --exit-interval and --exit-duration-in-mins
    stop alike."""
    b, w = setup.b, setup.w
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tensorboard_check

    # Two datasets, a document per line: the corpus's next 100 KB, and the
    # first 200 KB again (data).
    with open(setup.args.corpus, "rb") as f:
        f.seek(200_000)
        text = f.read(100_000)
    with open(w("other.txt"), "wb") as f:
        f.write(text)
    run([b("braid-data"), "preprocess", "--input", w("other.txt"), "--output-prefix",
         w("other"), "--split-lines", "--append-eod"])
    run([b("braid-data"), "preprocess", "--input", w("corpus.txt"), "--output-prefix",
         w("lines"), "--split-lines", "--append-eod"])
    steps = 150
    path = w("preempt.textproto")
    with open(path, "w") as f:
        f.write('model { preset: "tiny-llama" hidden_dropout: 0.1 }\n'
                "parallel { tp: 2 dp: 2 micro_batch_size: 2 }\n"
                f"train {{ steps: {steps} lr: 3e-3 warmup_steps: 2 seed: 7 "
                "eval_interval: 25 eval_iters: 2 }\n"
                f'data {{ seq_length: 32 split: "90,5,5" '
                f'blend {{ weight: 0.3 path: "{w("other")}" }} '
                f'blend {{ weight: 0.7 path: "{w("lines")}" }} }}\n')
    plan = w("preempt.plan")
    run([b("braidc"), path, "--emit=plan", "-o", plan])

    def start(name, *flags):
        if os.path.exists(w(name + ".jsonl")):
            os.remove(w(name + ".jsonl"))  # an earlier run's would read as this one's
        log = open(w(name + ".log"), "w")
        cmd = mpirun(4) + [b("braid-run"), plan, "--metrics-out", w(name + ".jsonl"),
                           "--log-every", "1", *flags]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), w(name + ".log")

    def rows(name):
        return [json.loads(l) for l in open(w(name + ".jsonl"))]

    def ranks_of():
        pids = subprocess.run(["pgrep", "-f", f"braid-run {plan}"], capture_output=True,
                              text=True).stdout.split()
        return [int(p) for p in pids]

    # The uninterrupted run.
    tb = fresh(w("preempt-tb-straight"))
    proc, log = start("preempt-straight", "--save-params", w("preempt-straight.safetensors"),
                      "--tensorboard-dir", tb)
    if proc.wait(timeout=300) != 0:
        fail(f"the uninterrupted blended run failed:\n{open(log).read()}")
    straight = {r["step"]: r for r in rows("preempt-straight")}
    evaluated = sorted(s for s, r in straight.items() if "valid_loss" in r)
    if evaluated != [25, 50, 75, 100, 125, 150] or "test_loss" not in straight[steps]:
        fail(f"validation ran after steps {evaluated}")
    every = ["train/loss", "train/learning_rate", "train/grad_norm", "train/loss_scale",
             "train/tokens_per_s", "train/step_time_s", "memory/predicted_bytes",
             "memory/touched_bytes"]
    for tags, kw in ((every, {}), (["validation/loss", "validation/perplexity"],
                                   {"every": 25}),
                     (["test/loss", "test/perplexity"], {"first_step": steps})):
        problems, _ = tensorboard_check.check(tb, tags, steps, **kw)
        if problems:
            fail("TensorBoard: " + "; ".join(problems))
    seen = tensorboard_check.scalars(tb)
    for s, r in straight.items():
        # Events hold float32.
        if abs(seen["train/loss"][s] - r["loss"]) > 1e-6 * abs(r["loss"]):
            fail(f"TensorBoard's train/loss at step {s} is {seen['train/loss'][s]}, "
                 f"the metrics' {r['loss']}")
    print(f"tensorboard: every scalar at every step 1..{steps} (validation every 25), "
          "train/loss as the metrics")

    # SIGTERM to one rank, once the run is under way.
    root = fresh(w("preempt-ckpt"))
    tb = fresh(w("preempt-tb"))
    proc, log = start("preempt-stopped", "--save", root, "--tensorboard-dir", tb)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(w("preempt-stopped.jsonl")) and len(rows("preempt-stopped")) >= 30:
            break
        time.sleep(0.01)
    victims = [p for p in ranks_of() if p != proc.pid]
    if proc.poll() is not None or not victims:
        fail(f"the run ended before it could be stopped:\n{open(log).read()}")
    os.kill(victims[-1], signal.SIGTERM)
    if proc.wait(timeout=120) != 0:
        fail(f"the stopped run exited {proc.returncode}:\n{open(log).read()}")
    text = open(log).read()
    stopped = [l for l in text.splitlines() if l.startswith("stopped after step ")]
    if len(stopped) != 1 or "(SIGTERM received): the checkpoint of step" not in stopped[0]:
        fail(f"no line says where the run stopped:\n{text}")
    at = int(stopped[0].split()[3])
    if not 30 <= at < steps or open(os.path.join(root, "latest")).read().strip() != \
            f"step-{at:08d}":
        fail(f"stopped at step {at}; latest is {open(os.path.join(root, 'latest')).read()}")
    proc, log = start("preempt-resumed", "--load", root, "--tensorboard-dir", tb,
                      "--save-params", w("preempt-resumed.safetensors"))
    if proc.wait(timeout=300) != 0:
        fail(f"resuming the stopped run failed:\n{open(log).read()}")
    resumed = {r["step"]: r for r in rows("preempt-resumed")}
    if sorted(resumed) != list(range(at + 1, steps + 1)):
        fail(f"the resumed run ran steps {min(resumed)}..{max(resumed)}")
    for s, r in resumed.items():
        for key in ("loss", "grad_norm", "valid_loss", "test_loss"):
            if r.get(key) != straight[s].get(key):
                fail(f"resumed step {s}: {key} {r.get(key)}, uninterrupted "
                     f"{straight[s].get(key)}")
    if raw_tensors(w("preempt-resumed.safetensors")) != \
            raw_tensors(w("preempt-straight.safetensors")):
        fail("the resumed run's final parameters differ from the uninterrupted run's")
    problems, _ = tensorboard_check.check(tb, ["train/loss"], steps)
    if problems:
        fail("TensorBoard after the resume: " + "; ".join(problems))
    print(f"preemption: SIGTERM to one of 4 ranks stopped the job after step {at} with "
          f"its checkpoint (exit 0); resumed, steps {at + 1}-{steps} equal the "
          "uninterrupted run's bit for bit (losses, validation, parameters)")

    # SIGTERM to mpirun, which passes it on to every rank (and itself exits
    # 1, as Open MPI's mpirun does for a job it was told to end, after the
    # ranks have saved and exited 0).
    # (mpirun passes the signal on after a while: a long run, so that it
    # arrives before the end. Meanwhile it no longer reads the ranks'
    # output: a rank that logs every step, some 250 lines a second here,
    # fills the pipe and blocks in its write before the signal arrives, so
    # this run logs every 50 steps; docs/runs.md says so.)
    root = fresh(w("preempt-mpirun"))
    proc, log = start("preempt-mpirun", "--save", root, "--steps", "100000",
                      "--log-every", "50")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(w("preempt-mpirun.jsonl")) and len(rows("preempt-mpirun")) >= 10:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    text = open(log).read()
    stopped = [l for l in text.splitlines() if l.startswith("stopped after step ")]
    if len(stopped) != 1:
        fail(f"SIGTERM to mpirun: no line says where the run stopped:\n{text}")
    at = int(stopped[0].split()[3])
    if open(os.path.join(root, "latest")).read().strip() != f"step-{at:08d}":
        fail(f"SIGTERM to mpirun: stopped after step {at} but latest is "
             f"{open(os.path.join(root, 'latest')).read()}")
    proc, log = start("preempt-mpirun-resumed", "--load", root, "--steps", "100000",
                      "--exit-interval", "1")
    if proc.wait(timeout=300) != 0:
        fail(f"resuming after SIGTERM to mpirun failed:\n{open(log).read()}")
    resumed = [r["step"] for r in rows("preempt-mpirun-resumed")]
    if resumed != [at + 1]:
        fail(f"resumed after SIGTERM to mpirun, the run ran steps {resumed}")
    print(f"preemption: SIGTERM to mpirun stopped every rank after step {at} with its "
          "checkpoint, which resumes")

    # A second SIGTERM, to every rank, while the checkpoint the first one
    # asked for is being written (a model of 77 MB of checkpoint, whose save
    # takes long enough to be caught).
    big = w("preempt-big.textproto")
    with open(big, "w") as f:
        f.write("model { family: LLAMA num_layers: 2 hidden_size: 512 num_heads: 8 "
                "ffn_hidden_size: 1408 vocab_size: 257 }\n"
                "parallel { dp: 2 micro_batch_size: 1 }\n"
                "train { steps: 1000 lr: 3e-3 seed: 7 }\ndata { seq_length: 32 }\n")
    big_plan = w("preempt-big.plan")
    run([b("braidc"), big, "--emit=plan", "-o", big_plan])
    root = fresh(w("preempt-twice"))
    log_path = w("preempt-twice.log")
    proc = subprocess.Popen(mpirun(2) + [b("braid-run"), big_plan, "--data", data,
                                         "--save", root, "--log-every", "1"],
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    second = None
    first_sent = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and second is None:
        pids = subprocess.run(["pgrep", "-f", f"braid-run {big_plan}"],
                              capture_output=True, text=True).stdout.split()
        pids = [int(p) for p in pids if int(p) != proc.pid]
        if not first_sent:
            if "step " in open(log_path).read() and pids:
                os.kill(pids[0], signal.SIGTERM)
                first_sent = True
        else:
            names = os.listdir(root) if os.path.isdir(root) else []
            if any(n.startswith(".step-") and n.endswith(".tmp") for n in names):
                for pid in pids:
                    os.kill(pid, signal.SIGTERM)
                second = [n for n in names if n.endswith(".tmp")][0]
        time.sleep(0.0005 if first_sent else 0.01)
    if proc.wait(timeout=120) != 0:
        fail(f"the twice-stopped run exited {proc.returncode}:\n{open(log_path).read()}")
    if second is None:
        fail("the second SIGTERM found no save in progress to land in")
    latest = open(os.path.join(root, "latest")).read().strip()
    p = subprocess.run([b("braid-ckpt"), "inspect", root], capture_output=True, text=True)
    if p.returncode != 0 or "verified:" not in p.stdout:
        fail(f"after a second SIGTERM the checkpoint does not verify:\n{p.stdout}{p.stderr}")
    if any(n.endswith(".tmp") for n in os.listdir(root)):
        fail(f"a temporary checkpoint was left behind: {os.listdir(root)}")
    print(f"preemption: a second SIGTERM during the save of {second} left {latest} "
          "whole (it verifies)")

    # --exit-interval and --exit-duration-in-mins.
    for flags, want in ((["--exit-interval", "7"], 7),
                        (["--exit-duration-in-mins", "0.000001"], 1)):
        root = fresh(w("preempt-exit"))
        proc, log = start("preempt-exit", "--save", root, *flags)
        if proc.wait(timeout=120) != 0:
            fail(f"{flags} exited {proc.returncode}:\n{open(log).read()}")
        text = open(log).read()
        if f"stopped after step {want} (" not in text or \
                open(os.path.join(root, "latest")).read().strip() != f"step-{want:08d}":
            fail(f"{flags}: did not stop after step {want} with its checkpoint:\n{text}")
        print(f"{' '.join(flags)}: stopped after step {want} with its checkpoint")


if __name__ == "__main__":
    main()
