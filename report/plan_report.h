#pragma once
/// \file plan_report.h
/// `plan`'s results rendered: the ranked text table with its notes and recommendation, the JSON
/// document, the CSV, the HTML page's data, and a --what-if recommendation beside the baseline's.

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "planner/planner.h"
#include "simulator/straggler.h"

namespace shardcast {

/// One plan search as the renderers see it.
struct PlanView {
  const Model& m;
  const Cluster& cl;
  const PlanOptions& o;
  const PlanResult& r;
  const Plan* recommended;       ///< RecommendedPlan(r)
  std::size_t recommended_rank;  ///< RankOf(r, recommended): 0 when not in the table
  std::string profile;           ///< "built-in default" or the profile's path
  /// The profile's in-memory adjustments for the search (HardwareProfile::adjustments).
  std::vector<std::string> profile_adjustments = {};
};

/// The plan a result recommends: the best not at risk of running out of memory (found even below
/// the top K), else the best; null when nothing fits.
const Plan* RecommendedPlan(const PlanResult& r);
/// `p`'s 1-based rank in r.plans (by configuration), 0 when it is not there or null.
std::size_t RankOf(const PlanResult& r, const Plan* p);

/// The ranked plans as CSV (header and one row per plan; `recommended` marks the recommendation).
std::string PlanCsv(const PlanView& v);
/// "Every plan runs the deepspeed-zero optimizer, ZeRO-3 as deepspeed (ZeRO stages 1,2,3)" and a
/// newline when the search runs another optimizer or ZeRO-3 than Megatron's and FSDP's; else "".
std::string SearchOptimizerLine(const PlanOptions& o);
/// One plan: simulate's --json keys, config_summary, its Megatron-LM arguments, cost and energy
/// (null without a price or power) and the known bias.
Json PlanToJson(const PlanView& v, const Plan& p);
/// The --json document: search counts, rejections, plans, the recommendation and its rank,
/// advice when nothing fits.
Json PlanJson(const PlanView& v);
/// The HTML page's data: `plan_json` with kind "plan", every simulated candidate's point and the
/// memory limit (usable less the required headroom).
Json PlanHtmlData(const PlanView& v, const Json& plan_json);
/// The text report: candidates and why they were set aside, the ranked table and its notes, the
/// recommendation and its Megatron-LM arguments. Returns the recommendation's label ("Best
/// plan", "Best plan not at risk (rank 3)", ...), or "" when nothing fits (the text says why).
/// `elapsed` is the search's wall time in seconds.
std::string WritePlanText(std::ostream& out, const PlanView& v, double elapsed);
/// The --json what_if object: BesideJson of the baseline's and the what-if's recommended plans,
/// the changes as given, the changed profile's adjustment lines, and the what-if recommendation
/// (null when nothing fits there, `best` null).
Json PlanWhatIfJson(const PlanView& v, const std::vector<std::string>& changes, const HardwareProfile& changed,
                    const Plan* best);
/// The recommendation on the --what-if hardware (`changed`, with its adjustment lines after those
/// of `prof`) beside the baseline's `base`; `best` null when nothing fits there.
void WritePlanWhatIf(std::ostream& out, const std::vector<std::string>& changes, const HardwareProfile& prof,
                     const HardwareProfile& changed, const Plan& base, const Plan* best);

/// A ranked plan run with one straggler (`plan --straggler`): SimulateStraggler on the plan's
/// configuration, at the stage where it lengthens the step most.
struct PlanStraggler {
  std::size_t rank = 0;  ///< 1-based, as in the table
  const Plan* plan = nullptr;
  StragglerRun run;
};
/// The ranked plans' steps with the straggler beside their own, the change, the stage, and the
/// plans least slowed and fastest with it.
void WritePlanStragglers(std::ostream& out, const std::vector<PlanStraggler>& runs, double slowdown,
                         double nic_slowdown);
/// The --json "straggler" object: "slowdown", "nic_slowdown" and "plans" (rank, config_summary,
/// step_time_s, with_straggler_step_time_s, step_time_change, stage, step_time_by_stage_s,
/// notes).
Json PlanStragglerJson(const std::vector<PlanStraggler>& runs, double slowdown, double nic_slowdown);

}  // namespace shardcast
