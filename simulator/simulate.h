#pragma once
/// \file simulate.h
/// One training step of a parallel configuration: builds the task graph from the schedule and
/// the cost model, runs the engine, and reports step time, throughput, MFU/HFU, bubble, time
/// breakdown, per-stage memory, and the critical path. Definitions: DESIGN.md section 5 and
/// docs/simulator.md.

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/cost_model.h"
#include "simulator/engine.h"
#include "simulator/profile.h"
#include "simulator/schedule.h"

namespace shardcast {

struct StageAllocatorTrace;  // simulator/memory_replay.h

struct SimulateOptions {
  /// Simulate every data-parallel replica explicitly instead of one representative per stage
  /// (for tests of the symmetry argument; cost grows with dp).
  bool full_rank = false;
  bool keep_graph = false;  ///< keep the task graph and timings (for traces and tests)
  /// The schedule alone, as the closed forms assume it: every chunk costs the mean chunk cost
  /// (rounded to whole nanoseconds), communication, data parallelism and the optimizer are free.
  bool ideal_pipeline = false;
  /// Pipeline transfers, data-parallel collectives and the optimizer are free (TP and CP
  /// collectives stay inside the chunks' costs), every chunk keeps its own cost (rounded to whole
  /// nanoseconds, recompute folded into its backward): the schedule over unequal stages, as the
  /// closed forms of uneven pipelines assume it.
  bool free_communication = false;
  /// Reuse the task graph of the last simulation of the same shape on this thread, giving it
  /// this configuration's numbers (identical results, a fraction of the time). Off: build anew.
  bool reuse_graph = true;
  /// Copy the steady state's repeated schedule periods instead of simulating them event by
  /// event (TaskGraph::Run; identical results). Off: every event is simulated.
  bool skip_periods = true;
  /// Replay each stage's allocations through the model of PyTorch's caching allocator
  /// (ReplayStageAllocations) for StageMemory::reserved_bytes, "fits" and "at risk". Off (the
  /// planner's first pass): reserved_bytes = peak_bytes, fits by the allocated peak, never at risk.
  bool allocator_replay = true;
  /// With allocator_replay: receives each stage's replayed allocator calls (not owned; nullptr:
  /// none kept). `simulate --allocator-trace`.
  std::vector<StageAllocatorTrace>* allocator_traces = nullptr;
  /// A straggler: one GPU of pipeline stage `straggler_stage` (0 .. pp - 1; -1: none) runs its
  /// kernels `straggler_slowdown` times longer (>= 1). Its tensor-, context- and expert-parallel
  /// peers wait for it at every collective, so the stage's compute (forward, backward,
  /// recompute, optimizer step) takes that much longer in every data-parallel replica of the
  /// stage that is simulated: the replica holding the slow GPU sets the pace, as the gradient
  /// reduction waits for it (docs/simulator.md, "Stragglers"). Collectives, transfers and host
  /// work keep their times. std::invalid_argument for a stage outside the pipeline or a
  /// slowdown below 1 (the command line checks both first).
  int straggler_stage = -1;
  double straggler_slowdown = 1;
  /// With straggler_stage: the network links (NICs) of the node holding that stage's slow GPU
  /// run `straggler_nic_slowdown` times slower (>= 1): the stage's data-parallel collectives and
  /// the pipeline transfers into and out of it that cross nodes, and the tied-embedding
  /// all-reduce when it has an end there, run at the rates `--what-if nic_Gbps=x(1/F)` gives
  /// (docs/simulator.md, "Stragglers"). Context- and expert-parallel collectives across nodes
  /// keep their rates.
  double straggler_nic_slowdown = 1;
};

/// Time of one stage, in seconds; the parts add up to the step time.
struct StageBreakdown {
  double compute_s = 0;       ///< forward + backward GEMMs, attention, memory-bound ops
  double recompute_s = 0;     ///< recomputed forward passes
  double tp_comm_s = 0;       ///< tensor-parallel collectives (on the critical path)
  double cp_comm_s = 0;       ///< context-parallel K/V exchange not hidden behind attention
  double ep_comm_s = 0;       ///< MoE token dispatch and combine (expert-parallel collectives)
  double pp_comm_s = 0;       ///< compute stream waiting on a pipeline transfer in flight
  /// Waiting on the stage's own data-parallel collectives; under Zero3Impl::kDeepSpeed2021 also
  /// the host's list handling and the copies of its per-tensor collectives (compute stream).
  double dp_comm_s = 0;
  double bubble_s = 0;        ///< waiting on other stages (fill, drain, imbalance)
  double optimizer_s = 0;
};

struct StageMemory {
  double weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  /// Of weights_bytes: the low-precision format's quantized weight copies and scaling state.
  double quantized_weights_bytes = 0;
  double activations_bytes = 0;  ///< peak of saved activations + working memory
  /// Peak of the activations kept from forward to backward alone (no working memory): the
  /// quantity Korthikanti et al. 2022 report.
  double saved_activations_bytes = 0;
  /// Communication buffers: ZeRO-3's gathered parameters (two layers' per-layer; under
  /// Zero3Impl::kDeepSpeed2021, Zero3GatheredPeakBytes and the persistent small tensors) and
  /// the pipeline's send and receive buffers.
  double comm_buffer_bytes = 0;
  double framework_bytes = 0;
  double peak_bytes = 0;  ///< allocated at the peak (torch.cuda.max_memory_allocated) + framework_bytes
  /// What PyTorch's caching allocator reserves at the peak, plus framework_bytes: peak_bytes plus
  /// the allocator's overhead in a replay of the stage's allocations (AllocatorReplay). The
  /// device memory the stage holds, nvidia-smi's figure.
  double reserved_bytes = 0;
  /// What the caching allocator would reserve with no memory limit, plus framework_bytes: the
  /// device memory a GPU with more memory needs for this stage. Equal to reserved_bytes unless
  /// the replay had to release its cache to stay within usable memory (then reserved_bytes is
  /// what it held under that limit, and this is larger). Where the replay ran out of room,
  /// reserved_bytes is this figure too (a replay stopped part-way gives none).
  double reserved_unlimited_bytes = 0;
  /// The replay's cache releases per replayed step (num_alloc_retries: each a device
  /// synchronization and cudaFree/cudaMalloc calls; near the memory limit).
  int allocator_retries = 0;
  /// Micro-batches of the replayed step: the step's, or fewer where the steady state repeats
  /// past a cap (memory_replay.cc; whole pipeline flushes), which allocator_retries count over.
  int allocator_replayed_microbatches = 0;
  int peak_inflight_microbatches = 0;
};

struct StageResult {
  int stage = 0;
  int layers = 0;
  /// Of `layers`, those that rerun their forward in the backward: all under full recompute, some
  /// under partial recompute (ParallelConfig::LayerRecomputed), none otherwise.
  int recomputed_layers = 0;
  StageBreakdown time;
  StageMemory memory;
  double bubble_fraction = 0;
  /// The allocated peak fits in usable memory, and the caching allocator's replay (when run)
  /// found room for every request, releasing its cache where it had to (PyTorch's
  /// num_alloc_retries); a request it finds no room for even then is PyTorch's out-of-memory.
  bool fits = true;
  /// Fits only by releasing the allocator's cache: the replay at the device's capacity retried
  /// (each retry a device synchronization and cudaFree/cudaMalloc calls, and the step one tensor
  /// away from out-of-memory).
  bool at_risk = false;
};

struct SimulationResult {
  bool feasible = true;
  std::vector<std::string> reasons;  ///< why not feasible (does not divide, does not fit)
  double step_time_s = 0;
  double tokens_per_s = 0, samples_per_s = 0;
  /// Model FLOPs utilization in the PaLM / SC21 convention (full s^2 attention matrix), and with
  /// the attention term halved for causal masking (current Megatron-LM's num_floating_point_operations);
  /// hardware FLOPs utilization adds recomputed FLOPs to `mfu`'s.
  double mfu = 0, mfu_causal = 0, hfu = 0;
  double model_flops_per_step = 0, model_flops_causal_per_step = 0, hardware_flops_per_step = 0;
  /// MoE: the busiest expert-parallel rank's tokens over the mean that the step ran at
  /// (MoeImbalance); 0 for dense models.
  double moe_load_imbalance = 0;
  /// MoE with the flex (DeepEP) dispatcher across nodes: the busiest node's load over the mean
  /// that DeepEP's NIC part ran at (MoeNodeImbalance); 1 otherwise, 0 for dense models.
  double moe_node_imbalance = 0;
  /// FLOPs the kernels execute per step, summed over all GPUs from the cost model's ops: causal
  /// attention at half the full matrix where the kernel skips the masked half (flash attention),
  /// FlashAttention's backward recompute of the scores, every recomputed forward. Unlike MFU/HFU
  /// (the field's formula) its utilization cannot exceed the kernels' achieved rates.
  double executed_flops_per_step = 0;
  double executed_flops_utilization = 0;  ///< executed_flops_per_step / (step time * peak * GPUs)
  double bubble_fraction = 0;  ///< mean over stages
  StageBreakdown breakdown;    ///< mean over stages
  double peak_memory_bytes = 0;
  /// The largest StageMemory::reserved_bytes: what the caching allocator holds at its most, plus
  /// the framework overhead (nvidia-smi's figure).
  double peak_reserved_bytes = 0;
  /// The largest StageMemory::reserved_unlimited_bytes: what a GPU with more memory needs (the
  /// plan's advice and its "closest candidates" read it).
  double peak_reserved_unlimited_bytes = 0;
  double usable_memory_bytes = 0;
  bool fits = true;
  bool memory_at_risk = false;  ///< fits, and some stage is at risk (StageResult::at_risk)
  /// The caching allocator's replay ran (SimulateOptions::allocator_replay, or ReplayAllocator):
  /// "fits", "at risk" and the reserved figures are its; else by the allocated peak alone.
  bool allocator_replayed = false;
  std::vector<StageResult> stages;
  /// Zero3Impl::kDeepSpeed: what its parameter coordinator does over a micro-batch (CostModel's
  /// ds_zero3; all zero otherwise).
  DeepSpeedZero3Plan ds_zero3;
  std::vector<std::string> critical_path;  ///< a few summary lines
  /// The same, structured: time on the critical path per (stage, task kind), largest first.
  struct CriticalShare {
    int stage = 0;
    std::string kind;
    int tasks = 0;
    double seconds = 0;
  };
  std::vector<CriticalShare> critical_shares;
  int critical_path_tasks = 0;
  std::int64_t num_microbatches = 0;
  std::size_t num_tasks = 0;
  std::uint64_t num_events = 0;
  /// The task graph's structure came from an earlier simulation of the same shape on this
  /// thread (SimulateOptions::reuse_graph); the numbers are this configuration's.
  bool graph_reused = false;
  /// Tasks whose times were copied from the same task one or more schedule periods earlier
  /// (SimulateOptions::skip_periods), of num_tasks.
  std::uint64_t copied_tasks = 0;
  // Kept when SimulateOptions::keep_graph.
  TaskGraph graph;
  EngineResult timeline;
  std::vector<int> device_stage;  ///< device -> pipeline stage
};

/// Simulates one step. Never throws for a configuration that cannot run: returns feasible=false
/// with reasons. `cluster` gives GPU and fabric; `gpus` the GPU count.
SimulationResult Simulate(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                          std::int64_t gpus, const HardwareProfile& profile,
                          const SimulateOptions& opts = {});

/// Completes `result`, simulated by Simulate(model, cfg, cluster, gpus, profile) with
/// SimulateOptions::allocator_replay off, as the replay would have: each stage's reserved
/// figure and retries, "fits", "at risk", the memory reasons and the peaks (the step's timing is
/// untouched). The replay reads only the configuration and the stages' memory, which no
/// SimulateOptions switch changes, so any options give the same verdict. The planner replays
/// only the plans it ranks (docs/planner.md). Does nothing to an infeasible result or one
/// already replayed.
void ReplayAllocator(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                     const HardwareProfile& profile, SimulationResult* result);

/// DeepSpeed ZeRO-1/2's contiguous gradient bucket on pipeline stage `stage`, bytes: with
/// OptimizerImpl::kDeepSpeedZero at ZeRO-1/2 and contiguous_gradients (ds_contiguous_gradients),
/// reduce_bucket_size (ds_reduce_bucket_elems) 16-bit elements, twice with overlap_comm
/// (overlap_grad_reduce; DeepSpeed's engine turns it off under its pipeline engine), plus one
/// more for the flattened copy its multi-rank all-reduce reduces (ds_multi_rank_bucket_allreduce,
/// allreduce_bucket's flatten) where the buckets are reduced inside the backward (no pipeline,
/// and ZeRO-2 or overlap_comm). Without contiguous gradients, where they are reduced inside the
/// backward: the flattened copy, and with overlap_comm the previous bucket's gradients. All on
/// the stage
/// whose backward runs through DeepSpeed's optimizer while activations are held (the last; the
/// only one without pipeline parallelism; deepspeed/runtime/zero/stage_1_and_2.py `backward`,
/// v0.16.5; the other stages allocate theirs in reduce_gradients after their backward). 0 otherwise.
double DeepSpeedBucketBytes(const ParallelConfig& cfg, int stage);

/// Weights, gradients, optimizer state, communication buffers and framework overhead of one GPU
/// of pipeline stage `stage` (activations 0; `peak_bytes` is their sum).
StageMemory StaticStageMemory(const CostModel& cm, const ParallelConfig& cfg,
                              const HardwareProfile& prof, int stage);

/// Cheap bounds without running the engine, for the planner's pruning. Both never exceed what
/// Simulate returns for a feasible configuration: the step takes at least the compute work of
/// its busiest stage, and a stage's peak memory is at least its static memory plus the saved
/// activations after the forward pass with the most micro-batches in flight.
struct Bounds {
  double step_time_lower_s = 0;
  double peak_memory_lower_bytes = 0;
  int worst_stage = 0;
};
/// `cache` (optional) shares the layers' costs among a search's candidates (LayerCostCache; InternalError
/// when it was bound to another model, cluster or profile object).
Bounds LowerBounds(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                   const HardwareProfile& profile, LayerCostCache* cache = nullptr);

/// The `simulate --json` document (keys pinned in the simulator issue).
Json ResultToJson(const SimulationResult& r, const Model& m, const ParallelConfig& cfg,
                  const Cluster& cl, std::int64_t gpus);
/// Chrome trace JSON (one process per stage, one thread per stream); opens in Perfetto.
std::string ChromeTrace(const SimulationResult& r);
/// The streams of a simulated device, 0 .. NumSimulationStreams() - 1 (TaskNode::stream): compute,
/// pp send (forward), pp send (backward), dp reduce, dp param gather.
int NumSimulationStreams();
const char* StreamName(int stream);

}  // namespace shardcast
