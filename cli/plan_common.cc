#include "cli/plan_common.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/options.h"
#include "common/error.h"
#include "simulator/cost_model.h"
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
    if (s.size() != 1 || s[0] < '0' || s[0] > '3') Bad("--zero-stages", s, "a comma list of 0, 1, 2, 3");
    if (std::find(out.begin(), out.end(), s[0] - '0') == out.end()) out.push_back(s[0] - '0');  // each once
  }
  return out;
}

std::map<std::string, std::string> ParseFix(const std::string& list) {
  std::map<std::string, std::string> out;
  if (list.empty()) return out;
  static const std::set<std::string> keys = {"tp", "pp", "cp", "cp_comm", "ep", "etp", "vp", "mbs", "zero", "sp",
                                             "tp_comm_overlap", "recompute", "schedule", "dp_shard",
                                             "decoder_first", "decoder_last"};
  for (const auto& kv : Split(list, ',')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || !keys.count(kv.substr(0, eq)) || eq + 1 >= kv.size()) {
      Bad("--fix", kv, "key=value with key one of tp, pp, cp, cp_comm, ep, etp, vp, mbs, zero, sp, tp_comm_overlap, "
                       "recompute, schedule, dp_shard, decoder_first, decoder_last");
    }
    const std::string key = kv.substr(0, eq);
    std::string v = ToLower(kv.substr(eq + 1));
    if (out.count(key)) Bad("--fix", kv, key + " once (it is already fixed to " + out[key] + ")");
    if (key == "tp" || key == "pp" || key == "cp" || key == "ep" || key == "etp" || key == "vp" || key == "mbs" ||
        key == "dp_shard" || key == "decoder_first" || key == "decoder_last") {
      const std::int64_t max = key == "vp" ? kMaxVirtualStages
                               : key == "mbs" ? kMaxMicroBatchSize
                               : key.rfind("decoder_", 0) == 0 ? kMaxLayers
                                                               : kMaxParallelSize;
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
  if (out.count("cp_comm") && out.count("cp") && out["cp"] == "1") {
    Bad("--fix", "cp=1,cp_comm=" + out["cp_comm"], "cp >= 2 with cp_comm (it says how context-parallel ranks exchange K/V)");
  }
  return out;
}

void CheckFixAgainstModel(const std::map<std::string, std::string>& fixed, const Model& m) {
  const auto value = [&](const char* key) -> std::int64_t {
    const auto it = fixed.find(key);
    return it == fixed.end() ? 0 : std::stoll(it->second);
  };
  const std::int64_t ep = value("ep"), etp = value("etp");
  if ((ep > 1 || etp > 1) && !m.moe.enabled()) {
    std::vector<std::string> given;
    if (ep > 1) given.push_back(fmt::format("ep={}", ep));
    if (etp > 1) given.push_back(fmt::format("etp={}", etp));
    Bad("--fix", Join(given, ","), "no expert sizes: " + m.name + " has no mixture-of-experts layers");
  }
  if (ep > 0 && m.moe.enabled() && m.moe.num_experts % ep != 0) {
    Bad("--fix", fmt::format("ep={}", ep), fmt::format("a divisor of num_experts = {}", m.moe.num_experts));
  }
  if (etp > 0 && m.moe.enabled() && m.moe.ffn_hidden_size % etp != 0) {
    Bad("--fix", fmt::format("etp={}", etp), fmt::format("a divisor of moe_ffn_hidden_size = {}", m.moe.ffn_hidden_size));
  }
  for (const char* key : {"decoder_first", "decoder_last"}) {
    if (const std::int64_t n = value(key); n >= m.num_layers) {
      Bad("--fix", fmt::format("{}={}", key, n), fmt::format("fewer than num_layers = {}", m.num_layers));
    }
  }
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

void AddMoeRoutingOptions(CLI::App* cmd, double* imbalance, bool* forced) {
  cmd->add_option("--moe-load-imbalance", *imbalance,
                  fmt::format("MoE: tokens of the busiest expert-parallel rank over the average (default: balanced "
                              "routing's expected maximum, a few percent; {} for a router trained with global-batch "
                              "balancing, as Qwen3's)",
                              kGlobalBatchRouterImbalance))
      ->check(BoundedNumber(1.0, 64.0));
  cmd->add_flag("--moe-router-force-load-balancing", *forced,
                "MoE: the router's choices replaced by balanced ones (Megatron-Core's benchmarking switch, not for "
                "training a model): balanced routing's imbalance whatever the model's router");
}

void AddMoeDispatcherOption(CLI::App* cmd, MoeDispatcher* dispatcher) {
  cmd->add_option_function<std::string>(
         "--moe-token-dispatcher-type",
         [dispatcher](const std::string& v) {
           *dispatcher = v == "flex" ? MoeDispatcher::kFlex : v == "allgather" ? MoeDispatcher::kAllGather
                                                                               : MoeDispatcher::kAllToAll;
         },
         "MoE: how every plan's tokens reach their experts: alltoall (default) | allgather | flex (DeepEP: once per "
         "destination rank, Megatron-Core's --moe-token-dispatcher-type flex)")
      ->transform(CLI::IsMember({"alltoall", "allgather", "flex"}, CLI::ignore_case));
}

void AddCrossEntropyOption(CLI::App* cmd, CrossEntropyImpl* impl, bool* given) {
  cmd->add_option_function<std::string>(
         "--cross-entropy",
         [impl, given](const std::string& v) {
           *impl = CrossEntropyImplNamed(v).value_or(*impl);  // CLI11 checked it
           *given = true;
         },
         "the loss's implementation every plan runs: unfused (default: Megatron's fp32 passes; torch with "
         "--optimizer fsdp) | native (Megatron-Core's --cross-entropy-loss-fusion, NeMo 2's default) | te | "
         "flash-attn | torch (docs/simulator.md)")
      ->transform(CLI::IsMember({"unfused", "native", "te", "flash-attn", "torch"}, CLI::ignore_case));
}

void ApplySearchCrossEntropy(CrossEntropyImpl given_impl, bool given, PlanOptions* o) {
  o->base.cross_entropy = given_impl;
  // torchtitan's loss: F.cross_entropy on the logits cast to fp32 (components/loss.py).
  if (!given && o->optimizer_impl == OptimizerImpl::kTorchFsdp) o->base.cross_entropy = CrossEntropyImpl::kTorch;
}

void CheckMoeRoutingOptions(const Model& m, const ParallelConfig& c) {
  const bool given = c.moe_load_imbalance > 0;
  if (!m.moe.enabled()) {
    const char* flag = given                                      ? "--moe-load-imbalance"
                       : c.moe_force_load_balancing               ? "--moe-router-force-load-balancing"
                       : c.moe_dispatcher != MoeDispatcher::kAllToAll ? "--moe-token-dispatcher-type"
                       : c.moe_capacity_factor > 0                ? "--moe-expert-capacity-factor"
                                                                  : nullptr;
    if (flag) {
      throw InputError(fmt::format("command line: {}: given for {}, which has no routed experts (a dense model)", flag,
                                   m.name));
    }
  }
  // Megatron-LM's rule (arguments.py): the layers kept in bf16 are some of the model's.
  if (c.bf16_layers_start + c.bf16_layers_end > m.num_layers) {
    throw InputError(fmt::format("command line: --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16: got {} + {}, "
                                 "expected at most num_layers = {} in all",
                                 c.bf16_layers_start, c.bf16_layers_end, m.num_layers));
  }
  if (given && c.moe_force_load_balancing) {
    throw InputError("command line: --moe-load-imbalance and --moe-router-force-load-balancing: both given, expected "
                     "one (forced balancing is balanced routing's imbalance; --moe-load-imbalance sets another)");
  }
  if (given && c.ep > 1) {
    const double local = static_cast<double>(m.moe.num_experts) / static_cast<double>(c.ep);
    const double max = MoeMaxImbalance(m.moe, c.ep);
    if (c.moe_load_imbalance > max + 1e-12) {
      throw InputError(fmt::format("command line: --moe-load-imbalance: got {:g}, expected at most {:g} at ep {} (the "
                                   "busiest rank gets at most min(top-k {}, its {:g} experts) copies of every token)",
                                   c.moe_load_imbalance, max, c.ep, m.moe.top_k, local));
    }
  }
}

void AddOffloadOptions(CLI::App* cmd, OffloadArgs* a) {
  cmd->add_option("--offload-modules", a->modules,
                  "fine-grained activation offloading of these modules' saved tensors to host memory (Megatron-Core's "
                  "names, space-separated): core_attn, attn_proj, expert_fc1, moe_act")
      ->expected(1, 4);
  cmd->add_flag("--fine-grained-activation-offloading", a->flag,
                "accepted with --offload-modules, as Megatron-Core needs it");
}

void ApplyOffloadArgs(const OffloadArgs& a, const Model& m, ParallelConfig* c) {
  if (a.flag && a.modules.empty()) {
    throw InputError("command line: --fine-grained-activation-offloading: given alone, expected it with "
                     "--offload-modules (the modules whose saved tensors go to host memory)");
  }
  if (a.modules.empty()) return;
  c->offload_modules = ParseOffloadModules(a.modules, "command line: --offload-modules");
  RequireOffloadModules(m, c->offload_modules, "command line: --offload-modules");
}

void AddEmitOptions(CLI::App* cmd, EmitArgs* a) {
  cmd->add_option("--emit", a->format,
                  "also write a launch configuration: megatron (a Megatron-LM command line), nemo (a NeMo 2 recipe "
                  "override), torchtitan (a TOML file) or deepspeed (a DeepSpeed config JSON, in a shell snippet "
                  "that writes ds_config.json)")
      ->check(CLI::IsMember({"megatron", "nemo", "torchtitan", "deepspeed"}));
  cmd->add_option("--emit-file", a->file, "write the --emit output to FILE instead of printing it")
      ->check(OutputFile());
}

void CheckOutputFiles(const std::vector<std::pair<std::string, std::string>>& outputs,
                      const std::vector<std::string>& inputs) {
  for (const auto& [option, path] : outputs) RefuseOverwritingInput(option, path, inputs);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t k = i + 1; k < outputs.size(); ++k) {
      const std::string& p = outputs[i].second;
      const std::string& q = outputs[k].second;
      if (p.empty() || q.empty() || p == "-" || q == "-") continue;
      if (std::filesystem::weakly_canonical(p) == std::filesystem::weakly_canonical(q)) {
        throw InputError("command line: " + outputs[i].first + " and " + outputs[k].first + ": both got " + q +
                         ", expected two files (the second would replace the first)");
      }
    }
  }
}

std::optional<LaunchConfig> EmitIfAsked(const EmitArgs& a, const Model& m, const ParallelConfig& c, const Cluster& cl,
                                        std::int64_t gpus, const SimulationResult& r) {
  if (a.format.empty()) {
    if (!a.file.empty()) throw InputError("command line: --emit-file: given without --emit FORMAT");
    return std::nullopt;
  }
  if (!r.feasible) {
    throw InputError("command line: --emit: got a configuration that cannot run (" + Join(r.reasons, "; ") +
                     "), expected one that runs; no launch configuration written");
  }
  const LaunchFormat format = ParseLaunchFormat(a.format, "--emit");
  LaunchConfig l = EmitLaunch(format, m, c, cl, gpus);
  if ((format == LaunchFormat::kMegatron || format == LaunchFormat::kNemo) && MegatronCannotSplit(m, c)) {
    const std::string why = fmt::format(
        "{} layers do not divide pp = {}{}, and Megatron-LM asserts that they do unless first/last stage layer counts "
        "are given: this launch fails at start-up (the simulation split them as DeepSpeed does; give "
        "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, or `plan`, which searches them)",
        m.num_layers + (c.embedding_slots ? 2 : 0), c.pp, c.vp > 1 ? fmt::format(" x vp = {}", c.vp) : "");
    l.text = "# WARNING: " + why + "\n" + l.text;
    l.warnings.push_back(why);
  }
  if (!r.fits) {
    // Said in the file itself (every format comments with #): a launch predicted to run out of memory.
    l.text = "# WARNING: shardcast predicts this configuration does not fit in GPU memory: " + Join(r.reasons, "; ") +
             "\n" + l.text;
    l.warnings.push_back("does not fit in GPU memory: " + Join(r.reasons, "; "));
  }
  if (!a.file.empty()) WriteFileAtomic(a.file, l.text);
  return l;
}

void AddWhatIfOption(CLI::App* cmd, std::vector<std::string>* changes) {
  cmd->add_option("--what-if", *changes,
                  "also run on changed hardware and print the result beside the baseline: KEY=VALUE replaces a "
                  "figure, KEY=xFACTOR scales it; keys " + Join(WhatIfKeys(), ", ") +
                      " (repeatable; e.g. --what-if nic_Gbps=800 --what-if hbm_GBps=x1.5)");
}

std::pair<CLI::Option*, CLI::Option*> AddStragglerOptions(CLI::App* cmd, double* factor, double* nic_factor,
                                                          const std::string& what) {
  auto add = [&](const char* name, double* value, const char* straggler) {
    return cmd
        ->add_option(name, *value,
                     fmt::format(fmt::runtime(straggler), kMaxStragglerSlowdown) + what +
                         " (docs/simulator.md, \"Stragglers\")")
        ->check(BoundedNumber(1, kMaxStragglerSlowdown))
        ->type_name("FACTOR");
  };
  return {add("--straggler", factor, "one slow GPU, whose kernels take FACTOR times as long (1 to {:g}, e.g. 1.1)"),
          add("--straggler-nic", nic_factor,
              "one slow node, whose network links (NICs) run FACTOR times slower (1 to {:g}, e.g. 2)")};
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

void AddHtmlOption(CLI::App* cmd, std::string* path) {
  cmd->add_option("--html", *path,
                  "also write a self-contained HTML report (charts in SVG, no network access) to FILE")
      ->check(OutputFile());
}

void WriteHtmlReport(const std::string& path, const std::string& title, const std::string& subtitle, const Json& data) {
  WriteFileAtomic(path, HtmlReport(title, subtitle, data));
  std::cerr << "shardcast: HTML report written to " << path << "\n";
}

namespace {

/// Every plan takes DeepSpeed's knobs (the simulation reads each only where it applies), but each
/// given must apply to some plan: one of the ZeRO stages searched (ZeRO-2/3 only without a fixed
/// pipeline), with the search's optimizer and ZeRO-3 (`stages` as given, for the message; `has3`:
/// ZeRO-3 among them). Writes the knobs into o->base; InputError (exit 2) naming the flag otherwise.
void CheckKnobsReachAPlan(const OptimizerArgs& opt, const std::string& stages, bool has3, PlanOptions* o) {
  std::map<std::string, int> left_out;
  const auto fixed_pp = o->fixed.find("pp");
  const bool pipelined = fixed_pp != o->fixed.end() && fixed_pp->second != "1";
  std::vector<int> searched;
  for (int z : o->zero_stages) {
    if (!(pipelined && z >= 2)) searched.push_back(z);
  }
  for (int z : searched) {
    ParallelConfig c = o->base;
    c.zero_stage = z;
    c.optimizer_impl = o->optimizer_impl;
    c.zero3_impl = z == 3 ? o->zero3_impl : Zero3Impl::kPerLayer;
    for (const auto& flag : ApplyDeepSpeedKnobs(opt, /*refuse=*/false, &c)) ++left_out[flag];
    CopyDeepSpeedKnobs(c, &o->base);
  }
  if (searched.empty()) {  // no stage runs: every knob given reaches no plan
    ParallelConfig none;
    for (const auto& flag : ApplyDeepSpeedKnobs(opt, /*refuse=*/false, &none)) left_out[flag] = 0;
  }
  for (const auto& [flag, n] : left_out) {
    if (n < static_cast<int>(searched.size())) continue;
    throw InputError(fmt::format("command line: {}: given, but no plan runs what it tunes (--optimizer {} "
                                 "--zero-stages {}{}{}); expected {}",
                                 flag, ToString(o->optimizer_impl), stages,
                                 has3 ? fmt::format(" --zero3-impl {}", ToString(o->zero3_impl)) : "",
                                 pipelined ? fmt::format("; --fix pp={}, where ZeRO-2/3 do not run", fixed_pp->second) : "",
                                 flag == std::string("--reduce-bucket-size")
                                     ? "--optimizer deepspeed-zero, or ZeRO-3 with --zero3-impl deepspeed or deepspeed-2021"
                                 : flag == std::string("--no-contiguous-gradients") ||
                                         flag == std::string("--no-multi-rank-bucket-allreduce")
                                     ? "--optimizer deepspeed-zero with 1 or 2 among --zero-stages"
                                 : flag == std::string("--stage3-prefetch-bucket-size") ||
                                         flag == std::string("--stage3-max-reuse-distance")
                                     ? "3 among --zero-stages with --zero3-impl deepspeed (or --optimizer deepspeed-zero)"
                                     : "3 among --zero-stages with --zero3-impl deepspeed or deepspeed-2021"));
  }
}

}  // namespace

void ApplySearchOptimizerArgs(const OptimizerArgs& opt, const std::string& zero_list, PlanOptions* o) {
  o->zero3_impl = ParseZero3Impl(opt.zero3_impl);
  // DeepSpeed's stage 3 (today's or 2021's) keeps DeepSpeed's optimizer state unless --optimizer
  // says otherwise; with DeepSpeed's optimizer, ZeRO-3 is today's stage 3 unless --zero3-impl says so.
  o->optimizer_impl = opt.optimizer.empty() && o->zero3_impl != Zero3Impl::kPerLayer
                          ? OptimizerImpl::kDeepSpeedZero  // either DeepSpeed's stage 3: a DeepSpeed run
                          : ParseOptimizerImpl(opt.optimizer);
  if (opt.zero3_impl.empty() && o->optimizer_impl == OptimizerImpl::kDeepSpeedZero) o->zero3_impl = Zero3Impl::kDeepSpeed;
  if (o->optimizer_impl == OptimizerImpl::kTorchFsdp && o->zero3_impl != Zero3Impl::kPerLayer) {
    throw InputError(fmt::format("command line: --zero3-impl: got {} with --optimizer fsdp, expected per-layer (PyTorch "
                                 "FSDP gathers one layer's flat parameters at a time)", ToString(o->zero3_impl)));
  }
  const auto fixed = o->fixed.find("zero");  // --fix zero=N searches N alone (ApplyFixedToSearch)
  const std::string from = fixed != o->fixed.end() ? "--fix zero" : "--zero-stages";  // for the messages
  const std::string stages = fixed != o->fixed.end() ? fixed->second
                             : !zero_list.empty() ? zero_list
                             : o->optimizer_impl == OptimizerImpl::kDeepSpeedZero ? "1,2,3"
                             : o->optimizer_impl == OptimizerImpl::kDeepSpeedBf16 ? "1"
                             : o->optimizer_impl == OptimizerImpl::kTorchFsdp     ? "0,1,3"
                                                                                  : "0,1";
  o->zero_stages = ParseZeroStages(stages);
  for (int z : o->zero_stages) {
    if (o->optimizer_impl == OptimizerImpl::kDeepSpeedZero && z == 0) {
      throw InputError("command line: " + from + ": got 0 with --optimizer deepspeed-zero, expected stages 1, 2 or 3 "
                       "(DeepSpeed's ZeRO optimizer shards at least its state)");
    }
    if (o->optimizer_impl == OptimizerImpl::kDeepSpeedBf16 && z != 1) {
      throw InputError(fmt::format("command line: {}: got {} with --optimizer deepspeed-bf16, expected 1 "
                                   "(the BF16_Optimizer shards its state like ZeRO-1)", from, z));
    }
  }
  const bool has3 = std::find(o->zero_stages.begin(), o->zero_stages.end(), 3) != o->zero_stages.end();
  if (!opt.zero3_impl.empty() && !has3) {
    throw InputError(fmt::format("command line: --zero3-impl: got {} with --zero-stages {}, expected 3 among the "
                                 "stages (it says how ZeRO-3 gathers and reduces)", opt.zero3_impl, stages));
  }
  CheckKnobsReachAPlan(opt, stages, has3, o);
}


void AddSearchOptimizerOptions(CLI::App* cmd, std::string* zero, OptimizerArgs* opt) {
  cmd->add_option("--zero-stages", *zero,
                  "comma list of ZeRO stages to consider (default 0,1; 1,2,3 with --optimizer deepspeed-zero, 1 with "
                  "deepspeed-bf16, 0,1,3 with fsdp)");
  cmd->add_option("--optimizer", opt->optimizer,
                  "whose optimizer every plan runs: megatron (default; Megatron-LM's distributed optimizer for ZeRO-1, "
                  "FSDP for ZeRO-2/3) | deepspeed-zero (DeepSpeed's ZeRO optimizer: ZeRO-1 with its pipeline engine, "
                  "ZeRO-2/3 without pipeline parallelism; 16-bit gradients) | deepspeed-bf16 (ZeRO-1: "
                  "BF16_Optimizer, fp32 gradient buffer) | fsdp (PyTorch FSDP2 as torchtitan runs it: ZeRO-3 (or 2) "
                  "without a pipeline, FSDP2 kept through the schedule, ZeRO-1's reading, with one, DDP as the sole "
                  "parallelism; fp32 parameter shards as the master, sequence parallelism with TP, torchtitan's "
                  "pipeline split, selective recompute as its per-op checkpointing, PyTorch's loss unless given, "
                  "FlashAttention-2's rates on Hopper)")
      ->transform(CLI::IsMember({"megatron", "deepspeed-zero", "deepspeed-bf16", "fsdp"}, CLI::ignore_case));
  cmd->add_option("--zero3-impl", opt->zero3_impl,
                  "how ZeRO-3 plans gather and reduce: per-layer (FSDP; the default with --optimizer megatron) | "
                  "deepspeed (DeepSpeed stage 3 of v0.10-0.16; the default with --optimizer deepspeed-zero, which it "
                  "implies) | deepspeed-2021 (simulate --help has each)")
      ->transform(CLI::IsMember({"per-layer", "deepspeed", "deepspeed-2021"}, CLI::ignore_case));
  AddDeepSpeedKnobOptions(cmd, opt, /*for_plan=*/true);
}

}  // namespace shardcast::cli
