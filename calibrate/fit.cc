#include "calibrate/fit.h"

#include <cmath>

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

}  // namespace shardcast
