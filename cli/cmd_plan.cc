#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>

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

namespace shardcast::cli {
namespace {

struct PlanArgs {
  std::string model, cluster, profile, csv, objective = "throughput", schedules = "1f1b,interleaved,zb-h1",
              recompute = "none,selective,full", zero = "0,1", fix;
  std::int64_t gpus = 0, gbs = 0, seq = 0, max_tp = 0, max_mbs = 16;
  int top = 10, threads = 0;
  double min_headroom_gib = 2.0;
  bool json = false, no_flash = false, exclude_at_risk = false;
  PrecisionArgs prec;
  std::string framework = "megatron-core";
  EmitArgs emit;
  std::vector<std::string> what_if;
  std::string html;
};

/// A cost or energy figure, or an empty CSV cell when the GPU file has no price or power (0).
std::string Positive(double v) { return v > 0 ? fmt::format("{}", v) : std::string(); }

/// The PP cell: pp, with "e" for the embedding and loss in layer slots and "u" for first/last
/// stage layer counts (the table's note lists them).
std::string PpCell(const ParallelConfig& c) {
  return std::to_string(c.pp) + (c.embedding_slots ? "e" : c.first_stage_layers >= 0 || c.last_stage_layers >= 0 ? "u" : "");
}

/// The EP cell: ep, and "/etp" when the experts are also tensor-parallel; "-" for a dense model.
std::string EpCell(const ParallelConfig& c) {
  if (c.etp <= 0 && c.ep == 1) return "-";
  return c.expert_tp() > 1 ? fmt::format("{}/{}", c.ep, c.expert_tp()) : std::to_string(c.ep);
}

/// One table row; with the cost or energy objective, the ranked quantity is a column too.
std::string PlanRow(std::size_t rank, const Plan& p, double usable, Objective objective) {
  const auto& c = p.config;
  const auto& r = p.result;
  const std::string ranked = objective == Objective::kCost     ? fmt::format(" {:>10.4g}", p.usd_per_million_tokens)
                             : objective == Objective::kEnergy ? fmt::format(" {:>10.4g}", p.joules_per_token)
                                                               : "";
  return fmt::format("{:>4}  {:>2} {:>3} {:>2} {:>5} {:>4} {:>2} {:>3}  {:<11} {:<9} {:<3} {:>4}  {:>10} {:>11.0f}{} {:>6} {:>6}  {:>10} {:>10}{}",
                     rank, c.tp, PpCell(c), c.cp, EpCell(c), c.dp, c.vp, c.micro_batch_size, ToString(c.schedule), ToString(c.recompute),
                     c.tp_comm_overlap ? "y+o" : c.sequence_parallel ? "y" : "n", c.zero_stage, FormatSeconds(r.step_time_s), r.tokens_per_s, ranked,
                     fmt::format("{:.1f}%", 100 * r.mfu_causal), fmt::format("{:.1f}%", 100 * r.bubble_fraction),
                     FormatGiB(r.peak_memory_bytes), FormatGiB(usable - r.peak_memory_bytes),
                     r.memory_at_risk ? "  at risk" : "");
}

/// The plan a result recommends: the best not at risk, else the best (null when nothing fits).
const Plan* BestOf(const PlanResult& r) {
  return r.best_not_at_risk ? &*r.best_not_at_risk : r.plans.empty() ? nullptr : &r.plans.front();
}

/// The recommendation on the --what-if hardware beside the baseline's.
void PrintPlanWhatIf(const std::vector<std::string>& changes, const HardwareProfile& prof, const WhatIfHardware& hw,
                     const Plan& base, const Plan* best) {
  std::cout << "\nWhat if " << Join(changes, ", ") << ":\n";
  for (std::size_t i = prof.adjustments.size(); i < hw.prof.adjustments.size(); ++i) {
    std::cout << "  " << hw.prof.adjustments[i] << "\n";
  }
  if (!best) {
    std::cout << "  no candidate fits on the what-if hardware\n";
    return;
  }
  std::cout << "  baseline: " << base.config.Summary() << "\n  what-if:  " << best->config.Summary()
            << (best->config.Summary() == base.config.Summary() ? " (the same configuration)\n" : "\n");
  WriteBeside(std::cout, base.result, best->result, "baseline best", "what-if best");
}

void RunPlanCommand(const PlanArgs& a) {
  CheckCsvOption(a.csv, a.json);
  const Model m = LoadModel(a.model);
  const Cluster cl = LoadCluster(a.cluster);
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
  o.zero_stages = ParseZeroStages(a.zero);
  o.fixed = ParseFix(a.fix);
  ApplyFixedToSearch(&o);
  o.threads = a.threads;
  o.flash_attention = !a.no_flash;
  ApplyPrecisionArgs(a.prec, &o.base);
  o.megatron_core = a.framework == "megatron-core";
  RequirePrecision(cl.gpu, o.base, "command line");
  o.min_headroom_bytes = a.min_headroom_gib * 1073741824.0;
  o.exclude_memory_at_risk = a.exclude_at_risk;
  const HardwareProfile prof =
      WithGemmRateFor(a.profile.empty() ? DefaultProfile(cl) : LoadProfile(a.profile), cl, o.base.precision);
  if (!a.profile.empty()) WarnIfProfileIsAnotherMachine(prof, a.profile, cl, o.gpus);
  const bool tty = ::isatty(2) != 0 && !a.json;
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = [&](std::size_t done, std::size_t total) {
    if (!tty) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (el < 1.0 && done < total) return;
    const int w = 30;
    const int filled = total ? static_cast<int>(w * done / total) : w;
    std::fprintf(stderr, "\r  [%s%s] %zu/%zu candidates, %.1f s", std::string(static_cast<std::size_t>(filled), '=').c_str(),
                 std::string(static_cast<std::size_t>(w - filled), ' ').c_str(), done, total, el);
    if (done == total) std::fprintf(stderr, "\n");
  };
  const std::vector<WhatIf> what_if = ParseWhatIfs(a.what_if);
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
  const Plan* recommended = BestOf(r);
  const std::optional<LaunchConfig> launch =
      recommended ? EmitIfAsked(a.emit, m, recommended->config, cl, o.gpus, recommended->result) : std::nullopt;
  std::size_t recommended_rank = 0;
  for (std::size_t i = 0; recommended && i < r.plans.size(); ++i) {
    if (r.plans[i].config.Summary() == recommended->config.Summary()) recommended_rank = i + 1;
  }

  if (!a.csv.empty()) {
    // `recommended` marks the plan the text recommends (the best not at risk of running out of
    // memory); no row has it when that plan ranks below --top.
    std::string csv = "rank,tp,pp,dp,vp,micro_batch_size,global_batch_size,schedule,recompute,sequence_parallel,tp_comm_overlap,"
                      "zero_stage,"
                      "step_time_s,tokens_per_s,mfu,bubble_fraction,peak_memory_bytes,memory_at_risk,recommended,"
                      "usd_per_million_tokens,joules_per_token,cp,cp_comm_type,embedding_slots,"
                      "decoder_first_pipeline_num_layers,decoder_last_pipeline_num_layers,mfu_causal,ep,etp\n";
    for (std::size_t i = 0; i < r.plans.size(); ++i) {
      const auto& p = r.plans[i];
      const auto& c = p.config;
      auto layers = [](std::int64_t n) { return n >= 0 ? std::to_string(n) : std::string(); };
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", i + 1, c.tp, c.pp, c.dp, c.vp,
                         c.micro_batch_size, c.global_batch_size, ToString(c.schedule), ToString(c.recompute),
                         c.sequence_parallel ? "true" : "false", c.tp_comm_overlap ? "true" : "false", c.zero_stage, p.result.step_time_s,
                         p.result.tokens_per_s, p.result.mfu, p.result.bubble_fraction,
                         static_cast<std::int64_t>(std::llround(p.result.peak_memory_bytes)),
                         p.result.memory_at_risk ? "true" : "false", i + 1 == recommended_rank ? "true" : "false",
                         Positive(p.usd_per_million_tokens), Positive(p.joules_per_token), c.cp, ToString(c.cp_comm),
                         c.embedding_slots ? "true" : "false", layers(c.first_stage_layers), layers(c.last_stage_layers),
                         p.result.mfu_causal, c.ep, c.expert_tp());
    }
    if (WriteCsvOption(a.csv, csv)) {
      // The CSV is all of standard output: say on standard error when it has no rows, and why.
      if (r.plans.empty()) {
        std::cerr << (r.at_risk_excluded > 0 ? "shardcast: no candidate fits without being at risk of running out of "
                                               "memory\n"
                                             : "shardcast: no candidate fits\n");
        for (const auto& s : r.advice) std::cerr << "  - " << s << "\n";
      } else if (recommended_rank == 0 && recommended) {
        std::cerr << "shardcast: the recommended plan (" << recommended->config.Summary()
                  << ") ranks below --top; every listed plan is at risk of running out of memory\n";
      }
      return;
    }
  }
  if (a.json || !a.html.empty()) {
    Json j;
    j["model"] = m.name;
    j["cluster"] = cl.name;
    j["profile"] = a.profile.empty() ? "built-in default" : a.profile;
    j["gpus"] = o.gpus;
    j["global_batch_size"] = o.global_batch_size;
    j["objective"] = ToString(o.objective);
    j["candidates_generated"] = r.candidates_generated;
    j["candidates_simulated"] = r.candidates_simulated;
    j["rejected"] = r.rejected;
    j["not_generated"] = r.not_generated;
    j["min_headroom_bytes"] = o.min_headroom_bytes;
    j["plans"] = Json::array();
    // A plan: simulate's keys, its Megatron-LM arguments, cost and energy (null without a price
    // or power) and the known bias.
    auto plan_json = [&](const Plan& p) {
      auto positive = [](double v) { return v > 0 ? Json(v) : Json(nullptr); };
      Json pj = ResultToJson(p.result, m, p.config, cl, o.gpus);
      pj["config_summary"] = p.config.Summary();
      pj["megatron_arguments"] = MegatronArguments(p.config, m);
      pj["usd_per_million_tokens"] = positive(p.usd_per_million_tokens);
      pj["joules_per_token"] = positive(p.joules_per_token);
      pj["known_bias"] = KnownBiasJson(p.config);
      return pj;
    };
    for (const auto& p : r.plans) j["plans"].push_back(plan_json(p));
    if (recommended) {
      j["recommended"] = plan_json(*recommended);
      j["recommended_rank"] = recommended_rank > 0 ? Json(recommended_rank) : Json(nullptr);
    } else {
      j["recommended"] = nullptr;  // nothing fits (docs/planner.md)
      j["recommended_rank"] = nullptr;
    }
    if (r.plans.empty()) j["advice"] = r.advice;
    if (!a.emit.format.empty()) j["launch"] = launch ? LaunchJson(*launch, a.emit.file) : Json(nullptr);
    if (r_changed) {
      const Plan* best = BestOf(*r_changed);
      SimulationResult none;  // nothing fits
      none.feasible = false;
      j["what_if"] = BesideJson(recommended ? recommended->result : none, best ? best->result : none);
      j["what_if"]["changes"] = a.what_if;
      j["what_if"]["adjustments"] = hw->prof.adjustments;
      j["what_if"]["recommended"] = best ? plan_json(*best) : Json(nullptr);
    }
    if (!a.html.empty()) {
      Json data = j;
      data["kind"] = "plan";
      data["memory_limit_bytes"] = cl.gpu.memory_bytes - o.min_headroom_bytes;  // usable less the headroom
      data["points"] = Json::array();
      for (const auto& pt : r.points) {
        data["points"].push_back({{"config", pt.config}, {"step_time_s", pt.step_time_s},
                                  {"peak_memory_bytes", pt.peak_memory_bytes}, {"fits", pt.fits}, {"at_risk", pt.at_risk}});
      }
      WriteHtmlReport(a.html, fmt::format("shardcast plan: {} on {} x {}", m.name, o.gpus, cl.gpu.display_name),
                      fmt::format("global batch {}, sequence {}, objective {}; {} candidates generated, {} simulated",
                                  o.global_batch_size, o.seq_length, ToString(o.objective), r.candidates_generated,
                                  r.candidates_simulated),
                      data);
    }
    if (a.json) {
      std::cout << WithIntegerBytes(j).dump(2) << "\n";
      return;
    }
  }
  std::cout << fmt::format("Plan for {} on {} x {} ({}), global batch {}, seq {}, objective {}\n", m.name, o.gpus,
                           cl.gpu.display_name, cl.name, o.global_batch_size, o.seq_length, ToString(o.objective));
  std::size_t set_aside = 0;
  for (const auto& [reason, count] : r.rejected) set_aside += count;
  std::cout << fmt::format("Candidates: {} generated in {:.2f} s = {} set aside + {} simulated that fit "
                           "(plans need {} free per GPU):\n",
                           r.candidates_generated, elapsed, set_aside, r.candidates_generated - set_aside,
                           FormatGiB(o.min_headroom_bytes));
  for (const auto& [reason, count] : r.rejected) std::cout << fmt::format("  {:>7}  {}\n", count, reason);
  std::cout << fmt::format("  ({} simulated in all)\n", r.candidates_simulated);
  if (!r.not_generated.empty()) {
    std::cout << "Not generated:\n";
    for (const auto& [reason, count] : r.not_generated) std::cout << fmt::format("  {:>7}  {}\n", count, reason);
  }
  if (r.plans.empty()) {
    std::cout << (r.at_risk_excluded > 0 ? "\nNo candidate fits without being at risk of running out of memory.\n"
                                         : "\nNo candidate fits.\n");
    for (const auto& s : r.advice) std::cout << "  - " << s << "\n";
    return;
  }
  const std::string ranked_header = o.objective == Objective::kCost     ? fmt::format(" {:>10}", "$/M tok")
                                    : o.objective == Objective::kEnergy ? fmt::format(" {:>10}", "J/token")
                                                                        : "";
  std::cout << fmt::format("\n{:>4}  {:>2} {:>3} {:>2} {:>5} {:>4} {:>2} {:>3}  {:<11} {:<9} {:<3} {:>4}  {:>10} {:>11}{} {:>6} {:>6}  {:>10} {:>10}\n",
                           "rank", "TP", "PP", "CP", "EP", "DP", "VP", "mbs", "schedule", "recompute", "SP", "ZeRO", "step", "tokens/s",
                           ranked_header, "MFU", "bubble", "peak mem", "headroom");
  for (std::size_t i = 0; i < r.plans.size(); ++i) std::cout << PlanRow(i + 1, r.plans[i], cl.gpu.memory_bytes, o.objective) << "\n";
  std::cout << "  MFU: model FLOPs with causal attention (half the s^2 matrix, as current Megatron-LM counts it); "
               "--json has both conventions\n";
  std::set<std::string> splits;
  for (const auto& p : r.plans) {
    const std::string name = PipelineSplitName(p.config);
    if (!name.empty()) splits.insert(fmt::format("PP {}: {}", PpCell(p.config), name));
  }
  for (const auto& sp : splits) {
    std::cout << "  " << sp
              << (sp.find("slots") != std::string::npos
                      ? " (the embedding and the loss take a layer's place: (L + 2) / pp slots per stage)\n"
                      : " (Megatron-LM's --decoder-first/last-pipeline-num-layers; the other stages share the rest)\n");
  }
  std::set<std::string> modules;
  for (const auto& p : r.plans) {
    if (p.config.recompute == Recompute::kSelective && p.config.recompute_modules != kRecomputeCoreAttn) {
      std::string mods = RecomputeModulesName(p.config.recompute_modules);
      std::replace(mods.begin(), mods.end(), ',', ' ');
      modules.insert(mods);
    }
  }
  for (const auto& mods : modules) {
    std::cout << "  recompute selective: --recompute-modules " << mods
              << " (Megatron-Core's MoE choice: the experts' activation and the norms rerun, their outputs freed)\n";
  }
  const Plan& best = r.plans.front();
  std::vector<std::string> not_searched, widen;
  if (std::find(o.zero_stages.begin(), o.zero_stages.end(), 3) == o.zero_stages.end()) {
    not_searched.push_back("ZeRO-2/3 (FSDP), which Megatron runs only without pipeline parallelism");
    widen.push_back("--zero-stages 0,1,2,3");
  }
  if (std::find(o.recomputes.begin(), o.recomputes.end(), Recompute::kFull) == o.recomputes.end()) {
    not_searched.push_back("full recompute");
    widen.push_back("--recompute none,selective,full");
  }
  if (!not_searched.empty()) {
    std::cout << "\nNot searched: " << Join(not_searched, "; ") << " (widen with " << Join(widen, " and ") << ").\n";
  }
  std::cout << "Plans a few percent apart are within the model's error on published runs (docs/accuracy.md).\n";
  std::cout << fmt::format(
      "\nPeak memory counts allocated tensors plus a framework overhead; PyTorch's caching allocator reserves\n"
      "more (--min-headroom keeps a margin). \"at risk\": the peak times {} (the smallest measured nvidia-smi /\n"
      "predicted ratio of the published BLOOM runs, which span {:.2f}-{:.2f}) exceeds usable memory. How far\n"
      "predictions are from published runs, and where they are least reliable (runs without recompute, memory\n"
      "near the limit): shardcast validate, docs/accuracy.md.\n",
      kMeasuredOverPredictedPeakMin, kMeasuredOverPredictedPeakMin, kMeasuredOverPredictedPeakMax);
  const Plan& chosen = *recommended;
  const char* what = o.objective == Objective::kCost     ? "cost per token"
                     : o.objective == Objective::kEnergy ? "energy per token"
                                                         : "step time";
  const double worse = 100 * (ObjectiveValue(chosen, o.objective) / ObjectiveValue(best, o.objective) - 1);
  std::string label = "Best plan";
  if (!r.best_not_at_risk) {
    std::cout << "\nEvery plan that fits is at risk of running out of memory; the best of them follows (more GPUs,\n"
                 "recompute or a higher ZeRO stage lower the peak).\n";
  } else if (recommended_rank == 1) {
    // The best plan is not at risk.
  } else if (recommended_rank > 1) {
    std::cout << fmt::format("\nRank 1 is at risk of running out of memory; rank {} is the best plan that is not ({} "
                             "{:+.1f}%).\n", recommended_rank, what, worse);
    label = fmt::format("Best plan not at risk (rank {})", recommended_rank);
  } else {
    std::cout << fmt::format("\nEvery plan shown is at risk of running out of memory; the best plan that is not ranks "
                             "below them ({} {:+.1f}%): {}\n", what, worse, chosen.config.Summary());
    label = "Best plan not at risk (not in the table)";
  }
  if (o.objective != Objective::kThroughput) {
    std::cout << fmt::format("\n{} by {}: {:.4g} {}\n", label, ToString(o.objective),
                             ObjectiveValue(chosen, o.objective),
                             o.objective == Objective::kCost ? "USD per million tokens" : "J per token");
  }
  std::cout << "\n" << label << " as Megatron-LM arguments:\n  " << MegatronArguments(chosen.config, m) << "\n";
  if (const std::string bias = KnownBias(chosen.config); !bias.empty()) std::cout << "  (" << bias << ")\n";
  std::vector<std::string> unexpressed;  // plans set nothing simulate has no flag for
  std::cout << "\nDetails: shardcast simulate --model " << a.model << " --cluster " << a.cluster << " "
            << (a.profile.empty() ? "" : "--profile " + a.profile + " ")
            << SimulateFlags(chosen.config, m, o.gpus, &unexpressed) << "\n";
  for (const auto& u : unexpressed) std::cout << "  (not reproduced: " << u << ")\n";
  if (launch) WriteLaunch(std::cout, *launch, a.emit.file, label);
  if (r_changed) PrintPlanWhatIf(a.what_if, prof, *hw, chosen, BestOf(*r_changed));
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
  cmd->add_option("--top", a->top, "plans to show")->check(CLI::Range(1, 1000));
  cmd->add_option("--objective", a->objective, "rank by throughput|cost|energy")
      ->transform(CLI::IsMember({"throughput", "cost", "energy"}, CLI::ignore_case));
  AddPositive(cmd, "--max-tp", a->max_tp, "largest tensor-parallel size (default: GPUs per node)", kMaxParallelSize);
  AddPositive(cmd, "--max-mbs", a->max_mbs, "largest micro-batch size (default 16)", kMaxMicroBatchSize);
  cmd->add_option("--min-headroom", a->min_headroom_gib,
                  "GiB a plan must leave free per GPU for fragmentation and spikes (default 2)")
      ->check(CLI::Range(0.0, 1e4));
  cmd->add_option("--schedules", a->schedules, "comma list of 1f1b,interleaved,zb-h1,gpipe");
  cmd->add_option("--recompute", a->recompute, "comma list of none,selective,full");
  cmd->add_option("--zero-stages", a->zero, "comma list of ZeRO stages to consider (default 0,1)");
  cmd->add_option("--fix", a->fix,
                  "fix dimensions, e.g. tp=8,pp=8,sp=true,schedule=interleaved (keys tp, pp, vp, mbs, zero, sp, "
                  "tp_comm_overlap, recompute, schedule)");
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--no-flash-attention", a->no_flash, "unfused attention (saves s*s scores)");
  AddPrecisionOptions(cmd, &a->prec);
  AddFrameworkOption(cmd, &a->framework);
  cmd->add_flag("--exclude-at-risk", a->exclude_at_risk,
                "leave out plans at risk of running out of memory (peak x 1.17 over usable memory)");
  cmd->add_option("--profile", a->profile, "hardware profile JSON (default: built-in for the GPU)");
  cmd->add_option("--csv", a->csv, "write the ranked table as CSV to FILE (the text is printed too), or with - print only the CSV")
      ->check(OutputFile(true));
  cmd->add_flag("--json", a->json, "print JSON");
  AddEmitOptions(cmd, &a->emit);
  AddWhatIfOption(cmd, &a->what_if);
  AddHtmlOption(cmd, &a->html);
  cmd->callback([a] { RunPlanCommand(*a); });
}

}  // namespace shardcast::cli
