#include "report/text.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <sstream>

#include <fmt/format.h>

#include "common/text.h"
#include "simulator/cost_model.h"

namespace shardcast {

namespace {

std::string Pct(double x) { return fmt::format("{:.1f}%", 100.0 * x); }

/// A rate (tokens or samples a second): whole units, or three significant digits below 100 (a
/// huge model's 0.274 samples/s is not 0).
std::string Rate(double x) { return x >= 100 ? fmt::format("{:.0f}", x) : fmt::format("{:.3g}", x); }

/// Layers per stage in stage order with runs of equal counts shortened: {7, 8, 8, 7} gives
/// "1 stage of 7, then 2 stages of 8, then 1 stage of 7".
std::string StageRuns(const std::vector<std::int64_t>& v) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j < v.size() && v[j] == v[i]) ++j;
    parts.push_back(fmt::format("{} stage{} of {}", j - i, j - i > 1 ? "s" : "", v[i]));
    i = j;
  }
  return Join(parts, ", then ");
}

}  // namespace

namespace {
/// What an op's hidden part runs beside, for the ops table.
const char* HiddenBehind(const Op& o) {
  if (o.name == "activation_offload") return "the forward (host link, device to host)";
  if (o.name == "activation_reload") return "the backward of the layer above (host link, host to device)";
  return o.context_parallel ? "attention" : "the wgrad GEMM";
}

/// The stage that waits least on the others (the least bubble) and what it holds beside its layers:
/// the pipeline runs at its pace.
std::string BusiestStageLine(const Model& m, const SimulationResult& r) {
  const StageResult* busiest = &r.stages.front();
  for (const auto& s : r.stages) {
    if (s.time.bubble_s < busiest->time.bubble_s) busiest = &s;
  }
  std::vector<std::string> beside;
  if (busiest->stage == 0) beside.push_back("the embedding");
  if (busiest->stage + 1 == static_cast<int>(r.stages.size())) {
    beside.push_back("the output layer and loss");
    if (m.mtp_num_layers > 0) beside.push_back(fmt::format("{} MTP module{}", m.mtp_num_layers, m.mtp_num_layers == 1 ? "" : "s"));
  }
  return fmt::format("  busiest: stage {} ({} layer{}{}), the least bubble ({}): the others wait on it and on the "
                     "pipeline's fill and drain\n",
                     busiest->stage, busiest->layers, busiest->layers == 1 ? "" : "s",
                     beside.empty() ? std::string() : " with " + Join(beside, ", "),
                     FormatSeconds(busiest->time.bubble_s));
}
}  // namespace

void WriteOps(std::ostream& out, const Model& m, const ParallelConfig& c, const Cluster& cl, const HardwareProfile& prof) {
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  out << fmt::format("\nOps per micro-batch on one GPU (mbs {}, {} tokens; time from the profile)\n",
                           c.micro_batch_size, cm.tokens_per_microbatch);
  out << "  (MB: bytes read and written, or a collective's nccl-tests size; GEMM shapes are per GPU,\n"
               "   batch x (m x n x k) for batched GEMMs; achieved: FLOP rate, HBM rate when bandwidth-bound,\n"
               "   nccl-tests busbw for collectives)\n";
  out << fmt::format("  {:<34} {:<15} {:<10} {:>28} {:>9} {:>9} {:>10} {:>16}\n", "op", "pass", "kind",
                           "shape", "GFLOP", "MB", "time us", "achieved");
  auto table = [&](const std::string& title, const std::vector<Op>& ops) {
    if (ops.empty()) return;
    out << "  " << title << "\n";
    double total = 0;
    for (const auto& o : ops) {
      std::string shape;
      if (o.kind == OpKind::kGemm) {
        shape = o.batch > 1 ? fmt::format("{:.0f} x ({:.0f} x {:.0f} x {:.0f})", o.batch, o.m, o.n, o.k)
                            : fmt::format("{:.0f} x {:.0f} x {:.0f}", o.m, o.n, o.k);
      }
      if (o.kind == OpKind::kCollective) shape = ToString(o.collective);
      std::string achieved;
      const double t = o.duration_s + o.hidden_s;
      if (t > 0 && (o.kind == OpKind::kGemm || o.kind == OpKind::kAttention)) {
        const bool bw_bound = o.kind == OpKind::kGemm &&
                              o.bytes / (prof.hbm_GBps * 1e9) > o.flops / (prof.gemm_peak_tflops * 1e12 * prof.gemm_max_efficiency);
        achieved = bw_bound ? Rate(o.bytes / t / 1e9) + " GB/s" : Rate(o.flops / t / 1e12) + " TFLOP/s";
      }
      if (t > 0 && o.kind == OpKind::kMemory) achieved = Rate(o.bytes / t / 1e9) + " GB/s";
      if (t > 0 && o.kind == OpKind::kCollective && o.context_parallel) {
        const bool a2a = o.collective == CollectiveOp::kAllToAll;
        const int n = a2a ? cm.cp.a2a_group.ranks : cm.cp.group.ranks;
        achieved = o.collective == CollectiveOp::kSendRecv
                       ? Rate(o.bytes / t / 1e9) + " GB/s a hop"
                       : "busbw " + Rate(BusBwFactor(o.collective, n) * o.bytes / t / 1e9) + " GB/s";
      } else if (t > 0 && o.kind == OpKind::kCollective && o.expert_parallel) {
        const int n = OnExpertTensorParallelGroup(o) ? cm.moe.etp_group.ranks : cm.moe.ep_group.ranks;
        achieved = "busbw " + Rate(BusBwFactor(o.collective, n) * o.bytes / t / 1e9) + " GB/s";
      } else if (t > 0 && o.kind == OpKind::kCollective && cm.tp_group.ranks > 1) {
        achieved = "busbw " + Rate(BusBwFactor(o.collective, cm.tp_group.ranks) * o.bytes / t / 1e9) + " GB/s";
      }
      out << fmt::format("    {:<32} {:<15} {:<10} {:>28} {:>9.3f} {:>9.2f} {:>10.1f} {:>16}{}\n", o.name,
                               ToString(o.pass), ToString(o.kind), shape, o.flops / 1e9, o.bytes / 1e6,
                               o.duration_s * 1e6, achieved,
                               o.overlapped      ? "  (overlapped: not in the sum)"
                               : o.hidden_s > 0 ? fmt::format("  (+{:.1f} us hidden behind {})", o.hidden_s * 1e6,
                                                              HiddenBehind(o))
                                                : std::string());
      if (!o.overlapped) total += o.duration_s;
    }
    out << fmt::format("    {:<32} {:>84.1f}\n", "sum (not overlapped)", total * 1e6);
  };
  const std::int64_t moe_layers = cm.moe_layer_ops.empty() ? 0 : m.MoeLayersIn(0, m.num_layers);
  // Partial recompute: the layers that rerun (their tables first) and those left alone (after),
  // each shown where some layer is of its kind.
  const auto [rerun, layers] = RecomputedLayersTotal(m, c);
  const bool partial = c.PartialRecompute();
  const bool show_rerun = !partial || rerun > 0, show_plain = partial && rerun < layers;
  const std::string reruns = partial ? " that partial recompute reruns " + c.PartialRecomputeName() : "";
  const std::string dense = moe_layers > 0 ? fmt::format("one dense transformer layer ({} of {})", m.num_layers - moe_layers,
                                                         m.num_layers)
                                           : std::string("one transformer layer");
  if (moe_layers < m.num_layers && show_rerun) table(dense + reruns, cm.layer_ops);
  const std::string moe = moe_layers == 0 ? std::string() : fmt::format(
      "one mixture-of-experts layer ({} of {}; the busiest expert rank's {:.0f} tokens an expert: {:.0f} routed x top-{} x "
      "etp {} / {:.0f} local experts x load imbalance {:.3f}, {}{})",
      moe_layers, m.num_layers, cm.moe.tokens_per_expert, cm.moe.tokens_routed, m.moe.top_k, cm.moe.etp,
      cm.moe.local_experts, cm.moe.imbalance, MoeImbalanceSource(c, m.moe),
      cm.moe.node_imbalance != 1 ? fmt::format("; DeepEP's NIC part at the busiest node's {:.3f}", cm.moe.node_imbalance)
                                 : std::string());
  if (moe_layers > 0 && show_rerun) table(moe + reruns, cm.moe_layer_ops);
  // The layers partial recompute leaves alone run their own ops (no recomputed forward).
  const std::string alone = " that partial recompute leaves alone " + c.PartialRecomputeName();
  if (show_plain && !cm.plain_layer_ops.empty() && moe_layers < m.num_layers) table(dense + alone, cm.plain_layer_ops);
  if (show_plain && !cm.plain_moe_layer_ops.empty()) table(moe + alone, cm.plain_moe_layer_ops);
  table("embedding (first stage)", cm.embedding_ops);
  table("output layer and loss (last stage)", cm.output_ops);
  table(fmt::format("multi-token prediction module (last stage, {} of them; each adds a {} transformer layer as above{})",
                    m.mtp_num_layers, m.moe.enabled() ? "mixture-of-experts" : "dense",
                    partial ? ", the one partial recompute leaves alone (it does not rerun)" : ""),
        cm.mtp_ops);
  table("pipeline receive (scatter/gather all-gather; forward after the first chunk, backward before the last)",
        cm.pp_recv_ops);
}

std::string MoeRoutingCaveat(const Model& m, const ParallelConfig& base) {
  if (!m.moe.enabled()) return "";
  if (base.moe_force_load_balancing) {
    return "MoE routing: --moe-router-force-load-balancing plans runs whose router is replaced by balanced random\n"
           "choices, as Megatron-Core's benchmarks run; a trained router is less balanced, and the flag in the\n"
           "launch arguments is for benchmarking, not for training a model.\n";
  }
  if (!m.moe.router_global_batch_balance || base.moe_load_imbalance > 0) return "";
  return fmt::format(
      "MoE routing: this model's router was trained with global-batch balancing, so every plan with ep > 1\n"
      "runs its busiest expert rank at {}x the mean tokens (fitted at ep {} on Qwen3-235B-A22B runs; other ep\n"
      "sizes extrapolated), which favours small ep; --moe-load-imbalance F sets a measured value,\n"
      "--moe-router-force-load-balancing plans balanced routing (benchmarks).\n",
      kGlobalBatchRouterImbalance, kGlobalBatchRouterImbalanceEp);
}

/// What DeepSpeed stage 3's parameter coordinator does over one micro-batch (Zero3Impl::kDeepSpeed):
/// the figures the simulation takes from it.
void WriteDeepSpeedZero3(std::ostream& out, const SimulationResult& r, const ParallelConfig& c, const Model& m) {
  if (!c.deepspeed_zero3() || !r.feasible) return;
  const DeepSpeedZero3Plan& d = r.ds_zero3;
  out << fmt::format("\nDeepSpeed stage 3 (its parameter coordinator replayed over one micro-batch's modules; "
                     "docs/simulator.md, \"ZeRO-3\"):\n"
                     "  prefetches issued {:.2f} layers ahead of their use in the forward, {:.2f} in the backward (the "
                     "simulation issues a layer's prefetched share {} and {} layers ahead)\n"
                     "  at most {} gathered at once ({:.4g} elements at {} bytes; stage3_max_live_parameters {:.4g} "
                     "caps what a fetch prefetches, not the module it fetches nor the tensors kept for reuse; "
                     "stage3_prefetch_bucket_size {:.4g})\n"
                     "  {} of {} layers stay gathered from the forward into the backward (within "
                     "stage3_max_reuse_distance {:.4g} of their next use, or passed by the prefetch while gathered); "
                     "{:.4g} elements gathered per micro-batch, {:.4g} of them on demand past each pass's first "
                     "module (the module waits for them)\n",
                     d.forward_lead_layers, d.backward_lead_layers, d.SimulatedLeadLayers(0), d.SimulatedLeadLayers(1),
                     FormatGiB(d.peak_live_elems * c.param_gather_bytes), d.peak_live_elems, c.param_gather_bytes,
                     c.ds_max_live_elems, c.ds_prefetch_bucket_elems, d.kept_layers, m.num_layers,
                     c.ds_max_reuse_distance_elems, d.gathered_elems[0] + d.gathered_elems[1],
                     d.on_demand_elems[0] + d.on_demand_elems[1]);
}

std::string PartialNodeLine(std::int64_t gpus, std::int64_t gpus_per_node) {
  if (gpus_per_node <= 0 || gpus % gpus_per_node == 0) return "";
  return fmt::format("Partial node: {} GPUs are {:.2f} nodes of {}; whole nodes are {} GPUs\n", gpus,
                     static_cast<double>(gpus) / static_cast<double>(gpus_per_node), gpus_per_node,
                     (gpus + gpus_per_node - 1) / gpus_per_node * gpus_per_node);
}

std::string UnfusedAttentionLine(const Gpu& g) {
  if (g.HasFlashAttention()) return "";
  return fmt::format("  attention: unfused, saving the s x s scores (FlashAttention needs Turing or later; the {} is "
                     "{})\n",
                     g.display_name, g.arch);
}

std::string StraddlingGroupsLine(const ParallelConfig& c, std::int64_t gpus, std::int64_t gpus_per_node) {
  if (gpus_per_node <= 0 || gpus <= gpus_per_node) return "";
  // Blocks of consecutive ranks a group needs inside one node (Megatron's rank order): tp, tp x cp,
  // the expert grid's ep x etp. One larger than a node spans nodes in the simulation too (the tp
  // note says so); a smaller one that does not divide the node is placed inside one.
  std::vector<std::string> names;
  auto straddles = [&](std::int64_t n) { return n > 1 && n < gpus_per_node && gpus_per_node % n != 0; };
  if (straddles(c.tp)) names.push_back(fmt::format("tp {}", c.tp));
  if (c.cp > 1 && !straddles(c.tp) && straddles(c.tp * c.cp)) names.push_back(fmt::format("tp x cp {}", c.tp * c.cp));
  const std::int64_t expert_block = c.ep * c.expert_tp();
  if (c.ep > 1 && straddles(expert_block)) names.push_back(fmt::format("ep x etp {}", expert_block));
  if (names.empty()) return "";
  return fmt::format("Node boundaries: {} {} not tile the {} GPUs of a node, so with ranks filling the nodes in "
                     "order some groups would straddle two nodes; the simulation places each group inside a node, "
                     "as a topology-aware scheduler does by leaving each node's remainder idle (Slurm's --segment; "
                     "the GPU count, cost and energy here leave those idle GPUs out)\n",
                     Join(names, " and "), names.size() > 1 ? "do" : "does", gpus_per_node);
}

namespace {

/// The header's lines on an MoE model's expert load (with expert parallelism, or a capacity factor
/// under 1): the busiest rank's tokens over the mean and where that comes from; DeepEP's busiest
/// node across nodes. "" otherwise.
std::string ExpertLoadLines(const SimulationResult& r, const Model& m, const ParallelConfig& c) {
  if (!m.moe.enabled() || !r.feasible || (c.ep <= 1 && r.moe_load_imbalance >= 1)) return "";
  std::string s = fmt::format("  expert load: the busiest expert-parallel rank takes {:.3f} x the mean tokens ({})\n",
                              r.moe_load_imbalance, MoeImbalanceSource(c, m.moe));
  if (r.moe_node_imbalance > 1) {
    s += fmt::format("  DeepEP across nodes: the busiest node's NICs carry {:.3f} x the mean (MoeNodeImbalance, "
                     "docs/simulator.md)\n",
                     r.moe_node_imbalance);
  }
  return s;
}

/// The simulation's header: model, cluster, profile, configuration and the lines that qualify them.
void WriteSimulationHeader(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c,
                           const Cluster& cl, std::int64_t gpus, const HardwareProfile& prof) {
  out << fmt::format("{} on {} x {} ({}), profile: {}\n", m.name, gpus, cl.gpu.display_name, cl.name,
                           prof.kind == "default" ? "built-in default" : prof.source);
  for (const auto& a : prof.adjustments) out << "  profile adjusted: " << a << "\n";
  if (prof.kind == "default") {
    for (const auto& e : prof.Estimates(c.flash_attention, c.precision)) out << "  profile estimate: " << e << "\n";
  }
  const std::int64_t mb = c.num_microbatches();
  out << fmt::format("  {}  seq {}  micro-batches per step {}\n", c.Summary(),
                           c.seq_length > 0 ? c.seq_length : m.seq_length, mb > 0 ? std::to_string(mb) : "?");
  if (const std::string partial = PartialNodeLine(gpus, cl.gpus_per_node); !partial.empty()) out << "  " << partial;
  if (const std::string s = StraddlingGroupsLine(c, gpus, cl.gpus_per_node); !s.empty()) out << "  " << s;
  out << UnfusedAttentionLine(cl.gpu);
  out << ExpertLoadLines(r, m, c);
}

/// Notes on the configuration: an uneven pipeline split, a vocabulary tp does not divide, a
/// sliding window, tensor parallelism across nodes, what selective recompute and the EP overlap do.
void WriteSimulationNotes(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c,
                          const Cluster& cl) {
  const std::int64_t slots = m.num_layers + (c.embedding_slots && c.pp > 1 ? 2 : 0);
  const bool first_last = c.first_stage_layers >= 0 || c.last_stage_layers >= 0;
  if (c.pp > 1 && (first_last || c.embedding_slots || slots % c.pp != 0)) {
    std::vector<std::int64_t> layers;
    for (const auto& st : r.stages) layers.push_back(st.layers);
    out << fmt::format("\nPipeline split (transformer layers per stage): {} ({})", StageRuns(layers),
                             first_last ? "Megatron-LM's --decoder-first/last-pipeline-num-layers"
                             : c.embedding_slots ? "embedding and loss as layer slots, (L + 2) / pp"
                             : c.even_chunks     ? "even chunks, the remainder to the first: a "
                                                   "--pipeline-model-parallel-layout for Megatron-LM"
                                                 : "uneven");
    if (!first_last && !c.even_chunks && slots % c.pp != 0) {
      out << fmt::format(": {} {} over pp = {} do not divide; DeepSpeed's uniform partition gives the remainder to "
                               "the first stages, Megatron-LM needs them to divide (or first/last stage layer counts)",
                               slots, c.embedding_slots ? "layer slots" : "layers", c.pp);
    }
    out << "\n";
  }
  if (c.PartialRecompute()) {
    std::int64_t rerun = 0, layers = 0;
    std::string per_stage;
    for (const auto& st : r.stages) {
      rerun += st.recomputed_layers;
      layers += st.layers;
      per_stage += fmt::format("{}{}/{}", per_stage.empty() ? "" : ", ", st.recomputed_layers, st.layers);
    }
    out << fmt::format("\nPartial recompute {}: {} of {} layers rerun their forward in the backward (per stage: {}){}\n",
                       c.PartialRecomputeName(), rerun, layers, per_stage,
                       rerun == 0 ? "; none, so the step is the one without recompute"
                       : rerun == layers && m.mtp_num_layers == 0
                           ? "; all, so the step is the one with full recompute"
                       : rerun == layers ? "; all, but not the multi-token-prediction layers, which full recompute reruns"
                                         : "");
  }
  if (c.tp > 1 && m.vocab_size % c.tp != 0) {
    const std::int64_t unit = 128 * c.tp, padded = (m.vocab_size + unit - 1) / unit * unit;
    out << fmt::format("\nNote: vocab_size {} is not a multiple of tp = {}: the simulation shards it as it is ({:.2f} "
                             "rows per rank); Megatron-LM pads it to {} (a multiple of 128 x tp, "
                             "--make-vocab-size-divisible-by 128), {:.1f}% more embedding and output-layer rows.\n",
                             m.vocab_size, c.tp, static_cast<double>(m.vocab_size) / static_cast<double>(c.tp), padded,
                             100.0 * static_cast<double>(padded - m.vocab_size) / static_cast<double>(m.vocab_size));
  }
  if (const std::int64_t seq = c.seq_length > 0 ? c.seq_length : m.seq_length;
      m.attention_window > 0 && m.attention_window < seq) {
    if (m.WindowedLayers() > 0) {
      out << fmt::format("\nNote: {} = {} is shorter than the sequence ({} tokens): {} of the {} layers attend within "
                         "the window{}, their flash attention at {:.3f} of the causal sequence's FLOPs and at the "
                         "efficiency of a {}-token kernel; MFU's model FLOPs count the whole causal sequence (its "
                         "convention), the executed FLOPs the window.\n",
                         m.attention_window_key, m.attention_window, seq, m.WindowedLayers(), m.num_layers,
                         !m.window_layer_pattern.empty() ? std::string(" (the layers window_attn_skip_freq's list marks 1)")
                         : m.window_attn_skip_freq > 0
                             ? fmt::format(" (the layers numbered a multiple of window_attn_skip_freq = {} attend to all of it)",
                                           m.window_attn_skip_freq)
                             : std::string(),
                         m.WindowFlopRatio(seq), m.attention_window);
    } else if (!m.attention_window_modelled) {
      out << fmt::format("\nNote: {} = {} is shorter than the sequence ({} tokens): this windowed attention is not "
                         "modelled, so "
                         "attention is costed over the whole causal sequence, more FLOPs and time than the window "
                         "takes.\n",
                         m.attention_window_key, m.attention_window, seq);
    }
  }
  if (c.tp > cl.gpus_per_node) {
    out << fmt::format("\nNote: tensor parallelism spans nodes (tp = {} > {} GPUs per node): its collectives, on "
                             "the critical path of every layer, cross the inter-node network; `plan` keeps tp within a "
                             "node (--max-tp).\n",
                             c.tp, cl.gpus_per_node);
  }
  if (c.recompute == Recompute::kSelective && c.flash_attention && (c.recompute_modules & kRecomputeCoreAttn)) {
    out << "\nNote: selective recompute of core_attn with flash attention reruns the flash forward before its\n"
                 "      backward (Megatron-Core checkpoints the core attention) but saves almost nothing: flash\n"
                 "      attention keeps no s x s scores. --recompute-modules picks other modules (moe, moe_act,\n"
                 "      layernorm, mlp, ...); --no-flash-attention gives the unfused attention of Megatron 2022.\n";
  }
  if (c.moe_a2a_overlap) {
    out << "\nNote: the EP A2A overlap hides each exchange up to the paired pass's compute; the one published run\n"
                 "      with it (Qwen3-235B, Megatron-MoE-ModelZoo) gained 11% where this model predicts 25%\n"
                 "      (docs/accuracy.md, \"MoE runs\"): read its saving as an upper bound.\n";
  }
}

/// The step: time, throughput, MFU/HFU, executed FLOPs and the bubble beside its closed form.
void WriteStepSummary(std::ostream& out, const SimulationResult& r, const ParallelConfig& c, const Cluster& cl) {
  out << "\nStep\n";
  out << fmt::format("  step time        {}\n", FormatSeconds(r.step_time_s));
  out << fmt::format("  throughput       {} tokens/s, {} samples/s\n", Rate(r.tokens_per_s), Rate(r.samples_per_s));
  out << fmt::format("  MFU (causal)     {}   (model FLOPs 6*N_gemm + 6*L*s*a*d per token: causal attention, half the\n"
                           "                   matrix, as current Megatron-LM counts it; dense {} peak {} TFLOP/s per GPU)\n",
                           Pct(r.mfu_causal), ToString(MfuPeakPrecision(c.precision)),
                           FormatRate(cl.gpu.PeakFlops(MfuPeakPrecision(c.precision)) / 1e12));
  out << fmt::format("  MFU / HFU        {} / {}   (PaLM / SC21: 6*N_gemm + 12*L*s*a*d per token, the full attention\n"
                           "                   matrix; HFU adds recompute)\n",
                           Pct(r.mfu), Pct(r.hfu));
  if (IsLowPrecision(c.precision)) {
    out << fmt::format("                   the linear layers' GEMMs run in {} (dense peak {} TFLOP/s), so MFU\n"
                             "                   and executed FLOPs may pass 100% of the {} peak\n",
                             ToString(c.precision), FormatRate(cl.gpu.PeakFlops(c.precision) / 1e12),
                             ToString(MfuPeakPrecision(c.precision)));
  }
  out << fmt::format("  executed FLOPs   {} of peak   (what the kernels run: {},\n"
                           "                   recomputed layers; cannot exceed the ops' rates)\n",
                           Pct(r.executed_flops_utilization),
                           c.flash_attention ? "causal flash attention at half the matrix and its backward recompute"
                                             : "unfused attention over the full matrix");
  out << fmt::format("  bubble fraction  {}   (compute stream waiting on other stages, mean over stages)\n",
                           Pct(r.bubble_fraction));
  const std::int64_t nmb = c.num_microbatches();
  if (c.pp > 1 && nmb > 0 && c.schedule != Schedule::kZbH1) {
    // Narayanan et al. 2021 eq. 1 and section 2.2: (p-1)/(v*m) of the ideal time, so
    // (p-1)/(v*m + p-1) of the step, with equal stages and free transfers.
    // With f pipeline flushes each of the f schedules fills and drains: f*(p-1) idle slots.
    const double v = c.schedule == Schedule::kInterleaved ? static_cast<double>(c.vp) : 1.0;
    const double p1 = static_cast<double>(c.pp - 1);
    const double f = static_cast<double>(std::max<std::int64_t>(1, c.pipeline_flushes));
    const std::string form = f > 1 ? fmt::format("f*(p-1)/(v*m+f*(p-1)) (p {}, v {:g}, m {}, f {:g} flushes)", c.pp, v, nmb, f)
                                   : fmt::format("(p-1)/(v*m+p-1) (p {}, v {:g}, m {})", c.pp, v, nmb);
    out << fmt::format("                   equal stages and free transfers would give {} = {};\n"
                             "                   unequal stages (work and communication) and waits on transfers raise the measured "
                             "figure;\n                   the optimizer step and data-parallel tail, in its step time "
                             "but not in the closed form, lower it\n",
                             Pct(f * p1 / (v * static_cast<double>(nmb) + f * p1)), form);
  }
}

/// The time breakdown, mean over stages.
void WriteTimeBreakdown(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c) {
  out << "\nTime breakdown (mean over stages; parts add up to the step time)\n";
  const auto& b = r.breakdown;
  auto line = [&](const char* name, double s, const char* note) {
    out << fmt::format("  {:<22} {:>12}  {:>6}  {}\n", name, FormatSeconds(s), Pct(s / r.step_time_s), note);
  };
  line("compute", b.compute_s, "GEMMs, attention, memory-bound ops (incl. overlap slowdown)");
  line("recompute", b.recompute_s, "activation recomputation (incl. its TP collectives)");
  line("tensor-parallel comm", b.tp_comm_s, "TP/SP collectives on the critical path");
  if (m.moe.enabled()) line("expert-parallel comm", b.ep_comm_s, "MoE token dispatch and combine (and expert-TP gathers)");
  if (c.cp > 1) line("context-parallel comm", b.cp_comm_s, "K/V exchange not hidden behind attention");
  line("pipeline comm", b.pp_comm_s, "waiting on a stage-to-stage transfer in flight");
  std::string dp_note = "waiting on own gradient/parameter collectives";
  if (m.tie_embeddings && c.pp > 1) dp_note += " (and the tied-embedding all-reduce)";
  if (c.deepspeed2021_zero3()) dp_note += " (and their host work and copies: DeepSpeed 2021 ZeRO-3)";
  line("data-parallel comm", b.dp_comm_s, dp_note.c_str());
  line("bubble", b.bubble_s, "waiting on other stages (fill, drain, imbalance)");
  line("optimizer", b.optimizer_s, "Adam step and gradient norm");
}

/// Memory per GPU by pipeline stage, with the caching allocator's retries and the at-risk line.
void WriteStageMemory(std::ostream& out, const SimulationResult& r, const ParallelConfig& c) {
  out << "\nMemory per GPU by pipeline stage (usable " << FormatGiB(r.usable_memory_bytes) << ")\n";
  const bool chunks = c.vp > 1 && c.schedule == Schedule::kInterleaved;
  std::vector<std::vector<std::string>> mem_rows = {
      {"stage", "layers", "weights", "grads", "optimizer", "activ.", "(in flight)", "other", "peak", "reserved", ""}};
  for (const auto& s : r.stages) {
    const auto& mm = s.memory;
    mem_rows.push_back({std::to_string(s.stage), std::to_string(s.layers), FormatGiB(mm.weights_bytes),
                        FormatGiB(mm.grads_bytes), FormatGiB(mm.optimizer_bytes), FormatGiB(mm.activations_bytes),
                        fmt::format("{} {}", mm.peak_inflight_microbatches, chunks ? "chunks" : "mb"),
                        FormatGiB(mm.comm_buffer_bytes + mm.framework_bytes), FormatGiB(mm.peak_bytes),
                        FormatGiB(mm.reserved_bytes),
                        !s.fits ? "DOES NOT FIT" : s.at_risk ? "fits, at risk" : "fits"});
  }
  // Widths of the usual figures; a column widens for a model whose GiB run to 6 digits.
  out << AlignColumns(mem_rows, {5, 6, 10, 10, 10, 10, 12, 9, 10, 10});
  out << fmt::format(
      "  in flight: {} whose activations are held at the peak\n"
      "  other: communication buffers plus the profile's framework overhead (CUDA context, NCCL)\n"
      "  peak: allocated tensors at their most, plus other; reserved: what PyTorch's caching allocator holds\n"
      "  at its most in a replay of the stage's allocations (rounding, segments, fragmentation), plus other\n"
      "  (docs/simulator.md, \"Reserved memory\"). Fits: the peak within usable memory, and room in the\n"
      "  replay for every request, releasing the cache where it must (PyTorch runs out of memory otherwise).\n",
      chunks ? "forward chunk passes (each 1/vp of the stage's layers)" : "micro-batches");
  const std::int64_t nmb_all = c.num_microbatches();
  for (const auto& s : r.stages) {
    if (s.memory.allocator_retries > 0) {
      const std::int64_t replayed = s.memory.allocator_replayed_microbatches;
      const std::string over = replayed > 0 && replayed < nmb_all
                                   ? fmt::format("in a replayed step of {} of the step's {} micro-batches", replayed, nmb_all)
                                   : std::string("per step");
      out << fmt::format("  stage {}: the caching allocator runs out of room and releases its cache {} times {}\n"
                         "  (num_alloc_retries; each a device synchronization and cudaFree/cudaMalloc calls)\n",
                         s.stage, s.memory.allocator_retries, over);
    }
    if (s.memory.reserved_unlimited_bytes > s.memory.reserved_bytes) {
      out << fmt::format("  stage {}: without this GPU's limit the allocator would reserve {} (what a GPU with more\n"
                         "  memory needs for this stage; the reserved column is what it holds within the limit)\n",
                         s.stage, FormatGiB(s.memory.reserved_unlimited_bytes));
    }
  }
  bool any_at_risk = false;
  for (const auto& s : r.stages) any_at_risk = any_at_risk || s.at_risk;
  if (any_at_risk) {
    out << "  at risk: the caching allocator's replay had to release its cache to find room (the retries\n"
           "  above): each release synchronizes the device, and the step is close to out of memory.\n";
  }
}

/// Time per stage, the busiest stage and the critical path.
void WriteStageTimes(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c) {
  const bool moe = m.moe.enabled();
  out << fmt::format("\nPer stage: time (compute incl. recompute / tp{}{} / bubble / pp / dp / optimizer)\n",
                           c.cp > 1 ? " / cp" : "", moe ? " / ep" : "");
  for (const auto& s : r.stages) {
    const auto& t = s.time;
    out << fmt::format("  stage {:>3}: {} / {}{}{} / {} / {} / {} / {}   bubble {}\n", s.stage,
                             FormatSeconds(t.compute_s + t.recompute_s), FormatSeconds(t.tp_comm_s),
                             c.cp > 1 ? " / " + FormatSeconds(t.cp_comm_s) : std::string(),
                             moe ? " / " + FormatSeconds(t.ep_comm_s) : std::string(),
                             FormatSeconds(t.bubble_s), FormatSeconds(t.pp_comm_s), FormatSeconds(t.dp_comm_s),
                             FormatSeconds(t.optimizer_s), Pct(s.bubble_fraction));
  }
  if (r.stages.size() > 1) out << BusiestStageLine(m, r);
  out << "\nCritical path\n";
  for (const auto& l : r.critical_path) out << "  " << l << "\n";
}

}  // namespace

std::vector<std::string> SimulationNotes(const SimulationResult& r, const Model& m, const ParallelConfig& c,
                                         const Cluster& cl, std::int64_t gpus) {
  std::vector<std::string> out;
  // One note a block of text: its lines joined, runs of spaces collapsed, "Note: " dropped.
  auto add = [&out](const std::string& block) {
    std::string s;
    bool gap = false;
    for (const char ch : block) {
      if (ch == ' ' || ch == '\n') {
        gap = !s.empty();
        continue;
      }
      if (gap) s += ' ';
      gap = false;
      s += ch;
    }
    if (s.rfind("Note: ", 0) == 0) s.erase(0, 6);
    if (!s.empty()) out.push_back(s);
  };
  auto add_each = [&add](const std::string& text, const std::string& separator) {
    for (std::size_t at = 0; at <= text.size();) {
      const std::size_t next = std::min(text.find(separator, at), text.size());
      add(text.substr(at, next - at));
      at = next + separator.size();
    }
  };
  // The header's qualifying lines, one note each, then the notes' blocks (blank-line separated).
  add_each(PartialNodeLine(gpus, cl.gpus_per_node) + StraddlingGroupsLine(c, gpus, cl.gpus_per_node) +
               UnfusedAttentionLine(cl.gpu) + ExpertLoadLines(r, m, c),
           "\n");
  if (r.feasible) {
    std::ostringstream notes;
    WriteSimulationNotes(notes, r, m, c, cl);
    add_each(notes.str(), "\n\n");
  }
  return out;
}

void WriteSimulation(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c,
                     const Cluster& cl, std::int64_t gpus, const HardwareProfile& prof) {
  WriteSimulationHeader(out, r, m, c, cl, gpus, prof);
  if (!r.feasible) {
    out << "\nThis configuration cannot run:\n";
    for (const auto& s : r.reasons) out << "  - " << s << "\n";
    return;
  }
  if (!r.fits) {
    out << "\nDOES NOT FIT in GPU memory (the time below is what it would take with enough memory):\n";
    for (const auto& s : r.reasons) out << "  - " << s << "\n";
  }
  WriteSimulationNotes(out, r, m, c, cl);
  WriteDeepSpeedZero3(out, r, c, m);
  WriteStepSummary(out, r, c, cl);
  WriteTimeBreakdown(out, r, m, c);
  WriteStageMemory(out, r, c);
  WriteStageTimes(out, r, m, c);
}

namespace {

std::string Change(double base, double now) {
  return base > 0 && now > 0 ? fmt::format("{:+.1f}%", 100.0 * (now / base - 1.0)) : std::string("-");
}

}  // namespace

void WriteBeside(std::ostream& out, const SimulationResult& base, const SimulationResult& what_if, const std::string& base_label,
                 const std::string& what_if_label) {
  auto cell = [](const SimulationResult& r, const std::string& text) { return r.feasible ? text : std::string("cannot run"); };
  out << fmt::format("  {:<16} {:>22} {:>22} {:>8}\n", "", base_label, what_if_label, "change");
  auto row = [&](const char* name, double b, double w, const std::string& bt, const std::string& wt) {
    out << fmt::format("  {:<16} {:>22} {:>22} {:>8}\n", name, cell(base, bt), cell(what_if, wt),
                             base.feasible && what_if.feasible ? Change(b, w) : "-");
  };
  row("step time", base.step_time_s, what_if.step_time_s, FormatSeconds(base.step_time_s),
      FormatSeconds(what_if.step_time_s));
  row("tokens/s", base.tokens_per_s, what_if.tokens_per_s, Rate(base.tokens_per_s), Rate(what_if.tokens_per_s));
  // Fractions change in percentage points.
  auto fraction = [&](const char* name, double b, double w) {
    out << fmt::format("  {:<16} {:>22} {:>22} {:>8}\n", name, cell(base, fmt::format("{:.1f}%", 100 * b)),
                       cell(what_if, fmt::format("{:.1f}%", 100 * w)),
                       base.feasible && what_if.feasible ? fmt::format("{:+.1f} pp", 100 * (w - b)) : "-");
  };
  fraction("MFU (causal)", base.mfu_causal, what_if.mfu_causal);
  fraction("bubble", base.bubble_fraction, what_if.bubble_fraction);
  row("peak memory", base.peak_memory_bytes, what_if.peak_memory_bytes, FormatGiB(base.peak_memory_bytes),
      FormatGiB(what_if.peak_memory_bytes));
  // As the memory table says it: a fit that needs the allocator to release its cache is at risk.
  const auto fits = [](const SimulationResult& r) { return !r.fits ? "no" : r.memory_at_risk ? "yes, at risk" : "yes"; };
  out << fmt::format("  {:<16} {:>22} {:>22}\n", "fits", fits(base), fits(what_if));
  for (const auto& why : what_if.reasons) {  // what the baseline does not share
    if (std::find(base.reasons.begin(), base.reasons.end(), why) == base.reasons.end()) {
      out << "  " << what_if_label << " cannot run: " << why << "\n";
    }
  }
}

Json BesideJson(const SimulationResult& base, const SimulationResult& what_if) {
  auto headline = [](const SimulationResult& r) {
    return Json{{"feasible", r.feasible},
                {"step_time_s", r.step_time_s},
                {"tokens_per_s", r.tokens_per_s},
                {"mfu", r.mfu},
                {"mfu_causal", r.mfu_causal},
                {"bubble_fraction", r.bubble_fraction},
                {"peak_memory_bytes", r.peak_memory_bytes},
                {"fits", r.fits},
                {"memory_at_risk", r.memory_at_risk}};
  };
  const bool both = base.feasible && what_if.feasible && base.step_time_s > 0;
  return Json{{"baseline", headline(base)},
              {"what_if", headline(what_if)},
              {"step_time_change", both ? Json(what_if.step_time_s / base.step_time_s - 1) : Json(nullptr)},
              {"tokens_per_s_change", both ? Json(what_if.tokens_per_s / base.tokens_per_s - 1) : Json(nullptr)}};
}

namespace {

/// A stage's breakdown, or null for a stage the result does not have.
const StageBreakdown* StageTime(const SimulationResult& r, int stage) {
  if (stage < 0 || stage >= static_cast<int>(r.stages.size())) return nullptr;
  return &r.stages[static_cast<std::size_t>(stage)].time;
}

/// A stage's compute and optimizer step: what a straggler makes FACTOR times as long. (Its
/// recompute is apart: the breakdown counts the recomputed forward's collectives in it.)
double StageWork(const SimulationResult& r, int stage) {
  const StageBreakdown* t = StageTime(r, stage);
  return t ? t->compute_s + t->optimizer_s : 0;
}
double StageRecompute(const SimulationResult& r, int stage) {
  const StageBreakdown* t = StageTime(r, stage);
  return t ? t->recompute_s : 0;
}

/// The mean over stages other than `stage` of `part` (seconds).
template <typename Part>
double OthersMean(const SimulationResult& r, int stage, Part part) {
  double sum = 0;
  int n = 0;
  for (const auto& s : r.stages) {
    if (s.stage == stage) continue;
    sum += part(s.time);
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

}  // namespace

/// " (x1.1)" when `after` is `factor` x `before`, else " (x1.1 but for N of WHAT, not scaled)":
/// the unscaled part follows from the two figures, (f x before - after) / (f - 1).
std::string ScaledNote(double before, double after, double factor, const char* what) {
  const double fixed = factor > 1 ? (factor * before - after) / (factor - 1) : 0;
  if (std::fabs(fixed) < 1e-5 + 1e-6 * before) return fmt::format(" (x{:g})", factor);
  // A part that grew rather than stayed (the slower links of --straggler-nic lengthen the
  // collectives overlapped with the compute): what it added beyond the scaling.
  if (fixed < 0) return fmt::format(" (x{:g}, and {} more of {}, which grew)", factor, FormatSeconds(after - factor * before), what);
  return fmt::format(" (x{:g} but for {} of {}, not scaled)", factor, FormatSeconds(fixed), what);
}

std::string StragglerWhat(double slowdown, double nic_slowdown) {
  if (slowdown == 1 && nic_slowdown == 1) return "no slowdown";
  if (nic_slowdown > 1 && slowdown > 1) {
    return fmt::format("one GPU's kernels {:g}x as long and its node's network links {:g}x slower", slowdown, nic_slowdown);
  }
  if (nic_slowdown > 1) return fmt::format("one node's network links {:g}x slower", nic_slowdown);
  return fmt::format("one GPU's kernels {:g}x as long", slowdown);
}

void WriteStraggler(std::ostream& out, const SimulationResult& base, const StragglerRun& run) {
  const bool one_stage = base.stages.size() <= 1;
  out << fmt::format("\nWith a straggler on stage {}: {}", run.stage, StragglerWhat(run.slowdown, run.nic_slowdown));
  out << (run.slowdown == 1 && run.nic_slowdown == 1 ? " (the baseline)\n"
          : run.stage_given                          ? " (--straggler-stage)\n"
          : one_stage                                ? "\n"
                                                     : " (the stage where it costs the step most)\n");
  if (run.slowdown > 1) {
    out << "  (the GPU's tensor-, context- and expert-parallel peers wait for it at every collective, the other\n"
           "  stages at the pipeline transfers, the other data-parallel replicas at the gradient reduction)\n";
  }
  if (run.nic_slowdown > 1) {
    out << "  (the node's links carry its stage's data-parallel collectives and the pipeline transfers into and\n"
           "  out of it: they run at the slow links' rate, and every rank in them waits)\n";
  }
  if (run.step_time_by_stage_s.size() > 1) {
    out << "  step with it on stage";
    for (std::size_t s = 0; s < run.step_time_by_stage_s.size(); ++s) {
      if (s > 0 && s % 6 == 0) out << "\n   ";
      out << fmt::format(" {}: {}{}", s, FormatSeconds(run.step_time_by_stage_s[s]),
                         s + 1 < run.step_time_by_stage_s.size() ? "," : "");
    }
    out << "\n";
  }
  for (const auto& n : run.notes) out << "  note: " << n << "\n";
  WriteBeside(out, base, run.result, "all at speed", "with straggler");
  if (!base.feasible || !run.result.feasible) return;
  const double w0 = StageWork(base, run.stage), w1 = StageWork(run.result, run.stage);
  if (run.slowdown > 1 || run.nic_slowdown == 1) {
    out << fmt::format("  stage {} compute and optimizer {} -> {}{}\n", run.stage, FormatSeconds(w0), FormatSeconds(w1),
                       ScaledNote(w0, w1, run.slowdown, "slowdown by collectives overlapped with it"));
  }
  const double r0 = StageRecompute(base, run.stage), r1 = StageRecompute(run.result, run.stage);
  if (r0 > 0 && run.slowdown > 1) {
    out << fmt::format("  stage {} recompute {} -> {}{}\n", run.stage, FormatSeconds(r0), FormatSeconds(r1),
                       ScaledNote(r0, r1, run.slowdown, "the recomputed forward's collectives"));
  }
  if (run.nic_slowdown > 1) {
    const StageBreakdown* a = StageTime(base, run.stage);
    const StageBreakdown* b = StageTime(run.result, run.stage);
    if (a && b) {
      out << fmt::format("  stage {} waiting on data-parallel collectives {} -> {}", run.stage,
                         FormatSeconds(a->dp_comm_s), FormatSeconds(b->dp_comm_s));
      if (!one_stage) {
        out << fmt::format(", on pipeline transfers {} -> {}", FormatSeconds(a->pp_comm_s), FormatSeconds(b->pp_comm_s));
      }
      out << "\n";
    }
  }
  if (!one_stage) {
    auto wait = [](const StageBreakdown& t) { return t.bubble_s + t.pp_comm_s; };
    out << fmt::format("  other stages' mean wait on other stages (bubble, pipeline transfers) {} -> {}\n",
                       FormatSeconds(OthersMean(base, run.stage, wait)),
                       FormatSeconds(OthersMean(run.result, run.stage, wait)));
  }
}

Json StragglerJson(const SimulationResult& base, const StragglerRun& run) {
  Json j = BesideJson(base, run.result);
  j["with_straggler"] = j["what_if"];
  j.erase("what_if");
  j["slowdown"] = run.slowdown;
  j["nic_slowdown"] = run.nic_slowdown;
  j["notes"] = run.notes;
  j["stage"] = run.stage;
  j["stage_given"] = run.stage_given;
  j["step_time_by_stage_s"] = run.step_time_by_stage_s;
  j["stage_compute_baseline_s"] = StageWork(base, run.stage);
  j["stage_compute_s"] = StageWork(run.result, run.stage);
  j["stage_recompute_baseline_s"] = StageRecompute(base, run.stage);
  j["stage_recompute_s"] = StageRecompute(run.result, run.stage);
  return j;
}

}  // namespace shardcast
