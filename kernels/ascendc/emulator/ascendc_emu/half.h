// `half` on the CPU: IEEE 754 binary16 with round-to-nearest-even.
//
// `half` is IEEE binary16; fp16 arithmetic computed in fp32 and rounded once to nearest-even is bit-exact with the
// NPU (INVARIANTS.md, "Semantics reproduced").
// Every vector operation computes in float and rounds once, which is also what numpy does for float16, so kernel
// results can be compared with numpy bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ascendc_emu {

inline uint16_t float_to_half_bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN (kept quiet, payload truncated)
    return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero); units of 2^-24
    float a;
    std::memcpy(&a, &magnitude, sizeof a);
    // a * 2^24 is exact in float; nearbyint rounds to nearest-even in the default rounding mode. 1024 units
    // carry into the smallest normal, which has the same bit pattern.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const uint32_t mantissa = magnitude & 0x7fffffu;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is still correct
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // exact
    return sign ? -value : value;
  }
  const uint32_t bits = exponent == 31 ? sign | 0x7f800000u | (mantissa << 13)
                                       : sign | ((exponent + 112) << 23) | (mantissa << 13);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// The storage is exactly two bytes, so GM and UB buffers of `half` have the NPU's layout.
struct Half {
  uint16_t bits = 0;

  Half() = default;
  template <typename U, typename = std::enable_if_t<std::is_arithmetic_v<U>>>
  Half(U value) : bits(float_to_half_bits(static_cast<float>(value))) {}  // NOLINT: implicit like CANN's half

  operator float() const { return half_bits_to_float(bits); }  // NOLINT

  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2, "half must be two bytes");

// The type arithmetic is done in: float for half (then one rounding), the type itself otherwise.
template <typename T>
using ComputeType = std::conditional_t<std::is_same_v<T, Half>, float, T>;

}  // namespace ascendc_emu
