#include "planner/capacity.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "models/loader.h"

namespace shardcast {

double YoungDalyInterval(double c, double m) { return std::sqrt(2.0 * c * m); }

double Goodput(double c, double r, double m, double tau) {
  if (!(m > 0) || !(tau > 0)) return 1.0;
  return std::max(0.0, 1.0 - c / tau - (tau / 2.0 + r) / m);
}

std::vector<CapacityRow> RunCapacity(const Model& m, const std::vector<CapacityOption>& options,
                                     const CapacityOptions& o) {
  // The largest published runs train on about 1e14 tokens; 1e16 leaves room and catches typos.
  if (!(o.tokens > 0) || o.tokens > 1e16) {
    throw InputError(fmt::format("command line: --tokens: got {:g}, expected a positive token count of at most 1e16 "
                                 "(10000T)",
                                 o.tokens));
  }
  std::vector<CapacityRow> rows;
  for (const auto& opt : options) {
    CapacityRow row;
    row.option = opt;
    const Cluster cl = LoadCluster(opt.cluster);
    row.gpu = cl.gpu.name;
    row.price_date = cl.gpu.price_date;
    row.price_source = cl.gpu.price_source;
    auto price = o.price_per_gpu_hour.find(cl.gpu.name);
    row.price_usd_per_gpu_hour = price != o.price_per_gpu_hour.end() ? price->second : cl.gpu.price_usd_per_gpu_hour;
    if (!(row.price_usd_per_gpu_hour > 0)) {
      throw InputError(fmt::format("{}: /gpu: GPU '{}' has no price_usd_per_gpu_hour, expected a price in its file or "
                                   "--price-per-gpu-hour {}=USD (cost would read as zero)",
                                   opt.cluster, cl.gpu.name, cl.gpu.name));
    }
    PlanOptions po = o.plan;
    po.gpus = opt.gpus;
    po.global_batch_size = o.global_batch_size;
    po.seq_length = o.seq_length;
    po.top_k = 1;
    po.price_usd_per_gpu_hour = row.price_usd_per_gpu_hour;
    const auto measured = o.profiles.find(opt.cluster);
    if (measured != o.profiles.end()) row.profile = measured->second.first;
    const HardwareProfile prof = WithGemmRateFor(measured != o.profiles.end() ? measured->second.second : DefaultProfile(cl),
                                                 cl, po.base.precision);
    if (measured == o.profiles.end()) row.profile_estimates = prof.Estimates(po.flash_attention, po.base.precision);
    if (!cl.gpu.Runs(po.base.precision)) {
      // Another option's GPU may run it: this one is a row with the reason, not an error.
      row.feasible = false;
      row.reason = fmt::format("the {} does not run {}; it runs {}", cl.gpu.display_name, ToString(po.base.precision),
                               cl.gpu.PrecisionList());
      rows.push_back(row);
      continue;
    }
    PlanResult pr = RunPlan(m, cl, prof, po);
    if (pr.plans.empty()) {
      row.feasible = false;
      row.reason = pr.advice.empty() ? "no configuration fits" : pr.advice.front();
      rows.push_back(row);
      continue;
    }
    row.feasible = true;
    // The best plan not at risk of running out of memory; if there is none, the best at risk.
    row.memory_at_risk = !pr.best_not_at_risk.has_value();
    row.best = pr.best_not_at_risk ? *pr.best_not_at_risk : pr.plans.front();
    row.step_time_s = row.best.result.step_time_s;
    row.tokens_per_step = static_cast<double>(row.best.config.global_batch_size * row.best.config.seq_length);
    row.steps = std::ceil(o.tokens / row.tokens_per_step);
    row.train_time_s = row.steps * row.step_time_s;
    if (o.mtbf_hours && *o.mtbf_hours > 0) {
      const double job_mtbf = *o.mtbf_hours * 3600.0 / static_cast<double>(opt.gpus);
      const double c = o.checkpoint_minutes * 60.0;
      const double r = (o.restart_minutes > 0 ? o.restart_minutes : o.checkpoint_minutes) * 60.0;
      row.checkpoint_interval_s = YoungDalyInterval(c, job_mtbf);
      row.goodput = Goodput(c, r, job_mtbf, row.checkpoint_interval_s);
    }
    row.wall_time_s = row.goodput > 0 ? row.train_time_s / row.goodput : INFINITY;
    row.gpu_hours = static_cast<double>(opt.gpus) * row.wall_time_s / 3600.0;
    row.cost_usd = row.gpu_hours * row.price_usd_per_gpu_hour;
    row.energy_kwh = static_cast<double>(opt.gpus) * cl.gpu.tdp_W * o.energy_overhead * row.wall_time_s / 3.6e6;
    row.meets_deadline = !o.days || row.wall_time_s <= *o.days * 86400.0;
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const CapacityRow& a, const CapacityRow& b) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.meets_deadline != b.meets_deadline) return a.meets_deadline;
    return a.cost_usd < b.cost_usd;
  });
  return rows;
}

}  // namespace shardcast
