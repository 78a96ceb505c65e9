#include "simulator/simulate.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"
#include "simulator/memory_replay.h"
#include "simulator/straggler.h"
#include "simulator/what_if.h"

namespace shardcast {
namespace {

constexpr int kComputeStream = 0, kSendFwdStream = 1, kSendBwdStream = 2, kDpStream = 3,
              kDpGatherStream = 4, kNumStreams = 5;
/// The gradient-bucket tasks of one replica's step before buckets share tasks (Builder::NBuckets):
/// keeps a model of 10^13 parameters a GPU (2^31 buckets) from building a task per bucket.
constexpr double kMaxBucketTasksPerStep = 65536;

}  // namespace

int NumSimulationStreams() { return kNumStreams; }

const char* StreamName(int s) {
  switch (s) {
    case kComputeStream: return "compute";
    case kSendFwdStream: return "pp send (forward)";
    case kSendBwdStream: return "pp send (backward)";
    case kDpStream: return "dp reduce";
    case kDpGatherStream: return "dp param gather";
  }
  return "stream";
}

namespace {

double Ns(double seconds) { return seconds * 1e9; }

struct ItemTasks {
  std::int32_t first = -1, last = -1;
};

/// What a task's numbers are computed from: the kind of work, on which device, for which chunk,
/// split in how many units. Tasks with the same key share one TaskCost.
enum class CostKind : std::uint8_t {
  kItem,           ///< a forward, backward or weight-gradient pass of a chunk (or a unit of it)
  kZero3Gather,    ///< ZeRO-3 per-layer parameter all-gather
  kZero3Reduce,    ///< ZeRO-3 per-layer gradient reduce-scatter
  kOverlapReduce,  ///< gradient bucket reduced as soon as the chunk's last gradient pass ends
  kReduceAfter,    ///< gradient bucket reduced after the stage's last backward
  kSendForward,    ///< pipeline send of activations
  kSendBackward,   ///< pipeline send of gradients
  kEmbeddingSync,  ///< tied-embedding gradient all-reduce (first and last stage)
  kOptimizer,
  kParamGather,    ///< ZeRO-1/2 parameter all-gather bucket
  kZero3Prefetch,  ///< Zero3Impl::kDeepSpeed2021: the prefetched tensors' all-gathers of a layer
  kZero3GatherHost,  ///< Zero3Impl::kDeepSpeed2021: a layer's gathers' host list handling and copies
  kZero3ReduceHost,  ///< Zero3Impl::kDeepSpeed2021: a layer's reduce-scatters' host list handling and copies
};
constexpr std::size_t kNumCostKinds = static_cast<std::size_t>(CostKind::kZero3ReduceHost) + 1;
struct CostKey {
  CostKind kind = CostKind::kItem;
  ItemKind item = ItemKind::kForward;
  std::int32_t device = 0, chunk = 0, units = 1;
};

/// The structure of one step's task graph, which depends only on the "shape" of a configuration
/// (pipeline stages, virtual stages, micro-batches, schedule, replicas, the layers and gradient
/// buckets of each chunk and the flags that add or remove tasks), and what is needed to give it
/// another configuration's numbers: the key of every TaskCost.
struct Skeleton {
  std::vector<std::int64_t> shape;  ///< everything the structure depends on (ShapeOf)
  TaskGraph graph;
  std::vector<CostKey> cost_keys;   ///< [cost index]
  PipelineSchedule sched;
  std::vector<int> device_stage;
  std::vector<std::vector<std::int32_t>> compute_tasks;  ///< [stage] replica 0's compute stream
  std::vector<std::vector<std::int32_t>> dp_tasks;       ///< [stage] replica 0's dp streams
};

/// Builds a step's task graph from the schedule and the cost model, or gives a graph of the same
/// shape this configuration's numbers.
class Builder {
 public:
  Builder(const Model& m, const ParallelConfig& c, const Cluster& cl, const HardwareProfile& prof,
          const CostModel& cm, const SimulateOptions& opts)
      : m_(m), c_(c), prof_(prof), cm_(cm), opts_(opts), lf_(LinearFormatOf(c, cl.gpu.arch)) {
    p_ = static_cast<int>(c.pp);
    v_ = static_cast<int>(c.schedule == Schedule::kInterleaved ? c.vp : 1);
    mb_ = static_cast<int>(c.num_microbatches());
    R_ = opts.full_rank ? static_cast<int>(c.dp) : 1;
    zero3_ = c.zero_stage >= 3;
    zero3_sync_ = c.deepspeed2021_zero3();
    if (c.deepspeed_zero3()) {
      // DeepSpeed's coordinator (cm.ds_zero3): a gather leads its use by this many layers; the
      // layers at the turn to the backward keep their parameters; gradients wait in buckets of
      // whole layers.
      ds_ = true;
      const DeepSpeedZero3Plan& d = cm.ds_zero3;
      ds_lead_[0] = d.SimulatedLeadLayers(0);
      ds_lead_[1] = d.SimulatedLeadLayers(1);
      ds_kept_ = d.kept_layers;
      ds_bucket_layers_ = d.layer_elems > 0 ? std::max(1, static_cast<int>(std::floor(c.ds_reduce_bucket_elems / d.layer_elems)))
                                            : 1;
      // Each gathered layer of a pass moves its share of what the coordinator gathers there, in
      // layers: prefetched (on the gather stream, ahead) and on demand (the module waits).
      const double layers = static_cast<double>(m.num_layers);
      const double units[2] = {layers, layers - d.kept_layers};
      for (int k = 0; k < 2; ++k) {
        const double per_unit = units[k] > 0 && d.layer_elems > 0 ? 1.0 / (units[k] * d.layer_elems) : 0;
        ds_share_[k][0] = (d.gathered_elems[k] - d.on_demand_elems[k]) * per_unit;
        ds_share_[k][1] = d.on_demand_elems[k] * per_unit;
      }
    }
    // Gradients cross dp x cp ranks, and routed experts' cross their expert-data-parallel ranks.
    dp_comm_ = (c.dp_cp() > 1 || (m.moe.enabled() && c.expert_dp() > 1)) && !opts.ideal_pipeline &&
               !opts.free_communication;
    grad_bytes_per_param_ = GradReduceBytesPerParam(c);
    bucket_ = c.BucketParams();
    fsdp_units_ = c.optimizer_impl == OptimizerImpl::kTorchFsdp && c.zero_stage >= 1;
    all_one_node_ = c.tp * c.cp * c.dp * c.pp <= cl.gpus_per_node;
    if (opts.straggler_stage >= 0 && opts.straggler_nic_slowdown > 1) {
      // The straggler's node: its NICs at 1/F of their rate (what --what-if nic_Gbps=x(1/F)
      // gives every node), for the collectives and transfers of its stage.
      Cluster slow_cl = cl;
      slow_nic_prof_ = prof;
      WhatIf w;
      w.key = "nic_Gbps";
      w.value = 1 / opts.straggler_nic_slowdown;
      w.scale = true;
      w.text = fmt::format("nic_Gbps=x{:g}", w.value);
      if (cl.HasInterNodeNetwork()) ApplyWhatIf({w}, &slow_cl, &*slow_nic_prof_);  // else no NIC to slow
    }
  }

  /// Everything Build's structure depends on; equal shapes give equal graphs up to the numbers.
  std::vector<std::int64_t> ShapeOf() const;
  /// Builds the graph into `sk` (its shape must be set).
  void Build(Skeleton& sk);
  /// Rewrites the costs, link capacities and devices of `sk`'s graph for this configuration.
  void Refill(Skeleton& sk) const;

 private:
  int Device(int stage, int replica) const { return stage * R_ + replica; }
  /// Communication, data parallelism and the optimizer cost nothing (SimulateOptions).
  bool FreeComm() const { return opts_.ideal_pipeline || opts_.free_communication; }
  /// The profile of `stage`'s network traffic: the straggler's slow-NIC profile on its stage
  /// (SimulateOptions::straggler_nic_slowdown), else the run's.
  const HardwareProfile& ProfOf(int stage) const {
    return slow_nic_prof_ && stage == opts_.straggler_stage ? *slow_nic_prof_ : prof_;
  }
  int StageOf(int device) const { return device / R_; }
  /// A chunk's gradient buckets (ParallelConfig::BucketParams: Megatron-LM's bucket size, torchtitan's DDP buckets; one per block under FSDP): at
  /// least 1, at most 2^31 - 1.
  double Buckets(int stage, int chunk) const {
    const ChunkCost& cc = cm_.chunks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(chunk)];
    // PyTorch FSDP/FSDP2 gathers and reduces per wrapped module, each transformer block one
    // (llm-foundry's fsdp_wrap_fn, torchtitan's fully_shard per block), not by bucket size.
    if (fsdp_units_) return std::max(1.0, static_cast<double>(cc.layers));
    return std::clamp(std::ceil(cc.params_per_gpu / static_cast<double>(bucket_)), 1.0, 2147483647.0);
  }
  /// The tasks a chunk's buckets become: one per bucket up to kMaxBucketTasksPerStep spread
  /// over the stages' chunks (at least 16 a chunk); beyond it, consecutive buckets share a task
  /// that carries their summed latency and bytes (BucketCost). Buckets that end one backward
  /// run back to back on one stream, so only the overlap within a task's buckets is lost.
  int NBuckets(int stage, int chunk) const {
    const double cap = std::max(16.0, std::floor(kMaxBucketTasksPerStep / static_cast<double>(p_ * v_)));
    return static_cast<int>(std::min(Buckets(stage, chunk), cap));
  }
  /// One of `units` tasks over a chunk's `buckets`: `one` is a single bucket's collective, run
  /// buckets / units times back to back.
  static TaskCost BucketCost(TaskCost one, double buckets, int units) {
    const double n = buckets / std::max(1, units);
    one.work_ns *= n;
    one.bytes *= n;
    return one;
  }
  TaskCost CostOf(const CostKey& k) const;
  TaskCost ItemCost(const CostKey& k, const ChunkCost& cc) const;
  TaskCost SendCost(const CostKey& k, int stage) const;
  TaskCost OptimizerCost(int stage) const;
  /// Zero3Impl::kDeepSpeed2021: a layer's per-tensor collectives (Zero3PerTensorCost) of
  /// `params` parameters (`experts` of them routed experts'): the tensors DeepSpeed prefetches
  /// (`prefetched`) or the others, one flow of their bytes plus the latencies of all but one of
  /// them. Without such tensors, a zero-time wait on the link. A backward with full recompute
  /// gathers twice (the recomputed forward's hooks and the backward's).
  TaskCost PerTensorCost(int device, CollectiveOp op, ItemKind item, double params, double experts, bool prefetched) const {
    const bool gather = op == CollectiveOp::kAllGather;
    const double bpp = gather ? c_.param_gather_bytes : grad_bytes_per_param_;
    const Zero3TensorCost x =
        Zero3PerTensorCost(ProfOf(StageOf(device)), op, cm_.layer_tensors, cm_.dp_group, cm_.edp_group, params, bpp);
    const double share = prefetched ? x.prefetched_share : 1 - x.prefetched_share;
    const double n = prefetched ? x.prefetched_tensors : x.tensors - x.prefetched_tensors;
    if (!(share > 0) || !(n > 0)) return Wait(device, 0);
    TaskCost t = DpComm(device, op, params * bpp * share, experts * bpp * share);
    t.work_ns += Ns((n - 1) * x.latency_s);
    const double times = Zero3Passes(op, item);
    t.work_ns *= times;
    t.bytes *= times;
    return t;
  }
  /// The host's list handling and the device copies of a layer's per-tensor collectives, on the
  /// compute stream (Zero3PerTensorCost): a fixed-time wait that concurrent communication does
  /// not slow (the device waits on the host's launches).
  TaskCost PerTensorHostCost(int device, CollectiveOp op, ItemKind item, double params) const {
    const double bpp = op == CollectiveOp::kAllGather ? c_.param_gather_bytes : grad_bytes_per_param_;
    const Zero3TensorCost x = Zero3PerTensorCost(prof_, op, cm_.layer_tensors, cm_.dp_group, cm_.edp_group, params, bpp);
    if (!(x.tensors > 0)) return Wait(device, 0);
    return Wait(device, Zero3Passes(op, item) * (x.host_s + x.copy_s));
  }
  /// A task of `seconds` on `device`'s intra-node link that moves no bytes: neither compute
  /// (not slowed by concurrent flows) nor a flow (does not share the link).
  TaskCost Wait(int device, double seconds) const {
    TaskCost t;
    t.work_ns = Ns(seconds);
    t.link = 2 * device;
    return t;
  }
  /// Collectives of a layer per pass: a backward with full recompute gathers twice.
  double Zero3Passes(CollectiveOp op, ItemKind item) const {
    return op == CollectiveOp::kAllGather && item == ItemKind::kBackward && c_.recompute == Recompute::kFull ? 2 : 1;
  }
  TaskCost Comm(int device, const CollectiveCost& cc) const {
    TaskCost t;
    t.work_ns = Ns(cc.latency_s);
    t.bytes = cc.bytes_on_link;
    t.rate_cap_GBps = cc.link_GBps;
    t.network = cc.link == LinkKind::kNetwork;
    t.link = 2 * device + (t.network ? 1 : 0);  // each device's links: intra-node, network
    // A collective faster than the device's link (NVLink SHARP's all-reduce, whose reduction
    // runs in the switch, or a measured table's small group) moves proportionally fewer bytes
    // through it at the link's rate: alone it still ends at latency + bytes / its own busbw,
    // and beside other flows it takes that smaller share (the link no longer caps it).
    const double link = (t.network ? NetworkLink(StageOf(device)) : IntraLink()).capacity_GBps;
    if (link > 0 && t.rate_cap_GBps > link) {
      t.bytes *= link / t.rate_cap_GBps;
      t.rate_cap_GBps = link;
    }
    return t;
  }
  /// A data-parallel collective of `bytes` (nccl-tests size), of which `experts` are routed
  /// experts': the dense part over the dp x cp group (DataParallelCostOf), then the experts'
  /// over the expert-data-parallel group, as one serial flow at the slower one's link
  /// (SerialCollectives).
  TaskCost DpComm(int device, CollectiveOp op, double bytes, double experts) const {
    const HardwareProfile& prof = ProfOf(StageOf(device));
    const CollectiveCost a = DataParallelCostOf(prof, cm_, op, bytes - experts);
    if (experts <= 0) return Comm(device, a);
    return Comm(device, SerialCollectives(a, CollectiveCostOf(prof, op, experts, cm_.edp_group)));
  }
  Link IntraLink() const { return {std::max(prof_.intra_busbw_GBps, prof_.p2p_intra_GBps)}; }
  /// A device's share of its node's NICs; on the straggler's stage, of its slow NICs.
  Link NetworkLink(int stage) const { return {ProfOf(stage).NicShareGBps()}; }
  shardcast::Device DeviceOf() const {
    shardcast::Device d;
    d.overlap_slowdown_nvlink = prof_.overlap_slowdown_nvlink;
    d.overlap_slowdown_network = prof_.overlap_slowdown_network;
    return d;
  }
  /// The cost index of `k`, adding it on first use.
  std::int32_t CostId(const CostKey& k);
  std::int32_t Add(TaskType type, const CostKey& k, int stream, int microbatch = -1, int chunk = -1, int unit = 0) {
    TaskNode t;
    t.type = type;
    t.device = k.device;
    t.stream = stream;
    t.microbatch = microbatch;
    t.chunk = chunk;
    t.unit = unit;
    t.cost = CostId(k);
    const std::int32_t id = g_->AddTask(t);
    std::int32_t& last = LastOn(k.device, stream);
    g_->AddEdge(last, id);  // program order (ignored when last < 0)
    last = id;
    return id;
  }
  int Index(ItemKind k, int mb, int chunk) const {
    return (static_cast<int>(k) * mb_ + mb) * v_ + chunk;
  }
  struct StageBuild;
  /// Builds stage `stage`'s replica `replica`: its schedule's items in order, then FinishStage.
  void BuildStage(int stage, int replica);
  std::vector<std::vector<std::int32_t>> AddParamGathers(const StageBuild& s, std::int32_t after);
  void BuildItem(StageBuild& s, int pos);
  std::pair<std::int32_t, std::int32_t> AddZero3Gathers(StageBuild& s, const ScheduleItem& it, int u, int units);
  void AddUnitReduce(StageBuild& s, const ScheduleItem& it, int u, int units, std::int32_t id, bool reduces_grads);
  void EndFlush(StageBuild& s, const ScheduleItem& it);
  void AddPipelineSends(const StageBuild& s, const ScheduleItem& it, const ItemTasks& itk);
  void FinishStage(StageBuild& s, int replica);
  void AddPipelineEdges();

  const Model& m_;
  const ParallelConfig& c_;
  const HardwareProfile& prof_;
  std::optional<HardwareProfile> slow_nic_prof_;  ///< SimulateOptions::straggler_nic_slowdown
  const CostModel& cm_;
  const SimulateOptions& opts_;
  LinearFormat lf_;
  int p_ = 1, v_ = 1, mb_ = 1, R_ = 1;
  bool zero3_ = false, dp_comm_ = false, all_one_node_ = false;
  bool zero3_sync_ = false;  ///< ZeRO-3 collectives on the compute stream (Zero3Impl::kDeepSpeed2021)
  bool ds_ = false;  ///< ZeRO-3 as DeepSpeed's coordinator runs it (Zero3Impl::kDeepSpeed)
  /// With ds_ (0 otherwise): how many layers a gather leads its use by (forward, backward), the
  /// layers the turn keeps gathered, and the layers per reduce bucket.
  int ds_lead_[2] = {0, 0}, ds_kept_ = 0, ds_bucket_layers_ = 0;
  /// Zero3Impl::kDeepSpeed: a gathered layer's all-gather in layers of parameters, [pass][0]
  /// prefetched and [pass][1] on demand (pass 0 forward, 1 backward).
  double ds_share_[2][2] = {{0, 0}, {0, 0}};
  double grad_bytes_per_param_ = 0;
  std::int64_t bucket_ = 1;
  bool fsdp_units_ = false;  ///< gradient and gather buckets are FSDP's per-block units (Buckets)
  // Build state.
  TaskGraph* g_ = nullptr;
  Skeleton* sk_ = nullptr;
  /// [device][kind][item][chunk] -> the (units, cost id) pairs seen: at most two per slot (an
  /// item kind is split in one way besides whole), more in `cost_ids_more_`. Flat, as a graph
  /// of a new shape is built for most of the planner's simulations.
  struct CostSlot {
    std::int32_t units[2] = {0, 0};  // 0: unused (units are >= 1)
    std::int32_t id[2] = {-1, -1};
  };
  std::vector<CostSlot> cost_ids_;
  std::vector<std::array<std::int32_t, 3>> cost_ids_more_;  // slot, units, id
  std::int32_t& LastOn(int device, int stream) {
    return last_on_stream_[static_cast<std::size_t>(device * kNumStreams + stream)];
  }
  std::vector<std::int32_t> last_on_stream_;
  std::vector<std::int32_t> periods_;  // [device] tasks per period of the schedule's steady state
  SteadyPeriod steady_;                // of the stage being built
  // [device][Index(kind, mb, chunk)]
  std::vector<std::vector<ItemTasks>> items_;
  std::vector<std::vector<std::int32_t>> fwd_send_, bwd_send_;  // [device][Index]
  // Data-parallel collectives needing all replicas (full-rank): (producer, task) per replica.
  std::map<std::pair<int, int>, std::vector<std::pair<std::int32_t, std::int32_t>>> dp_sync_;
  int dp_key_ = 0;
  void Sync(int stage, std::pair<std::int32_t, std::int32_t> producer_task) {
    if (R_ > 1) dp_sync_[{stage, dp_key_++}].push_back(producer_task);
  }
};

std::vector<std::int64_t> Builder::ShapeOf() const {
  std::vector<std::int64_t> s = {p_, v_, mb_, c_.pipeline_flushes, c_.pipeline_flushes > 1 && c_.flush_grad_reduce,
                                 R_, static_cast<std::int64_t>(c_.schedule), zero3_, zero3_sync_, dp_comm_,
                                 c_.overlap_grad_reduce, c_.overlap_param_gather,
                                 c_.zero_stage == 1 || c_.zero_stage == 2, c_.zero_stage == 2, c_.p2p_blocking,
                                 zero3_ && c_.zero3_limit_all_gathers, m_.tie_embeddings && p_ > 1 && !FreeComm(), FreeComm(),
                                 ds_lead_[0], ds_lead_[1], ds_kept_, ds_bucket_layers_, ds_share_[0][1] > 0,
                                 ds_share_[1][1] > 0};
  for (int i = 0; i < p_; ++i) {
    for (int k = 0; k < v_; ++k) {
      s.push_back(cm_.chunks[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)].layers);
      s.push_back(NBuckets(i, k));
    }
  }
  return s;
}

/// A chunk pass (forward, backward, or ZB-H1's weight pass) split in k.units tasks: its work and
/// the activation bytes it allocates, frees and holds while it runs.
TaskCost Builder::ItemCost(const CostKey& k, const ChunkCost& cc) const {
  double work = 0, alloc = 0, freed = 0, transient = 0;
  const bool split = SplitsWeightGradients(c_.schedule);
  switch (k.item) {
    case ItemKind::kForward:
      work = cc.fwd_s;
      alloc = cc.saved_bytes;
      transient = cc.fwd_transient_bytes;
      break;
    case ItemKind::kBackward:
      work = cc.bwd_input_s + cc.recompute_s + (split ? 0 : cc.bwd_weight_s);
      freed = split ? cc.saved_bytes - cc.weight_saved_bytes : cc.saved_bytes;
      transient = cc.transient_bytes;
      break;
    case ItemKind::kWeight:
      work = cc.bwd_weight_s;
      freed = cc.weight_saved_bytes;
      break;
  }
  TaskCost t;
  t.work_ns = Ns(work / k.units);
  t.alloc_bytes = alloc / k.units;
  t.free_bytes = freed / k.units;
  t.transient_bytes = transient;
  return t;
}

/// A pipeline send from `stage` (forward) or to the stage before it (backward), inside a node or
/// across nodes, at the straggler's slow-NIC rate when either end is its node.
TaskCost Builder::SendCost(const CostKey& k, int stage) const {
  const bool fwd = k.kind == CostKind::kSendForward;
  const bool same = fwd ? (stage + 1 < p_ ? cm_.pp_next_same_node[static_cast<std::size_t>(stage)] : all_one_node_)
                        : (stage > 0 ? cm_.pp_next_same_node[static_cast<std::size_t>(stage - 1)] : all_one_node_);
  // A transfer into or out of the straggler's slow-NIC node runs at its rate.
  const int peer = ((fwd ? stage + 1 : stage - 1) + p_) % p_;  // interleaved chunks wrap p-1 <-> 0
  const bool slow = slow_nic_prof_ && !same && (stage == opts_.straggler_stage || peer == opts_.straggler_stage);
  TaskCost t = Comm(k.device, same ? cm_.pp_send_intra
                                   : slow ? P2PCostOf(*slow_nic_prof_, cm_.pp_message_bytes, false) : cm_.pp_send_inter);
  t.slows_compute = false;
  return t;
}

/// The optimizer step of `stage` (and the low-precision weights' quantization), slower on a
/// straggler's stage.
TaskCost Builder::OptimizerCost(int stage) const {
  const auto& chunks = cm_.chunks[static_cast<std::size_t>(stage)];
  double params = 0, experts = 0, quantized = 0;
  for (const auto& x : chunks) {
    params += x.params_per_gpu;
    experts += x.expert_params_per_gpu;
    quantized += x.quantized_params_per_gpu;
  }
  TaskCost t;
  // A straggler's stage runs its optimizer kernels slower too (SimulateOptions).
  const double slow = stage == opts_.straggler_stage ? opts_.straggler_slowdown : 1.0;
  t.work_ns = FreeComm() ? 0.0
                         : Ns(slow * (OptimizerTime(prof_, c_, params, experts) +
                                      WeightQuantizeTime(prof_, c_, lf_, quantized)));
  return t;
}

TaskCost Builder::CostOf(const CostKey& k) const {
  const int stage = k.device / R_;
  const auto& chunks = cm_.chunks[static_cast<std::size_t>(stage)];
  const ChunkCost& cc = chunks[static_cast<std::size_t>(std::max(0, k.chunk))];
  const CollectiveOp reduce = GradReduceIsAllReduce(c_) ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter;
  switch (k.kind) {
    case CostKind::kItem:
      return ItemCost(k, cc);
    case CostKind::kZero3Gather:
    case CostKind::kZero3Prefetch: {
      // ZeRO-3: this layer's parameters, gathered flat (kPerLayer) or tensor by tensor.
      double params = cc.params_per_gpu / k.units, experts = cc.expert_params_per_gpu / k.units;
      if (ds_) {  // DeepSpeed: this pass's prefetched or on-demand share
        const double share = ds_share_[k.item == ItemKind::kBackward][k.kind == CostKind::kZero3Gather];
        params *= share;
        experts *= share;
      }
      if (!zero3_sync_) return DpComm(k.device, CollectiveOp::kAllGather, params * c_.param_gather_bytes, experts * c_.param_gather_bytes);
      return PerTensorCost(k.device, CollectiveOp::kAllGather, k.item, params, experts, k.kind == CostKind::kZero3Prefetch);
    }
    case CostKind::kZero3Reduce: {
      const double params = cc.params_per_gpu / k.units, experts = cc.expert_params_per_gpu / k.units;
      if (!zero3_sync_) {
        return DpComm(k.device, CollectiveOp::kReduceScatter, params * grad_bytes_per_param_, experts * grad_bytes_per_param_);
      }
      return PerTensorCost(k.device, CollectiveOp::kReduceScatter, ItemKind::kForward, params, experts, false);
    }
    case CostKind::kZero3GatherHost:
    case CostKind::kZero3ReduceHost:
      return PerTensorHostCost(k.device,
                               k.kind == CostKind::kZero3GatherHost ? CollectiveOp::kAllGather : CollectiveOp::kReduceScatter,
                               k.item, cc.params_per_gpu / k.units);
    case CostKind::kOverlapReduce:
    case CostKind::kReduceAfter: {
      const double nb = Buckets(stage, k.chunk);
      return BucketCost(DpComm(k.device, reduce, cc.params_per_gpu / nb * grad_bytes_per_param_,
                               cc.expert_params_per_gpu / nb * grad_bytes_per_param_),
                        nb, k.units);
    }
    case CostKind::kSendForward:
    case CostKind::kSendBackward:
      return SendCost(k, stage);
    case CostKind::kEmbeddingSync: {
      // Both ends wait on the one all-reduce: at the slow NIC's rate when either end has it.
      const int other = stage == 0 ? p_ - 1 : 0;
      const HardwareProfile& prof = ProfOf(stage == opts_.straggler_stage ? stage : other);
      return Comm(k.device, CollectiveCostOf(prof, CollectiveOp::kAllReduce, cm_.embedding_sync_bytes, cm_.embedding_pair));
    }
    case CostKind::kOptimizer:
      return OptimizerCost(stage);
    case CostKind::kParamGather: {
      const double nb = Buckets(stage, k.chunk);
      return BucketCost(DpComm(k.device, CollectiveOp::kAllGather, cc.params_per_gpu * c_.param_gather_bytes / nb,
                               cc.expert_params_per_gpu * c_.param_gather_bytes / nb),
                        nb, k.units);
    }
  }
  return {};
}

std::int32_t Builder::CostId(const CostKey& k) {
  const std::size_t slot =
      ((static_cast<std::size_t>(k.device) * kNumCostKinds + static_cast<std::size_t>(k.kind)) * 3 + static_cast<std::size_t>(k.item)) *
          static_cast<std::size_t>(v_) +
      static_cast<std::size_t>(std::max(0, k.chunk));
  CostSlot& seen = cost_ids_[slot];
  for (int j = 0; j < 2; ++j) {
    if (seen.units[j] == k.units) return seen.id[j];
  }
  for (const auto& [sl, units, id] : cost_ids_more_) {
    if (sl == static_cast<std::int32_t>(slot) && units == k.units) return id;
  }
  const std::int32_t id = g_->AddCost(CostOf(k));
  sk_->cost_keys.push_back(k);
  if (seen.units[0] == 0) {
    seen.units[0] = k.units;
    seen.id[0] = id;
  } else if (seen.units[1] == 0) {
    seen.units[1] = k.units;
    seen.id[1] = id;
  } else {
    cost_ids_more_.push_back({static_cast<std::int32_t>(slot), k.units, id});
  }
  return id;
}

void Builder::Refill(Skeleton& sk) const {
  auto& costs = sk.graph.mutable_costs();
  for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = CostOf(sk.cost_keys[i]);
  auto& links = sk.graph.mutable_links();
  for (std::size_t l = 0; l < links.size(); ++l) {
    links[l] = l % 2 == 0 ? IntraLink() : NetworkLink(StageOf(static_cast<int>(l / 2)));
  }
  for (auto& d : sk.graph.mutable_devices()) d = DeviceOf();
}

void Builder::Build(Skeleton& sk) {
  sk_ = &sk;
  g_ = &sk.graph;
  sk.graph.Clear();
  sk.cost_keys.clear();
  sk.sched = SharedSchedule(c_.schedule, p_, mb_, v_, static_cast<int>(c_.pipeline_flushes));
  const int devices = p_ * R_;
  sk.device_stage.assign(static_cast<std::size_t>(devices), 0);
  last_on_stream_.assign(static_cast<std::size_t>(devices * kNumStreams), -1);
  periods_.assign(static_cast<std::size_t>(devices), 0);
  cost_ids_.assign(static_cast<std::size_t>(devices) * kNumCostKinds * 3 * static_cast<std::size_t>(v_), CostSlot{});
  cost_ids_more_.clear();
  for (int i = 0; i < p_; ++i) {
    for (int r = 0; r < R_; ++r) {
      const int id = g_->AddDevice(DeviceOf());
      sk.device_stage[static_cast<std::size_t>(id)] = i;
      g_->AddLink(IntraLink().capacity_GBps);   // link 2 * id
      g_->AddLink(NetworkLink(StageOf(static_cast<int>(id))).capacity_GBps);  // link 2 * id + 1
    }
  }
  const int nitems = 3 * mb_ * v_;
  g_->Reserve(static_cast<std::size_t>(devices) * static_cast<std::size_t>(5 * mb_ * v_ + 64),
              static_cast<std::size_t>(devices) * static_cast<std::size_t>(10 * mb_ * v_ + 128));
  items_.assign(static_cast<std::size_t>(devices), std::vector<ItemTasks>(static_cast<std::size_t>(nitems)));
  fwd_send_.assign(static_cast<std::size_t>(devices), std::vector<std::int32_t>(static_cast<std::size_t>(nitems), -1));
  bwd_send_ = fwd_send_;
  for (int i = 0; i < p_; ++i) {
    for (int r = 0; r < R_; ++r) BuildStage(i, r);
  }
  AddPipelineEdges();
  g_->SetDevicePeriods(periods_);
  // Replica 0's compute and data-parallel streams per stage, for the step's accounting.
  sk.compute_tasks.assign(static_cast<std::size_t>(p_), {});
  sk.dp_tasks.assign(static_cast<std::size_t>(p_), {});
  const auto& nodes = g_->nodes();
  for (std::size_t id = 0; id < nodes.size(); ++id) {
    const TaskNode& t = nodes[id];
    const int stage = sk.device_stage[static_cast<std::size_t>(t.device)];
    if (Device(stage, 0) != t.device) continue;
    if (t.stream == kComputeStream) sk.compute_tasks[static_cast<std::size_t>(stage)].push_back(static_cast<std::int32_t>(id));
    if (t.stream == kDpStream || t.stream == kDpGatherStream) {
      sk.dp_tasks[static_cast<std::size_t>(stage)].push_back(static_cast<std::int32_t>(id));
    }
  }
}

/// One stage replica's graph under construction: the state BuildStage's steps share, in the
/// order of the stage's schedule.
struct Builder::StageBuild {
  int stage = 0, dev = 0, v = 1;
  const std::vector<ScheduleItem>* order = nullptr;
  const std::vector<ChunkCost>* chunks = nullptr;
  ItemKind grad_kind = ItemKind::kBackward;  ///< the item that produces weight gradients
  // With pipeline flushes that reduce gradients after each flush (PyTorch's pipeline stage at
  // the end of every step() call), each flush has its own last gradient item per chunk.
  bool flush_sync = false;
  int per_flush = 1;  ///< micro-batches per flush
  /// ZeRO-2: every micro-batch's backward reduces its gradients.
  bool reduce_each_microbatch = false;
  /// ZeRO-1/2 gather the updated parameters (per chunk and bucket).
  bool gathers_params = false;
  /// Position of the last gradient-producing item of each chunk (of each flush; buckets hang off it).
  std::vector<int> last_grad_pos;
  std::vector<std::int32_t> compute_seq;  ///< compute-stream tasks in order (for ZeRO-3 prefetch)
  /// ZeRO-1/2 parameter all-gathers [chunk][bucket] that forwards of `gated_microbatch` wait for
  /// (a later flush's after a reshard).
  std::vector<std::vector<std::int32_t>> gathers;
  int gated_microbatch = 0;
  std::vector<std::int32_t> flush_waits;  ///< a flush's reduces, which the next compute waits for
  std::vector<int> reduce_after;          ///< chunks of the non-overlapped reduce
  std::vector<std::int32_t> item_first;   ///< the first task of each item
  /// FSDP without its rate limiter: the CPU, at most one pass ahead of the GPU, issues a pass's
  /// gathers once the GPU has run the previous pass's first unit (the replay's assumption too).
  std::int32_t prev_pass_first = -1, pass_first = -1;
  /// DeepSpeed stage 3: the layers whose gradients wait in the reduce bucket, and the bucket's
  /// last reduce-scatter at the end of a backward, which the host waits for before going on.
  std::vector<int> ds_pending;
  std::int32_t ds_host_sync = -1;

  int FlushOf(const ScheduleItem& it) const { return flush_sync ? it.microbatch / per_flush : 0; }
  std::size_t GradSlot(const ScheduleItem& it) const { return static_cast<std::size_t>(FlushOf(it) * v + it.chunk); }
  std::int32_t LastCompute() const { return compute_seq.empty() ? -1 : compute_seq.back(); }
};

void Builder::BuildStage(int i, int r) {
  StageBuild s;
  s.stage = i;
  s.dev = Device(i, r);
  s.v = v_;
  s.order = &sk_->sched.order[static_cast<std::size_t>(i)];
  s.chunks = &cm_.chunks[static_cast<std::size_t>(i)];
  s.grad_kind = sk_->sched.split_weight ? ItemKind::kWeight : ItemKind::kBackward;
  const int flushes = static_cast<int>(std::max<std::int64_t>(1, c_.pipeline_flushes));
  s.flush_sync = flushes > 1 && c_.flush_grad_reduce && dp_comm_ && !zero3_;
  s.per_flush = std::max(1, mb_ / flushes);
  s.last_grad_pos.assign(static_cast<std::size_t>(v_ * (s.flush_sync ? flushes : 1)), -1);
  s.reduce_each_microbatch = c_.zero_stage == 2 && dp_comm_;
  const int n = static_cast<int>(s.order->size());
  for (int pos = 0; pos < n; ++pos) {
    const ScheduleItem& it = (*s.order)[static_cast<std::size_t>(pos)];
    if (it.kind == s.grad_kind) s.last_grad_pos[s.GradSlot(it)] = pos;
  }
  dp_key_ = 0;  // replicas create the same collectives in the same order
  s.gathers_params = (c_.zero_stage == 1 || c_.zero_stage == 2) && dp_comm_;
  s.gathers.resize(static_cast<std::size_t>(v_));
  if (s.gathers_params && c_.overlap_param_gather) s.gathers = AddParamGathers(s, -1);
  s.item_first.resize(static_cast<std::size_t>(n));
  for (int pos = 0; pos < n; ++pos) BuildItem(s, pos);
  FinishStage(s, r);
}

// ZeRO-1/2 parameter all-gathers, per chunk and bucket, after task `after` (-1: none). With
// overlap_param_gather they belong to the previous optimizer step and overlap this step's
// first forward (steady state): the first two may start with the step, later ones are
// chained to the forward units (BuildItem).
std::vector<std::vector<std::int32_t>> Builder::AddParamGathers(const StageBuild& s, std::int32_t after) {
  std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(v_));
  for (int k = 0; k < v_; ++k) {
    const int nb = NBuckets(s.stage, k);
    for (int b = 0; b < nb; ++b) {
      const std::int32_t id = Add(TaskType::kParamGather, {CostKind::kParamGather, ItemKind::kForward, s.dev, k, nb},
                                  kDpStream, -1, k, b);
      g_->AddEdge(after, id);
      ids[static_cast<std::size_t>(k)].push_back(id);
      Sync(s.stage, {after, id});
    }
  }
  return ids;
}

void Builder::BuildItem(StageBuild& s, int pos) {
  s.prev_pass_first = s.pass_first;
  s.pass_first = -1;
  const ScheduleItem& it = (*s.order)[static_cast<std::size_t>(pos)];
  s.item_first[static_cast<std::size_t>(pos)] = static_cast<std::int32_t>(g_->num_tasks());
  const ChunkCost& cc = (*s.chunks)[static_cast<std::size_t>(it.chunk)];
  // ZeRO-2 holds only its shard of the gradients, so every micro-batch's backward reduces
  // (reduce-scatters) its gradients: DeepSpeed stage 2's gradient hooks at every micro-step,
  // FSDP's SHARD_GRAD_OP and Megatron-FSDP's optim_grads after each backward. ZeRO-1 keeps the
  // whole gradients and reduces once, after the last micro-batch.
  const bool is_last_grad = pos == s.last_grad_pos[s.GradSlot(it)];
  const bool reduces_grads = it.kind == s.grad_kind && (is_last_grad || s.reduce_each_microbatch);
  // (EndFlush replaces s.gathers after the units: this reference is not used past them.)
  const std::vector<std::int32_t>& chunk_gathers = s.gathers[static_cast<std::size_t>(it.chunk)];
  const bool gated_forward = it.kind == ItemKind::kForward && it.microbatch == s.gated_microbatch && !chunk_gathers.empty();
  int units = 1;
  if (zero3_) units = std::max(1, cc.layers);
  else if (reduces_grads && c_.overlap_grad_reduce && dp_comm_) units = NBuckets(s.stage, it.chunk);
  // Megatron-LM's overlap_param_gather: the chunk's first forward runs bucket by bucket,
  // each part waiting only for its own bucket's all-gather (forward pre-hooks).
  else if (gated_forward) units = static_cast<int>(chunk_gathers.size());
  const TaskType type = it.kind == ItemKind::kForward    ? TaskType::kForward
                        : it.kind == ItemKind::kBackward ? TaskType::kBackward
                                                         : TaskType::kWeight;
  ItemTasks& itk = items_[static_cast<std::size_t>(s.dev)][static_cast<std::size_t>(Index(it.kind, it.microbatch, it.chunk))];
  for (int u = 0; u < units; ++u) {
    const auto [gather, ds_prefetch] = AddZero3Gathers(s, it, u, units);
    const std::int32_t id = Add(type, {CostKind::kItem, it.kind, s.dev, it.chunk, units}, kComputeStream,
                                it.microbatch, it.chunk, u);
    g_->AddEdge(gather, id);
    if (s.ds_host_sync >= 0) {  // DeepSpeed's host waited for the reduction stream after the backward
      g_->AddEdge(s.ds_host_sync, id);
      g_->AddEdge(s.ds_host_sync, gather);
      g_->AddEdge(s.ds_host_sync, ds_prefetch);
      s.ds_host_sync = -1;
    }
    // FSDP2's end of backward (each step() call) waits for its reduce-scatters.
    for (std::int32_t w : s.flush_waits) g_->AddEdge(w, id);
    s.flush_waits.clear();
    s.compute_seq.push_back(id);
    if (u == 0) {
      itk.first = id;
      s.pass_first = id;
    }
    itk.last = id;
    if (gated_forward) {
      g_->AddEdge(chunk_gathers[static_cast<std::size_t>(u)], id);
      // Megatron chains the gathers: a bucket's forward pre-hook waits for its own gather
      // and dispatches the next bucket's. So gather u+2 starts once unit u is done, i.e.
      // when unit u+1 may start (gather u+1 done on the stream before it).
      if (u + 2 < units) g_->AddEdge(id, chunk_gathers[static_cast<std::size_t>(u + 2)]);
    }
    if (it.kind == s.grad_kind) AddUnitReduce(s, it, u, units, id, reduces_grads);
  }
  if (reduces_grads && dp_comm_ && !c_.overlap_grad_reduce && !zero3_) {
    if (s.reduce_each_microbatch && !is_last_grad) {
      // Not overlapped: the micro-batch's buckets reduced after its backward, the compute
      // stream waiting for them.
      const int nb = NBuckets(s.stage, it.chunk);
      for (int b = 0; b < nb; ++b) {
        const std::int32_t rid = Add(TaskType::kDpReduce, {CostKind::kReduceAfter, ItemKind::kForward, s.dev, it.chunk, nb},
                                     kComputeStream, it.microbatch, it.chunk, b);
        g_->AddEdge(itk.last, rid);
        Sync(s.stage, {itk.last, rid});
      }
    } else {
      s.reduce_after.push_back(it.chunk);
    }
  }
  const bool flush_ends = s.flush_sync && pos + 1 < static_cast<int>(s.order->size()) &&
                          s.FlushOf((*s.order)[static_cast<std::size_t>(pos + 1)]) != s.FlushOf(it);
  if (flush_ends) EndFlush(s, it);
  AddPipelineSends(s, it, itk);
}

// The ZeRO-3 parameter gathers unit `u` of `units` of item `it` waits for: (gather, prefetch);
// -1 where there is none.
std::pair<std::int32_t, std::int32_t> Builder::AddZero3Gathers(StageBuild& s, const ScheduleItem& it, int u, int units) {
  if (!zero3_ || !dp_comm_ || it.kind == ItemKind::kWeight) return {-1, -1};
  const int i = s.stage;
  const std::vector<std::int32_t>& seq = s.compute_seq;
  if (zero3_sync_) {
    // DeepSpeed 2021: the layer's tensors gathered one by one on a synchronized device,
    // after the previous unit (the compute stream's program order).
    // The tensors DeepSpeed prefetches (Zero3TensorCost::prefetched_share) are gathered on
    // the communication stream while the previous unit computes; the rest, and the host's
    // list handling of all of them, hold the compute stream.
    const std::int32_t prev2 = seq.size() >= 2 ? seq[seq.size() - 2] : -1;
    const std::int32_t pre = Add(TaskType::kParamGather, {CostKind::kZero3Prefetch, it.kind, s.dev, it.chunk, units},
                                 kDpGatherStream, it.microbatch, it.chunk, u);
    g_->AddEdge(prev2, pre);
    Sync(i, {prev2, pre});
    Add(TaskType::kParamGather, {CostKind::kZero3GatherHost, it.kind, s.dev, it.chunk, units}, kComputeStream,
        it.microbatch, it.chunk, u);
    const std::int32_t gather = Add(TaskType::kParamGather, {CostKind::kZero3Gather, it.kind, s.dev, it.chunk, units},
                                    kComputeStream, it.microbatch, it.chunk, u);
    g_->AddEdge(pre, gather);
    Sync(i, {s.LastCompute(), gather});
    return {gather, -1};
  }
  if (ds_ && it.kind == ItemKind::kBackward && u < ds_kept_) return {-1, -1};
  // FSDP: gather this layer's parameters, prefetched while the previous unit runs; the rate
  // limiter (limit_all_gathers) holds the gather until the unit two back is done. Without
  // it the CPU, up to a pass ahead, issues them once the previous pass has begun.
  // DeepSpeed: issued `lead` layers ahead (the unit lead + 1 back is done); the layers its
  // reuse distance keeps at the turn to the backward are not gathered again.
  std::int32_t gather = Add(TaskType::kParamGather, {ds_ ? CostKind::kZero3Prefetch : CostKind::kZero3Gather,
                                                     ds_ ? it.kind : ItemKind::kForward, s.dev, it.chunk, units},
                            kDpGatherStream, it.microbatch, it.chunk, u);
  const std::size_t lead = ds_ ? static_cast<std::size_t>(ds_lead_[it.kind == ItemKind::kBackward]) : 1;
  const std::int32_t after = ds_ || c_.zero3_limit_all_gathers ? (seq.size() > lead ? seq[seq.size() - 1 - lead] : -1)
                                                               : s.prev_pass_first;
  g_->AddEdge(after, gather);
  Sync(i, {after, gather});
  if (!ds_ || !(ds_share_[it.kind == ItemKind::kBackward][1] > 0)) return {gather, -1};
  // What the coordinator fetches on demand: issued when the module is reached (the unit
  // before is done), and waited for.
  const std::int32_t ds_prefetch = gather;
  const std::int32_t prev = s.LastCompute();
  gather = Add(TaskType::kParamGather, {CostKind::kZero3Gather, it.kind, s.dev, it.chunk, units}, kDpGatherStream,
               it.microbatch, it.chunk, u);
  g_->AddEdge(ds_prefetch, gather);
  g_->AddEdge(prev, gather);
  Sync(i, {prev, gather});
  return {gather, ds_prefetch};
}

// The gradient reduction of unit `u` (task `id`) of a gradient-producing item.
void Builder::AddUnitReduce(StageBuild& s, const ScheduleItem& it, int u, int units, std::int32_t id, bool reduces_grads) {
  if (!dp_comm_) return;
  if (zero3_) {
    if (zero3_sync_) {
      Add(TaskType::kDpReduce, {CostKind::kZero3ReduceHost, ItemKind::kForward, s.dev, it.chunk, units}, kComputeStream,
          it.microbatch, it.chunk, u);
    }
    // DeepSpeed: the layers' gradients wait in the reduce bucket until it is full or the
    // backward ends (independent_gradient_partition_epilogue, which synchronizes).
    // Other frameworks reduce-scatter each layer's gradients after its backward.
    s.ds_pending.push_back(u);
    if (ds_ && static_cast<int>(s.ds_pending.size()) < ds_bucket_layers_ && u + 1 != units) return;
    for (int pu : s.ds_pending) {
      const std::int32_t rid = Add(TaskType::kDpReduce, {CostKind::kZero3Reduce, ItemKind::kForward, s.dev, it.chunk, units},
                                   zero3_sync_ ? kComputeStream : kDpStream, it.microbatch, it.chunk, pu);
      g_->AddEdge(id, rid);
      Sync(s.stage, {id, rid});
      if (ds_ && u + 1 == units) s.ds_host_sync = rid;
    }
    s.ds_pending.clear();
  } else if (reduces_grads && c_.overlap_grad_reduce) {
    const std::int32_t rid = Add(TaskType::kDpReduce, {CostKind::kOverlapReduce, ItemKind::kForward, s.dev, it.chunk, units},
                                 kDpStream, s.reduce_each_microbatch ? it.microbatch : -1, it.chunk, u);
    g_->AddEdge(id, rid);
    Sync(s.stage, {id, rid});
  }
}

// PyTorch's pipeline stage at the end of a step() call (item `it` ends its flush): the flush's
// gradients reduced (reduce-scattered, and FSDP2's parameters resharded: gathered again before
// the next flush's first forward of each chunk, bucket by bucket as ZeRO-1's gathers).
void Builder::EndFlush(StageBuild& s, const ScheduleItem& it) {
  std::int32_t last = s.LastCompute();
  for (int k : s.reduce_after) {
    const int nb = NBuckets(s.stage, k);
    for (int b = 0; b < nb; ++b) {
      const std::int32_t rid = Add(TaskType::kDpReduce, {CostKind::kReduceAfter, ItemKind::kForward, s.dev, k, nb},
                                   kDpStream, -1, k, b);
      g_->AddEdge(s.LastCompute(), rid);
      Sync(s.stage, {s.LastCompute(), rid});
      s.flush_waits.push_back(rid);
      last = rid;
    }
  }
  s.reduce_after.clear();
  if (c_.overlap_grad_reduce) {  // the flush's overlapped reduces, waited for likewise
    last = LastOn(s.dev, kDpStream);
    if (last >= 0) s.flush_waits.push_back(last);
  }
  if (s.gathers_params) {
    s.gathers = AddParamGathers(s, last);
    s.gated_microbatch = (s.FlushOf(it) + 1) * s.per_flush;
  }
}

// Pipeline sends of item `it` (the receiver's dependency is added once all stages exist).
void Builder::AddPipelineSends(const StageBuild& s, const ScheduleItem& it, const ItemTasks& itk) {
  const int mc = it.chunk * p_ + s.stage;
  const int idx = Index(it.kind, it.microbatch, it.chunk);
  if (it.kind == ItemKind::kForward && mc < p_ * v_ - 1 && p_ > 1) {
    const std::int32_t sid = Add(TaskType::kPpSend, {CostKind::kSendForward, ItemKind::kForward, s.dev, -1, 1},
                                 c_.p2p_blocking ? kComputeStream : kSendFwdStream, it.microbatch, it.chunk);
    g_->AddEdge(itk.last, sid);
    fwd_send_[static_cast<std::size_t>(s.dev)][static_cast<std::size_t>(idx)] = sid;
  }
  if (it.kind == ItemKind::kBackward && mc > 0 && p_ > 1) {
    const std::int32_t sid = Add(TaskType::kPpSend, {CostKind::kSendBackward, ItemKind::kForward, s.dev, -1, 1},
                                 c_.p2p_blocking ? kComputeStream : kSendBwdStream, it.microbatch, it.chunk);
    g_->AddEdge(itk.last, sid);
    bwd_send_[static_cast<std::size_t>(s.dev)][static_cast<std::size_t>(idx)] = sid;
  }
}

// After the stage's last item: the non-overlapped gradient reduction, the tied embedding's
// all-reduce, the optimizer step and ZeRO-1/2's parameter gathers after it, and the steady
// state's period (the engine's hint).
void Builder::FinishStage(StageBuild& s, int r) {
  const int i = s.stage;
  const std::int32_t last_compute = s.LastCompute();
  for (int k : s.reduce_after) {
    const int nb = NBuckets(i, k);
    for (int b = 0; b < nb; ++b) {
      const std::int32_t rid = Add(TaskType::kDpReduce, {CostKind::kReduceAfter, ItemKind::kForward, s.dev, k, nb},
                                   kDpStream, -1, k, b);
      g_->AddEdge(last_compute, rid);
      Sync(i, {last_compute, rid});
    }
  }
  // Tied embedding: first and last stage all-reduce the embedding gradient (Megatron-LM).
  std::int32_t before_opt = LastOn(s.dev, kDpStream);
  if (m_.tie_embeddings && p_ > 1 && !FreeComm() && (i == 0 || i == p_ - 1)) {
    const std::int32_t eid = Add(TaskType::kEmbeddingSync, {CostKind::kEmbeddingSync, ItemKind::kForward, s.dev, -1, 1}, kDpStream);
    g_->AddEdge(last_compute, eid);
    before_opt = eid;
  }
  const std::int32_t oid = Add(TaskType::kOptimizer, {CostKind::kOptimizer, ItemKind::kForward, s.dev, -1, 1}, kComputeStream);
  g_->AddEdge(before_opt, oid);
  // Without overlap_param_gather, ZeRO-1/2 gather the updated parameters after the step.
  if (s.gathers_params && !c_.overlap_param_gather) AddParamGathers(s, oid);
  // The tasks built per period of the schedule's steady state (the engine's hint, which it checks).
  if (r == 0) steady_ = SteadyPeriodOf(*s.order);  // replicas run the same order
  const SteadyPeriod& sp = steady_;
  if (sp.items > 0) {
    periods_[static_cast<std::size_t>(s.dev)] = s.item_first[static_cast<std::size_t>(sp.at + sp.items)] -
                                                s.item_first[static_cast<std::size_t>(sp.at)];
  }
}

void Builder::AddPipelineEdges() {
  // Cross-stage edges: pipeline sends feed the receiver's first unit.
  for (int i = 0; i < p_; ++i) {
    for (int r = 0; r < R_; ++r) {
      const int dev = Device(i, r);
      for (const ScheduleItem& it : sk_->sched.order[static_cast<std::size_t>(i)]) {
        const int idx = Index(it.kind, it.microbatch, it.chunk);
        const ItemTasks& me = items_[static_cast<std::size_t>(dev)][static_cast<std::size_t>(idx)];
        const int mc = it.chunk * p_ + i;
        if (it.kind == ItemKind::kForward && mc > 0) {
          const int src = i == 0 ? p_ - 1 : i - 1;
          const int chunk = i == 0 ? it.chunk - 1 : it.chunk;
          g_->AddEdge(fwd_send_[static_cast<std::size_t>(Device(src, r))]
                               [static_cast<std::size_t>(Index(ItemKind::kForward, it.microbatch, chunk))],
                      me.first);
        }
        if (it.kind == ItemKind::kBackward) {
          const ItemTasks& f = items_[static_cast<std::size_t>(dev)]
                                     [static_cast<std::size_t>(Index(ItemKind::kForward, it.microbatch, it.chunk))];
          g_->AddEdge(f.last, me.first);
          if (mc < p_ * v_ - 1) {
            const int src = i == p_ - 1 ? 0 : i + 1;
            const int chunk = i == p_ - 1 ? it.chunk + 1 : it.chunk;
            g_->AddEdge(bwd_send_[static_cast<std::size_t>(Device(src, r))]
                                 [static_cast<std::size_t>(Index(ItemKind::kBackward, it.microbatch, chunk))],
                        me.first);
          }
        }
        if (it.kind == ItemKind::kWeight) {
          const ItemTasks& b = items_[static_cast<std::size_t>(dev)]
                                     [static_cast<std::size_t>(Index(ItemKind::kBackward, it.microbatch, it.chunk))];
          g_->AddEdge(b.last, me.first);
        }
      }
    }
  }
  // Full-rank: a data-parallel collective starts only when every replica has produced its part.
  if (R_ > 1) {
    for (const auto& [key, members] : dp_sync_) {
      (void)key;
      for (const auto& [prod, task] : members) {
        (void)prod;
        for (const auto& [prod2, task2] : members) {
          (void)task2;
          if (prod2 >= 0) g_->AddEdge(prod2, task);
        }
      }
    }
  }
}

/// The skeletons of the last four shapes simulated on this thread, most recent first. The planner
/// simulates many candidates of one shape (recompute, sequence parallelism and ZeRO-1 vs 2 with
/// the same buckets change only numbers), so their graphs are built once.
Skeleton& SkeletonFor(Builder& b, bool reuse, bool* reused) {
  constexpr std::size_t kKept = 4;
  // A graph is kept only up to 2^20 tasks (some 60 MB with its edges); larger ones, and all
  // graphs when reuse is off, are built in one scratch skeleton per thread.
  constexpr std::size_t kMaxCachedTasks = std::size_t{1} << 20;
  thread_local std::vector<std::unique_ptr<Skeleton>> cache;
  thread_local std::unique_ptr<Skeleton> scratch;
  std::vector<std::int64_t> shape = b.ShapeOf();
  if (reuse) {
    for (std::size_t i = 0; i < cache.size(); ++i) {
      if (cache[i]->shape != shape) continue;
      std::rotate(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(i),
                  cache.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      b.Refill(*cache.front());
      *reused = true;
      return *cache.front();
    }
  }
  if (!scratch) scratch = std::make_unique<Skeleton>();
  scratch->shape = std::move(shape);
  b.Build(*scratch);
  if (!reuse || scratch->graph.num_tasks() > kMaxCachedTasks) {
    scratch->shape.clear();
    return *scratch;
  }
  // Keep it: the oldest kept skeleton's memory becomes the next scratch.
  std::unique_ptr<Skeleton> next;
  if (cache.size() >= kKept) {
    next = std::move(cache.back());
    cache.pop_back();
  }
  cache.insert(cache.begin(), std::move(scratch));
  scratch = std::move(next);
  return *cache.front();
}

}  // namespace

double DeepSpeedBucketBytes(const ParallelConfig& c, int stage) {
  // stage_1_and_2.py's backward() allocates ipg_buffer when contiguous_gradients is on, a second
  // one with overlap_comm; the gradients are copied into it bucket by bucket for their reduction.
  // The pipeline engine runs the loss's backward through the optimizer on the last stage only
  // (the other stages allocate their bucket in reduce_gradients, after their backward, when the
  // activations are gone) and turns overlap_comm off.
  if (!c.deepspeed_zero12()) return 0;
  if (stage != c.pp - 1) return 0;
  // Gradients are reduced inside the backward, bucket by bucket, where the optimizer hooks them:
  // at ZeRO-2, or with overlap_comm (create_reduce_and_remove_grad_hooks); else after it.
  const double overlap = c.overlap_grad_reduce && c.pp == 1 ? 1.0 : 0.0;
  const bool in_backward = c.pp == 1 && (c.zero_stage == 2 || overlap > 0);
  // An all-reduced bucket is flattened into a new tensor (allreduce_bucket's self.flatten,
  // torch.cat) while it runs: without contiguous gradients always, with them in the multi-rank
  // all-reduce (v0.12.4+). Without contiguous gradients, overlap_comm also keeps the previous
  // bucket's .grad tensors until the next one (_clear_previous_reduced_grads).
  if (!c.ds_contiguous_gradients) return in_backward ? (1.0 + overlap) * c.ds_reduce_bucket_elems * 2.0 : 0.0;
  const double copy = in_backward && c.ds_multi_rank_bucket_allreduce ? 1.0 : 0.0;
  return (1.0 + overlap + copy) * c.ds_reduce_bucket_elems * 2.0;
}

/// The stage's allocations replayed through the caching allocator (ReplayStageAllocations), its
/// device capacity `usable` less the framework overhead, shifted by what the replayed trace
/// allocates beyond the stage's modelled peak (its backward's gradients in flight are counted
/// tensor by tensor), so that the replay runs out of room exactly when the modelled peak plus the
/// allocator's overhead would. Unlimited first; limited only when the cache would not fit.
/// `trace` (optional) receives the unlimited replay's calls and that capacity.
AllocatorReplay ReplayStageMemory(const CostModel& cm, const ParallelConfig& c, int stage, const StageMemory& mem,
                                  double usable, StageAllocatorTrace* trace) {
  const double static_bytes = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.comm_buffer_bytes;
  AllocatorReplay r = ReplayStageAllocations(cm, c, stage, static_bytes, 0, trace ? &trace->events : nullptr);
  r.unlimited_overhead_bytes = r.overhead_bytes();
  const double shift = r.peak_allocated_bytes - (mem.peak_bytes - mem.framework_bytes);
  const double capacity = usable - mem.framework_bytes + shift;
  if (trace) {
    trace->stage = stage;
    trace->capacity_bytes = capacity;
  }
  if (r.peak_reserved_bytes <= capacity) return r;
  if (capacity <= 0) {
    r.out_of_memory = true;
    return r;
  }
  AllocatorReplay limited = ReplayStageAllocations(cm, c, stage, static_bytes, capacity);
  limited.unlimited_overhead_bytes = r.unlimited_overhead_bytes;
  return limited;
}

/// StageMemory's reserved figure and retries from the stage's replay.
void RecordReplay(const AllocatorReplay& replay, StageMemory* mem) {
  mem->reserved_unlimited_bytes = mem->peak_bytes + std::max(0.0, replay.unlimited_overhead_bytes);
  // A replay that ran out of room stopped part-way: what it held then is no figure of the step's;
  // the stage's reserved figure is then what it needs, the unlimited replay's.
  mem->reserved_bytes = replay.out_of_memory ? mem->reserved_unlimited_bytes
                                             : mem->peak_bytes + std::max(0.0, replay.overhead_bytes());
  mem->reserved_unlimited_bytes = std::max(mem->reserved_unlimited_bytes, mem->reserved_bytes);
  mem->allocator_retries = replay.retries;
  mem->allocator_replayed_microbatches = replay.microbatches;
}

/// Fits as PyTorch runs it: the allocated peak within usable memory, and no request the caching
/// allocator's replay finds no room for even after releasing its cache; at risk when it fits
/// only because the replay released its cache (retries; the reserved figure then stays within
/// usable memory). Updates the result's fits, reasons, at-risk flag and peaks with stage `i`.
void JudgeStageMemory(int i, const AllocatorReplay& replay, StageResult* sr, SimulationResult* res) {
  const StageMemory& mem = sr->memory;
  sr->fits = mem.peak_bytes <= res->usable_memory_bytes && !replay.out_of_memory;
  sr->at_risk = sr->fits && replay.retries > 0;
  res->memory_at_risk = res->memory_at_risk || sr->at_risk;
  res->peak_memory_bytes = std::max(res->peak_memory_bytes, mem.peak_bytes);
  res->peak_reserved_bytes = std::max(res->peak_reserved_bytes, mem.reserved_bytes);
  res->peak_reserved_unlimited_bytes = std::max(res->peak_reserved_unlimited_bytes, mem.reserved_unlimited_bytes);
  if (mem.peak_bytes > res->usable_memory_bytes) {
    res->fits = false;
    res->reasons.push_back(fmt::format("stage {} needs {} per GPU, more than the {} usable", i,
                                       FormatGiB(mem.peak_bytes), FormatGiB(res->usable_memory_bytes)));
  } else if (!sr->fits) {
    res->fits = false;
    res->reasons.push_back(fmt::format(
        "stage {} needs {} per GPU, within the {} usable, but PyTorch's caching allocator finds no room for a "
        "{} request even after releasing its cache (fragmentation)",
        i, FormatGiB(mem.peak_bytes), FormatGiB(res->usable_memory_bytes), FormatGiB(replay.oom_request_bytes)));
  }
}

/// The configuration as Simulate runs it: the model's sequence length where the configuration
/// has none, and the parameter gathers' width for its linear-layer format.
ParallelConfig RunConfig(const Model& m, const ParallelConfig& cfg_in, const Cluster& cl) {
  ParallelConfig c = cfg_in;
  if (c.seq_length <= 0) c.seq_length = m.seq_length;
  c.param_gather_bytes = ParamGatherBytesPerParam(c, LinearFormatOf(c, cl.gpu.arch));
  return c;
}

StageMemory StaticStageMemory(const CostModel& cm, const ParallelConfig& c,
                              const HardwareProfile& prof, int stage) {
  StageMemory mem;
  double params = 0;
  for (const auto& cc : cm.chunks[static_cast<std::size_t>(stage)]) params += cc.params_per_gpu;
  double experts = 0;
  for (const auto& cc : cm.chunks[static_cast<std::size_t>(stage)]) experts += cc.expert_params_per_gpu;
  const StateBytesPerParam bpp = BytesPerParam(c), bpe = BytesPerParam(c, c.expert_dp());
  mem.weights_bytes = (params - experts) * bpp.weights + experts * bpe.weights;
  // Quantized copies of the linear layers' weights, and delayed scaling's amax histories.
  double quantized = 0, scaling = 0;
  for (const auto& cc : cm.chunks[static_cast<std::size_t>(stage)]) {
    quantized += cc.quantized_params_per_gpu;
    scaling += cc.scaling_state_bytes;
  }
  // The copies are part of the weights; with --fp8-param-gather they replace the 16-bit weight.
  mem.quantized_weights_bytes = quantized * cm.quantized_copy_bytes_per_param + scaling;
  mem.weights_bytes += quantized * cm.quantized_weight_bytes_per_param + scaling;
  mem.grads_bytes = (params - experts) * bpp.grads + experts * bpe.grads;
  mem.optimizer_bytes = (params - experts) * bpp.optimizer + experts * bpe.optimizer;
  // ZeRO-3 holds gathered parameters of the running and the prefetched layer; pipeline stages
  // hold send and receive buffers for both directions.
  mem.comm_buffer_bytes = c.zero_stage >= 3 ? Zero3GatheredStaticBytes(cm, c, stage) : 0.0;
  // DeepSpeed keeps the tensors under its persistence threshold whole on every rank. Its ZeRO-3
  // of 2021 gathers tensor by tensor (Zero3GatheredPeakBytes); that of 2023-25 holds the most its
  // coordinator keeps gathered (cm.ds_zero3) and the contiguous reduce bucket (reduce_bucket_size
  // 16-bit elements, stage3.py's __ipg_bucket_flat_buffer).
  if (c.deepspeed2021_zero3() || c.deepspeed_zero3()) {
    double layers = 0;
    for (const auto& cc : cm.chunks[static_cast<std::size_t>(stage)]) layers += cc.layers;
    mem.comm_buffer_bytes =
        layers * cm.layer_tensors.persistent_elems * c.param_gather_bytes +
        (c.deepspeed_zero3()
             ? cm.ds_zero3.peak_live_elems * c.param_gather_bytes + c.ds_reduce_bucket_elems * ModelDtypeBytes(c.precision)
             : Zero3GatheredPeakBytes(cm.layer_tensors, c.param_gather_bytes, GradReduceBytesPerParam(c)));
  }
  mem.comm_buffer_bytes += 2.0 * cm.pp_message_bytes * (c.pp > 1 ? 2 : 0);
  mem.comm_buffer_bytes += DeepSpeedBucketBytes(c, stage);
  mem.framework_bytes = prof.framework_overhead_bytes;
  mem.peak_bytes = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes +
                   mem.comm_buffer_bytes + mem.framework_bytes;
  return mem;
}

Bounds LowerBounds(const Model& m, const ParallelConfig& cfg, const Cluster& cl,
                   const HardwareProfile& prof, LayerCostCache* cache) {
  ParallelConfig c = cfg;
  if (c.seq_length <= 0) c.seq_length = m.seq_length;
  Bounds bd;
  const CostModel cm = BuildCostModel(m, c, cl, prof, cache);
  const int v = static_cast<int>(c.schedule == Schedule::kInterleaved ? c.vp : 1);
  const PipelineSchedule& sched = SharedSchedule(c.schedule, static_cast<int>(c.pp),
                                                static_cast<int>(c.num_microbatches()), v,
                                                static_cast<int>(c.pipeline_flushes));
  const bool split = sched.split_weight;
  for (int i = 0; i < c.pp; ++i) {
    const auto& chunks = cm.chunks[static_cast<std::size_t>(i)];
    double work = 0, saved = 0, saved_peak = 0;
    for (const auto& it : sched.order[static_cast<std::size_t>(i)]) {
      const ChunkCost& cc = chunks[static_cast<std::size_t>(it.chunk)];
      switch (it.kind) {
        case ItemKind::kForward:
          work += cc.fwd_s;
          saved += cc.saved_bytes;
          saved_peak = std::max(saved_peak, saved);
          break;
        case ItemKind::kBackward:
          work += cc.bwd_input_s + cc.recompute_s + (split ? 0 : cc.bwd_weight_s);
          saved -= split ? cc.saved_bytes - cc.weight_saved_bytes : cc.saved_bytes;
          break;
        case ItemKind::kWeight:
          work += cc.bwd_weight_s;
          saved -= cc.weight_saved_bytes;
          break;
      }
    }
    // The compute stream does at least its own work; the engine's dynamic memory reaches at
    // least the saved activations after the forward with the most micro-batches in flight.
    bd.step_time_lower_s = std::max(bd.step_time_lower_s, work);
    const double mem = StaticStageMemory(cm, c, prof, i).peak_bytes + saved_peak;
    if (mem > bd.peak_memory_lower_bytes) {
      bd.peak_memory_lower_bytes = mem;
      bd.worst_stage = i;
    }
  }
  return bd;
}

namespace {

/// The closed forms' pipelines (SimulateOptions::ideal_pipeline, free_communication): chunk costs
/// rounded to whole nanoseconds, every chunk the mean chunk's (ideal) or its own with recompute
/// folded into its backward (free communication), no collective time inside them, free pipeline
/// sends.
void IdealizeChunks(const SimulateOptions& opts, CostModel* cm) {
  if (opts.ideal_pipeline) {
    double f = 0, bi = 0, bw = 0, n = 0;
    for (const auto& st : cm->chunks) {
      for (const auto& cc : st) {
        f += cc.fwd_s;
        bi += cc.bwd_input_s + cc.recompute_s;
        bw += cc.bwd_weight_s;
        n += 1;
      }
    }
    for (auto& st : cm->chunks) {
      for (auto& cc : st) {
        cc.fwd_s = std::round(f / n * 1e9) / 1e9;
        cc.bwd_input_s = std::round(bi / n * 1e9) / 1e9;
        cc.bwd_weight_s = std::round(bw / n * 1e9) / 1e9;
        cc.recompute_s = cc.fwd_tp_s = cc.bwd_tp_s = cc.recompute_tp_s = 0;
        cc.fwd_cp_s = cc.bwd_cp_s = cc.recompute_cp_s = 0;
        cc.fwd_ep_s = cc.bwd_ep_s = cc.recompute_ep_s = 0;
      }
    }
  } else if (opts.free_communication) {
    for (auto& st : cm->chunks) {
      for (auto& cc : st) {
        cc.fwd_s = std::round(cc.fwd_s * 1e9) / 1e9;
        cc.bwd_input_s = std::round((cc.bwd_input_s + cc.recompute_s) * 1e9) / 1e9;
        cc.bwd_weight_s = std::round(cc.bwd_weight_s * 1e9) / 1e9;
        cc.bwd_tp_s += cc.recompute_tp_s;
        cc.bwd_cp_s += cc.recompute_cp_s;
        cc.bwd_ep_s += cc.recompute_ep_s;
        cc.recompute_s = cc.recompute_tp_s = cc.recompute_cp_s = cc.recompute_ep_s = 0;
      }
    }
  }
  if (opts.ideal_pipeline || opts.free_communication) cm->pp_send_intra = cm->pp_send_inter = CollectiveCost{};
}

/// An op's FLOPs on the mean rank: the expert ops carry the busiest rank's load (they time the
/// step), imbalance x the mean, so their FLOPs are divided by the imbalance; every other op is the
/// same on each rank. An imbalance below 1 is a capacity factor under 1: every expert drops
/// tokens and every rank runs the capped load, so the expert ops' FLOPs stand as they are.
double MeanRankFlops(const CostModel& cm, const Op& o) {
  return o.flops / (o.routed_experts ? std::max(1.0, cm.moe.imbalance) : 1.0);
}

/// The model's dense and MoE transformer layers that rerun their forward: all of them without
/// partial recompute (the chunks mark them otherwise).
std::pair<std::int64_t, std::int64_t> RecomputedLayers(const Model& m, const CostModel& cm) {
  const std::int64_t moe_layers = m.MoeLayersIn(0, m.num_layers);
  std::int64_t dense = m.num_layers - moe_layers, moe = moe_layers;
  for (const std::vector<ChunkCost>& stage : cm.chunks) {
    for (const ChunkCost& cc : stage) {
      for (int l = 0; l < cc.layers; ++l) {
        if (!cc.Recomputed(l)) --(m.moe.enabled() && m.IsMoeLayer(cc.first_layer + l) ? moe : dense);
      }
    }
  }
  return {dense, moe};
}

/// Recomputed FLOPs per token in the model FLOPs' convention (full attention matrix, MLA's mean
/// head dimension), for HFU.
double RecomputeFlopsPerToken(const Model& m, const ParallelConfig& c, const CostModel& cm) {
  // One forward of the L transformer layers' attention core.
  const double attn_fwd = 4.0 * static_cast<double>(m.num_layers) * static_cast<double>(c.seq_length) *
                          static_cast<double>(m.num_attention_heads) * m.AttentionHeadDim();
  double recompute_per_token = 0;
  if (c.recompute == Recompute::kFull) {
    // One forward of every recomputed layer's GEMMs a token multiplies (an MoE layer's top-k experts).
    const ParameterCounts pc = m.Parameters();
    const auto [dense, moe] =
        c.PartialRecompute() ? RecomputedLayers(m, cm) : std::pair{pc.dense_layers, pc.moe_layers};
    const double attn = c.PartialRecompute() ? attn_fwd * static_cast<double>(dense + moe) / static_cast<double>(m.num_layers)
                                             : attn_fwd;
    recompute_per_token = 2.0 * static_cast<double>(dense * pc.per_layer.active_gemm_weights +
                                                    moe * pc.moe_layer.active_gemm_weights) +
                          attn;
  } else if (c.recompute == Recompute::kSelective) {
    // The attention core (full matrix, as model FLOPs count it) and the recomputed modules' GEMMs:
    // an op's FLOPs on one GPU times the tp ranks sharing its T = b*s/cp tokens, per token (the
    // experts' at the mean rank's load). The unfused core's two batched GEMMs are attn_fwd's.
    if ((c.recompute_modules & kRecomputeCoreAttn) || (c.TorchOpCheckpointing() && !c.flash_attention)) {
      recompute_per_token = attn_fwd;
    }
    auto gemm_recompute = [&](const std::vector<Op>& ops) {
      double f = 0;
      for (const Op& o : ops) {
        if (o.pass != Pass::kRecompute || o.kind != OpKind::kGemm) continue;
        if (o.name == "attn_scores_qk_recompute" || o.name == "attn_context_v_recompute") continue;
        f += MeanRankFlops(cm, o);
      }
      return f * static_cast<double>(c.tp) / cm.tokens_per_microbatch;
    };
    const std::int64_t moe_layers = m.MoeLayersIn(0, m.num_layers);
    recompute_per_token += static_cast<double>(m.num_layers - moe_layers) * gemm_recompute(cm.layer_ops) +
                           static_cast<double>(moe_layers) * gemm_recompute(cm.moe_layer_ops);
  }
  return recompute_per_token;
}

/// What the kernels execute in a step: every op's FLOPs (per GPU, already divided by tp) for
/// every micro-batch on every model-parallel rank and replica; pipeline stages split the layers.
/// The experts run at the mean rank's load: routing moves tokens between ranks, it adds none.
double ExecutedFlopsPerStep(const Model& m, const ParallelConfig& c, const CostModel& cm) {
  auto sum_flops = [&](const std::vector<Op>& ops) {
    double f = 0;
    for (const Op& o : ops) f += MeanRankFlops(cm, o);
    return f;
  };
  const std::int64_t pc_moe_layers = m.MoeLayersIn(0, m.num_layers);
  // Partial recompute: the layers that do not rerun, at their own op lists.
  const auto [dense_rc, moe_rc] = RecomputedLayers(m, cm);
  const double plain_flops = static_cast<double>(m.num_layers - pc_moe_layers - dense_rc) * sum_flops(cm.plain_layer_ops) +
                             static_cast<double>(pc_moe_layers - moe_rc) * sum_flops(cm.plain_moe_layer_ops);
  // Each MTP module: its projection and pass through the output head (mtp_ops) and one layer of
  // the model's kind (an MoE layer in an MoE model), on the last stage.
  const std::vector<Op>& mtp_layer = c.PartialRecompute() ? (m.moe.enabled() ? cm.plain_moe_layer_ops : cm.plain_layer_ops)
                                                         : (m.moe.enabled() ? cm.moe_layer_ops : cm.layer_ops);
  const double mtp_flops = static_cast<double>(m.mtp_num_layers) * (sum_flops(cm.mtp_ops) + sum_flops(mtp_layer));
  return static_cast<double>(c.dp_cp()) * static_cast<double>(c.tp) * static_cast<double>(c.num_microbatches()) *
         (static_cast<double>(dense_rc) * sum_flops(cm.layer_ops) + static_cast<double>(moe_rc) * sum_flops(cm.moe_layer_ops) +
          plain_flops + sum_flops(cm.embedding_ops) + sum_flops(cm.output_ops) + mtp_flops);
}

/// The step's throughput, model/hardware/executed FLOPs and utilizations, for a step of `step` s.
void SetThroughputAndFlops(const Model& m, const ParallelConfig& c, const Cluster& cl, std::int64_t gpus,
                           const CostModel& cm, double step, SimulationResult* res) {
  const double tokens = static_cast<double>(c.global_batch_size) * static_cast<double>(c.seq_length);
  res->tokens_per_s = tokens / step;
  res->samples_per_s = static_cast<double>(c.global_batch_size) / step;
  const FlopCounts fl = m.Flops(c.seq_length);
  res->model_flops_per_step = fl.per_token * tokens;
  if (m.moe.enabled()) {
    res->moe_load_imbalance = cm.moe.imbalance;
    res->moe_node_imbalance = cm.moe.node_imbalance;
  }
  res->model_flops_causal_per_step = fl.per_token_causal() * tokens;
  res->hardware_flops_per_step = res->model_flops_per_step + RecomputeFlopsPerToken(m, c, cm) * tokens;
  const double peak = cl.gpu.PeakFlops(MfuPeakPrecision(c.precision)) * static_cast<double>(gpus);
  res->mfu = res->model_flops_per_step / (step * peak);
  res->mfu_causal = res->model_flops_causal_per_step / (step * peak);
  res->hfu = res->hardware_flops_per_step / (step * peak);
  res->executed_flops_per_step = ExecutedFlopsPerStep(m, c, cm);
  res->executed_flops_utilization = res->executed_flops_per_step / (step * peak);
}

/// Stage i's time on replica 0's compute stream, split by what each task and each gap was: the
/// gaps go to the bubble, or to pipeline or data-parallel communication by the task that released
/// the next one; a pass's time splits by its chunk's share of collectives and recompute. After the
/// optimizer, the stage's own parameter all-gather (until `dp_last_end`), then waiting for the
/// others (bubble).
StageBreakdown StageTimeOf(const ParallelConfig& c, const EngineResult& er, const TaskGraph& g,
                           const std::vector<std::int32_t>& ids, const std::vector<ChunkCost>& chunks,
                           SimTime dp_last_end) {
  const auto& tasks = g.nodes();
  StageBreakdown bd;
  SimTime prev_end = 0;
  // Task ids of one stream are in program order, which is start order.
  for (std::int32_t id : ids) {
    const auto u = static_cast<std::size_t>(id);
    const TaskNode& t = tasks[u];
    // The gap is positive exactly when its integer nanoseconds are (no division otherwise).
    if (er.start[u] > prev_end) {
      const double gap = SimToSeconds(er.start[u] - prev_end);
      const std::int32_t gp = er.gating_pred[u];
      const TaskType gt = gp >= 0 ? tasks[static_cast<std::size_t>(gp)].type : TaskType::kForward;
      if (gp >= 0 && gt == TaskType::kPpSend) {
        const SimTime send_start = er.start[static_cast<std::size_t>(gp)];
        const SimTime split = std::clamp(send_start, prev_end, er.start[u]);
        bd.bubble_s += SimToSeconds(split - prev_end);
        bd.pp_comm_s += SimToSeconds(er.start[u] - split);
      } else if (gp >= 0 && (gt == TaskType::kDpReduce || gt == TaskType::kParamGather ||
                             gt == TaskType::kEmbeddingSync)) {
        bd.dp_comm_s += gap;
      } else {
        bd.bubble_s += gap;
      }
    }
    const double busy = SimToSeconds(er.end[u] - er.start[u]);
    const ChunkCost& cc = chunks[static_cast<std::size_t>(std::max(0, t.chunk))];
    if (t.type == TaskType::kOptimizer) {
      bd.optimizer_s += busy;
    } else if (t.type == TaskType::kParamGather || t.type == TaskType::kDpReduce) {
      bd.dp_comm_s += busy;  // ZeRO-3 collectives on the compute stream (Zero3Impl::kDeepSpeed2021)
    } else if (t.type == TaskType::kPpSend) {
      bd.pp_comm_s += busy;  // blocking sends (p2p_blocking) occupy the compute stream
    } else if (t.type == TaskType::kForward) {
      const double tp = cc.fwd_s > 0 ? busy * cc.fwd_tp_s / cc.fwd_s : 0;
      const double cpc = cc.fwd_s > 0 ? busy * cc.fwd_cp_s / cc.fwd_s : 0;
      const double epc = cc.fwd_s > 0 ? busy * cc.fwd_ep_s / cc.fwd_s : 0;
      bd.tp_comm_s += tp;
      bd.cp_comm_s += cpc;
      bd.ep_comm_s += epc;
      bd.compute_s += busy - tp - cpc - epc;
    } else {
      double work = 0, rc = 0, tp = 0, cpc = 0, epc = 0;
      if (t.type == TaskType::kWeight) {
        work = cc.bwd_weight_s;
      } else {
        const bool fused = c.schedule != Schedule::kZbH1;
        work = cc.bwd_input_s + (fused ? cc.bwd_weight_s : 0) + cc.recompute_s;
        rc = cc.recompute_s;
        tp = cc.bwd_tp_s;
        cpc = cc.bwd_cp_s;
        epc = cc.bwd_ep_s;
      }
      const double scale = work > 0 ? busy / work : 0;
      bd.recompute_s += rc * scale;
      bd.tp_comm_s += tp * scale;
      bd.cp_comm_s += cpc * scale;
      bd.ep_comm_s += epc * scale;
      bd.compute_s += busy - (rc + tp + cpc + epc) * scale;
    }
    prev_end = er.end[u];
  }
  const SimTime dp_end = std::min(dp_last_end, er.makespan);
  if (dp_end > prev_end) {
    bd.dp_comm_s += SimToSeconds(dp_end - prev_end);
    prev_end = dp_end;
  }
  bd.bubble_s += SimToSeconds(er.makespan - prev_end);
  return bd;
}

/// Stage i's memory: static memory, the engine's activation peak, and the micro-batches in flight
/// (forward done, backward not yet) at the peak of the schedule with the saved activations they
/// hold; reserved = allocated until the allocator's replay (Simulate) says otherwise.
StageMemory StageMemoryOf(const CostModel& cm, const ParallelConfig& c, const HardwareProfile& prof,
                          const PipelineSchedule& sched, const EngineResult& er, bool full_rank, int i) {
  StageMemory mem = StaticStageMemory(cm, c, prof, i);
  mem.activations_bytes = er.peak_dynamic_bytes[static_cast<std::size_t>(i * (full_rank ? c.dp : 1))];
  mem.peak_bytes = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes +
                   mem.activations_bytes + mem.comm_buffer_bytes + mem.framework_bytes;
  const auto& chunks = cm.chunks[static_cast<std::size_t>(i)];
  int inflight = 0, peak_inflight = 0;
  double saved = 0;
  const bool split_bw = sched.split_weight;
  for (const auto& it : sched.order[static_cast<std::size_t>(i)]) {
    const ChunkCost& cc = chunks[static_cast<std::size_t>(it.chunk)];
    if (it.kind == ItemKind::kForward) {
      peak_inflight = std::max(peak_inflight, ++inflight);
      saved += cc.saved_bytes;
      mem.saved_activations_bytes = std::max(mem.saved_activations_bytes, saved);
    } else if (it.kind == ItemKind::kBackward) {
      --inflight;
      saved -= split_bw ? cc.saved_bytes - cc.weight_saved_bytes : cc.saved_bytes;
    } else {
      saved -= cc.weight_saved_bytes;
    }
  }
  mem.peak_inflight_microbatches = peak_inflight;
  mem.reserved_bytes = mem.reserved_unlimited_bytes = mem.peak_bytes;
  return mem;
}

/// The headline breakdown and bubble: the mean over stages.
void AverageStages(int pp, SimulationResult* res) {
  const double np = static_cast<double>(pp);
  for (const auto& s : res->stages) {
    res->breakdown.compute_s += s.time.compute_s / np;
    res->breakdown.recompute_s += s.time.recompute_s / np;
    res->breakdown.tp_comm_s += s.time.tp_comm_s / np;
    res->breakdown.cp_comm_s += s.time.cp_comm_s / np;
    res->breakdown.ep_comm_s += s.time.ep_comm_s / np;
    res->breakdown.pp_comm_s += s.time.pp_comm_s / np;
    res->breakdown.dp_comm_s += s.time.dp_comm_s / np;
    res->breakdown.bubble_s += s.time.bubble_s / np;
    res->breakdown.optimizer_s += s.time.optimizer_s / np;
    res->bubble_fraction += s.bubble_fraction / np;
  }
}

/// The critical path: from the last task back along the dependencies that released each task,
/// its tasks by (stage, kind) and the largest shares as report lines.
void AddCriticalPath(const EngineResult& er, const TaskGraph& g, int pp, SimulationResult* res) {
  const auto& tasks = g.nodes();
  // The first task ending at the step's end (the makespan is the latest end).
  const auto last = std::find(er.end.begin(), er.end.end(), er.makespan);
  std::int32_t cur = last == er.end.end() ? -1 : static_cast<std::int32_t>(last - er.end.begin());
  // (stage, type) -> tasks, seconds
  constexpr int kTypes = static_cast<int>(TaskType::kJoin) + 1;
  std::vector<std::pair<int, double>> agg(static_cast<std::size_t>(pp * kTypes), {0, 0.0});
  int hops = 0;
  while (cur >= 0) {
    const auto u = static_cast<std::size_t>(cur);
    const TaskNode& t = tasks[u];
    auto& a = agg[static_cast<std::size_t>(res->device_stage[static_cast<std::size_t>(t.device)] * kTypes +
                                           static_cast<int>(t.type))];
    a.first += 1;
    a.second += SimToSeconds(er.end[u] - er.start[u]);
    cur = er.gating_pred[u];
    ++hops;
  }
  for (std::size_t k = 0; k < agg.size(); ++k) {
    if (agg[k].first == 0) continue;
    res->critical_shares.push_back({static_cast<int>(k) / kTypes, ToString(static_cast<TaskType>(static_cast<int>(k) % kTypes)),
                                    agg[k].first, agg[k].second});
  }
  std::sort(res->critical_shares.begin(), res->critical_shares.end(),
            [](const auto& x, const auto& y) { return x.seconds > y.seconds; });
  res->critical_path_tasks = hops;
  res->critical_path.push_back(fmt::format(
      "{} tasks on the critical path (units: F/B/W are chunk passes, split per layer or gradient bucket "
      "where the schedule needs it); the largest shares:", hops));
  for (std::size_t i = 0; i < res->critical_shares.size() && i < 6; ++i) {
    const auto& cs = res->critical_shares[i];
    res->critical_path.push_back(fmt::format("stage {:>3}: {:>5} x {:<26} {}", cs.stage, cs.tasks, cs.kind,
                                             FormatSeconds(cs.seconds)));
  }
}

}  // namespace

SimulationResult Simulate(const Model& m, const ParallelConfig& cfg_in, const Cluster& cl,
                          std::int64_t gpus, const HardwareProfile& prof,
                          const SimulateOptions& opts) {
  SimulationResult res;
  const ParallelConfig c = RunConfig(m, cfg_in, cl);
  res.usable_memory_bytes = cl.gpu.memory_bytes;
  res.reasons = InfeasibilityReasons(m, c, gpus, cl);
  if (gpus > cl.gpus_per_node && !(prof.NicShareGBps() > 0)) {
    // The inter-node link's rate comes from the profile: without one, transfers would never end.
    res.reasons.push_back(fmt::format("{} GPUs span more than one node of {}, but the profile has no inter-node "
                                      "network (nics_per_node {}, nic_effective_GBps {:g})",
                                      gpus, cl.gpus_per_node, prof.nics_per_node, prof.nic_effective_GBps));
  }
  if (!res.reasons.empty()) {
    res.feasible = false;
    res.fits = false;
    return res;
  }
  CostModel cm = BuildCostModel(m, c, cl, prof);
  if (opts.straggler_stage >= 0 || opts.straggler_slowdown != 1 || opts.straggler_nic_slowdown != 1) {
    SlowStageCompute(&cm, opts.straggler_stage, opts.straggler_slowdown);
    if (!(opts.straggler_nic_slowdown >= 1) || !std::isfinite(opts.straggler_nic_slowdown)) {
      throw std::invalid_argument(fmt::format("straggler NIC slowdown {} (expected >= 1)", opts.straggler_nic_slowdown));
    }
  }
  IdealizeChunks(opts, &cm);
  res.num_microbatches = c.num_microbatches();
  res.ds_zero3 = cm.ds_zero3;
  // The graph's structure is reused from the last simulation of the same shape on this thread
  // (SkeletonFor); the timeline lives in thread-local scratch unless the caller keeps it (the
  // planner simulates thousands of configurations; fresh pages cost more than the run).
  thread_local EngineResult scratch_timeline;
  EngineResult& er = opts.keep_graph ? res.timeline : scratch_timeline;
  Builder b(m, c, cl, prof, cm, opts);
  const Skeleton& sk = SkeletonFor(b, opts.reuse_graph, &res.graph_reused);
  const TaskGraph& g = sk.graph;
  res.device_stage = sk.device_stage;
  try {
    g.Run(&er, opts.skip_periods);
  } catch (const SimTimeOverflow&) {
    // Rates so small (a profile's peak or efficiency near zero) that the step would last longer
    // than the engine's time range: a result with a reason, never a wrapped-around number.
    res.feasible = false;
    res.fits = false;
    res.reasons.push_back(fmt::format(
        "the simulated step would last more than {:.3g} years (past the engine's {:.0e} ns time range): the "
        "profile's or GPU's rates (peak {:g} TFLOP/s, HBM {:g} GB/s) are too small for this work",
        SimToSeconds(kMaxSimTime) / (365.25 * 86400), static_cast<double>(kMaxSimTime),
        prof.gemm_peak_tflops, prof.hbm_GBps));
    if (opts.keep_graph) res.graph = g;  // without a timeline: the run did not finish
    return res;
  }
  const double step = SimToSeconds(er.makespan);
  res.step_time_s = step;
  res.num_tasks = g.num_tasks();
  res.num_events = er.events;
  res.copied_tasks = er.copied_tasks;
  SetThroughputAndFlops(m, c, cl, gpus, cm, step, &res);

  // Per-stage accounting on replica 0.
  const PipelineSchedule& sched = sk.sched;
  res.allocator_replayed = opts.allocator_replay;
  for (int i = 0; i < c.pp; ++i) {
    StageResult sr;
    sr.stage = i;
    const auto& chunks = cm.chunks[static_cast<std::size_t>(i)];
    for (const auto& cc : chunks) {
      sr.layers += cc.layers;
      for (int l = 0; l < cc.layers; ++l) {
        sr.recomputed_layers += c.recompute == Recompute::kFull && cc.Recomputed(l) ? 1 : 0;
      }
    }
    SimTime dp_last_end = 0;
    for (std::int32_t id : sk.dp_tasks[static_cast<std::size_t>(i)]) {
      dp_last_end = std::max(dp_last_end, er.end[static_cast<std::size_t>(id)]);
    }
    sr.time = StageTimeOf(c, er, g, sk.compute_tasks[static_cast<std::size_t>(i)], chunks, dp_last_end);
    sr.bubble_fraction = step > 0 ? sr.time.bubble_s / step : 0;
    sr.memory = StageMemoryOf(cm, c, prof, sched, er, opts.full_rank, i);
    AllocatorReplay replay;
    if (opts.allocator_replay) {
      StageAllocatorTrace* trace = nullptr;
      if (opts.allocator_traces) trace = &opts.allocator_traces->emplace_back();
      replay = ReplayStageMemory(cm, c, i, sr.memory, res.usable_memory_bytes, trace);
      RecordReplay(replay, &sr.memory);
    }
    JudgeStageMemory(i, replay, &sr, &res);
    res.stages.push_back(sr);
  }
  // "At risk" qualifies a configuration that fits; one that does not fit is not also at risk.
  if (!res.fits) res.memory_at_risk = false;
  AverageStages(static_cast<int>(c.pp), &res);
  AddCriticalPath(er, g, static_cast<int>(c.pp), &res);
  if (opts.keep_graph) res.graph = g;
  return res;
}

void ReplayAllocator(const Model& m, const ParallelConfig& cfg_in, const Cluster& cl, const HardwareProfile& prof,
                     SimulationResult* res) {
  if (!res->feasible || res->stages.empty() || res->allocator_replayed) return;
  res->allocator_replayed = true;
  const ParallelConfig c = RunConfig(m, cfg_in, cl);
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  res->fits = true;
  res->memory_at_risk = false;
  res->reasons.clear();  // a feasible result's reasons are its memory's, judged again here
  res->peak_memory_bytes = res->peak_reserved_bytes = res->peak_reserved_unlimited_bytes = 0;
  for (auto& sr : res->stages) {
    const AllocatorReplay replay = ReplayStageMemory(cm, c, sr.stage, sr.memory, res->usable_memory_bytes, nullptr);
    RecordReplay(replay, &sr.memory);
    JudgeStageMemory(sr.stage, replay, &sr, res);
  }
  if (!res->fits) res->memory_at_risk = false;
}

namespace {

/// A low-precision configuration's linear-layer format and FP8 options (`config.low_precision`).
Json LowPrecisionJson(const ParallelConfig& c, const std::string& arch) {
  const LinearFormat lf = LinearFormatOf(c, arch);
  Json lp = {{"gemm_precision", ToString(lf.gemm)},
             {"bytes_per_element", lf.element_bytes},
             {"scale_bytes_per_element", lf.scale_bytes_per_element},
             {"second_copy", lf.second_copy},
             {"fp8_param_gather", c.fp8_param_gather},
             {"bf16_layers_start", c.bf16_layers_start},
             {"bf16_layers_end", c.bf16_layers_end}};
  if (c.precision == Precision::kFp8 || c.precision == Precision::kMxfp8) lp["fp8_format"] = c.Fp8FormatName();
  if (c.precision == Precision::kFp8) {
    lp["fp8_recipe"] = ToString(c.fp8_recipe);
    if (c.fp8_recipe == Fp8Recipe::kDelayed) lp["fp8_amax_history_len"] = c.fp8_amax_history_len;
  }
  return lp;
}

/// The `config` object of the `simulate --json` document: the configuration as run, with the
/// per-parameter state and gradient-reduction bytes it implies.
Json ConfigJson(const ParallelConfig& c, const Model& m, const Cluster& cl) {
  const bool ds = c.deepspeed_zero3(), ds3 = c.deepspeed2021_zero3() || ds;
  Json j = {{"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp}, {"cp", c.cp}, {"vp", c.vp},
            {"micro_batch_size", c.micro_batch_size}, {"global_batch_size", c.global_batch_size},
            {"seq_length", c.seq_length > 0 ? c.seq_length : m.seq_length},
            {"sequence_parallel", c.sequence_parallel}, {"tp_comm_overlap", c.tp_comm_overlap},
            {"cross_entropy", ToString(c.cross_entropy)},
            {"recompute", ToString(c.recompute)},
            {"recompute_block_layers", c.PartialRecompute() && c.recompute_block_layers >= 0 ? Json(c.recompute_block_layers) : Json()},
            {"recompute_layer_interval", c.PartialRecompute() && c.recompute_layer_interval > 0 ? Json(c.recompute_layer_interval) : Json()},
            {"recompute_modules", c.recompute == Recompute::kSelective ? Json(RecomputeModulesName(c.recompute_modules)) : Json()},
            {"offload_modules", c.offload_modules != 0 ? Json(OffloadModulesName(c.offload_modules)) : Json()},
            {"moe_a2a_overlap", c.moe_a2a_overlap},
            {"zero_stage", c.zero_stage}, {"dp_shard", c.zero_stage >= 1 ? Json(c.shard_dp()) : Json()},
            {"zero3_impl", c.zero_stage >= 3 ? Json(ToString(c.zero3_impl)) : Json()},
            {"contiguous_gradients", c.deepspeed_zero12() ? Json(c.ds_contiguous_gradients) : Json()},
            {"use_multi_rank_bucket_allreduce",
             c.deepspeed_zero12() && c.ds_contiguous_gradients ? Json(c.ds_multi_rank_bucket_allreduce) : Json()},
            {"reduce_bucket_size", c.deepspeed_zero12() || ds3 ? Json(c.ds_reduce_bucket_elems) : Json()},
            {"schedule", ToString(c.schedule)},
            {"stage3_max_live_parameters", ds3 ? Json(c.ds_max_live_elems) : Json()},
            {"stage3_param_persistence_threshold", ds3 ? Json(c.ds_persistence_threshold_elems) : Json()},
            {"stage3_prefetch_bucket_size", ds ? Json(c.ds_prefetch_bucket_elems) : Json()},
            {"stage3_max_reuse_distance", ds ? Json(c.ds_max_reuse_distance_elems) : Json()},
            {"precision", ToString(c.precision)}, {"flash_attention", c.flash_attention},
            {"overlap_grad_reduce", c.overlap_grad_reduce},
            {"param_gather_bytes_per_param", ParamGatherBytesPerParam(c, LinearFormatOf(c, cl.gpu.arch))},
            {"async_tensor_model_parallel_allreduce", c.async_tp_grad_reduce},
            {"overlap_param_gather", c.overlap_param_gather},
            {"optimizer_impl", ToString(c.optimizer_impl)}, {"p2p_blocking", c.p2p_blocking},
            {"zero3_limit_all_gathers", c.zero_stage >= 3 ? Json(c.zero3_limit_all_gathers) : Json()},
            {"scatter_gather", c.scatter_gather}, {"embedding_slots", c.embedding_slots}};
  if (m.moe.enabled()) {
    j["ep"] = c.ep;
    j["etp"] = c.expert_tp();
    j["expert_dp"] = c.expert_dp();
    j["moe_token_dispatcher_type"] = ToString(c.moe_dispatcher);
    j["moe_expert_capacity_factor"] = c.moe_capacity_factor > 0 ? Json(c.moe_capacity_factor) : Json(nullptr);
    j["moe_load_imbalance"] = c.moe_load_imbalance > 0 ? Json(c.moe_load_imbalance) : Json(nullptr);
    j["moe_router_force_load_balancing"] = c.moe_force_load_balancing;
  }
  if (c.cp > 1) {
    j["cp_comm_type"] = ToString(c.cp_comm);
    if (c.cp_comm == CpComm::kA2AP2P) j["cp_a2a_ranks"] = CpA2aGroup(c, cl.gpus_per_node);
  }
  j["pipeline_layout_even"] = c.even_chunks;
  j["pipeline_flushes"] = c.pipeline_flushes;
  j["flush_grad_reduce"] = c.pipeline_flushes > 1 ? Json(c.flush_grad_reduce ? "every" : "last") : Json(nullptr);
  j["decoder_first_pipeline_num_layers"] =
      c.first_stage_layers >= 0 ? Json(c.first_stage_layers) : Json(nullptr);
  j["decoder_last_pipeline_num_layers"] =
      c.last_stage_layers >= 0 ? Json(c.last_stage_layers) : Json(nullptr);
  if (c.optimizer_impl == OptimizerImpl::kMegatron || c.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    j["fp32_main_grads"] = c.fp32_main_grads;
  }
  j["mfu_peak_precision"] = ToString(MfuPeakPrecision(c.precision));
  if (IsLowPrecision(c.precision)) j["low_precision"] = LowPrecisionJson(c, cl.gpu.arch);
  if (c.dp < 1) {
    // tp*pp does not divide the GPU count (a reason below): no data-parallel size, so no
    // per-parameter state or gradient-reduction bytes either.
    j["dp"] = nullptr;
    if (c.global_batch_size < 1) j["global_batch_size"] = nullptr;
  } else {
    const StateBytesPerParam b = BytesPerParam(c);
    j["state_bytes_per_param"] = {{"weights", b.weights}, {"grads", b.grads}, {"optimizer", b.optimizer}};
    j["grad_reduce_bytes_per_param"] = GradReduceBytesPerParam(c);
    j["grad_reduce"] = GradReduceIsAllReduce(c) ? "all_reduce" : "reduce_scatter";
  }
  return j;
}

/// One stage's time breakdown, seconds.
Json BreakdownJson(const StageBreakdown& b) {
  return Json{{"compute", b.compute_s},     {"recompute", b.recompute_s},
              {"tp_comm", b.tp_comm_s},     {"cp_comm", b.cp_comm_s},     {"ep_comm", b.ep_comm_s},
              {"pp_comm", b.pp_comm_s},
              {"dp_comm", b.dp_comm_s},     {"bubble", b.bubble_s},
              {"optimizer", b.optimizer_s}};
}

/// Each pipeline stage's layers, memory and time (`stages`).
Json StagesJson(const SimulationResult& r, const Model& m, const ParallelConfig& c) {
  Json st = Json::array();
  // Each stage's model chunks (k*pp + stage, k < vp) and their transformer layers, in order.
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  auto chunk_layers = [&](int stage) {
    Json a = Json::array();
    if (!layout.error.empty() || c.pp < 1) return a;
    for (std::size_t k = static_cast<std::size_t>(stage); k < layout.chunk_layers.size(); k += static_cast<std::size_t>(c.pp)) {
      a.push_back(layout.chunk_layers[k]);
    }
    return a;
  };
  for (const auto& s : r.stages) {
    st.push_back({{"stage", s.stage},
                  {"layers", s.layers},
                  {"recomputed_layers", s.recomputed_layers},
                  {"chunk_layers", chunk_layers(s.stage)},
                  {"peak_memory_bytes", s.memory.peak_bytes},
                  {"reserved_memory_bytes", s.memory.reserved_bytes},
                  {"reserved_unlimited_memory_bytes", s.memory.reserved_unlimited_bytes},
                  {"allocator_retries", s.memory.allocator_retries},
                  {"allocator_replayed_microbatches", s.memory.allocator_replayed_microbatches},
                  {"fits", s.fits},
                  {"memory_at_risk", s.at_risk},
                  {"bubble_fraction", s.bubble_fraction},
                  {"breakdown_s", BreakdownJson(s.time)},
                  {"memory_bytes", {{"weights", s.memory.weights_bytes},
                                    {"grads", s.memory.grads_bytes},
                                    {"optimizer", s.memory.optimizer_bytes},
                                    {"activations", s.memory.activations_bytes},
                                    {"comm_buffers", s.memory.comm_buffer_bytes},
                                    {"framework", s.memory.framework_bytes}}},
                  {"quantized_weights_bytes", s.memory.quantized_weights_bytes},
                  {"peak_inflight_microbatches", s.memory.peak_inflight_microbatches}});
  }
  return st;
}

/// DeepSpeed ZeRO-3's gather plan (`deepspeed_zero3`).
Json DeepSpeedZero3Json(const DeepSpeedZero3Plan& d, const ParallelConfig& c, const Cluster& cl) {
  return {{"peak_gathered_elements", d.peak_live_elems},
          {"peak_gathered_bytes", d.peak_live_elems * ParamGatherBytesPerParam(c, LinearFormatOf(c, cl.gpu.arch))},
          {"reduce_bucket_bytes", c.ds_reduce_bucket_elems * ModelDtypeBytes(c.precision)},
          {"forward_lead_layers", d.forward_lead_layers},
          {"backward_lead_layers", d.backward_lead_layers},
          {"simulated_lead_layers", {{"forward", d.SimulatedLeadLayers(0)},
                                     {"backward", d.SimulatedLeadLayers(1)}}},
          {"kept_layers", d.kept_layers},
          {"gathered_elements", {{"forward", d.gathered_elems[0]}, {"backward", d.gathered_elems[1]}}},
          {"on_demand_elements", {{"forward", d.on_demand_elems[0]}, {"backward", d.on_demand_elems[1]}}}};
}

}  // namespace

Json ResultToJson(const SimulationResult& r, const Model& m, const ParallelConfig& c,
                  const Cluster& cl, std::int64_t gpus) {
  Json j;
  j["model"] = m.name;
  j["cluster"] = cl.name;
  j["gpu"] = cl.gpu.name;
  j["gpus"] = gpus;
  j["config"] = ConfigJson(c, m, cl);
  if (m.moe.enabled()) {
    // What the step ran at (the config's moe_load_imbalance when given, else the default) and why.
    j["moe_load_imbalance_applied"] = r.moe_load_imbalance;
    j["moe_load_imbalance_source"] = MoeImbalanceSource(c, m.moe);
    j["moe_node_imbalance_applied"] = r.moe_node_imbalance;
  }
  j["feasible"] = r.feasible;
  // null without a whole count: no dp, or gbs no multiple of mbs*dp (num_microbatches() is 0).
  const std::int64_t nmb = c.num_microbatches();
  j["num_microbatches"] = nmb > 0 ? Json(nmb) : Json(nullptr);
  j["fits"] = r.fits;
  j["memory_at_risk"] = r.memory_at_risk;
  if (!r.reasons.empty()) {
    j["reasons"] = r.reasons;
    j["reason"] = Join(r.reasons, "; ");
  }
  if (!r.feasible) return j;
  j["step_time_s"] = r.step_time_s;
  j["tokens_per_s"] = r.tokens_per_s;
  j["samples_per_s"] = r.samples_per_s;
  j["mfu"] = r.mfu;
  j["mfu_causal"] = r.mfu_causal;
  j["hfu"] = r.hfu;
  j["flop_convention"] = "mfu: model FLOPs = (6*N_gemm + 12*L*s*a*d) per token (PaLM / SC21: full attention matrix, no "
                         "recompute); mfu_causal: the attention term halved (6*N_gemm + 6*L*s*a*d, causal, as Megatron-LM "
                         "counts it); HFU adds recomputed forward FLOPs to mfu's; peak = dense bf16/fp16 peak x GPUs";
  j["model_flops_per_step"] = r.model_flops_per_step;
  j["model_flops_causal_per_step"] = r.model_flops_causal_per_step;
  j["hardware_flops_per_step"] = r.hardware_flops_per_step;
  j["executed_flops_per_step"] = r.executed_flops_per_step;
  j["executed_flops_utilization"] = r.executed_flops_utilization;
  j["bubble_fraction"] = r.bubble_fraction;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_reserved_memory_bytes"] = r.peak_reserved_bytes;
  j["peak_reserved_unlimited_memory_bytes"] = r.peak_reserved_unlimited_bytes;
  j["usable_memory_bytes"] = r.usable_memory_bytes;
  j["breakdown_s"] = BreakdownJson(r.breakdown);
  j["stages"] = StagesJson(r, m, c);
  if (c.deepspeed_zero3() && r.feasible) j["deepspeed_zero3"] = DeepSpeedZero3Json(r.ds_zero3, c, cl);
  Json cp = Json::array();
  for (const auto& cs : r.critical_shares) {
    cp.push_back({{"stage", cs.stage}, {"kind", cs.kind}, {"tasks", cs.tasks}, {"seconds", cs.seconds}});
  }
  j["critical_path"] = {{"tasks", r.critical_path_tasks}, {"shares", cp}};
  j["simulated_tasks"] = r.num_tasks;
  return j;
}

std::string ChromeTrace(const SimulationResult& r) {
  Json events = Json::array();
  const auto& tasks = r.graph.nodes();
  std::map<int, bool> seen_dev;
  std::map<std::pair<int, int>, bool> seen_thread;
  for (std::size_t id = 0; id < tasks.size(); ++id) {
    const TaskNode& t = tasks[id];
    if (t.type == TaskType::kJoin) continue;
    const int pid = t.device;
    if (!seen_dev[pid]) {
      seen_dev[pid] = true;
      events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                        {"args", {{"name", fmt::format("stage {} (device {})", r.device_stage[static_cast<std::size_t>(pid)], pid)}}}});
    }
    if (!seen_thread[{pid, t.stream}]) {
      seen_thread[{pid, t.stream}] = true;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t.stream},
                        {"args", {{"name", StreamName(t.stream)}}}});
    }
    std::string name = ToString(t.type);
    if (t.microbatch >= 0) name += fmt::format(" mb{}", t.microbatch);
    if (t.chunk >= 0) name += fmt::format(" c{}", t.chunk);
    if (t.unit > 0) name += fmt::format(" .{}", t.unit);
    const double ts = static_cast<double>(r.timeline.start[id]) / 1000.0;
    const double dur = static_cast<double>(r.timeline.end[id] - r.timeline.start[id]) / 1000.0;
    events.push_back({{"name", name}, {"cat", ToString(t.type)}, {"ph", "X"}, {"ts", ts},
                      {"dur", dur}, {"pid", pid}, {"tid", t.stream}});
  }
  Json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace shardcast
