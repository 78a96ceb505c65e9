#include "simulator/cost_model.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <functional>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/error.h"

#include <fmt/format.h>

namespace shardcast {

const char* ToString(OpKind k) {
  switch (k) {
    case OpKind::kGemm: return "gemm";
    case OpKind::kAttention: return "attention";
    case OpKind::kMemory: return "memory";
    case OpKind::kCollective: return "collective";
  }
  return "?";
}

const char* ToString(Pass p) {
  switch (p) {
    case Pass::kForward: return "forward";
    case Pass::kBackwardInput: return "backward_input";
    case Pass::kBackwardWeight: return "backward_weight";
    case Pass::kRecompute: return "recompute";
  }
  return "?";
}

namespace {

/// The shape factor of the base-precision efficiency: the profile's measured samples near the
/// shape (inverse-distance weighting in log(m, n, k) over the 4 nearest), else the curve g(F)
/// times the maximum efficiency.
double BaseGemmEfficiency(const HardwareProfile& p, double m, double n, double k, double flops) {
  if (p.gemm_samples.empty()) return p.gemm_max_efficiency * InterpolateLogX(p.gemm_efficiency_vs_gflop, flops / 1e9);
  std::vector<std::pair<double, double>> d;  // (distance^2, efficiency)
  for (const auto& s : p.gemm_samples) {
    const double dm = std::log(m / s.m), dn = std::log(n / s.n), dk = std::log(k / s.k);
    d.emplace_back(dm * dm + dn * dn + dk * dk, s.tflops / p.gemm_peak_tflops);
  }
  const std::size_t kn = std::min<std::size_t>(4, d.size());
  std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(kn), d.end());
  if (d[0].first < 1e-12) return d[0].second;
  double wsum = 0, esum = 0;
  for (std::size_t i = 0; i < kn; ++i) {
    const double w = 1.0 / d[i].first;
    wsum += w;
    esum += w * d[i].second;
  }
  return esum / wsum;
}

}  // namespace

double GemmTime(const HardwareProfile& p, double m_per_matrix, double n, double k, double batch,
                Precision precision, double in_bytes, double out_bytes) {
  const double m = batch * m_per_matrix;  // rows of the whole call, for the efficiency lookup
  const double flops = 2.0 * m * n * k;
  double peak = p.gemm_peak_tflops, eff = BaseGemmEfficiency(p, m, n, k, flops);
  if (precision != Precision::kBf16 && precision != Precision::kFp16) {
    const auto rate = p.GemmRateOf(precision);
    if (!rate) {
      throw InputError(fmt::format("hardware profile ({}): no GEMM rate for {} (gemm.precisions.{} is missing)",
                                   p.source.empty() ? p.gpu : p.source, ToString(precision), ToString(precision)));
    }
    peak = rate->peak_tflops;
    eff *= rate->max_efficiency / p.gemm_max_efficiency;
  }
  const double t_compute = flops / (peak * 1e12 * eff);
  // Every matrix of the batch reads its own A and B and writes its own C.
  const double bytes = batch * (in_bytes * (m_per_matrix * k + k * n) + out_bytes * m_per_matrix * n);
  const double t_memory = bytes / (p.hbm_GBps * 1e9 * InterpolateLogX(p.memory_efficiency_vs_bytes, bytes));
  return std::max(t_compute, t_memory) + p.launch_overhead_s;
}

double MemoryBoundTime(const HardwareProfile& p, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / (p.hbm_GBps * 1e9 * InterpolateLogX(p.memory_efficiency_vs_bytes, bytes)) +
         p.launch_overhead_s;
}

double FlashKernelHeadDim(const std::string& tiles, double head_dim) {
  if (head_dim <= 0 || head_dim > 256) return head_dim;
  if (tiles == "fa2") return head_dim <= 128 ? std::ceil(head_dim / 32.0) * 32.0 : head_dim <= 192 ? 192.0 : 256.0;
  if (tiles == "fa3") {
    for (double d : {64.0, 96.0, 128.0, 192.0}) {
      if (head_dim <= d) return d;
    }
    return 256.0;
  }
  return head_dim;
}

double AttentionTime(const HardwareProfile& p, double flops, double seq, bool backward, double head_dim,
                     double v_head_dim) {
  if (v_head_dim <= 0) v_head_dim = head_dim;
  const auto& curve = backward && !p.attention_bwd_efficiency_vs_seq.empty() ? p.attention_bwd_efficiency_vs_seq
                                                                               : p.attention_efficiency_vs_seq;
  const auto& by_dim = backward ? p.attention_bwd_head_dim_factor : p.attention_fwd_head_dim_factor;
  double dim = 1.0;
  if (head_dim > 0 && !by_dim.empty()) {
    dim = InterpolateLogX(by_dim, 0.5 * (head_dim + v_head_dim));  // measured at equal q/k/v head dims
  } else if (head_dim > 0) {  // the share of the kernels' head dims the heads fill, as where the rates were measured
    const double ref = p.attention_head_dim > 0 ? p.attention_head_dim : 128.0;
    const std::string& k = p.attention_tiles;
    // Only FA3's forward runs a value head dim of its own (MLA's 192/128); its backward and
    // FA2 run both products at the larger one (hopper/flash_api.cpp mha_bwd; FA2 requires equal).
    const bool own_v = k == "fa3" && !backward;
    const double kq = FlashKernelHeadDim(k, own_v ? head_dim : std::max(head_dim, v_head_dim));
    const double kv = own_v ? FlashKernelHeadDim(k, v_head_dim) : kq;
    dim = ((head_dim + v_head_dim) / (kq + kv)) / (ref / FlashKernelHeadDim(k, ref));
  }
  const double eff =
      (backward ? p.attention_bwd_efficiency : p.attention_fwd_efficiency) * InterpolateLogX(curve, seq) * dim;
  return flops / (p.gemm_peak_tflops * 1e12 * eff) + p.launch_overhead_s;
}

namespace {
double OptimizerShard(const ParallelConfig& c, double local_params) {
  return c.zero_stage >= 1 ? local_params / static_cast<double>(c.shard_dp()) : local_params;
}
double OptimizerShardBytesPerParam(const ParallelConfig& c) {
  // fp32 training has no 16-bit weights to copy the updated master into (the last 6 bytes), nor
  // has FSDP: Adam updates the fp32 shard in place, cast to 16 bits by the next all-gather.
  const bool no_copy = ModelDtypeBytes(c.precision) == 4.0 || c.optimizer_impl == OptimizerImpl::kTorchFsdp;
  const double copy = no_copy ? 0.0 : 6.0;
  return (c.precision == Precision::kFp16 ? 8.0 : 0.0) + 4.0 + 28.0 + copy;
}
}  // namespace

namespace {
/// The optimizer's two passes in bytes: over the state shard (routed experts sharded over the
/// expert-data-parallel ranks, the rest over dp x cp), and zeroing the local gradients.
std::pair<double, double> OptimizerPassBytes(const ParallelConfig& c, double local_params, double expert_params) {
  // PyTorch's optimizers free the gradients (zero_grad(set_to_none=True)) rather than zero them.
  const double zeroed = c.optimizer_impl == OptimizerImpl::kTorchFsdp ? 0.0 : 1.0;
  if (expert_params <= 0) {
    return {OptimizerShardBytesPerParam(c) * OptimizerShard(c, local_params), zeroed * BytesPerParam(c).grads * local_params};
  }
  const double dense = local_params - expert_params;
  const double edp = static_cast<double>(std::max<std::int64_t>(1, c.expert_dp()));
  const double shard = OptimizerShard(c, dense) + (c.zero_stage >= 1 ? expert_params / edp : expert_params);
  const double grads = BytesPerParam(c).grads * dense + BytesPerParam(c, c.expert_dp()).grads * expert_params;
  return {OptimizerShardBytesPerParam(c) * shard, zeroed * grads};
}
}  // namespace

double OptimizerBytes(const ParallelConfig& c, double local_params, double expert_params) {
  const auto [shard, grads] = OptimizerPassBytes(c, local_params, expert_params);
  return shard + grads;
}

double OptimizerTime(const HardwareProfile& p, const ParallelConfig& c, double local_params, double expert_params) {
  const auto [shard, grads] = OptimizerPassBytes(c, local_params, expert_params);
  return MemoryBoundTime(p, shard) + MemoryBoundTime(p, grads);
}

double WeightQuantizeTime(const HardwareProfile& p, const ParallelConfig& c, const LinearFormat& f,
                          double quantized_params) {
  if (!f.low_precision() || quantized_params <= 0) return 0;
  const double eb = ModelDtypeBytes(c.precision);
  // With --fp8-param-gather the optimizer writes the quantized copies in place of the 16-bit
  // weights: only the bytes beyond those are extra.
  const double bytes = c.fp8_param_gather ? std::max(0.0, f.CastWriteBytes() - eb) : eb + f.CastWriteBytes();
  return MemoryBoundTime(p, quantized_params * bytes);
}

CollectiveCost CollectiveCostOf(const HardwareProfile& p, CollectiveOp op, double size,
                                const GroupPlacement& g) {
  CollectiveCost c;
  const int n = g.ranks;
  if (n <= 1 || size <= 0) return c;
  const int nodes = g.nodes();
  const double factor = BusBwFactor(op, n);
  for (const auto& t : p.collective_tables) {
    if (t.op == op && t.ranks == n && t.nodes == nodes) {
      // Measured: interpolate time in log-log over message size.
      const auto& pts = t.bytes_to_seconds;
      double ts;
      if (size <= pts.front().x) {
        ts = pts.front().y;
      } else if (size >= pts.back().x) {
        ts = pts.back().y * size / pts.back().x;  // bandwidth regime beyond the table
      } else {
        std::vector<CurvePoint> logy;
        for (const auto& q : pts) logy.push_back({q.x, std::log(q.y)});
        ts = std::exp(InterpolateLogX(logy, size));
      }
      c.bytes_on_link = factor * size;
      c.link_GBps = c.bytes_on_link / ts / 1e9;
      c.link = nodes > 1 ? LinkKind::kNetwork : LinkKind::kIntraNode;
      return c;
    }
  }
  const int nsteps = op == CollectiveOp::kAllReduce ? 2 * (n - 1) : n - 1;
  const int ninter = nodes <= 1 ? 0 : (op == CollectiveOp::kAllReduce ? 2 * (nodes - 1) : nodes - 1);
  c.latency_s = p.coll_base_latency_s + (nsteps - ninter) * p.coll_intra_hop_latency_s +
                ninter * p.coll_inter_hop_latency_s;
  const double bytes = factor * size;
  if (nodes <= 1) {
    c.link = LinkKind::kIntraNode;
    c.bytes_on_link = bytes;
    c.link_GBps = p.IntraGroupBusbwGBps(n);
    // NCCL picks NVLink SHARP for an all-reduce inside an NVSwitch node where it is faster.
    if (op == CollectiveOp::kAllReduce) c.link_GBps = std::max(c.link_GBps, p.nvls_allreduce_busbw_GBps);
  } else if (op == CollectiveOp::kAllToAll) {
    // All-to-all across nodes: every GPU sends the part of its data bound for other nodes,
    // (n - ranks_per_node) / n of it, through its own NIC share (no ring carries it for others).
    c.link = LinkKind::kNetwork;
    c.bytes_on_link = size * static_cast<double>(n - g.ranks_per_node) / static_cast<double>(n);
    c.link_GBps = p.NicShareGBps();
  } else {
    // Each GPU of the group drives its share of the node's NICs; the ring's inter-node busbw is
    // ranks_per_node times that share, capped by the intra-node busbw.
    const double inter = g.ranks_per_node * p.NicShareGBps();
    if (inter < p.IntraGroupBusbwGBps(g.ranks_per_node)) {
      c.link = LinkKind::kNetwork;
      c.bytes_on_link = bytes / g.ranks_per_node;  // per GPU, through its own NIC share
      c.link_GBps = p.NicShareGBps();
    } else {
      c.link = LinkKind::kIntraNode;
      c.bytes_on_link = bytes;
      c.link_GBps = p.IntraGroupBusbwGBps(g.ranks_per_node);
    }
  }
  return c;
}

CollectiveCost SerialCollectives(const CollectiveCost& a, const CollectiveCost& b) {
  const double ta = a.link_GBps > 0 ? a.bytes_on_link / a.link_GBps : 0;
  const double tb = b.link_GBps > 0 ? b.bytes_on_link / b.link_GBps : 0;
  CollectiveCost sum = ta >= tb ? a : b;
  const CollectiveCost& other = ta >= tb ? b : a;
  sum.latency_s += other.latency_s;
  if (other.link_GBps > 0 && sum.link_GBps > 0) sum.bytes_on_link += other.bytes_on_link * sum.link_GBps / other.link_GBps;
  return sum;
}

CollectiveCost DataParallelCostOf(const HardwareProfile& prof, const CostModel& cm, CollectiveOp op,
                                  double size_bytes) {
  if (!cm.hybrid_shard || op == CollectiveOp::kAllReduce) return CollectiveCostOf(prof, op, size_bytes, cm.dp_group);
  const CollectiveCost inner = CollectiveCostOf(prof, op, size_bytes, cm.shard_group);
  if (op != CollectiveOp::kReduceScatter) return inner;
  const CollectiveCost across = CollectiveCostOf(prof, CollectiveOp::kAllReduce,
                                                 size_bytes / static_cast<double>(cm.shard_group.ranks),
                                                 cm.replica_group);
  return SerialCollectives(inner, across);
}

CollectiveCost P2PCostOf(const HardwareProfile& p, double bytes, bool same_node) {
  CollectiveCost c;
  if (bytes <= 0) return c;
  c.bytes_on_link = bytes;
  if (same_node) {
    c.link = LinkKind::kIntraNode;
    c.link_GBps = p.p2p_intra_GBps;
    c.latency_s = p.coll_base_latency_s + p.coll_intra_hop_latency_s;
  } else {
    c.link = LinkKind::kNetwork;
    c.link_GBps = p.NicShareGBps();
    c.latency_s = p.coll_base_latency_s + p.coll_inter_hop_latency_s;
  }
  return c;
}

double KorthikantiLayerActivationBytes(double s, double b, double h, double a, double t, bool sp,
                                       Recompute recompute) {
  if (recompute == Recompute::kFull) return 2.0 * s * b * h / (sp ? t : 1.0);
  const double attn = recompute == Recompute::kSelective ? 0.0 : 5.0 * a * s / (h * t);
  if (sp) return s * b * h * (34.0 / t + attn);
  return s * b * h * (10.0 + 24.0 / t + attn);
}

namespace {

/// Builds ops with durations. `T` tokens per micro-batch, sharded sizes already divided by t.
class OpBuilder {
 public:
  /// GEMMs outside the linear layers run in `dense` (bf16 under the low-precision formats)
  /// with `dtype_bytes` per element; the linear layers' GEMMs in `linear`.
  OpBuilder(const HardwareProfile& p, const GroupPlacement& tp, Precision dense, double dtype_bytes,
            const LinearFormat& linear)
      : p_(p), tp_(tp), dense_(dense), eb_(dtype_bytes), linear_(linear) {}

  void set_linear_format(const LinearFormat& f) { linear_ = f; }
  /// The attention head dimension flash-attention ops are read at (AttentionTime).
  /// The query/key and value head dims of the attention kernel (MLA's differ).
  void set_attention_head_dims(double qk, double v) {
    head_dim_ = qk;
    v_head_dim_ = v;
  }
  /// A sliding attention window on `fraction` of the layers (Model::WindowedLayers over
  /// num_layers), whose flash kernels run `ratio` of the causal FLOPs (Model::WindowFlopRatio) at
  /// the efficiency of a sequence of `tokens` (the window, when shorter than the kernel's
  /// sequence): Attention() costs the mean layer.
  void set_attention_window(double fraction, double ratio, double tokens) {
    window_fraction_ = fraction;
    window_ratio_ = ratio;
    window_tokens_ = tokens;
  }
  const LinearFormat& linear_format() const { return linear_; }

  /// A GEMM outside the linear layers (the output layer, attention's batched GEMMs).
  void Gemm(std::vector<Op>& out, const std::string& name, Pass pass, double m, double n, double k) {
    GemmIn(out, name, pass, m, n, k, dense_, eb_);
  }
  /// A GEMM of a transformer layer's linear layers (QKV, attention output, MLP up and down), in
  /// the linear format: its operands are the quantized copies (with their block scales).
  void Linear(std::vector<Op>& out, const std::string& name, Pass pass, double m, double n, double k) {
    GemmIn(out, name, pass, m, n, k, linear_.gemm, linear_.CopyBytes());
  }
  /// The cast of `elements` 16-bit values into the linear format before a linear GEMM: reads
  /// them and writes the quantized copies (cast_transpose); nothing without a low-precision
  /// format.
  void Quantize(std::vector<Op>& out, const std::string& name, Pass pass, double elements) {
    if (!linear_.low_precision()) return;
    Memory(out, name, pass, elements * (eb_ + linear_.CastWriteBytes()));
  }
  /// `batch` independent GEMMs of m x n x k (attention scores / context per head), run `times`
  /// over (the backward computes two gradients per GEMM): shape per matrix, FLOPs and bytes of
  /// all matrices (GemmTime with `batch`).
  void BatchedGemm(std::vector<Op>& out, const std::string& name, Pass pass, double batch, double m,
                   double n, double k, double times, double saved = 0) {
    Gemm(out, name, pass, m, n, k);
    Op& o = out.back();
    o.batch = batch;
    o.flops = 2 * batch * m * n * k * times;
    o.bytes = times * eb_ * batch * (m * k + k * n + m * n);
    o.duration_s = times * GemmTime(p_, m, n, k, batch, dense_, eb_, eb_);
    o.saved_bytes = saved;
  }
  void Memory(std::vector<Op>& out, const std::string& name, Pass pass, double bytes,
              double saved = 0) {
    Op o;
    o.name = name;
    o.kind = OpKind::kMemory;
    o.pass = pass;
    o.bytes = bytes;
    o.saved_bytes = saved;
    o.duration_s = MemoryBoundTime(p_, bytes);
    out.push_back(std::move(o));
  }
  void Attention(std::vector<Op>& out, const std::string& name, Pass pass, double flops,
                 double seq, double saved = 0) {
    Op o;
    o.name = name;
    o.kind = OpKind::kAttention;
    o.pass = pass;
    o.flops = flops;
    o.saved_bytes = saved;
    const bool bwd = pass == Pass::kBackwardInput;
    o.duration_s = AttentionTime(p_, flops, seq, bwd, head_dim_, v_head_dim_);
    if (window_fraction_ > 0 && window_ratio_ < 1) {
      // The mean of the full layers' kernel and the windowed layers', which skips the key blocks
      // outside the window and runs at the window's length.
      const double windowed_s =
          AttentionTime(p_, flops * window_ratio_, std::min(seq, window_tokens_), bwd, head_dim_, v_head_dim_);
      o.duration_s = (1 - window_fraction_) * o.duration_s + window_fraction_ * windowed_s;
      o.flops = flops * (1 - window_fraction_ + window_fraction_ * window_ratio_);
    }
    out.push_back(std::move(o));
  }
  /// Megatron-LM's asynchronous input-gradient collective: the last op of `out` (a TP
  /// collective) runs beside the weight-gradient GEMM `gemm_name` emitted just before it. Only
  /// the part longer than the GEMM stays exposed; the GEMM slows by the profile's overlap factor
  /// for the hidden part (NVLink when the group is on one node).
  void HideBehindGemm(std::vector<Op>& out, const std::string& gemm_name) {
    if (out.empty() || out.back().kind != OpKind::kCollective) return;
    Op& coll = out.back();
    for (auto it = out.rbegin() + 1; it != out.rend(); ++it) {
      if (it->name != gemm_name) continue;
      const double hidden = std::min(coll.duration_s, it->duration_s);
      const double slow = tp_.nodes() > 1 ? p_.overlap_slowdown_network : p_.overlap_slowdown_nvlink;
      it->duration_s += slow * hidden;
      coll.duration_s -= hidden;
      coll.hidden_s = hidden;
      return;
    }
  }
  /// Transformer Engine's userbuffers overlap (--tp-comm-overlap): the collective `coll_name`
  /// (an all-gather feeding the linear GEMM `gemm_name`, or a reduce-scatter of its output) is split
  /// into n = tp chunks that a ring exchanges while the GEMM runs on the chunk it has. The GEMM
  /// takes n calls of 1/n of its rows, g = n * GemmTime(m/n); the n - 1 exchange steps take
  /// c / (n - 1) each, so the pair takes (n - 1) * max(g/n, c/(n - 1)) + g/n: the GEMM alone
  /// when it is longer than the exchange, else the exchange and one chunk of GEMM. What is left
  /// beyond g is the collective's exposed time; the GEMM slows by the profile's overlap factor
  /// for the hidden part, as for Megatron's asynchronous collectives.
  void OverlapChunked(std::vector<Op>& out, const std::string& coll_name, const std::string& gemm_name) {
    const double n = tp_.ranks;
    if (n <= 1) return;
    Op* coll = nullptr;
    Op* gemm = nullptr;
    for (Op& o : out) {
      if (o.name == coll_name) coll = &o;
      if (o.name == gemm_name) gemm = &o;
    }
    if (coll == nullptr || gemm == nullptr) return;
    const double g = n * GemmTime(p_, gemm->m / n, gemm->n, gemm->k, 1, linear_.gemm, linear_.CopyBytes(), eb_);
    const double c = coll->duration_s;
    const double total = (n - 1) * std::max(g / n, c / (n - 1)) + g / n;
    const double exposed = std::max(0.0, total - g);
    const double hidden = c - exposed;
    const double slow = tp_.nodes() > 1 ? p_.overlap_slowdown_network : p_.overlap_slowdown_nvlink;
    gemm->duration_s = g + slow * hidden;
    coll->duration_s = exposed;
    coll->hidden_s = hidden;
  }
  /// A collective of the context-parallel group (`g`: its placement), reported as CP
  /// communication.
  void CpCollective(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op, double size,
                    const GroupPlacement& g) {
    CollectiveIn(out, name, pass, op, size, g);
    if (g.ranks > 1) out.back().context_parallel = true;
  }
  /// A collective of the expert-parallel (or expert-tensor-parallel) group `g`, reported as EP
  /// communication.
  void EpCollective(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op, double size,
                    const GroupPlacement& g) {
    CollectiveIn(out, name, pass, op, size, g);
    if (g.ranks > 1) out.back().expert_parallel = true;
  }
  /// The token dispatch or combine of an MoE layer: the plan's DeepEP time (MoePlan::dispatch_s)
  /// for the flex dispatcher, else the collective's.
  void EpExchange(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op, const MoePlan& e) {
    EpCollective(out, name, pass, op, e.dispatch_bytes, e.ep_group);
    if (e.ep_group.ranks > 1 && e.dispatcher == MoeDispatcher::kFlex) out.back().duration_s = e.dispatch_s;
  }
  /// `groups` GEMMs of m x n x k each in the linear format, launched as one grouped GEMM (the MoE
  /// experts on one GPU): each at the efficiency of its own shape, one launch for all.
  void GroupedLinear(std::vector<Op>& out, const std::string& name, Pass pass, double groups, double m, double n,
                     double k) {
    Linear(out, name, pass, m, n, k);
    Op& o = out.back();
    o.routed_experts = true;
    o.batch = groups;
    o.flops *= groups;
    o.bytes *= groups;
    o.duration_s = groups * (o.duration_s - p_.launch_overhead_s) + p_.launch_overhead_s;
  }
  /// A collective of the tensor-parallel group.
  void Collective(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op,
                  double size) {
    CollectiveIn(out, name, pass, op, size, tp_);
  }

 private:
  void GemmIn(std::vector<Op>& out, const std::string& name, Pass pass, double m, double n, double k, Precision prec,
              double in_bytes) {
    Op o;
    o.name = name;
    o.kind = OpKind::kGemm;
    o.pass = pass;
    o.m = m;
    o.n = n;
    o.k = k;
    o.flops = 2 * m * n * k;
    o.bytes = in_bytes * (m * k + k * n) + eb_ * m * n;
    o.duration_s = GemmTime(p_, m, n, k, 1, prec, in_bytes, eb_);
    out.push_back(std::move(o));
  }

  /// A collective over the group `g` (nothing for a group of one).
  void CollectiveIn(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op, double size,
                    const GroupPlacement& g) {
    if (g.ranks <= 1) return;
    Op o;
    o.name = name;
    o.kind = OpKind::kCollective;
    o.pass = pass;
    o.collective = op;
    o.bytes = size;
    o.duration_s = CollectiveCostOf(p_, op, size, g).time_s();
    out.push_back(std::move(o));
  }

  const HardwareProfile& p_;
  GroupPlacement tp_;
  Precision dense_;
  double eb_;
  LinearFormat linear_;
  double head_dim_ = 0, v_head_dim_ = 0;
  double window_fraction_ = 0, window_ratio_ = 1, window_tokens_ = 0;
};

/// Sums op durations of one pass; the TP, context-parallel and expert-parallel collective parts
/// separately (a part without its pointer stays in the total only).
void SumPass(const std::vector<Op>& ops, Pass pass, double* total, double* tp, double* cp = nullptr,
             double* ep = nullptr) {
  for (const auto& o : ops) {
    if (o.pass != pass || o.overlapped) continue;
    *total += o.duration_s;
    if (o.kind != OpKind::kCollective) continue;
    if (o.context_parallel) {
      if (cp != nullptr) *cp += o.duration_s;
    } else if (o.expert_parallel) {
      if (ep != nullptr) *ep += o.duration_s;
    } else {
      *tp += o.duration_s;
    }
  }
}

double SavedBytes(const std::vector<Op>& ops) {
  double s = 0;
  for (const auto& o : ops) {
    if (o.pass == Pass::kForward) s += o.saved_bytes;
  }
  return s;
}

/// Length of the overlap of [a0, a1) and [b0, b1).
std::int64_t Overlap(std::int64_t a0, std::int64_t a1, std::int64_t b0, std::int64_t b1) {
  return std::max<std::int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

/// Shapes of one configuration that a layer's ops use: micro-batch b, sequence s, hidden h, FFN f,
/// heads a, query groups g, head dim d, TP size t, tokens T = b*s, rep = t with sequence
/// parallelism (else 1), element bytes eb of the model dtype, 1 if dropout.
struct LayerShape {
  double b, s, h, f, a, g, d, t, T, rep, eb;
  bool sp, swiglu;
  double drop;
  const ContextParallelPlan* cp = nullptr;  ///< how attention runs over the context-parallel group
  double host_copy_GBps = 0;  ///< one GPU's achieved host-link copy rate, per direction (HostCopyGBps)
};

}  // namespace

// Named (not anonymous) so that LayerCostCache::Impl may hold them.
namespace cost_model_internal {

/// One transformer layer, all passes, with its bytes kept for the backward pass.
struct LayerOps {
  std::vector<Op> ops;
  double saved_bytes = 0;          ///< kept from forward to backward per micro-batch
  /// Part of saved_bytes kept as the checkpoint of a recomputed layer, apart from its ops' saved
  /// tensors: the layer input under full recompute; the kept op outputs under torchtitan's
  /// per-op policy (TorchOpRecompute); 0 otherwise.
  double checkpoint_bytes = 0;
  double transient_bytes = 0;      ///< working memory of the backward (recompute, CP buffers)
  double fwd_transient_bytes = 0;  ///< working memory of the forward (CP exchange buffers)
  double weight_inputs_bytes = 0;  ///< inputs the weight-gradient GEMMs read
  /// With --overlap-moe-expert-parallel-comm: the token-exchange time a forward (a backward) of
  /// this layer hides when it runs paired with another micro-batch's backward (forward), less
  /// the compute slowdown the overlap costs (A2aOverlapSavings).
  double a2a_overlap_fwd_s = 0, a2a_overlap_bwd_s = 0;
  /// One pass's time on the compute stream (ops not overlapped), and the part of it in
  /// tensor-, context- and expert-parallel collectives (SumPass over `ops`).
  struct PassTime {
    double total = 0, tp = 0, cp = 0, ep = 0;
  };
  PassTime fwd, bwd_input, bwd_weight, recompute;
};

/// A configuration's transformer layers: dense and MoE, each in the configuration's linear format
/// and in bf16 (for the layers --first-last-layers-bf16 keeps; empty without them).
struct LayerSet {
  LayerOps layer, layer16, moe_layer, moe_layer16;
  LayerOps plain, moe_plain;  ///< partial recompute: the layers that do not rerun (empty otherwise)
};

/// A hash of a LayerCostKey's main fields (equal keys are told apart by operator==).
struct LayerKeyHasher {
  std::size_t operator()(const ParallelConfig& k) const {
    std::size_t h = 0;
    auto mix = [&h](std::int64_t v) { h = h * 1000003u ^ std::hash<std::int64_t>{}(v); };
    for (std::int64_t v : {k.tp, k.cp, k.ep, k.etp, k.micro_batch_size, k.seq_length}) mix(v);
    for (int v : {static_cast<int>(k.recompute), static_cast<int>(k.precision), static_cast<int>(k.schedule),
                  static_cast<int>(k.sequence_parallel), static_cast<int>(k.tp_comm_overlap),
                  static_cast<int>(k.recompute_modules), static_cast<int>(k.offload_modules)}) {
      mix(v);
    }
    return h;
  }
};

}  // namespace cost_model_internal

namespace {

using cost_model_internal::LayerOps;
using cost_model_internal::LayerSet;
using cost_model_internal::LayerKeyHasher;

/// Bytes of the keys and values one context-parallel rank holds for one micro-batch: its T tokens
/// (b*s/cp) of K and V, g/t query groups of head dimension d each.
double LocalKvBytes(const LayerShape& x) { return 2 * x.eb * x.T * x.g * x.d / x.t; }

/// Ring steps of attention: cp steps (p2p) or cp / a2a ranks (a2a+p2p), 1 without a ring.
int RingSteps(const ContextParallelPlan& cp) { return cp.ring; }

/// The ring's transfers of one pass: `ring - 1` sends of `bytes` one hop each, step k+1's while
/// step k's attention (`step_s`) runs; what a step waits for is exposed, the rest hidden.
void AddRingExchange(std::vector<Op>& L, const std::string& name, Pass pass, double ring, double bytes,
                     double step_s, const HardwareProfile& prof, bool same_node) {
  const double xfer = P2PCostOf(prof, bytes, same_node).time_s();
  const double exposed = (ring - 1) * std::max(0.0, xfer - step_s);
  Op o;
  o.name = name;
  o.kind = OpKind::kCollective;
  o.collective = CollectiveOp::kSendRecv;
  o.pass = pass;
  o.context_parallel = true;
  o.bytes = (ring - 1) * bytes;
  o.duration_s = exposed;
  o.hidden_s = (ring - 1) * xfer - exposed;
  L.push_back(std::move(o));
}

/// Causal flash attention of one micro-batch on one rank under context parallelism
/// (docs/simulator.md, "Context parallelism"). Load balancing gives every rank 1/cp of the causal
/// FLOPs, 0.5 * 4 * b * s^2 * a * d / (t * cp) forward. The ring (p2p, and the ring level of
/// a2a+p2p) computes them in `ring` steps of equal work (the local queries against one rank's
/// K/V block; the diagonal step's two causal halves make up one block), each kernel at the
/// efficiency of its block length s / ring; while step k runs, the block of step k + 1 moves one
/// hop: a step waits for its block when the transfer is longer than the step's attention, so
/// (ring - 1) * max(0, transfer - step) is exposed. allgather gathers all K/V first (exposed) and
/// runs the local queries against them (two kernels, one per local chunk); a2a (and
/// DeepSpeed-Ulysses) exchanges Q, K, V for a1/cp of the heads over the whole sequence, runs one
/// kernel at the full sequence's efficiency and exchanges the output back.
void CpAttentionForward(OpBuilder& ob, std::vector<Op>& L, const LayerShape& x, const HardwareProfile& prof,
                        double saved, LayerOps* out) {
  const ContextParallelPlan& cp = *x.cp;
  const Pass F = Pass::kForward;
  const double ncp = cp.cp, ring = RingSteps(cp);
  const double flops = 0.5 * 4 * x.b * x.s * x.s * x.a * x.d / x.t / ncp;
  const double kv = LocalKvBytes(x);
  const double qkv_local = x.eb * x.T * (x.a + 2 * x.g) * x.d / x.t, o_local = x.eb * x.T * x.a * x.d / x.t;
  if (cp.a2a_group.ranks > 1) ob.CpCollective(L, "cp_all_to_all_qkv", F, CollectiveOp::kAllToAll, qkv_local, cp.a2a_group);
  if (cp.comm == CpComm::kAllGather) {
    ob.CpCollective(L, "cp_all_gather_kv", F, CollectiveOp::kAllGather, kv * ncp, cp.group);
  }
  // Kernel calls and the sequence length their efficiency is read at.
  const double calls = cp.comm == CpComm::kAllGather ? 2 : ring;
  const double lookup = cp.a2a_group.ranks > 1 ? x.s / ring : x.s / ncp;
  ob.Attention(L, "flash_attention", F, flops / calls, lookup, saved);
  Op& attn = L.back();
  const double step_s = attn.duration_s;
  attn.flops *= calls;  // (over a window's share of the layers, its FLOPs: OpBuilder::Attention)
  attn.duration_s = calls * step_s;
  attn.bytes = x.eb * x.T * x.d * (2 * x.a + 2 * x.g * ring) / x.t;  // Q, O, and every K/V block read
  if (ring > 1) {
    AddRingExchange(L, "cp_ring_kv_exchange", F, ring, kv, step_s, prof, cp.ring_same_node);
    out->fwd_transient_bytes = std::max(out->fwd_transient_bytes, 2 * kv);  // blocks in flight
  }
  if (cp.comm == CpComm::kAllGather) out->fwd_transient_bytes = std::max(out->fwd_transient_bytes, kv * ncp);
  if (cp.a2a_group.ranks > 1) {
    ob.CpCollective(L, "cp_all_to_all_out", F, CollectiveOp::kAllToAll, o_local, cp.a2a_group);
    out->fwd_transient_bytes = std::max(out->fwd_transient_bytes, qkv_local);
  }
}

/// The backward of CpAttentionForward: the kernels at 2.5x the forward FLOPs; the ring moves K/V
/// and their gradients (2x the forward's bytes) while each step runs; allgather gathers K/V
/// again and reduce-scatters their gradients; a2a exchanges the output gradient in and the Q, K,
/// V gradients out.
void CpAttentionBackward(OpBuilder& ob, std::vector<Op>& L, const LayerShape& x, const HardwareProfile& prof,
                         LayerOps* out) {
  const ContextParallelPlan& cp = *x.cp;
  const Pass B = Pass::kBackwardInput;
  const double ncp = cp.cp, ring = RingSteps(cp);
  const double flops = 2.5 * 0.5 * 4 * x.b * x.s * x.s * x.a * x.d / x.t / ncp;
  const double kv = LocalKvBytes(x);
  const double qkv_local = x.eb * x.T * (x.a + 2 * x.g) * x.d / x.t, o_local = x.eb * x.T * x.a * x.d / x.t;
  if (cp.a2a_group.ranks > 1) {
    ob.CpCollective(L, "cp_all_to_all_out_grad", B, CollectiveOp::kAllToAll, o_local, cp.a2a_group);
  }
  if (cp.comm == CpComm::kAllGather) {
    ob.CpCollective(L, "cp_all_gather_kv_bwd", B, CollectiveOp::kAllGather, kv * ncp, cp.group);
  }
  const double calls = cp.comm == CpComm::kAllGather ? 2 : ring;
  const double lookup = cp.a2a_group.ranks > 1 ? x.s / ring : x.s / ncp;
  ob.Attention(L, "flash_attention_bwd", B, flops / calls, lookup);
  Op& attn = L.back();
  const double step_s = attn.duration_s;
  attn.flops *= calls;
  attn.duration_s = calls * step_s;
  attn.bytes = x.eb * x.T * x.d * (4 * x.a + 4 * x.g * ring) / x.t;
  if (ring > 1) {
    AddRingExchange(L, "cp_ring_kv_exchange_bwd", B, ring, 2 * kv, step_s, prof, cp.ring_same_node);
    out->transient_bytes = std::max(out->transient_bytes, 4 * kv);  // K/V and their gradients in flight
  }
  if (cp.comm == CpComm::kAllGather) {
    ob.CpCollective(L, "cp_reduce_scatter_kv_grad", B, CollectiveOp::kReduceScatter, kv * ncp, cp.group);
    out->transient_bytes = std::max(out->transient_bytes, 2 * kv * ncp);  // gathered K/V and their gradients
  }
  if (cp.a2a_group.ranks > 1) {
    ob.CpCollective(L, "cp_all_to_all_qkv_grad", B, CollectiveOp::kAllToAll, qkv_local, cp.a2a_group);
    out->transient_bytes = std::max(out->transient_bytes, qkv_local);
  }
}

}  // namespace

namespace {

/// Builds one transformer layer's ops (all passes), what it keeps for the backward pass under the
/// recompute policy, and the inputs its weight-gradient GEMMs need, unit by unit: attention
/// (MHA/GQA, with context parallelism), then the dense MLP or the MoE MLP, forward then backward
/// in reverse. The linear GEMMs run in `ob`'s linear format; under a low-precision format their
/// inputs are cast before the forward GEMM and the output gradients before the data-gradient GEMM
/// (docs/simulator.md, "Precisions").
class LayerBuilder {
 public:
  LayerBuilder(const Model& model, const ParallelConfig& cfg, const LayerShape& shape, const HardwareProfile& profile,
               OpBuilder& op_builder, const MoePlan* moe_plan)
      : m(model), c(cfg), x(shape), prof(profile), ob(op_builder), moe(moe_plan), L(out.ops) {
    L.reserve(128);  // a layer's ops with their recompute copies, without regrowing
  }

  LayerOps Build() && {
    AttentionForward();
    if (moe != nullptr) {
      MoeMlpForward();
      MoeMlpBackward();
    } else {
      DenseMlpForward();
      DenseMlpBackward();
    }
    AttentionBackward();
    Finish();
    Offload();
    if (moe != nullptr && c.moe_a2a_overlap) A2aOverlapSavings();
    // Weight gradients need the inputs of the linear GEMMs: QKV and MLP-up (or experts') inputs,
    // the attention output and the activation output (their quantized copies under a
    // low-precision format).
    out.weight_inputs_bytes = moe != nullptr ? q * (T * h / rep + T * ad_t) + mlp_weight_inputs
                                             : q * (2 * T * h / rep + T * ad_t + T * f / t);
    return std::move(out);  // built once: BuildLayerOps calls Build on a temporary
  }

 private:
  /// Unfused attention core ops appended since `begin` run at the profile's measured fraction of
  /// their cost-model time (HardwareProfile::unfused_attention_core_efficiency).
  void scale_attention_core(std::size_t begin) {
    for (std::size_t i = begin; i < L.size(); ++i) L[i].duration_s /= prof.unfused_attention_core_efficiency;
  }

  void AttentionForward() {
    if (m.mla.enabled()) {
      MlaForward();
      return;
    }
  // ---- forward (saved bytes: Korthikanti et al. 2022 section 4.1, generalized to GQA/SwiGLU)
  ob.Memory(L, "input_norm", F, fused_norm_bytes, act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn", F, ag, act);
  if (sp) ob.Quantize(L, "qkv_proj_input_quantize", F, T * h);
  ob.Linear(L, "qkv_proj", F, T, qkv_n, h);
  L.back().saved_bytes = q * T * h / rep;  // QKV input (norm output)
  if (m.qk_layernorm || m.qk_l2_norm) {
    // Megatron-Core's q_layernorm and k_layernorm over each head's d channels (or Llama 4's L2
    // norms, the same passes): read Q and K, write them normalized, keep their input for the backward.
    ob.Memory(L, "qk_layernorm", F, 2 * qk_bytes, qk_bytes);
  }
  const double qkv_saved = eb * T * qkv_n;  // Q, K, V
  if (c.flash_attention && x.cp != nullptr && x.cp->cp > 1) {
    CpAttentionForward(ob, L, x, prof, qkv_saved + 4 * T * a / t /* fp32 log-sum-exp */, &out);
  } else if (c.flash_attention) {
    // Flash attention: causal kernels skip about half of the 4*b*s^2*a*d FLOPs (Dao 2023).
    ob.Attention(L, "flash_attention", F, 0.5 * 4 * b * s * s * a * d / t, s,
                 qkv_saved + 4 * T * a / t /* fp32 log-sum-exp */);
    L.back().bytes = eb * T * d * (2 * a + 2 * g) / t;  // reads Q, K, V; writes O
  } else {
    // b*a/t batched GEMMs per head: scores Q K^T (s x s x d) and context P V (s x d x s).
    const double heads_t = a / t;
    const std::size_t core_begin = L.size();
    ob.BatchedGemm(L, "attn_scores_qk", F, b * heads_t, s, s, d, 1, qkv_saved - eb * T * g * d / t);  // saves Q, K
    const double scores = b * heads_t * s * s;
    ob.Memory(L, "softmax", F, 2 * eb * scores, eb * scores);
    if (m.dropout) ob.Memory(L, "attn_dropout", F, (2 * eb + 1) * scores, (eb + 1) * scores);  // mask + output
    ob.BatchedGemm(L, "attn_context_v", F, b * heads_t, s, d, s, 1, eb * T * g * d / t);  // saves V
    scale_attention_core(core_begin);
  }
  ob.Quantize(L, "attn_out_proj_input_quantize", F, T * ad_t);
  ob.Linear(L, "attn_out_proj", F, T, h, ad_t);
  // Projection input (= attention output): flash attention's backward keeps the 16-bit output
  // too when the projection saves a quantized copy.
  L.back().saved_bytes = q * T * ad_t + (low && c.flash_attention ? eb * T * ad_t : 0.0);
  ob.Collective(L, sp ? "tp_reduce_scatter_attn" : "tp_all_reduce_attn", F, sp ? rs : ar, act);
  ob.Memory(L, m.dropout ? "dropout_residual_attn" : "residual_attn", F, 3 * act / rep + mask, mask);
  }

  void DenseMlpForward() {
  ob.Memory(L, "post_attn_norm", F, fused_norm_bytes, act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_mlp", F, ag, act);
  if (sp) ob.Quantize(L, "mlp_up_input_quantize", F, T * h);
  ob.Linear(L, "mlp_up", F, T, mlp_up_n, h);
  L.back().saved_bytes = q * T * h / rep;  // MLP input
  ob.Memory(L, swiglu ? "swiglu" : "gelu", F, eb * T * mlp_up_n + eb * T * f / t,
            eb * T * mlp_up_n + q * T * f / t);  // activation input, and output (the down GEMM's input)
  ob.Quantize(L, "mlp_down_input_quantize", F, T * f / t);
  ob.Linear(L, "mlp_down", F, T, h, f / t);
  ob.Collective(L, sp ? "tp_reduce_scatter_mlp" : "tp_all_reduce_mlp", F, sp ? rs : ar, act);
  ob.Memory(L, m.dropout ? "dropout_residual_mlp" : "residual_mlp", F, 3 * act / rep + mask, mask);
  }

  void DenseMlpBackward() {
  ob.Memory(L, m.dropout ? "dropout_residual_mlp_bwd" : "residual_mlp_bwd", B, 3 * act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_mlp_bwd", B, ag, act);  // grad of reduce-scatter
  ob.Quantize(L, "mlp_down_grad_quantize", B, T * h);
  ob.Linear(L, "mlp_down_dgrad", B, T, f / t, h);
  ob.Linear(L, "mlp_down_wgrad", W, f / t, h, T);
  ob.Memory(L, swiglu ? "swiglu_bwd" : "gelu_bwd", B, 2 * (eb * T * mlp_up_n + eb * T * f / t));
  if (sp) {
    // Re-gather the saved (sharded) MLP input for the weight gradient, asynchronously while the
    // data-gradient GEMM runs (Korthikanti et al. 2022 section 4.2.2; Megatron-LM).
    ob.Collective(L, "sp_all_gather_mlp_input_bwd", B, ag, act);
    L.back().overlapped = true;
  }
  ob.Quantize(L, "mlp_up_grad_quantize", B, T * mlp_up_n);
  ob.Linear(L, "mlp_up_dgrad", B, T, h, mlp_up_n);
  ob.Linear(L, "mlp_up_wgrad", W, mlp_up_n, h, T);
  ob.Collective(L, sp ? "sp_reduce_scatter_mlp_bwd" : "tp_all_reduce_mlp_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(L, "mlp_up_wgrad");
  ob.Memory(L, "post_attn_norm_bwd", B, 2 * norm_bytes);
  }

  void AttentionBackward() {
    if (m.mla.enabled()) {
      MlaBackward();
      return;
    }
  ob.Memory(L, m.dropout ? "dropout_residual_attn_bwd" : "residual_attn_bwd", B, 3 * act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn_bwd", B, ag, act);
  ob.Quantize(L, "attn_out_proj_grad_quantize", B, T * h);
  ob.Linear(L, "attn_out_proj_dgrad", B, T, ad_t, h);
  ob.Linear(L, "attn_out_proj_wgrad", W, ad_t, h, T);
  if (c.flash_attention && x.cp != nullptr && x.cp->cp > 1) {
    CpAttentionBackward(ob, L, x, prof, &out);
  } else if (c.flash_attention) {
    ob.Attention(L, "flash_attention_bwd", B, 2.5 * 0.5 * 4 * b * s * s * a * d / t, s);
    L.back().bytes = eb * T * d * (4 * a + 4 * g) / t;  // reads Q, K, V, O, dO; writes dQ, dK, dV
  } else {
    const double heads_t = a / t, scores = b * heads_t * s * s;
    const std::size_t core_begin = L.size();
    ob.BatchedGemm(L, "attn_context_v_bwd", B, b * heads_t, s, s, d, 2);
    if (m.dropout) ob.Memory(L, "attn_dropout_bwd", B, (2 * eb + 1) * scores);
    ob.Memory(L, "softmax_bwd", B, 3 * eb * scores);
    ob.BatchedGemm(L, "attn_scores_qk_bwd", B, b * heads_t, s, d, s, 2);
    scale_attention_core(core_begin);
  }
  if (sp) {
    ob.Collective(L, "sp_all_gather_attn_input_bwd", B, ag, act);
    L.back().overlapped = true;
  }
  if (m.qk_layernorm || m.qk_l2_norm) ob.Memory(L, "qk_layernorm_bwd", B, 3 * qk_bytes);  // reads input and gradient, writes one
  ob.Quantize(L, "qkv_proj_grad_quantize", B, T * qkv_n);
  ob.Linear(L, "qkv_proj_dgrad", B, T, h, qkv_n);
  ob.Linear(L, "qkv_proj_wgrad", W, qkv_n, h, T);
  ob.Collective(L, sp ? "sp_reduce_scatter_attn_bwd" : "tp_all_reduce_attn_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(L, "qkv_proj_wgrad");
  ob.Memory(L, "input_norm_bwd", B, 2 * norm_bytes);
  }

  void MoeMlpForward();
  void MoeMlpBackward();
  void MlaForward();
  void MlaBackward();

  /// MLA's sizes on one GPU: query/key head dim dqk (qk + rope), value head dim dv, the q and kv
  /// ranks, the rope dim, the query up projection's n (a/t heads of dqk) and the kv up
  /// projection's (a/t heads of qk + v).
  struct Mla {
    double dqk, dv, ql, kvl, rope, q_heads, kv_up_n;
  };
  Mla MlaDims() const {
    const MlaSpec& x2 = m.mla;
    const double dqk = static_cast<double>(x2.qk_head_dim + x2.qk_pos_emb_head_dim), dv = static_cast<double>(x2.v_head_dim);
    return {dqk,
            dv,
            static_cast<double>(x2.q_lora_rank),
            static_cast<double>(x2.kv_lora_rank),
            static_cast<double>(x2.qk_pos_emb_head_dim),
            a * dqk / t,
            a * (static_cast<double>(x2.qk_head_dim) + dv) / t};
  }

  /// TP communication overlap, recompute and the layer's saved bytes.
  void Finish() {
  // Transformer Engine's userbuffers (--tp-comm-overlap) pipeline the sequence-parallel
  // all-gathers with the GEMMs they feed and the reduce-scatters with the GEMMs they reduce
  // (forward), and the output-gradient all-gathers with the data-gradient GEMMs (backward); the
  // data-gradient reduce-scatters run beside the weight-gradient GEMMs as before (bulk overlap).
  if (c.tp_comm_overlap && sp) {
    ob.OverlapChunked(L, "sp_all_gather_attn", "qkv_proj");
    ob.OverlapChunked(L, "tp_reduce_scatter_attn", "attn_out_proj");
    ob.OverlapChunked(L, "sp_all_gather_mlp", "mlp_up");
    ob.OverlapChunked(L, "tp_reduce_scatter_mlp", "mlp_down");
    ob.OverlapChunked(L, "sp_all_gather_mlp_bwd", "mlp_down_dgrad");
    ob.OverlapChunked(L, "sp_all_gather_attn_bwd", "attn_out_proj_dgrad");
  }

  if (c.TorchOpCheckpointing()) {
    TorchOpRecompute();
    return;
  }
  // ---- recompute before backward
  // Full: rerun the whole forward. Selective: the modules of --recompute-modules (Megatron-Core;
  // default core_attn, Korthikanti et al. 2022 section 5's attention core).
  std::vector<Op> recompute;
  recompute.reserve(L.size());
  for (auto& o : L) {
    if (o.pass != F || !(c.recompute == Recompute::kFull || (RecomputeModuleOf(o.name) & SelectiveModules()) != 0)) continue;
    o.rebuilt = o.saved_bytes > 0;
    Op r = o;
    r.rebuilt = false;
    r.pass = Pass::kRecompute;
    r.name = o.name + "_recompute";
    r.saved_bytes = 0;
    recompute.push_back(std::move(r));
  }
  L.insert(L.end(), std::make_move_iterator(recompute.begin()), std::make_move_iterator(recompute.end()));

  // Per-layer saved bytes after the recompute policy.
  const double layer_saved_all = SavedBytes(L);
  out.saved_bytes = layer_saved_all;
  if (c.recompute == Recompute::kFull) {
    out.saved_bytes = act / rep;  // only the layer input is checkpointed
    out.checkpoint_bytes = out.saved_bytes;
    // One layer's activations rebuilt during its backward.
    out.transient_bytes = std::max(out.transient_bytes, layer_saved_all);
  } else if (c.recompute == Recompute::kSelective) {
    const double dropped = SelectiveDroppedBytes();
    out.saved_bytes = layer_saved_all - dropped;
    out.transient_bytes = std::max(out.transient_bytes, dropped);  // rebuilt during the layer's backward
  }
  }

  /// The share of forward op `o` that torchtitan's per-op policy reruns before the backward
  /// (kRecomputeTorchOps; 1: all of it, 0: its output is kept or not needed). Its save list
  /// holds aten.mm but every second one a block runs, flash/efficient attention and functional
  /// reduce-scatters: of Llama's wq, wk, wv (qkv_proj) it reruns wk, then wo (attn_out_proj)
  /// and w3 (the up half of a gated mlp_up; w1 is the fifth mm, fc1 of an ungated MLP too).
  /// torchao's float8 linears reach the policy as aten.mm (the checkpoint's dispatch mode runs
  /// before the float8 tensor's own handler), so the rule holds in fp8. The recompute stops
  /// once the backward has what it needs (PyTorch's early stop): the down projection (w2 is
  /// kept; an ungated fc2's output is not needed), the cast of its input, its reduction and the
  /// last residual add do not rerun. Norms, activations, casts, the first residual add and the all-gathers (or the
  /// attention's all-reduce) rerun, as does the unfused attention core.
  double TorchOpRecomputedShare(const Op& o) const {
    if (RecomputeModuleOf(o.name) == kRecomputeCoreAttn) return c.flash_attention ? 0.0 : 1.0;
    if (o.name == "mlp_down_input_quantize" || o.name == "mlp_down" || o.name == "tp_reduce_scatter_mlp" ||
        o.name == "tp_all_reduce_mlp" || o.name == "residual_mlp" || o.name == "dropout_residual_mlp") {
      return 0.0;
    }
    if (o.kind == OpKind::kCollective) return o.collective == rs ? 0.0 : 1.0;
    if (o.kind != OpKind::kGemm) return 1.0;
    if (o.name == "qkv_proj") return g / (a + 2 * g);
    if (o.name == "mlp_up") return swiglu ? 0.5 : 0.0;
    return 1.0;
  }

  /// torchtitan's per-op selective checkpointing (kRecomputeTorchOps): the forward ops (or the
  /// GEMM columns) TorchOpRecomputedShare gives rerun before the block's backward. The block
  /// keeps its input (the input norm's saved input), the outputs of the ops on the save list
  /// (the wq, wv and w1 (fc1) mm outputs, w2's (unreduced: T x h on each tensor-parallel
  /// rank), the reduce-scatters' under sequence parallelism) and, with flash attention, the
  /// attention output and its fp32 log-sum-exp, in the model dtype whatever the linear format.
  /// Of what the backward reads, the block input, the attention output (the projection's
  /// 16-bit input) and the activation's gate input are among them; the rest (the norms'
  /// outputs, Q, K and V as attention reads them, the activation's output, the quantized
  /// copies) is rebuilt during the block's backward.
  void TorchOpRecompute() {
    std::vector<Op> recompute;
    for (const Op& o : L) {
      const double share = o.pass == F ? TorchOpRecomputedShare(o) : 0.0;
      if (share <= 0) continue;
      if (share < 1) {
        ob.Linear(recompute, o.name + "_recompute", Pass::kRecompute, o.m, o.n * share, o.k);
        continue;
      }
      Op r = o;
      r.pass = Pass::kRecompute;
      r.name = o.name + "_recompute";
      r.saved_bytes = 0;
      recompute.push_back(std::move(r));
    }
    const bool fa = c.flash_attention;
    const double attn_out = eb * T * ad_t, gate_out = eb * T * f / t;
    // wq, wv, w1 (fc1) and w2 outputs, the reduce-scatters' outputs, the log-sum-exp.
    double kept = eb * T * (ad_t + g * d / t) + gate_out + (swiglu ? eb * T * h : 0.0) + (sp ? 2 * act / rep : 0.0) +
                  (fa ? 4 * T * a / t : 0.0);
    double kept_by_ops = 0;
    for (Op& o : L) {
      if (o.pass != F || o.saved_bytes <= 0) continue;
      if (o.name == "swiglu" || o.name == "gelu") o.saved_bytes -= gate_out;  // kept above
      // The block's input; with flash attention in 16 bits, the projection's input is the
      // attention output as it was kept.
      if (o.name == "input_norm" || (o.name == "attn_out_proj" && fa && !low)) {
        kept_by_ops += o.saved_bytes;
        continue;
      }
      if (o.name == "attn_out_proj" && fa) {  // low precision: the 16-bit output kept, its cast rebuilt
        o.saved_bytes -= attn_out;
        kept += attn_out;
      }
      o.rebuilt = true;
    }
    L.insert(L.end(), std::make_move_iterator(recompute.begin()), std::make_move_iterator(recompute.end()));
    out.checkpoint_bytes = kept;
    out.saved_bytes = kept + kept_by_ops;
    out.transient_bytes = std::max(out.transient_bytes, SavedBytes(L) - kept_by_ops);
  }

  /// Megatron-Core's EP A2A overlap (--overlap-moe-expert-parallel-comm, combined 1F1B): a
  /// forward and another micro-batch's backward of the layer run as one, in four steps, each
  /// one's token exchange beside the other's compute: the backward's combine beside the
  /// forward's attention, the forward's dispatch beside the backward's experts, the backward's
  /// dispatch beside the forward's experts, the forward's combine beside the backward's
  /// attention. What a step's compute covers is hidden; the compute slows by the profile's
  /// overlap factor for it (the exchange kernels take SMs).
  void A2aOverlapSavings() {
    auto dur = [&](const char* n) {
      for (const Op& o : L) {
        if (o.name == n) return o.duration_s;
      }
      return 0.0;
    };
    // Compute (not the exchanges themselves) of a pass between two named ops, or from/to the ends.
    auto span = [&](Pass p, const char* from, const char* to) {
      double sum = 0;
      bool in = from == nullptr;
      for (const Op& o : L) {
        if (from != nullptr && o.name == from) { in = true; continue; }
        if (to != nullptr && o.name == to) break;
        const bool pass_ok = p == F ? o.pass == F : (o.pass == B || o.pass == W);
        if (in && pass_ok && !o.overlapped && o.name.find("moe_dispatch") == std::string::npos &&
            o.name.find("moe_combine") == std::string::npos) {
          sum += o.duration_s;
        }
      }
      return sum;
    };
    const double attn_f = span(F, nullptr, "post_attn_norm"), mlp_f = span(F, "moe_dispatch", "moe_combine");
    const double mlp_b = span(B, "moe_combine_bwd", "moe_dispatch_bwd"), attn_b = span(B, "post_attn_norm_bwd", nullptr);
    const double slow = moe->overlap_slowdown;
    auto hidden = [&](double comm, double compute) { return std::min(comm, compute) * (1 - slow); };
    out.a2a_overlap_fwd_s = hidden(dur("moe_dispatch"), mlp_b) + hidden(dur("moe_combine"), attn_b);
    out.a2a_overlap_bwd_s = hidden(dur("moe_combine_bwd"), attn_f) + hidden(dur("moe_dispatch_bwd"), mlp_f);
  }

  /// Megatron's min_offloaded_tensor_size: tensors of fewer elements stay on the GPU.
  static constexpr double kMinOffloadElements = 1024.0 * 1024.0;
  static double Eligible(double elements, double bytes) { return elements >= kMinOffloadElements ? bytes : 0.0; }

  /// The offload module (OffloadModule bit) whose saved tensors forward op `o` holds, 0 for none.
  unsigned OffloadModuleOf(const Op& o) const {
    if (o.name == "moe_swiglu" || o.name == "moe_gelu") return kOffloadMoeAct;
    if (o.name == "moe_expert_up") return kOffloadExpertFc1;
    if (o.name == "attn_out_proj") return kOffloadAttnProj;
    return RecomputeModuleOf(o.name) == kRecomputeCoreAttn ? static_cast<unsigned>(kOffloadCoreAttn) : 0u;
  }

  /// The offload module whose backward backward-pass op `o` runs, 0 for none.
  unsigned OffloadModuleOfBackward(const Op& o) const {
    const std::string& n = o.name;
    if (n == "moe_swiglu_bwd" || n == "moe_gelu_bwd") return kOffloadMoeAct;
    if (n.rfind("moe_expert_up_", 0) == 0) return kOffloadExpertFc1;
    if (n.rfind("attn_out_proj_", 0) == 0) return kOffloadAttnProj;
    const std::string base = n.size() > 4 && n.compare(n.size() - 4, 4, "_bwd") == 0 ? n.substr(0, n.size() - 4) : n;
    return RecomputeModuleOf(base) == kRecomputeCoreAttn ? static_cast<unsigned>(kOffloadCoreAttn) : 0u;
  }

  /// Bytes of forward op `o`'s saved tensors that the offload modules `mods` send to host memory:
  /// what the module saves and the recompute policy keeps, tensor by tensor from 1M elements
  /// (a module that selective recompute reruns saves nothing; moe_act keeps its input under its
  /// own recompute, which drops only its output). expert_fc1 under a per-tensor FP8 recipe saves
  /// the 16-bit input instead of its FP8 copy (experts.py: set_save_original_input unless MXFP8
  /// or NVFP4) and requantizes it in the backward: `o`'s saved bytes become the 16-bit input.
  double OffloadedBytesOf(Op& o, unsigned mods) const {
    const unsigned mod = o.pass == F && o.saved_bytes > 0 ? OffloadModuleOf(o) & mods : 0u;
    if (mod == kOffloadMoeAct) {
      const double elements = moe_act_in_saved / eb;
      return (SelectiveModules() & kRecomputeMoe) ? 0.0 : Eligible(elements, std::min(o.saved_bytes, moe_act_in_saved));
    }
    if (mod == 0 || o.rebuilt) return 0;
    if (mod == kOffloadExpertFc1) {
      const double elements = moe->local_experts * moe->tokens_per_expert * h;
      if (low && c.precision != Precision::kMxfp8 && c.precision != Precision::kNvfp4) o.saved_bytes = eb * elements;
      return Eligible(elements, o.saved_bytes);
    }
    if (mod == kOffloadAttnProj) return Eligible(T * ad_t, o.saved_bytes);
    if (o.name == "flash_attention" && !m.mla.enabled()) {
      // Q (a/t heads) and K, V (g/t groups each), in the model dtype; the fp32 log-sum-exp is small.
      const double q_el = T * ad_t, kv_el = T * g * d / t;
      return std::min(o.saved_bytes, Eligible(q_el, eb * q_el) + 2 * Eligible(kv_el, eb * kv_el));
    }
    // MLA's flash attention and the context-parallel cores: their 16-bit tensors as one, the fp32
    // log-sum-exp apart (under 1M elements it stays).
    const double lse = o.name == "flash_attention" ? 4 * T * a / t : 0.0;
    const double rest = std::max(0.0, o.saved_bytes - lse);
    return Eligible(rest / eb, rest) + Eligible(lse / 4, std::min(lse, o.saved_bytes));
  }

  /// Megatron-Core's fine-grained activation offloading (--offload-modules;
  /// fine_grained_activation_offload.py). Each offloaded module is a group: after its forward its
  /// saved tensors are copied to pinned host memory on a device-to-host stream (the forward never
  /// waits; the memory is released when the copy has run, record_stream). In the backward, when
  /// a group's backward ends, the group before it in forward order starts its reload on a
  /// host-to-device stream, and that group's backward waits for it: a group's reload hides
  /// behind the backward ops between the two groups (none between core_attn and attn_proj, or
  /// between expert_fc1 and moe_act, which are adjacent), the layer's first group's behind the
  /// rest of the layer above and this layer's backward up to it (with the layer's recompute).
  /// What does not fit is exposed (`activation_reload`). Memory: the layer keeps the rest, and the
  /// share of the offloaded tensors a copy slower than the forward has not yet moved; in its
  /// backward, its own reloaded tensors and the next prefetched ones are on the GPU (two layers'
  /// worth at most); in the forward, the copy in flight. Op::offloaded_bytes is what leaves.
  void Offload() {
    if (c.offload_modules == 0 || c.recompute == Recompute::kFull || x.host_copy_GBps <= 0) return;
    const double rate = x.host_copy_GBps * 1e9;
    double forward_s = 0;
    const OffloadGroups groups = MarkOffloadedTensors(&forward_s);
    if (groups.total_bytes <= 0) return;
    const double copy_s = groups.total_bytes / rate;
    const double exposed = ReloadExposed(groups, rate);
    Op off;
    off.name = "activation_offload";
    off.kind = OpKind::kMemory;
    off.pass = F;
    off.bytes = groups.total_bytes;
    off.hidden_s = copy_s;
    Op reload = off;
    reload.name = "activation_reload";
    reload.pass = B;
    reload.duration_s = exposed;
    reload.hidden_s = copy_s - exposed;
    const auto first_backward = std::find_if(L.begin(), L.end(), [](const Op& o) { return o.pass != F; });
    const auto at = L.insert(first_backward, reload);
    L.insert(at, off);
    // A copy longer than the layer's forward falls behind by 1 - forward / copy of each layer's
    // bytes; forwards run back to back up to the activation peak (the pipeline's warm-up), so
    // that share of every pass's offloaded tensors is still on the GPU there (record_stream keeps
    // a tensor until its copy has run). The rest leaves.
    const double backlog = std::max(0.0, 1.0 - forward_s / copy_s);
    double freed = 0;
    for (Op& o : L) {
      o.offloaded_bytes *= 1.0 - backlog;
      freed += o.offloaded_bytes;
    }
    out.saved_bytes -= freed;
    out.transient_bytes += 2 * groups.total_bytes;
    out.fwd_transient_bytes = std::max(out.fwd_transient_bytes, groups.total_bytes);
  }

  /// The layer's offload groups in forward order with their bytes.
  struct OffloadGroups {
    std::vector<unsigned> order;  ///< OffloadModule bits, forward order
    std::map<unsigned, double> bytes;
    double total_bytes = 0;
  };

  /// Sets every op's Op::offloaded_bytes (OffloadedBytesOf) and groups them; `forward_s` gets the
  /// layer's forward time.
  OffloadGroups MarkOffloadedTensors(double* forward_s) {
    OffloadGroups grp;
    for (Op& o : L) {
      const double saved_before = o.saved_bytes;
      o.offloaded_bytes = OffloadedBytesOf(o, c.offload_modules);
      out.saved_bytes += o.saved_bytes - saved_before;  // expert_fc1's 16-bit input under FP8
      if (o.pass == F && !o.overlapped) *forward_s += o.duration_s;
      if (o.offloaded_bytes <= 0) continue;
      const unsigned mod = OffloadModuleOf(o);
      if (grp.bytes.count(mod) == 0) grp.order.push_back(mod);
      grp.bytes[mod] += o.offloaded_bytes;
      grp.total_bytes += o.offloaded_bytes;
    }
    return grp;
  }

  /// The reloads' exposed time in one layer's backward: per group, max(0, copy - its window),
  /// the window being the backward between the next group's (forward order) and its own, or for
  /// the layer's first group the rest of the layer above, this layer's backward up to it and the
  /// recompute (Offload).
  double ReloadExposed(const OffloadGroups& grp, double rate) const {
    // The backward in execution order (pass B and W, as L lists them) and each group's span in it.
    std::vector<double> bwd;
    std::map<unsigned, std::pair<std::size_t, std::size_t>> span;
    double recompute_s = 0;
    for (const Op& o : L) {
      if (o.pass == Pass::kRecompute) recompute_s += o.duration_s;
      // ZB-H1 defers the weight-gradient passes to later slots: they are not in these windows.
      if ((o.pass != B && o.pass != W) || o.overlapped || (o.pass == W && c.schedule == Schedule::kZbH1)) continue;
      const unsigned mod = OffloadModuleOfBackward(o);
      if (grp.bytes.count(mod) != 0) {
        auto it = span.find(mod);
        if (it == span.end()) span[mod] = {bwd.size(), bwd.size()};
        else it->second.second = bwd.size();
      }
      bwd.push_back(o.duration_s);
    }
    auto sum = [&](std::size_t from, std::size_t to) {  // [from, to)
      double total = 0;
      for (std::size_t j = from; j < to && j < bwd.size(); ++j) total += bwd[j];
      return total;
    };
    const std::vector<unsigned>& order = grp.order;
    double exposed = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      double window = 0;
      if (span.count(order[i]) == 0 || span.count(order.front()) == 0) {
        window = sum(0, bwd.size()) + recompute_s;  // no backward op found for the group: the layer's
      } else if (i + 1 < order.size() && span.count(order[i + 1]) != 0) {
        const std::size_t after = span.at(order[i + 1]).second + 1, until = span.at(order[i]).first;
        window = after < until ? sum(after, until) : 0.0;
      } else {
        window = sum(span.at(order.front()).second + 1, bwd.size()) + sum(0, span.at(order[i]).first) + recompute_s;
      }
      exposed += std::max(0.0, grp.bytes.at(order[i]) / rate - window);
    }
    return exposed;
  }

  /// The selective-recompute modules that apply to this layer (RecomputeModule bits; 0 unless
  /// --recompute selective): layernorm only where the norm is a module of its own (the MoE
  /// layer's pre-MLP norm, MLA's input norm), mlp only in dense layers, the MoE ones only in MoE
  /// layers, mla_up_proj only with MLA.
  unsigned SelectiveModules() const {
    if (c.recompute != Recompute::kSelective) return 0;
    unsigned mods = c.recompute_modules;
    if (moe != nullptr) mods &= ~static_cast<unsigned>(kRecomputeMlp);
    else mods &= ~static_cast<unsigned>(kRecomputeMoe | kRecomputeMoeAct | kRecomputeSharedExperts);
    if (!m.mla.enabled()) mods &= ~static_cast<unsigned>(kRecomputeMlaUpProj);
    return mods;
  }

  /// The module an op of this layer belongs to (RecomputeModule bits, 0 for none). A checkpointed
  /// module (moe) contains the output-discarding ones inside it (moe_act, shared_experts).
  unsigned RecomputeModuleOf(const std::string& n) const {
    auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
    if (n == "flash_attention" || n == "attn_scores_qk" || n == "softmax" || n == "attn_dropout" ||
        n == "attn_context_v" || n == "cp_all_to_all_qkv" || n == "cp_all_gather_kv" || n == "cp_ring_kv_exchange" ||
        n == "cp_all_to_all_out") {
      return kRecomputeCoreAttn;
    }
    if (n == "post_attn_norm") return moe != nullptr ? kRecomputeLayernorm : kRecomputeMlp;
    if (n == "input_norm") return m.mla.enabled() ? static_cast<unsigned>(kRecomputeLayernorm) : 0u;
    if (n == "mla_q_up" || n == "mla_kv_up") return kRecomputeMlaUpProj;
    if (n == "moe_swiglu" || n == "moe_gelu") return kRecomputeMoeAct | kRecomputeMoe;
    if (starts("moe_shared_")) return kRecomputeSharedExperts | kRecomputeMoe;
    if (starts("moe_")) return kRecomputeMoe;
    if (starts("mlp_") || n == "swiglu" || n == "gelu" || n == "sp_all_gather_mlp" || n == "tp_reduce_scatter_mlp" ||
        n == "tp_all_reduce_mlp") {
      return kRecomputeMlp;
    }
    return 0;
  }

  /// Bytes selective recompute does not keep from forward to backward: a checkpointed module's
  /// saved tensors but its input (mlp: the MLP's GEMM inputs and activation; moe: everything the
  /// router, experts and shared experts save, keeping the norm output unless layernorm discards
  /// it too; core_attn: the unfused core's s x s tensors, flash attention keeps Q, K, V as the
  /// checkpoint's inputs), and an output-discarding op's output (layernorm: the norm output
  /// the next GEMMs would save; moe_act: the experts' activation output; mla_up_proj: the Q, K,
  /// V heads).
  double SelectiveDroppedBytes() const {
    const unsigned mods = SelectiveModules();
    double dropped = 0;
    auto saved_of = [&](unsigned module) {
      double bytes = 0;
      for (const Op& o : L) {
        if (o.pass == F && (RecomputeModuleOf(o.name) & module) != 0) bytes += o.saved_bytes;
      }
      return bytes;
    };
    if ((mods & kRecomputeCoreAttn) && !c.flash_attention) {
      const double scores = b * (a / t) * s * s;
      dropped += eb * scores + (m.dropout ? (eb + 1) * scores : 0);
    }
    if (mods & kRecomputeMlp) dropped += saved_of(kRecomputeMlp) - act / rep;  // keeps the norm's input
    if (mods & kRecomputeMoe) {
      dropped += saved_of(kRecomputeMoe) - ((mods & kRecomputeLayernorm) ? 0.0 : norm_out_saved);
    } else {
      if (mods & kRecomputeSharedExperts) dropped += shared_saved;
      if (mods & kRecomputeMoeAct) dropped += moe_act_out_saved;
    }
    if ((mods & kRecomputeLayernorm) && !(mods & kRecomputeMoe)) dropped += norm_out_saved;
    if (mods & kRecomputeLayernorm) dropped += attn_norm_out_saved;
    if (mods & kRecomputeMlaUpProj) dropped += mla_heads_saved;
    return std::max(0.0, dropped);
  }

  const Model& m;
  const ParallelConfig& c;
  const LayerShape& x;
  const HardwareProfile& prof;
  OpBuilder& ob;
  const MoePlan* moe;
  LayerOps out;
  std::vector<Op>& L;
  const double b = x.b, s = x.s, h = x.h, f = x.f, a = x.a, g = x.g, d = x.d, t = x.t, T = x.T, rep = x.rep,
               eb = x.eb, drop = x.drop;
  const bool sp = x.sp, swiglu = x.swiglu;
  const LinearFormat& lf = ob.linear_format();
  const bool low = lf.low_precision();
  /// A linear GEMM's saved input: the quantized (column-wise) copy under a low-precision format.
  const double q = low ? lf.CopyBytes() : eb;
  static constexpr Pass F = Pass::kForward, B = Pass::kBackwardInput, W = Pass::kBackwardWeight;
  const double act = eb * T * h;  ///< one hidden-state tensor in the model dtype, unsharded
  const double norm_bytes = 2 * act / rep;  ///< read + write
  /// Without a sequence-parallel gather between them, the norm writes the quantized copies of
  /// its output itself (Transformer Engine's LayerNormLinear), instead of a 16-bit output.
  const double fused_norm_bytes = low && !sp ? act / rep + lf.CastWriteBytes() * T * h / rep : norm_bytes;
  static constexpr CollectiveOp ag = CollectiveOp::kAllGather, rs = CollectiveOp::kReduceScatter,
                                ar = CollectiveOp::kAllReduce;
  const double qkv_n = (a + 2 * g) * d / t;
  const double ad_t = a * d / t;
  const double qk_bytes = eb * T * (a + g) * d / t;  ///< the queries and keys on one GPU
  const double mlp_up_n = (swiglu ? 2 : 1) * f / t;
  const double mask = drop * T * h / rep;  ///< 1-byte dropout mask of a hidden-state tensor
  /// Megatron-LM's async input-gradient collective hides behind the weight-gradient GEMM that
  /// follows it; ZB-H1 defers that GEMM (W) to a later slot, so nothing is hidden there.
  const bool hide_tp_grad = c.async_tp_grad_reduce && c.schedule != Schedule::kZbH1;
  double moe_act_in_saved = 0;  ///< the experts' activation's saved input (the first GEMM's output)
  double mlp_weight_inputs = 0;  ///< the MLP's weight-gradient GEMM inputs
  /// What selective recompute can discard (SelectiveDroppedBytes): the output of the norm that is
  /// a module of its own, as the next GEMMs save it; the experts' activation output; the shared
  /// experts' saved tensors; MLA's Q, K, V heads.
  double norm_out_saved = 0, attn_norm_out_saved = 0, moe_act_out_saved = 0, shared_saved = 0, mla_heads_saved = 0;
};

/// Multi-head latent attention's forward (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention): the
/// query and key/value down projections (replicated on the TP ranks, over the gathered sequence)
/// with their norms, the up projections to a/t heads, causal flash attention over query/key heads
/// of qk + rope dims and value heads of v dims, the output projection.
void LayerBuilder::MlaForward() {
  const auto [dqk, dv, ql, kvl, rope, q_heads, kv_up_n] = MlaDims();
  ob.Memory(L, "input_norm", F, fused_norm_bytes, act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn", F, ag, act);
  attn_norm_out_saved = q * T * h / rep;  // the down projections' input
  if (ql > 0) {
    ob.Linear(L, "mla_q_down", F, T, ql, h);
    L.back().saved_bytes = q * T * h / rep;
    ob.Memory(L, "mla_q_norm", F, 2 * eb * T * ql, q * T * ql);
    ob.Linear(L, "mla_q_up", F, T, q_heads, ql);
  } else {
    ob.Linear(L, "mla_q_proj", F, T, q_heads, h);
    L.back().saved_bytes = q * T * h / rep;
  }
  ob.Linear(L, "mla_kv_down", F, T, kvl + rope, h);
  ob.Memory(L, "mla_kv_norm", F, 2 * eb * T * kvl, q * T * kvl);
  ob.Linear(L, "mla_kv_up", F, T, kv_up_n, kvl);
  // Q, K (qk + rope dims a head), V, and the fp32 log-sum-exp, kept for the attention backward.
  const double saved = eb * T * a * (2 * dqk + dv) / t + 4 * T * a / t;
  mla_heads_saved = eb * T * a * (2 * dqk + dv) / t;
  if (x.cp != nullptr && x.cp->cp > 1) {
    LayerShape y = x;
    y.d = 0.5 * (dqk + dv);
    y.g = a;
    CpAttentionForward(ob, L, y, prof, saved, &out);
  } else {
    ob.Attention(L, "flash_attention", F, 0.5 * 2 * b * s * s * a * (dqk + dv) / t, s, saved);
    L.back().bytes = eb * T * a * (2 * dqk + 2 * dv) / t;
  }
  ob.Quantize(L, "attn_out_proj_input_quantize", F, T * a * dv / t);
  ob.Linear(L, "attn_out_proj", F, T, h, a * dv / t);
  L.back().saved_bytes = q * T * a * dv / t + (low ? eb * T * a * dv / t : 0.0);
  ob.Collective(L, sp ? "tp_reduce_scatter_attn" : "tp_all_reduce_attn", F, sp ? rs : ar, act);
  ob.Memory(L, m.dropout ? "dropout_residual_attn" : "residual_attn", F, 3 * act / rep + mask, mask);
}

/// MLA's backward: the mirror of its forward, flash attention at 2.5x the forward FLOPs.
void LayerBuilder::MlaBackward() {
  const auto [dqk, dv, ql, kvl, rope, q_heads, kv_up_n] = MlaDims();
  ob.Memory(L, m.dropout ? "dropout_residual_attn_bwd" : "residual_attn_bwd", B, 3 * act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn_bwd", B, ag, act);
  ob.Linear(L, "attn_out_proj_dgrad", B, T, a * dv / t, h);
  ob.Linear(L, "attn_out_proj_wgrad", W, a * dv / t, h, T);
  if (x.cp != nullptr && x.cp->cp > 1) {
    LayerShape y = x;
    y.d = 0.5 * (dqk + dv);
    y.g = a;
    CpAttentionBackward(ob, L, y, prof, &out);
  } else {
    ob.Attention(L, "flash_attention_bwd", B, 2.5 * 0.5 * 2 * b * s * s * a * (dqk + dv) / t, s);
    L.back().bytes = eb * T * a * (4 * dqk + 4 * dv) / t;
  }
  ob.Linear(L, "mla_kv_up_dgrad", B, T, kvl, kv_up_n);
  ob.Linear(L, "mla_kv_up_wgrad", W, kv_up_n, kvl, T);
  ob.Memory(L, "mla_kv_norm_bwd", B, 3 * eb * T * kvl);
  ob.Linear(L, "mla_kv_down_dgrad", B, T, h, kvl + rope);
  ob.Linear(L, "mla_kv_down_wgrad", W, kvl + rope, h, T);
  if (ql > 0) {
    ob.Linear(L, "mla_q_up_dgrad", B, T, ql, q_heads);
    ob.Linear(L, "mla_q_up_wgrad", W, q_heads, ql, T);
    ob.Memory(L, "mla_q_norm_bwd", B, 3 * eb * T * ql);
    ob.Linear(L, "mla_q_down_dgrad", B, T, h, ql);
    ob.Linear(L, "mla_q_down_wgrad", W, ql, h, T);
  } else {
    ob.Linear(L, "mla_q_proj_dgrad", B, T, h, q_heads);
    ob.Linear(L, "mla_q_proj_wgrad", W, q_heads, h, T);
  }
  ob.Collective(L, sp ? "sp_reduce_scatter_attn_bwd" : "tp_all_reduce_attn_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(L, "mla_kv_down_wgrad");
  ob.Memory(L, "input_norm_bwd", B, 2 * norm_bytes);
}

/// The MoE MLP's forward on one GPU (docs/simulator.md, "Mixture of experts"): the router
/// (h x E GEMM, bf16, and its top-k), the permutation of the routed tokens into k copies, their
/// dispatch to the experts' ranks, the local experts as grouped GEMMs on the busiest rank's tokens
/// (gathered over the expert-tensor-parallel group when etp > 1), the combine back and the
/// weighted sum; shared experts run as a dense MLP of their size on the TP group.
void LayerBuilder::MoeMlpForward() {
  const MoePlan& e = *moe;
  const MoeSpec& spec = m.moe;
  const double E = static_cast<double>(spec.num_experts), k = static_cast<double>(spec.top_k);
  const double Tr = e.tokens_routed, tok = e.local_experts * e.tokens_per_expert;  // tokens at the experts
  const double fe = static_cast<double>(spec.ffn_hidden_size) / e.etp, up_n = (swiglu ? 2 : 1) * fe;
  ob.Memory(L, "post_attn_norm", F, fused_norm_bytes, act / rep);
  ob.Gemm(L, "moe_router", F, Tr, E, h);
  // The router's input (the norm output; the shared experts save the same tensor) for its
  // weight gradient, and the fp32 logits for the softmax/top-k backward.
  norm_out_saved = eb * Tr * h;
  L.back().saved_bytes = norm_out_saved + 4 * Tr * E;
  ob.Memory(L, "moe_router_topk", F, 3 * 4 * Tr * E, 4 * Tr * k);
  ob.Memory(L, "moe_permute", F, eb * Tr * h * (1 + k));  // read the tokens, write their k copies
  const CollectiveOp dispatch = e.dispatcher == MoeDispatcher::kAllGather ? ag : CollectiveOp::kAllToAll;
  ob.EpExchange(L, "moe_dispatch", F, dispatch, e);
  ob.EpCollective(L, "moe_etp_all_gather", F, ag, eb * tok * h, e.etp_group);
  ob.Quantize(L, "moe_expert_up_input_quantize", F, tok * h);
  ob.GroupedLinear(L, "moe_expert_up", F, e.local_experts, e.tokens_per_expert, up_n, h);
  L.back().saved_bytes = q * tok * h;
  ob.Memory(L, swiglu ? "moe_swiglu" : "moe_gelu", F, eb * tok * (up_n + fe), eb * tok * up_n + q * tok * fe);
  moe_act_out_saved = q * tok * fe;
  moe_act_in_saved = eb * tok * up_n;
  ob.Quantize(L, "moe_expert_down_input_quantize", F, tok * fe);
  ob.GroupedLinear(L, "moe_expert_down", F, e.local_experts, e.tokens_per_expert, h, fe);
  ob.EpCollective(L, "moe_etp_reduce_scatter", F, rs, eb * tok * h, e.etp_group);
  ob.EpExchange(L, "moe_combine", F, dispatch == ag ? rs : dispatch, e);
  ob.Memory(L, "moe_unpermute", F, eb * Tr * h * (1 + k));
  mlp_weight_inputs = q * (tok * h + tok * fe);
  if (spec.shared_ffn_hidden_size > 0) {
    const double fs = static_cast<double>(spec.shared_ffn_hidden_size) / t, sup = (swiglu ? 2 : 1) * fs;
    if (sp) ob.Collective(L, "moe_shared_all_gather", F, ag, act);
    ob.Linear(L, "moe_shared_up", F, T, sup, h);
    L.back().saved_bytes = low ? q * T * h / rep : 0.0;  // bf16: the router's saved input
    ob.Memory(L, "moe_shared_activation", F, eb * T * (sup + fs), eb * T * sup + q * T * fs);
    shared_saved = L.back().saved_bytes + L[L.size() - 2].saved_bytes;
    ob.Linear(L, "moe_shared_down", F, T, h, fs);
    ob.Collective(L, sp ? "moe_shared_reduce_scatter" : "moe_shared_all_reduce", F, sp ? rs : ar, act);
    mlp_weight_inputs += q * (T * h / rep + T * fs);
  }
  ob.Memory(L, m.dropout ? "dropout_residual_mlp" : "residual_mlp", F, 3 * act / rep + mask, mask);
}

/// The MoE MLP's backward: the mirror of the forward (the combine's gradient travels the
/// dispatch's way and back), data- and weight-gradient grouped GEMMs, the router's gradients.
void LayerBuilder::MoeMlpBackward() {
  const MoePlan& e = *moe;
  const MoeSpec& spec = m.moe;
  const double E = static_cast<double>(spec.num_experts), k = static_cast<double>(spec.top_k);
  const double Tr = e.tokens_routed, tok = e.local_experts * e.tokens_per_expert;
  const double fe = static_cast<double>(spec.ffn_hidden_size) / e.etp, up_n = (swiglu ? 2 : 1) * fe;
  const CollectiveOp dispatch = e.dispatcher == MoeDispatcher::kAllGather ? ag : CollectiveOp::kAllToAll;
  ob.Memory(L, m.dropout ? "dropout_residual_mlp_bwd" : "residual_mlp_bwd", B, 3 * act / rep);
  if (spec.shared_ffn_hidden_size > 0) {
    const double fs = static_cast<double>(spec.shared_ffn_hidden_size) / t, sup = (swiglu ? 2 : 1) * fs;
    if (sp) ob.Collective(L, "moe_shared_all_gather_bwd", B, ag, act);
    ob.Linear(L, "moe_shared_down_dgrad", B, T, fs, h);
    ob.Linear(L, "moe_shared_down_wgrad", W, fs, h, T);
    ob.Memory(L, "moe_shared_activation_bwd", B, 2 * eb * T * (sup + fs));
    ob.Linear(L, "moe_shared_up_dgrad", B, T, h, sup);
    ob.Linear(L, "moe_shared_up_wgrad", W, sup, h, T);
    ob.Collective(L, sp ? "moe_shared_reduce_scatter_bwd" : "moe_shared_all_reduce_bwd", B, sp ? rs : ar, act);
    if (hide_tp_grad) ob.HideBehindGemm(L, "moe_shared_up_wgrad");
  }
  ob.Memory(L, "moe_unpermute_bwd", B, eb * Tr * h * (1 + k));
  ob.EpExchange(L, "moe_combine_bwd", B, dispatch, e);
  ob.EpCollective(L, "moe_etp_all_gather_bwd", B, ag, eb * tok * h, e.etp_group);
  ob.Quantize(L, "moe_expert_down_grad_quantize", B, tok * h);
  ob.GroupedLinear(L, "moe_expert_down_dgrad", B, e.local_experts, e.tokens_per_expert, fe, h);
  ob.GroupedLinear(L, "moe_expert_down_wgrad", W, e.local_experts, fe, h, e.tokens_per_expert);
  ob.Memory(L, swiglu ? "moe_swiglu_bwd" : "moe_gelu_bwd", B, 2 * eb * tok * (up_n + fe));
  ob.Quantize(L, "moe_expert_up_grad_quantize", B, tok * up_n);
  ob.GroupedLinear(L, "moe_expert_up_dgrad", B, e.local_experts, e.tokens_per_expert, h, up_n);
  ob.GroupedLinear(L, "moe_expert_up_wgrad", W, e.local_experts, up_n, h, e.tokens_per_expert);
  ob.EpCollective(L, "moe_etp_reduce_scatter_bwd", B, rs, eb * tok * h, e.etp_group);
  ob.EpExchange(L, "moe_dispatch_bwd", B, dispatch == ag ? rs : dispatch, e);
  ob.Memory(L, "moe_permute_bwd", B, eb * Tr * h * (1 + k));
  ob.Memory(L, "moe_router_topk_bwd", B, 3 * 4 * Tr * E);
  ob.Gemm(L, "moe_router_dgrad", B, Tr, h, E);
  ob.Gemm(L, "moe_router_wgrad", W, E, h, Tr);
  ob.Memory(L, "post_attn_norm_bwd", B, 2 * norm_bytes);
}

LayerOps BuildLayerOps(const Model& m, const ParallelConfig& c, const LayerShape& x, const HardwareProfile& prof,
                       OpBuilder& ob, const MoePlan* moe = nullptr) {
  LayerOps lo = LayerBuilder(m, c, x, prof, ob, moe).Build();
  const std::pair<Pass, LayerOps::PassTime*> passes[] = {{Pass::kForward, &lo.fwd},
                                                         {Pass::kBackwardInput, &lo.bwd_input},
                                                         {Pass::kBackwardWeight, &lo.bwd_weight},
                                                         {Pass::kRecompute, &lo.recompute}};
  for (const auto& [pass, t] : passes) SumPass(lo.ops, pass, &t->total, &t->tp, &t->cp, &t->ep);
  return lo;
}

/// Builds `c`'s LayerSet; `ob` holds `lf` (the configuration's linear format) on return.
LayerSet BuildLayerSet(const Model& m, const ParallelConfig& c, const LayerShape& shape, const HardwareProfile& prof,
                       OpBuilder& ob, const LinearFormat& lf, const std::string& arch, const MoePlan& moe) {
  LayerSet ls;
  const bool bf16_layers = c.bf16_layers_start + c.bf16_layers_end > 0;
  const LinearFormat bf16 = LinearFormatOf(ParallelConfig{}, arch);
  ls.layer = BuildLayerOps(m, c, shape, prof, ob);
  if (bf16_layers) {
    ob.set_linear_format(bf16);
    ls.layer16 = BuildLayerOps(m, c, shape, prof, ob);
    ob.set_linear_format(lf);
  }
  if (m.moe.enabled()) {
    ls.moe_layer = BuildLayerOps(m, c, shape, prof, ob, &moe);
    if (bf16_layers) {
      ob.set_linear_format(bf16);
      ls.moe_layer16 = BuildLayerOps(m, c, shape, prof, ob, &moe);
      ob.set_linear_format(lf);
    }
  }
  if (c.PartialRecompute()) {
    ParallelConfig plain = c;
    plain.recompute = Recompute::kNone;
    ls.plain = BuildLayerOps(m, plain, shape, prof, ob);
    if (m.moe.enabled()) ls.moe_plain = BuildLayerOps(m, plain, shape, prof, ob, &moe);
  }
  return ls;
}

}  // namespace

ParallelConfig LayerCostKey(const ParallelConfig& cfg) {
  ParallelConfig k = cfg;
  const ParallelConfig d;
  k.pp = d.pp;
  k.dp = d.dp;
  k.vp = d.vp;
  // The layers read the schedule only for ZB-H1's split weight gradients (1F1B, interleaved and
  // GPipe layers are the same).
  if (k.schedule != Schedule::kZbH1) k.schedule = d.schedule;
  k.global_batch_size = d.global_batch_size;
  // Partial recompute: the layers are the same whichever layers rerun (the chunks pick them).
  k.recompute_block_layers = k.PartialRecompute() ? 0 : d.recompute_block_layers;
  k.recompute_layer_interval = d.recompute_layer_interval;
  k.zero_stage = d.zero_stage;
  k.dp_shard = d.dp_shard;
  k.zero3_impl = d.zero3_impl;
  k.zero3_limit_all_gathers = d.zero3_limit_all_gathers;
  k.pipeline_flushes = d.pipeline_flushes;
  k.flush_grad_reduce = d.flush_grad_reduce;
  k.fp8_amax_history_len = d.fp8_amax_history_len;
  k.fp8_param_gather = d.fp8_param_gather;
  k.fp32_main_grads = d.fp32_main_grads;
  k.optimizer_impl = d.optimizer_impl;
  k.ds_reduce_bucket_elems = d.ds_reduce_bucket_elems;
  k.ds_contiguous_gradients = d.ds_contiguous_gradients;
  k.ds_multi_rank_bucket_allreduce = d.ds_multi_rank_bucket_allreduce;
  k.ds_max_live_elems = d.ds_max_live_elems;
  k.ds_persistence_threshold_elems = d.ds_persistence_threshold_elems;
  k.ds_prefetch_bucket_elems = d.ds_prefetch_bucket_elems;
  k.ds_max_reuse_distance_elems = d.ds_max_reuse_distance_elems;
  k.overlap_grad_reduce = d.overlap_grad_reduce;
  k.overlap_param_gather = d.overlap_param_gather;
  k.cross_entropy = d.cross_entropy;
  k.scatter_gather = d.scatter_gather;
  k.p2p_blocking = d.p2p_blocking;
  k.embedding_slots = d.embedding_slots;
  k.first_stage_layers = d.first_stage_layers;
  k.last_stage_layers = d.last_stage_layers;
  k.even_chunks = d.even_chunks;
  k.param_gather_bytes = d.param_gather_bytes;
  return k;
}

struct LayerCostCache::Impl {
  const Model* model = nullptr;
  const Cluster* cluster = nullptr;
  const HardwareProfile* profile = nullptr;
  mutable std::mutex mu;
  std::unordered_map<ParallelConfig, std::shared_ptr<const LayerSet>, LayerKeyHasher> sets;
  std::size_t hits = 0;

  /// `c`'s layers: the entry of its LayerCostKey, else `build()`'s, kept without their op lists
  /// (built outside the lock; two threads may build the same key, with the same result). Binds
  /// the cache to (m, cl, prof) on first use.
  std::shared_ptr<const LayerSet> Get(const Model& m, const Cluster& cl, const HardwareProfile& prof,
                                      const ParallelConfig& c, const std::function<LayerSet()>& build) {
    const ParallelConfig key = LayerCostKey(c);
    {
      const std::lock_guard<std::mutex> lock(mu);
      if (model == nullptr) {
        model = &m;
        cluster = &cl;
        profile = &prof;
      } else if (model != &m || cluster != &cl || profile != &prof) {
        throw InternalError("LayerCostCache: used with another model, cluster or profile than it was built for");
      }
      if (const auto it = sets.find(key); it != sets.end()) {
        ++hits;
        return it->second;
      }
    }
    LayerSet set = build();
    for (LayerOps* lo : {&set.layer, &set.layer16, &set.moe_layer, &set.moe_layer16}) {
      lo->ops.clear();
      lo->ops.shrink_to_fit();  // the bounds read the pass times and bytes, not the list
    }
    auto shared = std::make_shared<const LayerSet>(std::move(set));
    const std::lock_guard<std::mutex> lock(mu);
    // Another thread may have built it meanwhile: the first one kept stands.
    return sets.emplace(key, std::move(shared)).first->second;
  }
};

LayerCostCache::LayerCostCache() : impl_(std::make_unique<Impl>()) {}
LayerCostCache::~LayerCostCache() = default;

std::size_t LayerCostCache::entries() const {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sets.size();
}

std::size_t LayerCostCache::hits() const {
  const std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->hits;
}

/// Pinned-memory copies between a GPU and its host reach about 0.8 of the link's rate one way
/// (stas00/ml-engineering's GH200 NVLink-C2C measurement, in the gh200 preset's notes).
constexpr double kHostCopyEfficiency = 0.8;

double HostCopyGBps(const Gpu& g) {
  return g.pcie_GBps_per_direction * kHostCopyEfficiency / static_cast<double>(std::max(1, g.host_link_shared_by));
}

double MoeImbalance(const ParallelConfig& c, const MoeSpec& moe, double mean_tokens, std::int64_t ep) {
  double imb = c.moe_load_imbalance;
  if (!(imb > 0)) {
    // Balanced routing: each of the ep ranks receives a binomial share of the routed copies
    // (mean = variance ~ mean_tokens); the busiest of ep such ranks expects about
    // sqrt(2 ln ep) standard deviations above the mean.
    imb = ep > 1 && mean_tokens > 0 ? 1 + std::sqrt(2 * std::log(static_cast<double>(ep)) / mean_tokens) : 1.0;
    // A router balanced over the global batch routes each micro-batch by its domain: a skew of
    // the data, not a sampling noise, so it does not shrink with more tokens.
    if (ep > 1 && moe.router_global_batch_balance && !c.moe_force_load_balancing) {
      imb = std::max(imb, kGlobalBatchRouterImbalance);
    }
  }
  if (c.moe_capacity_factor > 0) imb = std::min(imb, c.moe_capacity_factor);
  return std::min(imb, MoeMaxImbalance(moe, ep));
}

double MoeNodeImbalance(double rank_imbalance, std::int64_t ep, std::int64_t ranks_per_node, std::int64_t nodes) {
  if (nodes < 2 || ep < 2 || ranks_per_node < 1 || !(rank_imbalance > 1)) return 1.0;
  // Ranks' excess loads as independent draws: a node's sum of r ranks has 1/sqrt(r) of a rank's
  // relative deviation, and the busiest of n groups sits about sqrt(2 ln n) deviations above the
  // mean (the balanced-routing form of MoeImbalance, which this reproduces for binomial shares).
  const double excess = (rank_imbalance - 1) * std::sqrt(std::log(static_cast<double>(nodes)) / std::log(static_cast<double>(ep))) /
                        std::sqrt(static_cast<double>(ranks_per_node));
  return std::min(rank_imbalance, 1 + excess);
}

double MoeMaxImbalance(const MoeSpec& moe, std::int64_t ep) {
  if (ep < 1 || moe.top_k <= 0) return 1.0;
  const double e = static_cast<double>(ep);
  return e * std::min(1.0, static_cast<double>(moe.num_experts) / e / static_cast<double>(moe.top_k));
}

std::string MoeImbalanceSource(const ParallelConfig& c, const MoeSpec& moe) {
  std::string s;
  if (c.moe_load_imbalance > 0) {
    s = "--moe-load-imbalance";
  } else if (c.moe_force_load_balancing) {
    s = "forced load balancing: balanced routing's expected busiest rank";
  } else if (moe.router_global_batch_balance && c.ep > 1) {
    s = fmt::format("a router trained with global-batch load balancing: {}, fitted on Qwen3-235B-A22B runs at ep {}{} "
                    "(docs/simulator.md); --moe-load-imbalance sets it",
                    kGlobalBatchRouterImbalance, kGlobalBatchRouterImbalanceEp,
                    c.ep == kGlobalBatchRouterImbalanceEp ? "" : fmt::format(", an extrapolation to ep {}", c.ep));
  } else {
    s = "balanced routing's expected busiest rank; --moe-load-imbalance sets it";
  }
  if (c.moe_capacity_factor > 0) s += fmt::format(", at most the capacity factor {}", c.moe_capacity_factor);
  if (c.moe_capacity_factor > 0 && c.moe_capacity_factor < 1) {
    s += fmt::format("; below 1 every expert drops tokens and runs {} of its routed ones: the executed FLOPs count "
                     "what runs, the model FLOPs (and MFU) every routed token, as Megatron-LM's do",
                     c.moe_capacity_factor);
  }
  return s;
}

namespace {

/// The MoePlan of `c` for `model` (tokens_routed tokens a GPU routes per micro-batch), and the
/// expert-data-parallel group. Megatron-Core's parallel folding orders the expert grid
/// etp (innermost), ep, edp over the tp*cp*dp GPUs of a stage.
MoePlan PlanMoe(const Model& m, const ParallelConfig& c, std::int64_t gpn, double tokens_routed, double eb,
                const HardwareProfile& prof, std::int64_t sm_count, GroupPlacement* edp_group) {
  MoePlan e;
  e.ep = static_cast<int>(c.ep);
  e.etp = static_cast<int>(c.expert_tp());
  e.ep_group.ranks = e.ep;
  e.ep_group.ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / e.etp, 1, c.ep));
  e.etp_group.ranks = e.etp;
  e.etp_group.ranks_per_node = static_cast<int>(std::min<std::int64_t>(e.etp, gpn));
  const double k = static_cast<double>(m.moe.top_k), h = static_cast<double>(m.hidden_size);
  e.local_experts = static_cast<double>(m.moe.num_experts) / static_cast<double>(c.ep);
  e.tokens_routed = tokens_routed;
  e.dispatcher = c.moe_dispatcher;
  e.imbalance = MoeImbalance(c, m.moe, tokens_routed * k, c.ep);
  e.tokens_per_expert = tokens_routed * k * e.etp / e.local_experts * e.imbalance;
  const double ep = static_cast<double>(c.ep);
  switch (c.moe_dispatcher) {
    case MoeDispatcher::kAllToAll: e.dispatch_bytes = eb * tokens_routed * k * h * e.imbalance; break;
    case MoeDispatcher::kAllGather: e.dispatch_bytes = eb * tokens_routed * h * ep; break;
    case MoeDispatcher::kFlex: {
      // DeepEP (Megatron-Core's flex dispatcher) sends a token once to each rank holding one of
      // its experts (the size shown: the expected distinct ranks among k experts spread over ep),
      // and across nodes once to each node holding one: over RDMA to the same-index GPU of that
      // node, which forwards it over NVLink (DeepEP's internode kernels). A dispatch takes the
      // longer of the NIC part, (nodes - 1) * (1 - (1 - 1/nodes)^k) node copies of each routed
      // token through the GPU's NIC share, and the NVLink part, the received copies but the
      // landing GPU's own, at the intra-node busbw.
      // The RDMA part lands on the same-index GPUs of the destination node, spread over its NICs
      // by the sender's index: a node's NICs carry the node's share of the copies, so they see
      // the node's load imbalance, not the busiest rank's (MoeNodeImbalance).
      const double tok_bytes = eb * tokens_routed * h * e.imbalance;
      e.dispatch_bytes = tok_bytes * ep * (1 - std::pow(1 - 1 / ep, k));
      const double nodes = e.ep_group.nodes(), rpn = e.ep_group.ranks_per_node;
      const double nvl_s =
          e.dispatch_bytes * (rpn - 1) / rpn / (prof.IntraGroupBusbwGBps(static_cast<int>(rpn)) * 1e9);
      double net_s = 0;
      if (nodes > 1) {
        e.node_imbalance = MoeNodeImbalance(e.imbalance, c.ep, e.ep_group.ranks_per_node, e.ep_group.nodes());
        net_s = eb * tokens_routed * h * e.node_imbalance * (nodes - 1) * (1 - std::pow(1 - 1 / nodes, k)) /
                (prof.NicShareGBps() * 1e9);
      }
      e.dispatch_s = prof.coll_base_latency_s + (nodes > 1 ? prof.coll_inter_hop_latency_s : prof.coll_intra_hop_latency_s) +
                     std::max(nvl_s, net_s);
      break;
    }
  }
  // Compute beside an exchange: DeepEP's kernels hold kDeepEpSms of the GPU's SMs (Megatron-Core's
  // --moe-deepep-num-sms default), so the compute runs on the rest; NCCL's all-to-all as the
  // profile's collectives.
  constexpr double kDeepEpSms = 20;
  if (c.moe_dispatcher == MoeDispatcher::kFlex && sm_count > kDeepEpSms) {
    e.overlap_slowdown = kDeepEpSms / (static_cast<double>(sm_count) - kDeepEpSms);
  } else {
    e.overlap_slowdown = e.ep_group.nodes() > 1 ? prof.overlap_slowdown_network : prof.overlap_slowdown_nvlink;
  }
  const std::int64_t edp = std::max<std::int64_t>(1, c.expert_dp());
  edp_group->ranks = static_cast<int>(edp);
  edp_group->ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / (e.etp * c.ep), 1, edp));
  return e;
}

}  // namespace

namespace {
/// Bytes per element of a linear GEMM's saved input (the quantized copy under a low-precision format).
double q_bytes_of(const LinearFormat& lf, double eb) { return lf.low_precision() ? lf.CopyBytes() : eb; }
}  // namespace

/// Of stage i's forward (and backward) chunk passes, the share that 1F1B runs paired with a
/// backward (forward) in its steady state: all but the warmup forwards (Megatron-LM's
/// get_pp_rank_microbatches: (pp - i - 1) * 2 + (vp - 1) * pp interleaved, pp - i - 1 for 1F1B,
/// one without a pipeline) of the m * vp passes. 0 without --overlap-moe-expert-parallel-comm.
static double PairedPassFraction(const ParallelConfig& c, std::int64_t i, std::int64_t v) {
  if (!c.moe_a2a_overlap) return 0;
  const double total = static_cast<double>(c.num_microbatches() * v);
  if (total <= 0) return 0;
  double warmup = c.pp <= 1 ? 1.0
                  : v > 1   ? static_cast<double>((c.pp - i - 1) * 2 + (v - 1) * c.pp)
                            : static_cast<double>(c.pp - i - 1);
  warmup = std::min(std::max(warmup, 1.0), total);
  return (total - warmup) / total;
}

namespace {

/// Adds `times` tensors of `elems` elements to `t` (routed experts' when `expert`); the gathered
/// ones' sizes go to `order` (forward order).
void AddTensor(LayerTensors* t, double elems, double times = 1, std::vector<double>* order = nullptr,
               bool expert = false) {
  if (!(elems > 0) || !(times > 0)) return;
  t->count += times;
  if (expert) t->expert_count += times;
  if (elems < t->persistence_threshold_elems) {
    t->persistent_elems += times * elems;
    return;
  }
  t->gathered += times;
  if (expert) t->expert_gathered += times;
  if (order == nullptr) return;
  for (double i = 0; i < times; ++i) order->push_back(elems);
}

/// Tensor i is prefetched when its predecessor in `order` (cyclic) is under `max_live`
/// (stage3_max_live_parameters).
bool Prefetched(const std::vector<double>& order, std::size_t i, double max_live) {
  return order[(i + order.size() - 1) % order.size()] < max_live;
}

/// Sets `t`'s prefetched tensors and their share of the gathered elements from `order`.
void SetPrefetched(LayerTensors* t, const std::vector<double>& order) {
  double all = 0, pre = 0, n = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    all += order[i];
    if (!Prefetched(order, i, t->max_live_elems)) continue;
    pre += order[i];
    n += 1;
  }
  t->prefetched_share = all > 0 ? pre / all : 0;
  t->prefetched_tensors = n;
}

/// An MLP's tensors on one GPU (fc1, fused gate and up for SwiGLU; fc2; their biases), `times` of it.
void AddMlpTensors(LayerTensors* t, const Model& m, double f, double tp, bool bias, double times,
                   std::vector<double>* order, bool expert = false) {
  const double h = static_cast<double>(m.hidden_size);
  const double up = m.activation == Activation::kSwiglu ? 2.0 : 1.0;
  for (double i = 0; i < times; ++i) {  // each expert's fc1 then fc2, in forward order
    const double one = std::min(1.0, times - i);
    AddTensor(t, h * f * up / tp, one, order, expert);
    AddTensor(t, f * h / tp, one, order, expert);
    if (bias) {
      AddTensor(t, f * up / tp, one, nullptr, expert);
      AddTensor(t, h, one, nullptr, expert);
    }
  }
}

/// The attention block's tensors and the layer's norms (MHA/GQA's fused QKV and projection, or
/// MLA's down and up projections).
void AddAttentionTensors(LayerTensors* t, const Model& m, double tp, std::vector<double>* order) {
  const double h = static_cast<double>(m.hidden_size);
  const double norm_tensors = m.normalization == Normalization::kLayerNorm ? 2.0 : 1.0;
  AddTensor(t, h, 2 * norm_tensors);  // input and post-attention norms
  if (m.mla.enabled()) {
    const double a = static_cast<double>(m.num_attention_heads);
    const MlaSpec& q = m.mla;
    const double qk = static_cast<double>(q.qk_head_dim + q.qk_pos_emb_head_dim);
    if (q.q_lora_rank > 0) {
      AddTensor(t, h * static_cast<double>(q.q_lora_rank), 1, order);
      AddTensor(t, static_cast<double>(q.q_lora_rank) * a * qk / tp, 1, order);
    } else {
      AddTensor(t, h * a * qk / tp, 1, order);
    }
    AddTensor(t, h * static_cast<double>(q.kv_lora_rank + q.qk_pos_emb_head_dim), 1, order);
    AddTensor(t, static_cast<double>(q.kv_lora_rank) * a * static_cast<double>(q.qk_head_dim + q.v_head_dim) / tp, 1,
              order);
    AddTensor(t, a * static_cast<double>(q.v_head_dim) * h / tp, 1, order);
  } else {
    const double qkv = static_cast<double>(m.num_attention_heads + 2 * m.num_query_groups) * static_cast<double>(m.kv_channels);
    AddTensor(t, h * qkv / tp, 1, order);
    if (m.add_qkv_bias) AddTensor(t, qkv / tp);
    AddTensor(t, static_cast<double>(m.num_attention_heads * m.kv_channels) * h / tp, 1, order);
  }
  if (m.add_bias_linear) AddTensor(t, h);
}

/// Forward peak of Zero3GatheredPeakBytes over one layer kind's `order`.
double ForwardGatherPeak(const LayerTensors& t, const std::vector<double>& order, double pb) {
  double peak = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const double running = Prefetched(order, i, t.max_live_elems) ? order[(i + order.size() - 1) % order.size()] : 0;
    peak = std::max(peak, (running + 2 * order[i]) * pb);
  }
  return peak;
}

/// Backward peak of Zero3GatheredPeakBytes: the backward runs `order` in reverse (twice, so the
/// bucket carries over from the layer before), so tensor i prefetches tensor i-1.
double BackwardGatherPeak(const LayerTensors& t, const std::vector<double>& order, double pb, double gb) {
  const std::size_t n = order.size();
  double peak = 0, bucket = 0;  // gradients waiting in the reduce bucket
  for (std::size_t k = 0; k < 2 * n; ++k) {
    const std::size_t i = n - 1 - k % n;
    const double prev = order[(i + n - 1) % n];
    const double prefetch = order[i] < t.max_live_elems ? 2 * prev * pb : 0;
    const bool reduce = bucket > 0 && bucket + order[i] > t.reduce_bucket_elems;
    // Tensor i's gathered weight and its fresh gradient beside the bucket, and while the bucket
    // is reduce-scattered, ProcessGroupNCCL's flat copy of it.
    peak = std::max(peak, order[i] * pb + (bucket + order[i]) * gb + (reduce ? bucket * gb : 0) + prefetch);
    bucket = (reduce ? 0 : bucket) + order[i];
  }
  return peak;
}

}  // namespace

LayerTensors LayerTensorsOf(const Model& m, const ParallelConfig& c) {
  const double tp = static_cast<double>(c.tp);
  LayerTensors knobs;
  knobs.max_live_elems = c.ds_max_live_elems;
  knobs.persistence_threshold_elems = c.ds_persistence_threshold_elems;
  knobs.reduce_bucket_elems = c.ds_reduce_bucket_elems;
  LayerTensors dense = knobs;
  AddAttentionTensors(&dense, m, tp, &dense.dense_order);
  AddMlpTensors(&dense, m, static_cast<double>(m.ffn_hidden_size), tp, m.add_bias_linear, 1, &dense.dense_order);
  SetPrefetched(&dense, dense.dense_order);
  if (!m.moe.enabled()) return dense;
  LayerTensors moe = knobs;
  AddAttentionTensors(&moe, m, tp, &moe.moe_order);
  AddTensor(&moe, static_cast<double>(m.hidden_size) * static_cast<double>(m.moe.num_experts), 1,
            &moe.moe_order);  // router
  if (m.moe.shared_ffn_hidden_size > 0) {
    AddMlpTensors(&moe, m, static_cast<double>(m.moe.shared_ffn_hidden_size), tp, m.add_bias_linear, 1,
                  &moe.moe_order);
  }
  const double local = static_cast<double>(m.moe.num_experts) / static_cast<double>(std::max<std::int64_t>(1, c.ep));
  AddMlpTensors(&moe, m, static_cast<double>(m.moe.ffn_hidden_size), static_cast<double>(c.expert_tp()),
                m.moe.expert_bias, local, &moe.moe_order, true);
  SetPrefetched(&moe, moe.moe_order);
  const double layers = static_cast<double>(std::max<std::int64_t>(1, m.num_layers));
  const double w = static_cast<double>(m.MoeLayersIn(0, m.num_layers)) / layers;  // MoE layers' share
  auto mix = [w](double d, double e) { return (1 - w) * d + w * e; };
  LayerTensors mean = knobs;
  mean.count = mix(dense.count, moe.count);
  mean.gathered = mix(dense.gathered, moe.gathered);
  mean.expert_count = mix(dense.expert_count, moe.expert_count);
  mean.expert_gathered = mix(dense.expert_gathered, moe.expert_gathered);
  mean.prefetched_tensors = mix(dense.prefetched_tensors, moe.prefetched_tensors);
  // Share of the mean layer's gathered elements: weighted by each kind's gathered elements.
  double de = 0, me = 0;
  for (double e : dense.dense_order) de += e;
  for (double e : moe.moe_order) me += e;
  const double all = mix(de, me);
  mean.prefetched_share = all > 0 ? mix(de * dense.prefetched_share, me * moe.prefetched_share) / all : 0;
  mean.persistent_elems = mix(dense.persistent_elems, moe.persistent_elems);
  if (w < 1) mean.dense_order = std::move(dense.dense_order);
  if (w > 0) mean.moe_order = std::move(moe.moe_order);
  return mean;
}

double Zero3GatheredPeakBytes(const LayerTensors& t, double param_bytes, double grad_bytes) {
  double peak = 0;
  for (const auto* order : {&t.dense_order, &t.moe_order}) {
    if (order->empty()) continue;
    peak = std::max({peak, ForwardGatherPeak(t, *order, param_bytes), BackwardGatherPeak(t, *order, param_bytes, grad_bytes)});
  }
  return peak;
}

Zero3TensorCost Zero3PerTensorCost(const HardwareProfile& p, CollectiveOp op, const LayerTensors& t,
                                   const GroupPlacement& group, const GroupPlacement& expert_group, double params,
                                   double bytes_per_param) {
  Zero3TensorCost x;
  const bool gather = op == CollectiveOp::kAllGather;
  x.tensors = gather ? t.gathered : t.count;
  const double experts = gather ? t.expert_gathered : t.expert_count;
  const double dense = x.tensors - experts;
  const bool dense_comm = group.ranks > 1 && dense > 0, expert_comm = expert_group.ranks > 1 && experts > 0;
  if (!(params > 0) || (!dense_comm && !expert_comm)) {
    x.tensors = 0;
    return x;
  }
  const double bytes = params * bytes_per_param;
  const double n_dense = dense_comm ? dense : 0, n_expert = expert_comm ? experts : 0;
  x.tensors = n_dense + n_expert;
  // A measured table folds the latency into its times: there, one collective's latency is the
  // time of its smallest message (the table's first entry).
  auto latency = [&](const GroupPlacement& g) {
    const CollectiveCost c = CollectiveCostOf(p, op, bytes, g);
    return c.latency_s > 0 || !(c.link_GBps > 0) ? c.latency_s : CollectiveCostOf(p, op, 1.0, g).time_s();
  };
  const double lat_dense = dense_comm ? latency(group) : 0;
  const double lat_expert = expert_comm ? latency(expert_group) : 0;
  x.latency_s = (n_dense * lat_dense + n_expert * lat_expert) / x.tensors;
  x.host_s = (n_dense * static_cast<double>(group.ranks) + n_expert * static_cast<double>(expert_group.ranks)) *
             kListCollectiveSliceSeconds;
  x.copy_s = MemoryBoundTime(p, (gather ? 3.0 : 2.0) * bytes);
  if (gather) {
    x.prefetched_share = t.prefetched_share;
    x.prefetched_tensors = std::min(t.prefetched_tensors, x.tensors);
  }
  return x;
}

namespace {

/// Bytes per logit of the loss as CrossEntropyImpl runs it, pass by pass over the logits:
/// forward, backward, kept for the backward, and the working memory beside what is kept in the
/// forward and the backward: the 16-bit logits (forward) and the 16-bit gradient cast back
/// (backward) for the others; eager PyTorch (kTorch) also holds the fp32 copy beside
/// log_softmax's output in the forward, and in the backward nll_loss's dense fp32 gradient and
/// log_softmax's fp32 input gradient beside the kept log-probabilities (autograd frees neither
/// until the node after them has run). `eb`: the model dtype's bytes.
struct CeBytes {
  double fwd, bwd, saved, fwd_work, bwd_work;
};

CeBytes CrossEntropyBytes(CrossEntropyImpl impl, double eb) {
  switch (impl) {
    case CrossEntropyImpl::kNative: return {eb + 20, 8 + eb, 4, eb, eb};
    case CrossEntropyImpl::kTe: return {3 * eb, 2 * eb, eb, eb, eb};
    case CrossEntropyImpl::kFlashAttn: return {eb, 2 * eb, eb, eb, eb};
    case CrossEntropyImpl::kTorch: return {eb + 20, 24 + eb, 4, eb + 4, 8};
    default: return {eb + 36, 12 + eb, 4, eb, eb};
  }
}

/// The tensor-parallel group's placement: tp ranks, innermost in Megatron-LM's rank order.
GroupPlacement TpGroupOf(const ParallelConfig& c, int gpn) {
  GroupPlacement g;
  g.ranks = static_cast<int>(c.tp);
  g.ranks_per_node = static_cast<int>(std::min<std::int64_t>(c.tp, gpn));
  return g;
}

/// BuildCostModel's steps for one configuration: the groups' placement, the sharded-parameter
/// and MoE plans and the op builder (constructor), the layers (BuildLayers, or a cache's), then
/// the embedding, output, MTP and pipeline-receive ops and the chunks (Finish).
class CostModelBuilder {
 public:
  CostModelBuilder(const Model& model, const ParallelConfig& cfg, const Cluster& cluster, const HardwareProfile& profile)
      : m(model), c(cfg), cl(cluster), prof(profile), ob(prof, TpGroupOf(c, gpn), dense, eb, lf) {
    cm.tokens_per_microbatch = T;
    PlanShardedParameters();
    PlaceGroups();
    if (m.moe.enabled()) cm.moe = PlanMoe(m, c, gpn, T / rep, eb, prof, cl.gpu.sm_count, &cm.edp_group);
    if (m.mla.enabled()) {
      ob.set_attention_head_dims(static_cast<double>(m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim),
                                 static_cast<double>(m.mla.v_head_dim));
    } else {
      ob.set_attention_head_dims(m.AttentionHeadDim(), m.AttentionHeadDim());
      if (m.WindowedLayers() > 0) {
        ob.set_attention_window(static_cast<double>(m.WindowedLayers()) / static_cast<double>(m.num_layers),
                                m.WindowFlopRatio(static_cast<std::int64_t>(s)), static_cast<double>(m.attention_window));
      }
    }
  }
  CostModelBuilder(const CostModelBuilder&) = delete;  // shape points into cm
  CostModelBuilder& operator=(const CostModelBuilder&) = delete;

  /// The configuration's transformer layers, op lists included.
  LayerSet BuildLayers() { return BuildLayerSet(m, c, shape, prof, ob, lf, cl.gpu.arch, cm.moe); }

  /// Takes `layers`' op lists into the cost model (CostModel::layer_ops, bf16_layer_ops,
  /// moe_layer_ops; the lists are left empty).
  void TakeOpLists(LayerSet* layers) {
    cm.layer_ops = std::move(layers->layer.ops);
    cm.bf16_layer_ops = std::move(layers->layer16.ops);  // empty without --first-last-layers-bf16
    cm.moe_layer_ops = std::move(layers->moe_layer.ops);  // empty without MoE
    cm.moe_bf16_layer_ops = std::move(layers->moe_layer16.ops);  // empty unless both
    cm.plain_layer_ops = std::move(layers->plain.ops);  // empty without partial recompute
    cm.plain_moe_layer_ops = std::move(layers->moe_plain.ops);
  }

  /// The cost model with `layers` (read for their pass times and bytes, not their op lists).
  CostModel Finish(const LayerSet& layers) && {
    cm.layer_saved_bytes = layers.layer.saved_bytes;
    cm.layer_checkpoint_bytes = layers.layer.checkpoint_bytes;
    cm.bf16_layer_checkpoint_bytes = layers.layer16.checkpoint_bytes;
    cm.moe_layer_checkpoint_bytes = layers.moe_layer.checkpoint_bytes;
    cm.quantized_weight_bytes_per_param = QuantizedWeightBytesPerParam(c, lf);
    cm.quantized_copy_bytes_per_param =
        lf.low_precision() && c.optimizer_impl != OptimizerImpl::kTorchFsdp ? lf.CastWriteBytes() : 0.0;
    AddEmbeddingOps();
    AddOutputOps();
    AddMtpOps();
    AddPipelineRecvOps();
    BuildChunks(layers);
    // Pipeline messages: b*s*h activations in the model dtype, split across TP ranks by the
    // scatter/gather optimization or by sequence parallelism.
    cm.pp_message_bytes = act / ((sp || c.scatter_gather) ? t : 1.0);
    cm.pp_send_intra = P2PCostOf(prof, cm.pp_message_bytes, true);
    cm.pp_send_inter = P2PCostOf(prof, cm.pp_message_bytes, false);
    return std::move(cm);
  }

 private:
  void PlanShardedParameters();
  void PlaceGroups();
  void AddEmbeddingOps();
  void AddOutputOps();
  void AddMtpOps();
  void AddPipelineRecvOps();
  void BuildChunks(const LayerSet& layers);
  std::pair<double, double> MarkRecomputedLayers(ChunkCost* cc, const PipelineLayout& layout, std::int64_t stage,
                                                 std::int64_t k) const;
  ChunkCost ChunkOf(const LayerSet& layers, const PipelineLayout& layout, std::int64_t stage, std::int64_t k,
                    std::int64_t v) const;
  void AddLayerCosts(ChunkCost* cc, const LayerOps& lo, double n, double paired) const;
  void AddLayerParams(ChunkCost* cc, double layers, double moe_layers, double dense16, double moe_lp,
                      double n16) const;
  void AddOpCosts(ChunkCost* cc, const std::vector<Op>& ops) const;
  void AddChunkEnds(ChunkCost* cc, const LayerSet& layers, double paired) const;

  const Model& m;
  const ParallelConfig& c;
  const Cluster& cl;
  const HardwareProfile& prof;
  CostModel cm;
  const double b = static_cast<double>(c.micro_batch_size);
  const double s = static_cast<double>(c.seq_length > 0 ? c.seq_length : m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double f = static_cast<double>(m.ffn_hidden_size);
  const double a = static_cast<double>(m.num_attention_heads);
  const double g = static_cast<double>(m.num_query_groups);
  const double d = static_cast<double>(m.kv_channels);
  const double V = static_cast<double>(m.vocab_size);
  const double t = static_cast<double>(c.tp);
  /// Tokens of one micro-batch on one GPU: context parallelism splits each sequence over cp ranks.
  const double T = b * s / static_cast<double>(c.cp);
  const bool sp = c.sequence_parallel && c.tp > 1;
  const double rep = sp ? t : 1.0;  ///< divisor of the tensors that TP alone replicates
  const bool swiglu = m.activation == Activation::kSwiglu;
  const double drop = m.dropout ? 1.0 : 0.0;  ///< 1-byte dropout masks
  const int gpn = static_cast<int>(cl.gpus_per_node);
  const LinearFormat lf = LinearFormatOf(c, cl.gpu.arch);
  const double eb = ModelDtypeBytes(c.precision);
  const Precision dense = IsLowPrecision(c.precision) ? Precision::kBf16 : c.precision;
  OpBuilder ob;
  const double act = eb * T * h;  ///< one hidden-state tensor in the model dtype, unsharded
  const double norm_bytes = 2 * act / rep;  ///< read + write
  const double logits = T * V / t;
  const CeBytes ce = CrossEntropyBytes(c.cross_entropy, eb);
  const LayerShape shape{b, s, h, f, a, g, d, t, T, rep, eb, sp, swiglu, drop, &cm.cp, HostCopyGBps(cl.gpu)};
  const ParameterCounts pc = m.Parameters();
  static constexpr Pass F = Pass::kForward, B = Pass::kBackwardInput, W = Pass::kBackwardWeight;
  static constexpr CollectiveOp ag = CollectiveOp::kAllGather, rs = CollectiveOp::kReduceScatter,
                                ar = CollectiveOp::kAllReduce;
};

/// DeepSpeed ZeRO-3's (and its 2021 form's) per-layer tensors, and the current form's gather plan.
void CostModelBuilder::PlanShardedParameters() {
  if (c.deepspeed2021_zero3() || c.deepspeed_zero3()) cm.layer_tensors = LayerTensorsOf(m, c);
  if (!c.deepspeed_zero3()) return;
  // ZeRO-3 runs without pipeline parallelism: the one stage holds every layer, each traced with
  // its kind's tensors.
  std::vector<std::vector<double>> orders;
  for (std::int64_t l = 0; l < m.num_layers; ++l) {
    orders.push_back(m.IsMoeLayer(l) ? cm.layer_tensors.moe_order : cm.layer_tensors.dense_order);
  }
  cm.ds_zero3 = PlanDeepSpeedZero3(orders, c.recompute == Recompute::kFull, c.ds_prefetch_bucket_elems,
                                   c.ds_max_live_elems, c.ds_max_reuse_distance_elems);
}

/// Placement under Megatron-LM's rank order tp (innermost), cp, dp, pp. Gradients are reduced
/// (and the distributed optimizer sharded) over the dp x cp ranks of a stage, which hold the
/// same weights (Megatron's data-parallel group with context parallelism).
void CostModelBuilder::PlaceGroups() {
  cm.tp_group = TpGroupOf(c, gpn);
  cm.dp_group.ranks = static_cast<int>(c.dp_cp());
  cm.dp_group.ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / c.tp, 1, c.dp_cp()));
  if (c.hybrid_shard()) {  // shard groups are adjacent dp ranks (inside a node first)
    cm.hybrid_shard = true;
    cm.shard_group.ranks = static_cast<int>(c.dp_shard);
    cm.shard_group.ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / c.tp, 1, c.dp_shard));
    cm.replica_group.ranks = static_cast<int>(c.dp_replicas());
    cm.replica_group.ranks_per_node =
        static_cast<int>(std::clamp<std::int64_t>(gpn / (c.tp * c.dp_shard), 1, c.dp_replicas()));
  }
  ContextParallelPlan& cpp = cm.cp;
  cpp.cp = static_cast<int>(c.cp);
  cpp.comm = c.cp_comm;
  cpp.group.ranks = static_cast<int>(c.cp);
  cpp.group.ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / c.tp, 1, c.cp));
  const std::int64_t a2a = c.cp > 1 ? CpA2aGroup(c, gpn) : 1;
  cpp.a2a_group.ranks = static_cast<int>(a2a);
  cpp.a2a_group.ranks_per_node = static_cast<int>(std::clamp<std::int64_t>(gpn / c.tp, 1, a2a));
  cpp.ring = c.cp_comm == CpComm::kP2P ? static_cast<int>(c.cp)
             : c.cp_comm == CpComm::kA2AP2P ? static_cast<int>(c.cp / std::max<std::int64_t>(1, a2a))
                                            : 1;
  cpp.ring_same_node = c.tp * c.cp <= gpn;
  cm.pp_next_same_node.assign(static_cast<std::size_t>(c.pp), false);
  const std::int64_t stride = c.tp * c.cp * c.dp;
  for (std::int64_t i = 0; i + 1 < c.pp; ++i) {
    cm.pp_next_same_node[static_cast<std::size_t>(i)] = (i * stride) / gpn == ((i + 1) * stride) / gpn;
  }
  // Tied embeddings under a pipeline: the first and the last stage's copies all-reduce their
  // gradients (Megatron-LM's embedding group), two ranks, on one node when the whole run is.
  if (m.tie_embeddings && c.pp > 1) {
    cm.embedding_pair.ranks = 2;
    cm.embedding_pair.ranks_per_node = stride * c.pp <= gpn ? 2 : 1;
    cm.embedding_sync_bytes = V * h / t * GradReduceBytesPerParam(c);
  }
}

/// The embedding (first stage): lookup + position add + dropout; vocab-parallel all-reduce.
void CostModelBuilder::AddEmbeddingOps() {
  cm.embedding_params_per_gpu = V * h / t;
  cm.output_params_per_gpu = (!m.tie_embeddings || c.pp > 1) ? V * h / t : 0.0;
  auto& E = cm.embedding_ops;
  ob.Memory(E, "embedding_lookup", F, 2 * act + (m.position_embedding == PositionEmbedding::kLearned ? act : 0),
            drop * T * h / rep);
  ob.Collective(E, sp ? "embedding_reduce_scatter" : "embedding_all_reduce", F, sp ? rs : ar, act);
  ob.Memory(E, "embedding_grad", W, 2 * act / rep + 2 * act);
}

/// The output layer and cross-entropy (last stage), the loss as CrossEntropyImpl says
/// (CrossEntropyBytes).
void CostModelBuilder::AddOutputOps() {
  auto& O = cm.output_ops;
  ob.Memory(O, "final_norm", F, norm_bytes, act / rep);
  if (sp) ob.Collective(O, "sp_all_gather_output", F, ag, act);
  ob.Gemm(O, "output_proj", F, T, V / t, h);
  O.back().saved_bytes = act / rep;
  ob.Memory(O, "cross_entropy", F, ce.fwd * logits, ce.saved * logits);
  ob.Collective(O, "cross_entropy_all_reduce", F, ar, 3 * 4 * T);
  ob.Memory(O, "cross_entropy_bwd", B, ce.bwd * logits);
  ob.Gemm(O, "output_proj_dgrad", B, T, h, V / t);
  ob.Gemm(O, "output_proj_wgrad", W, V / t, h, T);
  // The input gradient of the vocab-parallel output GEMM is summed over the TP ranks (Megatron's
  // parallel_lm_logits copies its input to the TP region), asynchronously like the layers'.
  ob.Collective(O, sp ? "sp_reduce_scatter_output_bwd" : "tp_all_reduce_output_bwd", B, sp ? rs : ar, act);
  if (c.async_tp_grad_reduce && c.schedule != Schedule::kZbH1) ob.HideBehindGemm(O, "output_proj_wgrad");
  ob.Memory(O, "final_norm_bwd", B, 2 * norm_bytes);
}

/// Multi-token prediction (DeepSeek-V3; Megatron-Core's MTP): per module, the two input norms,
/// the 2h -> h projection of [next token's embedding; hidden state], one transformer layer (its
/// costs added with the chunk's layers) and another pass through the shared output head.
void CostModelBuilder::AddMtpOps() {
  if (m.mtp_num_layers <= 0) return;
  std::vector<Op>& mtp_ops = cm.mtp_ops;
  ob.Memory(mtp_ops, "mtp_input_norms", F, 2 * norm_bytes, 2 * act / rep);
  if (sp) ob.Collective(mtp_ops, "mtp_all_gather", F, ag, 2 * act);
  ob.Linear(mtp_ops, "mtp_eh_proj", F, T, h / t, 2 * h);
  mtp_ops.back().saved_bytes = 2 * q_bytes_of(lf, eb) * T * h / rep;
  ob.Collective(mtp_ops, sp ? "mtp_reduce_scatter" : "mtp_all_reduce", F, sp ? rs : ar, act);
  ob.Linear(mtp_ops, "mtp_eh_proj_dgrad", B, T, 2 * h, h / t);
  ob.Linear(mtp_ops, "mtp_eh_proj_wgrad", W, h / t, 2 * h, T);
  ob.Memory(mtp_ops, "mtp_input_norms_bwd", B, 4 * norm_bytes);
  for (const Op& o : cm.output_ops) {
    Op x = o;
    x.name = "mtp_" + o.name;
    mtp_ops.push_back(x);
  }
}

/// Pipeline receive (stages after the first / before the last): Megatron's scatter/gather
/// optimization (SC21 section 4.1, gather_split_1d_tensor) and DeepSpeed's pipe_partitioned send
/// 1/t of the activation per TP rank; the receiver all-gathers it over NVLink. Not with sequence
/// parallelism, whose layers take the sequence-sharded tensor as it is.
void CostModelBuilder::AddPipelineRecvOps() {
  if (c.pp > 1 && c.tp > 1 && c.scatter_gather && !sp) {
    ob.Collective(cm.pp_recv_ops, "pp_recv_all_gather", F, ag, act);
    ob.Collective(cm.pp_recv_ops, "pp_recv_grad_all_gather", B, ag, act);
  }
}

/// The chunks: stage i holds model chunks k*pp + i (Megatron-LM interleaving).
void CostModelBuilder::BuildChunks(const LayerSet& layers) {
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  if (!layout.error.empty()) throw InternalError("BuildCostModel: " + layout.error);
  const std::int64_t v = static_cast<std::int64_t>(layout.chunk_layers.size()) / c.pp;
  cm.chunks.assign(static_cast<std::size_t>(c.pp), {});
  for (std::int64_t i = 0; i < c.pp; ++i) {
    for (std::int64_t k = 0; k < v; ++k) cm.chunks[static_cast<std::size_t>(i)].push_back(ChunkOf(layers, layout, i, k, v));
  }
}

/// Partial recompute: fills `cc`'s layer_recomputed (chunk k of pipeline stage `stage`; a rank
/// counts its layers chunk by chunk) and returns how many of its dense and MoE layers do not rerun.
std::pair<double, double> CostModelBuilder::MarkRecomputedLayers(ChunkCost* cc, const PipelineLayout& layout,
                                                                 std::int64_t stage, std::int64_t k) const {
  if (!c.PartialRecompute()) return {0.0, 0.0};
  if (c.bf16_layers_start + c.bf16_layers_end > 0) {
    throw InternalError("BuildCostModel: partial recompute with --first-last-layers-bf16 is refused by its callers");
  }
  const std::int64_t on_rank = layout.LayersBefore(c.pp, stage, k);
  double plain_dense = 0, plain_moe = 0;
  for (int l = 0; l < cc->layers; ++l) {
    const bool rc = c.LayerRecomputed(l, on_rank + l);
    const bool moe = m.moe.enabled() && m.IsMoeLayer(cc->first_layer + l);
    cc->layer_recomputed.push_back(rc);
    cc->layer_moe.push_back(moe);
    if (!rc) ++(moe ? plain_moe : plain_dense);
  }
  return {plain_dense, plain_moe};
}

/// Chunk k of pipeline stage `stage` (model chunk k*pp + stage) of v a stage.
ChunkCost CostModelBuilder::ChunkOf(const LayerSet& layers, const PipelineLayout& layout, std::int64_t stage,
                                    std::int64_t k, std::int64_t v) const {
  const std::int64_t model_chunk = k * c.pp + stage;
  const std::int64_t chunks_total = c.pp * v;
  ChunkCost cc;
  cc.stage = static_cast<int>(stage);
  cc.chunk = static_cast<int>(k);
  cc.layers = static_cast<int>(layout.chunk_layers[static_cast<std::size_t>(model_chunk)]);
  cc.has_embedding = model_chunk == 0;
  cc.has_output = model_chunk == chunks_total - 1;
  const double nl = cc.layers;
  // Layers of this chunk kept in bf16 (the first and last layers of the model).
  const std::int64_t first = layout.first_layer[static_cast<std::size_t>(model_chunk)];
  cc.first_layer = static_cast<int>(first);
  const std::int64_t n16 = Overlap(first, first + cc.layers, 0, c.bf16_layers_start) +
                           Overlap(first, first + cc.layers, m.num_layers - c.bf16_layers_end, m.num_layers);
  cc.bf16_layers = static_cast<int>(n16);
  // Of them, MoE layers, and MoE layers kept in bf16.
  std::int64_t nmoe = 0, nmoe16 = 0;
  if (m.moe.enabled()) {
    for (std::int64_t l = first; l < first + cc.layers; ++l) {
      if (!m.IsMoeLayer(l)) continue;
      ++nmoe;
      if (l < c.bf16_layers_start || l >= m.num_layers - c.bf16_layers_end) ++nmoe16;
    }
  }
  cc.moe_layers = static_cast<int>(nmoe);
  const auto [plain_dense, plain_moe] = MarkRecomputedLayers(&cc, layout, stage, k);
  const double paired = PairedPassFraction(c, stage, v);
  const double dense16 = static_cast<double>(n16 - nmoe16), moe_lp = static_cast<double>(nmoe - nmoe16);
  AddLayerCosts(&cc, layers.layer, nl - static_cast<double>(n16) - moe_lp - plain_dense, paired);
  AddLayerCosts(&cc, layers.layer16, dense16, paired);
  AddLayerCosts(&cc, layers.moe_layer, moe_lp - plain_moe, paired);
  AddLayerCosts(&cc, layers.moe_layer16, static_cast<double>(nmoe16), paired);
  AddLayerCosts(&cc, layers.plain, plain_dense, paired);
  AddLayerCosts(&cc, layers.moe_plain, plain_moe, paired);
  AddLayerParams(&cc, nl, static_cast<double>(nmoe), dense16, moe_lp, static_cast<double>(n16));
  // A received 1/t slice (scatter/gather) is all-gathered over the TP group before use, on the
  // receiving rank's compute stream: the activation before the forward of every chunk but the
  // first, its gradient before the backward of every chunk but the last.
  for (const Op& o : cm.pp_recv_ops) {
    if (o.pass == F && model_chunk > 0) {
      cc.fwd_s += o.duration_s;
      cc.fwd_tp_s += o.duration_s;
    }
    if (o.pass == B && model_chunk < chunks_total - 1) {
      cc.bwd_input_s += o.duration_s;
      cc.bwd_tp_s += o.duration_s;
    }
  }
  AddChunkEnds(&cc, layers, paired);
  return cc;
}

/// Adds n layers of `lo` to `cc`: its passes' times (less what the paired share of the stage's
/// passes hides of the layer's expert-parallel exchanges, --overlap-moe-expert-parallel-comm)
/// and its bytes.
void CostModelBuilder::AddLayerCosts(ChunkCost* cc, const LayerOps& lo, double n, double paired) const {
  if (n <= 0) return;
  const double fw = lo.fwd.total - paired * lo.a2a_overlap_fwd_s, fwep = lo.fwd.ep - paired * lo.a2a_overlap_fwd_s;
  const double bi = lo.bwd_input.total - paired * lo.a2a_overlap_bwd_s,
               biep = lo.bwd_input.ep - paired * lo.a2a_overlap_bwd_s;
  cc->fwd_ep_s += n * fwep;
  cc->bwd_ep_s += n * (biep + lo.bwd_weight.ep);
  cc->recompute_ep_s += n * lo.recompute.ep;
  cc->fwd_s += n * fw;
  cc->fwd_tp_s += n * lo.fwd.tp;
  cc->fwd_cp_s += n * lo.fwd.cp;
  cc->bwd_input_s += n * bi;
  cc->bwd_weight_s += n * lo.bwd_weight.total;
  cc->bwd_tp_s += n * (lo.bwd_input.tp + lo.bwd_weight.tp);
  cc->bwd_cp_s += n * (lo.bwd_input.cp + lo.bwd_weight.cp);
  cc->recompute_s += n * lo.recompute.total;
  cc->recompute_tp_s += n * lo.recompute.tp;
  cc->recompute_cp_s += n * lo.recompute.cp;
  cc->saved_bytes += n * lo.saved_bytes;
  cc->weight_saved_bytes += n * std::min(lo.saved_bytes, lo.weight_inputs_bytes);
  cc->transient_bytes = std::max(cc->transient_bytes, lo.transient_bytes);
  cc->fwd_transient_bytes = std::max(cc->fwd_transient_bytes, lo.fwd_transient_bytes);
}

/// The parameters of a chunk's `layers` transformer layers on one GPU (`moe_layers` of them MoE),
/// and those the low-precision format copies (`dense16` dense and n16 in all kept in bf16,
/// `moe_lp` MoE layers in the low-precision format).
void CostModelBuilder::AddLayerParams(ChunkCost* cc, double layers, double moe_layers, double dense16, double moe_lp,
                                      double n16) const {
  const double layer_params_gpu = static_cast<double>(pc.per_layer.sharded) / t + static_cast<double>(pc.per_layer.replicated);
  const double nd = layers - moe_layers, nm = moe_layers;
  cc->params_per_gpu = nd * layer_params_gpu;
  double moe_sharded_gpu = 0, expert_gpu = 0;
  if (moe_layers > 0) {
    moe_sharded_gpu = static_cast<double>(pc.moe_layer.sharded) / t;
    expert_gpu = static_cast<double>(pc.moe_layer.expert) / static_cast<double>(cm.moe.ep * cm.moe.etp);
    cc->expert_params_per_gpu = nm * expert_gpu;
    cc->params_per_gpu += nm * (moe_sharded_gpu + static_cast<double>(pc.moe_layer.replicated)) + cc->expert_params_per_gpu;
  }
  // The linear layers' weights (sharded parameters and experts) that the low-precision format copies.
  if (lf.low_precision()) {
    cc->quantized_params_per_gpu = (nd - dense16) * static_cast<double>(pc.per_layer.sharded) / t +
                                   moe_lp * (moe_sharded_gpu + expert_gpu);
    cc->scaling_state_bytes = (layers - n16) * ScalingStateBytesPerLayer(c);
  }
}

/// Adds `ops`' forward, backward-input and backward-weight times and saved bytes to `cc`.
void CostModelBuilder::AddOpCosts(ChunkCost* cc, const std::vector<Op>& ops) const {
  double x = 0, y = 0;
  SumPass(ops, F, &x, &y);
  cc->fwd_s += x;
  cc->fwd_tp_s += y;
  x = y = 0;
  SumPass(ops, B, &x, &y);
  cc->bwd_input_s += x;
  cc->bwd_tp_s += y;
  x = y = 0;
  SumPass(ops, W, &x, &y);
  cc->bwd_weight_s += x;
  cc->bwd_tp_s += y;
  cc->saved_bytes += SavedBytes(ops);
}

/// The embedding on the first chunk; the output layer, the loss and the MTP modules on the last.
void CostModelBuilder::AddChunkEnds(ChunkCost* cc, const LayerSet& layers, double paired) const {
  if (cc->has_embedding) {
    AddOpCosts(cc, cm.embedding_ops);
    cc->params_per_gpu += V * h / t + static_cast<double>(pc.position_embedding);
  }
  if (!cc->has_output) return;
  AddOpCosts(cc, cm.output_ops);
  cc->weight_saved_bytes += act / rep;  // output-layer GEMM input
  // The loss's working memory; the forward figure also covers the layers' (as before).
  cc->fwd_transient_bytes = std::max({cc->fwd_transient_bytes, cc->transient_bytes, ce.fwd_work * logits});
  cc->transient_bytes = std::max(cc->transient_bytes, ce.bwd_work * logits);
  const bool separate_copy = !m.tie_embeddings || c.pp > 1;
  cc->params_per_gpu += static_cast<double>(pc.final_norm) + (separate_copy ? V * h / t : 0.0);
  if (m.mtp_num_layers > 0) {
    const double n = static_cast<double>(m.mtp_num_layers);
    for (std::int64_t k = 0; k < m.mtp_num_layers; ++k) AddOpCosts(cc, cm.mtp_ops);
    // Partial recompute leaves the MTP layers alone (Megatron-Core skips their recompute under the
    // block method; torchtitan wraps only model.layers).
    const bool plain = c.PartialRecompute();
    AddLayerCosts(cc, m.moe.enabled() ? (plain ? layers.moe_plain : layers.moe_layer) : (plain ? layers.plain : layers.layer),
                  n, paired);
    const MtpParametersPerGpu mtp = MtpParametersOfLastStage(m, c.tp, cm.moe.ep * cm.moe.etp);
    cc->expert_params_per_gpu += mtp.experts;
    cc->params_per_gpu += mtp.params;
  }
}

}  // namespace

CostModel BuildCostModel(const Model& m, const ParallelConfig& c, const Cluster& cl, const HardwareProfile& prof,
                         LayerCostCache* cache) {
  CostModelBuilder builder(m, c, cl, prof);
  if (cache != nullptr) {
    // Pass times and bytes, no op lists.
    const std::shared_ptr<const LayerSet> layers = cache->impl_->Get(m, cl, prof, c, [&] { return builder.BuildLayers(); });
    return std::move(builder).Finish(*layers);
  }
  LayerSet layers = builder.BuildLayers();
  builder.TakeOpLists(&layers);
  return std::move(builder).Finish(layers);
}

}  // namespace shardcast
