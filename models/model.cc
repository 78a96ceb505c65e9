#include "models/model.h"

namespace shardcast {

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

LayerParameters Model::Layer() const {
  const std::int64_t h = hidden_size, f = ffn_hidden_size, d = kv_channels;
  const std::int64_t qkv_out = num_attention_heads * d + 2 * num_query_groups * d;
  const std::int64_t mlp_in_mult = activation == Activation::kSwiglu ? 2 : 1;  // gate + up
  LayerParameters p;
  // Column-parallel: QKV and MLP up (and gate); row-parallel: attention output and MLP down.
  p.gemm_weights = h * qkv_out + num_attention_heads * d * h + mlp_in_mult * h * f + f * h;
  p.sharded = p.gemm_weights;
  if (add_bias_linear || add_qkv_bias) p.sharded += qkv_out;          // QKV bias (column)
  if (add_bias_linear) {
    p.sharded += mlp_in_mult * f;  // MLP up/gate bias (column-parallel)
    p.replicated += 2 * h;         // row-parallel output biases of attention and MLP
  }
  p.replicated += 2 * NormParameters();  // input norm and post-attention norm
  return p;
}

ParameterCounts Model::Parameters() const {
  ParameterCounts c;
  c.per_layer = Layer();
  c.layers = num_layers * c.per_layer.total();
  c.word_embedding = vocab_size * hidden_size;
  c.position_embedding =
      position_embedding == PositionEmbedding::kLearned ? max_position_embeddings * hidden_size : 0;
  c.output_layer = tie_embeddings ? 0 : vocab_size * hidden_size;
  c.final_norm = NormParameters();
  c.total = c.layers + c.word_embedding + c.position_embedding + c.output_layer + c.final_norm;
  c.gemm_weights = num_layers * c.per_layer.gemm_weights + vocab_size * hidden_size;
  return c;
}

FlopCounts Model::Flops(std::int64_t seq) const {
  FlopCounts f;
  f.per_token_dense = 6.0 * static_cast<double>(Parameters().gemm_weights);
  f.per_token_attention = 12.0 * static_cast<double>(num_layers) * static_cast<double>(seq) *
                          static_cast<double>(num_attention_heads * kv_channels);
  f.per_token = f.per_token_dense + f.per_token_attention;
  return f;
}

}  // namespace shardcast
