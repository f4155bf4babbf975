// The build of narrows that is running: `git describe --always --dirty` of its sources at build
// time, with a hash of the uncommitted changes after "-dirty" ("unknown" outside a git checkout). Every summary.json records it, and a result folder made
// by another build is not reused as this one's (tools/cli/run_folders.h).
#pragma once

namespace narrows::tools {

const char* BuildVersion();

}  // namespace narrows::tools
