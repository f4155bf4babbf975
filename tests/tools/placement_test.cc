// Where a worker finds its rank, world and rendezvous (tools/cli/deploy_command.h): flags, then the
// launchers' variables — torchrun's, Slurm's, Open MPI's.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tools/cli/deploy_command.h"

namespace narrows::tools {
namespace {

TEST(PlacementTest, SlurmsNodeListGivesTheRendezvousWhereNoMasterIsSet) {
  WorkerOptions o;
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"},
                                            {"SLURM_STEP_NODELIST", "node7,node8"}, {"SLURM_JOB_NODELIST", "other"}};
  auto p = ResolvePlacement(o, env);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world, 4);
  EXPECT_EQ(p->master, "node7:29500");  // the step's first node, torchrun's default port
  env["MASTER_PORT"] = "31000";
  EXPECT_EQ(ResolvePlacement(o, env)->master, "node7:31000");
  env["MASTER_ADDR"] = "head";  // an address given wins
  EXPECT_EQ(ResolvePlacement(o, env)->master, "head:31000");
  env.erase("MASTER_ADDR");
  env.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(ResolvePlacement(o, env)->master, "other:31000");
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_NE(ResolvePlacement(o, env).status().message().find("or run under Slurm"), std::string::npos);
}

TEST(PlacementTest, ANodeRangeIsSlurmsToExpand) {
  EXPECT_EQ(*FirstSlurmHost("gpu3"), "gpu3");
  EXPECT_EQ(*FirstSlurmHost("gpu3,gpu4"), "gpu3");
  // A range needs scontrol and a cluster's configuration; without them the error says what to set.
  auto range = FirstSlurmHost("node[01-04]");
  if (!range.ok()) {
    EXPECT_NE(range.status().message().find("set MASTER_ADDR"), std::string::npos) << range.status().ToString();
  } else {
    EXPECT_EQ(*range, "node01");
  }
  EXPECT_FALSE(FirstSlurmHost("node['01-04]").ok());  // never handed to a shell
}

}  // namespace
}  // namespace narrows::tools
