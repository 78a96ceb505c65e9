#include "report/plan_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/csv.h"
#include "common/text.h"
#include "report/capacity_report.h"
#include "report/megatron_args.h"
#include "report/text.h"
#include "simulator/cost_model.h"

namespace shardcast {
namespace {

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

/// The ZeRO cell: the stage, and "/S" with hybrid sharding over groups of S ranks.
std::string ZeroCell(const ParallelConfig& c) {
  return c.hybrid_shard() ? fmt::format("{}/{}", c.zero_stage, c.dp_shard) : std::to_string(c.zero_stage);
}

/// The recompute column: none, selective, full, or partial full recompute as firstN (the first N
/// layers of each chunk) or 1inN (one layer in N of a rank).
std::string RecomputeCell(const ParallelConfig& c) {
  if (!c.PartialRecompute()) return ToString(c.recompute);
  return c.recompute_block_layers >= 0 ? fmt::format("first{}", c.recompute_block_layers)
                                       : fmt::format("1in{}", c.recompute_layer_interval);
}

/// One table row; with the cost or energy objective, the ranked quantity is a column too.
std::string PlanRow(std::size_t rank, const Plan& p, double usable, Objective objective) {
  const auto& c = p.config;
  const auto& r = p.result;
  // Four significant digits, trailing zeros kept (a column of equal precision, small values too).
  const std::string ranked = objective == Objective::kCost     ? fmt::format(" {:>#10.4g}", p.usd_per_million_tokens)
                             : objective == Objective::kEnergy ? fmt::format(" {:>#10.4g}", p.joules_per_token)
                                                               : "";
  // Headroom: usable memory less what the caching allocator reserves (its replay).
  return fmt::format("{:>4}  {:>2} {:>3} {:>2} {:>5} {:>4} {:>2} {:>3}  {:<11} {:<9} {:<3} {:>4}  {:>10} {:>11.0f}{} {:>6} {:>6}  {:>10} {:>10} {:>10}{}",
                     rank, c.tp, PpCell(c), c.cp, EpCell(c), c.dp, c.vp, c.micro_batch_size, ToString(c.schedule), RecomputeCell(c),
                     c.tp_comm_overlap ? "y+o" : c.sequence_parallel ? "y" : "n", ZeroCell(c), FormatSeconds(r.step_time_s), r.tokens_per_s, ranked,
                     fmt::format("{:.1f}%", 100 * r.mfu_causal), fmt::format("{:.1f}%", 100 * r.bubble_fraction),
                     FormatGiB(r.peak_memory_bytes), FormatGiB(r.peak_reserved_bytes), FormatGiB(usable - r.peak_reserved_bytes),
                     r.memory_at_risk ? "  at risk" : "");
}

}  // namespace

const Plan* RecommendedPlan(const PlanResult& r) {
  return r.best_not_at_risk ? &*r.best_not_at_risk : r.plans.empty() ? nullptr : &r.plans.front();
}

std::size_t RankOf(const PlanResult& r, const Plan* p) {
  for (std::size_t i = 0; p && i < r.plans.size(); ++i) {
    if (r.plans[i].config.Summary() == p->config.Summary()) return i + 1;
  }
  return 0;
}

std::string PlanCsv(const PlanView& v) {
  const auto& r = v.r;
  const std::size_t recommended_rank = v.recommended_rank;
  std::string csv = "rank,tp,pp,dp,vp,micro_batch_size,global_batch_size,schedule,recompute,sequence_parallel,tp_comm_overlap,"
                    "zero_stage,"
                    "step_time_s,tokens_per_s,mfu,bubble_fraction,peak_memory_bytes,memory_at_risk,recommended,"
                    "usd_per_million_tokens,joules_per_token,cp,cp_comm_type,embedding_slots,"
                    "decoder_first_pipeline_num_layers,decoder_last_pipeline_num_layers,mfu_causal,ep,etp,"
                    "peak_reserved_memory_bytes,dp_shard,optimizer_impl,zero3_impl,precision,mfu_peak_precision,"
                    "cluster,gpus,recompute_block_layers,recompute_layer_interval\n";
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const auto& p = r.plans[i];
    const auto& c = p.config;
    auto layers = [](std::int64_t n) { return n >= 0 ? std::to_string(n) : std::string(); };
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},"
                       "{},{},{},{},{},{}\n", i + 1, c.tp, c.pp, c.dp, c.vp,
                       c.micro_batch_size, c.global_batch_size, ToString(c.schedule), ToString(c.recompute),
                       c.sequence_parallel ? "true" : "false", c.tp_comm_overlap ? "true" : "false", c.zero_stage, p.result.step_time_s,
                       p.result.tokens_per_s, p.result.mfu, p.result.bubble_fraction,
                       static_cast<std::int64_t>(std::llround(p.result.peak_memory_bytes)),
                       p.result.memory_at_risk ? "true" : "false", i + 1 == recommended_rank ? "true" : "false",
                       Positive(p.usd_per_million_tokens), Positive(p.joules_per_token), c.cp, ToString(c.cp_comm),
                       c.embedding_slots ? "true" : "false", layers(c.first_stage_layers), layers(c.last_stage_layers),
                       p.result.mfu_causal, v.m.moe.enabled() ? std::to_string(c.ep) : std::string(),
                       v.m.moe.enabled() ? std::to_string(c.expert_tp()) : std::string(),
                       static_cast<std::int64_t>(std::llround(p.result.peak_reserved_bytes)),
                       c.zero_stage >= 1 ? std::to_string(c.shard_dp()) : std::string(), ToString(c.optimizer_impl),
                       c.zero_stage >= 3 ? ToString(c.zero3_impl) : "", ToString(c.precision),
                       ToString(MfuPeakPrecision(c.precision)), CsvQuote(v.cl.name), v.o.gpus,
                       c.PartialRecompute() ? layers(c.recompute_block_layers) : std::string(),
                       c.PartialRecompute() && c.recompute_layer_interval > 0 ? std::to_string(c.recompute_layer_interval)
                                                                              : std::string());
  }
  return csv;
}

Json PlanToJson(const PlanView& v, const Plan& p) {
  auto positive = [](double x) { return x > 0 ? Json(x) : Json(nullptr); };
  Json pj = ResultToJson(p.result, v.m, p.config, v.cl, v.o.gpus);
  pj["config_summary"] = p.config.Summary();
  pj["megatron_arguments"] = MegatronArguments(p.config, v.m);
  pj["notes"] = SimulationNotes(p.result, v.m, p.config, v.cl, v.o.gpus);
  pj["usd_per_million_tokens"] = positive(p.usd_per_million_tokens);
  pj["joules_per_token"] = positive(p.joules_per_token);
  pj["known_bias"] = KnownBiasJson(p.config);
  return pj;
}

Json PlanJson(const PlanView& v) {
  const PlanOptions& o = v.o;
  const PlanResult& r = v.r;
  Json j;
  j["model"] = v.m.name;
  j["cluster"] = v.cl.name;
  j["profile"] = v.profile + (v.profile_adjustments.empty() ? "" : "; adjusted: " + Join(v.profile_adjustments, "; "));
  j["gpus"] = o.gpus;
  j["global_batch_size"] = o.global_batch_size;
  j["objective"] = ToString(o.objective);
  const double price = PlanPrice(o, v.cl);
  j["price_usd_per_gpu_hour"] = price > 0 ? Json(price) : Json(nullptr);
  j["zero_stages"] = o.zero_stages;
  j["optimizer_impl"] = ToString(o.optimizer_impl);
  j["zero3_impl"] = ToString(o.zero3_impl);
  j["candidates_generated"] = r.candidates_generated;
  j["partial_recompute_candidates"] = r.partial_recompute_candidates;
  j["candidates_simulated"] = r.candidates_simulated;
  j["candidates_replayed"] = r.candidates_replayed;
  j["candidates_revisited"] = r.candidates_revisited;
  j["rejected"] = r.rejected;
  j["not_generated"] = r.not_generated;
  j["min_headroom_bytes"] = o.min_headroom_bytes;
  j["plans"] = Json::array();
  for (const auto& p : r.plans) j["plans"].push_back(PlanToJson(v, p));
  if (v.recommended) {
    j["recommended"] = PlanToJson(v, *v.recommended);
    j["recommended_rank"] = v.recommended_rank > 0 ? Json(v.recommended_rank) : Json(nullptr);
  } else {
    j["recommended"] = nullptr;  // nothing fits (docs/planner.md)
    j["recommended_rank"] = nullptr;
  }
  if (r.plans.empty()) j["advice"] = r.advice;
  return j;
}

Json PlanHtmlData(const PlanView& v, const Json& plan_json) {
  Json data = plan_json;
  data["kind"] = "plan";
  data["memory_limit_bytes"] = v.cl.gpu.memory_bytes - v.o.min_headroom_bytes;  // usable less the headroom
  data["points"] = Json::array();
  for (const auto& pt : v.r.points) {
    data["points"].push_back({{"config", pt.config}, {"step_time_s", pt.step_time_s},
                              {"peak_memory_bytes", pt.peak_memory_bytes},
                              {"peak_reserved_memory_bytes", pt.peak_reserved_bytes}, {"fits", pt.fits},
                              {"at_risk", pt.at_risk}});
  }
  return data;
}

std::string SearchOptimizerLine(const PlanOptions& o) {
  if (o.optimizer_impl == OptimizerImpl::kMegatron && o.zero3_impl == Zero3Impl::kPerLayer) return "";
  // Every plan runs it; the configuration gives the stage.
  const bool has3 = std::find(o.zero_stages.begin(), o.zero_stages.end(), 3) != o.zero_stages.end();
  return fmt::format("Every plan runs the {} optimizer{} (ZeRO stages {})\n", ToString(o.optimizer_impl),
                     has3 ? fmt::format(", ZeRO-3 as {}", ToString(o.zero3_impl)) : "", fmt::join(o.zero_stages, ","));
}

namespace {

/// "Fixed beyond --max-tp 4: tp = 8 is searched as --fix gives it\n" when a fixed tp is above the
/// search's limit (--max-tp, else the GPUs of a node), which --fix overrides; "" otherwise.
std::string FixedBeyondLimitsLine(const PlanOptions& o, const Cluster& cl) {
  const auto it = o.fixed.find("tp");
  const std::int64_t limit = o.max_tp > 0 ? o.max_tp : cl.gpus_per_node;
  if (it == o.fixed.end() || limit <= 0 || std::stoll(it->second) <= limit) return "";
  return fmt::format("Fixed beyond {}: tp = {} is searched as --fix gives it\n",
                     o.max_tp > 0 ? fmt::format("--max-tp {}", o.max_tp)
                                  : fmt::format("the default --max-tp ({} GPUs a node: tensor parallelism across nodes)",
                                                cl.gpus_per_node),
                     it->second);
}

/// The title and where the candidates went: set aside (by reason), simulated, not generated.
void WriteCandidateCounts(std::ostream& out, const PlanView& v, double elapsed) {
  const PlanOptions& o = v.o;
  const PlanResult& r = v.r;
  out << fmt::format("Plan for {} on {} x {} ({}), global batch {}, seq {}, objective {}\n", v.m.name, o.gpus,
                     v.cl.gpu.display_name, v.cl.name, o.global_batch_size, o.seq_length, ToString(o.objective));
  out << SearchOptimizerLine(o);
  // The profile's adjustments for the search (PyTorch's attention under --optimizer fsdp).
  for (const std::string& adj : v.profile_adjustments) out << "Profile adjusted: " << adj << "\n";
  out << PartialNodeLine(o.gpus, v.cl.gpus_per_node);
  out << FixedBeyondLimitsLine(o, v.cl);
  std::size_t set_aside = 0;
  for (const auto& [reason, count] : r.rejected) set_aside += count;
  out << fmt::format("Candidates: {} generated in {:.2f} s = {} set aside + {} simulated that fit "
                     "(plans need {} free per GPU):\n",
                     r.candidates_generated, elapsed, set_aside, r.candidates_generated - set_aside,
                     FormatGiB(o.min_headroom_bytes));
  for (const auto& [reason, count] : r.rejected) out << fmt::format("  {:>7}  {}\n", count, reason);
  if (r.partial_recompute_candidates > 0) {
    out << fmt::format("  ({} of them partial recompute ({}), tried beside full recompute where the same "
                       "plan without recompute does not fit)\n", r.partial_recompute_candidates,
                       o.optimizer_impl == OptimizerImpl::kTorchFsdp ? "1inN" : "firstN");
  }
  if (r.candidates_generated == 0) {
    out << "  (none could be formed: see \"Not generated\")\n";
  } else if (r.candidates_replayed == 0) {
    out << fmt::format("  ({} simulated in all; none fit by its allocated peak, so the caching allocator's replay\n"
                       "  ran on none)\n", r.candidates_simulated);
  } else {
    out << fmt::format("  ({} simulated in all; the ranking ran the caching allocator's replay on {} of them, best\n"
                       "  first, until the top {} and the best plan not at risk fit by it or none was left; the\n"
                       "  others fit by their allocated peak{})\n",
                       r.candidates_simulated, r.candidates_replayed, o.top_k,
                       r.candidates_revisited > 0
                           ? fmt::format(";\n  {} of them were simulated after the step-time bound had skipped them, "
                                         "as the ranking\n  looked past where the bound had stopped",
                                         r.candidates_revisited)
                           : "");
  }
  if (!r.not_generated.empty()) {
    out << "Not generated:\n";
    for (const auto& [reason, count] : r.not_generated) out << fmt::format("  {:>7}  {}\n", count, reason);
  }
}

/// The plan table's legend for hybrid sharding and the pipeline splits its rows use.
void WriteLayoutLegend(std::ostream& out, const PlanResult& r) {
  std::set<std::string> splits;
  bool hybrid = false;
  for (const auto& p : r.plans) hybrid = hybrid || p.config.hybrid_shard();
  if (hybrid) {
    out << "  ZeRO z/S: hybrid sharding (HSDP), the ZeRO state sharded over groups of S data-parallel ranks and\n"
           "  replicated across the groups (gathers within a group; gradients reduce-scattered within it, then\n"
           "  all-reduced across groups)\n";
  }
  // Each split with the ranks that use it, where one PP cell stands for more than one split.
  std::map<std::string, std::map<std::string, std::vector<std::size_t>>> split_ranks;  // cell -> name -> ranks
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const std::string name = PipelineSplitName(r.plans[i].config);
    if (!name.empty()) split_ranks[PpCell(r.plans[i].config)][name].push_back(i + 1);
  }
  for (const auto& [cell, names] : split_ranks) {
    for (const auto& [name, ranks] : names) {
      std::vector<std::string> ids;
      for (std::size_t k : ranks) ids.push_back(std::to_string(k));
      splits.insert(names.size() == 1 ? fmt::format("PP {}: {}", cell, name)
                                      : fmt::format("PP {} (rank {}): {}", cell, Join(ids, ", "), name));
    }
  }
  for (const auto& sp : splits) {
    out << "  " << sp
        << (sp.find("slots") != std::string::npos
                ? " (the embedding and the loss take a layer's place: (L + 2) / pp slots per stage)\n"
                : " (Megatron-LM's --decoder-first/last-pipeline-num-layers; the other stages share the rest)\n");
  }
}

/// The plan table's legend for the recompute cells its rows use, the dispatcher where it differs
/// from the one given, and activation offloading.
void WriteRecomputeLegend(std::ostream& out, const PlanOptions& o, const PlanResult& r) {
  std::set<std::string> modules;
  bool torch_ops = false, first_n = false, one_in_n = false;
  for (const auto& p : r.plans) {
    first_n = first_n || (p.config.PartialRecompute() && p.config.recompute_block_layers >= 0);
    one_in_n = one_in_n || (p.config.PartialRecompute() && p.config.recompute_layer_interval > 0);
    if (p.config.TorchOpCheckpointing()) {
      torch_ops = true;
    } else if (p.config.recompute == Recompute::kSelective && p.config.recompute_modules != kRecomputeCoreAttn) {
      modules.insert(RecomputeModulesArgs(p.config.recompute_modules));
    }
  }
  for (const auto& mods : modules) {
    out << "  recompute selective: --recompute-modules " << mods
        << " (Megatron-Core's MoE choice: the experts' activation and the norms rerun, their outputs freed)\n";
  }
  if (torch_ops) {
    out << "  recompute selective: torchtitan's per-op checkpointing (selective_ac_option = \"op\"; simulate's "
           "--selective-ac-option op)\n";
  }
  if (first_n) {
    out << "  recompute firstN: full recompute of the first N layers of each pipeline chunk, the others keep their "
           "activations (Megatron-LM's --recompute-method block --recompute-num-layers N)\n";
  }
  if (one_in_n) {
    out << "  recompute 1inN: one layer in N of each rank checkpointed whole, the others keep their activations "
           "(torchtitan's selective_ac_option = \"N\"; simulate's --selective-ac-option N)\n";
  }
  const bool flex_given = o.base.moe_dispatcher == MoeDispatcher::kFlex;
  if (flex_given && std::any_of(r.plans.begin(), r.plans.end(),
                                [](const Plan& p) { return p.config.moe_dispatcher != MoeDispatcher::kFlex; })) {
    out << "  plans with ep x expert tp = 1 run the alltoall dispatcher, not the flex one given: Megatron-Core's flex "
           "dispatcher requires TPxEP > 1 (their tokens stay on their GPU)\n";
  }
  if (!r.plans.empty() && r.plans.front().config.offload_modules != 0) {
    out << "  every plan offloads activations: --offload-modules "
        << OffloadModulesArgs(r.plans.front().config.offload_modules)
        << " (their saved tensors in host memory between forward and backward)\n";
  }
}

/// The ranked table with a note for each uneven pipeline split and recompute-module set shown.
void WritePlanTable(std::ostream& out, const PlanView& v) {
  const PlanOptions& o = v.o;
  const PlanResult& r = v.r;
  const std::string ranked_header = o.objective == Objective::kCost     ? fmt::format(" {:>10}", "$/M tok")
                                    : o.objective == Objective::kEnergy ? fmt::format(" {:>10}", "J/token")
                                                                        : "";
  out << fmt::format("\n{:>4}  {:>2} {:>3} {:>2} {:>5} {:>4} {:>2} {:>3}  {:<11} {:<9} {:<3} {:>4}  {:>10} {:>11}{} {:>6} "
                     "{:>6}  {:>10} {:>10} {:>10}\n",
                     "rank", "TP", "PP", "CP", "EP", "DP", "VP", "mbs", "schedule", "recompute", "SP", "ZeRO", "step",
                     "tokens/s", ranked_header, "MFU", "bubble", "peak mem", "reserved", "headroom");
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    out << PlanRow(i + 1, r.plans[i], v.cl.gpu.memory_bytes, o.objective) << "\n";
  }
  out << "  MFU: model FLOPs with causal attention (half the s^2 matrix, as current Megatron-LM counts it); "
         "--json and --csv have it as mfu_causal, and as mfu the full matrix's (PaLM / SC21)\n";
  if (IsLowPrecision(o.base.precision)) {
    out << fmt::format("  MFU is against the GPU's dense {} peak, as the field reports {} runs, so it can pass 100%\n",
                       ToString(MfuPeakPrecision(o.base.precision)), ToString(o.base.precision));
  }
  WriteLayoutLegend(out, r);
  WriteRecomputeLegend(out, o, r);
}

/// What the search left out by default, and how far to trust the figures.
void WritePlanCaveats(std::ostream& out, const PlanOptions& o, const Model& m) {
  std::vector<std::string> not_searched, widen;
  const auto has = [&](int z) { return std::find(o.zero_stages.begin(), o.zero_stages.end(), z) != o.zero_stages.end(); };
  // Where --fix zero chose the stage, or the optimizer has no ZeRO-2/3, nothing is left to widen.
  if (!has(3) && !o.fixed.count("zero") && o.optimizer_impl != OptimizerImpl::kDeepSpeedBf16) {
    const bool deepspeed = o.optimizer_impl == OptimizerImpl::kDeepSpeedZero;
    const bool fsdp = o.optimizer_impl == OptimizerImpl::kTorchFsdp;
    not_searched.push_back(deepspeed ? "ZeRO-2/3, which DeepSpeed runs only without pipeline parallelism"
                           : fsdp    ? "ZeRO-3 (FSDP2 resharding after the forward), which torchtitan runs without "
                                       "pipeline parallelism"
                                     : "ZeRO-2/3 (FSDP), which Megatron runs only without pipeline parallelism");
    widen.push_back(deepspeed ? "--zero-stages 1,2,3" : fsdp ? "--zero-stages 0,1,3" : "--zero-stages 0,1,2,3");
  }
  if (std::find(o.recomputes.begin(), o.recomputes.end(), Recompute::kFull) == o.recomputes.end()) {
    not_searched.push_back("full recompute");
    widen.push_back("--recompute none,selective,full");
  }
  if (!not_searched.empty()) {
    out << "\nNot searched: " << Join(not_searched, "; ") << " (widen with " << Join(widen, " and ") << ").\n";
  }
  out << "Plans a few percent apart are within the model's error on published runs (docs/accuracy.md).\n";
  if (const std::string moe = MoeRoutingCaveat(m, o.base); !moe.empty()) out << moe;
  out << fmt::format(
      "\nPeak memory counts allocated tensors plus a framework overhead. Each ranked plan went through a replay\n"
      "of PyTorch's caching allocator: it fits when what the allocator reserves, plus the free\n"
      "memory asked for (--min-headroom), is within usable memory; \"at risk\": it fits only by releasing the\n"
      "allocator's cache. How far predictions are from published runs, and where they are least reliable\n"
      "(runs without recompute, memory near the limit): shardcast validate, docs/accuracy.md.\n");
}

/// Why the recommended plan is the one recommended (rank 1, or the best not at risk), its
/// objective and its Megatron-LM arguments. Returns the label it was printed under.
std::string WriteRecommendation(std::ostream& out, const PlanView& v) {
  const PlanOptions& o = v.o;
  const Plan& best = v.r.plans.front();
  const Plan& chosen = *v.recommended;
  const char* what = o.objective == Objective::kCost     ? "cost per token"
                     : o.objective == Objective::kEnergy ? "energy per token"
                                                         : "step time";
  const double worse = 100 * (ObjectiveValue(chosen, o.objective) / ObjectiveValue(best, o.objective) - 1);
  std::string label = "Best plan";
  if (!v.r.best_not_at_risk) {
    out << "\nEvery plan that fits is at risk of running out of memory; the best of them follows (more GPUs,\n"
           "recompute or a higher ZeRO stage lower the peak).\n";
  } else if (v.recommended_rank > 1) {
    out << fmt::format("\nRank 1 is at risk of running out of memory; rank {} is the best plan that is not ({} "
                       "{:+.1f}%).\n",
                       v.recommended_rank, what, worse);
    label = fmt::format("Best plan not at risk (rank {})", v.recommended_rank);
  } else if (v.recommended_rank == 0) {
    out << fmt::format("\nEvery plan shown is at risk of running out of memory; the best plan that is not ranks "
                       "below them ({} {:+.1f}%): {}\n",
                       what, worse, chosen.config.Summary());
    label = "Best plan not at risk (not in the table)";
  }
  if (o.objective != Objective::kThroughput) {
    const double price = PlanPrice(o, v.cl);
    const std::string basis =
        o.objective == Objective::kCost
            ? fmt::format("at {:g} USD per GPU-hour, {}", price,
                          o.price_usd_per_gpu_hour > 0 ? std::string("--price-per-gpu-hour")
                                                       : fmt::format("{}'s price of {}", v.cl.gpu.name,
                                                                     v.cl.gpu.price_date.empty() ? "no date" : v.cl.gpu.price_date))
            : fmt::format("at {:.0f} W per GPU x {:g}", v.cl.gpu.tdp_W, o.energy_overhead);
    out << fmt::format("\n{} by {}: {:#.4g} {} ({})\n", label, ToString(o.objective), ObjectiveValue(chosen, o.objective),
                       o.objective == Objective::kCost ? "USD per million tokens" : "J per token", basis);
  }
  out << "\n" << label << " as Megatron-LM arguments:\n  " << MegatronArguments(chosen.config, v.m) << "\n";
  if (chosen.config.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    out << "  (a torchtitan run: --emit torchtitan writes its configuration file)\n";
  }
  if (const std::string bias = KnownBias(chosen.config); !bias.empty()) out << "  (" << bias << ")\n";
  if (const std::string s = StraddlingGroupsLine(chosen.config, o.gpus, v.cl.gpus_per_node); !s.empty()) {
    out << "  " << s;
  }
  out << UnfusedAttentionLine(v.cl.gpu);
  return label;
}

}  // namespace

std::string WritePlanText(std::ostream& out, const PlanView& v, double elapsed) {
  WriteCandidateCounts(out, v, elapsed);
  if (v.r.plans.empty()) {
    out << (v.r.candidates_generated == 0 ? "\nNo candidate was generated: every choice is under \"Not generated\".\n"
            : v.r.at_risk_excluded > 0    ? "\nNo candidate fits without being at risk of running out of memory.\n"
                                          : "\nNo candidate fits.\n");
    for (const auto& s : v.r.advice) out << "  - " << s << "\n";
    return "";
  }
  WritePlanTable(out, v);
  WritePlanCaveats(out, v.o, v.m);
  return WriteRecommendation(out, v);
}

Json PlanWhatIfJson(const PlanView& v, const std::vector<std::string>& changes, const HardwareProfile& changed,
                    const Plan* best) {
  SimulationResult none;  // nothing fits
  none.feasible = false;
  Json j = BesideJson(v.recommended ? v.recommended->result : none, best ? best->result : none);
  j["changes"] = changes;
  j["adjustments"] = changed.adjustments;
  j["recommended"] = best ? PlanToJson(v, *best) : Json(nullptr);
  return j;
}

void WritePlanWhatIf(std::ostream& out, const std::vector<std::string>& changes, const HardwareProfile& prof,
                     const HardwareProfile& changed, const Plan& base, const Plan* best) {
  out << "\nWhat if " << Join(changes, ", ") << ":\n";
  for (std::size_t i = prof.adjustments.size(); i < changed.adjustments.size(); ++i) {
    out << "  " << changed.adjustments[i] << "\n";
  }
  if (!best) {
    out << "  no candidate fits on the what-if hardware\n";
    return;
  }
  out << "  baseline: " << base.config.Summary() << "\n  what-if:  " << best->config.Summary()
            << (best->config.Summary() == base.config.Summary() ? " (the same configuration)\n" : "\n");
  WriteBeside(out, base.result, best->result, "baseline best", "what-if best");
}

namespace {

double StragglerChange(const PlanStraggler& p) {
  return p.plan->result.step_time_s > 0 ? p.run.result.step_time_s / p.plan->result.step_time_s - 1 : 0;
}

}  // namespace

void WritePlanStragglers(std::ostream& out, const std::vector<PlanStraggler>& runs, double slowdown,
                         double nic_slowdown) {
  out << fmt::format("\nWith one straggler ({}, on each plan's stage where it costs the step most;\n"
                     "docs/simulator.md, \"Stragglers\"):\n",
                     StragglerWhat(slowdown, nic_slowdown));
  out << fmt::format("{:>4}  {:>10} {:>15} {:>7}  {:>8}  {}\n", "rank", "step", "with straggler", "change", "stage",
                     "configuration");
  const PlanStraggler* robust = nullptr;
  const PlanStraggler* fastest = nullptr;
  for (const auto& p : runs) {
    if (!p.run.result.feasible) continue;
    out << fmt::format("{:>4}  {:>10} {:>15} {:>+6.1f}%  {:>8}  {}\n", p.rank, FormatSeconds(p.plan->result.step_time_s),
                       FormatSeconds(p.run.result.step_time_s), 100 * StragglerChange(p),
                       fmt::format("{} of 0-{}", p.run.stage, p.plan->config.pp - 1), p.plan->config.Summary());
    if (!robust || StragglerChange(p) < StragglerChange(*robust)) robust = &p;
    if (!fastest || p.run.result.step_time_s < fastest->run.result.step_time_s) fastest = &p;
  }
  if (robust && fastest) {
    out << fmt::format("  least slowed: rank {} ({:+.1f}%); fastest with the straggler: rank {} ({})\n", robust->rank,
                       100 * StragglerChange(*robust), fastest->rank, FormatSeconds(fastest->run.result.step_time_s));
  }
  // What the runs leave out, once each, with the ranks it concerns.
  std::map<std::string, std::vector<std::string>> notes;
  for (const auto& p : runs) {
    for (const auto& n : p.run.notes) notes[n].push_back(std::to_string(p.rank));
  }
  for (const auto& [n, ranks] : notes) out << "  note (rank " << Join(ranks, ", ") << "): " << n << "\n";
}

Json PlanStragglerJson(const std::vector<PlanStraggler>& runs, double slowdown, double nic_slowdown) {
  Json plans = Json::array();
  for (const auto& p : runs) {
    if (!p.run.result.feasible) continue;
    plans.push_back({{"rank", p.rank},
                     {"config_summary", p.plan->config.Summary()},
                     {"step_time_s", p.plan->result.step_time_s},
                     {"with_straggler_step_time_s", p.run.result.step_time_s},
                     {"step_time_change", StragglerChange(p)},
                     {"stage", p.run.stage},
                     {"step_time_by_stage_s", p.run.step_time_by_stage_s},
                     {"notes", p.run.notes}});
  }
  return Json{{"slowdown", slowdown}, {"nic_slowdown", nic_slowdown}, {"plans", plans}};
}

}  // namespace shardcast
