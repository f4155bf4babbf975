#include "trainer/gpt.h"

#include "trainer/attention.h"
#include "trainer/gelu.h"
#include "trainer/script_model.h"

#include <torch/script.h>


#include <ATen/CPUGeneratorImpl.h>

#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace narrows::trainer {

int64_t BlockOf(const ParamSlice& slice) { return BlockOfName(slice.name); }

struct Gpt::PendingParam {
  std::string name;
  ParamGroupKind group;
  torch::Tensor* slot;
  torch::Tensor init;
};

Gpt::Gpt(const core::ModelSpec& spec, torch::Device device)
    : spec_(spec), scales_(ComputeScales(spec)), device_(device) {
  if (!spec.torchscript.empty()) {
    Flatten(LoadScript());
    FlattenBuffers();
    return;
  }
  NARROWS_CHECK(spec.d_model % spec.n_heads == 0) << "d_model must divide by n_heads";
  Flatten(DrawInitialValues());
  flat_buffers_ = torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(device));  // none
  BuildAttentionConstants();
}

std::vector<Gpt::PendingParam> Gpt::LoadScript() {
  // Checked before (CheckScriptModel): a failure here is a file changed under the run.
  torch::jit::Module m = torch::jit::load(spec_.torchscript, device_);
  m.eval();
  if (m.find_method("init_weights")) {
    // Drawn from the seed the caller gave LibTorch, as the built-in model's are, one replica at a
    // time (the global generator is the module's), leaving the generator as it was.
    static std::mutex draw;
    std::lock_guard<std::mutex> lock(draw);
    at::Generator gen = at::detail::getDefaultCPUGenerator();  // init_weights locks it as it draws
    const uint64_t seed = gen.current_seed();
    const at::Tensor state = gen.get_state();
    gen.set_current_seed(seed);
    torch::NoGradGuard no_grad;
    m.run_method("init_weights");
    gen.set_state(state);
  }
  std::vector<PendingParam> pending;
  std::map<const void*, std::string> seen;  // a tensor listed twice (tied weights) is laid out once
  script_slots_.reserve(m.named_parameters(true).size());
  for (const auto& p : m.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& t = p.value;
    if (!seen.emplace(t.unsafeGetTensorImpl(), p.name).second) continue;
    // Tables looked up by token or position: embedding; other matrices: hidden (Muon's); gains and
    // biases inside a numbered block: vector; outside one (a final norm): final_norm.
    std::string lower = p.name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool table = lower.find("emb") != std::string::npos || lower.rfind("wte", 0) == 0 || lower.rfind("wpe", 0) == 0;
    ParamGroupKind group = BlockOfName(p.name) >= 0 ? ParamGroupKind::kVector : ParamGroupKind::kFinalNorm;
    if (t.dim() == 2) group = table || t.size(0) == spec_.vocab_size ? ParamGroupKind::kEmbedding : ParamGroupKind::kHidden;
    script_slots_.push_back(t);
    pending.push_back({p.name, group, &script_slots_.back(), t.detach().clone().cpu()});
  }
  // Its float32 buffers, laid out in one flat buffer of their own (FlattenBuffers); others (integer
  // counters) stay the module's.
  std::set<const void*> buffers_seen;
  for (const auto& b : m.named_buffers(/*recurse=*/true)) {
    if (b.value.scalar_type() == torch::kFloat32 && buffers_seen.insert(b.value.unsafeGetTensorImpl()).second) {
      script_buffers_.push_back(b.value);
    }
  }
  script_ = std::make_shared<torch::jit::Module>(m);
  return pending;
}

std::vector<Gpt::PendingParam> Gpt::DrawInitialValues() {
  const core::ModelSpec& spec = spec_;
  const int64_t d = spec.d_model, v = spec.vocab_size, t = spec.seq_len;
  const int64_t hidden = spec.mlp_ratio * d;
  const double std = spec.init_std;
  const double hidden_std = std * scales_.hidden_init_std;
  const double proj_std = std / scales_.output_init_divisor;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  // A private generator seeded with the seed the caller gave LibTorch (torch::manual_seed): the same
  // numbers as drawing from the global generator, but replicas built at the same time on several
  // threads (workers on the in-process transport) do not interleave their draws.
  at::Generator gen = at::detail::createCPUGenerator(at::detail::getDefaultCPUGenerator().current_seed());
  auto normal = [&](std::vector<int64_t> shape, double s) { return torch::randn(shape, gen, opts) * s; };
  auto ones = [&](int64_t n) { return torch::ones({n}, opts); };
  auto zeros = [&](int64_t n) { return torch::zeros({n}, opts); };

  layers_.resize(spec.n_layers);
  std::vector<PendingParam> pending;
  pending.push_back({"wte", ParamGroupKind::kEmbedding, &wte_, normal({v, d}, std)});
  if (spec.positions == core::Positions::kLearned) {
    pending.push_back({"wpe", ParamGroupKind::kEmbedding, &wpe_, normal({t, d}, std)});
  }
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    Layer& l = layers_[i];
    const std::string p = "h." + std::to_string(i) + ".";
    pending.push_back({p + "attn.qkv.weight", ParamGroupKind::kHidden, &l.qkv_w, normal({3 * d, d}, hidden_std)});
    pending.push_back({p + "attn.proj.weight", ParamGroupKind::kHidden, &l.proj_w, normal({d, d}, proj_std)});
    pending.push_back({p + "mlp.fc.weight", ParamGroupKind::kHidden, &l.fc_w, normal({hidden, d}, hidden_std)});
    pending.push_back({p + "mlp.proj.weight", ParamGroupKind::kHidden, &l.fc2_w, normal({d, hidden}, proj_std)});
    pending.push_back({p + "ln1.weight", ParamGroupKind::kVector, &l.ln1_w, ones(d)});
    pending.push_back({p + "ln1.bias", ParamGroupKind::kVector, &l.ln1_b, zeros(d)});
    pending.push_back({p + "attn.qkv.bias", ParamGroupKind::kVector, &l.qkv_b, zeros(3 * d)});
    pending.push_back({p + "attn.proj.bias", ParamGroupKind::kVector, &l.proj_b, zeros(d)});
    pending.push_back({p + "ln2.weight", ParamGroupKind::kVector, &l.ln2_w, ones(d)});
    pending.push_back({p + "ln2.bias", ParamGroupKind::kVector, &l.ln2_b, zeros(d)});
    pending.push_back({p + "mlp.fc.bias", ParamGroupKind::kVector, &l.fc_b, zeros(hidden)});
    pending.push_back({p + "mlp.proj.bias", ParamGroupKind::kVector, &l.fc2_b, zeros(d)});
  }
  pending.push_back({"ln_f.weight", ParamGroupKind::kFinalNorm, &lnf_w_, ones(d)});
  pending.push_back({"ln_f.bias", ParamGroupKind::kFinalNorm, &lnf_b_, zeros(d)});
  return pending;
}

void Gpt::Flatten(std::vector<PendingParam> pending) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  // Group by group, stable within a group.
  std::stable_sort(pending.begin(), pending.end(), [](const PendingParam& a, const PendingParam& b) {
    return static_cast<int>(a.group) < static_cast<int>(b.group);
  });
  int64_t total = 0;
  for (const auto& p : pending) total += p.init.numel();
  flat_params_ = torch::empty({total}, opts);
  flat_grads_ = torch::zeros({total}, opts);
  int64_t offset = 0;
  for (auto& p : pending) {
    const int64_t n = p.init.numel();
    flat_params_.narrow(0, offset, n).copy_(p.init.reshape({n}));
    slices_.push_back({p.name, p.group, offset, n});
    if (groups_.empty() || groups_.back().kind != p.group) groups_.push_back({p.group, offset, 0});
    groups_.back().numel += n;
    offset += n;
  }
  flat_params_ = flat_params_.to(device_);
  flat_grads_ = flat_grads_.to(device_);
  for (size_t i = 0; i < pending.size(); ++i) {
    const ParamSlice& s = slices_[i];
    // A leaf whose storage is a slice of the flat buffer. set_data (not a view op) keeps autograd
    // from treating the parameter as a view of the buffer, which costs view bookkeeping per use.
    // A module's own parameter (spec.torchscript; its slot holds it) keeps its identity and takes the
    // slice as its storage, in place, so that whatever else in the module holds it (a GRU's list of
    // flat weights) sees the same tensor.
    torch::Tensor param = script_ ? *pending[i].slot : torch::empty({0}, flat_params_.options());
    param.set_data(flat_params_.narrow(0, s.offset, s.numel).view(pending[i].init.sizes()));
    param.requires_grad_(true);
    param.mutable_grad() = flat_grads_.narrow(0, s.offset, s.numel).view(pending[i].init.sizes());
    *pending[i].slot = param;
    parameters_.push_back(param);
  }
}

void Gpt::FlattenBuffers() {
  int64_t total = 0;
  for (const auto& b : script_buffers_) total += b.numel();
  flat_buffers_ = torch::empty({total}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  int64_t offset = 0;
  for (auto& b : script_buffers_) {
    const int64_t n = b.numel();
    torch::Tensor slice = flat_buffers_.narrow(0, offset, n);
    slice.copy_(b.reshape({n}));
    b.set_data(slice.view(b.sizes()));  // in place: the module's buffer now lives in the flat one
    offset += n;
  }
}

void Gpt::BuildAttentionConstants() {
  const int64_t d = spec_.d_model, t = spec_.seq_len;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  const auto dev_opts = opts.device(device_);
  causal_bias_ = torch::full({t, t}, -std::numeric_limits<float>::infinity(), opts)
                     .triu(1)
                     .to(device_);
  if (spec_.positions == core::Positions::kRope) {
    const int64_t half = d / spec_.n_heads / 2;
    auto inv_freq = torch::pow(10000.0, -torch::arange(half, opts) / static_cast<double>(half));
    auto angles = torch::outer(torch::arange(t, opts), inv_freq);
    rope_cos_ = angles.cos().to(dev_opts);
    rope_sin_ = angles.sin().to(dev_opts);
  }
}

int64_t Gpt::num_non_embedding_params() const {
  int64_t n = 0;
  for (const auto& s : slices_) {
    if (s.group != ParamGroupKind::kEmbedding) n += s.numel;
  }
  return n;
}

double Gpt::TrainFlopsPerToken() const {
  if (script_) {
    return spec_.flops_per_token > 0 ? spec_.flops_per_token : ProfiledFlopsPerToken(spec_);
  }
  const double unembedding = static_cast<double>(spec_.vocab_size * spec_.d_model);
  const double n = static_cast<double>(num_non_embedding_params()) + unembedding;
  return 6.0 * n + 12.0 * static_cast<double>(spec_.n_layers * spec_.d_model * spec_.seq_len);
}

std::string Gpt::FlopsSource() const {
  if (!script_) return "counted from the model's shape";
  return spec_.flops_per_token > 0 ? "model.flops_per_token" : "measured from a profiled step of the module";
}

torch::Tensor Gpt::ApplyRope(const torch::Tensor& x) const {
  // x: [B, T, H, hd]; rotate the two halves of each head (GPT-NeoX layout).
  const int64_t t = x.size(1), half = x.size(3) / 2;
  auto cos = rope_cos_.narrow(0, 0, t).unsqueeze(1);  // [T, 1, hd/2]
  auto sin = rope_sin_.narrow(0, 0, t).unsqueeze(1);
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1).to(x.scalar_type());
}

torch::Tensor Gpt::Attention(const Layer& l, const torch::Tensor& x) const {
  const int64_t b = x.size(0), t = x.size(1), d = spec_.d_model, h = spec_.n_heads;
  auto qkv = torch::linear(Low(x), Low(l.qkv_w), Low(l.qkv_b));  // [B, T, 3d]
  if (spec_.positions == core::Positions::kRope) {
    auto parts = qkv.view({b, t, 3, h, d / h});
    auto q = ApplyRope(parts.select(2, 0)), k = ApplyRope(parts.select(2, 1));
    qkv = torch::stack({q, k, parts.select(2, 2)}, 2).view({b, t, 3 * d});
  }
  return torch::linear(CausalAttention(qkv, h, causal_bias_, scales_.attention), Low(l.proj_w), Low(l.proj_b));
}


torch::Tensor Gpt::Forward(const torch::Tensor& tokens) const {
  if (script_) {
    std::optional<Bf16Autocast> autocast;
    if (compute_ == torch::kBFloat16) autocast.emplace(device_);
    const c10::IValue out = script_->forward({tokens});
    const torch::Tensor logits = out.isTuple() ? out.toTupleRef().elements()[0].toTensor() : out.toTensor();
    return logits.to(torch::kFloat32);
  }
  const int64_t t = tokens.size(1), d = spec_.d_model;
  NARROWS_CHECK(t <= spec_.seq_len) << "sequence of " << t << " tokens > seq_len " << spec_.seq_len;
  auto x = torch::embedding(wte_, tokens);
  if (wpe_.defined()) x = x + wpe_.narrow(0, 0, t);
  const double r = scales_.residual;
  for (const Layer& l : layers_) {
    auto a = Attention(l, torch::layer_norm(x, {d}, l.ln1_w, l.ln1_b, 1e-5));
    x = torch::add(x, a, r);  // a float32 residual stream whatever the products' type
    auto m = torch::linear(Low(torch::layer_norm(x, {d}, l.ln2_w, l.ln2_b, 1e-5)), Low(l.fc_w));
    m = torch::linear(BiasGelu(m, Low(l.fc_b)), Low(l.fc2_w), Low(l.fc2_b));
    x = torch::add(x, m, r);
  }
  x = torch::layer_norm(x, {d}, lnf_w_, lnf_b_, 1e-5);
  auto logits = torch::linear(Low(x), Low(wte_)).to(torch::kFloat32);  // the loss in float32
  if (scales_.logits != 1.0) logits = logits * scales_.logits;
  return logits;
}

torch::Tensor Gpt::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) const {
  auto logits = Forward(tokens);
  return torch::cross_entropy_loss(logits.view({-1, spec_.vocab_size}), targets.reshape({-1}));
}

}  // namespace narrows::trainer
