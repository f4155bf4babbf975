#include "trainer/script_model.h"

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/script.h>

#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace narrows::trainer {

int64_t BlockOfName(const std::string& name) {
  std::stringstream parts(name);
  for (std::string part; std::getline(parts, part, '.');) {
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos) return std::stoll(part);
  }
  return -1;
}

namespace {

// An error's cause: its last non-empty line (a TorchScript error's follows its traceback).
std::string LastLine(std::string what) {
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what.substr(what.rfind('\n') + 1);
}

std::string Shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

core::Status Check(const core::ModelSpec& spec, core::Precision precision) {
  const std::string at = "model.torchscript " + spec.torchscript + ": ";
  torch::jit::Module m;
  try {
    m = torch::jit::load(spec.torchscript, torch::kCPU);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return core::Status::InvalidArgument(at + "not a TorchScript module saved by torch.jit.save (" +
                                         what.substr(0, what.find('\n')) + ")");
  }
  if (!m.find_method("forward")) return core::Status::InvalidArgument(at + "the module has no forward method");
  int64_t params = 0;
  std::set<int64_t> blocks;
  for (const auto& p : m.named_parameters(/*recurse=*/true)) {
    if (p.value.scalar_type() != torch::kFloat32) {
      return core::Status::InvalidArgument(at + "parameter " + p.name + " is " + std::string(c10::toString(p.value.scalar_type())) +
                                           "; narrows keeps parameters in float32 (export the module in float32)");
    }
    params += p.value.numel();
    if (const int64_t b = BlockOfName(p.name); b >= 0) blocks.insert(b);
  }
  if (params == 0) return core::Status::InvalidArgument(at + "the module has no parameters to train");
  if (spec.n_layers > 0 && static_cast<int64_t>(blocks.size()) != spec.n_layers) {
    return core::Status::InvalidArgument(at + "model.n_layers is " + std::to_string(spec.n_layers) + " but the module has " +
                                         std::to_string(blocks.size()) + " numbered blocks (layers.N, h.N, ...)");
  }
  // At the scenario's full length (a module with a shorter position table fails here, not in
  // training), with token ids across the data's vocabulary, the largest included.
  const int64_t t = spec.seq_len;
  torch::Tensor tokens = torch::randint(spec.vocab_size, {2, t}, torch::kInt64);
  tokens[0][0] = spec.vocab_size - 1;
  torch::Tensor logits;
  try {
    torch::NoGradGuard no_grad;
    m.eval();
    const c10::IValue out = m.forward({tokens});
    if (out.isTensor()) {
      logits = out.toTensor();
    } else if (out.isTuple() && !out.toTupleRef().elements().empty() && out.toTupleRef().elements()[0].isTensor()) {
      logits = out.toTupleRef().elements()[0].toTensor();
    } else {
      return core::Status::InvalidArgument(at + "forward returned " + out.tagKind() +
                                           "; expected logits [B, T, vocab], or a tuple whose first item they are");
    }
  } catch (const std::exception& e) {
    const std::string cause = LastLine(e.what());
    const bool index = cause.find("index out of range") != std::string::npos;
    return core::Status::InvalidArgument(
        at + "forward(tokens int64 [2, " + std::to_string(t) + "], ids up to " + std::to_string(spec.vocab_size - 1) +
        ") failed: " + cause +
        (index ? " (the data's vocabulary has " + std::to_string(spec.vocab_size) + " tokens and model.seq_len is " +
                     std::to_string(t) + ": do the module's embedding and position tables have as many rows?)"
               : ""));
  }
  if (logits.dim() != 3 || logits.size(0) != 2 || logits.size(1) != t || logits.size(2) != spec.vocab_size) {
    return core::Status::InvalidArgument(at + "forward(tokens int64 [2, " + std::to_string(t) + "]) returned " +
                                         Shape(logits) + "; expected logits [2, " + std::to_string(t) + ", " +
                                         std::to_string(spec.vocab_size) + "] (the data's vocabulary has " +
                                         std::to_string(spec.vocab_size) + " tokens)");
  }
  if (!logits.is_floating_point()) {
    return core::Status::InvalidArgument(at + "forward returned " + std::string(c10::toString(logits.scalar_type())) +
                                         " logits; expected floating point");
  }
  if (precision == core::Precision::kBf16) {
    try {
      torch::NoGradGuard no_grad;
      Bf16Autocast autocast(torch::kCPU);
      const c10::IValue out = m.forward({tokens});
      (void)out;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return core::Status::InvalidArgument(at + "forward fails under bf16 autocast (train.precision: bf16; use fp32): " +
                                           LastLine(what));
    }
  }
  return core::Status::Ok();
}

}  // namespace

core::Status CheckScriptModel(const core::ModelSpec& spec, core::Precision precision) {
  static std::mutex mu;
  static std::map<std::string, core::Status> checked;  // file, shape asked -> verdict
  const std::string key = spec.torchscript + "|" + std::to_string(spec.vocab_size) + "|" + std::to_string(spec.seq_len) +
                          "|" + std::to_string(spec.n_layers) + "|" + std::to_string(static_cast<int>(precision));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = checked.find(key);
  if (it != checked.end()) return it->second;
  const core::Status s = Check(spec, precision);
  checked.emplace(key, s);
  return s;
}

std::string ScriptModelNote(const core::ModelSpec& spec) {
  torch::jit::Module m;
  try {
    m = torch::jit::load(spec.torchscript, torch::kCPU);
  } catch (const c10::Error&) {
    return "";
  }
  int dropout = 0, norm = 0;
  for (const auto& sub : m.named_modules()) {
    if (!sub.value.type()->name()) continue;
    const std::string type = sub.value.type()->name()->qualifiedName();
    dropout += type.find("Dropout") != std::string::npos;
    norm += type.find("BatchNorm") != std::string::npos;
  }
  std::string note;
  if (dropout > 0) note += std::to_string(dropout) + " dropout layer(s) off";
  if (norm > 0) note += std::string(note.empty() ? "" : ", ") + std::to_string(norm) + " batch norm(s) on their running statistics";
  return note.empty() ? "" : spec.torchscript + " runs in eval mode, in training too: " + note +
                                 " (docs/how-to/your-model.md)";
}

double ProfiledFlopsPerToken(const core::ModelSpec& spec) {
  static std::mutex mu;
  static std::map<std::string, double> measured;  // file, length -> FLOPs per token
  const std::string key = spec.torchscript + "|" + std::to_string(spec.seq_len);
  std::lock_guard<std::mutex> lock(mu);
  if (const auto it = measured.find(key); it != measured.end()) return it->second;
  torch::jit::Module m = torch::jit::load(spec.torchscript, torch::kCPU);  // checked before
  m.eval();
  const torch::Tensor tokens = torch::zeros({1, spec.seq_len}, torch::kInt64);
  namespace prof = torch::autograd::profiler;
  prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                                   /*report_input_shapes=*/true, /*profile_memory=*/false,
                                                                   /*with_stack=*/false, /*with_flops=*/true));
  uint64_t flops = 0;
  try {
    const c10::IValue out = m.forward({tokens});
    const torch::Tensor logits = out.isTensor() ? out.toTensor() : out.toTupleRef().elements()[0].toTensor();
    logits.to(torch::kFloat32).logsumexp(-1).sum().backward();
  } catch (...) {
    prof::disableProfilerLegacy();
    throw;
  }
  for (auto& thread : prof::disableProfilerLegacy()) {
    for (auto& event : thread) flops += event.flops();
  }
  const double per_token = static_cast<double>(flops) / static_cast<double>(spec.seq_len);
  measured.emplace(key, per_token);
  return per_token;
}

}  // namespace narrows::trainer
