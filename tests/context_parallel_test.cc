// Issue 16: context parallelism, uneven pipeline splits and the long-sequence FLOP conventions.
// Expected values are derived here from the formulas of docs/simulator.md ("Context
// parallelism", "Pipeline splits").
#include <set>

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "common/error.h"
#include "models/loader.h"
#include "planner/planner.h"
#include "report/megatron_args.h"
#include "simulator/cost_model.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

/// Llama-3-8B's shape with 8 layers (GQA: 32 heads, 8 query groups, head dim 128).
Model Llama8Layers(std::int64_t seq) {
  Json j = Json::parse(R"({"name": "llama-8l", "num_layers": 8, "hidden_size": 4096,
    "ffn_hidden_size": 14336, "num_attention_heads": 32, "num_query_groups": 8, "vocab_size": 128256,
    "seq_length": 4096, "normalization": "rmsnorm", "activation": "swiglu", "position_embedding": "rope",
    "tie_embeddings": false, "add_bias_linear": false, "dropout": false, "source": "test"})");
  j["seq_length"] = seq;
  return ModelFromJson(j, "llama-8l.json");
}

ParallelConfig CpConfig(std::int64_t tp, std::int64_t cp, std::int64_t seq, CpComm comm = CpComm::kP2P) {
  ParallelConfig c;
  c.tp = tp;
  c.cp = cp;
  c.pp = 1;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 4;
  c.seq_length = seq;
  c.sequence_parallel = tp > 1;
  c.cp_comm = comm;
  return c;
}

const Op* FindCpOp(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& o : ops) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// ---- context parallelism: attention FLOPs, exchanged bytes, exposed time ----------------------

// Load balancing gives every rank 1/cp of the causal FLOPs, 0.5 * 4 * b * s^2 * a * d / (t * cp)
// forward and 2.5x that backward; the cp ranks together run what one rank runs without cp.
TEST(ContextParallel, AttentionFlopsPerRankWithLoadBalancing) {
  const std::int64_t s = 32768;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const double whole = 0.5 * 4 * 1.0 * s * s * 32 * 128 / 2;  // b 1, a 32, d 128, t 2
  for (std::int64_t cp : {1, 2, 4, 8}) {
    const CostModel cm = BuildCostModel(m, CpConfig(2, cp, s), cl, prof);
    const Op* f = FindCpOp(cm.layer_ops, "flash_attention");
    const Op* b = FindCpOp(cm.layer_ops, "flash_attention_bwd");
    ASSERT_TRUE(f && b) << cp;
    EXPECT_DOUBLE_EQ(f->flops, whole / cp) << cp;
    EXPECT_DOUBLE_EQ(b->flops, 2.5 * whole / cp) << cp;
    EXPECT_DOUBLE_EQ(cm.tokens_per_microbatch, static_cast<double>(s) / cp);
  }
}

// The ring passes each rank's K/V block on cp - 1 times in the forward, K/V with their gradients
// (twice the bytes) in the backward. A block is 2 (K and V) x eb x (b*s/cp) tokens x g/t groups x d:
// GQA's 8 groups make it 4x smaller than 32 heads would.
TEST(ContextParallel, RingExchangeBytesPerLayer) {
  const std::int64_t s = 65536, cp = 8, t = 2;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  const CostModel cm = BuildCostModel(m, CpConfig(t, cp, s), cl, DefaultProfile(cl));
  const double block = 2.0 * 2 * (1.0 * s / cp) * (8.0 / t) * 128;
  const Op* f = FindCpOp(cm.layer_ops, "cp_ring_kv_exchange");
  const Op* b = FindCpOp(cm.layer_ops, "cp_ring_kv_exchange_bwd");
  ASSERT_TRUE(f && b);
  EXPECT_DOUBLE_EQ(f->bytes, (cp - 1) * block);
  EXPECT_DOUBLE_EQ(b->bytes, (cp - 1) * 2 * block);
  EXPECT_TRUE(f->context_parallel && b->context_parallel);
  EXPECT_EQ(cm.cp.ring, cp);
  EXPECT_FALSE(cm.cp.ring_same_node);  // tp * cp = 16 ranks span two 8-GPU nodes
}

// While step k's attention runs, step k+1's block moves: a transfer longer than a step's attention
// leaves (cp - 1) * (transfer - step) exposed; a shorter one hides entirely.
TEST(ContextParallel, ExposedWhenTheTransferIsLongerThanTheBlocksAttention) {
  const std::int64_t s = 16384, cp = 4, t = 1;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  for (double p2p_GBps : {450.0, 0.5}) {
    HardwareProfile prof = DefaultProfile(cl);
    prof.p2p_intra_GBps = p2p_GBps;
    const CostModel cm = BuildCostModel(m, CpConfig(t, cp, s), cl, prof);
    const double flops = 0.5 * 4 * 1.0 * s * s * 32 * 128 / t / cp;
    const double step = AttentionTime(prof, flops / cp, static_cast<double>(s) / cp, false);
    const double block = 2.0 * 2 * (1.0 * s / cp) * 8 * 128;
    const double xfer = P2PCostOf(prof, block, true).time_s();
    const Op* attn = FindCpOp(cm.layer_ops, "flash_attention");
    const Op* ex = FindCpOp(cm.layer_ops, "cp_ring_kv_exchange");
    ASSERT_TRUE(attn && ex);
    EXPECT_NEAR(attn->duration_s, cp * step, 1e-15);
    EXPECT_NEAR(ex->duration_s, (cp - 1) * std::max(0.0, xfer - step), 1e-15) << p2p_GBps;
    EXPECT_NEAR(ex->duration_s + ex->hidden_s, (cp - 1) * xfer, 1e-15) << p2p_GBps;
    if (p2p_GBps < 1) {
      EXPECT_GT(ex->duration_s, 0.0);
    } else {
      EXPECT_EQ(ex->duration_s, 0.0);
    }
  }
}

// all-gather: the whole sequence's K/V gathered (exposed) before attention and again in the
// backward, their gradients reduce-scattered; a2a: Q, K, V and O exchanged in all-to-alls of the
// local tokens' bytes, attention over the whole sequence on a/cp heads.
TEST(ContextParallel, AllGatherAndAllToAllMoveTheirBytes) {
  const std::int64_t s = 32768, cp = 4, t = 1;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const double local = 1.0 * s / cp, kv = 2.0 * 2 * local * 8 * 128;
  const CostModel ag = BuildCostModel(m, CpConfig(t, cp, s, CpComm::kAllGather), cl, prof);
  ASSERT_TRUE(FindCpOp(ag.layer_ops, "cp_all_gather_kv") && FindCpOp(ag.layer_ops, "cp_reduce_scatter_kv_grad"));
  EXPECT_DOUBLE_EQ(FindCpOp(ag.layer_ops, "cp_all_gather_kv")->bytes, kv * cp);
  EXPECT_DOUBLE_EQ(FindCpOp(ag.layer_ops, "cp_reduce_scatter_kv_grad")->bytes, kv * cp);
  EXPECT_EQ(FindCpOp(ag.layer_ops, "cp_ring_kv_exchange"), nullptr);
  GroupPlacement g;
  g.ranks = cp;
  g.ranks_per_node = cp;
  EXPECT_DOUBLE_EQ(FindCpOp(ag.layer_ops, "cp_all_gather_kv")->duration_s,
                   CollectiveCostOf(prof, CollectiveOp::kAllGather, kv * cp, g).time_s());
  for (CpComm comm : {CpComm::kA2A, CpComm::kUlysses}) {
    const CostModel a2a = BuildCostModel(m, CpConfig(t, cp, s, comm), cl, prof);
    ASSERT_TRUE(FindCpOp(a2a.layer_ops, "cp_all_to_all_qkv") && FindCpOp(a2a.layer_ops, "cp_all_to_all_out"));
    EXPECT_DOUBLE_EQ(FindCpOp(a2a.layer_ops, "cp_all_to_all_qkv")->bytes, 2.0 * local * (32 + 2 * 8) * 128);
    EXPECT_DOUBLE_EQ(FindCpOp(a2a.layer_ops, "cp_all_to_all_out")->bytes, 2.0 * local * 32 * 128);
    EXPECT_DOUBLE_EQ(FindCpOp(a2a.layer_ops, "cp_all_to_all_qkv_grad")->bytes, 2.0 * local * (32 + 2 * 8) * 128);
    // One kernel over the whole sequence: its efficiency is read at s.
    const double flops = 0.5 * 4 * 1.0 * s * s * 32 * 128 / cp;
    EXPECT_DOUBLE_EQ(FindCpOp(a2a.layer_ops, "flash_attention")->duration_s,
                     AttentionTime(prof, flops, static_cast<double>(s), false));
  }
}

// Activations are divided by cp (every saved tensor holds b*s/cp tokens); gradients are reduced
// and the distributed optimizer sharded over the dp x cp ranks of a stage; the ring stays inside
// a node while tp * cp fits in it (Megatron's rank order tp-cp-dp-pp).
TEST(ContextParallel, ActivationsGradientsAndPlacement) {
  const std::int64_t s = 32768;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  const double one = BuildCostModel(m, CpConfig(2, 1, s), cl, prof).layer_saved_bytes;
  for (std::int64_t cp : {2, 4}) {
    EXPECT_NEAR(BuildCostModel(m, CpConfig(2, cp, s), cl, prof).layer_saved_bytes, one / cp, 1e-6 * one) << cp;
  }
  ParallelConfig c = CpConfig(2, 4, s);
  c.dp = 3;
  c.global_batch_size = 12;
  c.zero_stage = 1;
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  EXPECT_EQ(cm.dp_group.ranks, 12);
  EXPECT_EQ(cm.dp_group.ranks_per_node, 4);  // 8 GPUs / tp 2
  EXPECT_DOUBLE_EQ(BytesPerParam(c).optimizer, 12.0 / 12);
  EXPECT_EQ(cm.cp.group.ranks, 4);
  EXPECT_TRUE(cm.cp.ring_same_node);
  EXPECT_FALSE(BuildCostModel(m, CpConfig(4, 4, s), cl, prof).cp.ring_same_node);  // tp*cp = 16 > 8
  // The exchange buffers: two K/V blocks in flight forward, K/V and their gradients backward.
  const double block = 2.0 * 2 * (1.0 * s / 4) * (8.0 / 2) * 128;
  EXPECT_GE(cm.chunks[0][0].fwd_transient_bytes, 2 * block);
  EXPECT_GE(cm.chunks[0][0].transient_bytes, 4 * block);
}

// A step with context parallelism: the exposed exchange is reported as its own part of the
// breakdown, the parts still add up to the step time, and the executed FLOPs count every rank.
TEST(ContextParallel, SimulatedStepReportsCpCommunication) {
  const std::int64_t s = 65536;
  const Model m = Llama8Layers(s);
  const Cluster cl = LoadCluster("dgx-h100");
  HardwareProfile prof = DefaultProfile(cl);
  prof.p2p_intra_GBps = 2;  // slow enough that the ring is exposed
  ParallelConfig c = CpConfig(2, 4, s);
  c.dp = 2;
  c.global_batch_size = 8;
  const SimulationResult r = Simulate(m, c, cl, 16, prof);
  ASSERT_TRUE(r.feasible) << r.reasons.front();
  EXPECT_GT(r.breakdown.cp_comm_s, 0.0);
  const auto& b = r.breakdown;
  EXPECT_NEAR(b.compute_s + b.recompute_s + b.tp_comm_s + b.cp_comm_s + b.pp_comm_s + b.dp_comm_s + b.bubble_s +
                  b.optimizer_s,
              r.step_time_s, 1e-6 * r.step_time_s);
  // MFU in both conventions: the causal one halves the attention term of the model FLOPs.
  const FlopCounts f = m.Flops(s);
  EXPECT_NEAR(r.mfu_causal / r.mfu, f.per_token_causal() / f.per_token, 1e-12);
  EXPECT_NEAR(f.per_token_causal(), f.per_token_dense + 6.0 * 8 * s * 32 * 128, 1);
}

// ---- bad input and infeasible settings --------------------------------------------------------

TEST(ContextParallel, RulesAndBadInput) {
  const Cluster cl = LoadCluster("dgx-h100");
  const Model m = Llama8Layers(4096);
  ParallelConfig c = CpConfig(1, 3, 4096);  // 4096 is not a multiple of 2*3
  ASSERT_FALSE(ContextParallelRules(m, c, 8).empty());
  EXPECT_NE(ContextParallelRules(m, c, 8).front().text.find("2*cp = 6 chunks"), std::string::npos);
  // With sequence parallelism over tp 2 as well, the cause named is cp's (4096 / 3 is no whole
  // share to split over tp), not sequence parallelism's.
  c = CpConfig(2, 3, 4096);
  c.dp = 1;
  for (const Infeasibility& x : InfeasibilityRules(m, c, 6, cl)) {
    EXPECT_EQ(x.rule.find("sequence parallelism"), std::string::npos) << x.text;
  }
  c = CpConfig(1, 3, 4096);
  c.cp_comm = CpComm::kUlysses;  // DeepSpeed-Ulysses splits into cp parts only: still 4096 % 3
  EXPECT_FALSE(ContextParallelRules(m, c, 8).empty());
  c = CpConfig(1, 16, 4096, CpComm::kA2A);  // 8 query groups over 16 ranks
  ASSERT_FALSE(ContextParallelRules(m, c, 8).empty());
  EXPECT_NE(ContextParallelRules(m, c, 8).front().text.find("num_query_groups / tp = 8"), std::string::npos);
  c = CpConfig(1, 2, 4096);
  c.flash_attention = false;
  EXPECT_FALSE(ContextParallelRules(m, c, 8).empty());
  // The command line: exit 2 naming the flag and its value.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp 3 --seq 8192",
                                    "--cp: got 3"));
  EXPECT_TRUE(testing::ExitsTwoWith(
      "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp 2 --no-flash-attention", "--no-flash-attention"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --cp 16 --cp-comm-type a2a",
                                    "--cp-comm-type: got a2a"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp 4 "
                                    "--hierarchical-context-parallel-sizes 2 4 --cp-comm-type a2a+p2p",
                                    "--hierarchical-context-parallel-sizes"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp 4 --cp-comm-type ring",
                                    "--cp-comm-type"));
  // A flag that changes nothing is refused: the exchange type without context parallelism.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --cp-comm-type a2a",
                                    "command line: --cp-comm-type: got a2a with --cp 1"));
  // a2a+p2p names both levels: the all-to-all inside a node's cp ranks, the ring across.
  const auto r = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --tp 2 --cp 8 "
                                       "--cp-comm-type a2a+p2p --seq 65536 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["config"]["cp_a2a_ranks"], 4);
}

// A fixed cp that does not divide the GPUs per (tp, pp) group is a generation rejection (it used
// to divide by a zero data-parallel size).
TEST(ContextParallel, PlannerFixedCpMustDivide) {
  const Model m = Llama8Layers(131072);
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 64;
  o.seq_length = 131072;
  o.fixed["cp"] = "3";
  std::map<std::string, std::size_t> rej;
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &rej).empty());
  EXPECT_GT(rej["(tp, pp) pairs: the fixed cp does not divide GPUs / (tp*pp)"], 0u);
  o.fixed["cp"] = "2";
  o.fixed["cp_comm"] = "a2a+p2p";
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  ASSERT_FALSE(cands.empty());
  for (const auto& c : cands) {
    EXPECT_EQ(c.cp, 2);
    EXPECT_GT(c.cp_a2a, 0);
    EXPECT_NE(MegatronArguments(c, m).find("--hierarchical-context-parallel-sizes"), std::string::npos);
  }
  EXPECT_EQ(testing::RunShardcast("plan --model llama3-8b --cluster dgx-h100 --gpus 64 --seq 131072 --gbs 64 --fix cp=3")
                .exit_code,
            0);
}

// ---- uneven pipeline splits -------------------------------------------------------------------

std::vector<std::int64_t> StageLayers(const PipelineLayout& l, std::int64_t pp) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(pp), 0);
  for (std::size_t k = 0; k < l.chunk_layers.size(); ++k) out[k % static_cast<std::size_t>(pp)] += l.chunk_layers[k];
  return out;
}

TEST(PipelineSplit, MegatronCoreRules) {
  Model m = Llama8Layers(4096);
  m.num_layers = 126;  // Llama-3.1-405B's depth
  ParallelConfig c;
  c.pp = 16;
  c.first_stage_layers = 7;
  c.last_stage_layers = 7;
  PipelineLayout l = PipelineLayoutOf(m, c);
  ASSERT_TRUE(l.error.empty()) << l.error;
  std::vector<std::int64_t> want(16, 8);
  want.front() = want.back() = 7;
  EXPECT_EQ(StageLayers(l, 16), want);
  // Llama 3's layout with interleaving: the embedding and the loss in layer slots, (126 + 2) / 16 =
  // 8 slots per stage, 2 per virtual stage of vp 4; the first and the last model chunk lose one.
  c = ParallelConfig{};
  c.pp = 16;
  c.vp = 4;
  c.schedule = Schedule::kInterleaved;
  c.embedding_slots = true;
  l = PipelineLayoutOf(m, c);
  ASSERT_TRUE(l.error.empty()) << l.error;
  ASSERT_EQ(l.chunk_layers.size(), 64u);
  EXPECT_EQ(l.chunk_layers.front(), 1);
  EXPECT_EQ(l.chunk_layers.back(), 1);
  EXPECT_EQ(l.chunk_layers[1], 2);
  EXPECT_EQ(std::accumulate(l.chunk_layers.begin(), l.chunk_layers.end(), std::int64_t{0}), 126);
  for (std::size_t k = 1; k < l.chunk_layers.size(); ++k) {
    EXPECT_EQ(l.first_layer[k], l.first_layer[k - 1] + l.chunk_layers[k - 1]);
  }
  // Uneven counts with interleaving: every stage's count must divide by vp.
  c = ParallelConfig{};
  c.pp = 16;
  c.vp = 2;
  c.schedule = Schedule::kInterleaved;
  c.first_stage_layers = 6;
  c.last_stage_layers = 8;
  l = PipelineLayoutOf(m, c);
  ASSERT_TRUE(l.error.empty()) << l.error;
  EXPECT_EQ(l.Layers(16, 0, 0), 3);
  EXPECT_EQ(l.Layers(16, 15, 1), 4);
  c.first_stage_layers = 7;
  c.last_stage_layers = 7;
  EXPECT_NE(PipelineLayoutOf(m, c).error.find("not a multiple of vp = 2"), std::string::npos);
  // Layers that do not add up.
  c = ParallelConfig{};
  c.pp = 5;
  c.first_stage_layers = 7;
  c.last_stage_layers = 7;
  EXPECT_NE(PipelineLayoutOf(m, c).error.find("112 / 3 is not an integer"), std::string::npos);
  c.first_stage_layers = 100;
  c.last_stage_layers = 100;
  EXPECT_NE(PipelineLayoutOf(m, c).error.find("leave -74"), std::string::npos);
  // Megatron-Core's TransformerConfig: at least one layer on the first/last stage, and layers on
  // every middle stage.
  c.pp = 4;
  c.first_stage_layers = 63;
  c.last_stage_layers = 63;
  EXPECT_NE(PipelineLayoutOf(m, c).error.find("leave none"), std::string::npos);
  c.first_stage_layers = 0;
  EXPECT_NE(PipelineLayoutOf(m, c).error.find("at least 1"), std::string::npos);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3.1-405b --cluster dgx-h100 --gpus 40 --tp 8 --pp 5 "
                                    "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7",
                                    "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3.1-405b --cluster dgx-h100 --gpus 128 --tp 8 --pp 16 "
                                    "--vp 3 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
                                    "not a multiple of vp = 3"));
}

/// TP8 PP16 of Llama-3.1-405B on 128 H100 with 7 layers on the first and the last stage.
ParallelConfig Llama405bFirstLast7() {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 16;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 32;
  c.sequence_parallel = true;
  c.recompute = Recompute::kFull;
  c.first_stage_layers = 7;
  c.last_stage_layers = 7;
  return c;
}

// Each stage's memory follows its own layers: weights, gradients and optimizer state are the
// stage's parameters times the bytes per parameter.
TEST(PipelineSplit, StageMemoryFollowsItsLayers) {
  const Model m = LoadModel("llama3.1-405b");
  const Cluster cl = LoadCluster("dgx-h100");
  const ParallelConfig c = Llama405bFirstLast7();
  const SimulationResult r = Simulate(m, c, cl, 128, DefaultProfile(cl));
  ASSERT_TRUE(r.feasible) << r.reasons.front();
  ASSERT_EQ(r.stages.size(), 16u);
  EXPECT_EQ(r.stages[0].layers, 7);
  EXPECT_EQ(r.stages[1].layers, 8);
  EXPECT_EQ(r.stages[15].layers, 7);
  const double bpp = BytesPerParam(c).weights;
  for (int s : {0, 1, 15}) {
    EXPECT_NEAR(r.stages[static_cast<std::size_t>(s)].memory.weights_bytes, ParametersOfStage(m, c, s).total() * bpp,
                1.0)
        << s;
  }
  const double layer = static_cast<double>(m.Parameters().per_layer.sharded) / 8 +
                       static_cast<double>(m.Parameters().per_layer.replicated);
  EXPECT_NEAR(ParametersOfStage(m, c, 1).total(), 8 * layer, 1.0);
}

// With free communication, a 1F1B pipeline whose last stage is the slowest takes the work of
// every stage once plus m - 1 more periods of the slow one: sum_i (F_i + B_i) + (m - 1)(F_s + B_s);
// the slow stage idles only while the first micro-batch fills and the last drains the others.
TEST(PipelineSplit, BubbleWithOneSlowStage) {
  const Model m = Llama8Layers(2048);
  Model deep = m;
  deep.num_layers = 24;
  const Cluster cl = LoadCluster("dgx-h100");
  ParallelConfig c;
  c.pp = 4;
  c.dp = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 8;
  c.first_stage_layers = 4;
  c.last_stage_layers = 10;  // the middle two hold 5 each
  SimulateOptions o;
  o.free_communication = true;
  const SimulationResult r = Simulate(deep, c, cl, 4, DefaultProfile(cl), o);
  ASSERT_TRUE(r.feasible) << r.reasons.front();
  const CostModel cm = BuildCostModel(deep, c, cl, DefaultProfile(cl));
  double sum = 0, fill = 0;
  std::vector<double> fb;
  for (int i = 0; i < 4; ++i) {
    const ChunkCost& cc = cm.chunks[static_cast<std::size_t>(i)][0];
    const double f = std::round(cc.fwd_s * 1e9) / 1e9;
    const double b = std::round((cc.bwd_input_s + cc.recompute_s) * 1e9) / 1e9 + std::round(cc.bwd_weight_s * 1e9) / 1e9;
    fb.push_back(f + b);
    sum += f + b;
    if (i < 3) fill += f + b;
  }
  ASSERT_GT(fb[3], *std::max_element(fb.begin(), fb.begin() + 3));
  EXPECT_NEAR(r.step_time_s, sum + 7 * fb[3], 1e-8);
  EXPECT_NEAR(r.stages[3].time.bubble_s, fill, 1e-8);
}

// ---- the planner ------------------------------------------------------------------------------

// The search holds Llama 3's layout on 16,384 H100 (TP8, PP16 with the embedding and the loss in
// layer slots, interleaved), context parallelism at long sequences, and Megatron's uneven split
// where neither L nor L + 2 divides by pp.
TEST(PipelineSplit, PlannerSearchesFrontierLayoutsAndContextParallelism) {
  const Model m = LoadModel("llama3.1-405b");
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 16384;
  o.global_batch_size = 2048;
  o.seq_length = 8192;
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  bool llama3 = false, cp2 = false;
  for (const auto& c : cands) {
    if (c.tp == 8 && c.pp == 16 && c.embedding_slots && c.schedule == Schedule::kInterleaved && c.vp == 4 && c.cp == 1) {
      llama3 = true;
    }
    if (c.cp == 2) cp2 = true;
    if (c.cp > 1) {
      EXPECT_GE(8192 / (2 * c.cp), o.min_cp_chunk_tokens);
    }
  }
  EXPECT_TRUE(llama3);
  EXPECT_TRUE(cp2);
  o.gpus = 40;
  o.global_batch_size = 10;
  std::set<std::pair<std::int64_t, std::int64_t>> uneven;
  for (const auto& c : GenerateCandidates(m, cl, o, &rej)) {
    // pp 5: 126 and 128 layer slots do not divide; no stage above ceil(126/5) = 26 layers: 26
    // on the three middle stages and the other 48 shared by the first and the last (22/26 to
    // 26/22), or 25 on the middle ones and 51 on the edges (25/26, 26/25).
    if (c.pp == 5) {
      const std::int64_t middle = 126 - c.first_stage_layers - c.last_stage_layers;
      EXPECT_TRUE(middle == 3 * 26 || middle == 3 * 25) << c.Summary();
      EXPECT_LE(std::max(c.first_stage_layers, c.last_stage_layers), 26) << c.Summary();
      uneven.insert({c.first_stage_layers, c.last_stage_layers});
    }
  }
  EXPECT_EQ(uneven.size(), 7u);
  EXPECT_TRUE(uneven.count({24, 24}));
  EXPECT_TRUE(uneven.count({25, 26}));
  EXPECT_EQ(uneven.begin()->first, 22);
  EXPECT_EQ(uneven.rbegin()->first, 26);
  // --fix decoder_first / decoder_last: every split Megatron-LM takes with that stage (the three
  // middle stages share the rest evenly), not only the ones the search tries by itself.
  o.fixed = {{"pp", "5"}, {"decoder_last", "23"}};
  std::set<std::int64_t> firsts;
  for (const auto& c : GenerateCandidates(m, cl, o, &rej)) {
    EXPECT_EQ(c.last_stage_layers, 23);
    EXPECT_EQ((126 - 23 - c.first_stage_layers) % 3, 0);
    firsts.insert(c.first_stage_layers);
  }
  ASSERT_FALSE(firsts.empty());
  EXPECT_TRUE(firsts.count(25));  // 25 / 26 / 26 / 26 / 23
  EXPECT_TRUE(firsts.count(1));   // 1 / 34 / 34 / 34 / 23
  o.fixed = {{"pp", "5"}, {"decoder_first", "124"}};
  rej.clear();
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &rej).empty());
  EXPECT_EQ(rej.count("pipeline splits: no pp gives a first stage of 124 and a last of any with the middle stages "
                      "sharing the rest evenly"),
            1u);
  o.fixed.clear();
  // Its Megatron-LM arguments name the split and context parallelism.
  ParallelConfig c = Llama405bFirstLast7();
  c.first_stage_layers = c.last_stage_layers = -1;
  c.cp = 2;
  c.vp = 4;
  c.schedule = Schedule::kInterleaved;
  c.embedding_slots = true;
  const std::string args = MegatronArguments(c, m);
  EXPECT_NE(args.find("--context-parallel-size 2 --cp-comm-type p2p"), std::string::npos) << args;
  EXPECT_NE(args.find("--num-virtual-stages-per-pipeline-rank 4"), std::string::npos) << args;
  EXPECT_NE(args.find("--account-for-embedding-in-pipeline-split"), std::string::npos) << args;
  c.embedding_slots = false;
  c.vp = 1;
  c.schedule = Schedule::k1F1B;
  c.first_stage_layers = 7;
  c.last_stage_layers = 7;
  EXPECT_NE(MegatronArguments(c, m).find("--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7"),
            std::string::npos);
}

}  // namespace
}  // namespace shardcast
