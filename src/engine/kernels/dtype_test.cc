#include "engine/kernels/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/kernels/cpu.h"
#include "engine/kernels/matrix.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace aicloud::engine {
namespace {

using kernels::DetectedIsa;
using kernels::Isa;
using kernels::ScopedIsa;

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBF16NaN(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(DType, NamesSizesAndParsing) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(ParseDType(DTypeName(t)), t);
  }
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(ParseDType("F64"), std::nullopt);
  EXPECT_EQ(ParseDType("f16"), std::nullopt);  // safetensors names are upper case
  EXPECT_EQ(ParseDType(""), std::nullopt);
}

// Every one of the 65,536 halves converts to the float it denotes and back to itself.
TEST(DType, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = HalfToFloat(bits);
    if (IsHalfNaN(bits)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // A signalling NaN comes back quiet; sign and payload survive.
      ASSERT_EQ(FloatToHalf(f), bits | 0x200u) << std::hex << h;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), bits) << std::hex << h;
    // The value itself: sign * 2^(e-15) * 1.m, or 2^-14 * 0.m for subnormals.
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    const double mag = e == 0x1f ? std::numeric_limits<double>::infinity()
                       : e == 0  ? std::ldexp(m, -24)
                                 : std::ldexp(1024 + m, e - 25);
    ASSERT_EQ(static_cast<double>(f), (h & 0x8000u) ? -mag : mag) << std::hex << h;
  }
}

// Between every pair of adjacent finite halves: the exact midpoint rounds to the one with an
// even mantissa, and one float ulp either side of it rounds to the nearer one.
TEST(DType, FloatToHalfRoundsToNearestTiesToEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const auto lo = static_cast<uint16_t>(h | sign);
      const auto hi = static_cast<uint16_t>((h + 1) | sign);  // 0x7bff + 1 = inf
      const double a = HalfToFloat(lo);
      const double b = (h + 1 == 0x7c00) ? (sign ? -65536.0 : 65536.0) : HalfToFloat(hi);
      const auto mid = static_cast<float>((a + b) / 2);  // exact in float
      ASSERT_EQ(static_cast<double>(mid), (a + b) / 2);
      const uint16_t even = (h & 1u) ? hi : lo;
      ASSERT_EQ(FloatToHalf(mid), even) << std::hex << h;
      const float toward_lo = std::nextafter(mid, static_cast<float>(a));
      const float toward_hi = std::nextafter(mid, sign ? -INFINITY : INFINITY);
      ASSERT_EQ(FloatToHalf(toward_lo), lo) << std::hex << h;
      ASSERT_EQ(FloatToHalf(toward_hi), hi) << std::hex << h;
    }
  }
}

TEST(DType, FloatToHalfHandPickedCases) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);         // tie, even stays
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);     // tie, odd rounds up
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);                // largest half
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);              // just below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                // tie with "65536" -> inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);                // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);                // tie with 0 -> 0 (even)
  EXPECT_EQ(FloatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);            // tie, odd rounds up
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);     // largest subnormal ties up to normal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(std::numeric_limits<float>::signaling_NaN())));
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareFloatToHalf(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float HardwareHalfToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// The scalar conversions agree bit for bit with F16C, over all halves and over a spread of
// 2^20 float bit patterns (every exponent, many mantissas, NaN payloads included).
TEST(DType, ScalarMatchesF16CHardware) {
  if (DetectedIsa() != Isa::kAvx2) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float a = HalfToFloat(static_cast<uint16_t>(h));
    const float b = HardwareHalfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatToBits(a), FloatToBits(b)) << std::hex << h;
  }
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 4093) {
    const float f = BitsToFloat(static_cast<uint32_t>(i));
    ASSERT_EQ(FloatToHalf(f), HardwareFloatToHalf(f)) << std::hex << i;
  }
}
#endif

TEST(DType, AllBFloatsRoundTrip) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = BF16ToFloat(bits);
    EXPECT_EQ(FloatToBits(f), b << 16);
    if (IsBF16NaN(bits)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(FloatToBF16(f), bits | 0x40u) << std::hex << b;
    } else {
      ASSERT_EQ(FloatToBF16(f), bits) << std::hex << b;
    }
  }
}

TEST(DType, FloatToBF16RoundsToNearestTiesToEven) {
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t lo = (b | sign) << 16;
      const uint32_t mid = lo + 0x8000u;  // halfway to the next bfloat16
      const uint16_t even = static_cast<uint16_t>((b & 1u) ? (b + 1) | sign : b | sign);
      ASSERT_EQ(FloatToBF16(BitsToFloat(mid)), even) << std::hex << b;
      ASSERT_EQ(FloatToBF16(BitsToFloat(mid - 1)), static_cast<uint16_t>(b | sign));
      ASSERT_EQ(FloatToBF16(BitsToFloat(mid + 1)), static_cast<uint16_t>((b + 1) | sign));
    }
  }
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the max
  EXPECT_TRUE(IsBF16NaN(FloatToBF16(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low half must not turn into infinity.
  EXPECT_TRUE(IsBF16NaN(FloatToBF16(BitsToFloat(0x7f800001u))));
}

// The vectorised bulk conversions produce the same bits as the scalar ones.
TEST(DType, BulkConversionsMatchScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> floats(all.size() + 3);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2}) {
    ScopedIsa scoped(isa);
    for (DType t : {DType::kF16, DType::kBF16}) {
      kernels::ConvertToFloat(t, all.data() + 3, floats.data(), 65533);  // odd length, offset
      for (uint32_t i = 3; i < all.size(); ++i) {
        const float want = t == DType::kF16 ? HalfToFloat(all[i]) : BF16ToFloat(all[i]);
        ASSERT_EQ(FloatToBits(floats[i - 3]), FloatToBits(want)) << std::hex << i;
      }
    }
    std::vector<float> src;
    for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 65537) src.push_back(BitsToFloat(static_cast<uint32_t>(i)));
    std::vector<uint16_t> out(src.size());
    for (DType t : {DType::kF16, DType::kBF16}) {
      kernels::ConvertFromFloat(t, src.data(), out.data(), static_cast<int64_t>(src.size()));
      for (size_t i = 0; i < src.size(); ++i) {
        const uint16_t want = t == DType::kF16 ? FloatToHalf(src[i]) : FloatToBF16(src[i]);
        ASSERT_EQ(out[i], want) << i;
      }
    }
  }
}

}  // namespace
}  // namespace aicloud::engine
