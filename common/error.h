#pragma once
/// \file error.h
/// Errors that cross module boundaries. Exit codes (cli/main.cc): InputError -> 2, anything else
/// -> 1. An infeasible configuration is *not* an error; it is a result with a reason.

#include <stdexcept>
#include <string>

namespace shardcast {

/// Bad user input: names the file (or "command line"), the JSON pointer or flag of the field, the
/// bad value and what was expected. Message form:
///   `FILE: /pointer: got VALUE, expected WHAT`
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
  /// Builds the standard message from its four parts. `value` is printed as given (JSON text).
  static InputError Field(const std::string& file, const std::string& pointer,
                          const std::string& value, const std::string& expected);
};

/// A broken internal invariant (a bug): exit code 1.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

/// Throws InternalError with `message` when `condition` is false.
void Check(bool condition, const std::string& message);

}  // namespace shardcast
