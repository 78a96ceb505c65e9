#pragma once
/// \file cost_model.h
/// Per-op cost model of one transformer layer (and the embedding, output layer and optimizer)
/// under a parallel configuration: shapes, FLOPs, bytes moved, bytes saved for backward, and
/// durations from a hardware profile. Formulas and sources: DESIGN.md section 3, docs/simulator.md.

#include <memory>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/deepspeed_zero3.h"
#include "simulator/precision.h"
#include "simulator/profile.h"

namespace shardcast {

enum class OpKind { kGemm, kAttention, kMemory, kCollective };
/// Which pass an op belongs to. kBackwardInput is "B" and kBackwardWeight is "W" of the
/// zero-bubble schedules (Qi et al. 2024); 1F1B runs them back to back.
enum class Pass { kForward, kBackwardInput, kBackwardWeight, kRecompute };
const char* ToString(OpKind k);
const char* ToString(Pass p);

/// Placement of a communication group under the rank order (tensor-parallel innermost, then
/// data, then pipeline: Megatron-LM's default).
struct GroupPlacement {
  int ranks = 1;
  int ranks_per_node = 1;  ///< members of this group on one node
  int nodes() const { return (ranks + ranks_per_node - 1) / ranks_per_node; }
};

/// Which shared resource a transfer's bottleneck is (the engine shares it between flows).
enum class LinkKind { kIntraNode, kNetwork };

/// Time of one collective: latency + bytes_on_link / link_GBps (a fluid flow in the engine).
struct CollectiveCost {
  double latency_s = 0;
  double bytes_on_link = 0;  ///< bytes the representative GPU pushes through its bottleneck
  double link_GBps = 0;      ///< bottleneck bandwidth available to this GPU
  LinkKind link = LinkKind::kIntraNode;
  double time_s() const { return latency_s + (link_GBps > 0 ? bytes_on_link / (link_GBps * 1e9) : 0); }
};

/// Collective cost from the profile's measured table for (op, ranks, nodes) when present, else
/// NCCL's ring alpha-beta form: latency = base + (nsteps - nInter)*intraLat + nInter*interLat;
/// time = latency + factor(n) * size / busbw, with busbw the intra-node ring busbw, or across
/// nodes min(intra busbw, ranks_per_node * per-GPU NIC share). `size_bytes` is nccl-tests' `size`.
/// Two collectives one after the other as one flow: at the link of the one that takes longer,
/// the other's transfer time added as bytes at that link's rate, and both latencies.
CollectiveCost SerialCollectives(const CollectiveCost& a, const CollectiveCost& b);

CollectiveCost CollectiveCostOf(const HardwareProfile& prof, CollectiveOp op, double size_bytes,
                                const GroupPlacement& g);

struct CostModel;
/// A data-parallel collective over the dense weights' `size_bytes` (nccl-tests' size: the whole
/// tensor for a gather or reduce-scatter): over cm.dp_group; with hybrid sharding
/// (cm.hybrid_shard) a gather runs within cm.shard_group, and a reduce-scatter within it is
/// followed by the all-reduce of its 1/dp_shard shard across cm.replica_group (PyTorch FSDP's
/// HYBRID_SHARD reduction; Megatron-Core's partial distributed optimizer), as one serial flow.
/// An all-reduce (ZeRO-0, DeepSpeed's bf16 optimizer) is never hybrid.
CollectiveCost DataParallelCostOf(const HardwareProfile& prof, const CostModel& cm, CollectiveOp op,
                                  double size_bytes);
/// Point-to-point send of `bytes` between two GPUs, on one node or across nodes.
CollectiveCost P2PCostOf(const HardwareProfile& prof, double bytes, bool same_node);

/// How one layer's attention runs over the context-parallel group (CostModel::cp).
struct ContextParallelPlan {
  int cp = 1;
  CpComm comm = CpComm::kP2P;
  GroupPlacement group;      ///< the cp ranks of one sequence
  GroupPlacement a2a_group;  ///< the all-to-all group (a2a, Ulysses: the cp group; a2a+p2p: its inner level)
  int ring = 1;              ///< ring attention steps (p2p: cp; a2a+p2p: cp / a2a ranks; otherwise 1)
  bool ring_same_node = true;  ///< every hop of the ring inside a node (tp * cp <= GPUs per node)
};

/// How one mixture-of-experts layer runs on one GPU (CostModel::moe; docs/simulator.md,
/// "Mixture of experts"). Balanced over the expert-parallel ranks but for `imbalance`.
struct MoePlan {
  int ep = 1, etp = 1;
  GroupPlacement ep_group, etp_group;
  double local_experts = 1;      ///< E / ep
  double tokens_routed = 0;      ///< tokens one GPU routes per micro-batch: b*s / (cp * tp) with SP
  /// Tokens each local expert computes at the busiest rank: tokens_routed * k * etp (gathered over
  /// the expert-tensor-parallel group) / local_experts * imbalance.
  double tokens_per_expert = 0;
  double imbalance = 1;          ///< the busiest rank's tokens over the mean (capacity-capped)
  /// With the flex (DeepEP) dispatcher across nodes: the busiest node's received token copies over
  /// the mean (MoeNodeImbalance), which load its GPUs' NICs; 1 otherwise.
  double node_imbalance = 1;
  MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;
  /// The nccl-tests size of one dispatch (and one combine) on the busiest rank: the top-k copies
  /// of the routed tokens (all-to-all; flex: once per destination rank), or the gathered tokens.
  double dispatch_bytes = 0;
  /// With the flex (DeepEP) dispatcher: the time of one dispatch (and one combine), NIC and
  /// NVLink parts (PlanMoe); 0 otherwise (the collective's time).
  double dispatch_s = 0;
  /// Compute slowdown while an exchange runs beside it (--overlap-moe-expert-parallel-comm): the
  /// extra compute time per second hidden.
  double overlap_slowdown = 0;
};

struct Op {
  std::string name;
  OpKind kind = OpKind::kMemory;
  Pass pass = Pass::kForward;
  double m = 0, n = 0, k = 0;   ///< GEMM shape (per GPU), when kind == kGemm
  double flops = 0;             ///< executed FLOPs per GPU
  double batch = 1;             ///< independent matrices of a batched GEMM (attention scores/context)
  double bytes = 0;             ///< bytes read and written (memory ops, GEMMs) or collective size (nccl-tests size)
  double saved_bytes = 0;       ///< activation bytes kept for backward (forward ops)
  /// Part of saved_bytes that activation offloading (--offload-modules) takes off the GPU between
  /// the forward and the backward (what is copied, less the share a copy slower than the forward
  /// still holds at the activation peak).
  double offloaded_bytes = 0;
  /// Forward op whose saved bytes the recompute policy drops and the backward rebuilds (every
  /// forward op under full recompute; the selected modules' under selective).
  bool rebuilt = false;
  double duration_s = 0;  ///< time on this GPU's critical path (the exposed part of a collective)
  double hidden_s = 0;    ///< part of a collective hidden behind a concurrent GEMM (not in duration_s)
  CollectiveOp collective = CollectiveOp::kAllReduce;
  /// Runs hidden behind the next op (not on the critical path): Megatron-LM's asynchronous
  /// all-gather of the saved sequence-parallel input during the data-gradient GEMM.
  bool overlapped = false;
  /// A collective of the context-parallel group (counted as CP communication, not TP).
  bool context_parallel = false;
  /// A collective of the expert-parallel or expert-tensor-parallel group: token dispatch and
  /// combine (counted as EP communication).
  bool expert_parallel = false;
  /// A routed experts' grouped GEMM (OpBuilder::GroupedLinear): sized for the busiest
  /// expert-parallel rank's tokens, moe.imbalance x the mean rank's.
  bool routed_experts = false;
};

/// Whether expert-parallel collective `o` runs over the expert-tensor-parallel group (an expert's
/// token gather or scatter, the cost model's "moe_etp_*" ops) rather than the expert-parallel
/// group (the token dispatch and combine).
inline bool OnExpertTensorParallelGroup(const Op& o) {
  return o.expert_parallel && o.name.rfind("moe_etp_", 0) == 0;
}

/// Durations of one op kind from the profile.
/// `batch` independent m x n x k GEMMs (a strided-batched GEMM; batch 1 is a plain GEMM) in
/// `precision`: max(2*batch*m*n*k / (peak * efficiency), batch*(in_bytes*(m*k + k*n) +
/// out_bytes*m*n) / HBM) + launch, with the peak and maximum efficiency of the precision
/// (HardwareProfile::GemmRateOf) and the efficiency's shape factor looked up for the whole call
/// (measured samples at batch*m rows). `in_bytes` per input element (1 for FP8 operands, 0.5
/// for FP4, plus their block scales), `out_bytes` per output element (the 16-bit or fp32 dtype).
/// Throws InputError when the profile has no rate for the precision.
double GemmTime(const HardwareProfile& p, double m, double n, double k, double batch = 1,
                Precision precision = Precision::kBf16, double in_bytes = 2, double out_bytes = 2);
double MemoryBoundTime(const HardwareProfile& p, double bytes);
/// The head dimension a flash-attention kernel computes on for a model's `head_dim`: its kernels
/// are compiled for a few head dims, and a head runs in the smallest that holds it.
/// FlashAttention-2 (`tiles` "fa2"; v2.8.0+, commit ce212720 of April 2025: flash_api.cpp
/// head_size_rounded and the HEADDIM_SWITCH kernels 32, 64, 96, 128, 192, 256): a multiple of 32
/// up to 128, else 192 or 256 (v2.6.2-v2.7.4 also had 160; earlier ones 160 and 224). FlashAttention-3 ("fa3"; hopper/flash_api.cpp
/// round_up_headdim): 64, 96, 128, 192 or 256. Other `tiles` (""): head_dim itself. Above 256:
/// head_dim (neither runs it).
double FlashKernelHeadDim(const std::string& tiles, double head_dim);
/// Flash attention of `flops` at sequence length `seq`: flops / (peak x efficiency x the
/// curve's factor at seq x the head-dim factor) + launch, for query/key heads of `head_dim` and
/// value heads of `v_head_dim` (0: head_dim; MLA's differ). The head-dim factor is the profile's
/// measured curve at their mean; without one, the share of the kernel's head dims
/// (FlashKernelHeadDim of p.attention_tiles, the QK^T and PV products each) the model's heads
/// fill, (d_qk + d_v) / (kernel(d_qk) + kernel(d_v)), over that share at the head dim the rates
/// were measured at (attention_head_dim; 128 when not stated): head dim 80 runs FA2's 96
/// kernel, 5/6 as fast per model FLOP. A value head dim of its own runs only in FA3's forward
/// (MLA's 192/128 as measured); FA3's backward and FA2 run both at the larger (192/192: 320/384).
/// head_dim 0: 1.
double AttentionTime(const HardwareProfile& p, double flops, double seq, bool backward, double head_dim = 0,
                     double v_head_dim = 0);
/// Bytes the optimizer step moves on one GPU holding `local_params` parameters, as the passes of
/// Megatron-LM's MixedPrecisionOptimizer.step (megatron/core/optimizer/optimizer.py) over the
/// GPU's optimizer shard (local_params / dp at ZeRO >= 1):
///   fp16 only: unscale and check for inf/nan (read and write the fp32 gradient)   8 B/param
///   gradient norm (read the fp32 gradient)                                      4
///   Adam, apex multi_tensor_adam (read g, p, m, v; write p, m, v)              28
///   copy the fp32 master weight to the 16-bit model weight (read 4, write 2)    6
///     (none in fp32/tf32 training: the fp32 weights are the master; none with FSDP, whose
///     fp32 shard is the master, cast to 16 bits by the next all-gather)
/// plus zeroing the gradient buffers for the next step over all local parameters (their
/// BytesPerParam grads; none with PyTorch FSDP, whose zero_grad sets them to None). DeepSpeed's optimizers make the same passes. Of the local parameters,
/// `expert_params` (routed experts) are sharded over the expert-data-parallel ranks instead of
/// dp x cp.
double OptimizerBytes(const ParallelConfig& c, double local_params, double expert_params = 0);
/// OptimizerBytes as memory-bound passes: one over the shard, one zeroing the gradients. Of the
/// local parameters, `expert_params` (routed experts) are sharded over the expert-data-parallel
/// ranks instead of dp x cp.
double OptimizerTime(const HardwareProfile& p, const ParallelConfig& c, double local_params, double expert_params = 0);

/// The per-step cast of the linear layers' weights into the low-precision format (Transformer
/// Engine casts them in the first micro-batch's forward and keeps the copies for the others; the
/// model charges it with the optimizer step, on the same compute stream): reads the 16-bit
/// weights and writes the quantized copies. With --fp8-param-gather the optimizer writes the
/// copies itself, so only their bytes beyond the 16-bit weight's count. 0 without a
/// low-precision format.
double WeightQuantizeTime(const HardwareProfile& p, const ParallelConfig& c, const LinearFormat& f,
                          double quantized_params);

/// Parameter tensors of one transformer layer on one GPU as a framework stores them (Megatron's
/// fused QKV and, for SwiGLU, fused gate and up projections; each norm's weight and bias), for
/// frameworks that communicate tensor by tensor (Zero3Impl::kDeepSpeed2021). A mixture-of-experts
/// layer counts its router, shared experts and local experts (two or three tensors each); the
/// routed experts' tensors are reduced over the expert-data-parallel group.
struct LayerTensors {
  double count = 0;     ///< tensors (per layer, the mean over dense and MoE layers)
  double gathered = 0;  ///< of those, at least persistence_threshold_elems elements
  double expert_count = 0;     ///< of `count`, routed experts' tensors
  double expert_gathered = 0;  ///< of `gathered`, routed experts' tensors
  /// Of the gathered tensors, those DeepSpeed prefetches: whose preceding gathered tensor (in
  /// forward order, the next layer's first following the last) is smaller than
  /// max_live_elems, the only live parameters when the prefetch is decided
  /// (prefetch_next_sub_modules runs only while the live parameters stay under
  /// stage3_max_live_parameters; every other gathered tensor has been released by then).
  double prefetched_tensors = 0;
  double prefetched_share = 0;  ///< the prefetched tensors' share of the gathered elements
  /// Elements of the tensors under the persistence threshold: kept whole on every rank.
  double persistent_elems = 0;
  /// DeepSpeed's knobs the above were worked out with (elements; LayerTensorsOf copies them
  /// from ParallelConfig's ds_max_live_elems, ds_persistence_threshold_elems and
  /// ds_reduce_bucket_elems, whose defaults are DeepSpeed's at c83e49f).
  double max_live_elems = 0, persistence_threshold_elems = 0, reduce_bucket_elems = 0;
  /// The gathered tensors' elements in forward order: a dense layer's, and a MoE layer's (empty
  /// without MoE). Zero3GatheredPeakBytes reads them.
  std::vector<double> dense_order, moe_order;
};
/// What one micro-batch costs on one chunk (a contiguous group of layers, plus embedding or
/// output layer where the chunk holds them) of one GPU.
struct ChunkCost {
  int stage = 0, chunk = 0, layers = 0;
  int first_layer = 0;  ///< the model's index of the chunk's first transformer layer
  bool has_embedding = false, has_output = false;
  double fwd_s = 0, bwd_input_s = 0, bwd_weight_s = 0, recompute_s = 0;
  double fwd_tp_s = 0, bwd_tp_s = 0, recompute_tp_s = 0;  ///< TP collective time inside the above
  double fwd_cp_s = 0, bwd_cp_s = 0, recompute_cp_s = 0;  ///< context-parallel exchange time inside them
  double fwd_ep_s = 0, bwd_ep_s = 0, recompute_ep_s = 0;  ///< MoE token dispatch and combine inside them
  double saved_bytes = 0;      ///< kept from forward until backward, per micro-batch
  /// Part of saved_bytes that the weight-gradient pass still needs (GEMM inputs): with a split
  /// backward (ZB-H1) the rest is freed after B and this part after W (Qi et al. 2024).
  double weight_saved_bytes = 0;
  double transient_bytes = 0;  ///< extra working memory while the chunk's backward runs
  double fwd_transient_bytes = 0;  ///< extra working memory while its forward runs
  double params_per_gpu = 0;   ///< parameters of this chunk on one GPU
  /// Of those, routed experts' (sharded by ep * etp; reduced and sharded over expert-data-parallel)
  double expert_params_per_gpu = 0;
  int moe_layers = 0;          ///< of `layers`, mixture-of-experts layers
  /// Of those, the linear layers' weights that a low-precision format keeps quantized copies of
  /// (0 without one; bf16-kept layers excluded).
  double quantized_params_per_gpu = 0;
  double scaling_state_bytes = 0;  ///< FP8 delayed scaling's amax histories and scales
  int bf16_layers = 0;             ///< layers kept in bf16 under a low-precision format
  /// Partial recompute (ParallelConfig::PartialRecompute): per layer of the chunk, in order,
  /// whether it reruns its forward; empty otherwise (every layer as the configuration's recompute).
  std::vector<bool> layer_recomputed;
  /// With layer_recomputed: per layer, whether it is a mixture-of-experts layer (the allocator
  /// replay reads the positions then; otherwise it takes a chunk's MoE layers last).
  std::vector<bool> layer_moe;
  double bwd_s() const { return bwd_input_s + bwd_weight_s; }
  /// Whether the chunk's `l`-th layer (from 0) runs the configuration's recompute.
  bool Recomputed(int l) const { return layer_recomputed.empty() || layer_recomputed[static_cast<std::size_t>(l)]; }
};

/// The whole cost model for one configuration.
struct CostModel {
  std::vector<Op> layer_ops;      ///< one (dense) transformer layer, all passes
  std::vector<Op> moe_layer_ops;  ///< one mixture-of-experts layer, all passes (empty without MoE)
  /// One transformer layer kept in bf16 under a low-precision format (--first-last-layers-bf16);
  /// empty otherwise.
  std::vector<Op> bf16_layer_ops;
  /// One MoE layer kept in bf16 under a low-precision format; empty otherwise.
  std::vector<Op> moe_bf16_layer_ops;
  /// Partial recompute: a dense and an MoE layer that does not rerun its forward (built as
  /// --recompute none); empty otherwise.
  std::vector<Op> plain_layer_ops, plain_moe_layer_ops;
  std::vector<Op> embedding_ops;  ///< first stage
  std::vector<Op> output_ops;     ///< last stage
  /// One multi-token-prediction module on the last stage (its norms, the 2h -> h projection and
  /// its pass through the shared output layer and loss), without its transformer layer, which
  /// runs as layer_ops / moe_layer_ops; empty without MTP.
  std::vector<Op> mtp_ops;
  /// Receive-side TP all-gather of a scatter/gather pipeline message (forward: before every chunk
  /// but the first; backward: before every chunk but the last). Empty without it.
  std::vector<Op> pp_recv_ops;
  std::vector<std::vector<ChunkCost>> chunks;  ///< [stage][virtual chunk]
  GroupPlacement tp_group;
  /// The gradient reduction group: the dp x cp ranks holding the same weights.
  GroupPlacement dp_group;
  /// With hybrid sharding (ParallelConfig::dp_shard < dp x cp; else both empty): the adjacent
  /// dp_shard ranks the ZeRO state is sharded over, and the dp*cp/dp_shard ranks holding the
  /// same shard (one per group) that all-reduce it.
  GroupPlacement shard_group, replica_group;
  bool hybrid_shard = false;
  ContextParallelPlan cp;
  MoePlan moe;                 ///< with MoE layers (model.moe.enabled())
  GroupPlacement edp_group;    ///< the expert-data-parallel group (experts' gradients)
  std::vector<bool> pp_next_same_node;  ///< stage i -> i+1 on the same node
  /// Tied embeddings with pp > 1: the first and last stage's ranks that all-reduce the embedding
  /// gradient (2 ranks), and its size, (V h / tp) x gradient bytes per parameter; else empty, 0.
  GroupPlacement embedding_pair;
  double embedding_sync_bytes = 0;
  double pp_message_bytes = 0;          ///< activation (or its gradient) sent per micro-batch
  CollectiveCost pp_send_intra, pp_send_inter;
  double tokens_per_microbatch = 0;  ///< on one GPU: b * s / cp
  /// Bytes one transformer layer keeps from forward to backward per micro-batch (no embedding or
  /// output layer): the per-layer quantity of Korthikanti et al. 2022 Table 2 and Fig. 7.
  double layer_saved_bytes = 0;
  /// The part of layer_saved_bytes a recomputed layer keeps as its checkpoint beside its ops'
  /// saved tensors (LayerOps::checkpoint_bytes): the input under full recompute, the kept op
  /// outputs under torchtitan's per-op policy, else 0; the same for the layers of
  /// bf16_layer_ops and moe_layer_ops. The allocator replay holds it as one block.
  double layer_checkpoint_bytes = 0, bf16_layer_checkpoint_bytes = 0, moe_layer_checkpoint_bytes = 0;
  /// Parameters of the (vocab-parallel) embedding table on one GPU of the first stage, and of the
  /// output layer's own copy on the last (0 when it shares the embedding's: tied, no pipeline).
  double embedding_params_per_gpu = 0, output_params_per_gpu = 0;
  /// One layer's parameter tensors (Zero3Impl::kDeepSpeed2021's per-tensor collectives, and
  /// the modules of Zero3Impl::kDeepSpeed's trace).
  LayerTensors layer_tensors;
  /// Zero3Impl::kDeepSpeed: its parameter coordinator over a micro-batch of the (only) stage.
  DeepSpeedZero3Plan ds_zero3;
  /// Extra bytes per quantized parameter (QuantizedWeightBytesPerParam) under the configuration:
  /// its quantized copies, less the 16-bit weight that --fp8-param-gather replaces with them.
  double quantized_weight_bytes_per_param = 0;
  /// Bytes of a quantized parameter's copies themselves (LinearFormat::CastWriteBytes; 0 without
  /// a low-precision format).
  double quantized_copy_bytes_per_param = 0;
};

LayerTensors LayerTensorsOf(const Model& m, const ParallelConfig& c);

/// Host time per rank and tensor of one of PyTorch's list collectives (torch.distributed
/// all_gather / reduce_scatter with a list of world-size tensors, ProcessGroupNCCL of 2021):
/// DeepSpeed's Python loop builds world-size narrow() views of the tensor, and ProcessGroupNCCL
/// copies each of them out of (all-gather) or into (reduce-scatter) its flat buffer with one
/// copy_ launch, with the device synchronized around them. Fitted on SC21's GPT-3 175B ZeRO-3
/// step times (validation rows 11-13, MAPE 9.0%; the 530B rows 14-16 held out;
/// docs/accuracy.md). Its parts' public magnitudes bracket it: a PyTorch eager op's dispatch
/// from Python (narrow, a few microseconds) and a copy kernel's launch (about five).
inline constexpr double kListCollectiveSliceSeconds = 12e-6;

/// Zero3Impl::kDeepSpeed2021: a layer's collectives of `params` parameters (`bytes_per_param`
/// each), tensor by tensor: all of the layer's tensors reduce-scattered, the gathered ones
/// all-gathered (LayerTensors); the dense tensors over `group` (dp x cp), the routed experts'
/// over `expert_group` (expert data parallel).
struct Zero3TensorCost {
  double tensors = 0;    ///< collectives per layer
  /// Of those, the ones DeepSpeed prefetches on its communication stream (0 for a reduce-scatter).
  double prefetched_tensors = 0;
  /// Each collective's latency (one collective of the layer's bytes; the mean over the dense
  /// and the experts' tensors, each over its group).
  double latency_s = 0;
  /// Host list handling of them all: tensors x ranks of their group x kListCollectiveSliceSeconds.
  double host_s = 0;
  /// Device copies around them: all-gather, the zero-filled output and the copy out of the flat
  /// buffer (3 x the bytes); reduce-scatter, the copy into it (2 x the bytes). One launch per
  /// rank and tensor, so launch-bound, not slowed by concurrent communication.
  double copy_s = 0;
  /// Of the all-gathered bytes, what DeepSpeed prefetches (LayerTensors::prefetched_share; 0 for
  /// a reduce-scatter).
  double prefetched_share = 0;
};
Zero3TensorCost Zero3PerTensorCost(const HardwareProfile& p, CollectiveOp op, const LayerTensors& t,
                                   const GroupPlacement& group, const GroupPlacement& expert_group, double params,
                                   double bytes_per_param);

/// Zero3Impl::kDeepSpeed2021: the most bytes of gathered parameters and unsharded gradients one
/// GPU holds at once, over the layer kinds of `t` (o: LayerTensors' gathered tensors in forward
/// order; sizes follow DeepSpeed stage 3 at c83e49f, stage3.py and partition_parameters.py, with
/// its default contiguous_gradients off):
///  - forward, gathering tensor i: its output and ProcessGroupNCCL's flat receive buffer
///    (2 x o[i]), beside the running tensor i-1 when i is prefetched (o[i-1] under
///    t.max_live_elems), all at `param_bytes` per element;
///  - backward (reverse order), in the gradient hook of tensor i: its gathered weight
///    (o[i] x `param_bytes`), its fresh gradient and the gradients waiting in the reduce bucket
///    (t.reduce_bucket_elems; a tensor larger than the bucket waits alone until the next
///    gradient arrives), and when the bucket is reduced, the flat copy the list reduce-scatter
///    makes of it (all at `grad_bytes`), beside the tensor the backward prefetches next
///    (2 x o[i-1] x `param_bytes`) when o[i] is under the live-parameter limit.
double Zero3GatheredPeakBytes(const LayerTensors& t, double param_bytes, double grad_bytes);

/// Tokens of the busiest expert-parallel rank over the mean of `mean_tokens` per rank: the
/// configuration's --moe-load-imbalance when given; else balanced routing's expected maximum over
/// ep ranks, 1 + sqrt(2 ln(ep) / mean_tokens) (binomial shares, normal tail), which forced load
/// balancing and a router trained to balance each micro-batch give; for a router trained with
/// global-batch balancing (MoeSpec::router_global_batch_balance) and not forced, at least
/// kGlobalBatchRouterImbalance. Capped by the capacity factor when there is one (tokens beyond
/// it are dropped). docs/simulator.md, "load imbalance".
double MoeImbalance(const ParallelConfig& c, const MoeSpec& moe, double mean_tokens, std::int64_t ep);

/// The busiest expert-parallel rank's tokens over the mean for a trained router with global-batch
/// load balancing (Qwen3): 1.66, fitted on the Megatron-MoE-ModelZoo's Qwen3-235B-A22B pair at
/// 16K tokens (validation/published_runs_moe.csv rows 52 and 53: 295 TFLOP/s with forced
/// balance, 237 dropless, EP 8, 16 experts a rank: the step-time ratio 1.245), checked on the
/// pairs at 32K, 64K and 128K (docs/accuracy.md). At other EP sizes an extrapolation.
inline constexpr double kGlobalBatchRouterImbalance = 1.66;
/// The EP size kGlobalBatchRouterImbalance was fitted at.
inline constexpr std::int64_t kGlobalBatchRouterImbalanceEp = 8;

/// The most tokens the busiest of ep ranks can take over the mean: every token's min(k, E/ep)
/// copies on it, ep * min(1, (E/ep)/k) (1 with one rank).
double MoeMaxImbalance(const MoeSpec& moe, std::int64_t ep);

/// The busiest node's share of an expert-parallel exchange over the mean, given the busiest
/// rank's `rank_imbalance` over ep ranks placed ranks_per_node to a node on `nodes` nodes:
/// 1 + (rank_imbalance - 1) * sqrt(ln(nodes) / ln(ep)) / sqrt(ranks_per_node), at most
/// rank_imbalance; 1 on one node. The ranks' excess loads taken as independent: a node's sum has
/// 1/sqrt(r) of a rank's relative deviation and the busiest of n groups sits sqrt(2 ln n)
/// deviations above the mean, which reproduces balanced routing's binomial form (MoeImbalance)
/// at the node level. DeepEP's inter-node traffic into a node is spread over the node's NICs, so
/// this, not the rank's, sets its RDMA time. docs/simulator.md, "One MoE layer on one GPU".
double MoeNodeImbalance(double rank_imbalance, std::int64_t ep, std::int64_t ranks_per_node, std::int64_t nodes);

/// Where MoeImbalance's value for `c` and `moe` comes from, for reports.
std::string MoeImbalanceSource(const ParallelConfig& c, const MoeSpec& moe);

/// The transformer layers' costs of the configurations one search has built, shared by the
/// threads of the search (docs/performance.md measures what it saves). It keeps each layer's pass
/// times and bytes, not its op list. Candidates that differ only in what a layer's ops do not read
/// (LayerCostKey: pipeline and data-parallel sizes, virtual stages, schedules other than ZB-H1,
/// the pipeline split, the ZeRO stage and its buckets, the global batch) share one entry. Valid
/// for one model, cluster and profile object: the first BuildCostModel call binds the cache to
/// their addresses, and a call with other objects (a copy included) throws InternalError.
/// Thread-safe.
class LayerCostCache {
 public:
  LayerCostCache();
  ~LayerCostCache();
  LayerCostCache(const LayerCostCache&) = delete;
  LayerCostCache& operator=(const LayerCostCache&) = delete;
  /// Distinct keys kept so far (one entry each, whatever the thread count), and look-ups
  /// answered from them (a look-up that lost a race to build the same key counts as neither).
  std::size_t entries() const;
  std::size_t hits() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend CostModel BuildCostModel(const Model&, const ParallelConfig&, const Cluster&, const HardwareProfile&,
                                  LayerCostCache*);
};

/// `cfg` with the fields a transformer layer's ops do not read set to their defaults: what
/// LayerCostCache keys on. The layer ops read the tensor, context and expert parallel sizes and
/// their communication types, the micro-batch and sequence, precision and FP8 recipe, recompute,
/// offloading, the overlaps, flash attention, whether the schedule is ZB-H1 (which splits the
/// weight gradients) and the layers kept in bf16 (LayerBuilder, OpBuilder, PlanMoe's plan,
/// LinearFormatOf); not pp, dp, vp, the other schedules, the pipeline split, ZeRO/optimizer
/// fields, gradient-reduce and parameter-gather options, the cross-entropy implementation or
/// pipeline send options. Space.FieldsLayerCostKeySetsAsideLeaveTheLayersAlone checks each.
ParallelConfig LayerCostKey(const ParallelConfig& cfg);

/// Builds the op lists and per-chunk costs. The configuration must be feasible
/// (InfeasibilityReasons empty). With `cache` (LowerBounds in a search), the layers' costs come
/// from it when a configuration of the same LayerCostKey was built before, and the layers' op
/// lists (layer_ops, moe_layer_ops, bf16_layer_ops, moe_bf16_layer_ops) are always left empty, built or not; the
/// chunks' costs and memory are the same as without it. InternalError when `cache` was bound to
/// another model, cluster or profile object.
CostModel BuildCostModel(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                         const HardwareProfile& profile, LayerCostCache* cache = nullptr);

/// Korthikanti et al. 2022 activation bytes per layer per micro-batch (GPT layer, no flash
/// attention, with dropout), for tests and docs: s*b*h*(34 + 5*a*s/h) without parallelism,
/// s*b*h*(10 + 24/t + 5*a*s/(h*t)) with TP, /t with TP+SP, 34*s*b*h/t with SP + selective.
double KorthikantiLayerActivationBytes(double s, double b, double h, double a, double t, bool sp,
                                       Recompute recompute);

/// One GPU's achieved host-link copy rate per direction, GB/s, for activation offloading: the
/// link's rate (Gpu::pcie_GBps_per_direction) x 0.8 (pinned copies one way, stas00's GH200
/// NVLink-C2C measurement), split among the GPUs that share the link and copy at once
/// (host_link_shared_by: a GB200 superchip's two GPUs); 0 without a rate.
double HostCopyGBps(const Gpu& g);

}  // namespace shardcast
