#pragma once
/// \file validate_report.h
/// `validate`'s report rendered: the per-row CSV, the JSON document and the text table with its
/// summary (MAPE overall, held out and by source, ranking, memory, out-of-memory).

#include <iosfwd>
#include <optional>
#include <string>

#include "common/json_reader.h"
#include "planner/validate.h"

namespace shardcast {

/// `v` formatted with `fmtstr` after multiplying by `scale`, or "-" when absent.
std::string FormatOptional(const std::optional<double>& v, const char* fmtstr, double scale = 1.0);
/// The rows as CSV, the JSON row's fields one column each (a skipped row's predictions empty).
std::string ValidationCsv(const ValidationReport& rep);
/// The --json document: runs (the CSV read), rows, memory points and the summary.
Json ValidationJson(const ValidationReport& rep, const std::string& runs);
/// The text table of every row, the memory points and the summary.
void WriteValidationText(std::ostream& out, const ValidationReport& rep, const std::string& runs);

}  // namespace shardcast
