// A model of the user's (trainer/script_model.h): tools/export-model's modules hosted by Gpt, their
// parameters in the flat buffers; the nanoGPT-style module equal to the built-in `tiny` model given
// its weights, in the forward and over 50 AdamW steps, and to a plain PyTorch loop in Python over 20;
// and the checks a bad module meets.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "trainer/gpt.h"
#include "trainer/replica.h"
#include "trainer/script_model.h"

namespace narrows::trainer {
namespace {

const std::string kModels = NARROWS_MODELS_DIR;

core::ModelSpec Tiny() {
  core::ModelSpec spec;  // the tiny preset: d 128, 4 blocks, 4 heads, T 128, learned positions
  spec.vocab_size = 256;
  return spec;
}

core::ModelSpec Script(const std::string& file, int64_t n_layers) {
  core::ModelSpec spec;
  spec.torchscript = kModels + "/" + file;
  spec.n_layers = n_layers;
  spec.vocab_size = 256;
  return spec;
}

// Copies `from`'s parameters into `to`'s by name; every parameter of `to` must have its twin.
void CopyByName(Gpt& from, Gpt& to) {
  std::map<std::string, ParamSlice> by_name;
  for (const auto& s : from.slices()) by_name[s.name] = s;
  ASSERT_EQ(from.slices().size(), to.slices().size());
  torch::NoGradGuard no_grad;
  for (const auto& s : to.slices()) {
    const auto it = by_name.find(s.name);
    ASSERT_NE(it, by_name.end()) << s.name << " has no twin in the built-in model";
    ASSERT_EQ(it->second.numel, s.numel) << s.name;
    to.flat_params().narrow(0, s.offset, s.numel).copy_(from.flat_params().narrow(0, it->second.offset, s.numel));
  }
}

TEST(ScriptModelTest, EveryExampleLoadsAndItsGradientsLandInTheFlatBuffer) {
  for (const auto& [file, blocks] : std::vector<std::pair<std::string, int64_t>>{{"gpt.pt", 4}, {"llama.pt", 4}, {"gru.pt", 0}}) {
    const core::ModelSpec spec = Script(file, blocks);
    ASSERT_TRUE(CheckScriptModel(spec).ok()) << CheckScriptModel(spec).ToString();
    torch::manual_seed(1);
    Gpt model(spec, torch::kCPU);
    EXPECT_GT(model.num_params(), 500'000) << file;
    auto tokens = torch::randint(0, 256, {2, 16}, torch::kInt64);
    auto targets = torch::randint(0, 256, {2, 16}, torch::kInt64);
    model.ZeroGrad();
    model.Loss(tokens, targets).backward();
    EXPECT_GT(model.flat_grads().abs().sum().item<double>(), 0.0) << file << ": no gradient reached the flat buffer";
    // Every parameter's gradient is its slice of flat_grads().
    for (size_t i = 0; i < model.parameters().size(); ++i) {
      const auto& s = model.slices()[i];
      EXPECT_EQ(model.parameters()[i].grad().data_ptr<float>(), model.flat_grads().data_ptr<float>() + s.offset) << s.name;
    }
    // Writing the flat buffer changes what the module computes.
    const auto before = model.Forward(tokens).detach().clone();
    { torch::NoGradGuard g; model.flat_params().mul_(0.5); }
    EXPECT_GT((model.Forward(tokens) - before).abs().max().item<double>(), 1e-4) << file;
  }
}

TEST(ScriptModelTest, InitWeightsDrawsFromTheSeed) {
  const core::ModelSpec spec = Script("gpt.pt", 4);
  torch::manual_seed(1);
  Gpt a(spec, torch::kCPU);
  torch::manual_seed(1);
  Gpt b(spec, torch::kCPU);
  torch::manual_seed(2);
  Gpt c(spec, torch::kCPU);
  EXPECT_TRUE(torch::equal(a.flat_params(), b.flat_params()));
  EXPECT_FALSE(torch::equal(a.flat_params(), c.flat_params()));
}

// The exported nanoGPT-style module and the built-in tiny model, given the same weights, compute
// the same logits, and train to the same losses over 50 AdamW steps.
TEST(ScriptModelTest, TheExportedGptEqualsTheBuiltInTinyModel) {
  torch::manual_seed(3);
  core::TrainSpec train;
  train.warmup_steps = 5;
  Replica built(Tiny(), train, torch::kCPU);
  Replica script(Script("gpt.pt", 4), train, torch::kCPU);
  CopyByName(built.model(), script.model());
  auto tokens = torch::randint(0, 256, {2, 32}, torch::kInt64);
  EXPECT_LT((built.model().Forward(tokens) - script.model().Forward(tokens)).abs().max().item<double>(), 1e-4);
  torch::manual_seed(4);
  const auto data = torch::randint(0, 256, {50, 4, 65}, torch::kInt64);
  for (int64_t step = 0; step < 50; ++step) {
    TokenBatch batch;
    batch.batch = 4;
    batch.seq_len = 64;
    const auto rows = data[step].contiguous();
    const int64_t* p = rows.data_ptr<int64_t>();
    for (int64_t r = 0; r < 4; ++r) {
      batch.inputs.insert(batch.inputs.end(), p + r * 65, p + r * 65 + 64);
      batch.targets.insert(batch.targets.end(), p + r * 65 + 1, p + r * 65 + 65);
    }
    const double a = built.TrainStep(batch, 3e-3).loss, b = script.TrainStep(batch, 3e-3).loss;
    ASSERT_NEAR(a, b, 1e-4 * a) << "step " << step;
  }
}

// The same module trained 20 steps by narrows and by a plain PyTorch loop in Python (Debian's
// python3-torch): the same initial parameters, batches and AdamW (decay on the matrices only, the
// gradient clipped at train.grad_clip), the losses within 1e-4 relative, step by step.
TEST(ScriptModelTest, TrainsAsAPlainPyTorchLoopDoes) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' 2> /dev/null") != 0) {
    GTEST_SKIP() << "needs /usr/bin/python3 with torch and numpy (tools/setup installs python3-torch)";
  }
  const std::string dir = testing::TempDir() + "torch_loop";
  std::filesystem::create_directories(dir);
  core::TrainSpec train;
  torch::manual_seed(5);
  Replica replica(Script("gpt.pt", 4), train, torch::kCPU);
  Gpt& model = replica.model();
  nlohmann::json index = {{"model", kModels + "/gpt.pt"}, {"steps", 20}, {"batch", 4}, {"seq_len", 64},
                          {"lr", 3e-3}, {"weight_decay", train.weight_decay}, {"beta1", train.beta1},
                          {"beta2", train.beta2}, {"eps", train.eps}, {"grad_clip", train.grad_clip}};
  for (const auto& s : model.slices()) {
    const bool decay = s.group == ParamGroupKind::kEmbedding || s.group == ParamGroupKind::kHidden;
    index["params"].push_back({{"name", s.name}, {"offset", s.offset}, {"numel", s.numel}, {"decay", decay}});
  }
  std::ofstream(dir + "/index.json") << index.dump();
  const torch::Tensor params = model.flat_params().contiguous();
  std::ofstream(dir + "/params.f32", std::ios::binary)
      .write(reinterpret_cast<const char*>(params.data_ptr<float>()), params.numel() * 4);
  // Rows that count up from a random byte: learnable, so that the losses fall and a difference in
  // what the two loops learn shows.
  torch::manual_seed(6);
  const torch::Tensor data =
      (torch::randint(0, 256, {20, 4, 1}, torch::kInt64) + torch::arange(65, torch::kInt64)).remainder(256).contiguous();
  std::ofstream(dir + "/batches.i64", std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data_ptr<int64_t>()), data.numel() * 8);
  const std::string command = "/usr/bin/python3 " NARROWS_SOURCE_DIR "/tests/trainer/torch_loop.py " + dir + " > " + dir +
                              "/losses.json";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(dir + "/losses.json");
  const auto python = nlohmann::json::parse(in);
  ASSERT_EQ(python.size(), 20u);
  const int64_t* p = data.data_ptr<int64_t>();
  for (int64_t step = 0; step < 20; ++step) {
    TokenBatch batch;
    batch.batch = 4;
    batch.seq_len = 64;
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t* row = p + (step * 4 + r) * 65;
      batch.inputs.insert(batch.inputs.end(), row, row + 64);
      batch.targets.insert(batch.targets.end(), row + 1, row + 65);
    }
    const double ours = replica.TrainStep(batch, 3e-3).loss, theirs = python[step].get<double>();
    EXPECT_NEAR(ours, theirs, 1e-4 * theirs) << "step " << step;
  }
  EXPECT_LT(python[19].get<double>(), 0.8 * python[0].get<double>()) << "the loops learned too little to compare";
}

TEST(ScriptModelTest, ABadModuleIsRefusedNamingWhatIsWrong) {
  core::ModelSpec missing = Script("no-such.pt", 0);
  EXPECT_NE(CheckScriptModel(missing).message().find("not a TorchScript module"), std::string::npos);
  core::ModelSpec vocab = Script("gpt.pt", 4);
  vocab.vocab_size = 300;
  const std::string v = CheckScriptModel(vocab).message();
  EXPECT_NE(v.find("returned [2, 8, 256]; expected logits [2, 8, 300]"), std::string::npos) << v;
  core::ModelSpec blocks = Script("gpt.pt", 3);
  const std::string b = CheckScriptModel(blocks).message();
  EXPECT_NE(b.find("model.n_layers is 3 but the module has 4 numbered blocks"), std::string::npos) << b;
}

TEST(ScriptModelTest, BlocksAreTheFirstNumberInAName) {
  EXPECT_EQ(BlockOfName("h.3.attn.qkv.weight"), 3);
  EXPECT_EQ(BlockOfName("layers.12.ffn.w1.weight"), 12);
  EXPECT_EQ(BlockOfName("gru.weight_ih_l0"), -1);
  EXPECT_EQ(BlockOfName("wte"), -1);
}

}  // namespace
}  // namespace narrows::trainer
