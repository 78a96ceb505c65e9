// --what-if (simulator/what_if.h): a changed figure gives what editing the cluster file gives,
// rates derived from it move in proportion, and bad changes exit 2 naming the flag.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "simulator/simulate.h"
#include "simulator/what_if.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

// The built-in profile's network rates are proportional to the cluster's line rates, so a
// what-if of a line rate must give the profile of the edited cluster, and the same step.
TEST(WhatIf, ALineRateGivesWhatEditingTheClusterGives) {
  const Model m = LoadModel("gpt3-175b");
  const ParallelConfig c = testing::Gpt3_175bConfig();
  for (const char* name : {"dgx-a100", "dgx-h100", "dgx-b200"}) {
    const Cluster base = LoadCluster(name);
    for (const std::string change : {"nic_Gbps=x2", "nvlink_GBps=x0.5", "nics_per_node=x0.5"}) {
      Cluster cl = base;
      HardwareProfile p = DefaultProfile(base);
      ApplyWhatIf({ParseWhatIf(change)}, &cl, &p);
      Cluster edited = base;
      if (change.rfind("nic_Gbps", 0) == 0) edited.nic_Gbps *= 2;
      if (change.rfind("nvlink", 0) == 0) edited.intra_GBps_per_direction *= 0.5;
      if (change.rfind("nics_per_node", 0) == 0) edited.nics_per_node /= 2;
      const HardwareProfile want = DefaultProfile(edited);
      const std::string where = std::string(name) + " " + change;
      EXPECT_DOUBLE_EQ(p.nic_effective_GBps, want.nic_effective_GBps) << where;
      EXPECT_EQ(p.nics_per_node, want.nics_per_node) << where;
      EXPECT_DOUBLE_EQ(p.intra_busbw_GBps, want.intra_busbw_GBps) << where;
      EXPECT_DOUBLE_EQ(p.nvls_allreduce_busbw_GBps, want.nvls_allreduce_busbw_GBps) << where;
      EXPECT_DOUBLE_EQ(p.p2p_intra_GBps, want.p2p_intra_GBps) << where;
      EXPECT_EQ(cl.nic_Gbps, edited.nic_Gbps) << where;
      EXPECT_EQ(cl.intra_GBps_per_direction, edited.intra_GBps_per_direction) << where;
      const SimulationResult a = Simulate(m, c, cl, 1024, p);
      const SimulationResult b = Simulate(m, c, edited, 1024, want);
      EXPECT_EQ(a.step_time_s, b.step_time_s) << where;
      EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes) << where;
      EXPECT_FALSE(p.adjustments.empty()) << where;
    }
  }
}

// A NIC change drops the measured tables across nodes only; an NVLink change drops them all.
TEST(WhatIf, ALinkChangeDropsTheTablesThatTimeIt) {
  const Cluster base = LoadCluster("dgx-a100");
  HardwareProfile measured = DefaultProfile(base);
  CollectiveTable one_node, two_nodes;
  one_node.ranks = 8;
  two_nodes.ranks = 16;
  two_nodes.nodes = 2;
  measured.collective_tables = {one_node, two_nodes};
  Cluster cl = base;
  HardwareProfile p = measured;
  ApplyWhatIf({ParseWhatIf("nic_Gbps=x0.5")}, &cl, &p);
  ASSERT_EQ(p.collective_tables.size(), 1u);
  EXPECT_EQ(p.collective_tables[0].nodes, 1);
  EXPECT_NE(p.adjustments.back().find("tables across nodes dropped"), std::string::npos);
  cl = base;
  p = measured;
  ApplyWhatIf({ParseWhatIf("nvlink_GBps=x0.5")}, &cl, &p);
  EXPECT_TRUE(p.collective_tables.empty());
}

TEST(WhatIf, ComputeAndMemoryFiguresScaleOrReplace) {
  const Cluster base = LoadCluster("dgx-h100");
  Cluster cl = base;
  HardwareProfile p = DefaultProfile(base);
  const HardwareProfile before = p;
  ApplyWhatIf({ParseWhatIf("hbm_GBps=x1.5"), ParseWhatIf("gemm_tflops=2000"), ParseWhatIf("gemm_efficiency=x0.5"),
               ParseWhatIf("attention_efficiency=0.5"), ParseWhatIf("memory_GiB=141")},
              &cl, &p);
  EXPECT_DOUBLE_EQ(p.hbm_GBps, 1.5 * before.hbm_GBps);
  EXPECT_DOUBLE_EQ(p.gemm_peak_tflops, 2000);
  EXPECT_DOUBLE_EQ(p.gemm_max_efficiency, 0.5 * before.gemm_max_efficiency);
  ASSERT_EQ(p.gemm_rates.size(), before.gemm_rates.size());
  for (std::size_t i = 0; i < p.gemm_rates.size(); ++i) {
    // Every precision's peak moves with the base one, and its efficiency with the base one.
    EXPECT_DOUBLE_EQ(p.gemm_rates[i].peak_tflops, before.gemm_rates[i].peak_tflops * 2000 / before.gemm_peak_tflops);
    EXPECT_DOUBLE_EQ(p.gemm_rates[i].max_efficiency, 0.5 * before.gemm_rates[i].max_efficiency);
  }
  EXPECT_EQ(p.attention_fwd_efficiency, 0.5);
  EXPECT_EQ(p.attention_bwd_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(cl.gpu.memory_bytes, 141.0 * 1073741824.0);
  EXPECT_EQ(p.adjustments.size(), before.adjustments.size() + 5);
  // Unchanged hardware gives the same step to the bit; faster HBM never a slower one.
  const Model m = LoadModel("llama3-8b");
  ParallelConfig c;
  c.tp = 8;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 8;
  ApplyMegatronCoreDefaults(&c);
  Cluster same = base;
  HardwareProfile unchanged = DefaultProfile(base);
  ApplyWhatIf({ParseWhatIf("hbm_GBps=x1")}, &same, &unchanged);
  EXPECT_EQ(Simulate(m, c, same, 8, unchanged).step_time_s, Simulate(m, c, base, 8, DefaultProfile(base)).step_time_s);
  Cluster faster_cl = base;
  HardwareProfile faster = DefaultProfile(base);
  ApplyWhatIf({ParseWhatIf("hbm_GBps=x2")}, &faster_cl, &faster);
  EXPECT_LT(Simulate(m, c, faster_cl, 8, faster).step_time_s, Simulate(m, c, base, 8, DefaultProfile(base)).step_time_s);
}

TEST(WhatIf, BadChangesAreInputErrors) {
  for (const char* bad : {"nic_Gbps", "nic_Gbps=", "nic_Gbps=-1", "nic_Gbps=x", "nic_Gbps=0", "nic_Gbps=inf",
                          "nic_Gbps=4o0", "nic=800", "=800"}) {
    EXPECT_THROW(ParseWhatIf(bad), InputError) << bad;
  }
  Cluster cl = LoadCluster("dgx-h100");
  HardwareProfile p = DefaultProfile(cl);
  EXPECT_THROW(ApplyWhatIf({ParseWhatIf("gemm_efficiency=x3")}, &cl, &p), InputError);
  EXPECT_THROW(ApplyWhatIf({ParseWhatIf("nics_per_node=x0.3")}, &cl, &p), InputError);
  const auto r = testing::RunShardcast("simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --gbs 8 --what-if nic=800");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--what-if: got \"nic=800\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nic_Gbps, nics_per_node, nvlink_GBps"), std::string::npos) << r.err;
}

// The JSON's baseline is the plain simulation, and the change is the ratio of the two steps.
TEST(WhatIf, SimulateAndPlanReportTheBaselineBesideTheChange) {
  const std::string flags = "--model gpt3-13b --cluster dgx-a100 --gpus 64 --tp 2 --pp 4 --mbs 2 --gbs 256 --json";
  const auto plain = testing::RunShardcast("simulate " + flags);
  const auto changed = testing::RunShardcast("simulate " + flags + " --what-if nic_Gbps=x0.25 --what-if hbm_GBps=x1.5");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  const Json p = Json::parse(plain.out), c = Json::parse(changed.out);
  EXPECT_EQ(c["step_time_s"], p["step_time_s"]);
  const Json& w = c["what_if"];
  EXPECT_EQ(w["baseline"]["step_time_s"], p["step_time_s"]);
  EXPECT_EQ(w["what_if"]["step_time_s"], w["result"]["step_time_s"]);
  EXPECT_DOUBLE_EQ(w["step_time_change"].get<double>(),
                   w["what_if"]["step_time_s"].get<double>() / p["step_time_s"].get<double>() - 1);
  EXPECT_EQ(w["changes"].size(), 2u);
  // The headline carries whether the fit needs the allocator to release its cache, as the result does.
  EXPECT_EQ(w["what_if"]["memory_at_risk"], w["result"]["memory_at_risk"]);
  EXPECT_EQ(w["baseline"]["memory_at_risk"], p["memory_at_risk"]);
  const auto plan = testing::RunShardcast("plan --model gpt3-1.3b --cluster dgx-a100 --gpus 16 --gbs 64 --json "
                                          "--what-if memory_GiB=x0.5");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const Json j = Json::parse(plan.out);
  EXPECT_EQ(j["what_if"]["baseline"]["step_time_s"], j["recommended"]["step_time_s"]);
  EXPECT_LE(j["what_if"]["recommended"]["peak_memory_bytes"].get<double>(), 40.0 * 1073741824.0);
}

}  // namespace
}  // namespace shardcast
