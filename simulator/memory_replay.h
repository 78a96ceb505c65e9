#pragma once
/// \file memory_replay.h
/// A stage's device allocations over a training step, tensor by tensor, replayed through the
/// model of PyTorch's caching allocator (allocator.h): what the allocator reserves, whether it
/// has to release its cache to go on (num_alloc_retries), and whether a request finds no room
/// at all. docs/simulator.md, "Reserved memory".
///
/// The trace (one compute stream, the pipeline schedule's order of the stage's passes):
///  - before the step: one block of the stage's static bytes (weights, gradients, optimizer
///    state, communication buffers: Megatron's and DeepSpeed's flat buffers);
///  - a forward pass of a chunk: per layer, the tensors its forward ops save (Op::saved_bytes,
///    one tensor per op, in op order), kept until the backward; tensors the recompute policy
///    drops (Op::rebuilt) are made and freed as the forward runs (one alive after the next is
///    made); under full recompute the layer keeps only its input. The loss's working memory
///    (the 16-bit logits, and eager PyTorch's fp32 copy) is one block held while the loss runs
///    (ChunkCost::fwd_transient_bytes);
///  - a backward pass: per layer in reverse, the rebuilt tensors made again, then op by op in
///    reverse the input gradient made (the size of the op's saved tensor) and the op's saved
///    tensor and the incoming gradient freed; the output layer's logit gradient first;
///  - a zero-bubble schedule's W pass frees what its B pass kept for it (ChunkCost::weight_saved_bytes);
///  - after each step's passes, DeepSpeed ZeRO-1/2's optimizer step: the rank's gradient partition
///    flattened (2 bytes per element) and cast to fp32 (4 bytes), both freed by the step's end;
///  - two steps, the second starting from the first one's cache (the peak of a steady run).
/// The micro-batches replayed are at most max(2 pp, 4) (a multiple of pp for the interleaved
/// schedule, all of them for GPipe): the stage's most micro-batches in flight are reached, and
/// the steady state repeats the same allocations from there.
///
/// What it leaves out: allocations on other streams (NCCL's own buffers, outside the allocator,
/// are in the profile's framework overhead), gradients allocated lazily in the first backward
/// (PyTorch's per-parameter .grad), optimizer state created lazily in the first step, and the
/// allocator's per-stream pools.

#include <vector>

#include "models/parallel.h"
#include "simulator/allocator.h"
#include "simulator/cost_model.h"

namespace shardcast {

/// Gradients autograd allocates per parameter tensor (.grad) during the backward, instead of a
/// flat buffer allocated once (Megatron's DDP grad buffer, DeepSpeed's fp32 buffers):
///  - DeepSpeed ZeRO-1's fp16 path (stage_1_and_2.py, 2022): 16-bit .grad made in the step's
///    first backward, accumulated in place, set to None by zero_grad after the step;
///  - DeepSpeed's BF16_Optimizer (bf16_optimizer.py and the pipeline engine, 2022): bf16 .grad
///    cleared before every backward (clear_lp_grads) and made again by it, then added into the
///    fp32 flat buffer (update_hp_grads).
struct LazyGradients {
  double bytes_per_param = 0;   ///< 0: gradients live in flat buffers allocated once
  bool per_microbatch = false;  ///< released before every backward (else after the step)
};
LazyGradients LazyGradientsOf(const ParallelConfig& c);

/// Whether the optimizer's setup flattens the 16-bit weights into one buffer after the model made
/// them tensor by tensor, leaving the tensors' memory in the allocator's cache: DeepSpeed ZeRO-1/2
/// (stage_1_and_2.py, 2022: the tensors moved to the CPU, flattened there, the flat buffer moved
/// back) and the BF16_Optimizer (the flat buffer made on the GPU, the tensors then pointed into it).
bool FlattensWeightsAtInit(const ParallelConfig& c);

/// One layer's gathered parameters under per-layer ZeRO-3, bytes: the largest over the stage's
/// chunks of a chunk's mean transformer layer (its parameters per GPU without the embedding and
/// the output layer, over its layers: every layer of a dense model; dense and MoE layers, or an
/// MTP module, averaged) at `param_gather_bytes` per parameter (the configuration's gather width
/// as RunConfig sets it: 2 for 16-bit, 1 with --fp8-param-gather, 4 for fp32 parameters).
double Zero3GatheredLayerBytes(const CostModel& cm, double param_gather_bytes, int stage);

/// The most gathered parameters per-layer ZeRO-3 holds at once, bytes, which StaticStageMemory
/// counts: the running unit and the prefetched next, the units being each transformer layer, the
/// embedding and the output layer (with the final norm), as PyTorch FSDP2 wraps them
/// (torchtitan's apply_fsdp: the embedding, each block, the norm with the output): two layers,
/// or a layer beside the embedding (the first forward) or beside the output layer (which stays
/// gathered from its forward into its backward). The embedding and output gather 16-bit weights
/// even with --fp8-param-gather.
double Zero3GatheredStaticBytes(const CostModel& cm, const ParallelConfig& c, int stage);

/// Whether the replay makes the per-layer ZeRO-3 gathers one by one, each block held by the
/// allocator until its pass is done (ParallelConfig::zero3_limit_all_gathers off), instead of
/// counting two layers' gathered parameters with the static bytes.
bool ReplaysZero3Gathers(const ParallelConfig& c);

struct AllocatorReplay {
  double peak_allocated_bytes = 0;  ///< of the replayed trace (rounded tensor sizes)
  double peak_reserved_bytes = 0;   ///< segments held by the allocator at their most
  int retries = 0;                  ///< cache releases to make room (num_alloc_retries) in the second step
  bool out_of_memory = false;       ///< a request found no room even after releasing the cache
  double oom_request_bytes = 0;     ///< the first such request
  int microbatches = 0;             ///< micro-batches replayed per step
  /// peak_reserved_bytes - peak_allocated_bytes: what the allocator holds beyond the tensors'
  /// own peak (rounding, segment sizes, fragmentation).
  double overhead_bytes() const { return peak_reserved_bytes - peak_allocated_bytes; }
  /// overhead_bytes() of the same trace replayed without a capacity: what the cache would grow to
  /// on a device with more memory. Equal to overhead_bytes() where the replay had no capacity or
  /// stayed within it; larger where it had to release its cache (ReplayStageMemory sets it).
  double unlimited_overhead_bytes = 0;
};

/// Replays stage `stage` (0 <= stage < c.pp) of the cost model `cm` built for `c`: its static
/// bytes first, then two steps of its passes. `capacity_bytes`: what the allocator may reserve
/// (<= 0: unlimited). `trace` (optional): receives every call the replay makes on the allocator.
/// Throws std::out_of_range for a stage outside the cost model.
AllocatorReplay ReplayStageAllocations(const CostModel& cm, const ParallelConfig& c, int stage,
                                       double static_bytes, double capacity_bytes,
                                       std::vector<AllocatorEvent>* trace = nullptr);

/// One stage's replayed allocator calls and the capacity its replay at the device's memory runs
/// with (`simulate --allocator-trace`; scripts/allocator-check.py replays them through PyTorch's
/// allocator with that capacity as its memory fraction).
struct StageAllocatorTrace {
  int stage = 0;
  double capacity_bytes = 0;  ///< usable memory less the framework overhead, shifted as the replay is
  std::vector<AllocatorEvent> events;
};

}  // namespace shardcast
