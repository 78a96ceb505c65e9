#include "simulator/program.h"

#include <algorithm>
#include <map>
#include <cmath>

namespace shardcast {

const char* ToString(ProgKind k) {
  switch (k) {
    case ProgKind::kCompute: return "compute";
    case ProgKind::kTpCollective: return "tp_collective";
    case ProgKind::kSend: return "pp_send";
    case ProgKind::kRecv: return "pp_recv";
    case ProgKind::kAlloc: return "alloc";
    case ProgKind::kFree: return "free";
    case ProgKind::kDpCollective: return "dp_collective";
    case ProgKind::kDpWait: return "dp_wait";
    case ProgKind::kOptimizer: return "optimizer";
    case ProgKind::kEpCollective: return "ep_collective";
    case ProgKind::kEtpCollective: return "etp_collective";
    case ProgKind::kEmbeddingCollective: return "embedding_collective";
  }
  return "?";
}

namespace {

/// An op of a pass's own work: compute, or a collective inside the layers (tensor-, expert- or
/// expert-tensor-parallel).
bool InPass(ProgKind k) {
  return k == ProgKind::kCompute || k == ProgKind::kTpCollective || k == ProgKind::kEpCollective ||
         k == ProgKind::kEtpCollective;
}

/// BuildRankProgram's steps for one stage: the schedule's items in order, then the data-parallel
/// gradient reduction, the optimizer and ZeRO-1/2's parameter all-gather.
class RankProgramBuilder {
 public:
  RankProgramBuilder(const Model& model, const ParallelConfig& cfg, const CostModel& cost,
                     const PipelineSchedule& schedule, const HardwareProfile& profile, int stage_index)
      : m_(model), c_(cfg), cm_(cost), sched_(schedule), prof_(profile), stage_(stage_index),
        chunks_(cm_.chunks[static_cast<std::size_t>(stage_index)]) {
    rp_.stage = stage_;
  }

  RankProgram Build() && {
    // Layer ops are listed forward then backward in cost-model order (backward already reversed).
    for (const ScheduleItem& it : sched_.order[static_cast<std::size_t>(stage_)]) {
      if (it.kind == ItemKind::kForward) {
        Forward(it);
      } else if (it.kind == ItemKind::kBackward) {
        Backward(it);
      } else {
        Weight(it);
      }
    }
    AddGradientReduction();
    AddOptimizer();
    return std::move(rp_);
  }

 private:
  /// A pipeline message's tag: micro-batch, the sender's chunk and the direction (0 forward).
  int Tag(int mb, int chunk_on_sender, int dir) const { return (mb * v_ + chunk_on_sender) * 2 + dir; }
  /// Appends `ops`' ops of `pass` (not the overlapped ones) for schedule item `it`.
  void AddOps(const std::vector<Op>& ops, Pass pass, const ScheduleItem& it) {
    for (const auto& o : ops) {
      if (o.pass != pass || o.overlapped) continue;
      ProgOp x;
      x.kind = o.kind != OpKind::kCollective ? ProgKind::kCompute
               : !o.expert_parallel           ? ProgKind::kTpCollective
               : OnExpertTensorParallelGroup(o) ? ProgKind::kEtpCollective
                                                : ProgKind::kEpCollective;
      x.op = o;
      x.item = it.kind;
      x.microbatch = it.microbatch;
      x.chunk = it.chunk;
      x.bytes = o.bytes;
      rp_.predicted_busy_s += o.duration_s;
      rp_.ops.push_back(x);
    }
  }
  /// A marker op of `kind` for item `it` (pipeline send/receive, activation alloc/free).
  ProgOp Marker(const ScheduleItem& it, ProgKind kind, double bytes) const {
    ProgOp x;
    x.item = it.kind;
    x.microbatch = it.microbatch;
    x.chunk = it.chunk;
    x.kind = kind;
    x.bytes = bytes;
    return x;
  }
  /// The op list of the model's transformer layer `l` of chunk `cc` (MoE or dense, kept in bf16
  /// or not, rerun or not under partial recompute), as CostModelBuilder::ChunkOf counts it.
  const std::vector<Op>& LayerOps(const ChunkCost& cc, std::int64_t l) const {
    const bool moe = m_.moe.enabled() && m_.IsMoeLayer(l);
    if (!cc.Recomputed(static_cast<int>(l - cc.first_layer))) return moe ? cm_.plain_moe_layer_ops : cm_.plain_layer_ops;
    const bool bf16 = l < c_.bf16_layers_start || l >= m_.num_layers - c_.bf16_layers_end;
    if (bf16) return moe ? cm_.moe_bf16_layer_ops : cm_.bf16_layer_ops;
    return moe ? cm_.moe_layer_ops : cm_.layer_ops;
  }
  /// The transformer layer of each multi-token-prediction module (MoE when the model has MoE).
  /// (Partial recompute leaves it alone: the layer without recompute.)
  const std::vector<Op>& MtpLayerOps() const {
    if (c_.PartialRecompute()) return m_.moe.enabled() ? cm_.plain_moe_layer_ops : cm_.plain_layer_ops;
    return m_.moe.enabled() ? cm_.moe_layer_ops : cm_.layer_ops;
  }
  /// A backward item's gradient passes of `ops`: input gradient and, unless ZB-H1 defers it,
  /// weight gradient.
  void AddGradientOps(const std::vector<Op>& ops, const ScheduleItem& it) {
    AddOps(ops, Pass::kBackwardInput, it);
    if (!sched_.split_weight) AddOps(ops, Pass::kBackwardWeight, it);
  }
  /// A transformer layer's backward: its recomputed forward, then its gradients.
  void AddLayerBackward(const std::vector<Op>& ops, const ScheduleItem& it) {
    AddOps(ops, Pass::kRecompute, it);
    AddGradientOps(ops, it);
  }
  /// Whether the step reduces gradients across ranks: data parallelism, or routed experts that
  /// several ranks of a stage hold whole (expert-data-parallel size above 1), as the simulator has it.
  bool ReducesGradients() const { return c_.dp_cp() > 1 || (m_.moe.enabled() && c_.expert_dp() > 1); }
  bool FirstChunk(const ScheduleItem& it) const { return it.chunk * p_ + stage_ == 0; }
  bool LastChunk(const ScheduleItem& it) const { return it.chunk * p_ + stage_ == p_ * v_ - 1; }
  void Forward(const ScheduleItem& it);
  void Backward(const ScheduleItem& it);
  void Weight(const ScheduleItem& it);
  std::vector<ProgOp> Buckets(int chunk, bool async);
  void AddGradientReduction();
  void AddOptimizer();

  const Model& m_;
  const ParallelConfig& c_;
  const CostModel& cm_;
  const PipelineSchedule& sched_;
  const HardwareProfile& prof_;
  const int stage_;
  const std::vector<ChunkCost>& chunks_;
  const int p_ = sched_.stages, v_ = sched_.chunks;
  RankProgram rp_;
};

void RankProgramBuilder::Forward(const ScheduleItem& it) {
  const ChunkCost& cc = chunks_[static_cast<std::size_t>(it.chunk)];
  if (!FirstChunk(it)) {
    ProgOp r = Marker(it, ProgKind::kRecv, cm_.pp_message_bytes);
    r.peer_stage = (stage_ + p_ - 1) % p_;
    r.tag = Tag(it.microbatch, stage_ == 0 ? it.chunk - 1 : it.chunk, 0);
    rp_.ops.push_back(r);
    AddOps(cm_.pp_recv_ops, Pass::kForward, it);  // scatter/gather: re-assemble over TP
  }
  if (cc.has_embedding) AddOps(cm_.embedding_ops, Pass::kForward, it);
  for (int l = cc.first_layer; l < cc.first_layer + cc.layers; ++l) AddOps(LayerOps(cc, l), Pass::kForward, it);
  if (cc.has_output) {
    AddOps(cm_.output_ops, Pass::kForward, it);
    for (std::int64_t k = 0; k < m_.mtp_num_layers; ++k) {
      AddOps(cm_.mtp_ops, Pass::kForward, it);
      AddOps(MtpLayerOps(), Pass::kForward, it);
    }
  }
  rp_.ops.push_back(Marker(it, ProgKind::kAlloc, cc.saved_bytes));
  if (!LastChunk(it)) {
    ProgOp s = Marker(it, ProgKind::kSend, cm_.pp_message_bytes);
    s.peer_stage = (stage_ + 1) % p_;
    s.tag = Tag(it.microbatch, it.chunk, 0);
    rp_.ops.push_back(s);
  }
}

void RankProgramBuilder::Backward(const ScheduleItem& it) {
  const ChunkCost& cc = chunks_[static_cast<std::size_t>(it.chunk)];
  if (!LastChunk(it)) {
    ProgOp r = Marker(it, ProgKind::kRecv, cm_.pp_message_bytes);
    r.peer_stage = (stage_ + 1) % p_;
    r.tag = Tag(it.microbatch, stage_ == p_ - 1 ? it.chunk + 1 : it.chunk, 1);
    rp_.ops.push_back(r);
    AddOps(cm_.pp_recv_ops, Pass::kBackwardInput, it);
  }
  if (cc.has_output) {
    for (std::int64_t k = 0; k < m_.mtp_num_layers; ++k) {
      AddLayerBackward(MtpLayerOps(), it);
      AddGradientOps(cm_.mtp_ops, it);
    }
    AddGradientOps(cm_.output_ops, it);
  }
  for (int l = cc.first_layer + cc.layers - 1; l >= cc.first_layer; --l) AddLayerBackward(LayerOps(cc, l), it);
  if (cc.has_embedding && !sched_.split_weight) AddOps(cm_.embedding_ops, Pass::kBackwardWeight, it);
  rp_.ops.push_back(
      Marker(it, ProgKind::kFree, sched_.split_weight ? cc.saved_bytes - cc.weight_saved_bytes : cc.saved_bytes));
  if (!FirstChunk(it)) {
    ProgOp s = Marker(it, ProgKind::kSend, cm_.pp_message_bytes);
    s.peer_stage = (stage_ + p_ - 1) % p_;
    s.tag = Tag(it.microbatch, it.chunk, 1);
    rp_.ops.push_back(s);
  }
}

/// ZB-H1's deferred weight-gradient pass.
void RankProgramBuilder::Weight(const ScheduleItem& it) {
  const ChunkCost& cc = chunks_[static_cast<std::size_t>(it.chunk)];
  if (cc.has_output) {
    for (std::int64_t k = 0; k < m_.mtp_num_layers; ++k) {
      AddOps(MtpLayerOps(), Pass::kBackwardWeight, it);
      AddOps(cm_.mtp_ops, Pass::kBackwardWeight, it);
    }
    AddOps(cm_.output_ops, Pass::kBackwardWeight, it);
  }
  for (int l = cc.first_layer + cc.layers - 1; l >= cc.first_layer; --l) {
    AddOps(LayerOps(cc, l), Pass::kBackwardWeight, it);
  }
  if (cc.has_embedding) AddOps(cm_.embedding_ops, Pass::kBackwardWeight, it);
  rp_.ops.push_back(Marker(it, ProgKind::kFree, cc.weight_saved_bytes));
}

/// Chunk `chunk`'s gradient reduction, per bucket (ParallelConfig::BucketParams): the bucket's
/// dense gradients over the data-parallel group, then its routed experts' over the
/// expert-data-parallel group (as the simulator serializes them).
std::vector<ProgOp> RankProgramBuilder::Buckets(int chunk, bool async) {
  const double grad_per_param = GradReduceBytesPerParam(c_);
  const CollectiveOp red = GradReduceIsAllReduce(c_) ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter;
  std::vector<ProgOp> out;
  const ChunkCost& cc = chunks_[static_cast<std::size_t>(chunk)];
  const int nb = std::max(1, static_cast<int>(std::ceil(cc.params_per_gpu / static_cast<double>(c_.BucketParams()))));
  for (int b = 0; b < nb; ++b) {
    for (const bool experts : {false, true}) {
      const double params = experts ? cc.expert_params_per_gpu : cc.params_per_gpu - cc.expert_params_per_gpu;
      if (experts && !(params > 0)) continue;
      ProgOp d;
      d.kind = ProgKind::kDpCollective;
      d.async = async;
      d.experts = experts;
      d.chunk = chunk;
      d.op.name = std::string(GradReduceIsAllReduce(c_) ? "dp_grad_all_reduce" : "dp_grad_reduce_scatter") +
                  (experts ? "_experts" : "");
      d.op.kind = OpKind::kCollective;
      d.op.collective = red;
      d.op.bytes = d.bytes = params * grad_per_param / nb;
      d.op.duration_s = (experts ? CollectiveCostOf(prof_, red, d.bytes, cm_.edp_group)
                                 : DataParallelCostOf(prof_, cm_, red, d.bytes))
                            .time_s();
      rp_.predicted_busy_s += async ? 0.0 : d.op.duration_s;
      out.push_back(d);
    }
  }
  return out;
}

/// Data-parallel gradient reduction per bucket: ZeRO-2 reduces after every micro-batch's gradient
/// item (it keeps only its shard of the gradients, as the simulator's Builder); otherwise after
/// each chunk's last one, overlapped, or at the end.
void RankProgramBuilder::AddGradientReduction() {
  if (!ReducesGradients()) return;
  const bool every_microbatch = c_.zero_stage == 2;
  if (!c_.overlap_grad_reduce && !every_microbatch) {
    for (int k = 0; k < v_; ++k) {
      const auto ops = Buckets(k, false);
      rp_.ops.insert(rp_.ops.end(), ops.begin(), ops.end());
    }
    return;
  }
  const ItemKind grad_item = sched_.split_weight ? ItemKind::kWeight : ItemKind::kBackward;
  std::vector<std::pair<std::size_t, int>> at;  // insert position, chunk (latest first)
  if (every_microbatch) {
    // After each gradient item's last op of its pass (its compute ops and the tensor-parallel
    // collectives between them), before its release and pipeline send.
    std::map<std::pair<int, int>, std::size_t> item_end;  // (micro-batch, chunk) -> last op
    for (std::size_t i = 0; i < rp_.ops.size(); ++i) {
      const ProgOp& x = rp_.ops[i];
      if (InPass(x.kind) && x.item == grad_item) {
        item_end[{x.microbatch, x.chunk}] = i;
      }
    }
    for (const auto& [key, i] : item_end) at.emplace_back(i + 1, key.second);
  } else {
    std::vector<std::size_t> last(static_cast<std::size_t>(v_), 0);
    for (std::size_t i = 0; i < rp_.ops.size(); ++i) {
      if (rp_.ops[i].kind == ProgKind::kCompute && rp_.ops[i].item == grad_item) {
        last[static_cast<std::size_t>(rp_.ops[i].chunk)] = i;
      }
    }
    for (int k = 0; k < v_; ++k) at.emplace_back(last[static_cast<std::size_t>(k)] + 1, k);
  }
  std::sort(at.rbegin(), at.rend());
  for (const auto& [pos, k] : at) {
    const auto ops = Buckets(k, c_.overlap_grad_reduce);
    rp_.ops.insert(rp_.ops.begin() + static_cast<std::ptrdiff_t>(pos), ops.begin(), ops.end());
  }
  if (c_.overlap_grad_reduce) {
    ProgOp w;
    w.kind = ProgKind::kDpWait;
    w.op.name = "dp_wait";
    rp_.ops.push_back(w);
  }
}

/// The tied embedding's gradient all-reduce (first and last stage), the optimizer step, then
/// ZeRO-1/2's parameter all-gather: the dense parameters over the data-parallel group, the
/// routed experts' over the expert-data-parallel group.
void RankProgramBuilder::AddOptimizer() {
  double params = 0, experts = 0;
  for (const auto& cc : chunks_) {
    params += cc.params_per_gpu;
    experts += cc.expert_params_per_gpu;
  }
  if (cm_.embedding_sync_bytes > 0 && (stage_ == 0 || stage_ == p_ - 1)) {
    ProgOp e;
    e.kind = ProgKind::kEmbeddingCollective;
    e.op.name = "embedding_grad_all_reduce";
    e.op.kind = OpKind::kCollective;
    e.op.collective = CollectiveOp::kAllReduce;
    e.op.bytes = e.bytes = cm_.embedding_sync_bytes;
    e.op.duration_s = CollectiveCostOf(prof_, CollectiveOp::kAllReduce, e.bytes, cm_.embedding_pair).time_s();
    rp_.predicted_busy_s += e.op.duration_s;
    rp_.ops.push_back(e);
  }
  ProgOp o;
  o.kind = ProgKind::kOptimizer;
  o.op.name = "optimizer";
  o.op.kind = OpKind::kMemory;
  o.op.bytes = o.bytes = OptimizerBytes(c_, params, experts);
  o.op.duration_s = OptimizerTime(prof_, c_, params, experts);
  rp_.predicted_busy_s += o.op.duration_s;
  rp_.ops.push_back(o);
  if (!ReducesGradients() || (c_.zero_stage != 1 && c_.zero_stage != 2)) return;
  for (const bool expert_part : {false, true}) {
    const double n = expert_part ? experts : params - experts;
    if (expert_part && !(n > 0)) continue;
    ProgOp g;
    g.kind = ProgKind::kDpCollective;
    g.experts = expert_part;
    g.op.name = expert_part ? "dp_param_all_gather_experts" : "dp_param_all_gather";
    g.op.kind = OpKind::kCollective;
    g.op.collective = CollectiveOp::kAllGather;
    g.op.bytes = g.bytes = n * c_.param_gather_bytes;
    g.op.duration_s = (expert_part ? CollectiveCostOf(prof_, CollectiveOp::kAllGather, g.bytes, cm_.edp_group)
                                   : DataParallelCostOf(prof_, cm_, CollectiveOp::kAllGather, g.bytes))
                          .time_s();
    rp_.predicted_busy_s += g.op.duration_s;
    rp_.ops.push_back(g);
  }
}

}  // namespace

RankProgram BuildRankProgram(const Model& m, const ParallelConfig& c, const CostModel& cm,
                             const PipelineSchedule& sched, const HardwareProfile& prof, int stage) {
  return RankProgramBuilder(m, c, cm, sched, prof, stage).Build();
}

}  // namespace shardcast
