// Element types of checkpoint tensors and their scalar conversions to and from float.
//
// The engine computes in float; weights stay in their stored type (F32, F16, BF16) or are
// quantized at load to int8 blocks. These scalar conversions are the reference the vectorized
// kernels are tested against and what loaders use for small tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace aicloud::engine {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
};

// Bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

// The name safetensors headers use ("F32", "F16", "BF16").
constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

// Parses a safetensors dtype name; nullopt for anything the engine does not load.
inline std::optional<DType> ParseDType(std::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return std::nullopt;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE 754 binary16 -> binary32, exact for every number (subnormals and inf included); NaNs keep
// sign and payload and come back quiet. Bit-identical to the F16C instruction VCVTPH2PS.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {
    if (mant == 0) return BitsToFloat(sign | 0x7f800000u);  // inf
    return BitsToFloat(sign | 0x7fc00000u | (mant << 13));  // NaN, quieted as F16C does
  }
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);  // +-0
    // Subnormal: normalize.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsToFloat(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return BitsToFloat(sign | (exp + (127 - 15)) << 23 | (mant << 13));
}

// binary32 -> binary16 with round-to-nearest-even; overflow goes to inf, NaN stays NaN.
// Bit-identical to the F16C instruction (VCVTPS2PH, round-to-nearest) for every input.
inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, keeping the top payload bits (what F16C does)
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < half of the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t r = abs - ((127 - 15) << 23);
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

// bfloat16 is the top half of a binary32.
inline float BF16ToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// binary32 -> bfloat16 with round-to-nearest-even; NaN stays NaN.
inline uint16_t FloatToBF16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace aicloud::engine
