#include <csignal>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/file_util.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

TEST(Text, EditDistanceAndClosest) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  auto close = ClosestMatches("gpt3-17b", {"gpt3-175b", "gpt3-13b", "llama3-8b", "bloom-176b"});
  ASSERT_FALSE(close.empty());
  EXPECT_EQ(close[0], "gpt3-13b");  // distance 1; gpt3-175b is distance 1 too, ordered by name
  EXPECT_EQ(close.size(), 2u);
}

TEST(Text, FormatRateNeverUsesAnExponent) {
  EXPECT_EQ(FormatRate(989.4), "989.4");
  EXPECT_EQ(FormatRate(1978.9), "1979");
  EXPECT_EQ(FormatRate(9999.7), "10000");  // {:.4g} would print 1e+04
  EXPECT_EQ(FormatRate(14000), "14000");
}

TEST(Text, AlignColumnsWidensAColumnForItsWidestCell) {
  // Column 0 keeps its minimum width 5; column 1 widens from 4 to the 6 characters of "123456";
  // the last column is a left-aligned note after two spaces.
  const std::string t = AlignColumns({{"a", "bb", "note"}, {"ccc", "123456", "x"}}, {5, 4});
  EXPECT_EQ(t, "      a     bb  note\n    ccc 123456  x\n");
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
    EXPECT_EQ(std::string(e.what()), "x.json:3:7: malformed JSON (syntax error while parsing object separator - unexpected number "
              "literal; expected ':')");
  }
}

// Issue 14 (1): 100,000 nested brackets crashed while the message quoted the value.
TEST(JsonReader, DeepNestingIsRefusedWhileReading) {
  for (const std::string open : {"[", "{\"a\":"}) {
    std::string text;
    for (int i = 0; i < 100000; ++i) text += open;
    try {
      ParseJsonText(text, "deep.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("deep.json: "), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("nested more than 64 levels deep"), std::string::npos) << e.what();
    }
  }
  // kMaxJsonDepth levels are read; one more is refused.
  const auto nest = [](int n) { return std::string(static_cast<std::size_t>(n), '[') + std::string(static_cast<std::size_t>(n), ']'); };
  EXPECT_NO_THROW(ParseJsonText(nest(kMaxJsonDepth), "ok.json"));
  EXPECT_THROW(ParseJsonText(nest(kMaxJsonDepth + 1), "deep.json"), InputError);
}

TEST(JsonReader, MessagesQuoteABoundedPrefixOfAnyValue) {
  Json deep = Json::array();
  Json* cur = &deep;
  for (int i = 0; i < 10000; ++i) {  // built in code (no parser limit): the message must not recurse
    cur->push_back(Json::array());
    cur = &(*cur)[0];
  }
  const std::string m = JsonForMessage(deep);
  EXPECT_LE(m.size(), 63u);
  EXPECT_EQ(m.substr(0, 8), "[[[[[[[[");
  Json big = Json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  EXPECT_EQ(JsonForMessage(big, 10), "[0,1,2,3,4...");
  EXPECT_EQ(JsonForMessage(Json::parse(R"({"a":[1,2],"b":"x"})")), R"({"a":[1,2],"b":"x"})");
}

// Issue 14 (8): SIGTERM while the temporary file is being written removes it. The child writes
// into a FIFO at the temporary path, which blocks until the parent reads: the signal arrives
// mid-write, with no timing involved.
TEST(FileUtil, SignalDuringAtomicWriteRemovesTheTemporaryFile) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "trace_signal.json").string();
  std::filesystem::remove(path);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(3);
    WriteFileAtomic(path, std::string(1 << 20, 'x'));
    _exit(0);
  }
  const std::string tmp = path + ".tmp." + std::to_string(child);
  ASSERT_EQ(mkfifo(tmp.c_str(), 0600), 0);
  ASSERT_EQ(write(go[1], "g", 1), 1);
  const int fd = open(tmp.c_str(), O_RDONLY);  // blocks until the child opens it for writing
  ASSERT_GE(fd, 0);
  char buf[4096];
  ASSERT_GT(read(fd, buf, sizeof buf), 0);  // the child is inside the write
  kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(fd);
  close(go[0]);
  close(go[1]);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(std::filesystem::exists(tmp)) << "left behind: " << tmp;
  EXPECT_FALSE(std::filesystem::exists(path)) << "a partial file was renamed into place";
  std::filesystem::remove(tmp);
}

// An output never replaces a device, FIFO or socket with a regular file (calibrate --out
// /dev/full did), and a symbolic link is followed to its file instead of being replaced.
TEST(FileUtil, AtomicWriteRefusesNonRegularFilesAndFollowsLinks) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "out_fifo").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(testing::InputErrorOf([&] { WriteFileAtomic(fifo, "x"); }),
            fifo + ": is not a regular file (a device, FIFO or socket), expected the path of a file to write");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  // The command line refuses it before any work (here: a plan's --csv).
  const auto r = testing::RunShardcast("plan --model gpt3-175b --cluster dgx-a100 --gpus 64 --gbs 64 --csv " + fifo);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--csv: got \"" + fifo + "\", not a regular file (a device, FIFO or socket)"), std::string::npos)
      << r.err;
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  const std::string target = (dir / "link_target.json").string(), link = (dir / "out_link.json").string();
  std::filesystem::remove(link);
  testing::WriteTemp("link_target.json", "old");
  std::filesystem::create_symlink(target, link);
  WriteFileAtomic(link, "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(ReadTextFile(target), "new");
  // A link whose file does not exist yet (relative, from the link's folder) creates that file.
  const std::string dangling = (dir / "out_dangling.json").string(), later = (dir / "created_later.json").string();
  std::filesystem::remove(dangling);
  std::filesystem::remove(later);
  std::filesystem::create_symlink("created_later.json", dangling);
  WriteFileAtomic(dangling, "made");
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
  EXPECT_EQ(ReadTextFile(later), "made");
  // A loop says so.
  const std::string loop = (dir / "out_loop.json").string();
  std::filesystem::remove(loop);
  std::filesystem::create_symlink("out_loop.json", loop);
  EXPECT_EQ(testing::InputErrorOf([&] { WriteFileAtomic(loop, "x"); }),
            loop + ": a symbolic link loop (or more than 40 links), expected a file to write");
  // The command line checks the folder the link leads to (here one that takes no new file).
  const std::string to_proc = (dir / "out_to_proc.json").string();
  std::filesystem::remove(to_proc);
  std::filesystem::create_symlink("/proc/shardcast_nothing.json", to_proc);
  const auto p = testing::RunShardcast("plan --model gpt3-175b --cluster dgx-a100 --gpus 64 --gbs 64 --csv " + to_proc);
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.err.find("whose folder /proc cannot be written"), std::string::npos) << p.err;
  EXPECT_TRUE(std::filesystem::is_symlink(to_proc));
  std::filesystem::remove(fifo);
}

}  // namespace
}  // namespace shardcast
