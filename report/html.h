#pragma once
/// \file html.h
/// Self-contained HTML reports (`--html FILE` of simulate, plan, capacity and validate): one
/// file with the style sheet, the renderer script (report/report.js, plain SVG, no library) and
/// the data inline; it opens from disk in any browser and makes no network access
/// (docs/report.md). The data are the objects `--json` prints, with what the charts need beside.

#include <string>

#include "common/json_reader.h"
#include "simulator/simulate.h"

namespace shardcast {

/// The page: `<title>` and heading `title`, a line `subtitle`, and `data` (which must hold
/// "kind": simulate | plan | capacity | validate) in a script element of type application/json
/// ("</" written as "<\/" so the data cannot close it). Text is HTML-escaped.
std::string HtmlReport(const std::string& title, const std::string& subtitle, const Json& data);

/// The timeline of a simulation that kept its graph (SimulateOptions::keep_graph):
/// {"lanes": [{"device", "stage"}] (one per simulated device, by device), "streams": [names],
/// "kinds": [task kinds], "ops": [[lane, stream, kind, start_ns, end_ns, micro-batch, chunk]]}
/// (-1 where a task has no micro-batch or chunk). Empty lanes and ops without a graph.
Json TimelineJson(const SimulationResult& r);

}  // namespace shardcast
