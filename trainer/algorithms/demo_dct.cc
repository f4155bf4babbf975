#include "trainer/algorithms/demo_dct.h"

#include <cmath>

namespace narrows::trainer {

int64_t ChunkLength(int64_t n, int64_t target) {
  for (int64_t c = std::min(n, target); c > 1; --c) {
    if (n % c == 0) return c;
  }
  return 1;
}

torch::Tensor DctMatrix(int64_t n, const torch::TensorOptions& options) {
  torch::Tensor d = torch::empty({n, n}, torch::kFloat64);
  auto a = d.accessor<double, 2>();
  for (int64_t k = 0; k < n; ++k) {
    const double scale = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) {
      a[k][i] = scale * std::cos(M_PI * static_cast<double>((2 * i + 1) * k) / static_cast<double>(2 * n));
    }
  }
  return d.to(options);
}

ChunkDct::ChunkDct(const std::vector<int64_t>& shape, int64_t chunk, const torch::TensorOptions& options)
    : shape_(shape) {
  a_ = shape.empty() ? 1 : shape[0];
  for (size_t i = 1; i < shape.size(); ++i) b_ *= shape[i];
  ca_ = ChunkLength(a_, chunk);
  cb_ = b_ == 1 ? 1 : ChunkLength(b_, chunk);
  rows_ = a_ / ca_;
  cols_ = b_ / cb_;
  da_ = DctMatrix(ca_, options);
  db_ = DctMatrix(cb_, options);
}

torch::Tensor ChunkDct::Encode(const torch::Tensor& x) const {
  // [a, b] -> [rows, cols, ca, cb]: chunk (i, j) is x[i ca .. , j cb ..].
  const torch::Tensor blocks = x.reshape({rows_, ca_, cols_, cb_}).permute({0, 2, 1, 3});
  return da_.matmul(blocks).matmul(db_.t()).reshape({chunks(), elements()});
}

torch::Tensor ChunkDct::Decode(const torch::Tensor& coefficients) const {
  const torch::Tensor c = coefficients.reshape({rows_, cols_, ca_, cb_});
  return da_.t().matmul(c).matmul(db_).permute({0, 2, 1, 3}).reshape(shape_);
}

ChunkTopK TopKPerChunk(const torch::Tensor& coefficients, int64_t k) {
  const int64_t kk = std::max<int64_t>(1, std::min(k, coefficients.size(1)));
  ChunkTopK out;
  out.index = std::get<1>(coefficients.abs().topk(kk, 1, /*largest=*/true, /*sorted=*/true));
  out.value = coefficients.gather(1, out.index);
  return out;
}

torch::Tensor Densify(const ChunkTopK& t, int64_t chunks, int64_t elements) {
  return torch::zeros({chunks, elements}, t.value.options()).scatter_(1, t.index, t.value);
}

torch::Tensor MeanOfSent(const std::vector<ChunkTopK>& sent, int64_t chunks, int64_t elements) {
  torch::Tensor sum = torch::zeros({chunks, elements}, torch::kFloat32);
  torch::Tensor count = torch::zeros_like(sum);
  for (const ChunkTopK& t : sent) {
    sum.scatter_add_(1, t.index, t.value);
    count.scatter_add_(1, t.index, torch::ones_like(t.value));
  }
  return sum / count.clamp_min(1.0f);
}

}  // namespace narrows::trainer
