#pragma once
/// \file config_args.h
/// The parallel-configuration flags shared by `simulate` and `execute` (Megatron-LM's long names
/// accepted as aliases), and their translation into a ParallelConfig.

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "models/model.h"
#include "models/parallel.h"

namespace shardcast::cli {

struct SimulateArgs {
  std::string model, cluster, profile, trace;
  std::int64_t gpus = 0, tp = 1, pp = 1, dp = 0, vp = 0, layers_per_vp = 0, mbs = 1, gbs = 0, seq = 0;
  std::string recompute = "none", schedule, precision = "bf16", recompute_granularity, optimizer = "megatron";
  bool sp = false, dist_opt = false, no_flash = false, no_overlap_grad = false,
       no_overlap_param = false, bf16_grads = false, json = false, full_rank = false, emb_slots = false,
       p2p_blocking = false;
  int zero = -1;
};

/// Adds --gpus, --tp, --pp, --dp, --vp, --mbs, --gbs, --seq, --recompute, --sequence-parallel,
/// --zero, --schedule, --precision and the related switches (with Megatron-LM aliases).
void AddConfigOptions(CLI::App* cmd, SimulateArgs* a);
/// The configuration the flags describe on `gpus` GPUs; InputError for conflicting flags.
ParallelConfig BuildConfig(const SimulateArgs& a, const Model& m, std::int64_t gpus);

}  // namespace shardcast::cli
