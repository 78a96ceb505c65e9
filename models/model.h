#pragma once
/// \file model.h
/// A decoder-only transformer LLM as Megatron-LM describes it (field names follow Megatron's
/// arguments), with exact parameter and FLOP counts.

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast {

enum class Normalization { kLayerNorm, kRMSNorm };
enum class Activation { kGelu, kSwiglu };
enum class PositionEmbedding { kLearned, kRope, kAlibi };

// Upper bounds on a model's sizes, enforced wherever a model is read (JSON, Hugging Face config,
// validation CSV), chosen so that no parameter or FLOP count can overflow int64 (docs/inputs.md):
// with h <= 2^20, f <= 2^22, a*d <= 2^22 and L <= 2^16 the largest product stays below 2^62.
inline constexpr std::int64_t kMaxLayers = std::int64_t{1} << 16;
inline constexpr std::int64_t kMaxHidden = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxFfn = std::int64_t{1} << 22;
inline constexpr std::int64_t kMaxHeads = std::int64_t{1} << 16;
inline constexpr std::int64_t kMaxHeadDim = std::int64_t{1} << 14;
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 24;

const char* ToString(Normalization n);
const char* ToString(Activation a);
const char* ToString(PositionEmbedding p);

/// Parameters of one transformer layer split by how tensor parallelism shards them: column- and
/// row-parallel weights and column-parallel biases are divided by t; norms and row-parallel
/// biases are replicated on every tensor-parallel rank (Megatron-LM's ColumnParallelLinear /
/// RowParallelLinear).
struct LayerParameters {
  std::int64_t sharded = 0;     ///< divided by tp
  std::int64_t replicated = 0;  ///< present on every tp rank
  std::int64_t gemm_weights = 0;  ///< weights used in GEMMs (for the 6N FLOP count)
  /// Routed experts' weights and biases (an MoE layer): divided by the expert-parallel and
  /// expert-tensor-parallel sizes, not by tp.
  std::int64_t expert = 0;
  /// GEMM weights one token multiplies: the layer's GEMM weights with only top-k of the routed
  /// experts (the "active" weights of the 6N count; = gemm_weights without experts).
  std::int64_t active_gemm_weights = 0;
  std::int64_t total() const { return sharded + replicated + expert; }
};

/// Whole-model parameter counts (formula in docs/inputs.md).
struct ParameterCounts {
  LayerParameters per_layer;           ///< a dense transformer layer
  LayerParameters moe_layer;           ///< a mixture-of-experts layer (zero for a dense model)
  std::int64_t dense_layers = 0, moe_layers = 0;
  /// Multi-token prediction modules (DeepSeek-V3): each one transformer layer (MoE where the model
  /// is) plus its 2h x h projection and two norms; they share the embedding and the output layer.
  std::int64_t mtp = 0;
  std::int64_t mtp_active = 0;  ///< of `mtp`, what one token uses (its layer's top-k routed experts)
  std::int64_t layers = 0;             ///< the transformer layers' parameters (MTP excluded)
  std::int64_t word_embedding = 0;     ///< V*h
  std::int64_t position_embedding = 0; ///< max_position_embeddings*h when learned, else 0
  std::int64_t output_layer = 0;       ///< V*h when untied, else 0 (shares the word embedding)
  std::int64_t final_norm = 0;
  std::int64_t total = 0;              ///< everything, MTP modules included
  /// The parameters one token uses: the total less the routed experts it is not sent to (its
  /// embedding row counted as the whole table; DeepSeek's and OpenAI's published "activated"
  /// counts leave the input embedding out).
  std::int64_t active = 0;
  /// Weights multiplied in GEMMs per token: layers' GEMM weights (active ones for MoE layers) plus
  /// the output projection V*h (used even when tied), and the MTP modules' with their own pass
  /// through the output projection. The "N" of the 6N rule.
  std::int64_t gemm_weights = 0;
};

/// Mixture-of-Experts MLP (Megatron-Core's names; docs/inputs.md). num_experts 0: a dense model.
struct MoeSpec {
  std::int64_t num_experts = 0;                    ///< routed experts (--num-experts)
  std::int64_t top_k = 0;                          ///< experts per token (--moe-router-topk)
  std::int64_t ffn_hidden_size = 0;                ///< each routed expert's (--moe-ffn-hidden-size)
  /// All shared experts together (--moe-shared-expert-intermediate-size; 0: none): an MLP every
  /// token goes through beside its routed experts.
  std::int64_t shared_ffn_hidden_size = 0;
  std::int64_t first_k_dense = 0;  ///< leading dense layers (DeepSeek's first_k_dense_replace)
  /// Of the other layers, layer i is MoE when (i + 1) % layer_step == 0 (Hugging Face's
  /// decoder_sparse_step / interleave_moe_layer_step; 1: every layer), or, with
  /// step_from_layer0, when i % layer_step == 0 (DeepSeek's moe_layer_freq, Megatron-LM's
  /// --moe-layer-freq N).
  std::int64_t layer_step = 1;
  bool step_from_layer0 = false;
  bool expert_bias = false;  ///< biases in the experts' linear layers (GPT-OSS)
  bool router_bias = false;  ///< a bias in the router's linear layer (GPT-OSS)
  /// The router was trained with global-batch load balancing (the balancing loss over the
  /// global batch's expert counts, not each micro-batch's: Qiu et al. 2025, "Demons in the
  /// Detail", used for Qwen3's MoE models): its experts specialize by domain and a micro-batch's
  /// tokens reach them unevenly (MoeImbalance). Our JSON's moe_router_global_batch_balance.
  bool router_global_batch_balance = false;
  /// How the router turns its logits into the chosen experts' weights, as Megatron-Core's flags
  /// say it. These set what a launch (--emit) trains; the step's time does not depend on them
  /// (the router's GEMM is the same). "softmax" (default) or "sigmoid"
  /// (--moe-router-score-function; DeepSeek-V3, Llama 4).
  std::string router_score = "softmax";
  /// Softmax over all experts before the top-k, the weights not renormalized
  /// (--moe-router-pre-softmax; Qwen-MoE and DeepSeek-V2 without norm_topk_prob); by default the
  /// softmax runs over the top-k logits (Mixtral).
  bool router_pre_softmax = false;
  double router_topk_scaling = 0;      ///< weights times this (--moe-router-topk-scaling-factor; 0: none)
  std::int64_t router_num_groups = 0;  ///< expert groups of group-limited routing (--moe-router-num-groups; 0: none)
  std::int64_t router_group_topk = 0;  ///< groups a token may reach (--moe-router-group-topk)
  /// A per-expert bias added to the scores for the choice alone, updated to balance the load
  /// (--moe-router-enable-expert-bias: DeepSeek-V3's auxiliary-loss-free balancing).
  bool router_expert_bias = false;
  /// The chosen experts' weights scale their input, not their output (--moe-apply-probs-on-input:
  /// Llama 4's experts).
  bool probs_on_input = false;
  /// What the config.json's router does that Megatron-Core's flags cannot say, each a sentence
  /// (set by the Hugging Face import; not part of our JSON): the launches list them as not
  /// expressed.
  std::vector<std::string> router_approximations;
  bool enabled() const { return num_experts > 1; }
};

/// The router in words: "softmax over the top-k", "softmax over all experts (top-k not
/// renormalized)" or "sigmoid", then ", times F", ", top-k within G of N groups", ", expert
/// bias (auxiliary-loss-free balancing)" and ", weights on the experts' input" where they apply.
std::string RouterSummary(const MoeSpec& e);

/// Multi-head Latent Attention (DeepSeek-V2/V3; Megatron-Core's --multi-latent-attention).
/// kv_lora_rank 0: standard attention. Queries go through a low-rank down/up projection when
/// q_lora_rank > 0 (V3), else one projection (V2-Lite).
struct MlaSpec {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_head_dim = 0;          ///< the part of a query/key head without rotary positions
  std::int64_t qk_pos_emb_head_dim = 0;  ///< the rotary part (one key head shared by all heads)
  std::int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
};

/// FLOPs of one training step (forward + backward, no recompute) in the convention of
/// PaLM (Chowdhery et al. 2022, appendix B) and Narayanan et al. 2021 eq. 3 without recompute:
///   per token = 6 * N_gemm + 12 * L * s * a * d
/// where N_gemm counts the GEMM weights a token multiplies (layers, with only its top-k routed
/// experts in MoE layers, plus the V*h output projection) and the second term is the attention
/// score and context matmuls over the full s x s matrix (causal masking not subtracted); with MLA
/// a*d is a * (qk_head_dim + qk_pos_emb_head_dim + v_head_dim) / 2 (scores use the query/key head,
/// context the value head). MTP modules add their layer's terms. Backward costs twice the forward.
struct FlopCounts {
  double per_token_dense = 0;      ///< 6 * N_gemm
  double per_token_attention = 0;  ///< 12 * L * s * a * d
  double per_token = 0;            ///< the sum (PaLM / SC21: the full s^2 attention matrix)
  /// The same with the attention term halved for causal masking, 6 * N_gemm + 6 * L * s * a * d:
  /// the convention of current Megatron-LM's num_floating_point_operations.
  double per_token_causal() const { return per_token_dense + 0.5 * per_token_attention; }
};

struct Model {
  std::string name;
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t ffn_hidden_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_query_groups = 0;  ///< = heads for MHA
  std::int64_t kv_channels = 0;       ///< head dim d
  std::int64_t vocab_size = 0;
  std::int64_t seq_length = 0;
  std::int64_t max_position_embeddings = 0;
  Normalization normalization = Normalization::kLayerNorm;
  Activation activation = Activation::kGelu;
  PositionEmbedding position_embedding = PositionEmbedding::kLearned;
  /// RoPE's base period theta (Hugging Face's rope_theta, Megatron-LM's --rotary-base; Su et al.
  /// 2021 eq. 15 use 10000). It changes no count or time; kept for the launch configurations.
  double rotary_base = 10000;
  /// The share of each head's dimensions RoPE rotates, in (0, 1] (Megatron-LM's --rotary-percent;
  /// Hugging Face's partial_rotary_factor, GPT-NeoX's rotary_pct). It changes no count or time
  /// (RoPE is not costed apart from attention); kept for the launch configurations.
  double rotary_percent = 1.0;
  /// Per layer, whether it skips RoPE (a NoPE layer: Llama 4's no_rope_layers, Megatron-LM's
  /// --no-rope-freq); empty: every layer rotates. It changes no count or time; kept for the launch
  /// configurations.
  std::vector<bool> no_rope_layers;
  /// Llama 4's parameter-free L2 norm of each head's queries and keys (Hugging Face's use_qk_norm
  /// under llama4, Megatron-LM's --qk-l2-norm): no parameters; costed as qk_layernorm's passes
  /// over Q and K (cost_model.cc); written into the launch configurations.
  bool qk_l2_norm = false;
  /// GPT-OSS's attention sinks: a learned logit per head in each layer's softmax (num_attention_heads
  /// parameters a layer, counted and split with the heads); no time.
  bool attention_sinks = false;
  /// GPT-OSS's clamped SwiGLU (Hugging Face's swiglu_limit, 7.0; with its alpha 1.702 and
  /// (up + 1)); 0: a plain SwiGLU. No count or time; kept for the launch configurations.
  double swiglu_limit = 0;
  /// Llama 3.1's RoPE frequency scaling factor (Hugging Face's rope_scaling with rope_type
  /// "llama3"; Megatron-LM's --use-rope-scaling --rope-scaling-factor), 0 for none. It changes
  /// no count or time (a precomputed frequency table); launch configurations write it.
  double rope_scaling_factor = 0;
  /// The frequency bands of the Llama 3 RoPE scaling (Hugging Face's rope_scaling low_freq_factor,
  /// high_freq_factor, original_max_position_embeddings): Llama 3.1's 1, 4 and 8192, which
  /// Megatron-Core's --use-rope-scaling fixes; Llama 4's high_freq_factor is 1. No count or time;
  /// the launches name bands their framework cannot take.
  double rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  std::int64_t rope_original_max_positions = 8192;
  /// Whether the scaling's bands are Llama 3.1's.
  bool RopeBandsAreLlama31() const {
    return rope_low_freq_factor == 1 && rope_high_freq_factor == 4 && rope_original_max_positions == 8192;
  }
  /// A Hugging Face rope_scaling of another kind (yarn, linear, dynamic, ...), as "KIND (factor
  /// F)": not read into the model (no count or time changes) and not written into launches, which
  /// say so; empty for none.
  std::string rope_scaling_unread;
  bool tie_embeddings = true;
  bool add_bias_linear = true;
  bool add_qkv_bias = true;
  /// A norm over each head's channels of the queries and keys after the QKV projection
  /// (Megatron-LM's --qk-layernorm; Qwen3's q_norm and k_norm, OLMo 2): the model's
  /// normalization, 2 x kv_channels weights a layer (and biases with LayerNorm), replicated on the
  /// tensor-parallel ranks.
  bool qk_layernorm = false;
  /// Hidden and attention dropout active in training (Megatron-LM's default 0.1): dropout masks
  /// are saved for backward (Korthikanti et al. 2022 section 4.1). Llama-style models train
  /// without dropout.
  bool dropout = true;
  MoeSpec moe;
  MlaSpec mla;
  std::int64_t mtp_num_layers = 0;  ///< multi-token prediction depth (--mtp-num-layers)
  /// Tokens: the attention window, Megatron-LM's --window-size W,0 (our JSON's window_size; a
  /// Hugging Face config's sliding_window for Mistral/Mixtral and GPT-OSS, Qwen2/3's when
  /// use_sliding_window, Llama 4's attention_chunk_size); 0: every layer attends to the whole
  /// causal sequence. A query attends to the W tokens before it (causal sliding window).
  std::int64_t attention_window = 0;
  /// Megatron-LM's --window-attn-skip-freq: every N-th layer (1-based) attends to the whole
  /// sequence, the others within attention_window; 0: every layer within it (Mistral). GPT-OSS: 2.
  std::int64_t window_attn_skip_freq = 0;
  /// Megatron-LM's list form of --window-attn-skip-freq: per layer, whether it attends within the
  /// window (1) or to the whole sequence (0); when not empty (num_layers entries) it replaces
  /// window_attn_skip_freq. Qwen's max_window_layers, GPT-OSS's irregular layer_types.
  std::vector<bool> window_layer_pattern;
  /// Whether the window is modelled (flash attention's FLOPs over the window, WindowedLayers());
  /// false for Llama 4's chunked attention (not a sliding window): attention is then costed over
  /// the whole causal sequence, and `describe` / `simulate` say so.
  bool attention_window_modelled = false;
  /// The config.json key attention_window came from, for notes.
  std::string attention_window_key;
  std::string source;
  std::string origin;  ///< "preset", a file path, or "huggingface:PATH"

  /// Parameters of one norm layer: 2h for LayerNorm (weight+bias), h for RMSNorm.
  std::int64_t NormParameters() const;
  /// A dense transformer layer (attention and the dense MLP).
  LayerParameters Layer() const;
  /// A mixture-of-experts layer (attention, router, shared and routed experts).
  LayerParameters MoeLayer() const;
  /// Whether transformer layer `i` (0-based) is a mixture-of-experts layer.
  bool IsMoeLayer(std::int64_t i) const;
  /// Transformer layers in [begin, end) that are MoE layers.
  std::int64_t MoeLayersIn(std::int64_t begin, std::int64_t end) const;
  /// Layers that attend within the window (modelled windows only): num_layers, or with
  /// window_attn_skip_freq N those whose 1-based number is not a multiple of N,
  /// num_layers - floor(num_layers / N); 0 without a modelled window.
  std::int64_t WindowedLayers() const;
  /// N where the NoPE layers (no_rope_layers) are exactly those whose 1-based number is a
  /// multiple of N and N divides num_layers (Megatron-LM's --no-rope-freq N, which Megatron-Core
  /// asserts divides them); 0 otherwise or without NoPE layers.
  std::int64_t NoRopeFreq() const;
  /// Flash attention's FLOPs over a causal sliding window of `attention_window` tokens at
  /// sequence length `seq`, over those of the whole causal sequence: (2 s w - w^2) / s^2 for
  /// w < s (a query attends to min(position, w) keys: s w - w^2 / 2 of the causal s^2 / 2), 1
  /// otherwise or without a modelled window.
  double WindowFlopRatio(std::int64_t seq) const;
  ParameterCounts Parameters() const;
  /// The head dimension of the attention FLOP count: kv_channels, or with MLA the mean of the
  /// query/key head (qk_head_dim + qk_pos_emb_head_dim) and the value head.
  double AttentionHeadDim() const;
  /// FLOPs per token at sequence length `seq` (see FlopCounts).
  FlopCounts Flops(std::int64_t seq) const;
};

/// Sets `m`'s windowed layers (num_layers entries, true: within attention_window) the way
/// Megatron-LM writes them: no skip frequency when all slide, the integer N of
/// --window-attn-skip-freq where the full layers are exactly the multiples of N (1-based; all
/// full: 1), else the per-layer list. Marks the window modelled.
void SetWindowLayers(const std::vector<bool>& windowed, Model* m);

}  // namespace shardcast
