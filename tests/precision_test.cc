// Issue 15: low-precision training (FP8, MXFP8, NVFP4, TF32) and TP communication overlap.
// Expected values are derived here from the formulas of docs/simulator.md ("Precisions").
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "models/loader.h"
#include "simulator/cost_model.h"
#include "simulator/precision.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

Model Llama8Layers() {
  return ModelFromJson(Json::parse(R"({"name": "llama-8l", "num_layers": 8, "hidden_size": 4096,
    "ffn_hidden_size": 14336, "num_attention_heads": 32, "num_query_groups": 8, "vocab_size": 128256,
    "seq_length": 4096, "normalization": "rmsnorm", "activation": "swiglu", "position_embedding": "rope",
    "tie_embeddings": false, "add_bias_linear": false, "dropout": false, "source": "test"})"),
                       "llama-8l.json");
}

ParallelConfig Tp4(Precision p) {
  ParallelConfig c;
  c.tp = 4;
  c.pp = 2;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 8;
  c.sequence_parallel = true;
  c.precision = p;
  return c;
}

const Op& Find(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& o : ops) {
    if (o.name == name) return o;
  }
  ADD_FAILURE() << "no op " << name;
  return ops.front();
}

// An FP8 GEMM runs at the profile's FP8 rate: its dense peak times its maximum efficiency (the
// H100's FP8 MAMF fraction 1402.6 / 1978.9 times the same sustained ratio as bf16) times the
// shared shape factor g(F).
TEST(Precision, Fp8GemmRunsAtTheFp8Rate) {
  const HardwareProfile p = DefaultProfile(LoadCluster("dgx-h100"));
  const auto fp8 = p.GemmRateOf(Precision::kFp8);
  ASSERT_TRUE(fp8.has_value());
  EXPECT_DOUBLE_EQ(fp8->peak_tflops, 1978.9);
  EXPECT_NEAR(fp8->max_efficiency / p.gemm_max_efficiency, (1402.6 / 1978.9) / (794.5 / 989.4), 1e-12);
  const double m = 8192, n = 8192, k = 8192, flops = 2 * m * n * k;
  const double g = InterpolateLogX(p.gemm_efficiency_vs_gflop, flops / 1e9);
  EXPECT_NEAR(GemmTime(p, m, n, k, 1, Precision::kFp8, 1, 2),
              flops / (1978.9e12 * fp8->max_efficiency * g) + p.launch_overhead_s, 1e-15);
  // bf16 and fp16 use the base rate.
  EXPECT_NEAR(GemmTime(p, m, n, k), flops / (989.4e12 * p.gemm_max_efficiency * g) + p.launch_overhead_s, 1e-15);
  // No rate for a precision the profile lacks: an input error naming it.
  const HardwareProfile a100 = DefaultProfile(LoadCluster("dgx-a100"));
  EXPECT_THROW(GemmTime(a100, m, n, k, 1, Precision::kFp8, 1, 2), InputError);
}

// The linear layers' GEMMs run in FP8; attention, the output layer and the norms stay 16-bit.
// Each cast reads the 16-bit tensor and writes the FP8 copy and (Hopper) its transpose.
TEST(Precision, LinearLayersRunInFp8WithTheirCasts) {
  const Model m = Llama8Layers();
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile p = DefaultProfile(cl);
  const CostModel bf = BuildCostModel(m, Tp4(Precision::kBf16), cl, p);
  const CostModel f8 = BuildCostModel(m, Tp4(Precision::kFp8), cl, p);
  const double T = 4096, h = 4096, t = 4;
  const double qkv_n = (32 + 2 * 8) * 128 / t;
  for (const char* name : {"qkv_proj", "attn_out_proj", "mlp_up", "mlp_down", "attn_out_proj_wgrad", "mlp_down_dgrad"}) {
    const Op& a = Find(bf.layer_ops, name);
    const Op& b = Find(f8.layer_ops, name);
    EXPECT_DOUBLE_EQ(b.flops, a.flops) << name;
    EXPECT_NEAR(b.duration_s, GemmTime(p, b.m, b.n, b.k, 1, Precision::kFp8, 1, 2), 1e-15) << name;
    EXPECT_LT(b.duration_s, a.duration_s) << name;
  }
  EXPECT_DOUBLE_EQ(Find(f8.layer_ops, "flash_attention").duration_s, Find(bf.layer_ops, "flash_attention").duration_s);
  EXPECT_DOUBLE_EQ(Find(f8.output_ops, "output_proj").duration_s, Find(bf.output_ops, "output_proj").duration_s);
  // Casts: with sequence parallelism the gathered QKV input (T x h) is cast after the gather;
  // the QKV output gradient (T x qkv_n) before the data-gradient GEMM. Read 2 + write 1 + 1.
  EXPECT_DOUBLE_EQ(Find(f8.layer_ops, "qkv_proj_input_quantize").bytes, T * h * (2 + 2));
  EXPECT_DOUBLE_EQ(Find(f8.layer_ops, "qkv_proj_grad_quantize").bytes, T * qkv_n * (2 + 2));
  EXPECT_DOUBLE_EQ(Find(f8.layer_ops, "mlp_down_input_quantize").bytes, T * 14336 / t * (2 + 2));
  for (const Op& o : bf.layer_ops) EXPECT_EQ(o.name.find("quantize"), std::string::npos) << o.name;
  // The QKV input is saved as its FP8 copy: half the 16-bit bytes (sharded by SP).
  EXPECT_DOUBLE_EQ(Find(f8.layer_ops, "qkv_proj").saved_bytes, 1 * T * h / t);
  EXPECT_DOUBLE_EQ(Find(bf.layer_ops, "qkv_proj").saved_bytes, 2 * T * h / t);
}

// Memory: FP8 weight copies of the linear layers' (sharded) parameters, 1 byte each plus the
// transpose on Hopper, 1 byte on Blackwell (any layout); --fp8-param-gather replaces the 16-bit
// weight with them; delayed scaling keeps 4 GEMMs x 3 tensors x (history + 2) fp32 values a layer.
TEST(Precision, Fp8WeightCopiesAndScalingState) {
  const Model m = Llama8Layers();
  const double sharded = static_cast<double>(m.Parameters().per_layer.sharded) / 4;
  for (const char* cluster : {"dgx-h100", "dgx-b200"}) {
    const Cluster cl = LoadCluster(cluster);
    const HardwareProfile p = DefaultProfile(cl);
    ParallelConfig c = Tp4(Precision::kFp8);
    c.zero_stage = 1;
    c.dp = 2;
    c.global_batch_size = 16;
    const CostModel bf_cm = BuildCostModel(m, Tp4(Precision::kBf16), cl, p);
    const CostModel cm = BuildCostModel(m, c, cl, p);
    const double copies = cl.gpu.arch == "hopper" ? 2.0 : 1.0;
    const double layers = 4;  // per stage
    const double scaling = layers * 4 * 3 * 4.0 * (1024 + 2);
    const double extra = StaticStageMemory(cm, c, p, 0).weights_bytes -
                         StaticStageMemory(bf_cm, Tp4(Precision::kBf16), p, 0).weights_bytes;
    EXPECT_NEAR(extra, layers * sharded * copies + scaling, 1e-3) << cluster;
    EXPECT_NEAR(StaticStageMemory(cm, c, p, 0).quantized_weights_bytes, extra, 1e-3) << cluster;
    c.fp8_param_gather = true;
    const CostModel pg = BuildCostModel(m, c, cl, p);
    // The copies replace the 16-bit weights: the weights change by copies - 2 bytes a parameter,
    // of which the copies are still the whole copies' bytes (never negative).
    EXPECT_NEAR(StaticStageMemory(pg, c, p, 0).weights_bytes -
                    StaticStageMemory(bf_cm, Tp4(Precision::kBf16), p, 0).weights_bytes,
                layers * sharded * (copies - 2) + scaling, 1e-3)
        << cluster;
    EXPECT_NEAR(StaticStageMemory(pg, c, p, 0).quantized_weights_bytes, layers * sharded * copies + scaling, 1e-3)
        << cluster;
    EXPECT_DOUBLE_EQ(ParamGatherBytesPerParam(c, LinearFormatOf(c, cl.gpu.arch)), 1.0);
  }
}

// Under PyTorch FSDP (--optimizer fsdp: torchtitan's float8 through torchao) no quantized copy
// of the weights is kept: Float8Linear casts the weight in each pass and frees the cast, and the
// FP8 all-gather casts the fp32 shard. The weights are as in bf16, with or without it.
TEST(Precision, TorchFsdpKeepsNoQuantizedWeightCopies) {
  const Model m = Llama8Layers();
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile p = DefaultProfile(cl);
  ParallelConfig bf;
  bf.dp = 8;
  bf.micro_batch_size = 1;
  bf.global_batch_size = 8;
  bf.zero_stage = 3;
  bf.optimizer_impl = OptimizerImpl::kTorchFsdp;
  ParallelConfig f8 = bf;
  f8.precision = Precision::kFp8;
  f8.fp8_recipe = Fp8Recipe::kTensorwise;
  const double weights = StaticStageMemory(BuildCostModel(m, bf, cl, p), bf, p, 0).weights_bytes;
  EXPECT_DOUBLE_EQ(weights, static_cast<double>(m.Parameters().total) * 4 / 8);  // the fp32 shard
  for (bool gather : {false, true}) {
    f8.fp8_param_gather = gather;
    const StageMemory s = StaticStageMemory(BuildCostModel(m, f8, cl, p), f8, p, 0);
    EXPECT_DOUBLE_EQ(s.weights_bytes, weights) << gather;
    EXPECT_DOUBLE_EQ(s.quantized_weights_bytes, 0.0) << gather;
  }
  // Megatron's optimizer (Transformer Engine's cached copies) keeps them.
  f8.optimizer_impl = OptimizerImpl::kMegatron;
  f8.fp8_param_gather = false;
  EXPECT_GT(StaticStageMemory(BuildCostModel(m, f8, cl, p), f8, p, 0).quantized_weights_bytes, 0.0);
}

// MXFP8 and NVFP4 carry block scales and always a second (column-wise) copy.
TEST(Precision, BlockScaledFormats) {
  ParallelConfig c;
  c.precision = Precision::kMxfp8;
  LinearFormat f = LinearFormatOf(c, "blackwell");
  EXPECT_DOUBLE_EQ(f.CastWriteBytes(), 2 * (1 + 1.0 / 32));
  c.precision = Precision::kNvfp4;
  f = LinearFormatOf(c, "blackwell");
  EXPECT_DOUBLE_EQ(f.CastWriteBytes(), 2 * (0.5 + 1.0 / 16));
  c.precision = Precision::kFp8;
  c.fp8_recipe = Fp8Recipe::kBlockwise;
  EXPECT_DOUBLE_EQ(LinearFormatOf(c, "hopper").CastWriteBytes(), 2 * (1 + 4.0 / 128));
  c.fp8_recipe = Fp8Recipe::kTensorwise;
  EXPECT_DOUBLE_EQ(LinearFormatOf(c, "hopper").CastWriteBytes(), 2.0);
  EXPECT_DOUBLE_EQ(LinearFormatOf(c, "blackwell").CastWriteBytes(), 1.0);
}

// A GPU without the precision exits 2 naming the GPU and what it runs.
TEST(Precision, UnsupportedPrecisionNamesTheGpu) {
  ParallelConfig c;
  c.precision = Precision::kFp8;
  try {
    RequirePrecision(LoadGpu("a100-sxm4-80gb"), c, "command line");
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("precision fp8 is not supported by the NVIDIA A100-SXM4-80GB"), std::string::npos) << w;
    EXPECT_NE(w.find("bf16 312"), std::string::npos) << w;
  }
  c.precision = Precision::kNvfp4;
  EXPECT_THROW(RequirePrecision(LoadGpu("h100-sxm"), c, "x"), InputError);
  EXPECT_NO_THROW(RequirePrecision(LoadGpu("b200"), c, "x"));
  c.precision = Precision::kBf16;
  EXPECT_THROW(RequirePrecision(LoadGpu("v100-sxm2-32gb"), c, "x"), InputError);
  c.precision = Precision::kFp16;
  EXPECT_NO_THROW(RequirePrecision(LoadGpu("v100-sxm2-32gb"), c, "x"));
  const auto r = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-a100 --gpus 8 --precision fp8");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("a100-sxm4-80gb"), std::string::npos) << r.err;
  const auto both = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-b200 --gpus 8 --fp16 --fp8-recipe mxfp8");
  EXPECT_EQ(both.exit_code, 2) << both.err;
}

// TP communication overlap, worked by hand: a GEMM of g = n * GemmTime(m/n) and a collective of
// c pipeline as (n - 1) * max(g/n, c/(n - 1)) + g/n; the collective keeps what is left beyond g.
TEST(Precision, TpCommOverlapExposesWhatTheChunkedPipelineCannotHide) {
  const Model m = Llama8Layers();
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile p = DefaultProfile(cl);
  ParallelConfig c = Tp4(Precision::kBf16);
  const CostModel plain = BuildCostModel(m, c, cl, p);
  c.tp_comm_overlap = true;
  const CostModel ov = BuildCostModel(m, c, cl, p);
  const double n = 4;
  for (const auto& [coll, gemm] : std::vector<std::pair<std::string, std::string>>{
           {"sp_all_gather_attn", "qkv_proj"}, {"tp_reduce_scatter_mlp", "mlp_down"},
           {"sp_all_gather_mlp_bwd", "mlp_down_dgrad"}}) {
    const Op& g0 = Find(plain.layer_ops, gemm);
    const double g = n * GemmTime(p, g0.m / n, g0.n, g0.k);
    const double cc = Find(plain.layer_ops, coll).duration_s;
    const double exposed = std::max(0.0, (n - 1) * std::max(g / n, cc / (n - 1)) + g / n - g);
    EXPECT_NEAR(Find(ov.layer_ops, coll).duration_s, exposed, 1e-15) << coll;
    EXPECT_NEAR(Find(ov.layer_ops, coll).hidden_s, cc - exposed, 1e-15) << coll;
    EXPECT_NEAR(Find(ov.layer_ops, gemm).duration_s, g + p.overlap_slowdown_nvlink * (cc - exposed), 1e-15) << gemm;
  }
  // Without sequence parallelism there is nothing to overlap: a reason, not a crash.
  c.sequence_parallel = false;
  EXPECT_FALSE(InfeasibilityReasons(m, c, 8, cl).empty());
}

// MFU divides by the 16-bit peak under a low-precision format.
TEST(Precision, MfuUsesTheBf16Peak) {
  const Model m = Llama8Layers();
  const Cluster cl = LoadCluster("dgx-h100");
  const ParallelConfig c = Tp4(Precision::kFp8);
  const SimulationResult r = Simulate(m, c, cl, 8, DefaultProfile(cl));
  ASSERT_TRUE(r.feasible);
  EXPECT_NEAR(r.mfu, r.model_flops_per_step / (r.step_time_s * 989.4e12 * 8), 1e-12);
  const SimulationResult b = Simulate(m, Tp4(Precision::kBf16), cl, 8, DefaultProfile(cl));
  EXPECT_LT(r.step_time_s, b.step_time_s);
}

// The plan of issue 15: Llama-3-70B on 64 H100 at seq 8192, gbs 512, FP8: the search includes
// TP communication overlap and the Megatron arguments carry the precision.
TEST(Precision, PlanSearchesTpCommOverlapInFp8) {
  const auto r = testing::RunShardcast(
      "plan --model llama3-70b --cluster dgx-h100 --gpus 64 --seq 8192 --gbs 512 --precision fp8 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--fp8-format hybrid --fp8-recipe delayed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" y+o "), std::string::npos) << r.out;  // overlap candidates ranked
  EXPECT_NE(r.out.find("--tp-comm-overlap"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

// Flags that would change nothing, or break their own rule, are refused rather than ignored.
TEST(Precision, FlagsThatWouldChangeNothingAreRefused) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--precision fp8 --num-layers-at-start-in-bf16 3",
                                    "given without --first-last-layers-bf16"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--precision fp8 --first-last-layers-bf16 --num-layers-at-start-in-bf16 40",
                                    "got 40 + 1, expected at most num_layers = 32 in all"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--precision fp8 --fp8-recipe tensorwise --fp8-amax-history-len 16",
                                    "--fp8-amax-history-len: given with precision fp8 and the tensorwise recipe"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--precision tf32",
                                    "--precision tf32: flash attention takes 16-bit inputs, so tf32 training runs "
                                    "attention unfused; expected --no-flash-attention as well"));
  EXPECT_EQ(testing::RunShardcast(base + "--precision tf32 --no-flash-attention").exit_code, 0);
  EXPECT_EQ(testing::RunShardcast(base + "--precision fp8 --fp8-amax-history-len 16").exit_code, 0);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--moe-token-dispatcher-type flex",
                                    "--moe-token-dispatcher-type: given for llama3-8b, which has no routed experts"));
  // Below 1 every expert drops tokens: Megatron-LM accepts any positive factor.
  EXPECT_EQ(testing::RunShardcast("simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 8 --ep 8 --mbs 1 --gbs 8 "
                                  "--zero 1 --moe-expert-capacity-factor 0.5")
                .exit_code,
            0);
}

// fp32 and tf32 training keep fp32 weights and gradients beside Adam's m and v, with no master
// copy: 4 + 4 + 8 bytes per parameter, sharded by the ZeRO stage; ZeRO-1 gathers 4-byte weights.
TEST(Precision, Fp32TrainingStateIsSixteenBytesAParameter) {
  for (const Precision p : {Precision::kFp32, Precision::kTf32}) {
    ParallelConfig c;
    c.precision = p;
    c.dp = 8;
    const StateBytesPerParam z0 = BytesPerParam(c);
    EXPECT_DOUBLE_EQ(z0.weights, 4.0);
    EXPECT_DOUBLE_EQ(z0.grads, 4.0);
    EXPECT_DOUBLE_EQ(z0.optimizer, 8.0);
    c.zero_stage = 1;
    EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 4.0 + 4.0 + 8.0 / 8);
    c.zero_stage = 3;
    EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 16.0 / 8);
    EXPECT_DOUBLE_EQ(ParamGatherBytesPerParam(c, LinearFormatOf(c, "hopper")), 4.0);
  }
  // The optimizer step over a shard: norm 4 + Adam 28 B a parameter, no copy to 16-bit weights
  // (bf16: + 6); zeroing the gradients adds their bytes over all local parameters.
  ParallelConfig fp32;
  fp32.precision = Precision::kFp32;
  ParallelConfig bf16;
  EXPECT_DOUBLE_EQ(OptimizerBytes(fp32, 1000), 1000 * (32.0 + 4.0));
  EXPECT_DOUBLE_EQ(OptimizerBytes(bf16, 1000), 1000 * (38.0 + 4.0));
  // PyTorch FSDP's Adam updates the fp32 shard in place: no copy either, bf16 compute or not;
  // zero_grad sets the gradients to None instead of zeroing them.
  ParallelConfig fsdp;
  fsdp.optimizer_impl = OptimizerImpl::kTorchFsdp;
  EXPECT_DOUBLE_EQ(OptimizerBytes(fsdp, 1000), 1000 * 32.0);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-125m --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 --precision "
                                    "fp32 --no-flash-attention --optimizer deepspeed-zero --zero 1",
                                    "--optimizer deepspeed-zero: got it with precision fp32"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-125m --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 --precision "
                                    "fp32 --no-flash-attention --bf16-main-grads",
                                    "--bf16-main-grads: got it with precision fp32"));
  EXPECT_DOUBLE_EQ(BytesPerParam(bf16).total(), 18.0);  // 2 + 4 + 12
  EXPECT_DOUBLE_EQ(ParamGatherBytesPerParam(bf16, LinearFormatOf(bf16, "hopper")), 2.0);
}

// --fp8-format is kept as given under mxfp8 too (Transformer Engine's MXFP8 recipe takes
// hybrid), e4m3 where it is not given; fp16 beside a low-precision format is refused as not
// modelled; the JSON gives FP4's half byte per element (not rounded as a byte count).
TEST(Precision, Fp8FormatAndFp16AreSaidAsGiven) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-b200 --gpus 8 --mbs 1 --gbs 8 ";
  const auto hybrid = testing::RunShardcast(base + "--precision mxfp8 --fp8-format hybrid --emit megatron");
  ASSERT_EQ(hybrid.exit_code, 0) << hybrid.err;
  EXPECT_NE(hybrid.out.find("--fp8-format hybrid --fp8-recipe mxfp8"), std::string::npos) << hybrid.out;
  const auto dflt = testing::RunShardcast(base + "--fp8-recipe mxfp8 --emit megatron");
  EXPECT_NE(dflt.out.find("--fp8-format e4m3 --fp8-recipe mxfp8"), std::string::npos) << dflt.out;
  ParallelConfig c;
  c.precision = Precision::kMxfp8;
  EXPECT_STREQ(c.Fp8FormatName(), "e4m3");
  c.precision = Precision::kFp8;
  EXPECT_STREQ(c.Fp8FormatName(), "hybrid");
  c.fp8_format = Fp8Format::kE4m3;
  EXPECT_STREQ(c.Fp8FormatName(), "e4m3");
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--fp16 --fp8-format hybrid",
                                    "--fp16: given with --fp8-format hybrid, expected --bf16 or neither"));
  const auto fp4 = testing::RunShardcast(base + "--precision nvfp4 --json");
  ASSERT_EQ(fp4.exit_code, 0) << fp4.err;
  const Json lp = Json::parse(fp4.out)["config"]["low_precision"];
  EXPECT_DOUBLE_EQ(lp["bytes_per_element"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(lp["scale_bytes_per_element"].get<double>(), 1.0 / 16);
  EXPECT_NE(testing::RunShardcast("simulate --model llama3-8b --cluster gb200-nvl72 --gpus 8 --mbs 1 --gbs 8 "
                                  "--precision nvfp4")
                .out.find("(dense peak 10000 TFLOP/s)"),
            std::string::npos);
}

// NCCL's NVLS all-reduce inside an H100 NVSwitch node: 480 of 450 GB/s line where rings reach
// 370; reduce-scatter, all-gather and A100 nodes keep the ring rate.
TEST(Framework, NvlsAllReduceInsideNvSwitchNodes) {
  const HardwareProfile h100 = DefaultProfile(LoadCluster("dgx-h100"));
  EXPECT_DOUBLE_EQ(h100.nvls_allreduce_busbw_GBps, 480.0);
  GroupPlacement g;
  g.ranks = 8;
  g.ranks_per_node = 8;
  EXPECT_DOUBLE_EQ(CollectiveCostOf(h100, CollectiveOp::kAllReduce, 1 << 28, g).link_GBps, 480.0);
  EXPECT_DOUBLE_EQ(CollectiveCostOf(h100, CollectiveOp::kReduceScatter, 1 << 28, g).link_GBps, h100.intra_busbw_GBps);
  EXPECT_DOUBLE_EQ(DefaultProfile(LoadCluster("dgx-a100")).nvls_allreduce_busbw_GBps, 0.0);
}

// Megatron-Core's pipeline behaviour is the CLI's default; megatron-2022 keeps the older one.
TEST(Framework, MegatronCoreDefaultsAndTheirFlags) {
  ParallelConfig c;
  c.pp = 4;
  c.schedule = Schedule::k1F1B;
  ApplyMegatronCoreDefaults(&c);
  EXPECT_FALSE(c.scatter_gather);
  EXPECT_TRUE(c.p2p_blocking);
  c.schedule = Schedule::kInterleaved;
  ApplyMegatronCoreDefaults(&c);
  EXPECT_FALSE(c.p2p_blocking);
  const std::string base = "simulate --model gpt3-13b --cluster dgx-h100 --gpus 32 --tp 4 --pp 2 --mbs 1 --gbs 64 --json";
  const auto core = testing::RunShardcast(base);
  const auto old = testing::RunShardcast(base + " --framework megatron-2022");
  ASSERT_EQ(core.exit_code, 0) << core.err;
  ASSERT_EQ(old.exit_code, 0) << old.err;
  const Json jc = Json::parse(core.out), jo = Json::parse(old.out);
  EXPECT_FALSE(jc["config"]["scatter_gather"].get<bool>());
  EXPECT_TRUE(jc["config"]["p2p_blocking"].get<bool>());
  EXPECT_TRUE(jo["config"]["scatter_gather"].get<bool>());
  EXPECT_FALSE(jo["config"]["p2p_blocking"].get<bool>());
}

}  // namespace
}  // namespace shardcast
