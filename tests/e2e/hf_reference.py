#!/usr/bin/env python3
"""An independent numpy reference of Hugging Face transformers' causal
language models and of `generate`: the truth Braid's generation tests
compare with.

It is written from the published definitions, not from Braid, and needs
nothing but numpy:

  - safetensors files (the published layout: an 8-byte little-endian header
    length, a JSON header {name: {dtype, shape, data_offsets}} with an
    optional "__metadata__", then the data), read and written, single files
    and sharded Hugging Face directories;
  - random tiny models of three families with Hugging Face's config.json and
    parameter names and layouts (LlamaForCausalLM, GPT2LMHeadModel,
    BloomForCausalLM), and a writer of such a directory;
  - the full causal forward of each family in float64 (no KV cache: every
    position from the token ids alone), following modeling_llama.py,
    modeling_gpt2.py and modeling_bloom.py;
  - greedy search, beam search and the sampling warpers (temperature,
    top-k, top-p) of generate().

Which transformers: the forward passes follow the modeling files of 4.46
and 5.24 (the same math in both). Beam search follows, by default
(rules="scorer"), v4.36 to v4.49: `_beam_search` with `BeamSearchScorer`
and `BeamHypotheses` (v4.36 began dividing by the number of new tokens
rather than the whole length); rules="vectorized" follows the beam search
v4.50 rewrote without the scorer (transformers 5 included). The rules are
spelled out on `beam_search_details`. The warpers are those of
`logits_process.py`, unchanged over both.

Both were checked once against the releases themselves (transformers 4.46.3
and 5.24.0 under PyTorch on CPU, not needed here), each with its own rules,
on 30 random models of the three families (GQA, biases, 6-head ALiBi
included): the float32 logits were within 2e-5 of these, and 360 greedy
searches, 1800 beam searches (2 to 5 beams, length penalties -0.5 to 1.5,
early_stopping True and False, half with an eos) and 300 warped rows gave
the same tokens and probabilities in every case; each release's rules
differed from the other's in 2 of the first 360 beam searches.

Ties that torch leaves to the implementation (torch.topk and torch.sort of
equal values) are broken here by the lower index first; tests should use
models and prompts without near-ties (see `Reference.greedy_margins`).

  hf_reference.py --self-test
  hf_reference.py make --family llama|gpt2|bloom --out DIR [--seed N]
                  [--set KEY=JSON ...] [--shards N] [--dtype F32|F16|BF16|F64]
  hf_reference.py greedy DIR --prompt-ids 1,2,3 --max-new-tokens N
                  [--eos-id K]
  hf_reference.py beam DIR --prompt-ids 1,2,3 --max-new-tokens N
                  --num-beams B [--length-penalty X] [--eos-id K]
                  [--early-stopping] [--rules scorer|vectorized]
  hf_reference.py logits DIR --prompt-ids 1,2,3

`greedy` and `beam` print the prompt and completion ids, space separated;
`logits` prints the last position's logits as a JSON list.
"""

import argparse
import glob
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

# dtype name -> (numpy dtype of the stored bytes, bytes per element).
_ST_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}


def _bf16_to_f32(raw):
    """bfloat16 bit patterns (uint16) as float32: the upper half of a
    float32's bits."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values):
    """float32 values as bfloat16 bit patterns, rounded to nearest even (a
    NaN stays a quiet NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
    nan = np.isnan(values)
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16)


def _read_one_safetensors(path):
    """name -> array of one safetensors file. Floating dtypes are returned
    as float32 (F64 as float64, BF16 widened exactly); integer dtypes as
    they are. A malformed file raises ValueError naming it."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the file "
                         f"({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        np_dtype, size = _ST_DTYPES[dtype]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64))
        if begin < 0 or end < begin or base + end > len(data):
            raise ValueError(f"{path}: tensor {name}: data_offsets [{begin}, "
                             f"{end}] outside the data")
        if end - begin != count * size:
            raise ValueError(f"{path}: tensor {name}: {end - begin} bytes for "
                             f"shape {shape} of {dtype}")
        raw = np.frombuffer(data, dtype=np_dtype, count=count,
                            offset=base + begin).reshape(shape)
        if dtype == "BF16":
            arr = _bf16_to_f32(raw)
        elif dtype == "F16":
            arr = raw.astype(np.float32)
        elif dtype == "F32":
            arr = raw.astype(np.float32)  # a native-order, writable copy
        else:
            arr = raw.astype(np_dtype.newbyteorder("="))
        out[name] = arr
    return out


def read_safetensors(path):
    """dict name -> np.ndarray of a safetensors file, or of a Hugging Face
    model directory: its model.safetensors, or the shards its
    model.safetensors.index.json names ("weight_map"), or else every
    model-0000x-of-0000y.safetensors in it. F32, F16 and BF16 come back as
    float32, F64 as float64."""
    if not os.path.isdir(path):
        return _read_one_safetensors(path)
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return _read_one_safetensors(single)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(os.path.basename(p) for p in
                       glob.glob(os.path.join(path, "model-*-of-*.safetensors")))
        weight_map = None
    if not files:
        raise ValueError(f"{path}: no model.safetensors, index or shards")
    out = {}
    for name in files:
        for tensor, arr in _read_one_safetensors(os.path.join(path, name)).items():
            if tensor in out:
                raise ValueError(f"{path}: tensor {tensor} in two shards")
            if weight_map is not None and weight_map.get(tensor) != name:
                raise ValueError(f"{path}: tensor {tensor} is in {name} but the "
                                 f"index says {weight_map.get(tensor)}")
            out[tensor] = arr
    if weight_map is not None and set(weight_map) != set(out):
        missing = sorted(set(weight_map) - set(out))
        raise ValueError(f"{path}: indexed tensors missing from the shards: "
                         f"{missing[:10]}")
    return out


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Writes `tensors` (name -> array) to `path` as `dtype` (F32 by
    default; F16, BF16 and F64 for tests of loaders), names in sorted order,
    the header padded with spaces to a multiple of 8 bytes. `metadata`
    defaults to {"format": "pt"}, which transformers' loader requires."""
    if dtype not in ("F32", "F16", "BF16", "F64"):
        raise ValueError(f"write_safetensors: unsupported dtype {dtype}")
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        if dtype == "BF16":
            raw = _f32_to_bf16(arr.astype(np.float32))
        else:
            raw = arr.astype(_ST_DTYPES[dtype][0])
        blob = np.ascontiguousarray(raw).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# ---------------------------------------------------------------------------
# Configurations and parameter layouts
# ---------------------------------------------------------------------------

_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "bloom": "BloomForCausalLM",
}


def family_of(config):
    """"llama", "gpt2" or "bloom", from config.json's model_type or else its
    architectures; anything else raises ValueError."""
    model_type = config.get("model_type")
    if model_type in _ARCHITECTURES:
        return model_type
    for arch in config.get("architectures") or []:
        for family, name in _ARCHITECTURES.items():
            if arch == name:
                return family
    raise ValueError(f"not a LLaMA, GPT-2 or Bloom config: model_type "
                     f"{model_type!r}, architectures {config.get('architectures')}")


def default_config(family):
    """The tiny config.json of `family` that random_model starts from:
    hidden 64, 2 layers, 4 heads, vocabulary 97 (LLaMA with 2 kv heads)."""
    if family == "llama":
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "torch_dtype": "float32", "hidden_act": "silu",
            "hidden_size": 64, "intermediate_size": 176,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "vocab_size": 97,
            "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "rope_scaling": None,
            "attention_bias": False, "mlp_bias": False,
            "tie_word_embeddings": False, "initializer_range": 0.02,
            "bos_token_id": 1, "eos_token_id": 2,
        }
    if family == "gpt2":
        return {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "torch_dtype": "float32", "activation_function": "gelu_new",
            "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None,
            "vocab_size": 97, "n_positions": 128, "n_ctx": 128,
            "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
            "resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0,
            "scale_attn_weights": True, "tie_word_embeddings": True,
            "bos_token_id": 96, "eos_token_id": 96,
        }
    if family == "bloom":
        return {
            "architectures": ["BloomForCausalLM"], "model_type": "bloom",
            "torch_dtype": "float32", "hidden_size": 64, "n_layer": 2,
            "n_head": 4, "vocab_size": 97, "layer_norm_epsilon": 1e-5,
            "apply_residual_connection_post_layernorm": False,
            "hidden_dropout": 0.0, "attention_dropout": 0.0,
            "initializer_range": 0.02, "tie_word_embeddings": True,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
        }
    raise ValueError(f"unknown family {family!r} (llama, gpt2 or bloom)")


class _Dims:
    """The resolved sizes of a config, with the Hugging Face class defaults
    for fields the file does not state."""

    def __init__(self, config):
        try:
            self._resolve(config)
        except KeyError as e:
            raise ValueError(f"config lacks the required field {e}") from None

    def _resolve(self, config):
        c = config
        self.family = family_of(c)
        self.vocab = int(c["vocab_size"])
        if self.family == "llama":
            self.hidden = int(c["hidden_size"])
            self.layers = int(c["num_hidden_layers"])
            self.heads = int(c["num_attention_heads"])
            kv = c.get("num_key_value_heads")
            self.kv_heads = int(kv) if kv is not None else self.heads
            hd = c.get("head_dim")
            self.head_dim = int(hd) if hd is not None else self.hidden // self.heads
            self.ffn = int(c["intermediate_size"])
            self.eps = float(c.get("rms_norm_eps", 1e-6))
            self.rope_theta = float(c.get("rope_theta", 10000.0))
            self.tied = bool(c.get("tie_word_embeddings", False))
            self.attention_bias = bool(c.get("attention_bias", False))
            self.mlp_bias = bool(c.get("mlp_bias", False))
            if c.get("hidden_act", "silu") != "silu":
                raise ValueError(f"LLaMA hidden_act {c.get('hidden_act')!r}: "
                                 "only silu is modelled")
            if c.get("rope_scaling") is not None:
                raise ValueError("LLaMA rope_scaling is not modelled")
            if self.heads % self.kv_heads:
                raise ValueError(f"{self.heads} heads are not a multiple of "
                                 f"{self.kv_heads} kv heads")
            self.max_positions = int(c.get("max_position_embeddings", 2048))
        elif self.family == "gpt2":
            self.hidden = int(c["n_embd"])
            self.layers = int(c["n_layer"])
            self.heads = int(c["n_head"])
            self.kv_heads = self.heads
            self.head_dim = self.hidden // self.heads
            inner = c.get("n_inner")
            self.ffn = int(inner) if inner is not None else 4 * self.hidden
            self.eps = float(c.get("layer_norm_epsilon", 1e-5))
            self.tied = bool(c.get("tie_word_embeddings", True))
            self.activation = c.get("activation_function", "gelu_new")
            if self.activation not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
                raise ValueError(f"GPT-2 activation_function {self.activation!r} "
                                 "is not modelled")
            self.scale_attn = bool(c.get("scale_attn_weights", True))
            self.scale_by_layer = bool(c.get("scale_attn_by_inverse_layer_idx", False))
            self.max_positions = int(c["n_positions"])
        else:
            hidden = c.get("hidden_size", c.get("n_embed"))
            self.hidden = int(hidden)
            self.layers = int(c["n_layer"])
            self.heads = int(c["n_head"])
            self.kv_heads = self.heads
            self.head_dim = self.hidden // self.heads
            self.ffn = 4 * self.hidden
            self.eps = float(c.get("layer_norm_epsilon", 1e-5))
            self.tied = bool(c.get("tie_word_embeddings", True))
            self.post_ln_residual = bool(
                c.get("apply_residual_connection_post_layernorm", False))
            self.max_positions = None
        if self.head_dim * self.heads != self.hidden and self.family != "llama":
            raise ValueError(f"hidden size {self.hidden} is not a multiple of "
                             f"{self.heads} heads")


def param_shapes(config):
    """name -> shape of every parameter of the model `config` describes, as
    Hugging Face's save_pretrained names them (GPT-2 and Bloom with the
    "transformer." prefix; a tied output layer has no lm_head.weight)."""
    d = _Dims(config)
    h, f, v = d.hidden, d.ffn, d.vocab
    shapes = {}
    if d.family == "llama":
        q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
        shapes["model.embed_tokens.weight"] = (v, h)
        for i in range(d.layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (q, h)
            shapes[p + "self_attn.k_proj.weight"] = (kv, h)
            shapes[p + "self_attn.v_proj.weight"] = (kv, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, q)
            if d.attention_bias:
                shapes[p + "self_attn.q_proj.bias"] = (q,)
                shapes[p + "self_attn.k_proj.bias"] = (kv,)
                shapes[p + "self_attn.v_proj.bias"] = (kv,)
                shapes[p + "self_attn.o_proj.bias"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "mlp.gate_proj.weight"] = (f, h)
            shapes[p + "mlp.up_proj.weight"] = (f, h)
            shapes[p + "mlp.down_proj.weight"] = (h, f)
            if d.mlp_bias:
                shapes[p + "mlp.gate_proj.bias"] = (f,)
                shapes[p + "mlp.up_proj.bias"] = (f,)
                shapes[p + "mlp.down_proj.bias"] = (h,)
        shapes["model.norm.weight"] = (h,)
        if not d.tied:
            shapes["lm_head.weight"] = (v, h)
    elif d.family == "gpt2":
        shapes["transformer.wte.weight"] = (v, h)
        shapes["transformer.wpe.weight"] = (d.max_positions, h)
        for i in range(d.layers):
            p = f"transformer.h.{i}."
            shapes[p + "ln_1.weight"] = (h,)
            shapes[p + "ln_1.bias"] = (h,)
            shapes[p + "attn.c_attn.weight"] = (h, 3 * h)  # Conv1D: [in, out]
            shapes[p + "attn.c_attn.bias"] = (3 * h,)
            shapes[p + "attn.c_proj.weight"] = (h, h)
            shapes[p + "attn.c_proj.bias"] = (h,)
            shapes[p + "ln_2.weight"] = (h,)
            shapes[p + "ln_2.bias"] = (h,)
            shapes[p + "mlp.c_fc.weight"] = (h, f)
            shapes[p + "mlp.c_fc.bias"] = (f,)
            shapes[p + "mlp.c_proj.weight"] = (f, h)
            shapes[p + "mlp.c_proj.bias"] = (h,)
        shapes["transformer.ln_f.weight"] = (h,)
        shapes["transformer.ln_f.bias"] = (h,)
        if not d.tied:
            shapes["lm_head.weight"] = (v, h)
    else:
        shapes["transformer.word_embeddings.weight"] = (v, h)
        shapes["transformer.word_embeddings_layernorm.weight"] = (h,)
        shapes["transformer.word_embeddings_layernorm.bias"] = (h,)
        for i in range(d.layers):
            p = f"transformer.h.{i}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "input_layernorm.bias"] = (h,)
            # Rows per head: that head's q, then k, then v (head_dim each).
            shapes[p + "self_attention.query_key_value.weight"] = (3 * h, h)
            shapes[p + "self_attention.query_key_value.bias"] = (3 * h,)
            shapes[p + "self_attention.dense.weight"] = (h, h)
            shapes[p + "self_attention.dense.bias"] = (h,)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "post_attention_layernorm.bias"] = (h,)
            shapes[p + "mlp.dense_h_to_4h.weight"] = (f, h)
            shapes[p + "mlp.dense_h_to_4h.bias"] = (f,)
            shapes[p + "mlp.dense_4h_to_h.weight"] = (h, f)
            shapes[p + "mlp.dense_4h_to_h.bias"] = (h,)
        shapes["transformer.ln_f.weight"] = (h,)
        shapes["transformer.ln_f.bias"] = (h,)
        if not d.tied:
            shapes["lm_head.weight"] = (v, h)
    return shapes


# Initialisation gains, relative to 1/sqrt(fan-in) (see random_model).
_QK_GAIN = 2.0
_OUT_GAIN = 3.0
_EMBED_NORM_GAIN = 0.2


def random_model(family, config_overrides=None, seed=0, std=None):
    """(config.json dict, name -> float32 weights) of a random `family`
    model ("llama", "gpt2", "bloom"): default_config(family) updated with
    `config_overrides` (Hugging Face keys), weights named and shaped as
    param_shapes gives.

    The initialisation is meant for generation tests, not training: with
    N(0, 0.02) at hidden 64 the next-token distributions are nearly uniform
    and greedy output soon repeats one token, a weak test of positions and
    caches. Here a matrix with fan-in n is N(0, g/sqrt(n)), g being 1 but
    for the query and key projections (2: attention sharp enough that the
    context matters) and the attention output and MLP down projections (3:
    the layers, not the token's own embedding, dominate the residual
    stream, since a tied output layer otherwise favours repeating the last
    token). Embeddings and the output layer are N(0, 2/sqrt(hidden)), so
    logits spread by about 2; learned positions N(0, 0.1); norm weights
    1 + N(0, 0.1), Bloom's embedding norm 0.2 (1 + N(0, 0.1)) for the same
    reason as the gain of 3; biases N(0, 0.05). `std`, when given, replaces
    every matrix's standard deviation."""
    config = default_config(family)
    overrides = dict(config_overrides or {})
    if family == "gpt2" and "vocab_size" in overrides:
        # GPT-2's bos and eos are its last token.
        for key in ("bos_token_id", "eos_token_id"):
            overrides.setdefault(key, int(overrides["vocab_size"]) - 1)
    config.update(overrides)
    if family_of(config) != family:
        raise ValueError(f"overrides change the family of {family}")
    d = _Dims(config)
    rng = np.random.default_rng(seed)
    weights = {}
    emb_std = 2.0 / math.sqrt(d.hidden)
    out_names = ("self_attn.o_proj.", "mlp.down_proj.", "attn.c_proj.",
                 "mlp.c_proj.", "self_attention.dense.", "mlp.dense_4h_to_h.")
    for name, shape in param_shapes(config).items():
        if len(shape) == 1:
            if "norm" in name or "ln_" in name:
                if name.endswith(".weight"):
                    values = 1.0 + 0.1 * rng.standard_normal(shape)
                    if "word_embeddings_layernorm" in name:
                        values *= _EMBED_NORM_GAIN
                else:
                    values = 0.05 * rng.standard_normal(shape)
            else:
                values = 0.05 * rng.standard_normal(shape)
            weights[name] = values.astype(np.float32)
            continue
        values = rng.standard_normal(shape)
        if std is not None:
            values *= std
        elif name.endswith("wpe.weight"):
            values *= 0.1
        elif "embed_tokens" in name or "wte" in name or \
                "word_embeddings" in name or "lm_head" in name:
            values *= emb_std
        else:
            fan_in = shape[0] if family == "gpt2" else shape[1]  # Conv1D: [in, out]
            gain = np.ones(shape)
            if any(n in name for n in out_names):
                gain[...] = _OUT_GAIN
            elif "q_proj" in name or "k_proj" in name:
                gain[...] = _QK_GAIN
            elif "c_attn" in name:  # columns [q | k | v]
                gain[:, :2 * d.hidden] = _QK_GAIN
            elif "query_key_value" in name:  # rows per head [q; k; v]
                per_head = gain.reshape(d.heads, 3, d.head_dim, shape[1])
                per_head[:, :2] = _QK_GAIN
            values *= gain / math.sqrt(fan_in)
        weights[name] = values.astype(np.float32)
    return config, weights


def save_hf_dir(directory, config, weights, shards=1, dtype="F32"):
    """Writes a Hugging Face model directory: config.json (keys sorted,
    2-space indent) and model.safetensors, or with `shards` > 1 the files
    model-0000i-of-0000n.safetensors and model.safetensors.index.json (the
    tensors dealt out in name order)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(weights)
    if shards <= 1:
        write_safetensors(os.path.join(directory, "model.safetensors"),
                          weights, dtype=dtype)
        return
    weight_map = {}
    total = 0
    for i in range(shards):
        part = names[i * len(names) // shards:(i + 1) * len(names) // shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(directory, file),
                          {n: weights[n] for n in part}, dtype=dtype)
        for n in part:
            weight_map[n] = file
            total += int(np.asarray(weights[n]).size) * (
                2 if dtype in ("F16", "BF16") else 8 if dtype == "F64" else 4)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
                  f, indent=2, sort_keys=True)


def load_hf_dir(directory):
    """(config dict, weights) of a Hugging Face model directory."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    return config, read_safetensors(directory)


# ---------------------------------------------------------------------------
# Building blocks, as the modeling files define them
# ---------------------------------------------------------------------------


def rms_norm(x, weight, eps):
    """LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def layer_norm(x, weight, bias, eps):
    """torch.nn.LayerNorm: biased variance, eps inside the square root."""
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu_tanh(x):
    """GPT-2's gelu_new (= gelu_pytorch_tanh):
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) *
                                    (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    """The exact GELU: 0.5 x (1 + erf(x / sqrt(2)))."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def bloom_gelu(x):
    """modeling_bloom's bloom_gelu_forward, with its literal constant:
    x * 0.5 * (1 + tanh(0.79788456 * x * (1 + 0.044715 * x * x)))."""
    return x * 0.5 * (1.0 + np.tanh(0.79788456 * x * (1.0 + 0.044715 * x * x)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def rope_cos_sin(positions, head_dim, theta):
    """LlamaRotaryEmbedding: inv_freq[i] = theta^(-2i/d) for i < d/2, the
    angles pos * inv_freq repeated as [freqs, freqs] over the head; returns
    (cos, sin), each [len(positions), head_dim]."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def rotate_half(x):
    """[-x2, x1] for x = [x1, x2] split in halves along the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, cos, sin):
    """x * cos + rotate_half(x) * sin, x [seq, heads, head_dim] and cos, sin
    [seq, head_dim]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def alibi_slopes(num_heads):
    """modeling_bloom's build_alibi_tensor slopes: for the largest power of
    two n <= num_heads, base = 2^(-2^-(log2(n) - 3)) = 2^(-8/n) and slopes
    base^1..base^n; the remaining heads take the odd powers 1, 3, 5, ... of
    the base for 2n (2^(-4/n)), as many as remain (at most n)."""
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** p for p in range(1, closest + 1)]
    if closest != num_heads:
        extra_base = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, num_heads - closest)
        slopes += [extra_base ** p for p in range(1, 1 + 2 * remaining, 2)]
    return np.array(slopes, dtype=np.float64)


def causal_attention(q, k, v, scale, bias=None):
    """softmax(q k^T * scale + bias, causal) v for q, k, v [seq, heads, d]
    (k, v with the query's number of heads); bias broadcasts to
    [heads, seq_q, seq_k]. Returns [seq, heads * d]."""
    s = q.shape[0]
    scores = np.einsum("qhd,khd->hqk", q, k) * scale
    if bias is not None:
        scores = scores + bias
    future = np.triu(np.ones((s, s), dtype=bool), k=1)
    scores = np.where(future[None, :, :], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hqk,khd->qhd", probs, v)
    return out.reshape(s, -1)


# ---------------------------------------------------------------------------
# The models
# ---------------------------------------------------------------------------

# Buffers Hugging Face checkpoints may hold besides parameters.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


class Reference:
    """The model of a Hugging Face config.json and its weights (names as
    save_pretrained writes them; GPT-2 and Bloom also without the
    "transformer." prefix of older checkpoints), computed in float64.

    Every expected parameter must be present with its shape; unknown
    tensors are refused, except the buffers HF checkpoints carry (RoPE
    inv_freq, GPT-2's attn.bias / attn.masked_bias) and, for a tied model,
    an lm_head.weight equal to the embedding."""

    def __init__(self, config, weights):
        self.config = dict(config)
        self.dims = _Dims(self.config)
        self.family = self.dims.family
        expected = param_shapes(self.config)
        prefixed = self.family in ("gpt2", "bloom")
        w = {}
        for name, arr in weights.items():
            key = name
            if prefixed and not key.startswith("transformer.") and \
                    not key.startswith("lm_head."):
                key = "transformer." + key
            if key in w:
                raise ValueError(f"tensor {name} given twice (with and without "
                                 "the transformer. prefix)")
            w[key] = np.asarray(arr)
        problems = []
        for name, shape in expected.items():
            if name not in w:
                problems.append(f"missing {name}")
            elif tuple(w[name].shape) != tuple(shape):
                problems.append(f"{name} has shape {list(w[name].shape)}, "
                                f"expected {list(shape)}")
        embed_name = {"llama": "model.embed_tokens.weight",
                      "gpt2": "transformer.wte.weight",
                      "bloom": "transformer.word_embeddings.weight"}[self.family]
        for name in w:
            if name in expected or name.endswith(_IGNORED_SUFFIXES):
                continue
            if name == "lm_head.weight" and self.dims.tied and embed_name in w \
                    and np.array_equal(w[name], w[embed_name]):
                continue
            problems.append(f"unexpected tensor {name}")
        if problems:
            raise ValueError("weights do not fit the config: " + "; ".join(problems))
        self.w = {n: w[n].astype(np.float64) for n in expected}
        self.embed_name = embed_name
        self._cache = {}

    @property
    def vocab_size(self):
        return self.dims.vocab

    def _check_ids(self, ids):
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("no token ids")
        bad = [t for t in ids if not 0 <= t < self.dims.vocab]
        if bad:
            raise ValueError(f"token ids {bad[:5]} outside the vocabulary of "
                             f"{self.dims.vocab}")
        if self.family == "gpt2" and len(ids) > self.dims.max_positions:
            raise ValueError(f"{len(ids)} tokens exceed n_positions "
                             f"{self.dims.max_positions}")
        return ids

    def _lm_head(self):
        if self.dims.tied:
            return self.w[self.embed_name]
        return self.w["lm_head.weight"]

    def logits(self, ids):
        """[len(ids), vocab_size] float64 logits of the full causal forward
        of `ids` (no cache), position i seeing tokens 0..i."""
        ids = self._check_ids(ids)
        if self.family == "llama":
            x = self._llama(ids)
        elif self.family == "gpt2":
            x = self._gpt2(ids)
        else:
            x = self._bloom(ids)
        return x @ self._lm_head().T

    def _llama(self, ids):
        d, w = self.dims, self.w
        x = w["model.embed_tokens.weight"][ids]
        cos, sin = rope_cos_sin(range(len(ids)), d.head_dim, d.rope_theta)
        rep = d.heads // d.kv_heads
        s = len(ids)

        def linear(p, a):
            out = a @ w[p + ".weight"].T
            b = w.get(p + ".bias")
            return out if b is None else out + b

        for i in range(d.layers):
            p = f"model.layers.{i}."
            a = rms_norm(x, w[p + "input_layernorm.weight"], d.eps)
            q = linear(p + "self_attn.q_proj", a).reshape(s, d.heads, d.head_dim)
            k = linear(p + "self_attn.k_proj", a).reshape(s, d.kv_heads, d.head_dim)
            v = linear(p + "self_attn.v_proj", a).reshape(s, d.kv_heads, d.head_dim)
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
            # repeat_kv: query head j reads kv head j // rep.
            k = np.repeat(k, rep, axis=1)
            v = np.repeat(v, rep, axis=1)
            o = causal_attention(q, k, v, 1.0 / math.sqrt(d.head_dim))
            x = x + linear(p + "self_attn.o_proj", o)
            m = rms_norm(x, w[p + "post_attention_layernorm.weight"], d.eps)
            gate = linear(p + "mlp.gate_proj", m)
            up = linear(p + "mlp.up_proj", m)
            x = x + linear(p + "mlp.down_proj", silu(gate) * up)
        return rms_norm(x, w["model.norm.weight"], d.eps)

    def _gpt2(self, ids):
        d, w = self.dims, self.w
        s = len(ids)
        x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:s]
        act = gelu_erf if d.activation == "gelu" else gelu_tanh
        for i in range(d.layers):
            p = f"transformer.h.{i}."
            a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], d.eps)
            qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = (t.reshape(s, d.heads, d.head_dim)
                       for t in np.split(qkv, 3, axis=-1))
            scale = 1.0 / math.sqrt(d.head_dim) if d.scale_attn else 1.0
            if d.scale_by_layer:
                scale /= float(i + 1)
            o = causal_attention(q, k, v, scale)
            x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], d.eps)
            hmid = act(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            x = x + hmid @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        return layer_norm(x, w["transformer.ln_f.weight"],
                          w["transformer.ln_f.bias"], d.eps)

    def _bloom(self, ids):
        d, w = self.dims, self.w
        s = len(ids)
        x = w["transformer.word_embeddings.weight"][ids]
        x = layer_norm(x, w["transformer.word_embeddings_layernorm.weight"],
                       w["transformer.word_embeddings_layernorm.bias"], d.eps)
        # build_alibi_tensor: slope * key position (the cumulative attention
        # mask minus one), added to every query's row of scores.
        bias = alibi_slopes(d.heads)[:, None, None] * np.arange(s, dtype=np.float64)[None, None, :]
        for i in range(d.layers):
            p = f"transformer.h.{i}."
            a = layer_norm(x, w[p + "input_layernorm.weight"],
                           w[p + "input_layernorm.bias"], d.eps)
            residual = a if d.post_ln_residual else x
            fused = a @ w[p + "self_attention.query_key_value.weight"].T + \
                w[p + "self_attention.query_key_value.bias"]
            fused = fused.reshape(s, d.heads, 3, d.head_dim)
            q, k, v = fused[:, :, 0, :], fused[:, :, 1, :], fused[:, :, 2, :]
            o = causal_attention(q, k, v, 1.0 / math.sqrt(d.head_dim), bias)
            attn = o @ w[p + "self_attention.dense.weight"].T + \
                w[p + "self_attention.dense.bias"] + residual
            m = layer_norm(attn, w[p + "post_attention_layernorm.weight"],
                           w[p + "post_attention_layernorm.bias"], d.eps)
            residual = m if d.post_ln_residual else attn
            hmid = bloom_gelu(m @ w[p + "mlp.dense_h_to_4h.weight"].T +
                              w[p + "mlp.dense_h_to_4h.bias"])
            x = hmid @ w[p + "mlp.dense_4h_to_h.weight"].T + \
                w[p + "mlp.dense_4h_to_h.bias"] + residual
        return layer_norm(x, w["transformer.ln_f.weight"],
                          w["transformer.ln_f.bias"], d.eps)

    def next_logits(self, ids):
        """The last position's logits for `ids` (memoised by the ids)."""
        key = tuple(int(t) for t in ids)
        row = self._cache.get(key)
        if row is None:
            row = self.logits(key)[-1]
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = row
        return row

    # -- generation ---------------------------------------------------------

    def greedy(self, prompt, max_new_tokens, eos_id=None):
        """generate(do_sample=False, num_beams=1): the new tokens only."""
        return greedy_search(self.next_logits, prompt, max_new_tokens, eos_id)

    def greedy_margins(self, prompt, max_new_tokens, eos_id=None):
        """(new tokens, per step the gap between the largest and second
        largest logit): a test comparing float32 output with this float64
        truth wants every gap well above the round-off."""
        tokens = self.greedy(prompt, max_new_tokens, eos_id)
        ids = list(prompt)
        margins = []
        for t in tokens:
            row = np.sort(self.next_logits(ids))
            margins.append(float(row[-1] - row[-2]))
            ids.append(t)
        return tokens, margins

    def beam_search(self, prompt, num_beams, max_new_tokens, length_penalty=1.0,
                    eos_id=None, early_stopping=False, rules="scorer"):
        """generate(num_beams=num_beams, do_sample=False): the new tokens of
        the best hypothesis (ending with eos_id when it finished with it).
        num_beams 1 is greedy search, as generate() decides; the rules are
        those of beam_search_details."""
        if num_beams == 1:
            return self.greedy(prompt, max_new_tokens, eos_id)
        return beam_search_details(self.next_logits, prompt, num_beams,
                                   max_new_tokens, length_penalty, eos_id,
                                   early_stopping, rules)["tokens"]

    def beam_search_details(self, prompt, num_beams, max_new_tokens,
                            length_penalty=1.0, eos_id=None, early_stopping=False,
                            rules="scorer"):
        """beam_search_details(self.next_logits, ...)."""
        return beam_search_details(self.next_logits, prompt, num_beams,
                                   max_new_tokens, length_penalty, eos_id,
                                   early_stopping, rules)

    def next_token_probs(self, ids, temperature=1.0, top_k=0, top_p=1.0):
        """The sampling distribution of the token after `ids`:
        warp_probs of its logits."""
        return warp_probs(self.next_logits(ids), temperature, top_k, top_p)

    @staticmethod
    def warp_probs(logits_row, temperature=1.0, top_k=0, top_p=1.0):
        """The module's warp_probs."""
        return warp_probs(logits_row, temperature, top_k, top_p)


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------


def _check_generation_args(prompt, max_new_tokens):
    if not prompt:
        raise ValueError("an empty prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens {max_new_tokens}: must be at least 1")


def greedy_search(next_logits, prompt, max_new_tokens, eos_id=None):
    """HF greedy search over `next_logits(ids) -> logits row`: append the
    argmax (the first index among equals, as torch.argmax) until
    max_new_tokens are generated or eos_id is (it is included). No logits
    processors: the default GenerationConfig adds none (min_length 0, no
    repetition penalty). Returns the new tokens."""
    _check_generation_args(prompt, max_new_tokens)
    ids = list(prompt)
    new = []
    for _ in range(max_new_tokens):
        token = int(np.argmax(next_logits(ids)))
        ids.append(token)
        new.append(token)
        if eos_id is not None and token == eos_id:
            break
    return new


class _Hypotheses:
    """BeamHypotheses: the best `num_beams` finished hypotheses."""

    def __init__(self, num_beams, length_penalty, early_stopping):
        self.num_beams = num_beams
        self.length_penalty = length_penalty
        self.early_stopping = early_stopping
        # (score, token list, finished on eos), in the order added.
        self.beams = []
        self.worst_score = 1e9

    def add(self, tokens, sum_logprobs, generated_len, on_eos):
        score = sum_logprobs / (generated_len ** self.length_penalty)
        if len(self.beams) < self.num_beams or score > self.worst_score:
            self.beams.append((score, list(tokens), on_eos))
            if len(self.beams) > self.num_beams:
                ranked = sorted((s, i) for i, (s, _, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)

    def is_done(self, best_sum_logprobs, generated_len):
        if len(self.beams) < self.num_beams:
            return False
        if self.early_stopping is True:
            return True
        if self.early_stopping is False:
            best = best_sum_logprobs / generated_len ** self.length_penalty
            return self.worst_score >= best
        raise ValueError(f"early_stopping {self.early_stopping!r}: only True "
                         "and False are modelled")


BEAM_RULES = ("scorer", "vectorized")


def beam_search_details(next_logits, prompt, num_beams, max_new_tokens,
                        length_penalty=1.0, eos_id=None, early_stopping=False,
                        rules="scorer"):
    """Beam search over `next_logits(ids) -> logits row`, batch 1, no logits
    processors, num_beam_groups 1, num_return_sequences 1. Returns
    {"tokens": the new tokens of the best hypothesis, "score": its score,
    "hypotheses": [(score, new tokens)] best first, "steps": the number of
    tokens generated before the search stopped}.

    rules "scorer" (the default) is transformers v4.36 to v4.49:
    `_beam_search` with `BeamSearchScorer` and `BeamHypotheses`:
      1. Beams start as num_beams copies of the prompt with running scores
         [0, -1e9, -1e9, ...], so the first step expands beam 0 alone.
      2. Each step, for every beam, log_softmax(logits) + the beam's score;
         the 2 * num_beams best of the num_beams * vocab candidates (one eos
         id: max(2, 1 + number of eos ids) * num_beams), best first, ties to
         the lower beam then lower token.
      3. Walking them in that order: a candidate whose token is eos_id is,
         when its rank is below num_beams (else skipped), a finished
         hypothesis: its tokens are the beam's (without the eos, which the
         output appends), its score the candidate's summed log-probs
         divided by generated_len ** length_penalty, generated_len being
         (beam length + 1) - prompt length, i.e. the number of new tokens
         counting the eos. Other candidates become the next beams until
         there are num_beams of them.
      4. Finished hypotheses are kept as BeamHypotheses does: added while
         fewer than num_beams or better than the worst kept; the worst is
         dropped when there are num_beams + 1.
      5. After each step, done when num_beams hypotheses are kept and
         early_stopping is True, or (early_stopping False) when the worst
         kept score >= the step's best candidate score (rank 0 of rule 2,
         eos or not) / generated_len ** length_penalty. Search stops when
         done or when the beams reach prompt + max_new_tokens tokens.
      6. finalize: unless done, every open beam is added (rule 4) with its
         running score and generated_len = its new-token count.
      7. The best is the last of the kept hypotheses sorted by score (a
         stable sort: among equal scores, the one added last); one that
         finished on eos gets eos_id appended.
    Releases before v4.36 divided by the whole sequence's length, prompt
    included (and without the eos); that is not modelled.

    rules "vectorized" is the beam search of v4.50 on (transformers 5
    included), rewritten without BeamSearchScorer. It differs in two
    places:
      5'. the early-stopping bound divides the best *running* beam's score
         after the step (the best candidate that is not eos), not the best
         candidate's, so it can stop a step earlier;
      6'. at the last step every candidate of rank below num_beams, eos or
         not, is finished there (the length limit stops it), instead of
         finalize adding the open beams; the best hypothesis is the same,
         the others may differ.
    early_stopping "never" is modelled by neither."""
    _check_generation_args(prompt, max_new_tokens)
    if num_beams < 1:
        raise ValueError(f"num_beams {num_beams}: must be at least 1")
    if rules not in BEAM_RULES:
        raise ValueError(f"rules {rules!r}: one of {BEAM_RULES}")
    prompt = [int(t) for t in prompt]
    prompt_len = len(prompt)
    max_length = prompt_len + max_new_tokens
    eos = [] if eos_id is None else [int(eos_id)]
    hyps = _Hypotheses(num_beams, length_penalty, early_stopping)
    beams = [list(prompt) for _ in range(num_beams)]
    scores = np.array([0.0] + [-1e9] * (num_beams - 1))
    done = False
    steps = 0
    while len(beams[0]) < max_length:
        rows = np.stack([log_softmax(np.asarray(next_logits(b), dtype=np.float64))
                         for b in beams])
        vocab = rows.shape[1]
        flat = (rows + scores[:, None]).reshape(-1)
        k = max(2, 1 + len(eos)) * num_beams
        order = np.argsort(-flat, kind="stable")[:k]
        cand_len = len(beams[0]) + 1
        steps += 1
        if rules == "vectorized" and cand_len == max_length:
            for index in order[:num_beams]:
                beam, token = divmod(int(index), vocab)
                on_eos = token in eos
                tokens = beams[beam] + ([] if on_eos else [token])
                hyps.add(tokens, float(flat[index]), cand_len - prompt_len, on_eos)
            done = True
            break
        next_beams = []
        for rank, index in enumerate(order):
            beam, token = divmod(int(index), vocab)
            score = float(flat[index])
            if token in eos:
                if rank >= num_beams:
                    continue
                hyps.add(beams[beam], score, cand_len - prompt_len, True)
            else:
                next_beams.append((score, token, beam))
            if len(next_beams) == num_beams:
                break
        bound = flat[order[0]] if rules == "scorer" else next_beams[0][0]
        done = hyps.is_done(float(bound), cand_len - prompt_len)
        beams = [beams[b] + [t] for _, t, b in next_beams]
        scores = np.array([s for s, _, _ in next_beams])
        if done:
            break
    if not done:
        for b, s in zip(beams, scores):
            hyps.add(b, float(s), len(b) - prompt_len, False)
    ranked = sorted(hyps.beams, key=lambda x: x[0])
    out = []
    for score, tokens, on_eos in reversed(ranked):
        new = tokens[prompt_len:]
        if on_eos:
            new = new + eos[:1]
        out.append((score, new))
    return {"tokens": out[0][1], "score": out[0][0], "hypotheses": out,
            "steps": steps}


def warp_probs(logits_row, temperature=1.0, top_k=0, top_p=1.0,
               min_tokens_to_keep=1):
    """The sampling distribution generate(do_sample=True) draws from, given
    one row of logits: HF's warpers in HF's order, then softmax.

      - TemperatureLogitsWarper (temperature != 1.0; must be > 0): logits /
        temperature.
      - TopKLogitsWarper (top_k not 0 or None): k = min(max(top_k,
        min_tokens_to_keep), vocab); tokens whose logit is below the k-th
        largest are removed (so ties with the k-th are kept).
      - TopPLogitsWarper (top_p < 1.0; 0 <= top_p <= 1): sort ascending,
        cumulative softmax; remove those whose cumulative probability is
        <= 1 - top_p, but never the min_tokens_to_keep largest: the smallest
        set of most probable tokens whose probability reaches top_p stays.
      - Removed tokens get -inf, i.e. probability 0.

    Note HF's GenerationConfig defaults top_k to 50: pass what the compared
    generate() call used. min_tokens_to_keep is 1 for sampling (num_beams
    1). Returns float64 probabilities summing to 1."""
    scores = np.array(logits_row, dtype=np.float64).reshape(-1)
    if temperature is not None and temperature != 1.0:
        if not temperature > 0:
            raise ValueError(f"temperature {temperature}: must be > 0")
        scores = scores / float(temperature)
    if top_k is not None and top_k != 0:
        if top_k < 0:
            raise ValueError(f"top_k {top_k}: must be positive")
        k = min(max(int(top_k), min_tokens_to_keep), scores.size)
        kth = np.sort(scores)[::-1][k - 1]
        scores = np.where(scores < kth, -np.inf, scores)
    if top_p is not None and top_p < 1.0:
        if top_p < 0:
            raise ValueError(f"top_p {top_p}: must be in [0, 1]")
        order = np.argsort(scores, kind="stable")
        cumulative = np.cumsum(softmax(scores[order]))
        remove_sorted = cumulative <= (1.0 - top_p)
        remove_sorted[-min_tokens_to_keep:] = False
        remove = np.zeros(scores.size, dtype=bool)
        remove[order] = remove_sorted
        scores = np.where(remove, -np.inf, scores)
    return softmax(scores)


# ---------------------------------------------------------------------------
# Self-test: properties of the definitions, not of any implementation
# ---------------------------------------------------------------------------


def _scalar_logits(config, weights, ids):
    """The logits of the last position, from the definitions again but one
    scalar at a time, with every layout spelled out as an index: a check of
    the vectorised forward's reshapes (heads, fused projections, Conv1D,
    GQA groups, RoPE pairs, ALiBi). For tiny models only."""
    d = _Dims(config)
    W = {n: np.asarray(v, dtype=np.float64).tolist() for n, v in weights.items()}
    hd, nh = d.head_dim, d.heads

    def linear(name, x):  # torch Linear: weight [out, in]
        out = [sum(r[i] * x[i] for i in range(len(x))) for r in W[name + ".weight"]]
        if name + ".bias" in W:
            out = [o + b for o, b in zip(out, W[name + ".bias"])]
        return out

    def conv1d(name, x):  # GPT-2 Conv1D: weight [in, out]
        w = W[name + ".weight"]
        return [sum(x[i] * w[i][o] for i in range(len(x))) + W[name + ".bias"][o]
                for o in range(len(w[0]))]

    def lnorm(x, name):
        mean = sum(x) / len(x)
        var = sum((v - mean) ** 2 for v in x) / len(x)
        return [(v - mean) / math.sqrt(var + d.eps) * g + b
                for v, g, b in zip(x, W[name + ".weight"], W[name + ".bias"])]

    def rmsn(x, name):
        r = math.sqrt(sum(v * v for v in x) / len(x) + d.eps)
        return [v / r * g for v, g in zip(x, W[name])]

    def add(a, b):
        return [u + v for u, v in zip(a, b)]

    def attend(t, q, k, v, kv_of, bias):
        """Position t's output: head n attends to positions 0..t of kv head
        kv_of(n); q(t, n, i), k(j, g, i), v(j, g, i) give the elements."""
        out = []
        for n in range(nh):
            g = kv_of(n)
            sc = [sum(q(t, n, i) * k(j, g, i) for i in range(hd)) / math.sqrt(hd)
                  + bias(n, t, j) for j in range(t + 1)]
            m = max(sc)
            e = [math.exp(x - m) for x in sc]
            z = sum(e)
            out += [sum(e[j] / z * v(j, g, i) for j in range(t + 1))
                    for i in range(hd)]
        return out

    T = len(ids)
    no_bias = lambda n, t, j: 0.0
    if d.family == "llama":
        xs = [list(W["model.embed_tokens.weight"][t]) for t in ids]
        group = nh // d.kv_heads

        def rope(vec, pos, heads):
            out = list(vec)
            for n in range(heads):
                for i in range(hd // 2):
                    ang = pos * d.rope_theta ** (-2.0 * i / hd)
                    a, b = vec[n * hd + i], vec[n * hd + i + hd // 2]
                    out[n * hd + i] = a * math.cos(ang) - b * math.sin(ang)
                    out[n * hd + i + hd // 2] = b * math.cos(ang) + a * math.sin(ang)
            return out

        for l in range(d.layers):
            p = f"model.layers.{l}."
            a = [rmsn(x, p + "input_layernorm.weight") for x in xs]
            Q = [rope(linear(p + "self_attn.q_proj", a[t]), t, nh) for t in range(T)]
            K = [rope(linear(p + "self_attn.k_proj", a[t]), t, d.kv_heads)
                 for t in range(T)]
            V = [linear(p + "self_attn.v_proj", a[t]) for t in range(T)]
            o = [attend(t, lambda t, n, i: Q[t][n * hd + i],
                        lambda j, g, i: K[j][g * hd + i],
                        lambda j, g, i: V[j][g * hd + i],
                        lambda n: n // group, no_bias) for t in range(T)]
            xs = [add(xs[t], linear(p + "self_attn.o_proj", o[t])) for t in range(T)]
            for t in range(T):
                m = rmsn(xs[t], p + "post_attention_layernorm.weight")
                gate = linear(p + "mlp.gate_proj", m)
                up = linear(p + "mlp.up_proj", m)
                act = [g / (1 + math.exp(-g)) * u for g, u in zip(gate, up)]
                xs[t] = add(xs[t], linear(p + "mlp.down_proj", act))
        x = rmsn(xs[-1], "model.norm.weight")
        head = W["model.embed_tokens.weight" if d.tied else "lm_head.weight"]
    elif d.family == "gpt2":
        xs = [add(W["transformer.wte.weight"][tok], W["transformer.wpe.weight"][t])
              for t, tok in enumerate(ids)]
        h = d.hidden
        for l in range(d.layers):
            p = f"transformer.h.{l}."
            QKV = [conv1d(p + "attn.c_attn", lnorm(x, p + "ln_1")) for x in xs]
            o = [attend(t, lambda t, n, i: QKV[t][n * hd + i],
                        lambda j, g, i: QKV[j][h + g * hd + i],
                        lambda j, g, i: QKV[j][2 * h + g * hd + i],
                        lambda n: n, no_bias) for t in range(T)]
            xs = [add(xs[t], conv1d(p + "attn.c_proj", o[t])) for t in range(T)]
            for t in range(T):
                f = conv1d(p + "mlp.c_fc", lnorm(xs[t], p + "ln_2"))
                f = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) *
                                               (v + 0.044715 * v ** 3))) for v in f]
                xs[t] = add(xs[t], conv1d(p + "mlp.c_proj", f))
        x = lnorm(xs[-1], "transformer.ln_f")
        head = W["transformer.wte.weight"]
    else:
        # 3 heads: 2^-4, 2^-8 (2 heads' slopes), then 2^-2 (4 heads' first).
        slopes = {3: [2.0 ** -4, 2.0 ** -8, 2.0 ** -2]}[nh]
        xs = [lnorm(W["transformer.word_embeddings.weight"][tok],
                    "transformer.word_embeddings_layernorm") for tok in ids]
        for l in range(d.layers):
            p = f"transformer.h.{l}."
            a = [lnorm(x, p + "input_layernorm") for x in xs]
            F = [linear(p + "self_attention.query_key_value", y) for y in a]
            # Head n's rows: q at 3n*hd, k at (3n+1)*hd, v at (3n+2)*hd.
            o = [attend(t, lambda t, n, i: F[t][3 * n * hd + i],
                        lambda j, g, i: F[j][(3 * g + 1) * hd + i],
                        lambda j, g, i: F[j][(3 * g + 2) * hd + i],
                        lambda n: n,
                        # ALiBi in its relative form: softmax ignores the
                        # per-query shift of HF's slope * key position.
                        lambda n, t, j: slopes[n] * (j - t)) for t in range(T)]
            xs = [add(xs[t], linear(p + "self_attention.dense", o[t]))
                  for t in range(T)]
            for t in range(T):
                f = linear(p + "mlp.dense_h_to_4h",
                           lnorm(xs[t], p + "post_attention_layernorm"))
                f = [v * 0.5 * (1 + math.tanh(0.79788456 * v * (1 + 0.044715 * v * v)))
                     for v in f]
                xs[t] = add(xs[t], linear(p + "mlp.dense_4h_to_h", f))
        x = lnorm(xs[-1], "transformer.ln_f")
        head = W["transformer.word_embeddings.weight"]
    return np.array([sum(r[i] * x[i] for i in range(len(x))) for r in head])


def _self_test():
    start = time.time()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print(f"FAIL: {what}")

    rng = np.random.default_rng(1234)

    # RoPE: <R(m) q, R(n) k> depends on m - n only.
    hd = 16
    q = rng.standard_normal((1, 1, hd))
    k = rng.standard_normal((1, 1, hd))

    def rope_dot(m, n):
        cm, sm = rope_cos_sin([m], hd, 10000.0)
        cn, sn = rope_cos_sin([n], hd, 10000.0)
        return float(np.sum(apply_rope(q, cm, sm) * apply_rope(k, cn, sn)))

    for m, n, t in [(5, 2, 7), (0, 0, 31), (9, 3, 100), (3, 9, 40)]:
        check(abs(rope_dot(m, n) - rope_dot(m + t, n + t)) < 1e-9,
              f"RoPE dot of positions ({m},{n}) and shifted by {t}")
    check(abs(rope_dot(4, 1) - rope_dot(1, 4)) > 1e-6,
          "RoPE dot distinguishes +3 from -3")
    # A rotation keeps the norm; position 0 is the identity.
    c5, s5 = rope_cos_sin([5], hd, 10000.0)
    check(abs(np.linalg.norm(apply_rope(q, c5, s5)) - np.linalg.norm(q)) < 1e-12,
          "RoPE keeps the norm")
    c0, s0 = rope_cos_sin([0], hd, 10000.0)
    check(np.allclose(apply_rope(q, c0, s0), q), "RoPE at position 0 is identity")
    # The halves layout: dimension i pairs with i + d/2 at frequency
    # theta^(-2i/d); check one pair by hand.
    x = np.zeros((1, 1, hd))
    x[0, 0, 1] = 1.0
    c3, s3 = rope_cos_sin([3], hd, 10000.0)
    rot = apply_rope(x, c3, s3)[0, 0]
    ang = 3 * 10000.0 ** (-2.0 / hd)
    check(abs(rot[1] - math.cos(ang)) < 1e-12 and
          abs(rot[1 + hd // 2] - math.sin(ang)) < 1e-12 and
          abs(np.sum(np.abs(rot)) - abs(math.cos(ang)) - abs(math.sin(ang))) < 1e-12,
          "RoPE rotates dimension 1 into 1 + d/2 by 3 theta^(-2/d)")

    # ALiBi slopes.
    check(np.allclose(alibi_slopes(8), [2.0 ** -i for i in range(1, 9)]),
          "ALiBi slopes of 8 heads are 2^-1..2^-8")
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then the first two
    # odd-indexed slopes of the 8-head sequence, 2^-1 and 2^-3.
    check(np.allclose(alibi_slopes(6), [2.0 ** -2, 2.0 ** -4, 2.0 ** -6,
                                        2.0 ** -8, 2.0 ** -1, 2.0 ** -3]),
          "ALiBi slopes of 6 heads follow the closest power of two")
    check(np.allclose(alibi_slopes(4), [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]),
          "ALiBi slopes of 4 heads")

    # Models: causal mask, prefix consistency, distinct families.
    models = {}
    for family in ("llama", "gpt2", "bloom"):
        config, weights = random_model(family, seed=7)
        ref = Reference(config, weights)
        models[family] = ref
        ids = [int(t) for t in rng.integers(0, config["vocab_size"], 12)]
        full = ref.logits(ids)
        check(full.shape == (12, config["vocab_size"]), f"{family} logits shape")
        changed = list(ids)
        changed[8] = (changed[8] + 1) % config["vocab_size"]
        other = ref.logits(changed)
        check(np.array_equal(full[:8], other[:8]),
              f"{family}: changing token 8 leaves positions 0..7 alone")
        check(np.max(np.abs(full[8:] - other[8:])) > 1e-6,
              f"{family}: changing token 8 changes positions 8..")
        check(np.allclose(ref.logits(ids[:5]), full[:5], rtol=0, atol=1e-12),
              f"{family}: a prefix's logits are the full run's")
        spread = float(np.mean(np.std(full, axis=-1)))
        check(0.5 < spread < 10.0, f"{family}: logits spread {spread:.3f}")
    # Bloom with 6 heads (hidden 96) runs: the non-power-of-two slopes.
    config, weights = random_model("bloom", {"hidden_size": 96, "n_head": 6}, 3)
    check(Reference(config, weights).logits([1, 5, 9]).shape == (3, 97),
          "bloom with 6 heads")

    # The vectorised forward against the scalar one, on tiny models.
    tiny = {
        "llama": {"hidden_size": 16, "intermediate_size": 24,
                  "num_attention_heads": 4, "num_key_value_heads": 2,
                  "vocab_size": 11, "rope_theta": 100.0},
        "gpt2": {"n_embd": 12, "n_head": 3, "vocab_size": 11, "n_positions": 8,
                 "bos_token_id": 10, "eos_token_id": 10},
        "bloom": {"hidden_size": 12, "n_head": 3, "vocab_size": 11},
    }
    for family, overrides in tiny.items():
        config, weights = random_model(family, overrides, seed=21)
        ids = [3, 1, 4, 1, 5, 9]
        got = Reference(config, weights).logits(ids)[-1]
        want = _scalar_logits(config, weights, ids)
        err = float(np.max(np.abs(got - want)))
        check(err < 1e-9, f"{family}: forward equals the scalar one ({err:.2e})")

    # GQA: a LLaMA with 2 kv heads equals the one with 4 whose kv heads are
    # copies, query head j reading kv head j // 2 (repeat_kv).
    config, weights = random_model("llama", seed=11)
    full_config = dict(config, num_key_value_heads=4)
    full_weights = dict(weights)
    for i in range(config["num_hidden_layers"]):
        for proj in ("k_proj", "v_proj"):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            heads = weights[name].reshape(2, 16, 64)
            full_weights[name] = np.repeat(heads, 2, axis=0).reshape(64, 64)
    ids = [3, 14, 15, 92, 65, 35]
    check(np.allclose(Reference(config, weights).logits(ids),
                      Reference(full_config, full_weights).logits(ids),
                      rtol=0, atol=1e-10),
          "LLaMA GQA equals MHA with repeated kv heads")

    # GPT-2 without the transformer. prefix, and a tied lm_head copy.
    config, weights = random_model("gpt2", seed=5)
    bare = {n[len("transformer."):]: v for n, v in weights.items()}
    bare["lm_head.weight"] = weights["transformer.wte.weight"]
    check(np.array_equal(Reference(config, bare).logits([1, 2, 3]),
                         Reference(config, weights).logits([1, 2, 3])),
          "GPT-2 names without the prefix")
    try:
        Reference(config, dict(weights, **{"transformer.h.9.ln_1.weight":
                                           np.zeros(64, np.float32)}))
        check(False, "an unknown tensor is refused")
    except ValueError:
        pass

    # Greedy equals the beam search rules run with one beam.
    for family, ref in models.items():
        prompt = [5, 17, 33]
        plain = ref.greedy(prompt, 10)
        core = beam_search_details(ref.next_logits, prompt, 1, 10)["tokens"]
        check(plain == core, f"{family}: one beam equals greedy (no eos)")
        eos = plain[3]
        with_eos = ref.greedy(prompt, 10, eos_id=eos)
        check(with_eos == plain[:plain.index(eos) + 1],
              f"{family}: greedy stops after eos")
        core = beam_search_details(ref.next_logits, prompt, 1, 10,
                                   eos_id=eos)["tokens"]
        check(with_eos == core, f"{family}: one beam equals greedy (eos {eos})")
        # Greedy by hand: argmax of the full forward each step.
        ids = list(prompt)
        for _ in range(4):
            ids.append(int(np.argmax(ref.logits(ids)[-1])))
        check(plain[:4] == ids[3:], f"{family}: greedy is argmax of logits")

    # BeamHypotheses bookkeeping: with 2 kept, adding a third better one
    # drops the worst and the worst becomes the other old one.
    hy = _Hypotheses(2, 1.0, False)
    hy.add([0], -3.0, 1, True)
    hy.add([1], -2.0, 1, True)
    hy.add([2], -1.0, 1, True)
    check(sorted(s for s, _, _ in hy.beams) == [-2.0, -1.0] and
          hy.worst_score == -2.0, "hypotheses keep the best two")
    hy.add([3], -2.5, 1, True)
    check(len(hy.beams) == 2 and hy.worst_score == -2.0,
          "a hypothesis below the worst is not kept")

    # Beam search on a hand-made Markov table (next token depends on the
    # last one; logits are log-probabilities, so log_softmax keeps them).
    # Tokens 0, 1, 2 and eos 3; prompt [0].
    table = {
        "start": [0.06, 0.50, 0.40, 0.04],
        0: [0.45, 0.25, 0.20, 0.10],
        1: [0.35, 0.30, 0.25, 0.10],
        2: [0.04, 0.03, 0.03, 0.90],
        3: [0.10, 0.20, 0.30, 0.40],
    }

    def markov(ids):
        row = table["start"] if len(ids) == 1 else table[ids[-1]]
        return np.log(np.array(row))

    check(greedy_search(markov, [0], 3, eos_id=3) == [1, 0, 0],
          "hand-made greedy")
    # Beam 2: step 1 keeps [0,1] (.5) and [0,2] (.4); step 2's best
    # candidate is [0,2]+eos (.36), a hypothesis of 2 new tokens; the beams
    # go on as [0,1,0] (.175), [0,1,1] (.15); step 3 ends them as
    # [0,1,0,0] (.07875) and [0,1,1,0] (.0525), 3 new tokens each.
    #   length_penalty 1.5: ln(.36)/2^1.5 = -.3612 beats
    #     ln(.07875)/3^1.5 = -.4891 (dividing by the whole length instead,
    #     2^1.5 and 4^1.5, would rank them the other way).
    #   length_penalty 3: ln(.36)/8 = -.1277 loses to ln(.07875)/27 = -.0941.
    r = beam_search_details(markov, [0], 2, 3, length_penalty=1.5, eos_id=3)
    check(r["tokens"] == [2, 3], f"beam lp 1.5 picks [2, 3]: {r['tokens']}")
    check(abs(r["score"] - math.log(0.36) / 2 ** 1.5) < 1e-12, "beam lp 1.5 score")
    check([h[1] for h in r["hypotheses"]] == [[2, 3], [1, 0, 0]],
          f"beam lp 1.5 hypotheses {r['hypotheses']}")
    r = beam_search_details(markov, [0], 2, 3, length_penalty=3.0, eos_id=3)
    check(r["tokens"] == [1, 0, 0], f"beam lp 3 picks [1, 0, 0]: {r['tokens']}")
    check(abs(r["score"] - math.log(0.45 * 0.35 * 0.5) / 27) < 1e-12,
          "beam lp 3 score")
    # Without an eos, token 3 is a token like any other: step 2 keeps
    # [0,2,3] (.36) and [0,1,0] (.175), step 3 [0,2,3,3] (.144) and
    # [0,2,3,2] (.108), the open beams being the hypotheses.
    r = beam_search_details(markov, [0], 2, 3, eos_id=None)
    check(r["tokens"] == [2, 3, 3] and
          [h[1] for h in r["hypotheses"]] == [[2, 3, 3], [2, 3, 2]] and
          abs(r["score"] - math.log(0.144) / 3) < 1e-12,
          f"beam without eos keeps the open beams: {r['hypotheses']}")

    # Stopping: eos likely at once. Step 1 finishes [eos] (ln .5 / 1) and
    # keeps [0,1], [0,2]; step 2 finishes [1, eos] (ln .27 / 2) and
    # [2, eos] (ln .1 / 2, dropped): two hypotheses, worst ln .5 = -.693.
    # early_stopping True stops there (2 steps); False compares -.693 with
    # the step's best candidate ln(.27)/2 = -.655, goes on, and stops after
    # step 3, whose best candidate, [2, 1, eos], is ln(.2 * .12 * .9)/3 =
    # -1.279.
    table2 = {
        "start": [0.0001, 0.2999, 0.2, 0.5],
        0: [0.31, 0.26, 0.22, 0.21],
        1: [0.03, 0.04, 0.03, 0.90],
        2: [0.3, 0.12, 0.08, 0.5],
    }

    def markov2(ids):
        row = table2["start"] if len(ids) == 1 else table2[ids[-1]]
        return np.log(np.array(row))

    r = beam_search_details(markov2, [0], 2, 6, eos_id=3, early_stopping=True)
    check(r["steps"] == 2 and r["tokens"] == [1, 3],
          f"early_stopping True: {r['steps']} steps, {r['tokens']}")
    r = beam_search_details(markov2, [0], 2, 6, eos_id=3, early_stopping=False)
    check(r["steps"] == 3 and r["tokens"] == [1, 3],
          f"early_stopping False: {r['steps']} steps, {r['tokens']}")
    # The vectorised rules bound with step 2's best running beam, [0, 2, 0]
    # at .06: ln(.06)/2 = -1.41 <= -.693, so they stop after step 2.
    r = beam_search_details(markov2, [0], 2, 6, eos_id=3, rules="vectorized")
    check(r["steps"] == 2 and r["tokens"] == [1, 3],
          f"vectorized early stop: {r['steps']} steps, {r['tokens']}")
    # At the last step they finish the top num_beams candidates: in the
    # first table with length_penalty 1.5, [2, eos] (-.3612) and [1, 0, 0]
    # (-.4891), as the scorer's finalize; without eos, the same open beams.
    for lp, eos_id in ((1.5, 3), (3.0, 3), (1.0, None)):
        a = beam_search_details(markov, [0], 2, 3, lp, eos_id)
        b = beam_search_details(markov, [0], 2, 3, lp, eos_id, rules="vectorized")
        check(a["hypotheses"] == b["hypotheses"],
              f"vectorized last step (lp {lp}): {b['hypotheses']}")

    # An eos candidate ranked num_beams or lower is skipped, not finished.
    # Step 1 keeps [1] (.5) and [2] (.45). Step 2 ranks [1, eos] (.3, a
    # hypothesis), [2, 1] (.2475), [2, eos] (.189, rank 2: skipped),
    # [1, 0] (.175). Step 3 finishes [2, 1, eos] (.1485, score ln/3) and
    # [1, 0, eos] (.1225, dropped as the worst of three): two hypotheses,
    # so early_stopping True stops there.
    table3 = {
        "start": [0.04, 0.50, 0.45, 0.01],
        0: [0.10, 0.10, 0.10, 0.70],
        1: [0.35, 0.03, 0.02, 0.60],
        2: [0.02, 0.55, 0.01, 0.42],
    }

    def markov3(ids):
        row = table3["start"] if len(ids) == 1 else table3[ids[-1]]
        return np.log(np.array(row))

    r = beam_search_details(markov3, [0], 2, 5, eos_id=3, early_stopping=True)
    check(r["steps"] == 3 and
          [h[1] for h in r["hypotheses"]] == [[1, 3], [2, 1, 3]] and
          abs(r["hypotheses"][1][0] - math.log(0.45 * 0.55 * 0.6) / 3) < 1e-12,
          f"an eos ranked num_beams is skipped: {r}")

    # Warpers on a hand-made row.
    row = np.array([1.0, 2.0, 3.0, 4.0])
    p = warp_probs(row)
    e = [math.exp(v) for v in row]
    check(np.allclose(p, [v / sum(e) for v in e]), "no warper is softmax")
    p = warp_probs(row, top_k=3)
    check(p[0] == 0 and np.allclose(p[1:], [v / sum(e[1:]) for v in e[1:]]),
          "top_k 3 removes the smallest")
    # After top-k 3: probabilities .0900, .2447, .6652 (ascending); with top_p
    # .7 the cumulative .0900 <= .3 goes, .3348 stays.
    p = warp_probs(row, top_k=3, top_p=0.7)
    check(p[0] == 0 and p[1] == 0 and
          np.allclose(p[2:], [e[2] / (e[2] + e[3]), e[3] / (e[2] + e[3])]),
          f"top_k 3 then top_p .7: {p}")
    # top_p .6: .6652 alone reaches it; the cumulative .3348 <= .4 goes.
    p = warp_probs(row, top_k=3, top_p=0.6)
    check(np.array_equal(p, [0, 0, 0, 1]), "top_p .6 keeps one")
    # top_p 0 keeps the most probable token (min_tokens_to_keep 1).
    check(np.array_equal(warp_probs(row, top_p=0.0), [0, 0, 0, 1]), "top_p 0")
    # Temperature 2 first, then top_p: exp(v/2) for v = 1..4 are 1.6487,
    # 2.7183, 4.4817, 7.3891 (sum 16.2378); cumulative .1015, .2689, .5449:
    # with top_p .5 the first two (<= .5) go.
    p = warp_probs(row, temperature=2.0, top_p=0.5)
    h = [math.exp(v / 2) for v in row]
    check(p[0] == 0 and p[1] == 0 and
          np.allclose(p[2:], [h[2] / (h[2] + h[3]), h[3] / (h[2] + h[3])]),
          f"temperature 2 then top_p .5: {p}")
    # Probabilities .25, .25, .5 (exact in binary): with top_p .5 the
    # cumulative .25 and .5 are both <= 1 - top_p, so both go.
    p = warp_probs(np.array([0.0, 0.0, math.log(2.0)]), top_p=0.5)
    check(np.array_equal(p, [0, 0, 1]),
          f"top_p removes a cumulative probability equal to 1 - top_p: {p}")
    # Ties with the k-th largest are kept by top-k.
    p = warp_probs(np.array([0.0, 1.0, 1.0, 0.5]), top_k=1)
    check(np.allclose(p, [0, 0.5, 0.5, 0]), "top_k keeps ties with the k-th")
    for args in [dict(), dict(temperature=0.7), dict(top_k=5),
                 dict(top_p=0.9), dict(temperature=1.3, top_k=20, top_p=0.8)]:
        p = warp_probs(models["llama"].next_logits([1, 2, 3]), **args)
        check(abs(np.sum(p) - 1.0) < 1e-12 and np.all(p >= 0),
              f"warp_probs {args} sums to 1")

    # safetensors: round trip, dtypes, shards, a corrupt file.
    with tempfile.TemporaryDirectory() as tmp:
        tensors = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32),
                   "b": np.array([1.5, -2.25, 0.0], dtype=np.float32),
                   "scalar": np.array(3.0, dtype=np.float32)}
        path = os.path.join(tmp, "t.safetensors")
        write_safetensors(path, tensors)
        back = read_safetensors(path)
        check(set(back) == set(tensors) and
              all(np.array_equal(back[n], tensors[n]) and
                  back[n].dtype == np.float32 for n in tensors),
              "safetensors F32 round trip")
        with open(path, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        check(n % 8 == 0 and header["__metadata__"] == {"format": "pt"} and
              header["a.weight"] == {"dtype": "F32", "shape": [3, 5],
                                     "data_offsets": [0, 60]},
              "safetensors header layout")
        for dtype, tol in (("F64", 0), ("F16", 1e-3), ("BF16", 1e-2)):
            write_safetensors(path, tensors, dtype=dtype)
            back = read_safetensors(path)
            check(all(np.allclose(back[n], tensors[n], rtol=tol, atol=0)
                      for n in tensors), f"safetensors {dtype} round trip")
        check(np.array_equal(read_safetensors(path)["b"], [1.5, -2.25, 0.0]),
              "BF16 exact values")
        # Round to nearest even: 1 + 2^-8 lies halfway between 1 and
        # 1 + 2^-7 (goes to 1), 1 + 3 * 2^-8 between 1 + 2^-7 and 1 + 2^-6
        # (goes to 1 + 2^-6); 1 + 2^-8 + 2^-20 is past halfway (1 + 2^-7).
        halves = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
                           1 + 2.0 ** -8 + 2.0 ** -20], dtype=np.float32)
        check(np.array_equal(_bf16_to_f32(_f32_to_bf16(halves)),
                             [1.0, 1 + 2.0 ** -6, 1 + 2.0 ** -7]),
              "BF16 rounds to nearest even")
        # bf16 by hand: 0x3FC0 is 1.5, 0xC010 is -2.25.
        with open(path, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        begin = json.loads(raw[8:8 + n])["b"]["data_offsets"][0] + 8 + n
        check(raw[begin:begin + 4] == bytes([0xC0, 0x3F, 0x10, 0xC0]),
              "BF16 bytes of 1.5, -2.25")
        with open(path, "wb") as f:
            f.write(raw[:-2])
        try:
            read_safetensors(path)
            check(False, "a truncated safetensors file is refused")
        except ValueError:
            pass
        config, weights = random_model("bloom", seed=2)
        save_hf_dir(os.path.join(tmp, "one"), config, weights)
        save_hf_dir(os.path.join(tmp, "three"), config, weights, shards=3)
        for sub in ("one", "three"):
            c2, w2 = load_hf_dir(os.path.join(tmp, sub))
            check(c2 == config and set(w2) == set(weights) and
                  all(np.array_equal(w2[n], weights[n]) for n in weights),
                  f"HF directory round trip ({sub})")

    elapsed = time.time() - start
    if failures:
        print(f"hf_reference self-test: {len(failures)} FAILED ({elapsed:.1f} s)")
        return 1
    print(f"hf_reference self-test: OK ({elapsed:.1f} s)")
    return 0


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _ids(text):
    return [int(t) for t in text.replace(" ", "").split(",") if t]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return _self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true")
    sub = ap.add_subparsers(dest="command")
    mk = sub.add_parser("make", help="write a random Hugging Face directory")
    mk.add_argument("--family", required=True, choices=sorted(_ARCHITECTURES))
    mk.add_argument("--out", required=True)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--shards", type=int, default=1)
    mk.add_argument("--dtype", choices=("F32", "F16", "BF16", "F64"),
                    default="F32", help="the stored dtype (F32)")
    mk.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="a config.json field (value as JSON), repeatable")
    for name in ("greedy", "beam", "logits"):
        p = sub.add_parser(name)
        p.add_argument("dir")
        p.add_argument("--prompt-ids", required=True, type=_ids)
        if name != "logits":
            p.add_argument("--max-new-tokens", required=True, type=int)
            p.add_argument("--eos-id", type=int, default=None,
                           help="stop at this id (none unless given)")
        if name == "beam":
            p.add_argument("--num-beams", required=True, type=int)
            p.add_argument("--length-penalty", type=float, default=1.0)
            p.add_argument("--early-stopping", action="store_true")
            p.add_argument("--rules", choices=BEAM_RULES, default="scorer",
                           help="transformers 4.36-4.49 (scorer) or 4.50 on "
                           "(vectorized)")
    args = ap.parse_args(argv)
    if args.self_test:
        return _self_test()
    try:
        if args.command == "make":
            overrides = {}
            for item in args.set:
                key, eq, value = item.partition("=")
                try:
                    if not eq:
                        raise ValueError("no '='")
                    overrides[key] = json.loads(value)
                except ValueError as e:
                    raise ValueError(f"--set {item}: not KEY=JSON ({e}); a "
                                     "string value is quoted: KEY='\"text\"'") from None
            config, weights = random_model(args.family, overrides, args.seed)
            save_hf_dir(args.out, config, weights, shards=args.shards,
                        dtype=args.dtype)
            return 0
        if args.command in ("greedy", "beam", "logits"):
            ref = Reference(*load_hf_dir(args.dir))
            if args.command == "logits":
                print(json.dumps([float(v) for v in ref.next_logits(args.prompt_ids)]))
                return 0
            if args.command == "greedy":
                new = ref.greedy(args.prompt_ids, args.max_new_tokens, args.eos_id)
            else:
                new = ref.beam_search(args.prompt_ids, args.num_beams,
                                      args.max_new_tokens, args.length_penalty,
                                      args.eos_id, args.early_stopping,
                                      args.rules)
            print(" ".join(str(t) for t in list(args.prompt_ids) + new))
            return 0
    except (ValueError, OSError, KeyError) as e:
        print(f"hf_reference: error: {e}", file=sys.stderr)
        return 1
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
