#include "planner/run_log.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "common/units.h"
#include "models/loader.h"

namespace shardcast {
namespace {

constexpr double kMiB = 1048576.0;  // Megatron-LM's "MB" (report_memory divides by 1024 * 1024)

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") + 1 - b);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = Split(text, '\n');
  for (auto& l : lines) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
  }
  return lines;
}

[[noreturn]] void FailAt(const std::string& path, std::size_t line, const std::string& what) {
  throw InputError(fmt::format("{}:{}: {}", path, line, what));
}

/// The field after `key` on `line`, up to the next '|' or two spaces (torchtitan separates its
/// fields so), trimmed; none if `key` is not on the line.
std::optional<std::string> FieldAfter(const std::string& line, const std::string& key) {
  const auto at = line.find(key);
  if (at == std::string::npos) return std::nullopt;
  const std::string rest = line.substr(at + key.size());
  const auto start = std::min(rest.size(), rest.find_first_not_of(' '));
  const auto end = std::min(rest.find('|', start), rest.find("  ", start));
  return Trim(rest.substr(start, end == std::string::npos ? std::string::npos : end - start));
}

/// A positive finite number ("1,234.5" with thousands separators too), or InputError naming the
/// file, line and field.
double PositiveNumber(const std::string& text, const std::string& path, std::size_t line, const std::string& field) {
  std::string s;
  for (char ch : text) {
    if (ch != ',') s += ch;
  }
  // Separators group the integer digits in threes ("6,25,1" is not a number).
  if (const auto comma = text.find(','); comma != std::string::npos) {
    const std::string whole = text.substr(0, text.find('.'));
    bool grouped = comma >= 1 && comma <= 3;
    for (std::size_t at = comma; grouped && at != std::string::npos; at = whole.find(',', at + 1)) {
      const auto next = whole.find(',', at + 1);
      grouped = (next == std::string::npos ? whole.size() : next) - at - 1 == 3;
    }
    if (!grouped) FailAt(path, line, fmt::format("{}: got \"{}\", expected a positive number", field, text));
  }
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v) || !(v > 0)) {
    FailAt(path, line, fmt::format("{}: got \"{}\", expected a positive number", field, text));
  }
  return v;
}

constexpr std::int64_t kMaxDegree = std::int64_t{1} << 24;  // GPUs in any one dimension

/// a x b, or InputError naming `what` where it would overflow int64.
std::int64_t CheckedProduct(std::int64_t a, std::int64_t b, const std::string& what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw InputError(fmt::format("{}: {} x {} is out of range", what, a, b));
  return r;
}

double MeanAfterFirst(const std::vector<double>& v) {
  if (v.size() == 1) return v[0];
  return std::accumulate(v.begin() + 1, v.end(), 0.0) / static_cast<double>(v.size() - 1);
}

// ----- Megatron-LM -----

/// The preset with the same shape as `m` (every field of our model JSON but its name, source,
/// how its router was trained, which an argument dump does not say, the router's scoring, which
/// changes no count or time and is not read from the dump, and the RoPE scaling, which changes no
/// count or time and benchmark runs often leave off), if there is one: two logs of one model then
/// share its name, and rank against each other.
std::optional<std::string> SamePreset(const Model& m) {
  auto shape = [](const Model& x) {
    Json j = ModelToJson(x);
    j.erase("name");
    j.erase("source");
    j.erase("moe_router_global_batch_balance");
    for (const char* key : {"moe_router_score_function", "moe_router_pre_softmax", "moe_router_topk_scaling_factor",
                            "moe_router_num_groups", "moe_router_group_topk", "moe_router_enable_expert_bias",
                            "moe_apply_probs_on_input"}) {
      j.erase(key);
    }
    j.erase("rope_scaling_factor");
    return j;
  };
  const Json mine = shape(m);
  for (const std::string& name : PresetNames(PresetKind::kModel)) {
    if (shape(LoadModel(name)) == mine) return name;
  }
  return std::nullopt;
}

/// Megatron-LM's argument dump: name -> (value as printed, line).
class MegatronArgs {
 public:
  MegatronArgs(const std::vector<std::string>& lines, const std::string& path);
  bool empty() const { return v_.empty(); }
  /// The value as printed; none for a missing argument or one printed as None.
  std::optional<std::string> Get(const std::string& name) const {
    const auto it = v_.find(name);
    if (it == v_.end() || it->second.first == "None") return std::nullopt;
    return it->second.first;
  }
  /// True or False as printed (missing or None: False); anything else fails naming the argument.
  bool Flag(const std::string& name) const {
    const std::string v = Get(name).value_or("False");
    if (v != "True" && v != "False") Fail(name, "True or False");
    return v == "True";
  }
  /// A flag Megatron-LM always prints: missing fails (a cut or edited dump).
  bool RequiredFlag(const std::string& name) const {
    if (v_.find(name) == v_.end()) Fail(name, "True or False");
    return Flag(name);
  }
  /// The number of argument dumps read (a restarted job's log has more than one).
  int dumps() const { return dumps_; }
  std::size_t dump_line(int k) const { return dump_lines_[static_cast<std::size_t>(k)]; }
  std::optional<std::int64_t> Int(const std::string& name) const;
  std::optional<double> Number(const std::string& name) const;
  std::int64_t RequiredInt(const std::string& name) const;
  /// An integer from `lo` to `hi` (none: missing or None), failing otherwise.
  std::optional<std::int64_t> Bounded(const std::string& name, std::int64_t lo, std::int64_t hi) const {
    const auto v = Int(name);
    if (v && (*v < lo || *v > hi)) Fail(name, fmt::format("an integer from {} to {}", lo, hi));
    return v;
  }
  std::int64_t RequiredBounded(const std::string& name, std::int64_t lo, std::int64_t hi) const {
    const auto v = Bounded(name, lo, hi);
    if (!v) Fail(name, fmt::format("an integer from {} to {}", lo, hi));
    return *v;
  }
  /// A printed Python list ("['core_attn', 'mlp']", "[0, 1, 1]") as its items.
  std::vector<std::string> List(const std::string& name) const;
  [[noreturn]] void Fail(const std::string& name, const std::string& expected) const;

 private:
  std::map<std::string, std::pair<std::string, std::size_t>> v_;
  std::string path_;
  int dumps_ = 0;
  std::vector<std::size_t> dump_lines_;
};

MegatronArgs::MegatronArgs(const std::vector<std::string>& lines, const std::string& path) : path_(path) {
  bool inside = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.find("end of arguments ---") != std::string::npos) {
      inside = false;
      continue;
    }
    if (l.find("---- arguments ----") != std::string::npos) {
      inside = true;
      ++dumps_;
      dump_lines_.push_back(i + 1);
      continue;
    }
    if (!inside) continue;
    // "  name ........ value" (a launcher may prefix the line, e.g. "0: ").
    const auto dots = l.find(" ..");
    const auto end = dots == std::string::npos ? std::string::npos : l.find_first_not_of('.', dots + 1);
    if (dots == std::string::npos || end == std::string::npos || l[end] != ' ') {
      FailAt(path, i + 1, fmt::format("in the argument dump: got \"{}\", expected \"  name ..... value\"", Trim(l)));
    }
    const std::string head = Trim(l.substr(0, dots));
    const std::string name = head.substr(head.find_last_of(' ') == std::string::npos ? 0 : head.find_last_of(' ') + 1);
    v_[name] = {Trim(l.substr(end + 1)), i + 1};
  }
}

void MegatronArgs::Fail(const std::string& name, const std::string& expected) const {
  const auto it = v_.find(name);
  if (it == v_.end()) throw InputError(fmt::format("{}: argument {}: not in the argument dump, expected {}", path_, name, expected));
  FailAt(path_, it->second.second, fmt::format("argument {}: got \"{}\", expected {}", name, it->second.first, expected));
}

std::optional<std::int64_t> MegatronArgs::Int(const std::string& name) const {
  const auto s = Get(name);
  if (!s) return std::nullopt;
  std::size_t used = 0;
  std::int64_t v = 0;
  try {
    v = std::stoll(*s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size()) Fail(name, "an integer or None");
  return v;
}

std::optional<double> MegatronArgs::Number(const std::string& name) const {
  const auto s = Get(name);
  if (!s) return std::nullopt;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(*s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size() || !std::isfinite(v)) Fail(name, "a number or None");
  return v;
}

struct MoeLayerPattern {
  std::int64_t first_k_dense = 0;
  std::int64_t step = 1;
  bool from_layer0 = false;
};

/// A per-layer 0/1 list (Megatron-LM's --moe-layer-freq pattern) as the model's MoE layer rule:
/// the first MoE layer k, then every step-th layer counted from layer 0 (i % step == 0) or from
/// layer 1 ((i + 1) % step == 0); nullopt when no such rule gives the list.
std::optional<MoeLayerPattern> MoeLayerPatternOf(const std::vector<std::string>& items) {
  const auto first = std::find(items.begin(), items.end(), "1");
  if (first == items.end()) return std::nullopt;
  const std::int64_t k = first - items.begin();
  const std::int64_t n = static_cast<std::int64_t>(items.size());
  for (std::int64_t step = 1; step <= n; ++step) {
    for (const bool from0 : {false, true}) {
      bool same = true;
      for (std::int64_t i = 0; i < n && same; ++i) {
        const bool moe = i >= k && ((from0 ? i : i + 1) % step) == 0;
        same = items[static_cast<std::size_t>(i)] == (moe ? "1" : "0");
      }
      if (same) return MoeLayerPattern{k, step, from0};
    }
  }
  return std::nullopt;
}

std::int64_t MegatronArgs::RequiredInt(const std::string& name) const {
  const auto v = Int(name);
  if (!v) Fail(name, "an integer");
  return *v;
}

std::vector<std::string> MegatronArgs::List(const std::string& name) const {
  std::string s = Get(name).value_or("");
  if (s.empty()) return {};
  if (s.front() != '[' || s.back() != ']') {
    Fail(name, "a Python list as Megatron-LM prints one, such as [0, 1] or ['a', 'b']");
  }
  std::vector<std::string> items;
  for (std::string x : Split(s.substr(1, s.size() - 2), ',')) {
    x = Trim(x);
    if (x.size() >= 2 && (x.front() == '\'' || x.front() == '"')) x = x.substr(1, x.size() - 2);
    if (!x.empty()) items.push_back(x);
  }
  return items;
}

/// The model's shape from the argument dump, in our model JSON (whose keys are Megatron-LM's
/// names where Megatron-LM has them).
/// The router as the run trained it (what --emit and describe of the run say; no time), into our
/// model JSON `j`; combinations Megatron-Core refuses fail here, naming the dump's line.
void MegatronRouterJson(const MegatronArgs& a, Json* j) {
  const std::string score = a.Get("moe_router_score_function").value_or("softmax");
  if (score != "softmax" && score != "sigmoid") a.Fail("moe_router_score_function", "softmax or sigmoid");
  (*j)["moe_router_score_function"] = score;
  // (False is the default; left out, a top-1 softmax router of an older Megatron-LM, which did not
  // refuse it, reads as the pre-softmax Megatron-Core needs now.)
  if (a.Flag("moe_router_pre_softmax")) {
    if (score != "softmax") a.Fail("moe_router_pre_softmax", "False with moe_router_score_function " + score);
    (*j)["moe_router_pre_softmax"] = true;
  }
  if (const auto x = a.Number("moe_router_topk_scaling_factor")) (*j)["moe_router_topk_scaling_factor"] = *x;
  const auto groups = a.Int("moe_router_num_groups"), group_topk = a.Int("moe_router_group_topk");
  if (groups && group_topk) {
    (*j)["moe_router_num_groups"] = *groups;
    (*j)["moe_router_group_topk"] = *group_topk;
  }
  if (a.Flag("moe_router_enable_expert_bias")) {
    if (score != "sigmoid") {
      a.Fail("moe_router_enable_expert_bias",
             "False with moe_router_score_function " + score + " (Megatron-Core's expert bias needs sigmoid scores)");
    }
    (*j)["moe_router_enable_expert_bias"] = true;
  }
  if (a.Flag("moe_apply_probs_on_input")) (*j)["moe_apply_probs_on_input"] = true;
}

/// --no-rope-freq: N, or its list (1 where a layer skips RoPE), as our format's no_rope_freq.
void MegatronNoRopeJson(const MegatronArgs& a, Json* j) {
  if (const auto nope = a.Get("no_rope_freq"); nope && !nope->empty() && nope->front() == '[') {
    Json l = Json::array();
    for (const std::string& v : a.List("no_rope_freq")) l.push_back(v == "1" ? 1 : v == "0" ? 0 : -1);
    (*j)["no_rope_freq"] = l;  // anything but 0/1 exits 2 naming the entry when the model is read
  } else if (const auto n = a.Int("no_rope_freq"); n && *n >= 1) {
    (*j)["no_rope_freq"] = *n;
  }
}

/// Llama 4's q/k L2 norms; GPT-OSS's learned attention sinks and clamped quick-GeGLU (its gate and
/// up projections as SwiGLU's), as our format's keys.
void MegatronAttentionExtrasJson(const MegatronArgs& a, Json* j) {
  if (a.Flag("qk_l2_norm")) (*j)["qk_l2_norm"] = true;
  if (a.Get("softmax_type").value_or("vanilla") == "learnable") (*j)["attention_sinks"] = true;
  if (a.Flag("quick_geglu")) {
    (*j)["activation"] = "swiglu";
    if (const auto clamp = a.Number("activation_func_clamp_value"); clamp && *clamp > 0) (*j)["swiglu_limit"] = *clamp;
  }
}

Json MegatronModelJson(const MegatronArgs& a, const std::string& name, std::optional<std::int64_t> padded_vocab) {
  Json j;
  j["name"] = name;
  // The shape within the model loader's limits (models/model.h), failing at the argument's line.
  j["num_layers"] = a.RequiredBounded("num_layers", 1, kMaxLayers);
  j["hidden_size"] = a.RequiredBounded("hidden_size", 1, kMaxHidden);
  j["ffn_hidden_size"] = a.RequiredBounded("ffn_hidden_size", 1, kMaxFfn);
  j["num_attention_heads"] = a.RequiredBounded("num_attention_heads", 1, kMaxHeads);
  if (a.Flag("group_query_attention")) j["num_query_groups"] = a.RequiredBounded("num_query_groups", 1, kMaxHeads);
  if (const auto kv = a.Bounded("kv_channels", 1, kMaxHeadDim)) j["kv_channels"] = *kv;
  // The tokenizer pads the vocabulary after the dump is printed: its "> padded vocab (size: V)
  // with N dummy tokens (new size: P)" line gives P; else the dump's own size.
  const auto vocab = padded_vocab ? padded_vocab : a.Int("padded_vocab_size") ? a.Int("padded_vocab_size") : a.Int("vocab_size");
  if (!vocab) a.Fail("vocab_size", "the vocabulary size (the log has no \"> padded vocab\" line; or pass --model with the model)");
  j["vocab_size"] = *vocab;
  j["seq_length"] = a.RequiredBounded("seq_length", 1, kMaxSeq);
  if (const auto mp = a.Bounded("max_position_embeddings", 1, kMaxSeq)) j["max_position_embeddings"] = *mp;
  const std::string norm = a.Get("normalization").value_or("LayerNorm");
  if (norm != "LayerNorm" && norm != "RMSNorm") a.Fail("normalization", "LayerNorm or RMSNorm");
  j["normalization"] = norm == "RMSNorm" ? "rmsnorm" : "layernorm";
  j["activation"] = a.Flag("swiglu") ? "swiglu" : "gelu";
  const std::string pe = a.Get("position_embedding_type").value_or("learned_absolute");
  if (pe != "learned_absolute" && pe != "rope") a.Fail("position_embedding_type", "learned_absolute or rope");
  j["position_embedding"] = pe == "rope" ? "rope" : "learned";
  if (pe == "rope") {
    if (const auto base = a.Number("rotary_base")) j["rotary_base"] = *base;
    if (const auto pct = a.Number("rotary_percent"); pct && *pct != 1) j["rotary_percent"] = *pct;
    MegatronNoRopeJson(a, &j);
    if (a.Flag("use_rope_scaling")) j["rope_scaling_factor"] = a.Number("rope_scaling_factor").value_or(8.0);
  }
  j["tie_embeddings"] = !a.Flag("untie_embeddings_and_output_weights");
  j["add_bias_linear"] = a.Get("add_bias_linear").value_or("True") == "True";
  if (a.Get("add_qkv_bias")) j["add_qkv_bias"] = a.Flag("add_qkv_bias") || a.Get("add_bias_linear").value_or("True") == "True";
  // Multi-latent attention's q and kv norms are part of MLA (always counted), which Megatron-Core
  // builds only with --qk-layernorm: the switch says nothing more there.
  if (a.Flag("qk_layernorm") && !a.Flag("multi_latent_attention")) j["qk_layernorm"] = true;
  MegatronAttentionExtrasJson(a, &j);
  // --window-size (left, right), printed as a tuple or None, and --window-attn-skip-freq.
  if (const std::string w = a.Get("window_size").value_or("None"); w != "None") {
    std::int64_t left = 0, right = -1;
    if (std::sscanf(w.c_str(), " %*[([] %" SCNd64 " , %" SCNd64, &left, &right) != 2 || left < 1 || right != 0) {
      a.Fail("window_size", "a causal window (W, 0) with W >= 1, or None");
    }
    j["window_size"] = left;
    if (const std::string f = a.Get("window_attn_skip_freq").value_or("None"); f != "None") {
      if (!f.empty() && f.front() == '[') {
        // The list form: one 0 or 1 a layer, 1 where it attends within the window.
        Json l = Json::array();
        for (const std::string& v : a.List("window_attn_skip_freq")) {
          if (v != "0" && v != "1") a.Fail("window_attn_skip_freq", "a list of 0s and 1s (1: the layer slides), an integer N or None");
          l.push_back(v == "1" ? 1 : 0);
        }
        j["window_attn_skip_freq"] = l;
      } else if (const auto n = a.Int("window_attn_skip_freq"); n && *n >= 1) {
        j["window_attn_skip_freq"] = *n;
      } else {
        a.Fail("window_attn_skip_freq", "an integer N >= 1 (every N-th layer attends to the whole sequence), a list of "
                                        "0s and 1s, or None");
      }
    }
  }
  j["dropout"] = a.Number("hidden_dropout").value_or(0.1) > 0 || a.Number("attention_dropout").value_or(0.1) > 0;
  if (const auto e = a.Int("num_experts"); e && *e > 1) {
    j["num_experts"] = *e;
    j["moe_router_topk"] = a.Int("moe_router_topk").value_or(2);
    j["moe_ffn_hidden_size"] = a.Int("moe_ffn_hidden_size").value_or(j["ffn_hidden_size"].get<std::int64_t>());
    if (const auto s = a.Int("moe_shared_expert_intermediate_size")) j["moe_shared_expert_intermediate_size"] = *s;
    MegatronRouterJson(a, &j);
    // moe_layer_freq: an int N (every N-th layer) or a per-layer list of 0/1.
    const std::string freq = a.Get("moe_layer_freq").value_or("");
    if (freq.empty()) {
      // every layer MoE (Megatron-LM's default 1)
    } else if (freq.front() == '[') {
      const auto pattern = MoeLayerPatternOf(a.List("moe_layer_freq"));
      if (!pattern) {
        a.Fail("moe_layer_freq", "leading dense layers (0), then MoE (1) every N-th layer counted from layer 0 or "
                                 "from layer 1 (the patterns the model's layer step describes)");
      }
      j["moe_first_k_dense_layers"] = pattern->first_k_dense;
      if (pattern->step > 1) j[pattern->from_layer0 ? "moe_layer_freq" : "moe_layer_step"] = pattern->step;
    } else if (const std::int64_t n = a.RequiredInt("moe_layer_freq"); n != 1) {
      j["moe_layer_freq"] = n;  // Megatron-LM's layer i is MoE when i % N == 0, as the model's moe_layer_freq
    }
  }
  if (a.Flag("multi_latent_attention")) {
    for (const char* k : {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}) {
      if (const auto v = a.Int(k)) j[k] = *v;
    }
  }
  if (const auto mtp = a.Int("mtp_num_layers")) j["mtp_num_layers"] = *mtp;
  return j;
}

void MegatronPrecision(const MegatronArgs& a, ParallelConfig* c) {
  // Megatron-LM asserts that not both are set (validate_args): a dump with both was edited.
  if (a.RequiredFlag("fp16") && a.RequiredFlag("bf16")) a.Fail("bf16", "False beside fp16 True (Megatron-LM refuses both)");
  c->precision = a.RequiredFlag("fp16") ? Precision::kFp16 : a.RequiredFlag("bf16") ? Precision::kBf16 : Precision::kFp32;
  // As on the command line (ApplyPrecisionArgs): the low-precision formats are modelled beside bf16.
  if (c->precision == Precision::kFp16 && (a.Get("fp4") || a.Get("fp8"))) {
    a.Fail("fp16", fmt::format("False beside {} {} (fp8/fp4 GEMMs with fp16 weights and loss scaling are not "
                               "modelled: the formats run beside bf16)",
                               a.Get("fp4") ? "fp4" : "fp8", *a.Get(a.Get("fp4") ? "fp4" : "fp8")));
  }
  if (a.Get("fp4")) {
    if (*a.Get("fp4") != "e2m1") a.Fail("fp4", "None or e2m1");
    c->precision = Precision::kNvfp4;
    return;
  }
  if (!a.Get("fp8")) return;
  if (*a.Get("fp8") != "hybrid" && *a.Get("fp8") != "e4m3") a.Fail("fp8", "None, hybrid or e4m3");
  const std::string recipe = a.Get("fp8_recipe").value_or("delayed");
  if (recipe == "mxfp8") {
    c->precision = Precision::kMxfp8;
  } else {
    c->precision = Precision::kFp8;
    if (recipe == "delayed") c->fp8_recipe = Fp8Recipe::kDelayed;
    else if (recipe == "tensorwise") c->fp8_recipe = Fp8Recipe::kTensorwise;
    else if (recipe == "blockwise") c->fp8_recipe = Fp8Recipe::kBlockwise;
    else a.Fail("fp8_recipe", "delayed, tensorwise, blockwise or mxfp8");
  }
  const std::string format = a.Get("fp8").value_or("");
  c->fp8_format = format == "e4m3" ? Fp8Format::kE4m3 : format == "hybrid" ? Fp8Format::kHybrid : Fp8Format::kDefault;
  if (const auto h = a.Bounded("fp8_amax_history_len", 1, kMaxDegree)) c->fp8_amax_history_len = *h;
  c->fp8_param_gather = a.Flag("fp8_param_gather");
}

void MegatronRecompute(const MegatronArgs& a, const Model& m, ParallelConfig* c, std::vector<std::string>* notes) {
  const auto g = a.Get("recompute_granularity");
  if (!g) {
    c->recompute = Recompute::kNone;
  } else if (*g == "full") {
    c->recompute = Recompute::kFull;
    const std::string method = a.Get("recompute_method").value_or("uniform");
    const std::int64_t n = a.Int("recompute_num_layers").value_or(1);
    if (method == "block" && n >= 0) {
      c->recompute_block_layers = n;  // the first n layers of each chunk (simulate's --recompute-method block)
    } else if (method != "uniform" || n != 1) {
      notes->push_back(fmt::format("recompute_method {} with recompute_num_layers {} simulated as full recompute of "
                                   "every layer (groups of layers checkpointed as one are not modelled)", method, n));
    }
  } else if (*g == "selective") {
    c->recompute = Recompute::kSelective;
    const auto names = a.List("recompute_modules");
    try {
      if (!names.empty()) c->recompute_modules = ParseRecomputeModules(names, "argument recompute_modules");
      RequireRecomputeModules(m, c->recompute_modules, "argument recompute_modules");
    } catch (const InputError& e) {
      a.Fail("recompute_modules", std::string("modules the simulator recomputes (") + e.what() + ")");
    }
  } else {
    a.Fail("recompute_granularity", "None, full or selective");
  }
  // Fine-grained activation offloading (Megatron-Core, 2025-26).
  if (a.Flag("fine_grained_activation_offloading")) {
    const auto names = a.List("offload_modules");
    try {
      c->offload_modules = ParseOffloadModules(names, "argument offload_modules");
      // Megatron offloads expert_fc1/moe_act in MoE layers only; a dense model's run ignores them.
      if (!m.moe.enabled()) c->offload_modules &= ~static_cast<unsigned>(kOffloadExpertFc1 | kOffloadMoeAct);
    } catch (const InputError& e) {
      a.Fail("offload_modules", std::string("modules the simulator offloads (") + e.what() + ")");
    }
  }
  if (c->PartialRecompute() && c->offload_modules != 0) {
    notes->push_back(fmt::format("recompute_method block with recompute_num_layers {} beside activation offloading "
                                 "simulated as full recompute of every layer (the two together are not modelled)",
                                 c->recompute_block_layers));
    c->recompute_block_layers = -1;
  }
}

/// Data-parallel sharding: Megatron's distributed optimizer (ZeRO-1), Megatron-FSDP, FSDP2.
int MegatronZeroStage(const MegatronArgs& a) {
  if (a.Flag("use_torch_fsdp2")) return 3;
  if (a.Flag("use_megatron_fsdp") || a.Flag("use_custom_fsdp")) {
    const std::string s = a.Get("data_parallel_sharding_strategy").value_or("optim_grads_params");
    return s == "optim_grads_params" ? 3 : s == "optim_grads" ? 2 : s == "optim" ? 1 : 0;
  }
  return a.RequiredFlag("use_distributed_optimizer") ? 1 : 0;
}

namespace {

/// The parallel sizes and the world size (checked against each other and a printed
/// data_parallel_size), into `c`; `gpus` receives the world size.
void MegatronGrid(const MegatronArgs& a, const Model& m, std::int64_t* gpus, ParallelConfig* c) {
  c->tp = a.RequiredBounded("tensor_model_parallel_size", 1, kMaxDegree);
  c->pp = a.RequiredBounded("pipeline_model_parallel_size", 1, kMaxDegree);
  c->cp = a.Bounded("context_parallel_size", 1, kMaxDegree).value_or(1);
  if (m.moe.enabled()) {  // Megatron-LM prints an expert TP size (its default: tp) for dense models too
    c->ep = a.Bounded("expert_model_parallel_size", 1, kMaxDegree).value_or(1);
    c->etp = a.Bounded("expert_tensor_parallel_size", 1, kMaxDegree).value_or(0);
  }
  *gpus = a.RequiredBounded("world_size", 1, kMaxDegree);
  // Each size is at most 2^24, so tp x pp fits, and once it is at most world_size so does x cp.
  const std::int64_t tp_pp = c->tp * c->pp;
  if (tp_pp > *gpus || tp_pp * c->cp > *gpus || *gpus % (tp_pp * c->cp) != 0) {
    a.Fail("world_size", fmt::format("a multiple of tensor x pipeline x context parallel sizes ({} x {} x {})", c->tp, c->pp, c->cp));
  }
  c->dp = *gpus / (c->tp * c->pp * c->cp);
  // Megatron-LM derives data_parallel_size from the others (initialize_model_parallel): one that
  // disagrees is an edited dump.
  if (const auto dp = a.Int("data_parallel_size"); dp && *dp != c->dp) {
    a.Fail("data_parallel_size", fmt::format("world_size / (tensor x pipeline x context parallel) = {} / ({} x {} x {}) = {}",
                                             *gpus, c->tp, c->pp, c->cp, c->dp));
  }
}

/// The virtual pipeline size: as printed, else from the layers per virtual stage.
void MegatronVirtualStages(const MegatronArgs& a, const Model& m, bool embedding_slot, bool loss_slot,
                           ParallelConfig* c) {
  // The virtual size as printed, else from the layers per virtual stage. Megatron-LM sets the
  // first from the second, counting a slot for the embedding and one for the loss where
  // account_for_*_in_pipeline_split is set (older releases with floor division): where both are
  // printed and that count divides evenly, a disagreement is an edited dump; otherwise the
  // printed size stands.
  const auto vp = a.Bounded("virtual_pipeline_model_parallel_size", 1, m.num_layers);
  if (const auto per = a.Bounded("num_layers_per_virtual_pipeline_stage", 1, m.num_layers)) {
    const std::int64_t slots = m.num_layers + (embedding_slot ? 1 : 0) + (loss_slot ? 1 : 0);
    const bool even = c->pp <= slots && slots % (*per * c->pp) == 0;
    if (!vp && !even) a.Fail("num_layers_per_virtual_pipeline_stage", "a divisor of num_layers / pp");
    if (even) c->vp = slots / (*per * c->pp);
    if (vp && even && *vp != c->vp) {
      a.Fail("virtual_pipeline_model_parallel_size",
             fmt::format("{} / (num_layers_per_virtual_pipeline_stage x pp) = {} / ({} x {}) = {}",
                         slots > m.num_layers ? "(num_layers + the embedding and loss slots)" : "num_layers", slots,
                         *per, c->pp, c->vp));
    }
  }
  if (vp) c->vp = *vp;
}

/// The loss's and attention's kernels and the context-parallel communication type.
void MegatronKernels(const MegatronArgs& a, ParallelConfig* c, std::vector<std::string>* notes) {
  // --cross-entropy-loss-fusion (absent before Megatron-Core 0.8: off) and its impl (native
  // before the te one came in).
  if (a.Flag("cross_entropy_loss_fusion")) {
    const std::string impl = a.Get("cross_entropy_fusion_impl").value_or("native");
    if (impl != "native" && impl != "te") a.Fail("cross_entropy_fusion_impl", "native or te");
    c->cross_entropy = impl == "te" ? CrossEntropyImpl::kTe : CrossEntropyImpl::kNative;
  }
  // Fused attention unless Megatron's own (local) or the unfused backend was chosen.
  const std::string backend = a.Get("attention_backend").value_or("");
  c->flash_attention = backend.find("unfused") == std::string::npos && backend.find("local") == std::string::npos &&
                      (a.Get("transformer_impl").value_or("transformer_engine") != "local" || a.Flag("use_flash_attn"));
  // fp32 training: the fused kernels take 16-bit inputs, so attention runs unfused.
  if (c->precision == Precision::kFp32 && c->flash_attention) {
    c->flash_attention = false;
    notes->push_back("fp32 training: attention simulated unfused (the fused attention kernels take 16-bit inputs)");
  }
  // cp_comm_type: one type, or a list of one per layer (Megatron-LM's default prints ['p2p']).
  if (const auto cp = a.Get("cp_comm_type")) {
    std::vector<std::string> types = !cp->empty() && cp->front() == '[' ? a.List("cp_comm_type") : std::vector<std::string>{*cp};
    if (types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& x) { return x != types[0]; })) {
      a.Fail("cp_comm_type", "one communication type for every layer");
    }
    try {
      c->cp_comm = ParseCpComm(types[0] == "all_gather" ? "allgather" : types[0]);
    } catch (const InputError&) {
      a.Fail("cp_comm_type", "p2p, all_gather, a2a or a2a+p2p");
    }
  }
}

/// The MoE token dispatcher, capacity factor, EP overlap and forced balancing.
void MegatronMoeRouting(const MegatronArgs& a, ParallelConfig* c) {
  const std::string d = a.Get("moe_token_dispatcher_type").value_or("allgather");
  c->moe_dispatcher = d == "flex" ? MoeDispatcher::kFlex : d == "alltoall" ? MoeDispatcher::kAllToAll : MoeDispatcher::kAllGather;
  if (d != "flex" && d != "alltoall" && d != "allgather") a.Fail("moe_token_dispatcher_type", "allgather, alltoall or flex");
  c->moe_capacity_factor = a.Number("moe_expert_capacity_factor").value_or(0);
  if (c->moe_capacity_factor < 0) a.Fail("moe_expert_capacity_factor", "None or a positive number");
  c->moe_a2a_overlap = a.Flag("overlap_moe_expert_parallel_comm");
  c->moe_force_load_balancing = a.Flag("moe_router_force_load_balancing");
}

}  // namespace

ParallelConfig MegatronConfig(const MegatronArgs& a, const Model& m, std::int64_t* gpus, std::vector<std::string>* notes) {
  ParallelConfig c;
  MegatronGrid(a, m, gpus, &c);
  const bool embedding_slot = a.Flag("account_for_embedding_in_pipeline_split");
  const bool loss_slot = a.Flag("account_for_loss_in_pipeline_split");
  MegatronVirtualStages(a, m, embedding_slot, loss_slot, &c);
  c.schedule = c.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  c.micro_batch_size = a.RequiredBounded("micro_batch_size", 1, kMaxDegree);
  c.global_batch_size = a.RequiredBounded("global_batch_size", 1, std::int64_t{1} << 40);
  c.seq_length = a.RequiredBounded("seq_length", 1, kMaxDegree);
  c.sequence_parallel = a.RequiredFlag("sequence_parallel");
  MegatronRecompute(a, m, &c, notes);
  c.zero_stage = MegatronZeroStage(a);
  c.overlap_grad_reduce = a.Flag("overlap_grad_reduce");
  c.overlap_param_gather = a.Flag("overlap_param_gather");
  // fp32 gradient buffers exactly when accumulate_allreduce_grads_in_fp32 (validate_args settles it
  // before the dump: True for bf16 with fp32 main grads).
  c.fp32_main_grads = a.RequiredFlag("accumulate_allreduce_grads_in_fp32");
  MegatronPrecision(a, &c);
  c.tp_comm_overlap = a.Flag("tp_comm_overlap");
  MegatronKernels(a, &c, notes);
  if (m.moe.enabled()) MegatronMoeRouting(a, &c);
  c.first_stage_layers = a.Bounded("decoder_first_pipeline_num_layers", 0, m.num_layers).value_or(-1);
  c.last_stage_layers = a.Bounded("decoder_last_pipeline_num_layers", 0, m.num_layers).value_or(-1);
  c.embedding_slots = embedding_slot || loss_slot;
  if (a.Get("pipeline_model_parallel_layout")) a.Fail("pipeline_model_parallel_layout", "None (a layout string is not read yet)");
  // Megatron-Core: whole pipeline messages; its non-interleaved 1F1B waits on each transfer.
  c.scatter_gather = false;
  c.p2p_blocking = c.pp > 1 && c.vp == 1;
  return c;
}

/// The iteration number of a Megatron-LM training line (" [date] iteration       10/    1000 |"),
/// if it has one.
std::optional<std::int64_t> IterationNumber(const std::string& l) {
  for (auto at = l.find("iteration "); at != std::string::npos; at = l.find("iteration ", at + 1)) {
    const auto digits = l.find_first_not_of(' ', at + 10);
    const auto end = digits == std::string::npos ? std::string::npos : l.find_first_not_of("0123456789", digits);
    if (end == std::string::npos || end == digits || end - digits > 18 || l[end] != '/') continue;
    return std::stoll(l.substr(digits, end - digits));
  }
  return std::nullopt;
}

/// Iteration times and memory peaks from the lines after the argument dump (line `dump_line`,
/// 1-based; lines above it belong to an earlier run in the same file and are left out, with a
/// note). Iteration numbers must rise (a line repeated word for word is read once): one that
/// goes back is a second run appended without its own dump (InputError). An iteration logged at
/// another global batch size than the dump's is not the configured step and is left out, with a
/// note: a ramp-up where the dump has rampup_batch_size (`rampup`), else a sign of another run's
/// lines.
void ReadMegatronMeasurements(const std::vector<std::string>& lines, const std::string& path, std::size_t dump_line,
                              bool rampup, LoggedRun* run) {
  std::size_t other_batch = 0, before = 0, repeated = 0;
  std::optional<std::int64_t> last_iteration;
  std::size_t last_line = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const auto t = FieldAfter(l, "elapsed time per iteration (ms):");
    if (i + 1 < dump_line) {
      before += t ? 1 : 0;
      continue;
    }
    if (t) {
      if (const auto it = IterationNumber(l)) {
        // The same line twice (a console captured into the file too) is one iteration.
        if (last_iteration && *it == *last_iteration && l == lines[last_line - 1]) {
          ++repeated;
          continue;
        }
        if (last_iteration && *it <= *last_iteration) {
          FailAt(path, i + 1, fmt::format("iteration {} after iteration {} (line {}): a second run appended without its own "
                                          "argument dump; expected one run per log (split it where the second begins)",
                                          *it, *last_iteration, last_line));
        }
        last_iteration = it;
        last_line = i + 1;
      }
      const double step_s = PositiveNumber(*t, path, i + 1, "elapsed time per iteration (ms)") / 1000.0;
      const auto g = FieldAfter(l, "global batch size:");
      if (g && PositiveNumber(*g, path, i + 1, "global batch size") != static_cast<double>(run->config.global_batch_size)) {
        ++other_batch;
      } else {
        run->step_times_s.push_back(step_s);
      }
    }
    if (l.find("memory (MB)") == std::string::npos) continue;
    const auto a = FieldAfter(l, "max allocated:");
    if (!a) FailAt(path, i + 1, "a \"memory (MB)\" line without \"max allocated: N\", expected Megatron-LM's report_memory line");
    const double allocated = PositiveNumber(*a, path, i + 1, "max allocated (MB)") * kMiB;
    run->max_allocated_bytes = std::max(run->max_allocated_bytes.value_or(0.0), allocated);
    if (const auto r = FieldAfter(l, "max reserved:")) {
      const double b = PositiveNumber(*r, path, i + 1, "max reserved (MB)") * kMiB;
      run->max_reserved_bytes = std::max(run->max_reserved_bytes.value_or(0.0), b);
    }
  }
  if (repeated > 0) {
    run->notes.push_back(fmt::format("{} iteration line{} repeated word for word, read once", repeated,
                                     repeated == 1 ? "" : "s"));
  }
  if (before > 0) {
    run->notes.push_back(fmt::format("{} iteration line{} above the argument dump (line {}; an earlier run's) left out", before,
                                     before == 1 ? "" : "s", dump_line));
  }
  if (other_batch == 0) return;
  const std::string why = rampup ? "batch-size ramp-up" : "the dump has no rampup_batch_size: another run's lines?";
  if (run->step_times_s.empty()) {
    throw InputError(fmt::format("{}: all {} logged iterations ran at another global batch size than the argument "
                                 "dump's {} ({}): expected at least one at {}",
                                 path, other_batch, run->config.global_batch_size, why, run->config.global_batch_size));
  }
  run->notes.push_back(fmt::format("{} logged iteration{} at another global batch size than {} ({}) left out", other_batch,
                                   other_batch == 1 ? "" : "s", run->config.global_batch_size, why));
}

LoggedRun ParseMegatron(const std::vector<std::string>& lines, const std::string& path, const LogDefaults& d) {
  LoggedRun run;
  run.file = path;
  run.format = "megatron";
  const MegatronArgs a(lines, path);
  if (a.dumps() > 1) {
    throw InputError(fmt::format("{}: argument dumps on lines {} and {}: a restarted job's log holds more than one run; "
                                 "expected one (split the log where the second dump begins)", path, a.dump_line(0), a.dump_line(1)));
  }
  if (d.model) {
    run.model = *d.model;
    run.notes.push_back("the model from --model (" + d.model->name + "), not the one the argument dump describes");
  } else {
    std::optional<std::int64_t> padded;
    for (std::size_t i = 0; i < lines.size() && !padded; ++i) {
      if (lines[i].find("> padded vocab (size:") == std::string::npos) continue;
      const auto p = FieldAfter(lines[i], "(new size:");
      const auto v = FieldAfter(lines[i], "(size:");
      const auto n = FieldAfter(lines[i], ") with ");
      if (!p || !v || !n || n->find(" dummy tokens") == std::string::npos) {
        FailAt(path, i + 1, "expected \"> padded vocab (size: V) with N dummy tokens (new size: P)\"");
      }
      padded = static_cast<std::int64_t>(PositiveNumber(p->substr(0, p->find(')')), path, i + 1, "padded vocab (new size)"));
      // Megatron-LM prints V, the N rows it adds and P = V + N: a line that does not add up was
      // not printed by it.
      const auto size = static_cast<std::int64_t>(PositiveNumber(v->substr(0, v->find(')')), path, i + 1, "padded vocab (size)"));
      const std::string dummy = n->substr(0, n->find(' '));
      const auto added = dummy == "0" ? 0 : static_cast<std::int64_t>(PositiveNumber(dummy, path, i + 1, "dummy tokens"));
      if (size + added != *padded) {
        FailAt(path, i + 1, fmt::format("padded vocab: got size {} with {} dummy tokens and new size {}, expected the new "
                                        "size to be the size plus the dummy tokens ({})",
                                        size, added, *padded, size + added));
      }
    }
    run.model = ModelFromJson(MegatronModelJson(a, std::filesystem::path(path).stem().string(), padded), path);
    if (const auto preset = SamePreset(run.model)) {
      run.notes.push_back("the argument dump's model is the preset " + *preset + "'s shape");
      run.model.name = *preset;
      // The preset says how its router was trained (Qwen3's: global-batch balancing).
      run.model.moe.router_global_batch_balance = LoadModel(*preset).moe.router_global_batch_balance;
    }
  }
  run.config = MegatronConfig(a, run.model, &run.gpus, &run.notes);
  if (d.gpus && *d.gpus != run.gpus) {
    throw InputError(fmt::format("{}: argument world_size: {} GPUs, but --gpus {} (leave --gpus out for a Megatron-LM log)",
                                 path, run.gpus, *d.gpus));
  }
  if (run.config.pp > 1) {
    run.notes.push_back(run.config.vp > 1 ? "Megatron-Core's pipeline transfers (whole messages)"
                                          : "Megatron-Core's pipeline transfers (whole messages; the non-interleaved "
                                            "schedule waits on each)");
  }
  ReadMegatronMeasurements(lines, path, a.dump_line(0), a.Get("rampup_batch_size").has_value(), &run);
  return run;
}

// ----- torchtitan -----

/// The job configuration torchtitan prints with --job.print_config: the JSON object after
/// "Running with configs:", which may span lines (each possibly prefixed "[rank0]:").
Json TitanConfig(const std::vector<std::string>& lines, const std::string& path, std::size_t* at_line) {
  const std::string key = "Running with configs:";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto at = lines[i].find(key);
    if (at == std::string::npos) continue;
    *at_line = i + 1;
    std::string text = lines[i].substr(at + key.size());
    int depth = 0;
    bool started = false;
    for (std::size_t k = i;; ++k) {
      const std::string part = k == i ? text : lines[k].substr(lines[k].rfind("[rank", 0) == 0 && lines[k].find("]:") != std::string::npos
                                                                  ? lines[k].find("]:") + 2
                                                                  : 0);
      if (k > i) text += "\n" + part;
      for (char ch : part) {
        if (ch == '{') ++depth, started = true;
        if (ch == '}') --depth;
      }
      if (started && depth <= 0) break;
      if (k + 1 >= lines.size()) FailAt(path, i + 1, "the job configuration after \"Running with configs:\" does not end");
    }
    return ParseJsonText(text, fmt::format("{}:{} (the job configuration)", path, i + 1));
  }
  throw InputError(path + ": a torchtitan log without its job configuration: expected the \"Running with configs: {...}\" "
                   "that torchtitan v0.2 prints with --job.print_config (the parallelism and batch are read from it)");
}

/// A preset for torchtitan's model name and flavor.
std::optional<std::string> TitanPreset(const std::string& name, const std::string& flavor) {
  static const std::map<std::pair<std::string, std::string>, std::string> presets = {
      {{"llama3", "8B"}, "llama3-8b"},        {{"llama3", "70B"}, "llama3-70b"},
      {{"llama3", "405B"}, "llama3.1-405b"},  {{"qwen3", "30B-A3B"}, "qwen3-30b-a3b"},
      {{"qwen3", "235B-A22B"}, "qwen3-235b-a22b"}, {{"deepseek_v3", "671B"}, "deepseek-v3"}};
  const auto it = presets.find({name, flavor});
  if (it == presets.end()) return std::nullopt;
  return it->second;
}

std::int64_t TitanInt(const Json& cfg, const std::string& section, const std::string& key, std::int64_t fallback,
                      const std::string& where) {
  if (!cfg.contains(section) || !cfg[section].is_object() || !cfg[section].contains(key)) return fallback;
  const Json& v = cfg[section][key];
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t{1} << 40) ||
      v.get<std::int64_t>() < -1 || v.get<std::int64_t>() > std::int64_t{1} << 40) {
    throw InputError(fmt::format("{}: {}.{}: got {}, expected an integer from -1 to 2^40", where, section, key, JsonForMessage(v)));
  }
  return v.get<std::int64_t>();
}

bool TitanBool(const Json& cfg, const std::string& section, const std::string& key, const std::string& where) {
  if (!cfg.contains(section) || !cfg[section].is_object() || !cfg[section].contains(key)) return false;
  const Json& v = cfg[section][key];
  if (!v.is_boolean()) throw InputError(fmt::format("{}: {}.{}: got {}, expected true or false", where, section, key, JsonForMessage(v)));
  return v.get<bool>();
}

std::string TitanString(const Json& cfg, const std::string& section, const std::string& key, const std::string& fallback,
                        const std::string& where = "") {
  if (!cfg.contains(section) || !cfg[section].is_object() || !cfg[section].contains(key)) return fallback;
  const Json& v = cfg[section][key];
  if (!v.is_string()) {
    if (where.empty()) return fallback;
    throw InputError(fmt::format("{}: {}.{}: got {}, expected a string", where, section, key, JsonForMessage(v)));
  }
  return v.get<std::string>();
}

/// The pipeline split as torchtitan v0.2 makes it (distributed/pipeline_parallel.py,
/// pipeline_llm and generate_llm_fqn_per_model_part): the embedding and the output weigh
/// first_stage_less_layers and last_stage_less_layers layers (1 by default; 0 or 1, equal, is what
/// the simulator splits), and L plus those slots are spread over the stages as evenly as they go,
/// the remainder to the first (ParallelConfig::embedding_slots with even_chunks). Interleaved1F1B
/// runs ceil((L + slots) / P) stages with pipeline_parallel_layers_per_stage P, else two per rank;
/// 1F1B and GPipe one per rank.
void TitanPipelineLayout(const Json& cfg, const std::string& where, LoggedRun* run) {
  ParallelConfig& c = run->config;
  const std::int64_t layers = run->model.num_layers;
  const std::int64_t first = TitanInt(cfg, "parallelism", "pipeline_parallel_first_stage_less_layers", 1, where);
  const std::int64_t last = TitanInt(cfg, "parallelism", "pipeline_parallel_last_stage_less_layers", 1, where);
  if (first < 0 || last < 0 || first > 1 || last > 1 || first != last) {
    throw InputError(fmt::format("{}: parallelism.pipeline_parallel_first/last_stage_less_layers: got {} and {}, expected "
                                 "both 0 or both 1 (the splits the simulator takes)", where, first, last));
  }
  c.embedding_slots = first == 1;
  c.even_chunks = true;
  if (c.schedule != Schedule::kInterleaved) return;
  const std::int64_t per_stage = TitanInt(cfg, "parallelism", "pipeline_parallel_layers_per_stage", 0, where);
  if (per_stage == 0) {
    c.vp = 2;
    run->notes.push_back("Interleaved1F1B with torchtitan's default of two stages per rank");
    return;
  }
  if (per_stage < 1 || per_stage > layers) {
    throw InputError(fmt::format("{}: parallelism.pipeline_parallel_layers_per_stage: got {}, expected 1 to num_layers = {}",
                                 where, per_stage, layers));
  }
  const std::int64_t stages = (layers + first + last + per_stage - 1) / per_stage;
  if (stages % c.pp != 0 || stages / c.pp < 2) {
    throw InputError(fmt::format("{}: parallelism.pipeline_parallel_layers_per_stage {}: {} stages, expected a multiple "
                                 "of the {} pipeline ranks with two or more each (as torchtitan requires)", where, per_stage,
                                 stages, c.pp));
  }
  c.vp = stages / c.pp;
}

void TitanParallelism(const Json& cfg, const std::string& where, const LogDefaults& d, LoggedRun* run) {
  ParallelConfig& c = run->config;
  const std::int64_t replicate = TitanInt(cfg, "parallelism", "data_parallel_replicate_degree", 1, where);
  std::int64_t shard = TitanInt(cfg, "parallelism", "data_parallel_shard_degree", -1, where);
  c.tp = TitanInt(cfg, "parallelism", "tensor_parallel_degree", 1, where);
  c.pp = TitanInt(cfg, "parallelism", "pipeline_parallel_degree", 1, where);
  c.cp = TitanInt(cfg, "parallelism", "context_parallel_degree", 1, where);
  c.ep = TitanInt(cfg, "parallelism", "expert_parallel_degree", 1, where);
  c.etp = TitanInt(cfg, "parallelism", "expert_tensor_parallel_degree", 0, where);
  if (c.etp < 0 || c.etp > kMaxDegree) throw InputError(fmt::format("{}: parallelism.expert_tensor_parallel_degree: got {}, expected 1 to {}", where, c.etp, kMaxDegree));
  for (const std::int64_t v : {replicate, c.tp, c.pp, c.cp, c.ep, shard == -1 ? 1 : shard}) {
    if (v < 1 || v > kMaxDegree) {
      throw InputError(fmt::format("{}: parallelism: got a degree of {}, expected 1 to {} (data_parallel_shard_degree "
                                   "-1: the rest)", where, v, kMaxDegree));
    }
  }
  const std::int64_t others = CheckedProduct(CheckedProduct(replicate, c.tp, where), CheckedProduct(c.pp, c.cp, where), where);
  if (shard == -1) {
    if (!d.gpus) throw InputError(where + ": parallelism.data_parallel_shard_degree is -1 (the rest of the GPUs): pass --gpus N");
    if (*d.gpus % others != 0) throw InputError(fmt::format("{}: --gpus {} is not a multiple of the other degrees' product {}", where, *d.gpus, others));
    shard = *d.gpus / others;
  }
  run->gpus = CheckedProduct(others, shard, where + ": parallelism");
  if (d.gpus && *d.gpus != run->gpus) {
    throw InputError(fmt::format("{}: the parallelism degrees make {} GPUs, but --gpus {}", where, run->gpus, *d.gpus));
  }
  c.dp = CheckedProduct(replicate, shard, where);
  // FSDP2: data_parallel_shard_degree ranks with the context-parallel ones (torchtitan's
  // fsdp_enabled: dp_shard > 1 or cp > 1; FSDP shards over dp_shard x cp) hold the parameters
  // sharded; HSDP replicates them over data_parallel_replicate_degree (ParallelConfig::dp_shard).
  const bool fsdp = shard > 1 || c.cp > 1;
  c.zero_stage = fsdp ? 3 : 0;
  // torchtitan trains fp32 parameters with bf16 compute (FSDP2's MixedPrecisionPolicy, or
  // autocast under DDP): the fp32 shard is the optimizer's master (OptimizerImpl::kTorchFsdp).
  c.optimizer_impl = OptimizerImpl::kTorchFsdp;
  if (fsdp && replicate > 1) c.dp_shard = CheckedProduct(shard, c.cp, where);
  // With pipeline parallelism torchtitan keeps the gathered parameters through a schedule
  // (fsdp_reshard_after_forward "default": not pp_enabled) and the pipeline stage reduce-scatters
  // after the schedule's last backward: ZeRO-1's traffic (kFsdp2PipelineEquivalent), once a
  // gradient-accumulation step (pipeline flush, TitanBatchAndPrecision). "always" gathers
  // per micro-batch, ZeRO-3 under a pipeline, which the simulator refuses with its reason.
  const std::string reshard = TitanString(cfg, "parallelism", "fsdp_reshard_after_forward", "default", where);
  if (reshard != "default" && reshard != "always" && reshard != "never") {
    throw InputError(where + ": parallelism.fsdp_reshard_after_forward: got \"" + reshard + "\", expected default, always or never");
  }
  if (c.zero_stage == 3 && c.pp > 1 && reshard != "always") {
    c.zero_stage = 1;
    c.overlap_grad_reduce = false;
    run->notes.push_back(std::string("FSDP2 with pipeline parallelism simulated as ") + kFsdp2PipelineEquivalent);
  } else if (c.zero_stage == 3 && c.pp > 1) {
    run->notes.push_back("fsdp_reshard_after_forward = \"always\" with pipeline parallelism: FSDP2 gathers the "
                         "parameters again for every micro-batch, ZeRO-3 under a pipeline, which is not modelled");
  } else if (c.zero_stage == 3 && reshard == "never") {
    // Without a pipeline, "never" keeps the gathered parameters from the forward to the backward:
    // FSDP's SHARD_GRAD_OP, which the simulator runs as ZeRO-2 (as validate reads SHARD_GRAD_OP rows).
    c.zero_stage = 2;
    run->notes.push_back("fsdp_reshard_after_forward = \"never\": parameters kept gathered from the forward to the "
                         "backward (FSDP's SHARD_GRAD_OP), simulated as ZeRO-2");
  }
  const std::string schedule = TitanString(cfg, "parallelism", "pipeline_parallel_schedule", "1F1B");
  if (c.pp > 1) {
    if (schedule == "1F1B") c.schedule = Schedule::k1F1B;
    else if (schedule == "GPipe") c.schedule = Schedule::kGpipe;
    else if (schedule == "Interleaved1F1B") c.schedule = Schedule::kInterleaved;
    else throw InputError(where + ": parallelism.pipeline_parallel_schedule: got \"" + schedule + "\", expected 1F1B, GPipe or Interleaved1F1B");
    TitanPipelineLayout(cfg, where, run);
  }
  // torchtitan's tensor parallelism shards the sequence between its regions (SequenceParallel on
  // the norms, Shard(1) layouts: parallelize.py apply_tp), and its async TP does nothing at tp 1.
  c.sequence_parallel = c.tp > 1;
  c.tp_comm_overlap = TitanBool(cfg, "parallelism", "enable_async_tensor_parallel", where) && c.tp > 1;
  // torchtitan's loss: F.cross_entropy on the logits cast to fp32 (components/loss.py); with
  // training.compile it is compiled, whose fused passes are not modelled (counted as eager).
  c.cross_entropy = CrossEntropyImpl::kTorch;
}

/// activation_checkpoint (v0.2): mode none, full or selective; selective_ac_option "op" (per-op:
/// matmul and attention outputs kept, the rest recomputed) or N (every N-th layer checkpointed).
void TitanCheckpointing(const Json& cfg, const std::string& where, LoggedRun* run) {
  ParallelConfig& c = run->config;
  const std::string ac = TitanString(cfg, "activation_checkpoint", "mode", "selective", where);
  if (ac != "full" && ac != "none" && ac != "selective") {
    throw InputError(where + ": activation_checkpoint.mode: got \"" + ac + "\", expected none, selective or full");
  }
  c.recompute = ac == "full" ? Recompute::kFull : ac == "none" ? Recompute::kNone : Recompute::kSelective;
  if (c.recompute != Recompute::kSelective) return;
  const std::string opt = TitanString(cfg, "activation_checkpoint", "selective_ac_option", "2", where);
  if (opt == "op") {
    const std::string why = TorchOpCheckpointingUnmodelled(run->model);
    if (why.empty()) {
      c.recompute_modules = kRecomputeTorchOps;  // simulate's --selective-ac-option op
      return;
    }
    c.recompute_modules = kRecomputeLayernorm;
    run->notes.push_back("torchtitan's per-op selective checkpointing is not modelled for " + why +
                         ": simulated as recomputing the layer norms");
    return;
  }
  if (opt.empty() || opt.find_first_not_of("0123456789") != std::string::npos || opt.size() > 6) {
    throw InputError(where + ": activation_checkpoint.selective_ac_option: got \"" + opt + "\", expected op or an integer "
                     "from 0 to 999999");
  }
  c.recompute = Recompute::kFull;  // 0 and 1: every block (torchtitan's "not ac_freq or count % ac_freq == 0")
  if (std::stoi(opt) > 1) c.recompute_layer_interval = std::stoi(opt);  // simulate's --selective-ac-option N
}

/// The float8 converter's section: v0.2's quantize.linear.float8, else v0.1's float8 (its key
/// into `key`); null when the configuration has neither.
const Json* TitanFloat8Section(const Json& cfg, std::string* key) {
  if (cfg.contains("quantize") && cfg["quantize"].is_object() && cfg["quantize"].contains("linear") &&
      cfg["quantize"]["linear"].is_object() && cfg["quantize"]["linear"].contains("float8") &&
      cfg["quantize"]["linear"]["float8"].is_object()) {
    *key = "quantize.linear.float8";
    return &cfg["quantize"]["linear"]["float8"];
  }
  if (cfg.contains("float8") && cfg["float8"].is_object()) {
    *key = "float8";
    return &cfg["float8"];
  }
  return nullptr;
}

/// model.converters: v0.2's quantize.linear.float8 / quantize.linear.mx, v0.1's float8 / mx, by
/// their exact names; the experts' grouped GEMMs alone (quantize.grouped_mm.*) and any other
/// converter exit 2. float8 reads its section (TitanFloat8Section): recipe_name (tensorwise only)
/// and enable_fsdp_float8_all_gather.
void TitanConverters(const Json& cfg, const std::string& where, ParallelConfig* c) {
  bool float8 = false, mx = false;
  if (cfg.contains("model") && cfg["model"].is_object() && cfg["model"].contains("converters") && cfg["model"]["converters"].is_array()) {
    for (const Json& x : cfg["model"]["converters"]) {
      const std::string name = x.is_string() ? x.get<std::string>() : x.dump();
      if (name.rfind("quantize.grouped_mm.", 0) == 0) {
        throw InputError(where + ": model.converters: got \"" + name + "\": low precision in the experts' GEMMs alone is not simulated");
      } else if (name == "float8" || name == "quantize.linear.float8") {
        float8 = true;
      } else if (name == "mx" || name == "quantize.linear.mx") {
        mx = true;
      } else {
        throw InputError(where + ": model.converters: got \"" + name + "\", expected quantize.linear.float8, "
                         "quantize.linear.mx, float8 or mx (the ones simulated)");
      }
    }
  }
  if (mx) c->precision = Precision::kMxfp8;
  if (!float8) return;
  c->precision = Precision::kFp8;
  c->fp8_recipe = Fp8Recipe::kTensorwise;  // torchao's float8 training default
  std::string key;
  const Json* f = TitanFloat8Section(cfg, &key);
  if (f == nullptr) return;
  if (f->contains("recipe_name") && !(*f)["recipe_name"].is_null()) {
    const Json& r = (*f)["recipe_name"];
    if (!r.is_string() || r.get<std::string>() != "tensorwise") {
      throw InputError(where + ": " + key + ".recipe_name: got " + JsonForMessage(r) +
                       ", expected tensorwise (the float8 recipe simulated)");
    }
  }
  // FP8 parameter all-gathers: FSDP2 gathers the float8-cast shards (tensorwise scaling only).
  if (f->contains("enable_fsdp_float8_all_gather")) {
    const Json& g = (*f)["enable_fsdp_float8_all_gather"];
    if (!g.is_boolean()) {
      throw InputError(where + ": " + key + ".enable_fsdp_float8_all_gather: got " + JsonForMessage(g) + ", expected true or false");
    }
    c->fp8_param_gather = g.get<bool>() && c->zero_stage > 0;
  }
}

void TitanBatchAndPrecision(const Json& cfg, const std::string& where, LoggedRun* run) {
  ParallelConfig& c = run->config;
  const std::int64_t local = TitanInt(cfg, "training", "local_batch_size", TitanInt(cfg, "training", "batch_size", 8, where), where);
  const std::int64_t global = TitanInt(cfg, "training", "global_batch_size", -1, where);
  if (local < 1) throw InputError(fmt::format("{}: training.local_batch_size: got {}, expected a positive integer", where, local));
  if (global == 0 || global < -1) throw InputError(fmt::format("{}: training.global_batch_size: got {}, expected -1 or a positive integer", where, global));
  c.global_batch_size = global > 0 ? global : CheckedProduct(local, c.dp, where + ": training.local_batch_size x dp");
  c.micro_batch_size = c.pp > 1 ? TitanInt(cfg, "parallelism", "pipeline_parallel_microbatch_size", 1, where) : local;
  // torchtitan's gradient-accumulation loop runs the pipeline schedule once per local batch.
  const std::int64_t per_step = local * c.dp;
  if (c.pp > 1 && per_step > 0 && c.global_batch_size % per_step == 0 && c.global_batch_size / per_step > 1) {
    c.pipeline_flushes = c.global_batch_size / per_step;
    run->notes.push_back(fmt::format("{} gradient-accumulation steps (global batch {} / (local batch {} x dp {})), each "
                                     "a pipeline schedule of its own that reduces its gradients: simulated as "
                                     "--pipeline-flushes {}",
                                     c.pipeline_flushes, c.global_batch_size, local, c.dp, c.pipeline_flushes));
  }
  c.seq_length = TitanInt(cfg, "training", "seq_len", run->model.seq_length, where);
  if (c.seq_length < 1 || c.seq_length > kMaxDegree) {
    throw InputError(fmt::format("{}: training.seq_len: got {}, expected 1 to {}", where, c.seq_length, kMaxDegree));
  }
  TitanCheckpointing(cfg, where, run);
  const std::string param = TitanString(cfg, "training", "mixed_precision_param",
                                        TitanString(cfg, "parallelism", "mixed_precision_param", "bfloat16", where), where);
  if (param != "bfloat16" && param != "float32") {
    throw InputError(where + ": mixed_precision_param: got \"" + param + "\", expected bfloat16 or float32");
  }
  c.precision = param == "float32" ? Precision::kFp32 : Precision::kBf16;
  // Without FSDP, tensor or pipeline parallelism runs without autocast (maybe_enable_amp: mixed
  // precision "is only supported when FSDP/HSDP/CP is enabled"): fp32.
  if (c.zero_stage == 0 && (c.tp > 1 || c.pp > 1) && c.precision != Precision::kFp32) {
    c.precision = Precision::kFp32;
    run->notes.push_back("tensor or pipeline parallelism without FSDP: torchtitan trains in fp32 (its mixed precision "
                         "needs FSDP, HSDP or context parallelism)");
  }
  // FSDP2's reduce_dtype: the dtype gradients are reduce-scattered in (the shard stays fp32); it
  // "only takes effect when data_parallel_shard_degree > 1" (DDP all-reduces the fp32 .grad).
  const std::string reduce = TitanString(cfg, "training", "mixed_precision_reduce",
                                         TitanString(cfg, "parallelism", "mixed_precision_reduce", "float32", where), where);
  if (reduce != "float32" && reduce != "bfloat16") {
    throw InputError(where + ": mixed_precision_reduce: got \"" + reduce + "\", expected float32 or bfloat16");
  }
  c.fp32_main_grads = reduce == "float32" || c.zero_stage == 0;
  TitanConverters(cfg, where, &c);
  // PyTorch's scaled_dot_product_attention: flash or cuDNN in 16 bits; in fp32 its memory-efficient
  // kernel, which keeps no s x s scores either but is not the flash kernel the simulator times.
  c.flash_attention = c.precision != Precision::kFp32;
  if (!c.flash_attention) {
    run->notes.push_back("fp32 training: attention simulated unfused (PyTorch's SDPA runs fp32 in its memory-efficient "
                         "kernel, which keeps no s x s scores: the predicted memory counts them)");
  }
  // FSDP2 overlaps its collectives with compute; under a pipeline the gradients wait for the
  // stage's last backward (TitanParallelism).
  c.overlap_grad_reduce = !(c.pp > 1 && c.zero_stage == 1);
  c.overlap_param_gather = true;
}

/// The steps' times and memory; returns whether a "Trainer is initialized" line checked the batch
/// (and so the GPU count) against the configuration read.
bool ReadTitanSteps(const std::vector<std::string>& lines, const std::string& path, LoggedRun* run) {
  // Tokens per train step as torchtitan states them, else the batch and sequence.
  double tokens = static_cast<double>(run->config.global_batch_size) * static_cast<double>(run->config.seq_length);
  bool checked = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.find("Trainer is initialized with") != std::string::npos) checked = true;
    if (l.find("Trainer is initialized with local batch size") != std::string::npos) {
      // v0.2: "local batch size X, global batch size Y, ..., sequence length S": the same batch.
      const auto g = FieldAfter(l, "global batch size");
      const auto s = FieldAfter(l, "sequence length");
      const double gbs = g ? PositiveNumber(g->substr(0, g->find(',')), path, i + 1, "global batch size") : 0;
      const double seq = s ? PositiveNumber(s->substr(0, s->find(',')), path, i + 1, "sequence length") : 0;
      if (gbs != static_cast<double>(run->config.global_batch_size) || seq != static_cast<double>(run->config.seq_length)) {
        FailAt(path, i + 1, fmt::format("global batch size {:g}, sequence length {:g}, but the configuration read gives {} and "
                                        "{}: expected the same (check --gpus, which sets data_parallel_shard_degree -1)",
                                        gbs, seq, run->config.global_batch_size, run->config.seq_length));
      }
    }
    const auto t = FieldAfter(l, "tokens per DP rank,");
    const auto a = FieldAfter(l, "initialized with");
    if (t && a) {
      // Later versions: "Trainer is initialized with A tokens per DP rank, B tokens per train
      // step": B must be the configuration's batch x sequence, and B / A its data-parallel size.
      const double per_rank = PositiveNumber(a->substr(0, a->find(' ')), path, i + 1, "tokens per DP rank");
      const double logged = PositiveNumber(t->substr(0, t->find(' ')), path, i + 1, "tokens per train step");
      if (logged != tokens || logged / per_rank != static_cast<double>(run->config.dp)) {
        FailAt(path, i + 1, fmt::format("{:.0f} tokens per train step over {:g} data-parallel ranks, but the configuration "
                                        "read gives {:.0f} (global batch {} x seq_len {}) over {}: expected the same "
                                        "(check --gpus, which sets data_parallel_shard_degree -1)",
                                        logged, logged / per_rank, tokens, run->config.global_batch_size,
                                        run->config.seq_length, run->config.dp));
      }
    }
    if (l.find("step:") == std::string::npos || (l.find("tps:") == std::string::npos && l.find("wps:") == std::string::npos) ||
        l.find("validate step:") != std::string::npos) {
      continue;  // validation steps (log_validation) are not training steps
    }
    const auto tps = FieldAfter(l, l.find("tps:") != std::string::npos ? "tps:" : "wps:");
    const double per_gpu = PositiveNumber(tps->substr(0, tps->find(' ')), path, i + 1, "tps (tokens per second per GPU)");
    run->step_times_s.push_back(tokens / (per_gpu * static_cast<double>(run->gpus)));
    if (const auto mem = FieldAfter(l, "memory:")) {
      const auto gib = mem->find("GiB");
      if (gib == std::string::npos) FailAt(path, i + 1, "memory: got \"" + *mem + "\", expected a size in GiB");
      const double b = PositiveNumber(mem->substr(0, gib), path, i + 1, "memory (GiB)") * kGiB;
      run->max_reserved_bytes = std::max(run->max_reserved_bytes.value_or(0.0), b);
    }
  }
  return checked;
}

/// The "[rankN]:" prefix torchrun gives a line (--log-line-prefix / tee), or "".
std::string RankPrefix(const std::string& line) {
  if (line.rfind("[rank", 0) != 0) return "";
  const auto end = line.find("]:");
  return end == std::string::npos ? "" : line.substr(0, end + 2);
}

/// The lines of one rank's output. torchtitan prints its job configuration on every rank, and a
/// multi-node job's log keeps one rank per node (torchrun's --local-ranks-filter 0): where the
/// configurations carry different "[rankN]:" prefixes, the first one's lines are read (the
/// others blanked, so that line numbers stay the file's), with a note. A second configuration under the same prefix (or none) is a restarted job: InputError
/// with both line numbers.
std::vector<std::string> OneRanksLines(const std::vector<std::string>& lines, const std::string& path,
                                       std::vector<std::string>* notes) {
  std::map<std::string, std::size_t> first_config;  // prefix -> line
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("Running with configs:") == std::string::npos) continue;
    const auto [it, fresh] = first_config.emplace(RankPrefix(lines[i]), i + 1);
    if (!fresh) {
      throw InputError(fmt::format("{}: job configurations on lines {} and {}: a restarted job's log holds more than "
                                   "one run; expected one (split the log where the second begins)",
                                   path, it->second, i + 1));
    }
  }
  if (first_config.size() <= 1) return lines;
  std::string keep;
  std::size_t at = lines.size() + 1;
  for (const auto& [prefix, line] : first_config) {
    if (line < at) keep = prefix, at = line;
  }
  if (keep.empty()) {
    throw InputError(fmt::format("{}: job configurations with and without a [rankN]: prefix: expected one run's output",
                                 path));
  }
  std::vector<std::string> out = lines;  // the other ranks' lines blanked: line numbers stay the file's
  for (auto& l : out) {
    if (l.rfind(keep, 0) != 0) l.clear();
  }
  notes->push_back(fmt::format("the log holds {} ranks' output; {} lines read", first_config.size(),
                               keep.substr(0, keep.size() - 1)));
  return out;
}

LoggedRun ParseTorchtitan(const std::vector<std::string>& lines, const std::string& path, const LogDefaults& d) {
  LoggedRun run;
  run.file = path;
  run.format = "torchtitan";
  const std::vector<std::string> own = OneRanksLines(lines, path, &run.notes);
  std::size_t cfg_line = 0;
  const Json cfg = TitanConfig(own, path, &cfg_line);
  const std::string where = fmt::format("{}:{} (the job configuration)", path, cfg_line);
  if (d.model) {
    run.model = *d.model;
  } else {
    const std::string name = TitanString(cfg, "model", "name", "");
    const std::string flavor = TitanString(cfg, "model", "flavor", "");
    const auto preset = TitanPreset(name, flavor);
    if (!preset) {
      throw InputError(fmt::format("{}: model.name \"{}\", flavor \"{}\": no preset is known for it; pass --model NAME or FILE",
                                   where, name, flavor));
    }
    run.model = LoadModel(*preset);
    run.notes.push_back(fmt::format("model {} {} read as the preset {}", name, flavor, *preset));
  }
  TitanParallelism(cfg, where, d, &run);
  TitanBatchAndPrecision(cfg, where, &run);
  if (!ReadTitanSteps(own, path, &run) && d.gpus) {
    run.notes.push_back(fmt::format("the log has no \"Trainer is initialized with ...\" line, so --gpus {} could not be "
                                    "checked against the batch it ran", *d.gpus));
  }
  run.notes.push_back("step time = tokens per step / (GPUs x tps); measured memory is torchtitan's max reserved");
  return run;
}

}  // namespace

LoggedRun ParseTrainingLog(const std::string& text, const std::string& path, const LogDefaults& defaults) {
  const std::vector<std::string> lines = Lines(text);
  const bool megatron = text.find("---- arguments ----") != std::string::npos;
  const bool titan = text.find("Running with configs:") != std::string::npos ||
                     (text.find("step:") != std::string::npos && text.find("tps:") != std::string::npos);
  if (!megatron && !titan) {
    throw InputError(path + ": neither a Megatron-LM log (its \"---- arguments ----\" dump) nor a torchtitan log "
                     "(\"Running with configs:\" and \"step: ... tps:\" lines)");
  }
  if (megatron && text.find("Running with configs:") != std::string::npos) {
    const auto line_of = [&](const std::string& key) {
      return std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(key) != std::string::npos; }) -
             lines.begin() + 1;
    };
    throw InputError(fmt::format("{}: a Megatron-LM argument dump (line {}) and a torchtitan job configuration (line {}): "
                                 "expected one run per log (split the log)",
                                 path, line_of("---- arguments ----"), line_of("Running with configs:")));
  }
  LoggedRun run = megatron ? ParseMegatron(lines, path, defaults) : ParseTorchtitan(lines, path, defaults);
  if (run.step_times_s.empty()) {
    throw InputError(path + (megatron ? ": no \"elapsed time per iteration (ms):\" line" : ": no \"step: ... tps:\" line") +
                     ", expected at least one measured step");
  }
  run.measured_step_time_s = MeanAfterFirst(run.step_times_s);
  if (run.step_times_s.size() > 1) {
    run.notes.push_back(fmt::format("measured step: the mean of {} logged steps after the first", run.step_times_s.size() - 1));
  } else {
    run.notes.push_back("measured step: the only logged step, warm-up included (log more steps for a steady figure)");
  }
  return run;
}

LoggedRun ReadTrainingLog(const std::string& path, const LogDefaults& defaults) {
  return ParseTrainingLog(ReadTextFile(path), path, defaults);
}

}  // namespace shardcast
