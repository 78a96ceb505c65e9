#pragma once
/// \file run_log.h
/// Users' own training runs for `shardcast validate --log`: a Megatron-LM or torchtitan training
/// log read into the model, configuration, GPU count and what was measured (docs/validate.md,
/// "Your own runs").
///
/// Megatron-LM (megatron/training/arguments.py `_print_args`, training.py `training_log`,
/// utils `report_memory`): the argument dump between "---- arguments ----" and "---- end of
/// arguments ----" (one "  name ..... value" per line) gives the model and the configuration;
/// each "elapsed time per iteration (ms): T" is one measured step; "memory (MB) | ... | max
/// allocated: A | reserved: R | max reserved: M" lines give the peaks (the largest over lines).
///
/// torchtitan (torchtitan/trainer.py, components/metrics.py): the job configuration printed as
/// JSON by `--job.print_config` ("Running with configs: {...}") gives the parallelism, batch,
/// sequence length, activation checkpointing and precision; "Building NAME FLAVOR" the model
/// (or --model); each "step: N ... memory: X GiB(P%) tps: T ..." line one step, whose time is
/// tokens per step / (GPUs x tps), and whose memory is the allocator's peak reserved.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/parallel.h"

namespace shardcast {

/// One training run read from a log.
struct LoggedRun {
  std::string file;
  std::string format;  ///< "megatron" or "torchtitan"
  Model model;
  ParallelConfig config;
  std::int64_t gpus = 0;
  /// Measured step times (s), one per logged iteration or step line, in log order.
  std::vector<double> step_times_s;
  /// The measured step: the mean over the logged steps after the first (which includes warm-up,
  /// compilation or the first iteration's allocations); the only one if there is one.
  double measured_step_time_s = 0;
  /// Peaks over the log's memory lines (bytes): PyTorch's max_memory_allocated and
  /// max_memory_reserved, where the format prints them.
  std::optional<double> max_allocated_bytes, max_reserved_bytes;
  /// What the reader assumed or how it read a figure (shown with the row).
  std::vector<std::string> notes;
};

/// What the command line gives for what a log does not say.
struct LogDefaults {
  std::optional<Model> model;         ///< --model: replaces the log's model
  std::optional<std::int64_t> gpus;   ///< --gpus: torchtitan's data_parallel_shard_degree -1 needs it
};

/// Reads a training log, detecting its format. InputError naming the file and line for a line
/// of a known kind that does not parse (an iteration time that is not a positive number, an
/// argument without its dots), naming the file and the argument or key for a value the model or
/// configuration cannot take, and naming the file for a log of neither format or one without a
/// measured step.
LoggedRun ReadTrainingLog(const std::string& path, const LogDefaults& defaults);

/// The same from the log's text (`path` names it in messages).
LoggedRun ParseTrainingLog(const std::string& text, const std::string& path, const LogDefaults& defaults);

}  // namespace shardcast
