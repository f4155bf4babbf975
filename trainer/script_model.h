// A language model of the user's, as TorchScript (torch.jit.script or torch.jit.trace, then save):
// forward(tokens: int64 [B, T]) -> logits [B, T, vocab], or a tuple whose first item they are.
// narrows computes the loss. Gpt (trainer/gpt.h) hosts the module: its parameters become views into
// Gpt's flat buffers, so that every algorithm, codec, inner optimiser and checkpoint works on it as
// on the built-in model. Includes LibTorch.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>

#include <string>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::trainer {

// Loads `spec.torchscript` on the CPU and runs one forward over a small batch: InvalidArgument
// naming the file and what is wrong (not TorchScript, no forward, a forward that fails on int64
// tokens [B, T], logits of another shape than [B, T, spec.vocab_size], parameters that are not
// float32, none at all, or a number of numbered blocks other than spec.n_layers where that is
// given). Remembered per file: a second call is free.
// With train.precision bf16, the forward is also tried under Bf16Autocast.
core::Status CheckScriptModel(const core::ModelSpec& spec, core::Precision precision = core::Precision::kFp32);

// LibTorch's autocast around a module's forward, as torch.autocast(device, torch.bfloat16) does:
// the operations on autocast's lists (matrix products among them) in bfloat16 over the float32
// weights, the rest in float32; the weights' casts cached for the forward only. Thread-local, so
// each worker's replica has its own.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(const c10::Device& device) : cuda_(device.is_cuda()) {
    was_on_ = cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
    was_type_ = cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
    if (cuda_) {
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
      at::autocast::set_enabled(true);
    } else {
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::set_cpu_enabled(true);
    }
    at::autocast::increment_nesting();
  }
  ~Bf16Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    if (cuda_) {
      at::autocast::set_enabled(was_on_);
      at::autocast::set_autocast_gpu_dtype(was_type_);
    } else {
      at::autocast::set_cpu_enabled(was_on_);
      at::autocast::set_autocast_cpu_dtype(was_type_);
    }
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool cuda_, was_on_;
  at::ScalarType was_type_;
};


// The module's training FLOPs per token at spec.seq_len, measured once per file and length: one
// forward and backward of a sequence under LibTorch's profiler, counting the FLOPs of its matrix
// products (mm, addmm, bmm, matmul's and linear's, forward and backward; element-wise operations and
// the loss are not counted, as 6N and the built-in model's count leave them out), divided by the
// tokens. For the nanoGPT-style example it comes within 3% of the built-in model's count.
double ProfiledFlopsPerToken(const core::ModelSpec& spec);

// What a user might not expect of the module as narrows runs it, in a line ("" if nothing): its
// dropout layers are off and its batch norms use their running statistics (it runs in eval mode).
// From the submodules' types; after CheckScriptModel.
std::string ScriptModelNote(const core::ModelSpec& spec);

// The block a parameter belongs to: the first number among its name's parts ("layers.3.attn.w",
// "h.3.mlp.fc.weight": 3), or -1 (embeddings, final norms).
int64_t BlockOfName(const std::string& name);

}  // namespace narrows::trainer
