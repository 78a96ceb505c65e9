#pragma once
/// \file fit.h
/// Fits of measured curves (Eigen least squares).

#include <vector>

#include "simulator/profile.h"

namespace shardcast {

/// t = alpha + size / beta: the alpha-beta (latency-bandwidth) model of a collective.
struct AlphaBeta {
  double alpha_s = 0;      ///< latency, seconds
  double beta_Bps = 0;     ///< algorithm bandwidth (size / time in the bandwidth regime), bytes/s
  double rms_rel_error = 0;
};

/// Weighted least squares on relative error: minimizes sum(((alpha + S/beta) - t) / t)^2 over
/// the points (x = size in bytes, y = seconds). Needs two or more points with distinct sizes;
/// throws InputError otherwise.
AlphaBeta FitAlphaBeta(const std::vector<CurvePoint>& size_to_seconds);

}  // namespace shardcast
