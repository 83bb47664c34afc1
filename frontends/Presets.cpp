//===- Presets.cpp - Named model architectures ----------------------------===//
//
// The architectures of published checkpoints, as their Hugging Face
// config.json files (or, for models released only through Megatron-style
// code, their papers and reference scripts) state them. Fields a family sets
// the same way for every size (norm, activation, biases, ...) are left to the
// family defaults of ModelConfig.cpp; GPT-2's and Bloom's MLP width is their
// family's rule (familyFfnHiddenSize), the one a job that replaces their
// hidden size gets.
//
//===----------------------------------------------------------------------===//

#include "frontends/Presets.h"

#include "frontends/ModelConfig.h"

#include <functional>
#include <map>

using namespace braid;
using spec::ModelSpec;

namespace {

struct Shape {
  int64_t layers, hidden, heads, kvHeads, ffn, vocab, maxSeq;
};

ModelSpec make(spec::Family family, const Shape &s) {
  ModelSpec m;
  m.set_family(family);
  m.set_num_layers(s.layers);
  m.set_hidden_size(s.hidden);
  m.set_num_heads(s.heads);
  m.set_num_kv_heads(s.kvHeads);
  m.set_ffn_hidden_size(s.ffn);
  m.set_vocab_size(s.vocab);
  m.set_max_seq_len(s.maxSeq);
  return m;
}

/// GPT-2: 4h MLP, 50257 tokens, 1024 positions, dropout 0.1 everywhere.
ModelSpec gpt2(int64_t layers, int64_t hidden, int64_t heads) {
  ModelSpec m = make(spec::GPT2, {layers, hidden, heads, heads,
                                 familyFfnHiddenSize(spec::GPT2, hidden), 50257,
                                 1024});
  m.set_norm_eps(1e-5);
  m.set_hidden_dropout(0.1);
  m.set_attention_dropout(0.1);
  m.set_embedding_dropout(0.1);
  return m;
}

/// LLaMA (v1): 32000 tokens, 2048 positions, RMSNorm eps 1e-6.
ModelSpec llama(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn) {
  ModelSpec m = make(spec::LLAMA, {layers, hidden, heads, heads, ffn, 32000, 2048});
  m.set_norm_eps(1e-6);
  return m;
}

/// LLaMA-2: 4096 positions, RMSNorm eps 1e-5, GQA for the largest sizes.
ModelSpec llama2(int64_t layers, int64_t hidden, int64_t heads,
                 int64_t kvHeads, int64_t ffn) {
  ModelSpec m =
      make(spec::LLAMA, {layers, hidden, heads, kvHeads, ffn, 32000, 4096});
  m.set_norm_eps(1e-5);
  return m;
}

ModelSpec bloom(int64_t layers, int64_t hidden, int64_t heads) {
  ModelSpec m = make(spec::BLOOM, {layers, hidden, heads, heads,
                                  familyFfnHiddenSize(spec::BLOOM, hidden),
                                  250880, 2048});
  m.set_norm_eps(1e-5);
  return m;
}

ModelSpec baichuan(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t vocab, spec::PositionEmbedding position) {
  ModelSpec m =
      make(spec::BAICHUAN, {layers, hidden, heads, heads, ffn, vocab, 4096});
  m.set_norm_eps(1e-6);
  m.set_position_embedding(position);
  return m;
}

ModelSpec llamaLike(spec::Family family, const Shape &s) {
  ModelSpec m = make(family, s);
  m.set_norm_eps(1e-6);
  return m;
}

const std::map<std::string, std::function<ModelSpec()>> &table() {
  static const std::map<std::string, std::function<ModelSpec()>> presets = {
      {"gpt2-124m", [] { return gpt2(12, 768, 12); }},
      {"gpt2-350m", [] { return gpt2(24, 1024, 16); }},
      {"gpt2-774m", [] { return gpt2(36, 1280, 20); }},
      {"gpt2-1558m", [] { return gpt2(48, 1600, 25); }},
      {"llama-7b", [] { return llama(32, 4096, 32, 11008); }},
      {"llama-13b", [] { return llama(40, 5120, 40, 13824); }},
      {"llama-33b", [] { return llama(60, 6656, 52, 17920); }},
      {"llama-65b", [] { return llama(80, 8192, 64, 22016); }},
      {"llama2-7b", [] { return llama2(32, 4096, 32, 32, 11008); }},
      {"llama2-13b", [] { return llama2(40, 5120, 40, 40, 13824); }},
      // The 34B of the LLaMA-2 paper was not released; its shape is the one
      // Code Llama 34B shipped with (GQA, 8 kv heads).
      {"llama2-34b", [] { return llama2(48, 8192, 64, 8, 22016); }},
      {"llama2-70b", [] { return llama2(80, 8192, 64, 8, 28672); }},
      {"bloom-7b1", [] { return bloom(30, 4096, 32); }},
      {"bloom-176b", [] { return bloom(70, 14336, 112); }},
      {"baichuan-7b",
       [] { return baichuan(32, 4096, 32, 11008, 64000, spec::ROPE); }},
      {"baichuan-13b",
       [] { return baichuan(40, 5120, 40, 13696, 64000, spec::ALIBI); }},
      {"baichuan2-7b",
       [] { return baichuan(32, 4096, 32, 11008, 125696, spec::ROPE); }},
      {"baichuan2-13b",
       [] { return baichuan(40, 5120, 40, 13696, 125696, spec::ALIBI); }},
      {"internlm-7b",
       [] {
         return llamaLike(spec::INTERNLM,
                          {32, 4096, 32, 32, 11008, 103168, 2048});
       }},
      // InternLM-65B as ModelLink's reference script defines it.
      {"internlm-65b",
       [] {
         return llamaLike(spec::INTERNLM,
                          {80, 8192, 64, 64, 22016, 103168, 2048});
       }},
      {"aquila-7b",
       [] {
         return llamaLike(spec::AQUILA, {32, 4096, 32, 32, 11008, 100008, 2048});
       }},
      // Small models for tests and the demo: 2 layers, hidden 64.
      {"tiny-gpt2",
       [] {
         ModelSpec m = make(spec::GPT2, {2, 64, 4, 4, 256, 512, 128});
         m.set_norm_eps(1e-5);
         return m;
       }},
      {"tiny-llama",
       [] {
         ModelSpec m = make(spec::LLAMA, {2, 64, 4, 2, 176, 512, 128});
         m.set_norm_eps(1e-5);
         return m;
       }},
  };
  return presets;
}

} // namespace

std::optional<ModelSpec> braid::lookupPreset(llvm::StringRef name) {
  auto it = table().find(name.str());
  if (it == table().end())
    return std::nullopt;
  ModelSpec m = it->second();
  m.set_preset(name.str());
  return m;
}

std::vector<std::string> braid::presetNames() {
  std::vector<std::string> names;
  for (const auto &entry : table())
    names.push_back(entry.first);
  return names;
}
