#include "models/model.h"

#include <algorithm>
#include <cstdio>

namespace shardcast {

std::string RouterSummary(const MoeSpec& e) {
  std::string s = e.router_score == "sigmoid" ? "sigmoid"
                  : e.router_pre_softmax      ? "softmax over all experts (top-k not renormalized)"
                                              : "softmax over the top-k";
  if (e.router_topk_scaling > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", e.router_topk_scaling);
    s += std::string(", times ") + buf;
  }
  if (e.router_num_groups > 0) {
    s += ", top-k within " + std::to_string(e.router_group_topk) + " of " + std::to_string(e.router_num_groups) + " groups";
  }
  if (e.router_expert_bias) s += ", expert bias (auxiliary-loss-free balancing)";
  if (e.probs_on_input) s += ", weights on the experts' input";
  return s;
}

const char* ToString(Normalization n) {
  return n == Normalization::kLayerNorm ? "layernorm" : "rmsnorm";
}
const char* ToString(Activation a) { return a == Activation::kGelu ? "gelu" : "swiglu"; }
const char* ToString(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::kLearned: return "learned";
    case PositionEmbedding::kRope: return "rope";
    case PositionEmbedding::kAlibi: return "alibi";
  }
  return "?";
}

std::int64_t Model::NormParameters() const {
  return normalization == Normalization::kLayerNorm ? 2 * hidden_size : hidden_size;
}

namespace {

/// Attention's parameters: MHA/GQA (QKV and output projections) or MLA (low-rank query and
/// key/value projections, their norms, the output projection). MLA's down projections are
/// replicated on every tensor-parallel rank (Megatron-Core builds them "duplicated").
LayerParameters AttentionParameters(const Model& m) {
  const std::int64_t h = m.hidden_size, a = m.num_attention_heads;
  LayerParameters p;
  if (m.mla.enabled()) {
    const MlaSpec& x = m.mla;
    const std::int64_t qk = x.qk_head_dim + x.qk_pos_emb_head_dim;
    std::int64_t down = h * (x.kv_lora_rank + x.qk_pos_emb_head_dim), up = x.kv_lora_rank * a * (x.qk_head_dim + x.v_head_dim);
    if (x.q_lora_rank > 0) {
      down += h * x.q_lora_rank;
      up += x.q_lora_rank * a * qk;
      p.replicated += x.q_lora_rank;  // q norm (RMSNorm)
    } else {
      up += h * a * qk;
    }
    p.replicated += down + x.kv_lora_rank;  // kv norm
    p.sharded += up + a * x.v_head_dim * h;
    p.gemm_weights = down + up + a * x.v_head_dim * h;
    return p;
  }
  const std::int64_t d = m.kv_channels;
  const std::int64_t qkv_out = a * d + 2 * m.num_query_groups * d;
  p.gemm_weights = h * qkv_out + a * d * h;
  p.sharded = p.gemm_weights;
  if (m.add_bias_linear || m.add_qkv_bias) p.sharded += qkv_out;  // QKV bias (column)
  if (m.add_bias_linear) p.replicated += h;                      // output bias (row-parallel)
  if (m.qk_layernorm) p.replicated += (m.normalization == Normalization::kLayerNorm ? 2 : 1) * 2 * d;  // q, k norms
  if (m.attention_sinks) p.sharded += a;  // a sink logit per head, with the heads
  return p;
}

/// One MLP of `f` hidden units: up (and gate with SwiGLU) and down projections, with biases.
LayerParameters MlpParameters(const Model& m, std::int64_t f, bool bias) {
  const std::int64_t h = m.hidden_size;
  const std::int64_t mult = m.activation == Activation::kSwiglu ? 2 : 1;  // gate + up
  LayerParameters p;
  p.gemm_weights = mult * h * f + f * h;
  p.sharded = p.gemm_weights;
  if (bias) {
    p.sharded += mult * f;  // up/gate bias (column-parallel)
    p.replicated += h;      // down bias (row-parallel)
  }
  return p;
}

void Add(LayerParameters* to, const LayerParameters& x) {
  to->sharded += x.sharded;
  to->replicated += x.replicated;
  to->gemm_weights += x.gemm_weights;
  to->expert += x.expert;
  to->active_gemm_weights += x.active_gemm_weights;
}

}  // namespace

LayerParameters Model::Layer() const {
  LayerParameters p = AttentionParameters(*this);
  Add(&p, MlpParameters(*this, ffn_hidden_size, add_bias_linear));
  p.replicated += 2 * NormParameters();  // input norm and post-attention norm
  p.active_gemm_weights = p.gemm_weights;
  return p;
}

LayerParameters Model::MoeLayer() const {
  if (!moe.enabled()) return Layer();
  LayerParameters p = AttentionParameters(*this);
  const std::int64_t h = hidden_size, e = moe.num_experts;
  // Router: an h x E linear layer, replicated on the tensor-parallel ranks.
  p.replicated += e * h + (moe.router_bias ? e : 0);
  p.gemm_weights += e * h;
  if (moe.shared_ffn_hidden_size > 0) Add(&p, MlpParameters(*this, moe.shared_ffn_hidden_size, add_bias_linear));
  const LayerParameters one = MlpParameters(*this, moe.ffn_hidden_size, moe.expert_bias);
  p.expert = e * one.total();
  p.active_gemm_weights = p.gemm_weights + moe.top_k * one.gemm_weights;
  p.gemm_weights += e * one.gemm_weights;
  p.replicated += 2 * NormParameters();
  return p;
}

bool Model::IsMoeLayer(std::int64_t i) const {
  const std::int64_t counted = moe.step_from_layer0 ? i : i + 1;
  return moe.enabled() && i >= moe.first_k_dense && counted % std::max<std::int64_t>(1, moe.layer_step) == 0;
}

std::int64_t Model::NoRopeFreq() const {
  const auto first = std::find(no_rope_layers.begin(), no_rope_layers.end(), true);
  if (first == no_rope_layers.end()) return 0;
  const std::int64_t n = (first - no_rope_layers.begin()) + 1;
  // Megatron-Core asserts that the frequency divides num_layers; other patterns are its list form.
  if (static_cast<std::int64_t>(no_rope_layers.size()) % n != 0) return 0;
  for (std::size_t i = 0; i < no_rope_layers.size(); ++i) {
    if (no_rope_layers[i] != ((static_cast<std::int64_t>(i) + 1) % n == 0)) return 0;
  }
  return n;
}

std::int64_t Model::WindowedLayers() const {
  if (!attention_window_modelled || attention_window <= 0) return 0;
  if (!window_layer_pattern.empty()) {
    return static_cast<std::int64_t>(std::count(window_layer_pattern.begin(), window_layer_pattern.end(), true));
  }
  return window_attn_skip_freq > 0 ? num_layers - num_layers / window_attn_skip_freq : num_layers;
}

double Model::WindowFlopRatio(std::int64_t seq) const {
  if (!attention_window_modelled || attention_window <= 0 || attention_window >= seq) return 1.0;
  const double s = static_cast<double>(seq), w = static_cast<double>(attention_window);
  return (2 * s * w - w * w) / (s * s);
}

void SetWindowLayers(const std::vector<bool>& windowed, Model* m) {
  m->attention_window_modelled = true;
  m->window_layer_pattern.clear();
  m->window_attn_skip_freq = 0;
  const std::size_t n = windowed.size();
  if (std::all_of(windowed.begin(), windowed.end(), [](bool w) { return w; })) return;
  for (std::size_t freq = 1; freq <= n; ++freq) {
    bool match = true;
    for (std::size_t i = 0; i < n && match; ++i) match = windowed[i] == ((i + 1) % freq != 0);
    if (match) {
      m->window_attn_skip_freq = static_cast<std::int64_t>(freq);
      return;
    }
  }
  m->window_layer_pattern = windowed;
}

std::int64_t Model::MoeLayersIn(std::int64_t begin, std::int64_t end) const {
  std::int64_t n = 0;
  for (std::int64_t i = begin; i < end; ++i) n += IsMoeLayer(i) ? 1 : 0;
  return n;
}

ParameterCounts Model::Parameters() const {
  ParameterCounts c;
  c.per_layer = Layer();
  c.moe_layer = moe.enabled() ? MoeLayer() : LayerParameters{};
  c.moe_layers = MoeLayersIn(0, num_layers);
  c.dense_layers = num_layers - c.moe_layers;
  c.layers = c.dense_layers * c.per_layer.total() + c.moe_layers * c.moe_layer.total();
  c.word_embedding = vocab_size * hidden_size;
  c.position_embedding =
      position_embedding == PositionEmbedding::kLearned ? max_position_embeddings * hidden_size : 0;
  c.output_layer = tie_embeddings ? 0 : vocab_size * hidden_size;
  c.final_norm = NormParameters();
  // An MTP module: the 2h -> h projection of [embedding; hidden], its two input norms and the norm
  // before the shared output head, and one transformer layer (an MoE layer in an MoE model).
  const LayerParameters& mtp_layer = moe.enabled() ? c.moe_layer : c.per_layer;
  const std::int64_t mtp_proj = 2 * hidden_size * hidden_size;
  c.mtp = mtp_num_layers * (mtp_proj + 3 * NormParameters() + mtp_layer.total());
  c.total = c.layers + c.word_embedding + c.position_embedding + c.output_layer + c.final_norm + c.mtp;
  const std::int64_t idle_experts = moe.enabled() ? c.moe_layer.expert - moe.top_k * MlpParameters(*this, moe.ffn_hidden_size, moe.expert_bias).total() : 0;
  c.active = c.total - (c.moe_layers + (moe.enabled() ? mtp_num_layers : 0)) * idle_experts;
  c.mtp_active = c.mtp - (moe.enabled() ? mtp_num_layers : 0) * idle_experts;
  c.gemm_weights = c.dense_layers * c.per_layer.active_gemm_weights + c.moe_layers * c.moe_layer.active_gemm_weights +
                   vocab_size * hidden_size +
                   mtp_num_layers * (mtp_proj + mtp_layer.active_gemm_weights + vocab_size * hidden_size);
  return c;
}

double Model::AttentionHeadDim() const {
  if (mla.enabled()) {
    return 0.5 * static_cast<double>(mla.qk_head_dim + mla.qk_pos_emb_head_dim + mla.v_head_dim);
  }
  return static_cast<double>(kv_channels);
}

FlopCounts Model::Flops(std::int64_t seq) const {
  FlopCounts f;
  f.per_token_dense = 6.0 * static_cast<double>(Parameters().gemm_weights);
  f.per_token_attention = 12.0 * static_cast<double>(num_layers + mtp_num_layers) * static_cast<double>(seq) *
                          static_cast<double>(num_attention_heads) * AttentionHeadDim();
  f.per_token = f.per_token_dense + f.per_token_attention;
  return f;
}

}  // namespace shardcast
