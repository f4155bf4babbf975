// DeMo's compression (Peng, Quesnelle and Kingma 2024, arXiv 2411.19870; demo.cc): a tensor cut
// into chunks of at most `chunk` along each of its (one or two) dimensions — the largest divisor of
// the length not above `chunk` — each chunk's orthonormal DCT-II, and the `topk` coefficients of
// largest magnitude of each chunk. A tensor of more dimensions is taken as two: its first, and the
// rest flattened. Internal to trainer/ (LibTorch).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace narrows::trainer {

// The largest divisor of `n` not above `target` (1 at least).
int64_t ChunkLength(int64_t n, int64_t target);
// The orthonormal DCT-II of length n as a matrix (row k: frequency k): C = D x, x = D^T C.
torch::Tensor DctMatrix(int64_t n, const torch::TensorOptions& options);

class ChunkDct {
 public:
  ChunkDct(const std::vector<int64_t>& shape, int64_t chunk, const torch::TensorOptions& options);
  // A tensor of the shape as its chunks' coefficients, [chunks(), elements()].
  torch::Tensor Encode(const torch::Tensor& x) const;
  // Coefficients [chunks(), elements()] back to a tensor of the shape.
  torch::Tensor Decode(const torch::Tensor& coefficients) const;
  int64_t chunks() const { return rows_ * cols_; }
  int64_t elements() const { return ca_ * cb_; }

 private:
  std::vector<int64_t> shape_;
  int64_t a_ = 1, b_ = 1;        // the tensor as [a, b] (b = 1: one dimension)
  int64_t ca_ = 1, cb_ = 1;      // a chunk's lengths
  int64_t rows_ = 1, cols_ = 1;  // chunks along each
  torch::Tensor da_, db_;
};

// Each chunk's `k` coefficients of largest magnitude (k at most elements): their indices in the
// chunk ([chunks, k], int64) and values.
struct ChunkTopK {
  torch::Tensor index, value;
};
ChunkTopK TopKPerChunk(const torch::Tensor& coefficients, int64_t k);
// The coefficients [chunks, elements] holding `t`'s values and zeros elsewhere.
torch::Tensor Densify(const ChunkTopK& t, int64_t chunks, int64_t elements);
// What the workers sent, as one tensor's coefficients: each coefficient the mean of the values sent
// for it by those that sent it (as the reference's scatter-reduce "mean" without the zeros), zero
// where none did. Summed in the order of `sent`.
torch::Tensor MeanOfSent(const std::vector<ChunkTopK>& sent, int64_t chunks, int64_t elements);

}  // namespace narrows::trainer
