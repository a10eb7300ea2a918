// A matrix product for a pass over few rows: y = x W^T, built and loaded by core/few_rows.py.
//
// A partial pass multiplies a handful of rows by every weight matrix of the model. MKL's product packs
// the weight again at every call, a cost that does not shrink with the rows, so at 18 rows it runs at
// a third to a half of the rate of a full pass's products. Here the weight is laid out once, as panels
// of 32 output columns stored k-major, and each panel is multiplied by up to 12 rows held in 24 vector
// registers: every weight element read feeds 12 fused multiply-adds.
//
// Panels are bfloat16 where every weight is exactly a bfloat16 (a bf16 checkpoint loaded in float32,
// as the embedded model and LLaDA ship): widening bfloat16 to float32 is exact, so the product is the
// same, from half the bytes. Otherwise they are float32. The rows are float32 and every sum is a
// float32 fused multiply-add chain over k in order, so both layouts give the same bits.
//
// Past `max_rows` rows (or for rows that are not float32) the call is ATen's own product, with the bias;
// below, the bias is added after the product.

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <utility>

namespace {

constexpr int64_t kPanel = 32;  // output columns per panel: two vectors of 16 floats
constexpr int kBlock = 12;      // rows per register block: 24 accumulators of the 32 vector registers

constexpr int64_t panel_count(int64_t n) { return (n + kPanel - 1) / kPanel; }

// weight [n, k] -> panels [ceil(n / 32), k, 32]: column j of panel p is output p * 32 + j, zero past n.
at::Tensor pack(const at::Tensor& weight, bool bf16) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat, "pack: a 2-d float32 weight");
  const int64_t n = weight.size(0), k = weight.size(1), panels = panel_count(n);
  auto padded = at::zeros({panels * kPanel, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight);
  auto out = padded.view({panels, kPanel, k}).transpose(1, 2).contiguous();
  return bf16 ? out.to(at::kBFloat16) : out;
}

#define AVX512 __attribute__((target("avx512f,avx512bw")))

// One k-step of a panel: its 32 weights as two float32 vectors.
AVX512 inline void load(const float* p, __m512& lo, __m512& hi) {
  lo = _mm512_loadu_ps(p);
  hi = _mm512_loadu_ps(p + 16);
}
AVX512 inline void load(const at::BFloat16* p, __m512& lo, __m512& hi) {
  const __m512i both = _mm512_loadu_si512(p);  // a bfloat16 is a float32's upper 16 bits
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(both)), 16));
  hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(both, 1)), 16));
}

// R rows of x (row stride k) times one panel, into R rows of y (row stride ldy), masked past n.
template <int R, typename W>
AVX512 void block(const float* x, int64_t k, const W* panel, float* y, int64_t ldy, __mmask16 m_lo,
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

// y [m, n] = x [m, k] times the panels; the panels split between the threads.
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

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  const at::Tensor& panels, int64_t max_rows) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t m = x.numel() / k;
  if (m > max_rows || x.scalar_type() != at::kFloat || x.size(-1) != k) return at::linear(x, weight, bias);
  TORCH_CHECK(panels.size(0) == panel_count(n) && panels.size(1) == k, "linear: panels of another weight");
  const auto rows = x.contiguous();
  auto shape = x.sizes().vec();
  shape.back() = n;
  auto y = at::empty(shape, rows.options());
  if (panels.scalar_type() == at::kBFloat16)
    product(rows.data_ptr<float>(), m, k, panels.data_ptr<at::BFloat16>(), n, y.data_ptr<float>());
  else
    product(rows.data_ptr<float>(), m, k, panels.data_ptr<float>(), n, y.data_ptr<float>());
  return bias.has_value() ? y.add_(*bias) : y;
}

}  // namespace

TORCH_LIBRARY(entropycache, m) {
  m.def("pack_panels(Tensor weight, bool bf16) -> Tensor");
  m.def("few_rows_linear(Tensor x, Tensor weight, Tensor? bias, Tensor panels, int max_rows) -> Tensor");
}

TORCH_LIBRARY_IMPL(entropycache, CPU, m) {
  m.impl("pack_panels", pack);
  m.impl("few_rows_linear", linear);
}
