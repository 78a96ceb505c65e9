#pragma once
/// \file catalog.h
/// `shardcast models`: the built-in presets, one line each.

#include <iosfwd>

namespace shardcast {

/// Every preset model (parameters, shape, source), GPU (dense peak TFLOP/s per precision,
/// memory, HBM and NVLink bandwidth, price) and cluster (GPU, GPUs per node, fabric, NICs).
void WriteCatalog(std::ostream& out);

}  // namespace shardcast
