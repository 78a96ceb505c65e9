#pragma once
/// \file text.h
/// The human-readable reports: one simulation (`simulate`, `validate --explain`) and the cost
/// model's op table (`--ops`). The CLI only chooses the stream.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "models/hardware.h"
#include "models/model.h"
#include "models/parallel.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "simulator/straggler.h"

namespace shardcast {

/// The caveat `plan` and `capacity` print about an MoE model's routing: forced balancing (a
/// benchmarking switch), or a global-batch-balanced router's fitted imbalance steering the plans
/// toward small ep; "" when neither applies (a dense model, or an imbalance given).
std::string MoeRoutingCaveat(const Model& m, const ParallelConfig& base);

/// "Partial node: 12 GPUs are 1.50 nodes of 8; whole nodes are 16 GPUs\n" when `gpus` is not a
/// whole number of nodes of `gpus_per_node`; "" when it is.
std::string PartialNodeLine(std::int64_t gpus, std::int64_t gpus_per_node);
/// Where tp, tp x cp or the expert grid's ep x etp is smaller than a node of `gpus_per_node` and
/// does not divide it (tp 16 on a 72-GPU NVL72 rack, tp 6 on 8-GPU nodes) and the job spans
/// nodes: the line saying that the simulation places every group inside one node, as a
/// topology-aware scheduler does; else "".
std::string StraddlingGroupsLine(const ParallelConfig& c, std::int64_t gpus, std::int64_t gpus_per_node);
/// "  attention: unfused ... (FlashAttention needs Turing or later; the V100 is volta)\n" on a GPU
/// FlashAttention does not run on (Gpu::HasFlashAttention), where simulate and plan run the
/// unfused attention; "" elsewhere.
std::string UnfusedAttentionLine(const Gpu& g);

/// The qualifying lines and notes of `simulate`'s text report on one result, one string each
/// (lines joined, "Note: " dropped): a partial node, groups placed within nodes, unfused
/// attention, the expert load, the pipeline split, a vocabulary tp does not divide, a sliding
/// window, tensor parallelism across nodes, selective recompute with flash attention, the EP
/// overlap. `--json`'s `notes`.
std::vector<std::string> SimulationNotes(const SimulationResult& r, const Model& m, const ParallelConfig& c,
                                         const Cluster& cl, std::int64_t gpus);
/// `simulate`'s report of one result: step time, MFU/HFU, the time breakdown, memory by stage and
/// the critical path (or the reasons it cannot run), on `out`.
void WriteSimulation(std::ostream& out, const SimulationResult& r, const Model& m, const ParallelConfig& c,
                     const Cluster& cl, std::int64_t gpus, const HardwareProfile& prof);
/// The cost model's ops of one micro-batch on one GPU (one transformer layer, the embedding, the
/// output layer): shape, FLOPs, bytes, duration and the achieved rate, on `out`.
void WriteOps(std::ostream& out, const Model& m, const ParallelConfig& c, const Cluster& cl, const HardwareProfile& prof);

/// One result beside another, for --what-if: step time, tokens/s, MFU, bubble, peak memory and
/// whether it fits, with the change in percent; why the second cannot run where the first
/// runs (its reasons the first does not share), after its label.
void WriteBeside(std::ostream& out, const SimulationResult& base, const SimulationResult& what_if,
                 const std::string& base_label, const std::string& what_if_label);
/// {"baseline": ..., "what_if": ..., "step_time_change": what_if / baseline - 1 (null when either
/// cannot run), "tokens_per_s_change": ...} of two results' headline figures.
Json BesideJson(const SimulationResult& base, const SimulationResult& what_if);

/// "one GPU's kernels 1.1x as long", "one node's network links 2x slower", both ("... and its
/// node's network links 2x slower"), or "no slowdown": what a straggler of these slowdowns is.
std::string StragglerWhat(double slowdown, double nic_slowdown);
/// `simulate --straggler`: which stage holds the slow GPU (and, when the stage was not given,
/// the step with it on each stage), the result beside `base` (WriteBeside), and where the time
/// went: the slow stage's compute and optimizer step before and after (FACTOR times as long,
/// less where an overlapped collective's constant slowdown sits in them), its recompute with the
/// recomputed forward's collectives, and the other stages' mean wait on other stages.
void WriteStraggler(std::ostream& out, const SimulationResult& base, const StragglerRun& run);
/// The --json "straggler" object: BesideJson(base, run.result), its "what_if" named
/// "with_straggler", with "slowdown", "stage",
/// "stage_given", "step_time_by_stage_s" (empty when the stage was given),
/// "stage_compute_s" / "stage_compute_baseline_s" (the slow stage's compute + optimizer) and
/// "stage_recompute_s" / "stage_recompute_baseline_s".
Json StragglerJson(const SimulationResult& base, const StragglerRun& run);

}  // namespace shardcast
