#pragma once
/// \file parallel.h
/// A data/tensor/pipeline-parallel training configuration, in Megatron-LM's terms, and the
/// checks that decide whether it can run at all (before memory is considered).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"

namespace shardcast {

enum class Recompute { kNone, kSelective, kFull };
enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
/// Whose mixed-precision optimizer keeps the training state (what BytesPerParam counts and how
/// gradients cross the data-parallel group):
///  - kMegatron: Megatron-LM's DDP and distributed optimizer (ZeRO-1 = --use-distributed-optimizer;
///    gradients in fp32 main-grad buffers when fp32_main_grads, reduce-scattered at ZeRO >= 1).
///  - kDeepSpeedZero: DeepSpeed ZeRO stage 1/2 (runtime/zero/stage_1_and_2.py): 16-bit gradients,
///    reduced in 16 bit to their owners; the owner's fp32 gradient partition is a further 4/dp.
///  - kDeepSpeedBf16: DeepSpeed's BF16_Optimizer (runtime/bf16_optimizer.py, 2022): bf16 grads
///    plus an unsharded fp32 accumulation buffer (2 + 4 B/param), fp32 master and Adam states
///    sharded (12/dp); gradients all-reduced in fp32, bf16 parameters all-gathered after the step.
///  - kTorchFsdp: PyTorch FSDP / FSDP2 (and DDP) with fp32 parameters and bf16 compute
///    (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), torchtitan's and NeMo
///    Automodel's recipe): the sharded fp32 parameter is the optimizer's master and Adam updates
///    it in place, so no sharded 16-bit copy is kept; the 16-bit parameters exist only as the
///    all-gathered (unsharded) ones. The sharded gradient is fp32 (FSDP2 casts the reduce-scatter
///    output to the parameter's dtype), gradients cross the group in the reduce dtype (fp32, or
///    bf16 with fp32_main_grads off). BytesPerParam gives the state.
enum class OptimizerImpl { kMegatron, kDeepSpeedZero, kDeepSpeedBf16, kTorchFsdp };
/// How ZeRO-3 gathers parameters and reduces gradients (docs/simulator.md, "ZeRO-3"):
///  - kPerLayer: one all-gather of each layer's parameters from a flat buffer before its forward
///    and again before its backward, prefetched on a stream of its own while the previous layer
///    computes, and one reduce-scatter of its gradients after its backward (PyTorch FSDP
///    FULL_SHARD, FSDP2, Megatron-FSDP, DeepSpeed stage 3 since its coalesced fetch of 2021-22).
///  - kDeepSpeed2021: DeepSpeed stage 3 of v0.3-0.4 (runtime/zero/partition_parameters.py at
///    commit c83e49f, April 2021, the version SC21 compared with): one all-gather per parameter
///    tensor of at least param_persistence_threshold (1e5) elements, in the forward, the
///    recomputed forward and the backward, waited on before the module runs; a tensor is
///    prefetched on DeepSpeed's communication stream while the module before it runs only when
///    that module's live parameters stay under stage3_max_live_parameters (1e9), else it is
///    gathered after torch.cuda.synchronize() with no overlap; one reduce-scatter per parameter
///    tensor on the compute stream; each through PyTorch's list collectives, whose host and copy
///    work grows with the group (kListCollectiveSliceSeconds per rank and tensor).
///  - kDeepSpeed: DeepSpeed stage 3 of v0.10-0.16 (runtime/zero/partitioned_param_coordinator.py
///    and stage3.py at commit 38327e0, February 2025): coalesced all-gathers on a stream of their
///    own, issued module by module as its parameter coordinator decides (each fetch prefetches
///    the next stage3_prefetch_bucket_size elements of the traced order while the gathered
///    parameters stay under stage3_max_live_parameters; a module's parameters are kept while
///    they are used again within stage3_max_reuse_distance elements), and gradients
///    reduce-scattered a reduce_bucket_size bucket at a time on a reduction stream, which the
///    host synchronizes at the end of every backward (DeepSpeedZero3Plan,
///    simulator/deepspeed_zero3.h).
enum class Zero3Impl { kPerLayer, kDeepSpeed2021, kDeepSpeed };
/// How the loss over the vocabulary runs (bytes per logit of one GPU, eb = the logits' 16-bit
/// width; CostModel's output ops):
///  - kUnfused: Megatron's _VocabParallelCrossEntropy in fp32, pass by pass (Megatron-LM and
///    Megatron-Core without --cross-entropy-loss-fusion): cast, max, subtract, exp, sum, divide,
///    eb + 36 forward; the in-place product with the loss gradient and the cast back, 12 + eb
///    backward; the fp32 softmax kept (4).
///  - kNative: Megatron-Core's --cross-entropy-loss-fusion (fusion impl "native",
///    fused_cross_entropy.py: each step a torch.compile'd function on PyTorch >= 2.2): cast and
///    max (eb + 4), subtract/exp/sum (4 + 4), divide (4 + 4): eb + 20 forward; the gradient's
///    product and cast in one kernel (read 4, write eb and the softmax in place 4): 8 + eb
///    backward; the fp32 softmax kept.
///  - kTe: --cross-entropy-fusion-impl te, Transformer Engine 2.2-2.17's Triton kernels: an online
///    softmax pass (eb) and a pass that reads the logits again and writes the gradient in place
///    (2 * eb): 3 * eb forward, the in-place product 2 * eb backward, the 16-bit gradient kept (eb).
///    (Megatron-LM refuses te from core_v0.19; TE 2.18 keeps an fp32 gradient instead.)
///  - kFlashAttn: flash-attn's Triton cross-entropy (llm-foundry's default fused_crossentropy):
///    one pass forward (eb, the logits kept), one read and one write backward (2 * eb). Not a
///    Megatron choice.
///  - kTorch: PyTorch's eager F.cross_entropy on logits cast to fp32 (Hugging Face models,
///    torchtitan without compile, the H200 steps of validation/h200): the cast (eb + 4) and
///    log_softmax, whose kernel reads a row too long for shared memory three times and writes it
///    once (16): eb + 20 forward, the fp32 log-probabilities kept (4); backward: nll_loss's zeroed
///    gradient (4), log_softmax's backward (reads the gradient twice and the output once, writes
///    once: 16), the cast back (4 + eb): 24 + eb. Working memory beside the kept 4: the 16-bit
///    logits and their fp32 copy in the forward (eb + 4), nll_loss's gradient and log_softmax's
///    input gradient in the backward (8); the others hold the 16-bit logits or gradient (eb).
enum class CrossEntropyImpl { kUnfused, kNative, kTe, kFlashAttn, kTorch };
/// How FP8 tensors are scaled (Megatron-LM's --fp8-recipe; Transformer Engine's recipes) when
/// the precision is kFp8: one scale per tensor from an amax history (kDelayed, TE's
/// DelayedScaling, with an amax history of --fp8-amax-history-len entries per tensor) or from
/// the current tensor (kTensorwise, "current scaling"); or one fp32 scale per 1x128 block of
/// activations and gradients and per 128x128 block of weights (kBlockwise, DeepSeek-V3's
/// recipe). kMxfp8 and kNvfp4 are precisions of their own (--fp8-recipe mxfp8, --fp4-recipe).
enum class Fp8Recipe { kDelayed, kTensorwise, kBlockwise };
/// Megatron-LM's --fp8-format: hybrid (E4M3 forward, E5M2 gradients) or e4m3 (every tensor);
/// kDefault is the format's usual one: hybrid for fp8, e4m3 for mxfp8 (Transformer Engine's
/// MXFP8BlockScaling default). The same bytes and rates; kept for the launch arguments.
enum class Fp8Format { kDefault, kHybrid, kE4m3 };
/// Fp8Format::kDefault's name under precision `p`: "e4m3" for mxfp8, else "hybrid".
inline const char* DefaultFp8FormatName(Precision p) { return p == Precision::kMxfp8 ? "e4m3" : "hybrid"; }
/// How the ranks of a context-parallel group exchange keys and values for attention
/// (Megatron-Core's --cp-comm-type, run by Transformer Engine's attention with context
/// parallelism; docs/simulator.md, "Context parallelism"):
///  - kP2P: ring attention: cp steps, each computing the local queries against one rank's K/V
///    block while the next block moves point-to-point around the ring (AttnFuncWithCPAndKVP2P);
///  - kAllGather: the K/V of the whole sequence all-gathered before attention, their gradients
///    reduce-scattered after it (AttnFuncWithCPAndKVAllGather);
///  - kA2A: all-to-all of Q, K, V (sequence-sharded to head-sharded) before attention and of the
///    output after it, attention over the whole sequence on a1/cp of the heads (Ulysses-style);
///  - kA2AP2P: a2a inside groups of cp_a2a ranks, the ring between those groups
///    (--hierarchical-context-parallel-sizes);
///  - kUlysses: DeepSpeed-Ulysses (DeepSpeed's DistributedAttention, --ds-sequence-parallel-size):
///    the all-to-alls of kA2A, with the sequence split into cp contiguous chunks.
enum class CpComm { kP2P, kAllGather, kA2A, kA2AP2P, kUlysses };
/// How an MoE layer moves tokens to their experts (Megatron-Core's --moe-token-dispatcher-type):
/// all-to-all of the top-k copies over the expert-parallel group (kAllToAll), all-gather of the
/// tokens and reduce-scatter of the outputs (kAllGather), or the fused DeepEP dispatch (kFlex),
/// which sends a token once to each node holding one of its experts and fans out over NVLink.
enum class MoeDispatcher { kAllToAll, kAllGather, kFlex };
const char* ToString(MoeDispatcher d);
const char* ToString(CpComm c);
/// "p2p", "allgather", "a2a", "a2a+p2p", "ulysses" (or "deepspeed-ulysses"); InputError otherwise.
CpComm ParseCpComm(const std::string& s);
const char* ToString(Recompute r);
/// The modules of Megatron-Core's selective recompute (--recompute-modules, TransformerConfig.
/// recompute_modules; a bit set). core_attn, mlp, moe and shared_experts checkpoint the module
/// (keep its input, rerun its forward before the backward); layernorm, moe_act and mla_up_proj
/// discard their output after use and rerun just that op (CheckpointWithoutOutput).
///  - core_attn: the attention core (the flash kernel, or the unfused scores/softmax/context);
///  - layernorm: the norms that are modules of their own (the pre-MLP norm of MoE layers, MLA's
///    input norm; Transformer Engine fuses the others into the next GEMM);
///  - mlp: the dense MLP (its norm fused in, its TP collectives); moe: the whole MoE layer
///    (router, dispatch, experts, combine, shared experts); moe_act: the experts' activation;
///    shared_experts: the shared experts; mla_up_proj: MLA's query/key-value up projections.
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1u << 0,
  kRecomputeLayernorm = 1u << 1,
  kRecomputeMlp = 1u << 2,
  kRecomputeMoe = 1u << 3,
  kRecomputeMoeAct = 1u << 4,
  kRecomputeSharedExperts = 1u << 5,
  kRecomputeMlaUpProj = 1u << 6,
  /// Not a Megatron-Core module: torchtitan's per-op selective activation checkpointing
  /// (activation_checkpoint.mode = "selective", selective_ac_option = "op"; `--selective-ac-option
  /// op`), alone in the set. Each transformer block is checkpointed with PyTorch's
  /// selective-checkpoint policy: the outputs of the ops on torchtitan's save list are kept
  /// (aten.mm except every second one a block runs, the scaled-dot-product flash/efficient
  /// attention, functional reduce-scatters, max), everything else is recomputed before the
  /// block's backward (torchtitan at e7c0cae, June 2025, models/llama3/parallelize_llama.py
  /// `_save_list` and `_custom_policy`; since March 2026 the list takes torch's compute-intensive ops).
  /// Llama's block runs wq, wk, wv, wo, w1, w3, w2 in that order, so wk, wo and w3 are recomputed
  /// (torchao's float8 linears reach the policy as aten.mm too). Modelled for dense layers with
  /// MHA/GQA attention and unbiased linear layers (docs/simulator.md, "torchtitan's per-op
  /// checkpointing").
  kRecomputeTorchOps = 1u << 7,
};
/// "core_attn,moe" for a bit set, in Megatron's order of the names above ("op" for
/// kRecomputeTorchOps).
std::string RecomputeModulesName(unsigned modules);
/// "core_attn moe": the names as `--recompute-modules`' argument list (Megatron's nargs='*');
/// kRecomputeTorchOps has no Megatron name and is left out.
std::string RecomputeModulesArgs(unsigned modules);
/// The bit set of a list of Megatron's module names; InputError naming `where` for an unknown one.
unsigned ParseRecomputeModules(const std::vector<std::string>& names, const std::string& where);
/// InputError naming `where` for modules the model does not have: moe, moe_act without
/// mixture-of-experts layers, shared_experts without shared experts, mla_up_proj without MLA,
/// mlp without dense layers.
void RequireRecomputeModules(const Model& m, unsigned modules, const std::string& where);
/// What of `m` torchtitan's per-op policy (kRecomputeTorchOps) is not modelled for ("" where
/// it is): mixture-of-experts layers, MLA, biased linear layers (aten.addmm, not on its save
/// list nor counted).
std::string TorchOpCheckpointingUnmodelled(const Model& m);
/// InputError naming `where` where TorchOpCheckpointingUnmodelled(m) says why.
void RequireTorchOpCheckpointing(const Model& m, const std::string& where);
/// The modules of Megatron-Core's fine-grained activation offloading (--fine-grained-activation-
/// offloading --offload-modules; TransformerConfig.offload_modules; a bit set): the tensors the
/// module saves for its backward go to pinned host memory after its forward, on a device-to-host
/// stream beside the compute, and come back before its backward, on a host-to-device stream one
/// module ahead (megatron/core/pipeline_parallel/fine_grained_activation_offload.py;
/// docs/simulator.md, "Activation offloading"). Modelled:
///  - core_attn: the attention core's saved tensors (flash attention's Q, K, V, output);
///  - attn_proj: the attention output projection's input;
///  - expert_fc1: the routed experts' first grouped GEMM's input (the dispatched tokens);
///  - moe_act: the experts' activation function's input (the first GEMM's output).
/// Megatron's attn_norm, mlp_norm and qkv_linear are refused as not modelled.
enum OffloadModule : unsigned {
  kOffloadCoreAttn = 1u << 0,
  kOffloadAttnProj = 1u << 1,
  kOffloadExpertFc1 = 1u << 2,
  kOffloadMoeAct = 1u << 3,
};
/// "expert_fc1,moe_act" for a bit set, in the order above; "" for none.
std::string OffloadModulesName(unsigned modules);
/// "expert_fc1 moe_act": the names as `--offload-modules`' argument list.
std::string OffloadModulesArgs(unsigned modules);
/// The bit set of a list of Megatron's offload module names; InputError naming `where` for an
/// unknown one or one the simulator does not model (attn_norm, mlp_norm, qkv_linear).
unsigned ParseOffloadModules(const std::vector<std::string>& names, const std::string& where);
/// InputError naming `where` for expert_fc1 or moe_act on a model without mixture-of-experts
/// layers.
void RequireOffloadModules(const Model& m, unsigned modules, const std::string& where);
const char* ToString(Schedule s);
const char* ToString(OptimizerImpl o);
/// Why optimizer `o` has no ZeRO stage `z` ("" where it has): DeepSpeed's ZeRO optimizer runs
/// stages 1-3, its BF16_Optimizer shards like ZeRO-1 only; Megatron's and FSDP's run every stage.
std::string OptimizerZeroStageMismatch(OptimizerImpl o, int z);
/// Why torchtitan (--optimizer fsdp as it runs it) has no ZeRO stage `z` on a layout of these
/// sizes ("" where it has): its ZeRO-1 reading is FSDP2 kept through a pipeline schedule, so
/// needs pp > 1; ZeRO-0 is DDP, which it runs only as the sole parallelism (parallelize.py: "DDP
/// has not supported > 1D parallelism") unless there is no data parallelism at all.
std::string TorchtitanStageMismatch(int z, std::int64_t tp, std::int64_t pp, std::int64_t cp, std::int64_t dp,
                                    std::int64_t ep);
const char* ToString(Zero3Impl z);
const char* ToString(CrossEntropyImpl x);
/// The implementation whose ToString is `name` (unfused, native, te, flash-attn, torch); none
/// for any other name.
std::optional<CrossEntropyImpl> CrossEntropyImplNamed(const std::string& name);
const char* ToString(Fp8Recipe r);

struct ParallelConfig {
  std::int64_t tp = 1;   ///< tensor-model-parallel size
  std::int64_t pp = 1;   ///< pipeline-model-parallel size
  std::int64_t dp = 1;   ///< data-parallel size (= gpus / (tp*cp*pp)); 0 when tp*cp*pp does not divide the GPUs
  /// Context-parallel size (Megatron-LM's --context-parallel-size): each sequence is split over
  /// cp ranks (2*cp chunks, rank i holding chunks i and 2*cp-1-i, for causal load balance).
  std::int64_t cp = 1;
  CpComm cp_comm = CpComm::kP2P;  ///< --cp-comm-type
  /// With kA2AP2P: ranks of each all-to-all group (the first of Megatron-LM's
  /// --hierarchical-context-parallel-sizes; the ring runs over cp / cp_a2a such groups). 0: the
  /// context-parallel ranks of one node (gpus_per_node / tp, at most cp).
  std::int64_t cp_a2a = 0;
  /// Expert parallelism (Megatron-Core's MoE parallel folding): the experts of a layer split over
  /// ep ranks (--expert-model-parallel-size), each expert's FFN over etp ranks
  /// (--expert-tensor-parallel-size; 0: = tp, Megatron's default); the expert layers' own grid
  /// etp x ep x edp lives on the same tp x cp x dp GPUs of a stage (edp = tp*cp*dp / (etp*ep)).
  std::int64_t ep = 1, etp = 0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  /// --moe-expert-capacity-factor (0: dropless): an expert takes at most this times its average
  /// tokens, the rest are dropped (and padded up to it with --moe-pad-expert-input-to-capacity).
  double moe_capacity_factor = 0;
  /// Tokens of the busiest expert-parallel rank over the average (load imbalance of the routing);
  /// 0: the default of MoeImbalance (balanced routing's expected busiest rank, or a trained
  /// global-batch-balanced router's skew).
  double moe_load_imbalance = 0;
  /// --moe-router-force-load-balancing: the router's scores replaced by balanced ones
  /// (Megatron-Core's benchmarking switch), whatever the model's router was trained to do.
  bool moe_force_load_balancing = false;
  std::int64_t vp = 1;   ///< virtual pipeline stages per pipeline rank (interleaved)
  std::int64_t micro_batch_size = 1;
  std::int64_t global_batch_size = 1;
  std::int64_t seq_length = 0;  ///< 0: the model's seq_length
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  /// With recompute == kSelective: which modules (RecomputeModule bits; Megatron's default
  /// --recompute-modules is core_attn).
  unsigned recompute_modules = kRecomputeCoreAttn;
  /// Partial full recompute (recompute == kFull): only some transformer layers rerun their
  /// forward, the others keep every activation as without recompute. At most one of the two is set.
  ///  - recompute_block_layers N >= 0: Megatron-LM's --recompute-method block
  ///    --recompute-num-layers N (Megatron-Core TransformerBlock._checkpointed_forward): the first
  ///    N layers of each model chunk (pipeline or virtual pipeline stage) are checkpointed.
  ///  - recompute_layer_interval N > 0: torchtitan's activation_checkpoint.mode = "selective" with
  ///    selective_ac_option = "N" (parallelize_llama.py, _apply_ac_to_transformer_block): a counter
  ///    over the blocks a rank wraps, in order, checkpoints the blocks it counts to a multiple of N.
  std::int64_t recompute_block_layers = -1;  ///< -1: not set (every layer)
  std::int64_t recompute_layer_interval = 0;  ///< 0: not set (every layer)
  /// Megatron-Core's fine-grained activation offloading: the modules whose saved tensors go to
  /// host memory (OffloadModule bits; 0: none).
  unsigned offload_modules = 0;
  /// Megatron-Core's --overlap-moe-expert-parallel-comm (with --delay-wgrad-compute): the 1F1B
  /// steady state runs one micro-batch's forward and another's backward together, layer by
  /// layer, each one's token dispatch and combine beside the other's compute (docs/simulator.md,
  /// "Mixture of experts").
  bool moe_a2a_overlap = false;
  int zero_stage = 0;  ///< 0..3; 1 = Megatron's distributed optimizer
  /// Hybrid sharding (HSDP): the ZeRO state is sharded over groups of this many data-parallel
  /// ranks (dp x cp; adjacent ranks, inside a node first) and replicated across the
  /// dp*cp/dp_shard groups; 0: over all dp x cp ranks. PyTorch FSDP's HYBRID_SHARD (ZeRO-3) and
  /// _HYBRID_SHARD_ZERO2, FSDP2 over a (replicate, shard) mesh (torchtitan's
  /// data_parallel_replicate_degree x data_parallel_shard_degree), Megatron-Core's
  /// --num-distributed-optimizer-instances (dp*cp/dp_shard instances). Parameters are gathered
  /// within the group; gradients are reduce-scattered within it, then their shards all-reduced
  /// across the groups.
  std::int64_t dp_shard = 0;
  Zero3Impl zero3_impl = Zero3Impl::kPerLayer;  ///< with zero_stage 3 (see Zero3Impl)
  /// PyTorch FSDP's limit_all_gathers (the "rate limiter"; FSDP1, default True since PyTorch 2.1,
  /// PR 104900): with Zero3Impl::kPerLayer, the CPU thread waits before issuing a layer's
  /// all-gather until the layer two back is freed, so at most two layers' gathered parameters
  /// are held. False (FSDP1 of PyTorch 1.12-2.0, or set by the user): the CPU issues every
  /// layer's all-gather as it runs ahead of the GPU; the gathers run back to back on their
  /// stream, and each layer's gathered block, freed by the CPU after the layer's work was issued
  /// but still in use on the compute stream (record_stream), is held by the caching allocator
  /// until that work is done: the reserved memory grows by a pass's layers (docs/simulator.md,
  /// "ZeRO-3").
  bool zero3_limit_all_gathers = true;
  Schedule schedule = Schedule::k1F1B;
  /// The step's micro-batches run as this many pipeline schedules in turn, each of
  /// num_microbatches() / pipeline_flushes micro-batches that fills and drains the pipeline
  /// before the next begins; the optimizer steps once, after the last (gradients are reduced
  /// after each flush or after the last: flush_grad_reduce).
  /// PyTorch's pipelining as torchtitan and NeMo Automodel drive it: their gradient-accumulation
  /// loop calls the schedule's step() once per local batch, so this is their gradient
  /// accumulation steps (global batch / (local batch * dp)). 1: Megatron-LM and DeepSpeed, one
  /// schedule over all the step's micro-batches. Must divide num_microbatches() (and leave a
  /// multiple of pp per schedule for interleaved 1F1B); needs pp > 1.
  std::int64_t pipeline_flushes = 1;
  /// With pipeline_flushes > 1: gradients are reduced after every flush, as PyTorch's pipeline
  /// stage does at the end of each step() call (torch/distributed/pipelining stage.py: the last
  /// backward of the call syncs DDP, and FSDP2 reduce-scatters and reshards, so its parameters
  /// are gathered again for the next flush), and the next flush's compute waits for the reduce.
  /// false: once, after the last flush (NeMo Automodel's MoE FSDP mixin syncs only on the
  /// optimizer step). `--flush-grad-reduce every|last`.
  bool flush_grad_reduce = true;
  Precision precision = Precision::kBf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  ///< with precision kFp8
  /// --fp8-format as given (Fp8Format); Fp8FormatName() resolves the default.
  Fp8Format fp8_format = Fp8Format::kDefault;
  /// "hybrid" or "e4m3": fp8_format, or where it is kDefault, hybrid for fp8 and e4m3 for mxfp8.
  const char* Fp8FormatName() const {
    if (fp8_format == Fp8Format::kDefault) return DefaultFp8FormatName(precision);
    return fp8_format == Fp8Format::kE4m3 ? "e4m3" : "hybrid";
  }
  /// Megatron-LM's --fp8-amax-history-len (delayed scaling keeps this many amax values per tensor).
  std::int64_t fp8_amax_history_len = 1024;
  /// Megatron-LM's --fp8-param-gather: with the distributed optimizer the model weights are kept
  /// in the low-precision format (no 16-bit copy), and their all-gather moves those bytes.
  bool fp8_param_gather = false;
  /// Megatron-LM's --first-last-layers-bf16 with --num-layers-at-start-in-bf16 /
  /// --num-layers-at-end-in-bf16: these transformer layers keep bf16 GEMMs under a
  /// low-precision format.
  std::int64_t bf16_layers_start = 0, bf16_layers_end = 0;
  bool fp32_main_grads = true;  ///< Megatron keeps fp32 gradient buffers (4 B/param)
  OptimizerImpl optimizer_impl = OptimizerImpl::kMegatron;
  /// DeepSpeed's reduce_bucket_size (elements; its default 5e8): with OptimizerImpl::kDeepSpeedZero
  /// at ZeRO-1/2, each backward through the optimizer allocates this many 16-bit elements (twice
  /// with overlap_comm, the simulator's overlap_grad_reduce) for the gradients to be copied into
  /// before their reduction (StaticStageMemory); with Zero3Impl::kDeepSpeed2021, the gradients
  /// wait in a bucket of this many elements before it is reduce-scattered (the memory they hold,
  /// Zero3GatheredPeakBytes; the reduce-scatters are timed tensor by tensor); with
  /// Zero3Impl::kDeepSpeed, the contiguous bucket they are copied into and reduce-scattered from.
  double ds_reduce_bucket_elems = 5e8;
  /// DeepSpeed's contiguous_gradients (its default true): with OptimizerImpl::kDeepSpeedZero at
  /// ZeRO-1/2, the gradients are copied into the reduce bucket (DeepSpeedBucketBytes); off, they
  /// are reduced in flat copies after the backward and no bucket is held. DeepSpeed v0.4.5 to
  /// v0.12 turned it off at ZeRO-1 whatever the config said (engine.py, PR 1246 of July 2021;
  /// kept on from August 2022 to January 2023 by PR 2250, off again by PR 2703) until PR 4887
  /// (v0.13.0, January 2024) let the config decide; validate sets it off for the runs of that era.
  bool ds_contiguous_gradients = true;
  /// DeepSpeed's use_multi_rank_bucket_allreduce (runtime/zero/config.py; default true since
  /// v0.12.4, PR 4695 of November 2023): with OptimizerImpl::kDeepSpeedZero at ZeRO-1/2 and
  /// contiguous gradients, average_tensor all-reduces each full bucket over the data-parallel
  /// group (allreduce_and_scatter) and every rank keeps its own slices; false (DeepSpeed before
  /// v0.12.4): each rank's slices are reduced to it alone (dist.reduce), a reduce-scatter's bytes.
  /// Without contiguous gradients the buckets are all-reduced either way (GradReduceIsAllReduce).
  bool ds_multi_rank_bucket_allreduce = true;
  /// DeepSpeed stage 3's stage3_max_live_parameters (elements; its default 1e9 at c83e49f and since): with
  /// Zero3Impl::kDeepSpeed2021, a tensor is prefetched only while the live gathered parameters
  /// stay under it (LayerTensors); with Zero3Impl::kDeepSpeed, a fetch prefetches at most this
  /// less what is gathered. Its reduce_bucket_size is ds_reduce_bucket_elems.
  double ds_max_live_elems = 1e9;
  /// DeepSpeed stage 3's stage3_param_persistence_threshold (elements; its default 1e5 at c83e49f): with
  /// Zero3Impl::kDeepSpeed2021 and kDeepSpeed, smaller tensors stay whole on every rank and are
  /// never gathered.
  double ds_persistence_threshold_elems = 1e5;
  /// DeepSpeed stage 3's stage3_prefetch_bucket_size (elements; its default 5e7): with
  /// Zero3Impl::kDeepSpeed, what each module's fetch prefetches of the modules after it.
  double ds_prefetch_bucket_elems = 5e7;
  /// DeepSpeed stage 3's stage3_max_reuse_distance (elements; its default 1e9): with
  /// Zero3Impl::kDeepSpeed, a module's parameters are not released when the modules after it,
  /// up to this many parameter elements on, use them again.
  double ds_max_reuse_distance_elems = 1e9;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  /// Megatron-LM's async_tensor_model_parallel_allreduce (and its sequence-parallel
  /// reduce-scatter): in the backward of a column-parallel linear the input-gradient collective
  /// runs while the weight-gradient GEMM computes. Off for Megatron-LM of early 2021 and for
  /// Megatron-DeepSpeed, whose ColumnParallelLinear reduces synchronously.
  bool async_tp_grad_reduce = true;
  bool flash_attention = true;  ///< fused attention (no s*s tensors saved)
  /// Megatron-Core / Transformer Engine's --tp-comm-overlap (userbuffers): with sequence
  /// parallelism, each all-gather before a column-parallel GEMM and each reduce-scatter after a
  /// row-parallel GEMM is split into tp chunks and pipelined with the GEMM on the chunks
  /// (CostModel: the exposed part is what the chunked pipeline cannot hide).
  bool tp_comm_overlap = false;
  /// The cross-entropy implementation (CrossEntropyImpl; Megatron's unfused one by default).
  CrossEntropyImpl cross_entropy = CrossEntropyImpl::kUnfused;
  /// Megatron-LM's scatter/gather optimization (SC21 section 4.1): pipeline sends carry 1/tp of
  /// the activation per tensor-parallel rank, re-assembled with an NVLink all-gather.
  bool scatter_gather = true;
  /// Pipeline sends and receives run in program order on the compute stream (DeepSpeed's pipeline
  /// engine executes its instructions one after another; Megatron-LM of 2021-22 waits on each
  /// batch_isend_irecv and synchronizes the device), instead of on their own streams.
  bool p2p_blocking = false;
  /// The embedding and the output layer count as pipeline layer slots (see PipelineLayoutOf):
  /// Megatron-LM's --account-for-embedding-in-pipeline-split with
  /// --account-for-loss-in-pipeline-split, BLOOM's 'type:transformer|embedding' partition.
  bool embedding_slots = false;
  /// Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers:
  /// transformer layers of the first / last pipeline stage (-1: not set); the other stages share
  /// the rest equally (PipelineLayoutOf).
  std::int64_t first_stage_layers = -1, last_stage_layers = -1;
  /// With virtual stages: L layers spread over the pp*vp model chunks as evenly as possible, the
  /// remainder to the first chunks in model order (what a Megatron-Core
  /// --pipeline-model-parallel-layout string spreading the layers evenly gives; torchtitan's
  /// split), instead of requiring pp*vp to divide L.
  bool even_chunks = false;
  /// Bytes per parameter moved by parameter all-gathers (ZeRO-1/2 after the step, ZeRO-3 before
  /// each use): 2 for bf16 parameters; 4 for FSDP keeping fp32 parameters (PyTorch FSDP
  /// without a reduced param dtype, e.g. Composer's DEFAULT mixed precision before March 2023).
  double param_gather_bytes = 2.0;
  /// Parameters per gradient bucket. Megatron-LM's --ddp-bucket-size default: max(40M, 1M * dp)
  /// (dp of the gradient reduction group, with context parallelism). PyTorch DDP (--optimizer
  /// fsdp at ZeRO-0): torchtitan's replicate(..., bucket_cap_mb=100), 100 MiB of fp32 gradients,
  /// 26,214,400 parameters (DDP's first bucket, 1 MiB, is not told apart). PyTorch FSDP (ZeRO-1 to
  /// 3) reduces per wrapped block, which the simulator uses instead; the executor's program keeps
  /// these buckets there.
  std::int64_t BucketParams() const;

  std::int64_t gpus() const { return tp * cp * pp * dp; }
  /// Whether selective recompute reruns `module` (a RecomputeModule bit).
  bool Recomputes(unsigned module) const { return recompute == Recompute::kSelective && (recompute_modules & module) != 0; }
  /// Whether only some layers rerun their forward (recompute_block_layers or recompute_layer_interval).
  bool PartialRecompute() const {
    return recompute == Recompute::kFull && (recompute_block_layers >= 0 || recompute_layer_interval > 0);
  }
  /// "(first N layers of each chunk)" / "(one layer in every N of a rank)" under partial recompute;
  /// empty otherwise.
  std::string PartialRecomputeName() const;
  /// Whether full recompute covers a layer: the `index_in_chunk`-th of its model chunk and the
  /// `index_on_rank`-th (from 0) of the layers its pipeline rank holds, counted chunk by chunk.
  bool LayerRecomputed(std::int64_t index_in_chunk, std::int64_t index_on_rank) const {
    if (recompute != Recompute::kFull) return false;
    if (recompute_block_layers >= 0) return index_in_chunk < recompute_block_layers;
    if (recompute_layer_interval > 0) return (index_on_rank + 1) % recompute_layer_interval == 0;
    return true;
  }
  /// Whether the recompute policy is torchtitan's per-op selective checkpointing.
  bool TorchOpCheckpointing() const { return Recomputes(kRecomputeTorchOps); }
  /// The data-parallel size with context parallelism, dp * cp: the ranks of a stage holding the
  /// same weights, over which gradients are reduced and the distributed optimizer is sharded
  /// (Megatron-LM's data-parallel group with context parallelism).
  std::int64_t dp_cp() const { return dp * cp; }
  /// The ranks the ZeRO state is sharded over: dp_shard, or all dp x cp ranks when it is 0.
  std::int64_t shard_dp() const { return dp_shard > 0 ? dp_shard : dp_cp(); }
  /// The copies of the sharded state (HSDP's replicate degree; 1 without hybrid sharding).
  std::int64_t dp_replicas() const {
    const std::int64_t s = shard_dp();
    return s > 0 && dp_cp() % s == 0 ? dp_cp() / s : 1;
  }
  /// Whether the ZeRO state is sharded over fewer than all dp x cp ranks (HSDP).
  bool hybrid_shard() const { return dp_shard > 0 && dp_shard < dp_cp(); }
  /// Whether ZeRO-3 runs as DeepSpeed's stage 3 of 2021 (Zero3Impl::kDeepSpeed2021).
  bool deepspeed2021_zero3() const { return zero_stage >= 3 && zero3_impl == Zero3Impl::kDeepSpeed2021; }
  /// Whether DeepSpeed's own optimizer runs ZeRO stage 1 or 2 (stage_1_and_2.py): its buckets,
  /// lazily allocated gradients and gradient all-reduces.
  bool deepspeed_zero12() const {
    return optimizer_impl == OptimizerImpl::kDeepSpeedZero && zero_stage >= 1 && zero_stage <= 2;
  }
  /// Whether ZeRO-3 runs as DeepSpeed's stage 3 of 2023-25 (Zero3Impl::kDeepSpeed).
  bool deepspeed_zero3() const { return zero_stage >= 3 && zero3_impl == Zero3Impl::kDeepSpeed; }
  /// The expert-tensor-parallel size (etp, or tp when it is 0).
  std::int64_t expert_tp() const { return etp > 0 ? etp : tp; }
  /// The expert-data-parallel size: tp*cp*dp / (etp*ep) (0 when it does not divide).
  std::int64_t expert_dp() const {
    const std::int64_t grid = expert_tp() * ep;
    return grid > 0 && (tp * cp * dp) % grid == 0 ? tp * cp * dp / grid : 0;
  }
  /// Whether the pipeline split is not the default one (embedding slots or first/last stage
  /// layer counts).
  bool uneven_pipeline() const {
    return embedding_slots || first_stage_layers >= 0 || last_stage_layers >= 0 || even_chunks;
  }
  /// Micro-batches per step per data-parallel replica: gbs / (mbs * dp); 0 when dp or the
  /// micro-batch is unset (< 1) or the global batch is not a multiple of mbs * dp (no whole
  /// count: the configuration is infeasible, and reports print "?").
  std::int64_t num_microbatches() const {
    const std::int64_t per_replica = micro_batch_size * dp;
    return per_replica > 0 && global_batch_size % per_replica == 0 ? global_batch_size / per_replica : 0;
  }
  /// A one-line summary such as "TP8 PP8 DP16 VP3 mbs1 gbs1536 SP selective ZeRO-1 interleaved".
  std::string Summary() const;
  /// A compact form for tables: "TP4 PP8 DP16 VP12 mbs1 SP Z1".
  std::string Short() const;
  /// What Short()'s less obvious marks mean, one "MARK: meaning" per mark `configs` use.
  static std::vector<std::string> ShortLegend(const std::vector<ParallelConfig>& configs);
  /// Every field equal (LayerCostCache's comparison of LayerCostKey keys).
  bool operator==(const ParallelConfig&) const = default;
};

// Upper bounds on a configuration's sizes, enforced wherever one is read (command line, --fix,
// validation CSV), so that every product the simulator forms (tp*pp*dp, mbs*dp, pp*vp, gbs*seq,
// b*s*h) stays far inside int64: each size below 2^20, the product of all three parallel sizes
// below 2^60.
inline constexpr std::int64_t kMaxParallelSize = std::int64_t{1} << 20;   ///< tp, pp, dp, GPUs
inline constexpr std::int64_t kMaxVirtualStages = std::int64_t{1} << 16;  ///< vp (<= layers)
inline constexpr std::int64_t kMaxMicroBatchSize = std::int64_t{1} << 16;
inline constexpr std::int64_t kMaxGlobalBatchSize = std::int64_t{1} << 24;

/// The most micro-batches per step the simulator expands into tasks (each is a few tasks per
/// stage): real steps use at most a few thousand; a mistyped --gbs would otherwise take minutes
/// and gigabytes.
inline constexpr std::int64_t kMaxMicrobatchesPerStep = 16384;

/// PyTorch FSDP2 under pipeline parallelism, as ZeRO-1's flags. torchtitan and NeMo Automodel
/// shard with reshard_after_forward = not pp_enabled, and torch.distributed.pipelining's stage
/// turns reshard-after-backward and gradient sync off for every backward but the stage's last,
/// after which it reduce-scatters the accumulated gradients (stage.py,
/// backward_maybe_with_nosync, perform_reduce_grad): parameters are gathered once per schedule
/// (step() call) and kept, gradients are accumulated unsharded (in the reduce dtype) and
/// reduce-scattered after the schedule's last backward. That is ZeRO-1's traffic without the
/// gradient overlap, once a step or once a pipeline flush (ParallelConfig::pipeline_flushes),
/// with FSDP's state (OptimizerImpl::kTorchFsdp at ZeRO-1: the gathered 16-bit parameters and
/// the unsharded accumulated gradient beside the fp32 parameter, gradient and Adam shards).
/// ZeRO-3 itself stays refused with pp > 1 (ParallelRules).
inline constexpr const char* kFsdp2PipelineEquivalent =
    "--optimizer fsdp --zero 1 --no-overlap-grad-reduce (parameters gathered once a schedule and kept, gradients "
    "accumulated unsharded and reduce-scattered after the stage's last backward, once a step or with "
    "--pipeline-flushes once a flush)";

/// The data-parallel size `gpus` GPUs give at tensor-, pipeline- and context-parallel sizes tp,
/// pp and cp: gpus / (tp*cp*pp), or 0 when tp*cp*pp does not divide gpus (InfeasibilityReasons
/// says so).
std::int64_t DataParallelSize(std::int64_t gpus, std::int64_t tp, std::int64_t pp, std::int64_t cp = 1);

/// The transformer layers of every model chunk under a configuration's pipeline split, by
/// Megatron-Core's rules (megatron/core/transformer/transformer_block.py,
/// get_num_layers_to_build). Model chunk k*pp + i is virtual stage k of pipeline rank i (vp
/// chunks per rank; one without the interleaved schedule):
///  - first/last stage layer counts set (--decoder-first/last-pipeline-num-layers): the other
///    stages hold (L - first - last) / (pp - the stages set) each, which must divide;
///  - embedding slots: L + 2 slots, (L + 2) / pp per stage, the first and the last stage holding
///    one transformer layer fewer (the embedding's and the loss's slot);
///  - otherwise L / pp per stage.
/// With vp > 1 every stage's count must divide by vp (each virtual stage holds 1/vp of it; the
/// embedding and the loss slot then fall in the first and the last model chunk). Without
/// interleaving the count need not divide: the remainder goes to the first stages (DeepSpeed's
/// uniform partition; Megatron-LM requires it to divide).
struct PipelineLayout {
  std::vector<std::int64_t> chunk_layers;  ///< [model chunk]: transformer layers
  std::vector<std::int64_t> first_layer;   ///< [model chunk]: index of its first layer
  std::string error;  ///< why the split is impossible (empty: it is possible), with the values
  /// Layers of virtual stage `chunk` on pipeline rank `stage` of `pp`.
  std::int64_t Layers(std::int64_t pp, std::int64_t stage, std::int64_t chunk) const {
    return chunk_layers[static_cast<std::size_t>(chunk * pp + stage)];
  }
  /// Layers pipeline rank `stage` of `pp` holds in its virtual stages before `chunk` (a rank
  /// counts its layers chunk by chunk, as ParallelConfig::LayerRecomputed's index_on_rank).
  std::int64_t LayersBefore(std::int64_t pp, std::int64_t stage, std::int64_t chunk) const {
    std::int64_t n = 0;
    for (std::int64_t k = 0; k < chunk; ++k) n += Layers(pp, stage, k);
    return n;
  }
};
PipelineLayout PipelineLayoutOf(const Model& model, const ParallelConfig& cfg);
/// Per pipeline stage, the transformer layers that rerun their forward in the backward and the
/// stage's layers ({rerun, layers}), over PipelineLayoutOf's chunks (a rank counts its layers
/// chunk by chunk, ParallelConfig::LayerRecomputed): every layer under full recompute, some under
/// partial recompute, none otherwise. Empty where the split is impossible.
std::vector<std::pair<std::int64_t, std::int64_t>> RecomputedLayersPerStage(const Model& model, const ParallelConfig& cfg);
/// RecomputedLayersPerStage summed over the stages: {rerun, layers} ({0, 0} where the split is
/// impossible).
std::pair<std::int64_t, std::int64_t> RecomputedLayersTotal(const Model& model, const ParallelConfig& cfg);
/// `cfg` with a partial recompute that reruns no layer made no recompute, and one that reruns
/// every layer of a model without multi-token-prediction layers (which only full recompute
/// reruns) made full recompute: the same step, in the form a launch can write (Megatron-LM's
/// block of 0 layers, or torchtitan's one in N above a rank's layers, runs without recompute).
ParallelConfig WithEffectiveRecompute(const Model& model, ParallelConfig cfg);
/// Whether a partial recompute rerunning `rerun` of the model's `layers` transformer layers
/// (RecomputedLayersTotal) stays partial: not none (rerun 0) and not full (every layer, on a
/// model without multi-token-prediction layers); true where the split is impossible (layers 0),
/// which WithEffectiveRecompute leaves as it is.
bool RunsAsPartial(const Model& model, std::int64_t rerun, std::int64_t layers);
/// A short name of the configuration's pipeline split for tables: "" for the default one,
/// "emb+loss slots", or "first 7 / last 7 layers".
std::string PipelineSplitName(const ParallelConfig& c);
/// Whether `c`'s pipeline split is one Megatron-LM cannot make: pp > 1 with no first/last stage
/// layer counts (and not torchtitan's even chunks), where the layers (or the L + 2 slots) do not
/// divide pp x vp. The simulator then splits them as DeepSpeed's uniform partition does (the
/// remainder to the first stages); Megatron-LM asserts at start-up.
bool MegatronCannotSplit(const Model& m, const ParallelConfig& c);
/// torchtitan's pipeline_parallel_layers_per_stage P that makes `chunks` stages of `slots` layer
/// slots (ceil(slots / P) = chunks, pipeline_llm), or 0 when no P does.
std::int64_t TorchtitanLayersPerStage(std::int64_t slots, std::int64_t chunks);
/// Whether torchtitan's ParallelDims can borrow `ep` expert-parallel ranks from the sharded
/// data-parallel ranks (`shard`), cp and, with expert tp 1, tp: ep divides shard x cp (x tp), and
/// with etp 1 cp x tp divides ep; its start-up check fails otherwise.
bool TorchtitanBorrowsExpertRanks(std::int64_t ep, std::int64_t etp, std::int64_t shard, std::int64_t cp, std::int64_t tp);

/// Megatron-Core's pipeline behaviour on `c`: whole pipeline messages (no scatter/gather), and
/// the non-interleaved 1F1B schedule waiting on each send and receive (its schedules.py calls
/// the blocking send_forward_recv_backward / send_backward_recv_forward); the interleaved
/// schedule's transfers stay non-blocking.
void ApplyMegatronCoreDefaults(ParallelConfig* c);
/// Whether `c`'s pipeline settings are Megatron-Core's (ApplyMegatronCoreDefaults gives them).
bool HasMegatronCoreDefaults(const ParallelConfig& c);

/// Ranks of each all-to-all group of context parallelism: cp for kA2A and kUlysses; for kA2AP2P
/// cp_a2a, or when it is 0 the context-parallel ranks of one node, gcd(cp, gpus_per_node / tp);
/// 1 for kP2P and kAllGather (no all-to-all).
std::int64_t CpA2aGroup(const ParallelConfig& c, std::int64_t gpus_per_node);
/// With kA2AP2P and no all-to-all group size given, sets cp_a2a to CpA2aGroup's default, so that
/// the configuration names both levels (Megatron-LM's --hierarchical-context-parallel-sizes).
void ResolveCpA2a(ParallelConfig* c, std::int64_t gpus_per_node);
/// Copies the precision and its options (precision, FP8 recipe and format, amax history,
/// --fp8-param-gather, bf16-kept layers) from `from` to `to`.
void CopyPrecisionSettings(const ParallelConfig& from, ParallelConfig* to);
/// Copies DeepSpeed's buckets and stage-3 limits (the ds_* fields, elements) of `from` into `to`.
void CopyDeepSpeedKnobs(const ParallelConfig& from, ParallelConfig* to);

/// Throws InputError (exit 2) when the GPU cannot train in the configuration's precision
/// ("precision fp8 is not supported by the NVIDIA A100-SXM4-80GB (a100-sxm4-80gb); it runs: bf16
/// 312, ..."), or when the low-precision options do not go together: --fp8-param-gather needs fp8
/// or mxfp8 and the distributed optimizer; bf16 layers need a low-precision format. `where`
/// starts the message (e.g. "command line" or a file and row).
void RequirePrecision(const Gpu& gpu, const ParallelConfig& cfg, const std::string& where);

/// One broken rule: `rule` names it without the values (for counting), `text` with them.
struct Infeasibility {
  std::string rule;
  std::string text;
  /// The command-line flags at fault and their values ("--vp: got 1"), where the rule names
  /// them; RequireExpertParallel puts it before the text (empty: a flag read off the rule).
  std::string flag;
};
/// The rules the configuration breaks (InfeasibilityReasons, with each rule's name).
std::vector<Infeasibility> InfeasibilityRules(const Model& model, const ParallelConfig& cfg, std::int64_t gpus,
                                              const Cluster& cluster);

/// The rules of hybrid sharding (ParallelConfig::dp_shard) that `cfg` breaks (InfeasibilityRules
/// includes them): dp_shard divides dp x cp; fewer shards than ranks need ZeRO >= 1 and
/// Megatron-Core's optimizer or PyTorch FSDP (kPerLayer), not DeepSpeed's.
std::vector<Infeasibility> HybridShardRules(const ParallelConfig& cfg);
/// The rules of context parallelism that `cfg` breaks (InfeasibilityRules includes them): the
/// sequence must split into 2*cp chunks (cp parts for DeepSpeed-Ulysses), attention must be
/// fused, an all-to-all group must divide the heads and query groups per tensor-parallel rank.
std::vector<Infeasibility> ContextParallelRules(const Model& model, const ParallelConfig& cfg,
                                                      std::int64_t gpus_per_node);
/// The rules of expert parallelism that `cfg` breaks (InfeasibilityRules includes them): ep
/// divides the routed experts, the expert grid etp*ep divides the tp*cp*dp GPUs of a stage, etp
/// divides the expert FFN, MoE with tp > 1 uses sequence parallelism; ep or etp above 1 needs
/// experts.
std::vector<Infeasibility> ExpertParallelRules(const Model& model, const ParallelConfig& cfg);
/// Throws InputError (exit 2) naming `where` and the flag when an expert-parallel setting given on
/// the command line breaks ExpertParallelRules.
void RequireExpertParallel(const Model& model, const ParallelConfig& cfg, const std::string& where);
/// Throws InputError (exit 2) naming `where` and the flag when a context-parallel setting given on
/// the command line breaks ContextParallelRules.
void RequireContextParallel(const Model& model, const ParallelConfig& cfg, std::int64_t gpus_per_node,
                            const std::string& where);

/// Reasons the configuration cannot run on `gpus` GPUs with `model` (empty: it can). These are
/// results, not errors: the planner counts them and `simulate` prints them. Each reason names the
/// quantities and the rule, e.g. "tp*pp = 96 does not divide 1000 GPUs". `cluster` matters for
/// one rule: GPUs on more than one node need an inter-node network (Cluster::HasInterNodeNetwork).
std::vector<std::string> InfeasibilityReasons(const Model& model, const ParallelConfig& cfg,
                                              std::int64_t gpus, const Cluster& cluster);

/// Bytes of training state per parameter held by one GPU, for mixed-precision Adam
/// (Rajbhandari et al. 2020, ZeRO, section 3.1 and Fig. 1):
///   weights  2 (bf16/fp16), divided by dp at ZeRO-3
///   grads    4 with fp32 main grads (Megatron-LM's default), else 2; divided by dp at ZeRO-2/3
///   optimizer 12 (fp32 master weights + Adam m + v), divided by dp at ZeRO-1/2/3
/// So with 2-byte grads: 16 / 4+12/d / 2+14/d / 16/d for stages 0/1/2/3, as the ZeRO paper.
struct StateBytesPerParam {
  double weights = 0, grads = 0, optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};
StateBytesPerParam BytesPerParam(int zero_stage, std::int64_t dp, bool fp32_main_grads);
/// The same for the configuration's optimizer implementation (see OptimizerImpl):
/// kDeepSpeedZero 2 / 2 (2/dp at ZeRO-2) / 16/dp; kDeepSpeedBf16 2 / 6 / 12/dp; kTorchFsdp
/// weights 4/dp (the fp32 shard) plus the gathered parameters held through the step (param_gather_bytes: 2, or 4 with fp32 ones)
/// at ZeRO-1/2 (FSDP2 kept through a pipeline schedule, SHARD_GRAD_OP's between forward and
/// backward; ZeRO-3 holds them layer by layer, Zero3GatheredStaticBytes), grads 4/dp (at ZeRO-1
/// the unsharded accumulated gradient in the reduce dtype, 4 or 2 with fp32_main_grads off,
/// and the fp32 shard only when an earlier pipeline flush reduced into it: zero_grad frees it
/// at the step's start and the last reduce-scatter fills it after the activations are gone),
/// optimizer 8/dp (Adam's m and v): 16/dp at ZeRO-3, 2 + 16/dp at ZeRO-2, 2 + 4 + 12/dp at
/// ZeRO-1 reduced once; at ZeRO-0 (DDP) 4 + 2 (the autocast casts saved for the backward; none
/// in fp32) / 4 + 4 (.grad and DDP's bucket buffers: gradient_as_bucket_view off, its default) / 8,
/// its fp32 gradients all-reduced. fp32 and tf32
/// training (4-byte model dtype, Megatron's optimizer) keep fp32 weights and gradients and no
/// master copy: 4 / 4 / 8 (Adam's m and v), sharded as above.
StateBytesPerParam BytesPerParam(const ParallelConfig& c);
/// The same sharded over `shards` ranks instead of dp x cp (routed experts: the expert-data-parallel
/// size).
StateBytesPerParam BytesPerParam(const ParallelConfig& c, std::int64_t shards);
/// Bytes per parameter that the data-parallel gradient reduction moves: 4 with fp32 main grads
/// (Megatron; FSDP's fp32 reduce dtype) or the BF16_Optimizer's fp32 all-reduce, else 2.
double GradReduceBytesPerParam(const ParallelConfig& c);
/// True when gradients are all-reduced (every rank receives all of them): no ZeRO, DeepSpeed's
/// BF16_Optimizer, or DeepSpeed's ZeRO-1/2 (its multi-rank bucket all-reduce, or without
/// contiguous gradients its buffered_reduce_fallback); otherwise they are reduce-scattered to
/// their owners (Megatron, FSDP, DeepSpeed's stage 3, and DeepSpeed's ZeRO-1/2 with contiguous
/// gradients and ds_multi_rank_bucket_allreduce false).
bool GradReduceIsAllReduce(const ParallelConfig& c);

/// Parameters held by one GPU of pipeline stage `stage` (0-based) under tp/pp: the stage's layers
/// (num_layers split evenly; the remainder goes to the first stages), plus the word and position
/// embedding on the first stage, and on the last stage the final norm and the output layer (a
/// separate copy of the tied embedding when pp > 1, as Megatron-LM keeps one to all-reduce its
/// gradient). Embeddings and output layer are vocab-parallel (divided by tp).
struct StageParameters {
  std::int64_t layers = 0;        ///< transformer layers on this stage
  double layer_params = 0;        ///< per GPU
  double embedding_params = 0;    ///< per GPU
  double output_params = 0;       ///< per GPU (incl. final norm)
  /// Multi-token prediction modules (DeepSeek-V3), per GPU: on the last stage, beside the output
  /// layer they share; their projection and dense weights divided by tp, routed experts by ep * etp.
  double mtp_params = 0;
  /// Of layer_params and mtp_params, the routed experts' (divided by ep * etp instead of tp; their
  /// optimizer state shards over the expert-data-parallel ranks).
  double expert_params = 0;
  double total() const { return layer_params + embedding_params + output_params + mtp_params; }
};
/// Per GPU of the last stage: one MTP module's parameters each (the 2h -> h projection and the
/// dense weights divided by tp, three norms whole, the routed experts divided by `expert_shards`),
/// times mtp_num_layers; `experts` is the routed experts' part of `params`. Zero without MTP.
struct MtpParametersPerGpu {
  double params = 0;
  double experts = 0;
};
MtpParametersPerGpu MtpParametersOfLastStage(const Model& model, std::int64_t tp, std::int64_t expert_shards);
/// `expert_shards`: the ranks a layer's routed experts are split over (ep * etp); dense models
/// ignore it.
StageParameters ParametersOfStage(const Model& model, std::int64_t tp, std::int64_t pp,
                                  std::int64_t stage, bool embedding_slots = false, std::int64_t expert_shards = 1);
/// The same under `cfg`'s pipeline split (PipelineLayoutOf; `cfg` must give a possible split).
StageParameters ParametersOfStage(const Model& model, const ParallelConfig& cfg, std::int64_t stage);
/// Transformer layers held by pipeline stage `stage`: L/pp, the remainder to the first stages.
/// With `embedding_slots` (BLOOM's Megatron-DeepSpeed `--pp-partition-method
/// type:transformer|embedding`) the embedding and the output layer each take one layer slot:
/// L + 2 slots are split, and the first and last stages hold one transformer layer fewer.
std::int64_t LayersOfStage(std::int64_t num_layers, std::int64_t pp, std::int64_t stage,
                           bool embedding_slots = false);

}  // namespace shardcast
