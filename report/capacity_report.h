#pragma once
/// \file capacity_report.h
/// `capacity`'s results rendered: the JSON document, the text table with prices and profiles,
/// and the --solve search.

#include <iosfwd>
#include <vector>

#include "common/json_reader.h"
#include "planner/capacity.h"

namespace shardcast {

/// KnownBias(c) for JSON: the caveat, or null when none is known.
Json KnownBiasJson(const ParallelConfig& c);
/// The rows as JSON ("options"), and with --solve each cluster's search ("solve": found, gpus,
/// max_gpus, lower_bound_gpus, tried).
Json CapacityJson(const Model& m, const CapacityOptions& o, const std::vector<CapacityRow>& rows,
                  const std::vector<SolveResult>& solved);
/// The rows as the text table, with the failure model, prices and profiles used.
void WriteCapacityText(std::ostream& out, const Model& m, const CapacityOptions& o, const std::vector<CapacityRow>& rows);
/// Each cluster's smallest count meeting the deadline and the counts the search simulated.
void WriteSolve(std::ostream& out, const CapacityOptions& o, const std::vector<SolveResult>& solved);

}  // namespace shardcast
