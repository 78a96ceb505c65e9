#pragma once
/// \file options.h
/// Option helpers shared by the subcommands.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/file_util.h"
#include "models/model.h"
#include "models/parallel.h"

namespace shardcast::cli {

/// The largest GPU count the simulator accepts (2^20): group sizes and rank counts stay far from
/// integer limits, and no cluster of today is larger.
inline constexpr std::int64_t kMaxGpus = kMaxParallelSize;
/// --price-per-gpu-hour's range in USD (plan and capacity alike).
inline constexpr double kMinPriceUsd = 1e-4, kMaxPriceUsd = 1e4;

/// Adds an integer option that must be an integer from `min` to `max`; otherwise the error reads
/// `--tp: got "abc", expected a <what> integer up to N`. The value is read in decimal and handed
/// on as such (CLI11 itself would read "064" as octal 52).
inline CLI::Option* AddBoundedInt(CLI::App* cmd, const std::string& names, std::int64_t& value,
                                  const std::string& help, std::int64_t min, std::int64_t max, const std::string& what,
                                  const std::string& type_name) {
  return cmd->add_option(names, value, help)
      ->transform(CLI::Validator(
          [min, max, what](std::string& s) -> std::string {
            try {
              std::size_t pos = 0;
              const long long v = std::stoll(s, &pos, 10);
              if (pos == s.size() && v >= min && v <= max) {
                s = std::to_string(v);
                return "";
              }
            } catch (const std::exception&) {
            }
            return "got \"" + s + "\", expected a " + what + " integer up to " + std::to_string(max);
          },
          type_name));
}

/// Adds an integer option that must be a positive integer at most `max` (the size limits of
/// models/parallel.h and models/model.h, so that no product of sizes overflows); otherwise the
/// error reads `--tp: got "abc", expected a positive integer up to N`.
inline CLI::Option* AddPositive(CLI::App* cmd, const std::string& names, std::int64_t& value,
                                const std::string& help, std::int64_t max) {
  return AddBoundedInt(cmd, names, value, help, 1, max, "positive", "POSITIVE");
}

/// A number from `min` to `max` (NaN and text refused); the error reads `--moe-load-imbalance:
/// got "abc", expected a number from 1 to 64`.
inline CLI::Validator BoundedNumber(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& s) -> std::string {
        try {
          std::size_t pos = 0;
          const double v = std::stod(s, &pos);
          if (pos == s.size() && v >= min && v <= max) return "";  // false for NaN
        } catch (const std::exception&) {
        }
        return "got \"" + s + "\", expected a number from " + fmt::format("{:g}", min) + " to " + fmt::format("{:g}", max);
      },
      "NUMBER");
}

/// A finite number above zero (or at least zero with `allow_zero`); the error reads
/// `--mtbf-hours: got "-5", expected a positive number` (CLI11's own checks print their range
/// as two 300-digit numbers).
inline CLI::Validator PositiveNumber(bool allow_zero = false) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        try {
          std::size_t pos = 0;
          const double v = std::stod(s, &pos);
          if (pos == s.size() && std::isfinite(v) && (v > 0 || (allow_zero && v == 0))) return "";
        } catch (const std::exception&) {
        }
        return "got \"" + s + "\", expected a " + (allow_zero ? "number of at least 0" : "positive number");
      },
      "NUMBER");
}
inline CLI::Validator NonNegativeNumber() { return PositiveNumber(true); }

/// An integer from `min` to `max`; the error reads `--top: got "0", expected an integer from 1
/// to 1000`.
inline CLI::Validator IntegerRange(std::int64_t min, std::int64_t max) {
  return CLI::Validator(
      [min, max](std::string& s) -> std::string {
        try {
          std::size_t pos = 0;
          const long long v = std::stoll(s, &pos);
          if (pos == s.size() && v >= min && v <= max) return "";
        } catch (const std::exception&) {
        }
        return "got \"" + s + "\", expected an integer from " + std::to_string(min) + " to " + std::to_string(max);
      },
      "INT");
}

/// A validator for an output file option, checked when the command line is read so a long run
/// (a calibration sweep, a plan search) does not end in an unwritable path: the value must not
/// be "-" (unless `allow_stdout`: --csv), nor a folder, and its folder must exist (not be a
/// file) and be writable. The error
/// reads `--trace: got "out/", a folder; expected the path of a file to write`.
inline CLI::Validator OutputFile(bool allow_stdout = false) {
  return CLI::Validator(
      [allow_stdout](std::string& s) -> std::string {
        // Under mpirun or srun only rank 0 writes (execute --trace, calibrate --out): other ranks,
        // perhaps on nodes without that folder, do not check it.
        for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
          const char* v = std::getenv(var);
          if (v && std::string(v) != "0") return "";
        }
        if (s == "-") {
          return allow_stdout ? "" : "got \"-\", expected a file name (only --csv takes - for standard output)";
        }
        std::error_code ec;
        if (s.empty()) return "got an empty path, expected the path of a file to write";
        // A symbolic link writes its file: the checks are on that file and its folder.
        std::filesystem::path p;
        try {
          p = OutputTarget(s);
        } catch (const std::exception& e) {
          return std::string("got \"") + s + "\": " + e.what();
        }
        if (std::filesystem::is_directory(p, ec)) return "got \"" + s + "\", a folder; expected the path of a file to write";
        if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec)) {
          return "got \"" + s + "\", not a regular file (a device, FIFO or socket); expected the path of a file to write";
        }
        const auto parent = p.parent_path();
        if (!parent.empty() && std::filesystem::exists(parent, ec) && !std::filesystem::is_directory(parent, ec)) {
          return "got \"" + s + "\", whose folder " + parent.string() + " is a file; expected a file in an existing folder";
        }
        if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
          return "got \"" + s + "\", whose folder " + parent.string() + " does not exist; expected a file in an existing "
                 "folder";
        }
        // The file is written beside itself and renamed into place: its folder must take a new
        // file (tried: permissions, read-only mounts and pseudo file systems like /proc alike).
        const std::string folder = parent.empty() ? std::string(".") : parent.string();
        if (const std::string why = FolderWriteError(folder); !why.empty()) {
          return "got \"" + s + "\", whose folder " + folder + " cannot be written (" + why +
                 "); expected a file in a writable folder";
        }
        return "";
      },
      "FILE");
}

}  // namespace shardcast::cli
