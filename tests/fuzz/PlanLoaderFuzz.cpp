//===- PlanLoaderFuzz.cpp - libFuzzer target for the plan loader ----------===//
//
// Any byte string must either load as a valid plan or be refused with a
// status; it must never crash, hang, or read out of bounds. Three entry points
// are exercised: the framed file (frame checks first) and the raw payload
// behind a correct frame (so that the fuzzer reaches the validator instead
// of stopping at the checksum), and the bytes as a file, through
// LoadPlanFile, which reads the header before it reads the payload.
// scripts/fuzz-plan.sh builds and runs it under libFuzzer; Replay.cpp replays
// the seed corpus through it in CTest.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"

#include <cstdint>
#include <cstdio>
#include <unistd.h>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char *>(data), size);
  (void)braid::plan::ParsePlanFile(bytes, "fuzz");
  // The same bytes as a payload behind a valid frame.
  std::string framed = "BRAIDPLN";
  for (int i = 0; i < 8; ++i)
    framed.push_back(char((uint64_t(size) >> (8 * i)) & 0xff));
  uint32_t crc = braid::plan::Crc32(bytes);
  for (int i = 0; i < 4; ++i)
    framed.push_back(char((crc >> (8 * i)) & 0xff));
  framed.append(bytes.data(), bytes.size());
  (void)braid::plan::ParsePlanFile(framed, "fuzz");
  // The bytes as a file: LoadPlanFile's header-first reading.
  static const std::string path =
      "/tmp/braid-plan-fuzz-" + std::to_string(::getpid()) + ".plan";
  if (std::FILE *f = std::fopen(path.c_str(), "wb")) {
    bool written = std::fwrite(data, 1, size, f) == size;
    if (std::fclose(f) == 0 && written)
      (void)braid::plan::LoadPlanFile(path);
  }
  return 0;
}
