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

namespace {

void RequireTokens(double tokens) {
  // The largest published runs train on about 1e14 tokens; 1e16 leaves room and catches typos.
  if (!(tokens > 0) || tokens > 1e16) {
    throw InputError(fmt::format("command line: --tokens: got {:g}, expected a positive token count of at most 1e16 "
                                 "(10000T)",
                                 tokens));
  }
}

/// The search options of one option's plan.
PlanOptions PlanOptionsFor(const CapacityOptions& o, std::int64_t gpus, double price) {
  PlanOptions po = o.plan;
  po.gpus = gpus;
  po.global_batch_size = o.global_batch_size;
  po.seq_length = o.seq_length;
  po.top_k = 1;
  po.price_usd_per_gpu_hour = price;
  return po;
}

/// Time, goodput, GPU-hours, cost and energy of a row whose best plan is set.
void FillRowFromPlan(const CapacityOptions& o, CapacityRow* row) {
  row->step_time_s = row->best.result.step_time_s;
  row->tokens_per_step = static_cast<double>(row->best.config.global_batch_size * row->best.config.seq_length);
  row->steps = std::ceil(o.tokens / row->tokens_per_step);
  row->train_time_s = row->steps * row->step_time_s;
  if (o.mtbf_hours && *o.mtbf_hours > 0) {
    const double job_mtbf = *o.mtbf_hours * 3600.0 / static_cast<double>(row->option.gpus);
    const double c = o.checkpoint_minutes * 60.0;
    const double r = (o.restart_minutes > 0 ? o.restart_minutes : o.checkpoint_minutes) * 60.0;
    row->checkpoint_interval_s = YoungDalyInterval(c, job_mtbf);
    row->goodput = Goodput(c, r, job_mtbf, row->checkpoint_interval_s);
  }
  row->wall_time_s = row->goodput > 0 ? row->train_time_s / row->goodput : INFINITY;
  row->gpu_hours = static_cast<double>(row->option.gpus) * row->wall_time_s / 3600.0;
  row->cost_usd = row->gpu_hours * row->price_usd_per_gpu_hour;
  row->energy_kwh = static_cast<double>(row->option.gpus) * row->tdp_W * o.energy_overhead * row->wall_time_s / 3.6e6;
  row->meets_deadline = !o.days || row->wall_time_s <= *o.days * 86400.0;
}

/// The row of one option on its cluster `cl`: the best plan and what follows from it, or the
/// reason none runs.
CapacityRow EvaluateOption(const Model& m, const CapacityOption& opt, const Cluster& cl, const CapacityOptions& o) {
  CapacityRow row;
  row.option = opt;
  row.gpu = cl.gpu.name;
  row.gpus_per_node = cl.gpus_per_node;
  row.price_date = cl.gpu.price_date;
  row.price_source = cl.gpu.price_source;
  row.tdp_W = cl.gpu.tdp_W;
  auto price = o.price_per_gpu_hour.find(cl.gpu.name);
  row.price_usd_per_gpu_hour = price != o.price_per_gpu_hour.end() ? price->second : cl.gpu.price_usd_per_gpu_hour;
  if (!(row.price_usd_per_gpu_hour > 0)) {
    throw InputError(fmt::format("{}: /gpu: GPU '{}' has no price_usd_per_gpu_hour, expected a price in its file or "
                                 "--price-per-gpu-hour {}=USD (cost would read as zero)",
                                 opt.cluster, cl.gpu.name, cl.gpu.name));
  }
  const PlanOptions po = PlanOptionsFor(o, opt.gpus, row.price_usd_per_gpu_hour);
  const auto measured = o.profiles.find(opt.cluster);
  if (measured != o.profiles.end()) row.profile = measured->second.first;
  HardwareProfile prof = WithGemmRateFor(measured != o.profiles.end() ? measured->second.second : DefaultProfile(cl),
                                         cl, po.base.precision);
  // Every candidate of --optimizer fsdp is a PyTorch-native (torchtitan) run: PyTorch's attention.
  if (po.optimizer_impl == OptimizerImpl::kTorchFsdp) prof = WithPyTorchAttention(std::move(prof), cl.gpu.arch);
  if (measured == o.profiles.end()) {
    row.profile_estimates = prof.Estimates(po.flash_attention && cl.gpu.HasFlashAttention(), po.base.precision);
    row.profile_estimates.insert(row.profile_estimates.end(), prof.adjustments.begin(), prof.adjustments.end());
  }
  if (!cl.gpu.Runs(po.base.precision)) {
    // Another option's GPU may run it: this one is a row with the reason, not an error.
    row.feasible = false;
    row.reason = fmt::format("the {} does not run {}; it runs {}", cl.gpu.display_name, ToString(po.base.precision),
                             cl.gpu.PrecisionList());
    return row;
  }
  PlanResult pr = RunPlan(m, cl, prof, po);
  if (pr.plans.empty()) {
    row.feasible = false;
    row.reason = pr.advice.empty() ? "no configuration fits" : pr.advice.front();
    return row;
  }
  row.feasible = true;
  // The best plan not at risk of running out of memory; if there is none, the best at risk.
  row.memory_at_risk = !pr.best_not_at_risk.has_value();
  row.best = pr.best_not_at_risk ? *pr.best_not_at_risk : pr.plans.front();
  FillRowFromPlan(o, &row);
  return row;
}

}  // namespace

bool CapacityRowBefore(const CapacityRow& a, const CapacityRow& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (a.meets_deadline != b.meets_deadline) return a.meets_deadline;
  return a.cost_usd < b.cost_usd;
}

std::vector<CapacityRow> RunCapacity(const Model& m, const std::vector<CapacityOption>& options,
                                     const CapacityOptions& o) {
  RequireTokens(o.tokens);
  std::vector<CapacityRow> rows;
  for (const auto& opt : options) rows.push_back(EvaluateOption(m, opt, LoadCluster(opt.cluster), o));
  std::stable_sort(rows.begin(), rows.end(), CapacityRowBefore);
  return rows;
}

std::int64_t DeadlineLowerBoundNodes(const Model& m, const Cluster& cl, const CapacityOptions& o) {
  const double peak = cl.gpu.PeakFlops(o.plan.base.precision);
  const double flops = o.tokens * m.Flops(o.seq_length).per_token_causal();
  if (!(peak > 0) || !o.days) return 1;
  const double nodes = std::ceil(flops / (*o.days * 86400.0 * peak) / static_cast<double>(cl.gpus_per_node));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::min(nodes, 1e15)));
}

namespace {

/// Whether `nodes` has no prime factor above 7. The search tries only such node counts (and the
/// maximum): a larger prime factor lands in the data-parallel or the pipeline size, where it
/// rarely divides the batch or the layers well, so such counts are slower than their neighbours
/// (1,264 H100 = 158 nodes = 2 x 79 nodes runs pp 79) and would mislead the bisection.
bool SmoothNodeCount(std::int64_t nodes) {
  if (nodes < 1) return false;
  for (const std::int64_t p : {2, 3, 5, 7}) {
    while (nodes % p == 0) nodes /= p;
  }
  return nodes == 1;
}

/// Whether any configuration divides `gpus` (GenerateCandidates, no simulation); a count without
/// one is noted in s->no_configuration.
bool HasCandidates(const Model& m, const Cluster& cl, const CapacityOptions& o, std::int64_t gpus, SolveResult* s) {
  std::map<std::string, std::size_t> rejected;
  bool has = false;
  try {
    has = !GenerateCandidates(m, cl, PlanOptionsFor(o, gpus, 1.0), &rejected).empty();
  } catch (const InputError&) {
    has = false;
  }
  auto& skipped = s->no_configuration;
  if (const auto at = std::lower_bound(skipped.begin(), skipped.end(), gpus); !has && (at == skipped.end() || *at != gpus)) {
    skipped.insert(at, gpus);
  }
  return has;
}

/// Bisection between `lo` nodes (misses) and `hi` nodes (meets; its row in s->row) over the node
/// counts SmoothNodeCount takes: a count without any configuration is stepped over to the next
/// one up that has one.
void Bisect(const Model& m, const std::string& name, const Cluster& cl, const CapacityOptions& o, std::int64_t lo,
            std::int64_t hi, SolveResult* s) {
  const std::int64_t g = cl.gpus_per_node;
  while (hi - lo > 1) {
    std::int64_t mid = lo + (hi - lo) / 2;
    while (mid < hi && (!SmoothNodeCount(mid) || !HasCandidates(m, cl, o, mid * g, s))) ++mid;
    if (mid == hi) {  // no count in [lo + (hi - lo) / 2, hi) is tried: look below
      std::int64_t below = lo + (hi - lo) / 2 - 1;
      while (below > lo && (!SmoothNodeCount(below) || !HasCandidates(m, cl, o, below * g, s))) --below;
      if (below == lo) break;
      mid = below;
    }
    CapacityRow row = EvaluateOption(m, {name, mid * g}, cl, o);
    s->tried.emplace_back(mid * g, row.feasible && row.meets_deadline);
    if (row.feasible && row.meets_deadline) {
      hi = mid;
      s->row = std::move(row);
    } else {
      lo = mid;
    }
  }
}

}  // namespace

SolveResult SolveForDeadline(const Model& m, const std::string& cluster, const CapacityOptions& o,
                             std::int64_t max_gpus) {
  RequireTokens(o.tokens);
  if (!o.days) throw InputError("command line: --solve: given without --days, expected the deadline to solve for");
  const Cluster cl = LoadCluster(cluster);
  const std::int64_t g = cl.gpus_per_node;
  if (max_gpus < g) {
    throw InputError(fmt::format("command line: --max-gpus: got {}, expected at least one node of {} ({} GPUs)",
                                 max_gpus, cluster, g));
  }
  SolveResult s;
  s.cluster = cluster;
  s.max_gpus = max_gpus / g * g;
  const std::int64_t max_nodes = max_gpus / g;
  const std::int64_t bound = DeadlineLowerBoundNodes(m, cl, o);
  s.lower_bound_gpus = bound * g;  // as computed, even above the maximum searched
  const std::int64_t lb = std::min(bound, max_nodes);
  std::int64_t lo = lb - 1, k = lb;
  // Bracket: from the count that would need 100% of peak, upward by the estimate that the
  // time falls in proportion to the GPUs (at least 25% more each step), until one meets it.
  for (;;) {
    while (k < max_nodes && (!SmoothNodeCount(k) || !HasCandidates(m, cl, o, k * g, &s))) ++k;
    if (k >= max_nodes && !HasCandidates(m, cl, o, k * g, &s)) {
      // The maximum has no configuration either: stepped over like the others, not met; the row
      // is the largest count tried, or, where none was, the maximum's (which says why).
      if (s.tried.empty()) s.row = EvaluateOption(m, {cluster, k * g}, cl, o);
      return s;
    }
    CapacityRow row = EvaluateOption(m, {cluster, k * g}, cl, o);
    const bool meets = row.feasible && row.meets_deadline;
    s.tried.emplace_back(k * g, meets);
    s.row = std::move(row);
    if (meets) break;
    lo = k;
    if (k >= max_nodes) return s;  // not met up to the maximum: the row at the maximum
    const double ratio = s.row.feasible && s.row.wall_time_s > 0 ? s.row.wall_time_s / (*o.days * 86400.0) : 2.0;
    const auto next = static_cast<std::int64_t>(std::ceil(static_cast<double>(k) * std::max(1.25, ratio * 1.05)));
    k = std::min(max_nodes, std::max(k + 1, next));
  }
  s.found = true;
  Bisect(m, cluster, cl, o, lo, k, &s);
  return s;
}

}  // namespace shardcast
