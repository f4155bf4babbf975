#include "trainer/parameterization.h"

#include <cmath>

namespace narrows::trainer {

const char* ParamGroupName(ParamGroupKind kind) {
  switch (kind) {
    case ParamGroupKind::kEmbedding: return "embedding";
    case ParamGroupKind::kHidden: return "hidden";
    case ParamGroupKind::kVector: return "vector";
  }
  return "?";
}

ParameterizationScales ComputeScales(const core::ModelSpec& spec) {
  ParameterizationScales s;
  // Weight decay applies to matrices (embedding and hidden), never to LayerNorm gains or biases.
  s.groups[static_cast<int>(ParamGroupKind::kVector)].weight_decay = 0.0;
  if (spec.parameterization == core::Parameterization::kStandard) return s;

  constexpr double kAlpha = 1.0;  // CompleteP's depth exponent
  const double m_w = static_cast<double>(spec.d_model) / static_cast<double>(spec.base_width);
  const double m_d = static_cast<double>(spec.n_layers) / static_cast<double>(spec.base_depth);
  s.width_multiplier = m_w;
  s.depth_multiplier = m_d;
  // CompleteP (arXiv 2505.01618) Table 1, alpha = 1.
  s.residual = std::pow(m_d, -kAlpha);
  s.logits = 1.0 / m_w;                      // muP output multiplier
  s.hidden_init_std = 1.0 / std::sqrt(m_w);  // muP hidden init variance ~ 1/width
  GroupScales& hidden = s.groups[static_cast<int>(ParamGroupKind::kHidden)];
  hidden.lr = (1.0 / m_w) * std::pow(m_d, kAlpha - 1.0);
  hidden.weight_decay = m_w;
  hidden.eps = (1.0 / m_w) * std::pow(m_d, -kAlpha);
  GroupScales& vector = s.groups[static_cast<int>(ParamGroupKind::kVector)];
  vector.lr = std::pow(m_d, kAlpha - 1.0);
  GroupScales& embedding = s.groups[static_cast<int>(ParamGroupKind::kEmbedding)];
  embedding.eps = 1.0 / m_w;
  return s;
}

}  // namespace narrows::trainer
