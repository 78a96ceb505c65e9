#include "report/capacity_report.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/text.h"
#include "report/megatron_args.h"
#include "report/plan_report.h"
#include "report/text.h"

namespace shardcast {

Json KnownBiasJson(const ParallelConfig& c) {
  const std::string bias = KnownBias(c);
  return bias.empty() ? Json(nullptr) : Json(bias);
}

Json CapacityJson(const Model& m, const CapacityOptions& o, const std::vector<CapacityRow>& rows,
                  const std::vector<SolveResult>& solved) {
  Json j;
  j["model"] = m.name;
  j["tokens"] = o.tokens;
  j["global_batch_size"] = o.global_batch_size;
  j["days"] = o.days ? Json(*o.days) : Json(nullptr);  // the deadline meets_deadline is judged by
  j["energy_overhead"] = o.energy_overhead;
  j["precision"] = ToString(o.plan.base.precision);
  j["mfu_peak_precision"] = ToString(MfuPeakPrecision(o.plan.base.precision));  // what mfu is against
  j["zero_stages"] = o.plan.zero_stages;
  j["optimizer_impl"] = ToString(o.plan.optimizer_impl);
  const auto& zs = o.plan.zero_stages;  // null when no plan runs ZeRO-3
  j["zero3_impl"] = std::find(zs.begin(), zs.end(), 3) != zs.end() ? Json(ToString(o.plan.zero3_impl)) : Json(nullptr);
  j["options"] = Json::array();
  for (const auto& r : rows) {
    Json x = {{"cluster", r.option.cluster}, {"gpus", r.option.gpus}, {"gpus_per_node", r.gpus_per_node},
              {"gpu", r.gpu}, {"profile", r.profile},
              {"profile_estimates", r.profile_estimates}, {"feasible", r.feasible}};
    if (!r.feasible) {
      x["reason"] = r.reason;
    } else {
      x["config"] = r.best.config.Summary();
      x["megatron_arguments"] = MegatronArguments(r.best.config, m);
      x["step_time_s"] = r.step_time_s;
      x["mfu"] = r.best.result.mfu;
      x["mfu_causal"] = r.best.result.mfu_causal;
      x["memory_at_risk"] = r.memory_at_risk;
      x["known_bias"] = KnownBiasJson(r.best.config);
      x["steps"] = r.steps;
      x["train_time_s"] = r.train_time_s;
      x["goodput"] = o.mtbf_hours ? Json(r.goodput) : Json(nullptr);  // null: no failure model
      x["checkpoint_interval_s"] = o.mtbf_hours ? Json(r.checkpoint_interval_s) : Json(nullptr);
      x["wall_time_s"] = r.wall_time_s;
      x["gpu_hours"] = r.gpu_hours;
      x["price_usd_per_gpu_hour"] = r.price_usd_per_gpu_hour;
      x["cost_usd"] = r.cost_usd;
      // null: the GPU file gives no board power (tdp_W), so no energy.
      x["energy_kwh"] = r.tdp_W > 0 ? Json(r.energy_kwh) : Json(nullptr);
      x["tdp_W"] = r.tdp_W > 0 ? Json(r.tdp_W) : Json(nullptr);
      if (o.days) x["meets_deadline"] = r.meets_deadline;
      x["price_date"] = o.price_per_gpu_hour.count(r.gpu) ? "command line" : r.price_date;
      x["price_source"] = o.price_per_gpu_hour.count(r.gpu) ? "--price-per-gpu-hour" : r.price_source;
    }
    j["options"].push_back(x);
  }
  if (!solved.empty()) {
    j["solve"] = Json::array();
    for (const auto& sr : solved) {
      Json t = Json::array();
      for (const auto& [gpus, met] : sr.tried) t.push_back({{"gpus", gpus}, {"meets_deadline", met}});
      j["solve"].push_back({{"cluster", sr.cluster}, {"found", sr.found}, {"gpus", sr.found ? Json(sr.row.option.gpus) : Json(nullptr)},
                            {"max_gpus", sr.max_gpus}, {"lower_bound_gpus", sr.lower_bound_gpus}, {"tried", t},
                            {"no_configuration", sr.no_configuration}});
    }
  }
  return j;
}

namespace {

/// capacity's table: one row per option, columns as wide as their longest entry.
void WriteCapacityTable(std::ostream& out, const CapacityOptions& o, const std::vector<CapacityRow>& rows) {
  // Columns as wide as their longest entry; small days and MWh keep two significant digits.
  std::size_t cw = 16, fw = std::string("best configuration").size();
  for (const auto& r : rows) {
    cw = std::max(cw, r.option.cluster.size());
    if (r.feasible) fw = std::max(fw, r.best.config.Short().size());
  }
  auto small = [](double v) { return v >= 1 || v == 0 ? fmt::format("{:.1f}", v) : fmt::format("{:.2g}", v); };
  out << fmt::format("\n{:<{}} {:>6}  {:<{}} {:>9} {:>6} {:>9} {:>8} {:>12} {:>8} {:>13} {:>10}  {}\n", "cluster", cw,
                           "GPUs", "best configuration", fw, "step", "MFU", "days", "goodput", "GPU-hours", "$/GPU-h", "cost",
                           "MWh", o.days ? "deadline" : "");
  for (const auto& r : rows) {
    if (!r.feasible) {
      out << fmt::format("{:<{}} {:>6}  infeasible: {}\n", r.option.cluster, cw, r.option.gpus, r.reason);
      continue;
    }
    out << fmt::format("{:<{}} {:>6}  {:<{}} {:>9} {:>6} {:>9} {:>8} {:>12} {:>8.2f} {:>13} {:>10}  {}\n",
                             r.option.cluster, cw, r.option.gpus, r.best.config.Short(), fw,
                             FormatSeconds(r.step_time_s), fmt::format("{:.1f}%", 100 * r.best.result.mfu_causal),
                             small(r.wall_time_s / 86400.0), o.mtbf_hours ? fmt::format("{:.1f}%", 100 * r.goodput) : "-",
                             r.gpu_hours >= 100 ? fmt::format("{:.0f}", r.gpu_hours) : small(r.gpu_hours),
                             r.price_usd_per_gpu_hour, fmt::format("${:.0f}", r.cost_usd),
                             r.tdp_W > 0 ? small(r.energy_kwh / 1000.0) : "-",
                             o.days ? (r.meets_deadline ? "meets" : "misses") : "");
    if (!(r.goodput > 0)) {
      out << fmt::format("{:<24}  (never finishes: with one failure every {:.2g} h across {} GPUs, checkpoints "
                               "and restarts take all the time; goodput 0)\n",
                               "", *o.mtbf_hours / static_cast<double>(r.option.gpus), r.option.gpus);
    }
    if (r.memory_at_risk) {
      out << fmt::format("{:<24}  (every plan that fits is at risk of running out of memory: it fits only by "
                               "releasing the caching allocator's cache)\n", "");
    }
  }
  std::vector<ParallelConfig> best;
  for (const auto& r : rows) {
    if (r.feasible) best.push_back(r.best.config);
  }
  for (const std::string& line : ParallelConfig::ShortLegend(best)) out << "  " << line << "\n";
}

/// The notes under capacity's table: known biases (once each, naming their rows), the MFU
/// convention, the MoE routing caveat, partial nodes, what "best configuration" means.
void WriteCapacityNotes(std::ostream& out, const Model& m, const CapacityOptions& o, const std::vector<CapacityRow>& rows) {
  // A known bias once, naming its rows, rather than under each row it concerns.
  std::vector<std::pair<std::string, std::vector<std::string>>> biases;
  for (const auto& r : rows) {
    const std::string bias = r.feasible ? KnownBias(r.best.config) : "";
    if (bias.empty()) continue;
    auto it = std::find_if(biases.begin(), biases.end(), [&](const auto& b) { return b.first == bias; });
    if (it == biases.end()) it = biases.insert(biases.end(), {bias, {}});
    it->second.push_back(fmt::format("{}:{}", r.option.cluster, r.option.gpus));
  }
  for (const auto& [bias, which] : biases) out << fmt::format("\nKnown bias ({}): {}.", Join(which, ", "), bias);
  if (!biases.empty()) out << "\n";
  out << "\nMFU: model FLOPs with causal attention (half the s^2 matrix, as current Megatron-LM counts it); "
               "--json has both conventions.";
  if (IsLowPrecision(o.plan.base.precision)) {
    out << fmt::format(" MFU is against the GPU's dense {} peak, as the field reports {} runs, so it can pass 100%.",
                       ToString(MfuPeakPrecision(o.plan.base.precision)), ToString(o.plan.base.precision));
  }
  if (const std::string moe = MoeRoutingCaveat(m, o.plan.base); !moe.empty()) out << "\n" << moe;
  if (o.plan.base.moe_dispatcher == MoeDispatcher::kFlex &&
      std::any_of(rows.begin(), rows.end(),
                  [](const CapacityRow& r) { return r.feasible && r.best.config.moe_dispatcher != MoeDispatcher::kFlex; })) {
    out << "\nDispatcher: the best configurations with ep x expert tp = 1 run alltoall, not the flex one given "
           "(Megatron-Core's flex dispatcher requires TPxEP > 1; their tokens stay on their GPU).";
  }
  for (const auto& r : rows) {
    if (r.gpus_per_node <= 0 || r.option.gpus % r.gpus_per_node == 0) continue;
    const std::int64_t whole = (r.option.gpus + r.gpus_per_node - 1) / r.gpus_per_node * r.gpus_per_node;
    out << fmt::format("\nPartial node: {}:{} is {:.2f} nodes of {} GPUs; whole nodes are {} GPUs, which a booking "
                       "may charge (GPU-hours and cost here count {}).",
                       r.option.cluster, r.option.gpus, static_cast<double>(r.option.gpus) / r.gpus_per_node,
                       r.gpus_per_node, whole, r.option.gpus);
  }
  out << "\nBest configuration: the fastest plan that fits without releasing the caching allocator's cache, if one "
         "does\n(docs/planner.md).\n";
}

/// Where capacity's inputs come from: each GPU's price and board power, each cluster's profile.
void WriteCapacitySources(std::ostream& out, const CapacityOptions& o, const std::vector<CapacityRow>& rows) {
  out << "\nPrices (USD per GPU-hour; volatile, override with --price-per-gpu-hour GPU=USD):\n";
  std::set<std::string> seen;
  for (const auto& r : rows) {
    if (!seen.insert(r.gpu).second) continue;
    if (o.price_per_gpu_hour.count(r.gpu)) {
      out << fmt::format("  {:<16} {:>6.2f}  (command line)\n", r.gpu, r.price_usd_per_gpu_hour);
    } else {
      out << fmt::format("  {:<16} {:>6.2f}  ({}, {})\n", r.gpu, r.price_usd_per_gpu_hour,
                               r.price_date.empty() ? "no date" : r.price_date,
                               r.price_source.empty() ? "no source given" : r.price_source);
    }
  }
  out << fmt::format("\nBoard power (W per GPU, the GPU preset's tdp_W; energy = GPUs x W x {:g} x wall time):\n",
                     o.energy_overhead);
  seen.clear();
  for (const auto& r : rows) {
    if (!seen.insert(r.gpu).second) continue;
    out << (r.tdp_W > 0 ? fmt::format("  {:<16} {:>6.0f}\n", r.gpu, r.tdp_W)
                        : fmt::format("  {:<16} {:>6}  (its GPU file has no tdp_W: no energy)\n", r.gpu, "-"));
  }
  out << "\nHardware profiles (--profile [CLUSTER=]FILE for a measured one):\n";
  seen.clear();
  for (const auto& r : rows) {
    if (!seen.insert(r.option.cluster).second) continue;
    out << fmt::format("  {:<16} {}\n", r.option.cluster, r.profile);
    // What the built-in default carries over from another GPU: the comparison across GPU types
    // is only as good as these (docs/profile.md).
    for (const auto& e : r.profile_estimates) out << fmt::format("  {:<16}   estimate: {}\n", "", e);
  }
}

}  // namespace

void WriteCapacityText(std::ostream& out, const Model& m, const CapacityOptions& o, const std::vector<CapacityRow>& rows) {
  out << fmt::format("Training {} on {} tokens (global batch {} x seq {} = {} tokens per step)\n", m.name,
                           FormatCount(o.tokens), o.global_batch_size, o.seq_length,
                           FormatCount(static_cast<double>(o.global_batch_size * o.seq_length)));
  out << "Time = steps x simulated step time; GPU-hours and cost over the wall time; energy = GPUs x board power x "
            << fmt::format("{:g}", o.energy_overhead) << " (host, network, cooling; assumed) x wall time.\n";
  out << SearchOptimizerLine(o.plan);
  if (!o.mtbf_hours) out << "No failure model (give --mtbf-hours and --checkpoint-minutes for goodput).\n";
  if (o.mtbf_hours) {
    out << fmt::format("Failures: per-GPU MTBF {:g} h, checkpoint {:g} min, restart {:g} min; checkpoint every "
                             "sqrt(2 x checkpoint x job MTBF) (Young 1974, Daly 2006).\n",
                             *o.mtbf_hours, o.checkpoint_minutes,
                             o.restart_minutes > 0 ? o.restart_minutes : o.checkpoint_minutes);
  }
  WriteCapacityTable(out, o, rows);
  WriteCapacityNotes(out, m, o, rows);
  WriteCapacitySources(out, o, rows);
}

void WriteSolve(std::ostream& out, const CapacityOptions& o, const std::vector<SolveResult>& solved) {
  out << fmt::format("Smallest GPU count meeting {:g} day{} (whole nodes up to --max-gpus; the search starts where "
                           "even 100% of the dense peak would miss it):\n",
                           *o.days, *o.days == 1 ? "" : "s");
  for (const auto& sr : solved) {
    std::vector<std::string> tried;
    for (const auto& [gpus, met] : sr.tried) tried.push_back(fmt::format("{}{}", gpus, met ? " meets" : " misses"));
    // Counts stepped over (no configuration divides them), the first eight named.
    std::string skipped;
    if (!sr.no_configuration.empty()) {
      std::vector<std::string> first;
      for (std::size_t i = 0; i < sr.no_configuration.size() && i < 8; ++i) {
        first.push_back(std::to_string(sr.no_configuration[i]));
      }
      skipped = fmt::format("; no configuration at {}{}", Join(first, ", "),
                            sr.no_configuration.size() > 8
                                ? fmt::format(" and {} more", sr.no_configuration.size() - 8)
                                : std::string());
    }
    out << fmt::format("  {:<16} {}  (lower bound {} GPUs; tried {}{})\n", sr.cluster,
                             sr.found ? fmt::format("{} GPUs", sr.row.option.gpus)
                                      : fmt::format("not met up to {} GPUs", sr.max_gpus),
                             sr.lower_bound_gpus, Join(tried, ", "), skipped);
  }
  out << "\n";
}

}  // namespace shardcast
