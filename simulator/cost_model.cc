#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

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

double GemmTime(const HardwareProfile& p, double m_per_matrix, double n, double k, double batch) {
  const double m = batch * m_per_matrix;  // rows of the whole call, for the efficiency lookup
  const double flops = 2.0 * m * n * k;
  double eff = p.gemm_max_efficiency * InterpolateLogX(p.gemm_efficiency_vs_gflop, flops / 1e9);
  if (!p.gemm_samples.empty()) {
    // Measured shapes: inverse-distance weighting in log(m, n, k) over the 4 nearest samples.
    std::vector<std::pair<double, double>> d;  // (distance^2, efficiency)
    for (const auto& s : p.gemm_samples) {
      const double dm = std::log(m / s.m), dn = std::log(n / s.n), dk = std::log(k / s.k);
      d.emplace_back(dm * dm + dn * dn + dk * dk, s.tflops / p.gemm_peak_tflops);
    }
    const std::size_t kn = std::min<std::size_t>(4, d.size());
    std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(kn), d.end());
    if (d[0].first < 1e-12) {
      eff = d[0].second;
    } else {
      double wsum = 0, esum = 0;
      for (std::size_t i = 0; i < kn; ++i) {
        const double w = 1.0 / d[i].first;
        wsum += w;
        esum += w * d[i].second;
      }
      eff = esum / wsum;
    }
  }
  const double t_compute = flops / (p.gemm_peak_tflops * 1e12 * eff);
  // Every matrix of the batch reads its own A and B and writes its own C.
  const double bytes = 2.0 * batch * (m_per_matrix * k + k * n + m_per_matrix * n);
  const double t_memory = bytes / (p.hbm_GBps * 1e9 * InterpolateLogX(p.memory_efficiency_vs_bytes, bytes));
  return std::max(t_compute, t_memory) + p.launch_overhead_s;
}

double MemoryBoundTime(const HardwareProfile& p, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / (p.hbm_GBps * 1e9 * InterpolateLogX(p.memory_efficiency_vs_bytes, bytes)) +
         p.launch_overhead_s;
}

double AttentionTime(const HardwareProfile& p, double flops, double seq, bool backward) {
  const double eff = (backward ? p.attention_bwd_efficiency : p.attention_fwd_efficiency) *
                     InterpolateLogX(p.attention_efficiency_vs_seq, seq);
  return flops / (p.gemm_peak_tflops * 1e12 * eff) + p.launch_overhead_s;
}

namespace {
double OptimizerShard(const ParallelConfig& c, double local_params) {
  return c.zero_stage >= 1 ? local_params / static_cast<double>(c.dp) : local_params;
}
double OptimizerShardBytesPerParam(const ParallelConfig& c) {
  return (c.precision == Precision::kFp16 ? 8.0 : 0.0) + 4.0 + 28.0 + 6.0;
}
}  // namespace

double OptimizerBytes(const ParallelConfig& c, double local_params) {
  return OptimizerShardBytesPerParam(c) * OptimizerShard(c, local_params) + BytesPerParam(c).grads * local_params;
}

double OptimizerTime(const HardwareProfile& p, const ParallelConfig& c, double local_params) {
  return MemoryBoundTime(p, OptimizerShardBytesPerParam(c) * OptimizerShard(c, local_params)) +
         MemoryBoundTime(p, BytesPerParam(c).grads * local_params);
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
    c.link_GBps = p.intra_busbw_GBps;
  } else {
    // Each GPU of the group drives its share of the node's NICs; the ring's inter-node busbw is
    // ranks_per_node times that share, capped by the intra-node busbw.
    const double inter = g.ranks_per_node * p.NicShareGBps();
    if (inter < p.intra_busbw_GBps) {
      c.link = LinkKind::kNetwork;
      c.bytes_on_link = bytes / g.ranks_per_node;  // per GPU, through its own NIC share
      c.link_GBps = p.NicShareGBps();
    } else {
      c.link = LinkKind::kIntraNode;
      c.bytes_on_link = bytes;
      c.link_GBps = p.intra_busbw_GBps;
    }
  }
  return c;
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
  OpBuilder(const HardwareProfile& p, const GroupPlacement& tp) : p_(p), tp_(tp) {}

  void Gemm(std::vector<Op>& out, const std::string& name, Pass pass, double m, double n, double k) {
    Op o;
    o.name = name;
    o.kind = OpKind::kGemm;
    o.pass = pass;
    o.m = m;
    o.n = n;
    o.k = k;
    o.flops = 2 * m * n * k;
    o.bytes = 2 * (m * k + k * n + m * n);
    o.duration_s = GemmTime(p_, m, n, k);
    out.push_back(o);
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
    o.bytes = times * 2 * batch * (m * k + k * n + m * n);
    o.duration_s = times * GemmTime(p_, m, n, k, batch);
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
    out.push_back(o);
  }
  void Attention(std::vector<Op>& out, const std::string& name, Pass pass, double flops,
                 double seq, double saved = 0) {
    Op o;
    o.name = name;
    o.kind = OpKind::kAttention;
    o.pass = pass;
    o.flops = flops;
    o.saved_bytes = saved;
    o.duration_s = AttentionTime(p_, flops, seq, pass == Pass::kBackwardInput);
    out.push_back(o);
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
  void Collective(std::vector<Op>& out, const std::string& name, Pass pass, CollectiveOp op,
                  double size) {
    if (tp_.ranks <= 1) return;
    Op o;
    o.name = name;
    o.kind = OpKind::kCollective;
    o.pass = pass;
    o.collective = op;
    o.bytes = size;
    o.duration_s = CollectiveCostOf(p_, op, size, tp_).time_s();
    out.push_back(o);
  }

 private:
  const HardwareProfile& p_;
  GroupPlacement tp_;
};

/// Sums op durations of one pass; TP collective part separately.
void SumPass(const std::vector<Op>& ops, Pass pass, double* total, double* tp) {
  for (const auto& o : ops) {
    if (o.pass != pass || o.overlapped) continue;
    *total += o.duration_s;
    if (o.kind == OpKind::kCollective) *tp += o.duration_s;
  }
}

double SavedBytes(const std::vector<Op>& ops) {
  double s = 0;
  for (const auto& o : ops) {
    if (o.pass == Pass::kForward) s += o.saved_bytes;
  }
  return s;
}

}  // namespace

CostModel BuildCostModel(const Model& m, const ParallelConfig& c, const Cluster& cl,
                         const HardwareProfile& prof) {
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
  const double T = b * s;
  const bool sp = c.sequence_parallel && c.tp > 1;
  const double rep = sp ? t : 1.0;  // divisor of the tensors that TP alone replicates
  const bool swiglu = m.activation == Activation::kSwiglu;
  const double drop = m.dropout ? 1.0 : 0.0;  // 1-byte dropout masks
  const int gpn = static_cast<int>(cl.gpus_per_node);
  cm.tokens_per_microbatch = T;

  // Placement under rank order tp (innermost), dp, pp.
  cm.tp_group.ranks = static_cast<int>(c.tp);
  cm.tp_group.ranks_per_node = static_cast<int>(std::min<std::int64_t>(c.tp, gpn));
  cm.dp_group.ranks = static_cast<int>(c.dp);
  cm.dp_group.ranks_per_node =
      static_cast<int>(std::clamp<std::int64_t>(gpn / c.tp, 1, c.dp));
  cm.pp_next_same_node.assign(static_cast<std::size_t>(c.pp), false);
  const std::int64_t stride = c.tp * c.dp;
  for (std::int64_t i = 0; i + 1 < c.pp; ++i) {
    cm.pp_next_same_node[static_cast<std::size_t>(i)] = (i * stride) / gpn == ((i + 1) * stride) / gpn;
  }

  OpBuilder ob(prof, cm.tp_group);
  // Unfused attention core ops appended since `begin` run at the profile's measured fraction of
  // their cost-model time (HardwareProfile::unfused_attention_core_efficiency).
  auto scale_attention_core = [&](std::size_t begin) {
    for (std::size_t i = begin; i < cm.layer_ops.size(); ++i) {
      cm.layer_ops[i].duration_s /= prof.unfused_attention_core_efficiency;
    }
  };
  auto& L = cm.layer_ops;
  const Pass F = Pass::kForward, B = Pass::kBackwardInput, W = Pass::kBackwardWeight;
  const double act = 2 * T * h;  // one bf16 hidden-state tensor, unsharded
  const double norm_bytes = 2 * act / rep;  // read + write
  const CollectiveOp ag = CollectiveOp::kAllGather, rs = CollectiveOp::kReduceScatter,
                     ar = CollectiveOp::kAllReduce;
  const double qkv_n = (a + 2 * g) * d / t;
  const double ad_t = a * d / t;
  const double mlp_up_n = (swiglu ? 2 : 1) * f / t;

  // ---- forward (saved bytes: Korthikanti et al. 2022 section 4.1, generalized to GQA/SwiGLU)
  ob.Memory(L, "input_norm", F, norm_bytes, act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn", F, ag, act);
  ob.Gemm(L, "qkv_proj", F, T, qkv_n, h);
  L.back().saved_bytes = act / rep;  // QKV input (norm output)
  const double qkv_saved = 2 * T * qkv_n;  // Q, K, V
  if (c.flash_attention) {
    // Flash attention: causal kernels skip about half of the 4*b*s^2*a*d FLOPs (Dao 2023).
    ob.Attention(L, "flash_attention", F, 0.5 * 4 * b * s * s * a * d / t, s,
                 qkv_saved + 4 * T * a / t /* fp32 log-sum-exp */);
    L.back().bytes = 2 * T * d * (2 * a + 2 * g) / t;  // reads Q, K, V; writes O
  } else {
    // b*a/t batched GEMMs per head: scores Q K^T (s x s x d) and context P V (s x d x s).
    const double heads_t = a / t;
    const std::size_t core_begin = L.size();
    ob.BatchedGemm(L, "attn_scores_qk", F, b * heads_t, s, s, d, 1, qkv_saved - 2 * T * g * d / t);  // saves Q, K
    const double scores = b * heads_t * s * s;
    ob.Memory(L, "softmax", F, 4 * scores, 2 * scores);
    if (m.dropout) ob.Memory(L, "attn_dropout", F, 5 * scores, 3 * scores);  // mask + output
    ob.BatchedGemm(L, "attn_context_v", F, b * heads_t, s, d, s, 1, 2 * T * g * d / t);  // saves V
    scale_attention_core(core_begin);
  }
  ob.Gemm(L, "attn_out_proj", F, T, h, ad_t);
  L.back().saved_bytes = 2 * T * ad_t;  // projection input (= attention output)
  ob.Collective(L, sp ? "tp_reduce_scatter_attn" : "tp_all_reduce_attn", F, sp ? rs : ar, act);
  ob.Memory(L, m.dropout ? "dropout_residual_attn" : "residual_attn", F, 3 * act / rep + drop * act / 2 / rep, drop * act / 2 / rep);
  ob.Memory(L, "post_attn_norm", F, norm_bytes, act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_mlp", F, ag, act);
  ob.Gemm(L, "mlp_up", F, T, mlp_up_n, h);
  L.back().saved_bytes = act / rep;  // MLP input
  ob.Memory(L, swiglu ? "swiglu" : "gelu", F, 2 * T * mlp_up_n + 2 * T * f / t,
            2 * T * mlp_up_n + 2 * T * f / t);  // activation input and output
  ob.Gemm(L, "mlp_down", F, T, h, f / t);
  ob.Collective(L, sp ? "tp_reduce_scatter_mlp" : "tp_all_reduce_mlp", F, sp ? rs : ar, act);
  ob.Memory(L, m.dropout ? "dropout_residual_mlp" : "residual_mlp", F, 3 * act / rep + drop * act / 2 / rep, drop * act / 2 / rep);

  // Megatron-LM's async input-gradient collective hides behind the weight-gradient GEMM that
  // follows it; ZB-H1 defers that GEMM (W) to a later slot, so nothing is hidden there.
  const bool hide_tp_grad = c.async_tp_grad_reduce && c.schedule != Schedule::kZbH1;

  // ---- backward: input gradients (B) and weight gradients (W), reverse order
  ob.Memory(L, m.dropout ? "dropout_residual_mlp_bwd" : "residual_mlp_bwd", B, 3 * act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_mlp_bwd", B, ag, act);  // grad of reduce-scatter
  ob.Gemm(L, "mlp_down_dgrad", B, T, f / t, h);
  ob.Gemm(L, "mlp_down_wgrad", W, f / t, h, T);
  ob.Memory(L, swiglu ? "swiglu_bwd" : "gelu_bwd", B, 2 * (2 * T * mlp_up_n + 2 * T * f / t));
  if (sp) {
    // Re-gather the saved (sharded) MLP input for the weight gradient, asynchronously while the
    // data-gradient GEMM runs (Korthikanti et al. 2022 section 4.2.2; Megatron-LM).
    ob.Collective(L, "sp_all_gather_mlp_input_bwd", B, ag, act);
    L.back().overlapped = true;
  }
  ob.Gemm(L, "mlp_up_dgrad", B, T, h, mlp_up_n);
  ob.Gemm(L, "mlp_up_wgrad", W, mlp_up_n, h, T);
  ob.Collective(L, sp ? "sp_reduce_scatter_mlp_bwd" : "tp_all_reduce_mlp_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(L, "mlp_up_wgrad");
  ob.Memory(L, "post_attn_norm_bwd", B, 2 * norm_bytes);
  ob.Memory(L, m.dropout ? "dropout_residual_attn_bwd" : "residual_attn_bwd", B, 3 * act / rep);
  if (sp) ob.Collective(L, "sp_all_gather_attn_bwd", B, ag, act);
  ob.Gemm(L, "attn_out_proj_dgrad", B, T, ad_t, h);
  ob.Gemm(L, "attn_out_proj_wgrad", W, ad_t, h, T);
  if (c.flash_attention) {
    ob.Attention(L, "flash_attention_bwd", B, 2.5 * 0.5 * 4 * b * s * s * a * d / t, s);
    L.back().bytes = 2 * T * d * (4 * a + 4 * g) / t;  // reads Q, K, V, O, dO; writes dQ, dK, dV
  } else {
    const double heads_t = a / t, scores = b * heads_t * s * s;
    const std::size_t core_begin = L.size();
    ob.BatchedGemm(L, "attn_context_v_bwd", B, b * heads_t, s, s, d, 2);
    if (m.dropout) ob.Memory(L, "attn_dropout_bwd", B, 5 * scores);
    ob.Memory(L, "softmax_bwd", B, 6 * scores);
    ob.BatchedGemm(L, "attn_scores_qk_bwd", B, b * heads_t, s, d, s, 2);
    scale_attention_core(core_begin);
  }
  if (sp) {
    ob.Collective(L, "sp_all_gather_attn_input_bwd", B, ag, act);
    L.back().overlapped = true;
  }
  ob.Gemm(L, "qkv_proj_dgrad", B, T, h, qkv_n);
  ob.Gemm(L, "qkv_proj_wgrad", W, qkv_n, h, T);
  ob.Collective(L, sp ? "sp_reduce_scatter_attn_bwd" : "tp_all_reduce_attn_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(L, "qkv_proj_wgrad");
  ob.Memory(L, "input_norm_bwd", B, 2 * norm_bytes);

  // ---- recompute before backward
  // Full: rerun the whole forward. Selective: only the attention core (Korthikanti et al. 2022
  // section 5); with flash attention there is none.
  auto recomputed = [&](const Op& o) {
    if (c.recompute == Recompute::kFull) return true;
    return c.recompute == Recompute::kSelective && !c.flash_attention &&
           (o.name == "attn_scores_qk" || o.name == "softmax" || o.name == "attn_dropout" ||
            o.name == "attn_context_v");
  };
  std::vector<Op> recompute;
  for (const auto& o : L) {
    if (o.pass != F || !recomputed(o)) continue;
    Op r = o;
    r.pass = Pass::kRecompute;
    r.name = o.name + "_recompute";
    r.saved_bytes = 0;
    recompute.push_back(r);
  }
  L.insert(L.end(), recompute.begin(), recompute.end());

  // Per-layer saved bytes after recompute policy.
  double layer_saved_all = SavedBytes(L);
  double layer_saved = layer_saved_all;
  double layer_transient = 0;
  if (c.recompute == Recompute::kFull) {
    layer_saved = act / rep;  // only the layer input is checkpointed
    layer_transient = layer_saved_all;  // one layer's activations rebuilt during its backward
  } else if (c.recompute == Recompute::kSelective && !c.flash_attention) {
    const double scores = b * (a / t) * s * s;
    const double attn_core = 2 * scores + (m.dropout ? 3 * scores : 0);
    layer_saved = layer_saved_all - attn_core;
    layer_transient = attn_core;
  }
  cm.layer_saved_bytes = layer_saved;

  // ---- embedding (first stage): lookup + position add + dropout; vocab-parallel all-reduce.
  auto& E = cm.embedding_ops;
  ob.Memory(E, "embedding_lookup", F, 2 * act + (m.position_embedding == PositionEmbedding::kLearned ? act : 0),
            drop * act / 2 / rep);
  ob.Collective(E, sp ? "embedding_reduce_scatter" : "embedding_all_reduce", F, sp ? rs : ar, act);
  ob.Memory(E, "embedding_grad", W, 2 * act / rep + 2 * act);
  // ---- output layer + cross-entropy (last stage), fp32 logits (Megatron's vocab-parallel CE).
  auto& O = cm.output_ops;
  const double logits = T * V / t;
  ob.Memory(O, "final_norm", F, norm_bytes, act / rep);
  if (sp) ob.Collective(O, "sp_all_gather_output", F, ag, act);
  ob.Gemm(O, "output_proj", F, T, V / t, h);
  O.back().saved_bytes = act / rep;
  ob.Memory(O, "cross_entropy", F, 2 * logits + 3 * 4 * logits, 4 * logits);
  ob.Collective(O, "cross_entropy_all_reduce", F, ar, 3 * 4 * T);
  ob.Memory(O, "cross_entropy_bwd", B, 2 * 4 * logits + 2 * logits);
  ob.Gemm(O, "output_proj_dgrad", B, T, h, V / t);
  ob.Gemm(O, "output_proj_wgrad", W, V / t, h, T);
  // The input gradient of the vocab-parallel output GEMM is summed over the TP ranks (Megatron's
  // parallel_lm_logits copies its input to the TP region), asynchronously like the layers'.
  ob.Collective(O, sp ? "sp_reduce_scatter_output_bwd" : "tp_all_reduce_output_bwd", B, sp ? rs : ar, act);
  if (hide_tp_grad) ob.HideBehindGemm(O, "output_proj_wgrad");
  ob.Memory(O, "final_norm_bwd", B, 2 * norm_bytes);

  // ---- pipeline receive (stages after the first / before the last): Megatron's scatter/gather
  // optimization (SC21 section 4.1, gather_split_1d_tensor) and DeepSpeed's pipe_partitioned
  // send 1/t of the activation per TP rank; the receiver all-gathers it over NVLink. Not with
  // sequence parallelism, whose layers take the sequence-sharded tensor as it is.
  if (c.pp > 1 && c.tp > 1 && c.scatter_gather && !sp) {
    ob.Collective(cm.pp_recv_ops, "pp_recv_all_gather", F, ag, act);
    ob.Collective(cm.pp_recv_ops, "pp_recv_grad_all_gather", B, ag, act);
  }

  // ---- chunks: stage i holds model chunks c*pp + i (Megatron-LM interleaving).
  const std::int64_t v = c.vp;
  const std::int64_t chunks_total = c.pp * v;
  cm.chunks.assign(static_cast<std::size_t>(c.pp), {});
  const ParameterCounts pc = m.Parameters();
  const double layer_params_gpu = static_cast<double>(pc.per_layer.sharded) / t +
                                  static_cast<double>(pc.per_layer.replicated);
  for (std::int64_t i = 0; i < c.pp; ++i) {
    for (std::int64_t k = 0; k < v; ++k) {
      const std::int64_t model_chunk = k * c.pp + i;
      ChunkCost cc;
      cc.stage = static_cast<int>(i);
      cc.chunk = static_cast<int>(k);
      cc.layers = static_cast<int>(v == 1 ? LayersOfStage(m.num_layers, c.pp, i, c.embedding_slots)
                                          : m.num_layers / chunks_total);
      cc.has_embedding = model_chunk == 0;
      cc.has_output = model_chunk == chunks_total - 1;
      const double nl = cc.layers;
      double fw = 0, fwtp = 0, bi = 0, bitp = 0, bw = 0, bwtp = 0, rc = 0, rctp = 0;
      SumPass(L, F, &fw, &fwtp);
      SumPass(L, B, &bi, &bitp);
      SumPass(L, W, &bw, &bwtp);
      SumPass(L, Pass::kRecompute, &rc, &rctp);
      cc.fwd_s = nl * fw;
      cc.fwd_tp_s = nl * fwtp;
      cc.bwd_input_s = nl * bi;
      cc.bwd_weight_s = nl * bw;
      cc.bwd_tp_s = nl * (bitp + bwtp);
      cc.recompute_s = nl * rc;
      cc.recompute_tp_s = nl * rctp;
      cc.saved_bytes = nl * layer_saved;
      // Weight gradients need the inputs of the four GEMMs: QKV and MLP-up inputs, the attention
      // output and the activation output.
      const double weight_inputs = 2 * act / rep + 2 * T * ad_t + 2 * T * f / t;
      cc.weight_saved_bytes = nl * std::min(layer_saved, weight_inputs);
      cc.transient_bytes = nl > 0 ? layer_transient : 0;
      cc.params_per_gpu = nl * layer_params_gpu;
      auto add = [&](const std::vector<Op>& ops) {
        double x = 0, y = 0;
        SumPass(ops, F, &x, &y);
        cc.fwd_s += x;
        cc.fwd_tp_s += y;
        x = y = 0;
        SumPass(ops, B, &x, &y);
        cc.bwd_input_s += x;
        cc.bwd_tp_s += y;
        x = y = 0;
        SumPass(ops, W, &x, &y);
        cc.bwd_weight_s += x;
        cc.bwd_tp_s += y;
        cc.saved_bytes += SavedBytes(ops);
      };
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
      if (cc.has_embedding) {
        add(E);
        cc.params_per_gpu += V * h / t + static_cast<double>(pc.position_embedding);
      }
      if (cc.has_output) {
        add(O);
        cc.weight_saved_bytes += act / rep;  // output-layer GEMM input
        cc.transient_bytes = std::max(cc.transient_bytes, 2 * logits);  // bf16 logits before fp32
        const bool separate_copy = !m.tie_embeddings || c.pp > 1;
        cc.params_per_gpu += static_cast<double>(pc.final_norm) + (separate_copy ? V * h / t : 0.0);
      }
      cm.chunks[static_cast<std::size_t>(i)].push_back(cc);
    }
  }
  // Pipeline messages: b*s*h bf16 activations, split across TP ranks by the scatter/gather
  // optimization or by sequence parallelism.
  cm.pp_message_bytes = act / ((sp || c.scatter_gather) ? t : 1.0);
  cm.pp_send_intra = P2PCostOf(prof, cm.pp_message_bytes, true);
  cm.pp_send_inter = P2PCostOf(prof, cm.pp_message_bytes, false);
  return cm;
}

}  // namespace shardcast
