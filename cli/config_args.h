#pragma once
/// \file config_args.h
/// The parallel-configuration flags shared by `simulate` and `execute` (Megatron-LM's long names
/// accepted as aliases), and their translation into a ParallelConfig.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast::cli {

/// The precision flags shared by every command that takes a configuration: --precision and
/// Megatron-LM's own (--bf16, --fp16, --fp8-format, --fp8-recipe, --fp4-format, --fp4-recipe,
/// --fp8-param-gather, --fp8-amax-history-len, --fp8-amax-compute-algo, --first-last-layers-bf16 with
/// --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16).
struct PrecisionArgs {
  std::string precision, fp8_format, fp8_recipe, fp4_format, fp4_recipe, amax_compute_algo;
  bool bf16 = false, fp16 = false, fp8_param_gather = false, first_last_bf16 = false;
  std::int64_t amax_history_len = 0, layers_start_bf16 = 1, layers_end_bf16 = 1;
};
void AddPrecisionOptions(CLI::App* cmd, PrecisionArgs* a);
/// --framework megatron-core|megatron-2022 (whose pipeline behaviour: ApplyMegatronCoreDefaults).
void AddFrameworkOption(CLI::App* cmd, std::string* framework);
/// Writes the precision the flags select into `c` (bf16 when none is given); InputError for
/// flags that contradict each other (--fp16 with --fp8-recipe mxfp8, say).
void ApplyPrecisionArgs(const PrecisionArgs& a, ParallelConfig* c);
/// InputError for fp32/tf32 training with flash attention, whose kernels take 16-bit inputs
/// (FlashAttention-2/3, cuDNN's fused attention): fp32 training runs attention unfused, so the
/// command must say --no-flash-attention (`where` names the command's flag, or how to get it).
void CheckAttentionPrecision(Precision p, bool flash_attention, const std::string& remedy);
/// The flags of `c`'s precision settings for ApplyPrecisionArgs ("--precision fp8 --fp8-recipe
/// tensorwise ..."), each with a leading space; empty for bf16.
std::string PrecisionFlags(const ParallelConfig& c);

/// Whose optimizer and ZeRO-3 run, and DeepSpeed's knobs: the flags `simulate`, `execute` and
/// `plan` share (cli/optimizer_args.cc).
struct OptimizerArgs {
  /// --optimizer megatron|deepspeed-zero|deepspeed-bf16 (simulate and execute also fsdp); empty: not given (megatron, or
  /// deepspeed-zero with --zero3-impl deepspeed).
  std::string optimizer;
  std::string zero3_impl;  ///< --zero3-impl (Zero3Impl); empty: not given
  double reduce_bucket_size = 0;  ///< --reduce-bucket-size (DeepSpeed, elements); 0: not given
  /// --stage3-max-live-parameters, --stage3-param-persistence-threshold,
  /// --stage3-prefetch-bucket-size, --stage3-max-reuse-distance (DeepSpeed stage 3, elements; 0
  /// is DeepSpeed's "none"); -1: not given.
  double ds_max_live_elems = -1, ds_persistence_elems = -1, ds_prefetch_bucket_elems = -1, ds_max_reuse_elems = -1;
  bool no_contiguous_gradients = false;  ///< --no-contiguous-gradients (DeepSpeed's contiguous_gradients false)
  /// --no-multi-rank-bucket-allreduce (DeepSpeed's use_multi_rank_bucket_allreduce false)
  bool no_multi_rank_bucket_allreduce = false;
};
/// --reduce-bucket-size, --no-contiguous-gradients and the four --stage3-* options (DeepSpeed's reduce_bucket_size,
/// stage3_max_live_parameters, stage3_prefetch_bucket_size, stage3_max_reuse_distance,
/// stage3_param_persistence_threshold; elements). `plan` says each applies to the plans it fits.
void AddDeepSpeedKnobOptions(CLI::App* cmd, OptimizerArgs* a, bool for_plan);
OptimizerImpl ParseOptimizerImpl(const std::string& name);  ///< "" and "megatron": kMegatron
Zero3Impl ParseZero3Impl(const std::string& name);          ///< "" and "per-layer": kPerLayer
/// Writes the given DeepSpeed knobs into `c`. Each knob applies where `c` runs what it tunes
/// (--reduce-bucket-size: DeepSpeed's optimizer with ZeRO-1/2, or DeepSpeed's stage 3; the
/// --stage3-* ones: DeepSpeed's stage 3, the prefetch bucket and reuse distance today's only);
/// with `refuse`, a knob given where it does not apply is an InputError (exit 2) naming the flag,
/// its value, `c`'s ZeRO stage and what was expected; without, it is left out and its flag is
/// among those returned.
std::vector<std::string> ApplyDeepSpeedKnobs(const OptimizerArgs& a, bool refuse, ParallelConfig* c);
/// InputError (exit 2) for DeepSpeed's BF16_Optimizer with fp16, fp32 or tf32 training: it keeps
/// bf16 weights (runtime/bf16_optimizer.py).
void CheckOptimizerPrecision(OptimizerImpl impl, Precision precision);

/// Megatron-Core's fine-grained activation offloading: --offload-modules M ... (Megatron's names)
/// and --fine-grained-activation-offloading (accepted with it).
struct OffloadArgs {
  std::vector<std::string> modules;
  bool flag = false;
};

struct SimulateArgs {
  PrecisionArgs prec;
  std::string model, cluster, profile, trace, attention_kernel = "default";
  std::string allocator_trace;  ///< simulate --allocator-trace FILE
  std::int64_t gpus = 0, tp = 1, pp = 1, dp = 0, vp = 0, layers_per_vp = 0, mbs = 1, gbs = 0, seq = 0;
  /// Context parallelism: --cp, --cp-comm-type, --hierarchical-context-parallel-sizes A P.
  std::int64_t cp = 1;
  std::string cp_comm;  // empty: not given (p2p)
  std::vector<std::int64_t> cp_hierarchy;
  /// Expert parallelism: --ep, --etp (0: = tp), --moe-token-dispatcher-type,
  /// --moe-expert-capacity-factor, --moe-load-imbalance.
  std::int64_t ep = 1, etp = 0;
  std::string moe_dispatcher = "alltoall";
  double moe_capacity_factor = 0, moe_load_imbalance = 0;
  bool moe_force_load_balancing = false;  ///< --moe-router-force-load-balancing
  /// Megatron-LM's --num-experts and --moe-router-topk (0: not given), which `plan` prints with
  /// its arguments: checked against the model, whose file sets them; --moe-grouped-gemm, the
  /// experts' GEMMs as one grouped GEMM, the only way the cost model runs them.
  std::int64_t num_experts = 0, moe_topk = 0;
  bool moe_grouped_gemm = false;
  /// --decoder-first/last-pipeline-num-layers (-1: not given).
  std::int64_t first_stage_layers = -1, last_stage_layers = -1;
  /// --pipeline-flushes N (ParallelConfig::pipeline_flushes; 0: not given, 1).
  std::int64_t pipeline_flushes = 0;
  std::string flush_grad_reduce;  ///< --flush-grad-reduce every|last (empty: every)
  std::string recompute, schedule, recompute_granularity;  ///< recompute empty: not given (none)
  OptimizerArgs opt;  ///< --optimizer, --zero3-impl and DeepSpeed's buckets and stage-3 limits
  /// --recompute-modules (Megatron-Core's names; implies --recompute selective).
  std::vector<std::string> recompute_modules;
  /// --selective-ac-option op|N (torchtitan's per-op selective checkpointing, or every N-th
  /// block checkpointed; nullopt: not given).
  std::optional<std::string> selective_ac_option;
  /// --recompute-method uniform|block and --recompute-num-layers N (Megatron-LM; empty / -1: not given).
  std::string recompute_method;
  std::int64_t recompute_num_layers = -1;
  OffloadArgs offload;  ///< --offload-modules, --fine-grained-activation-offloading
  /// --overlap-moe-expert-parallel-comm (--delay-wgrad-compute is accepted with it).
  bool moe_a2a_overlap = false, delay_wgrad = false;
  /// megatron-core (Megatron-Core's defaults: whole pipeline messages, blocking 1F1B transfers)
  /// or megatron-2022 (Megatron-LM 2021-22: scatter/gather messages, non-blocking unless
  /// --p2p-blocking); empty: the command's default (simulate, plan, capacity: megatron-core).
  std::string framework;
  std::string ce_impl;  ///< --cross-entropy-fusion-impl (with --cross-entropy-loss-fusion)
  std::string cross_entropy;  ///< --cross-entropy (CrossEntropyImpl by name); empty: not given
  /// Megatron-LM's switches for what simulate does by default (--overlap-grad-reduce,
  /// --overlap-param-gather, --use-flash-attn), accepted so that plan's printed arguments run.
  bool overlap_grad = false, overlap_param = false, use_flash_attn = false;
  bool sp = false, dist_opt = false, no_flash = false, no_overlap_grad = false,
       no_overlap_param = false, bf16_grads = false, json = false, full_rank = false, emb_slots = false, mcore_account_embedding = false, mcore_account_loss = false,
       p2p_blocking = false, ops = false, no_async_tp = false, tp_comm_overlap = false, ce_fusion = false,
       no_scatter_gather = false, no_nvls = false, even_chunks = false, no_limit_all_gathers = false;
  int zero = -1;
  /// Megatron-LM's FSDP switches, accepted so that plan's printed arguments run: --use-torch-fsdp2
  /// (ZeRO-3), --use-megatron-fsdp with --data-parallel-sharding-strategy (no_shard, optim,
  /// optim_grads, optim_grads_params: ZeRO-0 to 3), --outer-dp-sharding-strategy (no_shard: the
  /// replicated outer level of hybrid sharding) and --ckpt-format (no bearing on a step).
  bool torch_fsdp2 = false, megatron_fsdp = false;
  std::string dp_sharding_strategy, outer_dp_sharding_strategy, ckpt_format;
  /// Hybrid sharding: --dp-shard S (ParallelConfig::dp_shard) or Megatron-Core's
  /// --num-distributed-optimizer-instances R (dp_shard = dp*cp / R); 0: not given.
  std::int64_t dp_shard = 0, dist_opt_instances = 0;
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

}  // namespace shardcast::cli
