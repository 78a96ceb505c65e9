#pragma once
/// \file describe.h
/// `describe`'s result: a model's parameters, FLOPs per token and training-state bytes, and with
/// a cluster whether weights, gradients and optimizer state fit per GPU at a TP/PP/CP/EP. The
/// figures come from models/ (Model::Parameters, Model::Flops, BytesPerParam, ParametersOfStage);
/// report/describe_report.h renders them as text and JSON.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"

namespace shardcast {

/// What `describe` was asked. Sizes are GPUs or ranks; 0 means "not given".
struct DescribeRequest {
  std::int64_t seq = 0;   ///< sequence length (0: the model's)
  std::int64_t gbs = 0;   ///< global batch in sequences, for FLOPs per step (0: none)
  std::int64_t gpus = 0;  ///< GPUs (0: the cluster's num_gpus, else one node)
  std::int64_t tp = 1, pp = 1, cp = 1;
  std::int64_t ep = 1, etp = 0;  ///< expert grid (etp 0: = tp, as Megatron-Core)
  /// Whose optimizer keeps the state (simulate's --optimizer): BytesPerParam's reading of it.
  OptimizerImpl optimizer = OptimizerImpl::kMegatron;
};

/// One ZeRO stage's per-GPU state on the largest pipeline stage (BytesPerParam for the request's
/// optimizer: Rajbhandari et al. 2020 with fp32 main gradients as Megatron-LM keeps them, by
/// default): bytes of weights, gradients and optimizer.
struct ZeroStateRow {
  int zero_stage = 0;
  /// Whether the stage runs at this layout with this optimizer (InfeasibilityReasons: Megatron-LM
  /// and DeepSpeed shard gradients and weights only without pipeline parallelism, DeepSpeed's
  /// BF16_Optimizer is ZeRO-1 only, ...); `unsupported_reason` says why not.
  bool supported = true;
  std::string unsupported_reason;
  /// False where the optimizer has no such stage (OptimizerZeroStageMismatch): the bytes are 0
  /// and mean nothing (text "-", JSON null).
  bool optimizer_runs = true;
  /// What plan leaves out though simulate models it (torchtitan's readings of --optimizer fsdp:
  /// TorchtitanStageMismatch), "" otherwise.
  std::string note;
  double weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  double total_bytes() const { return weights_bytes + grads_bytes + optimizer_bytes; }
  bool fits = false;  ///< total_bytes() <= the GPU's memory
};

/// The per-GPU picture on a cluster.
struct FitDescription {
  std::string cluster, gpu, gpu_display_name;
  std::string precision_list;                        ///< Gpu::PrecisionList()
  std::vector<std::pair<Precision, double>> peaks_flops;  ///< dense peak per precision the GPU runs
  double memory_bytes = 0;                           ///< usable per GPU
  std::int64_t gpus = 0;
  ParallelConfig cfg;                 ///< tp, pp, cp, ep, etp and the dp that follows
  std::vector<std::string> reasons;   ///< InfeasibilityReasons; empty: it can run
  std::int64_t largest_stage = 0;     ///< the stage holding the most parameters per GPU
  StageParameters largest;            ///< its parameters per GPU
  std::array<ZeroStateRow, 4> zero{}; ///< ZeRO-0..3 state of the largest stage
  bool feasible() const { return reasons.empty(); }
};

struct ModelDescription {
  Model model;
  std::int64_t seq = 0;  ///< the sequence length the FLOPs are counted at
  std::int64_t gbs = 0;
  OptimizerImpl optimizer = OptimizerImpl::kMegatron;  ///< whose state the bytes per parameter count
  ParameterCounts params;
  FlopCounts flops;
  double flops_per_sequence = 0;        ///< flops.per_token * seq
  bool exceeds_position_table = false;  ///< learned positions and seq > max_position_embeddings
  std::optional<FitDescription> fit;    ///< with a cluster
};

/// The training state per parameter of `c`'s optimizer at its ZeRO stage, in bytes, as sums a
/// data-parallel size d shards: constant parts, then the sharded ones over d, weights first, then
/// gradients, then optimizer state ("2 + 4 + 12/d", "2 + (4 + 12)/d", "(2 + 4 + 12)/d"; read off
/// BytesPerParam at d = 1 and 2). `total` gives the sums alone ("6 + 12/d").
std::string StateBytesFormula(const ParallelConfig& c, bool total);

/// Describes `m` (and its fit on `cluster` when given).
/// Throws InputError when --gpus, a TP/PP or an EP/ETP is given without a cluster, and for an
/// expert grid the model rules out (RequireExpertParallel: --ep or --etp on a dense model, an ep
/// that does not divide the experts, ...) where the GPUs give a data-parallel size, as simulate
/// does.
ModelDescription DescribeModel(const Model& m, const DescribeRequest& r, const Cluster* cluster);

}  // namespace shardcast
