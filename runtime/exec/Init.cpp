//===- Init.cpp - Seeded initial weights ----------------------------------===//

#include "runtime/exec/Init.h"

#include "runtime/cpu/Philox.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace braid::exec {
namespace {

/// FNV-1a of the name: a parameter's stream does not depend on the order in
/// which parameters are declared.
uint64_t nameHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool isNormWeight(absl::string_view name, int64_t rank) {
  return rank == 1 && absl::EndsWith(name, ".weight") &&
         (absl::StrContains(name, "norm") || absl::StrContains(name, "ln_") ||
          absl::StrContains(name, "layernorm"));
}

} // namespace

bool IsLoraAdapter(absl::string_view name) {
  return absl::EndsWith(name, ".lora_A.weight") ||
         absl::EndsWith(name, ".lora_B.weight");
}

double initStd(absl::string_view name, int64_t rank, const InitConfig &c) {
  if (absl::EndsWith(name, ".bias") || isNormWeight(name, rank))
    return 0.0;
  if (c.scaledResidual && (absl::EndsWith(name, "attn.c_proj.weight") ||
                           absl::EndsWith(name, "mlp.c_proj.weight")))
    return c.std / std::sqrt(2.0 * double(c.numLayers));
  return c.std;
}

absl::Status initParameter(absl::string_view name, int64_t rank,
                           const InitConfig &c, uint64_t begin, uint64_t count,
                           float *out) {
  if (!(c.std > 0) || !std::isfinite(c.std) || c.numLayers < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "init std ", c.std, " and num_layers ", c.numLayers,
        " must be positive"));
  if (count > 0 && !out)
    return absl::InvalidArgumentError("no destination for the parameter");
  if (absl::EndsWith(name, ".bias") || isNormWeight(name, rank)) {
    float value = absl::EndsWith(name, ".bias") ? 0.0f : 1.0f;
    for (uint64_t i = 0; i < count; ++i)
      out[i] = value;
    return absl::OkStatus();
  }
  double std = initStd(name, rank, c);
  uint64_t h = nameHash(name);
  cpu::PhiloxKey key = {uint32_t(c.seed), uint32_t(c.seed >> 32)};
  auto fill = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      // One Philox call per element pair; Box-Muller turns two uniforms
      // into two normals, element 2j taking the cosine and 2j+1 the sine.
      uint64_t index = begin + i, pair = index >> 1;
      cpu::PhiloxCounter counter = {uint32_t(pair), uint32_t(pair >> 32),
                                    uint32_t(h), uint32_t(h >> 32)};
      cpu::PhiloxCounter bits = cpu::philox4x32(counter, key);
      // (0, 1] for the logarithm, [0, 1) for the angle.
      double u1 = (double(bits[0]) + 1.0) / 4294967296.0;
      double u2 = double(bits[1]) / 4294967296.0;
      double radius = std::sqrt(-2.0 * std::log(u1));
      double angle = 2.0 * M_PI * u2;
      double z =
          (index & 1) ? radius * std::sin(angle) : radius * std::cos(angle);
      out[i] = float(z * std);
    }
  };
  // Each element is a function of its index alone, so the machine's cores
  // split a large tensor (some 50 ns an element: a 1B-parameter model
  // took 55 s on one core) with the same values as one thread.
  constexpr uint64_t kPerThread = uint64_t(1) << 20;
  const uint64_t threads = std::min<uint64_t>(
      {uint64_t(std::max(1u, std::thread::hardware_concurrency())), 16,
       (count + kPerThread - 1) / kPerThread});
  if (threads <= 1) {
    fill(0, count);
    return absl::OkStatus();
  }
  std::vector<std::thread> workers;
  const uint64_t share = (count + threads - 1) / threads;
  for (uint64_t t = 1; t < threads; ++t)
    workers.emplace_back(fill, std::min(count, t * share),
                         std::min(count, (t + 1) * share));
  fill(0, std::min(count, share));
  for (std::thread &w : workers)
    w.join();
  return absl::OkStatus();
}

absl::Status initParameterOfShape(absl::string_view name,
                                  absl::Span<const int64_t> shape,
                                  const InitConfig &c, uint64_t begin,
                                  uint64_t count, float *out) {
  if (count > 0 && !out)
    return absl::InvalidArgumentError("no destination for the parameter");
  if (absl::EndsWith(name, ".lora_B.weight")) {
    std::fill_n(out, count, 0.0f);
    return absl::OkStatus();
  }
  if (absl::EndsWith(name, ".lora_A.weight")) {
    if (shape.size() != 2 || shape[1] < 1)
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": a LoRA A matrix is [rank, in] with in >= 1, got [",
          absl::StrJoin(shape, ", "), "]"));
    // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound
    // gain * sqrt(3 / fan_in) = 1 / sqrt(in).
    const double bound = 1.0 / std::sqrt(double(shape[1]));
    const uint64_t h = nameHash(name);
    cpu::PhiloxKey key = {uint32_t(c.seed), uint32_t(c.seed >> 32)};
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t index = begin + i;
      cpu::PhiloxCounter counter = {uint32_t(index), uint32_t(index >> 32),
                                    uint32_t(h), uint32_t(h >> 32)};
      double u = double(cpu::philox4x32(counter, key)[0]) / 4294967296.0;
      out[i] = float((2.0 * u - 1.0) * bound);
    }
    return absl::OkStatus();
  }
  constexpr absl::string_view kFused = "mlp.gate_up_proj.";
  size_t at = name.rfind(kFused);
  if (at == absl::string_view::npos || shape.empty() || shape[0] % 2 != 0)
    return initParameter(name, int64_t(shape.size()), c, begin, count, out);
  uint64_t half = 1;
  for (int64_t d : shape)
    half *= uint64_t(d);
  half /= 2;
  std::string prefix(name.substr(0, at)), suffix(name.substr(at + kFused.size()));
  std::string gate = absl::StrCat(prefix, "mlp.gate_proj.", suffix);
  std::string up = absl::StrCat(prefix, "mlp.up_proj.", suffix);
  uint64_t end = begin + count;
  if (begin < half) {
    uint64_t n = std::min(end, half) - begin;
    if (absl::Status s = initParameter(gate, int64_t(shape.size()), c, begin, n, out);
        !s.ok())
      return s;
  }
  if (end > half) {
    uint64_t from = std::max(begin, half);
    return initParameter(up, int64_t(shape.size()), c, from - half, end - from,
                         out + (from - begin));
  }
  return absl::OkStatus();
}

} // namespace braid::exec
