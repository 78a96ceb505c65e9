#include <gtest/gtest.h>

#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"

namespace shardcast {
namespace {

TEST(Text, EditDistanceAndClosest) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  auto close = ClosestMatches("gpt3-17b", {"gpt3-175b", "gpt3-13b", "llama3-8b", "bloom-176b"});
  ASSERT_FALSE(close.empty());
  EXPECT_EQ(close[0], "gpt3-13b");  // distance 1; gpt3-175b is distance 1 too, ordered by name
  EXPECT_EQ(close.size(), 2u);
}

TEST(JsonReader, IntegerChecksNameFilePointerValue) {
  Json j = Json::parse(R"({"a": 12.5, "b": "12", "c": -3, "d": 1e300, "e": 4096.0, "f": 7})");
  JsonReader r(j, "m.json");
  auto msg = [&](const char* key) {
    try {
      r.Int(key, 1, 100);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(msg("a"), "m.json: /a: got 12.5, expected an integer in [1, 100]");
  EXPECT_EQ(msg("b"), "m.json: /b: got \"12\", expected an integer in [1, 100]");
  EXPECT_EQ(msg("c"), "m.json: /c: got -3, expected an integer in [1, 100]");
  EXPECT_EQ(msg("d"), "m.json: /d: got 1e+300, expected an integer in [1, 100]");
  EXPECT_EQ(msg("zz"), "m.json: /zz: missing required field");
  EXPECT_EQ(r.Int("f", 1, 100), 7);
  EXPECT_EQ(r.Int("e", 1, 5000), 4096);
}

// A key twice in one object is refused (nlohmann keeps the last copy silently); the same key in
// sibling objects, or in objects of an array, is fine.
TEST(JsonReader, DuplicateKeyIsRefused) {
  auto error = [](const std::string& text) {
    try {
      ParseJsonText(text, "d.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"num_layers": 16, "hidden_size": 8, "num_layers": 99})"),
            "d.json: /num_layers: key \"num_layers\" appears twice in the top object, expected each key once (which "
            "copy counts is not defined)");
  EXPECT_EQ(error(R"({"a": {"b": 1, "c": [{"b": 2}, {"b": 3}], "b": 4}})"),
            "d.json: /a/b: key \"b\" appears twice in the object at /a, expected each key once (which copy counts is "
            "not defined)");
  // The object's place: the second element of an array, after an object whose key was "k".
  EXPECT_EQ(error(R"({"x": [{"k": 1}, {"k": 1, "k": 2}]})"),
            "d.json: /x/1/k: key \"k\" appears twice in the object at /x/1, expected each key once (which copy counts "
            "is not defined)");
  EXPECT_EQ(error(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}], "x": 5})"), "");
  // Keys in the pointer are escaped as RFC 6901 says ("/" as ~1, "~" as ~0).
  EXPECT_EQ(error(R"({"a/b": {"c~d": {"e": 1, "e": 2}}})"),
            "d.json: /a~1b/c~0d/e: key \"e\" appears twice in the object at /a~1b/c~0d, expected each key once "
            "(which copy counts is not defined)");
  EXPECT_EQ(ParseJsonText(R"({"a": {"x": 1}, "x": 5})", "ok.json")["a"]["x"], 1);
}

TEST(JsonReader, MalformedJsonNamesLineAndColumn) {
  try {
    ParseJsonText("{\n  \"a\": 1,\n  \"b\" 2\n}", "x.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "x.json:3:7: malformed JSON (expected a valid JSON document)");
  }
}

}  // namespace
}  // namespace shardcast
