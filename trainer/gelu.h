// GELU of a projection plus its bias, with a fused CPU path: the MLP's first layer is a bias-free
// GEMM followed by BiasGelu(h, b) = gelu(h + b) (the exact, erf-based GELU).
//
// On CPU float32 it is a custom autograd function: forward adds the bias and applies GELU in one
// vectorised pass over h, backward forms dh = da * gelu'(h + b) in one pass (the bias gradient is
// its column sum). Against torch::linear with a bias and then torch::gelu this saves the GEMM's
// copy of the bias into its output and one read and write of the hidden activations each way.
// Elsewhere (CUDA, other dtypes) it is torch::gelu(h + b). Both agree to float rounding
// (tests/trainer/model_test.cc).
#pragma once

#include "trainer/torch_pch.h"

namespace narrows::trainer {

// h: [..., n], bias: [n]. Returns gelu(h + bias), shaped as h.
torch::Tensor BiasGelu(const torch::Tensor& h, const torch::Tensor& bias);
// The plain-op path, for comparison in tests and for non-CPU devices.
torch::Tensor BiasGeluReference(const torch::Tensor& h, const torch::Tensor& bias);

}  // namespace narrows::trainer
