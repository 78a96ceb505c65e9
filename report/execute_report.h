#pragma once
/// \file execute_report.h
/// `execute`'s result rendered: predicted vs measured (step time, bubble, peak memory per stage)
/// and the ops with the largest errors, as text and as the --json document.

#include <iosfwd>

#include "common/json_reader.h"
#include "executor/executor.h"

namespace shardcast {

/// The --json document: predicted (simulate's JSON of the configuration run, r.config),
/// measured (step_time_s, step_times_s, bubble_fraction, peak_memory_bytes per stage), ops
/// (name, count, predicted_s, measured_s, wait) and executed_rank0 (rank 0's op sequence).
Json ExecuteJson(const ExecuteReport& r, const Model& m, const Cluster& cl, int ranks);
/// The text report: predicted vs measured with the error in percent, the measured step times,
/// the ten ops with the largest absolute error, and the waits listed apart.
void WriteExecuteReport(std::ostream& out, const ExecuteReport& r, const Model& m, int ranks);

}  // namespace shardcast
