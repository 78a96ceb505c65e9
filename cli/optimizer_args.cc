/// \file optimizer_args.cc
/// The optimizer and DeepSpeed flags `simulate`, `execute` and `plan` share (config_args.h).

#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cli/config_args.h"
#include "cli/options.h"
#include "common/error.h"

namespace shardcast::cli {

void AddDeepSpeedKnobOptions(CLI::App* cmd, OptimizerArgs* a, bool for_plan) {
  // `plan` applies each to the plans that run what it tunes; `simulate` refuses it elsewhere.
  const std::string where = for_plan ? " (the plans that run it take it)" : "";
  const std::string zero12 = for_plan ? "ZeRO-1/2 plans with --optimizer deepspeed-zero" : "--optimizer deepspeed-zero --zero 1|2";
  const std::string overlap = for_plan ? "two: plans overlap the reduction (overlap_comm)"
                                       : "two with overlap_comm, i.e. without --no-overlap-grad-reduce";
  cmd->add_option("--reduce-bucket-size", a->reduce_bucket_size,
                  "with " + zero12 + ": DeepSpeed's reduce_bucket_size in elements (default 5e8): at ZeRO-2 each "
                  "backward allocates a 16-bit bucket of this size (" + overlap + ") for the gradients to be "
                  "reduced (at ZeRO-1 too since DeepSpeed v0.13; DeepSpeed turned contiguous gradients off at stage "
                  "1 in v0.4.5-v0.12, see --no-contiguous-gradients); memory only: the reduction is timed as one "
                  "bucketed collective whatever its size; with "
                  "--zero3-impl deepspeed, the contiguous bucket the gradients are copied into and "
                  "reduce-scattered from when full; with --zero3-impl deepspeed-2021, the gradients wait in a "
                  "bucket of this size before it is reduce-scattered (the memory they hold; the reduce-scatters "
                  "are timed tensor by tensor)" + where)
      ->check(PositiveNumber());
  cmd->add_flag("--no-contiguous-gradients", a->no_contiguous_gradients,
                "with " + zero12 + ": DeepSpeed's contiguous_gradients false: no bucket is held, the gradients are "
                "all-reduced in flat copies (buffered_reduce_fallback: twice the bytes of a reduction to each "
                "slice's owner), after the backward unless ZeRO-2 or overlap_comm hooks reduce them inside it; "
                "what DeepSpeed v0.4.5-v0.12 did at ZeRO-1 whatever the config said, with overlap_comm off too "
                "(--no-overlap-grad-reduce)" + where);
  cmd->add_flag("--no-multi-rank-bucket-allreduce", a->no_multi_rank_bucket_allreduce,
                "with " + zero12 + " and contiguous gradients: DeepSpeed's use_multi_rank_bucket_allreduce false "
                "(what DeepSpeed did before v0.12.4): each rank's slices of a gradient bucket are reduced to it alone, "
                "a reduce-scatter's bytes, instead of the bucket's all-reduce (twice the bytes, and a flattened copy "
                "of the bucket while it runs)" + where);
  cmd->add_option("--stage3-max-live-parameters", a->ds_max_live_elems,
                  "with --zero3-impl deepspeed or deepspeed-2021: DeepSpeed's stage3_max_live_parameters in elements "
                  "(default 1e9): what is prefetched keeps the gathered parameters under it" + where)
      ->check(NonNegativeNumber());
  cmd->add_option("--stage3-prefetch-bucket-size", a->ds_prefetch_bucket_elems,
                  "with --zero3-impl deepspeed: DeepSpeed's stage3_prefetch_bucket_size in elements (default 5e7): "
                  "what each module's fetch prefetches of the modules after it" + where)
      ->check(NonNegativeNumber());
  cmd->add_option("--stage3-max-reuse-distance", a->ds_max_reuse_elems,
                  "with --zero3-impl deepspeed: DeepSpeed's stage3_max_reuse_distance in elements (default 1e9): a "
                  "module's parameters stay gathered when the modules up to this many elements on use them again" +
                      where)
      ->check(NonNegativeNumber());
  cmd->add_option("--stage3-param-persistence-threshold", a->ds_persistence_elems,
                  "with --zero3-impl deepspeed or deepspeed-2021: DeepSpeed's stage3_param_persistence_threshold in "
                  "elements (default 1e5): smaller tensors stay whole on every rank and are never gathered" + where)
      ->check(NonNegativeNumber());
}

OptimizerImpl ParseOptimizerImpl(const std::string& name) {
  if (name == "deepspeed-zero") return OptimizerImpl::kDeepSpeedZero;
  if (name == "deepspeed-bf16") return OptimizerImpl::kDeepSpeedBf16;
  if (name == "fsdp") return OptimizerImpl::kTorchFsdp;
  return OptimizerImpl::kMegatron;
}

Zero3Impl ParseZero3Impl(const std::string& name) {
  if (name == "deepspeed-2021") return Zero3Impl::kDeepSpeed2021;
  if (name == "deepspeed") return Zero3Impl::kDeepSpeed;
  return Zero3Impl::kPerLayer;
}

std::vector<std::string> ApplyDeepSpeedKnobs(const OptimizerArgs& a, bool refuse, ParallelConfig* c) {
  std::vector<std::string> left_out;
  // What an error names: the ZeRO stage, and with ZeRO-3 its implementation.
  const std::string given = fmt::format("--zero {}{}", c->zero_stage,
                                        c->zero_stage == 3 ? fmt::format(" --zero3-impl {}", ToString(c->zero3_impl)) : "");
  const bool ds3 = c->deepspeed2021_zero3() || c->deepspeed_zero3();
  // A ZeRO-1/2 knob: set where it applies; else left out of a search's plan, or refused.
  auto knob = [&](bool given_flag, const char* flag, bool applies, const auto& set, const std::string& refusal) {
    if (!given_flag) return;
    if (applies) {
      set();
    } else if (!refuse) {
      left_out.push_back(flag);
    } else {
      throw InputError(fmt::format("command line: {}: {}", flag, refusal));
    }
  };
  const std::string with = fmt::format("--optimizer {} --zero {}", ToString(c->optimizer_impl), c->zero_stage);
  knob(a.reduce_bucket_size > 0, "--reduce-bucket-size", c->deepspeed_zero12() || ds3,
       [&] { c->ds_reduce_bucket_elems = a.reduce_bucket_size; },
       fmt::format("got {} with {}, expected --optimizer deepspeed-zero with --zero 1 or 2, or --zero 3 --zero3-impl "
                   "deepspeed or deepspeed-2021 (DeepSpeed's gradient bucket)", a.reduce_bucket_size, with));
  knob(a.no_contiguous_gradients, "--no-contiguous-gradients", c->deepspeed_zero12(),
       [&] { c->ds_contiguous_gradients = false; },
       fmt::format("got it with {}, expected --optimizer deepspeed-zero with --zero 1 or 2 (DeepSpeed's ZeRO-1/2 "
                   "gradient bucket)", with));
  knob(a.no_multi_rank_bucket_allreduce, "--no-multi-rank-bucket-allreduce",
       c->deepspeed_zero12() && c->ds_contiguous_gradients, [&] { c->ds_multi_rank_bucket_allreduce = false; },
       fmt::format("got it with {}{}, expected --optimizer deepspeed-zero with --zero 1 or 2 and contiguous gradients "
                   "(without them DeepSpeed all-reduces every bucket either way)",
                   with, c->ds_contiguous_gradients ? "" : " --no-contiguous-gradients"));
  // DeepSpeed stage 3's knobs: the first two for either DeepSpeed, the last two for today's.
  const std::tuple<const char*, double, double*, bool> knobs[] = {
      {"--stage3-max-live-parameters", a.ds_max_live_elems, &c->ds_max_live_elems, ds3},
      {"--stage3-param-persistence-threshold", a.ds_persistence_elems, &c->ds_persistence_threshold_elems, ds3},
      {"--stage3-prefetch-bucket-size", a.ds_prefetch_bucket_elems, &c->ds_prefetch_bucket_elems, c->deepspeed_zero3()},
      {"--stage3-max-reuse-distance", a.ds_max_reuse_elems, &c->ds_max_reuse_distance_elems, c->deepspeed_zero3()}};
  for (const auto& [flag, value, field, applies] : knobs) {
    if (value < 0) continue;  // not given
    if (applies) {
      *field = value;
    } else if (!refuse) {
      left_out.push_back(flag);
    } else {
      throw InputError(fmt::format("command line: {}: got {} with {}, expected --zero 3 --zero3-impl deepspeed{} "
                                   "(the DeepSpeed stage 3 it tunes)",
                                   flag, value, given, field == &c->ds_max_live_elems || field == &c->ds_persistence_threshold_elems
                                                           ? " or deepspeed-2021" : ""));
    }
  }
  return left_out;
}

void CheckOptimizerPrecision(OptimizerImpl impl, Precision precision) {
  if (impl == OptimizerImpl::kDeepSpeedZero && (precision == Precision::kFp32 || precision == Precision::kTf32)) {
    // DeepSpeed's ZeRO keeps its fp32 master partition beside fp32 weights; its buffers and
    // replay are modelled with 16-bit weights only.
    throw InputError(fmt::format("command line: --optimizer deepspeed-zero: got it with precision {}, expected bf16 or "
                                 "fp16 (DeepSpeed's ZeRO in fp32 is not modelled; --optimizer megatron models fp32 "
                                 "training)",
                                 ToString(precision)));
  }
  if (impl != OptimizerImpl::kDeepSpeedBf16) return;
  if (precision == Precision::kFp16 || precision == Precision::kFp32 || precision == Precision::kTf32) {
    throw InputError(fmt::format("command line: --optimizer deepspeed-bf16: got it with precision {}, expected bf16 "
                                 "(DeepSpeed's BF16_Optimizer keeps bf16 weights; fp16 runs take --optimizer "
                                 "deepspeed-zero)", ToString(precision)));
  }
}

}  // namespace shardcast::cli
