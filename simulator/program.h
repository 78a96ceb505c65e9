#pragma once
/// \file program.h
/// The per-rank op program: what one GPU (or CPU rank) of pipeline stage `stage` executes in one
/// training step, in order, built from the same schedule and cost model the simulator uses. The
/// executor runs exactly this program, so prediction and measurement compare op by op.

#include <string>
#include <vector>

#include "simulator/cost_model.h"
#include "simulator/schedule.h"

namespace shardcast {

/// kEmbeddingCollective: the tied embedding's gradient all-reduce between the first and the last
/// stage (CostModel::embedding_pair); kEpCollective: an MoE layer's token dispatch or combine over
/// its expert-parallel group;
/// kEtpCollective: the gather or scatter of an expert's tokens over its expert-tensor-parallel
/// group (Megatron-Core's parallel folding: etp innermost, then ep, then the expert-data-parallel
/// ranks, over a stage's tp x dp GPUs).
enum class ProgKind {
  kCompute, kTpCollective, kSend, kRecv, kAlloc, kFree, kDpCollective, kDpWait, kOptimizer, kEpCollective,
  kEtpCollective, kEmbeddingCollective
};
const char* ToString(ProgKind k);

struct ProgOp {
  ProgKind kind = ProgKind::kCompute;
  Op op;               ///< compute and collective ops: the cost model's op (shape, bytes, duration)
  ItemKind item = ItemKind::kForward;  ///< the schedule item this op belongs to
  int microbatch = -1, chunk = -1;
  int peer_stage = -1;  ///< send/recv
  int tag = 0;          ///< send/recv matching tag
  double bytes = 0;     ///< send/recv/alloc/free/optimizer bytes; collective size (nccl-tests)
  /// A data-parallel collective issued on its own stream (overlap_grad_reduce); a later kDpWait
  /// waits for all of them.
  bool async = false;
  /// A data-parallel collective of the routed experts' gradients or parameters: over the
  /// expert-data-parallel group (tp x dp / (ep x etp) ranks), not the data-parallel one.
  bool experts = false;
};

struct RankProgram {
  int stage = 0;
  std::vector<ProgOp> ops;
  /// Sum of the predicted durations of the ops (no waiting): the stage's busy time.
  double predicted_busy_s = 0;
};

/// The program of one rank of `stage`. Pipeline sends are non-blocking; receives block where the
/// data is needed. Gradients are reduced per bucket (ParallelConfig::BucketParams: Megatron-LM's bucket size, or torchtitan's DDP buckets): with
/// `overlap_grad_reduce`, each chunk's buckets are issued asynchronously right after the chunk's
/// last backward and waited for before the optimizer; without, they run after the last
/// backward. ZeRO-2 reduces them after every micro-batch's backward of the chunk (inline
/// without overlap_grad_reduce). Then, on the first and last stage with tied embeddings, the
/// embedding gradient's all-reduce; then the optimizer, then ZeRO-1/2's parameter all-gather.
/// Tags: (microbatch * chunks + chunk) * 2 + direction.
/// Each transformer layer runs its own op list (`m`'s MoE layers the MoE layer's, the layers kept
/// in bf16 under a low-precision format theirs), and the last chunk runs the output layer, then
/// the multi-token-prediction modules (each its own ops and a transformer layer); backward passes
/// run in the reverse order. The ops of one item add up to its chunk's ChunkCost pass times.
RankProgram BuildRankProgram(const Model& m, const ParallelConfig& cfg, const CostModel& cm,
                             const PipelineSchedule& sched, const HardwareProfile& profile, int stage);

}  // namespace shardcast
