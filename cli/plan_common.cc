#include "cli/plan_common.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/options.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "report/html.h"

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

namespace {
// One name each, as ToString writes them; nullopt for anything else.
std::optional<Schedule> ScheduleNamed(const std::string& s) {
  for (Schedule x : {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1, Schedule::kGpipe}) {
    if (ToLower(s) == ToString(x)) return x;
  }
  return std::nullopt;
}
std::optional<Recompute> RecomputeNamed(const std::string& s) {
  for (Recompute x : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (ToLower(s) == ToString(x)) return x;
  }
  return std::nullopt;
}
}  // namespace

std::vector<Schedule> ParseSchedules(const std::string& list) {
  std::vector<Schedule> out;
  for (const auto& s : Split(list, ',')) {
    const auto x = ScheduleNamed(s);
    if (!x) Bad("--schedules", s, "a comma list of 1f1b, interleaved, zb-h1, gpipe");
    out.push_back(*x);
  }
  return out;
}

std::vector<Recompute> ParseRecomputes(const std::string& list) {
  std::vector<Recompute> out;
  for (const auto& s : Split(list, ',')) {
    const auto x = RecomputeNamed(s);
    if (!x) Bad("--recompute", s, "a comma list of none, selective, full");
    out.push_back(*x);
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
  static const std::set<std::string> keys = {"tp", "pp", "cp", "cp_comm", "ep", "etp", "vp", "mbs", "zero", "sp",
                                             "tp_comm_overlap", "recompute", "schedule"};
  for (const auto& kv : Split(list, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || !keys.count(kv.substr(0, eq)) || eq + 1 >= kv.size()) {
      Bad("--fix", kv, "key=value with key one of tp, pp, cp, cp_comm, ep, etp, vp, mbs, zero, sp, tp_comm_overlap, "
                       "recompute, schedule");
    }
    const std::string key = kv.substr(0, eq);
    std::string v = ToLower(kv.substr(eq + 1));
    if (out.count(key)) Bad("--fix", kv, key + " once (it is already fixed to " + out[key] + ")");
    if (key == "tp" || key == "pp" || key == "cp" || key == "ep" || key == "etp" || key == "vp" || key == "mbs") {
      const std::int64_t max = key == "vp" ? kMaxVirtualStages : key == "mbs" ? kMaxMicroBatchSize : kMaxParallelSize;
      const bool digits = v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoll(v) < 1 || std::stoll(v) > max) {
        Bad("--fix", kv, key + "=N with N a positive integer up to " + std::to_string(max));
      }
      v = std::to_string(std::stoll(v));
    } else if (key == "zero") {
      if (v.size() != 1 || v[0] < '0' || v[0] > '3') Bad("--fix", kv, "zero=0, 1, 2 or 3");
    } else if (key == "sp" || key == "tp_comm_overlap") {
      if (v == "true" || v == "yes" || v == "y" || v == "1") v = "true";
      else if (v == "false" || v == "no" || v == "n" || v == "0") v = "false";
      else Bad("--fix", kv, key + "=true or " + key + "=false (also yes/no, y/n, 1/0)");
    } else if (key == "cp_comm") {
      if (v != "p2p" && v != "allgather" && v != "a2a" && v != "a2a+p2p" && v != "ulysses") {
        Bad("--fix", kv, "cp_comm=p2p, allgather, a2a, a2a+p2p or ulysses");
      }
    } else if (key == "recompute") {
      if (!RecomputeNamed(v)) Bad("--fix", kv, "recompute=none, selective or full");
    } else if (key == "schedule") {
      if (!ScheduleNamed(v)) Bad("--fix", kv, "schedule=1f1b, interleaved, zb-h1 or gpipe");
    }
    out[key] = v;
  }
  if (out.count("schedule") && out["schedule"] == "interleaved" && out.count("vp") && out["vp"] == "1") {
    Bad("--fix", "schedule=interleaved,vp=1", "vp >= 2 with the interleaved schedule (with one it is 1F1B)");
  }
  return out;
}

void ApplyFixedToSearch(PlanOptions* o) {
  const auto& f = o->fixed;
  if (auto it = f.find("recompute"); it != f.end()) o->recomputes = ParseRecomputes(it->second);
  if (auto it = f.find("zero"); it != f.end()) o->zero_stages = ParseZeroStages(it->second);
  if (auto it = f.find("schedule"); it != f.end()) o->schedules = ParseSchedules(it->second);
  if (auto it = f.find("mbs"); it != f.end()) {
    o->max_micro_batch_size = std::max<std::int64_t>(o->max_micro_batch_size, std::stoll(it->second));
  }
}

Json KnownBiasJson(const ParallelConfig& c) {
  const std::string bias = KnownBias(c);
  return bias.empty() ? Json(nullptr) : Json(bias);
}

void WarnIfProfileIsAnotherMachine(const HardwareProfile& p, const std::string& path, const Cluster& cl,
                                   std::int64_t gpus) {
  if (!ProfileDescribesGpu(p, cl.gpu)) {
    std::cerr << "shardcast: warning: profile " << path << " measured '" << p.gpu << "' but cluster " << cl.name
              << " has " << cl.gpu.name << "\n";
  }
  if (const std::string d = ProfileNetworkDiffers(p, cl, gpus); !d.empty()) {
    std::cerr << "shardcast: warning: profile " << path << " has network rates cluster " << cl.name
              << "'s links cannot carry (" << d << "); the simulation takes them from the profile\n";
  }
}

void CheckCsvOption(const std::string& path, bool json) {
  if (path == "-" && json) {
    throw InputError("command line: --csv -: writes the CSV to standard output, where --json also writes; "
                     "give --csv a file name or drop --json");
  }
}

bool WriteCsvOption(const std::string& path, const std::string& csv) {
  if (path == "-") {
    std::cout << csv << std::flush;
    if (!std::cout) throw InputError("standard output: write failed (closed pipe or disk full?)");
    return true;
  }
  WriteFileAtomic(path, csv);
  return false;
}

void AddEmitOptions(CLI::App* cmd, EmitArgs* a) {
  cmd->add_option("--emit", a->format,
                  "also write a launch configuration: megatron (a Megatron-LM command line), nemo (a NeMo 2 recipe "
                  "override) or torchtitan (a TOML file)")
      ->check(CLI::IsMember({"megatron", "nemo", "torchtitan"}));
  cmd->add_option("--emit-file", a->file, "write the --emit output to FILE instead of printing it")
      ->check(OutputFile());
}

std::optional<LaunchConfig> EmitIfAsked(const EmitArgs& a, const Model& m, const ParallelConfig& c, const Cluster& cl,
                                        std::int64_t gpus) {
  if (a.format.empty()) {
    if (!a.file.empty()) throw InputError("command line: --emit-file: given without --emit FORMAT");
    return std::nullopt;
  }
  LaunchConfig l = EmitLaunch(ParseLaunchFormat(a.format, "--emit"), m, c, cl, gpus);
  if (!a.file.empty()) WriteFileAtomic(a.file, l.text);
  return l;
}

Json LaunchJson(const LaunchConfig& l, const EmitArgs& a) {
  Json j;
  j["format"] = ToString(l.format);
  j["framework"] = l.framework;
  j["text"] = l.text;
  j["unexpressed"] = l.unexpressed;
  j["file"] = a.file.empty() ? Json(nullptr) : Json(a.file);
  return j;
}

void PrintLaunch(const LaunchConfig& l, const EmitArgs& a, const std::string& label) {
  if (!a.file.empty()) {
    std::cout << fmt::format("\n{}, launched with {}: written to {}\n", label, l.framework, a.file);
    for (const auto& u : l.unexpressed) std::cout << "  not expressed: " << u << "\n";
    return;
  }
  std::cout << fmt::format("\n{}, launched with {}:\n\n{}", label, l.framework, l.text);
}

void AddWhatIfOption(CLI::App* cmd, std::vector<std::string>* changes) {
  cmd->add_option("--what-if", *changes,
                  "also run on changed hardware and print the result beside the baseline: KEY=VALUE replaces a "
                  "figure, KEY=xFACTOR scales it; keys " + Join(WhatIfKeys(), ", ") +
                      " (repeatable; e.g. --what-if nic_Gbps=800 --what-if hbm_GBps=x1.5)");
}

std::vector<WhatIf> ParseWhatIfs(const std::vector<std::string>& changes) {
  std::vector<WhatIf> w;
  for (const auto& s : changes) w.push_back(ParseWhatIf(s));
  return w;
}

WhatIfHardware ApplyWhatIfs(const std::vector<WhatIf>& w, const Cluster& cl, const HardwareProfile& prof) {
  WhatIfHardware h{cl, prof};
  ApplyWhatIf(w, &h.cl, &h.prof);
  return h;
}

namespace {

std::string Change(double base, double now) {
  return base > 0 && now > 0 ? fmt::format("{:+.1f}%", 100.0 * (now / base - 1.0)) : std::string("-");
}

}  // namespace

void PrintBeside(const SimulationResult& base, const SimulationResult& what_if, const std::string& base_label,
                 const std::string& what_if_label) {
  auto cell = [](const SimulationResult& r, const std::string& text) { return r.feasible ? text : std::string("cannot run"); };
  std::cout << fmt::format("  {:<16} {:>22} {:>22} {:>8}\n", "", base_label, what_if_label, "change");
  auto row = [&](const char* name, double b, double w, const std::string& bt, const std::string& wt) {
    std::cout << fmt::format("  {:<16} {:>22} {:>22} {:>8}\n", name, cell(base, bt), cell(what_if, wt),
                             base.feasible && what_if.feasible ? Change(b, w) : "-");
  };
  row("step time", base.step_time_s, what_if.step_time_s, FormatSeconds(base.step_time_s),
      FormatSeconds(what_if.step_time_s));
  row("tokens/s", base.tokens_per_s, what_if.tokens_per_s, fmt::format("{:.4g}", base.tokens_per_s),
      fmt::format("{:.4g}", what_if.tokens_per_s));
  row("MFU", base.mfu, what_if.mfu, fmt::format("{:.1f}%", 100 * base.mfu), fmt::format("{:.1f}%", 100 * what_if.mfu));
  row("bubble", base.bubble_fraction, what_if.bubble_fraction, fmt::format("{:.1f}%", 100 * base.bubble_fraction),
      fmt::format("{:.1f}%", 100 * what_if.bubble_fraction));
  row("peak memory", base.peak_memory_bytes, what_if.peak_memory_bytes, FormatGiB(base.peak_memory_bytes),
      FormatGiB(what_if.peak_memory_bytes));
  std::cout << fmt::format("  {:<16} {:>22} {:>22}\n", "fits", base.fits ? "yes" : "no", what_if.fits ? "yes" : "no");
  for (const auto& why : what_if.reasons) std::cout << "  what-if cannot run: " << why << "\n";
}

Json BesideJson(const SimulationResult& base, const SimulationResult& what_if) {
  auto headline = [](const SimulationResult& r) {
    return Json{{"feasible", r.feasible},
                {"step_time_s", r.step_time_s},
                {"tokens_per_s", r.tokens_per_s},
                {"mfu", r.mfu},
                {"bubble_fraction", r.bubble_fraction},
                {"peak_memory_bytes", r.peak_memory_bytes},
                {"fits", r.fits}};
  };
  const bool both = base.feasible && what_if.feasible && base.step_time_s > 0;
  return Json{{"baseline", headline(base)},
              {"what_if", headline(what_if)},
              {"step_time_change", both ? Json(what_if.step_time_s / base.step_time_s - 1) : Json(nullptr)},
              {"tokens_per_s_change", both ? Json(what_if.tokens_per_s / base.tokens_per_s - 1) : Json(nullptr)}};
}

void AddHtmlOption(CLI::App* cmd, std::string* path) {
  cmd->add_option("--html", *path,
                  "also write a self-contained HTML report (charts in SVG, no network access) to FILE")
      ->check(OutputFile());
}

void WriteHtmlReport(const std::string& path, const std::string& title, const std::string& subtitle, const Json& data) {
  WriteFileAtomic(path, HtmlReport(title, subtitle, data));
  std::cerr << "shardcast: HTML report written to " << path << "\n";
}

}  // namespace shardcast::cli
