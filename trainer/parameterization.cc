#include "trainer/parameterization.h"

#include <cmath>

namespace narrows::trainer {

const char* ParamGroupName(ParamGroupKind kind) {
  switch (kind) {
    case ParamGroupKind::kEmbedding: return "embedding";
    case ParamGroupKind::kHidden: return "hidden";
    case ParamGroupKind::kVector: return "vector";
    case ParamGroupKind::kFinalNorm: return "final_norm";
  }
  return "?";
}

ParameterizationScales ComputeScales(const core::ModelSpec& spec) {
  ParameterizationScales s;
  const double head_dim = static_cast<double>(spec.d_model / spec.n_heads);
  // Weight decay applies to matrices (embedding and hidden), never to LayerNorm gains or biases.
  s.groups[static_cast<int>(ParamGroupKind::kVector)].weight_decay = 0.0;
  s.groups[static_cast<int>(ParamGroupKind::kFinalNorm)].weight_decay = 0.0;
  if (spec.parameterization == core::Parameterization::kStandard) {
    s.attention = 1.0 / std::sqrt(head_dim);
    s.output_init_divisor = std::sqrt(2.0 * static_cast<double>(spec.n_layers));  // GPT-2
    return s;
  }

  const double alpha = spec.depth_alpha;
  const double m_w = static_cast<double>(spec.d_model) / static_cast<double>(spec.base_width);
  const double m_d = static_cast<double>(spec.n_layers) / static_cast<double>(spec.base_depth);
  s.width_multiplier = m_w;
  s.depth_multiplier = m_d;
  // CompleteP (arXiv 2505.01618) Table 1 and its reference implementation.
  s.residual = std::pow(m_d, -alpha);
  s.logits = 1.0 / m_w;                      // muP output multiplier
  s.attention = 1.0 / head_dim;              // muP attention
  s.hidden_init_std = 1.0 / std::sqrt(m_w);  // muP hidden init variance ~ 1/width
  s.output_init_divisor = std::sqrt(m_w);    // the same: the branch multiplier is the depth correction
  GroupScales& hidden = s.groups[static_cast<int>(ParamGroupKind::kHidden)];
  hidden.lr = (1.0 / m_w) * std::pow(m_d, alpha - 1.0);
  hidden.weight_decay = m_w;
  hidden.eps = (1.0 / m_w) * std::pow(m_d, -alpha);
  GroupScales& vector = s.groups[static_cast<int>(ParamGroupKind::kVector)];
  vector.lr = std::pow(m_d, alpha - 1.0);  // inside the blocks: the depth correction
  GroupScales& embedding = s.groups[static_cast<int>(ParamGroupKind::kEmbedding)];
  embedding.eps = 1.0 / m_w;
  return s;  // the final LayerNorm: all 1 (outside the residual stream's depth scaling)
}

}  // namespace narrows::trainer
