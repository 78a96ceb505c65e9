#include <algorithm>
#include <cmath>
#include <sstream>
#include <map>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/csv.h"
#include "common/error.h"
#include "models/loader.h"
#include "planner/capacity.h"
#include "planner/describe.h"
#include "report/describe_report.h"
#include "common/text.h"
#include "planner/planner.h"
#include "report/megatron_args.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

/// A model from a published_runs.csv row's shape columns.
Model RowModel(const CsvTable& t, std::size_t r) {
  Json j;
  j["name"] = t.Get(r, "model");
  j["num_layers"] = std::stoll(t.Get(r, "num_layers"));
  j["hidden_size"] = std::stoll(t.Get(r, "hidden_size"));
  j["ffn_hidden_size"] = std::stoll(t.Get(r, "ffn_hidden_size"));
  j["num_attention_heads"] = std::stoll(t.Get(r, "num_heads"));
  if (!t.Get(r, "num_kv_heads").empty()) j["num_query_groups"] = std::stoll(t.Get(r, "num_kv_heads"));
  j["vocab_size"] = std::stoll(t.Get(r, "vocab_size"));
  j["seq_length"] = std::stoll(t.Get(r, "seq_len"));
  j["normalization"] = "layernorm";
  j["activation"] = "gelu";
  j["position_embedding"] = "learned";
  j["tie_embeddings"] = true;
  return ModelFromJson(j, "row");
}

TEST(Space, EveryPublishedConfigurationIsGenerated) {
  CsvTable t = ReadCsvFile(testing::SourceDir() + "/validation/published_runs.csv");
  ASSERT_GT(t.rows.size(), 50u);
  std::size_t checked = 0, unsearchable = 0;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (t.Get(r, "num_heads").empty()) continue;  // row 152 does not give its head count
    // Rows without a micro-batch size (S7) name no configuration to look for.
    if (t.Get(r, "micro_batch_size").empty()) {
      ++unsearchable;
      continue;
    }
    ++checked;
    const Model m = RowModel(t, r);
    const Cluster cl = LoadCluster(t.Get(r, "gpu_type").rfind("H100", 0) == 0 ? "dgx-h100" : "dgx-a100");
    PlanOptions o;
    o.gpus = std::stoll(t.Get(r, "num_gpus"));
    o.global_batch_size = std::stoll(t.Get(r, "global_batch_size"));
    o.seq_length = m.seq_length;
    // Unfused attention keeps selective recompute in the space; context parallelism needs fused.
    const std::int64_t row_cp = t.Get(r, "cp").empty() ? 1 : std::stoll(t.Get(r, "cp"));
    o.flash_attention = row_cp > 1;
    o.zero_stages = {0, 1, 2, 3};
    std::map<std::string, std::size_t> rej;
    const auto cands = GenerateCandidates(m, cl, o, &rej);
    const std::int64_t vp = t.Get(r, "vp").empty() ? 1 : std::stoll(t.Get(r, "vp"));
    const std::string rc = t.Get(r, "recompute"), sh = t.Get(r, "dp_sharding");
    const Recompute want_rc = rc.rfind("full", 0) == 0        ? Recompute::kFull
                              : rc.rfind("selective", 0) == 0 ? Recompute::kSelective
                                                              : Recompute::kNone;
    const int want_zero = sh.find("FULL_SHARD (") != std::string::npos && sh.rfind("PyTorch FSDP FULL", 0) == 0 ? 3
                          : sh.rfind("PyTorch FSDP SHARD_GRAD_OP", 0) == 0                                     ? 2
                          : sh.rfind("ZeRO-1", 0) == 0                                                         ? 1
                                                                                                                : 0;
    bool found = false;
    auto candidates = cands;
    if (want_zero >= 1 && std::stoll(t.Get(r, "dp")) == 1) {
      // ZeRO-1 on one data-parallel rank (GPT-NeoX's own layouts, rows 220-221) is DeepSpeed's:
      // the search generates it with DeepSpeed's optimizer.
      o.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
      candidates = GenerateCandidates(m, cl, o, &rej);
    }
    for (const auto& c : candidates) {
      const std::int64_t row_pp = std::stoll(t.Get(r, "pp"));
      // BLOOM's partition (the embedding and the loss a layer slot each); other uneven splits as the search makes them.
      const bool slots = m.num_layers % row_pp != 0 && (m.num_layers + 2) % row_pp == 0;
      if (c.tp == std::stoll(t.Get(r, "tp")) && c.pp == std::stoll(t.Get(r, "pp")) && c.vp == vp && c.cp == row_cp &&
          c.embedding_slots == slots &&
          c.micro_batch_size == std::stoll(t.Get(r, "micro_batch_size")) && c.recompute == want_rc &&
          c.sequence_parallel == (t.Get(r, "sequence_parallel") == "yes") && c.zero_stage == want_zero) {
        found = true;
        EXPECT_EQ(c.dp, std::stoll(t.Get(r, "dp"))) << "row " << t.Get(r, "row_id");
      }
    }
    EXPECT_TRUE(found) << "row " << t.Get(r, "row_id") << " (" << t.Get(r, "model") << ") is not in the space";
  }
  EXPECT_EQ(checked + unsearchable, t.rows.size() - 1);
  EXPECT_EQ(unsearchable, 9u);  // S7 rows 68-76
}

TEST(Space, OnlyValidConfigurationsAreGenerated) {
  const Model m = LoadModel("llama3-70b");
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 256;
  o.global_batch_size = 512;
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  ASSERT_FALSE(cands.empty());
  for (const auto& c : cands) {
    EXPECT_TRUE(InfeasibilityReasons(m, c, 256, cl).empty()) << c.Summary();
    EXPECT_EQ(m.num_query_groups % c.tp, 0);  // 8 KV heads: tp in 1, 2, 4, 8
    EXPECT_LE(c.tp, 8);
  }
  EXPECT_GT(rej["(tp, pp) pairs: tp*pp does not divide the GPU count"], 0u);  // e.g. pp = 5 with 256 GPUs
}

// --optimizer fsdp searches what torchtitan runs: FSDP2 (ZeRO-3) without a pipeline, ZeRO-1's
// reading of FSDP2 with one, DDP only alone; sequence parallelism with every tp > 1; torchtitan's
// split (embedding and output slots spread evenly) for every pp; no ZB-H1.
TEST(Space, TorchFsdpSearchesTorchtitansLayouts) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  PlanOptions o;
  o.gpus = 48;  // pp 3 divides 48 but not 32 layers: torchtitan's split takes it (34 slots)
  o.global_batch_size = 96;
  o.optimizer_impl = OptimizerImpl::kTorchFsdp;
  o.zero_stages = {0, 1, 3};
  o.schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};  // ZB-H1 asked for, and refused
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  ASSERT_FALSE(cands.empty());
  bool pp3 = false, ddp = false, unsharded = false;
  for (const auto& c : cands) {
    EXPECT_TRUE(InfeasibilityReasons(m, c, 48, cl).empty()) << c.Summary();
    EXPECT_EQ(c.optimizer_impl, OptimizerImpl::kTorchFsdp);
    const bool alone = c.dp * c.cp == 1;  // no rank shares the weights: neither FSDP nor DDP
    if (c.zero_stage == 0) {
      EXPECT_TRUE(alone || c.tp * c.cp * c.pp == 1) << c.Summary();  // or DDP as the sole parallelism
    } else {
      EXPECT_EQ(c.zero_stage, c.pp > 1 ? 1 : 3) << c.Summary();
    }
    EXPECT_EQ(c.sequence_parallel, c.tp > 1) << c.Summary();
    EXPECT_NE(c.schedule, Schedule::kZbH1);
    EXPECT_EQ(c.overlap_grad_reduce, c.pp == 1) << c.Summary();
    if (c.pp > 1) {
      EXPECT_TRUE(c.embedding_slots && c.even_chunks) << c.Summary();
      EXPECT_TRUE(PipelineLayoutOf(m, c).error.empty()) << c.Summary();
    }
    pp3 = pp3 || c.pp == 3;
    ddp = ddp || (c.zero_stage == 0 && !alone);
    unsharded = unsharded || alone;
  }
  EXPECT_TRUE(pp3);
  EXPECT_TRUE(ddp);
  EXPECT_TRUE(unsharded);  // e.g. tp 8 x pp 6: dp 1, still a plan
  EXPECT_GT(rej["(pp, ZeRO) choices: with --optimizer fsdp ZeRO-1 is FSDP2 under a pipeline (pp > 1)"], 0u);
  EXPECT_GT(rej["(tp, pp, mbs) choices: torchtitan's zero-bubble schedules are looped, not ZB-H1 on one stage"], 0u);
  // The virtual stages torchtitan's pipeline_parallel_layers_per_stage P makes: ceil(34 / P)
  // stages, 2 x vp of them at pp 2 (and its default, vp 2).
  PlanOptions q = o;
  q.gpus = 16;
  q.global_batch_size = 64;
  q.fixed["pp"] = "2";
  q.fixed["tp"] = "8";
  q.zero_stages = {0, 1};
  std::set<std::int64_t> vps;
  std::map<std::string, std::size_t> rq;
  for (const auto& c : GenerateCandidates(m, cl, q, &rq)) {
    if (c.schedule == Schedule::kInterleaved) vps.insert(c.vp);
  }
  std::set<std::int64_t> expected;
  for (std::int64_t v = 2; 2 * v <= 34; ++v) {
    const std::int64_t per = (34 + 2 * v - 1) / (2 * v);
    if (v == 2 || (34 + per - 1) / per == 2 * v) expected.insert(v);
  }
  EXPECT_EQ(vps, expected);
  EXPECT_EQ(expected.count(5), 0u);  // 10 chunks: P 4 makes 9 stages, P 3 makes 12
  EXPECT_EQ(expected.count(3), 1u);  // 6 chunks: P 6
  // A fixed vp torchtitan cannot make, and a fixed first stage (Megatron-LM's split), say why.
  PlanOptions v5 = q;
  v5.fixed["vp"] = "8";  // 16 chunks: P 3 makes 12, P 2 makes 17
  std::map<std::string, std::size_t> r5;
  EXPECT_TRUE(GenerateCandidates(m, cl, v5, &r5).empty());
  EXPECT_GT(r5["(tp, pp, mbs) choices: the fixed vp is not one torchtitan makes (pp x vp = ceil((L + 2) / P) stages for "
               "a pipeline_parallel_layers_per_stage P, or its default 2)"],
            0u);
  PlanOptions first = q;
  first.fixed["decoder_first"] = "15";
  std::map<std::string, std::size_t> rf;
  EXPECT_TRUE(GenerateCandidates(m, cl, first, &rf).empty());
  EXPECT_EQ(rf.count("pipeline splits: a fixed first or last stage is Megatron-LM's split; with --optimizer fsdp the "
                     "split is torchtitan's even one"),
            1u);
}

/// `a` and `b` have the same chunk costs and layer bytes, field by field.
void ExpectSameChunks(const CostModel& a, const CostModel& b, const std::string& what) {
  EXPECT_EQ(a.layer_saved_bytes, b.layer_saved_bytes) << what;
  ASSERT_EQ(a.chunks.size(), b.chunks.size()) << what;
  for (std::size_t i = 0; i < a.chunks.size(); ++i) {
    ASSERT_EQ(a.chunks[i].size(), b.chunks[i].size()) << what;
    for (std::size_t k = 0; k < a.chunks[i].size(); ++k) {
      const ChunkCost &x = a.chunks[i][k], &y = b.chunks[i][k];
      const std::string at = what + fmt::format(" stage {} chunk {}", i, k);
      EXPECT_EQ(x.layers, y.layers) << at;
      EXPECT_EQ(x.fwd_s, y.fwd_s) << at;
      EXPECT_EQ(x.bwd_input_s, y.bwd_input_s) << at;
      EXPECT_EQ(x.bwd_weight_s, y.bwd_weight_s) << at;
      EXPECT_EQ(x.recompute_s, y.recompute_s) << at;
      EXPECT_EQ(x.fwd_tp_s, y.fwd_tp_s) << at;
      EXPECT_EQ(x.bwd_tp_s, y.bwd_tp_s) << at;
      EXPECT_EQ(x.recompute_tp_s, y.recompute_tp_s) << at;
      EXPECT_EQ(x.fwd_cp_s, y.fwd_cp_s) << at;
      EXPECT_EQ(x.bwd_cp_s, y.bwd_cp_s) << at;
      EXPECT_EQ(x.fwd_ep_s, y.fwd_ep_s) << at;
      EXPECT_EQ(x.bwd_ep_s, y.bwd_ep_s) << at;
      EXPECT_EQ(x.saved_bytes, y.saved_bytes) << at;
      EXPECT_EQ(x.weight_saved_bytes, y.weight_saved_bytes) << at;
      EXPECT_EQ(x.transient_bytes, y.transient_bytes) << at;
      EXPECT_EQ(x.fwd_transient_bytes, y.fwd_transient_bytes) << at;
      EXPECT_EQ(x.params_per_gpu, y.params_per_gpu) << at;
    }
  }
}

// The search shares layer costs among candidates of one LayerCostKey: every candidate (pipeline
// depths, virtual stages, uneven splits, ZeRO stages, schedules, recompute, tp/cp/ep, FP8 with
// bf16 edge layers for the MoE model) gets the chunk costs and bounds it gets built alone, and
// candidates that differ only in what the layers do not read share an entry.
TEST(Space, LayerCostCacheGivesEachCandidateItsOwnCosts) {
  struct Case {
    const char* model;
    const char* cluster;
    std::int64_t gpus, gbs, max_mbs;
    Precision precision;
    std::int64_t bf16_edge_layers;
  };
  for (const Case& k : {Case{"mixtral-8x7b", "dgx-h100", 16, 64, 1, Precision::kFp8, 1},
                        Case{"gpt3-2.7b", "dgx-a100", 16, 64, 2, Precision::kBf16, 0}}) {
    const Model m = LoadModel(k.model);
    const Cluster cl = LoadCluster(k.cluster);
    const HardwareProfile prof = DefaultProfile(cl);
    PlanOptions o;
    o.gpus = k.gpus;
    o.global_batch_size = k.gbs;
    o.max_micro_batch_size = k.max_mbs;
    o.zero_stages = {0, 1, 2, 3};
    o.base.precision = k.precision;
    o.base.bf16_layers_start = o.base.bf16_layers_end = k.bf16_edge_layers;
    std::map<std::string, std::size_t> rej;
    const auto cands = GenerateCandidates(m, cl, o, &rej);
    ASSERT_GT(cands.size(), 100u) << k.model;
    LayerCostCache cache;
    for (const ParallelConfig& c : cands) {
      const std::string what = std::string(k.model) + " " + c.Summary();
      const CostModel shared = BuildCostModel(m, c, cl, prof, &cache);
      EXPECT_TRUE(shared.layer_ops.empty() && shared.moe_layer_ops.empty() && shared.bf16_layer_ops.empty()) << what;
      ExpectSameChunks(shared, BuildCostModel(m, c, cl, prof), what);
      const Bounds with = LowerBounds(m, c, cl, prof, &cache), without = LowerBounds(m, c, cl, prof);
      EXPECT_EQ(with.step_time_lower_s, without.step_time_lower_s) << what;
      EXPECT_EQ(with.peak_memory_lower_bytes, without.peak_memory_lower_bytes) << what;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_EQ(cache.entries() + cache.hits(), 2 * cands.size()) << k.model;
    EXPECT_LT(cache.entries() * 3, cands.size()) << k.model;  // most candidates share their layers
    // Another model (or cluster, or profile) with the same cache is a programming error.
    const Model other = m;
    EXPECT_THROW(BuildCostModel(other, cands.front(), cl, prof, &cache), InternalError);
    // The search keeps one set per distinct key, whatever its thread count.
    std::vector<ParallelConfig> keys;
    for (const ParallelConfig& c : cands) {
      const ParallelConfig key = LayerCostKey(c);
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    EXPECT_EQ(cache.entries(), keys.size()) << k.model;
    o.threads = 2;
    EXPECT_EQ(RunPlan(m, cl, prof, o).layer_sets_kept, keys.size()) << k.model;
  }
}

/// `x` and `y` are the same op list, op by op.
void ExpectSameOps(const std::vector<Op>& x, const std::vector<Op>& y, const std::string& what) {
  ASSERT_EQ(x.size(), y.size()) << what;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::string at = what + " " + x[i].name;
    EXPECT_EQ(x[i].name, y[i].name) << what << " op " << i;
    EXPECT_EQ(x[i].duration_s, y[i].duration_s) << at;
    EXPECT_EQ(x[i].hidden_s, y[i].hidden_s) << at;
    EXPECT_EQ(x[i].flops, y[i].flops) << at;
    EXPECT_EQ(x[i].bytes, y[i].bytes) << at;
    EXPECT_EQ(x[i].saved_bytes, y[i].saved_bytes) << at;
    EXPECT_EQ(x[i].offloaded_bytes, y[i].offloaded_bytes) << at;
    EXPECT_EQ(x[i].rebuilt, y[i].rebuilt) << at;
    EXPECT_EQ(x[i].overlapped, y[i].overlapped) << at;
  }
}

// What lets candidates share their layers: every field LayerCostKey sets aside leaves a layer's
// ops as they were (a guard for the day the layers start reading one of them), including fields
// a search never varies (the cross-entropy implementation, DeepSpeed's buckets, FP8 options).
TEST(Space, FieldsLayerCostKeySetsAsideLeaveTheLayersAlone) {
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig base;
  base.tp = 2;
  base.dp = 8;
  base.global_batch_size = 64;
  base.seq_length = 4096;
  base.sequence_parallel = true;
  base.precision = Precision::kFp8;
  base.recompute = Recompute::kSelective;
  base.bf16_layers_start = base.bf16_layers_end = 1;
  ParallelConfig moe_base = base;
  moe_base.ep = 2;
  using Change = void (*)(ParallelConfig&);
  const std::vector<std::pair<const char*, Change>> changes = {
      {"pp 4", [](ParallelConfig& c) { c.pp = 4, c.dp = 2; }},
      {"pp 4 interleaved vp 2", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.vp = 2, c.schedule = Schedule::kInterleaved; }},
      {"GPipe", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.schedule = Schedule::kGpipe; }},
      {"uneven split", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.first_stage_layers = 6, c.last_stage_layers = 10; }},
      {"embedding slots", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.embedding_slots = true; }},
      {"pipeline flushes", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.pipeline_flushes = 2; }},
      {"blocking sends", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.p2p_blocking = true, c.scatter_gather = false; }},
      {"global batch", [](ParallelConfig& c) { c.global_batch_size = 256; }},
      {"distributed optimizer", [](ParallelConfig& c) { c.zero_stage = 1, c.fp8_param_gather = true; }},
      {"FSDP", [](ParallelConfig& c) { c.zero_stage = 3, c.zero3_limit_all_gathers = false, c.param_gather_bytes = 4; }},
      {"HSDP", [](ParallelConfig& c) { c.zero_stage = 3, c.dp_shard = 2; }},
      {"DeepSpeed ZeRO-1",
       [](ParallelConfig& c) {
         c.optimizer_impl = OptimizerImpl::kDeepSpeedZero, c.zero_stage = 1, c.ds_reduce_bucket_elems = 1e8;
         c.ds_contiguous_gradients = false, c.ds_multi_rank_bucket_allreduce = false;
       }},
      {"DeepSpeed ZeRO-3",
       [](ParallelConfig& c) {
         c.optimizer_impl = OptimizerImpl::kDeepSpeedZero, c.zero_stage = 3, c.zero3_impl = Zero3Impl::kDeepSpeed;
         c.ds_max_live_elems = 1e8, c.ds_prefetch_bucket_elems = 1e7, c.ds_max_reuse_distance_elems = 1e8;
         c.ds_persistence_threshold_elems = 1e4;
       }},
      {"gradient reduce", [](ParallelConfig& c) { c.overlap_grad_reduce = false, c.overlap_param_gather = false, c.flush_grad_reduce = false; }},
      {"fp32 main grads, amax history", [](ParallelConfig& c) { c.fp32_main_grads = false, c.fp8_amax_history_len = 16; }},
      {"cross entropy", [](ParallelConfig& c) { c.cross_entropy = CrossEntropyImpl::kTe; }},
      {"even chunks", [](ParallelConfig& c) { c.pp = 4, c.dp = 2, c.vp = 2, c.schedule = Schedule::kInterleaved, c.even_chunks = true; }},
  };
  std::map<std::string, int> ran;  // change -> bases it runs on
  for (const auto& [model, b] : {std::pair<const char*, ParallelConfig>{"mixtral-8x7b", moe_base}, {"llama3-8b", base}}) {
    const Model m = LoadModel(model);
    const CostModel want = BuildCostModel(m, b, cl, prof);
    EXPECT_FALSE(want.bf16_layer_ops.empty()) << model;
    for (const auto& [name, change] : changes) {
      ParallelConfig c = b;
      change(c);
      if (!InfeasibilityReasons(m, c, c.gpus(), cl).empty()) continue;  // e.g. DeepSpeed's ZeRO-3 with ep 2
      ++ran[name];
      const std::string what = std::string(model) + ", " + name;
      EXPECT_TRUE(LayerCostKey(c) == LayerCostKey(b)) << what;
      const CostModel got = BuildCostModel(m, c, cl, prof);
      ExpectSameOps(got.layer_ops, want.layer_ops, what + ", dense");
      ExpectSameOps(got.moe_layer_ops, want.moe_layer_ops, what + ", MoE");
      ExpectSameOps(got.bf16_layer_ops, want.bf16_layer_ops, what + ", bf16");
      EXPECT_EQ(got.layer_saved_bytes, want.layer_saved_bytes) << what;
    }
  }
  for (const auto& [name, change] : changes) EXPECT_GE(ran[name], 1) << name << " ran on neither model";
  EXPECT_EQ(ran["pp 4"], 2);
  ParallelConfig zb = base;
  zb.schedule = Schedule::kZbH1;  // splits the weight gradients: a key of its own
  EXPECT_FALSE(LayerCostKey(zb) == LayerCostKey(base));
}

/// What CheckBounds saw: the candidates simulated, those the memory bound prunes, the ZeRO-3 ones.
struct BoundsCheck {
  std::size_t checked = 0, pruned = 0, zero3 = 0;
};

/// Simulates every `stride`-th feasible candidate of `o` and expects the planner's bounds to hold:
/// the memory and step-time lower bounds at most what the simulation gives, and no candidate the
/// memory bound prunes fitting.
BoundsCheck CheckBounds(const Model& m, const Cluster& cl, const PlanOptions& o, std::size_t stride) {
  const HardwareProfile prof = DefaultProfile(cl);
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  BoundsCheck k;
  for (std::size_t i = 0; i < cands.size(); i += stride) {
    const Bounds b = LowerBounds(m, cands[i], cl, prof);
    const SimulationResult r = Simulate(m, cands[i], cl, o.gpus, prof);
    if (!r.feasible) continue;
    ++k.checked;
    k.zero3 += cands[i].zero_stage == 3;
    EXPECT_LE(b.peak_memory_lower_bytes, r.peak_memory_bytes * (1 + 1e-12)) << cands[i].Summary();
    EXPECT_LE(b.step_time_lower_s, r.step_time_s * (1 + 1e-12)) << cands[i].Summary();
    if (b.peak_memory_lower_bytes > cl.gpu.memory_bytes) {
      ++k.pruned;
      EXPECT_FALSE(r.fits) << "pruned but fits: " << cands[i].Summary();
    }
  }
  return k;
}

TEST(Pruning, NeverRemovesAConfigurationThatFits) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 64;
  // Every fifth candidate (763 feasible), to bound the test's time; every eleventh under the
  // sanitizers, which run the simulator about ten times slower (CI's second build).
#ifdef __SANITIZE_ADDRESS__
  const std::size_t stride = 11;
#else
  const std::size_t stride = 5;
#endif
  const BoundsCheck k = CheckBounds(m, cl, o, stride);
  EXPECT_GT(k.pruned, 0u);
  EXPECT_GT(k.checked, 2500u / stride);
}

TEST(Ranking, DeterministicAcrossThreadCounts) {
  const Model m = LoadModel("gpt3-13b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 256;
  o.top_k = 8;
  o.threads = 1;
  const PlanResult a = RunPlan(m, cl, DefaultProfile(cl), o);
  o.threads = 2;
  const PlanResult b = RunPlan(m, cl, DefaultProfile(cl), o);
  o.threads = 5;
  const PlanResult c = RunPlan(m, cl, DefaultProfile(cl), o);
  ASSERT_EQ(a.plans.size(), 8u);
  ASSERT_EQ(a.plans.size(), b.plans.size());
  ASSERT_EQ(a.plans.size(), c.plans.size());
  for (std::size_t i = 0; i < a.plans.size(); ++i) {
    EXPECT_EQ(a.plans[i].config.Summary(), b.plans[i].config.Summary());
    EXPECT_EQ(a.plans[i].config.Summary(), c.plans[i].config.Summary());
    EXPECT_EQ(a.plans[i].result.step_time_s, b.plans[i].result.step_time_s);
    if (i > 0) {
      EXPECT_LE(a.plans[i - 1].result.step_time_s, a.plans[i].result.step_time_s);
    }
  }
  EXPECT_EQ(a.candidates_generated, b.candidates_generated);
  // The accounting adds up: generated = set aside + simulated that fit.
  for (const PlanResult* r : {&a, &b, &c}) {
    std::size_t aside = 0;
    for (const auto& [reason, count] : r->rejected) aside += count;
    std::size_t not_fit = 0;
    for (const auto& [reason, count] : r->rejected) {
      if (reason.find("(simulated)") != std::string::npos) not_fit += count;
    }
    EXPECT_LE(aside, r->candidates_generated);
    EXPECT_EQ(r->candidates_generated - aside + not_fit, r->candidates_simulated);
  }
}

TEST(Plan, NothingFitsGivesAdvice) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 8;
  o.global_batch_size = 8;
  const PlanResult r = RunPlan(m, cl, DefaultProfile(cl), o);
  EXPECT_TRUE(r.plans.empty());
  ASSERT_FALSE(r.advice.empty());
  EXPECT_NE(r.advice[0].find("the closest candidate"), std::string::npos) << r.advice[0];
  EXPECT_FALSE(r.closest.empty());
}

TEST(Plan, BadInputIsAnError) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 0;
  o.global_batch_size = 8;
  EXPECT_THROW(RunPlan(m, cl, DefaultProfile(cl), o), InputError);
  o.gpus = 64;
  o.global_batch_size = 7;  // no dp in {1, 2, 4, 8, ...} divides 7 except dp = 1 (tp*pp = 64)
  const PlanResult r = RunPlan(m, cl, DefaultProfile(cl), o);
  EXPECT_GT(r.not_generated.at("(tp, pp) pairs: dp = GPUs/(tp*pp) does not divide the global batch"), 0u);
}

// A fixed vp that no candidate can take is a counted reason, not an empty search without one:
// GPT-3's 96 layers over pp 4 are 24 a stage, which 5 chunks do not split; 1F1B has no chunks.
TEST(Plan, AFixedVirtualSizeNoCandidateTakesIsAReason) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 64;
  o.fixed = {{"pp", "4"}, {"vp", "5"}};
  std::map<std::string, std::size_t> why;
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &why).empty());
  EXPECT_GT(why["(tp, pp, mbs) choices: the fixed vp does not split each pipeline stage's layers into equal chunks"], 0u);
  o.fixed = {{"pp", "4"}, {"vp", "2"}, {"schedule", "1f1b"}};
  why.clear();
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &why).empty());
  EXPECT_GT(why["(tp, pp, mbs) choices: the fixed vp > 1 needs the interleaved schedule"], 0u);
  o.fixed = {{"pp", "4"}, {"vp", "2"}};  // 24 layers a stage: two chunks of 12
  why.clear();
  EXPECT_FALSE(GenerateCandidates(m, cl, o, &why).empty());
}

TEST(Plan, MegatronArguments) {
  const Model m = LoadModel("gpt3-175b");
  ParallelConfig c = testing::Gpt3_175bConfig();
  c.seq_length = 2048;
  EXPECT_EQ(MegatronArguments(c, m),
            "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
            "--num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 1 --global-batch-size 1536 "
            "--seq-length 2048 --sequence-parallel --recompute-granularity selective "
            "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --use-flash-attn --bf16");
  // ZeRO-2 and ZeRO-3 launch differently: Megatron FSDP's optim_grads, and full sharding.
  c.pp = 1;
  c.vp = 1;
  c.schedule = Schedule::k1F1B;
  c.zero_stage = 2;
  EXPECT_NE(MegatronArguments(c, m).find("--use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy "
                                         "optim_grads "),
            std::string::npos);
  c.zero_stage = 3;
  EXPECT_NE(MegatronArguments(c, m).find("--use-torch-fsdp2"), std::string::npos);
  EXPECT_EQ(MegatronArguments(c, m).find("optim_grads"), std::string::npos);
  // Embedding and output layer as pipeline slots, (L + 2) / pp per stage: upstream Megatron-LM's flags.
  c.zero_stage = 1;
  c.pp = 7;  // 96 + 2 = 98 = 7 x 14
  c.embedding_slots = true;
  const std::string a = MegatronArguments(c, m);
  EXPECT_NE(a.find(" --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"), std::string::npos)
      << a;
  EXPECT_EQ(a.find("pp-partition-method"), std::string::npos) << a;  // Megatron-DeepSpeed's, not Megatron-LM's
  // Megatron-LM 2021-22's scatter/gather transfers are not Megatron-Core's: said, not dropped.
  c.scatter_gather = true;
  EXPECT_NE(MegatronArguments(c, m).find("   # Megatron-LM 2021-22's pipeline transfers"), std::string::npos);
}

// The no-fit advice names ZeRO only when ZeRO-3 over every GPU would hold the state beside the
// closest candidate's activations, and with the state it would hold: 18 B/param over the GPUs.
TEST(Plan, ZeroAdviceOnlyWhenFullShardingWouldFit) {
  const Model m = LoadModel("llama3-8b");
  PlanOptions o;
  o.gpus = 8;
  o.global_batch_size = 8;
  o.max_tp = 1;
  o.fixed = {{"pp", "1"}};
  const Cluster small = LoadCluster("dgx-a100-40gb");
  const PlanResult r = RunPlan(m, small, DefaultProfile(small), o);
  ASSERT_TRUE(r.plans.empty());
  const std::string zero3 = FormatGiB(static_cast<double>(m.Parameters().total) * 18.0 / 8.0);
  const auto has = [](const PlanResult& p, const std::string& s) {
    return std::any_of(p.advice.begin(), p.advice.end(), [&](const std::string& a) { return a.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has(r, "ZeRO-3 over the 8 GPUs holds " + zero3 + " of state per GPU")) << ::testing::PrintToString(r.advice);
  // Llama-3-70B on 8 H100s: even fully sharded the state is 70.6B x 18 / 8 bytes, more than 80 GB.
  const Model big = LoadModel("llama3-70b");
  const Cluster h100 = LoadCluster("dgx-h100");
  PlanOptions o2;
  o2.gpus = 8;
  o2.global_batch_size = 64;
  const PlanResult r2 = RunPlan(big, h100, DefaultProfile(h100), o2);
  ASSERT_TRUE(r2.plans.empty());
  EXPECT_FALSE(has(r2, "higher ZeRO stage")) << ::testing::PrintToString(r2.advice);
}

// Capacity picks the best plan not at risk of running out of memory: for GPT-3 on 256 H100s
// without headroom, a plan in the planner's top 10 fits only by releasing the caching
// allocator's cache (premise); the capacity row's plan is the planner's best that does not.
TEST(Capacity, BestPlanIsNotAtRiskWhenOneExists) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-h100");
  CapacityOptions o;
  o.tokens = 300e9;
  o.global_batch_size = 1536;
  o.seq_length = 2048;
  o.plan.min_headroom_bytes = 0;
  PlanOptions po = o.plan;
  po.gpus = 256;
  po.global_batch_size = 1536;
  po.seq_length = 2048;
  po.top_k = 10;
  po.schedules = o.plan.schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};  // at-risk plans are ZB-H1's
  const PlanResult ranked = RunPlan(m, cl, DefaultProfile(cl), po);
  ASSERT_FALSE(ranked.plans.empty());
  bool some_at_risk = false;
  for (const auto& p : ranked.plans) some_at_risk = some_at_risk || p.result.memory_at_risk;
  ASSERT_TRUE(some_at_risk) << "premise";
  ASSERT_TRUE(ranked.best_not_at_risk.has_value());
  const auto rows = RunCapacity(m, {{"dgx-h100", 256}}, o);
  ASSERT_TRUE(rows.at(0).feasible) << rows.at(0).reason;
  EXPECT_FALSE(rows[0].memory_at_risk);
  EXPECT_FALSE(rows[0].best.result.memory_at_risk);
  EXPECT_EQ(rows[0].best.config.Summary(), ranked.best_not_at_risk->config.Summary());
}

TEST(Capacity, ArithmeticFromTheBestPlan) {
  const Model m = LoadModel("gpt3-1.3b");
  CapacityOptions o;
  o.tokens = 10e9;
  o.global_batch_size = 512;
  o.seq_length = 2048;
  o.mtbf_hours = 50000;
  o.checkpoint_minutes = 2;
  o.energy_overhead = 1.3;
  o.price_per_gpu_hour["h100-sxm"] = 2.0;
  const auto rows = RunCapacity(m, {{"dgx-a100", 64}, {"dgx-h100", 64}}, o);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    ASSERT_TRUE(r.feasible) << r.reason;
    const double tokens_per_step = 512.0 * 2048;
    EXPECT_EQ(r.steps, std::ceil(10e9 / tokens_per_step));
    EXPECT_DOUBLE_EQ(r.train_time_s, r.steps * r.step_time_s);
    // Young/Daly: job MTBF = 50000 h / 64 GPUs; interval sqrt(2 C M).
    const double M = 50000.0 * 3600 / 64, C = 120;
    EXPECT_NEAR(r.checkpoint_interval_s, std::sqrt(2 * C * M), 1e-9);
    const double tau = std::sqrt(2 * C * M);
    EXPECT_NEAR(r.goodput, 1 - C / tau - (tau / 2 + C) / M, 1e-12);
    EXPECT_NEAR(r.gpu_hours, 64 * r.train_time_s / r.goodput / 3600, 1e-6);
    EXPECT_NEAR(r.cost_usd, r.gpu_hours * r.price_usd_per_gpu_hour, 1e-6);
    const double tdp = LoadGpu(r.gpu).tdp_W;
    EXPECT_NEAR(r.energy_kwh, 64 * tdp * 1.3 * r.wall_time_s / 3.6e6, 1e-6);
  }
  // The override applies to H100 only; cheapest first.
  for (const auto& r : rows) {
    if (r.gpu == "h100-sxm") {
      EXPECT_EQ(r.price_usd_per_gpu_hour, 2.0);
    }
  }
  EXPECT_LE(rows[0].cost_usd, rows[1].cost_usd);
}

// --solve against a brute force over every node count: the answer meets the deadline, no count
// below it that the search simulated meets it, and where the brute force is monotone (more GPUs
// never slower, among counts with a configuration) the answer is the smallest count meeting it. The deadline comes from the
// brute force itself (the time at 40 GPUs), so the answer lies inside the range.
TEST(Capacity, SolveFindsTheSmallestCountMeetingTheDeadline) {
  const Model m = LoadModel("gpt3-1.3b");
  const Cluster cl = LoadCluster("dgx-a100");
  CapacityOptions o;
  o.tokens = 20e9;
  o.global_batch_size = 256;
  o.seq_length = 2048;
  std::vector<CapacityOption> all;
  for (std::int64_t n = 8; n <= 64; n += 8) all.push_back({"dgx-a100", n});
  std::map<std::int64_t, CapacityRow> by_count;
  for (const auto& opt : all) by_count[opt.gpus] = RunCapacity(m, {opt}, o).front();
  ASSERT_TRUE(by_count.at(40).feasible);
  o.days = by_count.at(40).wall_time_s * 1.000001 / 86400.0;
  const SolveResult s = SolveForDeadline(m, "dgx-a100", o, 64);
  ASSERT_TRUE(s.found);
  const std::int64_t n = s.row.option.gpus;
  EXPECT_TRUE(s.row.meets_deadline);
  EXPECT_LE(n, 40);
  EXPECT_EQ(n % 8, 0);
  for (const auto& [gpus, met] : s.tried) {
    EXPECT_TRUE(gpus >= n || !met) << gpus;
    EXPECT_TRUE(gpus != n || met) << gpus;
  }
  auto meets = [&](std::int64_t g) {
    const CapacityRow& r = by_count.at(g);
    return r.feasible && r.wall_time_s <= *o.days * 86400.0;
  };
  std::int64_t smallest = 0;
  bool monotone = true;
  for (const auto& [g, r] : by_count) {
    if (meets(g) && smallest == 0) smallest = g;
    if (smallest > 0 && r.feasible && !meets(g)) monotone = false;
  }
  EXPECT_LE(smallest, n);
  EXPECT_TRUE(monotone);  // so the search's assumption holds here, and its answer is exact
  EXPECT_EQ(n, smallest);
  EXPECT_TRUE(meets(n));
  // The starting point: tokens x causal model FLOPs / (days x peak), in whole nodes.
  const double lb = 20e9 * m.Flops(2048).per_token_causal() / (*o.days * 86400.0 * cl.gpu.PeakFlops(Precision::kBf16));
  EXPECT_EQ(s.lower_bound_gpus, 8 * static_cast<std::int64_t>(std::ceil(lb / 8)));
  EXPECT_GE(n, s.lower_bound_gpus);
  // Out of reach: the row is the largest count, marked not found.
  o.days = by_count.at(8).wall_time_s / 1000 / 86400.0;
  const SolveResult none = SolveForDeadline(m, "dgx-a100", o, 64);
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.tried.back().first, 64);
  // A maximum no configuration divides is stepped over too, not simulated as a miss: 120 GPUs
  // (8 x 15) need pp 15 (tp, dp and cp are powers of two here), and no split of 24 layers over
  // 15 stages keeps every stage within ceil(24/15) = 2 layers with the middle ones even. The row
  // is the largest count tried (a deadline that 0.45 of the time at 64 GPUs leaves out of reach
  // of 112, starting below it), or, where the search starts at 120, 120's, which says why.
  const SolveResult at120 = SolveForDeadline(m, "dgx-a100", o, 120);
  EXPECT_TRUE(at120.tried.empty());
  EXPECT_EQ(at120.row.option.gpus, 120);
  EXPECT_FALSE(at120.row.feasible);
  o.days = by_count.at(64).wall_time_s * 0.45 / 86400.0;
  const SolveResult capped = SolveForDeadline(m, "dgx-a100", o, 120);
  EXPECT_FALSE(capped.found);
  EXPECT_NE(std::find(capped.no_configuration.begin(), capped.no_configuration.end(), 120), capped.no_configuration.end());
  ASSERT_FALSE(capped.tried.empty());
  EXPECT_NE(capped.tried.back().first, 120);
  EXPECT_EQ(capped.row.option.gpus, capped.tried.back().first);
  // A deadline only 128 GPUs meet: the bisection below it reaches 120, which no configuration
  // divides, and steps over it, saying so.
  const CapacityRow at128 = RunCapacity(m, {{"dgx-a100", 128}}, o).front();
  ASSERT_TRUE(at128.feasible);
  o.days = at128.wall_time_s * 1.000001 / 86400.0;
  const SolveResult far = SolveForDeadline(m, "dgx-a100", o, 128);
  ASSERT_TRUE(far.found);
  EXPECT_EQ(far.row.option.gpus, 128);
  EXPECT_NE(std::find(far.no_configuration.begin(), far.no_configuration.end(), 120), far.no_configuration.end());
  for (const std::int64_t g : far.no_configuration) {
    for (const auto& [gpus, met] : far.tried) EXPECT_NE(gpus, g);  // stepped over, not simulated
  }
  // Only node counts without a prime factor above 7 are tried, or the maximum: 88 GPUs (11
  // nodes) and 104 (13) never are, on the way to 128.
  for (const SolveResult* r : {&s, &none, &capped, &far}) {
    for (const auto& [gpus, met] : r->tried) {
      std::int64_t nodes = gpus / 8;
      for (const std::int64_t p : {2, 3, 5, 7}) {
        while (nodes % p == 0) nodes /= p;
      }
      EXPECT_TRUE(nodes == 1 || gpus == r->max_gpus) << gpus;
    }
  }
  CapacityOptions no_days = o;
  no_days.days.reset();
  EXPECT_THROW(SolveForDeadline(m, "dgx-a100", no_days, 64), InputError);
  EXPECT_THROW(SolveForDeadline(m, "dgx-a100", o, 4), InputError);
}

TEST(Capacity, YoungDaly) {
  EXPECT_DOUBLE_EQ(YoungDalyInterval(60, 3600 * 24), std::sqrt(2.0 * 60 * 86400));
  EXPECT_DOUBLE_EQ(Goodput(60, 60, 86400, 3600), 1 - 60.0 / 3600 - (1800.0 + 60) / 86400);
}

// describe's per-GPU state follows Rajbhandari et al.'s bytes per parameter on the largest stage,
// and the text and JSON print the same figures.
TEST(Describe, ZeroStateOfTheLargestStageInTextAndJson) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  DescribeRequest r;
  r.gpus = 1024;
  r.tp = 8;
  r.pp = 8;
  const ModelDescription d = DescribeModel(m, r, &cl);
  ASSERT_TRUE(d.fit && d.fit->feasible());
  const FitDescription& f = *d.fit;
  EXPECT_EQ(f.cfg.dp, 1024 / 64);
  double largest = 0;
  for (std::int64_t s = 0; s < 8; ++s) largest = std::max(largest, ParametersOfStage(m, 8, 8, s).total());
  EXPECT_DOUBLE_EQ(f.largest.total(), largest);
  const double n = largest, dp = 16;
  const double expected[4] = {n * 18, n * (6 + 12 / dp), n * (2 + 16 / dp), n * 18 / dp};
  std::ostringstream text;
  WriteDescription(text, d);
  const Json j = DescribeJson(d);
  for (int z = 0; z <= 3; ++z) {
    EXPECT_NEAR(f.zero[z].total_bytes(), expected[z], 1e-9 * expected[z]) << "ZeRO-" << z;
    EXPECT_EQ(f.zero[z].supported, z < 2);
    EXPECT_DOUBLE_EQ(j["fit"]["zero"][z]["total_bytes"].get<double>(), f.zero[z].total_bytes());
    EXPECT_NE(text.str().find(fmt::format("ZeRO-{}: {:>10} = weights", z, FormatGiB(f.zero[z].total_bytes()))),
              std::string::npos)
        << text.str();
  }
  EXPECT_DOUBLE_EQ(j["flops"]["per_token"].get<double>(), m.Flops(m.seq_length).per_token);
  EXPECT_NE(text.str().find(FormatFlops(m.Flops(m.seq_length).per_token)), std::string::npos);
  // Without a cluster there is no fit, and --tp alone is refused.
  EXPECT_FALSE(DescribeModel(m, DescribeRequest{}, nullptr).fit);
  DescribeRequest tp_only;
  tp_only.tp = 8;
  EXPECT_THROW(DescribeModel(m, tp_only, nullptr), InputError);
}

// describe --optimizer reads the state as simulate does (BytesPerParam): PyTorch FSDP as torchtitan
// runs it keeps the fp32 parameters as its sharded master (4/d), its bf16 gathered copy (2) through
// the step at ZeRO-1/2, fp32 gradients (4, or 4/d sharded) and Adam's m and v (8/d); ZeRO-0 is DDP
// (4 + 2 bf16 casts, 4 + 4 .grad and buckets, 8). DeepSpeed's BF16_Optimizer runs ZeRO-1 alone.
TEST(Describe, StateFollowsTheOptimizer) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-h100");
  DescribeRequest r;
  r.gpus = 8;
  r.optimizer = OptimizerImpl::kTorchFsdp;
  const ModelDescription d = DescribeModel(m, r, &cl);
  ASSERT_TRUE(d.fit && d.fit->feasible());
  const double n = d.fit->largest.total(), dp = 8;
  const double expected[4] = {n * 22, n * (2 + 4 + 12 / dp), n * (2 + 16 / dp), n * 16 / dp};
  for (int z = 0; z <= 3; ++z) {
    EXPECT_NEAR(d.fit->zero[z].total_bytes(), expected[z], 1e-9 * expected[z]) << "ZeRO-" << z;
    EXPECT_TRUE(d.fit->zero[z].supported) << z;  // simulate models each
  }
  // torchtitan's ZeRO-1 reading is FSDP2 kept through a pipeline, which plan leaves out at pp 1.
  EXPECT_NE(d.fit->zero[1].note.find("FSDP2 under a pipeline"), std::string::npos);
  // DDP beside tensor parallelism: torchtitan refuses it (plan leaves it out).
  DescribeRequest tp2 = r;
  tp2.tp = 2;
  EXPECT_NE(DescribeModel(m, tp2, &cl).fit->zero[0].note.find("runs only as the sole parallelism"), std::string::npos);
  const Json j = DescribeJson(d);
  EXPECT_EQ(j["optimizer"], "fsdp");
  EXPECT_EQ(j["state_bytes_per_param"][0]["formula"], "6 + 8 + 8");
  EXPECT_EQ(j["state_bytes_per_param"][2]["formula"], "2 + (4 + 4 + 8)/d");
  EXPECT_EQ(j["state_bytes_per_param"][3]["formula"], "(4 + 4 + 8)/d");
  std::ostringstream text;
  WriteDescription(text, d);
  EXPECT_NE(text.str().find("ZeRO-0 22   ZeRO-1 6 + 12/d   ZeRO-2 2 + 16/d   ZeRO-3 16/d"), std::string::npos)
      << text.str();
  // Megatron's default reads as Rajbhandari et al.'s, in the same form as before.
  const Json mj = DescribeJson(DescribeModel(m, DescribeRequest{}, nullptr));
  EXPECT_EQ(mj["state_bytes_per_param"][1]["formula"], "2 + 4 + 12/d");
  EXPECT_EQ(mj["state_bytes_per_param"][2]["formula"], "2 + (4 + 12)/d");
  r.optimizer = OptimizerImpl::kDeepSpeedBf16;
  const ModelDescription b = DescribeModel(m, r, &cl);
  for (int z = 0; z <= 3; ++z) EXPECT_EQ(b.fit->zero[z].supported, z == 1) << z;
  EXPECT_NE(b.fit->zero[0].unsupported_reason.find("BF16_Optimizer"), std::string::npos);
  const Json bj = DescribeJson(b);
  ASSERT_EQ(bj["state_bytes_per_param"].size(), 4u);
  EXPECT_TRUE(bj["state_bytes_per_param"][0]["formula"].is_null());
  EXPECT_EQ(bj["state_bytes_per_param"][1]["formula"], "2 + 6 + 12/d");
  EXPECT_TRUE(bj["fit"]["zero"][2]["total_bytes"].is_null());
  EXPECT_TRUE(testing::ExitsTwoWith("describe --model llama3-8b --optimizer adam", "--optimizer: adam not in"));
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

// The search replays only the plans its ranking reaches, and simulates again the candidates its
// bound skipped when the replay turned plans away: its top K equals what simulating every
// candidate with the caching allocator's replay and ranking the ones that fit gives. GPT-3 on
// 256 H100 with TP4 PP8 and no headroom has a plan that fits only by releasing the allocator's
// cache (premise), excluded here, so the search must look past where its bound stopped (premise:
// it simulates a candidate its bound had skipped).
TEST(Ranking, ReplayedRankingMatchesReplayingEveryCandidate) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  PlanOptions o;
  o.gpus = 256;
  o.global_batch_size = 1536;
  o.top_k = 5;
  o.recomputes = {Recompute::kNone};
  o.fixed = {{"tp", "4"}, {"pp", "8"}, {"sp", "true"}};
  o.schedules = {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};  // the plans at risk are ZB-H1's
  o.exclude_memory_at_risk = true;
  // One thread: which candidates the bound skips depends on the order simulations finish in,
  // and the premises below (a skipped candidate revisited) must not depend on the scheduler.
  o.threads = 1;
  const PlanResult r = RunPlan(m, cl, prof, o);
  ASSERT_EQ(r.plans.size(), 5u);
  EXPECT_GE(r.at_risk_excluded, 1u) << "premise: a plan the replay calls at risk";
  EXPECT_GE(r.candidates_revisited, 1u) << "premise: a candidate the bound skipped is simulated after all";
  EXPECT_LE(r.candidates_replayed, r.candidates_simulated);
  std::map<std::string, std::size_t> unused;
  std::vector<std::pair<double, std::string>> all;
  std::size_t at_risk = 0;
  SimulateOptions no_replay;
  no_replay.allocator_replay = false;
  for (const ParallelConfig& c : GenerateCandidates(m, cl, o, &unused)) {
    SimulationResult s = Simulate(m, c, cl, o.gpus, prof, no_replay);
    if (!s.feasible || !s.fits) continue;  // the replay never admits what the allocated peak does not
    ReplayAllocator(m, c, cl, prof, &s);
    if (!s.fits || s.peak_reserved_bytes > cl.gpu.memory_bytes) continue;
    if (s.memory_at_risk) {
      ++at_risk;
      continue;
    }
    all.emplace_back(s.step_time_s, c.Summary());
  }
  EXPECT_GE(at_risk, 1u);
  std::sort(all.begin(), all.end());
  ASSERT_GE(all.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_DOUBLE_EQ(r.plans[i].result.step_time_s, all[i].first) << i;
    EXPECT_TRUE(r.plans[i].result.allocator_replayed);
    EXPECT_FALSE(r.plans[i].result.memory_at_risk);
  }
  // And the replay that ReplayAllocator completes is the one Simulate runs.
  SimulationResult lazy = Simulate(m, r.plans[0].config, cl, o.gpus, prof, no_replay);
  EXPECT_FALSE(lazy.allocator_replayed);
  ReplayAllocator(m, r.plans[0].config, cl, prof, &lazy);
  const SimulationResult full = Simulate(m, r.plans[0].config, cl, o.gpus, prof);
  EXPECT_EQ(lazy.fits, full.fits);
  EXPECT_EQ(lazy.memory_at_risk, full.memory_at_risk);
  EXPECT_DOUBLE_EQ(lazy.peak_reserved_bytes, full.peak_reserved_bytes);
  EXPECT_DOUBLE_EQ(lazy.peak_memory_bytes, full.peak_memory_bytes);
  for (std::size_t i = 0; i < full.stages.size(); ++i) {
    EXPECT_EQ(lazy.stages[i].memory.allocator_retries, full.stages[i].memory.allocator_retries);
  }
}

// With DeepSpeed's optimizer the search keeps to what Megatron-DeepSpeed runs: ZeRO stages 1-3
// (ZeRO-1 also on one data-parallel rank), ZeRO-2/3 without pipeline parallelism, its pipeline
// engine's 1F1B, no Transformer Engine userbuffers, no context parallelism, no HSDP; ZeRO-3 as
// the implementation asked for, and every plan with the DeepSpeed knobs given.
TEST(Space, DeepSpeedCandidatesRunWhatDeepSpeedRuns) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 64;
  o.global_batch_size = 256;
  o.zero_stages = {0, 1, 2, 3};
  o.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  o.zero3_impl = Zero3Impl::kDeepSpeed;
  o.base.ds_prefetch_bucket_elems = 1e6;
  o.base.ds_reduce_bucket_elems = 2e8;
  std::map<std::string, std::size_t> rej;
  const auto cands = GenerateCandidates(m, cl, o, &rej);
  ASSERT_FALSE(cands.empty());
  std::map<int, std::size_t> by_stage;
  bool zero1_on_one_rank = false;
  for (const auto& c : cands) {
    ++by_stage[c.zero_stage];
    EXPECT_EQ(c.optimizer_impl, OptimizerImpl::kDeepSpeedZero) << c.Summary();
    EXPECT_GE(c.zero_stage, 1) << c.Summary();
    EXPECT_EQ(c.zero3_impl, c.zero_stage == 3 ? Zero3Impl::kDeepSpeed : Zero3Impl::kPerLayer) << c.Summary();
    if (c.pp > 1) {
      EXPECT_EQ(c.zero_stage, 1) << c.Summary();
    }
    EXPECT_EQ(c.schedule, Schedule::k1F1B) << c.Summary();
    EXPECT_FALSE(c.tp_comm_overlap) << c.Summary();
    EXPECT_EQ(c.cp, 1) << c.Summary();
    EXPECT_FALSE(c.hybrid_shard()) << c.Summary();
    // DeepSpeed's overlap_comm: on by default at stage 3 only, off under its pipeline engine.
    EXPECT_EQ(c.overlap_grad_reduce, c.zero_stage == 3 && c.pp == 1) << c.Summary();
    EXPECT_EQ(c.ds_prefetch_bucket_elems, 1e6);
    EXPECT_EQ(c.ds_reduce_bucket_elems, 2e8);
    zero1_on_one_rank = zero1_on_one_rank || (c.dp == 1 && c.zero_stage == 1);
  }
  EXPECT_GT(by_stage[1], 0u);
  EXPECT_GT(by_stage[2], 0u);
  EXPECT_GT(by_stage[3], 0u);
  EXPECT_TRUE(zero1_on_one_rank);  // TP8 PP8 DP1, as GPT-NeoX runs its ZeRO-1 on one replica
  EXPECT_GT(rej["(tp, pp, mbs) choices: DeepSpeed's pipeline engine runs 1F1B only"], 0u);

  o.optimizer_impl = OptimizerImpl::kDeepSpeedBf16;  // the BF16_Optimizer: ZeRO-1 alone
  for (const auto& c : GenerateCandidates(m, cl, o, &rej)) EXPECT_EQ(c.zero_stage, 1) << c.Summary();
}

// Layers that pp does not divide are split as DeepSpeed's PipelineModule splits them (the first
// L mod pp stages one more; no explicit first and last sizes), and a MoE model's selective
// recompute is the attention core's (Megatron-DeepSpeed has no --recompute-modules).
TEST(Space, DeepSpeedSplitsAndRecomputeAreDeepSpeeds) {
  const Cluster cl = LoadCluster("dgx-a100-40gb");
  PlanOptions o;
  o.gpus = 24;
  o.global_batch_size = 384;
  o.zero_stages = {1};
  o.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  const Model neox = LoadModel(testing::FixturesDir() + "/hf/gpt-neox-20b.json");  // 44 layers
  std::map<std::string, std::size_t> rej;
  bool uneven = false;
  for (const auto& c : GenerateCandidates(neox, cl, o, &rej)) {
    EXPECT_LT(c.first_stage_layers, 0) << c.Summary();
    EXPECT_LT(c.last_stage_layers, 0) << c.Summary();
    if (neox.num_layers % c.pp != 0 && !c.embedding_slots) {
      uneven = true;
      EXPECT_TRUE(InfeasibilityReasons(neox, c, o.gpus, cl).empty()) << c.Summary();
    }
  }
  EXPECT_TRUE(uneven);  // pp 3 and 6 among them
  PlanOptions megatron = o;
  megatron.optimizer_impl = OptimizerImpl::kMegatron;
  megatron.zero_stages = {0, 1};
  bool first_last = false;
  for (const auto& c : GenerateCandidates(neox, cl, megatron, &rej)) first_last = first_last || c.first_stage_layers >= 0;
  EXPECT_TRUE(first_last);  // Megatron-LM's uneven split, for comparison
  const Model moe = LoadModel("mixtral-8x7b");
  o.gpus = 64;
  o.global_batch_size = 256;
  o.recomputes = {Recompute::kSelective};
  const auto cands = GenerateCandidates(moe, LoadCluster("dgx-h100"), o, &rej);
  ASSERT_FALSE(cands.empty());
  for (const auto& c : cands) EXPECT_EQ(c.recompute_modules, static_cast<unsigned>(kRecomputeCoreAttn)) << c.Summary();
}

// The memory and step-time bounds that prune the search hold for DeepSpeed's stage 3 and its
// ZeRO-1/2 buckets as they do for Megatron's (LowerBounds reads the same coordinator replay).
TEST(Pruning, NeverRemovesADeepSpeedConfigurationThatFits) {
  const Model m = LoadModel("gpt3-13b");
  const Cluster cl = LoadCluster("dgx-a100-40gb");
  PlanOptions o;
  o.gpus = 32;
  o.global_batch_size = 128;
  o.zero_stages = {1, 2, 3};
  o.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  o.zero3_impl = Zero3Impl::kDeepSpeed;
  const BoundsCheck k = CheckBounds(m, cl, o, 2);
  EXPECT_GT(k.pruned, 0u);
  EXPECT_GT(k.zero3, 10u);
  EXPECT_GT(k.checked, 50u);
}

// A fixed ZeRO stage where tp x pp take every GPU (dp x cp = 1): nothing to shard over, and the
// reason says so (it used to read only "no candidate configuration could be formed").
TEST(Planner, FixedZeroOverOneDataParallelRankIsAReason) {
  const Model m = LoadModel("gpt3-1.3b");
  const Cluster cl = LoadCluster("dgx-a100");
  PlanOptions o;
  o.gpus = 8;
  o.global_batch_size = 64;
  o.fixed = {{"pp", "4"}, {"tp", "2"}, {"zero", "1"}};
  o.zero_stages = {1};
  std::map<std::string, std::size_t> rej;
  EXPECT_TRUE(GenerateCandidates(m, cl, o, &rej).empty());
  EXPECT_GT(rej["(dp, ZeRO) choices: ZeRO-1/2/3 shard over dp x cp = 1 rank"], 0u);
}

}  // namespace
}  // namespace shardcast
