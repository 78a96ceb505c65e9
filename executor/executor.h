#pragma once
/// \file executor.h
/// `shardcast execute`: runs the simulator's per-rank op program (simulator/program.h) on real
/// hardware under MPI and compares with the prediction. The CPU backend runs Eigen GEMMs with the
/// real (tensor-parallel-sharded) shapes on random data, memory-bound passes of the real byte
/// counts, MPI collectives over the real tensor- and data-parallel groups, and MPI point-to-point
/// transfers between pipeline stages in the schedule's order; it allocates and frees activations
/// as the program says. docs/executor.md.

#include <map>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"

namespace shardcast {

struct ExecuteOptions {
  std::string backend = "cpu";
  int steps = 3;
  int warmup = 1;
  double timeout_s = 120;  ///< a step that takes longer aborts all ranks, naming rank and op
  std::string trace;       ///< Chrome trace of the measured ops (rank 0 writes all ranks)
};

struct OpError {
  std::string name;
  int count = 0;
  double predicted_s = 0, measured_s = 0;  ///< totals over the step, on rank 0's stage... per op name
  /// A pipeline receive or a wait on the data-parallel reduction: its measured time is mostly
  /// blocking on other ranks (the bubble), which the simulator charges to the bubble, not the op.
  bool wait = false;
};

struct ExecuteReport {
  /// The configuration predicted and run: the one asked for, with what the program does not
  /// overlap turned off (parameter gathers after the optimizer, TP collectives in program order,
  /// gradient reduction on a worker thread only where MPI allows threads).
  ParallelConfig config;
  SimulationResult predicted;               ///< the simulator's prediction (no graph)
  double measured_step_time_s = 0;          ///< median over steps (mean of the middle two for an even count), max over ranks
  std::vector<double> step_times_s;
  double measured_bubble_fraction = 0;      ///< time waiting in pipeline receives / step, mean over stages
  std::vector<double> measured_peak_memory_bytes;  ///< per stage: allocator high-water mark
  std::vector<OpError> ops;                  ///< per op name, largest absolute error first
  std::vector<std::string> executed;         ///< rank 0's executed op sequence (names), one step
  /// cuda backend: how attention ran ("cuDNN 9.19.0 SDPA", or why it ran as GEMMs); "" on CPU.
  std::string attention_note;
};

/// The settings that decide a rank's op program, one "key=value" each: the model's shape, every
/// field of the parallel configuration, and the backend, steps and warm-up steps. Ranks started
/// with different flags (an MPMD launch) would run programs whose collectives do not match.
std::vector<std::string> ProgramSettings(const Model& model, const ParallelConfig& cfg, const ExecuteOptions& opts);

/// How `other` (of rank `rank`) differs from `ref` (rank 0's): "rank 1 differs from rank 0: tp=2
/// (rank 0: tp=1); pp=1 (rank 0: pp=2)"; empty when they are equal.
std::string DescribeSettingsDifference(const std::vector<std::string>& ref, const std::vector<std::string>& other,
                                       int rank);

/// Collective over MPI_COMM_WORLD (every rank calls it with its own settings): compares a 64-bit
/// FNV-1a hash of each rank's settings and, when one differs, gathers the settings of the first
/// rank that differs. Throws the same InputError on every rank ("command line: ranks disagree on
/// the configuration: rank 1 differs from rank 0: ..."), so that all exit 2 together.
void CheckRanksAgree(const std::vector<std::string>& settings);

/// Runs on every MPI rank (MPI initialized; world size must be tp*pp*dp). Throws InputError for a
/// configuration that cannot run (the simulator's reasons) before any work. Rank 0's report is
/// complete; others return partial data.
ExecuteReport Execute(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                      const HardwareProfile& profile, const ExecuteOptions& opts);

}  // namespace shardcast
