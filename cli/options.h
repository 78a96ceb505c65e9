#pragma once
/// \file options.h
/// Option helpers shared by the subcommands.

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace shardcast::cli {

/// Adds an integer option that must be >= 1 and <= 2^40 (a clear CLI11 error otherwise).
inline CLI::Option* AddPositive(CLI::App* cmd, const std::string& names, std::int64_t& value,
                                const std::string& help) {
  return cmd->add_option(names, value, help)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
}

}  // namespace shardcast::cli
