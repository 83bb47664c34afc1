//===- RawSafetensors.h - Safetensors bytes written by hand -----*- C++ -*-===//
//
// An independent writer for the tests: the bytes of a safetensors file put
// together from the format description (8-byte little-endian header length,
// the JSON header as the test spells it, the data buffer), not through
// braid::ckpt::WriteSafetensors, so the reader is checked against the format
// and the writer against these bytes.
//
//===----------------------------------------------------------------------===//

#ifndef BRAID_TESTS_RUNTIME_CKPT_RAWSAFETENSORS_H
#define BRAID_TESTS_RUNTIME_CKPT_RAWSAFETENSORS_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace braid::ckpt::testing {

/// The 8 bytes of `n`, least significant first, built with shifts (not a
/// memcpy of a host integer).
inline std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

/// A whole file: le64(header length) + header + data. The header is taken as
/// given (tests that need padding spell the spaces out).
inline std::string rawFile(const std::string &header, const std::string &data) {
  return le64(header.size()) + header + data;
}

/// Little-endian bytes of 16-bit patterns.
inline std::string bits16(const std::vector<uint16_t> &values) {
  std::string out;
  for (uint16_t v : values) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  }
  return out;
}

/// Little-endian bytes of float32 values (through their bit patterns).
inline std::string f32(const std::vector<float> &values) {
  std::string out;
  for (float v : values) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>((b >> (8 * i)) & 0xff));
  }
  return out;
}

/// Little-endian bytes of float64 values.
inline std::string f64(const std::vector<double> &values) {
  std::string out;
  for (double v : values) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    out += le64(b);
  }
  return out;
}

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

/// A fresh directory under the test temp dir, removed at destruction.
class TempDir {
public:
  explicit TempDir(const std::string &name) {
    const char *base = std::getenv("TEST_TMPDIR");
    path_ = std::filesystem::path(base ? base : "/tmp") /
            ("braid-ckpt-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string &name) const {
    return (path_ / name).string();
  }
  const std::string path() const { return path_.string(); }

private:
  std::filesystem::path path_;
};

} // namespace braid::ckpt::testing

#endif // BRAID_TESTS_RUNTIME_CKPT_RAWSAFETENSORS_H
