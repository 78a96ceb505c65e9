#include "report/execute_report.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>

#include "common/text.h"
#include "simulator/simulate.h"

namespace shardcast {
namespace {

/// Up to ten ops of one kind: receives and data-parallel waits measure mostly blocking on other
/// ranks (the bubble row), so they are listed apart from the ops whose cost the model predicts.
void WriteOpTable(std::ostream& out, const ExecuteReport& r, bool waits, const char* title) {
  out << title;
  out << fmt::format("  {:<34} {:>6} {:>12} {:>12} {:>12}\n", "op", "count", "predicted", "measured", "error");
  std::size_t shown = 0;
  for (const auto& o : r.ops) {
    if (o.wait != waits || shown++ >= 10) continue;
    out << fmt::format("  {:<34} {:>6} {:>12} {:>12} {:>12}\n", o.name, o.count, FormatSeconds(o.predicted_s),
                       FormatSeconds(o.measured_s), FormatSeconds(o.predicted_s - o.measured_s));
  }
}

}  // namespace

namespace {

/// The predicted peak that a stage's measured peak compares with: the allocations alone, without
/// the framework's context and NCCL's buffers, which the allocator's high-water mark does not hold.
double ComparedPeakBytes(const StageResult& st) {
  return st.memory.peak_bytes - st.memory.framework_bytes - st.memory.comm_buffer_bytes;
}

}  // namespace

Json ExecuteJson(const ExecuteReport& r, const Model& m, const Cluster& cl, int ranks) {
  Json j;
  j["predicted"] = ResultToJson(r.predicted, m, r.config, cl, ranks);
  j["measured"] = {{"step_time_s", r.measured_step_time_s},
                   {"step_times_s", r.step_times_s},
                   {"bubble_fraction", r.measured_bubble_fraction},
                   {"peak_memory_bytes", r.measured_peak_memory_bytes}};
  // What the text's peak-memory rows compare, per stage (the predicted peak less the framework
  // overhead and communication buffers, as the measured high-water mark leaves them out).
  j["peak_memory_compared"] = Json::array();
  for (std::size_t s = 0; s < r.predicted.stages.size(); ++s) {
    const double meas = s < r.measured_peak_memory_bytes.size() ? r.measured_peak_memory_bytes[s] : 0;
    const double pred = ComparedPeakBytes(r.predicted.stages[s]);
    j["peak_memory_compared"].push_back({{"stage", s}, {"predicted_allocated_bytes", pred}, {"measured_bytes", meas},
                                         {"error", meas > 0 ? Json(pred / meas - 1) : Json()}});
  }
  j["ops"] = Json::array();
  for (const auto& o : r.ops) {
    j["ops"].push_back({{"name", o.name}, {"count", o.count}, {"predicted_s", o.predicted_s},
                        {"measured_s", o.measured_s}, {"wait", o.wait}});
  }
  j["executed_rank0"] = r.executed;
  j["attention"] = r.attention_note.empty() ? Json() : Json(r.attention_note);
  return j;
}

void WriteExecuteReport(std::ostream& out, const ExecuteReport& r, const Model& m, int ranks) {
  const auto& p = r.predicted;
  const ParallelConfig& c = r.config;
  out << fmt::format("{} on {} rank(s): {}\n", m.name, ranks, c.Summary());
  out << (c.dp * c.cp <= 1            ? "(no data-parallel gradient reduction: dp = 1)\n\n"
          : c.overlap_grad_reduce ? "(gradient buckets reduced on a worker thread, overlapping the backward pass)\n\n"
                                  : "(gradient reduction after the backward pass)\n\n");
  out << fmt::format("{:<24} {:>12} {:>12} {:>8}\n", "", "predicted", "measured", "error");
  out << fmt::format("{:<24} {:>12} {:>12} {:>+7.1f}%\n", "step time", FormatSeconds(p.step_time_s),
                     FormatSeconds(r.measured_step_time_s), 100 * (p.step_time_s / r.measured_step_time_s - 1));
  out << fmt::format("{:<24} {:>11.1f}% {:>11.1f}%\n", "bubble fraction", 100 * p.bubble_fraction,
                     100 * r.measured_bubble_fraction);
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    // The allocator's high-water mark holds neither the framework's context nor NCCL's buffers.
    const double meas = s < r.measured_peak_memory_bytes.size() ? r.measured_peak_memory_bytes[s] : 0;
    const double pred = ComparedPeakBytes(p.stages[s]);
    out << fmt::format("{:<24} {:>12} {:>12} {:>+7.1f}%\n", fmt::format("stage {} peak memory", s), FormatGiB(pred),
                       FormatGiB(meas), 100 * (pred / meas - 1));
  }
  out << "(peak memory: the predicted peak less the framework overhead and communication buffers, which the\n"
         " measured allocations leave out; --json's predicted.stages[].memory has the whole figure)\n";
  std::string times;
  for (double x : r.step_times_s) times += FormatSeconds(x) + " ";
  out << fmt::format("\nmeasured step times: {}\n", times);
  if (!r.attention_note.empty()) out << fmt::format("attention: {}\n", r.attention_note);
  WriteOpTable(out, r, false, "\nOps with the largest absolute error (one rank per stage, summed over the step):\n");
  if (std::any_of(r.ops.begin(), r.ops.end(), [](const OpError& o) { return o.wait; })) {
    WriteOpTable(out, r, true,
                 "\nWaits (measured time is mostly blocking on other ranks: the prediction counts a receive's\n"
                 "in the bubble and pipeline comm, a data-parallel wait's and the tied embedding's all-reduce's\n"
                 "in exposed data-parallel comm):\n");
  }
}

}  // namespace shardcast
