// Partial full recompute: Megatron-LM's --recompute-method block --recompute-num-layers N (the
// first N layers of each model chunk rerun) and torchtitan's selective_ac_option = "N" (a rank's
// blocks counted chunk by chunk, every N-th checkpointed). Which layers rerun is checked against
// those rules; a chunk's times and bytes against the same chunk with no recompute and with full
// recompute (each layer is one or the other); the program's recomputed ops against the count.
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli/config_args.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "models/loader.h"
#include "planner/planner.h"
#include "planner/run_log.h"
#include "report/launch.h"
#include "report/megatron_args.h"
#include "report/text.h"
#include "simulator/cost_model.h"
#include "simulator/profile.h"
#include "simulator/program.h"
#include "simulator/schedule.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

/// The configuration simulate builds from `flags` for llama3-8b (32 layers, or `model`) on
/// `gpus` (16) H100s.
ParallelConfig PartialConfig(const std::string& flags, const std::string& model = "llama3-8b", int gpus = 16) {
  CLI::App app;
  cli::SimulateArgs a;
  cli::AddConfigOptions(&app, &a);
  app.parse(fmt::format("--gpus {} {}", gpus, flags), false);
  return cli::BuildConfig(a, LoadModel(model), gpus);
}

std::vector<bool> Marks(const ChunkCost& cc) {
  std::vector<bool> v;
  for (int l = 0; l < cc.layers; ++l) v.push_back(cc.Recomputed(l));
  return v;
}

// PP2 with 2 virtual stages: 4 chunks of 8 layers, stage 0 holds model chunks 0 and 2.
TEST(PartialRecompute, ChunksMarkTheLayersThatRerun) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const std::string grid = "--tp 2 --pp 2 --vp 2 --mbs 1 --gbs 32 ";
  // Block: the first 3 layers of every chunk.
  const CostModel block = BuildCostModel(m, PartialConfig(grid + "--recompute full --recompute-method block "
                                                                 "--recompute-num-layers 3"),
                                         cl, prof);
  const std::vector<bool> first3 = {true, true, true, false, false, false, false, false};
  for (const auto& stage : block.chunks) {
    for (const ChunkCost& cc : stage) EXPECT_EQ(Marks(cc), first3) << cc.stage << "/" << cc.chunk;
  }
  // torchtitan's counter over a rank's 16 layers, chunk by chunk: counts 3, 6, 9, 12, 15 (from 1).
  const CostModel every3 = BuildCostModel(m, PartialConfig(grid + "--recompute selective --selective-ac-option 3"), cl, prof);
  for (const auto& stage : every3.chunks) {
    EXPECT_EQ(Marks(stage[0]), (std::vector<bool>{false, false, true, false, false, true, false, false}));
    EXPECT_EQ(Marks(stage[1]), (std::vector<bool>{true, false, false, true, false, false, true, false}));
  }
  // Without partial recompute the chunks carry no marks and every layer runs the configuration's.
  const CostModel full = BuildCostModel(m, PartialConfig(grid + "--recompute full"), cl, prof);
  EXPECT_TRUE(full.chunks[0][0].layer_recomputed.empty());
  EXPECT_TRUE(full.chunks[0][0].Recomputed(5));
  EXPECT_TRUE(full.plain_layer_ops.empty());
  EXPECT_FALSE(block.plain_layer_ops.empty());
}

// Each layer is either a fully recomputed one or one without recompute, so a chunk's passes and
// kept bytes are the mix of the two configurations' chunks in the ratio of its marked layers.
TEST(PartialRecompute, ChunkCostsMixTheTwoLayerKinds) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const std::string grid = "--tp 2 --pp 2 --vp 2 --mbs 1 --gbs 32 ";
  const CostModel none = BuildCostModel(m, PartialConfig(grid + "--recompute none"), cl, prof);
  const CostModel full = BuildCostModel(m, PartialConfig(grid + "--recompute full"), cl, prof);
  for (int n : {0, 3, 8}) {
    const CostModel part = BuildCostModel(
        m, PartialConfig(grid + fmt::format("--recompute full --recompute-method block --recompute-num-layers {}", n)),
        cl, prof);
    // Stage 1's first chunk (model chunk 1): no embedding, no output layer.
    const ChunkCost &p = part.chunks[1][0], &a = none.chunks[1][0], &f = full.chunks[1][0];
    const double x = n / 8.0;
    auto mix = [x](double v_none, double v_full) { return (1 - x) * v_none + x * v_full; };
    EXPECT_NEAR(p.fwd_s, mix(a.fwd_s, f.fwd_s), 1e-9 * f.fwd_s) << n;
    EXPECT_NEAR(p.bwd_s(), mix(a.bwd_s(), f.bwd_s()), 1e-9 * f.bwd_s()) << n;
    EXPECT_NEAR(p.recompute_s, x * f.recompute_s, 1e-9 * f.recompute_s) << n;
    EXPECT_NEAR(p.saved_bytes, mix(a.saved_bytes, f.saved_bytes), 1e-9 * a.saved_bytes) << n;
    EXPECT_GT(f.recompute_s, 0.0);
    EXPECT_LT(f.saved_bytes, a.saved_bytes);
  }
}

// The rank's program reruns the forward ops of the marked layers only.
TEST(PartialRecompute, ProgramRerunsTheMarkedLayers) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --selective-ac-option 4");
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  std::size_t per_layer = 0;
  for (const Op& o : cm.layer_ops) per_layer += o.pass == Pass::kRecompute ? 1 : 0;
  ASSERT_GT(per_layer, 0u);
  const int microbatches = static_cast<int>(c.num_microbatches());
  const RankProgram prog = BuildRankProgram(m, c, cm, MakeSchedule(Schedule::k1F1B, 2, microbatches, 1), prof, 1);
  std::size_t rerun = 0;
  for (const ProgOp& x : prog.ops) {
    const bool op = x.kind == ProgKind::kCompute || x.kind == ProgKind::kTpCollective;  // the layer's ops
    rerun += op && x.op.pass == Pass::kRecompute ? 1 : 0;
  }
  // 16 layers on the rank, every 4th rerun: 4 a micro-batch.
  EXPECT_EQ(rerun, static_cast<std::size_t>(microbatches) * 4 * per_layer);
}

// The step between no recompute and full: block 0 is no recompute, a block of the whole chunk is
// full recompute; the hardware FLOPs count the marked layers' recompute only.
TEST(PartialRecompute, StepLiesBetweenNoneAndFull) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const std::string grid = "--tp 2 --pp 2 --mbs 1 --gbs 32 ";
  auto run = [&](const std::string& rc) { return Simulate(m, PartialConfig(grid + rc), cl, 16, prof); };
  const SimulationResult none = run("--recompute none"), full = run("--recompute full");
  const SimulationResult b0 = run("--recompute full --recompute-method block --recompute-num-layers 0");
  const SimulationResult b4 = run("--recompute full --recompute-method block --recompute-num-layers 4");
  const SimulationResult b16 = run("--recompute full --recompute-method block --recompute-num-layers 16");
  ASSERT_TRUE(none.feasible && full.feasible && b0.feasible && b4.feasible && b16.feasible);
  EXPECT_NEAR(b0.step_time_s, none.step_time_s, 1e-9 * none.step_time_s);
  EXPECT_NEAR(b0.peak_memory_bytes, none.peak_memory_bytes, 1e-6 * none.peak_memory_bytes);
  EXPECT_NEAR(b16.step_time_s, full.step_time_s, 1e-9 * full.step_time_s);
  EXPECT_NEAR(b16.peak_memory_bytes, full.peak_memory_bytes, 1e-6 * full.peak_memory_bytes);
  EXPECT_LT(none.step_time_s, b4.step_time_s);
  EXPECT_LT(b4.step_time_s, full.step_time_s);
  EXPECT_GT(none.peak_memory_bytes, b4.peak_memory_bytes);
  EXPECT_GT(b4.peak_memory_bytes, full.peak_memory_bytes);
  // Recomputed FLOPs (hfu - mfu, times the step) of 4 layers in 16 against all of them.
  auto recomputed = [](const SimulationResult& r) { return (r.hfu - r.mfu) * r.step_time_s; };
  EXPECT_NEAR(recomputed(b4), recomputed(full) / 4, 1e-9 * recomputed(full));
  EXPECT_NEAR(recomputed(b0), 0.0, 1e-12);
}

// simulate's flags give the configuration back; logs and launches carry it; what is not
// modelled exits 2.
TEST(PartialRecompute, FlagsLogsLaunchesAndRefusals) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  for (const char* flags : {"--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full --recompute-method block "
                            "--recompute-num-layers 3",
                            "--tp 2 --pp 2 --mbs 1 --gbs 32 --selective-ac-option 3"}) {
    const ParallelConfig c = PartialConfig(flags);
    ASSERT_TRUE(c.PartialRecompute()) << flags;
    std::vector<std::string> unexpressed;
    const std::string written = cli::SimulateFlags(c, m, 16, &unexpressed);
    EXPECT_TRUE(unexpressed.empty()) << flags;
    const ParallelConfig back = PartialConfig(written.substr(written.find("--tp")));
    EXPECT_EQ(back, c) << flags << " -> " << written;
  }
  const ParallelConfig block = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full --recompute-method block "
                                             "--recompute-num-layers 3");
  const ParallelConfig every = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --selective-ac-option 3");
  EXPECT_EQ(block.recompute_block_layers, 3);
  EXPECT_EQ(every.recompute_layer_interval, 3);
  EXPECT_EQ(every.recompute, Recompute::kFull);
  EXPECT_NE(EmitLaunch(LaunchFormat::kMegatron, m, block, cl, 16).text.find("--recompute-method block --recompute-num-layers 3"),
            std::string::npos);
  EXPECT_NE(EmitLaunch(LaunchFormat::kTorchtitan, m, every, cl, 16).text.find("selective_ac_option = \"3\""),
            std::string::npos);
  // Each framework without the other's method says so.
  EXPECT_FALSE(EmitLaunch(LaunchFormat::kMegatron, m, every, cl, 16).unexpressed.empty());
  EXPECT_FALSE(EmitLaunch(LaunchFormat::kTorchtitan, m, block, cl, 16).unexpressed.empty());
  // torchtitan's log: one layer in 2.
  std::string log = ReadTextFile(testing::FixturesDir() + "/logs/torchtitan_llama3_8b_fsdp8.log");
  const std::string mode = "\"mode\": \"full\"";
  ASSERT_NE(log.find(mode), std::string::npos);
  log.replace(log.find(mode), mode.size(), "\"mode\": \"selective\",\n[rank0]:    \"selective_ac_option\": \"2\"");
  LogDefaults d;
  d.gpus = 8;
  const LoggedRun r = ParseTrainingLog(log, "t.log", d);
  EXPECT_EQ(r.config.recompute, Recompute::kFull);
  EXPECT_EQ(r.config.recompute_layer_interval, 2);
  EXPECT_TRUE(r.notes.empty() || Join(r.notes, "|").find("one layer in") == std::string::npos) << Join(r.notes, "|");

  const std::string base = "simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --mbs 1 --gbs 32 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--recompute-num-layers 2", "without --recompute-method"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--recompute selective --recompute-method block", "expected --recompute full"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--recompute full --recompute-method uniform --recompute-num-layers 2",
                                    "groups of layers"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--recompute full --selective-ac-option 2", "expected selective"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option ''", "got \"\", expected op or a layer frequency"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option 2 --recompute-method block --recompute full",
                                    "expected one of them"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--pp 2 --recompute full --recompute-method block --precision fp8 "
                                           "--first-last-layers-bf16",
                                    "--first-last-layers-bf16"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--recompute full --recompute-method block --zero 3 --zero3-impl deepspeed-2021",
                                    "--zero3-impl per-layer"));
}

// plan adds partial recompute beside full recompute where the plan without recompute cannot fit
// (llama3-70b at 16K tokens on TP8 PP2: no recompute needs more than 80 GB), and ranks it.
TEST(PartialRecompute, PlanSearchesItWhereNoRecomputeCannotFit) {
  const Model m = LoadModel("llama3-70b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 128;
  o.seq_length = 16384;
  o.fixed = {{"cp", "1"}, {"tp", "8"}, {"pp", "2"}};
  const PlanResult on = RunPlan(m, cl, prof, o);
  EXPECT_GT(on.partial_recompute_candidates, 0u);
  bool ranked = false;
  for (const Plan& p : on.plans) {
    if (!p.config.PartialRecompute()) continue;
    ranked = true;
    // A quarter, half or three quarters of a chunk's layers, rounded: at least 1, fewer than all.
    const std::int64_t chunk = m.num_layers / (p.config.pp * p.config.vp);
    EXPECT_GE(p.config.recompute_block_layers, 1) << p.config.Summary();
    EXPECT_LT(p.config.recompute_block_layers, chunk) << p.config.Summary();
  }
  EXPECT_TRUE(ranked);
  o.partial_recompute = false;
  const PlanResult off = RunPlan(m, cl, prof, o);
  EXPECT_EQ(off.partial_recompute_candidates, 0u);
  EXPECT_EQ(on.candidates_generated, off.candidates_generated + on.partial_recompute_candidates);
  for (const Plan& p : off.plans) EXPECT_FALSE(p.config.PartialRecompute());
  ASSERT_FALSE(on.plans.empty());
  ASSERT_FALSE(off.plans.empty());
  EXPECT_LE(on.plans.front().result.step_time_s, off.plans.front().result.step_time_s);
  // A recompute list without none (or a fixed recompute) asks for full recompute: no variants.
  PlanOptions only_full = o;
  only_full.partial_recompute = true;
  only_full.recomputes = {Recompute::kFull};
  EXPECT_EQ(RunPlan(m, cl, prof, only_full).partial_recompute_candidates, 0u);
  // With --optimizer fsdp the variants are torchtitan's one layer in N.
  const Model m8 = LoadModel("llama3-8b");
  PlanOptions f;
  f.gpus = 8;
  f.global_batch_size = 64;
  f.seq_length = 8192;
  f.optimizer_impl = OptimizerImpl::kTorchFsdp;
  f.zero_stages = {3};
  f.top_k = 40;
  f.fixed = {{"tp", "1"}, {"cp", "1"}, {"pp", "1"}};
  const PlanResult fsdp = RunPlan(m8, cl, WithPyTorchAttention(prof, cl.gpu.arch), f);
  EXPECT_GT(fsdp.partial_recompute_candidates, 0u);
  for (const Plan& p : fsdp.plans) {
    if (p.config.PartialRecompute()) {
      EXPECT_GE(p.config.recompute_layer_interval, 2) << p.config.Summary();
    }
    EXPECT_LT(p.config.recompute_block_layers, 0) << p.config.Summary();
  }
}

// Where the plan without recompute passes its memory lower bound but not the simulation (the
// bound leaves out the loss's working memory), the search follows up with partial recompute,
// one variant after another until one fits: Llama 3 8B at 6K tokens, micro-batch 2, on 8 H100
// as torchtitan runs it. Each variant ranked is the family's least recompute that fits.
TEST(PartialRecompute, PlanFollowsUpWhatTheBoundsLetThrough) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = WithPyTorchAttention(DefaultProfile(cl), cl.gpu.arch);
  PlanOptions f;
  f.gpus = 8;
  f.global_batch_size = 16;
  f.seq_length = 6144;
  f.min_headroom_bytes = 2.0 * (1 << 30);       // plan's default --min-headroom
  f.base.cross_entropy = CrossEntropyImpl::kTorch;  // plan's loss under --optimizer fsdp
  f.optimizer_impl = OptimizerImpl::kTorchFsdp;
  f.zero_stages = {3};
  f.fixed = {{"tp", "1"}, {"cp", "1"}, {"pp", "1"}, {"mbs", "2"}};
  const PlanResult r = RunPlan(m, cl, prof, f);
  ASSERT_FALSE(r.plans.empty());
  const ParallelConfig* ranked = nullptr;
  for (const Plan& p : r.plans) {
    EXPECT_NE(p.config.recompute, Recompute::kNone) << p.config.Summary();  // does not fit
    if (p.config.PartialRecompute()) ranked = &p.config;
  }
  ASSERT_NE(ranked, nullptr);
  // The variant recomputing one layer fewer in its family does not fit: simulated, it needs more.
  const std::int64_t n = ranked->recompute_layer_interval;
  ASSERT_LT(n, 4);
  ParallelConfig less = *ranked;
  less.recompute_layer_interval = n + 1;
  SimulationResult sim = Simulate(m, less, cl, f.gpus, prof);
  ReplayAllocator(m, less, cl, prof, &sim);
  EXPECT_FALSE(sim.fits && sim.peak_reserved_bytes <= cl.gpu.memory_bytes - f.min_headroom_bytes) << less.Summary();
}

// Multi-token-prediction layers do not rerun under partial recompute (Megatron-Core skips their
// recompute under the block method): with block 0 the last stage is the one without recompute.
TEST(PartialRecompute, MultiTokenPredictionLayersDoNotRerun) {
  const Model m = LoadModel("deepseek-v3");
  ASSERT_GT(m.mtp_num_layers, 0);
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const std::string grid = "--tp 1 --ep 64 --pp 8 --decoder-first-pipeline-num-layers 4 "
                           "--decoder-last-pipeline-num-layers 3 --mbs 1 --gbs 512 --seq 4096 ";
  const CostModel none = BuildCostModel(m, PartialConfig(grid + "--recompute none", "deepseek-v3", 512), cl, prof);
  const CostModel b0 = BuildCostModel(
      m, PartialConfig(grid + "--recompute full --recompute-method block --recompute-num-layers 0", "deepseek-v3", 512), cl, prof);
  const ChunkCost &a = none.chunks.back().back(), &b = b0.chunks.back().back();
  ASSERT_TRUE(a.has_output && b.has_output);
  EXPECT_EQ(b.recompute_s, 0.0);
  EXPECT_NEAR(b.fwd_s, a.fwd_s, 1e-12 * a.fwd_s);
  EXPECT_NEAR(b.saved_bytes, a.saved_bytes, 1e-9 * a.saved_bytes);
}

// Configurations that differ only in which layers rerun share their layer set (the chunks pick
// the layers), apart from full recompute's, which has no layers without recompute.
TEST(PartialRecompute, LayerSetsSharedWhicheverLayersRerun) {
  const ParallelConfig b2 = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full --recompute-method block "
                                          "--recompute-num-layers 2");
  const ParallelConfig b5 = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full --recompute-method block "
                                          "--recompute-num-layers 5");
  const ParallelConfig full = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full");
  EXPECT_TRUE(LayerCostKey(b2) == LayerCostKey(b5));
  EXPECT_FALSE(LayerCostKey(b2) == LayerCostKey(full));
}

// --ops lists the plain layer beside the recomputed one under partial recompute only; its ops are
// the recomputed layer's without the recompute ones.
TEST(PartialRecompute, OpsTableListsThePlainLayer) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const std::string grid = "--tp 2 --pp 2 --mbs 1 --gbs 32 --recompute full";
  auto ops = [&](const std::string& rc) {
    std::ostringstream out;
    WriteOps(out, m, PartialConfig(grid + rc), cl, prof);
    return out.str();
  };
  const std::string plain = "one transformer layer that partial recompute leaves alone";
  const std::string rerun = "one transformer layer that partial recompute reruns";
  EXPECT_EQ(ops("").find(plain), std::string::npos);
  const std::string four = ops(" --recompute-method block --recompute-num-layers 4");
  EXPECT_NE(four.find(plain), std::string::npos) << four;
  EXPECT_NE(four.find(rerun), std::string::npos) << four;
  // Block 0 reruns no layer (no table of a rerun layer); 16 of 16 a stage leaves none alone.
  const std::string none = ops(" --recompute-method block --recompute-num-layers 0");
  EXPECT_EQ(none.find(rerun), std::string::npos) << none;
  EXPECT_NE(none.find(plain), std::string::npos) << none;
  const std::string all = ops(" --recompute-method block --recompute-num-layers 16");
  EXPECT_NE(all.find(rerun), std::string::npos) << all;
  EXPECT_EQ(all.find(plain), std::string::npos) << all;
  const CostModel cm = BuildCostModel(m, PartialConfig(grid + " --recompute-method block --recompute-num-layers 4"), cl, prof);
  const CostModel full = BuildCostModel(m, PartialConfig(grid), cl, prof);
  size_t forward_ops = 0;
  for (const auto& op : full.layer_ops) forward_ops += op.pass != Pass::kRecompute;
  EXPECT_EQ(cm.plain_layer_ops.size(), forward_ops);
  EXPECT_LT(cm.plain_layer_ops.size(), full.layer_ops.size());
  // A mixture-of-experts model lists its MoE layer both ways.
  const Model q = LoadModel("qwen3-30b-a3b");
  std::ostringstream moe;
  WriteOps(moe, q, PartialConfig("--tp 1 --ep 8 --pp 2 --mbs 1 --gbs 32 --recompute full --recompute-method block "
                                 "--recompute-num-layers 6", "qwen3-30b-a3b"), cl, prof);
  EXPECT_NE(moe.str().find("that partial recompute reruns (first 6 layers of each chunk)"), std::string::npos);
  EXPECT_NE(moe.str().find("that partial recompute leaves alone (first 6 layers of each chunk)"), std::string::npos);
}

// A partial recompute that reruns no layer, or all of them, is written by the launches as no, or
// full, recompute; the report counts the layers that rerun per stage.
TEST(PartialRecompute, LaunchesWriteWhatReruns) {
  const Model m = LoadModel("llama3-8b");  // 32 layers
  const Cluster cl = LoadCluster("dgx-h100");
  const std::string grid = "--tp 2 --pp 2 --mbs 1 --gbs 32 ";
  const ParallelConfig none = PartialConfig(grid + "--recompute full --recompute-method block --recompute-num-layers 0");
  const ParallelConfig all = PartialConfig(grid + "--recompute full --recompute-method block --recompute-num-layers 16");
  const ParallelConfig beyond = PartialConfig(grid + "--selective-ac-option 17");  // 16 layers a rank
  const ParallelConfig some = PartialConfig(grid + "--recompute full --recompute-method block --recompute-num-layers 5");
  EXPECT_EQ(WithEffectiveRecompute(m, none).recompute, Recompute::kNone);
  EXPECT_FALSE(WithEffectiveRecompute(m, none).PartialRecompute());
  EXPECT_EQ(WithEffectiveRecompute(m, all).recompute, Recompute::kFull);
  EXPECT_FALSE(WithEffectiveRecompute(m, all).PartialRecompute());
  EXPECT_EQ(WithEffectiveRecompute(m, beyond).recompute, Recompute::kNone);
  EXPECT_EQ(WithEffectiveRecompute(m, some), some);
  // With multi-token-prediction layers (which only full recompute reruns), every transformer
  // layer rerunning is still partial.
  const Model ds = LoadModel("deepseek-v3");
  const ParallelConfig ds_all = PartialConfig("--tp 1 --ep 8 --pp 1 --mbs 1 --gbs 32 --recompute full --recompute-method "
                                              "block --recompute-num-layers 61", "deepseek-v3", 16);
  ASSERT_GT(ds.mtp_num_layers, 0);
  EXPECT_EQ(WithEffectiveRecompute(ds, ds_all), ds_all);
  const auto stages = RecomputedLayersPerStage(m, some);
  ASSERT_EQ(stages.size(), 2u);
  for (const auto& [rerun, layers] : stages) {
    EXPECT_EQ(rerun, 5);
    EXPECT_EQ(layers, 16);
  }
  const std::string titan = EmitLaunch(LaunchFormat::kTorchtitan, m, none, cl, 16).text;
  EXPECT_NE(titan.find("mode = \"none\""), std::string::npos) << titan;
  const LaunchConfig titan_all = EmitLaunch(LaunchFormat::kTorchtitan, m, all, cl, 16);
  EXPECT_NE(titan_all.text.find("mode = \"full\""), std::string::npos);
  EXPECT_EQ(Join(titan_all.unexpressed, "|").find("first"), std::string::npos) << Join(titan_all.unexpressed, "|");
  EXPECT_EQ(EmitLaunch(LaunchFormat::kMegatron, m, beyond, cl, 16).text.find("--recompute-granularity"), std::string::npos);
  // The simulation counts the same layers per stage, and says so.
  const HardwareProfile prof = DefaultProfile(cl);
  const SimulationResult r = Simulate(m, some, cl, 16, prof);
  ASSERT_EQ(r.stages.size(), 2u);
  for (const StageResult& st : r.stages) EXPECT_EQ(st.recomputed_layers, 5);
  EXPECT_EQ(Simulate(m, PartialConfig(grid + "--recompute full"), cl, 16, prof).stages[0].recomputed_layers, 16);
  const testing::RunResult out = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 " + grid +
                                                       "--recompute full --recompute-method block --recompute-num-layers 0");
  EXPECT_NE(out.out.find("0 of 32 layers rerun their forward in the backward (per stage: 0/16, 0/16); none"),
            std::string::npos) << out.out;
  const testing::RunResult js = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 " + grid +
                                                      "--recompute full --recompute-method block --recompute-num-layers 5 "
                                                      "--json");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const Json parsed = Json::parse(js.out);  // named: a range-for over a temporary's member would dangle
  for (const auto& st : parsed["stages"]) EXPECT_EQ(st["recomputed_layers"].get<int>(), 5);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 " + grid +
                                        "--recompute full --recompute-method block --recompute-num-layers abc",
                                    "--recompute-num-layers: got \"abc\", expected a non-negative integer"));
}

// plan's printed Megatron-LM arguments say, as the launch does, that torchtitan's one layer in N
// is written as full recompute (once in each).
TEST(PartialRecompute, MegatronArgumentsSayWhatTheyCannotExpress) {
  const Model m = LoadModel("llama3-8b");
  const ParallelConfig every = PartialConfig("--tp 2 --pp 2 --mbs 1 --gbs 32 --selective-ac-option 2");
  const std::string note = "torchtitan's checkpointing of one layer in every 2";
  const std::string args = MegatronArguments(every, m);
  EXPECT_NE(args.find(note), std::string::npos) << args;
  const std::string launch = EmitLaunch(LaunchFormat::kMegatron, m, every, LoadCluster("dgx-h100"), 16).text;
  ASSERT_NE(launch.find(note), std::string::npos);
  EXPECT_EQ(launch.find(note, launch.find(note) + 1), std::string::npos) << launch;
}


// The planner's variants read each stage's own layers: llama3-8b (32 layers) on PP4 with 5 layers
// on the first and last stages (11 on each middle one) has a mean chunk of 8, so Megatron's block
// variants are N = 2, 4, 6. Each variant's share is the largest a stage reruns of its own layers
// (min(N, 5)/5 on the outer stages), which keeps the memory read off the bounds a lower bound;
// they go by the share of all 32 layers they rerun (8, 16 and 22 of 32). torchtitan's intervals
// count a rank's layers: one in 4 of 5 layers is 1 layer, of 11 it is 2.
TEST(PartialRecompute, VariantsReadTheStagesOwnLayers) {
  const Model m = LoadModel("llama3-8b");
  ParallelConfig c = PartialConfig("--tp 2 --pp 4 --recompute full --decoder-first-pipeline-num-layers 5 "
                                   "--decoder-last-pipeline-num-layers 5");
  ASSERT_EQ(c.first_stage_layers, 5);
  PlanOptions o;
  const auto v = PartialRecomputeVariants(m, o, c);
  ASSERT_EQ(v.size(), 3u);
  const std::int64_t blocks[] = {2, 4, 6};
  const double shares[] = {2.0 / 5.0, 4.0 / 5.0, 1.0};
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].first.recompute_block_layers, blocks[i]);
    EXPECT_DOUBLE_EQ(v[i].second, shares[i]);
  }
  // Block 6 reruns all 5 layers of the first and last stages and 6 of 11 in the middle.
  const auto stages = RecomputedLayersPerStage(m, v[2].first);
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(stages[0], std::make_pair(std::int64_t{5}, std::int64_t{5}));
  EXPECT_EQ(stages[1], std::make_pair(std::int64_t{6}, std::int64_t{11}));
  // A block of all a chunk's layers, or of none, is full recompute or none: not a variant.
  ParallelConfig all = c;
  all.recompute_block_layers = 11;
  EXPECT_EQ(PartialRecomputeShare(m, all), -1.0);
  all.recompute_block_layers = 0;
  EXPECT_EQ(PartialRecomputeShare(m, all), -1.0);
  // torchtitan: one layer in 4, 3, 2 of a rank's (5 or 11 layers). One in 4 and one in 3 both
  // rerun 1 of the outer stages' 5 layers, but 2 and 3 of the middle stages' 11, so both stay.
  o.optimizer_impl = OptimizerImpl::kTorchFsdp;
  const auto f = PartialRecomputeVariants(m, o, c);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].first.recompute_layer_interval, 4);  // 6 of 32 layers
  EXPECT_DOUBLE_EQ(f[0].second, 1.0 / 5.0);             // max(1/5, 2/11)
  EXPECT_EQ(f[1].first.recompute_layer_interval, 3);  // 8 of 32
  EXPECT_DOUBLE_EQ(f[1].second, 3.0 / 11.0);            // max(1/5, 3/11)
  EXPECT_EQ(f[2].first.recompute_layer_interval, 2);  // 14 of 32
  EXPECT_DOUBLE_EQ(f[2].second, 5.0 / 11.0);            // max(2/5, 5/11)
  // A chunk of 2 layers: a quarter and a half round to 1, three quarters to 2 (every layer): one.
  const ParallelConfig small = PartialConfig("--tp 2 --pp 4 --vp 4 --recompute full");
  const auto one = PartialRecomputeVariants(m, PlanOptions{}, small);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].first.recompute_block_layers, 1);
  EXPECT_DOUBLE_EQ(one[0].second, 0.5);
}

}  // namespace
}  // namespace shardcast
