"""Instruction datasets from their definition (docs/data.md, "Instruction
data"), to check `braid-data preprocess --handler` against.

Independent of Braid's code: the handlers' records are read into turns,
the chat templates render them as segments (prompt segments not trained,
answer segments trained), each segment is encoded by the tokenizer's own
library (sentencepiece, tokenizers, or UTF-8 bytes), and the Megatron
`.bin/.idx` files Braid wrote are read with a reader written from the
format (Megatron-LM's MMapIndexedDataset).
"""

import json
import os
import re
import struct

import numpy as np

# Megatron's MMapIndexedDataset dtype codes.
_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
           6: np.float64, 7: np.float64, 8: np.uint16}


def read_indexed(prefix):
    """(dtype, list of np arrays): the documents of PREFIX.bin/.idx, each one
    sequence (instruction data has one per conversation)."""
    with open(prefix + ".idx", "rb") as f:
        index = f.read()
    if index[:9] != b"MMIDIDX\x00\x00":
        raise ValueError(f"{prefix}.idx: not a Megatron index")
    version, = struct.unpack_from("<Q", index, 9)
    code, = struct.unpack_from("<B", index, 17)
    count, docs = struct.unpack_from("<QQ", index, 18)
    if version != 1:
        raise ValueError(f"{prefix}.idx: version {version}")
    at = 34
    sizes = np.frombuffer(index, np.int32, count, at)
    at += 4 * count
    pointers = np.frombuffer(index, np.int64, count, at)
    at += 8 * count
    doc_idx = np.frombuffer(index, np.int64, docs, at)
    dtype = _DTYPES[code]
    data = np.fromfile(prefix + ".bin", dtype=np.uint8)
    width = np.dtype(dtype).itemsize
    sequences = [data[p:p + s * width].view(dtype) for p, s in
                 zip(pointers, sizes)]
    if list(doc_idx) != list(range(count + 1)):
        raise ValueError(f"{prefix}.idx: documents {list(doc_idx)[:8]}... are "
                         "not one sequence each")
    return dtype, sequences


def _alternate(turns, where):
    """(user, assistant) pairs of alternating turns [(role, text)]."""
    if not turns or len(turns) % 2:
        raise ValueError(f"{where}: turns do not end with the assistant")
    pairs = []
    for i in range(0, len(turns), 2):
        (r1, u), (r2, a) = turns[i], turns[i + 1]
        if r1 != "user" or r2 != "assistant":
            raise ValueError(f"{where}: turns do not alternate")
        pairs.append((u, a))
    return pairs


def conversation(handler, record):
    """(system text, [(user, assistant)]) of one record of a handler."""
    if handler == "alpaca" or (handler == "belle" and
                               "Human:" not in record["instruction"]):
        user = record["instruction"]
        if record.get("input"):
            user += "\n\n" + record["input"]
        pairs = [tuple(p) for p in record.get("history", [])]
        return record.get("system", ""), pairs + [(user, record["output"])]
    if handler == "belle":
        turns = []
        for line in record["instruction"].split("\n"):
            for marker, role in (("Human:", "user"), ("Assistant:", "assistant")):
                if line.startswith(marker):
                    text = line[len(marker):]
                    turns.append((role, text[1:] if text.startswith(" ")
                                   else text))
        # The last "Assistant:" is empty: its answer is the output.
        assert turns[-1] == ("assistant", "")
        turns[-1] = ("assistant", record["output"])
        return "", _alternate(turns, "belle")
    if handler == "sharegpt":
        roles = {"human": "user", "user": "user", "gpt": "assistant",
                 "assistant": "assistant"}
        messages = record["conversations"]
        system = record.get("system", "")
        if messages and messages[0]["from"] == "system":
            system, messages = messages[0]["value"], messages[1:]
        return system, _alternate([(roles[m["from"]], m["value"])
                                   for m in messages], "sharegpt")
    if handler == "moss":
        turns = []
        chat = record["chat"]
        for key in sorted(chat, key=lambda k: int(k.split("_")[1])):
            human = re.sub(r"<eoh>\s*$", "", chat[key]["Human"].rstrip())
            moss = re.sub(r"<eom>\s*$", "", chat[key]["MOSS"].rstrip())
            turns += [("user", human[len("<|Human|>: "):]),
                      ("assistant", moss[len("<|MOSS|>: "):])]
        return record.get("meta_instruction", ""), _alternate(turns, "moss")
    if handler == "plain":
        return "", [(record["prompt"], record["response"])]
    raise ValueError(handler)


def render(template, system, pairs, encode, bos, eos):
    """(ids, mask): the template's segments, each encoded alone; prompt
    segments mask 0, answers (with the end id) mask 1."""
    ids, mask = [], []

    def add(segment, trained):
        ids.extend(segment)
        mask.extend([int(trained)] * len(segment))

    for i, (user, answer) in enumerate(pairs):
        first = i == 0
        lead = [bos] if bos is not None else []
        if template == "llama2":
            text = ("[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n" + user +
                    " [/INST]" if first and system else
                    "[INST] " + user + " [/INST]")
            add(lead + encode(text), False)
            add(encode(answer) + [eos], True)
        elif template == "alpaca":
            head = (system + "\n\n" if system else "") if first else "\n\n"
            add((lead if first else []) +
                encode(head + "### Instruction:\n" + user +
                       "\n\n### Response:\n"), False)
            add(encode(answer) + [eos], True)
        elif template == "plain":
            head = (system + "\n" if system else "") if first else "\n"
            add((lead if first else []) +
                encode(head + "User: " + user + "\nAssistant:"), False)
            add(encode(" " + answer) + [eos], True)
        else:
            raise ValueError(template)
    return ids, mask


RECORDS = {
    "alpaca": [
        {"instruction": "Add 17 and 25.", "output": "42"},
        {"instruction": "Translate to French", "input": "good morning",
         "output": "bonjour", "system": "You translate."},
        {"instruction": "And \u00e9t\u00e9?", "output": "summer \u2600",
         "history": [["Spell cat", "c a t"], ["Reverse it", "t a c"]]},
    ],
    "sharegpt": [
        {"conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Capital of Japan?"},
            {"from": "gpt", "value": "Tokyo."},
            {"from": "human", "value": "And of \u4e2d\u56fd?"},
            {"from": "gpt", "value": "\u5317\u4eac"}]},
        {"conversations": [{"from": "user", "value": "hi"},
                           {"from": "assistant", "value": "hello"}],
         "system": "sys"},
    ],
    "belle": [
        {"instruction": "Human: 1+1?\nAssistant: 2\nHuman: times 3?\n"
                        "Assistant:", "input": "", "output": "6"},
        {"instruction": "Name a colour", "input": "", "output": "blue"},
    ],
    "moss": [
        {"meta_instruction": "You are MOSS.",
         "chat": {"turn_2": {"Human": "<|Human|>: and 5*5?<eoh>\n",
                             "MOSS": "<|MOSS|>: 25<eom>\n"},
                  "turn_1": {"Human": "<|Human|>: 2*3?<eoh>\n",
                             "Inner Thoughts": "<|Inner Thoughts|>: None<eot>\n",
                             "MOSS": "<|MOSS|>: 6<eom>\n"}}},
    ],
    "plain": [
        {"prompt": "The sky is", "response": "blue."},
    ],
}


def write_inputs(work):
    """The records of each handler as files: alpaca as a JSON array, the
    others as JSONL. Returns handler -> path."""
    paths = {}
    for handler, records in RECORDS.items():
        if handler == "alpaca":
            path = os.path.join(work, "alpaca.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(records, f, ensure_ascii=False, indent=1)
        else:
            path = os.path.join(work, handler + ".jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for r in records:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n\n")
        paths[handler] = path
    return paths
