// Internal: AVX2 building blocks shared by the kernels' vector paths.
//
// Everything here carries the avx2,fma,f16c target attribute instead of relying on global
// -mavx2 flags, so translation units that include it still run on any x86-64: callers reach
// these functions only after ActiveIsa() said kAvx2. Functions are static inline so each
// translation unit gets its own copy and no AVX2 code can be picked by the linker for a
// baseline caller. Not part of the public API.
#pragma once

#if defined(__x86_64__)
#define AICLOUD_KERNELS_HAVE_AVX2 1
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define AICLOUD_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AICLOUD_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

namespace aicloud::engine::kernels::avx2 {

// Lanes [0, n) set, the others clear; n in [0, 8].
AICLOUD_AVX2_INLINE __m256i TailMask(int64_t n) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
}

AICLOUD_AVX2_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AICLOUD_AVX2_INLINE float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of four vectors, lane i of the result = sum of vector i.
AICLOUD_AVX2_INLINE __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0123 b0123 c0123 d0123 | a4567 ...
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Eight halves / bfloats at p (unaligned) as floats.
AICLOUD_AVX2_INLINE __m256 LoadHalf8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
AICLOUD_AVX2_INLINE __m256 LoadBF16x8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
// Eight int8 at p as floats.
AICLOUD_AVX2_INLINE __m256 LoadInt8x8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(v)));
}

AICLOUD_AVX2_INLINE float HalfToFloatF16C(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// e^x for every lane, relative error below 2e-7 for x in [-87.3, 88.7]; 0 below, +inf above,
// NaN stays NaN. Cody-Waite range reduction and the Cephes expf polynomial.
AICLOUD_AVX2_INLINE __m256 Exp(__m256 x) {
  const __m256 kMax = _mm256_set1_ps(88.7228391f);
  const __m256 kMin = _mm256_set1_ps(-87.3365447f);
  const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, kMax), kMin);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n in two halves so n = 128 (x just below ln(FLT_MAX)) does not overflow the exponent.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  // Exact limits: 0 for x < kMin (also -inf), inf for x > kMax, NaN propagates.
  result = _mm256_andnot_ps(_mm256_cmp_ps(x, kMin, _CMP_LT_OQ), result);
  result = _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, kMax, _CMP_GT_OQ));
  result = _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return result;
}

}  // namespace aicloud::engine::kernels::avx2

#endif  // __x86_64__
