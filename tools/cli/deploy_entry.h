// One entry of a deployment across its worker processes (`narrows worker`): the ranks start it
// together, train it, and rank 0 gathers every rank's records and writes them.
//
// Both calls block on messages between the ranks (tags core::tags::kDeployStart ... kDeployAck,
// above every tag an experiment makes), and every live rank must make them in the same order.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "core/status.h"
#include "deploy/zmq_transport.h"
#include "trainer/experiment.h"

namespace narrows::tools {

// Every entry starts together: rank 0 says when (the entry's index in the run's list).
core::Status StartTogether(deploy::ZmqTransport& t, size_t entry);

// One entry on this rank. Rank 0 gathers every part, writes the entry's records to `entry_dir` and
// returns its line of summary.json; the other ranks return null once rank 0 acknowledges.
core::Result<nlohmann::json> RunEntry(trainer::Experiment& e, deploy::ZmqTransport& t, const std::string& entry_dir,
                                      core::Progress& progress);

}  // namespace narrows::tools
