// The registry of algorithms: one line each (the scenario's `algorithm:` kind, its name, its maker).
#include "trainer/algorithms/algorithm.h"

namespace narrows::trainer {

std::unique_ptr<Algorithm> MakeDdp(WorkerContext& w);     // ddp.cc
std::unique_ptr<Algorithm> MakeDiloco(WorkerContext& w);  // diloco.cc
std::unique_ptr<Algorithm> MakeStreamingDiloco(WorkerContext& w);  // streaming_diloco.cc
std::unique_ptr<Algorithm> MakeAsyncDiloco(WorkerContext& w);      // async_diloco.cc
std::unique_ptr<Algorithm> MakeDipaco(WorkerContext& w);           // dipaco.cc

namespace {

struct Registered {
  core::AlgorithmKind kind;
  const char* name;
  std::unique_ptr<Algorithm> (*make)(WorkerContext&);
};

constexpr Registered kAlgorithms[] = {
    {core::AlgorithmKind::kDdp, "ddp", MakeDdp},
    {core::AlgorithmKind::kDiloco, "diloco", MakeDiloco},
    {core::AlgorithmKind::kStreamingDiloco, "streaming-diloco", MakeStreamingDiloco},
    {core::AlgorithmKind::kAsyncDiloco, "async-diloco", MakeAsyncDiloco},
    {core::AlgorithmKind::kDipaco, "dipaco", MakeDipaco},
};

const Registered& Find(core::AlgorithmKind kind) {
  for (const auto& a : kAlgorithms) {
    if (a.kind == kind) return a;
  }
  NARROWS_CHECK(false) << "algorithm kind " << static_cast<int>(kind) << " is not registered";
  return kAlgorithms[0];
}

}  // namespace

std::unique_ptr<Algorithm> MakeAlgorithm(WorkerContext& w) { return Find(w.x.algo.kind).make(w); }
std::string AlgorithmName(core::AlgorithmKind kind) { return Find(kind).name; }

}  // namespace narrows::trainer
