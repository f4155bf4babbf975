// Parameterisation: how a model's width and depth scale its initialisation, residual branches,
// output logits and per-group optimiser hyper-parameters.
//
// `standard` leaves everything at 1. `completep` follows CompleteP (arXiv 2505.01618, with
// alpha = 1; EleutherAI nanoGPT-mup, branch completep), so that a learning rate tuned at
// (base_width, base_depth) transfers to other widths and depths. Pure functions, no state.
#pragma once

#include "core/scenario.h"

namespace narrows::trainer {

// The three parameter groups of the GPT, each a contiguous slice of the flat parameter buffer.
enum class ParamGroupKind { kEmbedding = 0, kHidden = 1, kVector = 2 };
constexpr int kNumParamGroups = 3;
const char* ParamGroupName(ParamGroupKind kind);

struct GroupScales {
  double lr = 1.0;            // multiplies train.lr
  double weight_decay = 1.0;  // multiplies train.weight_decay (0 = not decayed)
  double eps = 1.0;           // multiplies train.eps
};

struct ParameterizationScales {
  double width_multiplier = 1.0;  // m_w = d_model / base_width
  double depth_multiplier = 1.0;  // m_d = n_layers / base_depth
  double residual = 1.0;          // multiplies each residual branch before it is added
  double logits = 1.0;            // multiplies the output logits
  double hidden_init_std = 1.0;   // multiplies model.init_std for hidden matrices
  GroupScales groups[kNumParamGroups];
  const GroupScales& group(ParamGroupKind kind) const { return groups[static_cast<int>(kind)]; }
};

ParameterizationScales ComputeScales(const core::ModelSpec& spec);

}  // namespace narrows::trainer
