#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "calibrate/calibrate.h"
#include "calibrate/cuda_backend.h"
#include "calibrate/fit.h"
#include "calibrate/nccl_tests.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "kernels/cpu_kernels.h"
#include "models/loader.h"
#include "simulator/cost_model.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

const std::string kNccl = testing::FixturesDir() + "/nccl/";

TEST(NcclTests, CurrentFormatWithPrefixesAndInfoLines) {
  auto runs = ReadNcclTestsLog(kNccl + "all_reduce_h200_8.log");
  ASSERT_EQ(runs.size(), 1u);
  const auto& r = runs[0];
  EXPECT_EQ(r.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(r.ranks, 8);
  EXPECT_EQ(r.nodes, 1);
  ASSERT_EQ(r.rows.size(), 6u);
  // busbw = size / time * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md), out-of-place columns.
  for (const auto& row : r.rows) {
    const double busbw = row.size_bytes / (row.time_us * 1e-6) / 1e9 * 2.0 * 7 / 8;
    EXPECT_NEAR(row.busbw_GBps, busbw, 0.01 * busbw + 0.01);
  }
  EXPECT_DOUBLE_EQ(r.rows[0].time_us, 40.5);
  CollectiveTable t = ToCollectiveTable(r);
  EXPECT_EQ(t.bytes_to_seconds.size(), 6u);
  EXPECT_DOUBLE_EQ(t.bytes_to_seconds.back().y, 5100.7e-6);
}

// Issue 14 (2, 6): a 200,000-digit line crashed std::regex; inf/nan rows were written as null.
TEST(NcclTests, LongLinesAndNonFiniteRowsExitTwoNamingFileAndLine) {
  const std::string text = ReadTextFile(kNccl + "all_reduce_h200_8.log");
  const std::string digits(200000, '7');
  const std::string long_line = text + digits + "\n";
  const std::string e1 = testing::InputErrorOf([&] { ParseNcclTestsLog(long_line, "long.log"); });
  EXPECT_NE(e1.find("long.log:29: a line of 200000 characters, expected at most 65536"), std::string::npos) << e1;
  // Under the line limit, a long prefix of digits is plain text, not a crash.
  const std::string e2 = testing::InputErrorOf([&] { ParseNcclTestsLog(text + std::string(60000, '[') + "\n", "b.log"); });
  EXPECT_EQ(e2, "(no error)");
  const std::string row = "[1,0]<stdout>:     1048576        524288  bfloat16     sum      -1     40.5   25.89   45.31      0";
  for (const std::string& bad : {std::string("inf"), std::string("nan")}) {
    std::string t = text;
    const std::size_t at = t.find(row);
    ASSERT_NE(at, std::string::npos);
    t.replace(t.find("40.5", at), 4, bad);
    const std::string e = testing::InputErrorOf([&] { ParseNcclTestsLog(t, "bad.log"); });
    EXPECT_NE(e.find("bad.log:19: result row"), std::string::npos) << e;
    EXPECT_NE(e.find("time = '" + bad + "', expected a finite number >= 0"), std::string::npos) << e;
  }
  std::string t = text;
  t.replace(t.find("1048576", t.find(row)), 7, "nan");
  EXPECT_NE(testing::InputErrorOf([&] { ParseNcclTestsLog(t, "size.log"); }).find("size.log:19: result row"),
            std::string::npos);
  // A garbled size is not taken for other output: the row would vanish and its rate be interpolated.
  std::string garbled = text;
  garbled.replace(garbled.find("1048576", garbled.find(row)), 7, "10485x6");
  const std::string eg = testing::InputErrorOf([&] { ParseNcclTestsLog(garbled, "g.log"); });
  EXPECT_NE(eg.find("g.log:19: result row"), std::string::npos) << eg;
  EXPECT_NE(eg.find("size = '10485x6', expected a number of bytes"), std::string::npos) << eg;
}

// The prefixes of mpirun --tag-output and srun -l are stripped (a plain scan, no regex).
TEST(NcclTests, LauncherPrefixesAreStripped) {
  const std::string body = "#  Rank  0 Group  0 Pid  1 on h1 device  0 [0000:0a:00] NVIDIA H200\n"
                           "#       size  count type redop root time algbw busbw #wrong\n"
                           "     1048576  524288  bfloat16  sum  -1  40.5  25.89  45.31  0\n";
  for (const std::string prefix : {"", "[1,0]<stdout>:", "[12,3]<stderr>:", "[0] ", "7: "}) {
    std::string log = "# Collective test starting: all_reduce_perf\n";
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);) log += prefix + line + "\n";
    const auto runs = ParseNcclTestsLog(log, "p.log");
    ASSERT_EQ(runs.size(), 1u) << prefix;
    EXPECT_EQ(runs[0].device, "NVIDIA H200") << prefix;
    ASSERT_EQ(runs[0].rows.size(), 1u) << prefix;
    EXPECT_DOUBLE_EQ(runs[0].rows[0].time_us, 40.5) << prefix;
  }
}

// The device of the Rank lines is kept; importing onto a cluster with another GPU warns, and the
// import needs the cluster and the output named.
TEST(NcclTests, ImportWarnsWhenTheLogsGpuIsNotTheClusters) {
  EXPECT_EQ(ReadNcclTestsLog(kNccl + "all_reduce_h200_8.log")[0].device, "NVIDIA H200");
  const std::string log = kNccl + "all_reduce_h200_8.log";
  std::vector<std::string> warnings;
  const Cluster h200 = LoadCluster("dgx-h200");
  ImportNcclTests({log}, DefaultProfile(h200), h200.gpu.display_name, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  const Cluster a100 = LoadCluster("dgx-a100");
  ImportNcclTests({log}, DefaultProfile(a100), a100.gpu.display_name, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], log + ": measured on 'NVIDIA H200', but the cluster's GPU is 'NVIDIA A100-SXM4-80GB': the "
                               "profile pairs that GPU's defaults with these collectives");
  // Concatenated logs: each test has its own GPU and ranks.
  const std::string text = ReadTextFile(log);
  std::string second = text;
  // (The same collective: an all-reduce's rows relabelled as another collective's would give a
  // busbw/algbw that 8 ranks cannot, which the import refuses; NcclTests.RankCountMustAgreeWithBusBw.)
  const std::string from = "NVIDIA H200", to = "NVIDIA H100 80GB HBM3";
  for (auto at = second.find(from); at != std::string::npos; at = second.find(from, at + to.size())) {
    second.replace(at, from.size(), to);
  }
  const auto both = ParseNcclTestsLog(text + second, "both.log");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(both[1].ranks, 8);
  // An older driver's name without "NVIDIA " is the same GPU.
  std::string bare = text;
  bare.replace(bare.find("NVIDIA H200"), 11, "H200");
  const std::string bare_log = testing::WriteTemp("all_reduce_bare_name.log", bare);
  warnings.clear();
  ImportNcclTests({bare_log}, DefaultProfile(h200), h200.gpu.display_name, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  auto r = testing::RunShardcast("calibrate import " + log + " --out /tmp/shardcast_tests/imported.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cluster is required"), std::string::npos) << r.err;
}

TEST(NcclTests, OldFormatTwoNodesFromFileName) {
  auto runs = ReadNcclTestsLog(kNccl + "all_gather_perf_old_2nodes.log");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].op, CollectiveOp::kAllGather);
  EXPECT_EQ(runs[0].ranks, 8);
  EXPECT_EQ(runs[0].nodes, 2);
  ASSERT_EQ(runs[0].rows.size(), 4u);
  EXPECT_DOUBLE_EQ(runs[0].rows[3].time_us, 7200.0);
  // all-gather busbw factor (n-1)/n.
  const auto& row = runs[0].rows[3];
  EXPECT_NEAR(row.busbw_GBps / row.algbw_GBps, 7.0 / 8, 0.01);
}

TEST(NcclTests, JsonOutput) {
  auto runs = ReadNcclTestsLog(kNccl + "all_reduce.json");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].op, CollectiveOp::kAllReduce);
  EXPECT_EQ(runs[0].ranks, 8);
  EXPECT_EQ(runs[0].rows.size(), 2u);
  EXPECT_DOUBLE_EQ(runs[0].rows[1].time_us, 3500.0);
  EXPECT_EQ(runs[0].device, "NVIDIA H200");  // device_info, checked against the cluster like a text log's
  std::vector<std::string> warnings;
  const Cluster h100 = LoadCluster("dgx-h100");
  ImportNcclTests({kNccl + "all_reduce.json"}, DefaultProfile(h100), h100.gpu.display_name, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("measured on 'NVIDIA H200', but the cluster's GPU is 'NVIDIA H100 80GB HBM3'"),
            std::string::npos);
}

// The same collective, rank and node count twice (a log given twice) is refused, not kept twice.
TEST(NcclTests, ImportRefusesTheSameTableTwice) {
  const std::string log = kNccl + "all_reduce_h200_8.log";
  const Cluster h200 = LoadCluster("dgx-h200");
  EXPECT_EQ(testing::InputErrorOf([&] { ImportNcclTests({log, log}, DefaultProfile(h200), "", nullptr); }),
            log + ": all_reduce over 8 ranks on 1 node(s) was already read from " + log +
                ", expected one measurement of each collective, rank and node count");
}

// A log without its Rank lines (grep'd or tailed) names no hosts: its ranks fill the cluster's
// nodes, so 8 ranks on nodes of 4 GPUs are an inter-node table and not the NVLink rate (they were
// filed as one node, a 2-node busbw becoming the intra-node one). Hosts holding more ranks than
// the cluster's nodes have GPUs mean another machine: refused.
TEST(NcclTests, RanksBeyondANodeAreNotFiledAsOneNode) {
  const std::string text = ReadTextFile(kNccl + "all_reduce_h200_8.log");
  HardwareProfile four_per_node = DefaultProfile(LoadCluster("dgx-h200"));
  four_per_node.gpus_per_node = 4;
  const std::string log = kNccl + "all_reduce_h200_8.log";
  EXPECT_EQ(testing::InputErrorOf([&] { ImportNcclTests({log}, four_per_node, "", nullptr); }),
            log + ": 8 ranks on 1 host(s), but the cluster has 4 GPUs per node; expected the --cluster the log ran on "
                  "(at most 4 ranks per host)");
  std::string no_ranks;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("Rank ") == std::string::npos) no_ranks += line + "\n";
  }
  const std::string bare = testing::WriteTemp("all_reduce_perf_no_ranks.log", no_ranks);
  std::vector<std::string> warnings;
  const HardwareProfile p = ImportNcclTests({bare}, four_per_node, "", &warnings);
  ASSERT_EQ(p.collective_tables.size(), 1u);
  EXPECT_EQ(p.collective_tables[0].ranks, 8);
  EXPECT_EQ(p.collective_tables[0].nodes, 2);
  EXPECT_EQ(p.intra_busbw_GBps, four_per_node.intra_busbw_GBps);  // not the measured 368 GB/s
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], bare + ": all_reduce over 8 ranks names no hosts (no 'Rank ... on HOST' lines): taken as 2 "
                                "nodes of the cluster's 4 GPUs");
  // On the cluster it ran on (8 GPUs per node) the same log is one node's NVLink table.
  warnings.clear();
  const HardwareProfile one = ImportNcclTests({bare}, DefaultProfile(LoadCluster("dgx-h200")), "", &warnings);
  EXPECT_EQ(one.collective_tables[0].nodes, 1);
  EXPECT_TRUE(warnings.empty());
}

TEST(NcclTests, RanksFromBusbwRatioWithoutRankLines) {
  // 4 ranks: all-reduce factor 2*3/4 = 1.5.
  auto runs = ParseNcclTestsLog(
      "# Collective test starting: all_reduce_perf\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
      "     1048576        262144     float     sum      -1    100.0   10.49   15.73      0\n",
      "x.log");
  EXPECT_EQ(runs[0].ranks, 4);
}

// The ranks a log lists must be the ones its busbw/algbw implies (nccl-tests' doc/PERFORMANCE.md:
// all-reduce 2(n-1)/n, all-gather (n-1)/n): 8 ranks give 1.75 and 0.875.
TEST(NcclTests, RankCountMustAgreeWithBusBw) {
  const std::string text = ReadTextFile(kNccl + "all_reduce_h200_8.log");
  EXPECT_EQ(ParseNcclTestsLog(text, "ok.log")[0].ranks, 8);
  // A log cut after its first four Rank lines: 4 ranks would give 1.5.
  std::string cut;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool late_rank = false;
    for (const char* r : {"Rank  4", "Rank  5", "Rank  6", "Rank  7"}) late_rank |= line.find(r) != std::string::npos;
    if (!late_rank) cut += line + "\n";
  }
  const std::string four = testing::InputErrorOf([&] { ParseNcclTestsLog(cut, "cut.log"); });
  EXPECT_NE(four.find("cut.log: all_reduce_perf: the log lists 4 ranks, for which busbw/algbw = 2(n-1)/n = 1.500, "
                      "but its 1073741824-byte row has algbw 210.51 and busbw 368.39 GB/s, a factor of 1.750 (8 ranks)"),
            std::string::npos)
      << four;
  // An all-reduce's rows under an all-gather's name: no rank count gives an all-gather 1.75.
  std::string relabelled = text;
  for (auto at = relabelled.find("all_reduce_perf"); at != std::string::npos; at = relabelled.find("all_reduce_perf"))
    relabelled.replace(at, 15, "all_gather_perf");
  EXPECT_NE(testing::InputErrorOf([&] { ParseNcclTestsLog(relabelled, "ag.log"); })
                .find("the log lists 8 ranks, for which busbw/algbw = (n-1)/n = 0.875, but its 1073741824-byte row "
                      "has algbw 210.51 and busbw 368.39 GB/s, a factor of 1.750 (no rank count gives it)"),
            std::string::npos);
  // Two single-rank tests side by side (nccl-tests without MPI=1 under mpirun): each prints its
  // Rank 0, and a lone rank's all-reduce moves no bus bytes.
  const std::string side_by_side =
      "# Collective test starting: all_reduce_perf\n"
      "#  Rank  0 Group  0 Pid  1 on gpu49 device  0 [0000:0a:00] NVIDIA H200\n"
      "#  Rank  0 Group  0 Pid  2 on gpu49 device  1 [0000:0b:00] NVIDIA H200\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
      "  1073741824     268435456     float     sum      -1    350.0 3067.83    0.00      0\n";
  EXPECT_NE(testing::InputErrorOf([&] { ParseNcclTestsLog(side_by_side, "solo.log"); })
                .find("a factor of 0.000 (one rank alone); expected one test over all the ranks it lists (were "
                      "single-rank tests run side by side, nccl-tests built without MPI=1"),
            std::string::npos);
  // The JSON's devices are the ranks it lists: the fixture's 8 give 1.75, 4 would not.
  Json j = ParseJsonText(ReadTextFile(kNccl + "all_reduce.json"), "all_reduce.json");
  EXPECT_EQ(ParseNcclTestsLog(j.dump(), "all_reduce_perf.json")[0].ranks, 8);
  while (j["devices"].size() > 4) j["devices"].erase(4);
  EXPECT_NE(testing::InputErrorOf([&] { ParseNcclTestsLog(j.dump(), "all_reduce_perf.json"); })
                .find("the log lists 4 ranks"),
            std::string::npos);
}

// A measured single-node all-reduce sets the busbw of every in-node group without its own table,
// NVLink SHARP's default estimate included: a node measured at 3.7 times the fixture's times is
// that much slower for a 4-rank all-reduce too, not held up by the preset's NVLS figure. The
// import is dated today, not with the default profile's date.
TEST(NcclTests, MeasuredAllReduceReplacesTheNvlsEstimate) {
  const Cluster h200 = LoadCluster("dgx-h200");
  const HardwareProfile def = DefaultProfile(h200);
  ASSERT_GT(def.nvls_allreduce_busbw_GBps, 0);
  std::string slow;
  std::istringstream in(ReadTextFile(kNccl + "all_reduce_h200_8.log"));
  for (std::string line; std::getline(in, line);) {
    const auto f = line.find("bfloat16");
    if (f != std::string::npos) {
      std::istringstream row(line.substr(line.find("<stdout>:") + 9));
      double size = 0, count = 0, root = 0, t = 0, alg = 0, bus = 0;
      std::string type, op;
      if (!(row >> size >> count >> type >> op >> root >> t >> alg >> bus) || size <= 0) {
        slow += line + "\n";
        continue;
      }
      const std::string half = fmt::format("{:.1f} {:.2f} {:.2f} 0", 3.7 * t, size / (3.7 * t) / 1e3,
                                           size / (3.7 * t) / 1e3 * 1.75);
      line = fmt::format("{:.0f} {:.0f} {} {} {:.0f} {} {}", size, count, type, op, root, half, half);
    }
    slow += line + "\n";
  }
  const std::string log = testing::WriteTemp("all_reduce_slow.log", slow);
  const HardwareProfile p = ImportNcclTests({log}, def, h200.gpu.display_name, nullptr);
  EXPECT_EQ(p.nvls_allreduce_busbw_GBps, 0.0);
  EXPECT_NEAR(p.intra_busbw_GBps, 368.39 / 3.7, 0.5);
  GroupPlacement four;
  four.ranks = four.ranks_per_node = 4;
  EXPECT_NEAR(CollectiveCostOf(p, CollectiveOp::kAllReduce, 1e9, four).link_GBps, p.intra_busbw_GBps, 1e-9);
  EXPECT_GT(CollectiveCostOf(def, CollectiveOp::kAllReduce, 1e9, four).link_GBps, 3 * p.intra_busbw_GBps);
  EXPECT_NE(p.date, def.date);
  EXPECT_EQ(p.date.size(), 10u);  // YYYY-MM-DD
  // profile show prints the estimate where a profile has one; a cluster preset shows its default.
  const auto shown = testing::RunShardcast("profile show dgx-h200");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("NVLink SHARP all-reduce busbw"), std::string::npos) << shown.out;
  EXPECT_EQ(DescribeProfile(p).find("NVLink SHARP"), std::string::npos);
}

// A log cut off before its sweep's maxBytes would give every larger message the rate of its last
// row: the fixture sweeps 1 MiB to 1 GiB by 4x; without its last two rows it stops at 64 MiB,
// whose next size (256 MiB) the sweep would have run.
TEST(NcclTests, ALogCutBeforeItsMaxBytesIsRefused) {
  const std::string text = ReadTextFile(kNccl + "all_reduce_h200_8.log");
  EXPECT_EQ(ParseNcclTestsLog(text, "whole.log")[0].rows.size(), 6u);
  std::string cut;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const bool row = line.find("bfloat16") != std::string::npos;
    if (row && (line.find(" 268435456 ") != std::string::npos || line.find(" 1073741824 ") != std::string::npos)) break;
    cut += line + "\n";
  }
  EXPECT_EQ(testing::InputErrorOf([&] { ParseNcclTestsLog(cut, "cut.log"); }),
            "cut.log: all_reduce_perf: the result rows stop at 67108864 B but the test's header sweeps to maxBytes "
            "1073741824 B: the log looks cut off, and its largest messages would take the rate of 67108864-byte ones "
            "(expected the whole log; a sweep that ends there was run with -e 67108864)");
  // The same rows under a header whose sweep ends there (-e 64M), or without the sweep line, are whole.
  std::string ends_there = cut;
  ends_there.replace(ends_there.find("maxBytes 1073741824"), 19, "maxBytes 67108864");
  EXPECT_EQ(ParseNcclTestsLog(ends_there, "e.log")[0].rows.size(), 4u);
  // nccl-tests lowers maxBytes where the buffers would not fit ("# Reducing maxBytes to M due to
  // memory limitation"): the sweep ends there.
  std::string reduced = cut;
  reduced.insert(reduced.rfind('\n', reduced.find("#       size")) + 1,
                 "[1,0]<stdout>:# Reducing maxBytes to 100000000 due to memory limitation\n");
  EXPECT_EQ(ParseNcclTestsLog(reduced, "r.log")[0].rows.size(), 4u);
  std::string linear = cut;  // -i 64M: 64 MiB steps, the next one (128 MiB) still below 1 GiB
  linear.replace(linear.find("step: 4(factor)"), 15, "step: 67108864(bytes)");
  EXPECT_NE(testing::InputErrorOf([&] { ParseNcclTestsLog(linear, "l.log"); }).find("the log looks cut off"),
            std::string::npos);
}

TEST(NcclTests, CorruptLogsAreClearErrors) {
  try {
    ReadNcclTestsLog(kNccl + "truncated.log");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), kNccl + "truncated.log:3: result row '     1048576        262144     "
                                             "float     sum      -1   40.5   25.89' has 7 columns, expected the "
                                             "header's 9 (size count type redop root time algbw busbw #wrong)");
  }
  // Without a header the row is still read by its numbers, and one missing them is malformed.
  EXPECT_NE(testing::InputErrorOf([] {
              ParseNcclTestsLog("# Collective test starting: all_reduce_perf\n 1048576 262144 float sum -1 40.5\n", "h.log");
            }).find("h.log:2: result row ' 1048576 262144 float sum -1 40.5' is malformed (expected: size count type "
                    "redop [root] time algbw busbw #wrong ...)"),
            std::string::npos);
  // A bad value is named with its column; a zero time and nccl-tests' own #wrong are refused.
  const std::string head = "# Collective test starting: all_reduce_perf\n"
                           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n";
  auto error_of = [&](const std::string& row) {
    return testing::InputErrorOf([&] { ParseNcclTestsLog(head + row, "x.log"); });
  };
  EXPECT_NE(error_of("     1048576        262144     float     sum      -1    abc   10.49   15.73      0\n")
                .find("x.log:3: result row '     1048576        262144     float     sum      -1    abc   10.49   "
                      "15.73      0': time = 'abc', expected a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("     1048576        262144     float     sum      -1  -40.39   10.49   15.73      0\n")
                .find(": time = '-40.39', expected a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of("     1048576        262144     float     sum      -1    0.00   10.49   15.73      0\n")
                .find(": time = '0.00' for 1048576 bytes, expected a positive time in us"),
            std::string::npos);
  EXPECT_NE(error_of("     1048576        262144     float     sum      -1  100.0   10.49   15.73      5\n")
                .find(": #wrong = 5, expected 0 (nccl-tests found wrong results"),
            std::string::npos);
  // -c 0 turns the check off: N/A is no error.
  EXPECT_EQ(ParseNcclTestsLog(head + "     1048576        262144     float     sum      -1  100.0   10.49   15.73    N/A\n",
                              "x.log")[0].rows.size(), 1u);
  // A row with a column missing or one too many would be read shifted (here the in-place time as
  // #wrong): it is named as the wrong column count, whichever column is gone.
  const std::string two_halves =
      "# Collective test starting: all_reduce_perf\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
      "#wrong\n";
  const std::string shifted = testing::InputErrorOf([&] {
    ParseNcclTestsLog(two_halves + "  65536  16384  float  sum  -1  30.54  2.15  0  30.54  2.15  3.76  0\n", "s.log");
  });
  EXPECT_NE(shifted.find("s.log:3: result row '  65536  16384  float  sum  -1  30.54  2.15  0  30.54  2.15  3.76  0' "
                         "has 12 columns, expected the header's 13 (size count type redop root time algbw busbw "
                         "#wrong time algbw busbw #wrong)"),
            std::string::npos)
      << shifted;
  // More columns are read by position: output of another process can land at a row's end.
  EXPECT_DOUBLE_EQ(ParseNcclTestsLog(two_halves + "  65536 16384 float sum -1 30.5 2.15 3.76 0 30.5 2.15 3.76 0 [warn]\n",
                                     "s.log")[0].rows[0].time_us,
                   30.5);
  // A second test in the same file has its own header: rows without one are read by their numbers.
  EXPECT_EQ(ParseNcclTestsLog(two_halves + "  65536 16384 float sum -1 30.5 2.15 3.76 0 30.5 2.15 3.76 0\n" +
                                  "# Collective test starting: all_gather_perf\n 65536 2048 float none -1 20.1 3.26 2.85 0\n",
                              "two.log")
                .size(),
            2u);
  EXPECT_THROW(ParseNcclTestsLog("hello\nworld\n", "empty.log"), InputError);
  EXPECT_THROW(ParseNcclTestsLog("{\"results\": 3}", "bad.json"), InputError);
}

TEST(Fit, AlphaBetaRecoversKnownParametersUnderNoise) {
  const double alpha = 12e-6, beta = 40e9;
  std::mt19937 gen(5);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<CurvePoint> pts;
  for (double s = 8; s <= 1 << 30; s *= 4) pts.push_back({s, (alpha + s / beta) * (1 + noise(gen))});
  AlphaBeta f = FitAlphaBeta(pts);
  EXPECT_NEAR(f.alpha_s / alpha, 1.0, 0.05);
  EXPECT_NEAR(f.beta_Bps / beta, 1.0, 0.05);
  EXPECT_LT(f.rms_rel_error, 0.05);
  EXPECT_THROW(FitAlphaBeta({{8, 1e-5}}), InputError);
}

TEST(Fit, MemoryBoundPeakIsTheFastestSampleAndTheCurveIsSorted) {
  // A launch floor of 5 us and 4 TB/s: t = 5e-6 + bytes / 4e12. The peak is the largest size's
  // rate; each point is its rate over the peak.
  std::vector<CurvePoint> pts;
  for (double b = 1.2e9; b >= 1.2e4; b /= 10) pts.push_back({b, 5e-6 + b / 4e12});
  HardwareProfile p;
  FitMemoryBound(pts, &p);
  const double peak = 1.2e9 / (5e-6 + 1.2e9 / 4e12) / 1e9;
  EXPECT_DOUBLE_EQ(p.hbm_GBps, peak);
  ASSERT_EQ(p.memory_efficiency_vs_bytes.size(), 6u);
  EXPECT_DOUBLE_EQ(p.memory_efficiency_vs_bytes.front().x, 1.2e4);
  EXPECT_DOUBLE_EQ(p.memory_efficiency_vs_bytes.front().y, 1.2e4 / (5e-6 + 1.2e4 / 4e12) / 1e9 / peak);
  EXPECT_DOUBLE_EQ(p.memory_efficiency_vs_bytes.back().y, 1.0);
  EXPECT_THROW(FitMemoryBound({}, &p), InputError);
  EXPECT_THROW(FitMemoryBound({{1e6, 0}}, &p), InputError);
  // With a 4 us overhead, a case that is mostly overhead (4.5 us for 3 MB: 0.5 us above it)
  // does not set the peak (its remainder would read 6 TB/s); the bandwidth-bound one does, and
  // the curve still gives back both measured times.
  HardwareProfile q;
  q.launch_overhead_s = 4e-6;
  const std::vector<CurvePoint> two = {{3e6, 4.5e-6}, {1.2e9, 4e-6 + 1.2e9 / 4e12}};
  FitMemoryBound(two, &q);
  EXPECT_NEAR(q.hbm_GBps, 4000, 1e-6);
  EXPECT_NEAR(q.memory_efficiency_vs_bytes.front().y, 3e6 / 0.5e-6 / 4e12, 1e-9);  // 1.5: above 1
  for (const auto& s : two) EXPECT_NEAR(MemoryBoundTime(q, s.x) / s.y, 1.0, 1e-9) << s.x;
}

TEST(Fit, AttentionIsTheCausalFlopRateOverThePeakRelativeTo2k) {
  // Synthetic causal attention at 300 TF/s forward and 240 TF/s backward (2.5x the forward
  // FLOPs) below 4K tokens, 20% faster from 4K on; peak 989.4 TF/s. FLOPs: 0.5 x 4 b s^2 h d.
  const double peak = 989.4;
  std::vector<cuda::AttentionSample> samples;
  for (int seq = 1024; seq <= 32768; seq *= 2) {
    cuda::AttentionSample a;
    a.batch = 32768 / seq;
    a.seq = seq;
    a.heads = 32;
    a.kv_heads = 8;
    a.head_dim = 128;
    const double flops = 0.5 * 4.0 * a.batch * seq * static_cast<double>(seq) * 32 * 128;
    const double speedup = seq >= 4096 ? 1.2 : 1.0;
    a.fwd_s = flops / (300e12 * speedup);
    a.bwd_s = 2.5 * flops / (240e12 * speedup);
    samples.push_back(a);
  }
  std::reverse(samples.begin(), samples.end());  // any order
  HardwareProfile p;
  FitAttention(samples, peak, &p);
  EXPECT_NEAR(p.attention_fwd_efficiency, 300 / peak, 1e-12);
  EXPECT_NEAR(p.attention_bwd_efficiency, 240 / peak, 1e-12);
  ASSERT_EQ(p.attention_efficiency_vs_seq.size(), 6u);
  ASSERT_EQ(p.attention_bwd_efficiency_vs_seq.size(), 6u);
  EXPECT_EQ(p.attention_efficiency_vs_seq.front().x, 1024);
  EXPECT_NEAR(p.attention_efficiency_vs_seq[1].y, 1.0, 1e-12);   // 2,048: the reference
  EXPECT_NEAR(p.attention_efficiency_vs_seq[2].y, 1.2, 1e-12);   // 4,096
  EXPECT_NEAR(p.attention_bwd_efficiency_vs_seq.back().y, 1.2, 1e-12);
  // The simulator's attention time then gives back each measured time (plus the launch floor).
  p.gemm_peak_tflops = peak;
  p.launch_overhead_s = 0;
  for (const auto& a : samples) {
    const double flops = 0.5 * 4.0 * a.batch * a.seq * static_cast<double>(a.seq) * a.heads * a.head_dim;
    EXPECT_NEAR(AttentionTime(p, flops, a.seq, false) / a.fwd_s, 1.0, 1e-9) << a.seq;
    EXPECT_NEAR(AttentionTime(p, 2.5 * flops, a.seq, true) / a.bwd_s, 1.0, 1e-9) << a.seq;
  }
  EXPECT_THROW(FitAttention({}, peak, &p), InputError);
  samples[0].bwd_s = 0;
  EXPECT_THROW(FitAttention(samples, peak, &p), InputError);
}

/// A synthetic CUDA sweep of one H200: its name, memory and SMs, and one 8192^3 GEMM at 700 TF/s
/// (heuristic #0) and 710 TF/s (best).
cuda::Measurements H200Sweep() {
  cuda::Measurements m;
  m.device_name = "NVIDIA H200";
  m.memory_bytes = 141e9;
  m.sm_count = 132;
  m.gemm.push_back({8192, 8192, 8192, 2.0 * 8192.0 * 8192 * 8192 / 700e12, 2.0 * 8192.0 * 8192 * 8192 / 710e12});
  return m;
}

TEST(Fit, AttentionHeadDimFactorsAreEachDimsRateAt2kOverTheMainOnes) {
  // The main head dim (128) at 1K-4K, 64 and 192 at 2K only: 300, 240 and 330 TF/s forward,
  // 250, 200 and 270 TF/s backward (2.5x the forward FLOPs).
  const double peak = 989.4;
  std::vector<cuda::AttentionSample> samples;
  auto add = [&](int d, int seq, double fwd_tflops, double bwd_tflops) {
    cuda::AttentionSample a;
    a.batch = 32768 / seq;
    a.seq = seq;
    a.heads = 4096 / d;
    a.kv_heads = a.heads / 4;
    a.head_dim = d;
    const double flops = 0.5 * 4.0 * a.batch * seq * static_cast<double>(seq) * a.heads * d;
    a.fwd_s = flops / (fwd_tflops * 1e12);
    a.bwd_s = 2.5 * flops / (bwd_tflops * 1e12);
    samples.push_back(a);
  };
  add(64, 2048, 240, 200);
  for (int seq : {1024, 2048, 4096}) add(128, seq, 300, 250);
  add(192, 2048, 330, 270);
  HardwareProfile p;
  FitAttention(samples, peak, &p, 128);
  EXPECT_EQ(p.attention_head_dim, 128);
  EXPECT_NEAR(p.attention_fwd_efficiency, 300 / peak, 1e-12);
  ASSERT_EQ(p.attention_fwd_head_dim_factor.size(), 3u);
  EXPECT_NEAR(p.attention_fwd_head_dim_factor[0].y, 240.0 / 300, 1e-12);
  EXPECT_NEAR(p.attention_fwd_head_dim_factor[1].y, 1.0, 1e-12);
  EXPECT_NEAR(p.attention_bwd_head_dim_factor[2].y, 270.0 / 250, 1e-12);
  // AttentionTime reads the factor at the model's head dim (interpolated in log(head dim)).
  p.gemm_peak_tflops = peak;
  p.launch_overhead_s = 0;
  const double flops = 1e12;
  EXPECT_NEAR(AttentionTime(p, flops, 2048, false, 64), flops / 240e12, 1e-15);
  EXPECT_NEAR(AttentionTime(p, flops, 2048, true, 192), flops / 270e12, 1e-15);
  EXPECT_NEAR(AttentionTime(p, flops, 2048, false), flops / 300e12, 1e-15);  // no head dim: the main one
  const double mid = 240.0 / 300 + (1.0 - 240.0 / 300) * std::log(96.0 / 64) / std::log(2.0);
  EXPECT_NEAR(AttentionTime(p, flops, 2048, false, 96), flops / (300e12 * mid), 1e-15);
  // The factors survive the profile's JSON.
  HardwareProfile full = DefaultProfile(LoadCluster("dgx-h200"));
  full.attention_head_dim = p.attention_head_dim;
  full.attention_fwd_head_dim_factor = p.attention_fwd_head_dim_factor;
  full.attention_bwd_head_dim_factor = p.attention_bwd_head_dim_factor;
  const HardwareProfile back = ProfileFromJson(ProfileToJson(full), "p.json");
  EXPECT_EQ(back.attention_head_dim, 128);
  ASSERT_EQ(back.attention_fwd_head_dim_factor.size(), 3u);
  EXPECT_DOUBLE_EQ(back.attention_fwd_head_dim_factor[0].y, 240.0 / 300);
}

// A flash kernel runs a head in the smallest head dim it was compiled for (FlashKernelHeadDim),
// so a model's attention FLOPs take (that head dim / the model's) as long, relative to the head
// dim the rates were measured at.
TEST(Fit, FlashKernelsRunTheHeadDimRoundedUpToTheirKernels) {
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa2", 80), 96);    // multiples of 32 up to 128, then 192, 256
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa2", 128), 128);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa2", 160), 192);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa2", 200), 256);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa3", 48), 64);    // 64, 96, 128, 192, 256
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa3", 80), 96);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa3", 160), 192);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("fa3", 200), 256);
  EXPECT_DOUBLE_EQ(FlashKernelHeadDim("", 80), 80);
  EXPECT_EQ(DefaultProfile(LoadCluster("dgx-a100")).attention_tiles, "fa2");
  HardwareProfile h100 = DefaultProfile(LoadCluster("dgx-h100"));
  EXPECT_EQ(h100.attention_tiles, "fa3");
  EXPECT_EQ(WithAttentionKernel(h100, "hopper", "fa2").attention_tiles, "fa2");
  HardwareProfile measured = h100;  // a measured kernel's head-dim curve goes with its rates
  measured.attention_head_dim = 128;
  measured.attention_fwd_head_dim_factor = measured.attention_bwd_head_dim_factor = {{64, 0.8}, {128, 1.0}};
  const HardwareProfile fa2 = WithAttentionKernel(measured, "hopper", "fa2");
  EXPECT_TRUE(fa2.attention_fwd_head_dim_factor.empty() && fa2.attention_bwd_head_dim_factor.empty());
  EXPECT_EQ(fa2.attention_head_dim, 0);
  h100.launch_overhead_s = 0;
  const double flops = 1e12, at128 = AttentionTime(h100, flops, 2048, false, 128);
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false), at128);           // no head dim
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false, 64), at128);       // FA3 has a 64 kernel
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, true, 80), AttentionTime(h100, flops, 2048, true, 128) * 96 / 80);
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false, 160), at128 * 192 / 160);
  // MLA (DeepSeek-V3): query/key heads of 192, value heads of 128: FA3's forward has that kernel;
  // its backward runs 192/192, (192 + 128) / (192 + 192) of the rate.
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false, 192, 128), at128);
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, true, 192, 128),
                   AttentionTime(h100, flops, 2048, true, 128) * 384 / 320);
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false, 80, 80), AttentionTime(h100, flops, 2048, false, 80));
  // Rates measured at head dim 80 already carry the 96 kernel: 128 runs 80/96 of the time.
  h100.attention_head_dim = 80;
  EXPECT_DOUBLE_EQ(AttentionTime(h100, flops, 2048, false, 128), at128 * 80 / 96);
  // A fitted (measured) kernel's head dims are its own, and the JSON keeps the preset's.
  const HardwareProfile back = ProfileFromJson(ProfileToJson(DefaultProfile(LoadCluster("dgx-a100"))), "p.json");
  EXPECT_EQ(back.attention_tiles, "fa2");
  std::vector<cuda::AttentionSample> one(1);
  one[0].batch = 1;
  one[0].seq = 2048;
  one[0].heads = 32;
  one[0].head_dim = 128;
  one[0].fwd_s = one[0].bwd_s = 1e-3;
  HardwareProfile fitted = DefaultProfile(LoadCluster("dgx-h100"));
  FitAttention(one, 989.4, &fitted, 128);
  EXPECT_EQ(fitted.attention_tiles, "");
}

TEST(Calibrate, CudaProfileUsesMeasuredAttentionOrSaysWhyNot) {
  cuda::Measurements m = H200Sweep();
  m.memory.push_back({1.2e9, 3e-4});
  m.attention_note = "attention not measured: cuDNN not found (libcudnn.so.9: cannot open shared object file)";
  const HardwareProfile preset = BuildCudaProfile(m);
  EXPECT_NE(preset.source.find("attention not measured: cuDNN not found (libcudnn.so.9: cannot open shared object "
                               "file) (preset default)"),
            std::string::npos)
      << preset.source;
  const HardwareProfile h200 = DefaultProfile(LoadCluster("dgx-h200"));
  EXPECT_EQ(preset.attention_fwd_efficiency, h200.attention_fwd_efficiency);
  cuda::AttentionSample a;
  a.batch = 16;
  a.seq = 2048;
  a.heads = 32;
  a.kv_heads = 8;
  a.head_dim = 128;
  const double flops = 0.5 * 4.0 * 16 * 2048.0 * 2048 * 32 * 128;
  a.fwd_s = flops / 450e12;
  a.bwd_s = 2.5 * flops / 400e12;
  m.attention = {a};
  m.attention_note = "cuDNN 9.19.0 SDPA, causal bf16, 32 heads / 8 KV of 128, 2048-2048 tokens";
  const HardwareProfile measured = BuildCudaProfile(m);
  // One memory size cannot separate the per-kernel overhead: the preset's stays, and the
  // attention rates count the time above it (AttentionTime adds it back).
  EXPECT_EQ(measured.launch_overhead_s, h200.launch_overhead_s);
  EXPECT_GT(measured.launch_overhead_s, 0);
  EXPECT_NEAR(measured.attention_fwd_efficiency,
              flops / (a.fwd_s - measured.launch_overhead_s) / (measured.gemm_peak_tflops * 1e12), 1e-12);
  EXPECT_NEAR(measured.attention_bwd_efficiency,
              2.5 * flops / (a.bwd_s - measured.launch_overhead_s) / (measured.gemm_peak_tflops * 1e12), 1e-12);
  EXPECT_NEAR(AttentionTime(measured, flops, 2048, false, 128) / a.fwd_s, 1.0, 1e-9);
  EXPECT_NE(measured.source.find("attention: cuDNN 9.19.0 SDPA"), std::string::npos) << measured.source;
}

TEST(Calibrate, CudaProfileSaysUnderWhatClocksTheGemmsRan) {
  cuda::Measurements m = H200Sweep();
  m.memory.push_back({1.2e9, 3e-4});
  m.gemm_soak_s = 5;
  cuda::GemmSample a{8192, 8192, 8192, 2.0 * 8192.0 * 8192 * 8192 / 700e12, 2.0 * 8192.0 * 8192 * 8192 / 710e12};
  a.sm_clock_mhz = 1755;
  a.temperature_c = 61;
  a.power_w = 689.5;
  cuda::GemmSample b = a;
  b.m = 4096;
  b.sm_clock_mhz = 1980;
  b.temperature_c = 55;
  b.power_w = 402;
  m.gemm = {a, b};
  EXPECT_NE(BuildCudaProfile(m).source.find("GEMMs timed after a 5 s soak at SM clock 1755-1980 MHz, 55-61 C, up to 690 W (NVML)"),
            std::string::npos)
      << BuildCudaProfile(m).source;
  for (auto& g : m.gemm) g.sm_clock_mhz = 0;
  m.nvml_note = "libnvidia-ml.so.1 not found";
  EXPECT_NE(BuildCudaProfile(m).source.find("GEMMs timed after a 5 s soak (clock not read: libnvidia-ml.so.1 not found)"),
            std::string::npos);
}

TEST(Calibrate, CudaProfileRecordsTheMemcpyReferenceAndTheShare) {
  // A synthetic sweep: the axpy peaks at 4.0 TB/s, the same run's copy at 4.3 TB/s (93%).
  cuda::Measurements m = H200Sweep();
  for (double b = 1.2e4; b <= 1.3e9; b *= 10) m.memory.push_back({b, 4e-6 + b / 4.0e12});
  m.memcpy_d2d_GBps = 4300;
  const HardwareProfile p = BuildCudaProfile(m);
  // The alpha-beta fit's latency (4 us here) is the per-kernel overhead, at most 0.9 of the
  // shortest time; the rates count each time above it, so the simulator's kernel times (which add
  // it back) give back every measured time instead of counting the launch twice.
  const double launch = 0.9 * (4e-6 + 1.2e4 / 4.0e12);
  EXPECT_NEAR(p.launch_overhead_s / launch, 1.0, 1e-9);
  const double peak = 1.2e9 / (4e-6 + 1.2e9 / 4.0e12 - p.launch_overhead_s) / 1e9;
  EXPECT_DOUBLE_EQ(p.hbm_GBps, peak);
  for (const auto& s : m.memory) EXPECT_NEAR(MemoryBoundTime(p, s.bytes) / s.seconds, 1.0, 1e-9) << s.bytes;
  const cuda::GemmSample& g = m.gemm.front();
  EXPECT_NEAR(GemmTime(p, g.m, g.n, g.k, 1, Precision::kBf16, 2, 2) / g.heuristic0_s, 1.0, 1e-9);
  EXPECT_EQ(p.memcpy_d2d_GBps, 4300);
  EXPECT_NE(p.source.find(fmt::format("memory-bound peak {:.0f} GB/s, {:.0f}% of a device-to-device cudaMemcpy (4300 GB/s)",
                                      peak, 100 * peak / 4300)),
            std::string::npos)
      << p.source;
  // The field survives the profile's JSON, and a profile without it reads as not measured.
  const HardwareProfile back = ProfileFromJson(ProfileToJson(p), "p.json");
  EXPECT_EQ(back.memcpy_d2d_GBps, 4300);
  EXPECT_NE(DescribeProfile(p).find("of a device-to-device cudaMemcpy in the same run"), std::string::npos);
  HardwareProfile none = p;
  none.memcpy_d2d_GBps = 0;
  EXPECT_FALSE(ProfileToJson(none)["memory"].contains("memcpy_d2d_GBps"));
  EXPECT_EQ(ProfileFromJson(ProfileToJson(none), "p.json").memcpy_d2d_GBps, 0);
}

TEST(Kernels, CpuReferencesFollowTheirFormulas) {
  const std::size_t rows = 3, cols = 64;
  std::vector<float> x(rows * cols), y(rows * cols), g(cols, 1.0f), b(cols, 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.1 * i) * 5 + 2);
  kernels::LayerNormForward(x.data(), g.data(), b.data(), y.data(), rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::size_t c = 0; c < cols; ++c) mean += y[r * cols + c];
    mean /= cols;
    for (std::size_t c = 0; c < cols; ++c) var += std::pow(y[r * cols + c] - mean, 2);
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var / cols, 1.0, 1e-3);
  }
  float gx[3] = {0.0f, 1.0f, -1.0f}, gy[3];
  kernels::GeluForward(gx, gy, 3);
  EXPECT_FLOAT_EQ(gy[0], 0.0f);
  EXPECT_NEAR(gy[1], 0.8411920f, 1e-6);  // 0.5*(1+tanh(sqrt(2/pi)*1.044715))
  EXPECT_NEAR(gy[2], -0.1588080f, 1e-6);
  kernels::SoftmaxRows(x.data(), y.data(), rows, cols);
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) sum += y[r * cols + c];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  // Adam step 1 with bias correction moves each parameter by lr * sign(grad) (for eps -> 0).
  float p[2] = {1.0f, 1.0f}, gr[2] = {0.5f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
  kernels::AdamStep(p, gr, m, v, 2, 0.01f, 0.9f, 0.999f, 1e-12f, 1);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], 1.01f, 1e-6);
}

TEST(Gpu, CudaKernelsMatchCpuReferences) {
  std::string why;
  if (!cuda::BuiltWithCuda() || !cuda::Usable(&why)) {
    GTEST_SKIP() << "no usable GPU here: " << (why.empty() ? "no CUDA backend in this build" : why);
  }
  EXPECT_EQ(cuda::VerifyKernels(), "ok");
}

std::string Mpirun(int np) {
  return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " " + SHARDCAST_BINARY;
}

int RunShell(const std::string& cmd) {
  const int st = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(CalibrateCpu, TwoRanksWriteAProfileThatSimulateAccepts) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "cpu_profile.json").string();
  std::filesystem::remove(out);
  ASSERT_EQ(RunShell(Mpirun(2) + " calibrate --backend cpu --quick --out " + out), 0);
  HardwareProfile p = LoadProfile(out);
  EXPECT_EQ(p.kind, "measured");
  ASSERT_TRUE(p.machine.has_value());
  EXPECT_EQ(p.machine->devices_per_node * p.machine->nodes, 2);
  EXPECT_GT(p.gemm_peak_tflops, 0);
  // all-reduce, all-gather, reduce-scatter, all-to-all, send/recv over the one group of 2.
  EXPECT_EQ(p.collective_tables.size(), 5u);
  auto r = testing::RunShardcast("simulate --model gpt3-125m --profile " + out + " --gpus 2 --tp 2 --mbs 1 --gbs 4 --seq 256 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
}

TEST(CalibrateCpu, ResumedSweepEqualsUninterrupted) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "fake_a.json").string(), b = (dir / "fake_b.json").string();
  std::filesystem::remove(a);
  std::filesystem::remove(b);
  std::filesystem::remove(b + ".partial.json");
  ASSERT_EQ(RunShell(Mpirun(2) + " calibrate --backend cpu --quick --fake-timer --out " + a), 0);
  ASSERT_EQ(RunShell(Mpirun(2) + " calibrate --backend cpu --quick --fake-timer --stop-after attention --out " + b), 0);
  EXPECT_FALSE(std::filesystem::exists(b));
  EXPECT_TRUE(std::filesystem::exists(b + ".partial.json"));
  ASSERT_EQ(RunShell(Mpirun(2) + " calibrate --backend cpu --quick --fake-timer --resume --out " + b), 0);
  EXPECT_FALSE(std::filesystem::exists(b + ".partial.json"));
  EXPECT_EQ(ReadTextFile(a), ReadTextFile(b));
  EXPECT_NE(LoadProfile(a).source.find("SYNTHETIC: timings from --fake-timer formulas"), std::string::npos);
}

// A resume file from another sweep names what differs; one whose groups were edited is refused
// with the file named (it used to give a bare library exception, or write a profile that did not
// load).
TEST(CalibrateCpu, ResumeFileIsCheckedLikeInput) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "resume_checked.json").string(), partial = out + ".partial.json";
  std::filesystem::remove(out);
  std::filesystem::remove(partial);
  ASSERT_EQ(RunShell(Mpirun(1) + " calibrate --backend cpu --quick --fake-timer --stop-after memory --out " + out), 0);
  const std::string saved = ReadTextFile(partial);
  // Without --quick: another sweep, named setting by setting (1 rank, so no sweep starts).
  const auto full = testing::RunCommand(Mpirun(1) + " calibrate --backend cpu --fake-timer --resume --out " + out);
  EXPECT_EQ(full.exit_code, 2);
  EXPECT_NE(full.out.find(partial + ": partial results of a different sweep (quick saved true, now false)"),
            std::string::npos)
      << full.out;
  // Edited groups are refused naming the field (CheckPartialGroups, which --resume runs when it reads
  // the file, before anything more is measured or the file rewritten).
  Json edited = Json::parse(saved);
  edited["groups"]["gemm"] = "oops";
  EXPECT_EQ(testing::InputErrorOf([&] { CheckPartialGroups(edited["groups"], "p.json"); }),
            "p.json: /groups/gemm: got \"oops\", expected a non-empty array of samples, as the measurement wrote it");
  edited["groups"]["gemm"] = Json::array();
  EXPECT_NE(testing::InputErrorOf([&] { CheckPartialGroups(edited["groups"], "p.json"); })
                .find("p.json: /groups/gemm: got [], expected a non-empty array of samples"),
            std::string::npos);
  edited = Json::parse(saved);
  edited["groups"]["extra"] = Json::object();
  EXPECT_NE(testing::InputErrorOf([&] { CheckPartialGroups(edited["groups"], "p.json"); })
                .find("/groups/extra: got {}, expected a group of the sweep"),
            std::string::npos);
  EXPECT_NO_THROW(CheckPartialGroups(Json::parse(saved)["groups"], "p.json"));
  edited = Json::parse(saved);
  edited["groups"]["memory"][0]["seconds"] = -1;
  testing::WriteTemp("resume_checked.json.partial.json", edited.dump());
  const auto negative = testing::RunCommand(Mpirun(1) + " calibrate --backend cpu --quick --fake-timer --resume --out " + out);
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.out.find(partial + ": /groups/memory/0/seconds: got -1, expected a positive number"),
            std::string::npos)
      << negative.out;
  EXPECT_EQ(ReadTextFile(partial), edited.dump());  // not rewritten
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CalibrateCpu, BadInput) {
  auto r = testing::RunShardcast("calibrate --backend cuda --out /tmp/shardcast_tests/x.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--backend cuda"), std::string::npos) << r.err;
  // A tensor-parallel size given for --model's shapes must divide its heads and query groups.
  const std::string tp3 = "calibrate --backend cpu --quick --fake-timer --model gpt3-125m --tp-values 1,5 --out " +
                          (shardcast::testing::TestTempDir() / "tp5.json").string();
  EXPECT_TRUE(testing::ExitsTwoWith(tp3, "command line: --tp-values: got 5, expected sizes that divide gpt3-125m's "
                                         "num_attention_heads = 12 and num_query_groups = 12"));
  // On two ranks, both fail at that check: one message from rank 0, no MPI_Abort.
  const auto two = testing::RunCommand("timeout 60 " + Mpirun(2) + " " + tp3);
  EXPECT_EQ(two.exit_code, 2) << two.out;
  std::size_t errors = 0;
  for (std::size_t at = two.out.find("shardcast: error:"); at != std::string::npos; at = two.out.find("shardcast: error:", at + 1)) {
    ++errors;
  }
  EXPECT_EQ(errors, 1u) << two.out;
  EXPECT_EQ(two.out.find("MPI_ABORT"), std::string::npos) << two.out;
  // --out is required (there is no default file to replace silently) and checked before the sweep:
  // a folder, a folder that is a file, or a folder that cannot be written.
  const auto folder = shardcast::testing::TestTempDir() / "calibrate_out_folder";
  std::filesystem::create_directories(folder / "profile.json");
  const auto none = testing::RunCommand("cd " + folder.string() + " && " + SHARDCAST_BINARY + " calibrate --backend cpu --quick");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.out.find("--out: missing, expected the profile file to write"), std::string::npos) << none.out;
  const auto cal = testing::RunCommand("cd " + folder.string() + " && " + SHARDCAST_BINARY +
                                       " calibrate --backend cpu --quick --out profile.json");
  EXPECT_EQ(cal.exit_code, 2);
  EXPECT_NE(cal.out.find("--out: got \"profile.json\", a folder"), std::string::npos) << cal.out;
  testing::WriteTemp("calibrate_plain_file", "x");
  const std::string under_file = (shardcast::testing::TestTempDir() / "calibrate_plain_file" / "cpu.json").string();
  const auto file_folder = testing::RunShardcast("calibrate --backend cpu --quick --out " + under_file);
  EXPECT_EQ(file_folder.exit_code, 2);
  EXPECT_NE(file_folder.err.find("calibrate_plain_file is a file; expected a file in an existing folder"), std::string::npos)
      << file_folder.err;
  // A folder that takes no new file, for root as well (a pseudo file system): found by trying.
  const auto proc = testing::RunShardcast("calibrate --backend cpu --quick --out /proc/cpu.json");
  EXPECT_EQ(proc.exit_code, 2);
  EXPECT_NE(proc.err.find("--out: got \"/proc/cpu.json\", whose folder /proc cannot be written ("), std::string::npos)
      << proc.err;
  if (::geteuid() != 0) {  // root writes anywhere
    const auto locked = shardcast::testing::TestTempDir() / "calibrate_read_only";
    std::filesystem::create_directories(locked);
    std::filesystem::permissions(locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    const auto ro = testing::RunShardcast("calibrate --backend cpu --quick --out " + (locked / "cpu.json").string());
    EXPECT_EQ(ro.exit_code, 2);
    EXPECT_NE(ro.err.find("cannot be written (Permission denied)"), std::string::npos) << ro.err;
    std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  }
  auto bad = testing::RunShardcast("profile show " + kNccl + "all_reduce.json");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("/format"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace shardcast
