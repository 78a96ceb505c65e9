#include "planner/validate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"
#include "models/loader.h"
#include "simulator/simulate.h"

namespace shardcast {
namespace {

bool Contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

bool IsLetter(char ch) { return std::isalpha(static_cast<unsigned char>(ch)) != 0; }

/// Length of `word` at `pos` of the lower-case `s`, where `word` may be followed by one optional
/// separator (' ', '_' or '-') and `next` (both lower-case); 0 where no match.
std::size_t MatchAt(const std::string& s, std::size_t pos, const std::string& word, const std::string& next) {
  auto at = [&](std::size_t i, const std::string& w) { return i <= s.size() && s.compare(i, w.size(), w) == 0; };
  if (!at(pos, word)) return 0;
  const std::size_t end = pos + word.size();
  if (next.empty()) return word.size();
  if (end < s.size() && (s[end] == ' ' || s[end] == '_' || s[end] == '-') && at(end + 1, next)) {
    return word.size() + 1 + next.size();
  }
  return at(end, next) ? word.size() + next.size() : 0;
}

/// Whether `text` holds `word` [separator] `next` (case-insensitive), bounded by non-letters on
/// both sides unless `bounded` is false (then a match inside a longer word counts).
bool HasMatch(const std::string& text, const std::string& word, const std::string& next, bool bounded) {
  const std::string s = ToLower(text);
  for (std::size_t pos = 0; pos < s.size(); ++pos) {
    if (bounded && pos > 0 && IsLetter(s[pos - 1])) continue;
    const std::size_t len = MatchAt(s, pos, word, next);
    if (len == 0) continue;
    if (!bounded || pos + len == s.size() || !IsLetter(s[pos + len])) return true;
  }
  return false;
}

/// Whether a Hopper row's flash attention is Transformer Engine's fused attention, which runs
/// cuDNN 9's flash kernel at FlashAttention-3-class rates (the default profile's): Megatron-Core
/// (NeMo 24.x on) and frameworks whose row names TE's kernels (NeMo Automodel's `attn: te`
/// backend, "kernels: TE + DeepEP"). The other PyTorch-side runs here predate FlashAttention-3
/// (July 2024) and ran FlashAttention-2, and a row naming FlexAttention (GPT-OSS's attention
/// sinks) runs PyTorch's FlexAttention, FA2-class on Hopper (about 90% / 85% of FA2's forward /
/// backward, PyTorch's FlexAttention post, 2024-08): both at FA2's rates.
bool RowNamesFlexAttention(const std::string& framework) {
  return HasMatch(framework, "flexattn", "", false) || HasMatch(framework, "flex", "attention", false);
}

bool RowRunsTeAttention(const std::string& framework, bool mcore) {
  if (RowNamesFlexAttention(framework)) return false;
  if (mcore) return true;
  return HasMatch(framework, "te", "", true) || HasMatch(framework, "transformer", "engine", true);
}

std::optional<double> Num(const std::string& s) {
  if (s.empty()) return std::nullopt;
  try {
    std::size_t pos = 0;
    const double v = std::stod(s, &pos);
    if (pos != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// Where data row `r` of a CSV is, for messages: "row_id 128 (line 27)", or "line 27" when the
/// table has no row_id column (the file line the row starts on; the header is line 1).
std::string RowLabel(const CsvTable& t, std::size_t r) {
  const std::string line = "line " + std::to_string(r < t.lines.size() ? t.lines[r] : r + 2);
  if (t.Column("row_id") < 0) return line;
  return "row_id " + t.Get(r, "row_id") + " (" + line + ")";
}

/// A field that must be a positive integer; InputError naming file, row and column otherwise.
/// The largest value each integer column takes: the limits of models/model.h and
/// models/parallel.h, so that a row cannot overflow what the simulator multiplies.
std::int64_t MaxOfColumn(const std::string& col) {
  static const std::map<std::string, std::int64_t> max = {
      {"num_layers", kMaxLayers},       {"hidden_size", kMaxHidden},
      {"ffn_hidden_size", kMaxFfn},     {"num_heads", kMaxHeads},
      {"num_kv_heads", kMaxHeads},      {"vocab_size", kMaxVocab},
      {"seq_len", kMaxSeq},             {"tp", kMaxParallelSize},
      {"pp", kMaxParallelSize},         {"dp", kMaxParallelSize},
      {"vp", kMaxVirtualStages},        {"micro_batch_size", kMaxMicroBatchSize},
      {"global_batch_size", kMaxGlobalBatchSize}, {"num_gpus", kMaxParallelSize}};
  const auto it = max.find(col);
  return it == max.end() ? kMaxParallelSize : it->second;
}

std::int64_t IntField(const CsvTable& t, std::size_t r, const std::string& col, const std::string& file) {
  const std::string v = t.Get(r, col);
  auto d = Num(v);
  const std::int64_t max = MaxOfColumn(col);
  if (!d || *d < 1 || *d != std::floor(*d) || *d > static_cast<double>(max)) {
    throw InputError(file + ": " + RowLabel(t, r) + ", column " + col + ": got \"" + v +
                     "\", expected a positive integer up to " + std::to_string(max));
  }
  return static_cast<std::int64_t>(*d);
}

/// A field whose value must start with one of `prefixes` (the empty string allows an empty cell);
/// returns the index of the prefix it starts with. InputError naming file, row and column otherwise.
std::size_t ChoiceField(const CsvTable& t, std::size_t r, const std::string& col, const std::string& file,
                        const std::vector<std::string>& prefixes) {
  const std::string v = t.Get(r, col);
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    if (prefixes[i].empty() ? v.empty() : v.rfind(prefixes[i], 0) == 0) return i;
  }
  std::vector<std::string> shown;
  for (const auto& p : prefixes) shown.push_back(p.empty() ? "empty" : "\"" + p + "...\"");
  throw InputError(file + ": " + RowLabel(t, r) + ", column " + col + ": got \"" + v + "\", expected " +
                   Join(shown, ", "));
}

/// InputError unless the table has every column.
void RequireColumns(const CsvTable& t, const std::string& file, std::initializer_list<const char*> cols) {
  for (const char* col : cols) {
    if (t.Column(col) < 0) throw InputError(file + ": header: missing column '" + std::string(col) + "'");
  }
}

/// The columns of a runs CSV (validation/README.md): those of the project's published_runs.csv.
const std::vector<std::string>& RunsColumns() {
  static const std::vector<std::string> cols = {
      "row_id", "source_id", "source", "source_locator", "model", "params_B", "arch_family", "num_layers",
      "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len", "mlp_activation",
      "arch_source", "gpu_type", "num_gpus", "interconnect", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch_size",
      "global_batch_size", "tokens_per_batch", "recompute", "sequence_parallel", "dp_sharding", "precision",
      "framework", "outcome", "iter_time_s", "tflops_per_gpu", "tflops_basis", "mfu_pct", "hfu_pct", "pct_of_peak",
      "tokens_per_s_per_gpu", "aggregate_pflops", "peak_mem_gb", "mem_definition", "step_time_s_derived",
      "derived_fields", "flops_convention", "confidence", "missing_key_fields", "notes"};
  return cols;
}

/// The columns of a memory-points CSV (validation/README.md): those of published_memory.csv.
const std::vector<std::string>& MemoryColumns() {
  static const std::vector<std::string> cols = {"model", "num_layers", "hidden_size", "num_heads", "seq_len",
                                                "micro_batch_size", "tp", "pp", "gpu_type", "quantity", "setting",
                                                "value_gib", "source", "notes"};
  return cols;
}

/// InputError naming a header column outside `known` (a misspelled column would otherwise be read
/// as absent, and its rows as taking the defaults), or one given twice.
void RejectUnknownColumns(const CsvTable& t, const std::string& file, const std::vector<std::string>& known) {
  for (std::size_t i = 0; i < t.header.size(); ++i) {
    const std::string& col = t.header[i];
    if (col.empty()) {
      // A trailing comma (spreadsheet exports): a nameless column is fine while it holds nothing.
      for (std::size_t r = 0; r < t.rows.size(); ++r) {
        if (!t.rows[r][i].empty()) {
          throw InputError(fmt::format("{}: {}: a value \"{}\" in column {}, which the header leaves unnamed; expected "
                                       "a named column (or an empty one)",
                                       file, RowLabel(t, r), t.rows[r][i], i + 1));
        }
      }
      continue;
    }
    if (std::find(known.begin(), known.end(), col) == known.end()) {
      const auto near = ClosestMatches(col, known, 1);
      throw InputError(file + ": header: unknown column '" + col + "'" +
                       (near.empty() ? std::string() : " (did you mean '" + near[0] + "'?)") +
                       ", expected the columns of validation/README.md: " + Join(known, ", "));
    }
    if (std::find(t.header.begin(), t.header.begin() + static_cast<std::ptrdiff_t>(i), col) !=
        t.header.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InputError(file + ": header: column '" + col + "' given twice, expected each column once");
    }
  }
}

/// The quantity, setting and GPU of memory point `r` (validation/README.md): quantity
/// params_and_optimizer_per_gpu (setting any), activations_per_gpu or activations_relative_to_none
/// (setting: no recompute no SP, SP only, selective recompute only, SP + selective recompute, full
/// recompute, SP + full recompute); gpu_type empty or an A100 (the points are Korthikanti et al.'s
/// on DGX A100). InputError naming the line and column otherwise.
void CheckMemoryPointKind(const CsvTable& t, std::size_t r, const std::string& file) {
  const std::string q = t.Get(r, "quantity"), st = t.Get(r, "setting");
  const std::vector<std::string> quantities = {"params_and_optimizer_per_gpu", "activations_per_gpu",
                                               "activations_relative_to_none"};
  if (std::find(quantities.begin(), quantities.end(), q) == quantities.end()) {
    throw InputError(file + ": " + RowLabel(t, r) + ", column quantity: got \"" + q + "\", expected " +
                     Join(quantities, ", "));
  }
  const std::vector<std::string> settings =
      q == "params_and_optimizer_per_gpu"
          ? std::vector<std::string>{"any"}
          : std::vector<std::string>{"no recompute no SP",      "SP only",        "selective recompute only",
                                     "SP + selective recompute", "full recompute", "SP + full recompute"};
  if (std::find(settings.begin(), settings.end(), st) == settings.end()) {
    throw InputError(file + ": " + RowLabel(t, r) + ", column setting: got \"" + st + "\", expected for " + q + ": " +
                     Join(settings, ", "));
  }
  const std::string gpu = t.Get(r, "gpu_type");
  if (!gpu.empty() && gpu.rfind("A100", 0) != 0) {
    throw InputError(file + ": " + RowLabel(t, r) + ", column gpu_type: got \"" + gpu +
                     "\", expected empty or an A100 (memory points are modelled on DGX A100, as Korthikanti et al. "
                     "2022 measured them)");
  }
}

/// The precision of a row (column precision, validation/README.md): empty or starting with fp16,
/// bf16, amp_bf16, amp_fp16, mixed, fp8, FP8 or MXFP8; MXFP8 where it says so, else FP8 where it
/// says fp8 or FP8, else bf16 where it says bf16, else fp16. InputError naming the row otherwise.
Precision RowPrecision(const CsvTable& t, std::size_t r, const std::string& file) {
  ChoiceField(t, r, "precision", file, {"", "fp16", "bf16", "amp_bf16", "amp_fp16", "mixed", "fp8", "FP8", "MXFP8"});
  const std::string prec = t.Get(r, "precision");
  return Contains(prec, "MXFP8")                           ? Precision::kMxfp8
         : Contains(prec, "fp8") || Contains(prec, "FP8") ? Precision::kFp8
         : Contains(prec, "bf16")                         ? Precision::kBf16
                                                          : Precision::kFp16;
}

/// The `key=value` words of a row's notes (the MoE rows' architecture; validation/README.md):
/// "num_experts=256; top_k=8; attention=MLA q_lora_rank=1536" gives num_experts, top_k,
/// attention and q_lora_rank. A value ends at a space, ';', ',' or '('.
std::map<std::string, std::string> NoteValues(const std::string& notes) {
  std::map<std::string, std::string> out;
  std::string word;
  auto flush = [&]() {
    const auto eq = word.find('=');
    if (eq != std::string::npos && eq > 0 && eq + 1 < word.size()) out.emplace(word.substr(0, eq), word.substr(eq + 1));
    word.clear();
  };
  for (char ch : notes) {
    if (ch == ' ' || ch == ';' || ch == ',' || ch == '(' || ch == ')') {
      flush();
    } else {
      word += ch;
    }
  }
  flush();
  return out;
}

/// A positive integer note value, or `fallback` when absent; InputError naming the row otherwise.
std::int64_t NoteInt(const std::map<std::string, std::string>& kv, const std::string& key, std::int64_t fallback,
                     const std::string& where) {
  const auto it = kv.find(key);
  if (it == kv.end()) return fallback;
  const auto d = Num(it->second);
  if (!d || *d < 0 || *d != std::floor(*d) || *d > static_cast<double>(kMaxFfn)) {
    throw InputError(where + ", column notes: " + key + "=" + it->second + ", expected a non-negative integer");
  }
  return static_cast<std::int64_t>(*d);
}

/// The mixture-of-experts architecture of a row from its notes: experts, top-k, expert FFN,
/// shared experts, leading dense layers, GQA head dim or MLA ranks (Llama-style layers).
void RowExperts(const std::map<std::string, std::string>& kv, const std::string& where, Model* m) {
  m->moe.num_experts = NoteInt(kv, "num_experts", 0, where);
  m->moe.top_k = NoteInt(kv, "top_k", 1, where);
  m->moe.ffn_hidden_size = NoteInt(kv, "moe_ffn_hidden_size", m->ffn_hidden_size, where);
  m->moe.shared_ffn_hidden_size =
      NoteInt(kv, "shared_expert_ffn", NoteInt(kv, "shared_experts", 0, where) * m->moe.ffn_hidden_size, where);
  m->moe.first_k_dense = NoteInt(kv, "first_k_dense_layers", 0, where);
  if (const auto hd = NoteInt(kv, "head_dim", 0, where); hd > 0) m->kv_channels = hd;
  if (NoteInt(kv, "kv_lora_rank", 0, where) > 0) {
    m->mla.q_lora_rank = NoteInt(kv, "q_lora_rank", 0, where);
    m->mla.kv_lora_rank = NoteInt(kv, "kv_lora_rank", 0, where);
    m->mla.qk_head_dim = NoteInt(kv, "qk_nope_head_dim", 0, where);
    m->mla.qk_pos_emb_head_dim = NoteInt(kv, "qk_rope_head_dim", 0, where);
    m->mla.v_head_dim = NoteInt(kv, "v_head_dim", 0, where);
    m->kv_channels = m->mla.v_head_dim;
  }
}

/// The architecture of a row, from its arch_family and shape columns (validation/README.md).
Model RowModel(const CsvTable& t, std::size_t r, const std::string& file) {
  const std::string arch = t.Get(r, "arch_family");
  Model m;
  m.name = t.Get(r, "model");
  m.num_layers = IntField(t, r, "num_layers", file);
  m.hidden_size = IntField(t, r, "hidden_size", file);
  m.ffn_hidden_size = t.Get(r, "ffn_hidden_size").empty() ? 4 * m.hidden_size : IntField(t, r, "ffn_hidden_size", file);
  m.num_attention_heads = IntField(t, r, "num_heads", file);
  m.num_query_groups = t.Get(r, "num_kv_heads").empty() ? m.num_attention_heads : IntField(t, r, "num_kv_heads", file);
  m.kv_channels = m.hidden_size / m.num_attention_heads;
  m.vocab_size = IntField(t, r, "vocab_size", file);
  m.seq_length = IntField(t, r, "seq_len", file);
  m.max_position_embeddings = m.seq_length;
  m.normalization = Normalization::kLayerNorm;
  m.activation = Activation::kGelu;
  m.tie_embeddings = true;
  m.source = t.Get(r, "source");
  if (Contains(arch, "MPT")) {
    // llm-foundry's benchmark MPTs (yamls/pretrain/mpt-*.yaml at the table's commit) leave
    // MPTConfig's defaults: learned positions (learned_pos_emb, no ALiBi) and biases (no_bias
    // false), no dropout. The table's NumParams says so: MPT-3b's 2,651,837,440 is 32 layers of
    // 12h^2 + 13h (linear and LayerNorm biases) plus the tied 50368 x h embedding, 2048 x h
    // positions and the final LayerNorm's 2h, at h = 2560.
    m.position_embedding = PositionEmbedding::kLearned;
    m.dropout = false;
  } else if (Contains(arch, "BLOOM")) {
    // BLOOM: ALiBi, biases, trained without dropout.
    m.position_embedding = PositionEmbedding::kAlibi;
    m.dropout = false;
  } else if (Contains(arch, "LLAMA") || Contains(arch, "Llama") || Contains(arch, "MoE")) {
    // Llama-style layers, as the MoE families (Mixtral, Qwen3, DeepSeek, GPT-OSS) build them.
    // Llama 2/3: RMSNorm, SwiGLU, rotary positions, untied output layer, no biases or dropout.
    m.position_embedding = PositionEmbedding::kRope;
    m.normalization = Normalization::kRMSNorm;
    m.activation = Activation::kSwiglu;
    m.tie_embeddings = false;
    m.add_bias_linear = m.add_qkv_bias = false;
    m.dropout = false;
  } else if (Contains(arch, "GPT-NeoX")) {
    // GPT-NeoX (configs/20B.yml): rotary positions (on a quarter of each head's channels, a cost
    // too small to tell apart), untied output layer, biases, hidden and attention dropout 0. Its
    // parallel residual (attention and MLP on the same input) has a serial layer's FLOPs and,
    // with full recompute, its saved tensors.
    m.position_embedding = PositionEmbedding::kRope;
    m.tie_embeddings = false;
    m.dropout = false;
  } else if (Contains(arch, "Nemotron")) {
    // Nemotron (NeMo's Nemotron3/4 configs): rotary positions, untied output layer, no biases or
    // dropout; its squared-ReLU MLP has the shapes and memory traffic of a GELU MLP (one up
    // projection of ffn_hidden_size, one element-wise activation), which is how it is costed.
    m.position_embedding = PositionEmbedding::kRope;
    m.tie_embeddings = false;
    m.add_bias_linear = m.add_qkv_bias = false;
    m.dropout = false;
  } else {
    m.position_embedding = PositionEmbedding::kLearned;
  }
  // mlp_activation, where given, overrides the family's; squared-ReLU is costed as GELU (one up
  // projection, one element-wise activation).
  switch (ChoiceField(t, r, "mlp_activation", file, {"", "gelu", "swiglu", "squared-relu"})) {
    case 1: case 3: m.activation = Activation::kGelu; break;
    case 2: m.activation = Activation::kSwiglu; break;
    default: break;
  }
  // Qwen3's attention normalizes each head's queries and keys (q_norm, k_norm), as the Hugging
  // Face import of qwen3 and qwen3_moe sets it (models/loader.cc).
  m.qk_layernorm = arch.rfind("Qwen3", 0) == 0;
  const auto notes = NoteValues(t.Get(r, "notes"));
  if (notes.count("num_experts")) {
    RowExperts(notes, file + ": " + RowLabel(t, r), &m);
    // Qwen3's MoE routers were trained with global-batch load balancing, as the Hugging Face
    // import of qwen3_moe sets it (models/loader.cc).
    m.moe.router_global_batch_balance = arch.rfind("Qwen3 MoE", 0) == 0;
    m.kv_channels = m.kv_channels > 0 && notes.count("head_dim") + notes.count("kv_lora_rank") > 0
                        ? m.kv_channels
                        : m.hidden_size / m.num_attention_heads;
    ValidateModel(m, file + ": " + RowLabel(t, r));
    return m;
  }
  if (m.hidden_size % m.num_attention_heads != 0) {
    throw InputError(file + ": " + RowLabel(t, r) + ", column num_heads: got " + std::to_string(m.num_attention_heads) +
                     ", expected a divisor of hidden_size = " + std::to_string(m.hidden_size));
  }
  ValidateModel(m, file + ": " + RowLabel(t, r));
  return m;
}

/// The modules of a row's selective recompute (column recompute): Megatron-Core's names, or the
/// ModelZoo tables' short ones ("norm, act" = layernorm, moe_act); core_attn when none is named.
/// Modules the model does not have are left out.
unsigned RowRecomputeModules(const std::string& text, const Model& m) {
  unsigned mods = 0;
  std::string word;
  auto flush = [&]() {
    const bool moe = m.moe.enabled(), shared = moe && m.moe.shared_ffn_hidden_size > 0;
    if (word == "core_attn") mods |= kRecomputeCoreAttn;
    if (word == "norm" || word == "layernorm") mods |= kRecomputeLayernorm;
    if ((word == "act" || word == "moe_act") && moe) mods |= kRecomputeMoeAct;
    if (word == "moe" && moe) mods |= kRecomputeMoe;
    if ((word == "shared_expert" || word == "shared_experts") && shared) mods |= kRecomputeSharedExperts;
    if (word == "mla_up_proj" && m.mla.enabled()) mods |= kRecomputeMlaUpProj;
    if (word == "mlp" && m.MoeLayersIn(0, m.num_layers) < m.num_layers) mods |= kRecomputeMlp;
    word.clear();
  };
  for (char ch : text) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else {
      flush();
    }
  }
  flush();
  return mods != 0 ? mods : static_cast<unsigned>(kRecomputeCoreAttn);
}

/// The expert settings a MoE row's notes and precision give: etp, the dispatcher (DeepEP and
/// HybridEP are the fused "flex" one), forced load balancing, a capacity
/// factor, the FP8 recipe.
void MapExpertSettings(const CsvTable& t, std::size_t r, const std::string& file, ParallelConfig* c) {
  const std::string notes = t.Get(r, "notes"), prec = t.Get(r, "precision");
  const auto kv = NoteValues(notes);
  if (kv.count("etp") && Num(kv.at("etp"))) {
    c->etp = NoteInt(kv, "etp", 0, file + ": " + RowLabel(t, r));
  } else if (!kv.count("etp") && Contains(t.Get(r, "source_locator"), "Megatron-MoE-ModelZoo")) {
    // Every model config of the Megatron-MoE-ModelZoo (model_configs/benchmarking/*.yaml @
    // e8650517: DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B, Mixtral-8x22B) sets
    // --expert-tensor-parallel-size 1; Megatron-Core's own default would be etp = tp.
    c->etp = 1;
  }
  c->moe_dispatcher = Contains(notes, "DeepEP") || Contains(notes, "HybridEP") || Contains(notes, "flex")
                          ? MoeDispatcher::kFlex
                          : MoeDispatcher::kAllToAll;
  if (Contains(notes, "forced balance") || Contains(notes, "force balance") || Contains(notes, "force load balancing") ||
      Contains(notes, "fake balanced") || Contains(notes, "force-load-balancing")) {
    c->moe_force_load_balancing = true;
  }
  if (Contains(notes, "capacity-factor 1.0")) c->moe_capacity_factor = 1.0;
  // Megatron-Core's 1F1B EP A2A overlap (the ModelZoo's A2A_OVERLAP=1: --delay-wgrad-compute
  // --overlap-moe-expert-parallel-comm).
  c->moe_a2a_overlap = c->ep > 1 && (Contains(notes, "A2A_OVERLAP=1") ||
                                     (Contains(notes, "A2A overlap") && !Contains(notes, "A2A_OVERLAP=0")));
  if (c->precision == Precision::kFp8 && (Contains(prec, "blockwise") || Contains(prec, "fine-grained"))) {
    c->fp8_recipe = Fp8Recipe::kBlockwise;
  }
  if (c->tp > 1) c->sequence_parallel = true;  // Megatron-Core runs MoE with TP only with SP
}

Cluster RowCluster(const CsvTable& t, std::size_t r) {
  const std::string gpu = t.Get(r, "gpu_type");
  if (gpu.rfind("H100", 0) == 0) return LoadCluster("dgx-h100");
  if (gpu.rfind("H800", 0) == 0) return LoadCluster("hgx-h800");
  if (gpu.rfind("GB200", 0) == 0) return LoadCluster("gb200-nvl72");
  // Jean Zay (BLOOM): 8 A100 80GB per node on NVLink, 4 Omni-Path 100 Gb/s links per node.
  if (Contains(t.Get(r, "interconnect"), "Omni-Path")) return LoadCluster("jean-zay-a100");
  // The 40 GB A100 has its own preset (memory decides the OOM rows).
  if (Contains(gpu, "40GB") || Contains(gpu, "40 GB")) return LoadCluster("dgx-a100-40gb");
  return LoadCluster("dgx-a100");
}

}  // namespace

double KendallTauWithinGroups(const std::vector<std::string>& groups, const std::vector<double>& pred,
                              const std::vector<double>& meas, std::size_t* pairs) {
  long long concordant = 0, discordant = 0, n = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    for (std::size_t j = i + 1; j < groups.size(); ++j) {
      if (groups[i] != groups[j]) continue;
      ++n;
      const double a = pred[i] - pred[j], b = meas[i] - meas[j];
      if (a * b > 0) ++concordant;
      else if (a * b < 0) ++discordant;
    }
  }
  if (pairs) *pairs = static_cast<std::size_t>(n);
  return n > 0 ? static_cast<double>(concordant - discordant) / static_cast<double>(n) : 0.0;
}

// Kendall tau of each series (the rows with the same `series` key), over pairs within `groups`;
// series with no pair are left out.
std::map<std::string, std::pair<double, std::size_t>> TauBySeries(const std::vector<std::string>& series,
                                                                  const std::vector<std::string>& groups,
                                                                  const std::vector<double>& pred,
                                                                  const std::vector<double>& meas) {
  std::map<std::string, std::pair<double, std::size_t>> out;
  std::map<std::string, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < series.size(); ++i) members[series[i]].push_back(i);
  for (const auto& [key, idx] : members) {
    std::vector<std::string> g;
    std::vector<double> p, q;
    for (const std::size_t i : idx) {
      g.push_back(groups[i]);
      p.push_back(pred[i]);
      q.push_back(meas[i]);
    }
    std::size_t pairs = 0;
    const double tau = KendallTauWithinGroups(g, p, q, &pairs);
    if (pairs > 0) out[key] = {tau, pairs};
  }
  return out;
}

// The row's predicted figures from its simulation.
void FillPrediction(const SimulationResult& res, ValidationRow* row) {
  row->predicted_step_time_s = res.step_time_s;
  row->predicted_peak_memory_bytes = res.peak_memory_bytes;
  row->predicted_reserved_bytes = res.peak_reserved_bytes;
  row->predicted_fits = res.fits;
  row->predicted_at_risk = res.memory_at_risk;
  row->predicted_mfu = res.mfu;
  row->predicted_mfu_causal = res.mfu_causal;
}

// The out-of-memory counts of a simulated row.
void CountOutcome(const ValidationRow& row, ValidationSummary* s) {
  if (row.outcome == "OOM") {
    ++s->oom_rows;
    if (!row.predicted_fits) ++s->oom_rows_predicted_oom;
    if (row.predicted_at_risk) ++s->oom_rows_at_risk;
  } else {
    ++s->ok_rows;
    if (row.predicted_fits) ++s->ok_rows_predicted_fit;
    if (row.predicted_at_risk) ++s->ok_rows_at_risk;
  }
}

// The summary over the rows and memory points (ValidationSummary).
void Summarize(ValidationReport* rep) {
  ValidationSummary& s = rep->summary;
  s.rows = rep->rows.size();
  std::vector<std::string> groups, src_groups, confident_groups;
  std::vector<double> pred_tp, meas_tp, pred_tflops, meas_tflops, confident_pred_tp, confident_meas_tp;
  double abs_sum = 0, mem_sum = 0;
  std::size_t mem_n = 0;
  std::map<std::string, std::pair<double, std::size_t>> by_src;
  for (const auto& row : rep->rows) {
    if (row.skipped) {
      ++s.skipped;
      continue;
    }
    ++s.simulated;
    CountOutcome(row, &s);
    if (row.step_time_error) {
      const double e = std::fabs(*row.step_time_error);
      ++s.timed;
      abs_sum += e;
      s.step_time_max_abs_error = std::max(s.step_time_max_abs_error, e);
      if (e <= 0.05) s.within_5pct += 1;
      if (e <= 0.10) s.within_10pct += 1;
      by_src[row.source_id].first += e;
      ++by_src[row.source_id].second;
      if (row.fitted_constant.empty()) {
        s.held_out_mape += e;
        ++s.held_out_timed;
        s.held_out_max_abs_error = std::max(s.held_out_max_abs_error, e);
      } else {
        s.fitted_mape += e;
        ++s.fitted_timed;
      }
      if (row.low_confidence) {
        s.low_confidence_rows.push_back(row.row_id);
      } else {
        s.confident_mape += e;
        ++s.confident_timed;
        s.confident_max_abs_error = std::max(s.confident_max_abs_error, e);
        if (row.fitted_constant.empty()) {
          s.confident_held_out_mape += e;
          ++s.confident_held_out_timed;
        }
      }
      // Throughput in tokens per second: a group's runs may differ in global batch or sequence.
      groups.push_back(row.group);
      const double tokens =
          static_cast<double>(row.config.global_batch_size) * static_cast<double>(row.config.seq_length);
      pred_tp.push_back(tokens / *row.predicted_step_time_s);
      meas_tp.push_back(tokens / *row.measured_step_time_s);
      if (!row.low_confidence) {
        confident_groups.push_back(row.group);
        confident_pred_tp.push_back(pred_tp.back());
        confident_meas_tp.push_back(meas_tp.back());
      }
      src_groups.push_back(row.source_id);
      const double per_gpu = row.model_flops_per_step / static_cast<double>(std::max<std::int64_t>(1, row.gpus));
      pred_tflops.push_back(per_gpu / *row.predicted_step_time_s);
      meas_tflops.push_back(per_gpu / *row.measured_step_time_s);
    }
    if (row.memory_error) {
      mem_sum += std::fabs(*row.memory_error);
      ++mem_n;
    }
  }
  for (const auto& p : rep->memory_points) {
    mem_sum += std::fabs(p.error);
    ++mem_n;
  }
  if (s.timed > 0) {
    s.step_time_mape = abs_sum / static_cast<double>(s.timed);
    s.within_5pct /= static_cast<double>(s.timed);
    s.within_10pct /= static_cast<double>(s.timed);
  }
  if (s.held_out_timed > 0) s.held_out_mape /= static_cast<double>(s.held_out_timed);
  if (s.fitted_timed > 0) s.fitted_mape /= static_cast<double>(s.fitted_timed);
  if (s.confident_timed > 0) s.confident_mape /= static_cast<double>(s.confident_timed);
  if (s.confident_held_out_timed > 0) s.confident_held_out_mape /= static_cast<double>(s.confident_held_out_timed);
  for (auto& [src, v] : by_src) s.mape_by_source[src] = {v.first / static_cast<double>(v.second), v.second};
  s.kendall_tau = KendallTauWithinGroups(groups, pred_tp, meas_tp, &s.kendall_pairs);
  s.confident_kendall_tau =
      KendallTauWithinGroups(confident_groups, confident_pred_tp, confident_meas_tp, &s.confident_kendall_pairs);
  // Per group (model and GPU count) of throughput, and per source of TFLOP/s as one series.
  s.kendall_by_group = TauBySeries(groups, groups, pred_tp, meas_tp);
  s.tflops_tau_by_source = TauBySeries(src_groups, src_groups, pred_tflops, meas_tflops);
  s.memory_points = mem_n;
  s.memory_mape = mem_n > 0 ? mem_sum / static_cast<double>(mem_n) : 0.0;
}

namespace {

/// A row id as --explain gives it, compared as the CSV has it: surrounding spaces dropped, and
/// a number by its value ("01" is row 1).
std::string CanonicalRowId(std::string id) {
  const auto first = id.find_first_not_of(" \t"), last = id.find_last_not_of(" \t");
  id = first == std::string::npos ? std::string() : id.substr(first, last - first + 1);
  if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos) {
    const auto nz = id.find_first_not_of('0');
    id = nz == std::string::npos ? "0" : id.substr(nz);
  }
  return id;
}

/// Numbers by value, then other ids by text.
bool RowIdBefore(const std::string& a, const std::string& b) {
  const bool na = !a.empty() && a.find_first_not_of("0123456789") == std::string::npos;
  const bool nb = !b.empty() && b.find_first_not_of("0123456789") == std::string::npos;
  if (na != nb) return na;
  if (na && a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

/// The built-in constant fitted on row `r` (FitsOnValidationRows), or "" for a held-out row.
std::string RowFittedConstant(const CsvTable& t, std::size_t r, const std::string& runs_csv, const ValidationRow& row) {
  const std::int64_t seq = t.Column("seq_len") >= 0 && !t.Get(r, "seq_len").empty() ? IntField(t, r, "seq_len", runs_csv) : 0;
  std::string constant;
  for (const ValidationFit& f : FitsOnValidationRows()) {
    if (f.source_id == row.source_id && f.model == row.model &&
        std::find(f.gpus.begin(), f.gpus.end(), row.gpus) != f.gpus.end() &&
        (f.seq_lengths.empty() || std::find(f.seq_lengths.begin(), f.seq_lengths.end(), seq) != f.seq_lengths.end()) &&
        (f.dp_sharding.empty() || Contains(t.Get(r, "dp_sharding"), f.dp_sharding))) {
      constant = f.constant;
    }
  }
  return constant;
}

/// A runs CSV with its header checked (known columns, the required ones), at least one row and
/// unique row ids; InputError naming the file otherwise.
CsvTable ReadRunsTable(const std::string& runs_csv) {
const CsvTable t = ReadCsvFile(runs_csv);
RejectUnknownColumns(t, runs_csv, RunsColumns());
RequireColumns(t, runs_csv, {"row_id", "source_id", "model", "num_layers", "hidden_size", "num_heads", "vocab_size",
                             "seq_len", "gpu_type", "num_gpus", "tp", "pp", "dp", "micro_batch_size",
                             "global_batch_size", "outcome", "iter_time_s"});
if (t.rows.empty()) throw InputError(runs_csv + ": no rows, expected at least one run under the header");
std::map<std::string, std::size_t> first_line;  // row_id -> the line it first appears on
for (std::size_t r = 0; r < t.rows.size(); ++r) {
  const auto [it, fresh] = first_line.emplace(t.Get(r, "row_id"), r < t.lines.size() ? t.lines[r] : r + 2);
  if (!fresh) {
    throw InputError(runs_csv + ": " + RowLabel(t, r) + ", column row_id: got \"" + it->first +
                     "\" again (first on line " + std::to_string(it->second) + "), expected a unique row_id");
  }
}
  return t;
}

/// Why row `r` is not simulated, found before its model is read: a GPU without a preset, no
/// num_heads, no micro-batch size (NeMo's long-sequence rows read as 1: *assume_mbs1), a DeepEP
/// row without ep; "" when it is simulated.
std::string EarlySkipReason(const CsvTable& t, std::size_t r, bool* assume_mbs1) {
  const std::string gpu = t.Get(r, "gpu_type");
  if (gpu.rfind("A100", 0) != 0 && gpu.rfind("H100", 0) != 0 && gpu.rfind("H800", 0) != 0 &&
      gpu.rfind("GB200", 0) != 0) {
    return "GPU type '" + gpu + "' has no preset mapping (A100, H100, H800 and GB200 rows are modelled)";
  }
  if (t.Get(r, "num_heads").empty()) return "the row does not give num_heads";
  // NeMo's long-sequence table (S7) gives no micro-batch size: at 4M tokens per batch its runs
  // have 1 to 64 sequences per data-parallel replica, and NeMo's long-context recipes run one
  // sequence per micro-batch, which validate assumes and says.
  *assume_mbs1 = t.Get(r, "micro_batch_size").empty() && Contains(t.Get(r, "missing_key_fields"), "micro_batch_size") &&
                 Contains(t.Get(r, "framework"), "Megatron-Core");
  if (t.Get(r, "micro_batch_size").empty() && !*assume_mbs1) return "the row does not give micro_batch_size";
  // A MoE row on DeepEP (or HybridEP) that leaves ep blank: those dispatchers exchange tokens
  // over an expert-parallel group, so ep > 1, but which ep is not known (NeMo Automodel's
  // table prints "-"); the experts' sharding and its traffic decide the step.
  const std::string notes = t.Get(r, "notes");
  if (t.Column("ep") >= 0 && t.Get(r, "ep").empty() && NoteValues(notes).count("num_experts") &&
      (Contains(notes, "DeepEP") || Contains(notes, "HybridEP"))) {
    return "the row does not give ep (its DeepEP dispatcher needs expert parallelism, ep > 1)";
  }
  return "";
}

/// What a row's recompute and dp_sharding cells chose (ChoiceField indices), for the framework
/// rules that read them.
/// The index of "PyTorch FSDP2" among MapRowBasics' dp_sharding prefixes.
constexpr std::size_t kShardingFsdp2 = 6;

struct RowChoices {
  std::size_t recompute = 0;  ///< 0 unstated, 1 full, 2 selective, 3 none
  std::size_t sharding = 0;   ///< index in the dp_sharding prefixes; 0 unstated
};

/// The row's sizes, recompute, sequence parallelism, sharding, attention kernel and precision.
RowChoices MapRowBasics(const CsvTable& t, std::size_t r, const std::string& runs_csv, const Model& m, bool assume_mbs1,
                        ParallelConfig* c) {
  c->tp = IntField(t, r, "tp", runs_csv);
  c->pp = IntField(t, r, "pp", runs_csv);
  c->dp = IntField(t, r, "dp", runs_csv);
  c->vp = t.Get(r, "vp").empty() ? 1 : IntField(t, r, "vp", runs_csv);
  c->schedule = c->vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  c->cp = t.Get(r, "cp").empty() ? 1 : IntField(t, r, "cp", runs_csv);
  // The sizes must multiply to the GPUs (a typo in one of them is bad input, not a run that
  // cannot be simulated).
  const std::int64_t gpus = IntField(t, r, "num_gpus", runs_csv);
  if (c->tp * c->pp * c->cp * c->dp != gpus) {
    throw InputError(fmt::format("{}: {}, columns tp, pp, cp, dp: got {} x {} x {} x {} = {}, expected num_gpus = {}",
                                 runs_csv, RowLabel(t, r), c->tp, c->pp, c->cp, c->dp, c->tp * c->pp * c->cp * c->dp,
                                 gpus));
  }
  if (t.Column("ep") >= 0 && !t.Get(r, "ep").empty()) c->ep = IntField(t, r, "ep", runs_csv);
  c->micro_batch_size = assume_mbs1 ? 1 : IntField(t, r, "micro_batch_size", runs_csv);
  c->global_batch_size = IntField(t, r, "global_batch_size", runs_csv);
  c->seq_length = m.seq_length;
  // SC21 Table 2 rows leave recompute unstated; the paper's Table 1 runs, whose FLOP count
  // (eq. 3) they share, used full recompute.
  const std::size_t rc =
      ChoiceField(t, r, "recompute", runs_csv, {"", "full", "selective", "none", "not stated"}) % 4;  // not stated: as empty
  c->recompute = rc <= 1 ? Recompute::kFull : rc == 2 ? Recompute::kSelective : Recompute::kNone;
  if (c->recompute == Recompute::kSelective) c->recompute_modules = RowRecomputeModules(t.Get(r, "recompute"), m);
  c->sequence_parallel = ChoiceField(t, r, "sequence_parallel", runs_csv, {"", "no", "yes", "n/a"}) == 2;
  const std::size_t sh = ChoiceField(t, r, "dp_sharding", runs_csv,
                                     {"", "none", "ZeRO-1", "PyTorch FSDP SHARD_GRAD_OP", "PyTorch FSDP FULL_SHARD",
                                      "distributed optimizer", "PyTorch FSDP2", "Megatron-FSDP", "ZeRO-3"});
  c->zero_stage = sh >= 6 || sh == 4 ? 3 : sh == 3 ? 2 : sh == 2 || sh == 5 ? 1 : 0;
  // PyTorch's FSDP (FULL_SHARD, SHARD_GRAD_OP, FSDP2) keeps fp32 shards as the optimizer's
  // master; Megatron-Core's own FSDP paths keep Megatron's optimizer (MapNemoMegatronCore).
  if ((sh == 3 || sh == 4 || sh == 6) && !Contains(t.Get(r, "framework"), "Megatron-Core")) {
    c->optimizer_impl = OptimizerImpl::kTorchFsdp;
  }
  // Fused attention: FlashAttention, or Transformer Engine's fused (cuDNN) attention ("TE",
  // FlexAttention) of the newer PyTorch-side rows.
  c->flash_attention = Contains(t.Get(r, "framework"), "FlashAttention") || Contains(t.Get(r, "framework"), "TE ") ||
                      Contains(t.Get(r, "framework"), "FlexA");
  c->precision = RowPrecision(t, r, runs_csv);
  c->embedding_slots = Contains(t.Get(r, "notes"), "PP slots");
  return {rc, sh};
}

/// What Megatron-LM of 2021-22 (S1, S3) and DeepSpeed (S12, S15) did: gradient reduction after
/// the backward pass, blocking pipeline transfers, the synchronous TP input-gradient all-reduce,
/// DeepSpeed's optimizer and buckets of that time.
void MapLegacyFrameworks(const CsvTable& t, std::size_t r, const std::string& runs_csv, ParallelConfig* c) {
  // What the frameworks did: Megatron-LM of 2021-22 (S1, S3) and DeepSpeed's pipeline engine
  // (S12) reduce gradients after the backward pass.
  const std::string fw = t.Get(r, "framework");
  const bool mcore = Contains(fw, "Megatron-Core");
  if (Contains(fw, "Megatron") && !mcore) {
    c->overlap_grad_reduce = false;
    // Megatron-LM's p2p_communication of 2021-22 (and Megatron-DeepSpeed's) waits on every
    // batch_isend_irecv request and then calls torch.cuda.synchronize() "to protect against
    // race condition": pipeline transfers block the stage like DeepSpeed's.
    c->p2p_blocking = true;
  }
  // The input-gradient TP all-reduce ran synchronously in SC21's Megatron-LM (PTD-P, commit
  // 6985e58, April 2021; the asynchronous one came later in 2021) and in Megatron-DeepSpeed, whose
  // ColumnParallelLinear uses copy_to_tensor_model_parallel_region. Korthikanti's 2022 runs
  // overlapped it with the weight-gradient GEMM.
  if (Contains(fw, "6985e58") || Contains(fw, "PTD-P") || Contains(fw, "DeepSpeed")) c->async_tp_grad_reduce = false;
  if (Contains(fw, "DeepSpeed")) {
    // DeepSpeed's pipeline engine: sends/receives are blocking and run in order with the
    // compute; activations are partitioned over the tensor-parallel ranks (pipe_partitioned,
    // on by default), like Megatron's scatter/gather.
    c->p2p_blocking = true;
    // DeepSpeed gathers the updated 16-bit parameters inside optimizer.step()
    // (all_gather_dp_groups), before the next step starts.
    c->overlap_param_gather = false;
    // fp16 runs used DeepSpeed's ZeRO-1 (16-bit gradients reduced to their owners); from
    // 2022-02-28 BLOOM ran the BF16_Optimizer (ZeRO stage 0 + its own optimizer sharding).
    c->optimizer_impl = Contains(t.Get(r, "dp_sharding"), "BF16_Optimizer") ? OptimizerImpl::kDeepSpeedBf16 : OptimizerImpl::kDeepSpeedZero;
    // SC21's ZeRO-3 comparison (April 2021) ran DeepSpeed's stage 3 of that time: per-tensor,
    // synchronized list collectives (Zero3Impl::kDeepSpeed2021).
    if (c->zero_stage >= 3) c->zero3_impl = Zero3Impl::kDeepSpeed2021;
    // These runs (2021-22) ran DeepSpeed before v0.13, whose engine turned contiguous_gradients
    // off at ZeRO-1 (PR 1246; GPT-NeoX's pinned DeeperSpeed eb7f5cff ran the legacy stage-1
    // optimizer, which has none): no gradient bucket is held.
    if (c->zero_stage == 1) c->ds_contiguous_gradients = false;
    // ... and before v0.12.4, whose ZeRO-1/2 reduced each rank's gradient slices to it alone
    // where contiguous gradients were on (use_multi_rank_bucket_allreduce came with PR 4695).
    c->ds_multi_rank_bucket_allreduce = false;
    // A reduce_bucket_size other than DeepSpeed's 5e8 (GPT-NeoX's 20B.yml: 1.26e9), from the notes.
    if (const auto kv = NoteValues(t.Get(r, "notes")); kv.count("reduce_bucket_size")) {
      const auto b = Num(kv.at("reduce_bucket_size"));
      if (!b || !(*b > 0) || *b > 1e12) {
        throw InputError(runs_csv + ": " + RowLabel(t, r) + ", column notes: reduce_bucket_size=" +
                         kv.at("reduce_bucket_size") + ", expected a positive number of elements up to 1e12");
      }
      c->ds_reduce_bucket_elems = *b;
    }
  }
}

/// NeMo's performance recipes on Megatron-Core (S6, S7 and the MoE rows).
void MapNemoMegatronCore(const CsvTable& t, std::size_t r, RowChoices ch, ParallelConfig* c, ValidationRow* row) {
  const std::size_t rc = ch.recompute, sh = ch.sharding;
  // NeMo's performance recipes on Megatron-Core (NeMo 24.x, S6 and S7): sequence parallelism
  // and Transformer Engine's TP communication overlap wherever tp > 1, the distributed
  // optimizer with gradient reduction and parameter gathering overlapped, non-blocking
  // pipeline transfers, Transformer Engine's fused (cuDNN) attention, no activation recompute
  // where the row does not state one (their TFLOP/s match the formula without it), FP8 with
  // delayed scaling over an amax history of 1024 (NeMo's fp8_amax_history_len, "max").
  c->flash_attention = true;
  c->sequence_parallel = c->tp > 1;
  c->tp_comm_overlap = c->tp > 1;
  if (rc == 0) {
    c->recompute = Recompute::kNone;
    if (Contains(t.Get(r, "missing_key_fields"), "recompute")) row->assumptions.push_back("no activation recompute (not stated)");
  }
  if (sh == 0) c->zero_stage = c->dp > 1 ? 1 : 0;
  c->fp8_recipe = Fp8Recipe::kDelayed;
  c->fp8_amax_history_len = 1024;
  // NeMo's FP8 precision recipe (bf16_with_fp8_mixed in nemo/collections/llm/recipes/
  // precision/mixed_precision.py) keeps the parameters in FP8 (fp8_params): no 16-bit
  // weight copy, the parameter all-gather in FP8.
  c->fp8_param_gather = c->precision == Precision::kFp8 && c->zero_stage >= 1;
  c->overlap_grad_reduce = true;
  c->overlap_param_gather = true;
  // Megatron-Core sends whole pipeline messages (no scatter/gather); its non-interleaved
  // 1F1B waits on each send and receive (schedules.py), the interleaved one does not.
  c->scatter_gather = false;
  c->p2p_blocking = c->pp > 1 && c->vp == 1;
  // NeMo-Framework-Launcher's training configs at tag 24.07 set cross_entropy_loss_fusion: true
  // for Llama 3 8B/70B and Nemotron 8B/22B (their "perf optimizations" of 2024-06), not for
  // GPT-3, Llama 2 or Nemotron-340B; NeMo 24.07 ships Megatron-Core 0.8, whose fused loss is
  // the native one.
  const std::string model = t.Get(r, "model");
  if (Contains(model, "LLAMA3") || model == "Nemotron-8B" || model == "Nemotron-22B") {
    c->cross_entropy = CrossEntropyImpl::kNative;
  }
}

/// Where the chunks do not divide the layers and the row gives no layout: Megatron-Core's
/// embedding and loss slots where they make the chunks divide, else an even spread; stated.
void MapPipelineLayoutAssumption(const Model& m, bool mcore, ParallelConfig* c, ValidationRow* row) {
  const std::int64_t chunks = c->pp * std::max<std::int64_t>(1, c->vp);
  if (mcore && c->pp > 1 && m.num_layers % chunks != 0 && (m.num_layers + 2) % chunks == 0 && !c->uneven_pipeline() &&
      !c->embedding_slots) {
    // Megatron-Core needs the chunks to divide the layers; the layout it offers that makes
    // them divide here counts the embedding and the loss as one layer each
    // (--account-for-embedding-in-pipeline-split / -loss-), as the ModelZoo's Qwen3-235B-A22B
    // does (runtime.conf: 96 = 94 layers + embedding + loss).
    c->embedding_slots = true;
    row->assumptions.push_back("embedding and loss counted as one pipeline layer each (num_layers + 2 divides the "
                              "pp*vp chunks; the run's layout is not given)");
  } else if (c->vp > 1 && m.num_layers % (c->pp * c->vp) != 0 && !c->uneven_pipeline()) {
    c->even_chunks = true;
    row->assumptions.push_back("layers spread evenly over the pp*vp chunks (the run's pipeline layout is not given)");
  }
}

/// Megatron-Core's fine-grained activation offloading where the row's notes name it ("activation
/// offloading of expert_fc1 and moe_act"): the modules named up to the next ';'. A module the
/// simulator does not model is said, and nothing is offloaded.
void MapActivationOffloading(const std::string& notes, const Model& m, ValidationRow* row) {
  const std::size_t at = notes.find("activation offloading of ");
  if (at == std::string::npos) return;
  const std::size_t end = notes.find(';', at);
  const std::string span = notes.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::vector<std::string> names;
  for (const char* n : {"core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear"}) {
    if (Contains(span, n)) names.emplace_back(n);
  }
  try {
    const unsigned mods = ParseOffloadModules(names, "the notes' activation offloading");
    RequireOffloadModules(m, mods, "the notes' activation offloading");
    row->config.offload_modules = mods;
    row->assumptions.push_back(fmt::format("the notes' activation offloading as Megatron-Core's --offload-modules {}",
                                           OffloadModulesName(mods)));
  } catch (const InputError& e) {
    row->assumptions.push_back(std::string("no activation offloading: ") + e.what());
  }
}

/// PyTorch's pipelining under a gradient-accumulation loop (NeMo Automodel's benchmark recipe,
/// torchtitan) calls the schedule's step() once per local batch: a row whose notes give its
/// gradient-accumulation steps ("GA=4") runs that many pipeline flushes a step. PyTorch's stage
/// reduces gradients at the end of each step() call; NeMo Automodel's MoE models patch that to
/// the optimizer step (MoEFSDPSyncMixin, components/moe/fsdp_mixin.py), so theirs reduce once.
void MapGradientAccumulationFlushes(const CsvTable& t, std::size_t r, const std::string& fw, const Model& model,
                                    ValidationRow* row) {
  const std::string notes = t.Get(r, "notes");
  std::string digits;
  for (std::size_t pos = notes.find("GA="); pos != std::string::npos && digits.empty(); pos = notes.find("GA=", pos + 1)) {
    if (pos > 0 && IsLetter(notes[pos - 1])) continue;
    for (std::size_t k = pos + 3; k < notes.size() && std::isdigit(static_cast<unsigned char>(notes[k])); ++k) {
      digits += notes[k];
    }
  }
  if (digits.empty()) return;
  ParallelConfig* c = &row->config;
  const std::int64_t ga = std::stoll(digits.substr(0, 6));
  const std::int64_t m = c->num_microbatches();
  if (ga <= 1) return;
  if (m <= 0 || m % ga != 0) {
    row->assumptions.push_back(fmt::format("one pipeline schedule a step: the notes' GA={} does not divide its {} "
                                           "micro-batches",
                                           ga, m));
    return;
  }
  c->pipeline_flushes = ga;
  c->flush_grad_reduce = !(Contains(fw, "Automodel") && model.moe.enabled());
  row->assumptions.push_back(fmt::format("its {} gradient-accumulation steps as {} pipeline flushes of {} micro-batches "
                                         "(PyTorch pipelining: one schedule step() per local batch), gradients reduced {}",
                                         ga, ga, m / ga,
                                         c->flush_grad_reduce ? "after each (PyTorch's pipeline stage)"
                                                              : "once, after the last (NeMo Automodel's MoE FSDP mixin)"));
}

/// The parallel configuration of row `r` as its framework ran it (assumptions into `row`).
void MapRowConfig(const CsvTable& t, std::size_t r, const std::string& runs_csv, const Model& m, bool assume_mbs1,
                  ValidationRow* row) {
  ParallelConfig* c = &row->config;
  const RowChoices ch = MapRowBasics(t, r, runs_csv, m, assume_mbs1, c);
  const std::string fw = t.Get(r, "framework");
  const bool mcore = Contains(fw, "Megatron-Core");
  MapLegacyFrameworks(t, r, runs_csv, c);
  if (mcore) MapNemoMegatronCore(t, r, ch, c, row);
  if (mcore) MapActivationOffloading(t.Get(r, "notes"), m, row);
  if (ch.sharding == kShardingFsdp2 && c->pp > 1 && !mcore) {
    // FSDP2 under PyTorch's pipeline schedules (torchtitan, NeMo Automodel: reshard_after_forward
    // = not pp_enabled; the stage turns reshard-after-backward and gradient sync off until its
    // last backward, then reduce-scatters once): ZeRO-1's traffic without the overlap. After the
    // framework's settings, which would turn the overlap back on.
    c->zero_stage = 1;
    c->overlap_grad_reduce = false;
    row->assumptions.push_back(std::string("FSDP2 with pipeline parallelism read as ") + kFsdp2PipelineEquivalent);
    MapGradientAccumulationFlushes(t, r, fw, m, row);
  }
  const std::size_t rc = ch.recompute;
  // The defaults of a row that leaves these columns empty, stated (docs/validate.md).
  if (rc == 0 && !mcore) row->assumptions.push_back("full activation recompute (not stated)");
  if (t.Get(r, "precision").empty()) row->assumptions.push_back("fp16 (precision not stated)");
  // llm-foundry's MPT computes the loss with its default loss_fn, fused_crossentropy (flash-attn's
  // Triton cross-entropy: one kernel over the 16-bit logits).
  if (Contains(fw, "llm-foundry")) c->cross_entropy = CrossEntropyImpl::kFlashAttn;
  if (Contains(t.Get(r, "notes"), "MP Mode DEFAULT")) {
    // Composer's FSDP mixed precision 'DEFAULT' since composer PR 2047 (2023-03): parameters
    // all-gathered in the autocast precision (bf16), gradients reduce-scattered in fp32 (made
    // explicit by PR 2628, 2023-10). The >= 128-GPU table came after both (it follows the FP8
    // tables of late 2023).
    c->param_gather_bytes = 2.0;
    c->fp32_main_grads = true;
  }
  if (m.moe.enabled()) MapExpertSettings(t, r, runs_csv, c);
  MapPipelineLayoutAssumption(m, mcore, c, row);
}

/// The row's measured step time (iter_time_s, step_time_s_derived, or from tflops_per_gpu in the
/// row's FLOP convention) and peak memory, and their errors against the prediction `res`.
void FillMeasured(const CsvTable& t, std::size_t r, const std::string& runs_csv, const SimulationResult& res,
                  ValidationRow* row) {
  // Measured values, when given, must be positive numbers.
  auto measured = [&](const char* col) -> std::optional<double> {
    const std::string v = t.Get(r, col);
    if (v.empty()) return std::nullopt;
    const auto d = Num(v);
    if (!d || !(*d > 0) || !std::isfinite(*d)) {
      throw InputError(runs_csv + ": " + RowLabel(t, r) + ", column " + col + ": got \"" + v +
                       "\", expected a positive finite number or an empty cell");
    }
    return d;
  };
  row->measured_step_time_s = measured("iter_time_s");
  if (!row->measured_step_time_s) {
    row->measured_step_time_s = measured("step_time_s_derived");
    row->step_time_derived = row->measured_step_time_s.has_value();
  }
  // The FLOPs per step in the row's convention (validation/README.md): its TFLOP/s compare with
  // the prediction's in the same convention, and a row with only TFLOP/s (S7) derives its step time.
  const bool causal = Contains(t.Get(r, "flops_convention"), "causal");
  row->flops_convention_causal = causal;
  row->model_flops_per_step = causal ? res.model_flops_causal_per_step : res.model_flops_per_step;
  if (!row->measured_step_time_s) {
    if (const auto tf = measured("tflops_per_gpu")) {
      row->measured_step_time_s = row->model_flops_per_step / (*tf * 1e12 * static_cast<double>(row->gpus));
      row->step_time_derived = true;
    }
  }
  if (row->measured_step_time_s) {
    row->step_time_error = *row->predicted_step_time_s / *row->measured_step_time_s - 1.0;
  }
  if (auto mem = measured("peak_mem_gb")) {
    // nvidia-smi reports MiB; the source's "GB" are GiB. nvidia-smi shows what the caching
    // allocator reserves (plus the CUDA context and libraries): compared with the reserved figure.
    row->measured_peak_memory_bytes = *mem * 1073741824.0;
    row->memory_is_reserved = Contains(t.Get(r, "mem_definition"), "nvidia-smi") ||
                             Contains(t.Get(r, "mem_definition"), "reserved");
    const double predicted = row->memory_is_reserved ? *row->predicted_reserved_bytes : *row->predicted_peak_memory_bytes;
    row->memory_error = predicted / *row->measured_peak_memory_bytes - 1.0;
  }
}

/// Memory point `r`'s model (Korthikanti et al.'s GPT layer: GELU MLP of 4h, learned positions,
/// vocabulary 51200) and configuration: the global batch and virtual stages of the S3 run of the
/// same layers, tp and pp in the runs CSV, else micro-batch x pp x 8 and none (said in
/// pt->assumption).
std::pair<Model, ParallelConfig> MemoryPointRun(const CsvTable& mt, std::size_t r, const std::string& memory_csv,
                                                const CsvTable& t, const std::string& runs_csv, MemoryPoint* pt) {
  // The configuration of the matching Korthikanti run (same layers, hidden, tp, pp).
  Json j = {{"name", pt->model}, {"num_layers", IntField(mt, r, "num_layers", memory_csv)},
            {"hidden_size", IntField(mt, r, "hidden_size", memory_csv)},
            {"ffn_hidden_size", 4 * IntField(mt, r, "hidden_size", memory_csv)},
            {"num_attention_heads", IntField(mt, r, "num_heads", memory_csv)}, {"vocab_size", 51200},
            {"seq_length", IntField(mt, r, "seq_len", memory_csv)}, {"normalization", "layernorm"},
            {"activation", "gelu"}, {"position_embedding", "learned"}, {"tie_embeddings", true}};
  const Model m = ModelFromJson(j, memory_csv);
  ParallelConfig c;
  c.tp = IntField(mt, r, "tp", memory_csv);
  c.pp = IntField(mt, r, "pp", memory_csv);
  c.dp = 1;
  c.micro_batch_size = IntField(mt, r, "micro_batch_size", memory_csv);
  c.global_batch_size = c.micro_batch_size * c.pp * 8;
  c.seq_length = m.seq_length;
  c.flash_attention = false;
  bool matched = false;
  for (std::size_t q = 0; q < t.rows.size(); ++q) {
    if (t.Get(q, "source_id") == "S3" && t.Get(q, "num_layers") == mt.Get(r, "num_layers") &&
        t.Get(q, "tp") == mt.Get(r, "tp") && t.Get(q, "pp") == mt.Get(r, "pp")) {
      c.vp = t.Get(q, "vp").empty() ? 1 : IntField(t, q, "vp", runs_csv);
      c.global_batch_size = IntField(t, q, "global_batch_size", runs_csv);
      matched = true;
    }
  }
  pt->tp = c.tp;
  pt->pp = c.pp;
  if (!matched) {
    pt->assumption = fmt::format("global batch {} (micro-batch x pp x 8), no virtual stages: no S3 run of {} layers at "
                                "tp {} pp {} in {}",
                                c.global_batch_size, m.num_layers, c.tp, c.pp, runs_csv);
  }
  c.schedule = c.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  return {m, c};
}

/// The memory points of `memory_csv` (Korthikanti et al. 2022's figures) against the predictions;
/// the S3 rows of the runs CSV give each point's global batch and virtual stages.
void CompareMemoryPoints(const std::string& memory_csv, const CsvTable& t, const std::string& runs_csv,
                         ValidationReport* rep) {
  const CsvTable mt = ReadCsvFile(memory_csv);
  RejectUnknownColumns(mt, memory_csv, MemoryColumns());
  RequireColumns(mt, memory_csv, {"model", "num_layers", "hidden_size", "num_heads", "seq_len", "micro_batch_size",
                                  "tp", "pp", "quantity", "setting", "value_gib"});
  if (mt.rows.empty()) throw InputError(memory_csv + ": no rows, expected at least one memory point under the header");
  for (std::size_t r = 0; r < mt.rows.size(); ++r) {
    MemoryPoint pt;
    pt.model = mt.Get(r, "model");
    pt.quantity = mt.Get(r, "quantity");
    pt.setting = mt.Get(r, "setting");
    pt.source = mt.Get(r, "source");
    CheckMemoryPointKind(mt, r, memory_csv);
    auto v = Num(mt.Get(r, "value_gib"));
    if (!v || !(*v > 0) || !std::isfinite(*v)) {
      throw InputError(memory_csv + ": " + RowLabel(mt, r) + ", column value_gib: got \"" + mt.Get(r, "value_gib") +
                       "\", expected a positive number (GiB, or a fraction for activations_relative_to_none)");
    }
    pt.published_GiB = *v;
    const auto [m, c] = MemoryPointRun(mt, r, memory_csv, t, runs_csv, &pt);
    const Cluster cl = LoadCluster("dgx-a100");
    if (const auto why = InfeasibilityReasons(m, c, c.tp * c.pp, cl); !why.empty()) {
      throw InputError(memory_csv + ": " + RowLabel(mt, r) + ": tp " + std::to_string(c.tp) + " and pp " +
                       std::to_string(c.pp) + " cannot run this model (" + Join(why, "; ") +
                       "), expected a configuration of Korthikanti et al. 2022");
    }
    const HardwareProfile prof = DefaultProfile(cl);
    // Fig. 1's parameter-and-optimizer bars and Fig. 7's fractions count the transformer layers
    // alone (Fig. 1's activation bars are the whole first stage, below). The parameter bars are
    // 18 bytes times the first stage's transformer-layer parameters to four digits for all four
    // models (45.56, 45.56, 31.64, 32.96 GiB), so the embedding is not in them; Fig. 7's
    // fractions are the per-layer formulas of Table 2 (e.g. full recompute 2 / (10 + 24/t +
    // 5as/(ht)) = 0.0870 for GPT-3 at t = 8 vs 0.0871 published).
    auto layer_saved = [&](bool sp, Recompute rc) {
      ParallelConfig x = c;
      x.sequence_parallel = sp;
      x.recompute = rc;
      return BuildCostModel(m, x, cl, prof).layer_saved_bytes;
    };
    const std::string& st = pt.setting;
    const bool sp = Contains(st, "SP") && !Contains(st, "no SP");
    const Recompute rc = Contains(st, "full")        ? Recompute::kFull
                         : Contains(st, "selective") ? Recompute::kSelective
                                                     : Recompute::kNone;
    if (pt.quantity == "params_and_optimizer_per_gpu") {  // CheckMemoryPointKind allowed these three
      pt.predicted_GiB =
          ParametersOfStage(m, c.tp, c.pp, 0).layer_params * BytesPerParam(c).total() / 1073741824.0;
    } else if (pt.quantity == "activations_per_gpu") {
      // Fig. 1's bars are the first stage's activations with p micro-batches in flight
      // (1F1B), embedding and all, as the simulator tracks them (no working memory).
      ParallelConfig x = c;
      x.sequence_parallel = sp;
      x.recompute = rc;
      pt.predicted_GiB =
          Simulate(m, x, cl, c.tp * c.pp, prof).stages.at(0).memory.saved_activations_bytes / 1073741824.0;
    } else if (pt.quantity == "activations_relative_to_none") {
      pt.predicted_GiB = layer_saved(sp, rc) / layer_saved(false, Recompute::kNone);
    }
    pt.error = pt.predicted_GiB / pt.published_GiB - 1.0;
    rep->memory_points.push_back(pt);
  }
}

}  // namespace

namespace {

/// --explain's row_id in canonical form ("" without --explain); InputError for one that is none.
std::string ExplainRowOf(const std::string& explain_row_arg) {
  const std::string explain_row = CanonicalRowId(explain_row_arg);
  if (!explain_row_arg.empty() && explain_row.empty()) {
    throw InputError("--explain: got '" + explain_row_arg + "', expected a row_id such as 1");
  }
  return explain_row;
}

/// Row r of the published runs in `runs_csv`: its model, cluster and configuration mapped,
/// simulated and compared with what was measured, or skipped with a reason, into `rep`; kept as
/// the explained row when it is `explain_row`.
void ValidateRow(const CsvTable& t, std::size_t r, const std::string& runs_csv, const std::string& explain_row,
                 ValidationReport* rep) {
  ValidationRow row;
  row.row_id = t.Get(r, "row_id");
  row.source_id = t.Get(r, "source_id");
  row.model = t.Get(r, "model");
  row.gpu_type = t.Get(r, "gpu_type");
  row.outcome = t.Get(r, "outcome");
  if (row.outcome != "ok" && row.outcome != "OOM") {
    throw InputError(runs_csv + ": " + RowLabel(t, r) + ", column outcome: got \"" + row.outcome +
                     "\", expected ok or OOM (ran out of memory)");
  }
  if (auto g = Num(t.Get(r, "num_gpus"))) row.gpus = static_cast<std::int64_t>(*g);  // also for skipped rows
  bool assume_mbs1 = false;
  row.skip_reason = EarlySkipReason(t, r, &assume_mbs1);
  if (!row.skip_reason.empty()) {
    row.skipped = true;
    rep->rows.push_back(row);
    return;
  }
  if (assume_mbs1) row.assumptions.push_back("micro-batch size 1 (not stated)");
  const Model m = RowModel(t, r, runs_csv);
  const Cluster cl = RowCluster(t, r);
  row.gpus = IntField(t, r, "num_gpus", runs_csv);
  // Runs are ranked against runs of the same model on as many GPUs of the same type.
  row.group = row.model + " @" + std::to_string(row.gpus) + " " + cl.gpu.name;
  if (t.Column("confidence") >= 0) {
    // low-confidence: a row its source contradicts (the notes say how), reported apart.
    row.low_confidence = ChoiceField(t, r, "confidence", runs_csv, {"", "high", "medium", "low"}) == 3;
  }
  row.fitted_constant = RowFittedConstant(t, r, runs_csv, row);
  MapRowConfig(t, r, runs_csv, m, assume_mbs1, &row);
  const ParallelConfig& c = row.config;
  const std::string fw = t.Get(r, "framework");
  const bool mcore = Contains(fw, "Megatron-Core");
  if (!cl.gpu.Runs(c.precision)) {
    row.skipped = true;
    row.assumptions.clear();
    row.skip_reason = fmt::format("precision {} is not supported by the {}; it runs: {}", ToString(c.precision),
                                  cl.gpu.display_name, cl.gpu.PrecisionList());
    rep->rows.push_back(row);
    return;
  }
  HardwareProfile prof = DefaultProfile(cl);
  if (c.flash_attention && cl.gpu.arch == "hopper" && !RowRunsTeAttention(fw, mcore)) {
    prof = WithAttentionKernel(prof, cl.gpu.arch, "fa2");
    row.assumptions.push_back(RowNamesFlexAttention(fw)
                                  ? "FlashAttention-2's attention rates on Hopper (the row names FlexAttention, "
                                    "FA2-class)"
                                  : "FlashAttention-2's attention rates on Hopper (a PyTorch-side run without "
                                    "Transformer Engine's kernels)");
  }
  const SimulationResult res = Simulate(m, c, cl, row.gpus, prof);
  if (!res.feasible) {
    row.skipped = true;
    row.assumptions.clear();
    row.skip_reason = "cannot be simulated: " + Join(res.reasons, "; ");
    rep->rows.push_back(row);
    return;
  }
  if (!explain_row.empty() && CanonicalRowId(row.row_id) == explain_row) {
    rep->explained = ExplainedRow{row.row_id, m, cl, prof, res};
  }
  FillPrediction(res, &row);
  FillMeasured(t, r, runs_csv, res, &row);
  rep->rows.push_back(row);
}

/// --explain named no simulated row: why (no such row_id, or the row was skipped), with the ids
/// that would do.
[[noreturn]] void ThrowNoExplainedRow(const ValidationReport& rep, const std::string& explain_row,
                                      const std::string& explain_row_arg, const std::string& runs_csv) {
  std::string why = "no row has that row_id";
  std::vector<std::string> ids;
  for (const auto& r : rep.rows) {
    if (CanonicalRowId(r.row_id) == explain_row) why = "the row was skipped: " + r.skip_reason;
    if (!r.skipped) ids.push_back(r.row_id);
  }
  std::sort(ids.begin(), ids.end(), RowIdBefore);
  throw InputError(runs_csv + ": row_id '" + explain_row_arg + "' (--explain): " + why +
                   "; expected the row_id of a simulated row: " + Join(ids, ", "));
}

}  // namespace

ValidationReport RunValidation(const std::string& runs_csv, const std::string& memory_csv,
                               const std::string& explain_row_arg) {
  const std::string explain_row = ExplainRowOf(explain_row_arg);
  ValidationReport rep;
  const CsvTable t = ReadRunsTable(runs_csv);
  for (std::size_t r = 0; r < t.rows.size(); ++r) ValidateRow(t, r, runs_csv, explain_row, &rep);
  if (!memory_csv.empty()) {
    rep.memory_csv = memory_csv;
    CompareMemoryPoints(memory_csv, t, runs_csv, &rep);
  }
  Summarize(&rep);
  if (!explain_row.empty() && !rep.explained) ThrowNoExplainedRow(rep, explain_row, explain_row_arg, runs_csv);
  return rep;
}

ValidationReport ValidateLoggedRuns(const std::vector<LoggedRun>& runs, const Cluster& cluster,
                                    const HardwareProfile& profile, const std::string& explain_row_arg) {
  const std::string explain_row = ExplainRowOf(explain_row_arg);
  ValidationReport rep;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const LoggedRun& run = runs[i];
    rep.logs.push_back(run.file);
    ValidationRow row;
    row.row_id = std::to_string(i + 1);
    row.source_id = run.format == "megatron" ? "MLM" : "TT";
    row.model = run.model.name;
    row.gpu_type = cluster.gpu.display_name;
    row.gpus = run.gpus;
    row.outcome = "ok";
    row.group = row.model + " @" + std::to_string(row.gpus);
    row.config = run.config;
    row.assumptions = run.notes;
    row.log = run.file;
    row.measured_reserved_bytes = run.max_reserved_bytes;
    if (MegatronCannotSplit(run.model, run.config)) {
      row.assumptions.push_back(fmt::format("{} layer{} do not divide the {} pipeline chunks: simulated spread as evenly "
                                            "as they go (Megatron-LM needs decoder_first/last_pipeline_num_layers for that)",
                                            run.model.num_layers + (run.config.embedding_slots ? 2 : 0),
                                            run.config.embedding_slots ? " slots" : "s",
                                            run.config.pp * std::max<std::int64_t>(1, run.config.vp)));
    }
    // A peak above the GPU's memory was measured on another GPU: the --cluster is not the machine.
    for (const auto& [what, bytes] : {std::pair{"max allocated", run.max_allocated_bytes},
                                      std::pair{"max reserved", run.max_reserved_bytes}}) {
      if (bytes && *bytes > cluster.gpu.memory_bytes) {
        throw InputError(fmt::format("{}: the logged {} memory, {}, is more than the {}'s {} ({}): expected --cluster "
                                     "to be the machine the log ran on",
                                     run.file, what, FormatGiB(*bytes), cluster.gpu.display_name,
                                     FormatGiB(cluster.gpu.memory_bytes), cluster.name));
      }
    }
    // What the log measured, kept for a run that is then skipped too (its CSV and JSON rows say it).
    row.measured_step_time_s = run.measured_step_time_s;
    row.step_time_derived = run.format == "torchtitan";  // from tokens per second
    if (run.max_allocated_bytes) {
      row.measured_peak_memory_bytes = *run.max_allocated_bytes;
    } else if (run.max_reserved_bytes) {
      row.measured_peak_memory_bytes = *run.max_reserved_bytes;
      row.memory_is_reserved = true;
    }
    // torchtitan attends with PyTorch's SDPA (FlashAttention-2's kernels on Hopper).
    const HardwareProfile run_profile =
        run.format == "torchtitan" && run.config.flash_attention ? WithPyTorchAttention(profile, cluster.gpu.arch) : profile;
    if (run_profile.attention_kernel != profile.attention_kernel) {
      row.assumptions.push_back("FlashAttention-2's attention rates on Hopper (PyTorch's SDPA flash kernel)");
    }
    SimulationResult res;
    try {
      RequirePrecision(cluster.gpu, run.config, "the log's configuration");
      res = Simulate(run.model, run.config, cluster, run.gpus, run_profile);
    } catch (const InputError& e) {
      // A setting this cluster or profile cannot run (a precision its GPU has no rate for):
      // the run is skipped with the reason, the others go on.
      res.feasible = false;
      res.reasons = {e.what()};
    }
    if (!res.feasible) {
      row.skipped = true;
      row.skip_reason = "cannot be simulated: " + Join(res.reasons, "; ");
      rep.rows.push_back(row);
      continue;
    }
    if (!explain_row.empty() && row.row_id == explain_row) rep.explained = ExplainedRow{row.row_id, run.model, cluster, run_profile, res};
    FillPrediction(res, &row);
    row.model_flops_per_step = res.model_flops_per_step;
    row.step_time_error = res.step_time_s / run.measured_step_time_s - 1.0;
    if (run.max_allocated_bytes) {
      row.memory_error = res.peak_memory_bytes / *run.max_allocated_bytes - 1.0;
    } else if (run.max_reserved_bytes) {
      row.memory_error = res.peak_reserved_bytes / *run.max_reserved_bytes - 1.0;
    }
    rep.rows.push_back(row);
  }
  Summarize(&rep);
  if (!explain_row.empty() && !rep.explained) {
    for (const auto& r : rep.rows) {
      if (r.row_id == explain_row) throw InputError("--explain " + explain_row + ": run " + explain_row + " was skipped: " + r.skip_reason);
    }
    throw InputError(fmt::format("--explain {}: expected the number of a run (1 to {})", explain_row, runs.size()));
  }
  return rep;
}

}  // namespace shardcast
