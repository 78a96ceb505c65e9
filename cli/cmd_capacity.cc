#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "cli/options.h"
#include "cli/plan_common.h"
#include "common/error.h"
#include "common/text.h"
#include "report/capacity_report.h"
#include "report/megatron_args.h"
#include "models/loader.h"
#include "planner/capacity.h"
#include "simulator/profile.h"

namespace shardcast::cli {
namespace {

struct CapacityArgs {
  std::string model, tokens, seq_str;
  std::vector<std::string> options, prices, profiles;
  std::int64_t gbs = 0, seq = 0;
  double days = 0, mtbf_hours = 0, checkpoint_minutes = 0, restart_minutes = 0, energy_overhead = 1.3;
  double min_headroom_gib = 2.0;  // the same default as plan
  bool json = false, solve = false;
  std::string html;
  std::int64_t max_gpus = 16384;
  PrecisionArgs prec;
  std::string zero;   ///< --zero-stages
  OptimizerArgs opt;  ///< --optimizer, --zero3-impl and DeepSpeed's knobs for every plan
  std::string framework = "megatron-core";
  std::string schedules = "1f1b,interleaved";  ///< --schedules, as plan's
  /// --moe-load-imbalance, --moe-router-force-load-balancing, --moe-token-dispatcher-type, --cross-entropy
  ParallelConfig moe_routing;
  bool cross_entropy_given = false;  ///< --cross-entropy was given
  OffloadArgs offload;         ///< --offload-modules for every plan
};

/// "300e9", "300B", "1.5T", "2M" -> tokens.
double ParseTokens(const std::string& s) {
  if (s.empty()) throw InputError("command line: --tokens: missing, expected a token count such as 300e9 or 300B");
  double mult = 1;
  std::string num = s;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'B' || last == 'G' || last == 'T') {
    mult = last == 'K' ? 1e3 : last == 'M' ? 1e6 : (last == 'B' || last == 'G') ? 1e9 : 1e12;
    num = s.substr(0, s.size() - 1);
  }
  try {
    std::size_t pos = 0;
    const double v = std::stod(num, &pos);
    if (pos != num.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument("x");
    if (v * mult < 1) throw std::out_of_range("x");
    return v * mult;
  } catch (const std::exception&) {
    throw InputError("command line: --tokens: got \"" + s + "\", expected a number of tokens of at least 1, such as "
                     "300e9 or 300B");
  }
}

/// --price-per-gpu-hour GPU=USD: the GPU's preset name (or the name as given: a custom GPU of an
/// option's cluster file, checked against the options later) and the price, a decimal number
/// (exponent allowed: 1e1) of USD from kMinPriceUsd to kMaxPriceUsd. Throws InputError (exit 2) naming the value.
std::pair<std::string, double> ParsePrice(const std::string& p) {
  const auto eq = p.find('=');
  const std::string usd = eq == std::string::npos ? std::string() : p.substr(eq + 1);
  double v = 0;
  // Digits, a point and an exponent only: std::stod would also take hex ("0x10"), inf and nan.
  if (!usd.empty() && usd.find_first_not_of("0123456789.eE+-") == std::string::npos) {
    try {
      std::size_t used = 0;
      v = std::stod(usd, &used);
      if (used != usd.size()) v = 0;  // trailing text such as "2.5e"
    } catch (const std::exception&) {
      v = 0;  // out of range, such as 1e400
    }
  }
  if (eq == std::string::npos || !(v >= kMinPriceUsd && v <= kMaxPriceUsd)) {
    throw InputError(fmt::format("command line: --price-per-gpu-hour: got \"{}\", expected GPU=USD with USD a number "
                                 "from {:g} to {:g} such as h100-sxm=2.5", p, kMinPriceUsd, kMaxPriceUsd));
  }
  std::string gpu = p.substr(0, eq);
  try {
    gpu = LoadGpu(gpu).name;
  } catch (const InputError&) {
  }
  return {gpu, v};
}

/// --gpus-options: CLUSTER:N[,N...] each; with --solve, CLUSTER alone (gpus 0: to be solved for).
std::vector<CapacityOption> ParseOptions(const std::vector<std::string>& specs, bool solve) {
  std::vector<CapacityOption> out;
  for (const auto& spec : specs) {
    const auto colon = solve ? std::string::npos : spec.rfind(':');
    if (solve && spec.find(':') != std::string::npos) {
      throw InputError("command line: --gpus-options: got \"" + spec + "\" with --solve, expected a cluster without "
                       "counts (--solve finds the count; --max-gpus bounds it)");
    }
    if (!solve && (colon == std::string::npos || colon == 0 || colon + 1 >= spec.size())) {
      throw InputError("command line: --gpus-options: got \"" + spec +
                       "\", expected CLUSTER:N[,N...] such as dgx-a100:512,1024");
    }
    std::string cluster = solve ? spec : spec.substr(0, colon);
    // A preset named in any case is one cluster (DGX-H100 and dgx-h100).
    const auto presets = PresetNames(PresetKind::kCluster);
    if (std::find(presets.begin(), presets.end(), ToLower(cluster)) != presets.end()) cluster = ToLower(cluster);
    try {
      LoadCluster(cluster);
    } catch (const InputError& e) {
      std::string hint;
      for (const auto& name : PresetNames(PresetKind::kGpu)) {
        if (ToLower(cluster) != name) continue;
        std::vector<std::string> with;
        for (const auto& cn : PresetNames(PresetKind::kCluster)) {
          if (LoadCluster(cn).gpu.name == name) with.push_back(cn);
        }
        hint = "; '" + cluster + "' is a GPU: " +
               (with.empty() ? "no cluster preset has it, so write a cluster file for it (docs/inputs.md)"
                             : "clusters with it: " + Join(with, ", "));
      }
      throw InputError("command line: --gpus-options: " + std::string(e.what()) + hint);
    }
    if (solve) {
      for (const auto& prev : out) {
        if (prev.cluster == cluster) throw InputError("command line: --gpus-options: got " + cluster + " twice, expected each once");
      }
      out.push_back({cluster, 0});
      continue;
    }
    for (const auto& n : Split(spec.substr(colon + 1), ',')) {
      std::size_t pos = 0;
      long long v = 0;
      try {
        v = std::stoll(n, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (pos != n.size() || v <= 0 || v > kMaxGpus || n.empty()) {
        throw InputError("command line: --gpus-options: got \"" + n + "\" in \"" + spec +
                         "\", expected a positive GPU count up to " + std::to_string(kMaxGpus));
      }
      for (const auto& prev : out) {
        if (prev.cluster == cluster && prev.gpus == v) {
          throw InputError(fmt::format("command line: --gpus-options: got {}:{} twice, expected each option once",
                                       cluster, v));
        }
      }
      out.push_back({cluster, v});
    }
  }
  return out;
}

/// The capacity options the flags give (tokens, batch, deadline, prices, goodput, the plan's
/// precision, optimizer and routing); InputError for flags that conflict.
CapacityOptions CapacityOptionsFrom(const CapacityArgs& a, const Model& m) {
  CapacityOptions o;
  o.tokens = ParseTokens(a.tokens);
  o.global_batch_size = a.gbs;
  o.seq_length = a.seq > 0 ? a.seq : m.seq_length;
  if (a.days > 0) o.days = a.days;
  for (const auto& p : a.prices) {
    const auto [gpu, usd] = ParsePrice(p);
    if (!o.price_per_gpu_hour.emplace(gpu, usd).second) {
      throw InputError(fmt::format("command line: --price-per-gpu-hour: got a price for {} twice, expected one per GPU",
                                   gpu));
    }
  }
  if (a.mtbf_hours > 0) o.mtbf_hours = a.mtbf_hours;
  o.checkpoint_minutes = a.checkpoint_minutes;
  o.restart_minutes = a.restart_minutes;
  o.energy_overhead = a.energy_overhead;
  o.plan.min_headroom_bytes = a.min_headroom_gib * 1073741824.0;
  o.plan.schedules = ParseSchedules(a.schedules);
  ApplyPrecisionArgs(a.prec, &o.plan.base);
  CheckAttentionPrecision(o.plan.base.precision, o.plan.flash_attention,
                          "a 16-bit precision for capacity, whose search keeps flash attention (plan --no-flash-attention "
                          "searches fp32 training)");
  ApplySearchOptimizerArgs(a.opt, a.zero, &o.plan);
  CheckOptimizerPrecision(o.plan.optimizer_impl, o.plan.base.precision);
  o.plan.base.moe_load_imbalance = a.moe_routing.moe_load_imbalance;
  o.plan.base.moe_force_load_balancing = a.moe_routing.moe_force_load_balancing;
  o.plan.base.moe_dispatcher = a.moe_routing.moe_dispatcher;
  ApplySearchCrossEntropy(a.moe_routing.cross_entropy, a.cross_entropy_given, &o.plan);
  CheckMoeRoutingOptions(m, o.plan.base);
  ApplyOffloadArgs(a.offload, m, &o.plan.base);
  o.plan.megatron_core = a.framework == "megatron-core";
  // Goodput needs all three: without a checkpoint cost a failure would lose nothing (goodput
  // 100% however often GPUs fail), and checkpoint times without an MTBF would be ignored.
  if (a.mtbf_hours > 0 && !(a.checkpoint_minutes > 0)) {
    throw InputError(fmt::format("command line: --mtbf-hours: got {} with --checkpoint-minutes {:g} (or none), expected "
                                 "a positive time to write one checkpoint as well (goodput depends on it)",
                                 a.mtbf_hours, a.checkpoint_minutes));
  }
  if (!(a.mtbf_hours > 0) && (a.checkpoint_minutes > 0 || a.restart_minutes > 0)) {
    throw InputError("command line: --checkpoint-minutes/--restart-minutes: given without --mtbf-hours, expected "
                     "--mtbf-hours as well (the failure rate the checkpoints protect against)");
  }
  if (a.solve && !(a.days > 0)) {
    throw InputError("command line: --solve: given without --days, expected the deadline in days to solve for");
  }
  return o;
}

/// The clusters of the options, in order, once each.
std::vector<std::string> ClustersOf(const std::vector<CapacityOption>& options) {
  std::vector<std::string> clusters;
  for (const auto& opt : options) {
    if (std::find(clusters.begin(), clusters.end(), opt.cluster) == clusters.end()) clusters.push_back(opt.cluster);
  }
  return clusters;
}

/// InputError for a --price-per-gpu-hour GPU that no --gpus-options cluster has.
void CheckPricedGpusAreOffered(const std::vector<CapacityOption>& options, const CapacityOptions& o) {
  std::set<std::string> offered;  // GPU presets of the options
  for (const auto& opt : options) offered.insert(LoadCluster(opt.cluster).gpu.name);
  for (const auto& [gpu, usd] : o.price_per_gpu_hour) {
    if (!offered.count(gpu)) {
      throw InputError(fmt::format("command line: --price-per-gpu-hour: got \"{}={:g}\", expected a GPU that a "
                                   "--gpus-options cluster has ({}; its price would not be used otherwise)", gpu, usd,
                                   Join(std::vector<std::string>(offered.begin(), offered.end()), ", ")));
    }
  }
}

/// --profile [CLUSTER=]FILE into o.profiles: a profile describes one machine (its GPU and its
/// network), so it applies to one cluster of the options: the one named, or the only one with its
/// GPU. InputError naming the file or flag otherwise.
void AssignProfiles(const CapacityArgs& a, const std::vector<CapacityOption>& options, CapacityOptions* o) {
  const std::vector<std::string> clusters = ClustersOf(options);
  for (const auto& spec : a.profiles) {
    // CLUSTER=FILE when the spec starts with an option's cluster and "=" (the longest such, so
    // a cluster path may hold "="); else FILE, which may hold "=" too.
    std::string cluster, path = spec;
    for (const auto& c : clusters) {
      const bool prefix = spec.size() > c.size() && spec[c.size()] == '=' && ToLower(spec.substr(0, c.size())) == ToLower(c);
      if (prefix && c.size() > cluster.size()) cluster = c;
    }
    if (!cluster.empty()) {
      path = spec.substr(cluster.size() + 1);
      if (path.empty()) {
        throw InputError("command line: --profile: got \"" + spec + "\", expected a profile file after " + cluster + "=");
      }
    } else if (std::error_code ec; spec.find('=') != std::string::npos && !std::filesystem::exists(spec, ec)) {
      throw InputError(fmt::format("command line: --profile: got \"{}\", expected FILE or CLUSTER=FILE with CLUSTER "
                                   "one of the --gpus-options clusters ({})",
                                   spec, Join(clusters, ", ")));
    }
    HardwareProfile prof = LoadProfile(path);
    std::vector<std::string> with_gpu;
    for (const auto& c : clusters) {
      if (ProfileDescribesGpu(prof, LoadCluster(c).gpu)) with_gpu.push_back(c);
    }
    if (cluster.empty()) {
      if (with_gpu.empty()) {
        throw InputError(fmt::format("{}: /gpu: got \"{}\", expected the GPU of a --gpus-options cluster ({}); the "
                                     "profile would not be used",
                                     path, prof.gpu, Join(clusters, ", ")));
      }
      if (with_gpu.size() > 1) {
        throw InputError(fmt::format("command line: --profile: {} measured {}, which clusters {} all have; a profile "
                                     "describes one machine's GPU and network, expected CLUSTER={} naming which",
                                     path, prof.gpu, Join(with_gpu, ", "), path));
      }
      cluster = with_gpu.front();
    } else if (std::find(with_gpu.begin(), with_gpu.end(), cluster) == with_gpu.end()) {
      throw InputError(fmt::format("{}: /gpu: got \"{}\", expected {}'s GPU {}", path, prof.gpu, cluster,
                                   LoadCluster(cluster).gpu.name));
    }
    if (o->profiles.count(cluster)) {
      throw InputError(fmt::format("command line: --profile: {} and {} both for cluster {}, expected one profile each",
                                   o->profiles.at(cluster).first, path, cluster));
    }
    std::int64_t most = 0;  // the largest GPU count of the cluster's options
    for (const auto& opt : options) {
      if (opt.cluster == cluster) most = std::max(most, a.solve ? a.max_gpus : opt.gpus);
    }
    WarnIfProfileIsAnotherMachine(prof, path, LoadCluster(cluster), most);
    o->profiles.emplace(cluster, std::make_pair(path, std::move(prof)));
  }
}

void RunCapacityCommand(const CapacityArgs& a) {
  const Model m = LoadModel(a.model, "--model");
  CapacityOptions o = CapacityOptionsFrom(a, m);
  const auto options = ParseOptions(a.options, a.solve);
  CheckPricedGpusAreOffered(options, o);
  AssignProfiles(a, options, &o);
  const std::vector<std::string> clusters = ClustersOf(options);
  std::vector<SolveResult> solved;
  std::vector<CapacityRow> rows;
  if (a.solve) {
    for (const auto& c : clusters) {
      solved.push_back(SolveForDeadline(m, c, o, a.max_gpus));
    }
    // The same order as without --solve (feasible, meeting the deadline, cheapest first), for
    // the counts found and the table below them alike.
    std::stable_sort(solved.begin(), solved.end(),
                     [](const SolveResult& x, const SolveResult& y) { return CapacityRowBefore(x.row, y.row); });
    for (const auto& s : solved) rows.push_back(s.row);
  } else {
    rows = RunCapacity(m, options, o);
  }
  if (!a.html.empty()) {
    Json data = CapacityJson(m, o, rows, solved);
    data["kind"] = "capacity";
    WriteHtmlReport(a.html, fmt::format("shardcast capacity: {} on {} tokens", m.name, FormatCount(o.tokens)),
                    fmt::format("global batch {} x sequence {}{}", o.global_batch_size, o.seq_length,
                                o.days ? fmt::format(", deadline {:g} days", *o.days) : std::string()),
                    data);
  }
  if (a.json) {
    std::cout << WithIntegerBytes(CapacityJson(m, o, rows, solved)).dump(2) << "\n";
    return;
  }
  if (!solved.empty()) WriteSolve(std::cout, o, solved);
  WriteCapacityText(std::cout, m, o, rows);
}

}  // namespace

void RegisterCapacity(CLI::App& app) {
  auto a = std::make_shared<CapacityArgs>();
  auto* cmd = app.add_subcommand(
      "capacity",
      "How many GPUs of which type: time to train, GPU-hours, cost and energy for each option.\n"
      "Example: shardcast capacity --model gpt3-175b --tokens 300B --gbs 1536 \\\n"
      "           --gpus-options dgx-a100:512,1024,2048 dgx-h100:256,512,1024 dgx-b200:128,256 --days 60");
  cmd->add_option("--model", a->model, "model preset name or JSON / HF config.json path")->required();
  cmd->add_option("--tokens", a->tokens, "tokens to train, e.g. 300e9 or 300B")->required();
  cmd->add_option("--gpus-options", a->options, "CLUSTER:N[,N...] (several allowed)")->required()->expected(1, -1);
  AddPositive(cmd, "--gbs,--global-batch-size", a->gbs, "global batch size (sequences)", kMaxGlobalBatchSize)->required();
  AddPositive(cmd, "--seq,--seq-length", a->seq, "sequence length (default: the model's)", kMaxSeq);
  cmd->add_option("--min-headroom", a->min_headroom_gib, "GiB each plan must leave free per GPU beyond what the caching allocator reserves (default 2, "
                  "as plan)")
      ->check(NonNegativeNumber());
  cmd->add_option("--days", a->days, "deadline in days; marks options that meet it")->check(BoundedNumber(1e-6, 1e6));
  cmd->add_option("--price-per-gpu-hour", a->prices, "GPU=USD overrides, e.g. h100-sxm=2.5")->expected(1, -1);
  cmd->add_option("--mtbf-hours", a->mtbf_hours, "mean time between failures of one GPU, hours")->check(PositiveNumber());
  cmd->add_option("--checkpoint-minutes", a->checkpoint_minutes, "time to write a checkpoint")->check(NonNegativeNumber());
  cmd->add_option("--restart-minutes", a->restart_minutes, "time to restart after a failure (default: checkpoint time)")
      ->check(NonNegativeNumber());
  cmd->add_option("--energy-overhead", a->energy_overhead, "facility and host power over GPU power (default 1.3)")
      ->check(BoundedNumber(1.0, 10.0));
  cmd->add_option("--profile", a->profiles,
                  "[CLUSTER=]FILE: measured hardware profile (shardcast calibrate) for the options of CLUSTER, or of "
                  "the one cluster with its GPU; several allowed, one per cluster (default: built-in)")
      ->expected(1, -1);
  AddPrecisionOptions(cmd, &a->prec);
  AddSearchOptimizerOptions(cmd, &a->zero, &a->opt);
  AddFrameworkOption(cmd, &a->framework);
  cmd->add_option("--schedules", a->schedules,
                  "comma list of 1f1b,interleaved,zb-h1,gpipe every option's plan searches (default 1f1b,interleaved, "
                  "upstream Megatron-LM's; zb-h1 is the zero-bubble fork's)");
  AddMoeRoutingOptions(cmd, &a->moe_routing.moe_load_imbalance, &a->moe_routing.moe_force_load_balancing);
  AddMoeDispatcherOption(cmd, &a->moe_routing.moe_dispatcher);
  AddCrossEntropyOption(cmd, &a->moe_routing.cross_entropy, &a->cross_entropy_given);
  AddOffloadOptions(cmd, &a->offload);
  cmd->add_flag("--solve", a->solve,
                "with --days: for each --gpus-options cluster (given without counts), the smallest GPU count (whole "
                "nodes) whose best plan meets the deadline, with its cost");
  auto* max_gpus =
      AddPositive(cmd, "--max-gpus", a->max_gpus, "with --solve: the largest GPU count to search (default 16384)", kMaxGpus);
  cmd->add_flag("--json", a->json, "print JSON");
  AddHtmlOption(cmd, &a->html);
  cmd->callback([a, max_gpus] {
    if (max_gpus->count() > 0 && !a->solve) {
      throw InputError("command line: --max-gpus: given without --solve, expected --solve (only the search for a count "
                       "uses it)");
    }
    RunCapacityCommand(*a);
  });
}

}  // namespace shardcast::cli
