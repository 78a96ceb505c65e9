#pragma once
/// \file planner.h
/// Search over data/tensor/pipeline-parallel configurations (`shardcast plan`): generate the
/// candidate space, prune with exact lower bounds (memory, then step time against the current
/// top K), simulate the rest in parallel, rank. Docs: docs/planner.md.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast {

enum class Objective { kThroughput, kCost, kEnergy };
const char* ToString(Objective o);

struct PlanOptions {
  std::int64_t gpus = 0;
  std::int64_t global_batch_size = 0;
  std::int64_t seq_length = 0;  ///< 0: the model's
  int top_k = 10;
  Objective objective = Objective::kThroughput;
  std::int64_t max_tp = 0;  ///< 0: GPUs per node (tensor parallelism stays inside a node)
  /// The schedules searched: upstream Megatron-LM's by default; ZB-H1 (the zero-bubble fork's)
  /// and GPipe when asked for (--schedules).
  std::vector<Schedule> schedules = {Schedule::k1F1B, Schedule::kInterleaved};
  std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  std::vector<int> zero_stages = {0, 1};  ///< 2 and 3 are added when listed here
  std::int64_t max_micro_batch_size = 16;
  /// Context-parallel sizes searched: each cp whose 2*cp sequence chunks hold at least
  /// min_cp_chunk_tokens tokens (shorter chunks leave each attention block too small to hide its
  /// K/V transfer; docs/planner.md), up to max_cp (0: no further limit).
  std::int64_t max_cp = 0;
  std::int64_t min_cp_chunk_tokens = 1024;
  /// The largest expert-parallel size searched for MoE models (0: up to the routed experts).
  std::int64_t max_ep = 0;
  /// Fixed values (from `--fix tp=8,pp=...`): keys tp, pp, cp, cp_comm, ep, etp, vp, mbs, zero,
  /// sp, tp_comm_overlap, recompute, schedule.
  std::map<std::string, std::string> fixed;
  int threads = 0;  ///< 0: all cores
  bool flash_attention = true;
  /// Megatron-Core's pipeline behaviour for every candidate (ApplyMegatronCoreDefaults), else
  /// Megatron-LM 2021-22's (scatter/gather messages, non-blocking transfers).
  bool megatron_core = true;
  /// Settings every candidate takes as they are (the search does not vary them): the precision
  /// and its options (CopyPrecisionSettings), the MoE load imbalance and forced balancing, the
  /// cross-entropy implementation, and DeepSpeed's buckets and stage-3 limits (ds_*; each plan
  /// whose optimizer and ZeRO stage run what a knob tunes takes it).
  ParallelConfig base;
  /// Whose optimizer every candidate runs (ParallelConfig::optimizer_impl). DeepSpeed's ZeRO
  /// optimizer (kDeepSpeedZero) shards at least its state: its candidates have ZeRO stages 1-3,
  /// ZeRO-1 also with one data-parallel rank (DeepSpeed runs it so); the BF16_Optimizer
  /// (kDeepSpeedBf16) ZeRO-1 only. Hybrid sharding (HSDP) is searched with Megatron's only.
  OptimizerImpl optimizer_impl = OptimizerImpl::kMegatron;
  /// How ZeRO-3 candidates gather and reduce (ParallelConfig::zero3_impl).
  Zero3Impl zero3_impl = Zero3Impl::kPerLayer;
  double price_usd_per_gpu_hour = 0;  ///< 0: the GPU preset's (PlanPrice)
  double energy_overhead = 1.3;       ///< facility and host power over GPU board power
  /// Memory a plan must leave free per GPU beyond what the caching allocator's replay reserves
  /// (NCCL's lazily grown buffers, spikes the model does not trace, run-to-run variation).
  double min_headroom_bytes = 0;
  /// Reject plans at risk of running out of memory (SimulationResult::memory_at_risk: they fit
  /// only by releasing the caching allocator's cache), as if they did not fit.
  bool exclude_memory_at_risk = false;
  /// Beside each full-recompute candidate, partial recompute (PartialRecomputeVariants): the
  /// first quarter, half and three quarters of each chunk's layers (Megatron-LM's block method),
  /// or with --optimizer fsdp one layer in 2, 3 or 4 (torchtitan's layer frequency).
  bool partial_recompute = true;
  /// Called with (done, total) as candidates are evaluated (for a progress bar).
  std::function<void(std::size_t, std::size_t)> progress;
};

struct Plan {
  ParallelConfig config;
  SimulationResult result;  ///< without the task graph
  double usd_per_million_tokens = 0;
  double joules_per_token = 0;
};

/// A simulated candidate that can run, for the plan report's scatter of step time vs memory.
struct PlanPoint {
  std::string config;  ///< ParallelConfig::Summary()
  double step_time_s = 0, peak_memory_bytes = 0;
  /// What the caching allocator reserves where the ranking ran its replay, else the allocated peak.
  double peak_reserved_bytes = 0;
  /// Fits with the required headroom: by the allocator's replay where the ranking ran it,
  /// else by the allocated peak.
  bool fits = false;
  bool at_risk = false;  ///< SimulationResult::memory_at_risk
};

struct PlanResult {
  std::size_t candidates_generated = 0;
  /// Of those, partial-recompute candidates (PlanOptions::partial_recompute): made beside each
  /// full-recompute candidate that can fit in memory by its lower bound where the same candidate
  /// without recompute cannot.
  std::size_t partial_recompute_candidates = 0;
  std::size_t candidates_simulated = 0;
  /// Of those, the ones the ranking ran the caching allocator's replay on (ReplayAllocator):
  /// fitting by their allocated peak, best first, until K fit by the replay and the best not at
  /// risk is found; a ranked plan fits when the replay finds room for every request and its
  /// reserved figure plus min_headroom_bytes is within usable memory.
  std::size_t candidates_replayed = 0;
  /// Of the simulated, those the step-time bound skipped at first and the search simulated
  /// when the ranking looked past where the bound had stopped (the replay turned plans away,
  /// or every plan shown is at risk and the best one that is not lies further); like the
  /// simulated count, it can depend on the thread count.
  std::size_t candidates_revisited = 0;
  /// Layer sets the bounds kept (LayerCostCache): one per distinct LayerCostKey among the
  /// candidates whose bounds were computed, the other candidates sharing them; unlike the
  /// simulated counts, it does not depend on the thread count.
  std::size_t layer_sets_kept = 0;
  /// Candidates set aside, by reason; with the plans that fit they add up to the generated
  /// count: generated = sum(rejected) + fitting simulated.
  std::map<std::string, std::size_t> rejected;
  /// Combinations never formed into candidates, by reason; each reason names its unit
  /// ("(tp, pp) pairs: ..."), since a rejected pair would have produced many candidates.
  std::map<std::string, std::size_t> not_generated;
  std::vector<Plan> plans;                      ///< best first, at most top_k
  /// The best plan that is not at risk of running out of memory (SimulationResult::
  /// memory_at_risk), found even when it ranks below top_k; empty when every plan is at risk.
  std::optional<Plan> best_not_at_risk;
  /// Plans that fit but were left out as at risk (PlanOptions::exclude_memory_at_risk).
  std::size_t at_risk_excluded = 0;
  /// When nothing fits: the candidates that came closest (least memory needed: the allocated
  /// peak, or the reserved figure where the replay ran and it is larger), and advice.
  std::vector<Plan> closest;
  std::vector<std::string> advice;
  /// Every simulated candidate that can run (fitting or not), by step time then configuration.
  std::vector<PlanPoint> points;
};

/// Every candidate configuration of the space for `model` on `gpus` GPUs of `cluster`, and the
/// combinations rejected while generating (sizes that do not divide), counted per reason with the
/// unit in the reason. Deterministic order.
std::vector<ParallelConfig> GenerateCandidates(const Model& model, const Cluster& cluster,
                                               const PlanOptions& opts,
                                               std::map<std::string, std::size_t>* rejected);

/// USD per GPU-hour the plans are priced at: --price-per-gpu-hour, else the GPU preset's (0 when
/// it has none).
double PlanPrice(const PlanOptions& o, const Cluster& cluster);

/// The largest share of its layers a partial recompute `x` reruns on any pipeline stage, from the
/// stages' own layers (RecomputedLayersPerStage: uneven splits and embedding slots included), in
/// [0, 1]; -1 where `x` runs as the step without recompute or with full recompute
/// (WithEffectiveRecompute) or its split is impossible. The planner reads a variant's memory off
/// the lower bounds without and with full recompute in proportion to it, which keeps that
/// estimate a lower bound (no stage saves more); what then does not fit is followed up.
double PartialRecomputeShare(const Model& model, const ParallelConfig& x);
/// The partial-recompute candidates beside full-recompute candidate `c` (PlanOptions::
/// partial_recompute), each with its PartialRecomputeShare, in ascending order of the share of
/// all the model's layers they rerun: with Megatron's optimizer the first N layers of each chunk
/// for N a quarter, a half and three quarters of a chunk's mean layers (rounded); with --optimizer
/// fsdp one layer in 4, 3 or 2 of a rank's. Variants that rerun no layer or, on a model without
/// multi-token-prediction layers, every layer (the steps without and with full recompute), or the
/// same layers of every stage as a variant before them, are left out. None with a fixed
/// recompute (--fix recompute=full means every layer), for DeepSpeed's optimizers
/// (Megatron-DeepSpeed of 2021-22 has no block method) or where the cost model does not combine
/// them (layers kept in bf16, activation offloading, DeepSpeed's ZeRO-3 gather plans).
std::vector<std::pair<ParallelConfig, double>> PartialRecomputeVariants(const Model& model, const PlanOptions& o,
                                                                        const ParallelConfig& c);

/// Runs the search. Throws InputError for bad options (no GPUs, batch not divisible...).
PlanResult RunPlan(const Model& model, const Cluster& cluster, const HardwareProfile& profile,
                   const PlanOptions& opts);

/// The value the objective ranks by (smaller is better): step time, USD per million tokens, or
/// joules per token.
double ObjectiveValue(const Plan& p, Objective o);

/// The known bias of predictions for a configuration like `c`, from the published runs
/// (docs/accuracy.md), or "" when none is known: the MPT-3B runs without activation recompute took
/// 21-27% longer than predicted (validate rows 217-219), the same table's MPT-1b and 7b runs 16-33%
/// (scripts/llm-foundry-crosscheck.py).
std::string KnownBias(const ParallelConfig& c);

}  // namespace shardcast
