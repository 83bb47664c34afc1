#!/usr/bin/env python3
"""Braid's tokenizers against Hugging Face's, on tokenizers trained here.

Trains, in --work, with the PyPI packages the models' own tokenizers come
from:
  - byte-level BPEs with `tokenizers` (GPT-2's pre-tokenizer; with a prefix
    space, added tokens and a "<s> $A" template; BLOOM's Split pattern), each
    saved as tokenizer.json and the first also as vocab.json + merges.txt;
  - a SentencePiece BPE with byte fallback with `sentencepiece`, set up as
    LLaMA's (identity normalization, whitespace kept, digits split).
Each is a model directory, which `braid-data tokenize` loads as
LoadModelTokenizer does. Braid's ids and decoded text are compared with:
  - tokenizers.Tokenizer (encode with and without special tokens, decode
    with and without skipping them, decode of every prefix of the ids, where
    a character's bytes are cut);
  - transformers' GPT2TokenizerFast on both directories of GPT-2's files;
  - for SentencePiece: the sentencepiece library itself (ids with the BOS,
    decode), and transformers' LlamaTokenizer, which agrees except where
    transformers 5 is known to differ: a text that starts with a space gets
    no second "▁" (it equals SentencePiece's ids of the text without that
    space), and "<s>" in a text is cut out as the BOS id.
The texts hold CJK, emoji (with joiners and flags), accents precomposed and
combining, several scripts, whitespace runs and Unicode spaces, tabs and
newlines, digits and other numbers, contractions, characters absent from
training (byte fallback), the special tokens, and random strings over an
alphabet that mixes every character class the pre-tokenizer tells apart.

  tokenizer_check.py --bin BUILD/bin --work DIR [--corpus FILE]

Exit 0 when everything agrees, 1 with one line per disagreement, 77 (skip)
when the PyPI packages are missing.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    " Hello",
    "  two  spaces   three    four",
    "trailing spaces   ",
    " ",
    "   ",
    "",
    "x",
    "tab\there\t\tand\t",
    "new\nline\n\nparagraph\r\nwindows\n",
    "\n\n\nstarts with newlines",
    "mixed \t\n whitespace \u00a0nbsp\u3000ideographic\u2028line sep\u0085nel",
    "\u001cfile sep is not whitespace\u001f",
    "don't can't won't I'm you're we've they'll he'd it's",
    "DON'T SHOUT'S 'sup 'll ''s",
    "curly don\u2019t apostrophe",
    "Numbers 12345 3.14159 1,000,000 007 2024-01-01",
    "Other numbers: \u00b2 \u00bd \u2167 \u0663\u0664 \u0e51\u0e52 \u2460",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "cafe\u0301 nai\u0308ve combining a\u0301\u0302\u0303 marks",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u4e2d\u6587\u4e5f\u53ef\u4ee5\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e\u0964",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    "emoji \U0001F600 \U0001F389\U0001F389 test",
    "family \U0001F468\u200D\U0001F469\u200D\U0001F467 flag \U0001F1EB\U0001F1F7 skin \U0001F44D\U0001F3FD",
    "rare: \U00013000 \U0001D11E \u2603 \ue000 \U0010FFFD \U00020BB7",
    "new in Unicode 16: \u1c89\u1c8a",
    "math \u2211\u222b\u221a \u2248 \u2260 \u221e",
    "punctuation!!! ??? ... --- ((nested)) [brackets] {braces} |pipes|",
    "BLOOM's set: a(b)c|d.e,f!g?h\u2026i\u3002j\uff0ck\u3001l\u0964m\u06d4n\u060co",
    "code: def f(x): return x**2  # comment\n    if x:\n\tpass",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|> spaced",
    "<s>bos in text</s> and <unk>",
    "a\u0000nul byte",
    "http://example.com/path?query=1&b=2#frag",
    "mixedCASE camelCase snake_case kebab-case",
    "a" * 300,
    "\U0001F600" * 20,
    " \u3000 \u00a0 ",
]

# Characters of every class the GPT-2 pattern and BLOOM's tell apart:
# letters of several scripts, numbers, punctuation and symbols, the
# contraction letters after an apostrophe, spaces of several kinds.
RANDOM_ALPHABET = (
    "aeimnorstdlvZQ\u00e9\u00df\u65e5\u8a9e\u0645\u03a9\u0436"
    "0123456789\u00b2\u00bd\u2167"
    ".,!?;:'\"()[]{}|-_/\\@#$%^&*+=<>~`\u2026\u3002\uff0c\u3001\u0964"
    "\u06d4\u060c\u2019\U0001F600\u0301"
    "       \t\n\r\u00a0\u3000\u2028\u0085"
)


def random_texts(seed, count, max_length):
    rng = random.Random(seed)
    return ["".join(rng.choice(RANDOM_ALPHABET)
                    for _ in range(rng.randint(1, max_length)))
            for _ in range(count)]


def training_corpus(corpus_file):
    lines = []
    if corpus_file:
        with open(corpus_file, encoding="utf-8") as f:
            lines = f.read()[:120000].splitlines()
    # Every test text a few times, so that merges span its characters (and
    # SentencePiece keeps most of them); random texts of the same alphabet.
    lines += [t for t in TEXTS if t.strip() and len(t) < 200] * 3
    # The contractions alone, often enough that "'ll" and the like are
    # merged (a contraction split in two then shows).
    lines += ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"] * 30
    lines += random_texts(1, 1500, 40)
    return [l for l in lines if l]


class Failures:
    def __init__(self):
        self.lines = []
        self.checks = 0

    def expect_equal(self, what, got, want):
        self.checks += 1
        if got != want:
            self.lines.append(f"{what}: Braid {got!r}, reference {want!r}")


class Braid:
    """braid-data tokenize on one model directory."""

    def __init__(self, bin_dir, model_dir, work):
        self.exe = os.path.join(bin_dir, "braid-data")
        self.dir = model_dir
        self.work = work

    def run(self, *args):
        r = subprocess.run([self.exe, "tokenize", "--tokenizer-dir", self.dir,
                            *args], capture_output=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"braid-data tokenize {' '.join(args)} on "
                               f"{self.dir} failed ({r.returncode}): "
                               f"{r.stderr.decode(errors='replace')}")
        return r.stdout

    def _jsonl(self, name, rows):
        path = os.path.join(self.work, name)
        with open(path, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        return path

    def encode(self, texts, special=True):
        path = self._jsonl("texts.jsonl", [{"text": t} for t in texts])
        out = self.run("--jsonl", path,
                       *([] if special else ["--no-special"]))
        lines = out.decode().split("\n")[:-1]
        assert len(lines) == len(texts), (len(lines), len(texts))
        return [[int(x) for x in line.split()] for line in lines]

    def decode(self, id_lists, skip_special=False):
        path = self._jsonl("ids.jsonl", [{"ids": ids} for ids in id_lists])
        out = self.run("--decode", "--jsonl", path,
                       *(["--skip-special"] if skip_special else []))
        lines = out.decode("utf-8").split("\n")[:-1]
        assert len(lines) == len(id_lists), (len(lines), len(id_lists))
        return [json.loads(line)["text"] for line in lines]

    def info(self):
        return self.run("--info").decode()


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)


def short(text):
    return repr(text if len(text) <= 40 else text[:40] + "...")


def check_bpe(failures, name, braid, reference, texts, hf=None):
    """Braid against tokenizers.Tokenizer `reference` (and transformers'
    tokenizer `hf` for the prompt ids and decode, when given)."""
    plain = braid.encode(texts, special=False)
    prompts = braid.encode(texts, special=True)
    want_plain = [reference.encode(t, add_special_tokens=False).ids
                  for t in texts]
    want_prompts = [reference.encode(t).ids for t in texts]
    for t, got, want in zip(texts, plain, want_plain):
        failures.expect_equal(f"{name}: ids of {short(t)}", got, want)
    for t, got, want in zip(texts, prompts, want_prompts):
        failures.expect_equal(f"{name}: prompt ids of {short(t)}", got, want)
    if hf is not None:
        for t, got in zip(texts, prompts):
            failures.expect_equal(f"{name}: prompt ids of {short(t)} "
                                  "(transformers)", got,
                                  hf(t)["input_ids"])
    # Decode the prompts with and without their special tokens, and every
    # prefix of some of them (cut characters decode to U+FFFD).
    for skip in (False, True):
        got = braid.decode(prompts, skip_special=skip)
        for t, ids, text in zip(texts, prompts, got):
            failures.expect_equal(
                f"{name}: decode of {short(t)} (skip_special_tokens={skip})",
                text, reference.decode(ids, skip_special_tokens=skip))
            if hf is not None:
                failures.expect_equal(
                    f"{name}: decode of {short(t)} (transformers, "
                    f"skip_special_tokens={skip})", text,
                    hf.decode(ids, skip_special_tokens=skip))
    prefixes = [ids[:k] for ids in plain[:60] for k in range(1, len(ids))
                if len(ids) < 40]
    got = braid.decode(prefixes)
    for ids, text in zip(prefixes, got):
        failures.expect_equal(f"{name}: decode of ids {ids}", text,
                              reference.decode(ids,
                                               skip_special_tokens=False))


def check_instruction_data(failures, args, tokenizers):
    """Each handler's records preprocessed with each tokenizer (and one of
    the templates): the token ids and the loss mask Braid writes, read back
    with a reader of the Megatron format, against instruction_reference's
    rendering of the same records."""
    import instruction_reference as iref
    work = os.path.join(args.work, "instruction")
    os.makedirs(work, exist_ok=True)
    inputs = iref.write_inputs(work)
    exe = os.path.join(args.bin, "braid-data")
    for name, flags, template, encode, bos, eos in tokenizers:
        for handler, path in inputs.items():
            prefix = os.path.join(work, f"{name}-{handler}")
            r = subprocess.run([exe, "preprocess", "--handler", handler,
                                "--input", path, "--output-prefix", prefix,
                                "--template", template, *flags],
                               capture_output=True, text=True, timeout=120)
            what = f"instruction {handler} ({name}, {template})"
            if r.returncode != 0:
                failures.expect_equal(f"{what}: exit code", r.returncode, 0)
                failures.lines[-1] += " " + r.stderr.strip()
                continue
            _, tokens = iref.read_indexed(prefix)
            mask_dtype, masks = iref.read_indexed(prefix + "_loss_mask")
            failures.expect_equal(f"{what}: the mask's dtype",
                                  np_name(mask_dtype), "uint8")
            want = [iref.render(template, *iref.conversation(handler, rec),
                                encode, bos, eos)
                    for rec in iref.RECORDS[handler]]
            failures.expect_equal(f"{what}: conversations", len(tokens),
                                  len(want))
            for k, ((ids, mask), got_ids, got_mask) in enumerate(
                    zip(want, tokens, masks)):
                failures.expect_equal(f"{what}: record {k + 1} ids",
                                      [int(t) for t in got_ids], ids)
                failures.expect_equal(f"{what}: record {k + 1} loss mask",
                                      [int(m) for m in got_mask], mask)
    # A file of another format, and a record without its answer.
    parquet = os.path.join(work, "data.parquet")
    open(parquet, "wb").close()
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"instruction": "a", "output": "b"}\n'
                '{"instruction": "c"}\n')
    for path, needles in ((parquet, ["data.parquet", "JSONL"]),
                          (bad, ["bad.jsonl", "2", "output"])):
        prefix = os.path.join(work, "refused")
        r = subprocess.run([exe, "preprocess", "--handler", "alpaca", "--input",
                            path, "--output-prefix", prefix],
                           capture_output=True, text=True, timeout=120)
        failures.expect_equal(
            f"instruction refusal of {os.path.basename(path)}",
            (r.returncode != 0, all(n in r.stderr for n in needles),
             os.path.exists(prefix + ".bin") or
             os.path.exists(prefix + "_loss_mask.bin")),
            (True, True, False))


def np_name(dtype):
    import numpy
    return numpy.dtype(dtype).name


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--corpus")
    args = parser.parse_args()
    try:
        import sentencepiece as spm
        import tokenizers
        from tokenizers import (AddedToken, Regex, Tokenizer, decoders,
                                models, pre_tokenizers, processors, trainers)
        import transformers
        transformers.logging.set_verbosity_error()
    except ImportError as e:
        print(f"tokenizer_check: skipped: {e}; install the oracles with: "
              "python3 -m pip install tokenizers transformers sentencepiece "
              "protobuf")
        return 77

    start = time.time()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    corpus = training_corpus(args.corpus)
    texts = TEXTS + random_texts(2, 60, 60)
    failures = Failures()

    def train_bpe(pre_tokenizer, vocab_size):
        """A byte-level BPE used with `pre_tokenizer`, trained without
        splitting lines: its merges span the pre-tokenizer's boundaries, so
        that a piece cut in the wrong place shows in the ids (a merge
        learned only within the pieces would not tell two pieces wrongly
        kept together from the right ones)."""
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                     use_regex=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False)
        tok.train_from_iterator(corpus, trainer)
        tok.pre_tokenizer = pre_tokenizer
        return tok

    def model_dir(name):
        path = os.path.join(args.work, name)
        os.makedirs(path)
        return path

    # GPT-2: tokenizer.json; vocab.json + merges.txt.
    gpt2 = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), 4000)
    eot = gpt2.token_to_id("<|endoftext|>")
    gpt2_json = model_dir("gpt2-json")
    gpt2.save(os.path.join(gpt2_json, "tokenizer.json"))
    gpt2_files = model_dir("gpt2-files")
    gpt2.model.save(gpt2_files)
    for d in (gpt2_json, gpt2_files):
        write_json(os.path.join(d, "config.json"),
                   {"model_type": "gpt2", "bos_token_id": eot,
                    "eos_token_id": eot})
    for d in (gpt2_json, gpt2_files):
        hf = transformers.GPT2TokenizerFast.from_pretrained(d)
        braid = Braid(args.bin, d, args.work)
        check_bpe(failures, os.path.basename(d), braid, gpt2, texts, hf)
        info = braid.info()
        failures.expect_equal(f"{os.path.basename(d)}: --info eos",
                              f"eos: {eot}" in info, True)
        failures.expect_equal(f"{os.path.basename(d)}: --info bos",
                              f"bos: {eot} (not added)" in info, True)

    # A prefix space, added tokens matched in both passes, lstrip/rstrip,
    # a non-special token with a space, and a "<s> $A" template.
    prefixed = Tokenizer.from_str(gpt2.to_str())
    prefixed.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    prefixed.add_special_tokens([
        AddedToken("<s>", special=True, normalized=False),
        AddedToken("</s>", special=True, normalized=False),
        AddedToken("[MASK]", special=True, lstrip=True, rstrip=True,
                   normalized=False),
    ])
    prefixed.add_tokens([
        AddedToken("hello world", normalized=True),
        AddedToken("zebra", normalized=False, special=False),
        AddedToken("zeb", normalized=True),
    ])
    bos = prefixed.token_to_id("<s>")
    prefixed.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                      special_tokens=[("<s>", bos)]),
    ])
    prefixed_dir = model_dir("bpe-prefix-space")
    prefixed.save(os.path.join(prefixed_dir, "tokenizer.json"))
    write_json(os.path.join(prefixed_dir, "tokenizer_config.json"),
               {"bos_token": "<s>", "eos_token": "</s>"})
    added_texts = texts + [
        "x [MASK] y", "x   [MASK]   y", "[MASK][MASK]", "a<s>b</s>c",
        "say hello world now", "zebra zeb zebras", "  [MASK]", "\t<s>",
    ]
    check_bpe(failures, "bpe-prefix-space",
              Braid(args.bin, prefixed_dir, args.work), prefixed, added_texts)
    info = Braid(args.bin, prefixed_dir, args.work).info()
    failures.expect_equal("bpe-prefix-space: --info bos",
                          f"bos: {bos} (added to prompts)" in info, True)
    failures.expect_equal("bpe-prefix-space: --info eos",
                          f"eos: {prefixed.token_to_id('</s>')}" in info, True)

    # BLOOM's pre-tokenizer: Split by its pattern, ByteLevel without regex.
    bloom = train_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(" ?[^(\\s|[.,!?…。，、।۔،])]+"),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]), 4000)
    bloom_dir = model_dir("bloom")
    bloom.save(os.path.join(bloom_dir, "tokenizer.json"))
    check_bpe(failures, "bloom", Braid(args.bin, bloom_dir, args.work), bloom,
              texts)

    # SentencePiece as LLaMA's.
    spm_prefix = os.path.join(args.work, "spm")
    with open(spm_prefix + ".txt", "w", encoding="utf-8") as f:
        f.write("\n".join(l.replace("\r", " ") for l in corpus))
    spm.SentencePieceTrainer.train(
        input=spm_prefix + ".txt", model_prefix=spm_prefix, vocab_size=1200,
        model_type="bpe", byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, character_coverage=0.995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=spm_prefix + ".model")
    llama_dir = model_dir("llama")
    shutil.copy(spm_prefix + ".model",
                os.path.join(llama_dir, "tokenizer.model"))
    write_json(os.path.join(llama_dir, "tokenizer_config.json"),
               {"tokenizer_class": "LlamaTokenizer", "legacy": True,
                "add_bos_token": True, "add_eos_token": False,
                "bos_token": "<s>", "eos_token": "</s>",
                "unk_token": "<unk>"})
    write_json(os.path.join(llama_dir, "config.json"),
               {"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2})
    braid = Braid(args.bin, llama_dir, args.work)
    llama = transformers.LlamaTokenizer.from_pretrained(llama_dir)
    prompts = braid.encode(texts)
    byte_fallbacks = 0
    for t, got in zip(texts, prompts):
        want = [1] + sp.encode(t)
        failures.expect_equal(f"llama: prompt ids of {short(t)} "
                              "(sentencepiece)", got, want)
        byte_fallbacks += sum(sp.id_to_piece(i).startswith("<0x")
                              for i in want[1:])
        if any(s in t for s in ("<s>", "</s>", "<unk>")):
            continue  # transformers cuts them out as special tokens
        if t.startswith(" ") and len(t) > 1:
            want_hf = [1] + sp.encode(t[1:])
        elif t == " ":
            continue
        else:
            want_hf = got
        failures.expect_equal(f"llama: prompt ids of {short(t)} "
                              "(transformers)", llama(t)["input_ids"],
                              want_hf)
    failures.expect_equal("llama: texts that need byte fallback",
                          byte_fallbacks > 10, True)
    plain = [ids[1:] for ids in prompts]
    for t, ids, text in zip(texts, plain, braid.decode(plain)):
        failures.expect_equal(f"llama: decode of {short(t)} (sentencepiece)",
                              text, sp.decode(ids))
        failures.expect_equal(f"llama: decode of {short(t)} (transformers)",
                              text,
                              llama.decode(ids, skip_special_tokens=True))
    failures.expect_equal("llama: decode with the BOS",
                          braid.decode([prompts[0]]), [texts[0]])
    info = braid.info()
    failures.expect_equal("llama: --info", ("bos: 1 (added to prompts)" in info,
                                            "eos: 2" in info), (True, True))

    # LLaMA's tokenizer.json (SentencePiece converted to BPE) is not a
    # byte-level BPE: tokenizer.model beside it is used.
    both_dir = model_dir("llama-both")
    llama.save_pretrained(both_dir)
    shutil.copy(spm_prefix + ".model",
                os.path.join(both_dir, "tokenizer.model"))
    both = Braid(args.bin, both_dir, args.work)
    info = both.info()
    failures.expect_equal("llama-both: falls back to tokenizer.model",
                          ("from tokenizer.model" in info,
                           "note: tokenizer.json set aside" in info),
                          (True, True))
    failures.expect_equal("llama-both: prompt ids", both.encode(texts[:10]),
                          prompts[:10])

    # Instruction data (braid-data preprocess --handler) against its
    # definition, encoded by each tokenizer's own library.
    check_instruction_data(failures, args, [
        ("byte", ["--tokenizer", "byte"], "alpaca",
         lambda t: list(t.encode("utf-8")), None, 256),
        ("llama", ["--tokenizer-dir", llama_dir], "llama2",
         lambda t: sp.encode(t), 1, 2),
        ("gpt2", ["--tokenizer-dir", gpt2_json], "plain",
         lambda t: gpt2.encode(t, add_special_tokens=False).ids, None, eot),
    ])

    # Text that is not UTF-8 round-trips through a byte-level BPE.
    raw = b"ok \xff\xfe bytes \xe6\x97 cut"
    raw_path = os.path.join(args.work, "raw.txt")
    with open(raw_path, "wb") as f:
        f.write(raw)
    ids = Braid(args.bin, gpt2_json, args.work).run(
        "--text-file", raw_path, "--no-special").decode().split()
    decoded = Braid(args.bin, gpt2_json, args.work).run(
        "--decode", "--ids", ",".join(ids))
    failures.expect_equal("gpt2-json: decode of malformed UTF-8", decoded,
                          raw.decode("utf-8", errors="replace").encode())

    # What Braid refuses, naming the field.
    for name, mutate, field in [
        ("normalizer", lambda j: j.update(normalizer={"type": "NFC"}),
         "normalizer.type"),
        ("wordpiece", lambda j: j["model"].update(type="WordPiece"),
         "model.type"),
        ("llama3-regex", lambda j: j.update(pre_tokenizer={
            "type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False,
                 "trim_offsets": True, "use_regex": False}]}),
         "pre_tokenizer.pretokenizers[0].pattern.Regex"),
    ]:
        d = model_dir("refused-" + name)
        j = json.loads(gpt2.to_str())
        mutate(j)
        write_json(os.path.join(d, "tokenizer.json"), j)
        r = subprocess.run([os.path.join(args.bin, "braid-data"), "tokenize",
                            "--tokenizer-dir", d, "--text", "x"],
                           capture_output=True, text=True)
        failures.expect_equal(f"refused {name}: exit code and field",
                              (r.returncode, field in r.stderr), (1, True))
    empty = model_dir("empty")
    r = subprocess.run([os.path.join(args.bin, "braid-data"), "tokenize",
                        "--tokenizer-dir", empty, "--text", "x"],
                       capture_output=True, text=True)
    failures.expect_equal("empty directory", (r.returncode,
                                              "holds no tokenizer" in r.stderr),
                          (1, True))
    # --ids: nothing between two commas, or nothing at all, is refused; a
    # space after a comma is not.
    for given, says in [("286,,287", "no id between two commas"),
                        ("", "--ids is empty"), ("286, 287", None)]:
        r = subprocess.run([os.path.join(args.bin, "braid-data"), "tokenize",
                            "--tokenizer-dir", gpt2_json, "--decode", "--ids",
                            given], capture_output=True, text=True)
        failures.expect_equal(f"--ids '{given}'",
                              (r.returncode != 0, says is not None and
                               says in r.stderr),
                              (says is not None, says is not None))

    if failures.lines:
        for line in failures.lines[:60]:
            print("MISMATCH " + line)
        print(f"tokenizer_check: {len(failures.lines)} of {failures.checks} "
              "checks disagree")
        return 1
    print(f"tokenizer_check: {failures.checks} checks agree with tokenizers "
          f"{tokenizers.__version__}, transformers {transformers.__version__}, "
          f"sentencepiece {spm.__version__} ({time.time() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
