// Hierarchical DiLoCo's inner steps (`inner: ddp` on a diloco or streaming-diloco entry): inside
// each island of network.islands the workers train as one data-parallel replica — every step each
// computes its batch's gradients, the island's ring all-reduce averages them (with the loss) on the
// island's own links, and every member applies the same AdamW step — while the outer step runs
// across islands as before, each island's members holding one pseudo-gradient between them (a
// hierarchical collective carries one island's sum over the WAN). Without islands the whole group
// is one island: DiLoCo's outer step over DDP.
//
// Membership changes at outer steps only: a leave or crash inside a round would leave its island's
// ring waiting (the entry's parser refuses such faults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/option_reader.h"
#include "core/scenario.h"
#include "trainer/algorithms/plan.h"
#include "trainer/worker.h"

namespace narrows::trainer {

enum class InnerMode { kLocal, kDdp };

// Reads an entry's `inner` key (local | ddp) and checks what `ddp` needs of the scenario: leaves and
// crashes at multiples of `round_steps`.
InnerMode ReadInnerMode(core::OptionReader& r, const core::Scenario& sc, int64_t round_steps);
// The prefix of an entry's default name: "" or "hierarchical-".
std::string InnerModePrefix(InnerMode mode);

// The members of `members` in this worker's island (all of them without islands).
std::vector<int> IslandOf(const core::Scenario& sc, const std::vector<int>& members, int rank);

// One inner step of `w` with `island` (this worker among them): the gradients of its batch averaged
// over the island (in `*scratch`, not the algorithm's buffer, which an outer step may still be
// sending), then the AdamW step every member takes alike. Returns the island's mean loss.
core::Result<double> IslandInnerStep(WorkerContext& w, std::vector<int>* island, int64_t step, int64_t rewarm_from,
                                     std::vector<float>* scratch);

// The planner: every step's island rings (all islands at once, the gradients and the loss) added to
// `*row`'s time and bytes, after each step's compute.
void AddIslandRings(const PlanInputs& in, PlanRow* row);

}  // namespace narrows::trainer
