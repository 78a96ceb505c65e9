#pragma once
/// \file model.h
/// A decoder-only transformer LLM as Megatron-LM describes it (field names follow Megatron's
/// arguments), with exact parameter and FLOP counts.

#include <cstdint>
#include <string>

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
  std::int64_t total() const { return sharded + replicated; }
};

/// Whole-model parameter counts (formula in docs/inputs.md).
struct ParameterCounts {
  LayerParameters per_layer;
  std::int64_t layers = 0;             ///< num_layers * per_layer.total()
  std::int64_t word_embedding = 0;     ///< V*h
  std::int64_t position_embedding = 0; ///< max_position_embeddings*h when learned, else 0
  std::int64_t output_layer = 0;       ///< V*h when untied, else 0 (shares the word embedding)
  std::int64_t final_norm = 0;
  std::int64_t total = 0;
  /// Weights multiplied in GEMMs per token: layers' GEMM weights plus the output projection V*h
  /// (used even when tied). The "N" of the 6N rule.
  std::int64_t gemm_weights = 0;
};

/// FLOPs of one training step (forward + backward, no recompute) in the convention of
/// PaLM (Chowdhery et al. 2022, appendix B) and Narayanan et al. 2021 eq. 3 without recompute:
///   per token = 6 * N_gemm + 12 * L * s * a * d
/// where N_gemm counts GEMM weights (layers plus the V*h output projection) and the second term is
/// the attention score and context matmuls over the full s x s matrix (causal masking not
/// subtracted). Backward costs twice the forward.
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
  bool tie_embeddings = true;
  bool add_bias_linear = true;
  bool add_qkv_bias = true;
  /// Hidden and attention dropout active in training (Megatron-LM's default 0.1): dropout masks
  /// are saved for backward (Korthikanti et al. 2022 section 4.1). Llama-style models train
  /// without dropout.
  bool dropout = true;
  std::string source;
  std::string origin;  ///< "preset", a file path, or "huggingface:PATH"

  /// Parameters of one norm layer: 2h for LayerNorm (weight+bias), h for RMSNorm.
  std::int64_t NormParameters() const;
  LayerParameters Layer() const;
  ParameterCounts Parameters() const;
  /// FLOPs per token at sequence length `seq` (see FlopCounts).
  FlopCounts Flops(std::int64_t seq) const;
};

}  // namespace shardcast
