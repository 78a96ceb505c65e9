#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/config_args.h"
#include "common/csv.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "planner/planner.h"
#include "planner/validate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

using testing::RunShardcast;

// The published validation (published_runs.csv with published_memory.csv) and the text of
// `shardcast validate --no-memory`, each computed once per process: the ValidatePublished tests
// read them and run as one ctest entry (tests/CMakeLists.txt), which saves re-running the whole
// validation per test (about 20 s each under the sanitizers).
const ValidationReport& Published() {
  static const ValidationReport rep = RunValidation(testing::SourceDir() + "/validation/published_runs.csv",
                                                    testing::SourceDir() + "/validation/published_memory.csv");
  return rep;
}

const testing::RunResult& PublishedText() {
  static const testing::RunResult out = RunShardcast("validate --no-memory");
  return out;
}

TEST(Csv, QuotedFieldsAndEmptyCells) {
  CsvTable t = ParseCsv("a,b,c\n1,\"x, y\",\n\"he said \"\"hi\"\"\",,3\n", "t.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.Get(0, "b"), "x, y");
  EXPECT_EQ(t.Get(0, "c"), "");
  EXPECT_EQ(t.Get(1, "a"), "he said \"hi\"");
  EXPECT_EQ(t.Get(1, "c"), "3");
  EXPECT_EQ(t.Get(1, "nope"), "");
  EXPECT_EQ(t.lines, (std::vector<std::size_t>{2, 3}));
  // CsvQuote writes what ParseCsv reads back.
  const std::string odd = "GPU type 'x' \"quoted\", with a comma";
  EXPECT_EQ(ParseCsv("a\n" + CsvQuote(odd) + "\n", "q.csv").Get(0, "a"), odd);
  // Each row's starting line, past blank lines and line breaks inside quoted fields.
  const CsvTable u = ParseCsv("a,b\n\n1,\"two\nlines\"\n\n3,4\n", "u.csv");
  ASSERT_EQ(u.rows.size(), 2u);
  EXPECT_EQ(u.lines, (std::vector<std::size_t>{3, 6}));
  try {
    ParseCsv("a,b\n1,\"open\n", "bad.csv");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "bad.csv:2: unterminated quoted field (expected a closing \")");
  }
  // A row with a field missing or extra would shift its cells into the wrong columns.
  EXPECT_EQ(testing::InputErrorOf([] { ParseCsv("a,b,c\n1,2,3\n\n4,5\n", "short.csv"); }),
            "short.csv:4: got 2 fields, expected 3 as in the header (a missing or extra comma?)");
  EXPECT_EQ(testing::InputErrorOf([] { ParseCsv("a,b\n1,\"x,y\",3\n", "long.csv"); }),
            "long.csv:2: got 3 fields, expected 2 as in the header (a missing or extra comma?)");
}

TEST(Validate, SmallFixture) {
  const std::string dir = testing::FixturesDir() + "/validation/";
  ValidationReport rep = RunValidation(dir + "runs_small.csv", "");
  ASSERT_EQ(rep.rows.size(), 3u);
  // Row 1: simulated, error = predicted / measured - 1.
  ASSERT_FALSE(rep.rows[0].skipped) << rep.rows[0].skip_reason;
  ASSERT_TRUE(rep.rows[0].step_time_error.has_value());
  EXPECT_DOUBLE_EQ(*rep.rows[0].step_time_error, *rep.rows[0].predicted_step_time_s / 1.10 - 1.0);
  EXPECT_EQ(rep.rows[0].config.recompute, Recompute::kSelective);
  EXPECT_TRUE(rep.rows[0].config.sequence_parallel);
  // Row 2: an unknown GPU type is skipped with the reason, never dropped.
  EXPECT_TRUE(rep.rows[1].skipped);
  EXPECT_EQ(rep.rows[1].skip_reason, "GPU type 'TPU-v4' has no preset mapping (A100, H100, H800 and GB200 rows are modelled)");
  // Row 3: a measured OOM without a time (22B on 8 GPUs, no recompute, no SP: predicted not to
  // fit either).
  EXPECT_EQ(rep.summary.oom_rows, 1u);
  EXPECT_EQ(rep.summary.timed, 1u);
  EXPECT_EQ(rep.summary.skipped, 1u);
  EXPECT_NEAR(rep.summary.step_time_mape, std::fabs(*rep.rows[0].step_time_error), 1e-15);
  // Row 1 on a 40 GB A100 is simulated with the 40 GB preset: its predicted peak fits 80 GB but
  // not the 40 GB part's memory.
  std::string text = ReadTextFile(dir + "runs_small.csv");
  const auto gpu_at = text.find("A100-SXM4-80GB", text.find("\n1,"));
  ASSERT_NE(gpu_at, std::string::npos);
  text.replace(gpu_at, 14, "A100-SXM4-40GB");
  const ValidationReport small = RunValidation(testing::WriteTemp("runs_40gb.csv", text), "");
  ASSERT_FALSE(small.rows[0].skipped) << small.rows[0].skip_reason;
  const double peak = *rep.rows[0].predicted_peak_memory_bytes;
  ASSERT_TRUE(rep.rows[0].predicted_fits);
  ASSERT_GT(peak, LoadCluster("dgx-a100-40gb").gpu.memory_bytes);
  EXPECT_FALSE(small.rows[0].predicted_fits);
  EXPECT_DOUBLE_EQ(*small.rows[0].predicted_peak_memory_bytes, peak);  // same run, another GPU's memory
}

// Bad CSVs name the file, the missing column or the row and column with the value; a memory
// file has no row_id, so its rows are named by line (the header is line 1).
TEST(Validate, BadCsvsNameFileRowAndColumn) {
  using testing::InputErrorOf;
  const std::string runs = testing::FixturesDir() + "/validation/runs_small.csv";
  const std::string wrong = testing::WriteTemp("memory_wrong_header.csv", "foo,bar\n1,2\n");
  EXPECT_EQ(InputErrorOf([&] { RunValidation(runs, wrong); }).rfind(wrong + ": header: unknown column 'foo', expected the "
                                                                    "columns of validation/README.md: model, num_layers", 0),
            0u);
  const std::string short_header = testing::WriteTemp("memory_short_header.csv", "model,tp\nx,1\n");
  EXPECT_EQ(InputErrorOf([&] { RunValidation(runs, short_header); }), short_header + ": header: missing column 'num_layers'");
  // A memory point's quantity, setting, value and configuration are checked, not passed over or
  // compared as they come.
  const std::string mem_header =
      "model,num_layers,hidden_size,num_heads,seq_len,micro_batch_size,tp,pp,gpu_type,quantity,setting,value_gib\n";
  auto mem = [&](const std::string& name, const std::string& line) {
    return testing::WriteTemp(name, mem_header + line + "\n");
  };
  const std::string quantity = mem("memory_quantity.csv", "M,48,6144,64,2048,4,8,1,,params_per_gpu,any,45.56");
  EXPECT_EQ(InputErrorOf([&] { RunValidation(runs, quantity); }),
            quantity + ": line 2, column quantity: got \"params_per_gpu\", expected params_and_optimizer_per_gpu, "
                       "activations_per_gpu, activations_relative_to_none");
  const std::string setting = mem("memory_setting.csv", "M,48,6144,64,2048,4,8,1,,activations_per_gpu,whatever,9.5");
  EXPECT_NE(InputErrorOf([&] { RunValidation(runs, setting); })
                .find(", column setting: got \"whatever\", expected for activations_per_gpu: no recompute no SP, SP only"),
            std::string::npos);
  const std::string negative_gib = mem("memory_negative.csv", "M,48,6144,64,2048,4,8,1,,activations_per_gpu,SP only,-1");
  EXPECT_NE(InputErrorOf([&] { RunValidation(runs, negative_gib); }).find(", column value_gib: got \"-1\", expected a "
                                                                          "positive number"),
            std::string::npos);
  const std::string v100 = mem("memory_v100.csv", "M,48,6144,64,2048,4,8,1,V100,params_and_optimizer_per_gpu,any,45.56");
  EXPECT_NE(InputErrorOf([&] { RunValidation(runs, v100); }).find("column gpu_type: got \"V100\", expected empty or an A100"),
            std::string::npos);
  const std::string tp3 = mem("memory_tp3.csv", "M,48,6144,64,2048,4,3,1,,params_and_optimizer_per_gpu,any,45.56");
  EXPECT_NE(InputErrorOf([&] { RunValidation(runs, tp3); }).find(tp3 + ": line 2: tp 3 and pp 1 cannot run this model ("),
            std::string::npos);
  // A point of one's own: headed as the user's file, and a point no S3 run matches says what was
  // assumed for its global batch and virtual stages.
  const std::string own = mem("memory_own.csv", "Mine,24,2048,16,2048,1,2,1,,params_and_optimizer_per_gpu,any,10");
  const ValidationReport own_rep = RunValidation(runs, own);
  ASSERT_EQ(own_rep.memory_points.size(), 1u);
  EXPECT_EQ(own_rep.memory_points[0].assumption,
            "global batch 8 (micro-batch x pp x 8), no virtual stages: no S3 run of 24 layers at tp 2 pp 1 in " + runs);
  const auto own_cli = RunShardcast("validate --runs " + runs + " --memory " + own);
  EXPECT_EQ(own_cli.exit_code, 0) << own_cli.err;
  EXPECT_NE(own_cli.out.find("Memory points of " + own + " (first pipeline stage"), std::string::npos) << own_cli.out;
  EXPECT_NE(own_cli.out.find("[1] Mine tp 2 pp 1: global batch 8"), std::string::npos) << own_cli.out;
  const std::string no_points = testing::WriteTemp("memory_no_points.csv", mem_header);
  EXPECT_EQ(InputErrorOf([&] { RunValidation(runs, no_points); }),
            no_points + ": no rows, expected at least one memory point under the header");
  const std::string bad = testing::WriteTemp(
      "memory_bad_value.csv",
      "model,num_layers,hidden_size,num_heads,seq_len,micro_batch_size,tp,pp,quantity,setting,value_gib\n"
      "Megatron-22B,4x8,6144,64,2048,4,8,1,params_and_optimizer_per_gpu,any,45.56\n");
  EXPECT_EQ(InputErrorOf([&] { RunValidation(runs, bad); }),
            bad + ": line 2, column num_layers: got \"4x8\", expected a positive integer up to " +
                std::to_string(kMaxLayers));
  // The fixture's first run with one cell changed, written under `name`.
  const CsvTable t = ReadCsvFile(runs);
  auto header = [&] {
    std::string h;
    for (std::size_t i = 0; i < t.header.size(); ++i) {
      if (i) h += ',';
      h += t.header[i];
    }
    return h + "\n";
  };
  auto row = [&](const std::string& col, const std::string& value) {
    std::vector<std::string> cells = t.rows[0];
    if (!col.empty()) cells.at(static_cast<std::size_t>(t.Column(col))) = value;
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      // Appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict) on const char* + std::string&&.
      if (i) line += ',';
      line += CsvQuote(cells[i]);
    }
    return line + "\n";
  };
  const std::string row_id = t.Get(0, "row_id");
  const std::string bad_tp = testing::WriteTemp("runs_bad_tp.csv", header() + row("tp", "eight"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(bad_tp, ""); }),
            bad_tp + ": row_id " + row_id + " (line 2), column tp: got \"eight\", expected a positive integer up to " +
                std::to_string(kMaxParallelSize));
  // Issue 14 (3): a size past its limit (its products could overflow) is refused like a typo.
  const std::string huge_tp = testing::WriteTemp("runs_huge_tp.csv", header() + row("tp", "4294967296"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(huge_tp, ""); }),
            huge_tp + ": row_id " + row_id + " (line 2), column tp: got \"4294967296\", expected a positive integer up "
                      "to " + std::to_string(kMaxParallelSize));
  // A measured time must be positive; a row_id must be unique.
  const std::string negative = testing::WriteTemp("runs_negative_time.csv", header() + row("iter_time_s", "-1"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(negative, ""); }),
            negative + ": row_id " + row_id +
                " (line 2), column iter_time_s: got \"-1\", expected a positive finite number or an empty cell");
  // Recompute, sequence parallelism and sharding take the values the README documents, not
  // anything (an unknown recompute used to be read as none).
  const std::string partial = testing::WriteTemp("runs_partial.csv", header() + row("recompute", "partial"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(partial, ""); }),
            partial + ": row_id " + row_id +
                " (line 2), column recompute: got \"partial\", expected empty, \"full...\", \"selective...\", \"none...\", "
                       "\"not stated...\"");
  const std::string sp = testing::WriteTemp("runs_sp.csv", header() + row("sequence_parallel", "true"));
  EXPECT_NE(InputErrorOf([&] { RunValidation(sp, ""); }).find("column sequence_parallel: got \"true\", expected empty, "
                                                               "\"no...\", \"yes...\""),
            std::string::npos);
  const std::string dup = testing::WriteTemp("runs_duplicate.csv", header() + row("", "") + row("", ""));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(dup, ""); }),
            dup + ": row_id " + row_id + " (line 3), column row_id: got \"" + row_id +
                "\" again (first on line 2), expected a unique row_id");
  // An outcome other than ok or OOM (a lowercase "oom" used to count as a run that fitted), a
  // header with no runs, and a CSV without the measured step's column are refused.
  const std::string oom = testing::WriteTemp("runs_oom.csv", header() + row("outcome", "oom"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(oom, ""); }),
            oom + ": row_id " + row_id + " (line 2), column outcome: got \"oom\", expected ok or OOM (ran out of memory)");
  const std::string empty = testing::WriteTemp("runs_empty.csv", header());
  EXPECT_EQ(InputErrorOf([&] { RunValidation(empty, ""); }), empty + ": no rows, expected at least one run under the header");
  std::string renamed = header();
  renamed.replace(renamed.find("iter_time_s"), 11, "iter_time");
  const std::string no_time = testing::WriteTemp("runs_no_time.csv", renamed + row("", ""));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(no_time, ""); }).rfind(no_time + ": header: unknown column 'iter_time' (did "
                                                                     "you mean 'iter_time_s'?)", 0),
            0u);
  std::string without_time = header();
  without_time.replace(without_time.find(",iter_time_s"), 12, "");
  std::string row_without_time = row("", "");
  {
    const CsvTable one = ParseCsv(header() + row_without_time, "x.csv");
    std::vector<std::string> cells = one.rows[0];
    cells.erase(cells.begin() + one.Column("iter_time_s"));
    row_without_time.clear();
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (i) row_without_time += ',';
      row_without_time += CsvQuote(cells[i]);
    }
    row_without_time += "\n";
  }
  const std::string missing_time = testing::WriteTemp("runs_missing_time.csv", without_time + row_without_time);
  EXPECT_EQ(InputErrorOf([&] { RunValidation(missing_time, ""); }), missing_time + ": header: missing column 'iter_time_s'");
  // A misspelled optional column would leave its rows on the defaults: refused like a typo'd value.
  std::string misspelled = header();
  misspelled.replace(misspelled.find("recompute"), 9, "recompte");
  const std::string typo = testing::WriteTemp("runs_typo_column.csv", misspelled + row("", ""));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(typo, ""); }).rfind(typo + ": header: unknown column 'recompte' (did you "
                                                                  "mean 'recompute'?)", 0),
            0u);
  // Precision and activation take the documented values; another exits 2 instead of reading as fp16.
  const std::string fp32 = testing::WriteTemp("runs_fp32.csv", header() + row("precision", "garbage"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(fp32, ""); }),
            fp32 + ": row_id " + row_id + " (line 2), column precision: got \"garbage\", expected empty, \"fp16...\", "
                   "\"bf16...\", \"amp_bf16...\", \"amp_fp16...\", \"mixed...\", \"fp8...\", \"FP8...\", \"MXFP8...\"");
  std::string with_activation = header(), relu_row = row("", "");
  with_activation.insert(with_activation.size() - 1, ",mlp_activation");
  relu_row.insert(relu_row.size() - 1, ",relu");
  const std::string relu = testing::WriteTemp("runs_relu.csv", with_activation + relu_row);
  EXPECT_NE(InputErrorOf([&] { RunValidation(relu, ""); }).find("column mlp_activation: got \"relu\", expected empty, "
                                                                "\"gelu...\", \"swiglu...\", \"squared-relu...\""),
            std::string::npos);
  // A precision the GPU does not run skips the row with the reason (it used to stop the whole run).
  const std::string fp8 = testing::WriteTemp("runs_fp8_a100.csv", header() + row("precision", "fp8"));
  const ValidationReport fp8_rep = RunValidation(fp8, "");
  ASSERT_EQ(fp8_rep.rows.size(), 1u);
  EXPECT_TRUE(fp8_rep.rows[0].skipped);
  EXPECT_NE(fp8_rep.rows[0].skip_reason.find("precision fp8 is not supported by the NVIDIA A100"), std::string::npos)
      << fp8_rep.rows[0].skip_reason;
  // Sizes that do not multiply to the GPUs are a typo, refused naming the row (not a skipped run).
  const std::string dp3 = testing::WriteTemp("runs_dp3.csv", header() + row("dp", "3"));
  EXPECT_EQ(InputErrorOf([&] { RunValidation(dp3, ""); }),
            dp3 + ": row_id " + row_id + " (line 2), columns tp, pp, cp, dp: got " + t.Get(0, "tp") + " x " +
                t.Get(0, "pp") + " x 1 x 3 = " + std::to_string(std::stoi(t.Get(0, "tp")) * std::stoi(t.Get(0, "pp")) * 3) +
                ", expected num_gpus = " + t.Get(0, "num_gpus"));
  // A trailing comma (a nameless, empty column) is accepted; a value under a nameless column is not.
  std::string trailing = header(), trailing_row = row("", "");
  trailing.insert(trailing.size() - 1, ",");
  trailing_row.insert(trailing_row.size() - 1, ",");
  EXPECT_EQ(RunValidation(testing::WriteTemp("runs_trailing.csv", trailing + trailing_row), "").rows.size(), 1u);
  std::string valued_row = row("", "");
  valued_row.insert(valued_row.size() - 1, ",x");
  const std::string valued = testing::WriteTemp("runs_nameless.csv", trailing + valued_row);
  EXPECT_NE(InputErrorOf([&] { RunValidation(valued, ""); }).find("a value \"x\" in column " +
                                                                  std::to_string(t.header.size() + 1) +
                                                                  ", which the header leaves unnamed"),
            std::string::npos);
  // Runs on different GPU types are not ranked against each other (one pair of the same model and
  // count on A100 and H100 used to give a tau).
  {
    std::vector<std::string> cells = t.rows[0];
    cells.at(static_cast<std::size_t>(t.Column("row_id"))) = "h100-copy";
    cells.at(static_cast<std::size_t>(t.Column("gpu_type"))) = "H100 80GB";
    std::string second;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (i) second += ',';
      second += CsvQuote(cells[i]);
    }
    const ValidationReport mixed =
        RunValidation(testing::WriteTemp("runs_two_gpus.csv", header() + row("", "") + second + "\n"), "");
    ASSERT_EQ(mixed.rows.size(), 2u);
    EXPECT_NE(mixed.rows[0].group, mixed.rows[1].group);
    EXPECT_EQ(mixed.summary.kendall_pairs, 0u);
  }
  // A spreadsheet's byte-order mark is not part of the first column; an empty file says so.
  const std::string bom = testing::WriteTemp("runs_bom.csv", "\xEF\xBB\xBF" + header() + row("", ""));
  EXPECT_EQ(RunValidation(bom, "").rows.size(), 1u);
  const std::string nothing = testing::WriteTemp("runs_nothing.csv", "");
  EXPECT_EQ(InputErrorOf([&] { RunValidation(nothing, ""); }),
            nothing + ": empty file, expected a CSV header line and rows under it");
}

// --csv has the JSON rows' fields; a skipped row leaves its predictions empty.
TEST(Validate, CsvHasTheJsonFieldsAndEmptyCellsForSkippedRows) {
  const std::string runs = testing::FixturesDir() + "/validation/runs_small.csv";
  const std::string out = (shardcast::testing::TestTempDir() / "validate_rows.csv").string();
  auto r = RunShardcast("validate --runs " + runs + " --no-memory --csv " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const CsvTable t = ReadCsvFile(out);
  ASSERT_EQ(t.rows.size(), 3u);
  for (const char* col : {"predicted_fits", "predicted_memory_at_risk", "predicted_mfu", "measured_step_time_derived",
                          "skip_reason", "fitted_constant"}) {
    EXPECT_GE(t.Column(col), 0) << col;
  }
  EXPECT_EQ(t.Get(1, "skipped"), "true");
  EXPECT_EQ(t.Get(1, "predicted_fits"), "");
  EXPECT_EQ(t.Get(1, "config"), "");
  EXPECT_EQ(t.Get(0, "skipped"), "false");
  EXPECT_EQ(t.Get(0, "predicted_fits"), "true");
  EXPECT_EQ(t.Get(0, "config"), RunValidation(runs, "").rows[0].config.Summary());
  EXPECT_EQ(t.Get(0, "log"), "");  // a published row has no log of its own
  // A flag about a measurement the row does not have: an empty cell, null in the JSON.
  const auto json = RunShardcast("validate --runs " + runs + " --no-memory --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json rows = Json::parse(json.out)["rows"];
  ASSERT_EQ(rows.size(), t.rows.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    for (const char* col : {"measured_step_time_derived", "measured_memory_is_reserved"}) {
      EXPECT_EQ(t.Get(i, col).empty(), rows[i][col].is_null()) << i << " " << col;
      if (!rows[i][col].is_null()) {
        EXPECT_EQ(t.Get(i, col), rows[i][col].get<bool>() ? "true" : "false") << i << col;
      }
    }
  }
}

TEST(Validate, ExplainKeepsWhatARowWasSimulatedWith) {
  const std::string dir = testing::FixturesDir() + "/validation/";
  ValidationReport rep = RunValidation(dir + "runs_small.csv", "", "1");
  ASSERT_TRUE(rep.explained.has_value());
  EXPECT_EQ(rep.explained->row_id, "1");
  EXPECT_EQ(rep.explained->model.hidden_size, 6144);
  EXPECT_EQ(rep.explained->cluster.gpu.name, "a100-sxm4-80gb");
  EXPECT_DOUBLE_EQ(rep.explained->result.step_time_s, *rep.rows[0].predicted_step_time_s);
  // Without --explain nothing is kept.
  EXPECT_FALSE(RunValidation(dir + "runs_small.csv", "").explained.has_value());
  // A skipped row or an unknown id is an input error that says why.
  try {
    RunValidation(dir + "runs_small.csv", "", "2");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the row was skipped: GPU type 'TPU-v4'"), std::string::npos) << e.what();
  }
  try {
    RunValidation(dir + "runs_small.csv", "", "99");
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("row_id '99' (--explain): no row has that row_id"), std::string::npos)
        << e.what();
  }
}

TEST(Validate, KendallTau) {
  // Group a: predicted order 1<2<3, measured 1<3<2: 2 concordant, 1 discordant -> 1/3.
  // Group b: one pair, concordant. Total: (3 - 1) / 4 = 0.5.
  std::size_t pairs = 0;
  const double tau = KendallTauWithinGroups({"a", "a", "a", "b", "b"}, {1, 2, 3, 5, 6}, {1, 3, 2, 7, 8}, &pairs);
  EXPECT_EQ(pairs, 4u);
  EXPECT_DOUBLE_EQ(tau, 0.5);
}

TEST(Validate, CliExplainPrintsTheRowAndItsOps) {
  const std::string runs = testing::FixturesDir() + "/validation/runs_small.csv";
  auto r = RunShardcast("validate --runs " + runs + " --no-memory --explain 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"Row 1 (T1)", "measured step 1.1 s", "Time breakdown", "Ops per micro-batch",
                        "one transformer layer", "qkv_proj"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(RunShardcast("validate --runs " + runs + " --no-memory --explain 99").exit_code, 2);
  // A number is a row id by its value: 01 is row 1.
  auto padded = RunShardcast("validate --runs " + runs + " --no-memory --explain 01");
  ASSERT_EQ(padded.exit_code, 0) << padded.err;
  EXPECT_NE(padded.out.find("Row 1 (T1)"), std::string::npos);
  auto j = RunShardcast("validate --runs " + runs + " --no-memory --explain 1 --json");
  EXPECT_EQ(j.exit_code, 2);
  EXPECT_NE(j.err.find("--explain: prints one row as text; not combined with --json"), std::string::npos) << j.err;
}

// The simulate command `validate --explain` prints reproduces its row: for every simulated row,
// the flags SimulateFlags writes, parsed as simulate parses them, give back the row's
// configuration, every switch simulate --json reports included.
TEST(ValidatePublished, EveryRowsConfigurationRoundTripsThroughSimulateFlags) {
  const ValidationReport& rep = Published();
  const Cluster cl = LoadCluster("dgx-a100");  // the config keys do not depend on the cluster
  int checked = 0;
  for (const auto& r : rep.rows) {
    if (r.skipped) continue;
    Model m;  // BuildConfig reads only the model's sequence length and layer count
    m.seq_length = r.config.seq_length;
    m.num_layers = 1 << 20;
    std::vector<std::string> unexpressed;
    const std::string flags = cli::SimulateFlags(r.config, m, r.gpus, &unexpressed);
    EXPECT_TRUE(unexpressed.empty()) << r.row_id << ": " << unexpressed.front();
    CLI::App app;
    cli::SimulateArgs a;
    cli::AddConfigOptions(&app, &a);
    app.parse(flags, false);
    const ParallelConfig back = cli::BuildConfig(a, m, r.gpus);
    EXPECT_EQ(ResultToJson(SimulationResult{}, m, back, cl, r.gpus)["config"],
              ResultToJson(SimulationResult{}, m, r.config, cl, r.gpus)["config"])
        << "row " << r.row_id << ": " << flags;
    ++checked;
  }
  EXPECT_EQ(checked, 86);
}

// "Fits" follows PyTorch's caching allocator (its replay): every run with a measured peak fits
// without releasing the cache, and each of BLOOM's nvidia-smi maxima (S12) is above the predicted
// reserved figure (docs/accuracy.md); GPT-NeoX-20B's "27GB per GPU" (row 221) is not, since
// DeepSpeed's step makes its fp32 gradient partition (DP1: all of it). SC21's 530B ZeRO-3 run on 640
// GPUs (row 14), at 99.3% of memory by its allocated peak, finds no room for a request in the
// replay and is predicted not to fit, with the allocator named in the reason.
TEST(ValidatePublished, FitsAndAtRiskFollowTheAllocatorReplay) {
  const ValidationReport& rep = Published();
  int n = 0;
  for (const auto& r : rep.rows) {
    if (r.skipped || !r.measured_peak_memory_bytes || !r.predicted_peak_memory_bytes) continue;
    ++n;
    EXPECT_TRUE(r.predicted_fits) << r.row_id;
    EXPECT_FALSE(r.predicted_at_risk) << r.row_id;
    ASSERT_TRUE(r.predicted_reserved_bytes) << r.row_id;
    EXPECT_GE(*r.predicted_reserved_bytes, *r.predicted_peak_memory_bytes) << r.row_id;
    if (r.source_id == "S12") {
      EXPECT_GT(*r.measured_peak_memory_bytes, *r.predicted_reserved_bytes) << r.row_id;
    }
  }
  EXPECT_EQ(n, 18);
  bool found = false;
  for (const auto& r : rep.rows) {
    if (r.row_id != "14") continue;
    found = true;
    EXPECT_FALSE(r.predicted_fits);
    ASSERT_TRUE(r.predicted_peak_memory_bytes);
    EXPECT_LT(*r.predicted_peak_memory_bytes, 80.0 * 1073741824.0);  // the allocated peak alone fits
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(rep.summary.oom_rows_at_risk, 0u);
  EXPECT_EQ(rep.summary.ok_rows_at_risk, 0u);
}

// A step time the CSV derives from a throughput is marked as such (SC21's TFLOP/s, MPT's
// tokens/s); BLOOM's logged iteration times and Korthikanti's reported ones are not.
TEST(ValidatePublished, DerivedStepTimesAreMarked) {
  const ValidationReport& rep = Published();
  std::map<std::string, bool> derived;
  for (const auto& r : rep.rows) derived[r.row_id] = r.step_time_derived;
  EXPECT_TRUE(derived.at("1"));
  EXPECT_TRUE(derived.at("205"));
  EXPECT_FALSE(derived.at("128"));
  EXPECT_FALSE(derived.at("32"));
  const auto& out = PublishedText();
  EXPECT_NE(out.out.find("3.53 s*"), std::string::npos) << out.out;
}

// The table's columns hold for every row: the configuration column is as wide as its longest
// text (SC21's ZeRO-3 rows, "TP1 PP1 DP1536 mbs1 rc-full Z3-ds21 fp16", are 40 characters), so
// each row's predicted step time ends where the header's "predicted" does.
TEST(ValidatePublished, TableColumnsHoldForLongConfigurations) {
  const auto& out = PublishedText();
  ASSERT_EQ(out.exit_code, 0) << out.err;
  std::istringstream lines(out.out);
  std::string line;
  std::size_t end = std::string::npos;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind(" row src", 0) == 0) {
      end = line.find("predicted") + std::string("predicted").size();
      continue;
    }
    if (end == std::string::npos || line.size() <= end || line.find("skipped:") != std::string::npos) continue;
    if (line.find(" / ") == std::string::npos) break;  // past the table
    ++rows;
    EXPECT_TRUE(line[end - 1] == 's' || line[end - 1] == '-') << line;
    EXPECT_EQ(line[end], ' ') << line;
  }
  EXPECT_GT(rows, 80);
}

// The summary keeps the rows a built-in constant was fitted on (the MPT-13B step times for the
// Hopper GEMM ratio; the 22B runs' per-layer times for the A100 ratio and the attention core)
// apart from the held-out rest; both MAPEs recomputed here from the rows.
TEST(ValidatePublished, HeldOutRowsAreReportedApartFromFittedRows) {
  const std::string dir = testing::SourceDir() + "/validation/";
  const ValidationReport& rep = Published();
  std::vector<std::string> fitted;
  double held_sum = 0, fit_sum = 0, held_max = 0;
  std::size_t held_n = 0, fit_n = 0;
  for (const auto& r : rep.rows) {
    if (!r.fitted_constant.empty()) fitted.push_back(r.row_id);
    if (!r.step_time_error) continue;
    const double e = std::fabs(*r.step_time_error);
    if (r.fitted_constant.empty()) {
      held_sum += e;
      held_max = std::max(held_max, e);
      ++held_n;
    } else {
      fit_sum += e;
      ++fit_n;
    }
  }
  // The two profile constants' rows, and the S7 rows whose FLOP convention was chosen with them.
  EXPECT_EQ(fitted, (std::vector<std::string>{"11", "12", "13", "32", "33", "211", "212", "213", "68", "69", "70",
                                              "71", "72", "73", "74", "75", "76"}));
  const auto& s = rep.summary;
  ASSERT_EQ(s.fitted_timed, 17u);
  EXPECT_EQ(s.held_out_timed + s.fitted_timed, s.timed);
  EXPECT_EQ(held_n, s.held_out_timed);
  EXPECT_NEAR(s.held_out_mape, held_sum / static_cast<double>(held_n), 1e-12);
  EXPECT_NEAR(s.fitted_mape, fit_sum / static_cast<double>(fit_n), 1e-12);
  EXPECT_DOUBLE_EQ(s.held_out_max_abs_error, held_max);
  // The overall MAPE is the row-weighted mean of the two parts.
  EXPECT_NEAR(s.step_time_mape * static_cast<double>(s.timed),
              s.held_out_mape * static_cast<double>(held_n) + s.fitted_mape * static_cast<double>(fit_n), 1e-9);
  // The fitted runs are named by content, not row number: a renumbered copy still matches.
  std::ifstream in(dir + "published_runs.csv");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find("\n211,S14,");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 4, "\n9211");
  const std::string copy = testing::WriteTemp("runs_renumbered.csv", text);
  bool renumbered_fit = false;
  for (const auto& r : RunValidation(copy, "").rows) {
    if (r.row_id == "9211") renumbered_fit = !r.fitted_constant.empty();
  }
  EXPECT_TRUE(renumbered_fit);
  const auto& out = PublishedText();
  EXPECT_NE(out.out.find("ok / fits  [fit]"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("held out (63 rows"), std::string::npos) << out.out;
}

// BLOOM's contradictory pairs (issue 5) are marked low-confidence in the CSV; the summary gives the
// MAPE without them, and the rank correlation of throughput (tokens per second) per group of runs
// with the same model and GPU count.
TEST(ValidatePublished, LowConfidenceRowsApartAndKendallTauPerGroup) {
  const ValidationReport& rep = Published();
  const auto& s = rep.summary;
  EXPECT_EQ(s.low_confidence_rows, (std::vector<std::string>{"128", "130", "132", "134"}));
  double sum = 0, held = 0, worst = 0;
  std::size_t n = 0, held_n = 0;
  std::map<std::string, std::vector<std::size_t>> by_group;
  std::vector<double> pred, meas;
  std::vector<std::string> conf_groups;
  std::vector<double> conf_pred, conf_meas;
  for (const auto& r : rep.rows) {
    if (!r.step_time_error) continue;
    by_group[r.group].push_back(pred.size());
    // Throughput in tokens per second (a group's runs may differ in batch or sequence).
    const double tokens =
        static_cast<double>(r.config.global_batch_size) * static_cast<double>(r.config.seq_length);
    pred.push_back(tokens / *r.predicted_step_time_s);
    meas.push_back(tokens / *r.measured_step_time_s);
    if (r.low_confidence) continue;
    conf_groups.push_back(r.group);
    conf_pred.push_back(pred.back());
    conf_meas.push_back(meas.back());
    const double e = std::fabs(*r.step_time_error);
    sum += e;
    worst = std::max(worst, e);
    ++n;
    if (r.fitted_constant.empty()) {
      held += e;
      ++held_n;
    }
  }
  EXPECT_EQ(s.confident_timed + s.low_confidence_rows.size(), s.timed);
  EXPECT_NEAR(s.confident_mape, sum / static_cast<double>(n), 1e-12);
  EXPECT_NEAR(s.confident_held_out_mape, held / static_cast<double>(held_n), 1e-12);
  EXPECT_DOUBLE_EQ(s.confident_max_abs_error, worst);
  // Each group's tau is the within-group tau of its own rows; groups of one row have no pair.
  std::size_t pairs_total = 0;
  for (const auto& [g, idx] : by_group) {
    std::vector<std::string> gs(idx.size(), g);
    std::vector<double> p, q;
    for (const std::size_t i : idx) {
      p.push_back(pred[i]);
      q.push_back(meas[i]);
    }
    std::size_t pairs = 0;
    const double tau = KendallTauWithinGroups(gs, p, q, &pairs);
    pairs_total += pairs;
    if (pairs == 0) {
      EXPECT_EQ(s.kendall_by_group.count(g), 0u) << g;
      continue;
    }
    ASSERT_EQ(s.kendall_by_group.count(g), 1u) << g;
    EXPECT_DOUBLE_EQ(s.kendall_by_group.at(g).first, tau) << g;
    EXPECT_EQ(s.kendall_by_group.at(g).second, pairs) << g;
  }
  EXPECT_EQ(pairs_total, s.kendall_pairs);
  // Without the low-confidence rows: the same statistic over the rest; BLOOM-181B's group loses
  // the four rows' pairs (10 rows, 45 pairs -> 6 rows, 15 pairs).
  std::size_t conf_pairs = 0;
  EXPECT_DOUBLE_EQ(s.confident_kendall_tau, KendallTauWithinGroups(conf_groups, conf_pred, conf_meas, &conf_pairs));
  EXPECT_EQ(s.confident_kendall_pairs, conf_pairs);
  EXPECT_EQ(s.kendall_pairs - s.confident_kendall_pairs, 45u - 15u);
  // Rows 128 and 130 (BLOOM-181B, the same layout) ran 1,568 and 2,016 samples a step in 113 and
  // 124 s: by tokens per second 130 is the faster, by steps per second the slower.
  double tp128 = 0, tp130 = 0;
  for (const auto& r : rep.rows) {
    const double tokens =
        static_cast<double>(r.config.global_batch_size) * static_cast<double>(r.config.seq_length);
    if (r.row_id == "128") tp128 = tokens / *r.measured_step_time_s;
    if (r.row_id == "130") tp130 = tokens / *r.measured_step_time_s;
  }
  EXPECT_GT(tp130, tp128);
  const auto& out = PublishedText();
  EXPECT_NE(out.out.find("without the low-confidence rows: tau"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("without the 4 low-confidence rows (128, 130, 132, 134"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("ok / fits  [low confidence]"), std::string::npos);
  EXPECT_NE(out.out.find("BLOOM-prototype 181B @384"), std::string::npos);
}

// The caveat plan and capacity print for plans without recompute quotes the MPT-3B rows: measured
// over predicted step time 1.21-1.27 (21-27% longer), and the same table's MPT-1b and 7b runs
// (16-33%). Fails when the model moves them.
TEST(ValidatePublished, NoRecomputeCaveatQuotesTheMpt3bRows) {
  const ValidationReport& rep = Published();
  double lo = 1e9, hi = 0;
  for (const auto& r : rep.rows) {
    // The caveat names the PyTorch FSDP runs (S14); NeMo's Megatron-Core runs (S6, S7) are not in it.
    if (r.skipped || r.config.recompute != Recompute::kNone || !r.measured_step_time_s || r.source_id == "S6" ||
        r.source_id == "S7") {
      continue;
    }
    EXPECT_EQ(r.model, "MPT-3b") << r.row_id;
    const double longer = *r.measured_step_time_s / *r.predicted_step_time_s - 1;
    lo = std::min(lo, longer);
    hi = std::max(hi, longer);
  }
  EXPECT_EQ(std::lround(100 * lo), 21);
  EXPECT_EQ(std::lround(100 * hi), 27);
  // The caveat also quotes the range of NeMo's Megatron-Core rows without recompute (S6).
  double s6_lo = 1e9, s6_hi = -1e9;
  for (const auto& r : rep.rows) {
    if (r.skipped || r.source_id != "S6" || !r.step_time_error) continue;
    s6_lo = std::min(s6_lo, *r.step_time_error);
    s6_hi = std::max(s6_hi, *r.step_time_error);
  }
  EXPECT_EQ(std::lround(100 * s6_lo), -15);
  EXPECT_EQ(std::lround(100 * s6_hi), 8);
  // The same table's other runs without checkpointing (not in the validation set; also in
  // scripts/llm-foundry-crosscheck.py): MPT-7b (FULL_SHARD, micro-batch 6) and MPT-1b
  // (SHARD_GRAD_OP, micro-batch 12) at 128-512 GPUs, as rows like 217 with their shapes and the
  // published throughput (T/s) read back as the step: 16-33% longer.
  const CsvTable t = ReadCsvFile(testing::SourceDir() + "/validation/published_runs.csv");
  std::size_t r217 = t.rows.size(), r205 = t.rows.size();
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (t.Get(r, "row_id") == "217") r217 = r;
    if (t.Get(r, "row_id") == "205") r205 = r;
  }
  ASSERT_LT(r217, t.rows.size());
  ASSERT_LT(r205, t.rows.size());
  struct Run { const char* model; int layers, hidden, heads, gpus, mbs; double tokens_per_s; };
  const Run runs[] = {{"MPT-7b", 32, 4096, 32, 512, 6, 4951479}, {"MPT-7b", 32, 4096, 32, 256, 6, 2590548},
                      {"MPT-7b", 32, 4096, 32, 128, 6, 1340830}, {"MPT-1b", 24, 2048, 16, 512, 12, 20396905},
                      {"MPT-1b", 24, 2048, 16, 256, 12, 10894207}, {"MPT-1b", 24, 2048, 16, 128, 12, 5647854}};
  std::string text;
  for (std::size_t i = 0; i < t.header.size(); ++i) text += (i ? "," : "") + CsvQuote(t.header[i]);
  text += "\n";
  int id = 9000;
  for (const Run& run : runs) {
    std::map<std::string, std::string> v = {
        {"row_id", std::to_string(id++)}, {"model", run.model}, {"num_layers", std::to_string(run.layers)},
        {"hidden_size", std::to_string(run.hidden)}, {"ffn_hidden_size", std::to_string(4 * run.hidden)},
        {"num_heads", std::to_string(run.heads)}, {"num_kv_heads", std::to_string(run.heads)},
        {"num_gpus", std::to_string(run.gpus)}, {"dp", std::to_string(run.gpus)},
        {"micro_batch_size", std::to_string(run.mbs)}, {"global_batch_size", std::to_string(run.gpus * run.mbs)},
        {"tokens_per_s_per_gpu", ""}, {"tflops_per_gpu", ""}, {"mfu_pct", ""}, {"hfu_pct", ""}, {"params_B", ""},
        {"step_time_s_derived", fmt::format("{:.6f}", run.gpus * run.mbs * 2048.0 / run.tokens_per_s)}};
    if (run.hidden == 4096) v["dp_sharding"] = t.Get(r205, "dp_sharding");  // FULL_SHARD
    for (std::size_t i = 0; i < t.header.size(); ++i) {
      const auto it = v.find(t.header[i]);
      text += (i ? "," : "") + CsvQuote(it != v.end() ? it->second : t.rows[r217][i]);
    }
    text += "\n";
  }
  const ValidationReport others = RunValidation(testing::WriteTemp("mpt_large_scale_others.csv", text), "");
  double o_lo = 1e9, o_hi = 0;
  for (const auto& r : others.rows) {
    ASSERT_FALSE(r.skipped) << r.row_id << ": " << r.skip_reason;
    EXPECT_EQ(r.config.recompute, Recompute::kNone);
    EXPECT_EQ(r.config.zero_stage, r.model == "MPT-7b" ? 3 : 2) << r.row_id;
    const double longer = *r.measured_step_time_s / *r.predicted_step_time_s - 1;
    o_lo = std::min(o_lo, longer);
    o_hi = std::max(o_hi, longer);
  }
  EXPECT_EQ(others.rows.size(), 6u);
  EXPECT_EQ(std::lround(100 * o_lo), 16);
  EXPECT_EQ(std::lround(100 * o_hi), 33);
  ParallelConfig c;
  c.recompute = Recompute::kNone;
  EXPECT_NE(KnownBias(c).find("took 21-27% longer than predicted"), std::string::npos);
  EXPECT_NE(KnownBias(c).find("MPT-1b and 7b runs without it, 16-33%"), std::string::npos);
  EXPECT_NE(KnownBias(c).find("rows 56-67, were within -15% to +8%"), std::string::npos);
  c.recompute = Recompute::kFull;
  EXPECT_EQ(KnownBias(c), "");
}

// End to end on an H100 row (FlashAttention-2 rates) and a BLOOM row: write the model, run the
// printed command, get the same step time.
TEST(Validate, CliExplainPrintsARunnableSimulateCommand) {
  for (const char* row : {"217", "128"}) {
    const std::string model = testing::WriteTemp(std::string("explain_model_") + row + ".json", "");
    auto ex = RunShardcast(std::string("validate --no-memory --explain ") + row + " --write-model " + model);
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    const std::string key = "    shardcast simulate ";
    const auto at = ex.out.find(key);
    ASSERT_NE(at, std::string::npos) << ex.out;
    const std::string args = ex.out.substr(at + key.size(), ex.out.find('\n', at) - at - key.size());
    EXPECT_NE(args.find("--model " + model), std::string::npos) << args;
    auto sim = RunShardcast("simulate " + args);
    ASSERT_EQ(sim.exit_code, 0) << sim.err << args;
    auto step_line = [](const std::string& text) {
      const auto p = text.find("  step time ");
      return p == std::string::npos ? std::string() : text.substr(p, text.find('\n', p) - p);
    };
    ASSERT_FALSE(step_line(ex.out).empty()) << ex.out;
    EXPECT_EQ(step_line(sim.out), step_line(ex.out)) << row << ": " << args;
    if (std::string(row) == "217") {
      EXPECT_NE(args.find("--attention-kernel fa2"), std::string::npos) << args;
    }
  }
  auto bad = RunShardcast("validate --no-memory --write-model " + testing::WriteTemp("unused_model.json", ""));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--write-model: writes the model of the row named by --explain"), std::string::npos)
      << bad.err;
}

TEST(ValidatePublished, RowsAreMappedToWhatTheirFrameworkDid) {
  const ValidationReport& rep = Published();
  auto row = [&](const std::string& id) -> const ParallelConfig& {
    for (const auto& r : rep.rows) {
      if (r.row_id == id) return r.config;
    }
    ADD_FAILURE() << "no row " << id;
    return rep.rows.front().config;
  };
  // SC21's Megatron-LM (row 1: commit 6985e58; row 17: PTD-P): gradients reduced after the
  // backward, blocking pipeline transfers, synchronous TP input-gradient all-reduce.
  for (const char* id : {"1", "17"}) {
    EXPECT_FALSE(row(id).overlap_grad_reduce) << id;
    EXPECT_TRUE(row(id).p2p_blocking) << id;
    EXPECT_FALSE(row(id).async_tp_grad_reduce) << id;
  }
  // Korthikanti 2022: the asynchronous all-reduce.
  EXPECT_TRUE(row("32").async_tp_grad_reduce);
  EXPECT_TRUE(row("32").p2p_blocking);
  // Megatron-DeepSpeed: DeepSpeed optimizers, gathers inside the step, synchronous TP reduce.
  EXPECT_EQ(row("128").optimizer_impl, OptimizerImpl::kDeepSpeedZero);
  EXPECT_EQ(row("154").optimizer_impl, OptimizerImpl::kDeepSpeedBf16);
  for (const char* id : {"128", "154"}) {
    EXPECT_FALSE(row(id).overlap_param_gather) << id;
    EXPECT_FALSE(row(id).async_tp_grad_reduce) << id;
    EXPECT_TRUE(row(id).p2p_blocking) << id;
  }
  // Composer FSDP 'DEFAULT': bf16 parameter all-gathers, fp32 gradient reduction.
  EXPECT_EQ(row("217").zero_stage, 2);
  EXPECT_EQ(row("205").zero_stage, 3);
  EXPECT_EQ(row("217").param_gather_bytes, 2.0);
  EXPECT_TRUE(row("217").fp32_main_grads);
  EXPECT_TRUE(row("217").flash_attention);
  // NeMo 24.07 on Megatron-Core (S6): FP8 delayed scaling with FP8 parameters, sequence
  // parallelism and TP communication overlap where tp > 1, overlapped distributed optimizer,
  // non-blocking interleaved transfers, whole pipeline messages.
  for (const char* id : {"58", "62"}) {
    const ParallelConfig& c = row(id);
    EXPECT_EQ(c.precision, Precision::kFp8) << id;
    EXPECT_EQ(c.fp8_recipe, Fp8Recipe::kDelayed) << id;
    EXPECT_TRUE(c.fp8_param_gather) << id;
    EXPECT_TRUE(c.sequence_parallel && c.tp_comm_overlap) << id;
    EXPECT_TRUE(c.overlap_grad_reduce && c.overlap_param_gather) << id;
    EXPECT_FALSE(c.p2p_blocking) << id;
    EXPECT_FALSE(c.scatter_gather) << id;
    EXPECT_EQ(c.recompute, Recompute::kNone) << id;
    EXPECT_EQ(c.zero_stage, 1) << id;
  }
  EXPECT_FALSE(row("60").tp_comm_overlap);  // TP1: nothing to overlap
}

TEST(ValidatePublished, RegressionFenceOnPublishedRuns) {
  // A fence, not the goal (docs/accuracy.md has the targets and the current figures): fails if a
  // change makes the published-run predictions worse than they are today.
  const ValidationReport& rep = Published();
  const auto& s = rep.summary;
  std::cout << "step-time MAPE " << 100 * s.step_time_mape << "%, max " << 100 * s.step_time_max_abs_error
            << "%, memory MAPE " << 100 * s.memory_mape << "%, S1 " << 100 * s.mape_by_source.at("S1").first
            << "%, S3 " << 100 * s.mape_by_source.at("S3").first << "%\n";
  // Row 152 gives no head count; every other row is simulated (S7's micro-batch size assumed 1).
  EXPECT_EQ(s.skipped, 1u);
  EXPECT_GE(s.timed, 62u);
  EXPECT_LT(s.step_time_mape, 0.075);
  EXPECT_LT(s.held_out_mape, 0.075);  // 6.5% on the 59 rows no constant was fitted on
  // S1: 2.2% over SC21's Megatron rows; its DeepSpeed ZeRO-3 rows (11-16, issue 19) are -17% to
  // +4% (rows 11-13 fitted the list-collective host time), which lifts the source's MAPE to 5.1%.
  EXPECT_LT(s.mape_by_source.at("S1").first, 0.055);
  for (const auto& r : rep.rows) {
    if (r.source_id != "S1" || !r.step_time_error) continue;
    const bool zero3 = r.config.zero_stage == 3;
    EXPECT_LT(std::fabs(*r.step_time_error), zero3 ? 0.17 : 0.05) << r.row_id;
  }
  EXPECT_LT(s.mape_by_source.at("S3").first, 0.03);
  // MPT: 7.2% since the rows gather bf16 parameters (Composer's DEFAULT) bucket by bucket; the
  // MPT-3B rows carry it (docs/accuracy.md).
  EXPECT_LT(s.mape_by_source.at("S14").first, 0.08);
  EXPECT_LT(s.memory_mape, 0.13);
  // Two misses: Nemotron-340B (row 65, NeMo FP8 on 128 H100) is predicted not to fit (86.7 GiB),
  // its source states neither recompute nor the optimizer sharding; SC21's 530B ZeRO-3 run on
  // 640 GPUs (row 14) fits by its allocated peak (99.3%) but not in the allocator's replay
  // (docs/accuracy.md).
  EXPECT_EQ(s.ok_rows_predicted_fit, s.ok_rows - 2);
  // NeMo's FP8 runs on DGX H100 (issue 15's target: at most 8%).
  EXPECT_LT(s.mape_by_source.at("S6").first, 0.08);
  EXPECT_EQ(s.mape_by_source.at("S6").second, 12u);
  // NeMo's long-sequence runs (S7, context parallelism 1-32; issue 16's targets: MAPE at most 10%,
  // the TFLOP/s trend over the series with Kendall tau at least 0.6).
  EXPECT_EQ(s.mape_by_source.at("S7").second, 9u);
  EXPECT_LT(s.mape_by_source.at("S7").first, 0.10);
  EXPECT_GE(s.tflops_tau_by_source.at("S7").first, 0.6);
  EXPECT_GE(s.oom_rows_predicted_oom, 1u);
  EXPECT_LT(s.mape_by_source.at("S12").first, 0.11);
  // Korthikanti's figure points (parameters, activations, fractions) each within 3%.
  for (const auto& p : rep.memory_points) EXPECT_LT(std::fabs(p.error), 0.03) << p.model << " " << p.setting;
}

// S7's TFLOP/s are read in the causal convention, a choice made with those rows: the fit note
// quotes what the full-matrix reading gives, recomputed here from a copy of the CSV read that way.
TEST(ValidatePublished, LongSequenceConventionNoteQuotesTheFullMatrixReading) {
  const std::string dir = testing::SourceDir() + "/validation/";
  std::ifstream in(dir + "published_runs.csv", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string causal =
      "causal (the attention s^2 term halved) - inferred; the source does not say: a full-matrix count would put causal "
      "flash attention at 1M tokens at about 32% of the bf16 peak (docs/accuracy.md)";
  std::size_t n = 0;
  for (std::size_t at = text.find(causal); at != std::string::npos; at = text.find(causal, at)) {
    text.replace(at, causal.size(), "full s^2 matrix (the reading under test)");
    ++n;
  }
  ASSERT_EQ(n, 9u);
  const ValidationReport full = RunValidation(testing::WriteTemp("runs_full_matrix.csv", text), "");
  const auto& s = full.summary;
  std::string note;
  for (const ValidationFit& f : FitsOnValidationRows()) {
    if (f.source_id == "S7") note = f.constant;
  }
  EXPECT_NE(note.find(fmt::format("MAPE {:.1f}%", 100 * s.mape_by_source.at("S7").first)), std::string::npos) << note;
  EXPECT_NE(note.find(fmt::format("tau of {:.2f}", s.tflops_tau_by_source.at("S7").first)), std::string::npos) << note;
  const ValidationReport& causal_rep = Published();
  for (const auto& r : causal_rep.rows) {
    if (r.source_id == "S7") {
      EXPECT_FALSE(r.fitted_constant.empty()) << r.row_id;
    }
  }
}

TEST(ValidatePublished, KorthikantiFigurePointsCountTransformerLayersOnly) {
  // Fig. 1's parameter-and-optimizer bar is 18 bytes per transformer-layer parameter of the first
  // stage: GPT-3 175B at TP8 PP8 holds 12 layers of (12 h^2 + 7 h) / 8 sharded weights and biases
  // plus 6 h replicated ones (two LayerNorms, the two row-parallel biases).
  const ValidationReport& rep = Published();
  const double h = 12288;
  const double expected_GiB = 18.0 * 12 * ((12 * h * h + 7 * h) / 8 + 6 * h) / 1073741824.0;
  bool seen = false, seen_full = false;
  for (const auto& p : rep.memory_points) {
    if (p.model == "GPT-3 175B" && p.quantity == "params_and_optimizer_per_gpu") {
      EXPECT_NEAR(p.predicted_GiB, expected_GiB, 1e-9);
      seen = true;
    }
    // Fig. 7: full recompute keeps 2sbh of the per-layer sbh(10 + 24/t + 5as/(ht)) (Table 2).
    if (p.model == "GPT-3 175B" && p.setting == "full recompute") {
      // 2sbh of the input over the layer's activations; the small remainder is the per-layer
      // dropout-free bias/LayerNorm bookkeeping of our op table (under 0.1%).
      EXPECT_NEAR(p.predicted_GiB, 2.0 / (10 + 24.0 / 8 + 5.0 * 96 * 2048 / (h * 8)), 1e-4);
      seen_full = true;
    }
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(seen_full);
}

// llm-foundry's benchmark MPTs keep MPTConfig's defaults (learned positions, biases): the table's
// NumParams column is the parameter count of that architecture, which validate must build.
// MPT-3b (row 217): 32 layers of 12h^2 + 13h (Wqkv, out_proj, up and down weights with their
// biases, two LayerNorms with bias), the tied 50368 x h embedding, 2048 x h learned positions and
// the final LayerNorm, at h = 2560: 2,651,837,440, as published.
TEST(Validate, MptRowsBuildTheBenchmarkedArchitecture) {
  std::ifstream in(testing::SourceDir() + "/validation/published_runs.csv");
  std::string header, line, row;
  std::getline(in, header);
  while (std::getline(in, line)) {
    if (line.rfind("217,", 0) == 0) row = line;
  }
  ASSERT_FALSE(row.empty());
  const ValidationReport rep = RunValidation(testing::WriteTemp("mpt3b_row.csv", header + "\n" + row + "\n"), "", "217");
  ASSERT_TRUE(rep.explained.has_value());
  const std::int64_t h = 2560, layers = 32, vocab = 50368, positions = 2048;
  const std::int64_t expected = layers * (12 * h * h + 13 * h) + vocab * h + positions * h + 2 * h;
  EXPECT_EQ(expected, 2651837440);  // the table's NumParams for MPT-3b
  const ParameterCounts p = rep.explained->model.Parameters();
  EXPECT_EQ(p.total, expected);
  EXPECT_EQ(p.position_embedding, positions * h);
  EXPECT_EQ(rep.explained->model.position_embedding, PositionEmbedding::kLearned);
  EXPECT_FALSE(rep.explained->model.dropout);
}

}  // namespace
}  // namespace shardcast
