#pragma once
/// \file loader.h
/// Loading and validating models, GPUs and clusters from built-in presets, our JSON files, or a
/// Hugging Face config.json. Every failure is an InputError naming the file, the JSON pointer,
/// the bad value and what was expected.

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "models/hardware.h"
#include "models/model.h"

namespace shardcast {

enum class PresetKind { kModel, kGpu, kCluster };

/// Names of the built-in presets of a kind, sorted.
std::vector<std::string> PresetNames(PresetKind kind);

/// A preset name (case-insensitive) or a path to a JSON file. An unknown name lists the closest
/// preset names. A path is anything that exists on disk, contains '/', or ends in ".json".
/// `flag`, where the name came from the command line (such as "--model"), is named in the
/// unknown-preset error: "command line: --model: unknown model preset 'x'; ...".
/// Errors: InputError (exit 2) for an unknown name or a file that cannot be read or parsed.
Model LoadModel(const std::string& name_or_path, const std::string& flag = "");
Gpu LoadGpu(const std::string& name_or_path, const std::string& flag = "");
Cluster LoadCluster(const std::string& name_or_path, const std::string& flag = "");

/// Parses a model from JSON already read from `file`: our format, or a Hugging Face config.json
/// (detected by a `model_type` or `architectures` key, which our format does not have).
Model ModelFromJson(const Json& j, const std::string& file);
/// The model in our JSON format: every key ModelFromJson reads (kv_channels and num_query_groups
/// included), so ModelFromJson of it gives back the same model (all but `origin`, which names
/// where a model was loaded from).
Json ModelToJson(const Model& m);
/// Maps a Hugging Face config.json (llama, mistral, qwen2, qwen3, gpt2, gpt_neox, mpt, bloom).
Model ModelFromHuggingFace(const Json& j, const std::string& file);
Gpu GpuFromJson(const Json& j, const std::string& file);
Cluster ClusterFromJson(const Json& j, const std::string& file);

/// The keys that hold the fields ValidateModel checks, as a message names them: our JSON format's
/// (Megatron-Core's argument names) by default; a Hugging Face import gives its family's keys.
struct ModelFieldNames {
  std::string num_layers = "num_layers", kv_channels = "kv_channels", num_query_groups = "num_query_groups",
              num_experts = "num_experts", moe_ffn_hidden_size = "moe_ffn_hidden_size",
              moe_shared_ffn_hidden_size = "moe_shared_expert_intermediate_size", moe_top_k = "moe_router_topk",
              moe_first_k_dense = "moe_first_k_dense_layers", moe_layer_step = "moe_layer_step",
              qk_head_dim = "qk_head_dim", qk_pos_emb_head_dim = "qk_pos_emb_head_dim", v_head_dim = "v_head_dim",
              q_lora_rank = "q_lora_rank", kv_lora_rank = "kv_lora_rank";
};

/// Checks the model's cross-field rules (heads divide hidden, query groups divide heads, sizes
/// bounded so no count overflows). `file` names the source in messages, `names` the keys.
/// Throws InputError naming the key, the value and what was expected.
void ValidateModel(const Model& m, const std::string& file, const ModelFieldNames& names = ModelFieldNames{});

}  // namespace shardcast
