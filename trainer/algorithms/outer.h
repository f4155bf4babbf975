// What the DiLoCo family shares (diloco, streaming-diloco, async-diloco, dipaco): H inner steps
// between outer steps, the outer optimiser (DiLoCo, arXiv 2311.08105: SGD with Nesterov momentum,
// lr 0.7, momentum 0.9), and how pseudo-gradients travel (core/codec.h) — their options, one-word
// entries and the planner's prediction of their rounds. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/algorithm_registry.h"
#include "core/codec.h"
#include "trainer/algorithms/plan.h"

namespace narrows::trainer {

enum class OuterOptimizer { kSgd, kNesterov, kAdam };

struct OuterOptions : core::AlgorithmOptions {
  int64_t inner_steps = 50;  // H
  OuterOptimizer outer_optimizer = OuterOptimizer::kNesterov;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  // How outer gradients travel; fp32 is the plain ring all-reduce.
  core::CodecSpec outer_gradient;
};

// Reads inner_steps, outer_optimizer, outer_lr, outer_momentum and outer_gradient (a format name,
// or {format, block, topk, error_feedback}).
void ReadOuterOptions(core::OptionReader& r, OuterOptions* o);

// The one-word entries `prefix` (H = 50) and `prefix`-hN.
std::optional<core::ShorthandKeys> InnerStepsShorthand(const std::string& prefix, const std::string& text);

// Whether all of v[0, n) are finite: an outer gradient with NaN or infinity (a diverged replica,
// a peer that sent them) never reaches an outer step.
bool AllFinite(const float* v, int64_t n);
// "<algorithm>-h<H>", the name of an entry that gives none.
std::string RoundsName(const std::string& algorithm, const OuterOptions& o);

// DyLU (Async Local-SGD, arXiv 2401.09135 §4.2): a worker's inner steps per round,
// floor(H * t_fastest / t_own) within [1, H], from step times; H while either time is unknown (0).
int64_t DyluInnerSteps(int64_t inner_steps, double fastest_step_s, double own_step_s);

// DiLoCo's rounds as the planner sees them: every H steps, `fragments` synchronisations, each of a
// fragment's outer gradient encoded in `codec` plus the contributor count and one join vote per
// worker in fp32, each behind `overlap_steps` inner steps of compute (the last behind none).
// An fp32 outer gradient travels by `collective`; an encoded one as core::CollectiveName says.
PlanRow PredictOuterRounds(const PlanInputs& in, int64_t inner_steps, int64_t fragments, double overlap_steps,
                           const core::CodecSpec& codec, core::CollectiveKind collective);

}  // namespace narrows::trainer
