#include <algorithm>
#include <iostream>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/config_args.h"
#include "cli/plan_common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "models/loader.h"
#include "report/allocator_trace.h"
#include "report/html.h"
#include "report/text.h"
#include "simulator/cost_model.h"
#include "simulator/simulate.h"
#include "simulator/straggler.h"

namespace shardcast::cli {

namespace {

/// --cp-comm-type and --hierarchical-context-parallel-sizes into `c`.
void ApplyContextParallelArgs(const SimulateArgs& a, ParallelConfig* c) {
  const std::string t = a.cp_comm.empty() ? "p2p" : a.cp_comm;
  if (!a.cp_comm.empty() && a.cp_comm != "p2p" && a.cp == 1) {
    throw InputError("command line: --cp-comm-type: got " + a.cp_comm +
                     " with --cp 1, expected --cp of 2 or more (it says how context-parallel ranks exchange K/V)");
  }
  c->cp_comm = ParseCpComm(t);
  if (!a.cp_hierarchy.empty()) {
    std::int64_t product = 1;
    for (std::int64_t x : a.cp_hierarchy) product *= x;
    if (a.cp_hierarchy.size() != 2 || product != a.cp) {
      throw InputError(fmt::format("command line: --hierarchical-context-parallel-sizes: got {} value(s) with product "
                                   "{}, expected two sizes (all-to-all, then ring) whose product is --cp {}",
                                   a.cp_hierarchy.size(), product, a.cp));
    }
    if (c->cp_comm != CpComm::kA2AP2P) {
      throw InputError("command line: --hierarchical-context-parallel-sizes: given with --cp-comm-type " + t +
                       ", expected --cp-comm-type a2a+p2p (the sizes of its all-to-all and ring levels)");
    }
    c->cp_a2a = a.cp_hierarchy[0];
  }
}

/// Virtual stages per pipeline rank from --vp or Megatron-LM's --num-layers-per-virtual-pipeline-stage
/// (1 when neither is given); InputError when they disagree or do not divide.
std::int64_t VirtualStages(const SimulateArgs& a, const Model& m) {
  if (a.layers_per_vp > 0 && a.vp > 0 && a.vp * a.layers_per_vp * a.pp != m.num_layers) {
    throw InputError(fmt::format("command line: --num-layers-per-virtual-pipeline-stage: got {}, expected num_layers / "
                                 "(pp * vp) = {} / ({} * {}) to agree with --vp (give one of them)",
                                 a.layers_per_vp, m.num_layers, a.pp, a.vp));
  }
  if (a.layers_per_vp > 0 && (a.first_stage_layers >= 0 || a.last_stage_layers >= 0 || a.emb_slots ||
                              a.mcore_account_embedding)) {
    throw InputError("command line: --num-layers-per-virtual-pipeline-stage: given with an uneven pipeline split, "
                     "expected --vp (--num-virtual-stages-per-pipeline-rank) instead, as Megatron-LM requires");
  }
  if (a.layers_per_vp > 0) {
    if (m.num_layers % (a.pp * a.layers_per_vp) != 0) {
      throw InputError(fmt::format("command line: --num-layers-per-virtual-pipeline-stage: got {}, expected a divisor "
                                   "of num_layers / pp = {} / {}", a.layers_per_vp, m.num_layers, a.pp));
    }
    return m.num_layers / (a.pp * a.layers_per_vp);
  }
  return a.vp > 0 ? a.vp : 1;
}

/// Megatron-LM's --num-experts and --moe-router-topk, which plan prints among its arguments:
/// the model's file sets the architecture, so a value other than the model's exits 2 (InputError)
/// naming both, and either flag on a dense model does too.
void CheckModelMoeArgs(const SimulateArgs& a, const Model& m) {
  const std::pair<const char*, std::int64_t> given[] = {{"--num-experts", a.num_experts},
                                                         {"--moe-router-topk", a.moe_topk}};
  const std::int64_t have[] = {m.moe.num_experts, m.moe.top_k};
  for (int i = 0; i < 2; ++i) {
    if (given[i].second == 0) continue;
    if (!m.moe.enabled()) {
      throw InputError(fmt::format("command line: {}: got {}, but {} has no routed experts (a dense model; its file "
                                   "sets the architecture)", given[i].first, given[i].second, m.name));
    }
    if (given[i].second != have[i]) {
      throw InputError(fmt::format("command line: {}: got {}, expected {}, {}'s (its file sets the architecture)",
                                   given[i].first, given[i].second, have[i], m.name));
    }
  }
}

/// Exit 2 when the pipeline split flags given do not add up (PipelineLayoutOf), naming them.
void CheckPipelineSplitArgs(const SimulateArgs& a, const Model& m, const ParallelConfig& c) {
  const bool uneven = a.first_stage_layers >= 0 || a.last_stage_layers >= 0;
  if (a.even_chunks && uneven) {
    // Megatron-Core refuses a --pipeline-model-parallel-layout beside first/last stage counts.
    // With the embedding slots the layout string itself places the embedding and the loss.
    throw InputError(fmt::format("command line: --pipeline-layout-even: given with {}, expected one of them (the "
                                 "layout string it writes sets every stage's layers; Megatron-Core refuses both)",
                                 a.first_stage_layers >= 0 ? "--decoder-first-pipeline-num-layers"
                                                           : "--decoder-last-pipeline-num-layers"));
  }
  if (a.even_chunks && c.pp < 2) {
    throw InputError(fmt::format("command line: --pipeline-layout-even: given with --pp {}, expected --pp 2 or more "
                                 "(it spreads the layers over pipeline stages)",
                                 c.pp));
  }
  if (!uneven && !(c.embedding_slots && c.vp > 1)) return;
  if (c.pp > m.num_layers) return;  // InfeasibilityReasons says so
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  if (layout.error.empty()) return;
  std::string flags;
  if (a.first_stage_layers >= 0) flags += fmt::format("--decoder-first-pipeline-num-layers {} ", a.first_stage_layers);
  if (a.last_stage_layers >= 0) flags += fmt::format("--decoder-last-pipeline-num-layers {} ", a.last_stage_layers);
  if (!uneven) flags += "--account-for-embedding-in-pipeline-split ";
  throw InputError(fmt::format("command line: {}with --pp {}{} and num_layers = {}: {}", flags, c.pp,
                               c.vp > 1 ? fmt::format(" --vp {}", c.vp) : std::string(), m.num_layers, layout.error));
}

}  // namespace

/// --dp-shard or --num-distributed-optimizer-instances into c->dp_shard (0 where it shards over
/// every rank); InputError when both are given or the value breaks HybridShardRules.
static void ApplyHybridShard(const SimulateArgs& a, ParallelConfig* c) {
  if (a.dp_shard > 0 && a.dist_opt_instances > 0) {
    throw InputError("command line: --dp-shard and --num-distributed-optimizer-instances both given, expected one "
                     "(instances = dp*cp / dp-shard)");
  }
  const char* flag = a.dp_shard > 0 ? "--dp-shard" : "--num-distributed-optimizer-instances";
  if (a.dist_opt_instances > 0) {
    if (c->dp_cp() < 1 || c->dp_cp() % a.dist_opt_instances != 0) {
      throw InputError(fmt::format("command line: {}: got {}, expected a divisor of the {} data-parallel ranks "
                                   "(dp {} x cp {})", flag, a.dist_opt_instances, c->dp_cp(), c->dp, c->cp));
    }
    c->dp_shard = c->dp_cp() / a.dist_opt_instances;
  } else if (a.dp_shard > 0) {
    c->dp_shard = a.dp_shard;
  } else {
    return;
  }
  if (c->dp_shard == c->dp_cp()) c->dp_shard = 0;  // sharded over every rank: plain ZeRO
  if (c->dp_cp() < 1) return;  // dp unknown: InfeasibilityReasons says why
  const auto broken = HybridShardRules(*c);
  if (!broken.empty()) {
    throw InputError(a.dp_shard > 0 ? fmt::format("command line: --dp-shard: {}", broken.front().text)
                                    : fmt::format("command line: {}: got {} instances: {}", flag,
                                                  a.dist_opt_instances, broken.front().text));
  }
}

/// The ZeRO-3 framework knobs: FSDP's rate limiter (--no-limit-all-gathers) and DeepSpeed's
/// buckets and stage-3 limits (--reduce-bucket-size, --stage3-*), each refused (exit 2) where it
/// does not apply.
static void ApplyZeroKnobs(const SimulateArgs& a, ParallelConfig* c) {
  // What the error names: the ZeRO stage, and with ZeRO-3 its implementation.
  const std::string given = fmt::format("--zero {}{}", c->zero_stage,
                                        c->zero_stage == 3 ? fmt::format(" --zero3-impl {}", ToString(c->zero3_impl)) : "");
  if (a.no_limit_all_gathers) {
    if (c->zero_stage != 3 || c->zero3_impl != Zero3Impl::kPerLayer) {
      throw InputError(fmt::format("command line: --no-limit-all-gathers: got it with {}, expected --zero 3 "
                                   "with the per-layer gathers (PyTorch FSDP's FULL_SHARD rate limiter)",
                                   given));
    }
    c->zero3_limit_all_gathers = false;
  }
  ApplyDeepSpeedKnobs(a.opt, /*refuse=*/true, c);
}

namespace {

/// Partial recompute's combinations the cost model does not build (exit 2).
void CheckPartialRecompute(const ParallelConfig& c) {
  if (!c.PartialRecompute()) return;
  const std::string where = c.recompute_block_layers >= 0 ? "command line: --recompute-method block"
                                                           : "command line: --selective-ac-option";
  if (c.bf16_layers_start + c.bf16_layers_end > 0) {
    throw InputError(where + ": given with --first-last-layers-bf16, expected one of them (partial recompute of "
                     "layers kept in bf16 is not modelled)");
  }
  if (c.deepspeed_zero3() || c.deepspeed2021_zero3()) {
    throw InputError(where + ": given with DeepSpeed's ZeRO-3 (--zero3-impl " + ToString(c.zero3_impl) +
                     "), expected --zero3-impl per-layer (DeepSpeed's gather plan assumes every layer alike)");
  }
  if (c.offload_modules != 0) {
    throw InputError(where + ": given with --offload-modules, expected one of them (offloading beside partial "
                     "recompute is not modelled)");
  }
}

/// Megatron-LM's --recompute-method and --recompute-num-layers into `c` (full recompute only;
/// uniform groups of more than one layer are not modelled).
void ApplyRecomputeMethodArgs(const SimulateArgs& a, ParallelConfig* c) {
  if (a.recompute_method.empty()) {
    if (a.recompute_num_layers >= 0) {
      throw InputError(fmt::format("command line: --recompute-num-layers: got {} without --recompute-method, expected "
                                   "--recompute-method block (the first N layers of each pipeline chunk) or uniform",
                                   a.recompute_num_layers));
    }
    return;
  }
  if (c->recompute != Recompute::kFull) {
    throw InputError(std::string("command line: --recompute-method: given with --recompute ") + ToString(c->recompute) +
                     ", expected --recompute full (Megatron-LM's --recompute-granularity full)");
  }
  const std::int64_t n = a.recompute_num_layers >= 0 ? a.recompute_num_layers : 1;  // Megatron-LM's default 1
  if (a.recompute_method == "block") {
    c->recompute_block_layers = n;
  } else if (n != 1) {
    throw InputError(fmt::format("command line: --recompute-num-layers: got {} with --recompute-method uniform, "
                                 "expected 1 (checkpointing groups of layers as one is not modelled; block recomputes "
                                 "the first N layers of each chunk)", n));
  }
}

/// --recompute / --recompute-granularity / --recompute-modules into `c` (exit 2 when they disagree).
void ApplyRecomputeArgs(const SimulateArgs& a, const Model& m, ParallelConfig* c) {
  if (!a.recompute_granularity.empty() && !a.recompute.empty() && a.recompute != "none" &&
      a.recompute != a.recompute_granularity) {
    throw InputError("command line: --recompute-granularity: got \"" + a.recompute_granularity +
                     "\", expected the same as --recompute \"" + a.recompute + "\" (give one of them)");
  }
  std::string rc = a.recompute_granularity.empty() ? a.recompute : a.recompute_granularity;
  if (rc.empty()) rc = "none";
  c->recompute = rc == "none" ? Recompute::kNone : rc == "selective" ? Recompute::kSelective : Recompute::kFull;
  if (!a.recompute_modules.empty()) {
    if (c->recompute == Recompute::kFull) {
      throw InputError("command line: --recompute-modules: given with --recompute full, expected --recompute selective "
                       "(Megatron-Core's recompute modules are a selective granularity)");
    }
    c->recompute = Recompute::kSelective;
    c->recompute_modules = ParseRecomputeModules(a.recompute_modules, "command line: --recompute-modules");
    RequireRecomputeModules(m, c->recompute_modules, "command line: --recompute-modules");
  }
  ApplyRecomputeMethodArgs(a, c);
  if (!a.selective_ac_option) return;
  const std::string& option = *a.selective_ac_option;
  const std::string where = "command line: --selective-ac-option";
  const bool digits = !option.empty() && option.find_first_not_of("0123456789") == std::string::npos;
  if (option != "op" && !(digits && option.size() <= 6)) {
    throw InputError(where + ": got \"" + option + "\", expected op or a layer frequency N "
                     "(0 to 999999; torchtitan's activation_checkpoint.selective_ac_option)");
  }
  if (!a.recompute_modules.empty() || !a.recompute_method.empty()) {
    throw InputError(where + ": given with " + (a.recompute_method.empty() ? "--recompute-modules" : "--recompute-method") +
                     ", expected one of them (torchtitan's policies or Megatron-LM's)");
  }
  if (c->recompute == Recompute::kFull || (a.recompute_granularity.empty() && a.recompute == "none")) {
    throw InputError(where + ": given with " + (a.recompute_granularity.empty() ? "--recompute" : "--recompute-granularity") +
                     " " + rc + ", expected selective (torchtitan's activation_checkpoint.mode = \"selective\")");
  }
  if (digits) {
    // torchtitan's layer-frequency option: whole blocks checkpointed (0: every block).
    c->recompute = Recompute::kFull;
    c->recompute_layer_interval = std::stoll(option);
    if (c->recompute_layer_interval == 1) c->recompute_layer_interval = 0;  // every block: full recompute
    return;
  }
  c->recompute = Recompute::kSelective;
  c->recompute_modules = kRecomputeTorchOps;
  RequireTorchOpCheckpointing(m, where);
}

/// --cross-entropy and Megatron-LM's --cross-entropy-loss-fusion / --cross-entropy-fusion-impl into `c`.
void ApplyCrossEntropyArgs(const SimulateArgs& a, ParallelConfig* c) {
  if (!a.ce_impl.empty() && !a.ce_fusion) {
    throw InputError("command line: --cross-entropy-fusion-impl: got \"" + a.ce_impl +
                     "\" without --cross-entropy-loss-fusion, expected both (Megatron-Core reads the impl only then)");
  }
  if (a.ce_fusion) c->cross_entropy = a.ce_impl == "te" ? CrossEntropyImpl::kTe : CrossEntropyImpl::kNative;
  if (!a.cross_entropy.empty()) {
    if (a.ce_fusion) {
      throw InputError("command line: --cross-entropy: got \"" + a.cross_entropy +
                       "\" with --cross-entropy-loss-fusion, expected one of them (the Megatron flags name "
                       "--cross-entropy native or te)");
    }
    c->cross_entropy = CrossEntropyImplNamed(a.cross_entropy).value_or(c->cross_entropy);  // CLI11 checked the name
  }
}

/// The pipeline split's flags into `c`: embedding and loss slots, first/last stage layers, even chunks.
void ApplyStageLayoutArgs(const SimulateArgs& a, ParallelConfig* c) {
  // Megatron-LM's two flags each add one slot; the model has both (the embedding and the output
  // layer as slots), so one alone would be a split it cannot represent.
  if (a.mcore_account_embedding != a.mcore_account_loss) {
    throw InputError(std::string("command line: ") +
                     (a.mcore_account_embedding ? "--account-for-embedding-in-pipeline-split"
                                                : "--account-for-loss-in-pipeline-split") +
                     ": given alone, expected both --account-for-embedding-in-pipeline-split and "
                     "--account-for-loss-in-pipeline-split (the embedding and the output layer as pipeline slots; one "
                     "slot alone is not modelled)");
  }
  c->embedding_slots = a.emb_slots || a.mcore_account_embedding;
  c->first_stage_layers = a.first_stage_layers;
  c->last_stage_layers = a.last_stage_layers;
  c->even_chunks = a.even_chunks;
  if (a.pipeline_flushes > 0) c->pipeline_flushes = a.pipeline_flushes;
  c->flush_grad_reduce = a.flush_grad_reduce != "last";
  if (!a.flush_grad_reduce.empty() && a.pipeline_flushes <= 1) {
    throw InputError("command line: --flush-grad-reduce " + a.flush_grad_reduce +
                     ": given without --pipeline-flushes, expected with --pipeline-flushes 2 or more (it says when "
                     "each flush's gradients are reduced)");
  }
}

/// --framework and --no-scatter-gather into `c` (Megatron-Core's defaults unless megatron-2022).
void ApplyFrameworkArgs(const SimulateArgs& a, ParallelConfig* c) {
  if (a.no_scatter_gather && a.framework != "megatron-2022") {
    throw InputError("command line: --no-scatter-gather: given with --framework " +
                     (a.framework.empty() ? std::string("megatron-core (the default)") : a.framework) +
                     ", expected --framework megatron-2022 (Megatron-Core's pipeline messages always carry the whole "
                     "activation)");
  }
  c->scatter_gather = !a.no_scatter_gather;
  if (a.framework.empty() || a.framework == "megatron-core") {
    ApplyMegatronCoreDefaults(c);
    c->p2p_blocking = c->p2p_blocking || a.p2p_blocking;
  }
}

/// The ZeRO stage of --zero or of Megatron-LM's switches for it (--use-distributed-optimizer,
/// --use-torch-fsdp2, --use-megatron-fsdp with --data-parallel-sharding-strategy); exit 2 where
/// two of them disagree.
int ZeroStageOf(const SimulateArgs& a) {
  std::vector<std::pair<std::string, int>> said;
  if (a.zero >= 0) said.push_back({"--zero " + std::to_string(a.zero), a.zero});
  // Megatron-FSDP runs with --use-distributed-optimizer (its docs require it; Megatron-Core 0.18
  // sets it): beside --use-megatron-fsdp it claims no stage of its own.
  if (a.dist_opt && !a.megatron_fsdp) said.push_back({"--use-distributed-optimizer", 1});
  if (a.torch_fsdp2) said.push_back({"--use-torch-fsdp2", 3});
  if (!a.dp_sharding_strategy.empty() && !a.megatron_fsdp) {
    throw InputError("command line: --data-parallel-sharding-strategy: given without --use-megatron-fsdp, expected "
                     "both (Megatron-LM's FSDP strategy)");
  }
  if (a.megatron_fsdp) {
    const std::string& s = a.dp_sharding_strategy;
    if (s.empty()) {
      throw InputError("command line: --use-megatron-fsdp: given without --data-parallel-sharding-strategy, expected "
                       "both (its default changed from no_shard to optim_grads_params in Megatron-Core 0.18)");
    }
    const int z = s == "optim_grads_params" ? 3 : s == "optim_grads" ? 2 : s == "optim" ? 1 : 0;
    said.push_back({"--use-megatron-fsdp --data-parallel-sharding-strategy " + s, z});
  }
  for (const auto& [flag, z] : said) {
    if (z != said.front().second) {
      throw InputError(fmt::format("command line: {} and {}: ZeRO-{} and ZeRO-{}, expected one stage (give one of them)",
                                   said.front().first, flag, said.front().second, z));
    }
  }
  if (!a.outer_dp_sharding_strategy.empty() && (a.dist_opt_instances <= 0 || !a.megatron_fsdp)) {
    throw InputError("command line: --outer-dp-sharding-strategy: given without --use-megatron-fsdp and "
                     "--num-distributed-optimizer-instances, expected them (Megatron-FSDP's outer level across the "
                     "instances)");
  }
  return said.empty() ? 0 : said.front().second;
}

/// --optimizer, --zero3-impl and the ZeRO knobs into `c` (after --zero), exit 2 on combinations the
/// frameworks do not have.
void ApplyOptimizerArgs(const SimulateArgs& a, ParallelConfig* c) {
  c->optimizer_impl = ParseOptimizerImpl(a.opt.optimizer);
  if (c->optimizer_impl == OptimizerImpl::kDeepSpeedZero && c->zero_stage < 1) {
    throw InputError("command line: --zero: got " + std::to_string(c->zero_stage) +
                     ", expected 1, 2 or 3 with --optimizer deepspeed-zero (DeepSpeed ZeRO-1/2/3)");
  }
  c->zero3_impl = ParseZero3Impl(a.opt.zero3_impl);
  // DeepSpeed's stage 3 keeps DeepSpeed's optimizer state unless --optimizer says otherwise.
  if (c->zero3_impl == Zero3Impl::kDeepSpeed && c->zero_stage == 3 && a.opt.optimizer.empty()) {
    c->optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  }
  if (!a.opt.zero3_impl.empty() && c->zero_stage != 3) {
    throw InputError("command line: --zero3-impl: got " + a.opt.zero3_impl + " with --zero " + std::to_string(c->zero_stage) +
                     ", expected --zero 3 (it says how ZeRO-3 gathers and reduces)");
  }
  if (c->optimizer_impl == OptimizerImpl::kDeepSpeedBf16 && c->zero_stage != 1) {
    throw InputError("command line: --zero: got " + std::to_string(c->zero_stage) +
                     ", expected 1 with --optimizer deepspeed-bf16 (the BF16_Optimizer shards its optimizer state "
                     "like ZeRO-1 while DeepSpeed's own config says stage 0)");
  }
  ApplyZeroKnobs(a, c);
  CheckOptimizerPrecision(c->optimizer_impl, c->precision);
  if (a.bf16_grads && ModelDtypeBytes(c->precision) == 4.0) {
    throw InputError(fmt::format("command line: --bf16-main-grads: got it with precision {}, expected a 16-bit or "
                                 "low-precision run (fp32 training keeps fp32 gradients)",
                                 ToString(c->precision)));
  }
  if (c->optimizer_impl == OptimizerImpl::kTorchFsdp && c->zero_stage >= 3 && c->zero3_impl != Zero3Impl::kPerLayer) {
    throw InputError("command line: --zero3-impl: got " + std::string(ToString(c->zero3_impl)) +
                     " with --optimizer fsdp, expected per-layer (PyTorch FSDP gathers one layer's flat parameters at a "
                     "time; DeepSpeed's stage 3 keeps DeepSpeed's optimizer state)");
  }
  if (a.bf16_grads && c->optimizer_impl != OptimizerImpl::kMegatron && c->optimizer_impl != OptimizerImpl::kTorchFsdp) {
    throw InputError("command line: --bf16-main-grads: only applies to --optimizer megatron or fsdp (got --optimizer " +
                     std::string(ToString(c->optimizer_impl)) + ", whose gradient buffers are fixed)");
  }
}

}  // namespace

ParallelConfig BuildConfig(const SimulateArgs& a, const Model& m, std::int64_t gpus) {
  ParallelConfig c;
  c.tp = a.tp;
  c.pp = a.pp;
  c.cp = a.cp;
  c.dp = DataParallelSize(gpus, a.tp, a.pp, a.cp);  // 0, printed "DP?", when tp*cp*pp does not divide the GPUs
  if (a.dp > 0) c.dp = a.dp;  // InfeasibilityReasons reports a disagreement
  c.micro_batch_size = a.mbs;
  c.global_batch_size = a.gbs > 0 ? a.gbs : c.dp * a.mbs;
  c.seq_length = a.seq > 0 ? a.seq : m.seq_length;
  c.sequence_parallel = a.sp;
  ApplyRecomputeArgs(a, m, &c);
  ApplyOffloadArgs(a.offload, m, &c);
  if (c.TorchOpCheckpointing() && c.offload_modules != 0) {
    throw InputError("command line: --offload-modules: given with --selective-ac-option op, expected one of them "
                     "(Megatron-Core's activation offloading has no torchtitan counterpart)");
  }
  if (a.delay_wgrad && !a.moe_a2a_overlap) {
    throw InputError("command line: --delay-wgrad-compute: given alone, expected it with "
                     "--overlap-moe-expert-parallel-comm (the only use the simulator models)");
  }
  c.moe_a2a_overlap = a.moe_a2a_overlap;
  c.vp = VirtualStages(a, m);
  std::string sched = a.schedule;
  if (sched.empty()) sched = c.vp > 1 ? "interleaved" : "1f1b";
  c.schedule = sched == "gpipe" ? Schedule::kGpipe : sched == "1f1b" ? Schedule::k1F1B
             : sched == "interleaved" ? Schedule::kInterleaved : Schedule::kZbH1;
  c.zero_stage = ZeroStageOf(a);
  if (a.overlap_param && c.zero_stage < 1) {
    // Megatron-LM asserts it: the parameter all-gather is the distributed optimizer's.
    throw InputError("command line: --overlap-param-gather: given with ZeRO-0, expected --use-distributed-optimizer "
                     "(or --zero 1-3), whose parameter all-gather it overlaps");
  }
  ApplyPrecisionArgs(a.prec, &c);
  c.flash_attention = !a.no_flash;
  CheckAttentionPrecision(c.precision, c.flash_attention, "--no-flash-attention as well");
  c.overlap_grad_reduce = !a.no_overlap_grad;
  c.async_tp_grad_reduce = !a.no_async_tp;
  c.tp_comm_overlap = a.tp_comm_overlap;
  ApplyCrossEntropyArgs(a, &c);
  c.overlap_param_gather = !a.no_overlap_param;
  c.fp32_main_grads = !a.bf16_grads;
  ApplyStageLayoutArgs(a, &c);
  c.ep = a.ep;
  c.etp = a.etp;
  c.moe_dispatcher = a.moe_dispatcher == "allgather" ? MoeDispatcher::kAllGather
                     : a.moe_dispatcher == "flex"    ? MoeDispatcher::kFlex
                                                     : MoeDispatcher::kAllToAll;
  c.moe_capacity_factor = a.moe_capacity_factor;
  c.moe_load_imbalance = a.moe_load_imbalance;
  c.moe_force_load_balancing = a.moe_force_load_balancing;
  CheckMoeRoutingOptions(m, c);
  CheckModelMoeArgs(a, m);
  ApplyContextParallelArgs(a, &c);
  CheckPipelineSplitArgs(a, m, c);
  c.p2p_blocking = a.p2p_blocking;
  ApplyFrameworkArgs(a, &c);
  ApplyOptimizerArgs(a, &c);
  ApplyHybridShard(a, &c);
  // PyTorch FSDP's trainers compute the loss with PyTorch's F.cross_entropy on fp32 logits
  // (torchtitan's components/loss.py), as plan --optimizer fsdp searches it.
  if (c.optimizer_impl == OptimizerImpl::kTorchFsdp && a.cross_entropy.empty() && !a.ce_fusion) {
    c.cross_entropy = CrossEntropyImpl::kTorch;
  }
  CheckPartialRecompute(c);
  return c;
}

namespace {

/// SimulateFlags' grid: GPUs, tp, pp (and dp where it is not implied), cp, the expert grid and
/// dispatch, virtual stages and the pipeline split, batch sizes, flushes and the sequence.
std::string GridFlags(const ParallelConfig& c, const Model& m, std::int64_t gpus,
                      std::vector<std::string>* unexpressed) {
  std::string f = fmt::format("--gpus {} --tp {} --pp {}", gpus, c.tp, c.pp);
  if (c.dp < 1 || c.global_batch_size < 1 || c.micro_batch_size < 1) {
    unexpressed->push_back(fmt::format("dp={} global_batch_size={} micro_batch_size={} (the flags take positive sizes)",
                                       c.dp, c.global_batch_size, c.micro_batch_size));
  } else if (c.dp != DataParallelSize(gpus, c.tp, c.pp, c.cp)) {
    f += fmt::format(" --dp {}", c.dp);
  }
  if (c.cp > 1) {
    f += fmt::format(" --cp {}", c.cp);
    if (c.cp_comm != CpComm::kP2P) f += fmt::format(" --cp-comm-type {}", ToString(c.cp_comm));
    if (c.cp_comm == CpComm::kA2AP2P && c.cp_a2a > 0) {
      f += fmt::format(" --hierarchical-context-parallel-sizes {} {}", c.cp_a2a, c.cp / c.cp_a2a);
    }
  }
  if (c.ep > 1) f += fmt::format(" --ep {}", c.ep);
  if (c.etp > 0) f += fmt::format(" --etp {}", c.etp);
  if (c.moe_dispatcher != MoeDispatcher::kAllToAll) f += fmt::format(" --moe-token-dispatcher-type {}", ToString(c.moe_dispatcher));
  if (c.moe_capacity_factor > 0) f += fmt::format(" --moe-expert-capacity-factor {}", c.moe_capacity_factor);
  if (c.moe_load_imbalance > 0) f += fmt::format(" --moe-load-imbalance {}", c.moe_load_imbalance);
  if (c.moe_force_load_balancing) f += " --moe-router-force-load-balancing";
  if (c.vp > 1) f += fmt::format(" --vp {}", c.vp);
  if (c.first_stage_layers >= 0) f += fmt::format(" --decoder-first-pipeline-num-layers {}", c.first_stage_layers);
  if (c.last_stage_layers >= 0) f += fmt::format(" --decoder-last-pipeline-num-layers {}", c.last_stage_layers);
  if (c.even_chunks) f += " --pipeline-layout-even";
  f += fmt::format(" --mbs {} --gbs {}", c.micro_batch_size, c.global_batch_size);
  if (c.pipeline_flushes > 1) f += fmt::format(" --pipeline-flushes {}", c.pipeline_flushes);
  if (c.pipeline_flushes > 1 && !c.flush_grad_reduce) f += " --flush-grad-reduce last";
  if (c.seq_length > 0 && c.seq_length != m.seq_length) f += fmt::format(" --seq {}", c.seq_length);
  return f;
}

/// SimulateFlags' kernels and overlaps: recompute, offloading, sequence parallelism, ZeRO stage,
/// schedule, precision, fused kernels, the overlap switches and the cross-entropy implementation.
std::string KernelFlags(const ParallelConfig& c) {
  std::string f;
  // torchtitan's layer frequency implies its recompute (and is refused beside --recompute full).
  const bool torch_layers = c.PartialRecompute() && c.recompute_layer_interval > 0;
  if (c.recompute != Recompute::kNone && !torch_layers) f += fmt::format(" --recompute {}", ToString(c.recompute));
  if (c.TorchOpCheckpointing()) {
    f += " --selective-ac-option op";
  } else if (torch_layers) {
    f += fmt::format(" --selective-ac-option {}", c.recompute_layer_interval);
  } else if (c.PartialRecompute()) {
    f += fmt::format(" --recompute-method block --recompute-num-layers {}", c.recompute_block_layers);
  } else if (c.recompute == Recompute::kSelective && c.recompute_modules != kRecomputeCoreAttn) {
    f += " --recompute-modules " + RecomputeModulesArgs(c.recompute_modules);
  }
  if (c.offload_modules != 0) {
    f += " --offload-modules " + OffloadModulesArgs(c.offload_modules);
  }
  if (c.moe_a2a_overlap) f += " --overlap-moe-expert-parallel-comm";
  if (c.sequence_parallel) f += " --sequence-parallel";
  if (c.zero_stage != 0) f += fmt::format(" --zero {}", c.zero_stage);
  const Schedule implied = c.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  if (c.schedule != implied) f += fmt::format(" --schedule {}", ToString(c.schedule));
  f += PrecisionFlags(c);
  if (!c.flash_attention) f += " --no-flash-attention";
  if (!c.overlap_grad_reduce) f += " --no-overlap-grad-reduce";
  if (!c.overlap_param_gather) f += " --no-overlap-param-gather";
  if (!c.async_tp_grad_reduce) f += " --no-async-tensor-model-parallel-allreduce";
  if (c.tp_comm_overlap) f += " --tp-comm-overlap";
  if (c.cross_entropy == CrossEntropyImpl::kNative) f += " --cross-entropy-loss-fusion";
  if (c.cross_entropy == CrossEntropyImpl::kTe) f += " --cross-entropy-loss-fusion --cross-entropy-fusion-impl te";
  // --optimizer fsdp takes PyTorch's loss unless --cross-entropy says: the unfused one is written.
  if (c.cross_entropy == CrossEntropyImpl::kFlashAttn || c.cross_entropy == CrossEntropyImpl::kTorch ||
      (c.cross_entropy == CrossEntropyImpl::kUnfused && c.optimizer_impl == OptimizerImpl::kTorchFsdp)) {
    f += fmt::format(" --cross-entropy {}", ToString(c.cross_entropy));
  }
  return f;
}

/// SimulateFlags' optimizer: main-gradient dtype, the optimizer and ZeRO-3 implementation,
/// hybrid sharding, DeepSpeed's bucket and prefetch knobs where not their defaults (`d`), the
/// framework's pipeline transfers.
std::string OptimizerFlags(const ParallelConfig& c, const ParallelConfig& d,
                           std::vector<std::string>* unexpressed) {
  std::string f;
  if (!c.fp32_main_grads && (c.optimizer_impl == OptimizerImpl::kMegatron || c.optimizer_impl == OptimizerImpl::kTorchFsdp)) {
    f += " --bf16-main-grads";
  }
  // --zero3-impl deepspeed implies DeepSpeed's optimizer: say so when it is Megatron's.
  if (c.optimizer_impl != OptimizerImpl::kMegatron || c.deepspeed_zero3()) {
    f += fmt::format(" --optimizer {}", ToString(c.optimizer_impl));
  }
  if (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kPerLayer) f += fmt::format(" --zero3-impl {}", ToString(c.zero3_impl));
  if (c.hybrid_shard()) f += fmt::format(" --dp-shard {}", c.dp_shard);
  if (c.zero_stage >= 3 && !c.zero3_limit_all_gathers) f += " --no-limit-all-gathers";
  const bool ds3 = c.deepspeed2021_zero3() || c.deepspeed_zero3();
  if ((c.deepspeed_zero12() || ds3) &&
      c.ds_reduce_bucket_elems != d.ds_reduce_bucket_elems) {
    f += fmt::format(" --reduce-bucket-size {}", c.ds_reduce_bucket_elems);
  }
  if (c.deepspeed_zero12() &&
      !c.ds_contiguous_gradients) {
    f += " --no-contiguous-gradients";
  }
  if (c.deepspeed_zero12() &&
      c.ds_contiguous_gradients && !c.ds_multi_rank_bucket_allreduce) {
    f += " --no-multi-rank-bucket-allreduce";
  }
  if (ds3 && c.ds_max_live_elems != d.ds_max_live_elems) {
    f += fmt::format(" --stage3-max-live-parameters {}", c.ds_max_live_elems);
  }
  if (ds3 && c.ds_persistence_threshold_elems != d.ds_persistence_threshold_elems) {
    f += fmt::format(" --stage3-param-persistence-threshold {}", c.ds_persistence_threshold_elems);
  }
  if (c.deepspeed_zero3() && c.ds_prefetch_bucket_elems != d.ds_prefetch_bucket_elems) {
    f += fmt::format(" --stage3-prefetch-bucket-size {}", c.ds_prefetch_bucket_elems);
  }
  if (c.deepspeed_zero3() && c.ds_max_reuse_distance_elems != d.ds_max_reuse_distance_elems) {
    f += fmt::format(" --stage3-max-reuse-distance {}", c.ds_max_reuse_distance_elems);
  }
  if (!HasMegatronCoreDefaults(c)) {
    f += " --framework megatron-2022";
    if (c.p2p_blocking) f += " --p2p-blocking";
    if (!c.scatter_gather) f += " --no-scatter-gather";
  }
  if (c.embedding_slots) f += " --embedding-pipeline-slots";
  if (c.param_gather_bytes != d.param_gather_bytes) {
    unexpressed->push_back(fmt::format("param_gather_bytes_per_param={} (no flag; simulate uses {})",
                                       c.param_gather_bytes, d.param_gather_bytes));
  }
  return f;
}

}  // namespace

std::string SimulateFlags(const ParallelConfig& c, const Model& m, std::int64_t gpus,
                          std::vector<std::string>* unexpressed) {
  const ParallelConfig d;  // BuildConfig's defaults where a flag is absent
  std::string f = GridFlags(c, m, gpus, unexpressed);
  f += KernelFlags(c);
  f += OptimizerFlags(c, d, unexpressed);
  return f;
}

namespace {

/// `--allocator-trace FILE`, written atomically; nothing when no stage's memory was replayed.
void WriteAllocatorTrace(const std::string& path, const std::vector<StageAllocatorTrace>& traces,
                         const ParallelConfig& c) {
  if (path.empty()) return;
  if (traces.empty()) {
    std::cerr << "shardcast: no allocator trace written: the configuration cannot run\n";
    return;
  }
  WriteFileAtomic(path, AllocatorTraceJson(traces, c.Summary()).dump() + "\n");
}

/// The profile a simulation runs on: the loaded or default one, with the attention kernel, the
/// precision's GEMM rate and --no-nvls applied.
HardwareProfile SimulationProfile(const SimulateArgs& a, const std::optional<HardwareProfile>& loaded, const Cluster& cl,
                                  const ParallelConfig& c) {
  HardwareProfile prof = WithAttentionKernel(loaded ? *loaded : DefaultProfile(cl), cl.gpu.arch, a.attention_kernel);
  if (c.optimizer_impl == OptimizerImpl::kTorchFsdp && a.attention_kernel == "default") {
    prof = WithPyTorchAttention(std::move(prof), cl.gpu.arch);
  }
  prof = WithGemmRateFor(std::move(prof), cl, c.precision);
  if (a.no_nvls && prof.nvls_allreduce_busbw_GBps > 0) {
    prof.nvls_allreduce_busbw_GBps = 0;
    prof.adjustments.push_back("NVLink SHARP (NVLS) all-reduce off (--no-nvls): rings only");
  }
  return prof;
}

/// `--straggler FACTOR [--straggler-stage N]`.
struct StragglerArgs {
  double slowdown = 1, nic_slowdown = 1;
  int stage = -1;
  CLI::Option* slowdown_opt = nullptr;
  CLI::Option* nic_opt = nullptr;
  CLI::Option* stage_opt = nullptr;
  bool given() const { return slowdown_opt->count() > 0 || nic_opt->count() > 0; }
};

void AddSimulateStragglerOptions(CLI::App* cmd, StragglerArgs* s) {
  std::tie(s->slowdown_opt, s->nic_opt) =
      AddStragglerOptions(cmd, &s->slowdown, &s->nic_slowdown,
                          ": also run the step with it, on the baseline's hardware, and print the result beside "
                          "the baseline");
  s->stage_opt = cmd->add_option("--straggler-stage", s->stage,
                                 "the pipeline stage (0 .. pp-1) of --straggler's GPU or --straggler-nic's node "
                                 "(default: each stage is tried and the one that lengthens the step most is "
                                 "reported)")
                     ->check(IntegerRange(0, kMaxParallelSize))
                     ->type_name("N");
}

/// One simulate command: its flags, then what it loads and runs (the baseline, and the launch,
/// what-if and straggler runs where asked), then what it prints.
class SimulateCommand {
 public:
  SimulateCommand(const SimulateArgs& args, const StragglerArgs& straggler_args, const EmitArgs& emit_args,
                  const std::vector<std::string>& what_if, const std::string& html_file)
      : a_(args), straggler_(straggler_args), emit_(emit_args), what_if_flags_(what_if), html_(html_file) {}
  void Run();

 private:
  /// The configuration `a` gives for `m` on `cl` (BuildConfig), with the context-parallel a2a group
  /// resolved and unfused attention on a GPU flash attention does not run on, checked against the
  /// GPU's precisions, context and expert parallelism, --ops and the straggler flags.
  ParallelConfig ResolvedConfig() const;
  /// What simulate --json prints (the HTML page carries the same object): the result, the profile,
  /// the launch, the what-if and straggler runs beside it.
  Json ResultJson() const;
  /// What simulate prints without --json: the simulation, the op table, the files written, the
  /// straggler and what-if runs beside it, the launch.
  void WriteText() const;

  const SimulateArgs& a_;
  const StragglerArgs& straggler_;
  const EmitArgs& emit_;
  const std::vector<std::string>& what_if_flags_;
  const std::string& html_;
  Model m_;
  Cluster cl_;
  std::int64_t gpus_ = 0;
  ParallelConfig c_;
  HardwareProfile prof_;
  SimulationResult r_;
  std::vector<StageAllocatorTrace> allocator_traces_;
  std::optional<LaunchConfig> launch_;
  std::optional<SimulationResult> changed_;
  std::optional<WhatIfHardware> hw_;
  std::optional<StragglerRun> slow_;
};

ParallelConfig SimulateCommand::ResolvedConfig() const {
  ParallelConfig cfg = BuildConfig(a_, m_, gpus_);
  ResolveCpA2a(&cfg, cl_.gpus_per_node);
  RequirePrecision(cl_.gpu, cfg, "command line");
  if (cfg.flash_attention && !cl_.gpu.HasFlashAttention()) {
    if (cfg.cp > 1) {
      throw InputError(fmt::format("command line: --cp: got {}, expected 1 on {} ({}): context parallelism needs fused "
                                   "(flash) attention, which does not run there",
                                   cfg.cp, cl_.gpu.name, cl_.gpu.arch));
    }
    if (a_.use_flash_attn) {
      throw InputError(fmt::format("command line: --use-flash-attn: given on {} ({}), expected a GPU FlashAttention "
                                   "runs on (Turing or later): leave it out for the unfused attention",
                                   cl_.gpu.name, cl_.gpu.arch));
    }
    cfg.flash_attention = false;  // said in the report's attention line
  }
  RequireContextParallel(m_, cfg, cl_.gpus_per_node, "command line");
  RequireExpertParallel(m_, cfg, "command line");
  if (a_.ops && a_.json) {
    throw InputError("command line: --ops: the op table is text; not combined with --json (run them separately)");
  }
  if (straggler_.stage_opt->count() > 0 && !straggler_.given()) {
    throw InputError(fmt::format("command line: --straggler-stage: {}, needs --straggler FACTOR (how much slower the "
                                 "GPU is) or --straggler-nic FACTOR (its node's network links)",
                                 straggler_.stage));
  }
  if (straggler_.given()) {
    RequireStraggler(straggler_.slowdown, straggler_.stage_opt->count() > 0 ? std::optional<int>(straggler_.stage) : std::nullopt,
                     cfg.pp, "command line: --straggler");
  }
  return cfg;
}

Json SimulateCommand::ResultJson() const {
  Json j = ResultToJson(r_, m_, c_, cl_, gpus_);
  j["notes"] = SimulationNotes(r_, m_, c_, cl_, gpus_);
  j["profile"] = a_.profile.empty() ? "built-in default" : a_.profile;
  j["profile_estimates"] = prof_.kind == "default" ? Json(prof_.Estimates(c_.flash_attention, c_.precision)) : Json::array();
  if (launch_) j["launch"] = LaunchJson(*launch_, emit_.file);
  if (changed_) {
    j["what_if"] = BesideJson(r_, *changed_);
    j["what_if"]["changes"] = what_if_flags_;
    j["what_if"]["adjustments"] = hw_->prof.adjustments;
    j["what_if"]["result"] = ResultToJson(*changed_, m_, c_, hw_->cl, gpus_);
  }
  if (slow_) {
    j["straggler"] = StragglerJson(r_, *slow_);
    j["straggler"]["result"] = ResultToJson(slow_->result, m_, c_, cl_, gpus_);
  } else if (straggler_.given()) {
    j["straggler"] = nullptr;  // the configuration cannot run
  }
  return WithIntegerBytes(j);
}

void SimulateCommand::WriteText() const {
  WriteSimulation(std::cout, r_, m_, c_, cl_, gpus_, prof_);
  if (a_.ops && r_.feasible) WriteOps(std::cout, m_, c_, cl_, prof_);
  if (a_.ops && !r_.feasible) std::cout << "\nNo op table: the configuration cannot run.\n";
  if (!a_.trace.empty() && r_.feasible) std::cout << "\nTrace written to " << a_.trace << " (open in ui.perfetto.dev)\n";
  if (!allocator_traces_.empty()) std::cout << "\nAllocator trace written to " << a_.allocator_trace << "\n";
  if (slow_) WriteStraggler(std::cout, r_, *slow_);
  if (straggler_.given() && !r_.feasible) std::cout << "\nNo straggler run: the configuration cannot run.\n";
  if (changed_) {
    std::cout << "\nWhat if " << Join(what_if_flags_, ", ") << ":\n";
    for (std::size_t i = prof_.adjustments.size(); i < hw_->prof.adjustments.size(); ++i) {
      std::cout << "  " << hw_->prof.adjustments[i] << "\n";
    }
    WriteBeside(std::cout, r_, *changed_, "baseline", "what-if");
  }
  if (launch_) WriteLaunch(std::cout, *launch_, emit_.file, "This configuration");
}

void SimulateCommand::Run() {
  const std::vector<WhatIf> what_if = ParseWhatIfs(what_if_flags_);
  CheckOutputFiles({{"--trace", a_.trace}, {"--allocator-trace", a_.allocator_trace}, {"--html", html_},
                    {"--emit-file", emit_.file}},
                   {a_.model, a_.cluster, a_.profile});
  m_ = LoadModel(a_.model, "--model");
  if (a_.cluster.empty() && a_.profile.empty()) {
    throw InputError("command line: --cluster: missing, expected a cluster preset name or JSON path (or --profile FILE "
                     "of a measured machine)");
  }
  std::optional<HardwareProfile> loaded;
  if (!a_.profile.empty()) loaded = LoadProfile(a_.profile);
  // A measured profile says which machine it measured; an explicit --cluster overrides.
  cl_ = a_.cluster.empty() ? ClusterFromProfile(*loaded, a_.profile) : LoadCluster(a_.cluster, "--cluster");
  gpus_ = a_.gpus > 0 ? a_.gpus : cl_.num_gpus.value_or(cl_.gpus_per_node);
  if (loaded && !a_.cluster.empty()) WarnIfProfileIsAnotherMachine(*loaded, a_.profile, cl_, gpus_);
  c_ = ResolvedConfig();
  prof_ = SimulationProfile(a_, loaded, cl_, c_);
  SimulateOptions opts;
  opts.full_rank = a_.full_rank;
  opts.keep_graph = !a_.trace.empty() || !html_.empty();
  if (!a_.allocator_trace.empty()) opts.allocator_traces = &allocator_traces_;
  r_ = Simulate(m_, c_, cl_, gpus_, prof_, opts);
  opts.allocator_traces = nullptr;  // the what-if run below keeps none
  WriteAllocatorTrace(a_.allocator_trace, allocator_traces_, c_);
  launch_ = EmitIfAsked(emit_, m_, c_, cl_, gpus_, r_);
  if (!what_if.empty()) {
    hw_ = ApplyWhatIfs(what_if, cl_, prof_);
    changed_ = Simulate(m_, c_, hw_->cl, gpus_, hw_->prof, opts);
  }
  if (straggler_.given() && r_.feasible) {
    SimulateOptions so = opts;
    so.keep_graph = false;  // --trace and --html show the baseline
    slow_ = SimulateStraggler(m_, c_, cl_, gpus_, prof_, so, straggler_.slowdown, straggler_.nic_slowdown,
                             straggler_.stage_opt->count() > 0 ? straggler_.stage : -1);
  }
  if (!a_.trace.empty() && r_.feasible) WriteFileAtomic(a_.trace, ChromeTrace(r_));
  if (!html_.empty()) {
    Json data = {{"kind", "simulate"}, {"result", ResultJson()}, {"timeline", TimelineJson(r_)}};
    WriteHtmlReport(html_, fmt::format("shardcast simulate: {} on {} x {}", m_.name, gpus_, cl_.gpu.display_name),
                    c_.Summary(), data);
  }
  if (!a_.trace.empty() && !r_.feasible) std::cerr << "shardcast: no trace written: the configuration cannot run\n";
  if (a_.json) {
    std::cout << ResultJson().dump(2) << "\n";
  } else {
    WriteText();
  }
}

void RunSimulate(const SimulateArgs& a, const StragglerArgs& straggler, const EmitArgs& emit,
                 const std::vector<std::string>& what_if_flags, const std::string& html) {
  SimulateCommand(a, straggler, emit, what_if_flags, html).Run();
}

}  // namespace

namespace {

/// simulate's (and execute's) configuration options, in --help order: the parallel sizes: GPUs, tp, pp, dp, cp and
/// its communication, ep/etp and MoE routing, vp.
void AddGridOptions(CLI::App* cmd, SimulateArgs* a) {
  AddPositive(cmd, "--gpus", a->gpus, "number of GPUs", kMaxGpus);
  AddPositive(cmd, "--tp,--tensor-model-parallel-size", a->tp, "tensor-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--pp,--pipeline-model-parallel-size", a->pp, "pipeline-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--dp,--data-parallel-size", a->dp, "data-parallel size (default gpus/(tp*cp*pp); must agree)", kMaxParallelSize);
  AddPositive(cmd, "--cp,--context-parallel-size", a->cp,
              "context-parallel size: each sequence split over cp ranks (2*cp chunks, load-balanced for causal "
              "attention)", kMaxParallelSize);
  cmd->add_option("--cp-comm-type", a->cp_comm,
                  "how context-parallel ranks exchange K/V: p2p (ring attention, default) | allgather | a2a "
                  "(Ulysses-style all-to-all) | a2a+p2p (all-to-all inside, ring across) | ulysses (DeepSpeed-Ulysses); "
                  "other than p2p it needs --cp 2 or more")
      ->transform(CLI::IsMember({"p2p", "allgather", "a2a", "a2a+p2p", "ulysses", "deepspeed-ulysses"}, CLI::ignore_case));
  cmd->add_option("--hierarchical-context-parallel-sizes", a->cp_hierarchy,
                  "with --cp-comm-type a2a+p2p: the all-to-all and ring sizes (product = cp; default: the "
                  "context-parallel ranks of one node, then the ring)")
      ->expected(2)
      ->check(IntegerRange(1, kMaxParallelSize));
  AddPositive(cmd, "--ep,--expert-model-parallel-size", a->ep, "expert-parallel size: a layer's routed experts split over ep ranks",
              kMaxParallelSize);
  AddPositive(cmd, "--etp,--expert-tensor-parallel-size", a->etp,
              "expert-tensor-parallel size: each expert's FFN split over etp ranks (default: tp, as Megatron-Core)",
              kMaxParallelSize);
  cmd->add_option("--moe-token-dispatcher-type", a->moe_dispatcher,
                  "how tokens reach their experts: alltoall (default) | allgather | flex (DeepEP: once per destination rank)")
      ->transform(CLI::IsMember({"alltoall", "allgather", "flex"}, CLI::ignore_case));
  cmd->add_option("--moe-expert-capacity-factor", a->moe_capacity_factor,
                  "an expert takes at most this times its average tokens (the rest are dropped; below 1 every expert "
                  "drops some); default dropless")
      ->check(BoundedNumber(0.01, 64.0));
  AddMoeRoutingOptions(cmd, &a->moe_load_imbalance, &a->moe_force_load_balancing);
  AddPositive(cmd, "--num-experts", a->num_experts,
              "Megatron-LM's routed experts, as plan prints them: checked against the model's (its file sets them)",
              kMaxParallelSize);
  AddPositive(cmd, "--moe-router-topk", a->moe_topk,
              "Megatron-LM's experts a token is routed to, as plan prints them: checked against the model's",
              kMaxParallelSize);
  cmd->add_flag("--moe-grouped-gemm", a->moe_grouped_gemm,
                "Megatron-LM's grouped GEMM of the local experts: how the cost model always runs them");
  AddPositive(cmd, "--vp,--virtual-pipeline-model-parallel-size,--num-virtual-stages-per-pipeline-rank", a->vp,
              "virtual stages per pipeline rank", kMaxVirtualStages);
}

/// simulate's (and execute's) configuration options, in --help order: the pipeline split, the batch and the
/// sequence, pipeline flushes.
void AddPipelineAndBatchOptions(CLI::App* cmd, SimulateArgs* a) {
  cmd->add_flag("--pipeline-layout-even", a->even_chunks,
                "spread the layers over the pp*vp model chunks (pp stages without --vp) as evenly as possible, the "
                "remainder to the first chunks (a --pipeline-model-parallel-layout of even chunks), when pp*vp does "
                "not divide them; with embedding slots, the layers + 2 slots (torchtitan's split)");
  AddPositive(cmd, "--decoder-first-pipeline-num-layers", a->first_stage_layers,
              "transformer layers of the first pipeline stage (the other stages share the rest equally)", kMaxLayers);
  AddPositive(cmd, "--decoder-last-pipeline-num-layers", a->last_stage_layers,
              "transformer layers of the last pipeline stage", kMaxLayers);
  AddPositive(cmd, "--num-layers-per-virtual-pipeline-stage", a->layers_per_vp, "Megatron-LM's way to set vp", kMaxLayers);
  AddPositive(cmd, "--mbs,--micro-batch-size", a->mbs, "micro-batch size", kMaxMicroBatchSize);
  AddPositive(cmd, "--pipeline-flushes", a->pipeline_flushes,
              "run the step's micro-batches as this many pipeline schedules in turn, each filling and draining the "
              "pipeline (PyTorch pipelining as torchtitan and NeMo Automodel drive it: their gradient-accumulation "
              "steps); default 1, Megatron-LM's one schedule",
              kMaxMicroBatchSize);
  cmd->add_option("--flush-grad-reduce", a->flush_grad_reduce,
                  "with --pipeline-flushes: every (default: gradients reduced after each flush and FSDP2's parameters "
                  "gathered again, as PyTorch's pipeline stage does at the end of each step() call) | last (once, "
                  "after the last flush: NeMo Automodel's MoE FSDP mixin)")
      ->transform(CLI::IsMember({"every", "last"}, CLI::ignore_case));
  AddPositive(cmd, "--gbs,--global-batch-size", a->gbs, "global batch size (default dp*mbs)", kMaxGlobalBatchSize);
  AddPositive(cmd, "--seq,--seq-length", a->seq, "sequence length (default: the model's)", kMaxSeq);
}

/// simulate's (and execute's) configuration options, in --help order: recompute, offloading, the MoE overlap,
/// sequence parallelism, ZeRO and HSDP, the schedule.
void AddRecomputeAndShardingOptions(CLI::App* cmd, SimulateArgs* a) {
  cmd->add_option("--recompute", a->recompute, "activation recompute: none|selective|full")
      ->transform(CLI::IsMember({"none", "selective", "full"}, CLI::ignore_case));
  cmd->add_option("--recompute-granularity", a->recompute_granularity, "Megatron-LM alias of --recompute")
      ->transform(CLI::IsMember({"selective", "full"}, CLI::ignore_case));
  cmd->add_option("--recompute-modules", a->recompute_modules,
                  "selective recompute of these modules (Megatron-Core's names, space-separated): core_attn (the "
                  "default), moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; implies --recompute selective")
      ->expected(1, 7);
  cmd->add_option("--selective-ac-option", a->selective_ac_option,
                  "torchtitan's activation_checkpoint.selective_ac_option: op (per-op selective checkpointing: keeps "
                  "the outputs of every other matmul and of attention, reruns the rest; dense models) or N (every "
                  "N-th block of a rank checkpointed whole, the others keep their activations); implies --recompute "
                  "selective");
  cmd->add_option("--recompute-method", a->recompute_method,
                  "with --recompute full: block (recompute only the first --recompute-num-layers layers of each "
                  "pipeline chunk; the rest keep their activations) or uniform (every layer; Megatron-LM's names)")
      ->transform(CLI::IsMember({"uniform", "block"}, CLI::ignore_case));
  AddBoundedInt(cmd, "--recompute-num-layers", a->recompute_num_layers,
                "with --recompute-method block: layers recomputed per pipeline chunk (default 1); uniform takes 1", 0,
                1000000, "non-negative", "NONNEGATIVE");
  AddOffloadOptions(cmd, &a->offload);
  cmd->add_flag("--overlap-moe-expert-parallel-comm", a->moe_a2a_overlap,
                "MoE: run one micro-batch's token dispatch/combine beside another's compute in the 1F1B steady state "
                "(Megatron-Core's EP A2A overlap)");
  cmd->add_flag("--delay-wgrad-compute", a->delay_wgrad, "accepted with --overlap-moe-expert-parallel-comm, as Megatron-Core needs it");
  cmd->add_flag("--sequence-parallel", a->sp, "sequence parallelism (needs tp > 1)");
  cmd->add_option("--zero", a->zero, "ZeRO stage 0-3 (1 = Megatron's distributed optimizer)")
      ->check(IntegerRange(0, 3));
  cmd->add_flag("--use-distributed-optimizer", a->dist_opt, "Megatron-LM alias of --zero 1");
  cmd->add_flag("--use-torch-fsdp2", a->torch_fsdp2, "Megatron-LM alias of --zero 3 (its PyTorch FSDP2 path)");
  cmd->add_flag("--use-megatron-fsdp", a->megatron_fsdp,
                "Megatron-LM's FSDP: the ZeRO stage of --data-parallel-sharding-strategy, which it needs (the default "
                "changed in Megatron-Core 0.18); --use-distributed-optimizer beside it is accepted");
  cmd->add_option("--data-parallel-sharding-strategy", a->dp_sharding_strategy,
                  "with --use-megatron-fsdp: no_shard | optim | optim_grads | optim_grads_params (ZeRO-0 to 3)")
      ->transform(CLI::IsMember({"no_shard", "optim", "optim_grads", "optim_grads_params"}));
  cmd->add_option("--outer-dp-sharding-strategy", a->outer_dp_sharding_strategy,
                  "Megatron-FSDP's hybrid sharding across --num-distributed-optimizer-instances: no_shard (the state "
                  "replicated across them, the hybrid sharding modelled)")
      ->transform(CLI::IsMember({"no_shard"}));
  cmd->add_option("--ckpt-format", a->ckpt_format, "Megatron-LM's checkpoint format: accepted, no bearing on a step")
      ->transform(CLI::IsMember({"torch", "torch_dist", "torch_dcp", "zarr", "fsdp_dtensor"}));
  AddPositive(cmd, "--dp-shard", a->dp_shard,
              "hybrid sharding (HSDP): shard the ZeRO state over groups of this many data-parallel ranks and "
              "replicate it across the groups (FSDP HYBRID_SHARD; default: all dp x cp ranks)",
              kMaxParallelSize);
  AddPositive(cmd, "--num-distributed-optimizer-instances", a->dist_opt_instances,
              "Megatron-Core: this many copies of the distributed optimizer across data parallelism "
              "(--dp-shard dp*cp/instances)",
              kMaxParallelSize);
  cmd->add_option("--schedule", a->schedule, "pipeline schedule: gpipe|1f1b|interleaved|zb-h1")
      ->transform(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}, CLI::ignore_case));
}

/// simulate's (and execute's) configuration options, in --help order: precision, attention, the overlaps of
/// collectives, the framework, the cross-entropy loss.
void AddKernelAndOverlapOptions(CLI::App* cmd, SimulateArgs* a) {
  AddPrecisionOptions(cmd, &a->prec);
  cmd->add_flag("--no-flash-attention", a->no_flash, "unfused attention that saves s*s scores (Megatron 2021)")
      ->excludes(cmd->add_flag("--use-flash-attn", a->use_flash_attn, "Megatron-LM's flag for the default: flash attention"));
  cmd->add_flag("--no-overlap-grad-reduce", a->no_overlap_grad, "reduce gradients after the backward pass")
      ->excludes(cmd->add_flag("--overlap-grad-reduce", a->overlap_grad,
                               "Megatron-LM's flag for the default: gradients reduced in buckets during the backward"));
  cmd->add_flag("--no-overlap-param-gather", a->no_overlap_param, "gather parameters after the optimizer")
      ->excludes(cmd->add_flag("--overlap-param-gather", a->overlap_param,
                               "Megatron-LM's flag for the default: the distributed optimizer's parameter all-gather "
                               "overlapped with the next step's forward"));
  cmd->add_flag("--no-async-tensor-model-parallel-allreduce", a->no_async_tp,
                "run the backward input-gradient TP all-reduce / reduce-scatter after the weight-gradient GEMM, not "
                "beside it (Megatron-LM before late 2021, Megatron-DeepSpeed)");
  cmd->add_flag("--no-nvls", a->no_nvls,
                "all-reduces inside a node as rings only (NCCL_NVLS_ENABLE=0, or an NVSwitch system without NVLink "
                "SHARP); by default an H100/H200/B200 NVSwitch node's all-reduce runs at NVLS's rate where faster");
  AddFrameworkOption(cmd, &a->framework);
  cmd->add_flag("--no-scatter-gather", a->no_scatter_gather,
                "with --framework megatron-2022: pipeline messages carry the whole activation, not 1/tp of it "
                "re-gathered over the TP group");
  cmd->add_flag("--tp-comm-overlap", a->tp_comm_overlap,
                "Megatron-Core / Transformer Engine userbuffers: pipeline the sequence-parallel all-gathers and "
                "reduce-scatters with their GEMMs in tp chunks (needs --sequence-parallel)");
  cmd->add_flag("--cross-entropy-loss-fusion", a->ce_fusion,
                "Megatron-Core's fused cross-entropy (its native impl: fewer fp32 passes over the logits); default: "
                "Megatron's vocab-parallel cross-entropy in fp32, pass by pass");
  cmd->add_option("--cross-entropy-fusion-impl", a->ce_impl,
                  "with --cross-entropy-loss-fusion: native (default; Megatron-Core's compiled passes) | te "
                  "(Transformer Engine 2.2-2.17's Triton kernels)")
      ->transform(CLI::IsMember({"native", "te"}, CLI::ignore_case));
  cmd->add_option("--cross-entropy", a->cross_entropy,
                  "the loss's implementation, by name: unfused (default: Megatron's fp32 passes) | native | te (as "
                  "the two Megatron flags) | flash-attn (flash-attn's one-pass Triton loss, llm-foundry's default "
                  "fused_crossentropy) | torch (PyTorch's eager F.cross_entropy on fp32 logits: Hugging Face, "
                  "torchtitan)")
      ->transform(CLI::IsMember({"unfused", "native", "te", "flash-attn", "torch"}, CLI::ignore_case));
}

/// simulate's (and execute's) configuration options, in --help order: the optimizer and DeepSpeed/FSDP knobs,
/// pipeline sends, the embedding slots.
void AddOptimizerAndFrameworkOptions(CLI::App* cmd, SimulateArgs* a) {
  cmd->add_flag("--bf16-main-grads", a->bf16_grads,
                "2-byte gradient buffers instead of Megatron's fp32 (with --optimizer fsdp: gradients reduced in bf16, "
                "MixedPrecisionPolicy's reduce_dtype)");
  cmd->add_option("--optimizer", a->opt.optimizer,
                  "whose optimizer keeps the state: megatron (default; deepspeed-zero with --zero3-impl deepspeed) | "
                  "deepspeed-zero (with --zero 1, 2 or 3; 16-bit "
                  "grads) | deepspeed-bf16 (with --zero 1; BF16_Optimizer: fp32 grad buffer, fp32 all-reduce) | fsdp "
                  "(PyTorch FSDP/FSDP2 or DDP with fp32 parameters and bf16 compute, torchtitan's recipe: the fp32 "
                  "shard is the master, no 16-bit copy kept; --zero 3 FULL_SHARD, 2 SHARD_GRAD_OP, 1 FSDP2 under a "
                  "pipeline schedule, 0 DDP; PyTorch's loss (--cross-entropy torch) and, on Hopper, FlashAttention-2's "
                  "rates unless given)")
      ->transform(CLI::IsMember({"megatron", "deepspeed-zero", "deepspeed-bf16", "fsdp"}, CLI::ignore_case));
  AddDeepSpeedKnobOptions(cmd, &a->opt, /*for_plan=*/false);
  cmd->add_flag("--no-limit-all-gathers", a->no_limit_all_gathers,
                "with --zero 3 (per-layer): PyTorch FSDP's limit_all_gathers=False (its default before PyTorch 2.1): "
                "the CPU issues every layer's all-gather as it runs ahead, and the caching allocator holds each "
                "layer's gathered block until the GPU is done with it (reserved memory grows by a pass's layers)");
  cmd->add_option("--zero3-impl", a->opt.zero3_impl,
                  "how ZeRO-3 gathers and reduces (with --zero 3): per-layer (default; FSDP, FSDP2, Megatron-FSDP: one "
                  "flat all-gather per layer, prefetched) | deepspeed (DeepSpeed stage 3 of v0.10-0.16: coalesced "
                  "all-gathers as its parameter coordinator prefetches them, within --stage3-max-live-parameters; "
                  "gradients reduce-scattered a --reduce-bucket-size bucket at a time; implies --optimizer "
                  "deepspeed-zero unless given) | deepspeed-2021 (DeepSpeed stage 3 of "
                  "v0.3-0.4: one list all-gather per parameter tensor of >= 1e5 elements and the gradients reduce-scattered "
                  "tensor by tensor from 5e8-element buckets, the host handling each rank's slice; simulate and plan only, "
                  "execute refuses it)")
      ->transform(CLI::IsMember({"per-layer", "deepspeed", "deepspeed-2021"}, CLI::ignore_case));
  cmd->add_flag("--p2p-blocking", a->p2p_blocking,
                "pipeline sends/receives run in order on the compute stream (DeepSpeed's pipeline engine; Megatron-LM "
                "of 2021-22, which synchronizes after each batch_isend_irecv)");
  cmd->add_flag("--embedding-pipeline-slots", a->emb_slots,
                "embedding and output layer take one layer slot each in the pipeline split, (L + 2) / pp per stage "
                "(BLOOM's partition; Megatron-LM's two flags below together)");
  cmd->add_flag("--account-for-embedding-in-pipeline-split", a->mcore_account_embedding,
                "Megatron-LM: the embedding as a pipeline slot (with --account-for-loss-in-pipeline-split)");
  cmd->add_flag("--account-for-loss-in-pipeline-split", a->mcore_account_loss,
                "Megatron-LM: the output layer and loss as a pipeline slot (with the flag above)");
}

}  // namespace

void AddConfigOptions(CLI::App* cmd, SimulateArgs* a) {
  AddGridOptions(cmd, a);
  AddPipelineAndBatchOptions(cmd, a);
  AddRecomputeAndShardingOptions(cmd, a);
  AddKernelAndOverlapOptions(cmd, a);
  AddOptimizerAndFrameworkOptions(cmd, a);
}

void RegisterSimulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Simulate one training step of a data/tensor/pipeline-parallel configuration.\n"
      "Example: shardcast simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 --tp 8 --pp 8 --vp 3 \\\n"
      "           --mbs 1 --gbs 64 --recompute selective --sequence-parallel --schedule interleaved");
  cmd->add_option("--model", a->model, "model preset name or JSON / HF config.json path")->required();
  cmd->add_option("--cluster", a->cluster, "cluster preset name or JSON path (optional with a measured --profile)");
  AddConfigOptions(cmd, a.get());
  cmd->add_option("--profile", a->profile, "hardware profile JSON (default: built-in for the GPU)");
  cmd->add_option("--attention-kernel", a->attention_kernel,
                  "attention kernel of a built-in profile: fa2 on Hopper uses FlashAttention-2's rates (0.28/0.27 of "
                  "peak) instead of FA3's (also over a measured --profile's); fa2 on Ampere and fa3 on Hopper are the "
                  "built-in defaults, fa2 with --optimizer fsdp (PyTorch's SDPA); exit 2 on other GPUs")
      ->transform(CLI::IsMember({"default", "fa2", "fa3"}, CLI::ignore_case));
  cmd->add_option("--trace", a->trace, "write a Chrome trace JSON (opens in Perfetto)")->check(OutputFile());
  cmd->add_option("--allocator-trace", a->allocator_trace,
                  "write each stage's replayed allocations (JSON) for scripts/allocator-check.py, which replays "
                  "them through PyTorch's caching allocator on a GPU")
      ->check(OutputFile());
  cmd->add_flag("--full-rank", a->full_rank, "simulate every data-parallel replica (slow; for checks)");
  cmd->add_flag("--json", a->json, "print JSON");
  cmd->add_flag("--ops", a->ops, "also print the per-op cost table: shapes, FLOPs, bytes, time, achieved rate");
  auto emit = std::make_shared<EmitArgs>();
  AddEmitOptions(cmd, emit.get());
  auto what_if = std::make_shared<std::vector<std::string>>();
  AddWhatIfOption(cmd, what_if.get());
  auto straggler = std::make_shared<StragglerArgs>();
  AddSimulateStragglerOptions(cmd, straggler.get());
  auto html = std::make_shared<std::string>();
  AddHtmlOption(cmd, html.get());
  cmd->callback([a, straggler, emit, what_if, html] { RunSimulate(*a, *straggler, *emit, *what_if, *html); });
}

}  // namespace shardcast::cli
