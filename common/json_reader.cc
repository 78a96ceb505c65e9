#include "common/json_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text.h"

namespace shardcast {

std::string ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a folder, expected a file to read");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // libstdc++ opens with fopen, which sets errno: say why (no such file, permission denied).
    const int err = errno;
    throw InputError(path + ": cannot open file for reading" +
                     (err != 0 ? std::string(" (") + std::strerror(err) + ")" : std::string()));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read error");
  return ss.str();
}

Json ParseJsonText(const std::string& text, const std::string& file) {
  // A key given twice in one object: nlohmann keeps the last silently (other parsers the first),
  // so a pasted-over field would change a result unseen. Track each open object's keys and the
  // JSON pointer to where the parser is, for the message.
  struct Frame {
    bool array = false;
    std::size_t index = 0;            // arrays: the element being read
    std::string key;                  // objects: the member being read
    std::vector<std::string> keys;    // objects: the keys seen
  };
  std::vector<Frame> frames;
  auto pointer = [&](std::size_t depth) {
    std::string ptr;
    for (std::size_t k = 0; k < depth; ++k) {
      ptr += '/';
      ptr += frames[k].array ? std::to_string(frames[k].index) : JsonPointerEscape(frames[k].key);
    }
    return ptr;
  };
  auto value_done = [&] {  // a member or element was read: arrays move to their next element
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth >= kMaxJsonDepth) {
      // Refused while reading: no later step (destruction, dumping, messages) recurses this deep.
      throw InputError(file + ": " + pointer(frames.size()) + ": nested more than " + std::to_string(kMaxJsonDepth) +
                       " levels deep, expected at most " + std::to_string(kMaxJsonDepth) +
                       " (no shardcast input nests more than a few)");
    }
    switch (event) {
      case Json::parse_event_t::object_start:
        frames.push_back({false, 0, {}, {}});
        break;
      case Json::parse_event_t::array_start:
        frames.push_back({true, 0, {}, {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        value_done();
        break;
      case Json::parse_event_t::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (std::find(f.keys.begin(), f.keys.end(), f.key) != f.keys.end()) {
          const std::string where = frames.size() > 1 ? "the object at " + pointer(frames.size() - 1) : "the top object";
          throw InputError(file + ": " + pointer(frames.size()) + ": key \"" + f.key + "\" appears twice in " + where +
                           ", expected each key once (which copy counts is not defined)");
        }
        f.keys.push_back(f.key);
        break;
      }
      case Json::parse_event_t::value:
        value_done();
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::parse_error& e) {
    // Translate the byte offset to line:column for the message.
    std::size_t offset = e.byte == 0 ? 0 : e.byte - 1;
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    // nlohmann's text ends with what it found and expected: "[json.exception.parse_error.101] parse
    // error at line 3, column 7: syntax error while parsing object separator - unexpected number
    // literal; expected ':'"; keep that reason.
    const std::string what = e.what();
    const auto column = what.find(", column ");
    const auto reason_at = column == std::string::npos ? std::string::npos : what.find(": ", column);
    const std::string reason = reason_at == std::string::npos ? "expected a valid JSON document" : what.substr(reason_at + 2);
    throw InputError(file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": malformed JSON (" + reason + ")");
  } catch (const Json::out_of_range& e) {
    // A number too large for a double (e.g. 1e400): nlohmann's message quotes it.
    // nlohmann's text is "[json.exception.out_of_range.406] number overflow parsing '1e400'".
    std::string what = e.what();
    const auto tag = what.find("] ");
    if (tag != std::string::npos) what = what.substr(tag + 2);
    throw InputError(file + ": " + what + " (expected numbers within the range of a double)");
  }
}

Json ReadJsonFile(const std::string& path) { return ParseJsonText(ReadTextFile(path), path); }

namespace {
// Every finite floating-point number in `j` rounded to an integer (all of it counts bytes).
Json RoundAll(Json j) {
  // Whole numbers; beyond what an int64 holds (9.2e18), a rounded double.
  if (j.is_number_float() && std::isfinite(j.get<double>())) {
    const double v = std::round(j.get<double>());
    if (std::fabs(v) < 9e18) return static_cast<std::int64_t>(v);
    return v;
  }
  if (j.is_array() || j.is_object()) {
    for (auto& x : j) x = RoundAll(std::move(x));
  }
  return j;
}
}  // namespace

Json WithIntegerBytes(Json j) {
  if (j.is_array()) {
    for (auto& x : j) x = WithIntegerBytes(std::move(x));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const bool bytes = k.size() >= 6 && k.compare(k.size() - 6, 6, "_bytes") == 0;
      *it = bytes ? RoundAll(std::move(*it)) : WithIntegerBytes(std::move(*it));
    }
  }
  return j;
}

std::string JsonPointerEscape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

namespace {
// Appends compact JSON text of `v` to `out`, stopping once `out` holds more than `limit`
// characters or below depth 8: a message needs the start of a value, and a huge or deeply nested
// one must cost neither time nor stack.
void AppendBounded(const Json& v, std::size_t limit, int depth, std::string* out) {
  if (out->size() > limit) return;
  if (!v.is_structured()) {
    *out += v.dump();
    return;
  }
  const bool array = v.is_array();
  *out += array ? '[' : '{';
  if (depth >= 8 && !v.empty()) {
    *out += "...";
  } else {
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out->size() <= limit; ++it) {
      if (!first) *out += ',';
      first = false;
      if (!array) *out += Json(it.key()).dump() + ':';
      AppendBounded(*it, limit, depth + 1, out);
    }
  }
  *out += array ? ']' : '}';
}
}  // namespace

std::string JsonForMessage(const Json& value, std::size_t max_chars) {
  std::string s;
  AppendBounded(value, max_chars, 0, &s);
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

JsonReader::JsonReader(const Json& object, std::string file, std::string pointer)
    : object_(object), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!object_.is_object()) {
    throw InputError::Field(file_, pointer_, JsonForMessage(object_), "a JSON object");
  }
}

std::string JsonReader::PointerTo(const std::string& key) const {
  return pointer_ + "/" + JsonPointerEscape(key);
}

bool JsonReader::Has(const std::string& key) const { return object_.contains(key); }

const Json& JsonReader::Get(const std::string& key) const {
  auto it = object_.find(key);
  if (it == object_.end()) {
    throw InputError(file_ + ": " + PointerTo(key) + ": missing required field");
  }
  return *it;
}

void JsonReader::Fail(const std::string& key, const std::string& expected) const {
  throw InputError::Field(file_, PointerTo(key), JsonForMessage(Get(key)), expected);
}

std::int64_t JsonReader::Int(const std::string& key, std::int64_t min, std::int64_t max) const {
  const Json& v = Get(key);
  std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max)) Fail(key, expected);
    auto i = static_cast<std::int64_t>(u);
    if (i < min) Fail(key, expected);
    return i;
  }
  if (v.is_number_integer()) {
    auto i = v.get<std::int64_t>();
    if (i < min || i > max) Fail(key, expected);
    return i;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    // 4096.0 is accepted as 4096; 12.5 and 1e300 are not.
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(min) &&
        d <= static_cast<double>(max)) {
      return static_cast<std::int64_t>(d);
    }
  }
  Fail(key, expected);
}

std::optional<std::int64_t> JsonReader::OptInt(const std::string& key, std::int64_t min,
                                               std::int64_t max) const {
  if (!Has(key) || object_.at(key).is_null()) return std::nullopt;
  return Int(key, min, max);
}

double JsonReader::Number(const std::string& key, double min, double max) const {
  const Json& v = Get(key);
  std::string expected = "a number in [" + FormatNumber(min) + ", " + FormatNumber(max) + "]";
  if (!v.is_number()) Fail(key, expected);
  double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max) Fail(key, expected);
  return d;
}

std::optional<double> JsonReader::OptNumber(const std::string& key, double min, double max) const {
  if (!Has(key)) return std::nullopt;
  return Number(key, min, max);
}

std::optional<double> JsonReader::NullableNumber(const std::string& key, double min,
                                                 double max) const {
  if (Get(key).is_null()) return std::nullopt;
  return Number(key, min, max);
}

std::string JsonReader::String(const std::string& key) const {
  const Json& v = Get(key);
  if (!v.is_string()) Fail(key, "a string");
  return v.get<std::string>();
}

std::optional<std::string> JsonReader::OptString(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  return String(key);
}

std::string JsonReader::Enum(const std::string& key, const std::vector<std::string>& choices) const {
  std::string expected = "one of " + Join(choices, "|");
  const Json& v = Get(key);
  if (!v.is_string()) Fail(key, expected);
  std::string s = ToLower(v.get<std::string>());
  for (const auto& c : choices) {
    if (s == c) return s;
  }
  Fail(key, expected);
}

bool JsonReader::Bool(const std::string& key) const {
  const Json& v = Get(key);
  if (!v.is_boolean()) Fail(key, "true or false");
  return v.get<bool>();
}

std::optional<bool> JsonReader::OptBool(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  return Bool(key);
}

JsonReader JsonReader::Object(const std::string& key) const {
  const Json& v = Get(key);
  if (!v.is_object()) Fail(key, "a JSON object");
  return JsonReader(v, file_, PointerTo(key));
}

void JsonReader::RejectUnknownKeys(const std::set<std::string>& allowed) const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    const std::string& k = it.key();
    if (!k.empty() && k[0] == '_') continue;
    if (allowed.count(k)) continue;
    std::vector<std::string> names(allowed.begin(), allowed.end());
    std::string hint = ClosestMatches(k, names, 1).empty()
                           ? std::string()
                           : " (did you mean '" + ClosestMatches(k, names, 1)[0] + "'?)";
    throw InputError(file_ + ": " + PointerTo(k) + ": unknown key '" + k +
                     "', expected one of " + Join(names, ", ") + hint);
  }
}

}  // namespace shardcast
