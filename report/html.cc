#include "report/html.h"

#include <fmt/format.h>

#include "simulator/engine.h"

namespace shardcast {

namespace detail {
extern const char kReportJs[];
extern const char kReportCss[];
}  // namespace detail

namespace {

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

/// JSON text safe inside a script element: "</" cannot end it.
std::string ScriptSafe(const std::string& json) {
  std::string o;
  o.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    o += json[i];
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') o += '\\';
  }
  return o;
}

}  // namespace

std::string HtmlReport(const std::string& title, const std::string& subtitle, const Json& data) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"generator\" content=\"shardcast\">\n<title>{0}</title>\n<style>\n{2}</style>\n</head>\n<body>\n"
      "<h1>{0}</h1>\n<p class=\"sub\">{1}</p>\n<div id=\"report\"></div>\n<div id=\"tip\"></div>\n"
      "<script type=\"application/json\" id=\"shardcast-data\">{3}</script>\n<script>\n{4}</script>\n</body>\n</html>\n",
      Escape(title), Escape(subtitle), detail::kReportCss, ScriptSafe(data.dump()), detail::kReportJs);
}

Json TimelineJson(const SimulationResult& r) {
  Json t;
  t["streams"] = Json::array();
  for (int s = 0; s < NumSimulationStreams(); ++s) t["streams"].push_back(StreamName(s));
  // Kinds in TaskType order, from the first to the last enumerator (kJoin is not drawn).
  const TaskType kinds[] = {TaskType::kForward,    TaskType::kBackward,      TaskType::kWeight,
                            TaskType::kPpSend,     TaskType::kDpReduce,      TaskType::kParamGather,
                            TaskType::kEmbeddingSync, TaskType::kOptimizer};
  t["kinds"] = Json::array();
  for (TaskType k : kinds) t["kinds"].push_back(ToString(k));
  t["lanes"] = Json::array();
  t["ops"] = Json::array();
  const auto& nodes = r.graph.nodes();
  if (nodes.empty() || r.timeline.start.size() < nodes.size()) return t;
  for (std::size_t d = 0; d < r.device_stage.size(); ++d) {
    t["lanes"].push_back({{"device", d}, {"stage", r.device_stage[d]}});
  }
  for (std::size_t id = 0; id < nodes.size(); ++id) {
    const TaskNode& n = nodes[id];
    if (n.type == TaskType::kJoin) continue;
    int kind = 0;
    while (kind < 8 && kinds[kind] != n.type) ++kind;
    t["ops"].push_back({n.device, n.stream, kind, r.timeline.start[id], r.timeline.end[id], n.microbatch, n.chunk});
  }
  return t;
}

}  // namespace shardcast
