#pragma once
/// \file fit.h
/// Fits of measured curves (Eigen least squares).

#include <vector>

#include "calibrate/cuda_backend.h"
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

/// The part of a measured kernel time that the cost model's rates explain: the time above the
/// per-kernel overhead `launch_s` (GemmTime, MemoryBoundTime and AttentionTime add
/// launch_overhead_s to every kernel, so a fit that kept it would count it twice), and at least a
/// tenth of the measured time. The simulator then gives back each measured memory-bound and
/// attention time; a GEMM's where its compute term decides GemmTime and its time is above
/// launch_s / 0.9 (a shorter one keeps a tenth of its time, and comes back longer).
double TimeAboveLaunch(double measured_s, double launch_s);

/// The per-kernel overhead of a memory-bound sweep (x = bytes moved, y = seconds): the latency of
/// the alpha-beta fit t = alpha + bytes / beta over the samples (FitAlphaBeta), within [0, 0.9 x
/// the shortest time]; 0 with fewer than two samples. With it as launch_overhead_s,
/// FitMemoryBound's curve gives back every measured time: each sample's time above it sets its
/// efficiency, and the cost model adds it back.
double FitLaunchOverhead(const std::vector<CurvePoint>& bytes_to_seconds);

/// Fused attention efficiencies from timed causal attention calls (`samples`, each at one
/// sequence length): forward FLOPs 0.5 x 4 b s^2 h d (causal half of QK^T and PV, the
/// simulator's convention, docs/simulator.md) over seconds over `peak_tflops`, backward 2.5x
/// the forward FLOPs over its seconds. Sets attention_fwd/bwd_efficiency to the 2,048-token
/// figure (interpolated in log(seq) when 2,048 was not timed; at most 1) and the two
/// efficiency-vs-seq curves relative to it, all from the samples at `main_head_dim` (else the
/// smallest head dim timed). With more than one head dim, the head-dim factors: each head dim's
/// 2,048-token efficiency over the main one's. Each time counts above p->launch_overhead_s
/// (TimeAboveLaunch; set it first). Throws InputError without samples or with a time, size or
/// peak that is not positive.
void FitAttention(const std::vector<cuda::AttentionSample>& samples, double peak_tflops, HardwareProfile* p,
                  int main_head_dim = 128);

/// The share of a same-run device-to-device cudaMemcpy's rate that the vectorized memory-bound
/// probe should reach (issue 18: a framework's vectorized elementwise kernels run near the copy
/// rate); `calibrate` says so in its summary when a GPU's sweep stays under it.
inline constexpr double kMemoryBoundVsMemcpyTarget = 0.9;

/// The memory-bound curve from measured (x = bytes moved, y = seconds) samples, each time counted
/// above p->launch_overhead_s (TimeAboveLaunch; set it first, e.g. from FitLaunchOverhead): sets
/// `p->hbm_GBps` to the highest rate (bytes / seconds / 1e9) among the samples the bandwidth
/// dominates (at least half the measured time above the overhead; all samples when none is) and
/// `p->memory_efficiency_vs_bytes` to each sample's rate over it, sorted by bytes (above 1 where a
/// small case ran faster, from caches). MemoryBoundTime then gives back every measured time. Throws InputError without a sample or with a
/// time or size that is not positive.
void FitMemoryBound(std::vector<CurvePoint> bytes_to_seconds, HardwareProfile* p);

}  // namespace shardcast
