#include "trainer/replica.h"

#include <ATen/Parallel.h>

#include <thread>

#include "core/cores.h"
#include "core/heap.h"

namespace narrows::trainer {

core::Result<torch::Device> ResolveDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
    if (!torch::cuda::is_available()) {
      return core::Status::InvalidArgument(
          "device: '" + name + "' requested, but this LibTorch build sees no CUDA device "
          "(build against a CUDA LibTorch with Torch_DIR, or use device: cpu)");
    }
    torch::Device device(name == "cuda" ? std::string("cuda:0") : name);
    if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
      return core::Status::InvalidArgument("device: '" + name + "' but only " +
                                           std::to_string(torch::cuda::device_count()) +
                                           " CUDA devices are visible");
    }
    return device;
  }
  return core::Status::InvalidArgument("device: expected cpu, cuda or cuda:N; got '" + name + "'");
}

void Replica::FinishOnDevice() const {
  if (device().is_cuda()) torch::cuda::synchronize(device().index());
}

int ConfigureThreads(int64_t threads) {
  core::KeepLargeBlocksOnTheHeap();  // every step's activations are reused, not mapped afresh
  const int n = threads > 0 ? static_cast<int>(threads) : core::UsableCores();
  at::set_num_threads(n);
  return at::get_num_threads();
}

Replica::Replica(const core::ModelSpec& model, const core::TrainSpec& train, torch::Device device)
    : train_(train), model_(model, device), optimizer_(MakeInnerOptimizer(model_, train)) {
  model_.set_precision(train.precision);
}

torch::Tensor Replica::ToDevice(const std::vector<int64_t>& ids, int64_t rows, int64_t row_offset,
                                int64_t seq_len) const {
  auto host = torch::from_blob(const_cast<int64_t*>(ids.data()) + row_offset * seq_len,
                               {rows, seq_len}, torch::kInt64);
  return device().is_cpu() ? host : host.to(device(), /*non_blocking=*/false);
}

double Replica::ComputeGradients(const TokenBatch& batch, const std::function<void(double)>& before_backward) {
  model_.ZeroGrad();
  if (timing_only_) {
    const int64_t tokens = std::min<int64_t>(16, batch.seq_len);
    auto loss = model_.Loss(ToDevice(batch.inputs, 1, 0, tokens), ToDevice(batch.targets, 1, 0, tokens));
    if (before_backward) before_backward(loss.item<double>());
    loss.backward();
    return loss.item<double>();
  }
  const int64_t accum = std::min<int64_t>(train_.grad_accum, batch.batch);
  const int64_t micro = batch.batch / accum;
  NARROWS_CHECK(micro * accum == batch.batch) << "batch " << batch.batch << " not divisible by " << accum;
  torch::Tensor total = torch::zeros({}, torch::TensorOptions().device(device()));
  for (int64_t i = 0; i < accum; ++i) {
    auto inputs = ToDevice(batch.inputs, micro, i * micro, batch.seq_len);
    auto targets = ToDevice(batch.targets, micro, i * micro, batch.seq_len);
    auto loss = model_.Loss(inputs, targets);
    if (before_backward && i + 1 == accum) before_backward(loss.item<double>());
    (loss / static_cast<double>(accum)).backward();
    total += loss.detach();
  }
  return total.item<double>() / static_cast<double>(accum);
}

double Replica::ApplyGradients(double lr) {
  const double norm = ClipGradNorm(model_.flat_grads(), train_.grad_clip);
  optimizer_->Step(lr);
  return norm;
}

StepStats Replica::TrainStep(const TokenBatch& batch, double lr) {
  StepStats stats;
  stats.loss = ComputeGradients(batch);
  stats.grad_norm = ApplyGradients(lr);
  return stats;
}

double Replica::Evaluate(const std::vector<TokenBatch>& batches) { return EvaluateWithError(batches).loss; }

Replica::Evaluation Replica::EvaluateWithError(const std::vector<TokenBatch>& batches) {
  if (timing_only_) return {0.0, std::nan(""), {}};
  torch::NoGradGuard no_grad;
  // A module that writes its buffers in forward leaves them as training had them: evaluating
  // changes nothing a later step sees.
  torch::Tensor& buffers = model_.flat_buffers();
  const torch::Tensor kept = buffers.numel() > 0 ? buffers.clone() : torch::Tensor();
  struct Restore {
    torch::Tensor& into;
    const torch::Tensor& from;
    ~Restore() {
      if (from.defined()) into.copy_(from);
    }
  } restore{buffers, kept};
  double sum = 0.0, rows = 0.0;
  std::vector<double> per_row;
  for (const auto& b : batches) {
    const torch::Tensor targets = ToDevice(b.targets, b.batch, 0, b.seq_len);
    const torch::Tensor logits = model_.Forward(ToDevice(b.inputs, b.batch, 0, b.seq_len));
    const torch::Tensor flat_logits = logits.view({-1, logits.size(-1)}), flat_targets = targets.reshape({-1});
    sum += torch::cross_entropy_loss(flat_logits, flat_targets).item<double>() * static_cast<double>(b.batch);
    rows += static_cast<double>(b.batch);
    const torch::Tensor row = torch::cross_entropy_loss(flat_logits, flat_targets, {}, at::Reduction::None)
                                  .view({b.batch, b.seq_len})
                                  .to(torch::kFloat64)
                                  .mean(1)
                                  .cpu()
                                  .contiguous();
    per_row.insert(per_row.end(), row.data_ptr<double>(), row.data_ptr<double>() + b.batch);
  }
  Evaluation out{sum / rows, std::nan(""), {}};
  if (per_row.size() > 1) {
    double mean = 0.0, squares = 0.0;
    for (double v : per_row) mean += v;
    mean /= static_cast<double>(per_row.size());
    for (double v : per_row) squares += (v - mean) * (v - mean);
    out.standard_error = std::sqrt(squares / static_cast<double>(per_row.size() - 1) / static_cast<double>(per_row.size()));
  }
  out.rows = std::move(per_row);
  return out;
}

}  // namespace narrows::trainer
