// Parameterisation: how a model's width and depth scale its initialisation, residual branches,
// attention scores, output logits and per-group optimiser hyper-parameters.
//
// `standard` is GPT-2's: hidden matrices drawn with init_std, the residual branches' output
// projections with init_std / sqrt(2 n_layers), attention scores scaled by 1/sqrt(head_dim), every
// multiplier 1. `completep` follows CompleteP (arXiv 2505.01618) as its public reference does
// (EleutherAI nanoGPT-mup, branch completep, model.py): every hidden matrix, the output projections
// included, drawn with init_std / sqrt(m_w) and no depth factor; attention scores by 1/head_dim;
// residual branches by m_d^-alpha; logits by 1/m_w; per-group learning rate, weight decay and eps
// as below, so that hyper-parameters tuned at (base_width, base_depth) transfer to other widths
// and depths. alpha (model.depth_alpha) is 1 (CompleteP) or 0.5 (the depth-muP of Yang et al.).
// Pure functions, no state.
#pragma once

#include "core/scenario.h"

namespace narrows::trainer {

// The parameter groups of the GPT, each a contiguous slice of the flat parameter buffer, in this
// order: embeddings (token, position), hidden matrices, the blocks' vectors (LayerNorm gains and
// biases, linear biases), the final LayerNorm.
enum class ParamGroupKind { kEmbedding = 0, kHidden = 1, kVector = 2, kFinalNorm = 3 };
constexpr int kNumParamGroups = 4;
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
  double attention = 1.0;         // multiplies the attention scores q·k
  double hidden_init_std = 1.0;   // multiplies model.init_std for the hidden matrices
  double output_init_divisor = 1.0;  // divides model.init_std for the residual branches' output projections
  GroupScales groups[kNumParamGroups];
  const GroupScales& group(ParamGroupKind kind) const { return groups[static_cast<int>(kind)]; }
};

ParameterizationScales ComputeScales(const core::ModelSpec& spec);

}  // namespace narrows::trainer
