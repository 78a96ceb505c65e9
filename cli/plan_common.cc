#include "cli/plan_common.h"

#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"

namespace shardcast::cli {

Objective ParseObjective(const std::string& s) {
  if (s == "cost") return Objective::kCost;
  if (s == "energy") return Objective::kEnergy;
  return Objective::kThroughput;
}

namespace {
[[noreturn]] void Bad(const std::string& flag, const std::string& value, const std::string& expected) {
  throw InputError("command line: " + flag + ": got \"" + value + "\", expected " + expected);
}
}  // namespace

std::vector<Schedule> ParseSchedules(const std::string& list) {
  std::vector<Schedule> out;
  for (const auto& s : Split(list, ',')) {
    if (s == "1f1b") out.push_back(Schedule::k1F1B);
    else if (s == "interleaved") out.push_back(Schedule::kInterleaved);
    else if (s == "zb-h1") out.push_back(Schedule::kZbH1);
    else if (s == "gpipe") out.push_back(Schedule::kGpipe);
    else Bad("--schedules", s, "a comma list of 1f1b, interleaved, zb-h1, gpipe");
  }
  return out;
}

std::vector<Recompute> ParseRecomputes(const std::string& list) {
  std::vector<Recompute> out;
  for (const auto& s : Split(list, ',')) {
    if (s == "none") out.push_back(Recompute::kNone);
    else if (s == "selective") out.push_back(Recompute::kSelective);
    else if (s == "full") out.push_back(Recompute::kFull);
    else Bad("--recompute", s, "a comma list of none, selective, full");
  }
  return out;
}

std::vector<int> ParseZeroStages(const std::string& list) {
  std::vector<int> out;
  for (const auto& s : Split(list, ',')) {
    if (s.size() == 1 && s[0] >= '0' && s[0] <= '3') out.push_back(s[0] - '0');
    else Bad("--zero-stages", s, "a comma list of 0, 1, 2, 3");
  }
  return out;
}

std::map<std::string, std::string> ParseFix(const std::string& list) {
  std::map<std::string, std::string> out;
  if (list.empty()) return out;
  static const std::set<std::string> keys = {"tp", "pp", "vp", "mbs", "zero", "sp", "recompute", "schedule"};
  for (const auto& kv : Split(list, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || !keys.count(kv.substr(0, eq)) || eq + 1 >= kv.size()) {
      Bad("--fix", kv, "key=value with key one of tp, pp, vp, mbs, zero, sp, recompute, schedule");
    }
    out[kv.substr(0, eq)] = ToLower(kv.substr(eq + 1));
  }
  return out;
}

std::string SimulateFlags(const ParallelConfig& c) {
  std::string f = fmt::format("--tp {} --pp {}", c.tp, c.pp);
  if (c.vp > 1) f += fmt::format(" --vp {}", c.vp);
  f += fmt::format(" --mbs {} --gbs {} --seq {} --recompute {} --schedule {}", c.micro_batch_size,
                   c.global_batch_size, c.seq_length, ToString(c.recompute), ToString(c.schedule));
  if (c.sequence_parallel) f += " --sequence-parallel";
  if (c.zero_stage > 0) f += fmt::format(" --zero {}", c.zero_stage);
  if (!c.flash_attention) f += " --no-flash-attention";
  if (c.embedding_slots) f += " --embedding-pipeline-slots";
  return f;
}

}  // namespace shardcast::cli
