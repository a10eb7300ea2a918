// The product of core/few_rows.cpp over weights laid out once in panels, for every source of the
// extension (few_rows.cpp says why the layout, core/few_rows_layer.cpp runs a layer with it).
//
// y [m, n] = x [m, k] W^T, W laid out as panels [ceil(n / 32), k, 32]: column j of panel p is output
// p * 32 + j, zero past n. Each panel is multiplied by up to 12 rows held in 24 vector registers, so every
// weight element read feeds 12 fused multiply-adds; the panels split between the threads.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace few_rows {

constexpr int64_t kPanel = 32;  // output columns per panel: two vectors of 16 floats
constexpr int kBlock = 12;      // rows per register block: 24 accumulators of the 32 vector registers

constexpr int64_t panel_count(int64_t n) { return (n + kPanel - 1) / kPanel; }

#define FEW_ROWS_AVX512 __attribute__((target("avx512f,avx512bw")))

// One k-step of a panel: its 32 weights as two float32 vectors.
FEW_ROWS_AVX512 inline void load(const float* p, __m512& lo, __m512& hi) {
  lo = _mm512_loadu_ps(p);
  hi = _mm512_loadu_ps(p + 16);
}
FEW_ROWS_AVX512 inline void load(const at::BFloat16* p, __m512& lo, __m512& hi) {
  const __m512i both = _mm512_loadu_si512(p);  // a bfloat16 is a float32's upper 16 bits
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(both)), 16));
  hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(both, 1)), 16));
}

// R rows of x (row stride k) times one panel, into R rows of y (row stride ldy), masked past n.
template <int R, typename W>
FEW_ROWS_AVX512 void block(const float* x, int64_t k, const W* panel, float* y, int64_t ldy, __mmask16 m_lo,
                           __mmask16 m_hi) {
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    __m512 w_lo, w_hi;
    load(panel + i * kPanel, w_lo, w_hi);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * k + i]);
      lo[r] = _mm512_fmadd_ps(a, w_lo, lo[r]);
      hi[r] = _mm512_fmadd_ps(a, w_hi, hi[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m_lo, lo[r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m_hi, hi[r]);
  }
}

template <typename W>
using Block = void (*)(const float*, int64_t, const W*, float*, int64_t, __mmask16, __mmask16);

template <typename W, int... R>
constexpr std::array<Block<W>, sizeof...(R)> blocks(std::integer_sequence<int, R...>) {
  return {block<R + 1, W>...};
}

template <typename W>
void product(const float* x, int64_t m, int64_t k, const W* panels, int64_t n, float* y) {
  static const auto by_rows = blocks<W>(std::make_integer_sequence<int, kBlock>{});
  at::parallel_for(0, panel_count(n), 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t cols = std::min<int64_t>(kPanel, n - p * kPanel);
      const __mmask16 m_lo = cols >= 16 ? 0xFFFF : (1u << cols) - 1;
      const __mmask16 m_hi = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1;
      for (int64_t r = 0; r < m; r += kBlock) {
        const int64_t rows = std::min<int64_t>(kBlock, m - r);
        by_rows[rows - 1](x + r * k, k, panels + p * k * kPanel, y + r * n + p * kPanel, n, m_lo, m_hi);
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
