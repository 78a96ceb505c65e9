// Seeded mutation fuzzing of every loader and what runs on what it loads: model JSON, Hugging
// Face config, GPU, cluster, hardware profile, nccl-tests text and JSON logs, validation CSVs,
// Megatron-LM and torchtitan training logs (validate --log).
// Each mutated input must load or be refused with an InputError (the CLI's exit 2); any other
// exception fails the test (and saves the input for reproduction), a crash ends the process
// (with the sanitizer build's report), and a hang trips ctest's timeout. Deterministic: the seed
// and the iteration count (SHARDCAST_FUZZ_ITERATIONS, default 200 per loader) fix the inputs.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "calibrate/calibrate.h"
#include "calibrate/nccl_tests.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "planner/validate.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

int Iterations() {
  const char* v = std::getenv("SHARDCAST_FUZZ_ITERATIONS");
  return v ? std::max(1, std::atoi(v)) : 200;
}

std::string Source(const std::string& rel) { return ReadTextFile(testing::SourceDir() + "/" + rel); }

/// Values that broke or could break a loader: extremes of int64 and double, zero, negatives,
/// non-finite spellings, huge digit strings.
const std::vector<std::string>& ExtremeValues() {
  static const std::vector<std::string> v = {
      "0", "-1", "1e308", "-1e308", "1e-308", "4294967296", "9223372036854775807", "18446744073709551616",
      "1099511627776", "nan", "inf", "-inf", "NaN", "0.0", "1e400", "-0", "1e-30", "2.5", "\"\"", "null", "true",
      "[]", "{}", "\"x\"", "1048577", "65536", "16777217", std::string(300, '9')};
  return v;
}

/// One random mutation of `s`: a byte changed, a range deleted or repeated, a number replaced by
/// an extreme value, deep nesting, or a very long line.
std::string Mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  switch (rng() % 8) {
    case 0:
      if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng() % 256);
      break;
    case 1:
      if (!s.empty()) {
        const std::size_t a = pick(s.size());
        s.erase(a, pick(std::min<std::size_t>(64, s.size() - a) + 1));
      }
      break;
    case 2:
      if (!s.empty()) {
        const std::size_t a = pick(s.size());
        s.insert(a, s.substr(a, pick(std::min<std::size_t>(256, s.size() - a) + 1)));
      }
      break;
    case 3:
    case 4:
    case 5: {
      // A number (a run of digits, sign, dot, exponent) replaced by an extreme value.
      std::vector<std::size_t> starts;
      for (std::size_t i = 0; i < s.size(); ++i) {
        const bool digit = s[i] >= '0' && s[i] <= '9';
        if (digit && (i == 0 || !((s[i - 1] >= '0' && s[i - 1] <= '9') || s[i - 1] == '.'))) starts.push_back(i);
      }
      if (starts.empty()) break;
      const std::size_t a = starts[pick(starts.size())];
      std::size_t b = a;
      while (b < s.size() && ((s[b] >= '0' && s[b] <= '9') || s[b] == '.' || s[b] == 'e' || s[b] == '-')) ++b;
      s.replace(a, b - a, ExtremeValues()[pick(ExtremeValues().size())]);
      break;
    }
    case 6: {
      const std::size_t depth = 1 + pick(rng() % 4 == 0 ? 100000 : 100);
      const std::size_t at = pick(s.size() + 1);
      s.insert(at, std::string(depth, rng() % 2 ? '[' : '{'));
      break;
    }
    case 7:
      s.insert(pick(s.size() + 1), std::string(1 + pick(rng() % 4 == 0 ? 200000 : 2000), '7'));
      break;
  }
  return s;
}

/// Runs `load` on `iterations` mutations of each seed text. `load` gets the mutated text and a
/// file path holding it; InputError is the accepted refusal.
void Fuzz(const std::string& name, const std::vector<std::string>& seeds,
          const std::function<void(const std::string&, const std::string&)>& load, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  const auto dir = std::filesystem::temp_directory_path() / "shardcast_fuzz";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (name + ".input")).string();
  int refused = 0, accepted = 0;
  for (int it = 0; it < Iterations(); ++it) {
    std::string text = seeds[static_cast<std::size_t>(it) % seeds.size()];
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n; ++k) text = Mutate(std::move(text), rng);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << text;
    }
    try {
      load(text, path);
      ++accepted;
    } catch (const InputError&) {
      ++refused;
    } catch (const std::exception& e) {
      const std::string keep = (dir / (name + ".failure")).string();
      std::filesystem::copy_file(path, keep, std::filesystem::copy_options::overwrite_existing);
      FAIL() << name << " iteration " << it << ": " << e.what() << " (not an InputError: exit 1, not 2); input kept in "
             << keep;
    }
  }
  // Both kinds must occur, or the mutations are not reaching the loader's checks.
  EXPECT_GT(refused, 0) << name;
  EXPECT_GT(accepted + refused, 0) << name;
}

// What the CLI does with a loaded model: describe it and simulate a small configuration.
void UseModel(const Model& m) {
  (void)m.Parameters();
  (void)m.Flops(m.seq_length);
  const Cluster cl = LoadCluster("dgx-a100");
  ParallelConfig c;
  c.dp = 1;
  c.global_batch_size = 1;
  c.seq_length = std::min<std::int64_t>(m.seq_length, 4096);
  (void)Simulate(m, c, cl, 1, DefaultProfile(cl));
}

// Simulates a small GPT on a cluster with a profile.
void UseCluster(const Cluster& cl, const HardwareProfile& prof) {
  const Model m = LoadModel("gpt3-125m");
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.dp = 4;
  c.micro_batch_size = 1;
  c.global_batch_size = 8;
  (void)Simulate(m, c, cl, 16, prof);
}

TEST(Fuzz, ModelJson) {
  Fuzz("model", {Source("models/llm/gpt3-175b.json"), Source("models/llm/llama3-70b.json")},
       [](const std::string& text, const std::string& path) { UseModel(ModelFromJson(ParseJsonText(text, path), path)); });
}

TEST(Fuzz, HuggingFaceConfig) {
  std::vector<std::string> seeds;
  for (const char* f : {"llama3-8b", "gpt2", "bloom-560m", "mpt-7b", "gpt-neox-20b", "qwen2-7b", "mistral-7b"}) {
    seeds.push_back(Source(std::string("tests/fixtures/hf/") + f + ".json"));
  }
  Fuzz("hf", seeds, [](const std::string& text, const std::string& path) {
    UseModel(ModelFromJson(ParseJsonText(text, path), path));
  });
}

TEST(Fuzz, GpuJson) {
  Fuzz("gpu", {Source("models/gpu/h100-sxm.json"), Source("models/gpu/a100-sxm4-80gb.json")},
       [](const std::string& text, const std::string& path) {
         Cluster cl = LoadCluster("dgx-a100");
         cl.gpu = GpuFromJson(ParseJsonText(text, path), path);
         UseCluster(cl, DefaultProfile(cl));
       });
}

TEST(Fuzz, ClusterJson) {
  Fuzz("cluster", {Source("models/cluster/dgx-h100.json"), Source("models/cluster/jean-zay-a100.json")},
       [](const std::string& text, const std::string& path) {
         const Cluster cl = ClusterFromJson(ParseJsonText(text, path), path);
         UseCluster(cl, DefaultProfile(cl));
       });
}

TEST(Fuzz, HardwareProfile) {
  const std::string a100 = ProfileToJson(DefaultProfile(LoadCluster("dgx-a100"))).dump(1);
  const std::string h100 = ProfileToJson(DefaultProfile(LoadCluster("dgx-h100"))).dump(1);
  Fuzz("profile", {a100, h100}, [](const std::string& text, const std::string& path) {
    const HardwareProfile p = ProfileFromJson(ParseJsonText(text, path), path);
    (void)DescribeProfile(p);
    UseCluster(LoadCluster("dgx-a100"), p);
  });
}

TEST(Fuzz, NcclTestsLogs) {
  std::vector<std::string> seeds;
  for (const char* f : {"all_reduce_h200_8.log", "all_gather_perf_old_2nodes.log", "all_reduce.json"}) {
    seeds.push_back(Source(std::string("tests/fixtures/nccl/") + f));
  }
  Fuzz("nccl", seeds, [](const std::string&, const std::string& path) {
    // As `calibrate import` runs: parse, build tables, and the profile must load again.
    (void)ImportNcclTests({path}, DefaultProfile(LoadCluster("dgx-h200")), "NVIDIA H200");
  });
}

TEST(Fuzz, TrainingLogs) {
  const std::vector<std::string> seeds = {Source("tests/fixtures/logs/megatron_llama3_8b_tp2_pp2.log"),
                                          Source("tests/fixtures/logs/torchtitan_llama3_8b_fsdp8.log")};
  Fuzz("logs", seeds, [](const std::string&, const std::string& path) {
    // As `validate --log FILE --cluster dgx-h100 --gpus 8` runs: read, then simulate and compare.
    LogDefaults d;
    d.gpus = 8;
    const Cluster cl = LoadCluster("dgx-h100");
    (void)ValidateLoggedRuns({ReadTrainingLog(path, d)}, cl, DefaultProfile(cl));
  });
}

TEST(Fuzz, ValidationCsv) {
  Fuzz("validation", {Source("tests/fixtures/validation/runs_small.csv")},
       [](const std::string&, const std::string& path) { (void)RunValidation(path, ""); });
}

}  // namespace
}  // namespace shardcast
