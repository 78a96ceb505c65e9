#include <cmath>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/config_args.h"
#include "cli/plan_common.h"
#include "report/text.h"
#include "report/validate_report.h"
#include "common/csv.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "common/file_util.h"
#include "common/text.h"
#include "models/loader.h"
#include "planner/validate.h"
#include "simulator/simulate.h"

namespace shardcast::cli {
namespace {

struct ValidateArgs {
  std::string runs = std::string(SHARDCAST_DATA_DIR) + "/published_runs.csv";
  std::string memory = std::string(SHARDCAST_DATA_DIR) + "/published_memory.csv";
  std::string csv, explain, write_model, html;
  bool json = false, no_memory = false;
};

void RunValidate(const ValidateArgs& a) {
  CheckCsvOption(a.csv, a.json);
  if (!a.explain.empty() && (a.json || !a.csv.empty())) {
    throw InputError(std::string("command line: --explain: prints one row as text; not combined with ") +
                     (a.json ? "--json" : "--csv") + " (run them separately)");
  }
  if (!a.write_model.empty() && a.explain.empty()) {
    throw InputError("command line: --write-model: writes the model of the row named by --explain; got no --explain");
  }
  // The defaults are the source tree's validation/ as built: name the way out if it moved.
  for (const auto* path : {&a.runs, &a.memory}) {
    const bool is_default = *path == std::string(SHARDCAST_DATA_DIR) + (path == &a.runs ? "/published_runs.csv"
                                                                                          : "/published_memory.csv");
    if (is_default && !(path == &a.memory && a.no_memory) && !std::filesystem::exists(*path)) {
      throw InputError(*path + ": not found; it is the default path of the source tree this binary was built from, "
                       "expected " + (path == &a.runs ? "--runs" : "--memory") + " FILE (or a rebuild)");
    }
  }
  const ValidationReport rep = RunValidation(a.runs, a.no_memory ? "" : a.memory, a.explain);
  if (rep.explained) {
    // One row in full: what it was mapped to and simulate's report of it.
    const ExplainedRow& e = *rep.explained;
    for (const auto& r : rep.rows) {
      if (r.row_id != e.row_id) continue;
      // The same simulation from the command line: the row's model as a JSON file and the flags.
      ExplainCommand cmd;
      cmd.model_file = a.write_model.empty() ? "MODEL.json" : a.write_model;
      cmd.model_written = !a.write_model.empty();
      cmd.flags = SimulateFlags(r.config, e.model, r.gpus, &cmd.unexpressed);
      if (!a.write_model.empty()) WriteFileAtomic(a.write_model, ModelToJson(e.model).dump(2) + "\n");
      WriteExplainedRow(std::cout, r, e, a.runs, cmd);
    }
    return;
  }
  const ValidationSummary& s = rep.summary;
  if (!a.csv.empty()) {
    const std::string csv = ValidationCsv(rep);
    if (WriteCsvOption(a.csv, csv)) return;
  }
  if (a.json || !a.html.empty()) {
    const Json j = ValidationJson(rep, a.runs);
    if (!a.html.empty()) {
      Json data = j;
      data["kind"] = "validate";
      WriteHtmlReport(a.html, "shardcast validate: predicted vs published training runs",
                      fmt::format("{}: {} rows simulated, step-time MAPE {:.1f}%", a.runs, s.simulated,
                                  100 * s.step_time_mape),
                      data);
    }
    if (a.json) {
      std::cout << WithIntegerBytes(j).dump(2) << "\n";
      return;
    }
  }
  WriteValidationText(std::cout, rep, a.runs);
}

}  // namespace

void RegisterValidate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Compare predictions with published training runs: step time, peak memory, out-of-memory.\n"
      "Example: shardcast validate   (uses the project's validation/published_runs.csv)");
  cmd->add_option("--runs", a->runs, "published runs CSV (default: the project's copy)");
  cmd->add_option("--memory", a->memory, "published memory points CSV (default: the project's copy)");
  cmd->add_flag("--no-memory", a->no_memory, "skip the memory points");
  cmd->add_option("--csv", a->csv, "write the per-row table as CSV to FILE (the text is printed too), or with - print only the CSV")
      ->check(OutputFile(true));
  cmd->add_flag("--json", a->json, "print JSON");
  AddHtmlOption(cmd, &a->html);
  cmd->add_option("--explain", a->explain,
                  "print one row in full (by row_id): what it was mapped to and simulate's report of it");
  cmd->add_option("--write-model", a->write_model,
                  "with --explain: write the row's model as JSON (atomically) for the printed simulate command")
      ->check(OutputFile());
  cmd->callback([a] { RunValidate(*a); });
}

}  // namespace shardcast::cli
