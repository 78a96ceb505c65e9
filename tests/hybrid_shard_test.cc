// Issue 19: hybrid sharding (HSDP; ParallelConfig::dp_shard). The ZeRO state is sharded over
// groups of dp_shard adjacent data-parallel ranks and replicated across the groups: PyTorch
// FSDP's HYBRID_SHARD, FSDP2 over a (replicate, shard) mesh, Megatron-Core's
// --num-distributed-optimizer-instances. Expected numbers are derived here from the state
// bytes per parameter and from CollectiveCostOf, the collectives' alpha-beta model.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "models/loader.h"
#include "models/parallel.h"
#include "planner/planner.h"
#include "simulator/cost_model.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

ParallelConfig Zero3(std::int64_t dp, std::int64_t shard) {
  ParallelConfig c;
  c.tp = 1;
  c.pp = 1;
  c.dp = dp;
  c.micro_batch_size = 1;
  c.global_batch_size = 2 * dp;
  c.zero_stage = 3;
  c.dp_shard = shard;
  return c;
}

// Weights, gradients and optimizer state are divided by the group's size, not by all the ranks:
// with fp32 gradients, 2 + 4 + 12 bytes per parameter over dp_shard (ZeRO-3), and the replicas
// make dp_cp / dp_shard copies.
TEST(HybridShard, StateIsShardedOverTheGroup) {
  const ParallelConfig c = Zero3(64, 8);
  EXPECT_TRUE(c.hybrid_shard());
  EXPECT_EQ(c.shard_dp(), 8);
  EXPECT_EQ(c.dp_replicas(), 8);
  const StateBytesPerParam b = BytesPerParam(c);
  EXPECT_DOUBLE_EQ(b.weights, 2.0 / 8);
  EXPECT_DOUBLE_EQ(b.grads, 4.0 / 8);
  EXPECT_DOUBLE_EQ(b.optimizer, 12.0 / 8);
  const StateBytesPerParam full = BytesPerParam(Zero3(64, 0));
  EXPECT_DOUBLE_EQ(full.weights, 2.0 / 64);
  // dp_shard equal to every rank is plain sharding.
  EXPECT_FALSE(Zero3(64, 64).hybrid_shard());
  EXPECT_EQ(Zero3(64, 64).dp_replicas(), 1);

  // The simulated stage holds the same state: the dense weights times 2/8 bytes.
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const SimulationResult hs = Simulate(m, c, cl, 64, prof), fs = Simulate(m, Zero3(64, 0), cl, 64, prof);
  ASSERT_TRUE(hs.feasible) << (hs.reasons.empty() ? "" : hs.reasons.front());
  const double params = static_cast<double>(m.Parameters().total);
  EXPECT_NEAR(hs.stages[0].memory.weights_bytes, params * 2.0 / 8, 1e-6 * params);
  EXPECT_NEAR(hs.stages[0].memory.weights_bytes / fs.stages[0].memory.weights_bytes, 64.0 / 8, 1e-9);
  EXPECT_NEAR(hs.stages[0].memory.optimizer_bytes / fs.stages[0].memory.optimizer_bytes, 64.0 / 8, 1e-9);
}

// Gathers run within the group; a gradient reduce-scatter within it is followed by the
// all-reduce of its 1/dp_shard shard across the groups, one after the other; an all-reduce
// (ZeRO-0) is never hybrid. Groups are adjacent ranks: a node's 8 GPUs at tp 1.
TEST(HybridShard, ReduceScattersInTheGroupThenAllReducesTheShardAcrossGroups) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const CostModel cm = BuildCostModel(m, Zero3(64, 8), cl, prof);
  ASSERT_TRUE(cm.hybrid_shard);
  EXPECT_EQ(cm.shard_group.ranks, 8);
  EXPECT_EQ(cm.shard_group.ranks_per_node, 8);
  EXPECT_EQ(cm.replica_group.ranks, 8);
  EXPECT_EQ(cm.replica_group.ranks_per_node, 1);
  const double size = 1e9;
  const CollectiveCost rs = CollectiveCostOf(prof, CollectiveOp::kReduceScatter, size, cm.shard_group);
  const CollectiveCost ar = CollectiveCostOf(prof, CollectiveOp::kAllReduce, size / 8, cm.replica_group);
  EXPECT_NEAR(DataParallelCostOf(prof, cm, CollectiveOp::kReduceScatter, size).time_s(), rs.time_s() + ar.time_s(),
              1e-12);
  EXPECT_DOUBLE_EQ(DataParallelCostOf(prof, cm, CollectiveOp::kAllGather, size).time_s(),
                   CollectiveCostOf(prof, CollectiveOp::kAllGather, size, cm.shard_group).time_s());
  EXPECT_DOUBLE_EQ(DataParallelCostOf(prof, cm, CollectiveOp::kAllReduce, size).time_s(),
                   CollectiveCostOf(prof, CollectiveOp::kAllReduce, size, cm.dp_group).time_s());
  // Inside one node, the gather leaves the network alone.
  EXPECT_EQ(DataParallelCostOf(prof, cm, CollectiveOp::kAllGather, size).link, LinkKind::kIntraNode);
  // Without hybrid sharding the group is all 64 ranks over 8 nodes.
  const CostModel flat = BuildCostModel(m, Zero3(64, 0), cl, prof);
  EXPECT_FALSE(flat.hybrid_shard);
  EXPECT_DOUBLE_EQ(DataParallelCostOf(prof, flat, CollectiveOp::kAllGather, size).time_s(),
                   CollectiveCostOf(prof, CollectiveOp::kAllGather, size, flat.dp_group).time_s());
  // At tp 4 a node holds 2 ranks of a group of 4: the replicas stay one per node.
  ParallelConfig t4 = Zero3(16, 4);
  t4.tp = 4;
  const CostModel cm4 = BuildCostModel(m, t4, cl, prof);
  EXPECT_EQ(cm4.shard_group.ranks_per_node, 2);
  EXPECT_EQ(cm4.replica_group.ranks, 4);
  EXPECT_EQ(cm4.replica_group.ranks_per_node, 1);
}

// Serial collectives: one flow at the slower one's link carrying both transfer times.
TEST(HybridShard, SerialCollectivesAddTheirTimes) {
  CollectiveCost a, b;
  a.latency_s = 1e-5;
  a.bytes_on_link = 4e9;
  a.link_GBps = 200;
  a.link = LinkKind::kIntraNode;
  b.latency_s = 2e-5;
  b.bytes_on_link = 1e9;
  b.link_GBps = 25;
  b.link = LinkKind::kNetwork;
  const CollectiveCost s = SerialCollectives(a, b);
  EXPECT_NEAR(s.time_s(), a.time_s() + b.time_s(), 1e-12);
  EXPECT_EQ(s.link, LinkKind::kNetwork);  // 40 ms on the network against 20 ms on NVLink
}

TEST(HybridShard, RulesNameWhatCannotRun) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  auto rules = [&](const ParallelConfig& c) {
    std::string all;
    for (const auto& x : HybridShardRules(c)) all += x.rule + ";";
    return all;
  };
  EXPECT_EQ(rules(Zero3(64, 8)), "");
  EXPECT_EQ(rules(Zero3(64, 0)), "");
  EXPECT_EQ(rules(Zero3(64, 6)), "dp_shard does not divide dp*cp;");
  ParallelConfig z0 = Zero3(64, 8);
  z0.zero_stage = 0;
  EXPECT_EQ(rules(z0), "hybrid sharding needs ZeRO >= 1;");
  ParallelConfig ds = Zero3(64, 8);
  ds.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  EXPECT_EQ(rules(ds), "hybrid sharding with DeepSpeed;");
  // Simulate reports a broken rule as a reason, not a crash.
  const SimulationResult r = Simulate(m, Zero3(64, 6), cl, 64, DefaultProfile(cl));
  EXPECT_FALSE(r.feasible);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons.front().find("dp_shard = 6 does not divide the 64 data-parallel ranks"), std::string::npos)
      << r.reasons.front();
}

// The search tries one node's data-parallel ranks as the group beside full sharding for ZeRO-2/3,
// never for ZeRO-0/1 unless fixed, and a fixed dp_shard alone.
// ZeRO-3 under a pipeline is refused with its reason, and the FSDP2 refusal names what PyTorch's
// pipeline schedules run instead (kFsdp2PipelineEquivalent), which simulates.
TEST(HybridShard, Zero3WithAPipelineNamesFsdp2sEquivalent) {
  const auto refused = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 64 --pp 4 --zero 3");
  EXPECT_NE(refused.out.find(std::string("PyTorch FSDP2 with pipeline parallelism (torchtitan, NeMo Automodel) runs as ") +
                             kFsdp2PipelineEquivalent),
            std::string::npos)
      << refused.out;
  const auto ds = testing::RunShardcast(
      "simulate --model llama3-8b --cluster dgx-h100 --gpus 64 --pp 4 --zero 3 --zero3-impl deepspeed");
  EXPECT_NE(ds.out.find("do not support with pipeline parallelism (pp = 4)"), std::string::npos) << ds.out;
  EXPECT_EQ(ds.out.find("FSDP2"), std::string::npos) << ds.out;
  const auto ok = testing::RunShardcast(
      "simulate --model llama3-8b --cluster dgx-h100 --gpus 64 --pp 4 --zero 1 --no-overlap-grad-reduce --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(ok.out)["feasible"].get<bool>());
}

TEST(HybridShard, PlanSearchesANodeSizedGroupForZero2And3) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 256;
  o.zero_stages = {1, 3};
  o.fixed = {{"pp", "1"}};
  std::map<std::string, std::size_t> unused;
  std::map<std::pair<std::int64_t, int>, std::set<std::int64_t>> shards;  // (tp, zero) -> dp_shard values
  for (const ParallelConfig& c : GenerateCandidates(m, cl, o, &unused)) shards[{c.tp, c.zero_stage}].insert(c.dp_shard);
  EXPECT_EQ(shards[std::make_pair(std::int64_t{1}, 3)], (std::set<std::int64_t>{0, 8}));
  EXPECT_EQ(shards[std::make_pair(std::int64_t{2}, 3)], (std::set<std::int64_t>{0, 4}));
  EXPECT_EQ(shards[std::make_pair(std::int64_t{8}, 3)], (std::set<std::int64_t>{0}));  // one rank per node
  EXPECT_EQ(shards[std::make_pair(std::int64_t{1}, 1)], (std::set<std::int64_t>{0}));
  o.fixed = {{"pp", "1"}, {"tp", "1"}, {"dp_shard", "16"}};
  for (const ParallelConfig& c : GenerateCandidates(m, cl, o, &unused)) {
    EXPECT_EQ(c.dp_shard, c.dp_cp() == 16 ? 0 : 16) << c.Summary();
    EXPECT_GE(c.zero_stage, 1);
  }
  const PlanResult r = RunPlan(m, cl, DefaultProfile(cl), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Plan& p : r.plans) EXPECT_EQ(p.config.shard_dp(), 16) << p.config.Summary();
  // A fixed group that divides no dp x cp is counted under "Not generated", not dropped silently.
  o.fixed = {{"pp", "1"}, {"tp", "1"}, {"cp", "1"}, {"dp_shard", "6"}};
  std::map<std::string, std::size_t> rejected;
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &rejected).empty());
  EXPECT_GT(rejected["(dp, ZeRO) choices: the fixed dp_shard does not divide dp*cp, or ZeRO-0 shards nothing"], 0u);
}

TEST(HybridShard, CommandLine) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-a100 --gpus 64 --tp 1 --mbs 1 --gbs 128 ";
  const auto by_shard = testing::RunShardcast(base + "--zero 3 --dp-shard 16 --json");
  const auto by_instances = testing::RunShardcast(base + "--zero 3 --num-distributed-optimizer-instances 4 --json");
  ASSERT_EQ(by_shard.exit_code, 0) << by_shard.err;
  ASSERT_EQ(by_instances.exit_code, 0) << by_instances.err;
  const auto a = nlohmann::json::parse(by_shard.out), b = nlohmann::json::parse(by_instances.out);
  EXPECT_EQ(a["config"]["dp_shard"], 16);
  EXPECT_EQ(a["config"], b["config"]);
  EXPECT_EQ(a["step_time_s"], b["step_time_s"]);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 3 --dp-shard 6", "--dp-shard: dp_shard = 6 does not divide the 64"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 0 --dp-shard 8", "but ZeRO-0 shards nothing"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 1 --num-distributed-optimizer-instances 3",
                                    "expected a divisor of the 64 data-parallel ranks"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 3 --dp-shard 8 --num-distributed-optimizer-instances 8",
                                    "both given, expected one"));
  // The summary and the command that reproduces it carry the group.
  const auto text = testing::RunShardcast(base + "--zero 3 --dp-shard 16");
  EXPECT_NE(text.out.find("HSDP(shard 16 x 4)"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace shardcast
