#include "report/allocator_trace.h"

#include <cmath>
#include <cstdint>
#include <utility>

namespace shardcast {
namespace {

Json StatsJson(const AllocatorRunStats& s) {
  return {{"peak_allocated_bytes", s.peak_allocated_bytes},
          {"peak_reserved_bytes", s.peak_reserved_bytes},
          {"peak_segments", s.peak_segments},
          {"retries", s.retries},
          {"ooms", s.ooms}};
}

Json EventJson(const AllocatorEvent& e) {
  const int kind = static_cast<int>(e.kind);
  switch (e.kind) {
    case AllocatorEvent::Kind::kAlloc: return Json::array({kind, e.handle, e.bytes, e.stream});
    case AllocatorEvent::Kind::kFree:
    case AllocatorEvent::Kind::kFreeDeferred: return Json::array({kind, e.handle});
    case AllocatorEvent::Kind::kProcessEvents: break;
  }
  return Json::array({kind});
}

}  // namespace

Json AllocatorTraceJson(const std::vector<StageAllocatorTrace>& stages, const std::string& summary) {
  Json out = {{"format", "shardcast-allocator-trace/1"}, {"configuration", summary}, {"stages", Json::array()}};
  for (const StageAllocatorTrace& t : stages) {
    // Whole bytes: the capacity the GPU-side check hands PyTorch as a memory fraction.
    const auto capacity_bytes = static_cast<std::int64_t>(std::floor(t.capacity_bytes));
    const AllocatorRunStats unlimited = ReplayAllocatorEvents(t.events, 0);
    // Halfway between the allocated and the reserved peak (2 MiB multiples): a limit that makes the
    // allocator release its cache whatever the stage's own capacity, to check that rule too.
    const std::int64_t squeezed_bytes =
        (unlimited.peak_allocated_bytes + (unlimited.peak_reserved_bytes - unlimited.peak_allocated_bytes) / 2) /
        kAllocRoundLargeBytes * kAllocRoundLargeBytes;
    const bool squeeze = squeezed_bytes > unlimited.peak_allocated_bytes;
    Json events = Json::array();
    for (const AllocatorEvent& e : t.events) events.push_back(EventJson(e));
    out["stages"].push_back(
        {{"stage", t.stage},
         {"capacity_bytes", capacity_bytes},
         {"squeezed_capacity_bytes", squeeze ? Json(squeezed_bytes) : Json(nullptr)},
         {"model",
          {{"unlimited", StatsJson(unlimited)},
           // No room at all (capacity <= 0): the stage does not fit, nothing to replay.
           {"at_capacity", capacity_bytes > 0
                               ? StatsJson(ReplayAllocatorEvents(t.events, static_cast<double>(capacity_bytes)))
                               : Json(nullptr)},
           {"squeezed", squeeze ? StatsJson(ReplayAllocatorEvents(t.events, static_cast<double>(squeezed_bytes)))
                                : Json(nullptr)}}},
         {"events", std::move(events)}});
  }
  return out;
}

}  // namespace shardcast
