// A matrix product for a pass over few rows: y = x W^T, built and loaded by core/few_rows.py.
//
// A partial pass multiplies a handful of rows by every weight matrix of the model. MKL's product packs
// the weight again at every call, a cost that does not shrink with the rows, so at 18 rows it runs at
// a third to a half of the rate of a full pass's products. Here the weight is laid out once, as panels
// of two vectors' worth of output columns stored k-major (32 at AVX-512, 16 at AVX2), and each panel is
// multiplied by a block of rows held in vector registers (12 at AVX-512, 6 at AVX2): every weight
// element read feeds that many fused multiply-adds.
//
// Panels are bfloat16 where every weight is exactly a bfloat16 (a bf16 checkpoint loaded in float32,
// as the embedded model and LLaDA ship): widening bfloat16 to float32 is exact, so the product is the
// same, from half the bytes. Otherwise they are float32. The rows are float32 and every sum is a
// float32 fused multiply-add chain over k in order, so both layouts give the same bits.
//
// Past `max_rows` rows (or for rows that are not float32) the call is ATen's own product, with the bias;
// below, the bias is added after the product.

#include <ATen/Functions.h>
#include <torch/library.h>

#include <optional>

#include "few_rows.h"

namespace {

using few_rows::kPanel;
using few_rows::panel_count;

// weight [n, k] -> panels [ceil(n / kPanel), k, kPanel]: column j of panel p is output p * kPanel + j, zero
// past n. In bfloat16 each row of a panel holds its columns j and kLanes + j side by side, so that one
// 32-bit word widens into one lane of each of the row's two vectors (few_rows.h's load_row).
at::Tensor pack(const at::Tensor& weight, bool bf16) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat, "pack: a 2-d float32 weight");
  const int64_t n = weight.size(0), k = weight.size(1), panels = panel_count(n);
  auto padded = at::zeros({panels * kPanel, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight);
  auto out = padded.view({panels, kPanel, k}).transpose(1, 2);
  if (!bf16) return out.contiguous();
  return out.reshape({panels, k, 2, simd::kLanes}).transpose(2, 3).contiguous().view({panels, k, kPanel})
      .to(at::kBFloat16);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  const at::Tensor& panels, int64_t max_rows) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t m = x.numel() / k;
  if (m > max_rows || x.scalar_type() != at::kFloat || x.size(-1) != k) return at::linear(x, weight, bias);
  TORCH_CHECK(panels.size(1) == k, "linear: panels of another weight");
  const auto rows = x.contiguous();
  auto shape = x.sizes().vec();
  shape.back() = n;
  auto y = at::empty(shape, rows.options());
  few_rows::multiply(rows.data_ptr<float>(), m, panels, n, y.data_ptr<float>());
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
