// A language model of the user's, as TorchScript (torch.jit.script or torch.jit.trace, then save):
// forward(tokens: int64 [B, T]) -> logits [B, T, vocab], or a tuple whose first item they are.
// narrows computes the loss. Gpt (trainer/gpt.h) hosts the module: its parameters become views into
// Gpt's flat buffers, so that every algorithm, codec, inner optimiser and checkpoint works on it as
// on the built-in model. Includes LibTorch.
#pragma once

#include <string>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::trainer {

// Loads `spec.torchscript` on the CPU and runs one forward over a small batch: InvalidArgument
// naming the file and what is wrong (not TorchScript, no forward, a forward that fails on int64
// tokens [B, T], logits of another shape than [B, T, spec.vocab_size], parameters that are not
// float32, none at all, or a number of numbered blocks other than spec.n_layers where that is
// given). Remembered per file: a second call is free.
core::Status CheckScriptModel(const core::ModelSpec& spec);

// The block a parameter belongs to: the first number among its name's parts ("layers.3.attn.w",
// "h.3.mlp.fc.weight": 3), or -1 (embeddings, final norms).
int64_t BlockOfName(const std::string& name);

}  // namespace narrows::trainer
