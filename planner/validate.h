#pragma once
/// \file validate.h
/// `shardcast validate`: maps each published training run (validation/published_runs.csv) to a
/// model, cluster and configuration, simulates it, and compares step time, peak memory and
/// out-of-memory outcome; memory points from published_memory.csv likewise (docs/accuracy.md).

#include <optional>
#include <string>
#include <vector>

#include "common/csv.h"
#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "planner/run_log.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast {

struct ValidationRow {
  std::string row_id, source_id, model, gpu_type;
  std::int64_t gpus = 0;
  bool skipped = false;
  std::string skip_reason;
  ParallelConfig config;
  std::string outcome;  ///< "ok" or "OOM" (measured)
  std::optional<double> measured_step_time_s, predicted_step_time_s, step_time_error;
  /// The measured step time is the CSV's step_time_s_derived (computed from a reported
  /// throughput such as TFLOP/s or tokens/s), not a reported iteration time (iter_time_s).
  bool step_time_derived = false;
  std::optional<double> measured_peak_memory_bytes, predicted_peak_memory_bytes, memory_error;
  /// The predicted reserved figure (SimulationResult::peak_reserved_bytes: the caching
  /// allocator's segments plus the framework overhead).
  std::optional<double> predicted_reserved_bytes;
  /// The measured peak is a reserved figure (nvidia-smi, or PyTorch's max_memory_reserved), so
  /// memory_error compares it with predicted_reserved_bytes; else with the allocated peak.
  bool memory_is_reserved = false;
  /// A training log's peak reserved (PyTorch's max_memory_reserved: the caching allocator's
  /// cache included), where the log gives it (validate --log).
  std::optional<double> measured_reserved_bytes;
  std::string log;  ///< the training log the row was read from (validate --log)
  bool predicted_fits = true;
  bool predicted_at_risk = false;  ///< fits, but SimulationResult::memory_at_risk
  double predicted_mfu = 0;         ///< full s^2 attention matrix (SimulationResult::mfu)
  double predicted_mfu_causal = 0;  ///< attention halved (SimulationResult::mfu_causal)
  std::string group;  ///< model + GPU count (for rank correlation)
  /// The CSV's confidence is `low-confidence`: a row the source contradicts (its notes say how);
  /// the summary gives the step-time MAPE with and without such rows.
  bool low_confidence = false;
  /// The constant this row was used to fit (FitsOnValidationRows), empty for a held-out row.
  std::string fitted_constant;
  /// Settings the row does not state that validate assumed ("micro-batch size 1 (not stated)").
  std::vector<std::string> assumptions;
  /// Model FLOPs per step in the row's FLOP convention (its flops_convention column: the causal
  /// one, attention halved, where it says "causal"; else the full s^2 matrix).
  double model_flops_per_step = 0;
  bool flops_convention_causal = false;
};

struct MemoryPoint {
  std::string model, quantity, setting;
  double published_GiB = 0, predicted_GiB = 0, error = 0;
  std::string source;
  std::int64_t tp = 1, pp = 1;
  /// What was assumed for the point (empty when an S3 run of the same layers, tp and pp gave its
  /// global batch and virtual stages).
  std::string assumption;
};

struct ValidationSummary {
  std::size_t rows = 0, simulated = 0, skipped = 0, timed = 0;
  double step_time_mape = 0, step_time_max_abs_error = 0, within_5pct = 0, within_10pct = 0;
  double kendall_tau = 0;
  std::size_t kendall_pairs = 0;
  /// Per group of runs with the same model, GPU type and count (two rows or more): Kendall tau of
  /// predicted vs measured throughput and its pairs.
  std::map<std::string, std::pair<double, std::size_t>> kendall_by_group;
  /// Kendall tau and pairs as kendall_tau, over the rows that are not low-confidence (the issue's
  /// targets hold on those; the contradictory pairs' rows are ranked in kendall_tau only).
  double confident_kendall_tau = 0;
  std::size_t confident_kendall_pairs = 0;
  /// Step-time MAPE and rows without the low-confidence rows (all, and held out), and those rows.
  double confident_mape = 0, confident_held_out_mape = 0, confident_max_abs_error = 0;
  std::size_t confident_timed = 0, confident_held_out_timed = 0;
  std::vector<std::string> low_confidence_rows;
  double memory_mape = 0;
  std::size_t memory_points = 0;
  std::size_t oom_rows = 0, oom_rows_predicted_oom = 0, ok_rows = 0, ok_rows_predicted_fit = 0;
  /// Rows flagged at risk of running out of memory (SimulationResult::memory_at_risk: they fit
  /// only because the caching allocator's replay released its cache).
  std::size_t oom_rows_at_risk = 0, ok_rows_at_risk = 0;
  /// Step-time MAPE, max |error| and count over the held-out rows (no built-in constant was
  /// fitted on them) and over the rows a constant was fitted on (FitsOnValidationRows).
  double held_out_mape = 0, held_out_max_abs_error = 0, fitted_mape = 0;
  std::size_t held_out_timed = 0, fitted_timed = 0;
  /// Per source (S1, S3, S12, S14): MAPE and count.
  std::map<std::string, std::pair<double, std::size_t>> mape_by_source;
  /// Per source: Kendall tau of predicted vs measured TFLOP/s per GPU (the row's convention) over
  /// all its rows as one series (S7: sequence length and cp growing together), and the pairs.
  std::map<std::string, std::pair<double, std::size_t>> tflops_tau_by_source;
};

/// Everything one row's prediction came from, kept when RunValidation is asked to explain it.
struct ExplainedRow {
  std::string row_id;
  Model model;
  Cluster cluster;
  HardwareProfile profile;
  SimulationResult result;
};

struct ValidationReport {
  /// Rows from training logs (ValidateLoggedRuns; row k is logs[k - 1]) rather than a CSV of
  /// published runs.
  std::vector<std::string> logs;
  std::vector<ValidationRow> rows;
  std::optional<ExplainedRow> explained;  ///< the row named by `explain_row`, if simulated
  std::vector<MemoryPoint> memory_points;
  std::string memory_csv;  ///< the file the memory points came from
  ValidationSummary summary;
};

/// Runs the validation. `memory_csv` may be empty. Rows the simulator cannot model are listed as
/// skipped with the reason. Bad files raise InputError naming the file.
/// `explain_row`, when not empty, names a row_id whose model, cluster, profile and full simulation
/// result are kept in ValidationReport::explained (InputError if no simulated row has that id).
ValidationReport RunValidation(const std::string& runs_csv, const std::string& memory_csv,
                               const std::string& explain_row = "");

/// Validates users' own runs (planner/run_log.h) on `cluster` with `profile`: each is simulated
/// and compared as a published row is (row_id: its position in `runs`, source_id: MLM for
/// Megatron-LM, TT for torchtitan). Step time against the measured mean; memory where the log
/// gives PyTorch's max allocated (a torchtitan log's max reserved, which includes the caching
/// allocator's cache, is given in the row's notes beside the predicted peak). A run the
/// simulator cannot take is listed as skipped with the reason. `explain_row` as RunValidation's.
ValidationReport ValidateLoggedRuns(const std::vector<LoggedRun>& runs, const Cluster& cluster,
                                    const HardwareProfile& profile, const std::string& explain_row = "");

/// Kendall's tau-a over pairs within groups: (concordant - discordant) / pairs, comparing
/// predicted and measured values; pairs with a tie in either count as neither.
double KendallTauWithinGroups(const std::vector<std::string>& groups, const std::vector<double>& predicted,
                              const std::vector<double>& measured, std::size_t* pairs);

}  // namespace shardcast
