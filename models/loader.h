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
Model LoadModel(const std::string& name_or_path);
Gpu LoadGpu(const std::string& name_or_path);
Cluster LoadCluster(const std::string& name_or_path);

/// Parses a model from JSON already read from `file`: our format, or a Hugging Face config.json
/// (detected by `model_type` / `architectures` without `num_layers`).
Model ModelFromJson(const Json& j, const std::string& file);
/// The model in our JSON format: every key ModelFromJson reads (kv_channels and num_query_groups
/// included), so ModelFromJson of it gives back the same model (all but `origin`, which names
/// where a model was loaded from).
Json ModelToJson(const Model& m);
/// Maps a Hugging Face config.json (llama, mistral, qwen2, qwen3, gpt2, gpt_neox, mpt, bloom).
Model ModelFromHuggingFace(const Json& j, const std::string& file);
Gpu GpuFromJson(const Json& j, const std::string& file);
Cluster ClusterFromJson(const Json& j, const std::string& file);

/// Checks the model's cross-field rules (heads divide hidden, query groups divide heads, sizes
/// bounded so no count overflows). `file` names the source in messages.
void ValidateModel(const Model& m, const std::string& file);

}  // namespace shardcast
