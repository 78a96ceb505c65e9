#pragma once
/// \file options.h
/// Option helpers shared by the subcommands.

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace shardcast::cli {

/// Adds an integer option that must be a positive integer (at most 2^40); otherwise the error
/// reads `--tp: got "abc", expected a positive integer`.
inline CLI::Option* AddPositive(CLI::App* cmd, const std::string& names, std::int64_t& value,
                                const std::string& help) {
  return cmd->add_option(names, value, help)
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              std::size_t pos = 0;
              const long long v = std::stoll(s, &pos);
              if (pos == s.size() && v >= 1 && v <= (1LL << 40)) return "";
            } catch (const std::exception&) {
            }
            return "got \"" + s + "\", expected a positive integer";
          },
          "POSITIVE"));
}

}  // namespace shardcast::cli
