// Gpt: a GPT decoder (pre-LayerNorm, causal multi-head attention, GELU MLP, tied unembedding) whose
// parameters and gradients live in two flat buffers.
//
// Every parameter is a view into `flat_params()`, and its `.grad()` a view into `flat_grads()`,
// ordered by group (embedding, hidden, vector) so that each group is one contiguous slice. The flat
// layout lets the optimiser step, clip, average or send the whole model as one tensor (LibTorch
// 1.13's C++ AdamW loops parameter by parameter). Gradients accumulate into `flat_grads()`; call
// ZeroGrad() between steps. Not thread-safe; one instance per replica. Includes LibTorch: keep this
// header out of widely included ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/scenario.h"
#include "trainer/parameterization.h"
#include "trainer/torch_pch.h"

namespace torch::jit {
struct Module;
}

namespace narrows::trainer {

struct ParamSlice {
  std::string name;
  ParamGroupKind group;
  int64_t offset = 0;  // in elements, into the flat buffers
  int64_t numel = 0;
};

// The transformer block a parameter slice belongs to ("h.N.*": N), or -1 (embeddings, final norm).
int64_t BlockOf(const ParamSlice& slice);

struct GroupSlice {
  ParamGroupKind kind;
  int64_t offset = 0;
  int64_t numel = 0;
};

class Gpt {
 public:
  // Initialises on the CPU from the global LibTorch generator (seed it first), then moves to
  // `device`, so that initial weights do not depend on the device.
  // With spec.torchscript, hosts that module instead (trainer/script_model.h; check it first with
  // CheckScriptModel): its parameters, as the file holds them or as its init_weights() method draws
  // them from the seeded generator where it has one, become views into the flat buffers, grouped
  // by shape (2-D tables whose rows are the vocabulary: embedding; other matrices: hidden; the
  // rest: vector). Its buffers stay its own, one set per replica. It runs in eval mode (no dropout).
  Gpt(const core::ModelSpec& spec, torch::Device device);

  // tokens: [B, T] int64 with T <= seq_len. Returns logits [B, T, vocab].
  torch::Tensor Forward(const torch::Tensor& tokens) const;
  // Mean cross-entropy (nats per token) of predicting targets [B, T] from tokens [B, T].
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets) const;

  void ZeroGrad() { flat_grads_.zero_(); }
  torch::Tensor& flat_params() { return flat_params_; }
  torch::Tensor& flat_grads() { return flat_grads_; }
  const std::vector<ParamSlice>& slices() const { return slices_; }
  // A torchscript module's float32 buffers (running statistics, tables), each a view into this one
  // flat tensor on the device: one set per replica, averaged among replicas where model.buffers
  // says so, kept in checkpoints. Empty for the built-in GPT and for a module without any.
  torch::Tensor& flat_buffers() { return flat_buffers_; }
  // The parameter tensors (autograd leaves, views into flat_params()), in slices() order.
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  const std::vector<GroupSlice>& groups() const { return groups_; }
  const core::ModelSpec& spec() const { return spec_; }
  const ParameterizationScales& scales() const { return scales_; }
  int64_t num_params() const { return flat_params_.numel(); }
  // Parameters outside the embedding tables (the unembedding is tied, so it is not counted twice).
  int64_t num_non_embedding_params() const;
  // Training FLOPs per token: 6 * (non-embedding params + unembedding) + 12 * layers * d * T
  // (Kaplan et al. 2020 with the attention term, as in PaLM App. B). A torchscript module's:
  // model.flops_per_token where given, else measured from a profiled step (ProfiledFlopsPerToken).
  double TrainFlopsPerToken() const;
  // Where TrainFlopsPerToken comes from, in words for a run's output.
  std::string FlopsSource() const;
  torch::Device device() const { return device_; }
  // The arithmetic of Forward (core::Precision): float32, or bfloat16 products over float32 weights.
  void set_precision(core::Precision precision) {
    compute_ = precision == core::Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  }

 private:
  struct Layer {
    torch::Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
    torch::Tensor ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
  };
  struct PendingParam;
  // The parameters' initial values, drawn in the order of the seeded generator (wte, wpe, layers).
  std::vector<PendingParam> DrawInitialValues();
  // Lays the parameters out group by group in one flat buffer on the device; each parameter is a
  // leaf whose storage is its slice.
  void Flatten(std::vector<PendingParam> pending);
  void FlattenBuffers();
  // The causal mask and RoPE's rotation tables.
  void BuildAttentionConstants();
  torch::Tensor Attention(const Layer& layer, const torch::Tensor& x) const;
  torch::Tensor ApplyRope(const torch::Tensor& x) const;  // x: [B, T, H, hd]
  // t in the products' type: a differentiable cast, so gradients reach the float32 weights.
  torch::Tensor Low(const torch::Tensor& t) const { return t.scalar_type() == compute_ ? t : t.to(compute_); }

  core::ModelSpec spec_;
  ParameterizationScales scales_;
  torch::Device device_;
  torch::ScalarType compute_ = torch::kFloat32;
  torch::Tensor wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Layer> layers_;
  torch::Tensor causal_bias_;         // [T, T]: 0 on and below the diagonal, -inf above
  torch::Tensor rope_cos_, rope_sin_;  // [T, hd/2]
  // The user's module (spec.torchscript), or null for the built-in GPT.
  std::shared_ptr<torch::jit::Module> script_;
  std::vector<torch::Tensor> script_slots_;  // its parameters, in the order they are laid out
  std::vector<torch::Tensor> script_buffers_;  // its float32 buffers, views into flat_buffers_
  torch::Tensor flat_buffers_;
  std::vector<PendingParam> LoadScript();
  torch::Tensor flat_params_, flat_grads_;
  std::vector<ParamSlice> slices_;
  std::vector<torch::Tensor> parameters_;
  std::vector<GroupSlice> groups_;
};

}  // namespace narrows::trainer
