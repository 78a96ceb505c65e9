#pragma once
/// \file gpt3_config.h
/// The configuration the speed figures of docs/performance.md are measured on: GPT-3 175B on
/// DGX A100, TP8, interleaved 1F1B with v = 3, mbs 1, sequence parallelism and selective
/// recompute, distributed optimizer, 96 micro-batches per data-parallel replica.

#include <cstdint>

#include "models/parallel.h"

namespace shardcast {

/// At `gpus` GPUs (a multiple of 8 * pp) with `pp` pipeline stages: dp = gpus / (8 * pp),
/// global batch 96 * dp.
inline ParallelConfig Gpt3BenchConfig(std::int64_t pp, std::int64_t gpus) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = pp;
  c.dp = gpus / (8 * pp);
  c.vp = 3;
  c.schedule = Schedule::kInterleaved;
  c.micro_batch_size = 1;
  c.global_batch_size = 96 * c.dp;
  c.sequence_parallel = true;
  c.recompute = Recompute::kSelective;
  c.zero_stage = 1;
  return c;
}

}  // namespace shardcast
