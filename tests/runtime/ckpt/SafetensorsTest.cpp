//===- SafetensorsTest.cpp - safetensors reader and writer ----------------===//
//
// Files are put together by hand (RawSafetensors.h) from the format, with
// headers spelled out as the reference implementation writes them; the
// expected values of F16/BF16 are hand-decoded bit patterns. Our writer must
// produce those same bytes, including the reference implementation's own
// known-answer vectors (safetensors/src/tensor.rs, test_serialization and
// test_serialization_forced_alignement). Every corruption must be refused with
// a message naming the file and the tensor; none may crash (run the binary
// under -fsanitize=address,undefined to see it).
//
//===----------------------------------------------------------------------===//

#include "runtime/ckpt/Safetensors.h"

#include "RawSafetensors.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace braid::ckpt;
using namespace braid::ckpt::testing;

namespace {

class SafetensorsTest : public ::testing::Test {
protected:
  SafetensorsTest() : dir_("st") {}

  /// Writes `bytes` to a file and opens it.
  absl::StatusOr<SafetensorsFile> openBytes(const std::string &bytes) {
    writeBytes(path(), bytes);
    return SafetensorsFile::Open(path());
  }
  /// Opens a file with `header` and `data` and returns the error message
  /// (empty if it opened).
  std::string openError(const std::string &header, const std::string &data) {
    absl::StatusOr<SafetensorsFile> f = openBytes(rawFile(header, data));
    return f.ok() ? std::string() : std::string(f.status().message());
  }
  std::string path() const { return dir_.file("t.safetensors"); }

  TempDir dir_;
};

uint32_t floatBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

TEST_F(SafetensorsTest, ReadsF32) {
  auto f = openBytes(rawFile(
      R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
      f32({0.5f, -1.0f, 2.0f, 3.25f, -0.0f, 1e-3f})));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->names(), std::vector<std::string>{"w"});
  auto info = f->Info("w");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dtype, Dtype::kF32);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(info->numElements, 6u);
  std::vector<float> out(6);
  ASSERT_TRUE(f->ReadAsFloat32("w", absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f, -0.0f, 1e-3f}));
  std::vector<double> out64(6);
  ASSERT_TRUE(f->ReadAsFloat64("w", absl::MakeSpan(out64)).ok());
  EXPECT_EQ(out64[3], 3.25);
  EXPECT_EQ(out64[5], static_cast<double>(1e-3f));
}

TEST_F(SafetensorsTest, ReadsF16BitPatterns) {
  // Hand-decoded binary16: 0x3C00 = 1, 0xC000 = -2, 0x0001 = 2^-24 (the
  // smallest subnormal, 5.96e-8), 0x03FF = 1023 * 2^-24 (largest subnormal),
  // 0x0400 = 2^-14 (smallest normal), 0x7BFF = 65504 (largest), 0x3555 =
  // 1.333 * 2^-2 = 0.333251953125, 0x8000 = -0, 0x7C00 = inf, 0xFC00 = -inf,
  // 0x7E00 = NaN.
  const std::vector<uint16_t> bits = {0x3C00, 0xC000, 0x0001, 0x03FF,
                                      0x0400, 0x7BFF, 0x3555, 0x8000,
                                      0x7C00, 0xFC00, 0x7E00};
  auto f = openBytes(rawFile(
      R"({"h":{"dtype":"F16","shape":[11],"data_offsets":[0,22]}})",
      bits16(bits)));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(11);
  ASSERT_TRUE(f->ReadAsFloat32("h", absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 5.9604644775390625e-8f);
  EXPECT_EQ(out[3], 6.0975551605224609375e-5f);
  EXPECT_EQ(out[4], 6.103515625e-5f);
  EXPECT_EQ(out[5], 65504.0f);
  EXPECT_EQ(out[6], 0.333251953125f);
  EXPECT_EQ(floatBits(out[7]), 0x80000000u);
  EXPECT_EQ(out[8], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[9], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[10]));
  std::vector<double> out64(11);
  ASSERT_TRUE(f->ReadAsFloat64("h", absl::MakeSpan(out64)).ok());
  EXPECT_EQ(out64[2], 5.9604644775390625e-8);
  EXPECT_TRUE(std::isnan(out64[10]));
}

TEST_F(SafetensorsTest, ReadsBF16BitPatterns) {
  // bfloat16 is the top half of binary32: 0x3F80 = 1, 0xC000 = -2, 0x4049 =
  // 3.140625, 0x0001 = 2^-133 (a float subnormal), 0x7F80 = inf, 0xFF80 =
  // -inf, 0x7FC0 = NaN, 0x8000 = -0.
  auto f = openBytes(rawFile(
      R"({"b":{"dtype":"BF16","shape":[2,4],"data_offsets":[0,16]}})",
      bits16({0x3F80, 0xC000, 0x4049, 0x0001, 0x7F80, 0xFF80, 0x7FC0,
              0x8000})));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(8);
  ASSERT_TRUE(f->ReadAsFloat32("b", absl::MakeSpan(out)).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.140625f);
  EXPECT_EQ(out[3], std::ldexp(1.0f, -133));
  EXPECT_EQ(out[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[5], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[6]));
  EXPECT_EQ(floatBits(out[7]), 0x80000000u);
}

TEST_F(SafetensorsTest, ReadsF64AndRefusesOutOfRangeToF32) {
  auto f = openBytes(rawFile(
      R"({"d":{"dtype":"F64","shape":[3],"data_offsets":[0,24]}})",
      f64({1.5, -0.25, 1e300})));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<double> out64(3);
  ASSERT_TRUE(f->ReadAsFloat64("d", absl::MakeSpan(out64)).ok());
  EXPECT_EQ(out64, (std::vector<double>{1.5, -0.25, 1e300}));
  std::vector<float> out(3);
  absl::Status s = f->ReadAsFloat32("d", absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), path() + ": tensor \"d\": element 2 (1e+300) is "
                                  "beyond the float32 range");
}

TEST_F(SafetensorsTest, MetadataScalarsEmptyTensorsAndPaddingSpaces) {
  // A scalar (shape []) is one element; a [0, 4] tensor is empty; the header
  // is followed by padding spaces, as writers leave it.
  auto f = openBytes(rawFile(
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[0,4],"data_offsets":[4,4]}}   )",
      f32({7.0f})));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"e", "s"}));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  std::vector<float> one(1);
  ASSERT_TRUE(f->ReadAsFloat32("s", absl::MakeSpan(one)).ok());
  EXPECT_EQ(one[0], 7.0f);
  EXPECT_TRUE(f->ReadAsFloat32("e", absl::Span<float>()).ok());
  EXPECT_EQ(f->Info("e")->numElements, 0u);
}

TEST_F(SafetensorsTest, ReadErrors) {
  auto f = openBytes(rawFile(
      R"({"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
      std::string(8, '\1')));
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(2);
  absl::Status s = f->ReadAsFloat32("i", absl::MakeSpan(out));
  EXPECT_EQ(s.message(), path() + ": tensor \"i\" has dtype I32, which cannot "
                                  "be read as float32 (only F16, BF16, F32, "
                                  "F64 can)");
  std::vector<float> wrong(3);
  f = openBytes(rawFile(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      f32({1, 2})));
  ASSERT_TRUE(f.ok());
  s = f->ReadAsFloat32("w", absl::MakeSpan(wrong));
  EXPECT_EQ(s.message(), path() + ": tensor \"w\" has 2 elements (shape [2]) "
                                  "but the destination holds 3");
  s = f->ReadAsFloat32("nope", absl::MakeSpan(wrong));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), path() + ": no tensor \"nope\" in the file");
  EXPECT_EQ(f->Info("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SafetensorsFile::Open(dir_.file("absent.safetensors"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

//===----------------------------------------------------------------------===//
// Corruptions
//===----------------------------------------------------------------------===//

TEST_F(SafetensorsTest, RefusesTruncatedAndHugeHeaders) {
  auto f = openBytes(std::string("\x10\0\0", 3));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.status().message(),
            path() + ": the file is 3 bytes, too short for the 8-byte header "
                     "length of a safetensors file");

  f = openBytes(le64(100) + "{}");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.status().message(),
            path() + ": header length 100 goes beyond the end of the file (10 "
                     "bytes, so at most 2 bytes of header): truncated file?");

  f = openBytes(le64(0xFFFFFFFFFFFFFFFFull) + "{}");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            path() + ": header length 18446744073709551615 exceeds the "
                     "format's limit of 100000000 bytes (not a safetensors "
                     "file, or a corrupt one)");
}

TEST_F(SafetensorsTest, RefusesMalformedJson) {
  std::string e = openError(R"({"w":{"dtype":"F32",)", "");
  EXPECT_TRUE(absl::StartsWith(e, path() + ": malformed JSON header: ")) << e;
  e = openError(R"([1,2])", "");
  EXPECT_EQ(e, path() + ": the header is not a JSON object (it starts with "
                        "\"[1,2]\")");
  e = openError(R"({"w":[1]})", "");
  EXPECT_EQ(e, path() + ": tensor \"w\": its entry is an array, not an object "
                        "with dtype, shape and data_offsets");
  e = openError(R"({"w":{"dtype":"F32","shape":[1]}})", f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": its entry has no \"data_offsets\"");
  e = openError(R"({"__metadata__":{"n":3}})", "");
  EXPECT_EQ(e, path() + ": __metadata__ key \"n\" is a number, not a string");
}

TEST_F(SafetensorsTest, MalformedHeaderBytesAreEscapedInTheError) {
  // A corrupt header's bytes (a terminal escape sequence, ill-formed UTF-8)
  // are quoted by the JSON parser's message: escaped, never copied raw.
  std::string e = openError("{\"a\": \x1b[31mRED\xff\xfe}", "");
  EXPECT_TRUE(absl::StartsWith(e, path() + ": malformed JSON header: ")) << e;
  for (unsigned char c : e.substr(path().size()))
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int(c) << " in " << e;
}

TEST_F(SafetensorsTest, RefusesDuplicateNames) {
  std::string e = openError(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      f32({1, 2}));
  EXPECT_TRUE(absl::StartsWith(
      e, path() + ": a key appears twice in the JSON header (a duplicate "
                  "tensor name?): "))
      << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, RefusesBadDtypeAndShape) {
  std::string e = openError(
      R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": unknown dtype \"F12\" (known: BOOL, "
                        "U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, "
                        "U32, F32, F64, I64, U64)");
  e = openError(R"({"w":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})",
                f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape[1] is negative (-1)");
  e = openError(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})",
                f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape[0] is 2.5, not an integer");
  e = openError(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})",
                f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape[0] is a string, not an integer");
  e = openError(R"({"w":{"dtype":"F32","shape":3,"data_offsets":[0,4]}})",
                f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape is a number, not an array");
  // 2^32 * 2^32 elements overflow 64 bits before the dtype size applies.
  e = openError(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
      f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape [4294967296, 4294967296] of F32 "
                        "overflows 64 bits when multiplied out");
  // 2^62 elements fit, 2^62 * 4 bytes do not.
  e = openError(
      R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,4]}})",
      f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": shape [2147483648, 2147483648] of F32 "
                        "overflows 64 bits when multiplied out");
}

TEST_F(SafetensorsTest, RefusesBadOffsets) {
  std::string e = openError(
      R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", f32({1, 2}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets [8, 4] end before they "
                        "begin");
  e = openError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
                f32({1, 2}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets must be an array [begin, "
                        "end], got an array of 3 values");
  e = openError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
                f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets[0] is negative (-4)");
  e = openError(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})",
                f32({1, 2}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets [0, 12] go beyond the end "
                        "of the file (the data buffer is 8 bytes): truncated "
                        "file?");
  e = openError(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})",
                f32({1, 2}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets [0, 8] span 8 bytes but "
                        "shape [3] of BF16 needs 6 bytes");
  e = openError(
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
      f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"w\": data_offsets[1] is "
                        "18446744073709551616, beyond 2^53 (not a plausible "
                        "size or offset)");
}

TEST_F(SafetensorsTest, RefusesOverlapsAndHoles) {
  std::string e = openError(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      f32({1, 2, 3}));
  EXPECT_EQ(e, path() + ": tensor \"b\" (bytes [4, 12)) overlaps tensor \"a\" "
                        "(which ends at byte 8)");
  e = openError(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      f32({1, 2, 3}));
  EXPECT_EQ(e, path() + ": bytes [4, 8) of the data buffer belong to no tensor "
                        "(a hole before tensor \"b\")");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                f32({1, 2}));
  EXPECT_EQ(e, path() + ": bytes [0, 4) of the data buffer belong to no tensor "
                        "(a hole before tensor \"a\")");
  e = openError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                f32({1, 2}));
  EXPECT_EQ(e, path() + ": bytes [4, 8) of the data buffer belong to no tensor "
                        "(4 bytes after the last tensor)");
  // Two tensors on the same bytes.
  e = openError(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
      f32({1}));
  EXPECT_EQ(e, path() + ": tensor \"b\" (bytes [0, 4)) overlaps tensor \"a\" "
                        "(which ends at byte 4)");
}

// Every prefix of a valid file and every single-byte change of its header
// must be refused or read without a crash or a read outside the mapping.
TEST_F(SafetensorsTest, NoCrashOnTruncationsAndByteFlips) {
  const std::string good = rawFile(
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      bits16({0x3C00, 0x0001, 0x7C00, 0xFC00}) + f32({5}));
  ASSERT_TRUE(openBytes(good).ok());
  auto readAll = [](const SafetensorsFile &f) {
    for (const std::string &name : f.names()) {
      TensorInfo info = *f.Info(name);
      std::vector<float> out(info.numElements);
      (void)f.ReadAsFloat32(name, absl::MakeSpan(out));
      std::vector<double> out64(info.numElements);
      (void)f.ReadAsFloat64(name, absl::MakeSpan(out64));
    }
  };
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = openBytes(good.substr(0, n));
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes";
  }
  const size_t headerEnd = good.size() - 12;
  for (size_t i = 0; i < headerEnd; ++i)
    for (unsigned char c : {'\0', '9', '-', '"', '}', '\xff', '1', ' '}) {
      std::string bad = good;
      bad[i] = static_cast<char>(c);
      auto f = openBytes(bad);
      if (f.ok())
        readAll(*f);
    }
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

std::vector<uint8_t> toBytes(const std::string &s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// The reference implementation's known answers (tensor.rs): 64-byte header
// needing no padding, then a 65-byte one padded with 7 spaces.
TEST_F(SafetensorsTest, WriterMatchesReferenceVectors) {
  const std::vector<uint8_t> data = toBytes(f32({0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(WriteSafetensors(path(),
                               {TensorToWrite{"attn.0", Dtype::kF32, {1, 2, 3},
                                              absl::MakeConstSpan(data)}},
                               {})
                  .ok());
  EXPECT_EQ(readBytes(path()),
            std::string("\x40\0\0\0\0\0\0\0", 8) +
                R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
                f32({0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(WriteSafetensors(path(),
                               {TensorToWrite{"attn0", Dtype::kF32,
                                              {1, 1, 2, 3},
                                              absl::MakeConstSpan(data)}},
                               {})
                  .ok());
  EXPECT_EQ(readBytes(path()),
            std::string("\x48\0\0\0\0\0\0\0", 8) +
                R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       )" +
                f32({0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(WriteSafetensors(path(), {}, {}).ok());
  EXPECT_EQ(readBytes(path()), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  ASSERT_TRUE(WriteSafetensors(path(), {}, {{"framework", "pt"}}).ok());
  EXPECT_EQ(readBytes(path()),
            std::string("\x28\0\0\0\0\0\0\0", 8) +
                R"({"__metadata__":{"framework":"pt"}}     )");
  EXPECT_FALSE(std::filesystem::exists(path() + ".tmp"));
}

// Tensors go by dtype alignment, descending, then by name; metadata first.
TEST_F(SafetensorsTest, WriterOrderMatchesIndependentBytes) {
  const std::vector<uint8_t> b = toBytes(f32({1, 2}));
  const std::vector<uint8_t> a = toBytes(f32({3}));
  const std::vector<uint8_t> c = toBytes(bits16({0x3F80, 0xC000}));
  const std::vector<uint8_t> z = toBytes(le64(7));
  std::vector<TensorToWrite> tensors = {
      {"b", Dtype::kF32, {2}, absl::MakeConstSpan(b)},
      {"c", Dtype::kBF16, {2}, absl::MakeConstSpan(c)},
      {"a", Dtype::kF32, {1}, absl::MakeConstSpan(a)},
      {"z", Dtype::kI64, {1}, absl::MakeConstSpan(z)},
  };
  ASSERT_TRUE(
      WriteSafetensors(path(), tensors, {{"format", "pt"}, {"a", "x"}}).ok());
  const std::string header =
      R"({"__metadata__":{"a":"x","format":"pt"},"z":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},"c":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]}}      )";
  ASSERT_EQ(header.size(), 264u);
  EXPECT_EQ(readBytes(path()), rawFile(header, le64(7) + f32({3}) +
                                                   f32({1, 2}) +
                                                   bits16({0x3F80, 0xC000})));
  auto f = SafetensorsFile::Open(path());
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> out(2);
  ASSERT_TRUE(f->ReadAsFloat32("c", absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f}));
}

TEST_F(SafetensorsTest, WriterEscapesNamesLikeSerdeJson) {
  const std::vector<uint8_t> a = toBytes(f32({1}));
  const std::string name = "q\"b\\s\n\x01/\xc3\xa9";
  ASSERT_TRUE(WriteSafetensors(path(),
                               {TensorToWrite{name, Dtype::kF32, {},
                                              absl::MakeConstSpan(a)}},
                               {})
                  .ok());
  const std::string header =
      "{\"q\\\"b\\\\s\\n\\u0001/\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[],"
      "\"data_offsets\":[0,4]}}";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(readBytes(path()), rawFile(padded, f32({1})));
  auto f = SafetensorsFile::Open(path());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->names(), std::vector<std::string>{name});
}

TEST_F(SafetensorsTest, WriterRefusesBadInput) {
  const std::vector<uint8_t> four = toBytes(f32({1}));
  auto err = [&](std::vector<TensorToWrite> t) {
    absl::Status s = WriteSafetensors(path(), t, {});
    return std::string(s.message());
  };
  const std::string where = "cannot write " + path() + ": ";
  EXPECT_EQ(err({{"a", Dtype::kF32, {1}, absl::MakeConstSpan(four)},
                 {"a", Dtype::kBF16, {2}, absl::MakeConstSpan(four)}}),
            where + "two tensors are named \"a\"");
  EXPECT_EQ(err({{"a", Dtype::kF32, {2}, absl::MakeConstSpan(four)}}),
            where + "tensor \"a\" has 4 bytes of data but shape [2] of F32 "
                    "needs 8");
  EXPECT_EQ(err({{"a", Dtype::kF32, {-1}, absl::MakeConstSpan(four)}}),
            where + "tensor \"a\" has shape [-1] with a negative dimension");
  EXPECT_EQ(err({{"__metadata__", Dtype::kF32, {1}, absl::MakeConstSpan(four)}}),
            where + "\"__metadata__\" is reserved and cannot name a tensor");
  EXPECT_FALSE(std::filesystem::exists(path()));
  EXPECT_FALSE(std::filesystem::exists(path() + ".tmp"));
}

} // namespace
