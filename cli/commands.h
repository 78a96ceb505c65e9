#pragma once
/// \file commands.h
/// Subcommands of the `shardcast` binary. Each Register* adds a CLI11 subcommand whose callback
/// writes to stdout; errors are thrown (InputError -> exit 2) and mapped in main.cc.

#include <CLI/CLI.hpp>

namespace shardcast::cli {

void RegisterModels(CLI::App& app);
void RegisterDescribe(CLI::App& app);
void RegisterSimulate(CLI::App& app);
void RegisterPlan(CLI::App& app);
void RegisterCapacity(CLI::App& app);
void RegisterValidate(CLI::App& app);
void RegisterCalibrate(CLI::App& app);
void RegisterProfile(CLI::App& app);
void RegisterExecute(CLI::App& app);

}  // namespace shardcast::cli
