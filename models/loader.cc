#include "models/loader.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"
#include "models/presets_embedded.h"

namespace shardcast {
namespace {


const char* KindDir(PresetKind k) {
  switch (k) {
    case PresetKind::kModel: return "llm";
    case PresetKind::kGpu: return "gpu";
    case PresetKind::kCluster: return "cluster";
  }
  return "";
}

const char* KindNoun(PresetKind k) {
  switch (k) {
    case PresetKind::kModel: return "model";
    case PresetKind::kGpu: return "GPU";
    case PresetKind::kCluster: return "cluster";
  }
  return "";
}

const detail::EmbeddedPreset* FindPreset(PresetKind kind, const std::string& name) {
  const std::string want = ToLower(name);
  for (std::size_t i = 0; i < detail::kNumEmbeddedPresets; ++i) {
    const auto& p = detail::kEmbeddedPresets[i];
    if (KindDir(kind) == std::string(p.kind) && ToLower(p.name) == want) return &p;
  }
  return nullptr;
}

bool LooksLikePath(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.substr(s.size() - 5) == ".json");
}

/// Reads the JSON of a preset or a file; `file_label` receives the name used in messages.
Json ReadSpec(PresetKind kind, const std::string& spec, const std::string& flag, std::string* file_label) {
  std::error_code ec;
  if (kind == PresetKind::kModel && std::filesystem::is_directory(spec, ec) &&
      std::filesystem::is_regular_file(std::filesystem::path(spec) / "config.json", ec)) {
    // A Hugging Face model folder.
    *file_label = (std::filesystem::path(spec) / "config.json").string();
    return ReadJsonFile(*file_label);
  }
  if (std::filesystem::is_regular_file(spec, ec)) {
    *file_label = spec;
    return ReadJsonFile(spec);
  }
  if (!LooksLikePath(spec)) {
    if (const auto* p = FindPreset(kind, spec)) {
      *file_label = std::string("models/") + p->kind + "/" + p->name + ".json";
      return ParseJsonText(p->json, *file_label);
    }
  }
  // A folder that is not a preset's name (a preset wins over a folder of the same name).
  if (std::filesystem::is_directory(spec, ec)) {
    throw InputError(spec + ": is a folder" +
                     (kind == PresetKind::kModel ? std::string(" without a config.json") : std::string()) +
                     ", expected a JSON file" +
                     (kind == PresetKind::kModel ? std::string(" or a Hugging Face model folder") : std::string()));
  }
  if (!LooksLikePath(spec)) {
    auto close = ClosestMatches(spec, PresetNames(kind), 5);
    std::string msg = (flag.empty() ? std::string() : "command line: " + flag + ": ") + "unknown " + KindNoun(kind) +
                      " preset '" + spec + "'";
    if (!close.empty()) msg += "; close matches: " + Join(close, ", ");
    msg += std::string("; `shardcast models` lists all presets, or give a path to a JSON file");
    throw InputError(msg);
  }
  // Not a file, a folder or a preset: opening it says why (no such file, permission denied).
  *file_label = spec;
  return ReadJsonFile(spec);
}

}  // namespace

std::vector<std::string> PresetNames(PresetKind kind) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < detail::kNumEmbeddedPresets; ++i) {
    if (KindDir(kind) == std::string(detail::kEmbeddedPresets[i].kind)) {
      names.emplace_back(detail::kEmbeddedPresets[i].name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

void ValidateModel(const Model& m, const std::string& file, const ModelFieldNames& n) {
  // Field-range checks happen while reading; these are the cross-field rules.
  const auto ptr = [](const std::string& key) { return "/" + key; };
  if (m.kv_channels < 1) {
    throw InputError::Field(file, ptr(n.kv_channels), std::to_string(m.kv_channels), "a head dimension of 1 or more");
  }
  if (m.kv_channels * m.num_attention_heads > kMaxFfn) {
    throw InputError::Field(file, ptr(n.kv_channels), std::to_string(m.kv_channels),
                            n.kv_channels + " * num_attention_heads <= " + std::to_string(kMaxFfn));
  }
  if (m.num_attention_heads % m.num_query_groups != 0) {
    throw InputError::Field(file, ptr(n.num_query_groups), std::to_string(m.num_query_groups),
                            "a divisor of num_attention_heads = " + std::to_string(m.num_attention_heads));
  }
  if (m.mla.enabled() && m.num_query_groups != m.num_attention_heads) {
    throw InputError::Field(file, ptr(n.num_query_groups), std::to_string(m.num_query_groups),
                            "num_attention_heads = " + std::to_string(m.num_attention_heads) +
                                " with multi-latent attention (kv_lora_rank > 0), where every head has its own K and V");
  }
  if (m.moe.enabled()) {
    // Bounds that keep every parameter count inside int64 (docs/inputs.md): all experts together
    // no wider than one FFN may be.
    if (m.moe.num_experts * m.moe.ffn_hidden_size > kMaxFfn) {
      throw InputError::Field(file, ptr(n.moe_ffn_hidden_size), std::to_string(m.moe.ffn_hidden_size),
                              n.num_experts + " * " + n.moe_ffn_hidden_size + " <= " + std::to_string(kMaxFfn) +
                                  " (got " + std::to_string(m.moe.num_experts) + " experts)");
    }
    if (m.moe.shared_ffn_hidden_size > kMaxFfn) {
      throw InputError::Field(file, ptr(n.moe_shared_ffn_hidden_size), std::to_string(m.moe.shared_ffn_hidden_size),
                              "a shared-expert FFN width of at most " + std::to_string(kMaxFfn));
    }
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.num_experts) {
      throw InputError::Field(file, ptr(n.moe_top_k), std::to_string(m.moe.top_k),
                              "1 to " + n.num_experts + " = " + std::to_string(m.moe.num_experts) +
                                  " experts per token");
    }
    if (m.moe.ffn_hidden_size < 1) {
      throw InputError::Field(file, ptr(n.moe_ffn_hidden_size), std::to_string(m.moe.ffn_hidden_size),
                              "each routed expert's FFN size, a positive integer");
    }
    if (m.moe.first_k_dense >= m.num_layers) {
      throw InputError::Field(file, ptr(n.moe_first_k_dense), std::to_string(m.moe.first_k_dense),
                              "fewer than " + n.num_layers + " = " + std::to_string(m.num_layers) +
                                  " (some layer must be MoE)");
    }
    if (m.MoeLayersIn(0, m.num_layers) == 0) {
      throw InputError::Field(file, ptr(n.moe_layer_step), std::to_string(m.moe.layer_step),
                              "a step that makes some of the " + std::to_string(m.num_layers) + " layers MoE layers");
    }
  }
  if (m.mla.enabled()) {
    const std::int64_t dims = m.mla.qk_head_dim + m.mla.qk_pos_emb_head_dim + m.mla.v_head_dim;
    if (m.num_attention_heads * dims > kMaxFfn) {
      throw InputError::Field(file, ptr(n.qk_head_dim), std::to_string(m.mla.qk_head_dim),
                              "num_attention_heads * (" + n.qk_head_dim + " + " + n.qk_pos_emb_head_dim + " + " +
                                  n.v_head_dim + ") <= " + std::to_string(kMaxFfn));
    }
    if (m.mla.q_lora_rank + m.mla.kv_lora_rank > kMaxHidden) {
      throw InputError::Field(file, ptr(n.kv_lora_rank), std::to_string(m.mla.kv_lora_rank),
                              n.q_lora_rank + " + " + n.kv_lora_rank + " <= " + std::to_string(kMaxHidden));
    }
  }
  if (m.mla.enabled() && (m.mla.qk_head_dim < 1 || m.mla.v_head_dim < 1)) {
    throw InputError::Field(file, ptr(m.mla.qk_head_dim < 1 ? n.qk_head_dim : n.v_head_dim),
                            std::to_string(m.mla.qk_head_dim < 1 ? m.mla.qk_head_dim : m.mla.v_head_dim),
                            "a positive head dimension with multi-latent attention (" + n.kv_lora_rank + " > 0)");
  }
}

namespace {

/// Group-limited routing (`groups_key`, `topk_key` name its two sizes in `file`): both or
/// neither, the groups dividing the experts, the groups a token may reach among them and holding
/// its top-k experts.
void CheckRouterGroups(const MoeSpec& e, const std::string& file, const std::string& groups_key,
                       const std::string& topk_key) {
  if ((e.router_num_groups > 0) != (e.router_group_topk > 0)) {
    const bool groups = e.router_num_groups > 0;
    throw InputError::Field(file, groups ? topk_key : groups_key, "absent or null",
                            "a value beside " + (groups ? groups_key : topk_key).substr(1) +
                                " (group-limited routing needs both)");
  }
  if (e.router_num_groups == 0) return;
  if (e.num_experts % e.router_num_groups != 0) {
    throw InputError::Field(file, groups_key, std::to_string(e.router_num_groups),
                            "a divisor of the " + std::to_string(e.num_experts) + " routed experts");
  }
  if (e.router_group_topk > e.router_num_groups) {
    throw InputError::Field(file, topk_key, std::to_string(e.router_group_topk),
                            "1 to " + groups_key.substr(1) + " = " + std::to_string(e.router_num_groups));
  }
  if (e.router_group_topk * (e.num_experts / e.router_num_groups) < e.top_k) {
    throw InputError::Field(file, topk_key, std::to_string(e.router_group_topk),
                            fmt::format("groups holding the {} experts a token is routed to ({} experts a group)",
                                        e.top_k, e.num_experts / e.router_num_groups));
  }
}

/// The router's fields of our JSON format (Megatron-Core's --moe-router-* flags, MoeSpec).
void ReadMoeRouter(const JsonReader& r, Model* m) {
  MoeSpec& e = m->moe;
  e.router_score = r.OptString("moe_router_score_function").value_or("softmax");
  if (e.router_score != "softmax" && e.router_score != "sigmoid") {
    throw InputError::Field(r.file(), "/moe_router_score_function", JsonForMessage(r.json()["moe_router_score_function"]),
                            "\"softmax\" or \"sigmoid\"");
  }
  // Top-1 softmax routing after the top-k would weight every token's expert 1, which Megatron-Core
  // refuses: there the softmax comes first.
  const bool top1_softmax = e.router_score == "softmax" && e.top_k == 1;
  e.router_pre_softmax = r.OptBool("moe_router_pre_softmax").value_or(top1_softmax);
  if (e.router_pre_softmax && e.router_score != "softmax") {
    throw InputError::Field(r.file(), "/moe_router_pre_softmax", "true",
                            "false with moe_router_score_function \"sigmoid\" (it orders the softmax)");
  }
  if (top1_softmax && !e.router_pre_softmax) {
    throw InputError::Field(r.file(), "/moe_router_pre_softmax", "false",
                            "true with one expert a token and softmax scores (after the top-1 the weight is always "
                            "1; Megatron-Core refuses it)");
  }
  e.router_topk_scaling = r.OptNumber("moe_router_topk_scaling_factor", 1e-6, 1e6).value_or(0);
  e.router_num_groups = r.OptInt("moe_router_num_groups", 1, kMaxHeads).value_or(0);
  e.router_group_topk = r.OptInt("moe_router_group_topk", 1, kMaxHeads).value_or(0);
  CheckRouterGroups(e, r.file(), "/moe_router_num_groups", "/moe_router_group_topk");
  e.router_expert_bias = r.OptBool("moe_router_enable_expert_bias").value_or(false);
  e.probs_on_input = r.OptBool("moe_apply_probs_on_input").value_or(false);
  if (e.router_expert_bias && e.router_score != "sigmoid") {
    // Megatron-Core's TransformerConfig refuses it: the bias is for sigmoid scores.
    throw InputError::Field(r.file(), "/moe_router_enable_expert_bias", "true",
                            "false with moe_router_score_function \"" + e.router_score +
                                "\" (the expert bias goes with \"sigmoid\" scores)");
  }
}

/// The MoE and MLA fields of our JSON format (Megatron-Core's argument names).
void ReadMoeAndMla(const JsonReader& r, Model* m, ModelFieldNames* n) {
  m->moe.num_experts = r.OptInt("num_experts", 0, kMaxHeads).value_or(0);
  if (m->moe.num_experts > 1) {
    m->moe.top_k = r.Int("moe_router_topk", 1, kMaxHeads);
    m->moe.ffn_hidden_size = r.Int("moe_ffn_hidden_size", 1, kMaxFfn);
  } else {
    // Without experts the MoE keys would be dropped: refuse them rather than read a dense model.
    for (const char* key : {"moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                            "moe_first_k_dense_layers", "moe_layer_step", "moe_layer_freq", "moe_expert_bias",
                            "moe_router_bias", "moe_router_global_batch_balance", "moe_router_score_function",
                            "moe_router_pre_softmax", "moe_router_topk_scaling_factor", "moe_router_num_groups",
                            "moe_router_group_topk", "moe_router_enable_expert_bias", "moe_apply_probs_on_input"}) {
      if (r.Has(key)) {
        throw InputError::Field(r.file(), std::string("/") + key, JsonForMessage(r.json()[key]),
                                "no such key without experts: num_experts is " +
                                    std::to_string(m->moe.num_experts) + ", and a mixture-of-experts model needs 2 "
                                    "or more");
      }
    }
  }
  m->moe.shared_ffn_hidden_size = r.OptInt("moe_shared_expert_intermediate_size", 0, kMaxFfn).value_or(0);
  m->moe.first_k_dense = r.OptInt("moe_first_k_dense_layers", 0, kMaxLayers).value_or(0);
  if (r.Has("moe_layer_step") && r.Has("moe_layer_freq")) {
    throw InputError::Field(r.file(), "/moe_layer_freq", JsonForMessage(r.json()["moe_layer_freq"]),
                            "one of moe_layer_step (layer i MoE when (i + 1) % step == 0) and moe_layer_freq "
                            "(Megatron-LM's: i % freq == 0), not both");
  }
  m->moe.step_from_layer0 = r.Has("moe_layer_freq");
  if (m->moe.step_from_layer0) n->moe_layer_step = "moe_layer_freq";
  m->moe.layer_step = r.OptInt(m->moe.step_from_layer0 ? "moe_layer_freq" : "moe_layer_step", 1, kMaxLayers).value_or(1);
  m->moe.expert_bias = r.OptBool("moe_expert_bias").value_or(false);
  m->moe.router_bias = r.OptBool("moe_router_bias").value_or(false);
  m->moe.router_global_batch_balance = r.OptBool("moe_router_global_batch_balance").value_or(false);
  ReadMoeRouter(r, m);
  m->mla.kv_lora_rank = r.OptInt("kv_lora_rank", 0, kMaxHidden).value_or(0);
  m->mla.q_lora_rank = r.OptInt("q_lora_rank", 0, kMaxHidden).value_or(0);
  m->mla.qk_head_dim = r.OptInt("qk_head_dim", 0, kMaxHeadDim).value_or(0);
  m->mla.qk_pos_emb_head_dim = r.OptInt("qk_pos_emb_head_dim", 0, kMaxHeadDim).value_or(0);
  m->mla.v_head_dim = r.OptInt("v_head_dim", 0, kMaxHeadDim).value_or(0);
  m->mtp_num_layers = r.OptInt("mtp_num_layers", 0, 64).value_or(0);
  if (m->mla.kv_lora_rank == 0) {
    for (const char* key : {"q_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}) {
      if (r.Has(key)) {
        throw InputError::Field(r.file(), std::string("/") + key, JsonForMessage(r.json()[key]),
                                "no such key without multi-latent attention: kv_lora_rank is absent or 0, and MLA "
                                "needs kv_lora_rank of 1 or more");
      }
    }
  } else {
    for (const char* key : {"qk_head_dim", "v_head_dim"}) {
      if (!r.Has(key) || r.json()[key].is_null()) {
        throw InputError::Field(r.file(), std::string("/") + key, r.Has(key) ? "null" : "absent",
                                "a positive head dimension with multi-latent attention (kv_lora_rank > 0)");
      }
    }
  }
}

}  // namespace

namespace {

/// A model, GPU or cluster file's "name" (the file's name without it); an empty one exits 2.
std::string NameOf(const JsonReader& r, const std::string& file) {
  std::string name = r.OptString("name").value_or(std::filesystem::path(file).stem().string());
  if (name.empty()) throw InputError::Field(file, "/name", "\"\"", "a name, or no name key (the file's name is used)");
  return name;
}

}  // namespace

namespace {
/// Our format's RoPE keys (rotary_base, rotary_percent, the Llama 3 scaling and its bands), each
/// refused without rotary positions or, for a band, without the scaling.
void ReadRope(const JsonReader& r, const std::string& file, Model* m) {
  m->rotary_base = r.OptNumber("rotary_base", 1, 1e12).value_or(10000.0);
  m->rotary_percent = r.OptNumber("rotary_percent", 1e-6, 1).value_or(1.0);
  m->rope_scaling_factor = r.OptNumber("rope_scaling_factor", 1, 1e6).value_or(0.0);
  m->rope_low_freq_factor = r.OptNumber("rope_scaling_low_freq_factor", 1e-6, 1e6).value_or(1);
  m->rope_high_freq_factor = r.OptNumber("rope_scaling_high_freq_factor", 1e-6, 1e6).value_or(4);
  m->rope_original_max_positions = r.OptInt("rope_scaling_original_max_position_embeddings", 1, kMaxSeq).value_or(8192);
  for (const char* key : {"rope_scaling_low_freq_factor", "rope_scaling_high_freq_factor",
                          "rope_scaling_original_max_position_embeddings"}) {
    if (r.Has(key) && !r.Has("rope_scaling_factor")) {
      throw InputError::Field(file, std::string("/") + key, JsonForMessage(r.json()[key]),
                              "no such key without rope_scaling_factor (the Llama 3 scaling whose band it sets)");
    }
  }
  // Rotary keys without rotary positions would be dropped (ModelToJson writes them only with rope).
  for (const char* key : {"rotary_base", "rotary_percent", "rope_scaling_factor", "no_rope_freq"}) {
    if (r.Has(key) && m->position_embedding != PositionEmbedding::kRope) {
      throw InputError::Field(file, std::string("/") + key, JsonForMessage(r.json()[key]),
                              "no such key without rotary positions (position_embedding \"rope\")");
    }
  }
}

/// Our format's NoPE layers, Megatron-LM's --no-rope-freq: an integer N >= 1 (every N-th layer,
/// 1-based, skips RoPE; 1: all) or a list of num_layers 0/1 (1: the layer skips RoPE). A pattern
/// without a NoPE layer (N above num_layers) is none.
void ReadNoRope(const JsonReader& r, const std::string& file, Model* m) {
  if (!r.Has("no_rope_freq")) return;
  const Json& v = r.json().at("no_rope_freq");
  if (!v.is_array()) {
    const std::int64_t n = r.Int("no_rope_freq", 1, kMaxLayers);
    for (std::int64_t i = 0; i < m->num_layers; ++i) m->no_rope_layers.push_back((i + 1) % n == 0);
  }
  if (v.is_array() && static_cast<std::int64_t>(v.size()) != m->num_layers) {
    throw InputError::Field(file, "/no_rope_freq", "a list of " + std::to_string(v.size()) + " entries",
                            "an integer N >= 1 or a list of num_layers = " + std::to_string(m->num_layers) + " entries");
  }
  for (std::size_t i = 0; v.is_array() && i < v.size(); ++i) {
    if (!v[i].is_number_integer() || (v[i] != 0 && v[i] != 1)) {
      throw InputError::Field(file, "/no_rope_freq/" + std::to_string(i), v[i].dump(),
                              "0 (the layer rotates) or 1 (it skips RoPE)");
    }
    m->no_rope_layers.push_back(v[i] == 1);
  }
  if (std::none_of(m->no_rope_layers.begin(), m->no_rope_layers.end(), [](bool b) { return b; })) m->no_rope_layers.clear();
}

/// Our format's window: window_size (tokens, Megatron-LM's --window-size W,0) and
/// window_attn_skip_freq (--window-attn-skip-freq), which needs it; not with multi-latent
/// attention, whose cost has no window.
void ReadWindow(const JsonReader& r, const std::string& file, Model* m) {
  m->attention_window = r.OptInt("window_size", 1, kMaxSeq).value_or(0);
  const bool list = r.Has("window_attn_skip_freq") && r.json().at("window_attn_skip_freq").is_array();
  if (r.Has("window_attn_skip_freq") && m->attention_window == 0) {
    throw InputError::Field(file, "/window_attn_skip_freq", r.json().at("window_attn_skip_freq").dump().substr(0, 40),
                            "no such key without window_size (the window the other layers attend within)");
  }
  if (list) {
    // Megatron-LM's list form: one 0 or 1 a layer, 1 where the layer attends within the window.
    const Json& l = r.json().at("window_attn_skip_freq");
    std::vector<bool> windowed;
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_number_integer() || (l[i] != 0 && l[i] != 1)) {
        throw InputError::Field(file, "/window_attn_skip_freq/" + std::to_string(i), l[i].dump(),
                                "0 (the layer attends to the whole sequence) or 1 (within the window)");
      }
      windowed.push_back(l[i] == 1);
    }
    if (static_cast<std::int64_t>(windowed.size()) != m->num_layers) {
      throw InputError::Field(file, "/window_attn_skip_freq", "a list of " + std::to_string(windowed.size()) + " entries",
                              "an integer N or a list of num_layers = " + std::to_string(m->num_layers) + " entries");
    }
    SetWindowLayers(windowed, m);
  } else {
    m->window_attn_skip_freq = r.OptInt("window_attn_skip_freq", 1, kMaxLayers).value_or(0);
  }
  if (m->attention_window > 0 && m->mla.enabled()) {
    throw InputError::Field(file, "/window_size", std::to_string(m->attention_window),
                            "no window with multi-latent attention (kv_lora_rank > 0): not modelled");
  }
  if (m->attention_window > 0) {
    m->attention_window_modelled = true;
    m->attention_window_key = "window_size";
  }
}

}  // namespace

Model ModelFromJson(const Json& j, const std::string& file) {
  // Our format has neither key, so a file with one is a Hugging Face config even where it has a
  // num_layers key of its own (ChatGLM's).
  if (j.is_object() && (j.contains("model_type") || j.contains("architectures"))) {
    return ModelFromHuggingFace(j, file);
  }
  JsonReader r(j, file);
  r.RejectUnknownKeys({"name", "num_layers", "hidden_size", "ffn_hidden_size",
                       "num_attention_heads", "num_query_groups", "kv_channels", "vocab_size",
                       "seq_length", "max_position_embeddings", "normalization", "activation",
                       "position_embedding", "rotary_base", "rotary_percent", "rope_scaling_factor", "rope_scaling_low_freq_factor",
                       "rope_scaling_high_freq_factor", "rope_scaling_original_max_position_embeddings", "no_rope_freq",
                       "tie_embeddings",
                       "add_bias_linear", "add_qkv_bias", "qk_layernorm", "qk_l2_norm", "attention_sinks", "swiglu_limit", "dropout", "source", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
                       "moe_shared_expert_intermediate_size", "moe_first_k_dense_layers", "moe_layer_step", "moe_layer_freq",
                       "moe_expert_bias", "moe_router_bias", "moe_router_global_batch_balance",
                       "moe_router_score_function", "moe_router_pre_softmax", "moe_router_topk_scaling_factor",
                       "moe_router_num_groups", "moe_router_group_topk", "moe_router_enable_expert_bias",
                       "moe_apply_probs_on_input", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                       "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers", "window_size", "window_attn_skip_freq"});
  Model m;
  m.name = NameOf(r, file);
  m.num_layers = r.Int("num_layers", 1, kMaxLayers);
  m.hidden_size = r.Int("hidden_size", 1, kMaxHidden);
  m.ffn_hidden_size = r.Int("ffn_hidden_size", 1, kMaxFfn);
  m.num_attention_heads = r.Int("num_attention_heads", 1, kMaxHeads);
  m.num_query_groups = r.OptInt("num_query_groups", 1, kMaxHeads).value_or(m.num_attention_heads);
  const std::optional<std::int64_t> kv_channels = r.OptInt("kv_channels", 1, kMaxHeadDim);  // null: absent
  m.kv_channels = kv_channels.value_or(0);  // default below
  m.vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m.seq_length = r.Int("seq_length", 1, kMaxSeq);
  m.max_position_embeddings = r.OptInt("max_position_embeddings", 1, kMaxSeq).value_or(m.seq_length);
  m.normalization = r.Enum("normalization", {"layernorm", "rmsnorm"}) == "layernorm"
                        ? Normalization::kLayerNorm
                        : Normalization::kRMSNorm;
  m.activation = r.Enum("activation", {"gelu", "swiglu"}) == "gelu" ? Activation::kGelu
                                                                     : Activation::kSwiglu;
  std::string pe = r.Enum("position_embedding", {"learned", "rope", "alibi"});
  m.position_embedding = pe == "learned" ? PositionEmbedding::kLearned
                         : pe == "rope"  ? PositionEmbedding::kRope
                                         : PositionEmbedding::kAlibi;
  ReadRope(r, file, &m);
  m.tie_embeddings = r.Bool("tie_embeddings");
  m.add_bias_linear = r.OptBool("add_bias_linear").value_or(true);
  m.add_qkv_bias = r.OptBool("add_qkv_bias").value_or(m.add_bias_linear);
  m.qk_layernorm = r.OptBool("qk_layernorm").value_or(false);
  m.qk_l2_norm = r.OptBool("qk_l2_norm").value_or(false);
  if (m.qk_l2_norm && m.qk_layernorm) {
    throw InputError::Field(file, "/qk_l2_norm", "true", "false beside qk_layernorm true (one norm of the queries and keys)");
  }
  m.attention_sinks = r.OptBool("attention_sinks").value_or(false);
  m.swiglu_limit = r.OptNumber("swiglu_limit", 1e-6, 1e6).value_or(0);
  if (m.swiglu_limit > 0 && m.activation != Activation::kSwiglu) {
    throw InputError::Field(file, "/swiglu_limit", JsonForMessage(r.json()["swiglu_limit"]),
                            "no such key without activation \"swiglu\"");
  }
  m.dropout = r.OptBool("dropout").value_or(true);
  ModelFieldNames names;
  ReadMoeAndMla(r, &m, &names);
  // kv_channels by default: MLA's value head dim (its head dims set the attention; kv_channels
  // is not read there), else hidden_size / num_attention_heads.
  if (m.mla.enabled() && !kv_channels) {
    m.kv_channels = m.mla.v_head_dim;
    names.kv_channels = "v_head_dim";
  } else if (!kv_channels) {
    if (m.hidden_size % m.num_attention_heads != 0) {
      throw InputError::Field(file, "/num_attention_heads", std::to_string(m.num_attention_heads),
                              "a divisor of hidden_size = " + std::to_string(m.hidden_size) +
                                  " (or give kv_channels explicitly)");
    }
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  ReadWindow(r, file, &m);
  ReadNoRope(r, file, &m);
  if (m.qk_l2_norm && m.mla.enabled()) {
    throw InputError::Field(file, "/qk_l2_norm", "true",
                            "false with multi-latent attention (kv_lora_rank > 0; Megatron-Core refuses the pair)");
  }
  m.source = r.OptString("source").value_or("user file " + file);
  m.origin = file;
  ValidateModel(m, file, names);
  return m;
}

Json ModelToJson(const Model& m) {
  Json j;
  j["name"] = m.name;
  j["num_layers"] = m.num_layers;
  j["hidden_size"] = m.hidden_size;
  j["ffn_hidden_size"] = m.ffn_hidden_size;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_query_groups"] = m.num_query_groups;
  j["kv_channels"] = m.kv_channels;
  j["vocab_size"] = m.vocab_size;
  j["seq_length"] = m.seq_length;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["normalization"] = ToString(m.normalization);
  j["activation"] = ToString(m.activation);
  j["position_embedding"] = ToString(m.position_embedding);
  if (m.position_embedding == PositionEmbedding::kRope) j["rotary_base"] = m.rotary_base;
  if (m.position_embedding == PositionEmbedding::kRope && m.rotary_percent != 1) j["rotary_percent"] = m.rotary_percent;
  if (m.rope_scaling_factor > 0) j["rope_scaling_factor"] = m.rope_scaling_factor;
  if (m.rope_scaling_factor > 0 && !m.RopeBandsAreLlama31()) {
    j["rope_scaling_low_freq_factor"] = m.rope_low_freq_factor;
    j["rope_scaling_high_freq_factor"] = m.rope_high_freq_factor;
    j["rope_scaling_original_max_position_embeddings"] = m.rope_original_max_positions;
  }
  j["tie_embeddings"] = m.tie_embeddings;
  j["add_bias_linear"] = m.add_bias_linear;
  j["add_qkv_bias"] = m.add_qkv_bias;
  if (m.qk_layernorm && !m.mla.enabled()) j["qk_layernorm"] = true;  // MLA's own norms are always counted
  if (m.qk_l2_norm) j["qk_l2_norm"] = true;
  if (m.attention_sinks) j["attention_sinks"] = true;
  if (m.swiglu_limit > 0) j["swiglu_limit"] = m.swiglu_limit;
  if (const std::int64_t n = m.NoRopeFreq(); n > 0) {
    j["no_rope_freq"] = n;
  } else if (!m.no_rope_layers.empty()) {
    Json l = Json::array();
    for (bool nope : m.no_rope_layers) l.push_back(nope ? 1 : 0);
    j["no_rope_freq"] = l;
  }
  if (m.attention_window > 0 && m.attention_window_modelled) {
    j["window_size"] = m.attention_window;
    if (!m.window_layer_pattern.empty()) {
      Json l = Json::array();
      for (bool w : m.window_layer_pattern) l.push_back(w ? 1 : 0);
      j["window_attn_skip_freq"] = l;
    } else if (m.window_attn_skip_freq > 0) {
      j["window_attn_skip_freq"] = m.window_attn_skip_freq;
    }
  }
  j["dropout"] = m.dropout;
  if (m.moe.enabled()) {
    j["num_experts"] = m.moe.num_experts;
    j["moe_router_topk"] = m.moe.top_k;
    j["moe_ffn_hidden_size"] = m.moe.ffn_hidden_size;
    j["moe_shared_expert_intermediate_size"] = m.moe.shared_ffn_hidden_size;
    j["moe_first_k_dense_layers"] = m.moe.first_k_dense;
    j[m.moe.step_from_layer0 ? "moe_layer_freq" : "moe_layer_step"] = m.moe.layer_step;
    j["moe_expert_bias"] = m.moe.expert_bias;
    j["moe_router_bias"] = m.moe.router_bias;
    j["moe_router_global_batch_balance"] = m.moe.router_global_batch_balance;
    j["moe_router_score_function"] = m.moe.router_score;
    j["moe_router_pre_softmax"] = m.moe.router_pre_softmax;
    if (m.moe.router_topk_scaling > 0) j["moe_router_topk_scaling_factor"] = m.moe.router_topk_scaling;
    if (m.moe.router_num_groups > 0) {
      j["moe_router_num_groups"] = m.moe.router_num_groups;
      j["moe_router_group_topk"] = m.moe.router_group_topk;
    }
    j["moe_router_enable_expert_bias"] = m.moe.router_expert_bias;
    j["moe_apply_probs_on_input"] = m.moe.probs_on_input;
  }
  if (m.mla.enabled()) {
    j["q_lora_rank"] = m.mla.q_lora_rank;
    j["kv_lora_rank"] = m.mla.kv_lora_rank;
    j["qk_head_dim"] = m.mla.qk_head_dim;
    j["qk_pos_emb_head_dim"] = m.mla.qk_pos_emb_head_dim;
    j["v_head_dim"] = m.mla.v_head_dim;
  }
  if (m.mtp_num_layers > 0) j["mtp_num_layers"] = m.mtp_num_layers;
  j["source"] = m.source;
  return j;
}

namespace {

/// An integer in [min, max] that may be null or absent (Hugging Face writes null for "none"; a
/// value outside the range, 0 where min is 1, exits 2 rather than reading as "none").
std::optional<std::int64_t> HfNullableInt(const JsonReader& r, const std::string& key, std::int64_t min,
                                          std::int64_t max) {
  if (!r.Has(key) || r.json()[key].is_null()) return std::nullopt;
  return r.Int(key, min, max);
}

/// A nullable integer whose absence means the config class's default `absent` (null stays None:
/// nullopt).
std::optional<std::int64_t> HfNullableInt(const JsonReader& r, const std::string& key, std::int64_t min,
                                          std::int64_t max, std::int64_t absent) {
  if (!r.Has(key)) return absent;
  return HfNullableInt(r, key, min, max);
}

/// Llama 4's text_config as a config of its own (model_type llama4_text), keeping the outer
/// checkpoint name.
Json HfLlama4Text(const Json& j, const std::string& file) {
  const Json& t = j["text_config"];
  if (!t.is_object()) {
    throw InputError::Field(file, "/text_config", JsonForMessage(t), "an object with the language model's keys");
  }
  Json out = t;
  out["model_type"] = "llama4_text";
  if (j.contains("_name_or_path")) out["_name_or_path"] = j["_name_or_path"];
  return out;
}

/// DeepSeek-V2/V3's experts, MLA and MTP; absent keys take DeepseekV2Config's / DeepseekV3Config's
/// defaults.
/// DeepSeek's router (modeling_deepseek.py's MoEGate; the config classes' defaults where a key is
/// absent: V3 sigmoid scores, "noaux_tc" with a score-correction bias, 8 groups of which 4,
/// normalized weights times 2.5; V2 softmax, "greedy", not normalized, times 1). Megatron-Core's
/// softmax runs after the top-k (normalized) or, with --moe-router-pre-softmax, before it (not);
/// its sigmoid weights are always normalized. V2 scales only weights it does not normalize.
void ReadHfDeepSeekRouter(const JsonReader& r, const std::string& type, const std::string& file, MoeSpec* e) {
  // The modelling code of each version implements one scoring and its own top-k methods (others
  // raise NotImplementedError): V3 sigmoid with "noaux_tc", V2 softmax with "greedy" or
  // "group_limited_greedy". GLM-4.5's Glm4MoeTopkRouter is V3's (it reads neither key) with
  // Glm4MoeConfig's defaults: one group, weights times 1.
  const bool v3 = type != "deepseek_v2", glm = type == "glm4_moe";
  const char* gate = glm ? "GLM-4.5's Glm4MoeTopkRouter" : v3 ? "DeepSeek-V3's MoEGate" : "DeepSeek-V2's MoEGate";
  e->router_score = r.OptString("scoring_func").value_or(v3 ? "sigmoid" : "softmax");
  if (e->router_score != (v3 ? "sigmoid" : "softmax")) {
    throw InputError::Field(file, "/scoring_func", JsonForMessage(r.json()["scoring_func"]),
                            fmt::format("\"{}\" ({})", v3 ? "sigmoid" : "softmax", gate));
  }
  const std::string method = r.OptString("topk_method").value_or(v3 ? "noaux_tc" : "greedy");
  if (v3 ? method != "noaux_tc" : method != "greedy" && method != "group_limited_greedy") {
    throw InputError::Field(file, "/topk_method", JsonForMessage(r.json()["topk_method"]),
                            v3 ? fmt::format("\"noaux_tc\" ({})", gate)
                               : "\"greedy\" or \"group_limited_greedy\" (DeepSeek-V2's MoEGate)");
  }
  e->router_expert_bias = method == "noaux_tc";
  if (method != "greedy") {
    e->router_num_groups = HfNullableInt(r, "n_group", 1, kMaxHeads, glm ? 1 : v3 ? 8 : 0).value_or(0);
    e->router_group_topk = HfNullableInt(r, "topk_group", 1, kMaxHeads, glm ? 1 : v3 ? 4 : 0).value_or(0);
    CheckRouterGroups(*e, file, "/n_group", "/topk_group");
    // One group limits nothing (GLM-4.5's and Kimi K2's n_group 1): no group-limited routing.
    if (e->router_num_groups == 1) e->router_num_groups = e->router_group_topk = 0;
  }
  // Unnormalized weights (and any top-1 weight: MoEGate normalizes only with top_k > 1) are the
  // chosen experts' scores: with softmax scores Megatron-Core's --moe-router-pre-softmax.
  const bool normalized = r.OptBool("norm_topk_prob").value_or(v3) && e->top_k > 1;
  e->router_pre_softmax = e->router_score == "softmax" && !normalized;
  if (e->router_score == "sigmoid" && !normalized && e->top_k > 1) {
    e->router_approximations.push_back(
        "the router's sigmoid weights without norm_topk_prob: Megatron-Core renormalizes them over the chosen experts");
  }
  if (method == "group_limited_greedy") {
    e->router_approximations.push_back(
        "group_limited_greedy ranks the expert groups by their best expert; Megatron-Core's group-limited routing "
        "by the sum of their best top-k / group-top-k");
  }
  const double scale = r.OptNumber("routed_scaling_factor", 1e-6, 1e6).value_or(v3 && !glm ? 2.5 : 1.0);
  if (scale != 1.0 && (v3 || !normalized)) e->router_topk_scaling = scale;
}

/// The experts, router and MTP of DeepSeek-V2/V3 and GLM-4.5 (model_type glm4_moe, DeepSeek-V3's
/// MoE with grouped-query attention); absent keys take the config classes' defaults.
void ReadHfDeepSeekExperts(const JsonReader& r, const std::string& type, const std::string& file, Model* m,
                           ModelFieldNames* n) {
  MoeSpec& e = m->moe;
  // Absent keys take the config class's defaults: DeepseekV2Config's None (dense) and 0 leading
  // dense layers; DeepseekV3Config's 256 routed experts, top-8, one shared expert and 3 leading
  // dense layers; Glm4MoeConfig's 128 routed experts, top-8, one shared expert and 1 leading dense
  // layer. A null stays None.
  const bool v3 = type == "deepseek_v3", glm = type == "glm4_moe";
  e.num_experts = HfNullableInt(r, "n_routed_experts", 1, kMaxHeads, v3 ? 256 : glm ? 128 : 0).value_or(0);
  const auto top_k = v3 || glm ? HfNullableInt(r, "num_experts_per_tok", 1, kMaxHeads, 8)
                               : HfNullableInt(r, "num_experts_per_tok", 1, kMaxHeads);  // V2: absent is None
  if (e.num_experts > 1 && !top_k) {
    throw InputError::Field(file, "/num_experts_per_tok", r.Has("num_experts_per_tok") ? "null" : "absent",
                            "1 to n_routed_experts = " + std::to_string(e.num_experts) + " experts per token");
  }
  if (e.num_experts == 0) {
    // n_routed_experts None: DeepSeek's DecoderLayer builds the dense MLP in every layer, and
    // neither the experts' nor the router's keys are read.
    e = MoeSpec{};
    m->mtp_num_layers = r.OptInt("num_nextn_predict_layers", 0, 64).value_or(0);
    return;
  }
  e.top_k = top_k.value_or(0);
  e.ffn_hidden_size = r.Int("moe_intermediate_size", 1, kMaxFfn);
  e.shared_ffn_hidden_size =
      HfNullableInt(r, "n_shared_experts", 0, kMaxHeads, v3 || glm ? 1 : 0).value_or(0) * e.ffn_hidden_size;
  e.first_k_dense = r.OptInt("first_k_dense_replace", 0, kMaxLayers).value_or(v3 ? 3 : glm ? 1 : 0);
  // DeepSeek's layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0
  // (modeling_deepseek.py's DecoderLayer); GLM-4.5's from first_k_dense_replace on.
  e.layer_step = glm ? 1 : r.OptInt("moe_layer_freq", 1, kMaxLayers).value_or(1);
  e.step_from_layer0 = true;
  ReadHfDeepSeekRouter(r, type, file, &e);
  m->mtp_num_layers = r.OptInt("num_nextn_predict_layers", 0, 64).value_or(0);
  n->num_experts = "n_routed_experts";
  n->moe_ffn_hidden_size = "moe_intermediate_size";
  n->moe_shared_ffn_hidden_size = "n_shared_experts";
  n->moe_first_k_dense = "first_k_dense_replace";
  n->moe_layer_step = "moe_layer_freq";
}

/// DeepSeek-V2/V3's experts (ReadHfDeepSeekExperts) and multi-latent attention.
void ReadHfDeepSeek(const JsonReader& r, const std::string& type, const std::string& file, Model* m,
                    ModelFieldNames* n) {
  ReadHfDeepSeekExperts(r, type, file, m, n);
  MlaSpec& a = m->mla;
  a.q_lora_rank = HfNullableInt(r, "q_lora_rank", 1, kMaxHidden).value_or(0);
  a.kv_lora_rank = r.Int("kv_lora_rank", 1, kMaxHidden);
  a.qk_head_dim = r.Int("qk_nope_head_dim", 1, kMaxHeadDim);
  a.qk_pos_emb_head_dim = r.Int("qk_rope_head_dim", 0, kMaxHeadDim);
  a.v_head_dim = r.Int("v_head_dim", 1, kMaxHeadDim);
  m->kv_channels = a.v_head_dim;
  // Multi-latent attention gives every head its own K and V (kv_b_proj); num_key_value_heads,
  // which DeepSeek's configs set to num_attention_heads, groups nothing.
  m->num_query_groups = m->num_attention_heads;
  n->qk_head_dim = "qk_nope_head_dim";
  n->kv_channels = "v_head_dim";
  n->qk_pos_emb_head_dim = "qk_rope_head_dim";
}

/// Llama 4's MoE layers: transformers' Llama4TextConfig takes an explicit moe_layers list where
/// one is given and derives range(step - 1, L, step) from interleave_moe_layer_step otherwise.
/// The step of a list of that form (every step-th layer, the last of each group), or InputError
/// naming /moe_layers for any other set, which the model does not represent.
std::int64_t Llama4MoeLayerStep(const JsonReader& r, const std::string& file, std::int64_t layers, std::int64_t step) {
  if (!r.Has("moe_layers") || r.json()["moe_layers"].is_null()) return step;
  const Json& v = r.json()["moe_layers"];
  std::vector<std::int64_t> got;
  if (v.is_array()) {
    for (const Json& x : v) {
      if (!x.is_number_integer()) {
        got.clear();
        break;
      }
      got.push_back(x.get<std::int64_t>());
    }
  }
  // transformers tests membership: order and repeats do not matter.
  std::sort(got.begin(), got.end());
  got.erase(std::unique(got.begin(), got.end()), got.end());
  for (std::int64_t k = 1; k <= layers && !got.empty(); ++k) {
    std::vector<std::int64_t> every;
    for (std::int64_t i = k - 1; i < layers; i += k) every.push_back(i);
    if (every == got) return k;
  }
  throw InputError::Field(file, "/moe_layers", JsonForMessage(v),
                          "every k-th layer, range(k - 1, num_hidden_layers, k), as interleave_moe_layer_step gives "
                          "(other MoE layer sets are not modelled)");
}

/// The experts and MLA of the mixture-of-experts families, with the defaults of the transformers
/// library's config classes where a key is absent.
void ReadHfMoe(const JsonReader& r, const std::string& type, const std::string& file, Model* m, ModelFieldNames* n) {
  MoeSpec& e = m->moe;
  n->moe_top_k = "num_experts_per_tok";
  if (type == "mixtral" || type == "gpt_oss") {
    e.num_experts = r.Int("num_local_experts", 1, kMaxHeads);
    // transformers' defaults: MixtralConfig top-2, GptOssConfig top-4.
    e.top_k = r.Has("num_experts_per_tok") ? r.Int("num_experts_per_tok", 1, kMaxHeads)
                                           : r.OptInt("experts_per_token", 1, kMaxHeads).value_or(type == "gpt_oss" ? 4 : 2);
    if (!r.Has("num_experts_per_tok") && r.Has("experts_per_token")) n->moe_top_k = "experts_per_token";
    n->num_experts = "num_local_experts";
    n->moe_ffn_hidden_size = "intermediate_size";
    e.ffn_hidden_size = m->ffn_hidden_size;
    e.expert_bias = e.router_bias = type == "gpt_oss";  // GPT-OSS's experts and router have biases
    if (type == "gpt_oss") {
      // GptOssAttention's sinks; GptOssExperts' SwiGLU clamped at swiglu_limit (GptOssConfig's 7.0).
      m->attention_sinks = true;
      m->swiglu_limit = r.OptNumber("swiglu_limit", 1e-6, 1e6).value_or(7.0);
    }
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    e.num_experts = r.Int("num_experts", 1, kMaxHeads);
    e.top_k = r.Int("num_experts_per_tok", 1, kMaxHeads);
    e.ffn_hidden_size = r.Int("moe_intermediate_size", 1, kMaxFfn);
    // Qwen2MoeConfig's shared expert defaults to 5632 wide; Qwen3-MoE has none (Qwen3MoeConfig has no
    // such key, and its layers build no shared expert).
    e.shared_ffn_hidden_size =
        type == "qwen2_moe" ? r.OptInt("shared_expert_intermediate_size", 0, kMaxFfn).value_or(5632) : 0;
    e.layer_step = r.OptInt("decoder_sparse_step", 1, kMaxLayers).value_or(1);
    n->num_experts = "num_experts";
    n->moe_ffn_hidden_size = "moe_intermediate_size";
    n->moe_shared_ffn_hidden_size = "shared_expert_intermediate_size";
    n->moe_layer_step = "decoder_sparse_step";
    // Qwen3's MoE models were trained with global-batch load balancing (Qiu et al. 2025, ACL,
    // "Demons in the Detail": "Global-batch LBL is also used in Qwen3-MoEs"); Qwen2-MoE's
    // balancing is not published.
    e.router_global_batch_balance = type == "qwen3_moe";
    // Qwen2MoeConfig and Qwen3MoeConfig: norm_topk_prob false by default, the top-k of a softmax
    // over all experts (Megatron-Core's --moe-router-pre-softmax); true renormalizes them.
    e.router_pre_softmax = !r.OptBool("norm_topk_prob").value_or(false);
    if (r.Has("mlp_only_layers") && r.json()["mlp_only_layers"].is_array() && !r.json()["mlp_only_layers"].empty()) {
      throw InputError::Field(file, "/mlp_only_layers", JsonForMessage(r.json()["mlp_only_layers"]),
                              "an empty list (dense layers at arbitrary positions are not modelled)");
    }
  } else if (type == "llama4_text") {
    e.num_experts = r.Int("num_local_experts", 1, kMaxHeads);
    e.top_k = r.OptInt("num_experts_per_tok", 1, kMaxHeads).value_or(1);
    e.ffn_hidden_size = m->ffn_hidden_size;       // intermediate_size: each expert's
    e.shared_ffn_hidden_size = m->ffn_hidden_size;  // one shared expert of the same size per MoE layer
    m->ffn_hidden_size = r.OptInt("intermediate_size_mlp", 1, kMaxFfn).value_or(m->ffn_hidden_size);  // dense layers
    e.layer_step = r.OptInt("interleave_moe_layer_step", 1, kMaxLayers).value_or(1);
    e.layer_step = Llama4MoeLayerStep(r, file, m->num_layers, e.layer_step);
    n->num_experts = "num_local_experts";
    n->moe_ffn_hidden_size = n->moe_shared_ffn_hidden_size = "intermediate_size";
    n->moe_layer_step = "interleave_moe_layer_step";
    e.router_score = "sigmoid";  // Llama4TextMoe: the sigmoid of the chosen logits,
    e.probs_on_input = true;     // which scale the expert's input (routed_in = hidden * scores)
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    ReadHfDeepSeek(r, type, file, m, n);
  } else if (type == "glm4_moe") {
    ReadHfDeepSeekExperts(r, type, file, m, n);
  }
  // One expert routed to by every token is a dense MLP (read as one); more experts per token than
  // there are is a mistake, not a dense model (ValidateModel checks the same for 2 or more).
  if (e.num_experts == 1 && e.top_k != 1) {
    throw InputError::Field(file, "/" + n->moe_top_k,
                            e.top_k > 0 ? std::to_string(e.top_k) : r.Has(n->moe_top_k) ? "null" : "absent",
                            "1 to " + n->num_experts + " = 1 experts per token");
  }
  // Beside shared experts one routed expert would be a dense MLP of their summed width, which the
  // dense layers' width does not give.
  if (e.num_experts == 1 && e.shared_ffn_hidden_size > 0) {
    throw InputError::Field(file, "/" + n->num_experts, "1",
                            "2 or more routed experts beside the shared expert" + std::string(" (") +
                                n->moe_shared_ffn_hidden_size + "), or null for a dense model");
  }
  if (e.num_experts <= 1) e = MoeSpec{};
  // Megatron-Core runs top-1 softmax routing only with the softmax before the top-k.
  if (e.router_score == "softmax" && e.top_k == 1 && !e.router_pre_softmax) {
    e.router_pre_softmax = true;
    e.router_approximations.push_back(
        "the top-1 weight renormalized to 1: Megatron-Core's top-1 softmax router weights the expert by its "
        "probability (--moe-router-pre-softmax)");
  }
}

/// The linear biases of the llama-like families. Qwen2's attention has Q/K/V biases and nothing
/// else; elsewhere attention_bias puts biases on q/k/v and o_proj (GPT-OSS: on by default) and
/// LlamaConfig's mlp_bias on gate/up/down. The model has two switches (Megatron-LM's
/// --add-bias-linear for every linear layer, --add-qkv-bias for Q/K/V alone), so: both keys on, or
/// attention_bias where every MLP is an expert with biases (GPT-OSS), is every linear bias; other
/// attention_bias is Q/K/V alone (o_proj's h per layer not counted, docs/inputs.md); mlp_bias
/// without attention_bias exits 2.
void ReadHfLlamaBiases(const JsonReader& r, const std::string& type, const std::string& file, Model* m) {
  if (type == "qwen2" || type == "qwen2_moe") {
    m->add_bias_linear = false;
    m->add_qkv_bias = true;
    return;
  }
  const bool attention = r.OptBool("attention_bias").value_or(type == "gpt_oss");
  const bool mlp = type == "llama" && r.OptBool("mlp_bias").value_or(false);
  if (mlp && !attention) {
    throw InputError::Field(file, "/mlp_bias", "true",
                            "false, or attention_bias true as well (biases on the MLP alone are not modelled: the "
                            "model's biases are on every linear layer, or on Q/K/V alone)");
  }
  // Megatron-LM's --add-bias-linear also biases the experts, so it stands for attention_bias only
  // where the experts have biases and no dense MLP or shared expert lacks them (GPT-OSS).
  const bool dense_mlp = !m->moe.enabled() || m->moe.shared_ffn_hidden_size > 0 ||
                         m->MoeLayersIn(0, m->num_layers) < m->num_layers;
  m->add_bias_linear = attention && (mlp || (!dense_mlp && m->moe.expert_bias));
  m->add_qkv_bias = attention;
}

/// GPT-OSS's layer_types: per layer, whether it slides ("sliding_attention") or attends to the
/// whole sequence ("full_attention"). Absent or null: GptOssConfig's default, alternating with
/// the first layer sliding.
std::vector<bool> HfSlidingLayers(const JsonReader& r, std::int64_t layers) {
  std::vector<bool> sliding;
  if (!r.Has("layer_types") || r.json().at("layer_types").is_null()) {
    for (std::int64_t i = 0; i < layers; ++i) sliding.push_back((i + 1) % 2 != 0);
    return sliding;
  }
  const Json& t = r.json().at("layer_types");
  if (!t.is_array() || static_cast<std::int64_t>(t.size()) != layers) {
    throw InputError::Field(r.file(), r.PointerTo("layer_types"),
                            t.is_array() ? "an array of " + std::to_string(t.size()) + " entries" : t.dump().substr(0, 80),
                            "an array of num_hidden_layers = " + std::to_string(layers) +
                                " strings, \"sliding_attention\" or \"full_attention\"");
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is_string() || (t[i] != "sliding_attention" && t[i] != "full_attention")) {
      throw InputError::Field(r.file(), r.PointerTo("layer_types") + "/" + std::to_string(i), t[i].dump(),
                              "\"sliding_attention\" or \"full_attention\"");
    }
    sliding.push_back(t[i] == "sliding_attention");
  }
  return sliding;
}

/// The attention window of the llama-like families (Model::attention_window): Mistral/Mixtral's
/// (and Phi-3's) sliding_window (null: none) on every layer, GPT-OSS's on its sliding layer_types, Qwen2/Qwen3's
/// when use_sliding_window is true on the layers from max_window_layers (default 28) on, all
/// modelled (SetWindowLayers); Llama 4's attention_chunk_size (chunked, not sliding) read and
/// named as not modelled.
void ReadHfAttentionWindow(const JsonReader& r, const std::string& type, Model* m) {
  const char* key = type == "llama4_text" ? "attention_chunk_size" : "sliding_window";
  if (type == "llama" || type == "deepseek_v2" || type == "deepseek_v3" || type == "glm4_moe") {
    return;  // no window in these families
  }
  const bool qwen = type == "qwen2" || type == "qwen3" || type == "qwen2_moe" || type == "qwen3_moe";
  const std::int64_t qwen_from = r.OptInt("max_window_layers", 0, kMaxLayers).value_or(28);
  if (qwen && (!r.OptBool("use_sliding_window").value_or(false) || qwen_from >= m->num_layers)) return;
  // Absent: the config class's default (MistralConfig 4096, GptOssConfig 128; the others none).
  const std::int64_t absent = type == "mistral" ? 4096 : type == "gpt_oss" ? 128 : 0;
  if (!r.Has(key)) {
    m->attention_window = absent;
  } else if (!r.json()[key].is_null()) {
    m->attention_window = r.Int(key, 1, std::int64_t{1} << 40);
  }
  if (m->attention_window <= 0) return;
  m->attention_window_key = key;
  if (type == "llama4_text") return;  // chunked attention: not modelled
  std::vector<bool> sliding(static_cast<std::size_t>(m->num_layers), true);
  if (type == "gpt_oss") sliding = HfSlidingLayers(r, m->num_layers);
  if (qwen) {
    for (std::int64_t i = 0; i < m->num_layers; ++i) sliding[static_cast<std::size_t>(i)] = i >= qwen_from;
  }
  SetWindowLayers(sliding, m);
}

/// RoPE's base from `key` (rope_theta; GPT-NeoX's rotary_emb_base), 10000 when absent or null
/// (the transformers library's default for these families).
double HfRopeTheta(const JsonReader& r, const char* key) {
  if (!r.Has(key)) return 10000.0;
  return r.NullableNumber(key, 1, 1e12).value_or(10000.0);
}

/// Llama 3.1's RoPE scaling: rope_scaling's factor where its rope_type (or type) is "llama3", else 0
/// (none, or another kind: linear, dynamic, yarn, which change no count or time; noted in
/// m->rope_scaling_unread for the launches and describe to name). A rope_scaling that is neither
/// an object nor null exits 2.
double HfLlama3RopeScaling(const JsonReader& r, const std::string& file, Model* m) {
  if (!r.Has("rope_scaling") || r.json()["rope_scaling"].is_null()) return 0;
  const Json& s = r.json()["rope_scaling"];
  if (!s.is_object()) {
    throw InputError::Field(file, "/rope_scaling", JsonForMessage(s), "an object with rope_type and factor, or null");
  }
  const Json* type = s.contains("rope_type") ? &s["rope_type"] : s.contains("type") ? &s["type"] : nullptr;
  const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (kind != "llama3") {
    if (kind != "default") {
      m->rope_scaling_unread = (kind.empty() ? std::string("of no named kind") : kind) +
                               (s.contains("factor") ? " (factor " + JsonForMessage(s["factor"]) + ")" : "");
    }
    return 0;
  }
  if (!s.contains("factor") || !s["factor"].is_number() || !(s["factor"].get<double>() >= 1)) {
    throw InputError::Field(file, "/rope_scaling/factor", s.contains("factor") ? JsonForMessage(s["factor"]) : "nothing",
                            "a number of at least 1 (Llama 3.1's RoPE scaling factor)");
  }
  // The frequency bands (Llama 3.1's when absent; Llama 4 Scout's high_freq_factor is 1).
  const JsonReader bands(s, file, "/rope_scaling");
  m->rope_low_freq_factor = bands.OptNumber("low_freq_factor", 1e-6, 1e6).value_or(1);
  m->rope_high_freq_factor = bands.OptNumber("high_freq_factor", 1e-6, 1e6).value_or(4);
  m->rope_original_max_positions = bands.OptInt("original_max_position_embeddings", 1, kMaxSeq).value_or(8192);
  return s["factor"].get<double>();
}

/// Whether any of the dropout probabilities `keys` is above 0 (each in [0, 1], null or absent:
/// `fallback`, the transformers library's default for the family: 0.1 for GPT-2's resid_pdrop and
/// attn_pdrop, 0.0 for GPT-NeoX's and BLOOM's attention_dropout and hidden_dropout and MPT's
/// attn_pdrop and resid_pdrop). Model::dropout is one switch for hidden and attention dropout, so
/// either being on turns it on.
bool HfDropout(const JsonReader& r, std::initializer_list<const char*> keys, double fallback) {
  for (const char* key : keys) {
    if ((r.Has(key) ? r.NullableNumber(key, 0, 1).value_or(fallback) : fallback) > 0) return true;
  }
  return false;
}

/// The families ReadHfLlamaLike reads (LlamaConfig's keys).
bool IsHfLlamaLike(const std::string& type) {
  return type == "llama" || type == "mistral" || type == "qwen2" || type == "phi3" || type == "mixtral" || type == "qwen3" ||
         type == "qwen2_moe" || type == "qwen3_moe" || type == "llama4_text" || type == "gpt_oss" ||
         type == "deepseek_v2" || type == "deepseek_v3" || type == "glm4_moe";
}

/// Llama 4's attention: use_qk_norm (Llama4TextConfig's default true), parameter-free L2 norms of
/// the queries and keys, as qk_l2_norm; no_rope_layers (1 where a layer uses RoPE; absent, null or
/// empty: every no_rope_layer_interval-th layer, 4 by default, skips it) as the NoPE layers.
void ReadHfLlama4Attention(const JsonReader& r, const std::string& file, Model* m) {
  m->qk_l2_norm = r.OptBool("use_qk_norm").value_or(true);
  const Json& l = r.json().contains("no_rope_layers") ? r.json().at("no_rope_layers") : Json();
  if (l.is_array() && !l.empty()) {
    if (static_cast<std::int64_t>(l.size()) != m->num_layers) {
      throw InputError::Field(file, r.PointerTo("no_rope_layers"), "a list of " + std::to_string(l.size()) + " entries",
                              "num_hidden_layers = " + std::to_string(m->num_layers) + " entries of 0 or 1");
    }
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_number_integer() || (l[i] != 0 && l[i] != 1)) {
        throw InputError::Field(file, r.PointerTo("no_rope_layers") + "/" + std::to_string(i), l[i].dump(),
                                "1 (the layer uses RoPE) or 0 (it does not)");
      }
      m->no_rope_layers.push_back(l[i] == 0);
    }
  } else {
    const std::int64_t every = r.OptInt("no_rope_layer_interval", 1, kMaxLayers).value_or(4);
    for (std::int64_t i = 0; i < m->num_layers; ++i) m->no_rope_layers.push_back((i + 1) % every == 0);
  }
  if (std::none_of(m->no_rope_layers.begin(), m->no_rope_layers.end(), [](bool b) { return b; })) m->no_rope_layers.clear();
}

/// Refuses model types shardcast does not map (DBRX) and an expert count above 1 under a dense
/// model_type (null, 0 or 1 experts is a dense model): its experts would be dropped silently.
void CheckHfModelType(const Json& j, const std::string& type, const std::string& file) {
  if (type == "dbrx") {
    throw InputError(file + ": /model_type: got \"dbrx\", expected a supported model_type: DBRX's fused expert "
                     "layout is not mapped (mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, glm4_moe, llama4, gpt_oss are)");
  }
  if (!IsHfLlamaLike(type) && type != "gpt2" && type != "gpt_neox" && type != "mpt" && type != "bloom") {
    throw InputError::Field(file, "/model_type", "\"" + type + "\"",
                            "a supported Hugging Face model_type: llama, mistral, qwen2, qwen3, phi3, gpt2, "
                            "gpt_neox, mpt, bloom, mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3 (and "
                            "kimi_k2, its architecture), glm4_moe, llama4 (or llama4_text, its text_config alone), gpt_oss");
  }
  const bool moe_type = type == "mixtral" || type == "qwen2_moe" || type == "qwen3_moe" || type == "deepseek_v2" ||
                        type == "deepseek_v3" || type == "llama4_text" || type == "gpt_oss" || type == "glm4_moe";
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}) {
    if (moe_type || !j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number()) {
      throw InputError(file + ": /" + key + ": got " + j[key].dump() + ", expected a number of experts (null, 0 or 1 "
                       "for a dense model)");
    }
    if (j[key].get<double>() > 1) {
      throw InputError(file + ": /" + key + ": got " + j[key].dump() + ", expected a dense model for model_type \"" +
                       type + "\" (its experts would be ignored; the mixture-of-experts types are mixtral, qwen2_moe, "
                       "qwen3_moe, deepseek_v2, deepseek_v3, glm4_moe, llama4, gpt_oss)");
    }
  }
}

/// The llama-like families (LlamaConfig's keys, with each family's MoE, bias and window keys).
void ReadHfLlamaLike(const JsonReader& r, const std::string& type, const std::string& file, Model* m,
                     ModelFieldNames* names) {
  const Json& j = r.json();
  m->num_layers = r.Int("num_hidden_layers", 1, kMaxLayers);
  m->hidden_size = r.Int("hidden_size", 1, kMaxHidden);
  m->ffn_hidden_size = r.Int("intermediate_size", 1, kMaxFfn);
  m->num_attention_heads = r.Int("num_attention_heads", 1, kMaxHeads);
  m->num_query_groups = r.OptInt("num_key_value_heads", 1, kMaxHeads).value_or(m->num_attention_heads);
  m->vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m->max_position_embeddings = r.Int("max_position_embeddings", 1, kMaxSeq);
  m->normalization = Normalization::kRMSNorm;
  m->activation = Activation::kSwiglu;
  m->position_embedding = PositionEmbedding::kRope;
  m->rotary_base = HfRopeTheta(r, "rope_theta");
  // Phi-3/Phi-4's and GLM-4.5's partial_rotary_factor (Phi3Config 1.0, Glm4MoeConfig 0.5 when absent).
  if (type == "phi3" || type == "glm4_moe") {
    m->rotary_percent = r.OptNumber("partial_rotary_factor", 1e-6, 1).value_or(type == "glm4_moe" ? 0.5 : 1.0);
  }
  m->rope_scaling_factor = HfLlama3RopeScaling(r, file, m);
  m->tie_embeddings = r.OptBool("tie_word_embeddings").value_or(false);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) m->kv_channels = r.Int("head_dim", 1, kMaxHeadDim);
  // Phi3Config has a residual dropout too (resid_pdrop, 0.0 by default).
  m->dropout = type == "phi3" ? HfDropout(r, {"attention_dropout", "resid_pdrop"}, 0.0)
                              : HfDropout(r, {"attention_dropout"}, 0.0);
  // Qwen3's attention normalizes each head's queries and keys (q_norm, k_norm: RMSNorm over
  // head_dim; modeling_qwen3.py), which the config does not state.
  m->qk_layernorm = type == "qwen3" || type == "qwen3_moe";
  // GLM-4.5's use_qk_norm: the same per-head norms (Glm4MoeAttention; false when absent).
  if (type == "glm4_moe") m->qk_layernorm = r.OptBool("use_qk_norm").value_or(false);
  if (type == "llama4_text") ReadHfLlama4Attention(r, file, m);
  names->num_layers = "num_hidden_layers";
  names->kv_channels = "head_dim";
  names->num_query_groups = "num_key_value_heads";
  ReadHfMoe(r, type, file, m, names);
  ReadHfLlamaBiases(r, type, file, m);
  ReadHfAttentionWindow(r, type, m);
}

void ReadHfGpt2(const JsonReader& r, Model* m) {
  m->num_layers = r.Int("n_layer", 1, kMaxLayers);
  m->hidden_size = r.Int("n_embd", 1, kMaxHidden);
  m->num_attention_heads = r.Int("n_head", 1, kMaxHeads);
  m->ffn_hidden_size = r.OptInt("n_inner", 1, kMaxFfn).value_or(4 * m->hidden_size);
  m->vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m->max_position_embeddings = r.Int("n_positions", 1, kMaxSeq);
  m->normalization = Normalization::kLayerNorm;
  m->activation = Activation::kGelu;
  m->position_embedding = PositionEmbedding::kLearned;
  m->tie_embeddings = r.OptBool("tie_word_embeddings").value_or(true);
  m->dropout = HfDropout(r, {"resid_pdrop", "attn_pdrop"}, 0.1);
}

void ReadHfGptNeox(const JsonReader& r, Model* m) {
  m->num_layers = r.Int("num_hidden_layers", 1, kMaxLayers);
  m->hidden_size = r.Int("hidden_size", 1, kMaxHidden);
  m->num_attention_heads = r.Int("num_attention_heads", 1, kMaxHeads);
  m->ffn_hidden_size = r.Int("intermediate_size", 1, kMaxFfn);
  m->vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m->max_position_embeddings = r.Int("max_position_embeddings", 1, kMaxSeq);
  m->normalization = Normalization::kLayerNorm;
  m->activation = Activation::kGelu;
  m->position_embedding = PositionEmbedding::kRope;
  m->rotary_base = HfRopeTheta(r, "rotary_emb_base");
  m->rotary_percent = r.OptNumber("rotary_pct", 1e-6, 1).value_or(0.25);  // GPTNeoXConfig's default
  m->tie_embeddings = r.OptBool("tie_word_embeddings").value_or(false);
  m->dropout = HfDropout(r, {"attention_dropout", "hidden_dropout"}, 0.0);
}

void ReadHfMpt(const JsonReader& r, Model* m) {
  m->num_layers = r.Int("n_layers", 1, kMaxLayers);
  m->hidden_size = r.Int("d_model", 1, kMaxHidden);
  m->num_attention_heads = r.Int("n_heads", 1, kMaxHeads);
  const std::int64_t ratio = r.OptInt("expansion_ratio", 1, 64).value_or(4);
  m->ffn_hidden_size = ratio * m->hidden_size;
  m->vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m->max_position_embeddings = r.Int("max_seq_len", 1, kMaxSeq);
  m->normalization = Normalization::kLayerNorm;
  m->activation = Activation::kGelu;
  bool alibi = false, attn_dropout = false;
  if (r.Has("attn_config")) {
    alibi = r.Object("attn_config").OptBool("alibi").value_or(false);
    attn_dropout = HfDropout(r.Object("attn_config"), {"attn_pdrop"}, 0.0);
  }
  m->dropout = attn_dropout || HfDropout(r, {"resid_pdrop"}, 0.0);
  m->position_embedding = alibi ? PositionEmbedding::kAlibi : PositionEmbedding::kLearned;
  m->tie_embeddings = true;  // MPT always ties (no separate output layer)
  m->add_bias_linear = !r.OptBool("no_bias").value_or(false);
}

void ReadHfBloom(const JsonReader& r, Model* m) {
  m->num_layers = r.Has("n_layer") ? r.Int("n_layer", 1, kMaxLayers) : r.Int("num_hidden_layers", 1, kMaxLayers);
  m->hidden_size = r.Has("hidden_size") ? r.Int("hidden_size", 1, kMaxHidden) : r.Int("n_embed", 1, kMaxHidden);
  m->num_attention_heads = r.Has("n_head") ? r.Int("n_head", 1, kMaxHeads)
                                           : r.Int("num_attention_heads", 1, kMaxHeads);
  m->ffn_hidden_size = 4 * m->hidden_size;
  m->vocab_size = r.Int("vocab_size", 1, kMaxVocab);
  m->max_position_embeddings = 2048;  // BLOOM's training length; ALiBi has no position table
  m->normalization = Normalization::kLayerNorm;
  m->activation = Activation::kGelu;
  m->position_embedding = PositionEmbedding::kAlibi;
  m->tie_embeddings = true;
  m->dropout = HfDropout(r, {"attention_dropout", "hidden_dropout"}, 0.0);
}

/// The family's keys into `m` (defaults are those of the transformers library's config classes);
/// an unsupported model_type exits 2.
void ReadHfFamily(const JsonReader& r, const std::string& type, const std::string& file, Model* m,
                  ModelFieldNames* names) {
  if (IsHfLlamaLike(type)) {
    ReadHfLlamaLike(r, type, file, m, names);
    return;  // the llama-like families set their biases themselves
  }
  if (type == "gpt2") {
    ReadHfGpt2(r, m);
  } else if (type == "gpt_neox") {
    ReadHfGptNeox(r, m);
  } else if (type == "mpt") {
    ReadHfMpt(r, m);
  } else if (type == "bloom") {
    ReadHfBloom(r, m);
  } else {
    throw std::logic_error("ReadHfFamily: model_type " + type + " passed CheckHfModelType unread");
  }
  m->add_qkv_bias = m->add_bias_linear;
}

}  // namespace

Model ModelFromHuggingFace(const Json& j, const std::string& file) {
  JsonReader r(j, file);
  if (!r.Has("model_type")) {
    throw InputError(file + ": /model_type: missing required field (a Hugging Face config.json names its model_type)");
  }
  std::string type = ToLower(r.String("model_type"));
  // Kimi K2's checkpoint names its own model_type over DeepSeek-V3's architecture (its auto_map:
  // DeepseekV3Config, DeepseekV3ForCausalLM) and keys.
  const bool kimi = type == "kimi_k2";
  if (kimi) type = "deepseek_v3";
  // Llama 4 checkpoints nest the language model's keys under text_config (its vision tower is
  // not modelled).
  if (type == "llama4") {
    if (!r.Has("text_config")) {
      throw InputError(file + ": /text_config: missing required field (a llama4 config.json keeps the language "
                       "model's keys there)");
    }
    Model m = ModelFromHuggingFace(HfLlama4Text(j, file), file);
    m.source = "Hugging Face config.json (llama4, text_config; the vision encoder is not modelled): " + file;
    return m;
  }
  CheckHfModelType(j, type, file);
  Model m;
  ModelFieldNames names;  // the keys messages name
  // Name: the checkpoint's _name_or_path, else the file name (the folder's for config.json).
  const auto path = std::filesystem::path(file);
  m.name = path.stem().string();
  if (m.name == "config") {
    // config.json, ./config.json: the current folder's name.
    std::error_code ec;
    const auto folder = std::filesystem::absolute(path, ec).lexically_normal().parent_path();
    m.name = (ec ? path.parent_path() : folder).filename().string();
    if (m.name.empty() || m.name == ".") m.name = "config";
  }
  if (auto n = r.OptString("_name_or_path"); n && !n->empty()) {
    m.name = std::filesystem::path(*n).filename().string();
  }
  m.origin = "huggingface:" + file;
  m.source = "Hugging Face config.json (" + (kimi ? std::string("kimi_k2, DeepSeek-V3's architecture") : type.empty() ? std::string("?") : type) + "): " + file;
  ReadHfFamily(r, type, file, &m, &names);
  if (m.kv_channels == 0) {
    if (m.hidden_size % m.num_attention_heads != 0) {
      throw InputError::Field(file, "/num_attention_heads", std::to_string(m.num_attention_heads),
                              "a divisor of hidden_size = " + std::to_string(m.hidden_size));
    }
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  // The training sequence length is not in config.json: default to the context length, at most
  // 8192 (override with --seq).
  m.seq_length = std::min<std::int64_t>(m.max_position_embeddings, 8192);
  ValidateModel(m, file, names);
  return m;
}

Gpu GpuFromJson(const Json& j, const std::string& file) {
  JsonReader r(j, file);
  r.RejectUnknownKeys({"name", "display_name", "arch", "peak_tflops", "memory_GiB",
                       "hbm_bandwidth_GBps", "sm_count", "nvlink_GBps_per_direction",
                       "pcie_GBps_per_direction", "host_link_shared_by", "tdp_W", "mamf_tflops", "nvlink_ring_busbw_GBps",
                       "price_usd_per_gpu_hour",
                       "price_date", "price_source", "source"});
  Gpu g;
  g.name = NameOf(r, file);
  g.display_name = r.OptString("display_name").value_or(g.name);
  g.arch = r.OptString("arch").value_or("unknown");
  if (g.arch.empty()) {
    throw InputError::Field(file, "/arch", "\"\"", "an architecture name (ampere, hopper, blackwell, cdna3, or any "
                                                  "other name for the generic estimates), or the key left out");
  }
  JsonReader p = r.Object("peak_tflops");
  p.RejectUnknownKeys({"fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4"});
  // bf16 may be absent (V100: fp16 tensor cores only); one 16-bit peak is required.
  if (!p.Has("bf16") && !p.Has("fp16")) {
    throw InputError::Field(file, "/peak_tflops", JsonForMessage(p.json()),
                            "a \"bf16\" or \"fp16\" dense peak in TFLOP/s");
  }
  g.peak_bf16_tflops = p.OptNumber("bf16", 1e-3, 1e6).value_or(0);
  g.peak_fp16_tflops = p.OptNumber("fp16", 1e-3, 1e6).value_or(g.peak_bf16_tflops);
  g.peak_fp32_tflops = p.OptNumber("fp32", 1e-3, 1e6).value_or(0);
  g.peak_tf32_tflops = p.OptNumber("tf32", 1e-3, 1e6).value_or(0);
  if (p.Has("fp8")) g.peak_fp8_tflops = p.NullableNumber("fp8", 1e-3, 1e6);
  if (p.Has("mxfp8")) g.peak_mxfp8_tflops = p.NullableNumber("mxfp8", 1e-3, 1e6);
  if (p.Has("nvfp4")) g.peak_nvfp4_tflops = p.NullableNumber("nvfp4", 1e-3, 1e6);
  g.memory_bytes = r.Number("memory_GiB", 0.001, 1e6) * 1073741824.0;
  g.hbm_bandwidth_GBps = r.Number("hbm_bandwidth_GBps", 0.001, 1e6);
  g.sm_count = r.OptInt("sm_count", 1, 1 << 20).value_or(0);
  g.nvlink_GBps_per_direction = r.OptNumber("nvlink_GBps_per_direction", 0, 1e6).value_or(0);
  g.pcie_GBps_per_direction = r.OptNumber("pcie_GBps_per_direction", 0, 1e6).value_or(0);
  g.host_link_shared_by = static_cast<int>(r.OptInt("host_link_shared_by", 1, 64).value_or(1));
  g.tdp_W = r.OptNumber("tdp_W", 1, 1e6).value_or(0);  // 0: not given (no energy figures)
  g.nvlink_ring_busbw_GBps = r.OptNumber("nvlink_ring_busbw_GBps", 1e-3, 1e6).value_or(0);
  if (g.nvlink_ring_busbw_GBps > 0 && !(g.nvlink_ring_busbw_GBps <= g.nvlink_GBps_per_direction)) {
    throw InputError::Field(file, "/nvlink_ring_busbw_GBps", JsonForMessage(r.json()["nvlink_ring_busbw_GBps"]),
                            fmt::format("at most nvlink_GBps_per_direction = {:g} (a measured ring over the links)",
                                        g.nvlink_GBps_per_direction));
  }
  if (r.Has("mamf_tflops")) {
    JsonReader mamf = r.Object("mamf_tflops");
    mamf.RejectUnknownKeys({"bf16", "fp8"});
    g.mamf_bf16_tflops = mamf.OptNumber("bf16", 1e-3, 1e6).value_or(0);
    g.mamf_fp8_tflops = mamf.OptNumber("fp8", 1e-3, 1e6).value_or(0);
    const double peak16 = g.peak_bf16_tflops > 0 ? g.peak_bf16_tflops : g.peak_fp16_tflops;
    if (g.mamf_bf16_tflops > peak16) {
      throw InputError::Field(file, "/mamf_tflops/bf16", JsonForMessage(mamf.json()["bf16"]),
                              fmt::format("at most the 16-bit peak {:g} TFLOP/s (a measured rate)", peak16));
    }
    if (g.mamf_fp8_tflops > 0 && !(g.peak_fp8_tflops && g.mamf_fp8_tflops <= *g.peak_fp8_tflops)) {
      throw InputError::Field(file, "/mamf_tflops/fp8", JsonForMessage(mamf.json()["fp8"]),
                              g.peak_fp8_tflops ? fmt::format("at most the FP8 peak {:g} TFLOP/s (a measured rate)",
                                                              *g.peak_fp8_tflops)
                                                : std::string("no FP8 rate without an FP8 peak in peak_tflops"));
    }
  }
  g.price_usd_per_gpu_hour = r.OptNumber("price_usd_per_gpu_hour", 0, 1e6).value_or(0);
  g.price_date = r.OptString("price_date").value_or("");
  g.price_source = r.OptString("price_source").value_or("");
  g.source = r.OptString("source").value_or("user file " + file);
  return g;
}

Cluster ClusterFromJson(const Json& j, const std::string& file) {
  JsonReader r(j, file);
  r.RejectUnknownKeys({"name", "gpu", "gpus_per_node", "gpus_per_host", "intra_node", "inter_node", "num_gpus",
                       "source"});
  Cluster c;
  c.name = NameOf(r, file);
  std::string gpu_spec = r.String("gpu");
  // A relative GPU file path is relative to the cluster file's folder when it is not found from
  // the working directory.
  {
    const std::filesystem::path gp(gpu_spec), beside = std::filesystem::path(file).parent_path() / gpu_spec;
    std::error_code ec1, ec2;
    if (gp.is_relative() && gp.extension() == ".json" && !std::filesystem::exists(gp, ec1) &&
        std::filesystem::exists(beside, ec2)) {
      gpu_spec = beside.string();
    }
  }
  try {
    c.gpu = LoadGpu(gpu_spec);
  } catch (const InputError& e) {
    throw InputError(file + ": /gpu: " + e.what());
  }
  c.gpus_per_node = r.Int("gpus_per_node", 1, 1 << 20);
  c.gpus_per_host = r.Has("gpus_per_host") ? r.Int("gpus_per_host", 1, c.gpus_per_node) : 0;
  if (c.gpus_per_node % c.GpusPerHost() != 0) {
    throw InputError::Field(file, "/gpus_per_host", std::to_string(c.gpus_per_host),
                            "a divisor of gpus_per_node = " + std::to_string(c.gpus_per_node) +
                                " (the scale-up domain is made of whole hosts)");
  }
  JsonReader intra = r.Object("intra_node");
  intra.RejectUnknownKeys({"fabric", "bandwidth_GBps_per_direction"});
  c.intra_fabric = intra.Enum("fabric", {"nvswitch", "nvlink", "pcie", "xgmi"});
  c.intra_GBps_per_direction = intra.Number("bandwidth_GBps_per_direction", 0.001, 1e6);
  JsonReader inter = r.Object("inter_node");
  inter.RejectUnknownKeys({"nics_per_node", "nic_Gbps", "fabric"});
  c.nics_per_node = inter.Int("nics_per_node", 0, 1 << 16);
  c.nic_Gbps = inter.Number("nic_Gbps", 0, 1e6);
  // The fabric decides the NCCL efficiency the built-in profile assumes (simulator/profile.cc).
  c.inter_fabric = inter.Has("fabric") ? inter.Enum("fabric", {"infiniband-edr", "infiniband-hdr", "infiniband-ndr", "infiniband-xdr",
                                                               "ethernet-roce", "omni-path", "none"})
                                       : "";
  c.num_gpus = r.OptInt("num_gpus", 1, std::int64_t{1} << 24);
  c.source = r.OptString("source").value_or("user file " + file);
  return c;
}

Model LoadModel(const std::string& spec, const std::string& flag) {
  std::string label;
  Json j = ReadSpec(PresetKind::kModel, spec, flag, &label);
  Model m = ModelFromJson(j, label);
  if (m.origin == label && label.rfind("models/llm/", 0) == 0) m.origin = "preset";
  return m;
}

Gpu LoadGpu(const std::string& spec, const std::string& flag) {
  std::string label;
  return GpuFromJson(ReadSpec(PresetKind::kGpu, spec, flag, &label), label);
}

Cluster LoadCluster(const std::string& spec, const std::string& flag) {
  std::string label;
  return ClusterFromJson(ReadSpec(PresetKind::kCluster, spec, flag, &label), label);
}

}  // namespace shardcast
