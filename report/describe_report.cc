#include "report/describe_report.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "common/text.h"
#include "models/loader.h"
#include "simulator/cost_model.h"

namespace shardcast {
namespace {

std::string Grouped(std::int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0) out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++n;
  }
  return out;
}

/// A configuration holding optimizer `o` at ZeRO stage `z` (bf16 training, the defaults'
/// gradients), for StateBytesFormula.
ParallelConfig AtZero(OptimizerImpl o, int z) {
  ParallelConfig c;
  c.optimizer_impl = o;
  c.zero_stage = z;
  return c;
}

/// What `describe`'s bytes per parameter count for optimizer `o`, one sentence over two lines.
const char* StateReading(OptimizerImpl o) {
  switch (o) {
    case OptimizerImpl::kMegatron:
      return "(mixed-precision Adam, fp32 main grads as Megatron-LM;\n"
             "Rajbhandari et al. 2020): bf16 weights 2 + grads 4 + fp32 master/m/v 12 bytes";
    case OptimizerImpl::kDeepSpeedZero:
      return "(DeepSpeed's ZeRO optimizer: 16-bit weights 2 +\n"
             "16-bit grads 2 + fp32 master/m/v 12 + the owner's fp32 gradient partition 4 bytes)";
    case OptimizerImpl::kDeepSpeedBf16:
      return "(DeepSpeed's BF16_Optimizer, ZeRO-1 only: bf16 weights 2\n"
             "+ bf16 grads 2 and their fp32 accumulation buffer 4 + fp32 master/m/v 12 bytes)";
    case OptimizerImpl::kTorchFsdp:
      return "(PyTorch FSDP/FSDP2 as torchtitan runs it: the fp32\n"
             "parameters are the master, sharded 4; gathered in bf16 for compute, 2, held through the step at\n"
             "ZeRO-1/2; fp32 grads 4; Adam m/v 8 bytes; ZeRO-0 is DDP with its bf16 casts and bucket buffers)";
  }
  return "";
}

Json ExpertsJson(const Model& m, const ParameterCounts& pc) {
  const MoeSpec& e = m.moe;
  const std::int64_t routed = pc.moe_layers * pc.moe_layer.expert;
  return {{"num_experts", e.num_experts},
          {"top_k", e.top_k},
          {"expert_ffn_hidden_size", e.ffn_hidden_size},
          {"shared_expert_ffn_hidden_size", e.shared_ffn_hidden_size},
          {"dense_layers", pc.dense_layers},
          {"moe_layers", pc.moe_layers},
          // null where every layer is MoE (the dense layer's count would describe no layer).
          {"dense_layer_parameters", pc.dense_layers > 0 ? Json(pc.per_layer.total()) : Json(nullptr)},
          {"moe_layer_parameters", pc.moe_layer.total()},
          {"routed_expert_parameters", routed},
          {"routed_expert_bf16_bytes", 2.0 * static_cast<double>(routed)},
          {"mtp_parameters", pc.mtp},
          {"router_global_batch_balance", e.router_global_batch_balance},
          {"router", RouterSummary(e)}};
}

Json FlopsJson(const ModelDescription& d) {
  Json f = {{"seq_length", d.seq},
            {"convention", "6*N_gemm + 12*L*s*a*d per token, fwd+bwd, no recompute, full "
                           "attention matrix (PaLM appendix B; SC21 eq. 3 without recompute)"},
            {"per_token", d.flops.per_token},
            {"per_token_dense", d.flops.per_token_dense},
            {"per_token_attention", d.flops.per_token_attention},
            {"per_token_causal", d.flops.per_token_causal()},
            {"per_sequence", d.flops_per_sequence}};
  if (d.gbs > 0) f["per_step"] = d.flops_per_sequence * static_cast<double>(d.gbs);
  f["exceeds_position_table"] = d.exceeds_position_table;
  return f;
}

Json FitJson(const FitDescription& f) {
  Json fit;
  fit["cluster"] = f.cluster;
  fit["gpu"] = f.gpu;
  fit["gpus"] = f.gpus;
  fit["tp"] = f.cfg.tp;
  fit["pp"] = f.cfg.pp;
  fit["cp"] = f.cfg.cp;
  fit["memory_bytes_per_gpu"] = std::llround(f.memory_bytes);  // whole bytes, as simulate reports them
  Json precisions = Json::object();
  for (const auto& [p, flops] : f.peaks_flops) precisions[ToString(p)] = flops / 1e12;
  fit["precisions_peak_tflops"] = precisions;
  fit["feasible"] = f.feasible();
  if (!f.feasible()) {
    fit["reasons"] = f.reasons;
    return fit;
  }
  fit["dp"] = f.cfg.dp;
  fit["largest_stage"] = f.largest_stage;
  fit["params_per_gpu"] = f.largest.total();
  if (f.largest.expert_params > 0) fit["expert_params_per_gpu"] = f.largest.expert_params;
  Json stages = Json::array();
  for (const ZeroStateRow& z : f.zero) {
    const auto bytes = [&z](double b) { return z.optimizer_runs ? Json(b) : Json(nullptr); };
    stages.push_back({{"zero_stage", z.zero_stage},
                      {"supported", z.supported},
                      {"unsupported_reason", z.supported ? Json(nullptr) : Json(z.unsupported_reason)},
                      {"weights_bytes", bytes(z.weights_bytes)},
                      {"grads_bytes", bytes(z.grads_bytes)},
                      {"optimizer_bytes", bytes(z.optimizer_bytes)},
                      {"total_bytes", bytes(z.total_bytes())},
                      {"fits", z.optimizer_runs ? Json(z.fits) : Json(nullptr)},
                      {"note", z.note.empty() ? Json(nullptr) : Json(z.note)},
                      {"left_bytes", bytes(f.memory_bytes - z.total_bytes())}});
  }
  fit["zero"] = stages;
  return fit;
}

void WriteShape(std::ostream& out, const Model& m) {
  out << fmt::format("Model {}  ({})\n", m.name, m.source);
  out << fmt::format("  layers {}, hidden {}, ffn {}, heads {} (query groups {}, head dim {}), vocab {}, seq {}\n",
                     m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups,
                     m.kv_channels, m.vocab_size, m.seq_length);
  const std::string positions =
      std::string(ToString(m.position_embedding)) + " positions" +
      (m.position_embedding == PositionEmbedding::kRope && m.rotary_percent != 1
           ? fmt::format(" (rotating {:g}% of each head's dims)", 100 * m.rotary_percent)
           : "") +
      (m.no_rope_layers.empty()
           ? ""
           : fmt::format(" (NoPE: {} of {} layers skip RoPE{})",
                         std::count(m.no_rope_layers.begin(), m.no_rope_layers.end(), true), m.num_layers,
                         m.NoRopeFreq() == 1   ? std::string(", all")
                         : m.NoRopeFreq() > 1 ? fmt::format(", one in {}", m.NoRopeFreq())
                                               : std::string())) +
      (m.rope_scaling_factor > 0 && m.RopeBandsAreLlama31()
           ? fmt::format(" (Llama 3.1 scaling, factor {:g})", m.rope_scaling_factor)
           : "") +
      (m.rope_scaling_factor > 0 && !m.RopeBandsAreLlama31()
           ? fmt::format(" (Llama 3 scaling, factor {:g}, low_freq_factor {:g}, high_freq_factor {:g}, original {})",
                         m.rope_scaling_factor, m.rope_low_freq_factor, m.rope_high_freq_factor,
                         m.rope_original_max_positions)
           : "") +
      (m.rope_scaling_unread.empty() ? "" : " (the config's " + m.rope_scaling_unread + " scaling: not read)");
  out << fmt::format("  {}, {}, {}, {} embeddings, {}, {}{}\n", ToString(m.normalization),
                     ToString(m.activation), positions, m.tie_embeddings ? "tied" : "untied",
                     m.add_bias_linear ? "linear biases" : (m.add_qkv_bias ? "QKV bias only" : "no biases"),
                     std::string(m.qk_layernorm && !m.mla.enabled() ? "per-head query/key norms, "
                                 : m.qk_l2_norm                     ? "query/key L2 norms (no parameters), "
                                                                    : "") +
                         (m.attention_sinks ? "attention sinks (a logit a head), " : "") +
                         (m.swiglu_limit > 0 ? fmt::format("SwiGLU clamped at {:g}, ", m.swiglu_limit) : ""),
                     m.dropout ? "dropout (its masks count in activation memory)" : "no dropout");
}

/// The mixture-of-experts part: active and idle parameters, dense and MoE layers, the routed
/// experts' bytes, and the MTP modules when the model has them.
void WriteExperts(std::ostream& out, const Model& m, const ParameterCounts& pc) {
  const MoeSpec& e = m.moe;
  const std::int64_t routed = pc.moe_layers * pc.moe_layer.expert;
  out << fmt::format("  active per token    {:>12}  ({}: top-{} of {} routed experts{})\n",
                     FormatCount(double(pc.active)), Grouped(pc.active), e.top_k, e.num_experts,
                     e.shared_ffn_hidden_size > 0 ? fmt::format(" + shared experts of FFN {}", e.shared_ffn_hidden_size)
                                                  : std::string());
  out << fmt::format("  idle per token      {:>12}  (the other routed experts)\n",
                     FormatCount(double(pc.total - pc.active)));
  if (pc.dense_layers > 0) {
    out << fmt::format("  dense layer         {:>12}  (x{} = {})\n", FormatCount(double(pc.per_layer.total())),
                       pc.dense_layers, FormatCount(double(pc.dense_layers * pc.per_layer.total())));
  }
  out << fmt::format("  MoE layer           {:>12}  (x{} = {}; routed experts {} a layer, {} each)\n",
                     FormatCount(double(pc.moe_layer.total())), pc.moe_layers,
                     FormatCount(double(pc.moe_layers * pc.moe_layer.total())), FormatCount(double(pc.moe_layer.expert)),
                     FormatCount(double(pc.moe_layer.expert / e.num_experts)));
  out << fmt::format("  routed experts      {:>12}  ({} in bf16, split over expert-parallel ranks)\n",
                     FormatCount(double(routed)), FormatGiB(2.0 * static_cast<double>(routed)));
  out << "  router weights      " << RouterSummary(e) << "\n";
  for (const auto& a : e.router_approximations) out << "                      (a launch cannot say " << a << ")\n";
  out << (e.router_global_batch_balance
              ? fmt::format("  router              trained with global-batch load balancing: with ep > 1 the busiest "
                            "expert rank takes {}x the mean tokens (docs/simulator.md)\n",
                            kGlobalBatchRouterImbalance)
              : std::string("  router              balanced per micro-batch: the busiest expert rank takes balanced "
                            "routing's few percent over the mean\n"));
  if (pc.mtp > 0) {
    out << fmt::format("  MTP modules         {:>12}  ({} x (2h x h projection + norms + one layer); embedding and "
                       "output layer shared; {} active per token)\n",
                       FormatCount(double(pc.mtp)), m.mtp_num_layers, FormatCount(double(pc.mtp_active)));
    out << fmt::format("  without MTP         {:>12}  (the main model, as published counts give it; {} active per "
                       "token)\n",
                       FormatCount(double(pc.total - pc.mtp)), FormatCount(double(pc.active - pc.mtp_active)));
  }
}

void WriteParameters(std::ostream& out, const Model& m, const ParameterCounts& pc) {
  out << "\nParameters\n";
  out << fmt::format("  total               {:>12}  ({})\n", FormatCount(double(pc.total)), Grouped(pc.total));
  if (pc.moe_layers > 0) {
    WriteExperts(out, m, pc);
  } else {
    out << fmt::format("  per layer           {:>12}  (x{} layers = {})\n", FormatCount(double(pc.per_layer.total())),
                       m.num_layers, FormatCount(double(pc.layers)));
  }
  if (m.mla.enabled()) {
    out << fmt::format("  multi-latent attention: q rank {}, kv rank {}, head dims {} + {} (rope) / v {}; K/V cache "
                       "{} values a token a layer\n",
                       m.mla.q_lora_rank > 0 ? std::to_string(m.mla.q_lora_rank) : std::string("none (full-rank q)"),
                       m.mla.kv_lora_rank, m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim,
                       m.mla.v_head_dim, m.mla.kv_lora_rank + m.mla.qk_pos_emb_head_dim);
  }
  out << fmt::format("  word embedding      {:>12}  (V*h = {}*{})\n", FormatCount(double(pc.word_embedding)),
                     m.vocab_size, m.hidden_size);
  out << fmt::format("  position embedding  {:>12}\n",
                     pc.position_embedding ? FormatCount(double(pc.position_embedding)) : "none");
  out << fmt::format("  output layer        {:>12}\n", pc.output_layer ? FormatCount(double(pc.output_layer)) : "tied");
  out << fmt::format("  final norm          {:>12}\n", FormatCount(double(pc.final_norm)));
}

void WriteFlops(std::ostream& out, const ModelDescription& d) {
  const Model& m = d.model;
  out << fmt::format("\nModel FLOPs at seq {} (forward + backward, no recompute)\n", d.seq);
  if (d.exceeds_position_table) {
    out << fmt::format("  note: seq {} exceeds the learned position table (max_position_embeddings {}); simulate and "
                       "plan refuse it\n",
                       d.seq, m.max_position_embeddings);
  }
  if (m.attention_window > 0 && m.attention_window < d.seq) {
    if (m.WindowedLayers() > 0) {
      out << fmt::format("  note: {} = {} is shorter than seq {}: the attention terms below count the whole causal "
                         "sequence (the convention); simulate costs the {} windowed layers' flash attention at {:.3f} "
                         "of it\n",
                         m.attention_window_key, m.attention_window, d.seq, m.WindowedLayers(), m.WindowFlopRatio(d.seq));
    } else if (!m.attention_window_modelled) {
      out << fmt::format("  note: {} = {} is shorter than seq {}: this windowed attention is not modelled, so the "
                         "attention terms below (and simulate's attention time) count the whole causal sequence\n",
                         m.attention_window_key, m.attention_window, d.seq);
    }
  }
  out << "  per token = 6*N_gemm + 12*L*s*a*d  (PaLM appendix B; SC21 eq. 3 without recompute;\n"
         "              N_gemm = GEMM weights incl. output projection; full s x s attention)\n";
  if (m.moe.enabled()) {
    out << fmt::format("              N_gemm counts a token's active weights: the router, {}the top-{} routed experts\n",
                       m.moe.shared_ffn_hidden_size > 0 ? "the shared experts, " : "", m.moe.top_k);
  }
  if (m.mtp_num_layers > 0) {
    out << fmt::format("              L = {} layers + {} multi-token-prediction layer(s)\n", m.num_layers,
                       m.mtp_num_layers);
  }
  if (m.mla.enabled()) {
    out << fmt::format("              d = (qk {} + rope {} + v {}) / 2: MLA's score and value head dims differ\n",
                       m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim, m.mla.v_head_dim);
  }
  out << fmt::format("            = 6*{} + 12*{}*{}*{}*{:g}\n", Grouped(d.params.gemm_weights),
                     m.num_layers + m.mtp_num_layers, d.seq, m.num_attention_heads, m.AttentionHeadDim());
  out << fmt::format("            = {} + {} = {}\n", FormatFlops(d.flops.per_token_dense),
                     FormatFlops(d.flops.per_token_attention), FormatFlops(d.flops.per_token));
  out << fmt::format("  causal    = 6*N_gemm + 6*L*s*a*d = {}  (attention halved by the causal mask, as\n"
                     "              current Megatron-LM counts it; simulate's headline MFU)\n",
                     FormatFlops(d.flops.per_token_causal()));
  out << fmt::format("  per sequence ({} tokens): {}\n", d.seq, FormatFlops(d.flops_per_sequence));
  if (d.gbs > 0) {
    out << fmt::format("  per step (global batch {}): {}\n", d.gbs,
                       FormatFlops(d.flops_per_sequence * static_cast<double>(d.gbs)));
  }
  out << "\nTraining state per parameter " << StateReading(d.optimizer) << "\n ";
  for (int z = 0; z <= 3; ++z) {
    if (!OptimizerZeroStageMismatch(d.optimizer, z).empty()) continue;
    out << fmt::format(" ZeRO-{} {}  ", z, StateBytesFormula(AtZero(d.optimizer, z), true));
  }
  out << " (d = data-parallel size)\n";
}

void WriteFit(std::ostream& out, const FitDescription& f, const ModelDescription& d) {
  const ParallelConfig& cfg = f.cfg;
  out << fmt::format("\nOn {} x {} ({}, {} usable per GPU), TP{} PP{}{}{}\n", f.gpus, f.gpu_display_name, f.cluster,
                     FormatGiB(f.memory_bytes), cfg.tp, cfg.pp,
                     cfg.cp > 1 ? fmt::format(" CP{} (ZeRO shards over dp x cp = {})", cfg.cp, cfg.dp_cp()) : "",
                     d.model.moe.enabled() ? fmt::format(" EP{} ETP{}", cfg.ep, cfg.expert_tp()) : "");
  out << fmt::format("  precisions (dense peak per GPU): {}\n", f.precision_list);
  if (!f.feasible()) {
    for (const auto& r : f.reasons) out << "  cannot run: " << r << "\n";
    return;
  }
  const StageParameters& w = f.largest;
  out << fmt::format("  DP{}; largest stage {} holds {} parameters per GPU ({} layers{}{}{})\n", cfg.dp,
                     f.largest_stage, FormatCount(w.total()), w.layers, w.embedding_params > 0 ? " + embedding" : "",
                     w.output_params > static_cast<double>(d.params.final_norm) ? " + output layer" : "",
                     w.mtp_params > 0 ? fmt::format(" + {} MTP module{}", d.model.mtp_num_layers,
                                                    d.model.mtp_num_layers == 1 ? "" : "s")
                                      : "");
  if (cfg.pp > 1 && d.model.num_layers % cfg.pp != 0) {
    out << fmt::format("  ({} layers over pp = {} do not divide: the first stages take one more, as DeepSpeed's uniform "
                       "partition; Megatron-LM needs them to divide, or first/last stage layer counts)\n",
                       d.model.num_layers, cfg.pp);
  }
  if (w.expert_params > 0) {
    out << fmt::format("  of them routed experts {} (split over ep x etp = {} x {}; their state shards over "
                       "edp = {} expert-data-parallel rank{}{})\n",
                       FormatCount(w.expert_params), cfg.ep, cfg.expert_tp(), cfg.expert_dp(),
                       cfg.expert_dp() == 1 ? "" : "s", w.mtp_params > 0 && d.model.moe.enabled() ? "; the MTP module's experts included" : "");
  }
  out << "  weights + gradients + optimizer state per GPU (activations not included;\n"
         "  `shardcast simulate` gives the full memory picture):\n";
  for (const ZeroStateRow& z : f.zero) {
    if (!z.optimizer_runs) {
      out << fmt::format("    ZeRO-{}: {:>10}   cannot run: {}\n", z.zero_stage, "-", z.unsupported_reason);
      continue;
    }
    out << fmt::format("    ZeRO-{}: {:>10} = weights {} + grads {} + optimizer {}   {}\n", z.zero_stage,
                       FormatGiB(z.total_bytes()), FormatGiB(z.weights_bytes), FormatGiB(z.grads_bytes),
                       FormatGiB(z.optimizer_bytes),
                       !z.supported ? "cannot run: " + z.unsupported_reason
                       : z.fits     ? "fits; " + FormatGiB(f.memory_bytes - z.total_bytes()) +
                                          " beside it for activations, buffers and the CUDA context"
                                    : std::string("does NOT fit"));
    if (z.supported && !z.note.empty()) out << "             (plan leaves it out: " << z.note << ")\n";
  }
  const bool low = std::any_of(f.peaks_flops.begin(), f.peaks_flops.end(),
                               [](const auto& p) { return IsLowPrecision(p.first); });
  if (low) {
    out << "  (bf16 training; an fp8, mxfp8 or nvfp4 run also keeps quantized copies of the linear layers' weights,\n"
           "  1 to 2.1 bytes per parameter by format and GPU: `shardcast simulate --precision` counts them)\n";
  }
}

}  // namespace

Json DescribeJson(const ModelDescription& d) {
  const ParameterCounts& pc = d.params;
  Json out;
  out["model"] = ModelToJson(d.model);  // the fields a model file has, and its source
  out["parameters"] = pc.total;
  out["parameters_active"] = pc.active;
  // per_layer: a dense layer's; null where every layer is MoE (moe.moe_layer_parameters).
  const bool no_dense = pc.moe_layers > 0 && pc.dense_layers == 0;
  out["parameter_breakdown"] = {{"per_layer", no_dense ? Json(nullptr) : Json(pc.per_layer.total())},
                                {"layers", pc.layers},
                                {"word_embedding", pc.word_embedding},
                                {"position_embedding", pc.position_embedding},
                                {"output_layer", pc.output_layer},
                                {"final_norm", pc.final_norm},
                                {"embedding", pc.word_embedding + pc.position_embedding},
                                {"gemm_weights", pc.gemm_weights},
                                {"mtp", pc.mtp},
                                {"mtp_active", pc.mtp_active}};
  if (pc.moe_layers > 0) out["moe"] = ExpertsJson(d.model, pc);
  if (d.model.mla.enabled()) {
    const MlaSpec& a = d.model.mla;
    out["mla"] = {{"q_lora_rank", a.q_lora_rank},
                  {"kv_lora_rank", a.kv_lora_rank},
                  {"qk_head_dim", a.qk_head_dim},
                  {"qk_pos_emb_head_dim", a.qk_pos_emb_head_dim},
                  {"v_head_dim", a.v_head_dim}};
  }
  out["flops"] = FlopsJson(d);
  Json zero = Json::array();
  for (int z = 0; z <= 3; ++z) {
    const ParallelConfig c = AtZero(d.optimizer, z);
    const bool runs = OptimizerZeroStageMismatch(d.optimizer, z).empty();  // else null: no such stage
    zero.push_back({{"zero_stage", z}, {"formula", runs ? Json(StateBytesFormula(c, false)) : Json(nullptr)},
                    {"bytes_per_param_dp1", runs ? Json(BytesPerParam(c, 1).total()) : Json(nullptr)}});
  }
  out["optimizer"] = ToString(d.optimizer);
  out["state_bytes_per_param"] = zero;
  if (d.fit) out["fit"] = FitJson(*d.fit);
  return out;
}

void WriteDescription(std::ostream& out, const ModelDescription& d) {
  WriteShape(out, d.model);
  WriteParameters(out, d.model, d.params);
  WriteFlops(out, d);
  if (d.fit) WriteFit(out, *d.fit, d);
}

}  // namespace shardcast
