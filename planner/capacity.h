#pragma once
/// \file capacity.h
/// The buying question (`shardcast capacity`): for a token budget and cluster options (GPU type
/// and count), the best plan of each, time to train, GPU-hours, cost, energy, and goodput under
/// failures with the Young/Daly checkpoint interval.

#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace shardcast {

struct CapacityOption {
  std::string cluster;  ///< preset name or path
  std::int64_t gpus = 0;
};

struct CapacityOptions {
  double tokens = 0;                 ///< tokens to train
  std::int64_t global_batch_size = 0;
  std::int64_t seq_length = 0;
  std::optional<double> days;        ///< deadline
  std::map<std::string, double> price_per_gpu_hour;  ///< GPU preset name -> USD override
  std::optional<double> mtbf_hours;  ///< mean time between failures of ONE GPU (incl. its node share)
  double checkpoint_minutes = 0;     ///< time to write one checkpoint
  double restart_minutes = 0;        ///< time to restart after a failure (default: checkpoint time)
  double energy_overhead = 1.3;      ///< facility + host power over GPU board power (PUE-like)
  PlanOptions plan;                  ///< search options (gbs, top_k ignored)
  /// Measured hardware profiles by the option's cluster (CapacityOption::cluster, as given), with
  /// the file each came from; a profile describes one machine, its GPU and its network. Options of
  /// other clusters use the built-in default (DefaultProfile).
  std::map<std::string, std::pair<std::string, HardwareProfile>> profiles;
};

struct CapacityRow {
  CapacityOption option;
  std::string gpu;
  std::int64_t gpus_per_node = 0;  ///< of the option's cluster (an NVL72 rack counts as one node of 72)
  std::string price_date, price_source;  ///< of the GPU's built-in price (its preset or file)
  double tdp_W = 0;                      ///< the GPU's board power (its preset or file), for energy
  std::string profile = "built-in default";  ///< the profile simulated with: a file path or the default
  /// The built-in default's values carried over from another GPU or estimated, that this option's
  /// plans use (HardwareProfile::Estimates); empty with a measured profile.
  std::vector<std::string> profile_estimates;
  bool feasible = false;
  std::string reason;
  Plan best;
  /// Every plan that fits is at risk of running out of memory (best is the best of those).
  bool memory_at_risk = false;
  double step_time_s = 0;
  double tokens_per_step = 0;
  double steps = 0;
  double train_time_s = 0;       ///< without failures
  double goodput = 1.0;          ///< fraction of wall time doing useful steps
  double wall_time_s = 0;        ///< train_time / goodput
  double checkpoint_interval_s = 0;
  double gpu_hours = 0;
  double price_usd_per_gpu_hour = 0;
  double cost_usd = 0;
  double energy_kwh = 0;
  bool meets_deadline = true;
};

/// Young/Daly first-order optimum (Young 1974; Daly 2006): checkpoint every sqrt(2*C*M) for a
/// checkpoint cost C and job MTBF M. Goodput = 1 - C/tau - (tau/2 + R)/M, clamped at 0.
double YoungDalyInterval(double checkpoint_s, double mtbf_s);
double Goodput(double checkpoint_s, double restart_s, double mtbf_s, double interval_s);

/// The order capacity lists its rows in: feasible first, then those meeting the deadline, then
/// cheapest first (ties keep the options' order when used with std::stable_sort).
bool CapacityRowBefore(const CapacityRow& a, const CapacityRow& b);

/// Evaluates every option; rows sorted by CapacityRowBefore.
std::vector<CapacityRow> RunCapacity(const Model& model, const std::vector<CapacityOption>& options,
                                     const CapacityOptions& opts);

/// The smallest GPU count of `cluster` whose best plan meets the deadline o.days
/// (`capacity --solve`).
struct SolveResult {
  std::string cluster;
  bool found = false;
  std::int64_t max_gpus = 0;  ///< the largest count searched (whole nodes)
  /// The count below which even 100% of the GPU's dense peak on the model FLOPs (causal
  /// attention) misses the deadline (DeadlineLowerBoundNodes), where the search starts.
  std::int64_t lower_bound_gpus = 0;
  /// At the smallest count found to meet the deadline; when none does, at the largest count
  /// tried (max_gpus where it has a configuration; where no count up to it has one, the row of
  /// max_gpus, which says why).
  CapacityRow row;
  std::vector<std::pair<std::int64_t, bool>> tried;  ///< counts simulated, in order, and whether each met it
  /// Counts the search reached and stepped over because no configuration divides them, in
  /// increasing order.
  std::vector<std::int64_t> no_configuration;
};

/// Nodes of `cl` below which the deadline cannot be met even at 100% of the dense peak of the
/// precision: ceil(tokens x model FLOPs per token (causal) / (days x 86400 x peak) / gpus per
/// node), at least 1 (1 without a deadline), at most 1e15.
std::int64_t DeadlineLowerBoundNodes(const Model& m, const Cluster& cl, const CapacityOptions& o);

/// Searches whole-node counts of `cluster` from DeadlineLowerBoundNodes up to `max_gpus`: upward
/// by the estimate that time falls in proportion to GPUs (at least 25% more per step) until a
/// count meets the deadline, then bisection between the last count that missed and it. Counts
/// for which no configuration divides (GenerateCandidates is empty) are stepped over. The answer
/// is the smallest count meeting the deadline provided that, among counts with a configuration,
/// more GPUs never make the best plan slower (docs/planner.md). InputError without o.days or with
/// max_gpus below one node.
SolveResult SolveForDeadline(const Model& m, const std::string& cluster, const CapacityOptions& o, std::int64_t max_gpus);

}  // namespace shardcast
