#include "models/parallel.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <utility>

#include "common/error.h"

#include <fmt/format.h>

namespace shardcast {

const char* ToString(CpComm c) {
  switch (c) {
    case CpComm::kP2P: return "p2p";
    case CpComm::kAllGather: return "allgather";
    case CpComm::kA2A: return "a2a";
    case CpComm::kA2AP2P: return "a2a+p2p";
    case CpComm::kUlysses: return "ulysses";
  }
  return "?";
}

const char* ToString(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllToAll: return "alltoall";
    case MoeDispatcher::kAllGather: return "allgather";
    case MoeDispatcher::kFlex: return "flex";
  }
  return "?";
}

CpComm ParseCpComm(const std::string& s) {
  if (s == "p2p") return CpComm::kP2P;
  if (s == "allgather") return CpComm::kAllGather;
  if (s == "a2a") return CpComm::kA2A;
  if (s == "a2a+p2p") return CpComm::kA2AP2P;
  if (s == "ulysses" || s == "deepspeed-ulysses") return CpComm::kUlysses;
  throw InputError("cp-comm-type: got \"" + s + "\", expected p2p, allgather, a2a, a2a+p2p or ulysses");
}

const char* ToString(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

namespace {
constexpr std::pair<unsigned, const char*> kRecomputeModuleNames[] = {
    {kRecomputeCoreAttn, "core_attn"}, {kRecomputeMoeAct, "moe_act"}, {kRecomputeLayernorm, "layernorm"},
    {kRecomputeMlaUpProj, "mla_up_proj"}, {kRecomputeMlp, "mlp"}, {kRecomputeMoe, "moe"},
    {kRecomputeSharedExperts, "shared_experts"}};

/// A (bit, name) table's names of the bits set, separated by `sep`, in the table's order.
std::string NamesOfBits(unsigned bits, std::span<const std::pair<unsigned, const char*>> table,
                        const char* sep = ",") {
  std::string s;
  for (const auto& [bit, name] : table) {
    if ((bits & bit) == 0) continue;
    if (!s.empty()) s += sep;
    s += name;
  }
  return s;
}

/// The bit of `n` in a (bit, name) table; 0 for a name it does not have.
unsigned BitOfName(const std::string& n, std::span<const std::pair<unsigned, const char*>> table) {
  for (const auto& [bit, name] : table) {
    if (n == name) return bit;
  }
  return 0;
}
}  // namespace

std::string RecomputeModulesName(unsigned modules) {
  const std::string megatron = NamesOfBits(modules, kRecomputeModuleNames);
  if ((modules & kRecomputeTorchOps) == 0) return megatron;
  return megatron.empty() ? "op" : megatron + ",op";
}
std::string RecomputeModulesArgs(unsigned modules) { return NamesOfBits(modules, kRecomputeModuleNames, " "); }

unsigned ParseRecomputeModules(const std::vector<std::string>& names, const std::string& where) {
  unsigned out = 0;
  for (const std::string& n : names) {
    const unsigned bit = BitOfName(n, kRecomputeModuleNames);
    out |= bit;
    if (bit == 0) {
      throw InputError(where + ": got \"" + n +
                       "\", expected Megatron-Core's recompute modules: core_attn, moe_act, layernorm, mla_up_proj, mlp, "
                       "moe, shared_experts");
    }
  }
  if (out == 0) throw InputError(where + ": got no module, expected at least one of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts");
  return out;
}

void RequireRecomputeModules(const Model& m, unsigned modules, const std::string& where) {
  auto need = [&](unsigned bit, bool has, const char* what) {
    if ((modules & bit) != 0 && !has) {
      throw InputError(fmt::format("{}: got {}, but {} has no {}", where, RecomputeModulesName(bit), m.name, what));
    }
  };
  need(kRecomputeMoe, m.moe.enabled(), "mixture-of-experts layers");
  need(kRecomputeMoeAct, m.moe.enabled(), "mixture-of-experts layers");
  need(kRecomputeSharedExperts, m.moe.enabled() && m.moe.shared_ffn_hidden_size > 0, "shared experts");
  need(kRecomputeMlaUpProj, m.mla.enabled(), "multi-head latent attention");
  need(kRecomputeMlp, m.MoeLayersIn(0, m.num_layers) < m.num_layers, "dense MLP layers");
}

std::string ParallelConfig::PartialRecomputeName() const {
  if (!PartialRecompute()) return {};
  if (recompute_block_layers >= 0) {
    return fmt::format("(first {} layer{} of each chunk)", recompute_block_layers, recompute_block_layers == 1 ? "" : "s");
  }
  return fmt::format("(one layer in every {} of a rank)", recompute_layer_interval);
}

std::string TorchOpCheckpointingUnmodelled(const Model& m) {
  if (m.moe.enabled()) return "mixture-of-experts layers";
  if (m.mla.enabled()) return "multi-head latent attention";
  // A biased linear runs aten.addmm, which torchtitan's save list neither holds nor counts.
  if (m.add_bias_linear || m.add_qkv_bias) return "biases in its linear layers";
  return "";
}

void RequireTorchOpCheckpointing(const Model& m, const std::string& where) {
  if (const std::string why = TorchOpCheckpointingUnmodelled(m); !why.empty()) {
    throw InputError(fmt::format("{}: got op (torchtitan's per-op selective checkpointing), but it is modelled for dense "
                                 "layers with MHA/GQA attention and linear layers without biases, and {} has {}; "
                                 "expected --recompute full or none",
                                 where, m.name, why));
  }
}

namespace {
constexpr std::pair<unsigned, const char*> kOffloadModuleNames[] = {
    {kOffloadCoreAttn, "core_attn"}, {kOffloadAttnProj, "attn_proj"}, {kOffloadExpertFc1, "expert_fc1"},
    {kOffloadMoeAct, "moe_act"}};
}  // namespace

std::string OffloadModulesName(unsigned modules) { return NamesOfBits(modules, kOffloadModuleNames); }
std::string OffloadModulesArgs(unsigned modules) { return NamesOfBits(modules, kOffloadModuleNames, " "); }

unsigned ParseOffloadModules(const std::vector<std::string>& names, const std::string& where) {
  unsigned out = 0;
  for (const std::string& n : names) {
    const unsigned bit = BitOfName(n, kOffloadModuleNames);
    out |= bit;
    if (bit != 0) continue;
    if (n == "attn_norm" || n == "mlp_norm" || n == "qkv_linear") {
      throw InputError(where + ": got \"" + n +
                       "\", a module Megatron-Core offloads that the simulator does not model (what a norm saves "
                       "depends on whether Transformer Engine fuses it into the next GEMM); expected core_attn, "
                       "attn_proj, expert_fc1 or moe_act");
    }
    throw InputError(where + ": got \"" + n +
                     "\", expected Megatron-Core's offload modules: core_attn, attn_proj, expert_fc1, moe_act");
  }
  if (out == 0) throw InputError(where + ": got no module, expected at least one of core_attn, attn_proj, expert_fc1, moe_act");
  if ((out & kOffloadAttnProj) && !(out & kOffloadCoreAttn)) {
    // Megatron-Core's TransformerConfig raises the same ("attn_proj cannot be set to
    // offload_modules alone without core_attn").
    throw InputError(where + ": got attn_proj without core_attn, expected core_attn with it (Megatron-Core offloads the "
                             "attention projection's input only together with the attention core's tensors)");
  }
  return out;
}

void RequireOffloadModules(const Model& m, unsigned modules, const std::string& where) {
  const unsigned moe_only = kOffloadExpertFc1 | kOffloadMoeAct;
  if ((modules & moe_only) != 0 && !m.moe.enabled()) {
    throw InputError(fmt::format("{}: got {}, but {} has no mixture-of-experts layers", where,
                                 OffloadModulesName(modules & moe_only), m.name));
  }
}

const char* ToString(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZbH1: return "zb-h1";
  }
  return "?";
}

const char* ToString(OptimizerImpl o) {
  switch (o) {
    case OptimizerImpl::kMegatron: return "megatron";
    case OptimizerImpl::kDeepSpeedZero: return "deepspeed-zero";
    case OptimizerImpl::kDeepSpeedBf16: return "deepspeed-bf16";
    case OptimizerImpl::kTorchFsdp: return "fsdp";
  }
  return "?";
}

std::string OptimizerZeroStageMismatch(OptimizerImpl o, int z) {
  if (o == OptimizerImpl::kDeepSpeedZero && z < 1) return "DeepSpeed's ZeRO optimizer (deepspeed-zero) runs ZeRO-1, 2 or 3";
  if (o == OptimizerImpl::kDeepSpeedBf16 && z != 1) {
    return "DeepSpeed's BF16_Optimizer (deepspeed-bf16) shards its optimizer state like ZeRO-1 only";
  }
  return "";
}

std::string TorchtitanStageMismatch(int z, std::int64_t tp, std::int64_t pp, std::int64_t cp, std::int64_t dp,
                                    std::int64_t ep) {
  if (z == 1 && pp == 1) return "with --optimizer fsdp ZeRO-1 is FSDP2 under a pipeline (pp > 1)";
  const bool alone = dp * cp == 1;  // no data parallelism: torchtitan applies neither
  if (z == 0 && !alone && (pp > 1 || tp > 1 || cp > 1 || ep > 1)) {
    return "with --optimizer fsdp ZeRO-0 is DDP, which torchtitan runs only as the sole parallelism";
  }
  return "";
}

const char* ToString(Zero3Impl z) {
  switch (z) {
    case Zero3Impl::kPerLayer: return "per-layer";
    case Zero3Impl::kDeepSpeed2021: return "deepspeed-2021";
    case Zero3Impl::kDeepSpeed: return "deepspeed";
  }
  return "?";
}

const char* ToString(CrossEntropyImpl x) {
  switch (x) {
    case CrossEntropyImpl::kUnfused: return "unfused";
    case CrossEntropyImpl::kNative: return "native";
    case CrossEntropyImpl::kTe: return "te";
    case CrossEntropyImpl::kFlashAttn: return "flash-attn";
    case CrossEntropyImpl::kTorch: return "torch";
  }
  return "?";
}

std::optional<CrossEntropyImpl> CrossEntropyImplNamed(const std::string& name) {
  for (const CrossEntropyImpl x : {CrossEntropyImpl::kUnfused, CrossEntropyImpl::kNative, CrossEntropyImpl::kTe,
                                   CrossEntropyImpl::kFlashAttn, CrossEntropyImpl::kTorch}) {
    if (name == ToString(x)) return x;
  }
  return std::nullopt;
}

const char* ToString(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kDelayed: return "delayed";
    case Fp8Recipe::kTensorwise: return "tensorwise";
    case Fp8Recipe::kBlockwise: return "blockwise";
  }
  return "?";
}

namespace {

/// " flushesF" (with "(reduce-last)" when gradients are reduced after the last flush alone), or
/// "" for one schedule a step: Summary's and Short's word for the pipeline flushes.
std::string FlushesText(const ParallelConfig& c) {
  if (c.pipeline_flushes <= 1) return "";
  return fmt::format(" flushes{}{}", c.pipeline_flushes, c.flush_grad_reduce ? "" : "(reduce-last)");
}

}  // namespace

std::string ParallelConfig::Summary() const {
  // "?" marks a size the GPU count does not determine (tp*pp does not divide it).
  const std::string dps = dp > 0 ? std::to_string(dp) : "?";
  const std::string gbs = global_batch_size > 0 ? std::to_string(global_batch_size) : "?";
  const std::string split = PipelineSplitName(*this);
  std::string s = fmt::format("TP{} PP{}{} DP{}", tp, pp, split.empty() ? "" : " (" + split + ")", dps);
  if (cp > 1) s += fmt::format(" CP{} ({})", cp, ToString(cp_comm));
  if (ep > 1 || (etp > 0 && etp != tp)) {
    s += fmt::format(" EP{} ETP{}{}", ep, expert_tp(),
                     moe_dispatcher == MoeDispatcher::kAllToAll ? "" : fmt::format(" ({})", ToString(moe_dispatcher)));
  }
  if (vp > 1) s += fmt::format(" VP{}", vp);
  s += fmt::format(" mbs{} gbs{}", micro_batch_size, gbs);
  s += FlushesText(*this);
  if (sequence_parallel) s += " SP";
  s += fmt::format(" recompute={}{} ZeRO-{} {}", ToString(recompute),
                   recompute == Recompute::kSelective && recompute_modules != kRecomputeCoreAttn
                       ? "(" + RecomputeModulesName(recompute_modules) + ")"
                       : PartialRecomputeName(),
                   zero_stage, ToString(schedule));
  if (hybrid_shard()) s += fmt::format(" HSDP(shard {} x {})", dp_shard, dp_replicas());
  if (offload_modules != 0) s += fmt::format(" offload({})", OffloadModulesName(offload_modules));
  if (moe_a2a_overlap) s += " ep-a2a-overlap";
  if (moe_force_load_balancing) s += " forced-balance";
  if (moe_load_imbalance > 0) s += fmt::format(" imbalance={}", moe_load_imbalance);
  if (optimizer_impl != OptimizerImpl::kMegatron) s += fmt::format(" optimizer={}", ToString(optimizer_impl));
  if (zero_stage >= 3 && zero3_impl != Zero3Impl::kPerLayer) s += fmt::format(" zero3={}", ToString(zero3_impl));
  if (zero_stage >= 3 && !zero3_limit_all_gathers) s += " no-limit-all-gathers";
  if (p2p_blocking) s += " p2p-blocking";
  if (tp_comm_overlap) s += " tp-comm-overlap";
  if (cross_entropy != CrossEntropyImpl::kUnfused) s += fmt::format(" ce={}", ToString(cross_entropy));
  if (precision != Precision::kBf16) {
    s += fmt::format(" {}", ToString(precision));
    if (precision == Precision::kFp8) s += fmt::format("({})", ToString(fp8_recipe));
    if (fp8_param_gather) s += " fp8-param-gather";
    if (bf16_layers_start + bf16_layers_end > 0) s += fmt::format(" bf16-layers={}+{}", bf16_layers_start, bf16_layers_end);
  }
  return s;
}

std::string ParallelConfig::Short() const {
  std::string s = fmt::format("TP{} PP{} DP{}", tp, pp, dp);
  if (cp > 1) s += fmt::format(" CP{}{}", cp, cp_comm == CpComm::kP2P ? "" : std::string("-") + ToString(cp_comm));
  if (ep > 1) s += fmt::format(" EP{}", ep);
  if (etp > 0 && etp != tp) s += fmt::format(" ETP{}", etp);
  if (moe_force_load_balancing) s += " forced-balance";
  if (moe_load_imbalance > 0) s += fmt::format(" imb{:g}", moe_load_imbalance);
  if (embedding_slots) s += " E+L";
  if (first_stage_layers >= 0 || last_stage_layers >= 0) {
    s += fmt::format(" L{}/{}", first_stage_layers >= 0 ? std::to_string(first_stage_layers) : "-",
                     last_stage_layers >= 0 ? std::to_string(last_stage_layers) : "-");
  }
  if (vp > 1) s += fmt::format(" VP{}", vp);
  s += fmt::format(" mbs{}", micro_batch_size);
  s += FlushesText(*this);
  if (sequence_parallel) s += tp_comm_overlap ? " SP+ov" : " SP";
  if (recompute != Recompute::kNone) {
    s += recompute == Recompute::kFull ? " rc-full" : TorchOpCheckpointing() ? " rc-op" : " rc-sel";
    if (PartialRecompute()) s += recompute_block_layers >= 0 ? fmt::format("-first{}", recompute_block_layers)
                                                             : fmt::format("-1in{}", recompute_layer_interval);
  }
  if (offload_modules != 0) s += " offload";
  if (zero_stage > 0) s += fmt::format(" Z{}", zero_stage);
  if (hybrid_shard()) s += fmt::format("/{}", dp_shard);
  if (deepspeed2021_zero3()) s += "-ds21";
  if (deepspeed_zero3()) s += "-ds";
  if (schedule != Schedule::k1F1B && schedule != Schedule::kInterleaved) s += fmt::format(" {}", ToString(schedule));
  if (precision != Precision::kBf16) s += fmt::format(" {}", ToString(precision));
  return s;
}

std::vector<std::string> ParallelConfig::ShortLegend(const std::vector<ParallelConfig>& configs) {
  auto any = [&](auto pred) { return std::any_of(configs.begin(), configs.end(), pred); };
  std::vector<std::string> out;
  auto add = [&](bool used, const char* line) {
    if (used) out.emplace_back(line);
  };
  add(any([](const ParallelConfig& c) { return c.embedding_slots; }),
      "E+L: the embedding and the loss take a transformer layer's place in the pipeline split");
  add(any([](const ParallelConfig& c) { return c.first_stage_layers >= 0 || c.last_stage_layers >= 0; }),
      "La/b: the first and the last pipeline stage hold a and b transformer layers (- where not set)");
  add(any([](const ParallelConfig& c) { return c.sequence_parallel; }),
      "SP: sequence parallelism; SP+ov: with the tensor-parallel communication overlap");
  add(any([](const ParallelConfig& c) { return c.recompute == Recompute::kFull; }),
      "rc-full: full activation recompute (-firstN: of the first N layers of each chunk; -1inN: of one layer in N)");
  add(any([](const ParallelConfig& c) { return c.recompute == Recompute::kSelective; }),
      "rc-sel: selective recompute (rc-op: torchtitan's per-op checkpointing)");
  add(any([](const ParallelConfig& c) { return c.zero_stage > 0; }),
      "Zn: ZeRO stage n (Zn/S: sharded over groups of S data-parallel ranks)");
  add(any([](const ParallelConfig& c) { return c.moe_force_load_balancing || c.moe_load_imbalance > 0; }),
      "forced-balance / imbF: the MoE router's load: forced balance, or the busiest expert rank at F x the mean");
  return out;
}

void ApplyMegatronCoreDefaults(ParallelConfig* c) {
  c->scatter_gather = false;
  c->p2p_blocking = c->pp > 1 && c->schedule == Schedule::k1F1B;
}

bool HasMegatronCoreDefaults(const ParallelConfig& c) {
  ParallelConfig d = c;
  ApplyMegatronCoreDefaults(&d);
  return d.scatter_gather == c.scatter_gather && d.p2p_blocking == c.p2p_blocking;
}

void CopyPrecisionSettings(const ParallelConfig& from, ParallelConfig* to) {
  to->precision = from.precision;
  to->fp8_recipe = from.fp8_recipe;
  to->fp8_format = from.fp8_format;
  to->fp8_amax_history_len = from.fp8_amax_history_len;
  to->fp8_param_gather = from.fp8_param_gather;
  to->bf16_layers_start = from.bf16_layers_start;
  to->bf16_layers_end = from.bf16_layers_end;
}

void CopyDeepSpeedKnobs(const ParallelConfig& from, ParallelConfig* to) {
  to->ds_reduce_bucket_elems = from.ds_reduce_bucket_elems;
  to->ds_contiguous_gradients = from.ds_contiguous_gradients;
  to->ds_multi_rank_bucket_allreduce = from.ds_multi_rank_bucket_allreduce;
  to->ds_max_live_elems = from.ds_max_live_elems;
  to->ds_persistence_threshold_elems = from.ds_persistence_threshold_elems;
  to->ds_prefetch_bucket_elems = from.ds_prefetch_bucket_elems;
  to->ds_max_reuse_distance_elems = from.ds_max_reuse_distance_elems;
}

void RequirePrecision(const Gpu& g, const ParallelConfig& c, const std::string& where) {
  if (!g.Runs(c.precision)) {
    throw InputError(fmt::format("{}: precision {} is not supported by the {} ({}); it runs: {}", where,
                                 ToString(c.precision), g.display_name, g.name, g.PrecisionList()));
  }
  if (c.fp8_param_gather) {
    if (!IsLowPrecision(c.precision) || c.precision == Precision::kNvfp4) {
      throw InputError(fmt::format("{}: --fp8-param-gather needs --precision fp8 or mxfp8 (got {})", where,
                                   ToString(c.precision)));
    }
    if (c.zero_stage < 1) {
      throw InputError(where + ": --fp8-param-gather needs the distributed optimizer (--zero 1 or more; got --zero 0)");
    }
  }
  if (c.bf16_layers_start + c.bf16_layers_end > 0 && !IsLowPrecision(c.precision)) {
    throw InputError(fmt::format("{}: layers kept in bf16 (--first-last-layers-bf16) need a low-precision format "
                                 "(fp8, mxfp8, nvfp4; got {})",
                                 where, ToString(c.precision)));
  }
}

std::int64_t DataParallelSize(std::int64_t gpus, std::int64_t tp, std::int64_t pp, std::int64_t cp) {
  const std::int64_t mp = tp * cp * pp;
  return mp > 0 && gpus % mp == 0 ? gpus / mp : 0;
}

namespace {

std::int64_t seq_of(const Model& m, const ParallelConfig& c) { return c.seq_length > 0 ? c.seq_length : m.seq_length; }

}  // namespace

std::int64_t CpA2aGroup(const ParallelConfig& c, std::int64_t gpn) {
  switch (c.cp_comm) {
    case CpComm::kP2P:
    case CpComm::kAllGather: return 1;
    case CpComm::kA2A:
    case CpComm::kUlysses: return c.cp;
    case CpComm::kA2AP2P:
      if (c.cp_a2a > 0) return c.cp_a2a;
      return std::gcd(c.cp, std::max<std::int64_t>(1, gpn / std::max<std::int64_t>(1, c.tp)));
  }
  return 1;
}

std::vector<Infeasibility> ExpertParallelRules(const Model& m, const ParallelConfig& c) {
  std::vector<Infeasibility> r;
  auto add = [&r](const char* rule, std::string text) { r.push_back({rule, std::move(text), {}}); };
  if (c.moe_a2a_overlap && (!m.moe.enabled() || c.ep < 2)) {
    add("EP A2A overlap without expert parallelism",
        fmt::format("--overlap-moe-expert-parallel-comm overlaps the expert-parallel token exchange, but {}",
                    m.moe.enabled() ? fmt::format("ep = {}", c.ep) : m.name + " has no mixture-of-experts layers"));
  }
  if (c.moe_a2a_overlap && c.schedule != Schedule::k1F1B && c.schedule != Schedule::kInterleaved) {
    add("EP A2A overlap needs a 1F1B schedule",
        fmt::format("--overlap-moe-expert-parallel-comm pairs a forward with a backward in the 1F1B steady state; "
                    "schedule {} has none",
                    ToString(c.schedule)));
  }
  // Megatron-Core's TransformerConfig asserts these beside the overlap (transformer_config.py);
  // Megatron-LM reads one virtual stage a rank as none (arguments.py).
  auto flagged = [&r](const char* rule, std::string text, std::string flag) {
    r.push_back({rule, std::move(text), std::move(flag)});
  };
  if (c.moe_a2a_overlap && c.pp > 1 && c.vp < 2) {
    flagged("EP A2A overlap with a pipeline needs virtual stages",
            fmt::format("--overlap-moe-expert-parallel-comm with pp = {} needs virtual pipeline stages, as "
                        "Megatron-Core asserts (--num-virtual-stages-per-pipeline-rank 2 or more), got vp = {}",
                        c.pp, c.vp),
            fmt::format("--vp: got {}", c.vp));
  }
  if (c.moe_a2a_overlap && c.recompute == Recompute::kFull) {
    const std::string partial = c.recompute_block_layers >= 0
                                    ? fmt::format("--recompute-method block --recompute-num-layers {}",
                                                  c.recompute_block_layers)
                                    : fmt::format("--selective-ac-option {}", c.recompute_layer_interval);
    flagged("EP A2A overlap with full recompute",
            fmt::format("Megatron-Core asserts no full recompute (nor --recompute-method or --recompute-num-layers) "
                        "beside --overlap-moe-expert-parallel-comm, got recompute {}",
                        c.PartialRecompute() ? "full " + c.PartialRecomputeName() : std::string("full")),
            c.PartialRecompute() ? "--recompute full " + partial + ": given" : std::string("--recompute: got full"));
  }
  if (c.moe_a2a_overlap && c.recompute == Recompute::kSelective && (c.recompute_modules & kRecomputeMoe) != 0) {
    flagged("EP A2A overlap with the moe recompute module",
            "Megatron-Core asserts \"moe\" is not among the recompute modules beside "
            "--overlap-moe-expert-parallel-comm",
            "--recompute-modules: got " + RecomputeModulesArgs(c.recompute_modules));
  }
  if (c.moe_a2a_overlap && c.moe_dispatcher == MoeDispatcher::kAllGather) {
    flagged("EP A2A overlap with the all-gather dispatcher",
            "--overlap-moe-expert-parallel-comm overlaps an all-to-all: Megatron-Core takes it with the alltoall or "
            "flex token dispatcher, not allgather",
            "--moe-token-dispatcher-type: got allgather");
  }
  // Megatron-Core's flex dispatcher (MoEFlexTokenDispatcher) asserts "requires TPxEP > 1".
  if (m.moe.enabled() && c.moe_dispatcher == MoeDispatcher::kFlex && c.ep * c.expert_tp() == 1) {
    flagged("flex dispatcher without expert parallelism",
            fmt::format("Megatron-Core's flex dispatcher requires TPxEP > 1 (expert tp x ep), got ep {} x expert tp {}; "
                        "with neither, tokens stay on their GPU: use alltoall",
                        c.ep, c.expert_tp()),
            "--moe-token-dispatcher-type: got flex");
  }
  if (c.moe_a2a_overlap && c.pipeline_flushes > 1) {
    add("EP A2A overlap with pipeline flushes",
        fmt::format("--overlap-moe-expert-parallel-comm is Megatron-Core's, which runs one schedule a step; pipeline "
                    "flushes ({}) are PyTorch pipelining's",
                    c.pipeline_flushes));
  }
  if (!m.moe.enabled()) {
    if (c.ep > 1 || c.etp > 1) {
      add("expert parallelism without experts",
          fmt::format("ep = {}, etp = {}: {} has no mixture-of-experts layers", c.ep, c.expert_tp(), m.name));
    }
    return r;
  }
  if (m.moe.num_experts % c.ep != 0) {
    add("ep does not divide the experts",
        fmt::format("ep = {} does not divide num_experts = {}", c.ep, m.moe.num_experts));
  }
  const std::int64_t grid = c.tp * c.cp * c.dp, egrid = c.expert_tp() * c.ep;
  if (c.dp > 0 && grid % egrid != 0) {
    add("etp*ep does not divide tp*cp*dp",
        fmt::format("the expert grid etp*ep = {}*{} = {} does not divide the tp*cp*dp = {} GPUs of a stage (Megatron-Core's "
                    "parallel folding)",
                    c.expert_tp(), c.ep, egrid, grid));
  }
  if (m.moe.ffn_hidden_size % c.expert_tp() != 0) {
    add("etp does not divide the expert FFN",
        fmt::format("etp = {} does not divide moe_ffn_hidden_size = {}", c.expert_tp(), m.moe.ffn_hidden_size));
  }
  if (c.tp > 1 && !c.sequence_parallel) {
    add("MoE with tp > 1 needs sequence parallelism",
        fmt::format("Megatron-Core runs MoE layers with tp = {} only with sequence parallelism", c.tp));
  }
  return r;
}

void RequireExpertParallel(const Model& m, const ParallelConfig& c, const std::string& where) {
  const auto broken = ExpertParallelRules(m, c);
  if (broken.empty()) return;
  const Infeasibility& b = broken.front();
  std::string flag = fmt::format("--ep: got {}", c.ep);
  if (b.rule == std::string("etp does not divide the expert FFN")) flag = fmt::format("--etp: got {}", c.expert_tp());
  if (b.rule == std::string("MoE with tp > 1 needs sequence parallelism")) flag = fmt::format("--tp: got {}", c.tp);
  if (b.rule == std::string("etp*ep does not divide tp*cp*dp")) flag = fmt::format("--ep {} --etp {}", c.ep, c.expert_tp());
  if (b.rule == std::string("expert parallelism without experts")) {
    flag = c.ep > 1 && c.etp > 1 ? fmt::format("--ep {} --etp {}", c.ep, c.etp)
           : c.ep > 1            ? fmt::format("--ep: got {}", c.ep)
                                 : fmt::format("--etp: got {}", c.etp);
  }
  if (b.rule == std::string("EP A2A overlap without expert parallelism") ||
      b.rule == std::string("EP A2A overlap needs a 1F1B schedule") ||
      b.rule == std::string("EP A2A overlap with pipeline flushes")) {
    flag = "--overlap-moe-expert-parallel-comm: given";
  }
  if (!b.flag.empty()) flag = b.flag;
  throw InputError(fmt::format("{}: {}; {}", where, flag, b.text));
}

void ResolveCpA2a(ParallelConfig* c, std::int64_t gpn) {
  if (c->cp > 1 && c->cp_comm == CpComm::kA2AP2P && c->cp_a2a <= 0) c->cp_a2a = CpA2aGroup(*c, gpn);
}

std::vector<Infeasibility> HybridShardRules(const ParallelConfig& c) {
  std::vector<Infeasibility> r;
  if (c.dp_shard == 0) return r;
  auto add = [&r](const char* rule, std::string text) { r.push_back({rule, std::move(text), {}}); };
  if (c.dp_shard < 0 || (c.dp_cp() > 0 && c.dp_cp() % c.dp_shard != 0)) {
    add("dp_shard does not divide dp*cp",
        fmt::format("dp_shard = {} does not divide the {} data-parallel ranks (dp {} x cp {})", c.dp_shard, c.dp_cp(),
                    c.dp, c.cp));
    return r;
  }
  if (!c.hybrid_shard()) return r;
  if (c.zero_stage == 0) {
    add("hybrid sharding needs ZeRO >= 1",
        fmt::format("dp_shard = {} shards the ZeRO state over groups of {} ranks, but ZeRO-0 shards nothing", c.dp_shard,
                    c.dp_shard));
  }
  const bool deepspeed = c.optimizer_impl == OptimizerImpl::kDeepSpeedZero || c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16;
  if (deepspeed || (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kPerLayer)) {
    add("hybrid sharding with DeepSpeed",
        fmt::format("dp_shard = {}: hybrid sharding is modelled for Megatron-Core's distributed optimizer and "
                    "PyTorch FSDP, not for DeepSpeed's ZeRO (its ZeRO++ hpZ is not modelled)",
                    c.dp_shard));
  }
  return r;
}

std::vector<Infeasibility> ContextParallelRules(const Model& m, const ParallelConfig& c, std::int64_t gpn) {
  std::vector<Infeasibility> r;
  const std::int64_t seq = seq_of(m, c);
  if (c.cp <= 1) return r;
  auto add = [&r](const char* rule, std::string text) { r.push_back({rule, std::move(text), {}}); };
  if (c.cp_comm == CpComm::kUlysses) {
    if (seq % c.cp != 0) {
      add("cp does not divide the sequence",
          fmt::format("DeepSpeed-Ulysses splits the sequence into cp = {} parts: seq_length = {} is not a multiple of {}",
                      c.cp, seq, c.cp));
    }
  } else if (seq % (2 * c.cp) != 0) {
    add("cp does not divide the sequence into 2*cp chunks",
        fmt::format("context parallelism splits the sequence into 2*cp = {} chunks (rank i holds chunks i and "
                    "2*cp-1-i): seq_length = {} is not a multiple of {}",
                    2 * c.cp, seq, 2 * c.cp));
  }
  if (m.WindowedLayers() > 0 && (c.cp_comm == CpComm::kP2P || c.cp_comm == CpComm::kA2AP2P)) {
    // Transformer Engine's context parallelism (attention.py, cp_comm_type checks): "The context
    // parallel running configs cannot support sliding window attention" outside a2a and all_gather.
    add("sliding-window attention needs cp-comm-type a2a or allgather",
        fmt::format("Transformer Engine runs sliding-window attention ({} = {}) under context parallelism only with "
                    "--cp-comm-type a2a or allgather (got {})",
                    m.attention_window_key, m.attention_window, ToString(c.cp_comm)));
  }
  if (!c.flash_attention) {
    add("context parallelism needs fused attention",
        fmt::format("cp = {} needs fused (flash) attention: Megatron-Core runs context parallelism only with "
                    "Transformer Engine's fused attention (got unfused attention: --no-flash-attention, or a V100, where "
                    "FlashAttention does not run)",
                    c.cp));
  }
  const std::int64_t group = CpA2aGroup(c, gpn);
  if (c.cp_comm == CpComm::kA2AP2P && c.cp % group != 0) {
    add("the a2a group does not divide cp",
        fmt::format("cp-comm-type a2a+p2p: the all-to-all group of {} ranks does not divide cp = {}", group, c.cp));
    return r;
  }
  if (group > 1) {
    const std::int64_t heads = m.num_attention_heads / std::max<std::int64_t>(1, c.tp);
    const std::int64_t groups = m.num_query_groups / std::max<std::int64_t>(1, c.tp);
    if (heads % group != 0 || groups % group != 0) {
      add("the all-to-all group does not divide the heads",
          fmt::format("cp-comm-type {} splits the attention heads over its all-to-all group of {} ranks: "
                      "num_attention_heads / tp = {} and num_query_groups / tp = {} must be multiples of {}",
                      ToString(c.cp_comm), group, heads, groups, group));
    }
  }
  return r;
}

void RequireContextParallel(const Model& m, const ParallelConfig& c, std::int64_t gpn, const std::string& where) {
  const auto broken = ContextParallelRules(m, c, gpn);
  if (broken.empty()) return;
  const Infeasibility& b = broken.front();
  std::string flag = fmt::format("--cp: got {}", c.cp);
  if (b.rule == std::string("context parallelism needs fused attention")) flag = "--no-flash-attention: given with --cp " + std::to_string(c.cp);
  if (b.rule == std::string("the all-to-all group does not divide the heads") ||
      b.rule == std::string("the a2a group does not divide cp")) {
    flag = fmt::format("--cp-comm-type: got {} with --cp {}", ToString(c.cp_comm), c.cp);
  }
  throw InputError(fmt::format("{}: {}; {}", where, flag, b.text));
}

namespace {

/// Megatron-LM's --decoder-first/last-pipeline-num-layers: the given stages' layers, the others an
/// equal share of the rest, into `stage` (pp entries). Returns why the split cannot be, or "".
std::string FirstLastStageSplit(const Model& m, const ParallelConfig& c, std::int64_t pp,
                                std::vector<std::int64_t>* stage_layers) {
  const std::int64_t L = m.num_layers;
  const bool first_set = c.first_stage_layers >= 0, last_set = c.last_stage_layers >= 0;
  std::vector<std::int64_t>& stage = *stage_layers;
  if (c.embedding_slots) {
    return "first/last pipeline stage layer counts cannot be combined with embedding slots (Megatron-Core "
           "supports one or the other)";
  }
  if (pp < 2) return fmt::format("first/last pipeline stage layer counts need pp >= 2 (got pp = {})", pp);
  std::int64_t rest = L, stages_left = pp;
  if (first_set) rest -= c.first_stage_layers, --stages_left;
  if (last_set) rest -= c.last_stage_layers, --stages_left;
  const std::string given =
      (first_set ? fmt::format("first stage {}", c.first_stage_layers) : std::string()) +
      (first_set && last_set ? ", " : "") + (last_set ? fmt::format("last stage {}", c.last_stage_layers) : std::string());
  if ((first_set && c.first_stage_layers < 1) || (last_set && c.last_stage_layers < 1)) {
    return fmt::format("pipeline split: {} layers, expected at least 1 (Megatron-Core's TransformerConfig)", given);
  }
  if (stages_left > 0 && rest == 0) {
    return fmt::format("pipeline split: {} layers leave none of num_layers = {} for the {} other stages "
                       "(Megatron-Core needs layers on every stage)",
                       given, L, stages_left);
  }
  if (rest < 0 || (stages_left == 0 && rest != 0)) {
    return fmt::format("pipeline split: {} layers leave {} of num_layers = {} for the {} other stages", given,
                       rest, L, stages_left);
  }
  if (stages_left > 0 && rest % stages_left != 0) {
    return fmt::format("pipeline split: {} layers leave {} of num_layers = {}, which the {} other stages cannot "
                       "share equally ({} / {} is not an integer)",
                       given, rest, L, stages_left, rest, stages_left);
  }
  for (std::int64_t i = 0; i < pp; ++i) stage[static_cast<std::size_t>(i)] = stages_left > 0 ? rest / stages_left : 0;
  if (first_set) stage.front() = c.first_stage_layers;
  if (last_set) stage.back() = c.last_stage_layers;
  return "";
}

/// Each model chunk k*pp + i of `L` layers gets L / (pp*vp) layers, the first L % (pp*vp) chunks
/// one more (a --pipeline-model-parallel-layout of even chunks).
PipelineLayout EvenChunkLayout(std::int64_t L, std::int64_t chunks) {
  PipelineLayout out;
  if (L < chunks) {
    out.error = fmt::format("pipeline layout: {} layers for pp*vp = {} chunks", L, chunks);
    return out;
  }
  out.chunk_layers.assign(static_cast<std::size_t>(chunks), 0);
  for (std::int64_t k = 0; k < chunks; ++k) out.chunk_layers[static_cast<std::size_t>(k)] = L / chunks + (k < L % chunks ? 1 : 0);
  std::int64_t first = 0;
  for (std::int64_t n : out.chunk_layers) {
    out.first_layer.push_back(first);
    first += n;
  }
  return out;
}

}  // namespace

PipelineLayout PipelineLayoutOf(const Model& m, const ParallelConfig& c) {
  PipelineLayout out;
  const std::int64_t L = m.num_layers, pp = std::max<std::int64_t>(1, c.pp);
  const std::int64_t v = c.schedule == Schedule::kInterleaved ? std::max<std::int64_t>(1, c.vp) : 1;
  std::vector<std::int64_t> stage(static_cast<std::size_t>(pp), 0);  // layers per pipeline stage
  auto fail = [&](std::string why) {
    out.error = std::move(why);
    out.chunk_layers.clear();
    out.first_layer.clear();
    return out;
  };
  if (c.first_stage_layers >= 0 || c.last_stage_layers >= 0) {
    if (std::string why = FirstLastStageSplit(m, c, pp, &stage); !why.empty()) return fail(std::move(why));
  } else if (c.embedding_slots && c.even_chunks && pp > 1) {
    // L + 2 slots spread evenly over the chunks, the remainder to the first; the embedding and
    // the loss take one of the first and the last chunk's (torchtitan's
    // generate_llm_fqn_per_model_part with input and output weight 1).
    PipelineLayout slots = EvenChunkLayout(L + 2, pp * v);
    if (!slots.error.empty()) return fail(slots.error);
    --slots.chunk_layers.front();
    --slots.chunk_layers.back();
    if (slots.chunk_layers.front() < 0 || slots.chunk_layers.back() < 0) {
      return fail(fmt::format("embedding slots: {} slots over pp*vp = {} chunks leave the first or last chunk no slot "
                              "for the embedding (or the loss)", L + 2, pp * v));
    }
    std::int64_t at = 0;
    for (std::size_t k = 0; k < slots.chunk_layers.size(); ++k) {
      slots.first_layer[k] = at;
      at += slots.chunk_layers[k];
    }
    return slots;
  } else if (c.embedding_slots && pp > 1) {
    if (v > 1 && (L + 2) % pp != 0) {
      return fail(fmt::format("embedding slots with virtual stages: num_layers + 2 = {} slots are not a multiple of "
                              "pp = {}", L + 2, pp));
    }
    for (std::int64_t i = 0; i < pp; ++i) stage[static_cast<std::size_t>(i)] = (L + 2) / pp + (i < (L + 2) % pp ? 1 : 0);
  } else if (c.even_chunks) {
    return EvenChunkLayout(L, pp * v);
  } else {
    if (v > 1 && L % (pp * v) != 0) {
      return fail(fmt::format("pp*vp = {}*{} does not divide num_layers = {}", pp, v, L));
    }
    for (std::int64_t i = 0; i < pp; ++i) stage[static_cast<std::size_t>(i)] = L / pp + (i < L % pp ? 1 : 0);
  }
  for (std::int64_t i = 0; i < pp; ++i) {
    if (v > 1 && stage[static_cast<std::size_t>(i)] % v != 0) {
      const std::int64_t n = stage[static_cast<std::size_t>(i)];
      return fail(fmt::format("pipeline split: stage {} holds {} {}{}, not a multiple of vp = {} (each virtual stage "
                              "holds 1/vp of them)",
                              i, n, c.embedding_slots && pp > 1 ? "layer slot" : "layer", n == 1 ? "" : "s", v));
    }
  }
  out.chunk_layers.assign(static_cast<std::size_t>(pp * v), 0);
  for (std::int64_t i = 0; i < pp; ++i) {
    for (std::int64_t k = 0; k < v; ++k) out.chunk_layers[static_cast<std::size_t>(k * pp + i)] = stage[static_cast<std::size_t>(i)] / v;
  }
  if (c.embedding_slots && pp > 1) {
    --out.chunk_layers.front();
    --out.chunk_layers.back();
    if (out.chunk_layers.front() < 0 || out.chunk_layers.back() < 0) {
      return fail(fmt::format("embedding slots: the first or last model chunk holds {} slot, too few for the "
                              "embedding (or the loss) and its layers",
                              (L + 2) / (pp * v)));
    }
  }
  std::int64_t first = 0;
  for (std::int64_t n : out.chunk_layers) {
    out.first_layer.push_back(first);
    first += n;
  }
  if (first != L) return fail(fmt::format("pipeline split: the stages hold {} layers, expected num_layers = {}", first, L));
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> RecomputedLayersPerStage(const Model& m, const ParallelConfig& c) {
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  if (!layout.error.empty()) return {};
  const std::int64_t pp = std::max<std::int64_t>(1, c.pp);
  const std::int64_t v = static_cast<std::int64_t>(layout.chunk_layers.size()) / pp;
  std::vector<std::pair<std::int64_t, std::int64_t>> out(static_cast<std::size_t>(pp), {0, 0});
  for (std::int64_t stage = 0; stage < pp; ++stage) {
    auto& [rerun, layers] = out[static_cast<std::size_t>(stage)];
    for (std::int64_t k = 0; k < v; ++k) {
      const std::int64_t n = layout.Layers(pp, stage, k), before = layout.LayersBefore(pp, stage, k);
      for (std::int64_t l = 0; l < n; ++l) rerun += c.LayerRecomputed(l, before + l) ? 1 : 0;
      layers += n;
    }
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> RecomputedLayersTotal(const Model& m, const ParallelConfig& c) {
  std::pair<std::int64_t, std::int64_t> total{0, 0};
  for (const auto& [r, n] : RecomputedLayersPerStage(m, c)) {
    total.first += r;
    total.second += n;
  }
  return total;
}

bool RunsAsPartial(const Model& m, std::int64_t rerun, std::int64_t layers) {
  // Every transformer layer rerunning is full recompute only without multi-token-prediction
  // layers, which full recompute reruns and partial recompute does not.
  return layers == 0 || (rerun != 0 && (rerun != layers || m.mtp_num_layers > 0));
}

ParallelConfig WithEffectiveRecompute(const Model& m, ParallelConfig c) {
  if (!c.PartialRecompute()) return c;
  const auto [rerun, layers] = RecomputedLayersTotal(m, c);
  if (RunsAsPartial(m, rerun, layers)) return c;
  if (rerun == 0) c.recompute = Recompute::kNone;
  c.recompute_block_layers = -1;
  c.recompute_layer_interval = 0;
  return c;
}

std::string PipelineSplitName(const ParallelConfig& c) {
  if (c.pp <= 1) return "";
  if (c.embedding_slots) return c.even_chunks ? "emb+loss slots, even chunks" : "emb+loss slots";
  if (c.even_chunks) return "even chunks";
  if (c.first_stage_layers < 0 && c.last_stage_layers < 0) return "";
  std::string s;
  if (c.first_stage_layers >= 0) s += fmt::format("first {}", c.first_stage_layers);
  if (c.first_stage_layers >= 0 && c.last_stage_layers >= 0) s += " / ";
  if (c.last_stage_layers >= 0) s += fmt::format("last {}", c.last_stage_layers);
  return s + " layers";
}

std::int64_t TorchtitanLayersPerStage(std::int64_t slots, std::int64_t chunks) {
  if (chunks < 1 || slots < chunks) return 0;
  const std::int64_t per = (slots + chunks - 1) / chunks;
  return (slots + per - 1) / per == chunks ? per : 0;
}

bool TorchtitanBorrowsExpertRanks(std::int64_t ep, std::int64_t etp, std::int64_t shard, std::int64_t cp, std::int64_t tp) {
  return etp == 1 ? ep % (cp * tp) == 0 && (shard * cp * tp) % ep == 0 : (shard * cp) % ep == 0;
}

bool MegatronCannotSplit(const Model& m, const ParallelConfig& c) {
  if (c.pp <= 1 || c.first_stage_layers >= 0 || c.last_stage_layers >= 0 || c.even_chunks) return false;
  const std::int64_t slots = m.num_layers + (c.embedding_slots ? 2 : 0);
  return slots % (c.pp * std::max<std::int64_t>(1, c.vp)) != 0;
}

namespace {

/// The grid's rules: tp*cp*pp divides the GPUs and dp is the rest, the expert grid
/// (ExpertParallelRules), tp divides the heads and query groups.
void GridRules(const Model& m, const ParallelConfig& c, std::int64_t gpus, std::vector<Infeasibility>* r) {
  auto add = [r](const char* rule, std::string text) { r->push_back({rule, std::move(text), {}}); };
  const std::int64_t mp = c.tp * c.cp * c.pp;
  const std::string mp_name = c.cp > 1 ? "tp*cp*pp" : "tp*pp";
  const std::string mp_values =
      c.cp > 1 ? fmt::format("{}*{}*{}", c.tp, c.cp, c.pp) : fmt::format("{}*{}", c.tp, c.pp);
  if (gpus % mp != 0) {
    add("tp*cp*pp does not divide the GPU count",
        mp > gpus ? fmt::format("{} = {} = {} GPUs for one model replica, more than the {} GPUs given", mp_name,
                                mp_values, mp, gpus)
                  : fmt::format("{} = {} = {} does not divide {} GPUs", mp_name, mp_values, mp, gpus));
  } else if (c.dp != gpus / mp) {
    add("dp disagrees with GPUs / (tp*cp*pp)",
        fmt::format("dp = {} but {} GPUs / ({} = {}) = {}", c.dp, gpus, mp_name, mp, gpus / mp));
  }
  for (const Infeasibility& x : ExpertParallelRules(m, c)) r->push_back(x);
  if (m.num_attention_heads % c.tp != 0) {
    add("tp does not divide the attention heads", fmt::format("tp = {} does not divide num_attention_heads = {}", c.tp,
                            m.num_attention_heads));
  }
  // Megatron-LM requires num_query_groups % tp == 0 (reported separately only for GQA/MQA).
  if (m.num_query_groups != m.num_attention_heads && m.num_query_groups % c.tp != 0) {
    add("tp does not divide the query groups", fmt::format("tp = {} does not divide num_query_groups = {}", c.tp,
                            m.num_query_groups));
  }
}

/// What the layers and the sequence need: overlap and sequence parallelism, bf16 and pipeline
/// layer counts, the interleaved schedule's virtual stages, the learned position table,
/// activation offloading, the pipeline split (PipelineLayoutOf).
void LayerRules(const Model& m, const ParallelConfig& c, const Cluster& cl, std::vector<Infeasibility>* r) {
  auto add = [r](const char* rule, std::string text) { r->push_back({rule, std::move(text), {}}); };
  if (c.tp_comm_overlap && !(c.sequence_parallel && c.tp > 1)) {
    add("tp comm overlap without sequence parallelism",
        fmt::format("--tp-comm-overlap needs sequence parallelism with tp > 1 (got tp = {}, sequence parallel {})", c.tp,
                    c.sequence_parallel ? "on" : "off"));
  }
  if (c.bf16_layers_start + c.bf16_layers_end > m.num_layers) {
    add("bf16 layers exceed the layer count",
        fmt::format("{} + {} layers kept in bf16 exceed num_layers = {}", c.bf16_layers_start, c.bf16_layers_end,
                    m.num_layers));
  }
  if (c.pp > m.num_layers) {
    add("pp exceeds the layer count", fmt::format("pp = {} exceeds num_layers = {}", c.pp, m.num_layers));
  }
  if (c.schedule == Schedule::kInterleaved && c.vp < 2) {
    add("the interleaved schedule needs vp >= 2", fmt::format("the interleaved schedule needs vp >= 2 virtual stages (got vp = {}; with one it is 1F1B)",
                            c.vp));
  }
  const std::int64_t seq = seq_of(m, c);
  // Judged on a whole context-parallel share: when cp does not divide the sequence, that rule
  // (ContextParallelRules, below) names the cause, not this one.
  if (c.sequence_parallel && c.tp > 1 && seq % c.cp == 0 && (seq / c.cp) % c.tp != 0) {
    add("sequence parallelism needs seq_length divisible by tp",
        c.cp > 1 ? fmt::format("sequence parallelism splits each context-parallel rank's {} tokens (seq_length {} / cp "
                               "{}) over tp: not a multiple of tp = {}",
                               seq / c.cp, seq, c.cp, c.tp)
                 : fmt::format("sequence parallelism splits the sequence over tp: seq_length = {} is not a multiple of "
                               "tp = {}", seq, c.tp));
  }
  if (m.position_embedding == PositionEmbedding::kLearned && m.max_position_embeddings > 0 &&
      seq > m.max_position_embeddings) {
    add("seq_length exceeds the learned position table", fmt::format("seq_length = {} exceeds the learned position embeddings' max_position_embeddings = {}",
                            seq, m.max_position_embeddings));
  }
  if (c.vp > 1 && c.schedule != Schedule::kInterleaved) {
    add("vp > 1 needs the interleaved schedule", fmt::format("vp = {} needs the interleaved schedule", c.vp));
  }
  if (c.offload_modules != 0 && c.recompute == Recompute::kFull) {
    add("activation offloading under full recompute",
        fmt::format("offloading {} under full recompute: a layer keeps only its input, so the modules save nothing "
                    "to offload (use selective recompute or none)",
                    OffloadModulesName(c.offload_modules)));
  }
  if ((c.offload_modules & (kOffloadExpertFc1 | kOffloadMoeAct)) != 0 && c.Recomputes(kRecomputeMoe)) {
    // Megatron-Core's TransformerConfig asserts it ("Cannot offload ... while recomputing the
    // entire MoE layer").
    add("offloading MoE modules while recomputing the MoE layer",
        fmt::format("offloading {} while selective recompute reruns the whole MoE layer (moe): Megatron-Core refuses it, "
                    "the layer saves only its input",
                    OffloadModulesName(c.offload_modules & (kOffloadExpertFc1 | kOffloadMoeAct))));
  }
  if (c.offload_modules != 0 && cl.gpu.pcie_GBps_per_direction <= 0) {
    add("activation offloading without a host link rate",
        fmt::format("offloading {} needs the GPU's host link rate, which {} does not give (pcie_GBps_per_direction)",
                    OffloadModulesName(c.offload_modules), cl.gpu.name));
  }
  if (c.pp <= m.num_layers) {
    const PipelineLayout layout = PipelineLayoutOf(m, c);
    if (!layout.error.empty()) {
      add(!c.uneven_pipeline() ? "pp*vp does not divide the layer count" : "the pipeline split does not add up",
          layout.error);
    }
  }
}

/// The batch's rules: micro-batches per step, the global batch a multiple of micro-batch * dp,
/// pipeline flushes, the interleaved schedule's micro-batch count.
void BatchRules(const ParallelConfig& c, std::vector<Infeasibility>* r) {
  auto add = [r](const char* rule, std::string text) { r->push_back({rule, std::move(text), {}}); };
  const std::int64_t per_replica = c.micro_batch_size * c.dp;
  if (per_replica >= 1 && c.global_batch_size / per_replica > kMaxMicrobatchesPerStep) {
    add("more micro-batches per step than the simulator expands (16384)", fmt::format("global batch {} / (micro-batch {} * dp {}) = {} micro-batches per step, more than the {} "
                            "the simulator expands (raise the micro-batch size or lower the global batch)",
                            c.global_batch_size, c.micro_batch_size, c.dp, c.global_batch_size / per_replica,
                            kMaxMicrobatchesPerStep));
  }
  if (per_replica < 1) {
    // dp is unknown (tp*cp*pp does not divide the GPUs, reported above): no batch to check.
  } else if (c.global_batch_size % per_replica != 0) {
    add("global batch not a multiple of micro-batch * dp", fmt::format("global batch {} is not a multiple of micro-batch {} * dp {} = {}",
                            c.global_batch_size, c.micro_batch_size, c.dp, per_replica));
  } else if (c.pipeline_flushes > 1 && c.pp <= 1) {
    add("pipeline flushes without pipeline parallelism", fmt::format("pipeline flushes: got {} with pp = {}, expected 1 without pipeline "
                            "parallelism (a flush fills and drains a pipeline; gradient accumulation without one is the "
                            "micro-batches themselves)", c.pipeline_flushes, c.pp));
  } else if (c.pipeline_flushes < 1 || c.num_microbatches() % c.pipeline_flushes != 0) {
    add("pipeline flushes do not divide the micro-batches", fmt::format("pipeline flushes: got {}, expected a positive divisor of the step's {} "
                            "micro-batches (each flush runs a schedule of an equal share)", c.pipeline_flushes, c.num_microbatches()));
  } else if (c.schedule == Schedule::kInterleaved && c.pp > 1 &&
             (c.num_microbatches() / c.pipeline_flushes) % c.pp != 0) {
    // Megatron-LM requires this for the interleaved schedule.
    add("interleaved schedule needs micro-batches divisible by pp",
        c.pipeline_flushes > 1
            ? fmt::format("interleaved schedule needs micro-batches per flush ({} / {} flushes = {}) divisible by pp ({})",
                          c.num_microbatches(), c.pipeline_flushes, c.num_microbatches() / c.pipeline_flushes, c.pp)
            : fmt::format("interleaved schedule needs micro-batches ({}) divisible by pp ({})", c.num_microbatches(), c.pp));
  }
}

/// ZeRO-2/3 beside pipeline or expert parallelism, sequence parallelism without tp, GPUs across
/// nodes without a network.
void ShardingAndClusterRules(const Model& m, const ParallelConfig& c, std::int64_t gpus, const Cluster& cl,
                             std::vector<Infeasibility>* r) {
  auto add = [r](const char* rule, std::string text) { r->push_back({rule, std::move(text), {}}); };
  if (c.zero_stage >= 2 && c.pp > 1) {
    add("ZeRO-2/3 with pipeline parallelism", fmt::format("ZeRO-{} shards gradients{} across data parallelism, which Megatron-LM and DeepSpeed "
                            "do not support with pipeline parallelism (pp = {}){}",
                            c.zero_stage, c.zero_stage == 3 ? " and weights" : "", c.pp,
                            (c.zero_stage == 3 || c.optimizer_impl == OptimizerImpl::kTorchFsdp) &&
                                    c.zero3_impl == Zero3Impl::kPerLayer
                                ? fmt::format("; PyTorch FSDP2 with pipeline parallelism (torchtitan, NeMo Automodel) "
                                              "runs as {}", kFsdp2PipelineEquivalent)
                                : std::string()));
  }
  if (c.deepspeed_zero3() && m.moe.enabled() && c.ep > 1) {
    // DeepSpeed's engine asserts "MoE not supported with Stage 3" for its own MoE layers, the
    // only ones it parallelizes over experts; a Hugging Face MoE model runs with ep = 1.
    add("DeepSpeed ZeRO-3 with expert parallelism",
        fmt::format("DeepSpeed's stage 3 does not run expert parallelism (ep = {}): its engine refuses its MoE "
                    "layers with stage 3; use --ep 1 (the experts then shard like other weights) or --zero 2",
                    c.ep));
  }
  if (c.sequence_parallel && c.tp == 1) {
    add("sequence parallelism needs tp > 1", "sequence parallelism needs tp > 1");
  }
  if (gpus > cl.gpus_per_node && !cl.HasInterNodeNetwork()) {
    add("GPUs on more than one node without an inter-node network",
        fmt::format("{} GPUs span {} nodes of {}, but cluster '{}' has no inter-node network (inter_node: fabric '{}', "
                    "nics_per_node {}, nic_Gbps {})",
                    gpus, (gpus + cl.gpus_per_node - 1) / cl.gpus_per_node, cl.gpus_per_node, cl.name,
                    cl.inter_fabric.empty() ? "unset" : cl.inter_fabric, cl.nics_per_node, cl.nic_Gbps));
  }
}

}  // namespace

std::vector<Infeasibility> InfeasibilityRules(const Model& m, const ParallelConfig& c,
                                              std::int64_t gpus, const Cluster& cl) {
  // In this order: a plan's rejection names a candidate's first broken rule.
  std::vector<Infeasibility> r;
  GridRules(m, c, gpus, &r);
  LayerRules(m, c, cl, &r);
  for (const Infeasibility& x : ContextParallelRules(m, c, cl.gpus_per_node)) r.push_back(x);
  BatchRules(c, &r);
  for (const Infeasibility& x : HybridShardRules(c)) r.push_back(x);
  ShardingAndClusterRules(m, c, gpus, cl, &r);
  return r;
}

std::vector<std::string> InfeasibilityReasons(const Model& m, const ParallelConfig& c, std::int64_t gpus,
                                              const Cluster& cl) {
  std::vector<std::string> out;
  for (auto& x : InfeasibilityRules(m, c, gpus, cl)) out.push_back(std::move(x.text));
  return out;
}

StateBytesPerParam BytesPerParam(int zero_stage, std::int64_t dp, bool fp32_main_grads) {
  const double d = static_cast<double>(dp);
  StateBytesPerParam b;
  b.weights = 2.0;
  b.grads = fp32_main_grads ? 4.0 : 2.0;
  b.optimizer = 12.0;
  if (zero_stage >= 1) b.optimizer /= d;
  if (zero_stage >= 2) b.grads /= d;
  if (zero_stage >= 3) b.weights /= d;
  return b;
}

StateBytesPerParam BytesPerParam(const ParallelConfig& c) { return BytesPerParam(c, c.shard_dp()); }

StateBytesPerParam BytesPerParam(const ParallelConfig& c, std::int64_t shards) {
  shards = std::max<std::int64_t>(1, shards);
  const double d = static_cast<double>(shards);
  StateBytesPerParam b;
  if (ModelDtypeBytes(c.precision) == 4.0 && c.optimizer_impl == OptimizerImpl::kMegatron) {
    // The fp32 weights are the optimizer's own: no master copy, gradients in fp32.
    b.weights = c.zero_stage >= 3 ? 4.0 / d : 4.0;
    b.grads = c.zero_stage >= 2 ? 4.0 / d : 4.0;
    b.optimizer = c.zero_stage >= 1 ? 8.0 / d : 8.0;
    return b;
  }
  switch (c.optimizer_impl) {
    case OptimizerImpl::kMegatron:
      return BytesPerParam(c.zero_stage, shards, c.fp32_main_grads);
    case OptimizerImpl::kDeepSpeedZero:
      b = BytesPerParam(c.zero_stage, shards, false);
      if (c.zero_stage >= 1) b.optimizer += 4.0 / d;  // the owner's fp32 gradient partition
      return b;
    case OptimizerImpl::kDeepSpeedBf16:
      b.weights = 2.0;
      b.grads = 2.0 + 4.0;  // bf16 .grad and the fp32 accumulation buffer, both unsharded
      b.optimizer = 12.0 / d;
      return b;
    case OptimizerImpl::kTorchFsdp: {
      if (c.zero_stage == 0) {
        // DDP: fp32 parameters and their bf16 autocast casts, saved for the backward; the fp32
        // .grad beside DDP's bucket buffers (gradient_as_bucket_view off, its default and
        // torchtitan's replicate()); fp32 Adam m and v.
        const double cast = ModelDtypeBytes(c.precision) < 4.0 ? ModelDtypeBytes(c.precision) : 0.0;
        b.weights = 4.0 + cast;
        b.grads = 4.0 + 4.0;
        b.optimizer = 8.0;
        return b;
      }
      // The gathered parameters in FSDP's param_dtype (param_gather_bytes; fp32 training gathers fp32).
      const double width = std::max(c.param_gather_bytes, ModelDtypeBytes(c.precision));
      const double gathered = c.zero_stage == 1 || c.zero_stage == 2 ? width : 0.0;
      b.weights = 4.0 / d + gathered;
      if (c.zero_stage == 1) {
        // The unsharded gradient accumulates in the reduce dtype through the schedule; the fp32
        // shard the reduce-scatter fills after the last backward (set to None by zero_grad at the
        // step's start) is held beside activations only when an earlier flush reduced into it.
        const bool early_reduce = c.pipeline_flushes > 1 && c.flush_grad_reduce;
        b.grads = (c.fp32_main_grads ? 4.0 : 2.0) + (early_reduce ? 4.0 / d : 0.0);
      } else {
        b.grads = 4.0 / d;
      }
      b.optimizer = 8.0 / d;
      return b;
    }
  }
  return b;
}

std::int64_t ParallelConfig::BucketParams() const {
  if (optimizer_impl == OptimizerImpl::kTorchFsdp && zero_stage == 0) {
    constexpr double kTorchtitanDdpBucketBytes = 100.0 * 1024 * 1024;  // bucket_cap_mb=100
    return static_cast<std::int64_t>(kTorchtitanDdpBucketBytes / GradReduceBytesPerParam(*this));
  }
  return std::max<std::int64_t>(40000000, 1000000 * dp * cp);
}

double GradReduceBytesPerParam(const ParallelConfig& c) {
  switch (c.optimizer_impl) {
    case OptimizerImpl::kMegatron: return c.fp32_main_grads ? 4.0 : 2.0;
    case OptimizerImpl::kDeepSpeedZero: return 2.0;
    case OptimizerImpl::kDeepSpeedBf16: return 4.0;
    case OptimizerImpl::kTorchFsdp: return c.zero_stage == 0 || c.fp32_main_grads ? 4.0 : 2.0;  // DDP: fp32 .grad
  }
  return 4.0;
}

bool GradReduceIsAllReduce(const ParallelConfig& c) {
  // DeepSpeed's ZeRO-1/2 (stage_1_and_2.py reduce_ipg_grads): without contiguous gradients each
  // bucket goes through buffered_reduce_fallback -> allreduce_bucket, a dist.all_reduce over the
  // data-parallel group (v0.4.5's stage2.py of August 2021 through v0.16.4); with them average_tensor all-reduces the
  // whole bucket too (use_multi_rank_bucket_allreduce, v0.12.4+), or before v0.12.4 reduces each
  // slice to its owner only.
  const bool ds12 = c.deepspeed_zero12();
  const bool ds_all_reduce = ds12 && (!c.ds_contiguous_gradients || c.ds_multi_rank_bucket_allreduce);
  return c.zero_stage == 0 || c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16 || ds_all_reduce;
}

std::int64_t LayersOfStage(std::int64_t num_layers, std::int64_t pp, std::int64_t stage,
                           bool embedding_slots) {
  if (embedding_slots && pp > 1) {
    const std::int64_t slots = num_layers + 2;
    std::int64_t n = slots / pp + (stage < slots % pp ? 1 : 0);
    if (stage == 0) --n;
    if (stage == pp - 1) --n;
    return std::max<std::int64_t>(0, n);
  }
  const std::int64_t base = num_layers / pp, rem = num_layers % pp;
  return base + (stage < rem ? 1 : 0);
}

namespace {
StageParameters StageParams(const Model& m, std::int64_t tp, std::int64_t pp, std::int64_t stage,
                            std::int64_t first, std::int64_t layers, std::int64_t expert_shards) {
  StageParameters s;
  const ParameterCounts pc = m.Parameters();
  const double t = static_cast<double>(tp);
  s.layers = layers;
  const std::int64_t moe = m.moe.enabled() ? m.MoeLayersIn(first, first + layers) : 0;
  s.layer_params = static_cast<double>(layers - moe) *
                       (static_cast<double>(pc.per_layer.sharded) / t + static_cast<double>(pc.per_layer.replicated)) +
                   static_cast<double>(moe) *
                       (static_cast<double>(pc.moe_layer.sharded) / t + static_cast<double>(pc.moe_layer.replicated));
  s.expert_params = static_cast<double>(moe) * static_cast<double>(pc.moe_layer.expert) /
                    static_cast<double>(std::max<std::int64_t>(1, expert_shards));
  s.layer_params += s.expert_params;
  if (stage == 0) {
    s.embedding_params = static_cast<double>(pc.word_embedding) / t +
                         static_cast<double>(pc.position_embedding);
  }
  if (stage == pp - 1) {
    const bool separate_copy = !m.tie_embeddings || pp > 1;
    s.output_params = static_cast<double>(pc.final_norm) +
                      (separate_copy ? static_cast<double>(m.vocab_size * m.hidden_size) / t : 0.0);
    const MtpParametersPerGpu mtp = MtpParametersOfLastStage(m, tp, expert_shards);
    s.mtp_params = mtp.params;
    s.expert_params += mtp.experts;
  }
  return s;
}
}  // namespace

MtpParametersPerGpu MtpParametersOfLastStage(const Model& m, std::int64_t tp, std::int64_t expert_shards) {
  MtpParametersPerGpu r;
  if (m.mtp_num_layers <= 0) return r;
  const ParameterCounts pc = m.Parameters();
  const double n = static_cast<double>(m.mtp_num_layers), t = static_cast<double>(tp);
  const double h = static_cast<double>(m.hidden_size);
  const bool moe = m.moe.enabled();
  const LayerParameters& lp = moe ? pc.moe_layer : pc.per_layer;
  const double experts =
      moe ? static_cast<double>(lp.expert) / static_cast<double>(std::max<std::int64_t>(1, expert_shards)) : 0.0;
  r.experts = n * experts;
  r.params = n * (2 * h * h / t + 3 * static_cast<double>(m.NormParameters()) + static_cast<double>(lp.sharded) / t +
                  static_cast<double>(lp.replicated) + experts);
  return r;
}

StageParameters ParametersOfStage(const Model& m, std::int64_t tp, std::int64_t pp, std::int64_t stage,
                                  bool embedding_slots, std::int64_t expert_shards) {
  std::int64_t first = 0;
  for (std::int64_t i = 0; i < stage; ++i) first += LayersOfStage(m.num_layers, pp, i, embedding_slots);
  return StageParams(m, tp, pp, stage, first, LayersOfStage(m.num_layers, pp, stage, embedding_slots), expert_shards);
}

StageParameters ParametersOfStage(const Model& m, const ParallelConfig& c, std::int64_t stage) {
  const PipelineLayout layout = PipelineLayoutOf(m, c);
  if (!layout.error.empty()) throw InternalError("ParametersOfStage: " + layout.error);
  const std::int64_t chunks = static_cast<std::int64_t>(layout.chunk_layers.size()) / std::max<std::int64_t>(1, c.pp);
  const std::int64_t shards = c.ep * c.expert_tp();
  StageParameters sum;
  for (std::int64_t k = 0; k < chunks; ++k) {
    const std::size_t chunk = static_cast<std::size_t>(k * c.pp + stage);
    const StageParameters part = StageParams(m, c.tp, c.pp, -1, layout.first_layer[chunk],
                                             layout.Layers(c.pp, stage, k), shards);
    sum.layers += part.layers;
    sum.layer_params += part.layer_params;
    sum.expert_params += part.expert_params;
  }
  const StageParameters ends = StageParams(m, c.tp, c.pp, stage, 0, 0, shards);
  sum.embedding_params = ends.embedding_params;
  sum.output_params = ends.output_params;
  sum.mtp_params = ends.mtp_params;
  sum.expert_params += ends.expert_params;  // the MTP modules' routed experts
  return sum;
}

}  // namespace shardcast
