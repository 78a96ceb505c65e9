#pragma once
/// \file allocator_trace.h
/// `simulate --allocator-trace FILE`: each stage's replayed allocator calls (memory_replay.h) and
/// what the allocator model makes of them, for scripts/allocator-check.py to replay through
/// PyTorch's own caching allocator on a GPU and compare (docs/simulator.md, "Reserved memory").

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "simulator/memory_replay.h"

namespace shardcast {

/// {"format": "shardcast-allocator-trace/1", "configuration": `summary`,
///  "stages": [{"stage", "capacity_bytes" (usable memory less the framework overhead, shifted by
///              what the trace allocates beyond the modelled peak: it may exceed the GPU's memory;
///              <= 0: no room, and at_capacity is then null),
///              "squeezed_capacity_bytes" (halfway between the unlimited run's allocated and reserved
///              peaks, in 2 MiB multiples; null where that is no more than the allocated peak),
///              "model": {"unlimited": S, "at_capacity": S, "squeezed": S},
///              "events": [[0, handle, bytes, stream] (allocate), [1, handle] (free),
///                         [2, handle] (record_stream, then free), [3] (process events)]}]}
/// where S = {"peak_allocated_bytes", "peak_reserved_bytes", "peak_segments", "retries", "ooms"}
/// is ReplayAllocatorEvents over the events without a capacity, with capacity_bytes and with the
/// squeezed capacity. Bytes
/// are whole numbers; handles are the model's (a handle is reused only after its free).
Json AllocatorTraceJson(const std::vector<StageAllocatorTrace>& stages, const std::string& summary);

}  // namespace shardcast
