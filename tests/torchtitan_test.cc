// torchtitan's runs as shardcast models them: per-op selective activation checkpointing
// (kRecomputeTorchOps, simulate's --selective-ac-option op: what reruns before a block's
// backward, what the block keeps, the refusals), PyTorch's attention and loss under --optimizer
// fsdp, FP8 all-gathers in plans, the launch's flavor. Expected values are derived here from the
// policy's rules (models/parallel.h).
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cli/config_args.h"
#include "common/error.h"
#include "common/text.h"
#include "models/loader.h"
#include "planner/planner.h"
#include "planner/run_log.h"
#include "report/launch.h"
#include "simulator/cost_model.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

/// The configuration simulate builds from `flags` for llama3-8b (or `model`) on `gpus` H100s.
ParallelConfig OpSacConfig(const std::string& flags, int gpus = 8, const std::string& model = "llama3-8b") {
  CLI::App app;
  cli::SimulateArgs a;
  cli::AddConfigOptions(&app, &a);
  app.parse(fmt::format("--gpus {} {}", gpus, flags), false);
  return cli::BuildConfig(a, LoadModel(model), gpus);
}

/// The op named `name` in `ops`, or nullptr.
const Op* OpSacFind(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& o : ops) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// A Llama block's mm order is wq, wk, wv, wo, w1, w3, w2: every second one (wk, wo, w3) reruns,
// as do the norms, the activation and the first residual add; flash attention does not, nor
// (the recompute stops once the backward has what it needs) w2 and the last residual add. The
// block keeps its input, the wq, wv, w1 and w2 outputs, the attention output and its fp32
// log-sum-exp.
TEST(TorchOpCheckpointing, RerunsEverySecondMatmulAndKeepsTheRestOfTheSaveList) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = OpSacConfig("--mbs 1 --gbs 8 --seq 2048 --zero 3 --optimizer fsdp --selective-ac-option op");
  ASSERT_TRUE(c.TorchOpCheckpointing());
  EXPECT_EQ(c.recompute, Recompute::kSelective);
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  const double T = 2048, h = 4096, f = 14336, a = 32, g = 8, d = 128, eb = 2;
  const Op* qkv = OpSacFind(cm.layer_ops, "qkv_proj_recompute");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->pass, Pass::kRecompute);
  EXPECT_DOUBLE_EQ(qkv->m, T);
  EXPECT_DOUBLE_EQ(qkv->n, g * d);  // wk alone
  EXPECT_DOUBLE_EQ(qkv->k, h);
  const Op* up = OpSacFind(cm.layer_ops, "mlp_up_recompute");
  ASSERT_NE(up, nullptr);
  EXPECT_DOUBLE_EQ(up->n, f);  // w3, not w1
  ASSERT_NE(OpSacFind(cm.layer_ops, "attn_out_proj_recompute"), nullptr);
  for (const char* n : {"mlp_down_recompute", "flash_attention_recompute", "residual_mlp_recompute"}) {
    EXPECT_EQ(OpSacFind(cm.layer_ops, n), nullptr) << n;
  }
  for (const char* n : {"input_norm_recompute", "post_attn_norm_recompute", "swiglu_recompute", "residual_attn_recompute"}) {
    EXPECT_NE(OpSacFind(cm.layer_ops, n), nullptr) << n;
  }
  const double lse = 4 * T * a;
  const double checkpoint = eb * T * (a * d + g * d + f + h) + lse;  // wq, wv, w1, w2; lse
  EXPECT_NEAR(cm.layer_checkpoint_bytes, checkpoint, 1e-9 * checkpoint);
  // + the block input and the attention output, kept as the ops saved them.
  EXPECT_NEAR(cm.layer_saved_bytes, checkpoint + eb * T * (h + a * d), 1e-9 * checkpoint);

  // Between no recompute and full recompute in time and memory.
  ParallelConfig none = c, full = c;
  none.recompute = Recompute::kNone;
  full.recompute = Recompute::kFull;
  const CostModel cn = BuildCostModel(m, none, cl, prof), cf = BuildCostModel(m, full, cl, prof);
  EXPECT_LT(cf.layer_saved_bytes, cm.layer_saved_bytes);
  EXPECT_LT(cm.layer_saved_bytes, cn.layer_saved_bytes);
  EXPECT_DOUBLE_EQ(cf.layer_checkpoint_bytes, eb * T * h);  // full: the block's input
  EXPECT_DOUBLE_EQ(cn.layer_checkpoint_bytes, 0.0);
  const SimulationResult rn = Simulate(m, none, cl, 8, prof), ro = Simulate(m, c, cl, 8, prof),
                         rf = Simulate(m, full, cl, 8, prof);
  EXPECT_LT(rn.step_time_s, ro.step_time_s);
  EXPECT_LT(ro.step_time_s, rf.step_time_s);
  EXPECT_LT(rf.peak_memory_bytes, ro.peak_memory_bytes);
  EXPECT_LT(ro.peak_memory_bytes, rn.peak_memory_bytes);
  EXPECT_LT(rf.peak_reserved_bytes, ro.peak_reserved_bytes);
  EXPECT_LT(ro.peak_reserved_bytes, rn.peak_reserved_bytes);
}

// torchao's float8 linears reach the policy as aten.mm: the same GEMMs rerun, at the fp8 rate,
// and the kept outputs are 16-bit; the attention output is kept beside its rebuilt cast. Layers
// kept in bf16 (--first-last-layers-bf16) keep theirs as the projection's input.
TEST(TorchOpCheckpointing, Float8LinearsFollowTheSameRule) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const ParallelConfig c = OpSacConfig("--mbs 1 --gbs 8 --seq 2048 --zero 3 --optimizer fsdp --precision fp8 "
                                       "--fp8-recipe tensorwise --selective-ac-option op --first-last-layers-bf16");
  const CostModel cm = BuildCostModel(m, c, cl, DefaultProfile(cl));
  const double T = 2048, h = 4096, f = 14336, a = 32, g = 8, d = 128, eb = 2;
  ASSERT_NE(OpSacFind(cm.layer_ops, "qkv_proj_recompute"), nullptr);
  EXPECT_DOUBLE_EQ(OpSacFind(cm.layer_ops, "qkv_proj_recompute")->n, g * d);
  ASSERT_NE(OpSacFind(cm.layer_ops, "mlp_up_recompute"), nullptr);
  EXPECT_DOUBLE_EQ(OpSacFind(cm.layer_ops, "mlp_up_recompute")->n, f);
  EXPECT_EQ(OpSacFind(cm.layer_ops, "mlp_down_recompute"), nullptr);
  // wo's input cast reruns with it; w2's does not (nothing after the activation is needed).
  EXPECT_NE(OpSacFind(cm.layer_ops, "attn_out_proj_input_quantize_recompute"), nullptr);
  EXPECT_EQ(OpSacFind(cm.layer_ops, "mlp_down_input_quantize_recompute"), nullptr);
  const double kept = eb * T * (a * d + g * d + f + h) + 4 * T * a;
  EXPECT_NEAR(cm.layer_checkpoint_bytes, kept + eb * T * a * d, 1e-9 * kept);
  EXPECT_NEAR(cm.layer_saved_bytes, kept + eb * T * (a * d + h), 1e-9 * kept);
  ASSERT_FALSE(cm.bf16_layer_ops.empty());
  EXPECT_NEAR(cm.bf16_layer_checkpoint_bytes, kept, 1e-9 * kept);
  // The replay holds each kind's own checkpoint: it sees what the engine does.
  const SimulationResult r = Simulate(m, c, cl, 8, DefaultProfile(cl));
  EXPECT_GE(r.peak_reserved_bytes, r.peak_memory_bytes - 1.0);
}

// With tensor and sequence parallelism: the block's input and the two reduce-scatters' outputs
// are sharded over tp, w2's output is the unreduced T x h, the heads and w1 are split over tp.
TEST(TorchOpCheckpointing, SequenceParallelKeepsTheReduceScatterOutputs) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const ParallelConfig c =
      OpSacConfig("--tp 2 --mbs 1 --gbs 4 --seq 2048 --zero 3 --optimizer fsdp --sequence-parallel --selective-ac-option op");
  const CostModel cm = BuildCostModel(m, c, cl, DefaultProfile(cl));
  const double T = 2048, h = 4096, f = 14336, a = 32, g = 8, d = 128, eb = 2, t = 2;
  const double kept = eb * T * (2 * h / t + a * d / t + g * d / t + f / t + h) + 4 * T * a / t;
  EXPECT_NEAR(cm.layer_checkpoint_bytes, kept, 1e-9 * kept);
  EXPECT_NEAR(cm.layer_saved_bytes, kept + eb * T * (h + a * d) / t, 1e-9 * kept);
  // All-gathers rerun, reduce-scatters do not.
  EXPECT_NE(OpSacFind(cm.layer_ops, "sp_all_gather_attn_recompute"), nullptr);
  EXPECT_EQ(OpSacFind(cm.layer_ops, "tp_reduce_scatter_attn_recompute"), nullptr);
}

TEST(TorchOpCheckpointing, RefusedWhereNotModelledAndWrittenBack) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option op --recompute full", "given with --recompute full"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option op --recompute-modules core_attn",
                                    "given with --recompute-modules"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option 2x", "got \"2x\", expected op or a layer frequency"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option op --fine-grained-activation-offloading "
                                           "--offload-modules core_attn",
                                    "given with --selective-ac-option op"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 "
                                    "--selective-ac-option op",
                                    "has mixture-of-experts layers"));
  // A biased linear runs aten.addmm, which the save list neither holds nor counts.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-1.3b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 "
                                    "--selective-ac-option op",
                                    "has biases in its linear layers"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option op --recompute-granularity full",
                                    "given with --recompute-granularity full"));
  const auto run = testing::RunShardcast(base + "--selective-ac-option op --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("\"recompute_modules\": \"op\""), std::string::npos);
  // The torchtitan launch writes the policy as it is; Megatron's says it has none.
  const ParallelConfig c = OpSacConfig("--mbs 1 --gbs 8 --zero 3 --optimizer fsdp --selective-ac-option op");
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  const LaunchConfig titan = EmitLaunch(LaunchFormat::kTorchtitan, m, c, cl, 8);
  EXPECT_NE(titan.text.find("mode = \"selective\"\nselective_ac_option = \"op\""), std::string::npos) << titan.text;
  for (const std::string& u : titan.unexpressed) EXPECT_EQ(u.find("selective recompute"), std::string::npos) << u;
  const LaunchConfig mega = EmitLaunch(LaunchFormat::kMegatron, m, c, cl, 8);
  EXPECT_EQ(mega.text.find("--recompute-granularity"), std::string::npos) << mega.text;
  EXPECT_NE(mega.text.find("Megatron-Core has no per-op policy"), std::string::npos) << mega.text;
}

// torchtitan's logs with selective_ac_option "op" read as the per-op policy for dense models;
// plan --optimizer fsdp searches it as torchtitan's selective recompute.
TEST(TorchOpCheckpointing, TorchtitanLogsAndPlansUseIt) {
  std::string log = ReadTextFile(testing::FixturesDir() + "/logs/torchtitan_llama3_8b_fsdp8.log");
  const std::string full = "\"mode\": \"full\"";
  ASSERT_NE(log.find(full), std::string::npos);
  log.replace(log.find(full), full.size(), "\"mode\": \"selective\",\n[rank0]:    \"selective_ac_option\": \"op\"");
  LogDefaults d;
  d.gpus = 8;
  const LoggedRun r = ParseTrainingLog(log, "t.log", d);
  EXPECT_TRUE(r.config.TorchOpCheckpointing());

  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 8;
  o.global_batch_size = 16;
  o.optimizer_impl = OptimizerImpl::kTorchFsdp;
  o.zero_stages = {3};
  o.fixed["tp"] = "1";
  o.fixed["pp"] = "1";
  std::map<std::string, std::size_t> rej;
  bool op = false;
  for (const ParallelConfig& c : GenerateCandidates(m, cl, o, &rej)) {
    EXPECT_TRUE(c.recompute != Recompute::kSelective || c.TorchOpCheckpointing()) << c.Summary();
    op = op || c.TorchOpCheckpointing();
  }
  EXPECT_TRUE(op);
  // MoE models: not modelled, said so.
  std::map<std::string, std::size_t> rm;
  GenerateCandidates(LoadModel("mixtral-8x7b"), cl, o, &rm);
  EXPECT_GT(rm["(recompute) choices: with --optimizer fsdp selective recompute is torchtitan's per-op checkpointing, "
               "modelled for dense layers with MHA/GQA attention and unbiased linear layers"],
            0u);
  // With nothing generated, plan says so rather than "nothing fits".
  const auto none = testing::RunShardcast("plan --model mixtral-8x7b --cluster dgx-h100 --gpus 8 --gbs 16 --optimizer fsdp "
                                          "--recompute selective");
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("No candidate was generated: every choice is under \"Not generated\"."), std::string::npos)
      << none.out;
}

// PyTorch's scaled-dot-product attention runs FlashAttention-2's kernels: --optimizer fsdp on
// Hopper takes FA2's rates over the built-in profile's FA3 (unless --attention-kernel says), and
// PyTorch's loss unless --cross-entropy says.
TEST(TorchFsdp, AttendsWithPyTorchsFlashKernelAndItsLoss) {
  const Cluster h100 = LoadCluster("dgx-h100");
  const HardwareProfile fa2 = WithPyTorchAttention(DefaultProfile(h100), "hopper");
  EXPECT_EQ(fa2.attention_kernel, "fa2");
  EXPECT_DOUBLE_EQ(fa2.attention_fwd_efficiency, WithAttentionKernel(DefaultProfile(h100), "hopper", "fa2").attention_fwd_efficiency);
  const HardwareProfile a100 = DefaultProfile(LoadCluster("dgx-a100"));
  EXPECT_EQ(WithPyTorchAttention(a100, "ampere").attention_fwd_efficiency, a100.attention_fwd_efficiency);
  HardwareProfile measured = DefaultProfile(h100);
  measured.kind = "measured";
  EXPECT_EQ(WithPyTorchAttention(measured, "hopper").attention_kernel, "default");
  const std::string base = "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 --zero 3 ";
  const auto fsdp = testing::RunShardcast(base + "--optimizer fsdp");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.err;
  EXPECT_NE(fsdp.out.find("PyTorch's SDPA flash kernel under --optimizer fsdp"), std::string::npos) << fsdp.out;
  EXPECT_NE(fsdp.out.find("ce=torch"), std::string::npos) << fsdp.out;
  const auto fa3 = testing::RunShardcast(base + "--optimizer fsdp --attention-kernel fa3 --cross-entropy native");
  ASSERT_EQ(fa3.exit_code, 0) << fa3.err;
  EXPECT_EQ(fa3.out.find("FlashAttention-2"), std::string::npos) << fa3.out;
  EXPECT_EQ(fa3.out.find("ce=torch"), std::string::npos) << fa3.out;
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--selective-ac-option op --recompute none", "given with --recompute none"));
}

// plan --fp8-param-gather searches the stages that gather sharded parameters, and says why the
// others are not; the torchtitan launch of such a plan writes the FP8 all-gather with its
// precomputed scales and torchtitan's own flavor name.
TEST(TorchFsdp, Fp8AllGatherPlansAndTheirLaunch) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h200");
  PlanOptions o;
  o.gpus = 32;
  o.global_batch_size = 64;
  o.optimizer_impl = OptimizerImpl::kTorchFsdp;
  o.zero_stages = {0, 1, 3};
  o.base.precision = Precision::kFp8;
  o.base.fp8_recipe = Fp8Recipe::kTensorwise;
  o.base.fp8_param_gather = true;
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  ASSERT_FALSE(cands.empty());
  for (const ParallelConfig& c : cands) EXPECT_GE(c.zero_stage, 1) << c.Summary();
  EXPECT_GT(rej["(dp, ZeRO) choices: --fp8-param-gather gathers sharded parameters (ZeRO 1 or more)"], 0u);
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model llama3-8b --cluster dgx-h200 --gpus 32 --gbs 64 --optimizer fsdp "
                                    "--precision fp8 --fp8-recipe tensorwise --fp8-param-gather --zero-stages 0",
                                    "given with --zero-stages 0 only"));
  const ParallelConfig c = OpSacConfig("--mbs 2 --gbs 64 --zero 3 --optimizer fsdp --precision fp8 --fp8-recipe tensorwise "
                                       "--fp8-param-gather --selective-ac-option op",
                                       32);
  const LaunchConfig l = EmitLaunch(LaunchFormat::kTorchtitan, m, c, cl, 32);
  EXPECT_NE(l.text.find("flavor = \"8B\""), std::string::npos) << l.text;
  EXPECT_NE(l.text.find("enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true"),
            std::string::npos)
      << l.text;
  for (const std::string& u : l.unexpressed) EXPECT_EQ(u.find("the model's shape"), std::string::npos) << u;
  // A shape torchtitan has no flavor for keeps its name, and says so.
  Model other = m;
  other.num_layers = 30;
  const LaunchConfig lo = EmitLaunch(LaunchFormat::kTorchtitan, other, c, cl, 32);
  EXPECT_NE(lo.text.find("flavor = \"" + other.name + "\""), std::string::npos);
}

// simulate's flags for a configuration (the plans' and validate's "the same from simulate"
// commands) give it back, with --optimizer fsdp's defaults in play: an unfused loss is written
// (fsdp defaults to PyTorch's), and so is the per-op policy.
TEST(TorchFsdp, SimulateFlagsGiveTheConfigurationBack) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  for (const char* flags : {"--mbs 1 --gbs 8 --zero 3 --optimizer fsdp --cross-entropy unfused",
                            "--mbs 1 --gbs 8 --zero 3 --optimizer fsdp --selective-ac-option op",
                            "--mbs 2 --gbs 16 --zero 3 --optimizer fsdp --precision fp8 --fp8-recipe tensorwise "
                            "--fp8-param-gather --selective-ac-option op --cross-entropy native"}) {
    const ParallelConfig c = OpSacConfig(flags);
    std::vector<std::string> unexpressed;
    const std::string written = cli::SimulateFlags(c, m, 8, &unexpressed);
    EXPECT_TRUE(unexpressed.empty()) << flags;
    CLI::App app;
    cli::SimulateArgs a;
    cli::AddConfigOptions(&app, &a);
    app.parse(written, false);
    const ParallelConfig back = cli::BuildConfig(a, m, 8);
    EXPECT_EQ(ResultToJson(SimulationResult{}, m, back, cl, 8)["config"], ResultToJson(SimulationResult{}, m, c, cl, 8)["config"])
        << flags << " -> " << written;
  }
}

}  // namespace
}  // namespace shardcast
