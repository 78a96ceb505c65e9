#pragma once
/// \file config_args.h
/// The parallel-configuration flags shared by `simulate` and `execute` (Megatron-LM's long names
/// accepted as aliases), and their translation into a ParallelConfig.

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast::cli {

struct SimulateArgs {
  std::string model, cluster, profile, trace, attention_kernel = "default";
  std::int64_t gpus = 0, tp = 1, pp = 1, dp = 0, vp = 0, layers_per_vp = 0, mbs = 1, gbs = 0, seq = 0;
  std::string recompute = "none", schedule, precision = "bf16", recompute_granularity, optimizer = "megatron";
  bool sp = false, dist_opt = false, no_flash = false, no_overlap_grad = false,
       no_overlap_param = false, bf16_grads = false, json = false, full_rank = false, emb_slots = false, mcore_account_embedding = false, mcore_account_loss = false,
       p2p_blocking = false, ops = false, no_async_tp = false;
  int zero = -1;
};

/// Adds --gpus, --tp, --pp, --dp, --vp, --mbs, --gbs, --seq, --recompute, --sequence-parallel,
/// --zero, --schedule, --precision and the related switches (with Megatron-LM aliases).
void AddConfigOptions(CLI::App* cmd, SimulateArgs* a);
/// The configuration the flags describe on `gpus` GPUs; InputError for conflicting flags.
ParallelConfig BuildConfig(const SimulateArgs& a, const Model& m, std::int64_t gpus);
/// The command-line flags for which BuildConfig(flags, m, gpus) returns `c` (its inverse; flags
/// at their default are left out), starting with --gpus. Settings no flag expresses (the
/// scatter/gather optimization off, a parameter all-gather of other than 2 bytes per parameter)
/// are described in `*unexpressed` (not null).
std::string SimulateFlags(const ParallelConfig& c, const Model& m, std::int64_t gpus,
                          std::vector<std::string>* unexpressed);
/// Prints `simulate`'s human-readable report of one result to stdout: step time, MFU/HFU, the
/// time breakdown, memory by stage and the critical path (or the reasons it cannot run).
void PrintSimulation(const SimulationResult& r, const Model& m, const ParallelConfig& c, const Cluster& cl,
                     std::int64_t gpus, const HardwareProfile& prof);
/// Prints the cost model's ops of one micro-batch on one GPU (one transformer layer, the
/// embedding, the output layer): shape, FLOPs, bytes, duration and the achieved rate.
void PrintOps(const Model& m, const ParallelConfig& c, const Cluster& cl, const HardwareProfile& prof);

}  // namespace shardcast::cli
