#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "cli/options.h"
#include "cli/plan_common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "models/loader.h"
#include "planner/planner.h"
#include "report/megatron_args.h"
#include "report/plan_report.h"

namespace shardcast::cli {
namespace {

struct PlanArgs {
  std::string model, cluster, profile, csv, objective = "throughput", schedules = "1f1b,interleaved",
              recompute = "none,selective,full", zero, fix;
  std::int64_t gpus = 0, gbs = 0, seq = 0, max_tp = 0, max_mbs = 16;
  int top = 10, threads = 0;
  double min_headroom_gib = 2.0;
  double price = 0;  ///< --price-per-gpu-hour; 0: the GPU preset's
  bool json = false, no_flash = false, exclude_at_risk = false, no_partial_recompute = false;
  /// --moe-load-imbalance, --moe-router-force-load-balancing, --moe-token-dispatcher-type, --cross-entropy
  ParallelConfig moe_routing;
  bool cross_entropy_given = false;  ///< --cross-entropy was given
  OffloadArgs offload;         ///< --offload-modules for every plan
  PrecisionArgs prec;
  OptimizerArgs opt;  ///< --optimizer, --zero3-impl and DeepSpeed's knobs for every plan
  std::string framework = "megatron-core";
  EmitArgs emit;
  std::vector<std::string> what_if;
  std::string html;
  double straggler = 1, straggler_nic = 1;  ///< --straggler FACTOR, --straggler-nic FACTOR
  CLI::Option* straggler_opt = nullptr;     ///< given when count() > 0
  CLI::Option* straggler_nic_opt = nullptr;
};

/// The `simulate` command line that reproduces plan config `c` (the text's "Details:" line and
/// `--json`'s `simulate_command`): the model, cluster and profile as given, the plan's flags
/// (SimulateFlags; what they cannot say into `unexpressed`), and --straggler / --straggler-nic
/// where given.
std::string SimulateCommandOf(const PlanArgs& a, const Model& m, const ParallelConfig& c, std::int64_t gpus,
                              std::vector<std::string>* unexpressed) {
  return "shardcast simulate --model " + a.model + " --cluster " + a.cluster + " " +
         (a.profile.empty() ? "" : "--profile " + a.profile + " ") + SimulateFlags(c, m, gpus, unexpressed) +
         (a.straggler_opt->count() > 0 ? fmt::format(" --straggler {:g}", a.straggler) : std::string()) +
         (a.straggler_nic_opt->count() > 0 ? fmt::format(" --straggler-nic {:g}", a.straggler_nic) : std::string());
}

/// `--straggler`: each ranked plan run with one slow GPU at its worst stage (timing only).
std::vector<PlanStraggler> RunStragglers(const Model& m, const Cluster& cl, const HardwareProfile& prof,
                                         const PlanOptions& o, const PlanResult& r, double slowdown,
                                         double nic_slowdown) {
  std::vector<PlanStraggler> runs;
  SimulateOptions so;
  so.allocator_replay = false;  // the plans' memory is already judged; a straggler changes no bytes
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const Plan& p = r.plans[i];
    runs.push_back({i + 1, &p, SimulateStraggler(m, p.config, cl, o.gpus, prof, so, slowdown, nic_slowdown, -1)});
  }
  return runs;
}

/// The search the flags ask for (InputError naming the flag for a bad value).
PlanOptions PlanOptionsFrom(const PlanArgs& a, const Model& m, const Cluster& cl) {
  PlanOptions o;
  o.gpus = a.gpus > 0 ? a.gpus : cl.num_gpus.value_or(cl.gpus_per_node);
  o.global_batch_size = a.gbs;
  o.seq_length = a.seq > 0 ? a.seq : m.seq_length;
  o.top_k = a.top;
  o.objective = ParseObjective(a.objective);
  o.max_tp = a.max_tp;
  o.max_micro_batch_size = a.max_mbs;
  o.schedules = ParseSchedules(a.schedules);
  o.recomputes = ParseRecomputes(a.recompute);
  o.fixed = ParseFix(a.fix);
  CheckFixAgainstModel(o.fixed, m);
  ApplySearchOptimizerArgs(a.opt, a.zero, &o);
  ApplyFixedToSearch(&o);
  o.threads = a.threads;
  o.price_usd_per_gpu_hour = a.price;
  o.flash_attention = !a.no_flash;
  ApplyPrecisionArgs(a.prec, &o.base);
  CheckAttentionPrecision(o.base.precision, o.flash_attention, "--no-flash-attention as well");
  CheckOptimizerPrecision(o.optimizer_impl, o.base.precision);
  o.base.moe_load_imbalance = a.moe_routing.moe_load_imbalance;
  o.base.moe_force_load_balancing = a.moe_routing.moe_force_load_balancing;
  o.base.moe_dispatcher = a.moe_routing.moe_dispatcher;
  ApplySearchCrossEntropy(a.moe_routing.cross_entropy, a.cross_entropy_given, &o);
  CheckMoeRoutingOptions(m, o.base);
  ApplyOffloadArgs(a.offload, m, &o.base);
  o.megatron_core = a.framework == "megatron-core";
  {
    // The base has no ZeRO stage of its own: the search's stages (ZeRO-0 candidates are not
    // generated with --fp8-param-gather, said in "Not generated").
    ParallelConfig any = o.base;
    any.zero_stage = *std::max_element(o.zero_stages.begin(), o.zero_stages.end());
    if (any.fp8_param_gather && any.zero_stage < 1) {
      throw InputError(std::string("command line: --fp8-param-gather: given with ") +
                       (o.fixed.count("zero") ? "--fix zero=0" : "--zero-stages 0 only") +
                       ", expected a ZeRO stage of 1 or more (the parameters are gathered in FP8 by the distributed "
                       "optimizer or FSDP)");
    }
    RequirePrecision(cl.gpu, any, "command line");
  }
  o.min_headroom_bytes = a.min_headroom_gib * 1073741824.0;
  o.exclude_memory_at_risk = a.exclude_at_risk;
  o.partial_recompute = !a.no_partial_recompute;
  return o;
}

/// A progress bar on standard error when it is a terminal (and --json is not given), shown after
/// the first second.
std::function<void(std::size_t, std::size_t)> ProgressBar(bool show, std::chrono::steady_clock::time_point t0) {
  return [show, t0](std::size_t done, std::size_t total) {
    if (!show) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el < 1.0 && done < total) return;
    const int w = 30;
    const int filled = total ? static_cast<int>(w * done / total) : w;
    std::fprintf(stderr, "\r  [%s%s] %zu/%zu candidates, %.1f s", std::string(static_cast<std::size_t>(filled), '=').c_str(),
                 std::string(static_cast<std::size_t>(w - filled), ' ').c_str(), done, total, el);
    if (done == total) std::fprintf(stderr, "\n");
  };
}

/// When the CSV is all of standard output, says on standard error when it has no rows (and why)
/// or when the recommended plan ranks below --top.
void ExplainCsvOnStderr(const PlanView& v) {
  if (v.r.plans.empty()) {
    std::cerr << (v.r.at_risk_excluded > 0 ? "shardcast: no candidate fits without being at risk of running out of "
                                             "memory\n"
                                           : "shardcast: no candidate fits\n");
    for (const auto& s : v.r.advice) std::cerr << "  - " << s << "\n";
  } else if (v.recommended_rank == 0 && v.recommended) {
    std::cerr << "shardcast: the recommended plan (" << v.recommended->config.Summary()
              << ") ranks below --top; every listed plan is at risk of running out of memory\n";
  }
}

/// --csv - holds the CSV alone on standard output: what only the text or JSON report would show
/// (the straggler runs, the changed hardware's plan, a launch command without --emit-file) is
/// refused (InputError, exit 2).
void RefuseWhatTheCsvCannotHold(const PlanArgs& a, bool straggler, bool what_if) {
  if (a.csv != "-") return;
  auto refuse = [](const std::string& option, const char* shown) {
    throw InputError(fmt::format("command line: {}: not with --csv - (the CSV holds the plans alone); use --csv FILE, "
                                 "whose text report has {}, or --json",
                                 option, shown));
  };
  if (straggler) refuse(a.straggler_opt->count() > 0 ? "--straggler" : "--straggler-nic", "the straggler runs");
  if (what_if) refuse("--what-if", "the changed hardware's plan");
  if (!a.emit.format.empty() && a.emit.file.empty()) refuse("--emit without --emit-file", "the launch command");
}

/// What one plan command found: the search (and with --what-if, the search on the changed
/// hardware), the recommended plan's launch, and the straggler runs.
struct PlanRun {
  const PlanArgs& a;
  const Model& m;
  const Cluster& cl;
  const HardwareProfile& prof;
  const PlanOptions& o;
  const PlanResult& r;
  const PlanView& view;
  const std::optional<WhatIfHardware>& hw;
  const std::optional<PlanResult>& r_changed;
  const std::optional<LaunchConfig>& launch;
  const std::vector<PlanStraggler>& stragglers;
  bool straggler;
};

/// The JSON of `--json` and of the `--html` page: PlanJson, each plan's simulate command, the
/// launch, the changed hardware's plan and the straggler runs, bytes as integers.
Json PlanOutputJson(const PlanRun& p) {
  Json j = PlanJson(p.view);
  // Each plan's simulate command, and what its flags cannot say (the text's "not reproduced").
  auto add_command = [&p](const ParallelConfig& c, Json* plan) {
    std::vector<std::string> unexpressed;
    (*plan)["simulate_command"] = SimulateCommandOf(p.a, p.m, c, p.o.gpus, &unexpressed);
    (*plan)["simulate_command_unexpressed"] = unexpressed;
  };
  for (std::size_t i = 0; i < p.r.plans.size(); ++i) add_command(p.r.plans[i].config, &j["plans"][i]);
  if (p.view.recommended) add_command(p.view.recommended->config, &j["recommended"]);
  if (!p.a.emit.format.empty()) j["launch"] = p.launch ? LaunchJson(*p.launch, p.a.emit.file) : Json(nullptr);
  if (p.r_changed) j["what_if"] = PlanWhatIfJson(p.view, p.a.what_if, p.hw->prof, RecommendedPlan(*p.r_changed));
  if (p.straggler) j["straggler"] = PlanStragglerJson(p.stragglers, p.a.straggler, p.a.straggler_nic);
  return WithIntegerBytes(j);  // the page holds what --json prints
}

/// The text report: the table and counts, the straggler runs, the recommended plan's simulate
/// command, its launch and the changed hardware's plan.
void WritePlanCommandText(const PlanRun& p, double elapsed) {
  const std::string label = WritePlanText(std::cout, p.view, elapsed);
  if (label.empty()) {  // nothing fits: the text said why
    if (p.straggler) std::cout << "\nNo straggler runs: no plan fits.\n";
    return;
  }
  if (p.straggler) WritePlanStragglers(std::cout, p.stragglers, p.a.straggler, p.a.straggler_nic);
  const Plan& chosen = *p.view.recommended;
  std::vector<std::string> unexpressed;  // plans set nothing simulate has no flag for
  std::cout << "\nDetails: " << SimulateCommandOf(p.a, p.m, chosen.config, p.o.gpus, &unexpressed) << "\n";
  for (const auto& u : unexpressed) std::cout << "  (not reproduced: " << u << ")\n";
  if (p.launch) WriteLaunch(std::cout, *p.launch, p.a.emit.file, label);
  if (p.r_changed) WritePlanWhatIf(std::cout, p.a.what_if, p.prof, p.hw->prof, chosen, RecommendedPlan(*p.r_changed));
}

void RunPlanCommand(const PlanArgs& a) {
  CheckCsvOption(a.csv, a.json);
  CheckOutputFiles({{"--csv", a.csv}, {"--html", a.html}, {"--emit-file", a.emit.file}}, {a.model, a.cluster, a.profile});
  const Model m = LoadModel(a.model, "--model");
  const Cluster cl = LoadCluster(a.cluster, "--cluster");
  PlanOptions o = PlanOptionsFrom(a, m, cl);
  HardwareProfile prof =
      WithGemmRateFor(a.profile.empty() ? DefaultProfile(cl) : LoadProfile(a.profile), cl, o.base.precision);
  // Every candidate of --optimizer fsdp is a PyTorch-native (torchtitan) run: PyTorch's attention.
  if (o.optimizer_impl == OptimizerImpl::kTorchFsdp) prof = WithPyTorchAttention(std::move(prof), cl.gpu.arch);
  if (!a.profile.empty()) WarnIfProfileIsAnotherMachine(prof, a.profile, cl, o.gpus);
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = ProgressBar(::isatty(2) != 0 && !a.json, t0);
  const std::vector<WhatIf> what_if = ParseWhatIfs(a.what_if);
  const bool straggler = a.straggler_opt->count() > 0 || a.straggler_nic_opt->count() > 0;
  if (straggler) RequireStraggler(a.straggler, std::nullopt, 1, "command line: --straggler");
  RefuseWhatTheCsvCannotHold(a, straggler, !what_if.empty());
  PlanResult r = RunPlan(m, cl, prof, o);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // With --what-if, the same search on the changed hardware.
  std::optional<WhatIfHardware> hw;
  std::optional<PlanResult> r_changed;
  if (!what_if.empty()) {
    hw = ApplyWhatIfs(what_if, cl, prof);
    r_changed = RunPlan(m, hw->cl, hw->prof, o);
  }
  // The recommendation: the best plan not at risk of running out of memory (found even below
  // the top K), else the best plan; and its rank in the table, 0 when it is not shown.
  const Plan* recommended = RecommendedPlan(r);
  const std::optional<LaunchConfig> launch =
      recommended ? EmitIfAsked(a.emit, m, recommended->config, cl, o.gpus, recommended->result) : std::nullopt;
  const PlanView view{m, cl, o, r, recommended, RankOf(r, recommended),
                      a.profile.empty() ? "built-in default" : a.profile, prof.adjustments};
  const std::vector<PlanStraggler> stragglers =
      straggler ? RunStragglers(m, cl, prof, o, r, a.straggler, a.straggler_nic) : std::vector<PlanStraggler>{};
  const PlanRun run{a, m, cl, prof, o, r, view, hw, r_changed, launch, stragglers, straggler};

  // `recommended` marks the plan the text recommends (the best not at risk of running out of
  // memory); no row has it when that plan ranks below --top.
  const bool csv_to_stdout = a.csv == "-";
  if (!a.csv.empty() && !csv_to_stdout) WriteCsvOption(a.csv, PlanCsv(view));
  if (a.json || !a.html.empty()) {
    const Json j = PlanOutputJson(run);
    if (!a.html.empty()) {
      WriteHtmlReport(a.html, fmt::format("shardcast plan: {} on {} x {}", m.name, o.gpus, cl.gpu.display_name),
                      fmt::format("global batch {}, sequence {}, objective {}; {} candidates generated, {} simulated",
                                  o.global_batch_size, o.seq_length, ToString(o.objective), r.candidates_generated,
                                  r.candidates_simulated),
                      WithIntegerBytes(PlanHtmlData(view, j)));  // the points' bytes whole, as --json's
    }
    if (a.json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
  }
  if (csv_to_stdout) {  // after the HTML page, which --csv - does not replace
    WriteCsvOption(a.csv, PlanCsv(view));
    ExplainCsvOnStderr(view);  // the CSV was all of standard output
    return;
  }
  WritePlanCommandText(run, elapsed);
}

}  // namespace

void RegisterPlan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan",
      "Search data/tensor/pipeline-parallel configurations and rank them.\n"
      "Example: shardcast plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --gbs 1536");
  cmd->add_option("--model", a->model, "model preset name or JSON / HF config.json path")->required();
  cmd->add_option("--cluster", a->cluster, "cluster preset name or JSON path")->required();
  AddPositive(cmd, "--gpus", a->gpus, "number of GPUs", kMaxGpus);
  AddPositive(cmd, "--gbs,--global-batch-size", a->gbs, "global batch size (sequences)", kMaxGlobalBatchSize)->required();
  AddPositive(cmd, "--seq,--seq-length", a->seq, "sequence length (default: the model's)", kMaxSeq);
  cmd->add_option("--top", a->top, "plans to show")->check(IntegerRange(1, 1000));
  cmd->add_option("--objective", a->objective, "rank by throughput|cost|energy")
      ->transform(CLI::IsMember({"throughput", "cost", "energy"}, CLI::ignore_case));
  cmd->add_option("--price-per-gpu-hour", a->price,
                  "USD per GPU-hour for the cost column and --objective cost (default: the GPU preset's dated price)")
      ->check(BoundedNumber(kMinPriceUsd, kMaxPriceUsd));
  AddPositive(cmd, "--max-tp", a->max_tp, "largest tensor-parallel size (default: GPUs per node)", kMaxParallelSize);
  AddPositive(cmd, "--max-mbs", a->max_mbs, "largest micro-batch size (default 16)", kMaxMicroBatchSize);
  cmd->add_option("--min-headroom", a->min_headroom_gib,
                  "GiB a plan must leave free per GPU beyond what the caching allocator reserves (NCCL growth, "
                  "spikes; default 2)")
      ->check(BoundedNumber(0.0, 1e4));
  cmd->add_option("--schedules", a->schedules,
                  "comma list of 1f1b,interleaved,zb-h1,gpipe (default 1f1b,interleaved, upstream Megatron-LM's; "
                  "zb-h1 is the zero-bubble fork's)");
  cmd->add_option("--recompute", a->recompute, "comma list of none,selective,full");
  cmd->add_flag("--no-partial-recompute", a->no_partial_recompute,
                "with full recompute, do not also try recomputing part of the layers (a quarter, half or three "
                "quarters of each pipeline chunk's; with --optimizer fsdp one layer in 2, 3 or 4)");
  AddSearchOptimizerOptions(cmd, &a->zero, &a->opt);
  cmd->add_option("--fix", a->fix,
                  "fix dimensions, e.g. tp=8,pp=8,sp=true,schedule=interleaved (keys tp, pp, cp, cp_comm, ep, etp, vp, "
                  "mbs, zero, dp_shard, sp, tp_comm_overlap, recompute, schedule, decoder_first, decoder_last)");
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(IntegerRange(1, 1024));
  cmd->add_flag("--no-flash-attention", a->no_flash, "unfused attention (saves s*s scores)");
  AddMoeRoutingOptions(cmd, &a->moe_routing.moe_load_imbalance, &a->moe_routing.moe_force_load_balancing);
  AddMoeDispatcherOption(cmd, &a->moe_routing.moe_dispatcher);
  AddCrossEntropyOption(cmd, &a->moe_routing.cross_entropy, &a->cross_entropy_given);
  AddOffloadOptions(cmd, &a->offload);
  AddPrecisionOptions(cmd, &a->prec);
  AddFrameworkOption(cmd, &a->framework);
  cmd->add_flag("--exclude-at-risk", a->exclude_at_risk,
                "leave out plans at risk of running out of memory (they fit only by releasing the caching allocator's cache)");
  cmd->add_option("--profile", a->profile, "hardware profile JSON (default: built-in for the GPU)");
  cmd->add_option("--csv", a->csv, "write the ranked table as CSV to FILE (the text is printed too), or with - print only the CSV")
      ->check(OutputFile(true));
  cmd->add_flag("--json", a->json, "print JSON");
  AddEmitOptions(cmd, &a->emit);
  AddWhatIfOption(cmd, &a->what_if);
  std::tie(a->straggler_opt, a->straggler_nic_opt) =
      AddStragglerOptions(cmd, &a->straggler, &a->straggler_nic,
                          ": also run each ranked plan with it, at the plan's stage where it costs most, and print "
                          "the steps");
  AddHtmlOption(cmd, &a->html);
  cmd->callback([a] { RunPlanCommand(*a); });
}

}  // namespace shardcast::cli
