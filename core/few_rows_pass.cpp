// A pass over few rows in one call, from the rows' ids to their logits: built and loaded with few_rows.cpp
// by core/few_rows.py.
//
// A pass over ~18 rows does ~1.5 ms of arithmetic on this project's 2-core CPU, and as a compiled graph
// it spent as long again between its kernels: the calls, shape checks and buffers of ~80 operators,
// and dynamo's checks of ~380 inputs, all on one thread while the other waited. Here the pass is one
// call: each layer's pointwise parts are loops over the rows, its products few_rows.h's over the
// panels, and its attention a kernel of its own below for head sizes 64 and 128 (ATen's fused one,
// called from C++, for others).
//
// It computes what core/model.py's DiffusionTransformer.forward does for rows against a KV cache, in
// float32, up to rounding: the embedding, then per layer (Block.forward) RMSNorm, the qkv product (and
// its bias), RoPE on queries and keys (rotate-half), their keys and values written into the cache at
// the rows' positions, attention over every cached key, the output product, the residual, RMSNorm, the
// gate/up product, silu(gate) * up, the down product, the residual; then the final RMSNorm and the
// head's product at the rows whose logits are wanted.

#include <ATen/Functions.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "few_rows.h"

namespace {

using Vec = at::vec::Vectorized<float>;

// out = weight * x / rms(x), row by row (core/model.py's rms_norm).
void rms_norm(const float* x, const float* weight, int64_t m, int64_t dim, double eps, float* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * dim;
    Vec squares(0.f);
    int64_t i = 0;
    for (; i + Vec::size() <= dim; i += Vec::size()) {
      const Vec v = Vec::loadu(row + i);
      squares = at::vec::fmadd(v, v, squares);
    }
    float sum = simd::sum(squares);
    for (; i < dim; ++i) sum += row[i] * row[i];
    const float scale = 1.f / std::sqrt(sum / static_cast<float>(dim) + static_cast<float>(eps));
    for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = weight[j] * (row[j] * scale);
  }
}

// The first `heads` heads of each row of qkv rotated in place by that row's cos/sin (rotate-half RoPE).
void rope(float* qkv, int64_t m, int64_t r, int64_t stride, int64_t heads, int64_t hd, const float* cos,
          const float* sin) {
  const int64_t half = hd / 2;
  for (int64_t row = 0; row < m; ++row) {
    const float* c = cos + (row % r) * hd;
    const float* s = sin + (row % r) * hd;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = qkv + row * stride + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] + (-b) * s[i];
        v[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

// silu(gate) * up of each row of gate_up ([m, 2 * ffn], gate first).
void swiglu(const float* gate_up, int64_t m, int64_t ffn, float* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* gate = gate_up + r * 2 * ffn;
    const float* up = gate + ffn;
    for (int64_t i = 0; i < ffn; i += Vec::size()) {
      const int count = static_cast<int>(std::min<int64_t>(Vec::size(), ffn - i));
      const Vec g = Vec::loadu(gate + i, count), u = Vec::loadu(up + i, count);
      const Vec silu = g / (Vec(1.f) + g.neg().exp_u20());
      (silu * u).store(out + r * ffn + i, count);
    }
  }
}

// Keys (heads from `first`) of each row of qkv into the cache [b, kv_heads, length, hd] at its position.
void write_rows(const float* qkv, int64_t b, int64_t r, int64_t stride, int64_t first, int64_t kv_heads,
                int64_t hd, const int64_t* rows, at::Tensor& cache) {
  const int64_t length = cache.size(2);
  float* out = cache.data_ptr<float>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t h = 0; h < kv_heads; ++h)
        std::copy_n(qkv + (bi * r + i) * stride + (first + h) * hd, hd,
                    out + ((bi * kv_heads + h) * length + rows[i]) * hd);
}


// Attention of few rows over every cached key, one (batch, head) at a time. Scores are computed keys by
// rows, S^T = K Q^T, so the cache is read as it lies: the rows' scaled queries laid out as one panel
// of one vector's width where there are at most that many rows (`scores`, a block of keys in three
// quarters of the vector registers), as few_rows.h's panels of two vectors otherwise (its product,
// kBlock keys a block). The softmax runs down each column (a row's scores over the keys, a vector of
// rows at a time), and P V adds up the values: a block of rows times a chunk of a value row's vectors
// held in registers, against each value row in turn.
constexpr int kAccumulators = simd::kRegisters * 3 / 4;  // the rest hold the operands

template <int R>
void scores(const float* k, int64_t hd, const float* qt, float* st, int64_t ld) {
  using simd::V;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = simd::zero();
  for (int64_t d = 0; d < hd; ++d) {
    const V q = simd::load(qt + d * simd::kLanes);
    for (int r = 0; r < R; ++r) acc[r] = simd::fmadd(simd::broadcast(k[r * hd + d]), q, acc[r]);
  }
  for (int r = 0; r < R; ++r) simd::store(st + r * ld, acc[r]);
}

using Scores = void (*)(const float*, int64_t, const float*, float*, int64_t);

template <int... R>
constexpr std::array<Scores, sizeof...(R)> scores_by_keys(std::integer_sequence<int, R...>) {
  return {scores<R + 1>...};
}

// R rows of P (row j of key j at p + j * ld, the rows' columns next to each other) times the values'
// columns [0, C vectors) of rows with stride hd, scaled by each row's 1 / sum, into y (row stride ldy).
template <int C, int R>
void weigh_values(const float* p, int64_t ld, const float* inv, const float* values, int64_t hd, int64_t length,
                  float* y, int64_t ldy) {
  using simd::V;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < C; ++v) acc[r][v] = simd::zero();
  for (int64_t j = 0; j < length; ++j) {
    V row[C];
    for (int v = 0; v < C; ++v) row[v] = simd::load(values + j * hd + v * simd::kLanes);
    for (int r = 0; r < R; ++r) {
      const V a = simd::broadcast(p[j * ld + r]);
      for (int v = 0; v < C; ++v) acc[r][v] = simd::fmadd(a, row[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < C; ++v)
      simd::store(y + r * ldy + v * simd::kLanes, simd::mul(acc[r][v], simd::broadcast(inv[r])));
}

template <int C>
using Weigh = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t, float*, int64_t);

template <int C, int... R>
constexpr std::array<Weigh<C>, sizeof...(R)> weighs(std::integer_sequence<int, R...>) {
  return {weigh_values<C, R + 1>...};
}

template <int HD>
void attention(const float* qkv, int64_t b, int64_t r, int64_t stride, int64_t n_heads, int64_t n_kv_heads,
               const float* keys, const float* values, int64_t length, float* y) {
  constexpr int64_t hd = HD, lanes = simd::kLanes;
  constexpr int kChunk = std::min<int>(HD / lanes, kAccumulators / 3);  // a value row's vectors at a time
  constexpr int kRows = kAccumulators / kChunk;
  static_assert(HD % (lanes * kChunk) == 0, "attention: a head size of whole chunks");
  static const auto by_keys = few_rows::blocks<float>(std::make_integer_sequence<int, few_rows::kBlock>{});
  static const auto by_keys_narrow = scores_by_keys(std::make_integer_sequence<int, kAccumulators>{});
  static const auto by_rows = weighs<kChunk>(std::make_integer_sequence<int, kRows>{});
  const bool narrow = r <= lanes;
  const int64_t width = narrow ? lanes : few_rows::kPanel, panels = (r + width - 1) / width, ld = panels * width;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  at::parallel_for(0, b * n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qt(panels * hd * width), st(length * ld), inv(ld);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t bi = bh / n_heads, h = bh % n_heads, kv = h / (n_heads / n_kv_heads);
      const float* k = keys + (bi * n_kv_heads + kv) * length * hd;
      const float* v = values + (bi * n_kv_heads + kv) * length * hd;
      std::fill(qt.begin(), qt.end(), 0.f);
      for (int64_t row = 0; row < r; ++row)
        for (int64_t d = 0; d < hd; ++d)
          qt[(row / width * hd + d) * width + row % width] = qkv[(bi * r + row) * stride + h * hd + d] * scale;
      if (narrow)
        for (int64_t j = 0; j < length; j += kAccumulators)
          by_keys_narrow[std::min<int64_t>(kAccumulators, length - j) - 1](k + j * hd, hd, qt.data(),
                                                                          st.data() + j * ld, ld);
      else
        for (int64_t p = 0; p < panels; ++p)
          for (int64_t j = 0; j < length; j += few_rows::kBlock)
            by_keys[std::min<int64_t>(few_rows::kBlock, length - j) - 1](
                k + j * hd, hd, qt.data() + p * hd * width, st.data() + j * ld + p * width, ld, width);
      for (int64_t c = 0; c < ld; c += Vec::size()) {
        Vec top(-std::numeric_limits<float>::infinity()), sum(0.f);
        for (int64_t j = 0; j < length; ++j) top = at::vec::maximum(top, Vec::loadu(st.data() + j * ld + c));
        for (int64_t j = 0; j < length; ++j) {
          const Vec e = (Vec::loadu(st.data() + j * ld + c) - top).exp_u20();
          e.store(st.data() + j * ld + c);
          sum = sum + e;
        }
        (Vec(1.f) / sum).store(inv.data() + c);
      }
      for (int64_t row = 0; row < r; row += kRows) {
        const int64_t rows_here = std::min<int64_t>(kRows, r - row);
        for (int64_t col = 0; col < hd; col += kChunk * lanes)
          by_rows[rows_here - 1](st.data() + row, ld, inv.data() + row, v + col, hd, length,
                                 y + (bi * r + row) * n_heads * hd + h * hd + col, n_heads * hd);
      }
    }
  });
}

// One layer (Block.forward) of x's rows at positions `rows` against the layer's cache.
at::Tensor layer(const at::Tensor& x, const float* cos, const float* sin, at::Tensor& cache_k, at::Tensor& cache_v,
                 const int64_t* rows, const at::Tensor& attn_norm, const at::Tensor& qkv, const at::Tensor* qkv_bias,
                 const at::Tensor& wo, const at::Tensor& ffn_norm, const at::Tensor& w13, const at::Tensor& w2,
                 int64_t n_heads, int64_t n_kv_heads, int64_t hd, double eps) {
  const int64_t b = x.size(0), r = x.size(1), dim = x.size(2), m = b * r;
  const int64_t heads = n_heads + 2 * n_kv_heads, ffn = w2.size(1), length = cache_k.size(2);
  const auto opts = x.options();
  const float* in = x.data_ptr<float>();

  auto normed = at::empty({m, dim}, opts);
  rms_norm(in, attn_norm.data_ptr<float>(), m, dim, eps, normed.data_ptr<float>());
  auto q_k_v = at::empty({b, r, heads, hd}, opts);
  float* qkv_out = q_k_v.data_ptr<float>();
  few_rows::multiply(normed.data_ptr<float>(), m, qkv, heads * hd, qkv_out);
  if (qkv_bias != nullptr) q_k_v.view({m, heads * hd}).add_(*qkv_bias);
  rope(qkv_out, m, r, heads * hd, n_heads + n_kv_heads, hd, cos, sin);
  write_rows(qkv_out, b, r, heads * hd, n_heads, n_kv_heads, hd, rows, cache_k);
  write_rows(qkv_out, b, r, heads * hd, n_heads + n_kv_heads, n_kv_heads, hd, rows, cache_v);

  auto y = at::empty({b, r, n_heads, hd}, opts);
  const float* k = cache_k.data_ptr<float>();
  const float* v = cache_v.data_ptr<float>();
  if (hd == 64)
    attention<64>(qkv_out, b, r, heads * hd, n_heads, n_kv_heads, k, v, length, y.data_ptr<float>());
  else if (hd == 128)
    attention<128>(qkv_out, b, r, heads * hd, n_heads, n_kv_heads, k, v, length, y.data_ptr<float>());
  else
    y = at::scaled_dot_product_attention(q_k_v.narrow(2, 0, n_heads).transpose(1, 2), cache_k, cache_v,
                                         std::nullopt, 0.0, false, std::nullopt, n_heads != n_kv_heads)
            .transpose(1, 2)
            .contiguous();
  auto h = at::empty({b, r, dim}, opts);
  float* hp = h.data_ptr<float>();
  few_rows::multiply(y.data_ptr<float>(), m, wo, dim, hp);
  for (int64_t i = 0; i < m * dim; ++i) hp[i] += in[i];

  rms_norm(hp, ffn_norm.data_ptr<float>(), m, dim, eps, normed.data_ptr<float>());
  auto gate_up = at::empty({m, 2 * ffn}, opts);
  few_rows::multiply(normed.data_ptr<float>(), m, w13, 2 * ffn, gate_up.data_ptr<float>());
  auto act = at::empty({m, ffn}, opts);
  swiglu(gate_up.data_ptr<float>(), m, ffn, act.data_ptr<float>());
  auto out = at::empty({b, r, dim}, opts);
  float* op = out.data_ptr<float>();
  few_rows::multiply(act.data_ptr<float>(), m, w2, dim, op);
  for (int64_t i = 0; i < m * dim; ++i) op[i] += hp[i];
  return out;
}

// Every layer of a pass over the rows h ([b, r, dim] after the embedding, float32) at `positions`, rotated
// by cos/sin ([r, hd]): the residual stream after the last layer. Per layer i: cache_k[i], cache_v[i] and
// its weights, the products' as panels (pack_panels); qkv_bias empty where the model has none.
at::Tensor layers(at::Tensor h, const float* cos, const float* sin, at::TensorList cache_k, at::TensorList cache_v,
                  const int64_t* positions, at::TensorList attn_norm, at::TensorList qkv, at::TensorList qkv_bias,
                  at::TensorList wo, at::TensorList ffn_norm, at::TensorList w13, at::TensorList w2, int64_t n_heads,
                  int64_t n_kv_heads, int64_t hd, double eps) {
  const int64_t n_layers = static_cast<int64_t>(qkv.size());
  TORCH_CHECK(cache_k.size() == qkv.size() && cache_v.size() == qkv.size() && wo.size() == qkv.size() &&
                  w13.size() == qkv.size() && w2.size() == qkv.size() && attn_norm.size() == qkv.size() &&
                  ffn_norm.size() == qkv.size() && (qkv_bias.empty() || qkv_bias.size() == qkv.size()),
              "few_rows_pass: a cache and weights per layer");
  for (int64_t i = 0; i < n_layers; ++i)  // the loops below write the caches through raw pointers
    for (const auto& cache : {cache_k[i], cache_v[i]})
      TORCH_CHECK(cache.is_contiguous() && cache.scalar_type() == at::kFloat && cache.dim() == 4 &&
                      cache.size(0) == h.size(0) && cache.size(1) == n_kv_heads && cache.size(3) == hd,
                  "few_rows_pass: a contiguous float32 cache [batch, kv_heads, length, head_dim] per layer");
  for (int64_t i = 0; i < n_layers; ++i) {
    auto k = cache_k[i], v = cache_v[i];
    h = layer(h, cos, sin, k, v, positions, attn_norm[i], qkv[i], qkv_bias.empty() ? nullptr : &qkv_bias[i], wo[i],
              ffn_norm[i], w13[i], w2[i], n_heads, n_kv_heads, hd, eps);
  }
  return h;
}

// The rows of `table` ([count, width], float32) at `index` (n of them, each checked below count), into out.
void gather(const at::Tensor& table, const int64_t* index, int64_t n, float* out, const char* what) {
  const int64_t count = table.size(0), width = table.size(1);
  const float* from = table.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(index[i] >= 0 && index[i] < count, "few_rows_pass: ", what, " ", index[i], " past its ", count);
    std::copy_n(from + index[i] * width, width, out + i * width);
  }
}

// A whole pass over few rows in one call (DiffusionTransformer.forward for a pass of rows without a hook):
// the ids' embeddings ([b, r] ids of the rows at `rows`, sorted positions of the cache), their RoPE
// rows from the tables, every layer, then the final norm and the head at the rows `logit_rows` (a subset
// of rows; none: every row). Logits [b, logit rows, vocab] in float32. Around its layers a pass ran ~10
// operators from Python (the embedding, RoPE's rows, the head's norm and product, picking the logit
// rows), each a dispatch and a buffer: as costly as several layers' loops (docs/BENCHMARKS.md, "The floor").
at::Tensor pass(const at::Tensor& ids, const at::Tensor& rows, const std::optional<at::Tensor>& logit_rows,
                const at::Tensor& embed, const at::Tensor& cos_table, const at::Tensor& sin_table,
                at::TensorList cache_k, at::TensorList cache_v, at::TensorList attn_norm, at::TensorList qkv,
                at::TensorList qkv_bias, at::TensorList wo, at::TensorList ffn_norm, at::TensorList w13,
                at::TensorList w2, const at::Tensor& norm, const at::Tensor& head, int64_t vocab, int64_t n_heads,
                int64_t n_kv_heads, double eps) {
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong, "few_rows_pass: ids [batch, rows] of int64");
  TORCH_CHECK(embed.dim() == 2 && embed.scalar_type() == at::kFloat && cos_table.dim() == 2 &&
                  cos_table.sizes() == sin_table.sizes() && cos_table.scalar_type() == at::kFloat,
              "few_rows_pass: a float32 embedding table and RoPE tables [positions, head_dim]");
  const int64_t b = ids.size(0), r = ids.size(1), dim = embed.size(1), hd = cos_table.size(1);
  const auto at_rows = rows.contiguous().to(at::kLong), at_ids = ids.contiguous();
  TORCH_CHECK(at_rows.numel() == r, "few_rows_pass: ", r, " ids for ", at_rows.numel(), " rows");
  const int64_t* positions = at_rows.data_ptr<int64_t>();
  const int64_t length = cache_k.empty() ? 0 : cache_k[0].size(2);
  TORCH_CHECK(std::all_of(positions, positions + r, [&](int64_t p) { return p >= 0 && p < length; }),
              "few_rows_pass: every row a position of the cache (0 to ", length - 1, ")");
  std::vector<int64_t> picked;  // each logit row's index among the rows
  if (logit_rows.has_value()) {
    const auto wanted = logit_rows->contiguous().to(at::kLong);
    for (int64_t i = 0; i < wanted.numel(); ++i) {
      const int64_t p = wanted.data_ptr<int64_t>()[i];
      const int64_t* at = std::lower_bound(positions, positions + r, p);
      TORCH_CHECK(at != positions + r && *at == p, "few_rows_pass: logit row ", p, " is not a row of the pass");
      picked.push_back(at - positions);
    }
  } else {
    for (int64_t i = 0; i < r; ++i) picked.push_back(i);
  }
  auto x = at::empty({b, r, dim}, embed.options());
  gather(embed.contiguous(), at_ids.data_ptr<int64_t>(), b * r, x.data_ptr<float>(), "token id");
  auto cos = at::empty({r, hd}, embed.options()), sin = at::empty({r, hd}, embed.options());
  gather(cos_table.contiguous(), positions, r, cos.data_ptr<float>(), "position");
  gather(sin_table.contiguous(), positions, r, sin.data_ptr<float>(), "position");
  auto h = layers(x, cos.data_ptr<float>(), sin.data_ptr<float>(), cache_k, cache_v, positions, attn_norm, qkv,
                  qkv_bias, wo, ffn_norm, w13, w2, n_heads, n_kv_heads, hd, eps);

  const int64_t n = static_cast<int64_t>(picked.size());
  auto last = at::empty({b * n, dim}, embed.options());
  const float* hp = h.data_ptr<float>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(hp + (bi * r + picked[i]) * dim, dim, last.data_ptr<float>() + (bi * n + i) * dim);
  rms_norm(last.data_ptr<float>(), norm.data_ptr<float>(), b * n, dim, eps, last.data_ptr<float>());
  auto logits = at::empty({b, n, vocab}, embed.options());
  few_rows::multiply(last.data_ptr<float>(), b * n, head, vocab, logits.data_ptr<float>());
  return logits;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(entropycache, m) {
  m.def(
      "few_rows_pass(Tensor ids, Tensor rows, Tensor? logit_rows, Tensor embed, Tensor cos_table, Tensor sin_table, "
      "Tensor(a!)[] cache_k, Tensor(b!)[] cache_v, Tensor[] attn_norm, Tensor[] qkv, Tensor[] qkv_bias, Tensor[] wo, "
      "Tensor[] ffn_norm, Tensor[] w13, Tensor[] w2, Tensor norm, Tensor head, int vocab, int n_heads, "
      "int n_kv_heads, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(entropycache, CPU, m) { m.impl("few_rows_pass", pass); }
