#!/usr/bin/env python3
"""Makes the instruction data of the fine-tuning example: Alpaca records
with exact answers (copying, capitalising and reversing a word of a fixed
list; adding two digits), a held-out test set of questions the training
set does not hold (each word of them is in it, under other tasks), and a
sample of the training questions.

  make_data.py OUT_DIR [--train N] [--test N] [--seed S]

Writes OUT_DIR/train.json (Alpaca: instruction, input, output),
OUT_DIR/test.json (held-out questions; the output is the expected answer)
and OUT_DIR/seen.json (as many questions of the training set).
"""

import argparse
import json
import os
import random

WORDS = """apple river stone cloud garden music paper window silver orange
bread chair table dream field light night ocean plant queen smile sound
storm sugar tiger train water world young zebra amber basket candle dragon
eagle forest guitar honey island jungle kettle lemon marble needle pepper
rabbit saddle thunder violet wagon yellow""".split()


def questions():
    """Every question of the four tasks, each once."""
    out = []
    for w in WORDS:
        out.append({"instruction": "Repeat the word.", "input": w, "output": w})
        out.append({"instruction": "Write the word in capitals.", "input": w,
                    "output": w.upper()})
        out.append({"instruction": "Reverse the word.", "input": w,
                    "output": w[::-1]})
    for a in range(10):
        for b in range(10):
            out.append({"instruction": f"What is {a} plus {b}?", "input": "",
                        "output": str(a + b)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--test", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pool = questions()
    rng.shuffle(pool)
    test, kept = pool[:args.test], pool[args.test:]
    # The training records repeat the other questions, shuffled, up to
    # --train; no test question is among them.
    train = [kept[i % len(kept)] for i in range(args.train)]
    rng.shuffle(train)
    seen = rng.sample(kept, args.test)
    os.makedirs(args.out, exist_ok=True)
    for name, data in (("train", train), ("test", test), ("seen", seen)):
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump(data, f, indent=0)
    print(f"{len(train)} training records ({len(kept)} distinct questions), "
          f"{len(test)} held-out test questions in {args.out}")


if __name__ == "__main__":
    main()
