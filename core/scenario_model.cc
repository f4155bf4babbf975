// The scenario's model block: a preset of the built-in GPT, its shape given key by key, or a
// TorchScript module of the user's, with the block's declared keys. Part of ParseScenario
// (core/scenario.cc), which hands it its Section.
#include <string>
#include <utility>
#include <vector>

#include "core/result_record.h"
#include "core/scenario.h"
#include "core/section.h"

namespace narrows::core {
namespace {

using internal::Section;

struct Preset {
  const char* name;
  int64_t d_model, n_layers, n_heads, seq_len, vocab_size;
};

// Sizes with a byte vocabulary, except gpt2-124m which is GPT-2 small (Radford et al. 2019).
constexpr Preset kPresets[] = {
    {"nano", 32, 2, 2, 64, 256},         // ~0.03M + embeddings: unit tests
    {"tiny", 128, 4, 4, 128, 256},       // ~0.8M: the quickstart
    {"small", 256, 6, 8, 256, 256},      // ~4.8M
    {"medium", 512, 8, 8, 512, 256},     // ~25M
    {"gpt2-124m", 768, 12, 12, 1024, 50257},
};

// The declared keys of the block (core/keys.h); `narrows reference` prints them.
const KeyBlock kModel("model", "The model every entry trains: a preset, or its shape given key by key.");
const ChoiceKey kPreset(kModel, "preset", {}, "tiny", Doc("a shape: nano, tiny, small, medium or gpt2-124m (docs/scenarios.md)"),
                        "nano, tiny, small, medium, gpt2-124m");
const IntKey kDModel(kModel, "d_model", 128, 8, 65536, Doc("width; must divide by n_heads", "", "from the preset"));
const IntKey kNLayers(kModel, "n_layers", 4, 1, 1024, Doc("transformer blocks", "", "from the preset"));
const IntKey kNHeads(kModel, "n_heads", 4, 1, 1024, Doc("attention heads", "", "from the preset"));
const IntKey kSeqLen(kModel, "seq_len", 128, 2, 1 << 20, Doc("context length", "tokens", "from the preset"));
const IntKey kMlpRatio(kModel, "mlp_ratio", 4, 1, 64, Doc("MLP hidden width over d_model"));
const EnumKey<Positions> kPositions(kModel, "positions", {{"learned", Positions::kLearned}, {"rope", Positions::kRope}},
                                    Positions::kLearned, Doc("learned absolute positions, or rotary (GPT-NeoX layout)"));
const NumberKey kInitStd(kModel, "init_std", 0.02, 0.0, 1.0, Doc("std of weight initialisation, scaled per parameterisation"),
                         Bound::kExclusive);
const EnumKey<Parameterization> kParameterization(
    kModel, "parameterization",
    {{"standard", Parameterization::kStandard}, {"completep", Parameterization::kCompleteP}}, Parameterization::kStandard,
    Doc("GPT-2's, or CompleteP's depth and width scaling (arXiv 2505.01618)"));
const TextKey kTorchScript(kModel, "torchscript", "",
                           Doc("a TorchScript language model of the user's (torch.jit.script or trace, saved): forward(tokens "
                               "int64 [B, T]) -> logits [B, T, vocab], or a tuple whose first item they are; its own shape "
                               "replaces the preset's (docs/how-to/your-model.md)"));
const TextKey kTorchScriptDigest(kModel, "torchscript_digest", "",
                                 Doc("the torchscript file's digest (FNV-1a of its bytes, 16 hex digits), which the "
                                     "resolved scenario records so that a result folder answers only the same file; "
                                     "given, it must match the file",
                                     "", "the file's"));
const NumberKey kFlopsPerToken(kModel, "flops_per_token", 0.0, 0.0, 1e18,
                               Doc("a torchscript model's training FLOPs per token, for modelled compute and the planner "
                                   "(0: measured once from a profiled step of the module: its matrix products, forward "
                                   "and backward)",
                                   "FLOP"));
const EnumKey<ModelBuffers> kBuffers(kModel, "buffers", {{"local", ModelBuffers::kLocal}, {"averaged", ModelBuffers::kAveraged}},
                                     ModelBuffers::kLocal,
                                     Doc("a torchscript model's float32 buffers (running statistics, tables): each replica "
                                         "keeps its own, or they are averaged among the members at every round's end "
                                         "(every step under DDP, every outer step under DiLoCo), their bytes counted"));
const IntKey kBaseDepth(kModel, "base_depth", 4, 1, 1024,
                        Doc("the depth the hyper-parameters were tuned at (CompleteP)", "", "n_layers"));
const IntKey kBaseWidth(kModel, "base_width", 128, 1, 65536,
                        Doc("the width the hyper-parameters were tuned at (CompleteP)", "", "d_model"));
const NumberKey kDepthAlpha(kModel, "depth_alpha", 1.0, 0.5, 1.0,
                            Doc("CompleteP's depth exponent: 1 is CompleteP, 0.5 depth-muP; completep only"));

}  // namespace

namespace internal {

// A torchscript model: the file, its seq_len, its numbered blocks where given, its FLOPs and its
// buffers. The module has its own shape and initialisation: the keys that would shape the built-in
// GPT are refused rather than ignored, and the resolved scenario does not spell them out (it names
// the keys that apply to the module, defaults included, and reads back as it is).
void ReadScriptModel(Section& s, ModelSpec* m) {
  m->torchscript = s.String(kTorchScript);
  m->preset.clear();
  for (const char* key : {"preset", "d_model", "n_heads", "mlp_ratio", "positions", "init_std", "parameterization",
                          "base_depth", "base_width", "depth_alpha"}) {
    if (s.Has(key)) s.ErrorAt(key, std::string("shapes the built-in GPT; a torchscript model has its own (remove ") + key + ")");
  }
  // n_layers: the module's numbered blocks (checked when it is loaded), which Streaming DiLoCo's
  // fragments split; 0, unknown, where not given.
  m->n_layers = s.Has("n_layers") ? s.Int(kNLayers, 0) : 0;
  m->seq_len = s.Int(kSeqLen, 128);
  m->flops_per_token = s.Double(kFlopsPerToken);
  m->buffers = s.Enum(kBuffers);
  const std::string digest = FileDigest(m->torchscript);
  if (digest.empty()) {
    s.ErrorAt("torchscript", "cannot read " + m->torchscript + " (paths are relative to the working directory)");
  } else if (s.Has("torchscript_digest")) {
    const std::string recorded = s.String(kTorchScriptDigest);
    if (recorded != digest) {
      s.ErrorAt("torchscript_digest", "is " + recorded + ", but " + m->torchscript + " is now " + digest +
                                          ": the module changed since this scenario was resolved (remove the key to "
                                          "train the file as it is)");
    }
  } else {
    s.Set("torchscript_digest", digest);  // the resolved scenario records the file it trained
  }
}

void ReadModel(Section s, ModelSpec* m, int64_t data_vocab) {
  m->vocab_size = data_vocab;
  if (s.Has("torchscript")) {
    ReadScriptModel(s, m);
    s.Finish();
    return;
  }
  std::vector<std::string> preset_names;
  for (const auto& p : kPresets) preset_names.emplace_back(p.name);
  m->preset = s.Choose(kPreset, "tiny", preset_names);
  const Preset* preset = &kPresets[1];
  for (const auto& p : kPresets) {
    if (m->preset == p.name) preset = &p;
  }
  m->d_model = s.Int(kDModel, preset->d_model);
  m->n_layers = s.Int(kNLayers, preset->n_layers);
  m->n_heads = s.Int(kNHeads, preset->n_heads);
  m->seq_len = s.Int(kSeqLen, preset->seq_len);
  m->mlp_ratio = s.Int(kMlpRatio);
  m->vocab_size = data_vocab;
  m->positions = s.Enum(kPositions);
  m->init_std = s.Double(kInitStd);
  m->parameterization = s.Enum(kParameterization);
  m->base_depth = s.Int(kBaseDepth, m->n_layers);
  m->base_width = s.Int(kBaseWidth, m->d_model);
  m->depth_alpha = s.Double(kDepthAlpha);
  if (s.Has("flops_per_token")) s.ErrorAt("flops_per_token", "applies to a torchscript model; the built-in GPT's are counted");
  if (s.Has("buffers")) s.ErrorAt("buffers", "applies to a torchscript model; the built-in GPT has no buffers");
  if (m->parameterization == Parameterization::kStandard && m->depth_alpha != 1.0) {
    s.ErrorAt("depth_alpha", "applies to parameterization: completep only");
  }
  if (m->d_model % m->n_heads != 0) {
    s.Error(s.node(), s.path() + ".n_heads",
            "d_model (" + std::to_string(m->d_model) + ") must be divisible by n_heads (" +
                std::to_string(m->n_heads) + ")");
  } else if (m->positions == Positions::kRope && (m->d_model / m->n_heads) % 2 != 0) {
    s.Error(s.node(), s.path() + ".positions", "rope needs an even head dimension");
  }
  s.Finish();
}

}  // namespace internal

std::vector<std::pair<std::string, ModelSpec>> ModelPresets() {
  std::vector<std::pair<std::string, ModelSpec>> out;
  for (const auto& p : kPresets) {
    ModelSpec m;
    m.preset = p.name;
    m.d_model = p.d_model;
    m.n_layers = p.n_layers;
    m.n_heads = p.n_heads;
    m.seq_len = p.seq_len;
    m.vocab_size = p.vocab_size;
    out.emplace_back(p.name, m);
  }
  return out;
}
std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

}  // namespace narrows::core
