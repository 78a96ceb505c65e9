#include "report/validate_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "common/csv.h"
#include "common/text.h"
#include "report/text.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast {

std::string FormatOptional(const std::optional<double>& v, const char* fmtstr, double scale) {
  return v ? fmt::format(fmt::runtime(fmtstr), *v * scale) : std::string("-");
}

namespace {

std::string Opt(const std::optional<double>& v, const char* fmtstr, double scale = 1.0) {
  return FormatOptional(v, fmtstr, scale);
}

}  // namespace

std::string ValidationCsv(const ValidationReport& rep) {
  // The JSON row's fields, one column each; a missing value (a skipped row's predictions, a
  // published row's log) is an empty cell; bytes are whole numbers.
  auto Cell = [](const std::optional<double>& v) { return v ? fmt::format("{}", *v) : std::string(); };
  auto Bytes = [](const std::optional<double>& v) { return v ? fmt::format("{}", std::llround(*v)) : std::string(); };
  // A flag with nothing to qualify (a skipped row's predictions, a measurement not given) is empty.
  auto Bool = [](bool empty, bool v) { return empty ? std::string() : std::string(v ? "true" : "false"); };
  std::string csv = "row_id,source_id,model,gpus,config,measured_step_time_s,measured_step_time_derived,"
                    "predicted_step_time_s,step_time_error,measured_peak_memory_bytes,predicted_peak_memory_bytes,"
                    "outcome,predicted_fits,predicted_memory_at_risk,predicted_mfu,skipped,skip_reason,fitted_constant,"
                    "predicted_reserved_memory_bytes,measured_memory_is_reserved,log,low_confidence,predicted_mfu_causal\n";
  for (const auto& r : rep.rows) {
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", CsvQuote(r.row_id),
                       CsvQuote(r.source_id), CsvQuote(r.model), r.gpus, CsvQuote(r.skipped ? "" : r.config.Summary()),
                       Cell(r.measured_step_time_s), Bool(!r.measured_step_time_s, r.step_time_derived),
                       Cell(r.predicted_step_time_s), Cell(r.step_time_error), Bytes(r.measured_peak_memory_bytes),
                       Bytes(r.predicted_peak_memory_bytes), CsvQuote(r.outcome), Bool(r.skipped, r.predicted_fits),
                       Bool(r.skipped, r.predicted_at_risk), r.skipped ? "" : fmt::format("{}", r.predicted_mfu),
                       r.skipped ? "true" : "false", CsvQuote(r.skip_reason), CsvQuote(r.fitted_constant),
                       Bytes(r.predicted_reserved_bytes), Bool(!r.measured_peak_memory_bytes, r.memory_is_reserved),
                       CsvQuote(r.log), r.low_confidence ? "true" : "false",
                       r.skipped ? "" : fmt::format("{}", r.predicted_mfu_causal));
  }
  return csv;
}

namespace {
/// `n` of `of` rows as a fraction, or null when there are no such rows.
Json Fraction(std::int64_t n, std::int64_t of) {
  return of > 0 ? Json(static_cast<double>(n) / static_cast<double>(of)) : Json(nullptr);
}

/// One row of ValidationJson: what it ran and measured, or why it was skipped.
Json ValidationRowJson(const ValidationRow& r) {
  auto opt = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
  // A flag about a measurement the row does not have is null (the CSV's empty cell).
  auto flag = [](bool measured, bool v) { return measured ? Json(v) : Json(nullptr); };
  Json x = {{"row_id", r.row_id}, {"source_id", r.source_id}, {"model", r.model}, {"gpus", r.gpus},
            {"skipped", r.skipped}};
  if (r.skipped) {
    x["skip_reason"] = r.skip_reason;
    // What was measured stays (a logged run the simulator cannot run still measured its step);
    // the predictions are null.
    x["measured_step_time_s"] = opt(r.measured_step_time_s);
    x["measured_step_time_derived"] = flag(r.measured_step_time_s.has_value(), r.step_time_derived);
    x["measured_peak_memory_bytes"] = opt(r.measured_peak_memory_bytes);
    x["measured_memory_is_reserved"] = flag(r.measured_peak_memory_bytes.has_value(), r.memory_is_reserved);
    x["outcome"] = r.outcome;
    for (const char* k : {"predicted_step_time_s", "step_time_error", "predicted_peak_memory_bytes",
                          "predicted_reserved_memory_bytes", "predicted_fits", "predicted_memory_at_risk",
                          "predicted_mfu", "predicted_mfu_causal"}) {
      x[k] = nullptr;
    }
    if (!r.log.empty()) {
      x["log"] = r.log;
      x["measured_reserved_bytes"] = opt(r.measured_reserved_bytes);
    }
  } else {
    x["config"] = r.config.Summary();
    x["predicted_step_time_s"] = opt(r.predicted_step_time_s);
    x["measured_step_time_s"] = opt(r.measured_step_time_s);
    x["measured_step_time_derived"] = flag(r.measured_step_time_s.has_value(), r.step_time_derived);
    x["step_time_error"] = opt(r.step_time_error);
    x["predicted_peak_memory_bytes"] = opt(r.predicted_peak_memory_bytes);
    x["measured_peak_memory_bytes"] = opt(r.measured_peak_memory_bytes);
    x["predicted_reserved_memory_bytes"] = opt(r.predicted_reserved_bytes);
    x["measured_memory_is_reserved"] = flag(r.measured_peak_memory_bytes.has_value(), r.memory_is_reserved);
    x["predicted_fits"] = r.predicted_fits;
    x["predicted_memory_at_risk"] = r.predicted_at_risk;
    x["outcome"] = r.outcome;
    x["predicted_mfu"] = r.predicted_mfu;
    x["predicted_mfu_causal"] = r.predicted_mfu_causal;
    x["flops_convention"] = r.flops_convention_causal ? "causal" : "full";
    x["assumptions"] = r.assumptions;
    x["low_confidence"] = r.low_confidence;
    if (!r.log.empty()) {
      x["log"] = r.log;
      x["measured_reserved_bytes"] = opt(r.measured_reserved_bytes);
    }
  }
  x["fitted_constant"] = r.fitted_constant.empty() ? Json(nullptr) : Json(r.fitted_constant);
  return x;
}

/// ValidationJson's summary: errors over the timed rows (all, held out, fitted, without the
/// low-confidence ones), rank correlations, memory and out-of-memory outcomes.
Json ValidationSummaryJson(const ValidationSummary& s) {
  // An error over no rows is null, not a perfect score.
  const auto over = [](double v, auto rows) { return rows > 0 ? Json(v) : Json(nullptr); };
  Json j = {{"step_time_mape", over(s.step_time_mape, s.timed)},
            {"step_time_max_abs_error", over(s.step_time_max_abs_error, s.timed)},
            {"within_5pct", over(s.within_5pct, s.timed)},
            {"within_10pct", over(s.within_10pct, s.timed)},
            {"timed_rows", s.timed},
            {"step_time_mape_held_out", over(s.held_out_mape, s.held_out_timed)},
            {"step_time_max_abs_error_held_out", over(s.held_out_max_abs_error, s.held_out_timed)},
            {"held_out_rows", s.held_out_timed},
            {"step_time_mape_fitted", over(s.fitted_mape, s.fitted_timed)},
            {"fitted_rows", s.fitted_timed},
            {"kendall_tau", s.kendall_pairs > 0 ? Json(s.kendall_tau) : Json(nullptr)},
            {"kendall_pairs", s.kendall_pairs},
            {"memory_mape", over(s.memory_mape, s.memory_points)},
            {"memory_points", s.memory_points},
            {"oom_rows", s.oom_rows},
            // Fractions of no rows are null, not a perfect or a zero score.
            {"oom_rows_predicted_oom", Fraction(s.oom_rows_predicted_oom, s.oom_rows)},
            {"ok_rows", s.ok_rows},
            {"ok_rows_predicted_fit", Fraction(s.ok_rows_predicted_fit, s.ok_rows)},
            {"oom_rows_at_risk", Fraction(s.oom_rows_at_risk, s.oom_rows)},
            {"ok_rows_at_risk", Fraction(s.ok_rows_at_risk, s.ok_rows)},
            {"rows", s.rows},
            {"simulated", s.simulated},
            {"skipped", s.skipped}};
  for (const auto& [src, v] : s.mape_by_source) j["mape_by_source"][src] = {{"mape", v.first}, {"rows", v.second}};
  for (const auto& [src, v] : s.tflops_tau_by_source) {
    j["tflops_kendall_tau_by_source"][src] = {{"tau", v.first}, {"pairs", v.second}};
  }
  for (const auto& [g, v] : s.kendall_by_group) j["kendall_tau_by_group"][g] = {{"tau", v.first}, {"pairs", v.second}};
  j["low_confidence_rows"] = s.low_confidence_rows;
  j["step_time_mape_without_low_confidence"] = over(s.confident_mape, s.confident_timed);
  j["step_time_max_abs_error_without_low_confidence"] = over(s.confident_max_abs_error, s.confident_timed);
  j["step_time_mape_held_out_without_low_confidence"] = over(s.confident_held_out_mape, s.confident_held_out_timed);
  j["rows_without_low_confidence"] = s.confident_timed;
  j["kendall_tau_without_low_confidence"] =
      s.confident_kendall_pairs > 0 ? Json(s.confident_kendall_tau) : Json(nullptr);
  j["kendall_pairs_without_low_confidence"] = s.confident_kendall_pairs;
  return j;
}

}  // namespace

Json ValidationJson(const ValidationReport& rep, const std::string& runs) {
  Json j;
  j["runs"] = runs;
  if (!rep.logs.empty()) j["logs"] = rep.logs;
  j["rows"] = Json::array();
  for (const auto& r : rep.rows) j["rows"].push_back(ValidationRowJson(r));
  j["memory_points"] = Json::array();
  for (const auto& p : rep.memory_points) {
    j["memory_points"].push_back({{"model", p.model}, {"tp", p.tp}, {"pp", p.pp}, {"assumption", p.assumption},
                                  {"quantity", p.quantity}, {"setting", p.setting},
                                  {"published_GiB", p.published_GiB}, {"predicted_GiB", p.predicted_GiB},
                                  {"error", p.error}});
  }
  j["summary"] = ValidationSummaryJson(rep.summary);
  return j;
}

namespace {

/// Every switch the row set, as simulate --json names them, wrapped at 100 columns.
void WriteConfigurationLine(std::ostream& out, const Json& cfg) {
  std::string line = "  configuration:";
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string kv = " " + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
    if (line.size() + kv.size() > 100) {
      out << line << "\n";
      line = "   ";
    }
    line += kv;
  }
  out << line << "\n";
}

/// The --attention-kernel that makes simulate attend as the row did: the kernel the row's
/// profile switched to, or fa3 where simulate would switch a PyTorch FSDP run on Hopper to FA2
/// (WithPyTorchAttention) and the row kept the built-in FA3 (Transformer Engine's attention).
std::string AttentionKernelFlag(const HardwareProfile& p, const ParallelConfig& c, const Cluster& cl) {
  if (p.attention_kernel != "default") return " --attention-kernel " + p.attention_kernel;
  const bool simulate_switches = WithPyTorchAttention(p, cl.gpu.arch).attention_kernel != p.attention_kernel;
  return c.optimizer_impl == OptimizerImpl::kTorchFsdp && simulate_switches ? " --attention-kernel fa3" : "";
}

}  // namespace

void WriteExplainedRow(std::ostream& out, const ValidationRow& r, const ExplainedRow& e, const std::string& runs,
                       const ExplainCommand& cmd) {
  out << fmt::format("Row {} ({}) of {}: {} on {} GPUs, {}\n", r.row_id, r.source_id, runs, r.model, r.gpus,
                     r.gpu_type);
  out << fmt::format("  measured step {}{}  predicted {}  error {}\n", FormatOptional(r.measured_step_time_s, "{:.4g} s"),
                     r.step_time_derived ? " (derived from the reported throughput)" : "",
                     FormatOptional(r.predicted_step_time_s, "{:.4g} s"),
                     FormatOptional(r.step_time_error, "{:+.1f}%", 100));
  out << fmt::format("  measured peak memory {}  outcome {}\n",
                     FormatOptional(r.measured_peak_memory_bytes, "{:.1f} GiB", 1 / 1073741824.0), r.outcome);
  out << (r.fitted_constant.empty() ? std::string("  held out: no built-in constant was fitted on this run\n")
                                    : "  [fit] " + r.fitted_constant + "\n");
  for (const std::string& a : r.assumptions) out << "  assumed " << a << "\n";
  out << "\n";
  WriteConfigurationLine(out, ResultToJson(e.result, e.model, r.config, e.cluster, r.gpus)["config"]);
  out << fmt::format("\n  the same from simulate{}:\n    shardcast simulate --model {} --cluster {} {}\n",
                     cmd.model_written ? "" : " (MODEL.json: add --write-model MODEL.json to write the row's model)",
                     cmd.model_file, e.cluster.name,
                     cmd.flags + AttentionKernelFlag(e.profile, r.config, e.cluster));
  for (const auto& u : cmd.unexpressed) out << "    (not reproduced: " << u << ")\n";
  out << "\n";
  WriteSimulation(out, e.result, e.model, r.config, e.cluster, r.gpus, e.profile);
  WriteOps(out, e.model, r.config, e.cluster, e.profile);
}

namespace {

// What the rows are and how to read the table.
void WriteValidationHeader(std::ostream& out, const ValidationReport& rep, const std::string& runs) {
  if (rep.logs.empty()) {
    // The project's CSVs (published_runs*.csv) are published runs; a --runs file of one's own is not.
    const bool published = std::filesystem::path(runs).filename().string().rfind("published_runs", 0) == 0;
    out << (published ? "Published training runs: " : "Your runs: ") << runs << "\n";
    out << "error = predicted / measured - 1; memory is the peak over pipeline stages (r: a measured nvidia-smi or\n"
           "reserved peak against the predicted reserved figure); * measured step time derived\n"
           "from the source's reported throughput (TFLOP/s or tokens/s), not a reported iteration time; [fit] a built-in\n"
           "constant was fitted on the row (the summary gives the held-out rows apart); [low confidence] a row its\n"
           "source contradicts (the summary gives the MAPE without them)\n\n";
  } else {
    out << "Training logs (MLM: Megatron-LM, TT: torchtitan):\n";
    for (std::size_t i = 0; i < rep.logs.size(); ++i) out << fmt::format("  {:>3}  {}\n", i + 1, rep.logs[i]);
    out << "error = predicted / measured - 1; measured step: the mean of the logged steps after the first; * derived\n"
           "from the log's tokens per second; memory: PyTorch's max allocated against the predicted peak over stages\n"
           "(r: max reserved, where the log gives no allocated peak, against the predicted reserved figure)\n\n";
  }
}

// One line per row: measured, predicted and error of step time and memory, and the outcome.
void WriteValidationRows(std::ostream& out, const ValidationReport& rep) {
  // The configuration column is as wide as its longest text, so no row shifts the columns after it.
  std::size_t config_width = 32;
  for (const auto& r : rep.rows)
    if (!r.skipped) config_width = std::max(config_width, r.config.Short().size());
  out << fmt::format("{:>4} {:<4} {:<22} {:>5}  {:<{}} {:>9} {:>9} {:>7}  {:>9} {:>9} {:>7}  {}\n", "row", "src",
                           "model", "GPUs", "configuration", config_width, "measured", "predicted", "error", "mem GiB",
                           "predicted", "error", "outcome / predicted");
  for (const auto& r : rep.rows) {
    if (r.skipped) {
      out << fmt::format("{:>4} {:<4} {:<22} {:>5}  skipped: {}\n", r.row_id, r.source_id, r.model.substr(0, 22),
                               r.gpus, r.skip_reason);
      continue;
    }
    out << fmt::format("{:>4} {:<4} {:<22} {:>5}  {:<{}} {:>9} {:>9} {:>7}  {:>9} {:>9} {:>7}  {} / {}\n", r.row_id,
                             r.source_id, r.model.substr(0, 22), r.gpus, r.config.Short(), config_width,
                             Opt(r.measured_step_time_s, r.step_time_derived ? "{:.2f} s*" : "{:.2f} s"),
                             Opt(r.predicted_step_time_s, "{:.2f} s"),
                             Opt(r.step_time_error, "{:+.1f}%", 100), Opt(r.measured_peak_memory_bytes, "{:.1f}", 1 / 1073741824.0),
                             Opt(r.memory_is_reserved ? r.predicted_reserved_bytes : r.predicted_peak_memory_bytes,
                                 r.memory_is_reserved ? "{:.1f}r" : "{:.1f}", 1 / 1073741824.0),
                             Opt(r.memory_error, "{:+.1f}%", 100), r.outcome,
                             (!r.predicted_fits ? "does not fit" : r.predicted_at_risk ? "fits, at risk" : "fits") +
                                 std::string(r.fitted_constant.empty() ? "" : "  [fit]") +
                                 std::string(r.low_confidence ? "  [low confidence]" : ""));
  }
}

// Korthikanti's memory figure points.
void WriteMemoryPoints(std::ostream& out, const ValidationReport& rep) {
  if (!rep.memory_points.empty()) {
    // The project's file holds Korthikanti et al.'s published figures; another is the user's own.
    const bool published = rep.memory_csv.empty() ||
                           std::filesystem::path(rep.memory_csv).filename().string() == "published_memory.csv";
    out << (published ? "\nMemory points (first pipeline stage, Korthikanti et al. 2022 figures; GiB, fractions unitless)\n"
                      : fmt::format("\nMemory points of {} (first pipeline stage; GiB, fractions unitless)\n",
                                    rep.memory_csv));
    out << fmt::format("  {:<14} {:<30} {:<26} {:>10} {:>10} {:>7}\n", "model", "quantity", "setting",
                       published ? "published" : "given", "predicted", "error");
    std::vector<std::string> notes;
    for (const auto& p : rep.memory_points) {
      out << fmt::format("  {:<14} {:<30} {:<26} {:>10.4g} {:>10.4g} {:>+6.1f}%{}\n", p.model, p.quantity, p.setting,
                         p.published_GiB, p.predicted_GiB, 100 * p.error,
                         p.assumption.empty() ? "" : fmt::format("  [{}]", notes.size() + 1));
      if (!p.assumption.empty()) notes.push_back(fmt::format("  [{}] {} tp {} pp {}: {}", notes.size() + 1, p.model, p.tp, p.pp, p.assumption));
    }
    for (const auto& n : notes) out << n << "\n";
  }
}

// MAPE overall, held out, fitted and without low-confidence rows; per source; assumptions or
// notes; rank correlation; memory and out-of-memory counts.
void WriteValidationSummary(std::ostream& out, const ValidationReport& rep) {
  const ValidationSummary& s = rep.summary;
  out << "\nSummary\n";
  out << fmt::format("  rows {} (simulated {}, skipped {}), with a measured step time {}\n", s.rows, s.simulated,
                           s.skipped, s.timed);
  if (s.timed == 0) {
    out << "  step time: no simulated row has a measured step time\n";
  } else {
    out << fmt::format("  step time: MAPE {:.1f}%, max |error| {:.1f}%, within 5% {:.0f}%, within 10% {:.0f}%\n",
                       100 * s.step_time_mape, 100 * s.step_time_max_abs_error, 100 * s.within_5pct, 100 * s.within_10pct);
  }
  if (s.fitted_timed > 0) {
    out << fmt::format("    held out ({} rows, no built-in constant fitted on their runs): MAPE {:.1f}%, max |error| {:.1f}%\n",
                             s.held_out_timed, 100 * s.held_out_mape, 100 * s.held_out_max_abs_error);
    out << fmt::format("    fitted ({} rows, [fit]): MAPE {:.1f}%\n", s.fitted_timed, 100 * s.fitted_mape);
    for (const ValidationFit& f : FitsOnValidationRows()) {
      std::vector<std::string> ids;
      for (const auto& r : rep.rows) {
        if (r.fitted_constant == f.constant) ids.push_back(r.row_id);
      }
      if (!ids.empty()) out << fmt::format("      rows {}: {}\n", Join(ids, ", "), f.constant);
    }
  }
  if (!s.low_confidence_rows.empty()) {
    out << fmt::format("    without the {} low-confidence rows ({}; the CSV's notes say why): MAPE {:.1f}%, max |error| "
                       "{:.1f}% over {} rows; held out {:.1f}% over {}\n",
                       s.low_confidence_rows.size(), Join(s.low_confidence_rows, ", "), 100 * s.confident_mape,
                       100 * s.confident_max_abs_error, s.confident_timed, 100 * s.confident_held_out_mape,
                       s.confident_held_out_timed);
  }
  for (const auto& [src, v] : s.mape_by_source) {
    const auto tau = s.tflops_tau_by_source.find(src);
    out << fmt::format("    source {:<4} MAPE {:.1f}% over {} rows{}\n", src, 100 * v.first, v.second,
                             tau == s.tflops_tau_by_source.end()
                                 ? std::string()
                                 : fmt::format("; TFLOP/s series Kendall tau {:.2f} ({} pairs)", tau->second.first,
                                               tau->second.second));
  }
  std::map<std::string, std::vector<std::string>> assumed;  // assumption -> rows
  for (const auto& r : rep.rows) {
    for (const auto& x : r.assumptions) assumed[x].push_back(r.row_id);
  }
  if (rep.logs.empty()) {
    for (const auto& [x, ids] : assumed) {
      out << fmt::format("  assumed {} for row{} {}\n", x, ids.size() == 1 ? "" : "s", Join(ids, ", "));
    }
  } else {
    // How each log was read, row by row.
    for (const auto& r : rep.rows) {
      for (const auto& x : r.assumptions) out << fmt::format("  row {}: {}\n", r.row_id, x);
    }
  }
  if (s.kendall_pairs == 0) {
    out << "  ranking: no two runs with the same model, GPU type and count, so no Kendall tau\n";
  } else {
    out << fmt::format("  ranking: Kendall tau {:.2f} over {} pairs of runs with the same model, GPU type and count\n",
                       s.kendall_tau, s.kendall_pairs);
  }
  if (!s.low_confidence_rows.empty()) {
    out << (s.confident_kendall_pairs == 0
                ? std::string("    without the low-confidence rows: no pair left to rank\n")
                : fmt::format("    without the low-confidence rows: tau {:.2f} over {} pairs\n",
                              s.confident_kendall_tau, s.confident_kendall_pairs));
  }
  std::size_t group_width = 32;
  for (const auto& kv : s.kendall_by_group) group_width = std::max(group_width, kv.first.size());
  for (const auto& [g, v] : s.kendall_by_group) {
    out << fmt::format("    {:<{}} tau {:+.2f} over {} pairs\n", g, group_width, v.first, v.second);
  }
  if (s.memory_points > 0) {
    out << fmt::format("  memory: MAPE {:.1f}% over {} points\n", 100 * s.memory_mape, s.memory_points);
  } else {
    out << "  memory: no points compared\n";
  }
  out << fmt::format("  out of memory: {} of {} measured OOM rows predicted not to fit; {} of {} ok rows predicted to fit\n",
                           s.oom_rows_predicted_oom, s.oom_rows, s.ok_rows_predicted_fit, s.ok_rows);
  out << fmt::format("  at risk (fit only by releasing the caching allocator's cache, in its replay): {} of {} OOM rows,\n"
                     "    {} of {} ok rows\n",
                     s.oom_rows_at_risk, s.oom_rows, s.ok_rows_at_risk, s.ok_rows);
}

}  // namespace

void WriteValidationText(std::ostream& out, const ValidationReport& rep, const std::string& runs) {
  WriteValidationHeader(out, rep, runs);
  WriteValidationRows(out, rep);
  WriteMemoryPoints(out, rep);
  WriteValidationSummary(out, rep);
}

}  // namespace shardcast
