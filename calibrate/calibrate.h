#pragma once
/// \file calibrate.h
/// `shardcast calibrate`: times GEMMs, memory-bound kernels, attention, collectives and
/// compute/communication overlap on the machine it runs on (one MPI rank per device), fits the
/// curves, and writes a hardware profile (simulator/profile.h) atomically. Interrupted sweeps
/// resume from `OUT.partial.json`. docs/calibrate.md explains the method.

#include <array>
#include <string>
#include <vector>

#include "calibrate/cuda_backend.h"
#include "models/model.h"
#include "simulator/profile.h"

namespace shardcast {

struct CalibrateOptions {
  std::string backend = "cpu";  ///< cpu | cuda
  bool quick = false;           ///< reduced sweep (under a minute)
  bool resume = false;          ///< continue from OUT.partial.json
  std::string out = "profile.json";
  /// Deterministic timings from formulas instead of clocks (for tests of the harness).
  bool fake_timer = false;
  /// Stop (as if interrupted) after this measurement group (for tests of --resume).
  std::string stop_after;
  bool progress = true;  ///< progress lines on stderr (rank 0)
  /// Extra GEMM shapes to time (m, n, k): the shapes of the model to be simulated (forward,
  /// data-gradient and weight-gradient GEMMs for the tensor-parallel sizes of interest).
  std::vector<std::array<int, 3>> model_shapes;
  /// The attention heads the CUDA sweep times (the model's with --model).
  cuda::AttentionHeads attention_heads;
};

/// Measurement groups, in sweep order.
const std::vector<std::string>& CalibrationGroups();

/// Runs the calibration on every MPI rank (MPI must be initialized). Rank 0 writes the profile
/// and returns it; other ranks return an empty profile. Throws InputError for bad options or an
/// unusable backend (e.g. "--backend cuda: no usable GPU: ...").
HardwareProfile RunCalibration(const CalibrateOptions& opts);

/// The profile of a CUDA sweep (`cuda::Measure`): the GEMM samples at cuBLASLt's heuristic #0,
/// the vectorized memory-bound curve (FitMemoryBound) with the same run's cudaMemcpy reference,
/// the collective tables, the overlap slowdown; the rest (attention, derating) from the preset
/// of the device's GPU where there is one. Pure: no GPU needed.
HardwareProfile BuildCudaProfile(const cuda::Measurements& m);

/// Builds a profile from nccl-tests logs: their collective tables replace the collective
/// defaults of `base` (intra-node busbw and latency refit from the largest single-node
/// all-reduce table).
/// `expected_device` (the cluster GPU's display name, as nvidia-smi and nccl-tests print it), when
/// given, is compared with each log's device (a text log's "Rank" lines, a JSON log's
/// device_info); a log measured on another GPU adds a line to `warnings`. InputError when two
/// tables have the same op, rank count and node count (a log given twice), naming both files.
HardwareProfile ImportNcclTests(const std::vector<std::string>& logs, HardwareProfile base,
                                const std::string& expected_device = "", std::vector<std::string>* warnings = nullptr);

/// Human-readable summary of a profile (`shardcast profile show`).
std::string DescribeProfile(const HardwareProfile& p);

/// InputError naming `file` and the field unless each group of an interrupted CPU sweep's partial
/// results (`groups`: gemm, memory, attention, collectives, overlap) has the shape its measurement
/// writes (positive numbers, non-empty sample lists); `--resume` checks them when it reads them.
void CheckPartialGroups(const Json& groups, const std::string& file);

/// The GEMM shapes of `model` at micro-batch 1 and its sequence length, for each tensor-parallel
/// size in `tps` (deduplicated, in a stable order).
std::vector<std::array<int, 3>> ModelGemmShapes(const Model& model, const std::vector<int>& tps);

/// True when this build has the CUDA backend.
bool CudaBackendBuilt();

}  // namespace shardcast
