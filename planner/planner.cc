#include "planner/planner.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"
#include "models/loader.h"

namespace shardcast {

const char* ToString(Objective o) {
  switch (o) {
    case Objective::kThroughput: return "throughput";
    case Objective::kCost: return "cost";
    case Objective::kEnergy: return "energy";
  }
  return "?";
}

namespace {

/// The search simulates thousands of configurations: memory by the allocated peak, without the
/// caching allocator's replay (SimulateOptions::allocator_replay); RunPlan's ranking runs the
/// replay (ReplayAllocator) on the plans it reaches, best first, and the replay decides.
SimulateOptions SearchOptions() {
  SimulateOptions o;
  o.allocator_replay = false;
  return o;
}

std::vector<std::int64_t> Divisors(std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

/// A total order on configurations for deterministic tie-breaks.
auto Key(const ParallelConfig& c) {
  return std::make_tuple(c.tp, c.pp, c.embedding_slots, c.first_stage_layers, c.last_stage_layers, c.cp, c.ep,
                         c.etp,
                         static_cast<int>(c.cp_comm), c.vp, c.micro_batch_size, static_cast<int>(c.schedule),
                         static_cast<int>(c.recompute), c.recompute_block_layers, c.recompute_layer_interval,
                         c.sequence_parallel, c.tp_comm_overlap, c.zero_stage, c.shard_dp());
}

/// A pipeline split the search tries: pp stages, how the layers are split, and the number every
/// stage's layer count divides (the virtual stages it allows are its divisors >= 2).
struct PipelineSplit {
  std::int64_t pp = 1;
  bool slots = false;
  std::int64_t first = -1, last = -1;
  std::int64_t vp_divisible = 1;
  bool even = false;  ///< the slots spread evenly over the chunks (torchtitan's split; even_chunks)
};

/// Whether `impl` is one of DeepSpeed's optimizers, whose runs are Megatron-DeepSpeed's (its
/// pipeline engine, no Transformer Engine overlap, no context parallelism).
bool DeepSpeedOptimizer(OptimizerImpl impl) {
  return impl == OptimizerImpl::kDeepSpeedZero || impl == OptimizerImpl::kDeepSpeedBf16;
}

/// The splits for `m`: for every pp <= L, L / pp per stage where pp divides L; (L + 2) / pp
/// slots with the embedding and the loss in slots (BLOOM's, Llama 3's partition) where pp > 2
/// divides L + 2 but not L; and where neither divides, Megatron-LM's uneven splits whose largest
/// stage has ceil(L / pp) layers, the fewest possible: the middle stages share their layers
/// evenly, mid each (ceil(L / pp) or fewer), and the first and last take the rest every way that
/// gives each 1 to ceil(L / pp) layers (61 layers at pp 12: 6 + 10 x 5 + 5 and 5 + 10 x 5 + 6,
/// since 6 on every middle stage would leave one layer for the two ends; the last stage also
/// carries the output layer, the loss and any MTP modules, so a lighter last stage can be the
/// faster; pp 2 splits L in two), for pp that divide `pp_divides` (the GPUs per tensor-parallel group: other pp cannot
/// form a candidate). `--fix decoder_first=N` / `decoder_last=N` keep the uneven splits with
/// that first / last stage.
std::vector<PipelineSplit> PipelineSplits(const Model& m, const PlanOptions& o, std::int64_t pp_divides,
                                          std::map<std::string, std::size_t>* rejected) {
  const std::int64_t L = m.num_layers;
  std::vector<PipelineSplit> out;
  for (std::int64_t pp = 1; pp <= L; ++pp) {
    if (o.optimizer_impl == OptimizerImpl::kTorchFsdp) {
      // torchtitan's split: L + 2 slots (the embedding and the output one each) spread over the
      // stages, the remainder to the first, at least two a stage (generate_llm_fqn_per_model_part);
      // its virtual stages are TorchtitanVirtualStages'.
      if (pp == 1) {
        out.push_back({1, false, -1, -1, L});
      } else if ((L + 2) / pp >= 2 && pp_divides % pp == 0) {
        out.push_back({pp, true, -1, -1, (L + 2) / pp, true});
      }
      continue;
    }
    if (L % pp == 0) {
      out.push_back({pp, false, -1, -1, L / pp});
    } else if (pp > 2 && (L + 2) % pp == 0 && o.optimizer_impl == OptimizerImpl::kMegatron) {
      out.push_back({pp, true, -1, -1, (L + 2) / pp});
    } else if (pp >= 2 && pp_divides % pp == 0 && o.optimizer_impl != OptimizerImpl::kMegatron) {
      // DeepSpeed's PipelineModule (partition_method uniform, or by layer type): the first
      // L mod pp stages take one layer more (runtime/utils.py partition_uniform); no explicit
      // first and last stage sizes.
      out.push_back({pp, false, -1, -1, 1});
    } else if (pp >= 2 && pp_divides % pp == 0) {
      // No stage above ceil(L/pp) layers, the fewest a stage can have at most: the middle stages
      // `mid` each (Megatron-LM shares them evenly), the rest on the first and the last stage.
      const std::int64_t most = (L + pp - 1) / pp;
      for (std::int64_t mid = most; mid >= 1; --mid) {
        const std::int64_t rest = L - (pp - 2) * mid;
        if (rest < 2) continue;
        if (rest > 2 * most) break;
        for (std::int64_t first = std::max<std::int64_t>(1, rest - most); first <= std::min(most, rest - 1); ++first) {
          const std::int64_t last = rest - first;
          out.push_back({pp, false, first, last, std::gcd(std::gcd(first, last), mid)});
        }
        if (pp == 2) break;  // no middle stage
      }
    }
  }
  auto it = o.fixed.find("pp");
  if (it != o.fixed.end()) {
    const std::int64_t fp = std::stoll(it->second);
    std::erase_if(out, [&](const PipelineSplit& x) { return x.pp != fp; });
    if (out.empty()) ++(*rejected)["(tp, pp) pairs: no pipeline split of num_layers over the fixed pp"];
  }
  const auto fixed_first = o.fixed.find("decoder_first"), fixed_last = o.fixed.find("decoder_last");
  if (fixed_first == o.fixed.end() && fixed_last == o.fixed.end()) return out;
  // A fixed first or last stage: every split Megatron-LM takes with it (the middle stages share
  // the rest evenly, at least one layer each), whether or not pp divides L.
  const std::int64_t want_first = fixed_first == o.fixed.end() ? -1 : std::stoll(fixed_first->second);
  const std::int64_t want_last = fixed_last == o.fixed.end() ? -1 : std::stoll(fixed_last->second);
  const auto fixed_pp = o.fixed.find("pp");
  std::vector<PipelineSplit> fixed;
  for (std::int64_t pp = 2; pp <= L && o.optimizer_impl == OptimizerImpl::kMegatron; ++pp) {
    if (pp_divides % pp != 0 || (fixed_pp != o.fixed.end() && pp != std::stoll(fixed_pp->second))) continue;
    for (std::int64_t first = want_first > 0 ? want_first : 1; first <= (want_first > 0 ? want_first : L - 1); ++first) {
      for (std::int64_t last = want_last > 0 ? want_last : 1; last <= (want_last > 0 ? want_last : L - first); ++last) {
        const std::int64_t middle = L - first - last;
        if (pp == 2 ? middle != 0 : (middle < pp - 2 || middle % (pp - 2) != 0)) continue;
        const std::int64_t mid = pp > 2 ? middle / (pp - 2) : first;
        fixed.push_back({pp, false, first, last, std::gcd(std::gcd(first, last), mid)});
      }
    }
  }
  if (fixed.empty() && o.optimizer_impl != OptimizerImpl::kMegatron) {
    ++(*rejected)[fmt::format("pipeline splits: a fixed first or last stage is Megatron-LM's split; with --optimizer {} "
                              "the split is {}", ToString(o.optimizer_impl),
                              o.optimizer_impl == OptimizerImpl::kTorchFsdp ? "torchtitan's even one"
                                                                            : "DeepSpeed's uniform one")];
  } else if (fixed.empty()) {
    ++(*rejected)[fmt::format("pipeline splits: no pp gives a first stage of {} and a last of {} with the middle stages "
                              "sharing the rest evenly", want_first > 0 ? std::to_string(want_first) : "any",
                              want_last > 0 ? std::to_string(want_last) : "any")];
  }
  return fixed;
}

/// Context-parallel sizes to try with `per_group` GPUs per (tp, pp) group: 1, and with fused
/// attention each cp dividing it and splitting the sequence into 2*cp chunks of at least
/// PlanOptions::min_cp_chunk_tokens tokens (up to max_cp when set); the fixed one with `--fix cp=`.
std::vector<std::int64_t> ContextParallelSizes(const PlanOptions& o, std::int64_t seq, std::int64_t per_group,
                                               std::map<std::string, std::size_t>* rejected) {
  if (auto it = o.fixed.find("cp"); it != o.fixed.end()) {
    const std::int64_t cp = std::stoll(it->second);
    if (per_group % cp == 0) return {cp};
    ++(*rejected)["(tp, pp) pairs: the fixed cp does not divide GPUs / (tp*pp)"];
    return {};
  }
  std::vector<std::int64_t> out = {1};
  if (!o.flash_attention) return out;  // Megatron-Core runs context parallelism with fused attention only
  for (std::int64_t cp = 2; cp <= per_group; ++cp) {
    if (o.max_cp > 0 && cp > o.max_cp) break;
    if (per_group % cp != 0 || seq % (2 * cp) != 0) continue;
    if (seq / (2 * cp) < o.min_cp_chunk_tokens) break;
    out.push_back(cp);
  }
  return out;
}

/// The expert grids (ep, etp) to try on a stage of `stage_gpus` = tp*cp*dp GPUs: for a dense model
/// (1, 0); for an MoE model every ep dividing the routed experts, with etp 1 or tp (Megatron-Core's
/// default and its parallel folding's usual choice), whose etp*ep divides the stage's GPUs and
/// keeps the EP group within PlanOptions::max_ep; the fixed ones with `--fix ep=,etp=`.
std::vector<std::pair<std::int64_t, std::int64_t>> ExpertGrids(const Model& m, const PlanOptions& o, std::int64_t tp,
                                                                std::int64_t stage_gpus) {
  if (!m.moe.enabled()) return {{1, 0}};
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const auto fixed = [&](const char* key) -> std::int64_t {
    auto it = o.fixed.find(key);
    return it == o.fixed.end() ? 0 : std::stoll(it->second);
  };
  std::vector<std::int64_t> etps = {1};
  if (tp > 1) etps.push_back(tp);
  if (const std::int64_t fe = fixed("etp")) etps = {fe};
  for (std::int64_t ep = 1; ep <= m.moe.num_experts; ++ep) {
    if (m.moe.num_experts % ep != 0) continue;
    if (const std::int64_t fe = fixed("ep"); fe > 0 && ep != fe) continue;
    if (o.max_ep > 0 && ep > o.max_ep) break;
    for (std::int64_t etp : etps) {
      if (stage_gpus % (ep * etp) != 0 || m.moe.ffn_hidden_size % etp != 0) continue;
      out.emplace_back(ep, etp);
    }
  }
  return out;
}

/// The dp_shard values the search tries for `c` (ParallelConfig::dp_shard; 0: over every rank):
/// with ZeRO-2/3, also one node's data-parallel ranks (gpus_per_node / tp), PyTorch FSDP's
/// usual HYBRID_SHARD, where they are fewer than dp x cp and divide it; with --fix dp_shard=N,
/// N alone (ZeRO >= 1; N = dp x cp is plain sharding).
std::vector<std::int64_t> HybridShards(const ParallelConfig& c, std::int64_t gpus_per_node, std::int64_t fixed) {
  const std::int64_t n = c.dp_cp();
  if (fixed > 0) {
    if (fixed == n) return {0};
    if (c.zero_stage >= 1 && n % fixed == 0) return {fixed};
    return {};
  }
  std::vector<std::int64_t> out = {0};
  const std::int64_t node = std::max<std::int64_t>(1, gpus_per_node / c.tp);
  const bool fsdp_like = c.optimizer_impl == OptimizerImpl::kMegatron || c.optimizer_impl == OptimizerImpl::kTorchFsdp;
  // torchtitan shards over data_parallel_shard_degree x cp: its groups hold whole cp groups.
  const bool expressible = c.optimizer_impl != OptimizerImpl::kTorchFsdp || node % c.cp == 0;
  if (c.zero_stage >= 2 && fsdp_like && expressible && node > 1 && node < n && n % node == 0) {
    out.push_back(node);
  }
  return out;
}

/// Whether optimizer `impl` runs ZeRO stage `z`: Megatron's any, DeepSpeed's ZeRO optimizer
/// stages 1-3, its BF16_Optimizer stage 1 (PlanOptions::optimizer_impl).
bool OptimizerRuns(OptimizerImpl impl, int z) {
  // FSDP's stages by pipeline in AddLayoutCandidates (TorchFsdpRuns).
  return OptimizerZeroStageMismatch(impl, z).empty();
}

/// What every candidate takes from the search's options (PlanOptions::base: precision, MoE routing
/// and dispatcher, loss, offload; the optimizer and ZeRO-3 implementation, the framework, flash
/// attention, a fixed cp_comm) and its pipeline split, onto `c`, whose sizes, schedule,
/// recompute, ZeRO stage and expert grid are already set.
void ApplyPlanWideSettings(const PlanOptions& o, const PipelineSplit& split, std::int64_t gpus_per_node,
                           ParallelConfig* c) {
  CopyPrecisionSettings(o.base, c);
  c->moe_load_imbalance = o.base.moe_load_imbalance;
  c->moe_force_load_balancing = o.base.moe_force_load_balancing;
  // Megatron-Core's flex dispatcher asserts TPxEP > 1 (expert tp): where neither splits the
  // experts, tokens stay on their GPU and the candidate runs the default all-to-all dispatcher.
  c->moe_dispatcher = o.base.moe_dispatcher == MoeDispatcher::kFlex && c->ep * c->expert_tp() == 1
                          ? MoeDispatcher::kAllToAll
                          : o.base.moe_dispatcher;
  c->cross_entropy = o.base.cross_entropy;
  c->offload_modules = o.base.offload_modules;
  c->optimizer_impl = o.optimizer_impl;
  c->zero3_impl = c->zero_stage >= 3 ? o.zero3_impl : Zero3Impl::kPerLayer;
  CopyDeepSpeedKnobs(o.base, c);
  // DeepSpeed's overlap_comm defaults to on at stage 3 only (zero/config.py overlap_comm_valid)
  // and its pipeline engine turns it off. FSDP2 under a pipeline reduces after the schedule's
  // last backward (kFsdp2PipelineEquivalent).
  if (DeepSpeedOptimizer(o.optimizer_impl)) c->overlap_grad_reduce = c->zero_stage >= 3 && c->pp == 1;
  if (o.optimizer_impl == OptimizerImpl::kTorchFsdp) c->overlap_grad_reduce = c->pp == 1;
  if (o.megatron_core) ApplyMegatronCoreDefaults(c);
  c->flash_attention = o.flash_attention;
  c->embedding_slots = split.slots;
  c->even_chunks = split.even;
  c->first_stage_layers = split.first;
  c->last_stage_layers = split.last;
  if (const auto it = o.fixed.find("cp_comm"); it != o.fixed.end()) c->cp_comm = ParseCpComm(it->second);
  ResolveCpA2a(c, gpus_per_node);
}

bool FixedAllows(const std::map<std::string, std::string>& fixed, const ParallelConfig& c) {
  for (const auto& [k, v] : fixed) {
    std::string have;
    if (k == "tp") have = std::to_string(c.tp);
    else if (k == "pp") have = std::to_string(c.pp);
    else if (k == "cp") have = std::to_string(c.cp);
    else if (k == "ep") have = std::to_string(c.ep);
    else if (k == "etp") have = std::to_string(c.expert_tp());
    else if (k == "cp_comm") have = ToString(c.cp_comm);
    else if (k == "vp") have = std::to_string(c.vp);
    else if (k == "mbs") have = std::to_string(c.micro_batch_size);
    else if (k == "zero") have = std::to_string(c.zero_stage);
    else if (k == "dp_shard") have = std::to_string(c.shard_dp());
    else if (k == "sp") have = c.sequence_parallel ? "true" : "false";
    else if (k == "tp_comm_overlap") have = c.tp_comm_overlap ? "true" : "false";
    else if (k == "recompute") have = ToString(c.recompute);
    else if (k == "schedule") have = ToString(c.schedule);
    else if (k == "decoder_first") have = std::to_string(c.first_stage_layers);
    else if (k == "decoder_last") have = std::to_string(c.last_stage_layers);
    if (have != v) return false;
  }
  return true;
}

}  // namespace

double ObjectiveValue(const Plan& p, Objective o) {
  switch (o) {
    case Objective::kThroughput: return p.result.step_time_s;
    case Objective::kCost: return p.usd_per_million_tokens;
    case Objective::kEnergy: return p.joules_per_token;
  }
  return p.result.step_time_s;
}

namespace {

/// A value of --fix (0 when not fixed).
std::int64_t FixedInt(const PlanOptions& o, const char* key) {
  auto it = o.fixed.find(key);
  return it == o.fixed.end() ? 0 : std::stoll(it->second);
}

/// One layout of the search: sizes, micro-batch, schedule and virtual stages.
struct Layout {
  std::int64_t tp = 1, pp = 1, cp = 1, dp = 1, vp = 1, mbs = 1;
  Schedule schedule = Schedule::k1F1B;
  const PipelineSplit* split = nullptr;
};

/// Whether torchtitan runs ZeRO stage `z` (its reading of FSDP2) on layout `l` with `ep` expert
/// ranks of expert tp `etp`: FSDP2 (ZeRO-3, or ZeRO-2 with reshard_after_forward "never") without
/// a pipeline, FSDP2 kept through the schedule (ZeRO-1's reading, kFsdp2PipelineEquivalent) with
/// one, DDP (ZeRO-0) only as the sole parallelism, and neither where no rank shares the weights
/// (dp x cp = 1: ZeRO-0); expert parallelism only with FSDP and only over ranks its ParallelDims
/// can borrow (TorchtitanStartupChecks). Counts what it leaves out in `rejected`.
bool TorchFsdpRuns(const Layout& l, int z, std::int64_t ep, std::int64_t etp, std::map<std::string, std::size_t>* rejected) {
  if (const std::string why = TorchtitanStageMismatch(z, l.tp, l.pp, l.cp, l.dp, ep); !why.empty()) {
    ++(*rejected)[(z == 1 ? "(pp, ZeRO) choices: " : "(tp, pp, cp, ep, ZeRO) choices: ") + why];
    return false;
  }
  if (ep > 1 && z > 0) {
    // l.dp is torchtitan's data_parallel_shard_degree here (no replication searched).
    if (!TorchtitanBorrowsExpertRanks(ep, etp, l.dp, l.cp, l.tp)) {
      ++(*rejected)["(ep, etp) grids: with --optimizer fsdp, torchtitan borrows expert ranks from the sharded "
                    "data-parallel, cp (and with etp 1, tp) ranks, which ep must divide"];
      return false;
    }
  }
  return true;
}

/// Whether recompute `rc` is searched, and the modules a selective candidate recomputes. With
/// flash attention, recomputing the attention core (core_attn) frees almost nothing for a flash
/// forward more: it loses to no recompute. For MoE models the selective candidate is the experts'
/// activation and the norms (moe_act, layernorm; with MLA its up projections too), Megatron-Core's
/// cheap MoE choice (Megatron-DeepSpeed has no such modules: its selective recompute is the core's).
/// With --optimizer fsdp selective recompute is torchtitan's per-op checkpointing, where it is
/// modelled; what is left out is counted in `rejected`.
bool RecomputeChoice(const Model& m, const PlanOptions& o, Recompute rc, unsigned* modules,
                     std::map<std::string, std::size_t>* rejected) {
  if (o.optimizer_impl == OptimizerImpl::kTorchFsdp && rc == Recompute::kSelective) {
    if (!TorchOpCheckpointingUnmodelled(m).empty()) {
      ++(*rejected)["(recompute) choices: with --optimizer fsdp selective recompute is torchtitan's per-op "
                    "checkpointing, modelled for dense layers with MHA/GQA attention and unbiased linear layers"];
      return false;
    }
    if (o.base.offload_modules != 0) {
      ++(*rejected)["(recompute) choices: torchtitan's per-op checkpointing with --offload-modules"];
      return false;
    }
    *modules = kRecomputeTorchOps;
    return true;
  }
  const bool deepspeed = DeepSpeedOptimizer(o.optimizer_impl);
  const bool moe_modules = m.moe.enabled() && !deepspeed;
  if (rc == Recompute::kSelective && o.flash_attention && !moe_modules &&
      std::find(o.recomputes.begin(), o.recomputes.end(), Recompute::kNone) != o.recomputes.end()) {
    return false;
  }
  *modules = rc == Recompute::kSelective && o.flash_attention && moe_modules
                 ? static_cast<unsigned>(kRecomputeMoeAct | kRecomputeLayernorm) |
                       (m.mla.enabled() ? static_cast<unsigned>(kRecomputeMlaUpProj) : 0u)
                 : static_cast<unsigned>(kRecomputeCoreAttn);
  return true;
}

}  // namespace

namespace {

/// A partial recompute's shares read off its stages' {rerun, layers} (RecomputedLayersPerStage):
/// the largest share of its own layers a stage reruns, and the share of all the model's layers;
/// both -1 where it runs as no or full recompute (RunsAsPartial) or no stage has layers.
std::pair<double, double> SharesOf(const Model& m, const std::vector<std::pair<std::int64_t, std::int64_t>>& stages) {
  std::int64_t rerun = 0, layers = 0;
  double largest = -1.0;
  for (const auto& [r, n] : stages) {
    rerun += r;
    layers += n;
    if (n > 0) largest = std::max(largest, static_cast<double>(r) / static_cast<double>(n));
  }
  if (layers == 0 || !RunsAsPartial(m, rerun, layers)) return {-1.0, -1.0};
  return {largest, static_cast<double>(rerun) / static_cast<double>(layers)};
}

}  // namespace

double PartialRecomputeShare(const Model& m, const ParallelConfig& x) {
  if (!x.PartialRecompute()) return -1.0;
  return SharesOf(m, RecomputedLayersPerStage(m, x)).first;
}

std::vector<std::pair<ParallelConfig, double>> PartialRecomputeVariants(const Model& m, const PlanOptions& o,
                                                                        const ParallelConfig& c) {
  std::vector<std::pair<ParallelConfig, double>> out;
  if (!o.partial_recompute || o.fixed.count("recompute") || c.recompute != Recompute::kFull ||
      DeepSpeedOptimizer(o.optimizer_impl) ||
      c.bf16_layers_start + c.bf16_layers_end > 0 || c.offload_modules != 0 || c.deepspeed_zero3() ||
      c.deepspeed2021_zero3()) {
    return out;
  }
  std::vector<ParallelConfig> tries;
  if (o.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    for (std::int64_t n : {4, 3, 2}) {
      ParallelConfig x = c;
      x.recompute_layer_interval = n;
      tries.push_back(x);
    }
  } else {
    const double chunk_layers = static_cast<double>(m.num_layers) / static_cast<double>(c.pp * c.vp);
    for (int quarter = 1; quarter <= 3; ++quarter) {
      ParallelConfig x = c;
      x.recompute_block_layers = std::llround(chunk_layers * quarter / 4.0);
      tries.push_back(x);
    }
  }
  // Each variant with its stages and the share of all the layers it reruns, by which they go.
  std::vector<std::tuple<double, ParallelConfig, double>> kept;  // {total share, variant, largest}
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> seen;
  for (const ParallelConfig& x : tries) {
    auto stages = RecomputedLayersPerStage(m, x);
    const auto [largest, total] = SharesOf(m, stages);
    if (largest < 0 || std::find(seen.begin(), seen.end(), stages) != seen.end()) continue;
    seen.push_back(std::move(stages));
    kept.emplace_back(total, x, largest);
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  for (const auto& [total, x, largest] : kept) out.emplace_back(x, largest);
  return out;
}

namespace {

/// Appends the candidates of one layout: every recompute, sequence-parallel (with TP
/// communication overlap), expert grid, ZeRO stage and hybrid-shard choice that --fix allows.
void AddLayoutCandidates(const Model& m, const Cluster& cl, const PlanOptions& o, const Layout& l,
                         std::map<std::string, std::size_t>* rejected, std::vector<ParallelConfig>* out) {
  // DeepSpeed's optimizers run under Megatron-DeepSpeed: its pipeline engine, no TE userbuffers.
  const bool deepspeed = DeepSpeedOptimizer(o.optimizer_impl);
  const bool fsdp = o.optimizer_impl == OptimizerImpl::kTorchFsdp;
  if (ExpertGrids(m, o, l.tp, l.tp * l.cp * l.dp).empty()) {  // only a fixed ep or etp leaves none
    ++(*rejected)["(tp, pp, cp, vp, mbs) layouts: the fixed ep x etp does not divide the stage's tp*cp*dp GPUs"];
    return;
  }
  for (Recompute rc : o.recomputes) {
    unsigned modules = 0;
    if (!RecomputeChoice(m, o, rc, &modules, rejected)) continue;
    // (sp, tp comm overlap): the overlap needs sequence parallelism.
    // torchtitan's tensor parallelism always shards the sequence (its async TP is the overlap).
    const std::vector<std::pair<bool, bool>> sp_choices =
        l.tp == 1 ? std::vector<std::pair<bool, bool>>{{false, false}}
        : fsdp    ? std::vector<std::pair<bool, bool>>{{true, false}, {true, true}}
                  : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}};
    for (const auto& [sp, tpo] : sp_choices) {
      // Megatron-Core runs MoE layers with tp > 1 only with sequence parallelism.
      if (m.moe.enabled() && l.tp > 1 && !sp) continue;
      if (tpo && deepspeed) {  // Transformer Engine's userbuffers: not in Megatron-DeepSpeed
        ++(*rejected)["(tp, sp) choices: TP communication overlap is Transformer Engine's (not with DeepSpeed)"];
        continue;
      }
      for (const auto& [ep, etp] : ExpertGrids(m, o, l.tp, l.tp * l.cp * l.dp)) {
        for (int z : o.zero_stages) {
          if (!OptimizerRuns(o.optimizer_impl, z)) continue;
          if (z == 0 && o.base.fp8_param_gather) {
            ++(*rejected)["(dp, ZeRO) choices: --fp8-param-gather gathers sharded parameters (ZeRO 1 or more)"];
            continue;
          }
          if (fsdp && !TorchFsdpRuns(l, z, ep, etp, rejected)) continue;
          // Sharding over one rank is no sharding; DeepSpeed's ZeRO optimizer has no stage 0 of its own.
          if (z > 0 && l.dp * l.cp == 1 && !(m.moe.enabled() && l.tp * l.cp * l.dp / (ep * etp) > 1) &&
              !(z == 1 && deepspeed)) {
            // Counted where the stage was asked for; the search's own ZeRO > 0 there is the same as 0.
            if (o.fixed.count("zero")) ++(*rejected)["(dp, ZeRO) choices: ZeRO-1/2/3 shard over dp x cp = 1 rank"];
            continue;
          }
          // Megatron-LM: ZeRO-2/3 (FSDP) without PP; DeepSpeed's pipeline engine: ZeRO-1 at most.
          if (z >= 2 && l.pp > 1) {
            ++(*rejected)["(pp, ZeRO) choices: ZeRO-2/3 run without pipeline parallelism"];
            continue;
          }
          ParallelConfig c;
          c.tp = l.tp;
          c.pp = l.pp;
          c.cp = l.cp;
          c.dp = l.dp;
          c.vp = l.vp;
          c.micro_batch_size = l.mbs;
          c.global_batch_size = o.global_batch_size;
          c.seq_length = o.seq_length > 0 ? o.seq_length : m.seq_length;
          c.schedule = l.schedule;
          c.recompute = rc;
          c.recompute_modules = modules;
          c.sequence_parallel = sp;
          c.tp_comm_overlap = tpo;
          c.zero_stage = z;
          c.ep = ep;
          c.etp = m.moe.enabled() ? etp : 0;
          ApplyPlanWideSettings(o, *l.split, cl.gpus_per_node, &c);
          c.flash_attention = c.flash_attention && cl.gpu.HasFlashAttention();  // V100: unfused
          // Transformer Engine runs sliding-window attention under CP only with a2a or all-gather
          // (ContextParallelRules): the all-gather, which any head count allows, unless fixed.
          if (m.WindowedLayers() > 0 && c.cp > 1 && !o.fixed.count("cp_comm")) c.cp_comm = CpComm::kAllGather;
          const std::vector<std::int64_t> shards = HybridShards(c, cl.gpus_per_node, FixedInt(o, "dp_shard"));
          if (shards.empty()) {
            ++(*rejected)["(dp, ZeRO) choices: the fixed dp_shard does not divide dp*cp, or ZeRO-0 shards nothing"];
          }
          for (std::int64_t shard : shards) {
            c.dp_shard = shard;
            if (FixedAllows(o.fixed, c)) out->push_back(c);
          }
        }
      }
    }
  }
}

/// The virtual stages torchtitan can make over `pp` ranks of `layers` layers: 2 (its default),
/// and every vp whose pp*vp chunks are ceil((L + 2) / P) for some pipeline_parallel_layers_per_stage
/// P (torchtitan's pipeline_llm), each chunk holding at least one of the L + 2 slots.
std::vector<std::int64_t> TorchtitanVirtualStages(std::int64_t layers, std::int64_t pp) {
  const std::int64_t slots = layers + 2;
  std::vector<std::int64_t> out;
  for (std::int64_t v = 2; pp * v <= slots; ++v) {
    if (v == 2 || TorchtitanLayersPerStage(slots, pp * v) > 0) out.push_back(v);
  }
  return out;
}

/// Appends the candidates of one (tp, pipeline split, cp) choice: every micro-batch size that
/// divides the batch per replica, schedule and virtual-stage count.
void AddMicroBatchCandidates(const Model& m, const Cluster& cl, const PlanOptions& o, Layout l,
                             std::map<std::string, std::size_t>* rejected, std::vector<ParallelConfig>* out) {
  const bool deepspeed = DeepSpeedOptimizer(o.optimizer_impl);
  const std::int64_t per_replica = o.global_batch_size / l.dp;
  const std::int64_t fixed_vp = FixedInt(o, "vp");  // 0: not fixed
  for (std::int64_t mbs : Divisors(per_replica)) {
    if (mbs > o.max_micro_batch_size) break;
    l.mbs = mbs;
    const std::int64_t mb = per_replica / mbs;
    for (Schedule s : o.schedules) {
      if (s != Schedule::k1F1B && l.pp == 1) continue;  // nothing to pipeline
      if (s != Schedule::k1F1B && deepspeed) {
        ++(*rejected)["(tp, pp, mbs) choices: DeepSpeed's pipeline engine runs 1F1B only"];
        continue;
      }
      if (s == Schedule::kZbH1 && o.optimizer_impl == OptimizerImpl::kTorchFsdp) {
        ++(*rejected)["(tp, pp, mbs) choices: torchtitan's zero-bubble schedules are looped, not ZB-H1 on one stage"];
        continue;
      }
      // A fixed vp the schedule cannot run is counted, not dropped unsaid by --fix's filter.
      if (fixed_vp > 1 && s != Schedule::kInterleaved) {
        ++(*rejected)["(tp, pp, mbs) choices: the fixed vp > 1 needs the interleaved schedule"];
        continue;
      }
      l.schedule = s;
      std::vector<std::int64_t> vps = {1};
      if (s == Schedule::kInterleaved) {
        vps.clear();
        if (mb % l.pp != 0) {
          ++(*rejected)["(tp, pp, mbs) choices: interleaved schedule needs micro-batches divisible by pp"];
          continue;
        }
        if (o.optimizer_impl == OptimizerImpl::kTorchFsdp) {
          vps = TorchtitanVirtualStages(m.num_layers, l.pp);
        } else {
          for (std::int64_t v : Divisors(l.split->vp_divisible)) {
            if (v >= 2) vps.push_back(v);
          }
        }
        if (fixed_vp > 0 && std::find(vps.begin(), vps.end(), fixed_vp) == vps.end()) {
          ++(*rejected)[o.optimizer_impl == OptimizerImpl::kTorchFsdp
                            ? "(tp, pp, mbs) choices: the fixed vp is not one torchtitan makes (pp x vp = ceil((L + 2) / P) "
                              "stages for a pipeline_parallel_layers_per_stage P, or its default 2)"
                            : "(tp, pp, mbs) choices: the fixed vp does not split each pipeline stage's layers into equal "
                              "chunks"];
          continue;
        }
      }
      for (std::int64_t vp : vps) {
        l.vp = vp;
        AddLayoutCandidates(m, cl, o, l, rejected, out);
      }
    }
  }
}

}  // namespace

std::vector<ParallelConfig> GenerateCandidates(const Model& m, const Cluster& cl,
                                               const PlanOptions& o,
                                               std::map<std::string, std::size_t>* rejected) {
  std::vector<ParallelConfig> out;
  const std::int64_t n = o.gpus, g = o.global_batch_size;
  const std::int64_t max_tp = o.max_tp > 0 ? o.max_tp : cl.gpus_per_node;
  const std::int64_t seq = o.seq_length > 0 ? o.seq_length : m.seq_length;
  const bool deepspeed = DeepSpeedOptimizer(o.optimizer_impl);
  // Tensor-parallel sizes: divisors of the GPUs per node up to max_tp, or the fixed one.
  std::vector<std::int64_t> tps;
  if (const std::int64_t ft = FixedInt(o, "tp")) {
    tps = {ft};
  } else {
    for (std::int64_t tp : Divisors(std::max(max_tp, cl.gpus_per_node))) {
      if (tp <= max_tp) tps.push_back(tp);
    }
  }
  for (std::int64_t tp : tps) {
    if (m.num_attention_heads % tp != 0 || m.num_query_groups % tp != 0) {
      ++(*rejected)["tp values: tp does not divide the attention heads or query groups"];
      continue;
    }
    for (const PipelineSplit& split : PipelineSplits(m, o, n % tp == 0 ? n / tp : 1, rejected)) {
      const std::int64_t pp = split.pp;
      if (n % (tp * pp) != 0) {
        ++(*rejected)["(tp, pp) pairs: tp*pp does not divide the GPU count"];
        continue;
      }
      for (std::int64_t cp : ContextParallelSizes(o, seq, n / (tp * pp), rejected)) {
        if (cp > 1 && deepspeed) {
          ++(*rejected)["(tp, pp, cp) choices: context parallelism is Megatron-Core's (DeepSpeed's Ulysses is not searched)"];
          continue;
        }
        const std::int64_t dp = n / (tp * cp * pp);
        if (g % dp != 0) {
          ++(*rejected)[cp > 1 ? "(tp, pp, cp) choices: dp = GPUs/(tp*cp*pp) does not divide the global batch"
                               : "(tp, pp) pairs: dp = GPUs/(tp*pp) does not divide the global batch"];
          continue;
        }
        if (const std::int64_t fm = FixedInt(o, "mbs"); fm > 0 && (g / dp) % fm != 0) {
          ++(*rejected)["(tp, pp) pairs: the fixed mbs does not divide the batch per data-parallel replica"];
          continue;
        }
        Layout l;
        l.tp = tp;
        l.pp = pp;
        l.cp = cp;
        l.dp = dp;
        l.split = &split;
        AddMicroBatchCandidates(m, cl, o, l, rejected, &out);
      }
    }
  }
  return out;
}

namespace {

/// The memory a plan needs per GPU: its allocated peak, or the caching allocator's reserved
/// figure where the replay ran and it is larger; where the replay had to release its cache to
/// stay within this GPU's memory, what it reserves without that limit (bytes).
double MemoryNeedBytes(const SimulationResult& r) {
  return std::max({r.peak_memory_bytes, r.peak_reserved_bytes, r.peak_reserved_unlimited_bytes});
}

/// Why the candidate that came closest does not fit, and what would make it fit: its stage that
/// needs the most (allocated, or reserved where the replay ran), a GPU with enough memory, full
/// recompute, ZeRO-3, more GPUs or smaller micro-batches.
std::vector<std::string> ClosestCandidateAdvice(const Model& m, const PlanOptions& o, double usable,
                                                const Plan& c) {
  std::vector<std::string> advice;
  const auto& st = c.result.stages;
  auto stage_need = [](const StageResult& s) {
    return std::max({s.memory.peak_bytes, s.memory.reserved_bytes, s.memory.reserved_unlimited_bytes});
  };
  // The replay found no room for a request though the allocated peak fits (fragmentation).
  const bool no_room = !c.result.fits && c.result.peak_memory_bytes <= usable;
  std::size_t worst = 0;
  for (std::size_t s = 0; s < st.size(); ++s) {
    if (no_room ? !st[s].fits && st[worst].fits : stage_need(st[s]) > stage_need(st[worst])) worst = s;
  }
  const auto& mem = st[worst].memory;
  const double need = MemoryNeedBytes(c.result);
  const std::string parts = fmt::format(": weights {}, grads {}, optimizer {}, activations {}",
                                        FormatGiB(mem.weights_bytes), FormatGiB(mem.grads_bytes),
                                        FormatGiB(mem.optimizer_bytes), FormatGiB(mem.activations_bytes));
  // A replay that had to release its cache to stay within this GPU's memory reserved less than
  // the same step would on a larger one; the need is what it reserves without the limit.
  const std::string reserved =
      mem.reserved_unlimited_bytes > mem.reserved_bytes
          ? fmt::format(" (what PyTorch's caching allocator reserves without this GPU's limit; {} allocated, {} "
                        "reserved when it releases its cache to stay within it)",
                        FormatGiB(mem.peak_bytes), FormatGiB(mem.reserved_bytes))
      : mem.reserved_bytes > mem.peak_bytes
          ? fmt::format(" (reserved by PyTorch's caching allocator; {} allocated)", FormatGiB(mem.peak_bytes))
          : "";
  if (no_room) {
    std::string why = "the caching allocator's replay finds no room for a request";
    for (const auto& r : c.result.reasons) {
      if (r.rfind(fmt::format("stage {} ", worst), 0) == 0) why = r;
    }
    advice.push_back(fmt::format("the closest candidate ({}): {}{}", c.config.Summary(), why, parts));
  } else if (need > usable) {
    advice.push_back(fmt::format("the closest candidate ({}) needs {} per GPU on stage {}{}, {} more than the {} "
                                 "usable{}", c.config.Summary(), FormatGiB(need), worst, reserved,
                                 FormatGiB(need - usable), FormatGiB(usable), parts));
  } else {
    advice.push_back(fmt::format("the closest candidate ({}) needs {} per GPU on stage {}{}, leaving {} of the {} "
                                 "usable, less than the {} of headroom asked for{}", c.config.Summary(),
                                 FormatGiB(need), worst, reserved, FormatGiB(usable - need), FormatGiB(usable),
                                 FormatGiB(o.min_headroom_bytes), parts));
  }
  std::string bigger;
  double best_mem = 1e300;
  for (const auto& name : PresetNames(PresetKind::kGpu)) {
    Gpu gg = LoadGpu(name);
    if (gg.memory_bytes >= need + o.min_headroom_bytes && gg.memory_bytes > usable && gg.memory_bytes < best_mem) {
      best_mem = gg.memory_bytes;
      bigger = gg.name;
    }
  }
  if (!bigger.empty()) {
    advice.push_back(fmt::format("more memory per GPU: {} ({}) would hold this candidate", bigger,
                                 FormatGiB(best_mem)));
  }
  if (std::find(o.recomputes.begin(), o.recomputes.end(), Recompute::kFull) == o.recomputes.end()) {
    advice.push_back("full activation recompute keeps only each layer's input (allow --recompute full)");
  }
  // ZeRO-3 over all the GPUs is the least state per GPU any sharding gives; advise it only when
  // this candidate's peak with that state instead of its own would leave the headroom.
  ParallelConfig zero3 = c.config;
  zero3.zero_stage = 3;
  const double zero3_state = static_cast<double>(m.Parameters().total) * BytesPerParam(zero3, o.gpus).total();
  const double own_state = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes;
  if (std::find(o.zero_stages.begin(), o.zero_stages.end(), 3) == o.zero_stages.end() && !o.fixed.count("zero") &&
      need - own_state + zero3_state <= usable - o.min_headroom_bytes) {
    advice.push_back(fmt::format("a higher ZeRO stage shards gradients (2) and weights (3) across data "
                                 "parallelism: ZeRO-3 over the {} GPUs holds {} of state per GPU (allow "
                                 "--zero-stages 0,1,2,3)",
                                 o.gpus, FormatGiB(zero3_state)));
  }
  const double state = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes;
  if (state > usable) {
    advice.push_back(fmt::format(
        "more GPUs: weights, gradients and optimizer state alone need {} per GPU here; "
        "about {:.0f}x the GPUs (deeper pipelines or more data-parallel sharding) would bring them under",
        FormatGiB(state), std::ceil(state / (0.7 * usable))));
  } else {
    advice.push_back("smaller micro-batches or more pipeline stages reduce the activations in flight");
  }
  return advice;
}

/// Refuses options the search cannot honour (exit 2 through InputError): no GPUs, no batch, a
/// cost or energy objective without the GPU's price (`price`, USD per GPU-hour) or board power.
void CheckPlanOptions(const Cluster& cl, const PlanOptions& o, double price) {
  if (o.gpus <= 0) {
    throw InputError("command line: --gpus: got " + std::to_string(o.gpus) + ", expected a positive GPU count");
  }
  if (o.global_batch_size <= 0) {
    throw InputError("command line: --gbs: got " + std::to_string(o.global_batch_size) +
                     ", expected a positive global batch size");
  }
  // Ranking by a cost or energy that reads as zero would tie every plan.
  if (o.objective == Objective::kCost && !(price > 0)) {
    throw InputError("command line: --objective cost: GPU '" + cl.gpu.name +
                     "' has no price_usd_per_gpu_hour, expected a price in its GPU file (a cluster JSON whose gpu object has "
                     "price_usd_per_gpu_hour; docs/inputs.md) or --price-per-gpu-hour USD");
  }
  if (o.objective == Objective::kEnergy && !(cl.gpu.tdp_W > 0)) {
    throw InputError("command line: --objective energy: GPU '" + cl.gpu.name +
                     "' has no tdp_W, expected its board power in its GPU file (docs/inputs.md)");
  }
}

/// Runs fn(0..count-1) on `threads` threads, each taking the next index.
void ParallelFor(unsigned threads, std::size_t count, const std::function<void(std::size_t)>& fn) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < count; i = next++) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

/// Nothing fits: the candidates that came closest (those simulated, else the three with the
/// smallest memory bound, simulated now) and advice on what would make one fit, or why no
/// candidate can run at all.
void ExplainNothingFits(const Model& m, const Cluster& cl, const HardwareProfile& prof, const PlanOptions& o,
                        const std::vector<ParallelConfig>& cands, const std::vector<char>& runnable,
                        const std::vector<Bounds>& bounds, const std::map<std::string, std::string>& example,
                        PlanResult* res) {
  const double usable = cl.gpu.memory_bytes;
  if (res->closest.empty() && !cands.empty() && res->at_risk_excluded == 0) {
    std::vector<std::size_t> idx;  // the candidates that can run, by memory bound
    for (std::size_t i = 0; i < cands.size(); ++i) {
      if (runnable[i]) idx.push_back(i);
    }
    std::sort(idx.begin(), idx.end(), [&](auto a, auto b) {
      return bounds[a].peak_memory_lower_bytes < bounds[b].peak_memory_lower_bytes ||
             (bounds[a].peak_memory_lower_bytes == bounds[b].peak_memory_lower_bytes && a < b);
    });
    for (std::size_t j = 0; j < idx.size() && j < 3; ++j) {
      Plan p;
      p.config = cands[idx[j]];
      p.result = Simulate(m, p.config, cl, o.gpus, prof);  // with the allocator's replay
      res->closest.push_back(std::move(p));
    }
  }
  std::sort(res->closest.begin(), res->closest.end(), [](const Plan& a, const Plan& b) {
    const double na = MemoryNeedBytes(a.result), nb = MemoryNeedBytes(b.result);
    return na < nb || (na == nb && Key(a.config) < Key(b.config));
  });
  if (res->closest.size() > 3) res->closest.resize(3);
  if (res->at_risk_excluded > 0) {
    res->advice.push_back(fmt::format(
        "{} plans fit but were left out as at risk of running out of memory (they fit only by releasing the "
        "caching allocator's cache); without --exclude-at-risk they are ranked and marked",
        res->at_risk_excluded));
  }
  if (cands.empty()) {
    std::string why;
    for (const auto& [r, c] : res->not_generated) why += fmt::format("; {} x {}", c, r);
    res->advice.push_back(fmt::format("no candidate configuration could be formed for {} GPUs and global batch {}{}",
                                     o.gpus, o.global_batch_size, why));
  } else if (res->at_risk_excluded > 0) {
    // Advised above: the plans fit; only the risk flag left them out.
  } else if (res->closest.empty()) {
    std::string why;
    for (const auto& [r, c] : res->rejected) {
      const auto e = example.find(r);
      why += fmt::format("; {} x {}{}", c, r, e == example.end() ? "" : " (e.g. " + e->second + ")");
    }
    res->advice.push_back("no candidate configuration can run" + why);
  } else {
    for (auto& a : ClosestCandidateAdvice(m, o, usable, res->closest.front())) res->advice.push_back(std::move(a));
  }
}

}  // namespace

double PlanPrice(const PlanOptions& o, const Cluster& cl) {
  return o.price_usd_per_gpu_hour > 0 ? o.price_usd_per_gpu_hour : cl.gpu.price_usd_per_gpu_hour;
}

namespace {

/// RunPlan's search (docs/planner.md, "Pruning and evaluation"): its candidates, their bounds, the
/// simulated pool and the steps that fill them.
class PlanSearch {
 public:
  PlanSearch(const Model& model, const Cluster& cluster, const HardwareProfile& profile, const PlanOptions& options,
             double price)
      : m_(model), cl_(cluster), prof_(profile), o_(options), price_usd_per_gpu_hour_(price) {}

  PlanResult Run() && {
    cands_ = GenerateCandidates(m_, cl_, o_, &res_.not_generated);
    res_.candidates_generated = cands_.size();
    SetAsideUnrunnable();
    SimulateByBound(BoundAndPrune());
    EscalatePartialRecompute();
    RankWithReplay();
    Finish();
    if (res_.plans.empty()) ExplainNothingFits(m_, cl_, prof_, o_, cands_, runnable_, bounds_, example_, &res_);
    return std::move(res_);
  }

 private:
  void ForEach(std::size_t count, const std::function<void(std::size_t)>& fn) const { ParallelFor(threads_, count, fn); }
  void SetAsideUnrunnable(std::size_t first = 0);
  std::vector<std::size_t> BoundAndPrune();
  std::vector<std::size_t> BoundFrom(std::size_t first);
  std::vector<std::size_t> BoundAdded(std::size_t first);
  void SortByBound(std::vector<std::size_t>* order) const;
  void AddPartialRecompute(std::vector<std::size_t>* order);
  bool AddVariant(std::size_t full, const ParallelConfig* after, double none_bytes);
  bool EscalatePartialRecompute();
  bool FitsBound(std::size_t i) const {
    return runnable_[i] && bounds_[i].peak_memory_lower_bytes <= usable_ - o_.min_headroom_bytes;
  }
  void SimulateOne(std::size_t i);
  void SimulateByBound(const std::vector<std::size_t>& order);
  void Rank();
  void RankWithReplay();
  void Finish();
  /// The replay's verdict: room for every request, and the reserved figure within the headroom.
  bool FitsReplayed(const SimulationResult& r) const { return r.fits && r.peak_reserved_bytes <= usable_ - o_.min_headroom_bytes; }
  static bool PlanLess(const Plan& a, const Plan& b) {
    if (a.result.step_time_s != b.result.step_time_s) return a.result.step_time_s < b.result.step_time_s;
    return Key(a.config) < Key(b.config);
  }

  const Model& m_;
  const Cluster& cl_;
  const HardwareProfile& prof_;
  const PlanOptions& o_;
  const double price_usd_per_gpu_hour_;
  const double usable_ = cl_.gpu.memory_bytes;
  const unsigned threads_ = o_.threads > 0 ? static_cast<unsigned>(o_.threads) : std::max(1u, std::thread::hardware_concurrency());
  const std::size_t k_ = static_cast<std::size_t>(std::max(1, o_.top_k));
  const std::string no_fit_ = o_.min_headroom_bytes > 0 ? "does not fit with the required headroom (simulated)"
                                                      : "does not fit in memory (simulated)";
  PlanResult res_;
  std::vector<ParallelConfig> cands_;
  std::vector<char> runnable_;
  std::map<std::string, std::string> example_;  ///< rejection key -> the first candidate's reason, with values
  std::vector<Bounds> bounds_;
  LayerCostCache layer_costs_;  // candidates that differ only in pp, vp, dp, ZeRO, ... share their layers
  /// Partial recompute: each family's full-recompute candidate (FamilyKey -> index), the variants
  /// made, and the simulated candidates without recompute or with partial recompute that did not fit.
  std::map<decltype(Key(ParallelConfig{})), std::size_t> full_of_;
  std::set<decltype(Key(ParallelConfig{}))> partial_made_;
  std::vector<ParallelConfig> unfit_;
  std::mutex mu_;
  /// Every simulated plan that fits by its allocated peak with the headroom (the caching
  /// allocator's replay runs later, on the ones the ranking reaches), and the K best of them,
  /// which bound the search.
  std::vector<Plan> pool_;
  std::vector<double> top_allocated_s_;  ///< the K best step times of the pool, ascending
  std::vector<std::size_t> pruned_;      ///< candidates the bound skipped
  std::atomic<std::size_t> done_{0}, simulated_{0};
  std::size_t replayed_ = 0;
  std::map<std::string, std::size_t> rej_local_, rej_replay_;
  std::vector<Plan> top_;
};

/// 0. The rules a configuration must satisfy to run at all (InfeasibilityReasons, the same check
///    Simulate makes): set aside before any bound is computed.
void PlanSearch::SetAsideUnrunnable(std::size_t first) {
  runnable_.resize(cands_.size(), 0);
  for (std::size_t i = first; i < cands_.size(); ++i) {
    const auto broken = InfeasibilityRules(m_, cands_[i], o_.gpus, cl_);
    runnable_[i] = broken.empty();
    if (broken.empty()) continue;
    const std::string key = "cannot run: " + broken.front().rule;
    ++res_.rejected[key];
    example_.emplace(key, broken.front().text);
  }
}

/// Lower bounds of candidates first.. (exact); the indices of those that can fit in memory.
std::vector<std::size_t> PlanSearch::BoundFrom(std::size_t first) {
  bounds_.resize(cands_.size(), Bounds{});
  ForEach(cands_.size() - first, [&](std::size_t j) {
    const std::size_t i = first + j;
    if (runnable_[i]) bounds_[i] = LowerBounds(m_, cands_[i], cl_, prof_, &layer_costs_);
  });
  res_.layer_sets_kept = layer_costs_.entries();
  std::vector<std::size_t> order;
  for (std::size_t i = first; i < cands_.size(); ++i) {
    if (!runnable_[i]) continue;
    if (!FitsBound(i)) {
      ++res_.rejected[o_.min_headroom_bytes > 0 ? "does not fit with the required headroom (memory lower bound, not simulated)"
                                              : "does not fit in memory (memory lower bound, not simulated)"];
    } else {
      order.push_back(i);
    }
  }
  return order;
}

/// A candidate's family: the candidate without recompute, whatever its recompute (Key).
auto FamilyKey(const ParallelConfig& c) {
  ParallelConfig f = c;
  f.recompute = Recompute::kNone;
  f.recompute_modules = ParallelConfig{}.recompute_modules;
  f.recompute_block_layers = -1;
  f.recompute_layer_interval = 0;
  return Key(f);
}

/// Adds the partial-recompute variant of full-recompute candidate `full` that recomputes the
/// fewest layers, after variant `after` where given (PartialRecomputeVariants' order) and, where
/// `none_bytes` >= 0 (a memory figure of the candidate without recompute), whose memory read off
/// it and the full candidate's lower bound in proportion to the layers recomputed fits, unless it
/// was made before. Whether one was added.
bool PlanSearch::AddVariant(std::size_t full, const ParallelConfig* after, double none_bytes) {
  const double full_bytes = bounds_[full].peak_memory_lower_bytes;
  bool passed = after == nullptr;
  for (const auto& [x, share] : PartialRecomputeVariants(m_, o_, cands_[full])) {
    if (!passed) {
      passed = Key(x) == Key(*after);
      continue;
    }
    if (none_bytes >= 0 && none_bytes + (full_bytes - none_bytes) * share > usable_ - o_.min_headroom_bytes) continue;
    if (!partial_made_.insert(Key(x)).second) return false;  // made already (and followed up from)
    cands_.push_back(x);
    return true;
  }
  return false;
}

/// Counts the candidates from `first` on as partial recompute and bounds them (set aside, pruned
/// by memory); those that can fit.
std::vector<std::size_t> PlanSearch::BoundAdded(std::size_t first) {
  res_.partial_recompute_candidates += cands_.size() - first;
  res_.candidates_generated = cands_.size();
  SetAsideUnrunnable(first);
  return BoundFrom(first);
}

/// Sorts candidate indices most promising first (by step-time lower bound).
void PlanSearch::SortByBound(std::vector<std::size_t>* order) const {
  std::sort(order->begin(), order->end(), [&](std::size_t a, std::size_t b) {
    if (bounds_[a].step_time_lower_s != bounds_[b].step_time_lower_s) {
      return bounds_[a].step_time_lower_s < bounds_[b].step_time_lower_s;
    }
    return a < b;
  });
}

/// 1b. Partial recompute (PartialRecomputeVariants, when the recompute choices hold none and full):
///     beside each full-recompute candidate that can fit in memory whose twin without recompute
///     cannot by its lower bound (where it can, it is faster: rerunning layers only adds time), the
///     variant recomputing the fewest layers whose memory, read off the two lower bounds in
///     proportion to the layers recomputed, fits (EscalatePartialRecompute adds more). Those that
///     can fit join `order`.
void PlanSearch::AddPartialRecompute(std::vector<std::size_t>* order) {
  const auto has = [&](Recompute r) { return std::find(o_.recomputes.begin(), o_.recomputes.end(), r) != o_.recomputes.end(); };
  if (!o_.partial_recompute || !has(Recompute::kNone) || !has(Recompute::kFull)) return;
  const std::size_t n = cands_.size();
  std::map<decltype(Key(ParallelConfig{})), std::size_t> plain;  // a candidate without recompute -> its index
  for (std::size_t i = 0; i < n; ++i) {
    if (cands_[i].recompute == Recompute::kNone) plain.emplace(Key(cands_[i]), i);
    if (cands_[i].recompute == Recompute::kFull) full_of_.emplace(FamilyKey(cands_[i]), i);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (cands_[i].recompute != Recompute::kFull || !FitsBound(i)) continue;
    const auto it = plain.find(FamilyKey(cands_[i]));
    if (it == plain.end() || !runnable_[it->second] || FitsBound(it->second)) continue;
    AddVariant(i, nullptr, bounds_[it->second].peak_memory_lower_bytes);
  }
  const std::vector<std::size_t> more = BoundAdded(n);
  order->insert(order->end(), more.begin(), more.end());
}

/// 2b. Where a simulated candidate without recompute, or with partial recompute, did not fit by
///     its allocated peak (the lower bounds leave out some working memory) or by the caching
///     allocator's replay when ranked (3.), the next variant of
///     its family's full-recompute candidate: the one recomputing the fewest layers beyond it.
///     Repeated while that adds any; whether it added any.
bool PlanSearch::EscalatePartialRecompute() {
  bool added = false;
  for (;;) {
    std::vector<ParallelConfig> unfit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      unfit.swap(unfit_);
    }
    std::sort(unfit.begin(), unfit.end(), [](const ParallelConfig& a, const ParallelConfig& b) { return Key(a) < Key(b); });
    const std::size_t n = cands_.size();
    for (const ParallelConfig& c : unfit) {
      const auto it = full_of_.find(FamilyKey(c));
      if (it == full_of_.end() || !FitsBound(it->second)) continue;
      // After c's own variant where c has partial recompute; the first variant where c has none.
      AddVariant(it->second, c.PartialRecompute() ? &c : nullptr, -1.0);
    }
    if (cands_.size() == n) return added;
    added = true;
    std::vector<std::size_t> order = BoundAdded(n);
    SortByBound(&order);
    SimulateByBound(order);
  }
}

/// 1. Exact lower bounds; prunes what cannot fit in memory. The rest, most promising first (by
///    step-time lower bound).
std::vector<std::size_t> PlanSearch::BoundAndPrune() {
  std::vector<std::size_t> order = BoundFrom(0);
  AddPartialRecompute(&order);
  SortByBound(&order);
  return order;
}

/// Simulates candidate i (without the allocator's replay) into the pool, or the closest, or a
/// rejection.
void PlanSearch::SimulateOne(std::size_t i) {
  Plan p;
  p.config = cands_[i];
  p.result = Simulate(m_, cands_[i], cl_, o_.gpus, prof_, SearchOptions());
  ++simulated_;
  const double tokens = static_cast<double>(cands_[i].global_batch_size * cands_[i].seq_length);
  p.usd_per_million_tokens = static_cast<double>(o_.gpus) * price_usd_per_gpu_hour_ / 3600.0 * p.result.step_time_s / tokens * 1e6;
  p.joules_per_token = static_cast<double>(o_.gpus) * cl_.gpu.tdp_W * o_.energy_overhead * p.result.step_time_s / tokens;
  const bool fits = p.result.feasible && p.result.fits && p.result.peak_memory_bytes <= usable_ - o_.min_headroom_bytes;
  std::lock_guard<std::mutex> lock(mu_);
  if (p.result.feasible) {
    res_.points.push_back({p.config.Summary(), p.result.step_time_s, p.result.peak_memory_bytes,
                          p.result.peak_memory_bytes, fits, false});
  }
  if (!p.result.feasible) {
    // Safeguard: step 0 set these aside already (Simulate checks the same rules).
    ++rej_local_["cannot run: " + (p.result.reasons.empty() ? std::string("?") : p.result.reasons.front())];
  } else if (!fits) {
    ++rej_local_[no_fit_];
    if (cands_[i].recompute == Recompute::kNone || cands_[i].PartialRecompute()) unfit_.push_back(cands_[i]);
    res_.closest.push_back(std::move(p));
  } else {
    top_allocated_s_.insert(std::upper_bound(top_allocated_s_.begin(), top_allocated_s_.end(), p.result.step_time_s),
                           p.result.step_time_s);
    if (top_allocated_s_.size() > k_) top_allocated_s_.pop_back();
    pool_.push_back(std::move(p));
  }
}

/// 2. Simulates, most promising first; skips those whose step-time lower bound cannot beat the
///    K-th best by allocated peak (never skips a member of that top K: its lower bound is at most
///    its step time, which is at most the K-th best at any moment).
void PlanSearch::SimulateByBound(const std::vector<std::size_t>& order) {
  ForEach(order.size(), [&](std::size_t j) {
    const std::size_t i = order[j];
    bool skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      skip = top_allocated_s_.size() >= k_ && bounds_[i].step_time_lower_s > top_allocated_s_.back();
      if (skip) pruned_.push_back(i);
    }
    if (!skip) SimulateOne(i);
    ++done_;
    if (o_.progress) o_.progress(done_, order.size());
  });
}

/// Walks the pool best first, replaying each plan (ReplayAllocator), until K plans fit by their
/// reserved figure with the headroom and the best plan not at risk is found.
void PlanSearch::Rank() {
  std::sort(pool_.begin(), pool_.end(), PlanLess);
  top_.clear();
  rej_replay_.clear();
  res_.best_not_at_risk.reset();
  res_.at_risk_excluded = 0;
  for (std::size_t j = 0; j < pool_.size() && (top_.size() < k_ || !res_.best_not_at_risk); ++j) {
    Plan& p = pool_[j];
    if (!p.result.allocator_replayed) {
      ReplayAllocator(m_, p.config, cl_, prof_, &p.result);
      ++replayed_;
    }
    if (!FitsReplayed(p.result)) {
      ++rej_replay_[no_fit_];
      if (p.config.recompute == Recompute::kNone || p.config.PartialRecompute()) unfit_.push_back(p.config);
      continue;
    }
    if (!p.result.memory_at_risk && !res_.best_not_at_risk) res_.best_not_at_risk = p;
    if (o_.exclude_memory_at_risk && p.result.memory_at_risk) {
      ++rej_replay_["at risk of running out of memory (fits only by releasing the allocator's cache; simulated)"];
      ++res_.at_risk_excluded;
    } else if (top_.size() < k_) {
      top_.push_back(p);
    }
  }
}

/// 3. Ranks with the caching allocator's replay (Rank). When the replay turned plans away, the
///    K-th ranked plan (or the best not at risk) is slower than the bound assumed: the skipped
///    candidates whose lower bound does not exceed it are simulated and the walk runs again
///    (exact, as above); so it does when the walk turned away plans that partial recompute can
///    follow up (2b).
void PlanSearch::RankWithReplay() {
  for (;;) {
    Rank();
    if (EscalatePartialRecompute()) continue;  // new candidates to rank
    const double inf = std::numeric_limits<double>::infinity();
    const double kth_s = top_.size() >= k_ ? top_.back().result.step_time_s : inf;
    const double safe_s = res_.best_not_at_risk ? res_.best_not_at_risk->result.step_time_s : inf;
    const double reach_s = std::max(kth_s, safe_s);
    std::vector<std::size_t> again, still;
    for (std::size_t i : pruned_) (bounds_[i].step_time_lower_s <= reach_s ? again : still).push_back(i);
    if (again.empty()) break;
    pruned_ = std::move(still);
    res_.candidates_revisited += again.size();
    ForEach(again.size(), [&](std::size_t j) { SimulateOne(again[j]); });
  }
}

/// The rejections, the replay's verdict on the plotted points, the counts, the points by step
/// time and the plans by the objective.
void PlanSearch::Finish() {
  if (!pruned_.empty()) rej_local_["cannot beat the top K (step-time lower bound, not simulated)"] += pruned_.size();
  for (const auto& [r, c] : rej_replay_) rej_local_[r] += c;
  std::map<std::string, const Plan*> replayed_plans;
  for (const Plan& p : pool_) {
    if (!p.result.allocator_replayed) continue;
    replayed_plans[p.config.Summary()] = &p;
    if (!FitsReplayed(p.result)) res_.closest.push_back(p);
  }
  for (auto& pt : res_.points) {  // the replay's verdict where it ran
    const auto it = replayed_plans.find(pt.config);
    if (it == replayed_plans.end()) continue;
    pt.fits = FitsReplayed(it->second->result);
    pt.peak_reserved_bytes = std::max(pt.peak_memory_bytes, it->second->result.peak_reserved_bytes);
    pt.at_risk = it->second->result.memory_at_risk;
  }
  for (const auto& [r, c] : rej_local_) res_.rejected[r] += c;
  res_.candidates_simulated = simulated_;
  res_.candidates_replayed = replayed_;
  std::sort(res_.points.begin(), res_.points.end(), [](const PlanPoint& a, const PlanPoint& b) {
    return a.step_time_s != b.step_time_s ? a.step_time_s < b.step_time_s : a.config < b.config;
  });
  std::sort(top_.begin(), top_.end(), [&](const Plan& a, const Plan& b) {
    const double va = ObjectiveValue(a, o_.objective), vb = ObjectiveValue(b, o_.objective);
    if (va != vb) return va < vb;
    return Key(a.config) < Key(b.config);
  });
  res_.plans = std::move(top_);
}

}  // namespace

PlanResult RunPlan(const Model& m, const Cluster& cl, const HardwareProfile& prof,
                   const PlanOptions& o) {
  const double price = PlanPrice(o, cl);
  CheckPlanOptions(cl, o, price);
  return PlanSearch(m, cl, prof, o, price).Run();
}

std::string KnownBias(const ParallelConfig& c) {
  if (c.recompute != Recompute::kNone) return "";
  return "without activation recompute: the published PyTorch FSDP runs without it (MPT-3B on H100, validate rows "
         "217-219) took 21-27% longer than predicted (llm-foundry's same-table MPT-1b and 7b runs without it, 16-33%; "
         "scripts/llm-foundry-crosscheck.py), so time and cost may be up to a third higher (NeMo's Megatron-Core "
         "runs without it, rows 56-67, were within -15% to +8%)";
}

}  // namespace shardcast
