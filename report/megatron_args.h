#pragma once
/// \file megatron_args.h
/// Megatron-LM's arguments for a configuration's parallelism, schedule, recompute, overlap and
/// precision (names of Megatron-LM core_v0.15, megatron/training/arguments.py): the fragment the
/// plan tables print, and the part of the full command line (launch.h) after the model's shape.

#include <string>
#include <vector>

#include "models/model.h"
#include "models/parallel.h"

namespace shardcast {

/// Megatron-LM's precision arguments for `c`, each with a leading space: " --bf16", " --fp16",
/// " --bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024
/// --fp8-amax-compute-algo max", " --bf16 --fp8-format e4m3 --fp8-recipe mxfp8", " --bf16
/// --fp4-format e2m1 --fp4-recipe nvfp4", with --fp8-param-gather and the bf16 layers; empty for
/// fp32/tf32 (Megatron-LM's default).
std::string MegatronPrecisionArgs(const ParallelConfig& c);

/// The flags of `c` for Megatron-LM, in groups (one line each of a multi-line command): sizes,
/// pipeline split, batch, recompute, optimizer sharding and overlap, precision. What Megatron-LM
/// cannot express (a ZB-H1 schedule, DeepSpeed's optimizers, Ulysses, Megatron-LM 2021-22's
/// transfers) is appended to `notes` as a sentence. MoE flags beyond the parallel sizes
/// (--num-experts, --moe-router-topk) belong to the model and are not written here.
std::vector<std::string> MegatronParallelFlags(const ParallelConfig& c, const Model& m, std::vector<std::string>* notes);

/// torchtitan's one layer in N checkpointed (ParallelConfig::recompute_layer_interval), which
/// `framework` (Megatron-LM, Megatron-Core) writes as full recompute of every layer: a sentence
/// appended to `unexpressed`; nothing for other recompute choices.
void LayerIntervalUnexpressed(const ParallelConfig& c, const char* framework, std::vector<std::string>* unexpressed);

/// Megatron-LM launch arguments for a configuration, on one line: --num-experts and
/// --moe-router-topk for an MoE model, then MegatronParallelFlags, then each note as a shell
/// comment ("   # ..."); a partial recompute that reruns no layer (or every layer) as no (or full)
/// recompute, as EmitLaunch.
std::string MegatronArguments(const ParallelConfig& c, const Model& m);

}  // namespace shardcast
