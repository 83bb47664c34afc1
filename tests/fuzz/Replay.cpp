//===- Replay.cpp - Runs the plan loader's fuzz target on saved inputs ----===//
//
// libFuzzer's driver needs clang; this one needs nothing, so CTest replays
// the seed corpus through LLVMFuzzerTestOneInput (PlanLoaderFuzz.cpp) on
// every run: each input must come back (a crash or an abort fails the test,
// a hang its timeout), and each file named after --valid must load as a
// plan, so that the seeds stay plans the loader accepts (a seed the loader
// refuses at its header would fuzz nothing behind it).
//
//   braid-plan-fuzz-replay [--valid FILE ...] [--] INPUT|DIR ...
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/PlanLoader.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<std::string> inputs, valid;
  bool validList = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--valid") {
      validList = true;
    } else if (arg == "--") {
      validList = false;
    } else if (validList) {
      valid.push_back(arg);
      inputs.push_back(arg);
    } else if (fs::is_directory(arg)) {
      for (const fs::directory_entry &e : fs::directory_iterator(arg))
        if (e.is_regular_file())
          inputs.push_back(e.path().string());
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "braid-plan-fuzz-replay: no inputs\n");
    return 2;
  }
  for (const std::string &path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "braid-plan-fuzz-replay: cannot read %s\n",
                   path.c_str());
      return 1;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                           bytes.size());
  }
  int failed = 0;
  for (const std::string &path : valid) {
    absl::StatusOr<braid::plan::Plan> plan = braid::plan::LoadPlanFile(path);
    if (!plan.ok()) {
      std::fprintf(stderr, "braid-plan-fuzz-replay: %s does not load: %s\n",
                   path.c_str(), std::string(plan.status().message()).c_str());
      ++failed;
    }
  }
  std::printf("replayed %zu inputs; %zu of %zu valid seeds load\n",
              inputs.size(), valid.size() - failed, valid.size());
  return failed ? 1 : 0;
}
