#pragma once
/// \file straggler.h
/// One slow GPU in a synchronous job (`simulate --straggler FACTOR [--straggler-nic FACTOR]
/// [--straggler-stage N]`): a GPU whose kernels take FACTOR times as long (lower clocks under a
/// power or thermal limit, a degraded part), or whose node's NICs run slower (a link trained
/// down to a lower rate), holds back every group it belongs to. Its tensor-, context- and
/// expert-parallel peers wait for it at each collective, its pipeline neighbours at each
/// transfer, and the other data-parallel replicas at the gradient reduction, so the step runs at
/// the pace of the replica that holds it (docs/simulator.md, "Stragglers").

#include <optional>
#include <string>
#include <vector>

#include "simulator/cost_model.h"
#include "simulator/simulate.h"

namespace shardcast {

/// Scales the compute of pipeline stage `stage`'s chunk passes by `slowdown`: each pass's time
/// less the tensor-, context- and expert-parallel collectives inside it (ChunkCost's *_tp_s,
/// *_cp_s, *_ep_s; a backward's collectives counted against its input-gradient part first)
/// takes `slowdown` times as long. The collectives keep their times: they run at the links'
/// rates once the slow GPU reaches them. Preconditions as SimulateOptions::straggler_stage.
void SlowStageCompute(CostModel* cm, int stage, double slowdown);

/// The largest slowdown the command line takes: a GPU 100 times slower than its peers is a
/// failed part, not a straggler.
constexpr double kMaxStragglerSlowdown = 100;

/// InputError naming `where` (e.g. "command line: --straggler") and the value unless `slowdown`
/// is finite and from 1 to kMaxStragglerSlowdown; naming `where` + "-stage" unless `stage`, when given, is a stage of
/// a `pp`-stage pipeline (0 .. pp - 1).
void RequireStraggler(double slowdown, std::optional<int> stage, std::int64_t pp, const std::string& where);

/// A simulation with one straggler.
struct StragglerRun {
  int stage = -1;            ///< the pipeline stage holding the slow GPU
  bool stage_given = false;  ///< the caller chose it; else the stage where it lengthens the step most
  double slowdown = 1;       ///< its kernels' (SimulateOptions::straggler_slowdown)
  double nic_slowdown = 1;   ///< its node's NICs' (SimulateOptions::straggler_nic_slowdown)
  /// Without a given stage: the step time with the straggler on each stage in turn, seconds
  /// ([stage]; simulated without the allocator replay, which timing does not change). Empty
  /// when the stage was given.
  std::vector<double> step_time_by_stage_s;
  SimulationResult result;  ///< the step with the straggler on `stage`
  /// What the run leaves out for this configuration (slow NICs on one node, context- or
  /// expert-parallel groups across nodes), one sentence each.
  std::vector<std::string> notes;
};

/// Simulates `cfg` with one GPU of `stage` running its kernels `slowdown` times longer and its
/// node's NICs `nic_slowdown` times slower (SimulateOptions::straggler_stage and the two
/// slowdowns); `stage` -1: each stage in turn, keeping the one that
/// lengthens the step most (the first of equals). `opts`' other settings apply to the returned
/// result (its allocator traces excepted: none are kept). A run that cannot go on gives its
/// reasons in `result`, with the stage it was tried on (the sweep stops there).
/// std::invalid_argument as SimulateOptions.
StragglerRun SimulateStraggler(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                               std::int64_t gpus, const HardwareProfile& profile, const SimulateOptions& opts,
                               double slowdown, double nic_slowdown, int stage);

}  // namespace shardcast
