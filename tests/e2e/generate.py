"""Generation against an independent reference: `braid generate` on random
Hugging Face models (LLaMA with grouped-query attention and RoPE, GPT-2
with learned positions, Bloom with ALiBi) against hf_reference.py, a numpy
implementation of the Hugging Face models and of generate()'s greedy search
written from their definitions.

- Every call's logits (each prefill chunk's last prompt row, each decode
  step's) equal the reference's logits of the same prefix in float64, to
  1e-5 of the row's largest logit.
- Greedy tokens equal the reference's, over a batch of prompts of different
  lengths whose prefill takes several chunks.
- Sampling: the same seed gives the same tokens, another seed others; a
  prompt's tokens do not depend on the batch it is in.
- Bad input gets one error line naming it.
"""

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hf_reference as ref  # noqa: E402

TOLERANCE = 1e-5


def generate(s, model, prompts, extra, check=True):
    cmd = [s.b("braid"), "generate", model]
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(str(t) for t in p)]
    cmd += extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def read_logits(path, batch):
    """The --logits-out file: per call, its function and [batch, vocab]."""
    calls = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            values = np.array([float(v) for v in parts[1:]])
            calls.append((parts[0], values.reshape(batch, -1)))
    return calls


def check_family(s, family, seed):
    config, weights = ref.random_model(family, seed=seed)
    model_dir = s.w(f"{family}-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    vocab = config["vocab_size"]
    rng = np.random.default_rng(seed + 100)
    # Two prompts of different lengths; chunks of 4 make the longer one's
    # prefill three calls, the shorter one's last token in the first.
    prompts = [list(rng.integers(3, vocab, 11)), list(rng.integers(3, vocab, 3))]
    new = 10
    logits_file = s.w(f"{family}-logits.txt")
    out = generate(s, model_dir, prompts,
                   ["--greedy", "--max-new-tokens", str(new), "--print-ids",
                    "--max-batch", "2", "--max-seq-len", "32",
                    "--prefill-chunk", "4", "--logits-out", logits_file])
    lines = out.stdout.strip().splitlines()
    if len(lines) != len(prompts):
        sys.exit(f"FAILED: {family}: {len(lines)} lines of ids for "
                 f"{len(prompts)} prompts:\n{out.stdout}")

    # Each row's logits, in the order its tokens were drawn: the prefill
    # call that held its last prompt token, then every decode call.
    calls = read_logits(logits_file, len(prompts))
    worst = 0.0
    for row, prompt in enumerate(prompts):
        got = [int(t) for t in lines[row].split()]
        tokens, margins = truth.greedy_margins(prompt, new)
        want = list(prompt) + tokens
        if min(margins) < 1e-3:
            sys.exit(f"FAILED: {family}: the reference's greedy margins "
                     f"{min(margins):.2e} are too small to compare float32 "
                     f"tokens with (pick another seed)")
        if got != want:
            sys.exit(f"FAILED: {family} prompt {row}: braid generate gave\n"
                     f"  {got}\nthe reference\n  {want}")
        chunk_of_last = (len(prompt) - 1) // 4
        rows = [calls[chunk_of_last][1][row]]
        rows += [values[row] for name, values in calls if name == "decode"]
        prefix = list(prompt)
        for k, token in enumerate(tokens):
            expected = truth.next_logits(prefix)
            actual = rows[k][:vocab]
            err = np.max(np.abs(actual - expected)) / np.max(np.abs(expected))
            worst = max(worst, err)
            if err > TOLERANCE:
                sys.exit(f"FAILED: {family} prompt {row}, token {k}: logits "
                         f"differ from the reference by {err:.2e} of the "
                         f"largest (tolerance {TOLERANCE})")
            prefix.append(token)
    print(f"{family}: greedy tokens equal the reference's; logits within "
          f"{worst:.1e} of the largest over {new} tokens x 2 prompts")
    return model_dir, prompts


def check_braid_run(s, family, model_dir, prompts):
    """The plan braidc --mode generate writes, run by braid-run (no
    compiler, no tokenizer: a GPU node's way), gives braid generate's
    tokens; under the CUDA emulation (--device cuda) the same tokens, fp32
    logits within 1e-5 of the CPU's, and bf16 logits within 5e-2."""
    plan = s.w(f"{family}-gen.plan")
    harness.run([s.b("braidc"), "--hf-config", f"{model_dir}/config.json",
                 "--mode", "generate", "--max-batch", "2", "--max-seq-len",
                 "32", "--prefill-chunk", "4", "--emit=plan", "-o", plan])
    args = ["--init-from", model_dir, "--greedy", "--max-new-tokens", "10"]
    for p in prompts:
        args += ["--prompt-ids", ",".join(str(t) for t in p)]
    cpu_logits = s.w(f"{family}-cpu-logits.txt")
    cpu = harness.run([s.b("braid-run"), plan] + args +
                      ["--logits-out", cpu_logits]).stdout
    tool = generate(s, model_dir, prompts,
                    ["--greedy", "--max-new-tokens", "10", "--print-ids",
                     "--max-batch", "2", "--max-seq-len", "32",
                     "--prefill-chunk", "4"]).stdout
    if cpu != tool:
        sys.exit(f"FAILED: braid-run gave\n{cpu}braid generate\n{tool}")
    emulated = s.b("braid-run-emulated")
    if not os.path.exists(emulated):
        print(f"{family}: braid-run equals braid generate (no CUDA "
              "emulation in this build)")
        return
    cuda_logits = s.w(f"{family}-cuda-logits.txt")
    cuda = harness.run([emulated, plan, "--device", "cuda"] + args +
                       ["--logits-out", cuda_logits]).stdout
    if cuda != cpu:
        sys.exit(f"FAILED: CUDA (emulated) gave\n{cuda}the CPU\n{cpu}")
    a = read_logits(cpu_logits, 2)
    b = read_logits(cuda_logits, 2)
    err = max(np.max(np.abs(x[1] - y[1])) / np.max(np.abs(x[1]))
              for x, y in zip(a, b))
    if err > TOLERANCE:
        sys.exit(f"FAILED: CUDA (emulated) logits differ from the CPU's by "
                 f"{err:.2e} of the largest")
    bf16_plan = s.w(f"{family}-gen-bf16.plan")
    harness.run([s.b("braidc"), "--hf-config", f"{model_dir}/config.json",
                 "--mode", "generate", "--precision", "bf16", "--max-batch",
                 "2", "--max-seq-len", "32", "--prefill-chunk", "4",
                 "--emit=plan", "-o", bf16_plan])
    bf16_logits = s.w(f"{family}-bf16-logits.txt")
    harness.run([emulated, bf16_plan, "--device", "cuda"] + args +
                ["--logits-out", bf16_logits])
    c = read_logits(bf16_logits, 2)
    # The first call's logits (the same prompts in both): bf16 rounding.
    err16 = np.max(np.abs(a[0][1] - c[0][1])) / np.max(np.abs(a[0][1]))
    if err16 > 5e-2:
        sys.exit(f"FAILED: bf16 (emulated CUDA) prefill logits differ from "
                 f"fp32 by {err16:.2e} of the largest")
    print(f"{family}: braid-run equals braid generate; CUDA (emulated) "
          f"tokens equal, logits within {err:.1e}; bf16 within {err16:.1e}")


def check_tensor_parallel(s, family, seed):
    """The inference plan split over tp 2 and tp 4 (heads, kv heads split or
    replicated, the vocabulary) under mpirun: every call's logits within
    1e-5 of the one-rank plan's, the same greedy tokens as the reference,
    and one seed the same sampled tokens in every layout: top-k within the
    16 best tokens each rank gives the draw, and top-p alone, which needs
    the whole logits (gathered on the host)."""
    config, weights = ref.random_model(family, {"vocab_size": 100},
                                       seed=seed)
    model_dir = s.w(f"{family}-tp-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    rng = np.random.default_rng(seed + 300)
    prompts = [list(rng.integers(3, 100, 6)), list(rng.integers(3, 100, 2))]
    new = 8
    args = ["--init-from", model_dir, "--max-new-tokens", str(new)]
    for p in prompts:
        args += ["--prompt-ids", ",".join(str(t) for t in p)]
    runs = {}
    for tp in (1, 2, 4):
        plan = s.w(f"{family}-tp{tp}.plan")
        harness.run([s.b("braidc"), "--hf-config", f"{model_dir}/config.json",
                     "--mode", "generate", "--tp", str(tp), "--max-batch",
                     "2", "--max-seq-len", "24", "--prefill-chunk", "4",
                     "--draw-candidates", "16", "--emit=plan", "-o", plan])
        launch = (harness.mpirun(tp) if tp > 1 else []) + \
            [s.b("braid-run"), plan]
        logits = s.w(f"{family}-tp{tp}-logits.txt")
        greedy = harness.run(launch + args + ["--greedy", "--logits-out",
                                              logits]).stdout
        sampled = harness.run(launch + args + ["--temperature", "0.9",
                                               "--top-k", "12", "--seed",
                                               "5"]).stdout
        sampled += harness.run(launch + args + ["--temperature", "1.3",
                                                "--top-p", "0.8", "--seed",
                                                "6"]).stdout
        runs[tp] = (greedy, sampled, read_logits(logits, 2))
    for row, prompt in enumerate(prompts):
        want = list(prompt) + truth.greedy(prompt, new)
        got = [int(t) for t in runs[1][0].splitlines()[row].split()]
        if got != want:
            sys.exit(f"FAILED: {family} one rank gave {got}, the reference "
                     f"{want}")
    worst = 0.0
    for tp in (2, 4):
        if runs[tp][0] != runs[1][0] or runs[tp][1] != runs[1][1]:
            sys.exit(f"FAILED: {family} tp {tp} gave\n{runs[tp][0]}"
                     f"{runs[tp][1]}one rank\n{runs[1][0]}{runs[1][1]}")
        for (f1, a), (f2, b) in zip(runs[1][2], runs[tp][2]):
            err = np.max(np.abs(a - b)) / np.max(np.abs(a))
            worst = max(worst, err)
            if f1 != f2 or err > TOLERANCE:
                sys.exit(f"FAILED: {family} tp {tp}: {f2} logits differ from "
                         f"one rank's by {err:.2e} of the largest")
    # braid generate starts the ranks itself.
    tool = generate(s, model_dir, prompts,
                    ["--greedy", "--max-new-tokens", str(new), "--print-ids",
                     "--tp", "2", "--max-batch", "2", "--max-seq-len", "24",
                     "--prefill-chunk", "4"]).stdout
    if tool != runs[1][0]:
        sys.exit(f"FAILED: {family} braid generate --tp 2 gave\n{tool}"
                 f"one rank\n{runs[1][0]}")
    # Beam search on the split plan: the reference's.
    beam = generate(s, model_dir, prompts[:1],
                    ["--beam-width", "4", "--max-new-tokens", str(new),
                     "--print-ids", "--tp", "2", "--max-seq-len", "24",
                     "--prefill-chunk", "4"]).stdout.split()
    want = list(prompts[0]) + truth.beam_search(prompts[0], 4, new)
    if [int(t) for t in beam] != want:
        sys.exit(f"FAILED: {family} beam search at tp 2 gave {beam}, the "
                 f"reference {want}")
    print(f"{family}: tp 2 and tp 4 give one rank's tokens (greedy, seeded "
          f"top-k from the ranks' candidates, top-p from the whole logits), "
          f"logits within {worst:.1e}; beam search at tp 2 the reference's")


def check_beam(s, family, seed):
    """Beam search, width 4, length penalty 1.0, against the reference's
    (transformers v4.36-v4.49 rules): without an end id, and with one that
    the search meets (so that finished hypotheses compete)."""
    config, weights = ref.random_model(family, seed=seed)
    model_dir = s.w(f"{family}-beam-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    rng = np.random.default_rng(seed + 200)
    checked = ended = 0
    for trial in range(3):
        prompt = [int(t) for t in rng.integers(3, config["vocab_size"], 5)]
        new = 12
        # End ids the greedy continuation produces early: hypotheses end on
        # them while other beams go on.
        greedy = truth.greedy(prompt, new)
        for eos in (None, greedy[1], greedy[2], greedy[3]):
            details = truth.beam_search_details(prompt, 4, new, 1.0, eos)
            ended += eos is not None and details["tokens"][-1] == eos
            extra = ["--beam-width", "4", "--length-penalty", "1.0",
                     "--max-new-tokens", str(new), "--print-ids",
                     "--max-seq-len", "32", "--prefill-chunk", "4"]
            if eos is not None:
                extra += ["--eos-id", str(eos)]
            out = generate(s, model_dir, [prompt], extra).stdout.split()
            got = [int(t) for t in out]
            want = prompt + details["tokens"]
            if got != want:
                scores = [f"{sc:.6f}" for sc, _ in details["hypotheses"]]
                sys.exit(f"FAILED: {family} beam search (eos {eos}) gave\n"
                         f"  {got}\nthe reference\n  {want}\n(the "
                         f"reference's hypothesis scores: {scores})")
            checked += 1
    if ended < 3:
        sys.exit(f"FAILED: only {ended} of the searches ended on their end "
                 "id: the test no longer exercises finished hypotheses")
    print(f"{family}: beam search (width 4) equals the reference's in "
          f"{checked} searches ({ended} ending on their end id)")


def check_text(s, model_dir, greedy):
    """Text in and out (bytes as tokens): prompts from JSONL give JSONL
    (prompt, completion, tokens, finish_reason, tokens_per_s), completions
    the reference's greedy ones; a stop string ends a completion at the
    token that completes it."""
    prompts = ["It is a truth", "Emma Woodhouse, handsome"]
    path = s.w("prompts.jsonl")
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    out = s.w("completions.jsonl")
    harness.run([s.b("braid"), "generate", model_dir, "--tokenizer", "bytes",
                 "--prompts", path, "-o", out, "--greedy",
                 "--max-new-tokens", "8"])
    with open(out) as f:
        rows = [json.loads(line) for line in f]
    for p, row in zip(prompts, rows):
        want = greedy(list(p.encode()), 8)
        text = bytes(t for t in want if t < 256).decode("utf-8", "replace")
        if row["prompt"] != p or row["completion"] != text or \
                row["tokens"] != len(want) or row["finish_reason"] not in (
                    "length", "eos") or row["tokens_per_s"] <= 0:
            sys.exit(f"FAILED: JSONL row {row} for {p!r}; the reference's "
                     f"completion {text!r} ({len(want)} tokens)")
    # A stop string: the first ASCII byte the reference makes after its
    # first token (an ASCII byte is never part of a longer character).
    want = greedy(list(prompts[0].encode()), 8)
    at = next((k for k in range(1, len(want)) if want[k] < 128), None)
    if at is None or 256 in want[:at]:
        sys.exit(f"FAILED: the reference's completion {want} has no ASCII "
                 "byte to stop at: pick another prompt")
    stop = chr(want[at])
    p = subprocess.run(
        [s.b("braid"), "generate", model_dir, "--tokenizer", "bytes",
         "--prompt", prompts[0], "--greedy", "--max-new-tokens", "8",
         "--stop", stop, "--print-ids"], capture_output=True, text=True)
    got = [int(t) for t in p.stdout.split()][len(prompts[0]):]
    if p.returncode != 0 or got != want[:at + 1]:
        sys.exit(f"FAILED: --stop {stop!r} gave {got}, expected "
                 f"{want[:at + 1]}:\n{p.stderr}")
    # Text under tensor parallelism (300 ids: 2 ranks of 150).
    one = harness.run([s.b("braid"), "generate", model_dir, "--tokenizer",
                       "bytes", "--prompt", prompts[1], "--greedy",
                       "--max-new-tokens", "8"]).stdout
    two = harness.run([s.b("braid"), "generate", model_dir, "--tokenizer",
                       "bytes", "--prompt", prompts[1], "--greedy",
                       "--max-new-tokens", "8", "--tp", "2"]).stdout
    if one != two:
        sys.exit(f"FAILED: --tp 2 printed {two!r}, one rank {one!r}")
    print("text: JSONL prompts give the reference's completions; --stop ends "
          "at the string; --tp 2 prints one rank's text")


def check_chat(s, seed):
    """braid chat keeps the conversation in the KV cache: each answer is
    the reference's greedy continuation of the whole conversation so far
    (the plain template, bytes as tokens), and a turn that does not fit
    starts a new conversation, saying so."""
    config, weights = ref.random_model("llama", {"vocab_size": 300}, seed=seed)
    model_dir = s.w("chat-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    eos = 256  # the byte tokenizer's end id
    new = 6

    # The model has 300 ids, the byte tokenizer 257: braid generate draws
    # only ids the tokenizer decodes (generate.vocab_size), as Hugging
    # Face's generate does with the others suppressed.
    def greedy(prompt, n):
        return ref.greedy_search(lambda ids: truth.next_logits(ids)[:257],
                                 prompt, n, eos)

    def chat(turns, seq_len):
        p = subprocess.run(
            [s.b("braid"), "chat", model_dir, "--tokenizer", "bytes",
             "--greedy", "--print-ids", "--max-new-tokens", str(new),
             "--max-seq-len", str(seq_len)],
            input="".join(t + "\n" for t in turns), capture_output=True,
            text=True)
        if p.returncode != 0:
            sys.exit(f"FAILED: braid chat: {p.stderr}")
        return p.stdout.splitlines()

    def plain(text, first):
        wrapped = ("" if first else "\n") + "User: " + text + "\nAssistant:"
        return list(wrapped.encode())

    turns = ["hello there", "and then?", "why"]
    lines = chat(turns, 96)
    history = []
    for k, turn in enumerate(turns):
        history += plain(turn, k == 0)
        want = greedy(history, new)
        got = [int(t) for t in lines[k].split()]
        if got != want:
            sys.exit(f"FAILED: braid chat turn {k}: answered {got}, the "
                     f"reference {want} (conversation {history})")
        history += want
    # 40 positions: the second turn does not fit after the first.
    lines = chat(turns[:2], 40)
    if len(lines) != 3 or "the context is full" not in lines[1]:
        sys.exit(f"FAILED: braid chat did not say the context was full:\n"
                 f"{lines}")
    want = greedy(plain(turns[1], True), new)
    if [int(t) for t in lines[2].split()] != want:
        sys.exit(f"FAILED: braid chat's new conversation answered "
                 f"{lines[2]}, the reference {want}")
    for extra, expected in ((["--template", "vicuna"], "--template vicuna is "
                             "not one of llama2, alpaca, plain"),
                            ([], "holds no tokenizer")):
        cmd = [s.b("braid"), "chat", model_dir] + \
            (["--tokenizer", "bytes"] if extra else []) + extra
        p = subprocess.run(cmd, input="hi\n", capture_output=True, text=True)
        if p.returncode == 0 or expected not in p.stderr:
            sys.exit(f"FAILED: {' '.join(cmd)} should fail naming "
                     f"'{expected}':\n{p.stderr}")
    check_text(s, model_dir, greedy)
    print(f"chat: {len(turns)} turns in one cache equal the reference's "
          f"greedy answers; a full context starts a new conversation")


def check_sampling(s, model_dir, prompts):
    args = ["--max-new-tokens", "12", "--print-ids", "--temperature", "1.2",
            "--top-k", "20", "--top-p", "0.9", "--max-seq-len", "32"]
    a = generate(s, model_dir, prompts, args + ["--seed", "7"]).stdout
    b = generate(s, model_dir, prompts, args + ["--seed", "7"]).stdout
    c = generate(s, model_dir, prompts, args + ["--seed", "8"]).stdout
    if a != b:
        sys.exit(f"FAILED: one seed gave two outputs:\n{a}\n{b}")
    if a == c:
        sys.exit("FAILED: seeds 7 and 8 gave the same sampled tokens")
    # A draw is keyed by its position and its row: the first prompt alone,
    # in a batch of one, draws what it drew in row 0 of two.
    alone = generate(s, model_dir, prompts[:1],
                     args + ["--seed", "7", "--max-batch", "2"]).stdout
    if alone.splitlines()[0] != a.splitlines()[0]:
        sys.exit(f"FAILED: prompt 0 sampled differently alone:\n{alone}\n{a}")
    print("sampling: one seed, one output; another seed, another")


def check_errors(s, model_dir):
    cases = [
        (["--prompt-ids", ",".join(["5"] * 40), "--max-seq-len", "32",
          "--greedy"], "at most 31"),
        (["--prompt-ids", "5,6", "--top-p", "1.5"], "--top-p"),
        (["--prompt-ids", "5,6", "--beam-width", "4", "--max-batch", "2"],
         "the beams are rows of the batch"),
        (["--prompt-ids", "5,6", "--beam-width", "2", "--top-k", "5"],
         "does not go with"),
        (["--prompt-ids", "5,6", "--tp", "2"],
         "does not divide the padded vocabulary = 97"),
        (["--prompt-ids", "5,500"], "outside the model's"),
        (["--prompt", "hello"], "holds no tokenizer"),
        (["--prompt-ids", "5,x"], "is not a token id"),
        (["--prompt-ids", "5,6", "--eos-id", "500"],
         "end-of-sequence id 500 is outside the model's"),
        (["--prompt-ids", "5,6", "--beam-width", "2", "--eos-id", "97"],
         "end-of-sequence id 97 is outside the model's"),
        (["--prompt-ids", "5,6", "--beam-width", "2", "--length-penalty", ""],
         "expected a number"),
        (["--prompt-ids", "5,6", "--beam-width", "60"],
         "ranks 120 candidates a step, more than the model's 97 token ids"),
        (["--prompt", ""], "--prompt is empty"),
    ]
    for extra, expected in cases:
        p = subprocess.run([s.b("braid"), "generate", model_dir] + extra,
                           capture_output=True, text=True)
        if p.returncode == 0 or expected not in p.stderr:
            sys.exit(f"FAILED: braid generate {' '.join(extra)} should fail "
                     f"naming '{expected}'; it exited {p.returncode}:\n"
                     f"{p.stderr}")
        if "Traceback" in p.stderr or "terminate" in p.stderr:
            sys.exit(f"FAILED: braid generate {' '.join(extra)} crashed")
    print(f"errors: {len(cases)} bad inputs refused, each named")

    # A run that fails leaves the output files there were as they were; a
    # write that fails is an error.
    outputs = {"-o": s.w("kept.jsonl"), "--logits-out": s.w("kept.logits")}
    for flag, path in outputs.items():
        with open(path, "w") as f:
            f.write(f"an earlier run's {flag}\n")
    args = ["--prompt-ids", "5,500"]
    for flag, path in outputs.items():
        args += [flag, path]
    p = subprocess.run([s.b("braid"), "generate", model_dir] + args,
                       capture_output=True, text=True)
    if p.returncode == 0 or "outside the model's" not in p.stderr:
        sys.exit(f"FAILED: braid generate {' '.join(args)}: {p.stderr}")
    for flag, path in outputs.items():
        with open(path) as f:
            if f.read() != f"an earlier run's {flag}\n":
                sys.exit(f"FAILED: the failed run changed its {flag} file")
    p = subprocess.run([s.b("braid"), "generate", model_dir, "--prompt-ids",
                        "5,6", "--max-new-tokens", "2", "--logits-out",
                        "/dev/full"], capture_output=True, text=True)
    if p.returncode == 0 or "/dev/full" not in p.stderr:
        sys.exit(f"FAILED: --logits-out /dev/full should fail: "
                 f"exit {p.returncode}, {p.stderr}")
    # A prompts line nested past the JSON depth Braid reads is refused at
    # once, naming its line.
    deep = s.w("deep.jsonl")
    with open(deep, "w") as f:
        f.write('\n{"prompt": "b", "x": ' + "[" * 20000 + "]" * 20000 +
                "}\n")
    p = subprocess.run([s.b("braid"), "generate", model_dir, "--prompts",
                        deep, "--tokenizer", "bytes"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or f"{deep}:2: JSON nested more than" not in p.stderr:
        sys.exit(f"FAILED: a deep --prompts line: {p.stderr}")
    # A model without a tokenizer prints its ids (there is no text), as
    # --print-ids does; it printed an empty line.
    runs = [subprocess.run([s.b("braid"), "generate", model_dir,
                            "--prompt-ids", "5,6", "--max-new-tokens", "3",
                            "--greedy"] + extra, capture_output=True,
                           text=True) for extra in ([], ["--print-ids"])]
    if runs[0].returncode != 0 or not runs[0].stdout.strip() or \
            runs[0].stdout != runs[1].stdout:
        sys.exit(f"FAILED: without a tokenizer braid generate printed "
                 f"{runs[0].stdout!r}, --print-ids {runs[1].stdout!r}")
    print("outputs: a failed run keeps the files; a full disk is an error; "
          "deep JSON refused; ids printed without a tokenizer")


def main():
    s = harness.Setup()
    llama, prompts = check_family(s, "llama", 11)
    check_braid_run(s, "llama", llama, prompts)
    check_family(s, "gpt2", 12)
    check_family(s, "bloom", 13)
    for family, seed in (("llama", 41), ("gpt2", 42), ("bloom", 43)):
        check_tensor_parallel(s, family, seed)
    check_beam(s, "llama", 21)
    check_chat(s, 31)
    check_sampling(s, llama, prompts)
    check_errors(s, llama)
    print("PASSED")


if __name__ == "__main__":
    main()
