#pragma once
/// \file plan_common.h
/// Parsing of the planner's list options, shared by `plan` and `capacity`.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/config_args.h"
#include "models/parallel.h"
#include "planner/planner.h"
#include "report/capacity_report.h"
#include "report/launch.h"
#include "report/text.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "simulator/what_if.h"

namespace CLI {
class App;
}

namespace shardcast::cli {

Objective ParseObjective(const std::string& s);
std::vector<Schedule> ParseSchedules(const std::string& list);
std::vector<Recompute> ParseRecomputes(const std::string& list);
std::vector<int> ParseZeroStages(const std::string& list);
/// "tp=8,pp=8" -> {tp: 8, pp: 8}; keys tp, pp, vp, mbs (positive integers), zero (0-3), sp
/// (true/false, yes/no, y/n, 1/0; stored as true/false), recompute (none, selective, full),
/// schedule (1f1b, interleaved, zb-h1, gpipe). InputError for any other key or value.
std::map<std::string, std::string> ParseFix(const std::string& list);
/// InputError (exit 2) for a fixed value the model itself rules out, as simulate refuses it: ep or
/// etp for a dense model, an ep that does not divide the routed experts, an etp that does not
/// divide their hidden size, a decoder_first/last of num_layers or more.
void CheckFixAgainstModel(const std::map<std::string, std::string>& fixed, const Model& m);
/// Widens the search lists of `o` so they hold the values `o.fixed` fixes (a fixed recompute,
/// ZeRO stage or schedule outside --recompute, --zero-stages, --schedules; a fixed mbs above
/// --max-mbs), since fixing a value means asking for it.
void ApplyFixedToSearch(PlanOptions* o);

/// The optimizer options of `plan` and `capacity` (cli/config_args.h's OptimizerArgs):
/// --zero-stages LIST (into `zero`), --optimizer, --zero3-impl and DeepSpeed's knobs.
void AddSearchOptimizerOptions(CLI::App* cmd, std::string* zero, OptimizerArgs* opt);
/// The ZeRO stages searched (--zero-stages; by default 0,1, with DeepSpeed's ZeRO optimizer
/// 1,2,3 and with its BF16_Optimizer 1), whose optimizer and ZeRO-3 every plan runs (--optimizer,
/// --zero3-impl) and DeepSpeed's knobs, into `o`; InputError (exit 2) for a stage the optimizer
/// does not run, --zero3-impl without ZeRO-3 among the stages, or a knob no plan would take.
void ApplySearchOptimizerArgs(const OptimizerArgs& opt, const std::string& zero_list, PlanOptions* o);

/// Warns on standard error when the profile read from `path` describes another GPU than `cl`'s
/// (ProfileDescribesGpu) or network rates `cl`'s links cannot carry for `gpus` GPUs
/// (ProfileNetworkDiffers): the simulation would pair the profile's rates with the cluster's
/// memory and node layout, which is rarely what was meant.
void WarnIfProfileIsAnotherMachine(const HardwareProfile& p, const std::string& path, const Cluster& cl,
                                   std::int64_t gpus);

/// The --csv option of `plan` and `validate`: "-" means standard output, where the CSV is then
/// the whole output. InputError (exit 2) when "-" is combined with --json, which also writes there.
void CheckCsvOption(const std::string& path, bool json);
/// Writes `csv` to standard output when `path` is "-" and returns true (the caller prints nothing
/// else); otherwise writes the file atomically and returns false.
bool WriteCsvOption(const std::string& path, const std::string& csv);

/// The MoE routing options of `simulate`, and of every plan of `plan` and `capacity`:
/// --moe-load-imbalance F (a number from 1 to 64) and --moe-router-force-load-balancing, written
/// into `imbalance` and `forced` (ParallelConfig's moe_load_imbalance, moe_force_load_balancing).
void AddMoeRoutingOptions(CLI::App* cmd, double* imbalance, bool* forced);
/// plan's and capacity's --moe-token-dispatcher-type: the dispatcher every candidate runs.
void AddMoeDispatcherOption(CLI::App* cmd, MoeDispatcher* dispatcher);
/// `plan` and `capacity`'s --cross-entropy NAME (CrossEntropyImpl by name: unfused, native, te,
/// flash-attn, torch), written into `impl`; every plan takes it (PlanOptions::base).
void AddCrossEntropyOption(CLI::App* cmd, CrossEntropyImpl* impl, bool* given);
/// The loss every plan runs: `given_impl` where --cross-entropy was given, else PyTorch's
/// (torchtitan's) with --optimizer fsdp and Megatron's unfused passes otherwise. After the
/// optimizer (ApplySearchOptimizerArgs).
void ApplySearchCrossEntropy(CrossEntropyImpl given_impl, bool given, PlanOptions* o);
/// InputError (exit 2) for the MoE routing options on a model without routed experts, for both
/// given at once, and for an imbalance above what the busiest rank can take: every token's
/// min(k, E/ep) copies on it, ep * min(1, (E/ep)/k) times the mean.
void CheckMoeRoutingOptions(const Model& m, const ParallelConfig& c);

/// Megatron-Core's fine-grained activation offloading on `simulate` and on every plan of `plan`
/// and `capacity` (OffloadArgs, cli/config_args.h).
void AddOffloadOptions(CLI::App* cmd, OffloadArgs* a);
/// The offload modules into c->offload_modules; InputError (exit 2) for the flag alone, a name
/// Megatron-Core has not or the simulator does not model, attn_proj without core_attn, and
/// expert_fc1 or moe_act on a model without routed experts.
void ApplyOffloadArgs(const OffloadArgs& a, const Model& m, ParallelConfig* c);

/// Refuses (InputError, exit 2, before anything is written) an output file (option, path; empty
/// or "-": none) that is one of `inputs` or that another output also names.
void CheckOutputFiles(const std::vector<std::pair<std::string, std::string>>& outputs,
                      const std::vector<std::string>& inputs);

/// The --emit FORMAT and --emit-file FILE options of `simulate` and `plan`: a launch configuration
/// (report/launch.h) of the configuration simulated or recommended.
struct EmitArgs {
  std::string format;  ///< empty: none
  std::string file;    ///< empty: printed with the report
};
void AddEmitOptions(CLI::App* cmd, EmitArgs* a);
/// The launch configuration --emit asks for (nullopt without --emit) of `c`, whose simulation is
/// `r`; with --emit-file it is written there atomically. InputError (nothing written) when `c`
/// cannot run; a warning in the file and in LaunchConfig::warnings when it does not fit.
std::optional<LaunchConfig> EmitIfAsked(const EmitArgs& a, const Model& m, const ParallelConfig& c, const Cluster& cl,
                                        std::int64_t gpus, const SimulationResult& r);

/// --what-if KEY=VALUE|KEY=xFACTOR (repeatable) of `simulate` and `plan` (simulator/what_if.h).
void AddWhatIfOption(CLI::App* cmd, std::vector<std::string>* changes);
std::vector<WhatIf> ParseWhatIfs(const std::vector<std::string>& changes);
/// `--straggler FACTOR` and `--straggler-nic FACTOR` (docs/simulator.md, "Stragglers"): a
/// number from 1 to kMaxStragglerSlowdown, checked when the command line is read; `what` ends
/// the help texts (what the command does with the straggler). Returns the two options.
std::pair<CLI::Option*, CLI::Option*> AddStragglerOptions(CLI::App* cmd, double* factor, double* nic_factor,
                                                          const std::string& what);
/// The what-if cluster and profile: copies of the baseline's with `w` applied.
struct WhatIfHardware {
  Cluster cl;
  HardwareProfile prof;
};
WhatIfHardware ApplyWhatIfs(const std::vector<WhatIf>& w, const Cluster& cl, const HardwareProfile& prof);

/// --html FILE: a self-contained HTML report (report/html.h) of the command's result.
void AddHtmlOption(CLI::App* cmd, std::string* path);
/// Writes HtmlReport(title, subtitle, data) to `path` atomically and says so on standard error.
void WriteHtmlReport(const std::string& path, const std::string& title, const std::string& subtitle, const Json& data);

}  // namespace shardcast::cli
