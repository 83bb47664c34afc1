//===- CountFlag.h - The benchmarks' --name N flags -------------*- C++ -*-===//
//
// braid-gpu-bench's and braid-attention-bench's flags are counts: `--name N`
// with N an integer >= 0.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TOOLS_BRAID_GPU_BENCH_COUNTFLAG_H
#define BRAID_TOOLS_BRAID_GPU_BENCH_COUNTFLAG_H

#include <cstdint>
#include <cstdlib>
#include <string>

namespace braid {

/// Whether argv[i] is flag `name`; if so its value (the next argument, i
/// advanced past it) goes to `out`, or what is wrong with it to `error`.
inline bool countFlag(int argc, char **argv, int &i, const char *name,
                      int64_t &out, std::string &error) {
  if (std::string(argv[i]) != name)
    return false;
  if (i + 1 >= argc) {
    error = std::string(name) + " needs a value";
    return true;
  }
  char *end = nullptr;
  long long v = std::strtoll(argv[++i], &end, 10);
  if (!end || *end || v < 0)
    error = std::string(name) + "=" + argv[i] + " is not a count >= 0";
  out = v;
  return true;
}

} // namespace braid

#endif // BRAID_TOOLS_BRAID_GPU_BENCH_COUNTFLAG_H
