// The precision flags shared by simulate, execute, plan and capacity (cli/config_args.h).
#include <fmt/format.h>

#include "cli/config_args.h"
#include "cli/options.h"
#include "common/error.h"

namespace shardcast::cli {

void AddPrecisionOptions(CLI::App* cmd, PrecisionArgs* a) {
  cmd->add_option("--precision", a->precision,
                  "bf16|fp16|fp8|mxfp8|nvfp4|tf32|fp32: the linear layers' GEMMs in fp8/mxfp8/nvfp4 with bf16 "
                  "elsewhere, or fp32 training with TF32 or FP32 GEMMs (default bf16)")
      ->transform(CLI::IsMember({"bf16", "fp16", "fp8", "mxfp8", "nvfp4", "tf32", "fp32"}, CLI::ignore_case));
  cmd->add_flag("--bf16", a->bf16, "Megatron-LM: bf16 mixed precision (the default; with --fp8-* the 16-bit dtype)");
  cmd->add_flag("--fp16", a->fp16, "Megatron-LM: fp16 mixed precision (--precision fp16)");
  cmd->add_option("--fp8-format", a->fp8_format,
                  "Megatron-LM: hybrid (E4M3 forward, E5M2 gradients) | e4m3; implies --precision fp8")
      ->transform(CLI::IsMember({"hybrid", "e4m3"}, CLI::ignore_case));
  cmd->add_option("--fp8-recipe", a->fp8_recipe,
                  "Megatron-LM: delayed (default) | tensorwise | blockwise | mxfp8 (= --precision mxfp8)")
      ->transform(CLI::IsMember({"delayed", "tensorwise", "blockwise", "mxfp8"}, CLI::ignore_case));
  cmd->add_option("--fp4-format", a->fp4_format, "Megatron-LM: e2m1; implies --precision nvfp4")
      ->transform(CLI::IsMember({"e2m1"}, CLI::ignore_case));
  cmd->add_option("--fp4-recipe", a->fp4_recipe, "Megatron-LM: nvfp4; implies --precision nvfp4")
      ->transform(CLI::IsMember({"nvfp4"}, CLI::ignore_case));
  cmd->add_flag("--fp8-param-gather", a->fp8_param_gather,
                "Megatron-LM: keep the weights in fp8/mxfp8 (no 16-bit copy) and all-gather them in that format "
                "(with the distributed optimizer)");
  cmd->add_option("--fp8-amax-history-len", a->amax_history_len,
                  "amax values kept per tensor by the delayed recipe (default 1024, Transformer Engine's)")
      ->check(IntegerRange(1, 1 << 20));
  cmd->add_option("--fp8-amax-compute-algo", a->amax_compute_algo,
                  "Megatron-LM: max, the delayed recipe's scale from the largest amax of its history, as plan "
                  "prints it and the launches write it (most_recent is not carried into them)")
      ->check(
          [](const std::string& v) {
            return v == "max" ? std::string()
                              : "got " + v + ", expected max: the launches write max, and another value (Megatron-LM "
                                             "also takes most_recent) would not reach them";
          },
          "max");
  cmd->add_flag("--first-last-layers-bf16", a->first_last_bf16,
                "Megatron-LM: keep the first and last transformer layers' GEMMs in bf16 under fp8/mxfp8/nvfp4");
  cmd->add_option("--num-layers-at-start-in-bf16", a->layers_start_bf16,
                  "with --first-last-layers-bf16: layers at the start kept in bf16 (default 1)")
      ->check(IntegerRange(0, 1 << 20));
  cmd->add_option("--num-layers-at-end-in-bf16", a->layers_end_bf16,
                  "with --first-last-layers-bf16: layers at the end kept in bf16 (default 1)")
      ->check(IntegerRange(0, 1 << 20));
}

void AddFrameworkOption(CLI::App* cmd, std::string* framework) {
  cmd->add_option("--framework", *framework,
                  "megatron-core (default, except for execute: whole pipeline messages, 1F1B waiting on each send "
                  "and receive) | megatron-2022 (Megatron-LM 2021-22: scatter/gather pipeline messages, "
                  "non-blocking transfers unless --p2p-blocking; execute's default)")
      ->transform(CLI::IsMember({"megatron-core", "megatron-2022"}, CLI::ignore_case));
}

namespace {

/// Sets the precision `p` that `flag` implies, unless another flag chose a different one.
void Choose(Precision p, const std::string& flag, Precision* chosen, std::string* by) {
  if (!by->empty() && *chosen != p) {
    throw InputError(fmt::format("command line: {}: selects precision {}, but {} selected {} (give one of them)", flag,
                                 ToString(p), *by, ToString(*chosen)));
  }
  *chosen = p;
  if (by->empty()) *by = flag;
}

}  // namespace

void ApplyPrecisionArgs(const PrecisionArgs& a, ParallelConfig* c) {
  Precision p = Precision::kBf16;
  std::string by;
  if (!a.precision.empty()) Choose(*ParsePrecision(a.precision), "--precision " + a.precision, &p, &by);
  if (!a.fp8_format.empty()) {
    // An FP8 element format: of fp8, or of mxfp8 where the recipe or --precision says so.
    const bool mx = a.fp8_recipe == "mxfp8" || (!by.empty() && p == Precision::kMxfp8);
    Choose(mx ? Precision::kMxfp8 : Precision::kFp8, "--fp8-format " + a.fp8_format, &p, &by);
  }
  if (!a.fp8_recipe.empty()) {
    Choose(a.fp8_recipe == "mxfp8" ? Precision::kMxfp8 : Precision::kFp8, "--fp8-recipe " + a.fp8_recipe, &p, &by);
  }
  if (!a.fp4_format.empty()) Choose(Precision::kNvfp4, "--fp4-format " + a.fp4_format, &p, &by);
  if (!a.fp4_recipe.empty()) Choose(Precision::kNvfp4, "--fp4-recipe " + a.fp4_recipe, &p, &by);
  if (a.fp16 && IsLowPrecision(p)) {
    // Megatron-LM takes --fp16 beside --fp8-format; the model runs the formats beside bf16 only.
    throw InputError(fmt::format("command line: --fp16: given with {}, expected --bf16 or neither: {} GEMMs with fp16 "
                                 "weights, loss scaling and the rest of the step in fp16 are not modelled (the "
                                 "low-precision formats run beside bf16)",
                                 by, ToString(p)));
  }
  if (a.fp16) Choose(Precision::kFp16, "--fp16", &p, &by);
  if (a.bf16 && (p == Precision::kFp16 || p == Precision::kTf32 || p == Precision::kFp32)) {
    throw InputError(fmt::format("command line: --bf16: contradicts {} (precision {})", by, ToString(p)));
  }
  c->precision = p;
  c->fp8_recipe = a.fp8_recipe == "tensorwise"  ? Fp8Recipe::kTensorwise
                  : a.fp8_recipe == "blockwise" ? Fp8Recipe::kBlockwise
                                                : Fp8Recipe::kDelayed;
  c->fp8_format = a.fp8_format == "e4m3"    ? Fp8Format::kE4m3
                  : a.fp8_format == "hybrid" ? Fp8Format::kHybrid
                                             : Fp8Format::kDefault;
  // Sub-options that would change nothing are refused rather than ignored: the amax history's
  // exist only under fp8's delayed recipe.
  for (const auto& [flag, given] : {std::pair<const char*, bool>{"--fp8-amax-history-len", a.amax_history_len > 0},
                                    {"--fp8-amax-compute-algo", !a.amax_compute_algo.empty()}}) {
    if (given && !(p == Precision::kFp8 && c->fp8_recipe == Fp8Recipe::kDelayed)) {
      throw InputError(fmt::format("command line: {}: given with precision {}{}, expected fp8's delayed recipe (the only "
                                   "one that keeps an amax history)",
                                   flag, ToString(p), p == Precision::kFp8 ? " and the " + a.fp8_recipe + " recipe" : ""));
    }
  }
  if (a.amax_history_len > 0) c->fp8_amax_history_len = a.amax_history_len;
  c->fp8_param_gather = a.fp8_param_gather;
  if (!a.first_last_bf16 && (a.layers_start_bf16 != 1 || a.layers_end_bf16 != 1)) {
    throw InputError("command line: --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16: given without "
                     "--first-last-layers-bf16, expected it as well (they say how many layers it keeps in bf16)");
  }
  if (a.first_last_bf16) {
    c->bf16_layers_start = a.layers_start_bf16;
    c->bf16_layers_end = a.layers_end_bf16;
  }
}

void CheckAttentionPrecision(Precision p, bool flash_attention, const std::string& remedy) {
  if (flash_attention && (p == Precision::kTf32 || p == Precision::kFp32)) {
    throw InputError(fmt::format("command line: --precision {}: flash attention takes 16-bit inputs, so {} training runs "
                                 "attention unfused; expected {}",
                                 ToString(p), ToString(p), remedy));
  }
}

std::string PrecisionFlags(const ParallelConfig& c) {
  const ParallelConfig d;
  std::string f;
  if (c.precision != Precision::kBf16) f += fmt::format(" --precision {}", ToString(c.precision));
  if (c.precision == Precision::kFp8 && c.fp8_recipe != d.fp8_recipe) f += fmt::format(" --fp8-recipe {}", ToString(c.fp8_recipe));
  if ((c.precision == Precision::kFp8 || c.precision == Precision::kMxfp8) &&
      std::string(c.Fp8FormatName()) != DefaultFp8FormatName(c.precision)) {
    f += fmt::format(" --fp8-format {}", c.Fp8FormatName());
  }
  if (c.precision == Precision::kFp8 && c.fp8_amax_history_len != d.fp8_amax_history_len) {
    f += fmt::format(" --fp8-amax-history-len {}", c.fp8_amax_history_len);
  }
  if (c.fp8_param_gather) f += " --fp8-param-gather";
  if (c.bf16_layers_start + c.bf16_layers_end > 0) {
    f += fmt::format(" --first-last-layers-bf16 --num-layers-at-start-in-bf16 {} --num-layers-at-end-in-bf16 {}",
                     c.bf16_layers_start, c.bf16_layers_end);
  }
  return f;
}

}  // namespace shardcast::cli
