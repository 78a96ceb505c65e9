#include <gtest/gtest.h>

#include "common/json_reader.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

using testing::RunShardcast;

TEST(Cli, DescribeJsonParsesAndHasParameters) {
  auto r = RunShardcast("describe --model gpt3-175b --cluster dgx-a100 --gpus 1024 --tp 8 --pp 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_TRUE(j["parameters"].is_number());
  EXPECT_NEAR(j["parameters"].get<double>() / 174.6e9, 1.0, 0.005);
  EXPECT_EQ(j["fit"]["dp"], 16);
  // ZeRO-0 at TP8 PP8: the first stage's 12 layers + embedding, 18 bytes each, fits in 80 GiB.
  EXPECT_TRUE(j["fit"]["zero"][0]["fits"].get<bool>());
}

TEST(Cli, DescribeTextNamesTheFormula) {
  auto r = RunShardcast("describe --model gpt3-175b --cluster dgx-a100 --gpus 1024");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6*N_gemm + 12*L*s*a*d"), std::string::npos);
  EXPECT_NE(r.out.find("174.62 B"), std::string::npos);
  // Without TP/PP the 175B model's 3.1 TB of state cannot fit on one 80 GiB GPU.
  EXPECT_NE(r.out.find("does NOT fit"), std::string::npos);
}

TEST(Cli, ModelsListsPresets) {
  auto r = RunShardcast("models");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* n : {"gpt3-175b", "llama3.1-405b", "h100-sxm", "dgx-b200", "gb200-nvl72"}) {
    EXPECT_NE(r.out.find(n), std::string::npos) << n;
  }
}

TEST(Cli, ExitCodes) {
  EXPECT_EQ(RunShardcast("describe --model no-such-model").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe --model gpt3-175b --tp 0").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe").exit_code, 2);
  EXPECT_EQ(RunShardcast("no-such-command").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe --help").exit_code, 0);
  EXPECT_EQ(RunShardcast("--help").exit_code, 0);
  auto r = RunShardcast("describe --model gpt3-17b");
  EXPECT_NE(r.err.find("close matches: gpt3-13b, gpt3-175b"), std::string::npos) << r.err;
}

TEST(Cli, NonDividingSizesAreAResultNotACrash) {
  auto r = RunShardcast("describe --model gpt3-175b --cluster dgx-a100 --gpus 1000 --tp 8 --pp 12 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_FALSE(j["fit"]["feasible"].get<bool>());
  EXPECT_EQ(j["fit"]["reasons"][0], "tp*pp = 8*12 = 96 does not divide 1000 GPUs");
}

}  // namespace
}  // namespace shardcast
