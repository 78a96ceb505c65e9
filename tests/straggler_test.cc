// One slow GPU (simulator/straggler.h, `simulate --straggler`): the slow stage's compute takes
// FACTOR times as long, collectives keep their times, the step grows by no more than the added
// work and no less than the slow stage's own busy time, and the worst stage is the one reported.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "models/loader.h"
#include "simulator/simulate.h"
#include "simulator/straggler.h"
#include "simulator/what_if.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

ParallelConfig Config(std::int64_t tp, std::int64_t pp, std::int64_t gbs) {
  ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = gbs;
  c.sequence_parallel = tp > 1;
  c.recompute = Recompute::kSelective;
  ApplyMegatronCoreDefaults(&c);
  return c;
}

// What a straggler scales: compute, recompute and the optimizer step. (recompute_s also holds
// the recomputed forward's collectives: these tests use selective recompute, which reruns the
// attention core alone, without collectives.)
double Work(const StageBreakdown& t) { return t.compute_s + t.recompute_s + t.optimizer_s; }

// Without parallelism the step is all the GPU's own work: FACTOR times as long, to the
// engine's nanosecond rounding per task.
TEST(Straggler, OneGpuAloneTakesFactorTimesAsLong) {
  const Model m = LoadModel("gpt3-350m");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile p = DefaultProfile(cl);
  const ParallelConfig c = Config(1, 1, 4);
  const SimulationResult base = Simulate(m, c, cl, 1, p);
  ASSERT_TRUE(base.feasible);
  SimulateOptions o;
  o.straggler_stage = 0;
  o.straggler_slowdown = 1.25;
  const SimulationResult slow = Simulate(m, c, cl, 1, p, o);
  ASSERT_TRUE(slow.feasible);
  const double tolerance = 1e-9 * static_cast<double>(base.num_tasks + slow.num_tasks);
  EXPECT_NEAR(slow.step_time_s, 1.25 * base.step_time_s, 1.25 * tolerance);
  EXPECT_EQ(slow.peak_memory_bytes, base.peak_memory_bytes);  // timing only
  // Slowdown 1 is the baseline to the bit.
  o.straggler_slowdown = 1;
  EXPECT_EQ(Simulate(m, c, cl, 1, p, o).step_time_s, base.step_time_s);
}

// Tensor parallelism on one node: the stage's compute, recompute and optimizer scale, the
// tensor-parallel collectives (which wait for the slow GPU, then run at NVLink's rate) do not.
TEST(Straggler, TensorParallelCollectivesKeepTheirTime) {
  const Model m = LoadModel("gpt3-6.7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile p = DefaultProfile(cl);
  const ParallelConfig c = Config(8, 1, 8);
  const SimulationResult base = Simulate(m, c, cl, 8, p);
  SimulateOptions o;
  o.straggler_stage = 0;
  o.straggler_slowdown = 1.5;
  const SimulationResult slow = Simulate(m, c, cl, 8, p, o);
  ASSERT_TRUE(base.feasible && slow.feasible);
  const StageBreakdown& a = base.stages[0].time;
  const StageBreakdown& b = slow.stages[0].time;
  ASSERT_GT(a.tp_comm_s, 0);
  const double tolerance = 1e-9 * static_cast<double>(base.num_tasks);
  EXPECT_NEAR(Work(b), 1.5 * Work(a), 2 * tolerance);
  EXPECT_NEAR(b.tp_comm_s, a.tp_comm_s, 2 * tolerance);
  EXPECT_NEAR(slow.step_time_s - base.step_time_s, 0.5 * Work(a), 2 * tolerance);
}

// A pipeline with communication free (a DAG of the stages' passes): the step grows by at most
// the work added to the slow stage (the longest path gains at most what its tasks gain) and
// lasts at least the slow stage's own busy time; the other stages' work is unchanged and they
// wait longer. The sweep reports the stage that lengthens the step most.
TEST(Straggler, ThePipelineRunsAtTheSlowStagesPace) {
  const Model m = LoadModel("gpt3-13b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile p = DefaultProfile(cl);
  const ParallelConfig c = Config(2, 4, 32);
  SimulateOptions o;
  o.free_communication = true;
  const SimulationResult base = Simulate(m, c, cl, 8, p, o);
  ASSERT_TRUE(base.feasible);
  const double f = 1.2;
  const StragglerRun run = SimulateStraggler(m, c, cl, 8, p, o, f, 1, -1);
  ASSERT_EQ(run.step_time_by_stage_s.size(), 4u);
  EXPECT_FALSE(run.stage_given);
  const double tolerance = 1e-9 * static_cast<double>(base.num_tasks);
  double worst = 0;
  for (int s = 0; s < 4; ++s) {
    SimulateOptions so = o;
    so.straggler_stage = s;
    so.straggler_slowdown = f;
    const SimulationResult r = Simulate(m, c, cl, 8, p, so);
    EXPECT_EQ(r.step_time_s, run.step_time_by_stage_s[static_cast<std::size_t>(s)]) << s;
    const double added = (f - 1) * Work(base.stages[static_cast<std::size_t>(s)].time);
    EXPECT_GE(r.step_time_s, base.step_time_s - tolerance) << s;
    EXPECT_LE(r.step_time_s, base.step_time_s + added + tolerance) << s;
    EXPECT_GE(r.step_time_s, Work(r.stages[static_cast<std::size_t>(s)].time) - tolerance) << s;
    EXPECT_NEAR(Work(r.stages[static_cast<std::size_t>(s)].time), f * Work(base.stages[static_cast<std::size_t>(s)].time),
                2 * tolerance)
        << s;
    for (int other = 0; other < 4; ++other) {
      if (other == s) continue;
      const auto& bt = base.stages[static_cast<std::size_t>(other)].time;
      const auto& rt = r.stages[static_cast<std::size_t>(other)].time;
      EXPECT_NEAR(Work(rt), Work(bt), 2 * tolerance) << s << " " << other;
    }
    worst = std::max(worst, r.step_time_s);
  }
  EXPECT_GT(worst, base.step_time_s * (1 + (f - 1) / 2));  // the bottleneck stage slowed: most of f shows
  EXPECT_EQ(run.result.step_time_s, worst);
  EXPECT_EQ(run.step_time_by_stage_s[static_cast<std::size_t>(run.stage)], worst);
  // A given stage is simulated alone.
  const StragglerRun given = SimulateStraggler(m, c, cl, 8, p, o, f, 1, 2);
  EXPECT_TRUE(given.stage_given);
  EXPECT_EQ(given.stage, 2);
  EXPECT_TRUE(given.step_time_by_stage_s.empty());
  EXPECT_EQ(given.result.step_time_s, run.step_time_by_stage_s[2]);
}

// A slow node's NICs: with one pipeline stage every data-parallel ring runs through it, so the
// step is the one --what-if nic_Gbps=x(1/F) gives the whole cluster; with three stages on a node
// each, a slow node of stage 0 slows only the transfers at its boundary: between the baseline and
// the whole cluster's slow links.
TEST(Straggler, ASlowNodesLinksSlowItsStagesTraffic) {
  const Model m = LoadModel("gpt3-6.7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile p = DefaultProfile(cl);
  auto what_if = [&](const Model& mm, const ParallelConfig& c, std::int64_t gpus) {
    Cluster wcl = cl;
    HardwareProfile wp = p;
    ApplyWhatIf({ParseWhatIf("nic_Gbps=x0.25")}, &wcl, &wp);
    return Simulate(mm, c, wcl, gpus, wp);
  };
  SimulateOptions o;
  o.straggler_stage = 0;
  o.straggler_nic_slowdown = 4;
  ParallelConfig dp = Config(8, 1, 64);
  dp.dp = 4;
  dp.zero_stage = 1;
  dp.overlap_grad_reduce = false;  // the reduction exposed after the backward
  const SimulationResult base = Simulate(m, dp, cl, 32, p);
  const SimulationResult slow = Simulate(m, dp, cl, 32, p, o);
  const SimulationResult all = what_if(m, dp, 32);
  ASSERT_TRUE(base.feasible && slow.feasible && all.feasible);
  EXPECT_GT(slow.stages[0].time.dp_comm_s, 2 * base.stages[0].time.dp_comm_s);
  EXPECT_NEAR(slow.step_time_s, all.step_time_s, 1e-9 * all.step_time_s);
  EXPECT_EQ(slow.stages[0].time.compute_s, base.stages[0].time.compute_s);  // kernels at speed
  ParallelConfig pp = Config(8, 3, 24);
  pp.pp = 3;
  Model m3 = m;
  m3.num_layers = 33;
  const SimulationResult base3 = Simulate(m3, pp, cl, 24, p);
  const SimulationResult slow3 = Simulate(m3, pp, cl, 24, p, o);
  const SimulationResult all3 = what_if(m3, pp, 24);
  ASSERT_TRUE(base3.feasible && slow3.feasible && all3.feasible);
  EXPECT_GT(slow3.step_time_s, base3.step_time_s);
  EXPECT_LT(slow3.step_time_s, all3.step_time_s);
  // Two stages, interleaved: every transfer, the chunks' wrap from the last stage to the first
  // included, touches the slow node of stage 0, and so does the tied-embedding all-reduce. Each
  // runs at the slow rate; the engine shares a sender's link, not a receiver's, so stage 1's two
  // send streams into the slow node are not made to share its rate: at most the whole cluster's
  // slow links' step, and within 0.1% of it.
  ParallelConfig il = Config(8, 2, 16);
  il.vp = 2;
  il.schedule = Schedule::kInterleaved;
  ApplyMegatronCoreDefaults(&il);
  const SimulationResult il_base = Simulate(m, il, cl, 16, p);
  const SimulationResult il_slow = Simulate(m, il, cl, 16, p, o);
  const SimulationResult il_all = what_if(m, il, 16);
  ASSERT_TRUE(il_base.feasible && il_slow.feasible && il_all.feasible);
  EXPECT_GT(il_slow.step_time_s, il_base.step_time_s);
  EXPECT_LE(il_slow.step_time_s, il_all.step_time_s + 1e-9);
  EXPECT_NEAR(il_slow.step_time_s, il_all.step_time_s, 1e-3 * il_all.step_time_s);
  // What the run leaves out is said: one node, expert-parallel groups across nodes.
  EXPECT_EQ(SimulateStraggler(m, Config(8, 1, 8), cl, 8, p, SimulateOptions{}, 1, 4, 0).notes.at(0),
            "the job runs on one node: no traffic crosses its network links, so the slow links change nothing");
  const Model moe = LoadModel("mixtral-8x7b");
  ParallelConfig ep = Config(2, 1, 256);
  ep.dp = 16;
  ep.ep = 8;
  ep.seq_length = 4096;
  ep.zero_stage = 1;
  const StragglerRun ep_run = SimulateStraggler(moe, ep, LoadCluster("dgx-h100"), 32,
                                                DefaultProfile(LoadCluster("dgx-h100")), SimulateOptions{}, 1, 4, 0);
  ASSERT_EQ(ep_run.notes.size(), 1u);
  EXPECT_NE(ep_run.notes[0].find("the expert-parallel groups span nodes"), std::string::npos);
  // Through the sweep and the command line.
  const StragglerRun run = SimulateStraggler(m3, pp, cl, 24, p, SimulateOptions{}, 1, 4, -1);
  ASSERT_EQ(run.step_time_by_stage_s.size(), 3u);
  EXPECT_EQ(run.nic_slowdown, 4);
  EXPECT_EQ(run.step_time_by_stage_s[0], slow3.step_time_s);
  EXPECT_GE(run.result.step_time_s, slow3.step_time_s);
  const testing::RunResult text = testing::RunShardcast(
      "simulate --model gpt3-6.7b --cluster dgx-a100 --gpus 32 --tp 8 --dp 4 --mbs 1 --gbs 64 --zero 1 "
      "--sequence-parallel --recompute selective --no-overlap-grad-reduce --straggler-nic 4");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("With a straggler on stage 0: one node's network links 4x slower"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("stage 0 waiting on data-parallel collectives"), std::string::npos);
  // Both at once: the slower links lengthen the gradient reduction overlapped with the slowed
  // compute, so that part grows rather than staying fixed; said as what it added, never as a
  // negative fixed part.
  const testing::RunResult both = testing::RunShardcast(
      "simulate --model gpt3-6.7b --cluster dgx-a100 --gpus 32 --tp 2 --gbs 64 --zero 1 --straggler 1.2 --straggler-nic 4");
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.out.find("more of slowdown by collectives overlapped with it, which grew)"), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("but for -"), std::string::npos) << both.out;
  EXPECT_TRUE(testing::ExitsTwoWith(
      "simulate --model gpt3-6.7b --cluster dgx-a100 --gpus 32 --tp 8 --gbs 64 --straggler-nic 0.5",
      "--straggler-nic: got \"0.5\", expected a number from 1 to 100"));
}

TEST(Straggler, BadValuesAreRefused) {
  EXPECT_NE(testing::InputErrorOf([] { RequireStraggler(0.9, std::nullopt, 4, "command line: --straggler"); })
                .find("command line: --straggler: 0.9, expected a slowdown factor from 1 to 100"),
            std::string::npos);
  EXPECT_NE(testing::InputErrorOf([] { RequireStraggler(kMaxStragglerSlowdown * 1.01, std::nullopt, 4, "w"); })
                .find("w: 101, expected a slowdown factor from 1 to 100"),
            std::string::npos);
  EXPECT_NE(testing::InputErrorOf([] { RequireStraggler(1.1, 4, 4, "command line: --straggler"); })
                .find("command line: --straggler-stage: 4, expected a pipeline stage from 0 to 3"),
            std::string::npos);
  EXPECT_NE(testing::InputErrorOf([] { RequireStraggler(1.1, -1, 4, "w"); }).find("w-stage: -1"), std::string::npos);
  EXPECT_EQ(testing::InputErrorOf([] { RequireStraggler(1, 3, 4, "w"); }), "(no error)");
  const Model m = LoadModel("gpt3-350m");
  const Cluster cl = LoadCluster("dgx-h100");
  SimulateOptions o;
  o.straggler_stage = 1;  // a one-stage pipeline
  o.straggler_slowdown = 1.1;
  EXPECT_THROW(Simulate(m, Config(1, 1, 4), cl, 1, DefaultProfile(cl), o), std::invalid_argument);
}

TEST(Straggler, CommandLine) {
  const std::string base =
      "simulate --model gpt3-13b --cluster dgx-a100 --gpus 8 --tp 2 --pp 4 --mbs 1 --gbs 32 --sequence-parallel "
      "--recompute selective";
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler 0.5", "--straggler: got \"0.5\", expected a number from 1 to 100"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler x1.1", "--straggler: got \"x1.1\", expected a number from 1"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler 1.1 --straggler-stage 2.5",
                                    "--straggler-stage: got \"2.5\", expected an integer"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler 1.1 --straggler-stage 4",
                                    "--straggler-stage: 4, expected a pipeline stage from 0 to 3"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler-stage 1", "needs --straggler FACTOR"));
  const testing::RunResult text = testing::RunShardcast(base + " --straggler 1.1");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("With a straggler on stage"), std::string::npos);
  EXPECT_NE(text.out.find(": one GPU's kernels 1.1x as long"), std::string::npos);
  EXPECT_NE(text.out.find("step with it on stage 0:"), std::string::npos);
  EXPECT_NE(text.out.find("with straggler"), std::string::npos);
  // tokens/s beside the baseline in whole tokens, as the report's throughput line prints them.
  const Json plain = Json::parse(testing::RunShardcast(base + " --json").out);
  EXPECT_NE(text.out.find(fmt::format("{:.0f}", plain["tokens_per_s"].get<double>())), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("e+0"), std::string::npos) << text.out;
  const testing::RunResult js = testing::RunShardcast(base + " --straggler 1.1 --straggler-stage 1 --json");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const Json j = Json::parse(js.out);
  ASSERT_TRUE(j.contains("straggler"));
  const Json& s = j["straggler"];
  EXPECT_EQ(s["stage"], 1);
  EXPECT_EQ(s["stage_given"], true);
  EXPECT_DOUBLE_EQ(s["slowdown"].get<double>(), 1.1);
  EXPECT_TRUE(s["step_time_by_stage_s"].empty());
  EXPECT_GT(s["with_straggler"]["step_time_s"].get<double>(), s["baseline"]["step_time_s"].get<double>());
  EXPECT_NEAR(s["stage_compute_s"].get<double>(), 1.1 * s["stage_compute_baseline_s"].get<double>(), 1e-5);
  EXPECT_EQ(s["result"]["step_time_s"], s["with_straggler"]["step_time_s"]);
  // With full recompute the stage's compute and optimizer still scale exactly; its recompute
  // (which holds the recomputed forward's tensor-parallel collectives) by less.
  const testing::RunResult full = testing::RunShardcast(
      "simulate --model gpt3-13b --cluster dgx-a100 --gpus 8 --tp 2 --pp 4 --mbs 1 --gbs 32 --recompute full "
      "--straggler 2 --straggler-stage 3 --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const Json fj = Json::parse(full.out);
  const Json& f = fj["straggler"];
  EXPECT_NEAR(f["stage_compute_s"].get<double>(), 2 * f["stage_compute_baseline_s"].get<double>(), 1e-5);
  const double rc0 = f["stage_recompute_baseline_s"].get<double>(), rc = f["stage_recompute_s"].get<double>();
  EXPECT_GT(rc0, 0);
  EXPECT_GT(rc, rc0);
  EXPECT_LE(rc, 2 * rc0 + 1e-5);
  // The text says which part did not scale, and by how much: (f x before - after) / (f - 1).
  const testing::RunResult full_text = testing::RunShardcast(
      "simulate --model gpt3-13b --cluster dgx-a100 --gpus 8 --tp 2 --pp 4 --mbs 1 --gbs 32 --recompute full "
      "--straggler 2 --straggler-stage 3");
  ASSERT_EQ(full_text.exit_code, 0) << full_text.err;
  EXPECT_NE(full_text.out.find(fmt::format("stage 3 recompute {} -> {} (x2 but for {} of the recomputed forward's "
                                           "collectives, not scaled)",
                                           FormatSeconds(rc0), FormatSeconds(rc), FormatSeconds(2 * rc0 - rc))),
            std::string::npos)
      << full_text.out;
  // Slowdown 1 is said to be none; a memory shortfall the baseline shares is not repeated.
  const testing::RunResult one = testing::RunShardcast(
      "simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --tp 8 --pp 1 --mbs 1 --gbs 8 --straggler 1");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("With a straggler on stage 0: no slowdown (the baseline)"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("with straggler cannot run"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("step with it on stage"), std::string::npos);  // one stage: no sweep line
  // A configuration that cannot run has no straggler run: null in --json.
  const testing::RunResult none = testing::RunShardcast(
      "simulate --model gpt3-13b --cluster dgx-a100 --gpus 8 --tp 3 --pp 1 --mbs 1 --gbs 32 --straggler 1.1 --json");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  const Json n = Json::parse(none.out);
  EXPECT_FALSE(n["feasible"].get<bool>());
  EXPECT_TRUE(n["straggler"].is_null());
}

// plan --straggler: each ranked plan's step with the slow GPU at its worst stage.
TEST(Straggler, PlanRunsEachRankedPlanWithIt) {
  const std::string base = "plan --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --gbs 32 --top 3";
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler 0.5", "--straggler: got \"0.5\", expected a number from 1 to 100"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + " --straggler 1.1 --csv -", "--straggler: not with --csv -"));
  const testing::RunResult js = testing::RunShardcast(base + " --straggler 1.3 --json");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const Json j = Json::parse(js.out);
  ASSERT_TRUE(j.contains("straggler"));
  const Json& plans = j["straggler"]["plans"];
  ASSERT_EQ(plans.size(), j["plans"].size());
  ASSERT_FALSE(plans.empty());
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Json& p = plans[i];
    EXPECT_EQ(p["rank"], i + 1);
    EXPECT_EQ(p["config_summary"], j["plans"][i]["config_summary"]);
    const double step = p["step_time_s"].get<double>(), slow = p["with_straggler_step_time_s"].get<double>();
    EXPECT_DOUBLE_EQ(step, j["plans"][i]["step_time_s"].get<double>());
    EXPECT_GT(slow, step);
    EXPECT_NEAR(p["step_time_change"].get<double>(), slow / step - 1, 1e-12);
    const auto by = p["step_time_by_stage_s"].get<std::vector<double>>();
    ASSERT_FALSE(by.empty());
    EXPECT_EQ(*std::max_element(by.begin(), by.end()), slow);
    EXPECT_EQ(by[p["stage"].get<std::size_t>()], slow);
  }
  const testing::RunResult text = testing::RunShardcast(base + " --straggler 1.3");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("With one straggler (one GPU's kernels 1.3x as long"), std::string::npos);
  EXPECT_NE(text.out.find("least slowed: rank"), std::string::npos);
  EXPECT_NE(text.out.find("--straggler 1.3\n"), std::string::npos);  // the Details line reproduces it
  // A slow node's links on one node: each plan says nothing crosses them, the text once.
  const testing::RunResult nic = testing::RunShardcast(base + " --straggler-nic 2 --json");
  ASSERT_EQ(nic.exit_code, 0) << nic.err;
  const Json nj = Json::parse(nic.out);
  ASSERT_FALSE(nj["straggler"]["plans"].empty());
  for (const auto& p : nj["straggler"]["plans"]) {
    EXPECT_DOUBLE_EQ(p["with_straggler_step_time_s"].get<double>(), p["step_time_s"].get<double>());
    ASSERT_EQ(p["notes"].size(), 1u);
    EXPECT_NE(p["notes"][0].get<std::string>().find("the job runs on one node"), std::string::npos);
  }
  const testing::RunResult nic_text = testing::RunShardcast(base + " --straggler-nic 2");
  ASSERT_EQ(nic_text.exit_code, 0) << nic_text.err;
  EXPECT_NE(nic_text.out.find("note (rank 1, 2, 3): the job runs on one node"), std::string::npos) << nic_text.out;
}

}  // namespace
}  // namespace shardcast
