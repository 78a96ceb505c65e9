#pragma once
/// \file units.h
/// Units used across shardcast. Quantities carry their unit in the name suffix (`_s`, `_bytes`,
/// `_GBps`, `_flops`); simulated time is an integer count of nanoseconds so that event ordering
/// is exact and runs are bit-for-bit deterministic.

#include <cmath>
#include <cstdint>

namespace shardcast {

/// Simulated time in integer nanoseconds. int64 covers 292 years.
using SimTime = std::int64_t;

inline constexpr double kNsPerSecond = 1e9;
inline constexpr double kGiB = 1073741824.0;  ///< 2^30 bytes
inline constexpr double kGB = 1e9;            ///< 10^9 bytes (bandwidths, vendor capacities)

/// Seconds -> SimTime, rounded to the nearest nanosecond; negative durations clamp to 0.
inline SimTime SecondsToSim(double seconds) {
  if (!(seconds > 0)) return 0;
  return static_cast<SimTime>(std::llround(seconds * kNsPerSecond));
}
inline double SimToSeconds(SimTime t) { return static_cast<double>(t) / kNsPerSecond; }

}  // namespace shardcast
