#include "simulator/straggler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "common/error.h"

namespace shardcast {

namespace {

/// `total` seconds of which `comm` are collectives: the rest `slowdown` times as long.
double Slowed(double total, double comm, double slowdown) {
  const double c = std::clamp(comm, 0.0, std::max(0.0, total));
  return c + slowdown * (total - c);
}

}  // namespace

void SlowStageCompute(CostModel* cm, int stage, double slowdown) {
  if (stage < 0 || stage >= static_cast<int>(cm->chunks.size()) || !(slowdown >= 1) || !std::isfinite(slowdown)) {
    throw std::invalid_argument(fmt::format("straggler on stage {} with slowdown {} (stages 0..{}, slowdown >= 1)",
                                            stage, slowdown, static_cast<int>(cm->chunks.size()) - 1));
  }
  for (ChunkCost& cc : cm->chunks[static_cast<std::size_t>(stage)]) {
    cc.fwd_s = Slowed(cc.fwd_s, cc.fwd_tp_s + cc.fwd_cp_s + cc.fwd_ep_s, slowdown);
    cc.recompute_s = Slowed(cc.recompute_s, cc.recompute_tp_s + cc.recompute_cp_s + cc.recompute_ep_s, slowdown);
    // The backward's collectives are counted against its input-gradient part first: the
    // weight-gradient pass holds the weight-gradient GEMMs.
    const double comm = cc.bwd_tp_s + cc.bwd_cp_s + cc.bwd_ep_s;
    const double in_input = std::min(comm, cc.bwd_input_s);
    const double in_weight = std::min(comm - in_input, cc.bwd_weight_s);
    cc.bwd_input_s = Slowed(cc.bwd_input_s, in_input, slowdown);
    cc.bwd_weight_s = Slowed(cc.bwd_weight_s, in_weight, slowdown);
  }
}

void RequireStraggler(double slowdown, std::optional<int> stage, std::int64_t pp, const std::string& where) {
  if (!std::isfinite(slowdown) || slowdown < 1 || slowdown > kMaxStragglerSlowdown) {
    throw InputError(fmt::format("{}: {:g}, expected a slowdown factor from 1 to {:g} (1.1: the GPU's kernels take "
                                 "10% longer)",
                                 where, slowdown, kMaxStragglerSlowdown));
  }
  if (stage && (*stage < 0 || *stage >= pp)) {
    throw InputError(fmt::format("{}-stage: {}, expected a pipeline stage from 0 to {} (the configuration has {} "
                                 "stage{})",
                                 where, *stage, pp - 1, pp, pp == 1 ? "" : "s"));
  }
}

StragglerRun SimulateStraggler(const Model& model, const ParallelConfig& cfg, const Cluster& cluster,
                               std::int64_t gpus, const HardwareProfile& profile, const SimulateOptions& opts,
                               double slowdown, double nic_slowdown, int stage) {
  StragglerRun run;
  run.slowdown = slowdown;
  run.nic_slowdown = nic_slowdown;
  run.stage_given = stage >= 0;
  SimulateOptions o = opts;
  o.allocator_traces = nullptr;
  o.straggler_slowdown = slowdown;
  o.straggler_nic_slowdown = nic_slowdown;
  if (stage < 0) {
    // Each stage in turn, timing only: the allocator replay reads no times.
    SimulateOptions sweep = o;
    sweep.allocator_replay = false;
    sweep.keep_graph = false;
    for (int s = 0; s < cfg.pp; ++s) {
      sweep.straggler_stage = s;
      const SimulationResult r = Simulate(model, cfg, cluster, gpus, profile, sweep);
      if (!r.feasible) {  // cannot run with the straggler here: the reasons say why
        run.stage = s;
        run.result = r;
        run.step_time_by_stage_s.clear();
        return run;
      }
      run.step_time_by_stage_s.push_back(r.step_time_s);
    }
    stage = static_cast<int>(std::max_element(run.step_time_by_stage_s.begin(), run.step_time_by_stage_s.end()) -
                             run.step_time_by_stage_s.begin());
  }
  run.stage = stage;
  o.straggler_stage = stage;
  run.result = Simulate(model, cfg, cluster, gpus, profile, o);
  if (nic_slowdown > 1) {
    const std::int64_t node = cluster.gpus_per_node;
    if (gpus <= node || !cluster.HasInterNodeNetwork()) {
      run.notes.push_back("the job runs on one node: no traffic crosses its network links, so the slow links change "
                          "nothing");
    } else {
      if (cfg.cp > 1 && cfg.tp * cfg.cp > node) {
        run.notes.push_back("the context-parallel groups span nodes; their exchanges keep their rates here, so the "
                            "slow links cost more than shown");
      }
      if (model.moe.enabled() && cfg.ep > 1 && cfg.expert_tp() * cfg.ep > node) {
        run.notes.push_back("the expert-parallel groups span nodes; their all-to-alls keep their rates here, so the "
                            "slow links cost more than shown");
      }
    }
  }
  return run;
}

}  // namespace shardcast
