// Warm starts: the checkpoint every entry of a comparison starts from (scenario `warm_start:`).
//
// PrepareWarmStart returns the model file to start from: the scenario's `warm_start.checkpoint`, or
// for `warm_start.steps` a file in `cache_dir` named by a hash of what determines the pre-trained
// weights (model, data, seed, training settings, steps) — written by pre-training one replica the
// first time, reused after. Pre-training draws its batches with its own seed, so the entries'
// workers do not see its data order again. Deterministic on CPU. Blocks. Torch-free header.
#pragma once

#include <cstdio>
#include <string>

#include "core/scenario.h"
#include "core/status.h"
#include "trainer/dataset.h"

namespace narrows::trainer {

core::Result<std::string> PrepareWarmStart(const core::Scenario& sc, const Dataset& data, const std::string& cache_dir,
                                           std::FILE* progress);


}  // namespace narrows::trainer
