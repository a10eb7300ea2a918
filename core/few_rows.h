// The product of core/few_rows.cpp over weights laid out once in panels, for every source of the
// extension (few_rows.cpp says why the layout, core/few_rows_pass.cpp runs a pass with it).
//
// y [m, n] = x [m, k] W^T, W laid out as panels [ceil(n / kPanel), k, kPanel]: column j of panel p is
// output p * kPanel + j, zero past n (in bfloat16 a row's columns lie in pairs: load_row). A panel is
// two vectors wide, and each panel is multiplied by up to kBlock rows held in 2 * kBlock vector
// registers, so every weight element read feeds kBlock fused multiply-adds; the panels split between
// the threads.
//
// The extension is built for the CPU's vector width (core/few_rows.py passes CPU_CAPABILITY_AVX512 or
// CPU_CAPABILITY_AVX2, as inductor does): `simd` below is the few vector operations the kernels use,
// at that width, so each kernel is written once.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace simd {

#if defined(CPU_CAPABILITY_AVX512)
using V = __m512;
constexpr int kLanes = 16;
constexpr int kRegisters = 32;
inline V zero() { return _mm512_setzero_ps(); }
inline V load(const float* p) { return _mm512_loadu_ps(p); }
inline V broadcast(float a) { return _mm512_set1_ps(a); }
inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
// The first `count` lanes of v (0 to kLanes) into p, the memory past them untouched.
inline void store_first(float* p, V v, int count) {
  _mm512_mask_storeu_ps(p, count >= kLanes ? 0xFFFF : (1u << std::max(count, 0)) - 1, v);
}
inline float sum(V v) { return _mm512_reduce_add_ps(v); }
// 2 * kLanes bfloat16 (a float32's upper 16 bits), as pairs: each 32-bit word's low half, shifted up, is
// one float32 of `lo` and its high half, kept in place, one of `hi`; exact, in two instructions.
inline void widen_pairs(const at::BFloat16* p, V& lo, V& hi) {
  const __m512i words = _mm512_loadu_si512(p);
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
  hi = _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
#elif defined(CPU_CAPABILITY_AVX2)
using V = __m256;
constexpr int kLanes = 8;
constexpr int kRegisters = 16;
inline V zero() { return _mm256_setzero_ps(); }
inline V load(const float* p) { return _mm256_loadu_ps(p); }
inline V broadcast(float a) { return _mm256_set1_ps(a); }
inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
inline void store_first(float* p, V v, int count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lanes), v);
}
inline float sum(V v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}
inline void widen_pairs(const at::BFloat16* p, V& lo, V& hi) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
  hi = _mm256_castsi256_ps(_mm256_and_si256(words, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
#else
#error "few_rows: built for AVX-512 or AVX2 (CPU_CAPABILITY_AVX512 or CPU_CAPABILITY_AVX2)"
#endif

// A panel's row (kPanel columns) as two vectors: columns [0, kLanes) and [kLanes, kPanel). A bfloat16
// panel holds column j and column kLanes + j side by side (pack_panels), for widen_pairs.
inline void load_row(const float* p, V& lo, V& hi) {
  lo = load(p);
  hi = load(p + kLanes);
}
inline void load_row(const at::BFloat16* p, V& lo, V& hi) { widen_pairs(p, lo, hi); }

}  // namespace simd

namespace few_rows {

constexpr int64_t kPanel = 2 * simd::kLanes;  // output columns per panel: two vectors
// Rows per register block: 2 * kBlock accumulators, leaving registers for the panel's two vectors and
// the broadcasts (12 rows of 32 registers at AVX-512, 6 of 16 at AVX2).
constexpr int kBlock = simd::kRegisters == 32 ? 12 : 6;

constexpr int64_t panel_count(int64_t n) { return (n + kPanel - 1) / kPanel; }

// R rows of x (row stride k) times one panel, into R rows of y (row stride ldy), its first `cols`
// columns (kPanel for every panel but a matrix's last).
template <int R, typename W>
void block(const float* x, int64_t k, const W* panel, float* y, int64_t ldy, int cols) {
  using simd::V;
  V lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = simd::zero();
  for (int64_t i = 0; i < k; ++i) {
    V w_lo, w_hi;
    simd::load_row(panel + i * kPanel, w_lo, w_hi);
    for (int r = 0; r < R; ++r) {
      const V a = simd::broadcast(x[r * k + i]);
      lo[r] = simd::fmadd(a, w_lo, lo[r]);
      hi[r] = simd::fmadd(a, w_hi, hi[r]);
    }
  }
  if (cols == kPanel) {
    for (int r = 0; r < R; ++r) {
      simd::store(y + r * ldy, lo[r]);
      simd::store(y + r * ldy + simd::kLanes, hi[r]);
    }
  } else {
    for (int r = 0; r < R; ++r) {
      simd::store_first(y + r * ldy, lo[r], cols);
      simd::store_first(y + r * ldy + simd::kLanes, hi[r], cols - simd::kLanes);
    }
  }
}

template <typename W>
using Block = void (*)(const float*, int64_t, const W*, float*, int64_t, int);

template <typename W, int... R>
constexpr std::array<Block<W>, sizeof...(R)> blocks(std::integer_sequence<int, R...>) {
  return {block<R + 1, W>...};
}

template <typename W>
void product(const float* x, int64_t m, int64_t k, const W* panels, int64_t n, float* y) {
  static const auto by_rows = blocks<W>(std::make_integer_sequence<int, kBlock>{});
  at::parallel_for(0, panel_count(n), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int cols = static_cast<int>(std::min<int64_t>(kPanel, n - p * kPanel));
      for (int64_t r = 0; r < m; r += kBlock) {
        const int64_t rows = std::min<int64_t>(kBlock, m - r);
        by_rows[rows - 1](x + r * k, k, panels + p * k * kPanel, y + r * n + p * kPanel, n, cols);
      }
    }
  });
}

// y [m, n] = x [m, k] times the panels of a weight [n, k], in whichever dtype they were laid out.
inline void multiply(const float* x, int64_t m, const at::Tensor& panels, int64_t n, float* y) {
  TORCH_CHECK(panels.dim() == 3 && panels.size(0) == panel_count(n) && panels.size(2) == kPanel,
              "few_rows: panels of another weight");
  const int64_t k = panels.size(1);
  if (panels.scalar_type() == at::kBFloat16)
    product(x, m, k, panels.data_ptr<at::BFloat16>(), n, y);
  else
    product(x, m, k, panels.data_ptr<float>(), n, y);
}

}  // namespace few_rows
