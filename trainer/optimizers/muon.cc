#include "trainer/optimizers/muon.h"

#include <algorithm>
#include <cmath>

namespace narrows::trainer {

torch::Tensor NewtonSchulz(const torch::Tensor& g, int64_t steps) {
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = g.size(0) > g.size(1);
  torch::Tensor x = tall ? g.t() : g;
  x = x / (x.norm() + 1e-7);
  for (int64_t i = 0; i < steps; ++i) {
    const torch::Tensor gram = x.mm(x.t());
    x = a * x + (b * gram + c * gram.mm(gram)).mm(x);
  }
  return tall ? x.t() : x;
}

Muon::Muon(Gpt& model, const core::TrainSpec& train, MuonOptions options)
    : params_(model.flat_params()), grads_(model.flat_grads()), momentum_(torch::zeros_like(params_)), o_(options) {
  const GroupScales& hidden = model.scales().group(ParamGroupKind::kHidden);
  lr_scale_ = hidden.lr;
  weight_decay_ = train.weight_decay * hidden.weight_decay;
  // Muon on the hidden matrices; AdamW over the rest: every group but the hidden one, and any
  // hidden slice that is not a matrix.
  std::vector<AdamWGroup> rest;
  for (size_t i = 0; i < model.slices().size(); ++i) {
    const ParamSlice& s = model.slices()[i];
    const torch::Tensor& p = model.parameters()[i];
    if (s.group == ParamGroupKind::kHidden && p.dim() == 2) {
      matrices_.push_back({s.offset, p.size(0), p.size(1)});
    } else {
      const GroupScales& g = model.scales().group(s.group);
      rest.push_back({s.offset, s.numel, g.lr, train.weight_decay * g.weight_decay, train.eps * g.eps});
    }
  }
  adamw_ = std::make_unique<FlatAdamW>(params_, grads_, std::move(rest), train.beta1, train.beta2);
}

void Muon::Step(double lr) {
  ++steps_;
  adamw_->set_steps_taken(steps_ - 1);  // its bias correction follows this step count (restored too)
  adamw_->Step(lr);
  torch::NoGradGuard no_grad;
  const double matrix_lr = lr * lr_scale_;
  for (const Matrix& m : matrices_) {
    const int64_t n = m.rows * m.cols;
    torch::Tensor g = grads_.narrow(0, m.offset, n).view({m.rows, m.cols});
    torch::Tensor buf = momentum_.narrow(0, m.offset, n).view({m.rows, m.cols});
    torch::Tensor p = params_.narrow(0, m.offset, n).view({m.rows, m.cols});
    buf.mul_(o_.momentum).add_(g);
    const torch::Tensor direction = o_.nesterov ? g.add(buf, o_.momentum) : buf;
    const double scale = o_.scale == MuonOptions::Scale::kRms
                             ? 0.2 * std::sqrt(static_cast<double>(std::max(m.rows, m.cols)))
                             : std::sqrt(std::max(1.0, static_cast<double>(m.rows) / static_cast<double>(m.cols)));
    p.mul_(1.0 - matrix_lr * weight_decay_);
    p.add_(NewtonSchulz(direction, o_.ns_steps), -matrix_lr * scale);
  }
}

void Muon::Reset() {
  torch::NoGradGuard no_grad;
  adamw_->Reset();
  momentum_.zero_();
  steps_ = 0;
}

std::vector<std::pair<std::string, torch::Tensor*>> Muon::State() {
  auto state = adamw_->State();
  state.emplace_back("muon_momentum", &momentum_);
  return state;
}

namespace {

const core::KeyBlock kMuonKeys("train.muon", "Muon: orthogonalised momentum on the hidden matrices, AdamW elsewhere.");
const core::NumberKey kMomentum(kMuonKeys, "momentum", 0.95, 0.0, 1.0, core::Doc("momentum of the hidden matrices' update"));
const core::BoolKey kNesterov(kMuonKeys, "nesterov", true, core::Doc("Nesterov momentum"));
const core::IntKey kNsSteps(kMuonKeys, "ns_steps", 5, 1, 100, core::Doc("Newton-Schulz iterations"));
const core::EnumKey<MuonOptions::Scale> kScale(kMuonKeys, "scale",
                                               {{"rms", MuonOptions::Scale::kRms}, {"spectral", MuonOptions::Scale::kSpectral}},
                                               MuonOptions::Scale::kRms,
                                               core::Doc("rms: the update's RMS matched to AdamW's; spectral: sqrt(fan_out / fan_in)"));

InnerOptimizerPlugin MuonPlugin() {
  InnerOptimizerPlugin p;
  p.parser.name = "muon";
  p.parser.parse = [](core::OptionReader& r, const core::Scenario&) {
    auto o = std::make_shared<MuonOptions>();
    o->momentum = r.Double(kMomentum);
    o->nesterov = r.Bool(kNesterov);
    o->ns_steps = r.Int(kNsSteps);
    o->scale = r.Enum(kScale);
    return std::shared_ptr<const core::PluginOptions>(std::move(o));
  };
  p.summary = "Muon: Newton-Schulz-orthogonalised momentum on the hidden matrices, AdamW elsewhere (train.muon)";
  p.make = [](Gpt& model, const core::TrainSpec& train) -> std::unique_ptr<InnerOptimizer> {
    const MuonOptions* o = train.OptimizerOptions<MuonOptions>();
    return std::make_unique<Muon>(model, train, o ? *o : MuonOptions{});
  };
  return p;
}

}  // namespace

NARROWS_REGISTER_INNER_OPTIMIZER(muon, MuonPlugin());

}  // namespace narrows::trainer
