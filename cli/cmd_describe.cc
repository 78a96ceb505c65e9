#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "models/loader.h"
#include "models/parallel.h"

namespace shardcast::cli {
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

/// The mixture-of-experts part of `describe`: total and active parameters, dense and MoE layers,
/// the routed experts' bytes, and MLA / MTP when the model has them.
void DescribeExperts(const Model& m, const ParameterCounts& pc, Json* out, std::string* text) {
  const MoeSpec& e = m.moe;
  const std::int64_t idle = pc.total - pc.active;
  (*out)["moe"] = {{"num_experts", e.num_experts},
                   {"top_k", e.top_k},
                   {"expert_ffn_hidden_size", e.ffn_hidden_size},
                   {"shared_expert_ffn_hidden_size", e.shared_ffn_hidden_size},
                   {"dense_layers", pc.dense_layers},
                   {"moe_layers", pc.moe_layers},
                   {"dense_layer_parameters", pc.per_layer.total()},
                   {"moe_layer_parameters", pc.moe_layer.total()},
                   {"routed_expert_parameters", pc.moe_layers * pc.moe_layer.expert},
                   {"routed_expert_bf16_bytes", 2.0 * static_cast<double>(pc.moe_layers * pc.moe_layer.expert)},
                   {"mtp_parameters", pc.mtp}};
  *text += fmt::format("  active per token    {:>12}  ({}: top-{} of {} routed experts{})\n",
                       FormatCount(double(pc.active)), Grouped(pc.active), e.top_k, e.num_experts,
                       e.shared_ffn_hidden_size > 0 ? fmt::format(" + shared experts of FFN {}", e.shared_ffn_hidden_size)
                                                    : std::string());
  *text += fmt::format("  idle per token      {:>12}  (the other routed experts)\n", FormatCount(double(idle)));
  if (pc.dense_layers > 0) {
    *text += fmt::format("  dense layer         {:>12}  (x{} = {})\n", FormatCount(double(pc.per_layer.total())),
                         pc.dense_layers, FormatCount(double(pc.dense_layers * pc.per_layer.total())));
  }
  *text += fmt::format("  MoE layer           {:>12}  (x{} = {}; routed experts {} a layer, {} each)\n",
                       FormatCount(double(pc.moe_layer.total())), pc.moe_layers,
                       FormatCount(double(pc.moe_layers * pc.moe_layer.total())),
                       FormatCount(double(pc.moe_layer.expert)),
                       FormatCount(double(pc.moe_layer.expert / e.num_experts)));
  *text += fmt::format("  routed experts      {:>12}  ({} in bf16, split over expert-parallel ranks)\n",
                       FormatCount(double(pc.moe_layers * pc.moe_layer.expert)),
                       FormatGiB(2.0 * static_cast<double>(pc.moe_layers * pc.moe_layer.expert)));
  if (m.mla.enabled()) {
    (*out)["mla"] = {{"q_lora_rank", m.mla.q_lora_rank},
                     {"kv_lora_rank", m.mla.kv_lora_rank},
                     {"qk_head_dim", m.mla.qk_head_dim},
                     {"qk_pos_emb_head_dim", m.mla.qk_pos_emb_head_dim},
                     {"v_head_dim", m.mla.v_head_dim}};
    *text += fmt::format("  multi-latent attention: q rank {}, kv rank {}, head dims {} + {} (rope) / v {}; K/V cache "
                         "{} values a token a layer\n",
                         m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim,
                         m.mla.v_head_dim, m.mla.kv_lora_rank + m.mla.qk_pos_emb_head_dim);
  }
  if (pc.mtp > 0) {
    *text += fmt::format("  MTP modules         {:>12}  ({} x (2h x h projection + norms + one layer); embedding and "
                         "output layer shared)\n",
                         FormatCount(double(pc.mtp)), m.mtp_num_layers);
  }
}

struct DescribeArgs {
  std::string model;
  std::string cluster;
  std::int64_t gpus = 0;
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t cp = 1;  ///< context parallelism: ZeRO shards over dp * cp
  std::int64_t ep = 1, etp = 0;  ///< expert grid (etp 0: = tp): experts over ep * etp, state over edp
  std::int64_t seq = 0;
  std::int64_t gbs = 0;
  bool json = false;
};


void RunDescribe(const DescribeArgs& a) {
  const Model m = LoadModel(a.model);
  const std::int64_t seq = a.seq > 0 ? a.seq : m.seq_length;
  const ParameterCounts pc = m.Parameters();
  const FlopCounts fl = m.Flops(seq);
  const double per_seq = fl.per_token * static_cast<double>(seq);

  std::optional<Cluster> cluster;
  if (!a.cluster.empty()) cluster = LoadCluster(a.cluster);
  std::int64_t gpus = a.gpus;
  if (cluster && gpus == 0) gpus = cluster->num_gpus.value_or(cluster->gpus_per_node);
  if (!cluster && a.gpus > 0) {
    throw InputError("command line: --gpus: got " + std::to_string(a.gpus) +
                     ", expected --cluster as well (which GPU type?)");
  }
  if (!cluster && (a.tp != 1 || a.pp != 1)) {
    throw InputError(fmt::format("command line: --tp/--pp: got tp = {}, pp = {}, expected --cluster as well (the "
                                 "per-GPU memory needs a GPU type)", a.tp, a.pp));
  }

  Json out;
  out["model"] = {{"name", m.name},
                  {"source", m.source},
                  {"num_layers", m.num_layers},
                  {"hidden_size", m.hidden_size},
                  {"ffn_hidden_size", m.ffn_hidden_size},
                  {"num_attention_heads", m.num_attention_heads},
                  {"num_query_groups", m.num_query_groups},
                  {"kv_channels", m.kv_channels},
                  {"vocab_size", m.vocab_size},
                  {"seq_length", m.seq_length},
                  {"normalization", ToString(m.normalization)},
                  {"activation", ToString(m.activation)},
                  {"position_embedding", ToString(m.position_embedding)},
                  {"tie_embeddings", m.tie_embeddings},
                  {"add_bias_linear", m.add_bias_linear},
                  {"add_qkv_bias", m.add_qkv_bias},
                  {"dropout", m.dropout}};
  out["parameters"] = pc.total;
  out["parameters_active"] = pc.active;
  out["parameter_breakdown"] = {{"per_layer", pc.per_layer.total()},
                                {"layers", pc.layers},
                                {"word_embedding", pc.word_embedding},
                                {"position_embedding", pc.position_embedding},
                                {"output_layer", pc.output_layer},
                                {"final_norm", pc.final_norm},
                                {"embedding", pc.word_embedding + pc.position_embedding},
                                {"gemm_weights", pc.gemm_weights}};
  out["flops"] = {{"seq_length", seq},
                  {"convention", "6*N_gemm + 12*L*s*a*d per token, fwd+bwd, no recompute, full "
                                 "attention matrix (PaLM appendix B; SC21 eq. 3 without recompute)"},
                  {"per_token", fl.per_token},
                  {"per_token_dense", fl.per_token_dense},
                  {"per_token_attention", fl.per_token_attention},
                  {"per_token_causal", fl.per_token_causal()},
                  {"per_sequence", per_seq}};
  if (a.gbs > 0) out["flops"]["per_step"] = per_seq * static_cast<double>(a.gbs);
  out["flops"]["exceeds_position_table"] = m.position_embedding == PositionEmbedding::kLearned &&
                                           m.max_position_embeddings > 0 && seq > m.max_position_embeddings;
  Json zero = Json::array();
  for (int z = 0; z <= 3; ++z) {
    StateBytesPerParam b = BytesPerParam(z, 1, true);
    zero.push_back({{"zero_stage", z},
                    {"formula", z == 0   ? "2 + 4 + 12"
                                : z == 1 ? "2 + 4 + 12/d"
                                : z == 2 ? "2 + (4 + 12)/d"
                                         : "(2 + 4 + 12)/d"},
                    {"bytes_per_param_dp1", b.total()}});
  }
  out["state_bytes_per_param"] = zero;

  std::string text;
  text += fmt::format("Model {}  ({})\n", m.name, m.source);
  text += fmt::format(
      "  layers {}, hidden {}, ffn {}, heads {} (query groups {}, head dim {}), vocab {}, seq {}\n",
      m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups,
      m.kv_channels, m.vocab_size, m.seq_length);
  text += fmt::format("  {}, {}, {} positions, {} embeddings, {}, {}\n", ToString(m.normalization),
                      ToString(m.activation), ToString(m.position_embedding),
                      m.tie_embeddings ? "tied" : "untied",
                      m.add_bias_linear ? "linear biases" : (m.add_qkv_bias ? "QKV bias only" : "no biases"),
                      m.dropout ? "dropout (its masks count in activation memory)" : "no dropout");
  text += "\nParameters\n";
  text += fmt::format("  total               {:>12}  ({})\n", FormatCount(double(pc.total)),
                      Grouped(pc.total));
  if (pc.moe_layers > 0) {
    DescribeExperts(m, pc, &out, &text);
  } else {
    text += fmt::format("  per layer           {:>12}  (x{} layers = {})\n",
                        FormatCount(double(pc.per_layer.total())), m.num_layers,
                        FormatCount(double(pc.layers)));
  }
  text += fmt::format("  word embedding      {:>12}  (V*h = {}*{})\n",
                      FormatCount(double(pc.word_embedding)), m.vocab_size, m.hidden_size);
  text += fmt::format("  position embedding  {:>12}\n",
                      pc.position_embedding ? FormatCount(double(pc.position_embedding)) : "none");
  text += fmt::format("  output layer        {:>12}\n",
                      pc.output_layer ? FormatCount(double(pc.output_layer)) : "tied");
  text += fmt::format("  final norm          {:>12}\n", FormatCount(double(pc.final_norm)));

  text += fmt::format("\nModel FLOPs at seq {} (forward + backward, no recompute)\n", seq);
  if (m.position_embedding == PositionEmbedding::kLearned && m.max_position_embeddings > 0 &&
      seq > m.max_position_embeddings) {
    text += fmt::format("  note: seq {} exceeds the learned position table (max_position_embeddings {}); simulate and "
                        "plan refuse it\n",
                        seq, m.max_position_embeddings);
  }
  text += "  per token = 6*N_gemm + 12*L*s*a*d  (PaLM appendix B; SC21 eq. 3 without recompute;\n"
          "              N_gemm = GEMM weights incl. output projection; full s x s attention)\n";
  text += fmt::format("            = 6*{} + 12*{}*{}*{}*{}\n", Grouped(pc.gemm_weights),
                      m.num_layers, seq, m.num_attention_heads, m.kv_channels);
  text += fmt::format("            = {} + {} = {}\n", FormatFlops(fl.per_token_dense),
                      FormatFlops(fl.per_token_attention), FormatFlops(fl.per_token));
  text += fmt::format("  causal    = 6*N_gemm + 6*L*s*a*d = {}  (attention halved by the causal mask, as\n"
                      "              current Megatron-LM counts it; simulate's headline MFU)\n",
                      FormatFlops(fl.per_token_causal()));
  text += fmt::format("  per sequence ({} tokens): {}\n", seq, FormatFlops(per_seq));
  if (a.gbs > 0) {
    text += fmt::format("  per step (global batch {}): {}\n", a.gbs,
                        FormatFlops(per_seq * static_cast<double>(a.gbs)));
  }

  text += "\nTraining state per parameter (mixed-precision Adam, fp32 main grads as Megatron-LM;\n"
          "Rajbhandari et al. 2020): bf16 weights 2 + grads 4 + fp32 master/m/v 12 bytes\n";
  text += "  ZeRO-0 18   ZeRO-1 6 + 12/d   ZeRO-2 2 + 16/d   ZeRO-3 18/d   (d = data-parallel size)\n";

  if (cluster) {
    const Gpu& g = cluster->gpu;
    ParallelConfig cfg;
    cfg.tp = a.tp;
    cfg.pp = a.pp;
    cfg.cp = a.cp;
    cfg.flash_attention = true;
    cfg.seq_length = a.seq;
    cfg.dp = (gpus % (a.tp * a.cp * a.pp) == 0) ? gpus / (a.tp * a.cp * a.pp) : 1;
    cfg.global_batch_size = cfg.dp;
    cfg.ep = a.ep;
    cfg.etp = a.etp;
    cfg.sequence_parallel = cfg.tp > 1 && m.moe.enabled();  // Megatron-Core's MoE with tp > 1
    std::vector<std::string> reasons = InfeasibilityReasons(m, cfg, gpus, *cluster);
    Json fit;
    fit["cluster"] = cluster->name;
    fit["gpu"] = g.name;
    fit["gpus"] = gpus;
    fit["tp"] = a.tp;
    fit["pp"] = a.pp;
    fit["cp"] = a.cp;
    fit["memory_bytes_per_gpu"] = g.memory_bytes;
    text += fmt::format("\nOn {} x {} ({}, {} usable per GPU), TP{} PP{}{}{}\n", gpus, g.display_name,
                        cluster->name, FormatGiB(g.memory_bytes), a.tp, a.pp,
                        a.cp > 1 ? fmt::format(" CP{} (ZeRO shards over dp x cp = {})", a.cp, cfg.dp_cp()) : "",
                        m.moe.enabled() ? fmt::format(" EP{} ETP{}", cfg.ep, cfg.expert_tp()) : "");
    text += fmt::format("  precisions (dense peak per GPU): {}\n", g.PrecisionList());
    Json precisions = Json::object();
    for (Precision p : AllPrecisions()) {
      if (g.Runs(p)) precisions[ToString(p)] = g.PeakFlops(p) / 1e12;
    }
    fit["precisions_peak_tflops"] = precisions;
    if (!reasons.empty()) {
      fit["feasible"] = false;
      fit["reasons"] = reasons;
      for (const auto& r : reasons) text += "  cannot run: " + r + "\n";
    } else {
      fit["feasible"] = true;
      fit["dp"] = cfg.dp;
      // The stage holding the most parameters decides.
      StageParameters worst;
      std::int64_t worst_stage = 0;
      for (std::int64_t s = 0; s < a.pp; ++s) {
        StageParameters sp = ParametersOfStage(m, a.tp, a.pp, s, false, cfg.ep * cfg.expert_tp());
        if (sp.total() > worst.total()) {
          worst = sp;
          worst_stage = s;
        }
      }
      fit["largest_stage"] = worst_stage;
      fit["params_per_gpu"] = worst.total();
      text += fmt::format("  DP{}; largest stage {} holds {} parameters per GPU ({} layers{}{})\n",
                          cfg.dp, worst_stage, FormatCount(worst.total()), worst.layers,
                          worst.embedding_params > 0 ? " + embedding" : "",
                          worst.output_params > static_cast<double>(pc.final_norm) ? " + output layer" : "");
      if (worst.expert_params > 0) {
        text += fmt::format("  of them routed experts {} (split over ep x etp = {} x {}; their state shards over "
                            "edp = {} expert-data-parallel ranks)\n",
                            FormatCount(worst.expert_params), cfg.ep, cfg.expert_tp(), cfg.expert_dp());
        fit["expert_params_per_gpu"] = worst.expert_params;
      }
      text += "  weights + gradients + optimizer state per GPU (activations not included;\n"
              "  `shardcast simulate` gives the full memory picture):\n";
      Json stages = Json::array();
      const double dense_params = worst.total() - worst.expert_params;
      for (int z = 0; z <= 3; ++z) {
        // The distributed optimizer and FSDP shard over the dp x cp ranks holding the same weights,
        // the routed experts over the expert-data-parallel ranks.
        const StateBytesPerParam bd = BytesPerParam(z, cfg.dp_cp(), true);
        const StateBytesPerParam be = BytesPerParam(z, std::max<std::int64_t>(1, cfg.expert_dp()), true);
        StateBytesPerParam b;
        const double n = std::max(1.0, worst.total());
        b.weights = (dense_params * bd.weights + worst.expert_params * be.weights) / n;
        b.grads = (dense_params * bd.grads + worst.expert_params * be.grads) / n;
        b.optimizer = (dense_params * bd.optimizer + worst.expert_params * be.optimizer) / n;
        const double bytes = worst.total() * b.total();
        const bool fits = bytes <= g.memory_bytes;
        // Megatron-LM and DeepSpeed shard gradients (ZeRO-2) and weights (ZeRO-3) only without
        // pipeline parallelism, as simulate's InfeasibilityReasons says.
        const bool supported = z < 2 || a.pp == 1;
        stages.push_back({{"zero_stage", z},
                          {"supported", supported},
                          {"weights_bytes", worst.total() * b.weights},
                          {"grads_bytes", worst.total() * b.grads},
                          {"optimizer_bytes", worst.total() * b.optimizer},
                          {"total_bytes", bytes},
                          {"fits", fits}});
        text += fmt::format("    ZeRO-{}: {:>10} = weights {} + grads {} + optimizer {}   {}\n", z,
                            FormatGiB(bytes), FormatGiB(worst.total() * b.weights),
                            FormatGiB(worst.total() * b.grads),
                            FormatGiB(worst.total() * b.optimizer),
                            !supported ? "not with pp > 1" : fits ? "fits" : "does NOT fit");
      }
      fit["zero"] = stages;
    }
    out["fit"] = fit;
  }
  if (a.json) {
    std::cout << WithIntegerBytes(out).dump(2) << "\n";
  } else {
    std::cout << text;
  }
}

}  // namespace

void RegisterDescribe(CLI::App& app) {
  auto args = std::make_shared<DescribeArgs>();
  auto* cmd = app.add_subcommand(
      "describe",
      "Describe a model: parameters, FLOPs per token, bytes of training state per parameter, and\n"
      "whether weights, gradients and optimizer state fit per GPU at a TP/PP.\n"
      "Example: shardcast describe --model gpt3-175b --cluster dgx-a100 --gpus 1024 --tp 8 --pp 8");
  cmd->add_option("--model", args->model, "model preset name or JSON / HF config.json path")
      ->required();
  cmd->add_option("--cluster", args->cluster, "cluster preset name or JSON path");
  AddPositive(cmd, "--gpus", args->gpus, "number of GPUs (default: the cluster's, else one node)", kMaxGpus);
  AddPositive(cmd, "--tp,--tensor-model-parallel-size", args->tp, "tensor-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--pp,--pipeline-model-parallel-size", args->pp, "pipeline-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--cp,--context-parallel-size", args->cp,
              "context-parallel size (ZeRO shards over the dp x cp ranks)", kMaxParallelSize);
  AddPositive(cmd, "--ep,--expert-model-parallel-size", args->ep,
              "MoE: expert-parallel size (the routed experts split over ep ranks)", kMaxParallelSize);
  AddPositive(cmd, "--etp,--expert-tensor-parallel-size", args->etp,
              "MoE: expert-tensor-parallel size (default: tp, as Megatron-Core)", kMaxParallelSize);
  AddPositive(cmd, "--seq,--seq-length", args->seq, "sequence length (default: the model's)", kMaxSeq);
  AddPositive(cmd, "--gbs,--global-batch-size", args->gbs, "global batch, for FLOPs per step", kMaxGlobalBatchSize);
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->callback([args] { RunDescribe(*args); });
}

}  // namespace shardcast::cli
