//===- PlanLoaderFuzz.cpp - libFuzzer target for the plan loader ----------===//
//
// Any byte string must either load as a valid plan or be refused with a
// status; it must never crash, hang, or read out of bounds. Two entry points
// are exercised: the framed file (frame checks first) and the raw payload
// behind a correct frame (so that the fuzzer reaches the validator instead
// of stopping at the checksum). scripts/fuzz-plan.sh builds and runs it.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"

#include <cstdint>
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
  return 0;
}
