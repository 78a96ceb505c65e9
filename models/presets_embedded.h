#pragma once
/// \file presets_embedded.h
/// The preset files of models/{llm,gpu,cluster}/ compiled into the binary (generated source).

#include <cstddef>

namespace shardcast::detail {

struct EmbeddedPreset {
  const char* kind;  ///< "llm", "gpu" or "cluster"
  const char* name;  ///< file stem
  const char* json;  ///< file contents
};
extern const EmbeddedPreset kEmbeddedPresets[];
extern const std::size_t kNumEmbeddedPresets;

}  // namespace shardcast::detail
