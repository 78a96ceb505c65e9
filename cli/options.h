#pragma once
/// \file options.h
/// Option helpers shared by the subcommands.

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace shardcast::cli {

/// The largest GPU count the simulator accepts (2^20): group sizes and rank counts stay far from
/// integer limits, and no cluster of today is larger.
inline constexpr std::int64_t kMaxGpus = 1LL << 20;

/// Adds an integer option that must be a positive integer at most `max` (2^40 by default);
/// otherwise the error reads `--tp: got "abc", expected a positive integer up to N`.
inline CLI::Option* AddPositive(CLI::App* cmd, const std::string& names, std::int64_t& value,
                                const std::string& help, std::int64_t max = 1LL << 40) {
  return cmd->add_option(names, value, help)
      ->check(CLI::Validator(
          [max](std::string& s) -> std::string {
            try {
              std::size_t pos = 0;
              const long long v = std::stoll(s, &pos);
              if (pos == s.size() && v >= 1 && v <= max) return "";
            } catch (const std::exception&) {
            }
            return "got \"" + s + "\", expected a positive integer up to " + std::to_string(max);
          },
          "POSITIVE"));
}

}  // namespace shardcast::cli
