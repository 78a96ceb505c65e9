#include "report/megatron_args.h"

#include <algorithm>

#include <fmt/format.h>

#include "report/launch.h"

namespace shardcast {

std::string MegatronPrecisionArgs(const ParallelConfig& c) {
  switch (c.precision) {
    case Precision::kBf16: return " --bf16";
    case Precision::kFp16: return " --fp16";
    case Precision::kTf32:
    case Precision::kFp32: return "";  // fp32 training is Megatron-LM's default; TF32 is PyTorch's matmul setting
    default: break;
  }
  std::string a = " --bf16";
  if (c.precision == Precision::kFp8) {
    a += fmt::format(" --fp8-format {} --fp8-recipe {}", c.Fp8FormatName(), ToString(c.fp8_recipe));
    if (c.fp8_recipe == Fp8Recipe::kDelayed) {
      a += fmt::format(" --fp8-amax-history-len {} --fp8-amax-compute-algo max", c.fp8_amax_history_len);
    }
  } else if (c.precision == Precision::kMxfp8) {
    a += fmt::format(" --fp8-format {} --fp8-recipe mxfp8", c.Fp8FormatName());
  } else if (c.precision == Precision::kNvfp4) {
    a += " --fp4-format e2m1 --fp4-recipe nvfp4";
  }
  if (c.fp8_param_gather) a += " --fp8-param-gather";
  if (c.bf16_layers_start + c.bf16_layers_end > 0) {
    a += fmt::format(" --first-last-layers-bf16 --num-layers-at-start-in-bf16 {} --num-layers-at-end-in-bf16 {}",
                     c.bf16_layers_start, c.bf16_layers_end);
  }
  return a;
}

namespace {

std::string SizeFlags(const ParallelConfig& c, const Model& m) {
  std::string a = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", c.tp, c.pp);
  if (c.cp > 1) {
    a += fmt::format(" --context-parallel-size {}", c.cp);
    // DeepSpeed-Ulysses runs the all-to-alls of Megatron-Core's a2a.
    a += fmt::format(" --cp-comm-type {}", c.cp_comm == CpComm::kUlysses ? "a2a" : ToString(c.cp_comm));
    if (c.cp_comm == CpComm::kA2AP2P) {
      // Megatron-LM requires the two levels with a2a+p2p (ResolveCpA2a sets the default one).
      a += c.cp_a2a > 0 ? fmt::format(" --hierarchical-context-parallel-sizes {} {}", c.cp_a2a, c.cp / c.cp_a2a)
                        : std::string(" --hierarchical-context-parallel-sizes A R");
    }
  }
  if (m.moe.enabled()) {
    a += fmt::format(" --expert-model-parallel-size {} --expert-tensor-parallel-size {} --moe-token-dispatcher-type {} "
                     "--moe-grouped-gemm",
                     c.ep, c.expert_tp(), ToString(c.moe_dispatcher));
    // core_v0.15's flex dispatcher asserts --moe-enable-deepep (its DeepEP backend).
    if (c.moe_dispatcher == MoeDispatcher::kFlex) a += " --moe-enable-deepep";
    if (c.moe_capacity_factor > 0) a += fmt::format(" --moe-expert-capacity-factor {}", c.moe_capacity_factor);
    if (c.moe_force_load_balancing) a += " --moe-router-force-load-balancing";
  }
  return a;
}

/// Virtual stages and uneven splits: Megatron-LM's --num-layers-per-virtual-pipeline-stage needs
/// an even split; with first/last stage counts or embedding slots the number of virtual stages is
/// given instead, and an even spread over chunks that do not divide the layers is a layout.
std::string PipelineSplitFlags(const ParallelConfig& c, const Model& m) {
  std::string a;
  if (c.even_chunks) {
    a += " --pipeline-model-parallel-layout '" + MegatronPipelineLayout(m, c) + "'";
  } else if (c.schedule == Schedule::kInterleaved && c.vp > 1) {
    a += c.uneven_pipeline() ? fmt::format(" --num-virtual-stages-per-pipeline-rank {}", c.vp)
                             : fmt::format(" --num-layers-per-virtual-pipeline-stage {}", m.num_layers / (c.pp * c.vp));
  }
  if (c.first_stage_layers >= 0) a += fmt::format(" --decoder-first-pipeline-num-layers {}", c.first_stage_layers);
  if (c.last_stage_layers >= 0) a += fmt::format(" --decoder-last-pipeline-num-layers {}", c.last_stage_layers);
  // The embedding and the output layer each take a layer's slot in the pipeline split, (L + 2) / pp
  // per stage: Megatron-LM's --account-for-embedding/loss-in-pipeline-split (BLOOM's
  // Megatron-DeepSpeed called it --pp-partition-method 'type:transformer|embedding').
  if (c.embedding_slots && !c.even_chunks) {
    a += " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";
  }
  return a.empty() ? a : a.substr(1);
}

std::string RecomputeFlags(const ParallelConfig& c) {
  std::string a;
  if (c.recompute == Recompute::kSelective && !c.TorchOpCheckpointing()) {
    a += " --recompute-granularity selective";
    if (c.recompute_modules != kRecomputeCoreAttn) {
      a += " --recompute-modules " + RecomputeModulesArgs(c.recompute_modules);
    }
  }
  if (c.moe_a2a_overlap) a += " --delay-wgrad-compute --overlap-moe-expert-parallel-comm";
  if (c.offload_modules != 0) {
    a += " --fine-grained-activation-offloading --offload-modules " + OffloadModulesArgs(c.offload_modules);
  }
  if (c.recompute == Recompute::kFull && c.PartialRecompute() && c.recompute_block_layers >= 0) {
    a += fmt::format(" --recompute-granularity full --recompute-method block --recompute-num-layers {}",
                     c.recompute_block_layers);
  } else if (c.recompute == Recompute::kFull) {
    // torchtitan's one layer in N has no Megatron-LM form: every layer (LayerIntervalUnexpressed says so)
    a += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  }
  return a;
}

std::string OptimizerFlags(const ParallelConfig& c) {
  std::string a;
  if (c.zero_stage == 1) a += " --use-distributed-optimizer";
  // ZeRO-2 is Megatron FSDP's optim_grads strategy (formerly --use-custom-fsdp); ZeRO-3 is full
  // sharding, here PyTorch FSDP2.
  // Hybrid sharding: Megatron-FSDP's HSDP (an unsharded outer level over the instances) for
  // ZeRO-2/3, the partial distributed optimizer for ZeRO-1.
  // Megatron-FSDP saves only fsdp_dtensor checkpoints (arguments.py asserts the format).
  // Megatron-FSDP runs with the distributed optimizer (its guide lists the flag; Megatron-Core
  // 0.18 sets it itself).
  if (c.zero_stage == 2) {
    a += " --use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy optim_grads "
         "--ckpt-format fsdp_dtensor";
  }
  if (c.zero_stage == 3) {
    a += c.hybrid_shard() ? " --use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy "
                            "optim_grads_params --ckpt-format fsdp_dtensor"
                          : " --use-torch-fsdp2";
  }
  if (c.hybrid_shard()) {
    a += fmt::format(" --num-distributed-optimizer-instances {}", c.dp_replicas());
    if (c.zero_stage >= 2) a += " --outer-dp-sharding-strategy no_shard";
  }
  // Megatron-LM asserts that --overlap-param-gather comes with --overlap-grad-reduce
  // (validate_args), also where one data-parallel rank has nothing to reduce; without the
  // overlapped reduce the gather is not written either (Notes).
  const bool param_gather = c.overlap_param_gather && c.zero_stage == 1 && c.overlap_grad_reduce;
  if (c.overlap_grad_reduce && (c.dp_cp() > 1 || param_gather)) a += " --overlap-grad-reduce";
  if (param_gather) a += " --overlap-param-gather";
  if (!c.fp32_main_grads && c.optimizer_impl == OptimizerImpl::kMegatron) a += " --grad-reduce-in-bf16";
  a += c.flash_attention ? " --use-flash-attn" : " --attention-backend unfused";
  if (c.tp_comm_overlap) a += " --tp-comm-overlap";
  if (c.cross_entropy == CrossEntropyImpl::kNative || c.cross_entropy == CrossEntropyImpl::kTe) {
    a += " --cross-entropy-loss-fusion";
  }
  if (c.cross_entropy == CrossEntropyImpl::kTe) a += " --cross-entropy-fusion-impl te";
  return a;
}

void Notes(const ParallelConfig& c, std::vector<std::string>* notes) {
  LayerIntervalUnexpressed(c, "Megatron-LM", notes);
  if (c.TorchOpCheckpointing()) {
    notes->push_back("torchtitan's per-op selective checkpointing (Megatron-Core has no per-op policy): no recompute "
                     "flag is written, so the run keeps every activation");
  }
  if (c.overlap_param_gather && c.zero_stage == 1 && !c.overlap_grad_reduce) {
    notes->push_back("the distributed optimizer's parameter gather overlapped with the forward pass: Megatron-LM "
                     "allows --overlap-param-gather only with --overlap-grad-reduce, so neither is written "
                     "(simulate with --no-overlap-param-gather to match)");
  }
  if (c.cp > 1 && c.cp_comm == CpComm::kA2AP2P && c.cp_a2a <= 0) {
    notes->push_back("--hierarchical-context-parallel-sizes A R: A ranks per all-to-all group, R = cp / A");
  }
  if (c.cross_entropy == CrossEntropyImpl::kFlashAttn || c.cross_entropy == CrossEntropyImpl::kTorch) {
    notes->push_back(fmt::format("the {} cross-entropy (not a Megatron-LM choice; written as its unfused loss)",
                                 ToString(c.cross_entropy)));
  }
  if (c.schedule == Schedule::kZbH1) notes->push_back("ZB-H1 schedule: not in upstream Megatron-LM (zero-bubble fork)");
  if (c.schedule == Schedule::kGpipe) notes->push_back("GPipe schedule: Megatron-LM runs 1F1B");
  if (c.cp > 1 && c.cp_comm == CpComm::kUlysses) {
    notes->push_back("DeepSpeed-Ulysses: Megatron-DeepSpeed's --ds-sequence-parallel-size; Megatron-Core's "
                     "--cp-comm-type a2a moves the same bytes");
  }
  if (c.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    notes->push_back("PyTorch FSDP's training state (the fp32 shard as the optimizer's master; Megatron-LM keeps its own)");
  } else if (c.optimizer_impl != OptimizerImpl::kMegatron) {
    notes->push_back(fmt::format("the {} optimizer (DeepSpeed's; Megatron-LM runs its own)", ToString(c.optimizer_impl)));
  }
  if (c.zero_stage >= 3 && c.zero3_impl != Zero3Impl::kPerLayer) {
    notes->push_back(fmt::format("ZeRO-3 as {} ran it (Megatron-LM's FSDP gathers per layer)", ToString(c.zero3_impl)));
  }
  if (c.zero_stage >= 3 && !c.zero3_limit_all_gathers) {
    notes->push_back("PyTorch FSDP's limit_all_gathers=False (Megatron-LM's FSDP2 and Megatron-FSDP have no such switch)");
  }
  if (!HasMegatronCoreDefaults(c)) {
    notes->push_back("Megatron-LM 2021-22's pipeline transfers (the plan's --framework megatron-2022); "
                     "Megatron-Core sends whole activations");
  }
  const ParallelConfig d;
  if (c.param_gather_bytes != d.param_gather_bytes) {
    notes->push_back(fmt::format("parameter all-gathers of {} bytes per parameter", c.param_gather_bytes));
  }
  if (!c.async_tp_grad_reduce) {
    notes->push_back("synchronous tensor-parallel gradient reductions (Megatron-Core overlaps them)");
  }
}

}  // namespace

void LayerIntervalUnexpressed(const ParallelConfig& c, const char* framework, std::vector<std::string>* unexpressed) {
  if (!c.PartialRecompute() || c.recompute_layer_interval <= 0) return;
  unexpressed->push_back(fmt::format("torchtitan's checkpointing of one layer in every {} ({} has no such method; "
                                     "its block method recomputes the first N layers of each chunk): written "
                                     "as full recompute of every layer",
                                     c.recompute_layer_interval, framework));
}

std::vector<std::string> MegatronParallelFlags(const ParallelConfig& c, const Model& m, std::vector<std::string>* notes) {
  std::vector<std::string> f;
  f.push_back(SizeFlags(c, m));
  if (std::string s = PipelineSplitFlags(c, m); !s.empty()) f.push_back(s);
  std::string batch = fmt::format("--micro-batch-size {} --global-batch-size {} --seq-length {}", c.micro_batch_size,
                                  c.global_batch_size, c.seq_length > 0 ? c.seq_length : m.seq_length);
  if (c.sequence_parallel) batch += " --sequence-parallel";
  batch += RecomputeFlags(c);
  f.push_back(batch);
  f.push_back(OptimizerFlags(c).substr(1) + MegatronPrecisionArgs(c));
  Notes(c, notes);
  return f;
}

std::string MegatronArguments(const ParallelConfig& given, const Model& m) {
  const ParallelConfig c = WithEffectiveRecompute(m, given);  // as EmitLaunch
  std::vector<std::string> notes;
  const std::vector<std::string> f = MegatronParallelFlags(c, m, &notes);
  std::string a;
  if (m.moe.enabled()) a += fmt::format("--num-experts {} --moe-router-topk {} ", m.moe.num_experts, m.moe.top_k);
  a += f[0];
  for (std::size_t i = 1; i < f.size(); ++i) a += " " + f[i];
  for (const auto& n : notes) a += "   # " + n;
  return a;
}

}  // namespace shardcast
