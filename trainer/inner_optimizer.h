// The inner optimiser as a plug-in: what a replica steps its parameters with between outer
// synchronisations. Each optimiser is one file under trainer/optimizers/ that reads its own block
// of the scenario (`train.<name>`, chosen by `train.optimizer`), builds itself over a model's flat
// buffers, and registers both under its name with NARROWS_REGISTER_INNER_OPTIMIZER. The build lists
// the files (NARROWS_INNER_OPTIMIZERS in trainer/CMakeLists.txt) and generates a reference to each,
// so that a static link keeps them all. Built in: adamw.
//
// Also here, because every optimiser shares them: the learning-rate schedule and gradient clipping.
// Registration happens at static initialisation; lookups afterwards are read-only and thread-safe.
// An optimiser itself is not thread-safe; it borrows the model's buffers, which must outlive it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/block_plugins.h"
#include "core/scenario.h"
#include "trainer/gpt.h"

namespace narrows::trainer {

class InnerOptimizer {
 public:
  virtual ~InnerOptimizer() = default;
  // One update of the model's parameters from its gradients, with base learning rate `lr` (each
  // parameter group scales it).
  virtual void Step(double lr) = 0;
  // Forgets the optimiser's state and step count (a worker that lost its state).
  virtual void Reset() = 0;
  // The optimiser's state as named tensors in a fixed order: what checkpoints save and what a
  // joining data-parallel worker receives. Each is flat with the parameters' layout and length.
  virtual std::vector<std::pair<std::string, torch::Tensor*>> State() = 0;

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }

 protected:
  int64_t steps_ = 0;
};

struct InnerOptimizerPlugin {
  core::BlockParser parser;  // parser.name is the optimiser's name (`train.optimizer`)
  std::string summary;       // one line, for `narrows algorithms`
  // The optimiser over `model`'s flat buffers, with the train section (train.OptimizerOptions<T>()
  // are this optimiser's, or null where the scenario was not parsed: its defaults).
  std::function<std::unique_ptr<InnerOptimizer>(Gpt& model, const core::TrainSpec& train)> make;
};

// Registers `plugin` here and its parser with the scenario; returns true (for the macro below).
bool RegisterInnerOptimizer(InnerOptimizerPlugin plugin);
// The plug-in named `name`, or null.
const InnerOptimizerPlugin* FindInnerOptimizer(const std::string& name);
// Every registered plug-in, by name.
std::vector<const InnerOptimizerPlugin*> RegisteredInnerOptimizers();
// train.optimizer over `model`. REQUIRES: it is registered (the scenario parser checked).
std::unique_ptr<InnerOptimizer> MakeInnerOptimizer(Gpt& model, const core::TrainSpec& train);

// Learning rate at `step` (0-based): linear warm-up to train.lr over warmup_steps, then cosine
// decay to lr * min_lr_ratio at train.steps (or constant).
double LearningRate(const core::TrainSpec& train, int64_t step);

// Scales gradients so that their global L2 norm is at most max_norm (0 = no clipping).
// Returns the norm before clipping.
double ClipGradNorm(torch::Tensor& grads, double max_norm);

}  // namespace narrows::trainer

// At namespace scope of narrows::trainer, in the optimiser's file; `id` is its line in
// NARROWS_INNER_OPTIMIZERS.
#define NARROWS_REGISTER_INNER_OPTIMIZER(id, ...) \
  extern const bool kInnerOptimizerRegistered_##id; \
  const bool kInnerOptimizerRegistered_##id = ::narrows::trainer::RegisterInnerOptimizer(__VA_ARGS__)
