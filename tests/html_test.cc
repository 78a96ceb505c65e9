// HTML reports (report/html.h): self-contained pages, and, in headless Chromium, pages that load
// without a console message and draw what the data says (one timeline lane per stage, memory
// bars that add up to each stage's peak, one mark per candidate, option and row).
// Chromium is Debian's `chromium`; without it the browser tests skip, unless
// SHARDCAST_BROWSER_TESTS=1 (set by .ci/run), where they fail.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "common/json_reader.h"
#include "report/html.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

TEST(Html, APageIsSelfContainedAndItsDataCannotCloseTheScript) {
  const Json data = {{"kind", "validate"}, {"rows", Json::array()}, {"note", "</script><script>alert(1)</script>"}};
  const std::string page = HtmlReport("a <b> & \"c\"", "sub", data);
  EXPECT_NE(page.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><script>alert(1)<\\/script>"), std::string::npos);
  // Nothing is fetched: no external script, style sheet, image, font or import.
  for (const char* ref : {"src=", "<link", "@import", "url(", "https://", "fetch("}) {
    EXPECT_EQ(page.find(ref), std::string::npos) << ref;
  }
  // The only URL is the SVG namespace, which is a name, not a request.
  std::size_t http = 0, at = 0;
  while ((at = page.find("http://", at)) != std::string::npos) {
    EXPECT_EQ(page.compare(at, 26, "http://www.w3.org/2000/svg"), 0);
    ++http;
    ++at;
  }
  EXPECT_EQ(http, 1u);
}

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

bool BrowserRequired() {
  const char* v = std::getenv("SHARDCAST_BROWSER_TESTS");
  return v && std::string(v) == "1";
}

#define REQUIRE_CHROMIUM()                                                                     \
  if (Chromium().empty()) {                                                                    \
    if (BrowserRequired()) FAIL() << "SHARDCAST_BROWSER_TESTS=1 but Debian's chromium is missing"; \
    GTEST_SKIP() << "no chromium (apt-get install chromium); the browser checks run in CI";    \
  }

/// The DOM after the page's script ran, and what the browser logged.
struct Rendered {
  std::string dom, log;
};

Rendered Render(const std::string& html_path) {
  const auto dir = testing::TestTempDir();
  const std::string profile = (dir / ("chromium-" + std::filesystem::path(html_path).stem().string())).string();
  const std::string err = html_path + ".log";
  const auto r = testing::RunCommand("timeout 120 " + Chromium() + " --headless --no-sandbox --disable-gpu " +
                                     "--no-first-run --user-data-dir=" + profile +
                                     " --enable-logging=stderr --v=0 --dump-dom file://" + html_path + " 2>" + err);
  Rendered out;
  out.dom = r.out;
  std::ifstream in(err);
  out.log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out;
}

/// The page's embedded data.
Json PageData(const std::string& html_path) {
  std::ifstream in(html_path);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string open = "<script type=\"application/json\" id=\"shardcast-data\">";
  const auto a = page.find(open) + open.size();
  std::string text = page.substr(a, page.find("</script>", a) - a);
  for (std::size_t i = 0; (i = text.find("<\\/", i)) != std::string::npos;) text.erase(i + 1, 1);
  return Json::parse(text);
}

std::size_t Count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t i = 0; (i = s.find(what, i)) != std::string::npos; i += what.size()) ++n;
  return n;
}

/// Messages the page logged (script errors, console output); empty when it loaded cleanly.
std::string ConsoleLines(const std::string& log) {
  std::string lines;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(":CONSOLE") != std::string::npos) lines += line + "\n";
  }
  return lines;
}

std::string HtmlPath(const std::string& name) { return (testing::TestTempDir() / name).string(); }

// docs/report.md: the page's data are the object --json prints, field for field (what-if and launch included).
TEST(Html, SimulatePageCarriesTheJsonObject) {
  const std::string flags = "simulate --model gpt3-1.3b --cluster dgx-h100 --gpus 8 --tp 2 --gbs 16 "
                            "--what-if hbm_GBps=x1.5 --emit megatron";
  const std::string path = HtmlPath("same-as-json.html");
  ASSERT_EQ(testing::RunShardcast(flags + " --html " + path).exit_code, 0);
  const auto json = testing::RunShardcast(flags + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(PageData(path)["result"], Json::parse(json.out));
}

// The plan and validate pages hold their --json objects too, bytes as whole numbers (the plan
// page adds its points, the memory limit and the kind; validate's adds the kind). One search
// thread: with more, how many candidates the shared step-time bound sets aside depends on the
// threads' interleaving, so two runs' counts can differ on a busy machine.
TEST(Html, PlanAndValidatePagesCarryTheJsonObjects) {
  const std::string plan =
      "plan --model gpt3-1.3b --cluster dgx-a100 --gpus 16 --gbs 64 --what-if hbm_GBps=x1.5 --threads 1";
  const std::string plan_path = HtmlPath("plan-same-as-json.html");
  ASSERT_EQ(testing::RunShardcast(plan + " --html " + plan_path).exit_code, 0);
  const auto plan_json = testing::RunShardcast(plan + " --json");
  ASSERT_EQ(plan_json.exit_code, 0) << plan_json.err;
  Json pd = PageData(plan_path);
  ASSERT_FALSE(pd["points"].empty());
  for (const Json& pt : pd["points"]) {  // whole bytes, as --json's
    EXPECT_TRUE(pt["peak_memory_bytes"].is_number_integer()) << pt.dump();
    EXPECT_TRUE(pt["peak_reserved_memory_bytes"].is_number_integer()) << pt.dump();
  }
  for (const char* k : {"kind", "memory_limit_bytes", "points"}) pd.erase(k);
  EXPECT_EQ(pd, Json::parse(plan_json.out));
  const std::string val_path = HtmlPath("validate-same-as-json.html");
  ASSERT_EQ(testing::RunShardcast("validate --no-memory --html " + val_path).exit_code, 0);
  const auto val_json = testing::RunShardcast("validate --no-memory --json");
  ASSERT_EQ(val_json.exit_code, 0) << val_json.err;
  Json vd = PageData(val_path);
  vd.erase("kind");
  EXPECT_EQ(vd, Json::parse(val_json.out));
}

TEST(HtmlBrowser, SimulateTimelineHasALanePerStageAndMemoryBarsAddUpToThePeak) {
  REQUIRE_CHROMIUM();
  const std::string flags = "simulate --model gpt3-13b --cluster dgx-a100 --gpus 64 --tp 2 --pp 4 --vp 2 --mbs 2 "
                            "--gbs 64 --sequence-parallel --zero 1";
  const std::string path = HtmlPath("simulate.html");
  ASSERT_EQ(testing::RunShardcast(flags + " --html " + path).exit_code, 0);
  const Json j = Json::parse(testing::RunShardcast(flags + " --json").out);
  const Rendered r = Render(path);
  EXPECT_EQ(ConsoleLines(r.log), "");
  EXPECT_EQ(Count(r.dom, "<g class=\"lane\""), 4u);  // pp = 4, one simulated replica
  // Each stage's bars, read back from the DOM, add up to its peak; the tallest is the step's.
  std::map<int, double> sum;
  auto attr = [](const std::string& tag, const std::string& name) {
    const auto at = tag.find(" " + name + "=\"");
    if (at == std::string::npos) return std::string();
    const auto from = at + name.size() + 3;
    return tag.substr(from, tag.find('"', from) - from);
  };
  for (std::size_t at = 0; (at = r.dom.find("<rect class=\"mem-part", at)) != std::string::npos; ++at) {
    const std::string tag = r.dom.substr(at, r.dom.find('>', at) - at);
    sum[std::stoi(attr(tag, "data-stage"))] += std::stod(attr(tag, "data-bytes"));
  }
  ASSERT_EQ(sum.size(), 4u);
  double tallest = 0;
  for (const auto& st : j["stages"]) {
    const int s = st["stage"].get<int>();
    EXPECT_NEAR(sum[s], st["peak_memory_bytes"].get<double>(), 1.0) << "stage " << s;
    tallest = std::max(tallest, sum[s]);
  }
  EXPECT_NEAR(tallest, j["peak_memory_bytes"].get<double>(), 1.0);
  // Every task of the timeline is drawn, each with its hover text.
  EXPECT_EQ(Count(r.dom, "<rect class=\"op "), PageData(path)["timeline"]["ops"].size());
}

TEST(HtmlBrowser, PlanCapacityAndValidateDrawAMarkPerCandidateOptionAndRow) {
  REQUIRE_CHROMIUM();
  const std::string plan = HtmlPath("plan.html"), cap = HtmlPath("capacity.html"), val = HtmlPath("validate.html");
  ASSERT_EQ(testing::RunShardcast("plan --model gpt3-1.3b --cluster dgx-a100 --gpus 16 --gbs 64 --html " + plan).exit_code, 0);
  ASSERT_EQ(testing::RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 256 --gpus-options dgx-a100:8,16 "
                                  "dgx-h100:8 --days 30 --html " + cap)
                .exit_code,
            0);
  ASSERT_EQ(testing::RunShardcast("validate --no-memory --html " + val).exit_code, 0);

  const Rendered p = Render(plan);
  EXPECT_EQ(ConsoleLines(p.log), "");
  const Json pd = PageData(plan);
  ASSERT_GT(pd["points"].size(), 0u);
  EXPECT_EQ(Count(p.dom, "<circle class=\"cand"), pd["points"].size());
  for (const auto& pt : pd["points"]) {  // reserved where the ranking replayed the allocator, else the peak
    EXPECT_GE(pt["peak_reserved_memory_bytes"].get<double>(), pt["peak_memory_bytes"].get<double>());
  }
  EXPECT_EQ(Count(p.dom, "class=\"recommended-mark\""), 1u + 1u);  // the mark and its legend swatch
  EXPECT_EQ(Count(p.dom, "<tr class=\"recommended\""), 1u);

  const Rendered c = Render(cap);
  EXPECT_EQ(ConsoleLines(c.log), "");
  std::size_t feasible = 0;
  const Json cd = PageData(cap);  // kept: a loop over a temporary's member would dangle
  for (const auto& o : cd["options"]) feasible += o["feasible"].get<bool>() ? 1 : 0;
  EXPECT_EQ(feasible, 3u);
  EXPECT_EQ(Count(c.dom, "<circle class=\"point\""), feasible);
  EXPECT_EQ(Count(c.dom, "<line class=\"deadline\""), 1u);

  const Rendered v = Render(val);
  EXPECT_EQ(ConsoleLines(v.log), "");
  std::size_t timed = 0;
  const Json vd = PageData(val);
  for (const auto& row : vd["rows"]) {
    timed += !row["skipped"].get<bool>() && row["measured_step_time_s"].is_number() &&
             row["predicted_step_time_s"].is_number();
  }
  EXPECT_GT(timed, 50u);
  EXPECT_EQ(Count(v.dom, "<circle class=\"point\""), timed);
  EXPECT_EQ(Count(v.dom, "<polygon class=\"band\""), 1u);
}

}  // namespace
}  // namespace shardcast
