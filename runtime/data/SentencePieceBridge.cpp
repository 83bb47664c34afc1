//===- SentencePieceBridge.cpp - Loading libBraidSentencePiece.so ---------===//

#include "runtime/data/SentencePieceBridge.h"

#include <dlfcn.h>
#include <mutex>
#include <unistd.h>

namespace braid::data::spbridge {
namespace {

constexpr char kModuleName[] = "libBraidSentencePiece.so";

std::string executableDir() {
  std::string path(4096, '\0');
  ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
  if (n <= 0 || static_cast<size_t>(n) >= path.size())
    return "";
  path.resize(n);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::vector<std::string> candidatePaths() {
  std::vector<std::string> paths;
  if (const char *env = std::getenv("BRAID_SENTENCEPIECE_PLUGIN"); env && *env)
    paths.push_back(env);
  if (std::string dir = executableDir(); !dir.empty()) {
    paths.push_back(dir + "/" + kModuleName);
    paths.push_back(dir + "/../lib/" + kModuleName);
  }
#ifdef BRAID_SENTENCEPIECE_PLUGIN_PATH
  paths.push_back(BRAID_SENTENCEPIECE_PLUGIN_PATH);
#endif
  return paths;
}

struct Loaded {
  const Library *library = nullptr;
  std::string error;
};

Loaded load() {
  Loaded loaded;
  std::string tried;
  for (const std::string &path : candidatePaths()) {
    if (::access(path.c_str(), F_OK) != 0) {
      tried += "\n  " + path + ": no such file";
      continue;
    }
    // Never unloaded: the library object lives as long as the process.
    void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      tried += "\n  " + path + ": " + ::dlerror();
      continue;
    }
    using Entry = const Library *(*)();
    auto entry =
        reinterpret_cast<Entry>(::dlsym(handle, "braid_sentencepiece_library"));
    if (!entry) {
      tried += "\n  " + path + ": no braid_sentencepiece_library symbol";
      continue;
    }
    loaded.library = entry();
    return loaded;
  }
  loaded.error = std::string("cannot load the SentencePiece module ") +
                 kModuleName + " (set BRAID_SENTENCEPIECE_PLUGIN to its path);"
                 " tried:" + (tried.empty() ? std::string(" nothing") : tried);
  return loaded;
}

} // namespace

const Library *GetLibrary(std::string *error) {
  static const Loaded loaded = load();
  if (!loaded.library && error)
    *error = loaded.error;
  return loaded.library;
}

} // namespace braid::data::spbridge
