// core/all_gather.h: every member's block lands in its rank's slot on every member, over the
// emulator, and a rank outside the group keeps its slot as it was.
#include "core/all_gather.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "emu/engine.h"
#include "sim/analytic_model.h"

namespace narrows::core {
namespace {

TEST(AllGatherTest, EveryMembersBlockLandsInItsRanksSlot) {
  emu::Engine engine(4, std::make_unique<sim::AnalyticModel>(sim::Topology::Star(sim::UniformLinks(4, 1e9, 0.001))));
  std::vector<std::vector<float>> slots(4, std::vector<float>(8, -1.0f));
  engine.Run([&](int rank) {
    if (rank == 3) return;  // not a member
    float* mine = slots[static_cast<size_t>(rank)].data();
    mine[2 * rank] = static_cast<float>(10 * rank);
    mine[2 * rank + 1] = static_cast<float>(10 * rank + 1);
    EXPECT_TRUE(AllGatherBlocks(engine.endpoint(rank), mine, 2, {0, 1, 2}, 7).ok());
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(slots[static_cast<size_t>(r)], (std::vector<float>{0, 1, 10, 11, 20, 21, -1, -1})) << r;
  }
  EXPECT_EQ(engine.endpoint(0).stats().bytes_sent, AllGatherBytesPerRank(2, 3));
  EXPECT_EQ(AllGatherBytesPerRank(2, 3), 16);
}

}  // namespace
}  // namespace narrows::core
