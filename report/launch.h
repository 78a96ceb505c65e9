#pragma once
/// \file launch.h
/// Launch configurations of a planned run for the frameworks that train it: a complete
/// Megatron-LM command line, a NeMo 2 recipe override, a torchtitan TOML file and a DeepSpeed config
/// (a shell snippet writing ds_config.json), each naming the framework version whose field names
/// it follows (docs/launch.md).
///
/// What a format cannot express (DeepSpeed's optimizers in Megatron-LM, ZeRO-1 in torchtitan, a
/// torchtitan model flavor, ...) is said in the output as a comment and listed in
/// LaunchConfig::unexpressed; nothing is silently dropped.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"

namespace shardcast {

enum class LaunchFormat { kMegatron, kNemo, kTorchtitan, kDeepSpeed };

/// "megatron", "nemo", "torchtitan", "deepspeed".
const char* ToString(LaunchFormat f);
/// The format named `s` (as ToString writes it); InputError naming `where` (the flag) otherwise.
LaunchFormat ParseLaunchFormat(const std::string& s, const std::string& where);

/// The framework releases whose argument and field names the formats follow.
inline constexpr const char* kMegatronVersion = "Megatron-LM core_v0.15 (megatron/training/arguments.py)";
inline constexpr const char* kNemoVersion = "NeMo 2.5 (nemo.collections.llm recipes, nemo.lightning.MegatronStrategy)";
inline constexpr const char* kTorchtitanVersion = "torchtitan v0.2.2 (torchtitan/config/job_config.py)";
inline constexpr const char* kDeepSpeedVersion = "DeepSpeed v0.16.5 (its config JSON: runtime/config.py, runtime/zero/config.py)";

struct LaunchConfig {
  LaunchFormat format = LaunchFormat::kMegatron;
  std::string framework;  ///< the framework version its names follow (k*Version)
  /// The whole output, ready to paste: a shell command (megatron), a Python snippet (nemo), a
  /// TOML file (torchtitan) or a shell snippet writing ds_config.json (deepspeed).
  std::string text;
  /// Settings of the configuration the format has no field for, each a sentence (also comments
  /// in `text`).
  std::vector<std::string> unexpressed;
  /// What the caller knows against the launch (a configuration predicted not to fit), each a
  /// sentence, also a comment at the top of `text`.
  std::vector<std::string> warnings;
};

/// The launch configuration of `c` (a configuration BuildConfig or the planner produced, with
/// dp, batch and sequence sizes set) for `m` on `gpus` GPUs of `cl` (hosts of
/// cl.GpusPerHost(); a warning where the GPUs are not whole hosts). Model shape, precision, every parallelism, schedule, recompute and overlap
/// setting, batch sizes and sequence length are written; a partial recompute that reruns no layer
/// (or every layer) as no (or full) recompute (WithEffectiveRecompute).
LaunchConfig EmitLaunch(LaunchFormat f, const Model& m, const ParallelConfig& c, const Cluster& cl,
                        std::int64_t gpus);

/// {format, framework, text, unexpressed, warnings, file (null when not written to one)} for JSON.
Json LaunchJson(const LaunchConfig& l, const std::string& file);
/// The launch configuration under a heading naming `label`, or, when it was written to `file`,
/// where and what it could not express.
void WriteLaunch(std::ostream& out, const LaunchConfig& l, const std::string& file, const std::string& label);

/// Megatron-LM's --pipeline-model-parallel-layout of a pipeline split (PipelineLayoutOf's model
/// chunks in order, each "|"-separated: E for the embedding, t per transformer layer, m per MTP
/// layer, L for the loss), e.g. "Ettt|tttt|ttt|tttmL". Empty when the split is impossible.
std::string MegatronPipelineLayout(const Model& m, const ParallelConfig& c);

/// Megatron-LM's --moe-layer-freq pattern of `m`'s layers, run-length encoded: "([0]*3+[1]*58)"
/// (1: MoE layer); "1" when every layer is MoE (or the model is dense).
std::string MegatronMoeLayerFreq(const Model& m);
/// Model::window_layer_pattern as Megatron-LM's list expression for --window-attn-skip-freq
/// ("([1]*3+[0]*1+...)", 1 where a layer attends within the window).
std::string MegatronWindowPattern(const Model& m);

}  // namespace shardcast
