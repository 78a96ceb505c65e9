#include "calibrate/fit.h"

#include <algorithm>
#include <map>
#include <cmath>
#include <string>

#include <Eigen/Dense>

#include "common/error.h"

namespace shardcast {

AlphaBeta FitAlphaBeta(const std::vector<CurvePoint>& pts) {
  if (pts.size() < 2) throw InputError("alpha-beta fit: got " + std::to_string(pts.size()) + " points, expected at least 2");
  Eigen::MatrixXd a(static_cast<Eigen::Index>(pts.size()), 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(pts.size()));
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (!(pts[i].y > 0)) throw InputError("alpha-beta fit: a measured time is not positive");
    const auto r = static_cast<Eigen::Index>(i);
    a(r, 0) = 1.0 / pts[i].y;
    a(r, 1) = pts[i].x / pts[i].y;
  }
  Eigen::Vector2d x = a.colPivHouseholderQr().solve(b);
  AlphaBeta f;
  f.alpha_s = std::max(0.0, x(0));
  f.beta_Bps = x(1) > 0 ? 1.0 / x(1) : 0.0;
  double ss = 0;
  for (const auto& p : pts) {
    const double pred = f.alpha_s + (f.beta_Bps > 0 ? p.x / f.beta_Bps : 0.0);
    ss += std::pow((pred - p.y) / p.y, 2);
  }
  f.rms_rel_error = std::sqrt(ss / static_cast<double>(pts.size()));
  return f;
}

double TimeAboveLaunch(double measured_s, double launch_s) {
  return std::max(measured_s - launch_s, 0.1 * measured_s);
}

double FitLaunchOverhead(const std::vector<CurvePoint>& pts) {
  if (pts.size() < 2) return 0;  // one size cannot tell the overhead from the bandwidth
  double shortest = pts.front().y;
  for (const auto& s : pts) shortest = std::min(shortest, s.y);
  return std::clamp(FitAlphaBeta(pts).alpha_s, 0.0, 0.9 * shortest);
}

void FitAttention(const std::vector<cuda::AttentionSample>& samples, double peak_tflops, HardwareProfile* p,
                  int main_head_dim) {
  if (samples.empty()) throw InputError("attention fit: got no samples, expected at least 1");
  if (!(peak_tflops > 0)) throw InputError("attention fit: the GEMM peak is not positive");
  std::map<int, std::vector<CurvePoint>> fwd, bwd;  // by head dim
  for (const auto& a : samples) {
    const double b = a.batch, s = a.seq, h = a.heads, d = a.head_dim;
    if (!(b > 0 && s > 0 && h > 0 && d > 0 && a.fwd_s > 0 && a.bwd_s > 0)) {
      throw InputError("attention fit: a sample at seq " + std::to_string(a.seq) +
                       " has a size or time that is not positive");
    }
    const double flops = 0.5 * 4 * b * s * s * h * d;
    const double fwd_s = TimeAboveLaunch(a.fwd_s, p->launch_overhead_s);
    const double bwd_s = TimeAboveLaunch(a.bwd_s, p->launch_overhead_s);
    fwd[a.head_dim].push_back({s, flops / fwd_s / (peak_tflops * 1e12)});
    bwd[a.head_dim].push_back({s, 2.5 * flops / bwd_s / (peak_tflops * 1e12)});
  }
  auto by_seq = [](const CurvePoint& x, const CurvePoint& y) { return x.x < y.x; };
  for (auto* m : {&fwd, &bwd}) {
    for (auto& [d, c] : *m) std::sort(c.begin(), c.end(), by_seq);
  }
  const int main = fwd.count(main_head_dim) ? main_head_dim : fwd.begin()->first;
  const double ref_f = InterpolateLogX(fwd[main], 2048), ref_b = InterpolateLogX(bwd[main], 2048);
  p->attention_fwd_efficiency = std::min(1.0, ref_f);
  p->attention_bwd_efficiency = std::min(1.0, ref_b);
  p->attention_tiles = "";  // the measured kernel's own head dims, not a preset's flash kernels
  p->attention_efficiency_vs_seq.clear();
  p->attention_bwd_efficiency_vs_seq.clear();
  for (const auto& c : fwd[main]) p->attention_efficiency_vs_seq.push_back({c.x, c.y / p->attention_fwd_efficiency});
  for (const auto& c : bwd[main]) p->attention_bwd_efficiency_vs_seq.push_back({c.x, c.y / p->attention_bwd_efficiency});
  p->attention_head_dim = main;
  p->attention_fwd_head_dim_factor.clear();
  p->attention_bwd_head_dim_factor.clear();
  if (fwd.size() < 2) return;
  for (const auto& [d, c] : fwd) p->attention_fwd_head_dim_factor.push_back({double(d), InterpolateLogX(c, 2048) / ref_f});
  for (const auto& [d, c] : bwd) p->attention_bwd_head_dim_factor.push_back({double(d), InterpolateLogX(c, 2048) / ref_b});
}

void FitMemoryBound(std::vector<CurvePoint> pts, HardwareProfile* p) {
  if (pts.empty()) throw InputError("memory-bound fit: got no samples, expected at least 1");
  double best = 0, best_any = 0;  // GB/s: over bandwidth-bound samples, over all
  for (auto& s : pts) {
    if (!(s.x > 0) || !(s.y > 0)) {
      throw InputError("memory-bound fit: a sample has bytes " + std::to_string(s.x) + " and seconds " +
                       std::to_string(s.y) + ", expected both positive");
    }
    const double measured = s.y;
    s.y = TimeAboveLaunch(s.y, p->launch_overhead_s);  // MemoryBoundTime adds the launch back
    best_any = std::max(best_any, s.x / s.y / 1e9);
    // The peak comes from samples the bandwidth dominates (at least half their time above the
    // overhead): a launch-bound one's small remainder would make it look faster than memory.
    if (s.y >= 0.5 * measured) best = std::max(best, s.x / s.y / 1e9);
  }
  if (!(best > 0)) best = best_any;
  std::sort(pts.begin(), pts.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.x < b.x; });
  p->hbm_GBps = best;
  p->memory_efficiency_vs_bytes.clear();
  for (const auto& s : pts) p->memory_efficiency_vs_bytes.push_back({s.x, s.x / s.y / 1e9 / best});
}

}  // namespace shardcast
