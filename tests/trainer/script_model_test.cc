// A model of the user's (trainer/script_model.h): tools/export-model's modules hosted by Gpt, their
// parameters in the flat buffers; the nanoGPT-style module equal to the built-in `tiny` model given
// its weights, in the forward and over 50 AdamW steps, and to a plain PyTorch loop in Python over 20;
// its training FLOPs profiled, its bf16 autocast and its buffers; under the emulator, the same
// module trained by DDP and DiLoCo as the built-in model is; and the checks a bad module meets.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/trainer/distributed_fixture.h"
#include "trainer/checkpoint.h"
#include "trainer/gpt.h"
#include "trainer/inner_optimizer.h"
#include "trainer/replica.h"
#include "trainer/sampler.h"
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
  EXPECT_NE(v.find("ids up to 299) failed: RuntimeError: index out of range in self (the data's vocabulary has 300 tokens"),
            std::string::npos) << v;
  core::ModelSpec longer = Script("gpt.pt", 4);
  longer.seq_len = 256;  // its position table has 128 rows
  const std::string l = CheckScriptModel(longer).message();
  EXPECT_NE(l.find("forward(tokens int64 [2, 256], ids up to 255) failed: "), std::string::npos) << l;
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

// The profiled FLOPs per token of the nanoGPT-style module come within 3% of the built-in tiny
// model's count (6N with the attention term); the GRU's within 5% of 6 x its parameters (each
// weight in one product per token, forward and backward). Measured, not 6N: the attention term
// makes the GPT's differ from 6N by more than 3%.
TEST(ScriptModelTest, FlopsPerTokenAreMeasuredFromAProfiledStep) {
  const core::ModelSpec gpt = Script("gpt.pt", 4);
  const double built = Gpt(Tiny(), torch::kCPU).TrainFlopsPerToken();
  const double profiled = ProfiledFlopsPerToken(gpt);
  EXPECT_NEAR(profiled / built, 1.0, 0.03) << profiled << " vs " << built;
  Gpt hosted(gpt, torch::kCPU);
  EXPECT_EQ(hosted.TrainFlopsPerToken(), profiled);
  EXPECT_EQ(hosted.FlopsSource(), "measured from a profiled step of the module");
  EXPECT_GT(std::abs(profiled / (6.0 * static_cast<double>(hosted.num_params())) - 1.0), 0.03);
  core::ModelSpec gru = Script("gru.pt", 0);
  const double n = static_cast<double>(Gpt(gru, torch::kCPU).num_params());
  EXPECT_NEAR(ProfiledFlopsPerToken(gru) / (6.0 * n), 1.0, 0.05);
  gru.flops_per_token = 1e6;
  EXPECT_EQ(Gpt(gru, torch::kCPU).TrainFlopsPerToken(), 1e6);
  EXPECT_EQ(Gpt(gru, torch::kCPU).FlopsSource(), "model.flops_per_token");
}

// train.precision: bf16 runs the module under LibTorch's bf16 autocast: logits near float32's,
// not equal to them, and the module learns.
TEST(ScriptModelTest, Bf16RunsTheModuleUnderAutocast) {
  for (const char* file : {"gpt.pt", "llama.pt", "gru.pt"}) {
    core::TrainSpec fp32, bf16;
    bf16.precision = core::Precision::kBf16;
    bf16.warmup_steps = fp32.warmup_steps = 2;
    const core::ModelSpec spec = Script(file, 0);
    ASSERT_TRUE(CheckScriptModel(spec, core::Precision::kBf16).ok());
    torch::manual_seed(8);
    Replica a(spec, fp32, torch::kCPU);
    torch::manual_seed(8);
    Replica b(spec, bf16, torch::kCPU);
    const auto tokens = torch::randint(0, 256, {2, 32}, torch::kInt64);
    const double gap = (a.model().Forward(tokens) - b.model().Forward(tokens)).abs().max().item<double>();
    EXPECT_GT(gap, 0.0) << file << ": bf16 computed as float32";
    EXPECT_LT(gap, 0.1) << file;
    TokenBatch batch;
    batch.batch = 4;
    batch.seq_len = 32;
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t t = 0; t < 32; ++t) {
        batch.inputs.push_back((r * 7 + t) % 256);
        batch.targets.push_back((r * 7 + t + 1) % 256);
      }
    }
    const double first = b.TrainStep(batch, 3e-3).loss;
    double last = first;
    for (int i = 0; i < 20; ++i) last = b.TrainStep(batch, 3e-3).loss;
    EXPECT_LT(last, 0.8 * first) << file;
  }
}

// Emulated runs of a module of the user's, over the fixture's corpus.
class ScriptRunTest : public DistributedTest {
 protected:
  core::Scenario MakeScript(const std::string& model, const std::string& extra) {
    auto sc = core::ParseScenario("name: s\nthreads: 2\nmodel: " + model + "\n"
                                  "eval: {every: 10, batches: 2, batch_size: 4}\n"
                                  "compute: {mode: modelled, device_flops: 1.0e9}\n"
                                  "network: {profile: home-100m}\n"
                                  "output: {dir: " + (dir_ / "runs").string() + ", log_every: 1}\n"
                                  "data: {path: " + (dir_ / "corpus.txt").string() + "}\n" + extra,
                                  "s.yaml", {});
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    return sc.ok() ? *sc : core::Scenario{};
  }
  std::vector<double> TrainLosses(const std::string& entry) {
    std::vector<double> out;
    std::istringstream lines(Slurp(dir_ / "out" / entry / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("train_loss") && j["train_loss"].is_number()) out.push_back(j["train_loss"].get<double>());
    }
    return out;
  }
};

// The exported nanoGPT-style module, started from the built-in tiny model's weights, trains to the
// built-in model's losses under DDP and DiLoCo over two emulated workers, step by step for 50 steps.
TEST_F(ScriptRunTest, TheExportedGptTrainsAsTheBuiltInModelUnderDdpAndDiloco) {
  torch::manual_seed(7);
  core::TrainSpec train;
  Replica built(Tiny(), train, torch::kCPU);
  Replica script(Script("gpt.pt", 4), train, torch::kCPU);
  CopyByName(built.model(), script.model());
  const std::string built_file = (dir_ / "built.ckpt").string(), script_file = (dir_ / "script.ckpt").string();
  ASSERT_TRUE(WriteModelFile(built_file, built, 0, 0.0).ok());
  ASSERT_TRUE(WriteModelFile(script_file, script, 0, 0.0).ok());
  const std::string common = "train: {steps: 50, batch_size: 2, lr: 3e-3, warmup_steps: 5}\nworkers: {count: 2}\n";
  for (const std::string algorithm : {"ddp", "diloco"}) {
    const std::string entry = algorithm == "ddp" ? "{algorithm: ddp" : "{algorithm: diloco, inner_steps: 10";
    const auto a = MakeScript("{preset: tiny}", common + "warm_start: {checkpoint: " + built_file + "}\ncompare: [" +
                                                    entry + ", name: built-" + algorithm + "}]\n");
    const auto b = MakeScript("{torchscript: " + kModels + "/gpt.pt, n_layers: 4}",
                              common + "warm_start: {checkpoint: " + script_file + "}\ncompare: [" + entry +
                                  ", name: script-" + algorithm + "}]\n");
    const EntryResult ra = Run(a), rb = Run(b);
    const auto la = TrainLosses("built-" + algorithm), lb = TrainLosses("script-" + algorithm);
    ASSERT_EQ(la.size(), 50u) << algorithm;
    ASSERT_EQ(lb.size(), 50u) << algorithm;
    for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-4 * la[i]) << algorithm << " step " << i + 1;
    EXPECT_NEAR(ra.final_val_loss, rb.final_val_loss, 1e-4 * ra.final_val_loss) << algorithm;
    EXPECT_LT(la.back(), 0.8 * la.front()) << algorithm << ": learned too little to compare";
  }
}

// model.buffers. A module that keeps a running mean of its embeddings in a buffer (read before it
// is updated, so that a step's gradient sees the buffer as the last round left it): with the
// buffers averaged, DDP over two workers is one replica trained on both workers' batches together,
// buffer included; with each worker's own, it is not. The averaging's bytes are on the wire.
TEST_F(ScriptRunTest, AveragedBuffersMakeDdpOneReplicaOfBothBatches) {
  if (std::system("/usr/bin/python3 -c 'import torch' 2> /dev/null") != 0) {
    GTEST_SKIP() << "needs /usr/bin/python3 with torch (tools/setup installs python3-torch)";
  }
  const std::string module = (dir_ / "level.pt").string();
  std::ofstream(dir_ / "level.py") << "import torch\n"
                                      "class Level(torch.nn.Module):\n"
                                      "    def __init__(self):\n"
                                      "        super().__init__()\n"
                                      "        self.emb = torch.nn.Embedding(256, 32)\n"
                                      "        self.head = torch.nn.Linear(32, 256)\n"
                                      "        self.register_buffer('level', torch.zeros(32))\n"
                                      "    def forward(self, tokens: torch.Tensor) -> torch.Tensor:\n"
                                      "        x = self.emb(tokens)\n"
                                      "        out = self.head(x + self.level)\n"
                                      "        self.level.mul_(0.5).add_(x.detach().mean(dim=(0, 1)), alpha=0.5)\n"
                                      "        return out\n"
                                      "torch.manual_seed(0)\n"
                                      "torch.jit.script(Level()).save('" + module + "')\n";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (dir_ / "level.py").string()).c_str()), 0);
  const std::string common = "train: {steps: 12, batch_size: 4, lr: 1e-2, warmup_steps: 2}\nworkers: {count: 2}\n"
                             "compare: [ddp]\n";
  const auto averaged = MakeScript("{torchscript: " + module + ", seq_len: 16, buffers: averaged}", common);
  const auto local = MakeScript("{torchscript: " + module + ", seq_len: 16}", common);
  // The reference: one replica, both workers' batches together.
  auto data = LoadDataset(averaged, "");
  ASSERT_TRUE(data.ok());
  BatchSampler s0((*data)->corpus, (*data)->split.train, 16, averaged.seed, 0, 2, averaged.data.sampling);
  BatchSampler s1((*data)->corpus, (*data)->split.train, 16, averaged.seed, 1, 2, averaged.data.sampling);
  ConfigureThreads(averaged.threads);
  torch::manual_seed(averaged.seed);
  core::ModelSpec spec = averaged.model;
  spec.vocab_size = (*data)->vocab_size;
  Replica one(spec, averaged.train, torch::kCPU);
  for (int64_t s = 0; s < averaged.train.steps; ++s) {
    TokenBatch a = s0.Next(4), b = s1.Next(4);
    a.batch += b.batch;
    a.inputs.insert(a.inputs.end(), b.inputs.begin(), b.inputs.end());
    a.targets.insert(a.targets.end(), b.targets.begin(), b.targets.end());
    one.TrainStep(a, LearningRate(averaged.train, s));
  }
  const double reference = one.Evaluate((*data)->val_batches);
  const EntryResult avg = Run(averaged);
  const EntryResult own = Run(local);
  EXPECT_NEAR(avg.final_val_loss, reference, 1e-5);
  EXPECT_GT(std::abs(own.final_val_loss - reference), 1e-4) << "the buffer made no difference to compare";
  // Each step's all-reduce of the buffer (32 floats and a count) between two workers: a ring sends
  // half of it twice, each worker 33 x 4 bytes a step.
  EXPECT_EQ(avg.bytes_sent_per_worker - own.bytes_sent_per_worker, 12 * 33 * 4);
}

}  // namespace
}  // namespace narrows::trainer
