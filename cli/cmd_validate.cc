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
  // Users' own runs (--log).
  std::vector<std::string> logs;
  std::string cluster, model, profile;
  std::int64_t gpus = 0;
  bool runs_given = false, memory_given = false, gpus_given = false;
};

/// The logs' runs validated on the cluster and profile the flags name.
ValidationReport ValidateLogs(const ValidateArgs& a) {
  if (a.runs_given || a.memory_given) {
    throw InputError(std::string("command line: ") + (a.runs_given ? "--runs" : "--memory") +
                     ": not combined with --log (validate either published runs or your own logs)");
  }
  if (a.cluster.empty() && a.profile.empty()) {
    throw InputError("command line: --cluster: missing, expected the cluster the logged runs ran on (a preset name or "
                     "JSON path; or a measured --profile FILE, which names its machine)");
  }
  std::optional<HardwareProfile> loaded;
  if (!a.profile.empty()) loaded = LoadProfile(a.profile);
  const Cluster cl = a.cluster.empty() ? ClusterFromProfile(*loaded, a.profile) : LoadCluster(a.cluster, "--cluster");
  const HardwareProfile prof = loaded ? *loaded : DefaultProfile(cl);
  if (loaded && !a.cluster.empty()) WarnIfProfileIsAnotherMachine(*loaded, a.profile, cl, cl.num_gpus.value_or(cl.gpus_per_node));
  if (a.gpus_given && a.gpus < 1) {
    throw InputError(fmt::format("command line: --gpus: got \"{}\", expected a positive integer", a.gpus));
  }
  LogDefaults d;
  if (!a.model.empty()) d.model = LoadModel(a.model, "--model");
  if (a.gpus > 0) d.gpus = a.gpus;
  // A log given twice would count its run twice in the MAPE and pair it with itself in the ranking.
  for (std::size_t i = 0; i < a.logs.size(); ++i) {
    for (std::size_t k = 0; k < i; ++k) {
      std::error_code ec;
      if (a.logs[i] == a.logs[k] || (std::filesystem::equivalent(a.logs[i], a.logs[k], ec) && !ec)) {
        throw InputError(fmt::format("command line: --log: got {} twice (as {} and {}), expected each run once",
                                     a.logs[i], a.logs[k], a.logs[i]));
      }
    }
  }
  // A copy of a log under another name is the same run too: two real runs' logs differ (their
  // timestamps, their throughput).
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < a.logs.size(); ++i) {
    texts.push_back(ReadTextFile(a.logs[i]));
    for (std::size_t k = 0; k < i; ++k) {
      if (texts[i] == texts[k]) {
        throw InputError(fmt::format("command line: --log: {} and {} hold the same text, expected each run once (a "
                                     "copy of one log)", a.logs[k], a.logs[i]));
      }
    }
  }
  std::vector<LoggedRun> runs;
  for (std::size_t i = 0; i < a.logs.size(); ++i) runs.push_back(ParseTrainingLog(texts[i], a.logs[i], d));
  for (LoggedRun& r : runs) {
    if (r.config.flash_attention && !cl.gpu.HasFlashAttention()) {
      r.config.flash_attention = false;
      r.notes.push_back(fmt::format("attention simulated unfused: FlashAttention does not run on the {} ({})",
                                    cl.gpu.display_name, cl.gpu.arch));
    }
  }
  return ValidateLoggedRuns(runs, cl, prof, a.explain);
}

void RunValidate(const ValidateArgs& a) {
  CheckCsvOption(a.csv, a.json);
  std::vector<std::string> inputs = a.logs;
  if (a.logs.empty()) inputs.insert(inputs.end(), {a.runs, a.memory});
  if (!a.model.empty()) inputs.push_back(a.model);
  if (!a.profile.empty()) inputs.push_back(a.profile);
  if (!a.cluster.empty()) inputs.push_back(a.cluster);  // a cluster JSON file (a preset name matches no file)
  CheckOutputFiles({{"--csv", a.csv}, {"--html", a.html}, {"--write-model", a.write_model}}, inputs);
  if (!a.explain.empty() && (a.json || !a.csv.empty())) {
    throw InputError(std::string("command line: --explain: prints one row as text; not combined with ") +
                     (a.json ? "--json" : "--csv") + " (run them separately)");
  }
  if (!a.write_model.empty() && a.explain.empty()) {
    throw InputError("command line: --write-model: writes the model of the row named by --explain; got no --explain");
  }
  // The defaults are the source tree's validation/ as built: name the way out if it moved.
  if (a.logs.empty() && (!a.cluster.empty() || !a.model.empty() || !a.profile.empty() || a.gpus_given)) {
    throw InputError("command line: --cluster, --profile, --model and --gpus go with --log FILE...; got no --log");
  }
  for (const auto* path : {&a.runs, &a.memory}) {
    if (!a.logs.empty()) break;
    const bool is_default = *path == std::string(SHARDCAST_DATA_DIR) + (path == &a.runs ? "/published_runs.csv"
                                                                                          : "/published_memory.csv");
    if (is_default && !(path == &a.memory && a.no_memory) && !std::filesystem::exists(*path)) {
      throw InputError(*path + ": not found; it is the default path of the source tree this binary was built from, "
                       "expected " + (path == &a.runs ? "--runs" : "--memory") + " FILE (or a rebuild)");
    }
  }
  const ValidationReport rep = a.logs.empty() ? RunValidation(a.runs, a.no_memory ? "" : a.memory, a.explain) : ValidateLogs(a);
  const std::string source = a.logs.empty() ? a.runs : Join(a.logs, ", ");
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
      WriteExplainedRow(std::cout, r, e, a.logs.empty() ? a.runs : rep.logs.at(std::stoul(r.row_id) - 1), cmd);
    }
    return;
  }
  const ValidationSummary& s = rep.summary;
  if (!a.csv.empty() && a.csv != "-") WriteCsvOption(a.csv, ValidationCsv(rep));
  if (a.json || !a.html.empty()) {
    const Json j = ValidationJson(rep, source);
    if (!a.html.empty()) {
      Json data = WithIntegerBytes(j);  // the page holds what --json prints
      data["kind"] = "validate";
      WriteHtmlReport(a.html, a.logs.empty() ? "shardcast validate: predicted vs published training runs"
                                             : "shardcast validate: predicted vs your training runs",
                      s.timed == 0 ? fmt::format("{}: {} rows simulated, none with a measured step time", source, s.simulated)
                                   : fmt::format("{}: {} rows simulated, step-time MAPE {:.1f}%", source, s.simulated,
                                                 100 * s.step_time_mape),
                      data);
    }
    if (a.json) {
      std::cout << WithIntegerBytes(j).dump(2) << "\n";
      return;
    }
  }
  if (a.csv == "-") {  // after the HTML page, which --csv - does not replace
    WriteCsvOption(a.csv, ValidationCsv(rep));
    return;
  }
  WriteValidationText(std::cout, rep, source);
}

}  // namespace

void RegisterValidate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Compare predictions with published training runs, or with your own: step time, peak memory, out-of-memory.\n"
      "Example: shardcast validate   (uses the project's validation/published_runs.csv)\n"
      "Example: shardcast validate --log train.log --cluster dgx-h100   (a Megatron-LM or torchtitan log; docs/validate.md)");
  cmd->add_option("--runs", a->runs, "published runs CSV (default: the project's copy; your own runs in its columns, "
                                     "validation/README.md)")
      ->each([a](const std::string&) { a->runs_given = true; });
  cmd->add_option("--memory", a->memory, "published memory points CSV (default: the project's copy)")
      ->each([a](const std::string&) { a->memory_given = true; });
  cmd->add_option("--log", a->logs,
                  "your own runs: Megatron-LM or torchtitan training logs (FILE...; with --cluster; docs/validate.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", a->cluster, "with --log: the cluster the runs ran on (preset name or JSON path)");
  cmd->add_option("--profile", a->profile, "with --log: hardware profile JSON (default: built-in for the cluster's GPU)");
  cmd->add_option("--model", a->model, "with --log: the model (preset or JSON), instead of the one the log describes");
  cmd->add_option("--gpus", a->gpus, "with --log: GPUs of a torchtitan run whose data_parallel_shard_degree is -1")
      ->each([a](const std::string&) { a->gpus_given = true; });
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
