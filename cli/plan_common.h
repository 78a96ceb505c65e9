#pragma once
/// \file plan_common.h
/// Parsing of the planner's list options, shared by `plan` and `capacity`.

#include <map>
#include <string>
#include <vector>

#include "models/parallel.h"
#include "planner/planner.h"

namespace shardcast::cli {

Objective ParseObjective(const std::string& s);
std::vector<Schedule> ParseSchedules(const std::string& list);
std::vector<Recompute> ParseRecomputes(const std::string& list);
std::vector<int> ParseZeroStages(const std::string& list);
/// "tp=8,pp=8" -> {tp: 8, pp: 8}; keys tp, pp, vp, mbs, zero, sp, recompute, schedule.
std::map<std::string, std::string> ParseFix(const std::string& list);
/// The `simulate` flags that reproduce a configuration.
std::string SimulateFlags(const ParallelConfig& c);

}  // namespace shardcast::cli
