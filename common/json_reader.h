#pragma once
/// \file json_reader.h
/// Validating access to one JSON object of an input file. Every accessor checks type and range
/// and throws InputError naming the file, the JSON pointer, the bad value and what was expected.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardcast {

using Json = nlohmann::json;

/// The deepest nesting of arrays and objects an input may have (ParseJsonText refuses deeper
/// ones, so that no recursive walk of a parsed value can exhaust the stack).
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text` read from `file`. InputError (exit 2) for a syntax error (with line and column),
/// a number beyond a double, a key given twice in one object (with its JSON pointer), or nesting
/// deeper than kMaxJsonDepth.
Json ParseJsonText(const std::string& text, const std::string& file);
/// Reads and parses a file; a missing or unreadable file is an InputError.
Json ReadJsonFile(const std::string& path);

/// Output JSON with every number under a key ending in "_bytes" rounded to a whole integer (byte
/// counts computed in floating point, e.g. 74167252992.00006), recursively; for printing.
Json WithIntegerBytes(Json j);
/// Reads a whole file into a string; InputError when it cannot be read.
std::string ReadTextFile(const std::string& path);

/// A view of one JSON object at `pointer` inside `file`.
class JsonReader {
 public:
  JsonReader(const Json& object, std::string file, std::string pointer = "");

  bool Has(const std::string& key) const;
  /// The value at `key` of any type; InputError "missing required field" naming its pointer.
  const Json& Value(const std::string& key) const { return Get(key); }
  /// Integer in [min, max]. Rejects non-integers ("12.5", "\"12\"") and out-of-range values.
  std::int64_t Int(const std::string& key, std::int64_t min = 1,
                   std::int64_t max = std::int64_t{1} << 40) const;
  std::optional<std::int64_t> OptInt(const std::string& key, std::int64_t min = 1,
                                     std::int64_t max = std::int64_t{1} << 40) const;
  /// Finite number in [min, max].
  double Number(const std::string& key, double min, double max) const;
  std::optional<double> OptNumber(const std::string& key, double min, double max) const;
  /// A number or null (null -> nullopt); absent is an error.
  std::optional<double> NullableNumber(const std::string& key, double min, double max) const;
  std::string String(const std::string& key) const;
  std::optional<std::string> OptString(const std::string& key) const;
  /// A string that must be one of `choices` (compared case-insensitively, returned lower case).
  std::string Enum(const std::string& key, const std::vector<std::string>& choices) const;
  bool Bool(const std::string& key) const;
  std::optional<bool> OptBool(const std::string& key) const;
  /// A nested object.
  JsonReader Object(const std::string& key) const;
  /// Throws if the object has a key outside `allowed` (keys starting with '_' are comments).
  void RejectUnknownKeys(const std::set<std::string>& allowed) const;

  const std::string& file() const { return file_; }
  std::string PointerTo(const std::string& key) const;
  const Json& json() const { return object_; }

 private:
  const Json& Get(const std::string& key) const;
  [[noreturn]] void Fail(const std::string& key, const std::string& expected) const;

  const Json& object_;
  std::string file_;
  std::string pointer_;
};

/// Escapes a key for use inside a JSON pointer (RFC 6901: ~ -> ~0, / -> ~1).
std::string JsonPointerEscape(const std::string& key);
/// Compact JSON text of a value, truncated to `max_chars` for messages (bounded in time and stack
/// for any value: nesting below 8 levels is shown as "...").
std::string JsonForMessage(const Json& value, std::size_t max_chars = 60);

}  // namespace shardcast
