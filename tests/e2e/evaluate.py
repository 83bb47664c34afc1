#!/usr/bin/env python3
"""braid eval against independent references.

- Log-likelihoods: `braid eval --task mmlu` (2 shots) on random Hugging Face
  models, LLaMA (grouped-query attention, RoPE) and GPT-2 (learned
  positions), with the byte tokenizer, on one rank (each item's context
  computed once for its options, and with --no-shared-prefixes each
  request whole through the score function) and split over tp 2:
  every option's log-likelihood (--log-samples: its context and
  continuation ids; and braid-run --score replaying that file on the plan
  braidc --score compiles, without the compiler) equals the sum of the continuation tokens'
  log-softmax under hf_reference.py (a numpy forward written from the
  models' definitions, in float64) to 1e-5 relative, and its greedy flag
  whether each continuation token is the reference's argmax; tp 2 scores
  what one rank scores. The results' accuracy is the mean of the items'.
- Accuracy: tiny-llama trained from scratch on the shipped MMLU test
  items, each as the zero-shot prompt the harness's template makes
  (written here from the template) followed by " " and its answer letter,
  until it has memorised them, scores acc 1.0 on them; on a copy whose
  answer letters are redrawn at random it scores exactly the share of
  items whose letter did not change, which is inside the 99% interval of
  chance (0.25) for that many items.
- Bad input: a task that does not exist and a malformed benchmark file get
  one error line naming them; so does --timeout inf.
- Generations: GSM8K's (zero-shot, a random byte-vocabulary model) go to
  --log-samples and -o as JSON that parses as UTF-8, each text its ids'
  bytes with ill-formed sequences replaced as Python's decoder does.

  evaluate.py --bin BUILD/bin --work DIR --corpus TEXT
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import hf_reference as ref  # noqa: E402

TOLERANCE = 1e-5
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "eval")


def braid_eval(s, model, extra, check=True):
    cmd = [s.b("braid"), "eval", model] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def log_softmax(row):
    m = row.max()
    return row - (m + np.log(np.exp(row - m).sum()))


def check_loglikelihoods(s, family, seed):
    overrides = {"vocab_size": 512}
    overrides.update({"max_position_embeddings": 1024} if family == "llama"
                     else {"n_positions": 1024, "n_ctx": 1024})
    config, weights = ref.random_model(family, overrides, seed=seed)
    model_dir = s.w(f"{family}-model")
    ref.save_hf_dir(model_dir, config, weights)
    truth = ref.Reference(config, weights)
    runs = {}
    for tp, mode in ((1, "shared"), (1, "whole"), (2, "shared")):
        samples = s.w(f"{family}-tp{tp}-{mode}-samples.jsonl")
        results = s.w(f"{family}-tp{tp}-{mode}-results.json")
        braid_eval(s, model_dir, [
            "--task", "mmlu", "--data", os.path.join(DATA, "mmlu"), "--shots",
            "2", "--limit", "2", "--tokenizer", "bytes", "--max-seq-len",
            "1024", "--max-batch", "4", "--prefill-chunk", "96", "--tp",
            str(tp), "--log-samples", samples, "-o", results] +
            (["--no-shared-prefixes"] if mode == "whole" else []))
        with open(samples) as f:
            lines = [json.loads(l) for l in f]
        with open(results) as f:
            runs[tp, mode] = (lines, json.load(f))
    lines, results = runs[1, "shared"]
    if not lines:
        sys.exit(f"FAILED: {family}: no log-likelihood requests logged")
    # braid-run replays the logged requests (--score) on the plan braidc
    # compiles with --score: no compiler or tokenizer at run time, a GPU
    # node's way.
    plan = s.w(f"{family}-score.plan")
    harness.run([s.b("braidc"), "--hf-config", f"{model_dir}/config.json",
                 "--mode", "generate", "--score", "--max-batch", "4",
                 "--max-seq-len", "1024", "--prefill-chunk", "96",
                 "--emit=plan", "-o", plan])
    replay = harness.run([s.b("braid-run"), plan, "--init-from", model_dir,
                          "--score", s.w(f"{family}-tp1-shared-samples.jsonl"),
                          "--stats"])
    replayed = [json.loads(l) for l in replay.stdout.splitlines()]
    # A request without context is refused, naming its line: its first
    # token has nothing before it to be predicted from.
    empty = s.w(f"{family}-empty-context.jsonl")
    with open(empty, "w") as f:
        f.write('{"context_ids": [3], "continuation_ids": [4]}\n'
                '{"context_ids": [], "continuation_ids": [3, 4]}\n')
    p = subprocess.run([s.b("braid-run"), plan, "--init-from", model_dir,
                        "--score", empty], capture_output=True, text=True)
    if p.returncode == 0 or f"{empty}:2" not in p.stderr or \
            '"context_ids" is empty' not in p.stderr:
        sys.exit(f"FAILED: {family}: an empty context_ids should be refused "
                 f"naming line 2: exit {p.returncode}, {p.stderr}")
    if len(replayed) != len(lines) or "stats: scored" not in replay.stderr:
        sys.exit(f"FAILED: {family}: braid-run --score answered "
                 f"{len(replayed)} of {len(lines)} requests:\n{replay.stderr}")
    replay_lines = [dict(l, logprob=r["logprob"], greedy=r["greedy"])
                    for l, r in zip(lines, replayed)]
    worst = 0.0
    # Each option's context computed once (shared), each request whole, and
    # braid-run's replay.
    for k, line in enumerate(lines + runs[1, "whole"][0] + replay_lines):
        ctx, cont = line["context_ids"], line["continuation_ids"]
        ids = ctx + cont
        logits = truth.logits(ids[:-1])
        want, greedy = 0.0, True
        for j, token in enumerate(cont):
            row = logits[len(ctx) - 1 + j]
            want += log_softmax(row)[token]
            greedy = greedy and int(np.argmax(row)) == token
        got = line["logprob"]
        err = abs(got - want) / max(abs(want), 1e-12)
        worst = max(worst, err)
        if err > TOLERANCE:
            sys.exit(f"FAILED: {family} request {k}: log-likelihood {got}, "
                     f"the reference's {want}")
        if line["greedy"] != greedy:
            sys.exit(f"FAILED: {family} request {k}: greedy {line['greedy']}, "
                     f"the reference's {greedy}")
    # The byte tokenizer: the ids are the texts' bytes.
    first = lines[0]
    if bytes(first["continuation_ids"]).decode() != \
            first["continuation"] or not first["continuation"].startswith(" "):
        sys.exit(f"FAILED: {family}: continuation ids {first['continuation_ids']} "
                 f"are not the bytes of {first['continuation']!r}")
    # tp 2 scores what one rank scores.
    tp_lines, _ = runs[2, "shared"]
    if [(l["context_ids"], l["continuation_ids"]) for l in tp_lines] != \
            [(l["context_ids"], l["continuation_ids"]) for l in lines]:
        sys.exit(f"FAILED: {family}: tp 2 made other requests")
    tp_worst = max(abs(a["logprob"] - b["logprob"]) / max(abs(b["logprob"]), 1e-12)
                   for a, b in zip(tp_lines, lines))
    if tp_worst > TOLERANCE:
        sys.exit(f"FAILED: {family}: tp 2's log-likelihoods differ from one "
                 f"rank's by {tp_worst:.2e}")
    # The reported accuracy: the mean of the items' scores.
    task = results["results"][0]
    items = task["items"]
    acc = sum(i["scores"]["acc"] for i in items) / len(items)
    if abs(task["metrics"]["acc"]["value"] - acc) > 1e-12:
        sys.exit(f"FAILED: {family}: reported acc {task['metrics']['acc']} is "
                 f"not the items' mean {acc}")
    print(f"{family}: {len(lines)} log-likelihoods within {worst:.1e} of the "
          f"reference (tp 2 within {tp_worst:.1e}); acc {acc:.3f} over "
          f"{len(items)} items")


def read_mmlu(directory):
    """{subject: [(question, [4 options], letter)]} of DIR/test."""
    out = {}
    test = os.path.join(directory, "test")
    for name in sorted(os.listdir(test)):
        with open(os.path.join(test, name), newline="") as f:
            out[name[:-len("_test.csv")]] = [
                (row[0], row[1:5], row[5]) for row in csv.reader(f)]
    return out


def mmlu_prompt(subject, question, options):
    """The harness's MMLU template (lm_eval/tasks/mmlu/default), zero-shot:
    the description, the stripped question, the lettered options and
    "Answer:"."""
    return ("The following are multiple choice questions (with answers) "
            f"about {subject.replace('_', ' ')}.\n\n{question.strip()}\n" +
            "".join(f"{l}. {o}\n" for l, o in zip("ABCD", options)) +
            "Answer:")


def check_accuracy(s):
    items = read_mmlu(os.path.join(DATA, "mmlu"))
    corpus = s.w("memorise.jsonl")
    with open(corpus, "w") as f:
        for subject, rows in items.items():
            for question, options, letter in rows:
                f.write(json.dumps({"text": mmlu_prompt(subject, question,
                                                        options) +
                                    " " + letter + "\n"}) + "\n")
    harness.run([s.b("braid-data"), "preprocess", "--input", corpus,
                 "--output-prefix", s.w("memorise"), "--append-eod"])
    job = s.w("memorise.textproto")
    with open(job, "w") as f:
        f.write('model { preset: "tiny-llama" max_seq_len: 256 }\n'
                "parallel { micro_batch_size: 2 }\n"
                "train { steps: 300 lr: 5e-3 warmup_steps: 10 seed: 5 }\n"
                f'data {{ seq_length: 192 path: "{s.w("memorise")}" }}\n')
    checkpoint = s.w("memorise-ckpt")
    shutil.rmtree(checkpoint, ignore_errors=True)
    harness.run([s.b("braid"), "train", job, "--save", checkpoint,
                 "--log-every", "1000", "--threads", "1"])

    def accuracy(data, name):
        results = s.w(f"memorise-{name}.json")
        braid_eval(s, checkpoint, ["--task", "mmlu", "--data", data,
                                   "--shots", "0", "--tokenizer", "bytes",
                                   "--max-seq-len", "256", "-o", results])
        with open(results) as f:
            task = json.load(f)["results"][0]
        return task["metrics"]["acc"]["value"], task["count"]

    acc, count = accuracy(os.path.join(DATA, "mmlu"), "shipped")
    if acc != 1.0:
        sys.exit(f"FAILED: the memorising model scores acc {acc} on its own "
                 "items, not 1.0")
    # The same items, their letters redrawn (test/ only: no shots).
    shuffled = s.w("mmlu-shuffled")
    shutil.rmtree(shuffled, ignore_errors=True)
    shutil.copytree(os.path.join(DATA, "mmlu"), shuffled)
    rng = np.random.default_rng(7)
    kept = 0
    for subject, rows in items.items():
        path = os.path.join(shuffled, "test", f"{subject}_test.csv")
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            for question, options, letter in rows:
                new = "ABCD"[int(rng.integers(0, 4))]
                kept += new == letter
                writer.writerow([question, *options, new])
    got, _ = accuracy(shuffled, "shuffled")
    want = kept / count
    # The 99% interval of Binomial(count, 0.25), from its distribution.
    from math import comb
    cdf, low, high = 0.0, None, None
    for k in range(count + 1):
        cdf += comb(count, k) * 0.25 ** k * 0.75 ** (count - k)
        if low is None and cdf > 0.005:
            low = k
        if high is None and cdf >= 0.995:
            high = k
    if got != want or not low <= kept <= high:
        sys.exit(f"FAILED: on redrawn letters acc {got}: expected the {kept} "
                 f"of {count} unchanged ({want}), within [{low}, {high}]")
    print(f"accuracy: 1.0 on the {count} memorised items; {got:.3f} on redrawn "
          f"letters ({kept} unchanged; chance's 99% interval {low}-{high} of "
          f"{count})")


def check_errors(s):
    model_dir = s.w("llama-model")
    p = braid_eval(s, model_dir, ["--task", "trivia", "--data", DATA,
                                  "--tokenizer", "bytes"], check=False)
    if p.returncode == 0 or "trivia" not in p.stderr:
        sys.exit(f"FAILED: an unknown task: rc {p.returncode}\n{p.stderr}")
    bad = s.w("bad-mmlu")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(os.path.join(DATA, "mmlu"), bad)
    test_dir = os.path.join(bad, "test")
    name = sorted(os.listdir(test_dir))[0]
    with open(os.path.join(test_dir, name), "a") as f:
        f.write("What is 2+2?,3,4,5,6,E\n")
    p = braid_eval(s, model_dir, ["--task", "mmlu", "--data", bad,
                                  "--tokenizer", "bytes"], check=False)
    if p.returncode == 0 or name not in p.stderr:
        sys.exit(f"FAILED: a bad answer letter: rc {p.returncode}\n{p.stderr}")
    print("errors: an unknown task and a bad answer letter are named")


def check_generation_samples(s):
    """gsm8k's generations in --log-samples and -o: a random model's bytes
    are rarely UTF-8, and both files must still be JSON (UTF-8), each text
    its ids' bytes with ill-formed sequences replaced as Python does."""
    config, weights = ref.random_model(
        "llama", {"vocab_size": 257, "max_position_embeddings": 1024}, seed=53)
    model_dir = s.w("llama-bytes-model")
    ref.save_hf_dir(model_dir, config, weights)
    samples, results = s.w("gsm8k-samples.jsonl"), s.w("gsm8k-results.json")
    braid_eval(s, model_dir, [
        "--task", "gsm8k", "--data", os.path.join(DATA, "gsm8k"), "--shots",
        "0", "--limit", "2", "--max-new-tokens", "12", "--tokenizer", "bytes",
        "--max-seq-len", "1024", "--log-samples", samples, "-o", results])
    with open(samples, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f]
    if len(lines) != 2:
        sys.exit(f"FAILED: {len(lines)} generations logged for 2 items")
    for line in lines:
        ids = [i for i in line["generation_ids"] if i != 256]
        expected = bytes(ids).decode("utf-8", "replace")
        if line["generation"] != expected:
            sys.exit(f"FAILED: logged generation {line['generation']!r}, its "
                     f"ids' bytes read {expected!r}")
        if bytes(line["context_ids"]).decode("utf-8", "replace") != \
                line["context"]:
            sys.exit(f"FAILED: logged context does not match its ids")
    with open(results, encoding="utf-8") as f:
        items = json.load(f)["results"][0]["items"]
    if len(items) != 2 or any("generation" not in i for i in items):
        sys.exit(f"FAILED: results items {items}")
    p = braid_eval(s, model_dir, ["--task", "humaneval", "--data",
                                  os.path.join(DATA, "humaneval"),
                                  "--tokenizer", "bytes", "--timeout", "inf"],
                   check=False)
    if p.returncode == 0 or "--timeout" not in p.stderr:
        sys.exit(f"FAILED: --timeout inf: rc {p.returncode}\n{p.stderr}")
    print("generations: logged and in the results as UTF-8 JSON; "
          "--timeout inf refused")


def main():
    s = harness.Setup()
    check_loglikelihoods(s, "llama", 51)
    check_loglikelihoods(s, "gpt2", 52)
    check_accuracy(s)
    check_errors(s)
    check_generation_samples(s)
    print("PASSED")


if __name__ == "__main__":
    main()
