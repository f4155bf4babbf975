#include "trainer/replica.h"

#include <ATen/Parallel.h>

#include <thread>

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

int ConfigureThreads(int64_t threads) {
  core::KeepLargeBlocksOnTheHeap();  // every step's activations are reused, not mapped afresh
  const int n = threads > 0 ? static_cast<int>(threads)
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  return at::get_num_threads();
}

Replica::Replica(const core::ModelSpec& model, const core::TrainSpec& train, torch::Device device)
    : train_(train), model_(model, device), optimizer_(MakeInnerOptimizer(model_, train)) {}

torch::Tensor Replica::ToDevice(const std::vector<int64_t>& ids, int64_t rows, int64_t row_offset,
                                int64_t seq_len) const {
  auto host = torch::from_blob(const_cast<int64_t*>(ids.data()) + row_offset * seq_len,
                               {rows, seq_len}, torch::kInt64);
  return device().is_cpu() ? host : host.to(device(), /*non_blocking=*/false);
}

double Replica::ComputeGradients(const TokenBatch& batch, const std::function<void(double)>& before_backward) {
  model_.ZeroGrad();
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

double Replica::Evaluate(const std::vector<TokenBatch>& batches) {
  torch::NoGradGuard no_grad;
  double sum = 0.0, rows = 0.0;
  for (const auto& b : batches) {
    const double loss =
        model_.Loss(ToDevice(b.inputs, b.batch, 0, b.seq_len), ToDevice(b.targets, b.batch, 0, b.seq_len)).item<double>();
    sum += loss * static_cast<double>(b.batch);
    rows += static_cast<double>(b.batch);
  }
  return sum / rows;
}

}  // namespace narrows::trainer
