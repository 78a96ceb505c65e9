#include "report/launch.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "common/error.h"
#include "report/megatron_args.h"

namespace shardcast {

const char* ToString(LaunchFormat f) {
  switch (f) {
    case LaunchFormat::kMegatron: return "megatron";
    case LaunchFormat::kNemo: return "nemo";
    case LaunchFormat::kTorchtitan: return "torchtitan";
    case LaunchFormat::kDeepSpeed: return "deepspeed";
  }
  return "?";
}

LaunchFormat ParseLaunchFormat(const std::string& s, const std::string& where) {
  for (LaunchFormat f : {LaunchFormat::kMegatron, LaunchFormat::kNemo, LaunchFormat::kTorchtitan, LaunchFormat::kDeepSpeed}) {
    if (s == ToString(f)) return f;
  }
  throw InputError(where + ": got \"" + s + "\", expected megatron, nemo, torchtitan or deepspeed");
}

std::string MegatronPipelineLayout(const Model& m, const ParallelConfig& c) {
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  if (!layout.error.empty()) return "";
  std::string s;
  const std::size_t n = layout.chunk_layers.size();
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0) s += "|";
    if (k == 0) s += "E";
    s += std::string(static_cast<std::size_t>(layout.chunk_layers[k]), 't');
    if (k + 1 == n) s += std::string(static_cast<std::size_t>(m.mtp_num_layers), 'm') + "L";
  }
  return s;
}

namespace {
/// Megatron-LM's run-length list expression for a per-layer 0/1 flag over `n` layers:
/// "([1]*3+[0]*1+...)", 1 where `on(i)`.
template <typename On>
std::string RunLengthLayerList(std::int64_t n, On on) {
  std::string s = "(";
  for (std::int64_t i = 0; i < n;) {
    std::int64_t j = i;
    while (j < n && on(j) == on(i)) ++j;
    if (i > 0) s += "+";
    s += fmt::format("[{}]*{}", on(i) ? 1 : 0, j - i);
    i = j;
  }
  return s + ")";
}
}  // namespace

std::string MegatronWindowPattern(const Model& m) {
  const auto& p = m.window_layer_pattern;
  return RunLengthLayerList(static_cast<std::int64_t>(p.size()), [&](std::int64_t i) { return static_cast<bool>(p[static_cast<std::size_t>(i)]); });
}

std::string MegatronMoeLayerFreq(const Model& m) {
  if (!m.moe.enabled() || m.MoeLayersIn(0, m.num_layers) == m.num_layers) return "1";
  return RunLengthLayerList(m.num_layers, [&](std::int64_t i) { return m.IsMoeLayer(i); });
}

namespace {

/// Hosts and GPUs per host of a launch (torchrun's --nnodes and --nproc-per-node): hosts of
/// cl.GpusPerHost(), one host of them all when fewer GPUs are asked for; rounded up where the GPUs
/// are not whole hosts (EmitLaunch warns).
struct Nodes {
  std::int64_t nodes = 1, per_node = 1;
};
Nodes NodesOf(const Cluster& cl, std::int64_t gpus) {
  const std::int64_t g = std::max<std::int64_t>(1, cl.GpusPerHost());
  Nodes n;
  n.per_node = std::min(gpus, g);
  n.nodes = (gpus + n.per_node - 1) / n.per_node;
  return n;
}

std::int64_t SeqOf(const Model& m, const ParallelConfig& c) { return c.seq_length > 0 ? c.seq_length : m.seq_length; }

std::string Number(double v) {
  return v == std::floor(v) && std::fabs(v) < 1e15 ? fmt::format("{}", static_cast<std::int64_t>(v))
                                                    : fmt::format("{}", v);
}

/// Megatron-LM, NeMo and DeepSpeed's pipeline engine run all of a step's micro-batches in one
/// schedule: pipeline flushes (PyTorch pipelining's gradient-accumulation loop) have no setting.
void OneScheduleUnexpressed(const ParallelConfig& c, const char* framework, std::vector<std::string>* unexpressed) {
  if (c.pipeline_flushes <= 1 || c.pp <= 1) return;
  unexpressed->push_back(fmt::format("{} pipeline flushes a step ({} runs the step's micro-batches in one schedule): "
                                     "written as one schedule",
                                     c.pipeline_flushes, framework));
}

std::string Header(const char* comment, const Model& m, const ParallelConfig& c, const Cluster& cl,
                   std::int64_t gpus, const char* version, const std::vector<std::string>& unexpressed) {
  const Nodes n = NodesOf(cl, gpus);
  std::string h = fmt::format("{} {}: {} on {} x {} ({} host{} of {}), written by shardcast\n", comment, m.name,
                              c.Summary(), gpus, cl.gpu.name, n.nodes, n.nodes == 1 ? "" : "s", n.per_node);
  h += fmt::format("{} Names follow {}.\n", comment, version);
  for (const auto& u : unexpressed) h += fmt::format("{} Not expressed: {}\n", comment, u);
  return h;
}

// ---- Megatron-LM --------------------------------------------------------------------------

/// A Hugging Face RoPE scaling the model did not read (Model::rope_scaling_unread): no launch
/// format here writes it.
void RopeScalingUnexpressed(const Model& m, std::vector<std::string>* unexpressed) {
  if (!m.rope_scaling_unread.empty()) {
    unexpressed->push_back("the config's RoPE scaling " + m.rope_scaling_unread + ": not written; add your framework's "
                           "setting for it");
  }
}

/// The modelled attention window as Megatron-Core's window_size (left, right) and
/// window_attn_skip_freq (the integer, or its list form); "" without one. A window the model
/// does not model (Llama 4's chunked attention) is named as not written.
std::string MegatronWindow(const Model& m, std::vector<std::string>* unexpressed) {
  if (m.attention_window > 0 && !m.attention_window_modelled) {
    unexpressed->push_back(fmt::format("the config's {} = {} (not modelled): not written", m.attention_window_key,
                                       m.attention_window));
  }
  if (m.WindowedLayers() == 0) return "";
  return fmt::format("--window-size {},0", m.attention_window) +
         (!m.window_layer_pattern.empty() ? " --window-attn-skip-freq '" + MegatronWindowPattern(m) + "'"
          : m.window_attn_skip_freq > 0   ? fmt::format(" --window-attn-skip-freq {}", m.window_attn_skip_freq)
                                          : std::string());
}

/// Megatron-Core's qk_layernorm: the per-head query/key norms, and multi-latent attention's q and
/// kv norms, which it builds only with the switch (gpt_layer_specs.py: the up projections fused
/// with their norm; IdentityOp without it) and the model counts.
bool MegatronQkLayernorm(const Model& m) { return m.qk_layernorm || m.mla.enabled(); }

/// Llama 4's NoPE layers as Megatron-LM's --no-rope-freq: N, or the list expression (1 where a
/// layer skips RoPE).
std::string MegatronNoRopeFreq(const Model& m) {
  if (const std::int64_t n = m.NoRopeFreq(); n > 0) return std::to_string(n);
  return "'" + RunLengthLayerList(static_cast<std::int64_t>(m.no_rope_layers.size()), [&](std::int64_t i) {
           return static_cast<bool>(m.no_rope_layers[static_cast<std::size_t>(i)]);
         }) + "'";
}

/// Llama 3 RoPE scaling whose frequency bands differ from those `framework` fixes (Megatron-Core's
/// --use-rope-scaling and NeMo's Llama 3.1 configs: Llama 3.1's 1, 4, 8192; torchtitan's llama4:
/// 1, 1, 8192): the factor is written with the framework's bands, and that is said.
void RopeBandsUnexpressed(const Model& m, const char* framework, double low, double high,
                          std::vector<std::string>* unexpressed) {
  if (m.rope_scaling_factor <= 0) return;
  if (m.rope_low_freq_factor == low && m.rope_high_freq_factor == high && m.rope_original_max_positions == 8192) return;
  unexpressed->push_back(fmt::format("the model's Llama 3 RoPE scaling bands (low_freq_factor {}, high_freq_factor {}, "
                                     "original_max_position_embeddings {}): not written; {} fixes {}, {}, 8192",
                                     Number(m.rope_low_freq_factor), Number(m.rope_high_freq_factor),
                                     m.rope_original_max_positions, framework, Number(low), Number(high)));
}

/// RoPE as Megatron-LM flags: the base, partial rotary, Llama 3.1's scaling, NoPE layers.
std::string MegatronRopeFlags(const Model& m, std::vector<std::string>* unexpressed) {
  std::string a = " --position-embedding-type rope --rotary-base " + Number(m.rotary_base);
  if (m.rotary_percent != 1) a += " --rotary-percent " + Number(m.rotary_percent);
  if (m.rope_scaling_factor > 0) a += " --use-rope-scaling --rope-scaling-factor " + Number(m.rope_scaling_factor);
  RopeBandsUnexpressed(m, "Megatron-Core's --use-rope-scaling", 1, 4, unexpressed);
  if (!m.no_rope_layers.empty()) a += " --no-rope-freq " + MegatronNoRopeFreq(m);
  if (m.qk_l2_norm && !m.no_rope_layers.empty()) {
    unexpressed->push_back("the q/k L2 norms on the RoPE layers alone (Llama 4 skips them on its NoPE layers): "
                           "Megatron-Core's --qk-l2-norm normalizes on every layer");
  }
  return a;
}

/// Llama 4's NoPE layers and q/k L2 norms, which `framework`'s launch does not write.
void Llama4AttentionUnexpressed(const Model& m, const char* framework, std::vector<std::string>* unexpressed) {
  if (!m.no_rope_layers.empty()) {
    unexpressed->push_back(fmt::format("NoPE layers ({} of {} skip RoPE; Megatron-LM's --no-rope-freq {}): not "
                                       "written; {}",
                                       std::count(m.no_rope_layers.begin(), m.no_rope_layers.end(), true),
                                       m.num_layers, MegatronNoRopeFreq(m), framework));
  }
  if (m.qk_l2_norm) {
    unexpressed->push_back(fmt::format("Llama 4's q/k L2 norms (Megatron-LM's --qk-l2-norm): not written; {}", framework));
  }
}

/// GPT-OSS's attention sinks and clamped SwiGLU, which a launch without Megatron-Core's fields for
/// them (softmax_type "learnable"; quick_gelu with glu_linear_offset 1 and
/// activation_func_clamp_value) does not write: said, with `where` they are set.
void GptOssUnexpressed(const Model& m, const char* where, std::vector<std::string>* unexpressed) {
  if (m.attention_sinks) {
    unexpressed->push_back(fmt::format("attention sinks (a learned logit a head; Megatron-Core's softmax_type "
                                       "\"learnable\"): not written; {}", where));
  }
  if (m.swiglu_limit > 0) {
    unexpressed->push_back(fmt::format("the SwiGLU clamped at {} with alpha 1.702 and (up + 1) (Megatron-Core's "
                                       "quick_gelu with glu_linear_offset 1 and activation_func_clamp_value {}): "
                                       "written as a plain SwiGLU; {}",
                                       Number(m.swiglu_limit), Number(m.swiglu_limit), where));
  }
}

/// The model's shape as Megatron-LM flags (mock data and a NullTokenizer of the model's
/// vocabulary: Megatron adds one EOD token to --vocab-size and pads to a multiple of
/// --make-vocab-size-divisible-by x tp).
std::vector<std::string> MegatronModelFlags(const Model& m, std::int64_t seq, std::vector<std::string>* unexpressed) {
  RopeScalingUnexpressed(m, unexpressed);
  std::vector<std::string> f;
  f.push_back(fmt::format("--num-layers {} --hidden-size {} --ffn-hidden-size {} --num-attention-heads {} --kv-channels {}",
                          m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_channels));
  if (m.num_query_groups != m.num_attention_heads) {
    f.push_back(fmt::format("--group-query-attention --num-query-groups {}", m.num_query_groups));
  }
  f.push_back(fmt::format("--max-position-embeddings {}", std::max(seq, m.max_position_embeddings)));
  std::string arch = fmt::format("--normalization {}", m.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm");
  // GPT-OSS's clamped SwiGLU (gate x sigmoid(1.702 gate) x (up + 1)) is Megatron-Core's
  // quick-GeGLU with a linear offset and a clamp (fused_bias_geglu.py).
  if (m.activation == Activation::kSwiglu && m.swiglu_limit > 0) {
    arch += " --quick-geglu --glu-linear-offset 1 --activation-func-clamp-value " + Number(m.swiglu_limit);
  } else if (m.activation == Activation::kSwiglu) {
    arch += " --swiglu";
  }
  if (m.attention_sinks) arch += " --softmax-type learnable";
  switch (m.position_embedding) {
    case PositionEmbedding::kRope: arch += MegatronRopeFlags(m, unexpressed); break;
    case PositionEmbedding::kLearned: arch += " --position-embedding-type learned_absolute"; break;
    case PositionEmbedding::kAlibi:
      arch += " --position-embedding-type none";
      unexpressed->push_back("ALiBi positions (Megatron-LM has none; Megatron-DeepSpeed's --position-embedding-type "
                             "alibi): written as none, which has the same parameters and cost");
      break;
  }
  if (!m.tie_embeddings) arch += " --untie-embeddings-and-output-weights";
  if (!m.add_bias_linear) arch += " --disable-bias-linear";
  if (m.add_qkv_bias && !m.add_bias_linear) arch += " --add-qkv-bias";
  if (MegatronQkLayernorm(m)) arch += " --qk-layernorm";
  if (m.qk_l2_norm) arch += " --qk-l2-norm";
  if (const std::string w = MegatronWindow(m, unexpressed); !w.empty()) arch += " " + w;
  if (!m.dropout) arch += " --attention-dropout 0 --hidden-dropout 0";
  f.push_back(arch);
  if (m.moe.enabled()) {
    std::string moe = fmt::format("--num-experts {} --moe-router-topk {} --moe-ffn-hidden-size {}", m.moe.num_experts,
                                  m.moe.top_k, m.moe.ffn_hidden_size);
    if (m.moe.shared_ffn_hidden_size > 0) {
      moe += fmt::format(" --moe-shared-expert-intermediate-size {}", m.moe.shared_ffn_hidden_size);
    }
    const std::string freq = MegatronMoeLayerFreq(m);
    if (freq != "1") moe += " --moe-layer-freq '" + freq + "'";
    const MoeSpec& e = m.moe;  // the router, where it is not Megatron-Core's default
    if (e.router_score != "softmax") moe += " --moe-router-score-function " + e.router_score;
    if (e.router_pre_softmax) moe += " --moe-router-pre-softmax";
    if (e.router_topk_scaling > 0) moe += " --moe-router-topk-scaling-factor " + Number(e.router_topk_scaling);
    if (e.router_num_groups > 0) {
      moe += fmt::format(" --moe-router-num-groups {} --moe-router-group-topk {}", e.router_num_groups, e.router_group_topk);
    }
    if (e.router_expert_bias) moe += " --moe-router-enable-expert-bias";
    if (e.probs_on_input) moe += " --moe-apply-probs-on-input";
    f.push_back(moe);
    unexpressed->insert(unexpressed->end(), e.router_approximations.begin(), e.router_approximations.end());
    if (m.moe.expert_bias && !m.add_bias_linear) {
      unexpressed->push_back("biases in the experts' linear layers without biases elsewhere (Megatron's "
                             "--add-bias-linear sets both)");
    }
    if (m.moe.router_bias) unexpressed->push_back("a bias in the router's linear layer");
  }
  if (m.mla.enabled()) {
    std::string mla = "--multi-latent-attention";
    if (m.mla.q_lora_rank > 0) mla += fmt::format(" --q-lora-rank {}", m.mla.q_lora_rank);
    mla += fmt::format(" --kv-lora-rank {} --qk-head-dim {} --qk-pos-emb-head-dim {} --v-head-dim {}", m.mla.kv_lora_rank,
                       m.mla.qk_head_dim, m.mla.qk_pos_emb_head_dim, m.mla.v_head_dim);
    f.push_back(mla);
  }
  if (m.mtp_num_layers > 0) f.push_back(fmt::format("--mtp-num-layers {}", m.mtp_num_layers));
  f.push_back(fmt::format("--mock-data --tokenizer-type NullTokenizer --vocab-size {} --make-vocab-size-divisible-by 1",
                          m.vocab_size - 1));
  return f;
}

LaunchConfig EmitMegatron(const Model& m, const ParallelConfig& c, const Cluster& cl, std::int64_t gpus) {
  LaunchConfig l{LaunchFormat::kMegatron, kMegatronVersion, "", {}, {}};
  const std::int64_t seq = SeqOf(m, c);
  std::vector<std::string> lines = MegatronModelFlags(m, seq, &l.unexpressed);
  const std::vector<std::string> par = MegatronParallelFlags(c, m, &l.unexpressed);
  lines.insert(lines.end(), par.begin(), par.end());
  lines.push_back("--train-iters 100 --lr 1.0e-4 --min-lr 1.0e-5 --lr-decay-style cosine --log-interval 1 "
                  "--eval-iters 0");
  const Nodes n = NodesOf(cl, gpus);
  OneScheduleUnexpressed(c, "Megatron-LM", &l.unexpressed);
  std::string t = Header("#", m, c, cl, gpus, kMegatronVersion, l.unexpressed);
  t += "# Mock data and 100 steps: give your --data-path, tokenizer, schedule and checkpoints for a real run.\n";
  // Megatron-LM's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 where tp or cp is above 1
  // (before Blackwell), so that the kernels after a TP/CP collective queue behind it; FSDP asserts
  // the opposite (a value above 1).
  std::string env;
  if (c.zero_stage >= 2) {
    t += "# FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset (or above 1); Megatron-LM refuses 1 with FSDP.\n";
  } else if (c.tp > 1 || c.cp > 1) {
    env = "CUDA_DEVICE_MAX_CONNECTIONS=1 ";
  }
  // Megatron-LM asserts NVTE_CPU_OFFLOAD_V1=1 with fine-grained activation offloading on
  // Transformer Engine 2.10 and later (arguments.py), so that TE offloads activations, not weights.
  if (c.offload_modules != 0) env += "NVTE_CPU_OFFLOAD_V1=1 ";
  t += fmt::format("{}torchrun --nnodes {} --nproc-per-node {} --node-rank ${{NODE_RANK:-0}} "
                   "--master-addr ${{MASTER_ADDR:-localhost}} --master-port ${{MASTER_PORT:-6000}} \\\n"
                   "  pretrain_gpt.py --use-mcore-models --transformer-impl transformer_engine",
                   env, n.nodes, n.per_node);
  for (const auto& line : lines) t += " \\\n  " + line;
  l.text = t + "\n";
  return l;
}

// ---- NeMo 2 -------------------------------------------------------------------------------

std::string Py(bool b) { return b ? "True" : "False"; }
std::string Py(std::int64_t v) { return std::to_string(v); }
std::string PyStr(const std::string& s) { return "\"" + s + "\""; }

struct PyLines {
  std::string text;
  void Set(const std::string& path, const std::string& value) { text += "recipe." + path + " = " + value + "\n"; }
  void Comment(const std::string& s) { text += "# " + s + "\n"; }
};

/// Llama 4's NoPE layers as Megatron-Core's no_rope_freq (N or its 0/1 list); its q/k L2 norms, a
/// layer-spec choice an override cannot make, named.
void NemoLlama4Attention(const Model& m, PyLines* p, std::vector<std::string>* unexpressed) {
  if (const std::int64_t n = m.NoRopeFreq(); n > 0) {
    p->Set("model.config.no_rope_freq", Py(n));
  } else if (!m.no_rope_layers.empty()) {
    std::string l = "[";
    for (std::size_t i = 0; i < m.no_rope_layers.size(); ++i) l += (i > 0 ? ", " : "") + std::string(m.no_rope_layers[i] ? "1" : "0");
    p->Set("model.config.no_rope_freq", l + "]");
  }
  if (m.qk_l2_norm) {
    unexpressed->push_back("Llama 4's q/k L2 norms (Megatron-LM's --qk-l2-norm, a layer-spec choice): not written; "
                           "start from NeMo's Llama 4 recipe (llm.llama4_*), whose layer spec has them");
  }
}

void NemoModel(const Model& m, std::int64_t seq, PyLines* p, std::vector<std::string>* unexpressed) {
  p->Comment("Model shape (GPTConfig / TransformerConfig fields)");
  p->Set("model.config.num_layers", Py(m.num_layers));
  p->Set("model.config.hidden_size", Py(m.hidden_size));
  p->Set("model.config.ffn_hidden_size", Py(m.ffn_hidden_size));
  p->Set("model.config.num_attention_heads", Py(m.num_attention_heads));
  p->Set("model.config.num_query_groups", Py(m.num_query_groups));
  p->Set("model.config.kv_channels", Py(m.kv_channels));
  p->Set("model.config.seq_length", Py(seq));
  p->Set("model.config.vocab_size", Py(m.vocab_size));
  p->Set("model.config.normalization", PyStr(m.normalization == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm"));
  p->Set("model.config.gated_linear_unit", Py(m.activation == Activation::kSwiglu));
  p->Set("model.config.activation_func", m.activation == Activation::kSwiglu ? "F.silu" : "F.gelu");
  const char* pe = m.position_embedding == PositionEmbedding::kRope      ? "rope"
                   : m.position_embedding == PositionEmbedding::kLearned ? "learned_absolute"
                                                                         : "none";
  if (m.position_embedding == PositionEmbedding::kAlibi) unexpressed->push_back("ALiBi positions: written as none");
  p->Set("model.config.position_embedding_type", PyStr(pe));
  if (m.position_embedding == PositionEmbedding::kRope) p->Set("model.config.rotary_base", Number(m.rotary_base));
  if (m.position_embedding == PositionEmbedding::kRope && m.rotary_percent != 1) {
    p->Set("model.config.rotary_percent", Number(m.rotary_percent));
  }
  RopeBandsUnexpressed(m, "NeMo's Llama 3.1 scaling", 1, 4, unexpressed);
  NemoLlama4Attention(m, p, unexpressed);
  GptOssUnexpressed(m, "start from NeMo's GPT-OSS recipe, whose config sets them", unexpressed);
  RopeScalingUnexpressed(m, unexpressed);
  if (m.rope_scaling_factor > 0) {
    // NeMo's Llama 3.1 configs scale RoPE in their own configure_model (Llama31Config's
    // scale_factor), which a GPTConfig override cannot switch on.
    unexpressed->push_back(fmt::format("Llama 3.1's RoPE scaling (factor {}): start from a Llama31Config recipe",
                                       Number(m.rope_scaling_factor)));
  }
  p->Set("model.config.share_embeddings_and_output_weights", Py(m.tie_embeddings));
  p->Set("model.config.add_bias_linear", Py(m.add_bias_linear));
  p->Set("model.config.add_qkv_bias", Py(m.add_qkv_bias));
  if (MegatronQkLayernorm(m)) p->Set("model.config.qk_layernorm", "True");
  if (!MegatronWindow(m, unexpressed).empty()) {
    p->Set("model.config.window_size", fmt::format("({}, 0)", m.attention_window));
    if (!m.window_layer_pattern.empty()) {
      p->Set("model.config.window_attn_skip_freq", MegatronWindowPattern(m));
    } else if (m.window_attn_skip_freq > 0) {
      p->Set("model.config.window_attn_skip_freq", Py(m.window_attn_skip_freq));
    }
  }
  p->Set("model.config.hidden_dropout", m.dropout ? "0.1" : "0.0");
  p->Set("model.config.attention_dropout", m.dropout ? "0.1" : "0.0");
  if (m.moe.enabled()) {
    p->Set("model.config.num_moe_experts", Py(m.moe.num_experts));
    p->Set("model.config.moe_router_topk", Py(m.moe.top_k));
    p->Set("model.config.moe_ffn_hidden_size", Py(m.moe.ffn_hidden_size));
    if (m.moe.shared_ffn_hidden_size > 0) {
      p->Set("model.config.moe_shared_expert_intermediate_size", Py(m.moe.shared_ffn_hidden_size));
    }
    const std::string freq = MegatronMoeLayerFreq(m);
    p->Set("model.config.moe_layer_freq", freq == "1" ? "1" : freq.substr(1, freq.size() - 2));
    p->Set("model.config.moe_grouped_gemm", "True");
    const MoeSpec& e = m.moe;
    p->Set("model.config.moe_router_score_function", PyStr(e.router_score));
    p->Set("model.config.moe_router_pre_softmax", Py(e.router_pre_softmax));
    p->Set("model.config.moe_router_topk_scaling_factor", e.router_topk_scaling > 0 ? Number(e.router_topk_scaling) : "None");
    p->Set("model.config.moe_router_num_groups", e.router_num_groups > 0 ? Py(e.router_num_groups) : "None");
    p->Set("model.config.moe_router_group_topk", e.router_group_topk > 0 ? Py(e.router_group_topk) : "None");
    p->Set("model.config.moe_router_enable_expert_bias", Py(e.router_expert_bias));
    p->Set("model.config.moe_apply_probs_on_input", Py(e.probs_on_input));
    unexpressed->insert(unexpressed->end(), e.router_approximations.begin(), e.router_approximations.end());
    if (m.moe.router_bias) unexpressed->push_back("a bias in the router's linear layer");
  }
  if (m.mla.enabled()) {
    p->Comment("Multi-latent attention needs an MLATransformerConfig (start from llm.deepseek_v3's recipe)");
    p->Set("model.config.q_lora_rank", m.mla.q_lora_rank > 0 ? Py(m.mla.q_lora_rank) : "None");
    p->Set("model.config.kv_lora_rank", Py(m.mla.kv_lora_rank));
    p->Set("model.config.qk_head_dim", Py(m.mla.qk_head_dim));
    p->Set("model.config.qk_pos_emb_head_dim", Py(m.mla.qk_pos_emb_head_dim));
    p->Set("model.config.v_head_dim", Py(m.mla.v_head_dim));
  }
  if (m.mtp_num_layers > 0) p->Set("model.config.mtp_num_layers", Py(m.mtp_num_layers));
}

void NemoPrecision(const ParallelConfig& c, PyLines* p, std::vector<std::string>* unexpressed) {
  p->Comment("Precision (MegatronMixedPrecision)");
  switch (c.precision) {
    case Precision::kFp16: p->Set("trainer.plugins", "fp16_mixed()"); break;
    case Precision::kFp32:
    case Precision::kTf32:
      p->Set("trainer.plugins", "None");
      p->Comment("fp32 parameters and compute: no mixed-precision plugin");
      break;
    default: p->Set("trainer.plugins", "bf16_mixed()"); break;
  }
  if (c.precision == Precision::kFp8) {
    p->Set("trainer.plugins.fp8", PyStr(c.Fp8FormatName()));
    p->Set("trainer.plugins.fp8_recipe", PyStr(ToString(c.fp8_recipe)));
    if (c.fp8_recipe == Fp8Recipe::kDelayed) {
      p->Set("trainer.plugins.fp8_amax_history_len", Py(c.fp8_amax_history_len));
      p->Set("trainer.plugins.fp8_amax_compute_algo", PyStr("max"));
    }
  } else if (c.precision == Precision::kMxfp8) {
    p->Set("trainer.plugins.fp8", PyStr(c.Fp8FormatName()));
    p->Set("trainer.plugins.fp8_recipe", PyStr("mxfp8"));
  } else if (c.precision == Precision::kNvfp4) {
    p->Set("trainer.plugins.fp4", PyStr("e2m1"));
    p->Set("trainer.plugins.fp4_recipe", PyStr("nvfp4"));
  }
  if (IsLowPrecision(c.precision)) {
    p->Set("trainer.plugins.fp8_param_gather", Py(c.fp8_param_gather));
    const bool bf16_layers = c.bf16_layers_start + c.bf16_layers_end > 0;
    p->Set("trainer.plugins.first_last_layers_bf16", Py(bf16_layers));
    if (bf16_layers) {
      p->Set("trainer.plugins.num_layers_at_start_in_bf16", Py(c.bf16_layers_start));
      p->Set("trainer.plugins.num_layers_at_end_in_bf16", Py(c.bf16_layers_end));
    }
  }
  (void)unexpressed;
}

/// NemoParallel's expert parallelism and dispatcher settings (a MoE model's).
void NemoExperts(const ParallelConfig& c, PyLines* p) {
  p->Set("trainer.strategy.expert_model_parallel_size", Py(c.ep));
  p->Set("trainer.strategy.expert_tensor_parallel_size", Py(c.expert_tp()));
  p->Set("model.config.moe_token_dispatcher_type", PyStr(ToString(c.moe_dispatcher)));
  if (c.moe_dispatcher == MoeDispatcher::kFlex) p->Set("model.config.moe_enable_deepep", Py(true));
  p->Set("model.config.moe_expert_capacity_factor",
         c.moe_capacity_factor > 0 ? Number(c.moe_capacity_factor) : std::string("None"));
  p->Set("model.config.overlap_moe_expert_parallel_comm", Py(c.moe_a2a_overlap));
  p->Set("model.config.moe_router_force_load_balancing", Py(c.moe_force_load_balancing));
  p->Set("model.config.delay_wgrad_compute", Py(c.moe_a2a_overlap));
}

void NemoParallel(const Model& m, const ParallelConfig& c, PyLines* p, std::vector<std::string>* unexpressed) {
  p->Comment("Parallelism (MegatronStrategy)");
  p->Set("trainer.strategy.tensor_model_parallel_size", Py(c.tp));
  p->Set("trainer.strategy.pipeline_model_parallel_size", Py(c.pp));
  p->Set("trainer.strategy.pipeline_dtype", c.pp > 1 ? "torch.bfloat16" : "None");
  const bool layout = c.even_chunks;
  p->Set("trainer.strategy.virtual_pipeline_model_parallel_size", c.vp > 1 && !layout ? Py(c.vp) : "None");
  if (layout) p->Set("trainer.strategy.pipeline_model_parallel_layout", PyStr(MegatronPipelineLayout(m, c)));
  if (c.first_stage_layers >= 0) p->Set("trainer.strategy.num_layers_in_first_pipeline_stage", Py(c.first_stage_layers));
  if (c.last_stage_layers >= 0) p->Set("trainer.strategy.num_layers_in_last_pipeline_stage", Py(c.last_stage_layers));
  // The layout string places the embedding and the loss itself: Megatron-Core refuses the
  // account-for flags beside it (TransformerConfig.__post_init__).
  p->Set("trainer.strategy.account_for_embedding_in_pipeline_split", Py(c.embedding_slots && !layout));
  p->Set("trainer.strategy.account_for_loss_in_pipeline_split", Py(c.embedding_slots && !layout));
  p->Set("trainer.strategy.context_parallel_size", Py(c.cp));
  if (c.cp > 1) {
    p->Set("model.config.cp_comm_type", PyStr(c.cp_comm == CpComm::kUlysses ? "a2a" : ToString(c.cp_comm)));
    if (c.cp_comm == CpComm::kA2AP2P && c.cp_a2a > 0) {
      p->Set("model.config.hierarchical_context_parallel_sizes", fmt::format("[{}, {}]", c.cp_a2a, c.cp / c.cp_a2a));
    }
  }
  p->Set("trainer.strategy.sequence_parallel", Py(c.sequence_parallel));
  if (m.moe.enabled()) NemoExperts(c, p);
  // Megatron-FSDP shards what ZeRO-2/3 shard; ZeRO-1 is the distributed optimizer.
  const std::string sharding = c.zero_stage == 3 ? "optim_grads_params" : c.zero_stage == 2 ? "optim_grads" : "";
  p->Set("trainer.strategy.fsdp", sharding.empty() ? "None" : PyStr("megatron"));
  // As Megatron-LM's --overlap-param-gather, only beside the overlapped gradient reduce.
  const bool nemo_param_gather = c.overlap_param_gather && c.zero_stage >= 1 && c.overlap_grad_reduce;
  if (c.overlap_param_gather && c.zero_stage >= 1 && !c.overlap_grad_reduce) {
    unexpressed->push_back("the parameter gather overlapped with the forward pass without the overlapped gradient "
                           "reduce: written as neither (simulate with --no-overlap-param-gather to match)");
  }
  p->Set("trainer.strategy.ddp",
         fmt::format("run.Config(DistributedDataParallelConfig, check_for_nan_in_grad=True, grad_reduce_in_fp32={}, "
                     "overlap_grad_reduce={}, overlap_param_gather={}, average_in_collective=True, "
                     "use_distributed_optimizer={}{}{})",
                     Py(c.fp32_main_grads), Py(c.overlap_grad_reduce && (c.dp_cp() > 1 || nemo_param_gather)),
                     Py(nemo_param_gather), Py(c.zero_stage >= 1),
                     sharding.empty() ? "" : ", data_parallel_sharding_strategy=" + PyStr(sharding),
                     !c.hybrid_shard() ? std::string()
                     : c.zero_stage >= 2
                         ? fmt::format(", num_distributed_optimizer_instances={}, outer_dp_sharding_strategy={}",
                                       c.dp_replicas(), PyStr("no_shard"))
                         : fmt::format(", num_distributed_optimizer_instances={}", c.dp_replicas())));
  p->Set("optim.config.use_distributed_optimizer", Py(c.zero_stage >= 1));
  if (c.tp_comm_overlap) {
    p->text += "recipe.trainer.callbacks.append(run.Config(MegatronCommOverlapCallback, tp_comm_overlap=True))\n";
  }
  // What the plan simulated: NeMo 2's default is the fused loss; an unfused plan says so.
  const bool ce_fused = c.cross_entropy == CrossEntropyImpl::kNative || c.cross_entropy == CrossEntropyImpl::kTe;
  p->Set("model.config.cross_entropy_loss_fusion", Py(ce_fused));
  if (c.cross_entropy == CrossEntropyImpl::kTe) p->Set("model.config.cross_entropy_fusion_impl", PyStr("te"));
  if (c.cross_entropy == CrossEntropyImpl::kFlashAttn || c.cross_entropy == CrossEntropyImpl::kTorch) {
    unexpressed->push_back(fmt::format("the {} cross-entropy (NeMo runs Megatron-Core's; written unfused)",
                                       ToString(c.cross_entropy)));
  }
  if (c.schedule == Schedule::kZbH1) unexpressed->push_back("the ZB-H1 schedule (not in Megatron-Core)");
  if (c.schedule == Schedule::kGpipe) unexpressed->push_back("the GPipe schedule (Megatron-Core runs 1F1B)");
  if (c.optimizer_impl != OptimizerImpl::kMegatron) {
    unexpressed->push_back(fmt::format("the {} optimizer (NeMo runs Megatron-Core's)", ToString(c.optimizer_impl)));
  }
  if (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kPerLayer) {
    unexpressed->push_back(fmt::format("ZeRO-3 as {} ran it (NeMo gathers per layer)", ToString(c.zero3_impl)));
  }
  if (c.zero_stage >= 3 && !c.zero3_limit_all_gathers) {
    unexpressed->push_back("PyTorch FSDP's limit_all_gathers=False (NeMo's Megatron-FSDP has no such switch)");
  }
  if (!HasMegatronCoreDefaults(c)) {
    unexpressed->push_back("Megatron-LM 2021-22's pipeline transfers (the plan's --framework megatron-2022)");
  }
}

/// A Python list of strings from comma-separated names: "a,b" -> ["a", "b"] (PyStr quoting).
std::string PyStrList(const std::string& names) {
  std::string list;
  std::size_t start = 0;
  while (start <= names.size()) {
    const std::size_t end = std::min(names.find(',', start), names.size());
    list += (list.empty() ? "" : ", ") + PyStr(names.substr(start, end - start));
    start = end + 1;
  }
  return "[" + list + "]";
}

void NemoRecompute(const ParallelConfig& c, PyLines* p, std::vector<std::string>* unexpressed) {
  p->Comment("Activation recompute");
  if (c.TorchOpCheckpointing()) {
    unexpressed->push_back("torchtitan's per-op selective checkpointing (Megatron-Core has no per-op policy): written "
                           "as no recompute, so the run keeps every activation");
  }
  if (c.recompute == Recompute::kNone || c.TorchOpCheckpointing()) {
    p->Set("model.config.recompute_granularity", "None");
  } else if (c.recompute == Recompute::kFull) {
    const bool block = c.PartialRecompute() && c.recompute_block_layers >= 0;
    LayerIntervalUnexpressed(c, "Megatron-Core", unexpressed);
    p->Set("model.config.recompute_granularity", PyStr("full"));
    p->Set("model.config.recompute_method", PyStr(block ? "block" : "uniform"));
    p->Set("model.config.recompute_num_layers", block ? std::to_string(c.recompute_block_layers) : "1");
  } else {
    p->Set("model.config.recompute_granularity", PyStr("selective"));
    p->Set("model.config.recompute_modules", PyStrList(RecomputeModulesName(c.recompute_modules)));
  }
  if (c.offload_modules != 0) {
    p->Comment("Fine-grained activation offloading (Megatron-LM asserts NVTE_CPU_OFFLOAD_V1=1 in the environment "
               "on Transformer Engine 2.10 and later)");
    p->Set("model.config.fine_grained_activation_offloading", "True");
    p->Set("model.config.offload_modules", PyStrList(OffloadModulesName(c.offload_modules)));
  }
}

LaunchConfig EmitNemo(const Model& m, const ParallelConfig& c, const Cluster& cl, std::int64_t gpus) {
  LaunchConfig l{LaunchFormat::kNemo, kNemoVersion, "", {}, {}};
  const std::int64_t seq = SeqOf(m, c);
  const Nodes n = NodesOf(cl, gpus);
  PyLines p;
  p.text += "import nemo_run as run\nimport torch\nimport torch.nn.functional as F\n"
            "from megatron.core.distributed import DistributedDataParallelConfig\n"
            "from nemo.collections.llm.recipes.precision.mixed_precision import bf16_mixed, fp16_mixed\n";
  if (c.tp_comm_overlap) {
    p.text += "from nemo.lightning.pytorch.callbacks.megatron_comm_overlap import MegatronCommOverlapCallback\n";
  }
  if (!c.flash_attention) p.text += "from megatron.core.transformer.enums import AttnBackend\n";
  p.text += "\n";
  p.Comment(fmt::format("Apply to your model's recipe, e.g. recipe = llm.<model>.pretrain_recipe(num_nodes={}, "
                        "num_gpus_per_node={})",
                        n.nodes, n.per_node));
  p.Set("trainer.num_nodes", Py(n.nodes));
  p.Set("trainer.devices", Py(n.per_node));
  NemoModel(m, seq, &p, &l.unexpressed);
  // The unfused attention (--no-flash-attention, and V100s): Megatron-Core's attention backend.
  if (!c.flash_attention) p.Set("model.config.attention_backend", "AttnBackend.unfused");
  NemoParallel(m, c, &p, &l.unexpressed);
  NemoRecompute(c, &p, &l.unexpressed);
  NemoPrecision(c, &p, &l.unexpressed);
  p.Comment("Batch");
  p.Set("data.micro_batch_size", Py(c.micro_batch_size));
  p.Set("data.global_batch_size", Py(c.global_batch_size));
  p.Set("data.seq_length", Py(seq));
  OneScheduleUnexpressed(c, "NeMo (Megatron-Core)", &l.unexpressed);
  l.text = Header("#", m, c, cl, gpus, kNemoVersion, l.unexpressed) + p.text;
  return l;
}

// ---- torchtitan ---------------------------------------------------------------------------

/// torchtitan's model family for `m` (the names under torchtitan/models), or "" when it has none.
std::string TorchtitanModelName(const Model& m) {
  if (m.mla.enabled()) return "deepseek_v3";
  if (m.moe.enabled() && m.moe.expert_bias) return "gpt_oss";
  // Llama 4: interleaved MoE layers (Maverick) or the router's weights on the experts' input
  // (Llama4TextMoe, Scout's every-layer MoE too: torchtitan's llama4 17bx16e flavor).
  if (m.moe.enabled() && (m.moe.layer_step > 1 || m.moe.probs_on_input)) return "llama4";
  const bool llama_like = m.normalization == Normalization::kRMSNorm && m.activation == Activation::kSwiglu &&
                          m.position_embedding == PositionEmbedding::kRope;
  if (!llama_like) return "";
  return m.qk_layernorm || m.moe.enabled() || m.kv_channels * m.num_attention_heads != m.hidden_size ? "qwen3" : "llama3";
}

/// torchtitan's own llama3 flavor of `m`'s shape ("8B", "70B", "405B": torchtitan/models/llama3/
/// __init__.py, llama3_configs), or "" when it has none.
std::string TorchtitanLlama3Flavor(const Model& m) {
  struct Flavor {
    const char* name;
    std::int64_t layers, dim, heads, ffn;
  };
  static constexpr Flavor kFlavors[] = {{"8B", 32, 4096, 32, 14336}, {"70B", 80, 8192, 64, 28672}, {"405B", 126, 16384, 128, 53248}};
  for (const Flavor& f : kFlavors) {
    if (m.num_layers == f.layers && m.hidden_size == f.dim && m.num_attention_heads == f.heads && m.num_query_groups == 8 &&
        m.ffn_hidden_size == f.ffn && m.vocab_size == 128256 && !m.tie_embeddings && m.rotary_base == 500000) {
      return f.name;
    }
  }
  return "";
}

const char* TorchtitanSchedule(const ParallelConfig& c, std::vector<std::string>* unexpressed) {
  switch (c.schedule) {
    case Schedule::kGpipe: return c.vp > 1 ? "LoopedBFS" : "GPipe";
    case Schedule::kInterleaved: return c.vp > 1 ? "Interleaved1F1B" : "1F1B";
    case Schedule::kZbH1:
      if (c.vp > 1) return "InterleavedZeroBubble";
      unexpressed->push_back("ZB-H1 on one stage per rank (torchtitan's zero-bubble schedules are looped): "
                             "written as 1F1B");
      return "1F1B";
    case Schedule::k1F1B: break;
  }
  return "1F1B";
}

void TorchtitanModel(const Model& m, const ParallelConfig& c, std::string* t, std::vector<std::string>* unexpressed) {
  RopeScalingUnexpressed(m, unexpressed);
  if (m.attention_window > 0) {
    unexpressed->push_back(fmt::format("the attention window ({} = {}{}): not written; set it in the flavor's model "
                                       "arguments where the torchtitan model has one",
                                       m.attention_window_key, m.attention_window,
                                       m.WindowedLayers() > 0 ? fmt::format(" on {} of {} layers", m.WindowedLayers(), m.num_layers)
                                                              : std::string(", not modelled")));
  }
  const std::string name = TorchtitanModelName(m);
  *t += "[model]\n";
  if (name.empty()) {
    unexpressed->push_back(fmt::format("the model family ({}, {}, {} positions): torchtitan has no such model",
                                       ToString(m.normalization), ToString(m.activation), ToString(m.position_embedding)));
    *t += "name = \"llama3\"  # torchtitan has no model of this family\n";
  } else if (name == "qwen3" && m.moe.enabled()) {
    *t += "name = \"qwen3\"  # the nearest torchtitan family with routed experts\n";
    if (!m.qk_layernorm) {
      unexpressed->push_back("the model family: written as torchtitan's qwen3, the nearest with routed experts, whose "
                             "per-head q/k RMSNorms this model does not have");
    }
  } else if (name == "qwen3" && !m.qk_layernorm) {
    *t += "name = \"qwen3\"  # the nearest torchtitan family with this head dimension\n";
    unexpressed->push_back("the model family: written as torchtitan's qwen3, the nearest with a head dimension apart "
                           "from dim / n_heads, whose per-head q/k RMSNorms this model does not have");
  } else {
    *t += fmt::format("name = \"{}\"\n", name);
  }
  if (m.position_embedding == PositionEmbedding::kRope && m.rotary_percent != 1) {
    unexpressed->push_back(fmt::format("partial RoPE on {}% of each head's dims: torchtitan's llama3 and qwen3 models "
                                       "rotate whole heads", Number(100 * m.rotary_percent)));
  }
  if (name == "llama4") {
    RopeBandsUnexpressed(m, "torchtitan's llama4 RoPE scaling", 1, 1, unexpressed);
  } else {
    RopeBandsUnexpressed(m, "torchtitan's llama3 RoPE scaling", 1, 4, unexpressed);
  }
  Llama4AttentionUnexpressed(m,
                             "set it in the flavor's model arguments where the torchtitan model has one (llama4's "
                             "every_n_layers_nope skips layers 0, n, 2n, ... counted from 0)",
                             unexpressed);
  if (name != "gpt_oss") GptOssUnexpressed(m, "torchtitan's gpt_oss model has them", unexpressed);
  const std::string flavor = name == "llama3" ? TorchtitanLlama3Flavor(m) : std::string();
  if (flavor.empty()) {
    unexpressed->push_back("the model's shape: torchtitan defines it as a flavor in Python "
                           "(torchtitan/models/<name>/__init__.py); add one with the shape in the comments");
  }
  *t += fmt::format("flavor = \"{}\"\n", flavor.empty() ? m.name : flavor);
  *t += fmt::format("# shape: n_layers = {}, dim = {}, n_heads = {}, n_kv_heads = {}, head_dim = {}, ffn hidden = {}, "
                    "vocab_size = {}, {}, tied embeddings = {}\n",
                    m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels,
                    m.ffn_hidden_size, m.vocab_size,
                    m.position_embedding == PositionEmbedding::kRope
                        ? "rope_theta = " + Number(m.rotary_base) +
                              (m.rope_scaling_factor > 0
                                   ? fmt::format(", Llama 3 RoPE scaling factor {} (low_freq_factor {}, high_freq_factor "
                                                 "{}, original_max_position_embeddings {})",
                                                 Number(m.rope_scaling_factor), Number(m.rope_low_freq_factor),
                                                 Number(m.rope_high_freq_factor), m.rope_original_max_positions)
                                   : std::string()) +
                              (m.rotary_percent != 1 ? ", rotary percent " + Number(m.rotary_percent) : std::string())
                        : std::string(ToString(m.position_embedding)) + " positions",
                    m.tie_embeddings ? "yes" : "no");
  if (m.moe.enabled()) {
    *t += fmt::format("# experts: num_experts = {}, top_k = {}, expert ffn hidden = {}, shared ffn hidden = {}; router: {}\n",
                      m.moe.num_experts, m.moe.top_k, m.moe.ffn_hidden_size, m.moe.shared_ffn_hidden_size,
                      RouterSummary(m.moe));
  }
  if (c.precision == Precision::kFp8) *t += "converters = [\"quantize.linear.float8\"]\n";
  if (IsLowPrecision(c.precision) && m.moe.enabled()) {
    unexpressed->push_back("low-precision expert GEMMs: add the quantize.grouped_mm converter with the experts' "
                           "module names (fqns)");
  }
  if (c.precision == Precision::kMxfp8) *t += "converters = [\"quantize.linear.mx\"]\n";
}

/// What torchtitan refuses at start-up in the mesh of TorchtitanParallelism: replication (DDP)
/// beside any other parallelism (parallelize.py: "DDP has not supported > 1D parallelism"), and
/// expert-parallel ranks it cannot borrow (its ParallelDims takes them from the sharded
/// data-parallel, cp and, with expert tp 1, tp ranks). Each a sentence in `warnings`.
void TorchtitanStartupChecks(const ParallelConfig& c, std::int64_t replicate, std::int64_t shard_degree,
                             std::vector<std::string>* warnings) {
  const bool fsdp = shard_degree > 1 || c.cp > 1;  // torchtitan's fsdp_enabled
  if (!fsdp && replicate > 1 && (c.tp > 1 || c.pp > 1 || c.ep > 1)) {
    warnings->push_back(fmt::format(
        "torchtitan replicates (DDP, data_parallel_replicate_degree = {}) only as the sole parallelism: beside tp {}, pp "
        "{}, ep {} it raises \"DDP has not supported > 1D parallelism\" at start-up; simulate --zero 2 or 3 (FSDP2) for "
        "a configuration it runs", replicate, c.tp, c.pp, c.ep));
  }
  if (c.ep > 1) {
    const std::int64_t etp = c.expert_tp();
    if (!TorchtitanBorrowsExpertRanks(c.ep, etp, shard_degree, c.cp, c.tp)) {
      warnings->push_back(fmt::format(
          "torchtitan borrows expert-parallel ranks from data_parallel_shard_degree x cp{} ({} x {}{}), which ep = {} "
          "must {}: its ParallelDims check fails at start-up", etp == 1 ? " x tp" : "", shard_degree, c.cp,
          etp == 1 ? fmt::format(" x {}", c.tp) : "", c.ep,
          etp == 1 ? "divide, with cp x tp dividing ep" : "divide"));
    }
  }
}

/// TorchtitanParallelism's data parallelism: FSDP2's shard and replicate degrees (hybrid sharding
/// over a mesh), its resharding, and what the simulated ZeRO stage does that torchtitan cannot.
void TorchtitanDataParallel(const ParallelConfig& c, std::string* t, std::vector<std::string>* unexpressed,
                            std::vector<std::string>* warnings) {
  // FSDP2 shards over data_parallel_shard_degree; plain DDP replicates. Under a pipeline FSDP2
  // keeps its gathered parameters through the schedule and reduce-scatters after its last
  // backward, which the simulator runs as ZeRO-1 (kFsdp2PipelineEquivalent): written as FSDP2.
  const bool fsdp2_pp = c.zero_stage == 1 && c.pp > 1;
  const bool shard = c.zero_stage >= 2 || fsdp2_pp;
  // Hybrid sharding: FSDP2 over a (replicate, shard) mesh; torchtitan's shard degree times its
  // context-parallel degree is the group the state is sharded over.
  std::int64_t replicate = shard ? 1 : c.dp, shard_degree = shard ? c.dp : 1;
  if (shard && c.hybrid_shard()) {
    if (c.dp_shard % c.cp == 0) {
      replicate = c.dp_replicas();
      shard_degree = c.dp_shard / c.cp;
    } else {
      unexpressed->push_back(fmt::format("hybrid sharding over {} ranks, which the context-parallel degree {} does not "
                                         "divide (torchtitan shards over data_parallel_shard_degree x cp); written "
                                         "as full sharding", c.dp_shard, c.cp));
    }
  }
  if (c.zero_stage == 1 && c.hybrid_shard() && !fsdp2_pp) {
    unexpressed->push_back("hybrid sharding of the distributed optimizer (torchtitan has no ZeRO-1)");
  }
  *t += fmt::format("data_parallel_replicate_degree = {}\n", replicate);
  *t += fmt::format("data_parallel_shard_degree = {}\n", shard_degree);
  if (fsdp2_pp) {
    *t += "# FSDP2 under the pipeline (\"default\": parameters kept through each schedule, gradients reduce-scattered "
          "after its last backward): the simulated ZeRO-1's traffic\n";
  }
  if (shard) {
    *t += fmt::format("fsdp_reshard_after_forward = \"{}\"\n",
                      fsdp2_pp ? "default" : c.zero_stage == 3 ? "always" : "never");
  }
  if (fsdp2_pp && c.overlap_grad_reduce) {
    unexpressed->push_back("gradient reduction overlapped with the backward: FSDP2 under a pipeline reduce-scatters "
                           "after the schedule's last backward (simulate with --no-overlap-grad-reduce)");
  }
  if (c.zero_stage <= 1 && c.cp > 1 && !fsdp2_pp) {
    unexpressed->push_back(fmt::format("ZeRO-{} with context parallelism: torchtitan shards the state with FSDP2 over "
                                       "the {} context-parallel ranks (ZeRO-3 there), which the simulation did not",
                                       c.zero_stage, c.cp));
  } else if (c.zero_stage == 1 && !fsdp2_pp) {
    unexpressed->push_back("ZeRO-1 (the distributed optimizer): torchtitan shards with FSDP2 (ZeRO-2/3) or "
                           "replicates; written as replication");
  }
  // torchtitan keeps fp32 parameters as the optimizer's master (OptimizerImpl::kTorchFsdp): say
  // where the simulated optimizer's state differs from that.
  ParallelConfig titan = c;
  titan.optimizer_impl = OptimizerImpl::kTorchFsdp;
  const double simulated = BytesPerParam(c).total(), torch_state = BytesPerParam(titan).total();
  if (c.optimizer_impl != OptimizerImpl::kTorchFsdp && std::abs(simulated - torch_state) > 1e-9) {
    unexpressed->push_back(fmt::format("the {} optimizer's state, {:.3g} bytes a parameter: torchtitan keeps fp32 "
                                       "parameter shards as the master, {:.3g} bytes (simulate with --optimizer fsdp)",
                                       ToString(c.optimizer_impl), simulated, torch_state));
  }
  TorchtitanStartupChecks(c, replicate, shard_degree, warnings);
}

/// TorchtitanParallelism's pipeline: degree, schedule, micro-batch and the split. torchtitan
/// spreads L + 2w slots (the embedding and the output weighing w = first/last_stage_less_layers
/// layers each) over the stages as evenly as they go, the remainder to the first
/// (generate_llm_fqn_per_model_part), and makes ceil((L + 2w) / P) stages of
/// pipeline_parallel_layers_per_stage P: the split is written that way when it is the simulated
/// one, else left to module_fqns_per_model_part, named in `unexpressed`.
void TorchtitanPipeline(const Model& m, const ParallelConfig& c, std::string* t, std::vector<std::string>* unexpressed) {
  *t += fmt::format("pipeline_parallel_degree = {}\n", c.pp);
  *t += fmt::format("pipeline_parallel_schedule = \"{}\"\n", TorchtitanSchedule(c, unexpressed));
  *t += fmt::format("pipeline_parallel_microbatch_size = {}\n", c.micro_batch_size);
  if (c.pp <= 1) return;
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  const std::int64_t w = c.embedding_slots ? 1 : 0;
  const std::int64_t chunks = static_cast<std::int64_t>(layout.chunk_layers.size());
  ParallelConfig titan = c;  // the split torchtitan makes of these chunks
  titan.even_chunks = true;
  titan.first_stage_layers = titan.last_stage_layers = -1;
  const PipelineLayout made = PipelineLayoutOf(m, titan);
  const std::int64_t per = TorchtitanLayersPerStage(m.num_layers + 2 * w, chunks);
  const bool looped = c.schedule == Schedule::kInterleaved && c.vp > 1;
  // Two stages a rank is torchtitan's default; other counts come from P.
  const bool by_per = looped && per > 0;
  if (!layout.error.empty() || !made.error.empty() || made.chunk_layers != layout.chunk_layers ||
      (looped && !by_per && c.vp != 2)) {
    unexpressed->push_back("the pipeline split: give module_fqns_per_model_part with the layers of each chunk "
                           "(" + MegatronPipelineLayout(m, c) + ")");
    return;
  }
  if (by_per) *t += fmt::format("pipeline_parallel_layers_per_stage = {}\n", per);
  // torchtitan counts the embedding and the output as a layer each unless told (default 1 each).
  *t += fmt::format("pipeline_parallel_first_stage_less_layers = {}\n", w);
  *t += fmt::format("pipeline_parallel_last_stage_less_layers = {}\n", w);
}

/// TorchtitanParallelism's context and expert parallelism, and the compile section async tensor
/// parallelism needs (a warning: the file then runs what the simulation did not model).
void TorchtitanContextAndExperts(const Model& m, const ParallelConfig& c, std::string* t,
                                 std::vector<std::string>* unexpressed, std::vector<std::string>* warnings) {
  *t += fmt::format("context_parallel_degree = {}\n", c.cp);
  if (c.cp > 1) {
    const bool a2a = c.cp_comm == CpComm::kA2A || c.cp_comm == CpComm::kUlysses || c.cp_comm == CpComm::kA2AP2P;
    *t += fmt::format("context_parallel_rotate_method = \"{}\"\n", c.cp_comm == CpComm::kAllGather ? "allgather" : "alltoall");
    if (a2a) unexpressed->push_back("all-to-all (Ulysses) context parallelism: torchtitan rotates key/value shards");
  }
  if (m.moe.enabled()) {
    *t += fmt::format("expert_parallel_degree = {}\n", c.ep);
    *t += fmt::format("expert_tensor_parallel_degree = {}\n", c.expert_tp());
    *t += fmt::format("expert_parallel_comm_backend = \"{}\"\n", c.moe_dispatcher == MoeDispatcher::kFlex ? "deepep" : "standard");
    if (c.moe_dispatcher == MoeDispatcher::kAllGather) unexpressed->push_back("the all-gather token dispatcher");
    if (c.moe_a2a_overlap) unexpressed->push_back("Megatron-Core's 1F1B all-to-all overlap");
    if (c.moe_capacity_factor > 0) unexpressed->push_back("an expert capacity factor (torchtitan is dropless)");
  }
  if (c.tp_comm_overlap) {
    // torchtitan refuses async TP without a compiled model (tensor_parallel.py,
    // maybe_enable_async_tp: "Async TP requires 'model' in --compile.components").
    *t += "\n[compile]\n# async tensor parallelism is a torch.compile pass: torchtitan refuses it on an eager model\n";
    *t += "enable = true\ncomponents = [\"model\", \"loss\"]\n";
    warnings->push_back("torch.compile, which async tensor parallelism needs, is not modelled: the step was "
                           "simulated with eager PyTorch's kernels and saved tensors (a compiled loss and block keep "
                           "less memory)");
  }
}

/// torchtitan's [parallelism] section for `c` (and [compile] for async tensor parallelism) onto
/// `t`; what it cannot say into `unexpressed`, what torchtitan refuses at start-up or runs beyond
/// the simulation into `warnings`.
void TorchtitanParallelism(const Model& m, const ParallelConfig& c, std::string* t, std::vector<std::string>* unexpressed,
                           std::vector<std::string>* warnings) {
  *t += "\n[parallelism]\n";
  TorchtitanDataParallel(c, t, unexpressed, warnings);
  *t += fmt::format("tensor_parallel_degree = {}\n", c.tp);
  if (c.tp > 1 && !c.sequence_parallel) {
    unexpressed->push_back("tensor parallelism without sequence parallelism (torchtitan's always shards the "
                           "sequence)");
  }
  *t += fmt::format("enable_async_tensor_parallel = {}\n", c.tp_comm_overlap ? "true" : "false");
  if (c.cross_entropy != CrossEntropyImpl::kTorch) {
    unexpressed->push_back(fmt::format("the {} cross-entropy (torchtitan runs PyTorch's F.cross_entropy; the plan "
                                       "simulated the other)", ToString(c.cross_entropy)));
  }
  TorchtitanPipeline(m, c, t, unexpressed);
  TorchtitanContextAndExperts(m, c, t, unexpressed, warnings);
}

void TorchtitanRest(const ParallelConfig& c, std::int64_t seq, std::string* t, std::vector<std::string>* unexpressed) {
  if (!c.flash_attention) {
    unexpressed->push_back("the unfused attention, saving the s x s scores (torchtitan's SDPA picks a fused or "
                           "memory-efficient kernel where one runs)");
  }
  *t += "\n[training]\n";
  // local_batch_size is one data-parallel rank's batch per schedule; the pipeline splits it into
  // micro-batches, and the global batch makes gradient accumulation: without a pipeline one
  // micro-batch a step, with one a pipeline flush (ParallelConfig::pipeline_flushes) each.
  const std::int64_t flushes = std::max<std::int64_t>(1, c.pipeline_flushes);
  *t += fmt::format("local_batch_size = {}\n",
                    c.pp > 1 ? c.global_batch_size / std::max<std::int64_t>(1, c.dp) / flushes : c.micro_batch_size);
  *t += fmt::format("global_batch_size = {}\n", c.global_batch_size);
  *t += fmt::format("seq_len = {}\n", seq);
  const bool fp32 = c.precision == Precision::kFp32 || c.precision == Precision::kTf32;
  *t += fmt::format("mixed_precision_param = \"{}\"\n", fp32 ? "float32" : "bfloat16");
  *t += "mixed_precision_reduce = \"float32\"\n";
  if (c.precision == Precision::kFp16) unexpressed->push_back("fp16 training: written as bf16");
  if (!c.fp32_main_grads) unexpressed->push_back("16-bit gradient reduction (torchtitan reduces in float32)");
  if (c.offload_modules != 0) {
    unexpressed->push_back(fmt::format("activation offloading of {} (Megatron-Core's fine-grained offloading; "
                                       "torchtitan has none): the run holds those tensors on the GPU",
                                       OffloadModulesName(c.offload_modules)));
  }
  *t += "\n[activation_checkpoint]\n";
  switch (c.recompute) {
    case Recompute::kNone: *t += "mode = \"none\"\n"; break;
    case Recompute::kFull:
      if (c.PartialRecompute() && c.recompute_layer_interval > 0) {
        *t += fmt::format("mode = \"selective\"\nselective_ac_option = \"{}\"\n", c.recompute_layer_interval);
        break;
      }
      *t += "mode = \"full\"\n";
      if (!c.PartialRecompute()) break;
      unexpressed->push_back(fmt::format("recompute of the first {} layers of each chunk (Megatron-LM's --recompute-method "
                                         "block; torchtitan checkpoints one layer in N): written as full recompute",
                                         c.recompute_block_layers));
      break;
    case Recompute::kSelective:
      *t += "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      if (c.TorchOpCheckpointing()) break;
      unexpressed->push_back(fmt::format("selective recompute of {}: torchtitan's op-level policy saves matmul outputs "
                                         "and recomputes the rest",
                                         RecomputeModulesName(c.recompute_modules)));
      break;
  }
  if (c.precision == Precision::kFp8) {
    *t += "\n[quantize.linear.float8]\n";
    // torchtitan's float8 converter refuses enable_fsdp_float8_all_gather beside a recipe_name;
    // without one it runs tensorwise scaling, the only recipe with FP8 parameter all-gathers.
    if (c.fp8_recipe == Fp8Recipe::kTensorwise) {
      *t += fmt::format("enable_fsdp_float8_all_gather = {}\n", c.fp8_param_gather ? "true" : "false");
      // Recommended beside it: one all-reduce of every parameter's amax after the optimizer step.
      if (c.fp8_param_gather) *t += "precompute_float8_dynamic_scale_for_fsdp = true\n";
    } else {
      *t += "recipe_name = \"rowwise\"\n";
      if (c.fp8_param_gather) {
        unexpressed->push_back("FP8 parameter all-gathers with rowwise scaling (torchtitan gathers FP8 parameters only "
                               "with tensorwise scaling, without a recipe_name): written without them");
      }
    }
    *t += "filter_fqns = [\"output\"]\n";
    if (c.fp8_recipe != Fp8Recipe::kTensorwise) {
      unexpressed->push_back(fmt::format("FP8 {} scaling: written as torchtitan's rowwise recipe", ToString(c.fp8_recipe)));
    }
  } else if (c.precision == Precision::kMxfp8) {
    *t += "\n[quantize.linear.mx]\nrecipe_name = \"mxfp8_cublas\"\nfilter_fqns = [\"output\"]\n";
    if (c.fp8_param_gather) {
      unexpressed->push_back("MXFP8 parameter all-gathers (torchtitan's MX converter gathers bf16 parameters): "
                             "written without them");
    }
    if (c.fp8_format == Fp8Format::kHybrid) {
      unexpressed->push_back("E5M2 gradients (--fp8-format hybrid): torchao's MXFP8 recipe casts every tensor to E4M3");
    }
  } else if (c.precision == Precision::kNvfp4) {
    unexpressed->push_back("NVFP4 training (not in torchtitan v0.2.2): written as bf16");
  }
  if (c.bf16_layers_start + c.bf16_layers_end > 0) {
    unexpressed->push_back("the first/last layers in bf16: add their modules to filter_fqns");
  }
  if (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kPerLayer) {
    unexpressed->push_back(fmt::format("ZeRO-3 as {} ran it (FSDP2 gathers per layer)", ToString(c.zero3_impl)));
  }
  if (c.zero_stage >= 3 && !c.zero3_limit_all_gathers) {
    unexpressed->push_back("FSDP1's limit_all_gathers=False (FSDP2 prefetches one layer; it has no such switch)");
  }
}

LaunchConfig EmitTorchtitan(const Model& m, const ParallelConfig& c, const Cluster& cl, std::int64_t gpus) {
  LaunchConfig l{LaunchFormat::kTorchtitan, kTorchtitanVersion, "", {}, {}};
  const std::int64_t seq = SeqOf(m, c);
  const Nodes n = NodesOf(cl, gpus);
  std::string t;
  t += fmt::format("\n[job]\ndescription = \"{} {} on {} GPUs\"\n\n", m.name, c.Short(), gpus);
  TorchtitanModel(m, c, &t, &l.unexpressed);
  TorchtitanParallelism(m, c, &t, &l.unexpressed, &l.warnings);
  TorchtitanRest(c, seq, &t, &l.unexpressed);
  std::string head = Header("#", m, c, cl, gpus, kTorchtitanVersion, l.unexpressed);
  head += fmt::format("# Run with: torchrun --nnodes {} --nproc-per-node {} -m torchtitan.train --job.config_file THIS.toml\n",
                      n.nodes, n.per_node);
  std::string warned;
  for (const auto& w : l.warnings) warned += "# WARNING: " + w + "\n";
  l.text = warned + head + t;
  return l;
}

// ---- DeepSpeed ----------------------------------------------------------------------------

/// DeepSpeed's zero_optimization block of `c` (runtime/zero/config.py at v0.16.5: integer sizes;
/// overlap_comm and contiguous_gradients written out from the stage on, as simulated).
Json DeepSpeedZeroJson(const ParallelConfig& c) {
  Json z;
  const bool bf16_optimizer = c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16;
  z["stage"] = bf16_optimizer ? 0 : c.zero_stage;  // the BF16_Optimizer runs with stage 0
  if (bf16_optimizer || c.zero_stage == 0) return z;
  auto elems = [](double v) { return static_cast<std::int64_t>(std::llround(v)); };
  z["reduce_bucket_size"] = elems(c.ds_reduce_bucket_elems);
  // Written out, since DeepSpeed's defaults depend on the stage (overlap_comm on at 3 only).
  z["contiguous_gradients"] = c.zero_stage >= 3 || c.ds_contiguous_gradients;
  if (c.zero_stage <= 2 && c.ds_contiguous_gradients) z["use_multi_rank_bucket_allreduce"] = c.ds_multi_rank_bucket_allreduce;
  z["overlap_comm"] = c.overlap_grad_reduce;
  if (c.zero_stage >= 3) {
    z["stage3_prefetch_bucket_size"] = elems(c.ds_prefetch_bucket_elems);
    z["stage3_max_live_parameters"] = elems(c.ds_max_live_elems);
    z["stage3_max_reuse_distance"] = elems(c.ds_max_reuse_distance_elems);
    z["stage3_param_persistence_threshold"] = elems(c.ds_persistence_threshold_elems);
  }
  return z;
}

/// What a DeepSpeed config cannot say about `c`: the parallelism and recompute the launcher or
/// model code sets, and settings of the simulation DeepSpeed's own ZeRO does not run.
void DeepSpeedUnexpressed(const ParallelConfig& c, std::vector<std::string>* u) {
  u->push_back("the model (DeepSpeed's config has no model shape)");
  if (!c.flash_attention) u->push_back("the unfused attention, saving the s x s scores (the model code's choice)");
  if (c.pp > 1 && c.uneven_pipeline()) {
    u->push_back(fmt::format("the pipeline split ({}: the launcher's{})", PipelineSplitName(c),
                             c.embedding_slots ? ", Megatron-DeepSpeed's --pp-partition-method 'type:transformer|embedding'"
                                               : ""));
  }
  if (c.offload_modules != 0) {
    u->push_back(fmt::format("activation offloading of {} (Megatron-Core's fine-grained offloading; DeepSpeed's "
                             "cpu_checkpointing offloads checkpoints under full recompute instead)",
                             OffloadModulesName(c.offload_modules)));
  }
  if (c.tp > 1 || c.pp > 1 || c.sequence_parallel) {
    u->push_back(fmt::format("tensor-parallel size {} and pipeline-parallel size {}{} (the launcher's: Megatron-DeepSpeed's "
                             "--tensor-model-parallel-size {} --pipeline-model-parallel-size {}{}), which leave DeepSpeed a "
                             "data-parallel size of {}",
                             c.tp, c.pp, c.sequence_parallel ? " with sequence parallelism" : "", c.tp, c.pp,
                             c.sequence_parallel ? " --sequence-parallel" : "", c.dp_cp()));
  }
  if (c.recompute != Recompute::kNone) {
    u->push_back(fmt::format("{} activation recompute (the model code's: Megatron-DeepSpeed's recompute flags, Hugging "
                             "Face's gradient_checkpointing_enable)",
                             c.TorchOpCheckpointing() ? "torchtitan's per-op selective"
                             : c.PartialRecompute()   ? std::string(ToString(c.recompute)) + " " + c.PartialRecomputeName()
                                                      : std::string(ToString(c.recompute))));
  }
  if (c.pp > 1 && (c.schedule != Schedule::k1F1B || c.vp > 1)) {
    u->push_back(fmt::format("the {} schedule (DeepSpeed's pipeline engine runs 1F1B)", ToString(c.schedule)));
  }
  if (c.cp > 1) u->push_back(fmt::format("context parallelism {} (Megatron-Core's; DeepSpeed-Ulysses was not simulated)", c.cp));
  if (c.ep > 1) u->push_back(fmt::format("expert parallelism {} (the MoE layer's ep_size in DeepSpeed-MoE)", c.ep));
  if (c.tp_comm_overlap) u->push_back("Transformer Engine's TP communication overlap");
  if (IsLowPrecision(c.precision)) {
    u->push_back(fmt::format("{} GEMMs (Transformer Engine's; DeepSpeed's config enables only the 16-bit dtype)",
                             ToString(c.precision)));
  }
  if (c.optimizer_impl == OptimizerImpl::kMegatron && c.zero_stage == 0 && c.precision != Precision::kFp16 &&
      c.precision != Precision::kFp32 && c.precision != Precision::kTf32) {
    u->push_back("the plan's unsharded optimizer: with bf16 at stage 0 DeepSpeed runs its BF16_Optimizer, which shards "
                 "the fp32 state over the data-parallel ranks (simulate it with --zero 1 --optimizer deepspeed-bf16)");
  }
  if (c.optimizer_impl == OptimizerImpl::kMegatron && c.zero_stage >= 1) {
    u->push_back(fmt::format("the plan's optimizer, Megatron-LM's ({}): this config runs DeepSpeed's ZeRO-{} instead, "
                             "with 16-bit gradients (simulate it with --optimizer deepspeed-zero)",
                             c.zero_stage == 1 ? "distributed optimizer" : "FSDP", c.zero_stage));
  }
  if (c.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    u->push_back("PyTorch FSDP's training state (the fp32 shard as the optimizer's master): this config runs DeepSpeed's "
                 "optimizer instead (simulate it with --optimizer deepspeed-zero)");
  }
  if (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kDeepSpeed && c.optimizer_impl != OptimizerImpl::kDeepSpeedBf16) {
    u->push_back(fmt::format("ZeRO-3 as {} ran it (DeepSpeed's stage 3 today: --zero3-impl deepspeed)", ToString(c.zero3_impl)));
  }
  if (c.hybrid_shard()) {
    u->push_back(fmt::format("hybrid sharding over groups of {} ranks (not ZeRO++'s hpZ, which shards only the "
                             "secondary weight copy)", c.dp_shard));
  }
}

LaunchConfig EmitDeepSpeed(const Model& m, const ParallelConfig& c, const Cluster& cl, std::int64_t gpus) {
  LaunchConfig l{LaunchFormat::kDeepSpeed, kDeepSpeedVersion, "", {}, {}};
  Json j;
  // DeepSpeed's data-parallel size is GPUs / (tp x pp): the cp ranks count in it.
  const std::int64_t per_step = c.micro_batch_size * std::max<std::int64_t>(1, c.dp_cp());
  j["train_batch_size"] = c.global_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.micro_batch_size;
  j["gradient_accumulation_steps"] = per_step > 0 ? c.global_batch_size / per_step : 1;
  if (c.precision == Precision::kFp16) {
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};  // 0: dynamic loss scaling
  } else if (c.precision != Precision::kFp32 && c.precision != Precision::kTf32) {
    j["bf16"] = {{"enabled", true}};
  }
  j["zero_optimization"] = DeepSpeedZeroJson(c);
  DeepSpeedUnexpressed(c, &l.unexpressed);
  const Nodes n = NodesOf(cl, gpus);
  OneScheduleUnexpressed(c, "DeepSpeed's pipeline engine", &l.unexpressed);
  std::string head = Header("#", m, c, cl, gpus, kDeepSpeedVersion, l.unexpressed);
  head += fmt::format("# Run with: deepspeed --num_nodes {} --num_gpus {} TRAINING_SCRIPT ... --deepspeed_config "
                      "ds_config.json (Megatron-DeepSpeed: add --deepspeed)\n",
                      n.nodes, n.per_node);
  l.text = head + "cat > ds_config.json <<'EOF'\n" + j.dump(2) + "\nEOF\n";
  return l;
}

}  // namespace

Json LaunchJson(const LaunchConfig& l, const std::string& file) {
  Json j;
  j["format"] = ToString(l.format);
  j["framework"] = l.framework;
  j["text"] = l.text;
  j["unexpressed"] = l.unexpressed;
  j["warnings"] = l.warnings;
  j["file"] = file.empty() ? Json(nullptr) : Json(file);
  return j;
}

void WriteLaunch(std::ostream& out, const LaunchConfig& l, const std::string& file, const std::string& label) {
  if (!file.empty()) {
    out << fmt::format("\n{}, launched with {}: written to {}\n", label, l.framework, file);
    for (const auto& u : l.unexpressed) out << "  not expressed: " << u << "\n";
    return;
  }
  out << fmt::format("\n{}, launched with {}:\n\n{}", label, l.framework, l.text);
}

LaunchConfig EmitLaunch(LaunchFormat f, const Model& m, const ParallelConfig& given, const Cluster& cl, std::int64_t gpus) {
  // A partial recompute that reruns no layer (or all) is written as none (or full).
  const ParallelConfig c = WithEffectiveRecompute(m, given);
  LaunchConfig l;
  switch (f) {
    case LaunchFormat::kNemo: l = EmitNemo(m, c, cl, gpus); break;
    case LaunchFormat::kTorchtitan: l = EmitTorchtitan(m, c, cl, gpus); break;
    case LaunchFormat::kDeepSpeed: l = EmitDeepSpeed(m, c, cl, gpus); break;
    case LaunchFormat::kMegatron: l = EmitMegatron(m, c, cl, gpus); break;
  }
  // GPUs that are not whole hosts: the launcher starts the same count on every host.
  if (const Nodes n = NodesOf(cl, gpus); n.nodes * n.per_node != gpus) {
    const std::string why = fmt::format(
        "{} GPUs are not whole hosts of {}: as written, the launch starts {} x {} = {} processes, and the framework "
        "takes its data-parallel size from that count; run {} GPUs as hosts of equal counts yourself",
        gpus, n.per_node, n.nodes, n.per_node, n.nodes * n.per_node, gpus);
    l.text = "# WARNING: " + why + "\n" + l.text;
    l.warnings.push_back(why);
  }
  return l;
}

}  // namespace shardcast
