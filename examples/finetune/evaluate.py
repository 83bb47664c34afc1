#!/usr/bin/env python3
"""Exact-match accuracy of a model on questions (TEST.json): each rendered
with the alpaca template as braid-data renders a training record (no BOS
with bytes as tokens), answered greedily by braid generate, the answer the
completion up to the end id (256) with surrounding whitespace removed.

  evaluate.py BRAID MODEL TEST.json WORK
"""

import json
import os
import subprocess
import sys


def prompt(record):
    user = record["instruction"]
    if record.get("input"):
        user += "\n\n" + record["input"]
    return "### Instruction:\n" + user + "\n\n### Response:\n"


def main():
    braid, model, test, work = sys.argv[1:5]
    records = json.load(open(test))
    os.makedirs(work, exist_ok=True)
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for r in records:
            f.write(json.dumps({"prompt": prompt(r)}) + "\n")
    out = os.path.join(work, "answers.jsonl")
    subprocess.run([braid, "generate", model, "--tokenizer", "bytes", "--prompts",
                    prompts, "-o", out, "--greedy", "--max-new-tokens", "12",
                    "--eos-id", "256", "--max-batch", "16"],
                   check=True, stdout=subprocess.DEVNULL)
    answers = [json.loads(l) for l in open(out)]
    right = sum(a["completion"].strip() == r["output"]
                for a, r in zip(answers, records))
    print(f"{model}: {right} of the {len(records)} questions of "
          f"{os.path.basename(test)} answered exactly "
          f"({100 * right / len(records):.1f} %)")
    for a, r in list(zip(answers, records))[:3]:
        print(f"  {r['instruction']} {r.get('input', '')!r}: "
              f"{a['completion'].strip()!r} (expected {r['output']!r})")


if __name__ == "__main__":
    main()
