// What a deployment refuses before any process trains: the scenario keys real processes cannot
// honour. Shared by `narrows worker` and `narrows launch` (tools/cli/deploy_command.h), so that
// both refuse alike; HonouredByRealProcesses, declared there, is defined beside these.
#pragma once

#include <cstddef>

#include "core/scenario.h"
#include "core/status.h"

namespace narrows::tools {

// A deployment runs one seed; a scenario with several is refused (InvalidArgument) rather than run
// in part.
core::Status OneSeed(const core::Scenario& sc);

// A crash fault ends its worker's process; nothing starts it again but a restart (--rejoin,
// --chaos, torchrun's agent), so the entries after the one it happens in would run without that
// worker, compared as equals with those before. Refused (InvalidArgument) where `entries` > 1 and
// no restart can come.
core::Status CrashesSpareLaterEntries(const core::Scenario& sc, size_t entries, bool restarts_possible);

}  // namespace narrows::tools
