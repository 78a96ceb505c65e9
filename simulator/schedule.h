#pragma once
/// \file schedule.h
/// Pipeline schedules as per-stage program orders of compute items: which micro-batch and which
/// virtual chunk each stage runs forward (F), backward (B, input gradients) and weight-gradient
/// (W) passes for, in the order a framework issues them.

#include <cstdint>
#include <vector>

#include "models/parallel.h"

namespace shardcast {

enum class ItemKind { kForward, kBackward, kWeight };
/// kBackward without a separate kWeight item means the full backward (B and W fused).
struct ScheduleItem {
  ItemKind kind = ItemKind::kForward;
  int microbatch = 0;
  int chunk = 0;  ///< virtual chunk on this stage, 0..vp-1
};

/// Where a stage's order repeats in its steady state: its items (kind and chunk) equal those
/// `items` positions later from position `at` on for at least two periods. items = 0: nowhere.
struct SteadyPeriod {
  int items = 0;
  int at = 0;  ///< a position in the middle of the repeating stretch
};

struct PipelineSchedule {
  int stages = 1, microbatches = 1, chunks = 1;
  bool split_weight = false;  ///< W items are separate (zero-bubble schedules)
  std::vector<std::vector<ScheduleItem>> order;  ///< [stage] -> items in issue order
};

/// The period of `order`'s steady state: the smallest Q under which its items (kind and chunk)
/// repeat over a stretch through the middle of the order at least two periods and a quarter of
/// the order long (2 for 1F1B, 3 for ZB-H1, 2pv for interleaved 1F1B, whose chunks change every
/// p items so that Q = 2 repeats only within such a group), or a quarter of the way in for
/// GPipe, whose middle is the turn from forwards to backwards. O(order) for the schedules here; Simulate asks when it builds a step's graph. The engine copies repeated periods of a
/// simulated step (TaskGraph::SetDevicePeriods); it checks this hint task by task.
SteadyPeriod SteadyPeriodOf(const std::vector<ScheduleItem>& order);

/// Whether `kind` runs weight-gradient passes as items of their own (zero-bubble schedules).
inline bool SplitsWeightGradients(Schedule kind) { return kind == Schedule::kZbH1; }

/// GPipe: all forwards, then all backwards (Huang et al. 2019).
/// 1F1B (PipeDream-Flush): stage i warms up with min(p-i-1, m) forwards, then alternates one
///   forward and one backward, then drains (Narayanan et al. 2021 section 2.2.1).
/// Interleaved 1F1B: Megatron-LM's virtual-stage order; warm-up (p-i-1)*2 + (v-1)*p chunk passes
///   (Narayanan et al. 2021 section 2.2.2; Megatron-LM schedules.py). Needs m % p == 0.
/// ZB-H1: the 1F1B order with each backward split into B then W (Qi et al. 2024), W passes of
///   the first p-i-1 steady-state backwards deferred to the drain (two W after each drain B),
///   where 1F1B waits for gradients.
///
/// `flushes` > 1 (ParallelConfig::pipeline_flushes, PyTorch pipelining's gradient-accumulation
/// loop): the micro-batches run as that many schedules of microbatches / flushes each, one after
/// the other on every stage (micro-batches k*m/flushes .. (k+1)*m/flushes - 1 in the k-th), so
/// each fills and drains the pipeline. Needs flushes to divide microbatches.
PipelineSchedule MakeSchedule(Schedule kind, int stages, int microbatches, int chunks, int flushes = 1);

/// MakeSchedule's result, kept for the last few (kind, stages, micro-batches, chunks, flushes)
/// asked for on this thread (the planner's bounds ask for the same few thousands of times). The
/// reference stays valid until the ninth different schedule is asked for on the same thread.
const PipelineSchedule& SharedSchedule(Schedule kind, int stages, int microbatches, int chunks, int flushes = 1);

}  // namespace shardcast
