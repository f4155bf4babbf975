// Causal multi-head self-attention with a fused CPU path.
//
// CausalAttention(qkv) takes the packed projection [B, T, 3*d] (q, k, v side by side, heads
// contiguous within each) and returns the attention output [B, T, d], ready for the output
// projection. On CPU float32 it is a custom autograd function that works head by head in parallel
// over batch x heads: each head's q, k and v are read in place from the packed tensor (no transposes
// or copies), the scaled scores and the causal mask come out of one GEMM, softmax runs on cache-hot
// rows, and the output and gradients are written straight into their packed layouts. BLAS runs
// single-threaded inside ATen's parallel region, so two cores work on two heads at once instead of
// splitting every small GEMM between them. On a GPU with LibTorch >= 2.1 it is PyTorch's
// scaled_dot_product_attention (flash attention in bfloat16); elsewhere (other dtypes, older
// LibTorch) the same maths with plain batched ops. The paths agree to float rounding
// (tests/trainer/model_test.cc).
#pragma once

#include "trainer/torch_pch.h"

namespace narrows::trainer {

// qkv: [B, T, 3*d], d = n_heads * head_dim. causal_bias: [>=T, >=T], 0 on/below the diagonal and
// -inf above. `scale` multiplies the scores q·k (1/sqrt(head_dim) as usual; muP's 1/head_dim).
// Returns [B, T, d].
torch::Tensor CausalAttention(const torch::Tensor& qkv, int64_t n_heads, const torch::Tensor& causal_bias,
                              double scale);
// The plain batched-op path, for comparison in tests and for non-CPU devices.
torch::Tensor CausalAttentionReference(const torch::Tensor& qkv, int64_t n_heads, const torch::Tensor& causal_bias,
                                       double scale);

}  // namespace narrows::trainer
