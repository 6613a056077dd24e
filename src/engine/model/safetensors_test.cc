#include "engine/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "engine/model/model_test_util.h"
#include "engine/model/safetensors_writer.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;
using namespace std::string_literals;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// The bytes of `values` stored as `dtype`.
std::string Encode(DType dtype, const std::vector<float>& values) {
  std::string out(values.size() * DTypeSize(dtype), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[4 * i], &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? FloatToHalf(values[i]) : FloatToBF16(values[i]);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

// A safetensors file from a header text and a data buffer.
std::string File(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
};

TEST(SafetensorsTest, RoundTripsEveryDTypeAndShape) {
  const std::vector<Tensor> shapes = {
      {"scalar", {}},        {"empty", {0}},         {"vector", {5}},           {"matrix", {3, 4}},
      {"empty.rows", {0, 7}}, {"cube", {2, 1, 3}},   {"model.layers.0.w", {2, 2}},
  };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    TempDir dir;
    std::vector<std::vector<float>> values;
    std::vector<std::string> bytes;
    std::vector<TensorToWrite> writes;
    for (size_t t = 0; t < shapes.size(); ++t) {
      size_t n = 1;
      for (int64_t d : shapes[t].shape) n *= static_cast<size_t>(d);
      std::vector<float> v(n);
      // Values each dtype represents exactly.
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i) - 3) * 0.25f + static_cast<float>(t);
      values.push_back(v);
      bytes.push_back(Encode(dtype, v));
    }
    for (size_t t = 0; t < shapes.size(); ++t) {
      writes.push_back({.name = shapes[t].name, .dtype = dtype, .shape = shapes[t].shape,
                        .data = std::as_bytes(std::span(bytes[t].data(), bytes[t].size()))});
    }
    ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", writes, {{"format", "pt"}, {"note", "test"}}).ok());

    const std::string raw = ReadAll(dir / "m.safetensors");
    uint64_t header_len = 0;
    std::memcpy(&header_len, raw.data(), 8);
    EXPECT_EQ(header_len % 8, 0u) << "data must start 8-aligned";
    const json header = json::parse(raw.substr(8, header_len));
    EXPECT_EQ(header["__metadata__"]["note"], "test");

    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir / "m.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->tensors().size(), shapes.size());
    EXPECT_EQ((*f)->metadata().at("format"), "pt");
    EXPECT_EQ((*f)->file_size(), raw.size());
    EXPECT_EQ((*f)->Find("missing"), nullptr);
    for (size_t t = 0; t < shapes.size(); ++t) {
      const TensorView* v = (*f)->Find(shapes[t].name);
      ASSERT_NE(v, nullptr) << shapes[t].name;
      EXPECT_EQ(v->name, shapes[t].name);
      EXPECT_EQ(v->dtype, dtype);
      EXPECT_EQ(v->shape, shapes[t].shape);
      EXPECT_EQ(v->nbytes, bytes[t].size());
      EXPECT_EQ(v->numel(), values[t].size());
      EXPECT_TRUE(v->aligned());
      EXPECT_EQ(std::memcmp(v->data, bytes[t].data(), bytes[t].size()), 0);
      EXPECT_EQ(TensorToFloat(*v), values[t]);
      if (!values[t].empty() && shapes[t].shape.size() >= 1) {
        std::vector<float> row(v->row_size());
        RowToFloat(*v, v->rows() - 1, row);
        EXPECT_EQ(row, std::vector<float>(values[t].end() - static_cast<long>(row.size()), values[t].end()));
      }
    }
  }
}

// The process's resident set in KiB (smaps_rollup: mapped file pages included).
int64_t RssKib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  int64_t kib = -1;
  while (in >> key) {
    if (key == "Rss:") {
      in >> kib;
      break;
    }
  }
  return kib;
}

TEST(SafetensorsTest, DropPagesGivesACopiedTensorsMemoryBack) {
  TempDir dir;
  std::vector<float> big(4 << 20);  // 16 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  TensorToWrite t{.name = "w", .dtype = DType::kF32, .shape = {static_cast<int64_t>(big.size())},
                  .data = std::as_bytes(std::span(big))};
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", {&t, 1}).ok());
  big.clear();
  big.shrink_to_fit();
  StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView* v = (*f)->Find("w");
  ASSERT_NE(v, nullptr);
  ASSERT_TRUE((*f)->Owns(*v));
  auto sum = [&] {
    double s = 0;
    const auto* p = static_cast<const float*>(v->data);
    for (size_t i = 0; i < v->nbytes / 4; ++i) s += p[i];
    return s;
  };
  const double first = sum();  // every page read: resident
  const int64_t before = RssKib();
  (*f)->DropPages(*v);
  const int64_t after = RssKib();
  ASSERT_GT(before, 0) << "no /proc/self/smaps_rollup";
  EXPECT_LT(after, before - 12 * 1024) << "RSS " << before << " KiB -> " << after << " KiB";
  EXPECT_EQ(sum(), first);  // still readable: the pages come back from the file

  // A view that is not the file's is left alone.
  std::vector<float> heap(8192, 3.0f);
  TensorView other = *v;
  other.data = heap.data();
  other.nbytes = heap.size() * 4;
  EXPECT_FALSE((*f)->Owns(other));
  (*f)->DropPages(other);
  EXPECT_EQ(heap[4096], 3.0f);
}

TEST(SafetensorsTest, MixedDTypesStayAligned) {
  TempDir dir;
  // An odd number of F16 elements would misalign an F32 tensor placed after it; the writer puts
  // wider elements first.
  std::string a = Encode(DType::kF16, {1, 2, 3});
  std::string b = Encode(DType::kF32, {4, 5});
  std::string c = Encode(DType::kBF16, {6});
  std::vector<TensorToWrite> w = {
      {.name = "a", .dtype = DType::kF16, .shape = {3}, .data = std::as_bytes(std::span(a.data(), a.size()))},
      {.name = "b", .dtype = DType::kF32, .shape = {2}, .data = std::as_bytes(std::span(b.data(), b.size()))},
      {.name = "c", .dtype = DType::kBF16, .shape = {1}, .data = std::as_bytes(std::span(c.data(), c.size()))},
  };
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", w).ok());
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors()[0].name, "b");  // data order: F32 first
  for (const TensorView& t : (*f)->tensors()) EXPECT_TRUE(t.aligned()) << t.name;
  EXPECT_EQ(TensorToFloat(*(*f)->Find("a")), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(TensorToFloat(*(*f)->Find("b")), (std::vector<float>{4, 5}));
  EXPECT_EQ(TensorToFloat(*(*f)->Find("c")), (std::vector<float>{6}));
}

TEST(SafetensorsTest, ReadsUnalignedData) {
  TempDir dir;
  // Other writers need not pad the header: here F32 data starts at an odd file offset.
  const std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  std::string padded = header;
  while ((8 + padded.size()) % 4 != 1) padded += ' ';  // trailing whitespace is allowed
  WriteAll(dir / "u.safetensors", File(padded, Encode(DType::kF32, {1.5f, -2.0f, 3.25f})));
  auto f = SafetensorsFile::Open(dir / "u.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorView* w = (*f)->Find("w");
  EXPECT_FALSE(w->aligned());
  EXPECT_EQ(TensorToFloat(*w), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<float> two(2);
  ConvertToFloat(*w, 1, two);
  EXPECT_EQ(two, (std::vector<float>{-2.0f, 3.25f}));
}

TEST(SafetensorsTest, AcceptsAnyHeaderOrderAndUnsupportedDTypes) {
  TempDir dir;
  // "b" sorts first in the JSON object but sits second in the buffer; "ids" is I64, which the
  // format allows and the engine does not load.
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[8,24]},"__metadata__":{"format":"pt"}}   )";
  WriteAll(dir / "m.safetensors", File(header, Encode(DType::kF32, {1, 2}) + std::string(16, '\0')));
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->tensors()[0].name, "a");
  EXPECT_EQ((*f)->Find("ids"), nullptr);
  EXPECT_EQ((*f)->unsupported().at("ids"), "I64");
}

struct HostileCase {
  std::string name;
  std::string bytes;    // the whole file
  std::string message;  // substring of the error
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(SafetensorsTest, RejectsHostileFiles) {
  const std::string d16(16, '\0');
  const std::string d24(24, '\0');
  auto one = [](const std::string& e) { return "{" + e + "}"; };
  std::string huge_len(8, '\0');
  huge_len[5] = 1;  // 2^40
  std::string past_end(8, '\0');
  past_end[0] = static_cast<char>(200);
  std::string big_cap(8, '\0');
  const uint64_t just_over = SafetensorsFile::kMaxHeaderBytes + 1;
  std::memcpy(big_cap.data(), &just_over, 8);
  const std::string valid = File(one(Entry("w", "F32", "[2,3]", "[0,24]")), d24);

  const std::vector<HostileCase> cases = {
      {"empty file", "", "0 bytes is too short for a safetensors file"},
      {"shorter than the length", "abcd", "4 bytes is too short"},
      {"absurd header length", huge_len + "{}", "header length 1099511627776 exceeds the 100000000-byte limit"},
      {"header over the cap", big_cap + "{}", "exceeds the 100000000-byte limit"},
      {"header past the end", past_end + "{}", "header length 200 runs past the end of the file (10 bytes"},
      {"not JSON", File("{\"w\": nope}", ""), "header is not valid JSON"},
      {"truncated JSON", File("{\"w\": {\"dtype\"", ""), "header is not valid JSON"},
      {"invalid UTF-8", File("{\"w\xff\": 1}", ""), "header is not valid JSON"},
      {"NUL padding", File("{}\0\0\0\0\0\0"s, ""), "header is not valid JSON"},
      {"not an object", File("[1,2]", ""), "header must be a JSON object, got array"},
      {"entry not an object", File("{\"w\": 5}", ""), "tensor 'w': entry must be an object"},
      {"duplicate tensor", File("{" + Entry("w", "F32", "[1]", "[0,4]") + "," + Entry("w", "F32", "[1]", "[4,8]") + "}",
                                std::string(8, '\0')),
       "header names 'w' twice"},
      {"duplicate field", File("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                               std::string(4, '\0')),
       "header names 'dtype' twice"},
      {"unknown dtype", File(one(Entry("w", "F17", "[2]", "[0,8]")), std::string(8, '\0')),
       "tensor 'w': unknown dtype 'F17'"},
      {"missing dtype", File("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')),
       "tensor 'w': missing or non-string dtype"},
      {"missing shape", File("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", std::string(4, '\0')),
       "tensor 'w': missing shape"},
      {"negative dim", File(one(Entry("w", "F32", "[2,-1]", "[0,8]")), std::string(8, '\0')),
       "tensor 'w': shape [2,-1] must hold non-negative integers"},
      {"fractional dim", File(one(Entry("w", "F32", "[2.5]", "[0,8]")), std::string(8, '\0')),
       "must hold non-negative integers"},
      {"shape overflow", File(one(Entry("w", "F32", "[4611686018427387904,4611686018427387904]", "[0,8]")),
                              std::string(8, '\0')),
       "tensor 'w': shape [4611686018427387904,4611686018427387904] overflows a 64-bit byte count"},
      {"byte count overflow", File(one(Entry("w", "F32", "[4611686018427387904]", "[0,8]")), std::string(8, '\0')),
       "overflows a 64-bit byte count"},
      {"bad offsets", File(one(Entry("w", "F32", "[1]", "[0,4,8]")), std::string(8, '\0')),
       "tensor 'w': data_offsets must be [begin, end]"},
      {"negative offset", File(one(Entry("w", "F32", "[1]", "[-4,0]")), std::string(8, '\0')),
       "tensor 'w': data_offsets must be [begin, end]"},
      {"reversed offsets", File(one(Entry("w", "F32", "[0]", "[8,0]")), std::string(8, '\0')),
       "tensor 'w': data_offsets [8, 0] end before they begin"},
      {"size mismatch", File(one(Entry("w", "F32", "[2,3]", "[0,20]")), std::string(20, '\0')),
       "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20"},
      {"offsets past the data", File(one(Entry("w", "F32", "[2,3]", "[0,24]")), d16),
       "tensor 'w': data_offsets [0, 24] run past the end of the data (16 bytes; truncated file?)"},
      {"truncated data", valid.substr(0, valid.size() - 4), "tensor 'w': data_offsets [0, 24] run past the end of the data (20 bytes"},
      {"overlap", File("{" + Entry("a", "F32", "[4]", "[0,16]") + "," + Entry("b", "F32", "[4]", "[8,24]") + "}", d24),
       "tensor 'b': data_offsets [8, 24] overlap tensor 'a' (which ends at 16)"},
      {"gap", File("{" + Entry("a", "F32", "[2]", "[0,8]") + "," + Entry("b", "F32", "[2]", "[16,24]") + "}", d24),
       "tensor 'b': data_offsets [16, 24] leave a gap of 8 bytes after offset 8"},
      {"leading gap", File(one(Entry("a", "F32", "[2]", "[8,16]")), d16), "tensor 'a': data_offsets [8, 16] leave a gap"},
      {"trailing bytes", File(one(Entry("a", "F32", "[2]", "[0,8]")), d16),
       "the last 8 bytes of the data buffer belong to no tensor"},
      {"data without tensors", File("{}", d16), "the last 16 bytes of the data buffer belong to no tensor"},
      {"metadata not an object", File("{\"__metadata__\": [1]}", ""), "__metadata__ must be an object of strings"},
      {"metadata value not a string", File("{\"__metadata__\": {\"k\": 1}}", ""), "__metadata__.k must be a string"},
      {"sub-byte dtype with odd count", File(one(Entry("w", "F4", "[3]", "[0,2]")), std::string(2, '\0')),
       "tensor 'w': shape [3] of F4 is not a whole number of bytes"},
  };
  for (const HostileCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    TempDir dir;
    WriteAll(dir / "bad.safetensors", tc.bytes);
    StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(dir / "bad.safetensors");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status();
    EXPECT_NE(f.status().message().find((dir / "bad.safetensors").string() + ": "), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find(tc.message), std::string::npos) << f.status();
  }
}

TEST(SafetensorsTest, OpenErrors) {
  TempDir dir;
  auto missing = SafetensorsFile::Open(dir / "nope.safetensors");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.safetensors: cannot open"), std::string::npos);
  auto directory = SafetensorsFile::Open(dir.path());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);
}

// Random corruptions of a valid file: every one either opens with consistent views or fails
// with DATA_LOSS; none crashes or reads out of bounds (run under ASan to check the latter).
TEST(SafetensorsTest, SurvivesRandomCorruption) {
  TempDir dir;
  std::string a = Encode(DType::kF16, {1, 2, 3, 4, 5, 6});
  std::string b = Encode(DType::kF32, {1, 2});
  std::vector<TensorToWrite> w = {
      {.name = "a", .dtype = DType::kF16, .shape = {2, 3}, .data = std::as_bytes(std::span(a.data(), a.size()))},
      {.name = "b", .dtype = DType::kF32, .shape = {2}, .data = std::as_bytes(std::span(b.data(), b.size()))},
  };
  ASSERT_TRUE(WriteSafetensors(dir / "ok.safetensors", w).ok());
  const std::string good = ReadAll(dir / "ok.safetensors");
  Rng rng(7);
  int opened = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    const int edits = 1 + static_cast<int>(rng.Uniform(3));
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng.Uniform(bad.size());
      switch (rng.Uniform(4)) {
        case 0: bad[at] = static_cast<char>(rng.Uniform(256)); break;
        case 1: bad[at] = "0123456789[]{},:\"-"[rng.Uniform(18)]; break;
        case 2: bad.erase(at, 1 + rng.Uniform(4)); break;
        case 3: bad.resize(at); break;
      }
    }
    WriteAll(dir / "bad.safetensors", bad);
    auto f = SafetensorsFile::Open(dir / "bad.safetensors");
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status();
      continue;
    }
    ++opened;
    for (const TensorView& t : (*f)->tensors()) {
      EXPECT_LE(t.nbytes, (*f)->file_size());
      (void)TensorToFloat(t);  // touches every byte
    }
  }
  EXPECT_GT(opened, 0);  // some edits land in tensor data and leave the file valid
}

TEST(SafetensorsWriterTest, RejectsBadInput) {
  TempDir dir;
  std::string four(4, '\0');
  auto bytes = std::as_bytes(std::span(four.data(), four.size()));
  struct Case {
    std::vector<TensorToWrite> tensors;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{.name = "w", .dtype = DType::kF32, .shape = {1}, .data = bytes},
        {.name = "w", .dtype = DType::kF32, .shape = {1}, .data = bytes}},
       "tensor 'w': given twice"},
      {{{.name = "w", .dtype = DType::kF32, .shape = {2}, .data = bytes}}, "tensor 'w': 4 bytes given, shape needs 8"},
      {{{.name = "__metadata__", .dtype = DType::kF32, .shape = {1}, .data = bytes}}, "reserved or empty name"},
      {{{.name = "w", .dtype = DType::kF32, .shape = {-1}, .data = bytes}}, "negative dimension"},
  };
  for (const Case& c : cases) {
    Status s = WriteSafetensors(dir / "w.safetensors", c.tensors);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
    EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors"));
  }
  // Nothing is left behind when the target directory does not exist.
  Status s = WriteSafetensors(dir / "no" / "w.safetensors",
                              std::vector<TensorToWrite>{{.name = "w", .dtype = DType::kF32, .shape = {1}, .data = bytes}});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s;
}

TEST(SafetensorsWriterTest, FillProducesChunksInOrder) {
  TempDir dir;
  // 3M F32 elements = 12 MB: more than one 8 MB chunk.
  const int64_t n = 3'000'000;
  TensorToWrite t{.name = "big", .dtype = DType::kF32, .shape = {n}};
  size_t next = 0;
  t.fill = [&next](size_t offset, std::span<std::byte> chunk) {
    EXPECT_EQ(offset, next);
    for (size_t i = 0; i < chunk.size(); i += 4) {
      const float v = static_cast<float>((offset + i) / 4);
      std::memcpy(chunk.data() + i, &v, 4);
    }
    next += chunk.size();
  };
  ASSERT_TRUE(WriteSafetensors(dir / "big.safetensors", std::span(&t, 1)).ok());
  auto f = SafetensorsFile::Open(dir / "big.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> v = TensorToFloat(*(*f)->Find("big"));
  ASSERT_EQ(v.size(), static_cast<size_t>(n));
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[2'097'152], 2'097'152.0f);  // first element of the second chunk
  EXPECT_EQ(v[n - 1], static_cast<float>(n - 1));
}

}  // namespace
}  // namespace aicloud::engine
