// Scalar maths written so that GCC vectorises loops over it (no library calls, no branches), for
// the fused CPU kernels of the trainer. Accurate to float rounding (a few ulp); tested against
// std:: in tests/trainer/model_test.cc. Header-only, pure functions.
#pragma once

#include <cstdint>

namespace narrows::trainer {

// e^x for x <= 0 (Cephes expf: range reduction by ln 2, degree-6 polynomial).
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float n = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * __builtin_bit_cast(float, bits);
}

// Sum of x[0..n) (and of a[j] * b[j]) in eight fixed lanes, lane k taking every j = k mod 8, the
// lanes then added in order. The result depends on n alone, never on where x lies in memory: an
// `omp simd reduction` peels iterations until its pointer is aligned, so its sum would change with
// the heap's addresses and two identical runs could differ in the last bit. GCC vectorises the
// lanes (straight-line code, no reassociation needed).
inline float SumInLanes(const float* x, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += x[j + k];
  }
  for (int k = 0; j < n; ++j, ++k) lane[k] += x[j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

inline float DotInLanes(const float* a, const float* b, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += a[j + k] * b[j + k];
  }
  for (int k = 0; j < n; ++j, ++k) lane[k] += a[j] * b[j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace narrows::trainer
