#pragma once
/// \file validate_report.h
/// `validate`'s report rendered: the per-row CSV, the JSON document and the text table with its
/// summary (MAPE overall, held out and by source, ranking, memory, out-of-memory).

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "planner/validate.h"

namespace shardcast {

/// `v` formatted with `fmtstr` after multiplying by `scale`, or "-" when absent.
std::string FormatOptional(const std::optional<double>& v, const char* fmtstr, double scale = 1.0);
/// The rows as CSV, the JSON row's fields one column each (a skipped row's predictions empty).
std::string ValidationCsv(const ValidationReport& rep);
/// The --json document: runs (the CSV read), rows, memory points and the summary.
Json ValidationJson(const ValidationReport& rep, const std::string& runs);
/// How `validate --explain` reproduces the row with `simulate`: the flags (cli's SimulateFlags),
/// what they cannot express, and the model file (written by --write-model, or a placeholder).
struct ExplainCommand {
  std::string flags;
  std::vector<std::string> unexpressed;
  std::string model_file = "MODEL.json";
  bool model_written = false;
};
/// One row in full (validate --explain): the measured and predicted figures, whether a constant
/// was fitted on it, every switch of its configuration, the simulate command that reproduces it,
/// and simulate's text report and op table of it.
void WriteExplainedRow(std::ostream& out, const ValidationRow& r, const ExplainedRow& e, const std::string& runs,
                       const ExplainCommand& cmd);
/// The text table of every row, the memory points and the summary.
void WriteValidationText(std::ostream& out, const ValidationReport& rep, const std::string& runs);

}  // namespace shardcast
