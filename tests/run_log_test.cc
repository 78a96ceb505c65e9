// `validate --log`: users' own Megatron-LM and torchtitan logs (planner/run_log.h). The fixtures
// in tests/fixtures/logs are written by us in the two frameworks' formats; every expected figure
// is derived here from the numbers in them.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <sstream>

#include "common/csv.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "models/loader.h"
#include "planner/run_log.h"
#include "planner/validate.h"
#include "report/validate_report.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

const std::string kLogs = testing::FixturesDir() + "/logs/";
const std::string kMegatron = kLogs + "megatron_llama3_8b_tp2_pp2.log";
const std::string kTitan = kLogs + "torchtitan_llama3_8b_fsdp8.log";

double Mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

/// The configuration the Megatron-LM fixture's argument dump describes.
ParallelConfig MegatronFixtureConfig() {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.micro_batch_size = 1;
  c.global_batch_size = 32;
  c.seq_length = 8192;
  c.sequence_parallel = true;
  c.recompute = Recompute::kNone;
  c.zero_stage = 1;
  c.precision = Precision::kBf16;
  c.scatter_gather = false;
  c.p2p_blocking = true;
  return c;
}

TEST(RunLog, MegatronLogGivesTheModelConfigurationAndMeasuredStep) {
  const LoggedRun r = ReadTrainingLog(kMegatron, {});
  EXPECT_EQ(r.format, "megatron");
  EXPECT_EQ(r.gpus, 8);
  // The argument dump is Llama-3-8B's shape: the same parameters as the preset.
  const Model preset = LoadModel("llama3-8b");
  EXPECT_EQ(r.model.num_layers, 32);
  EXPECT_EQ(r.model.num_query_groups, 8);
  EXPECT_EQ(r.model.vocab_size, 128256);
  EXPECT_EQ(r.model.Parameters().total, preset.Parameters().total);
  EXPECT_EQ(r.model.name, "llama3-8b");  // the same shape as the preset: named after it
  EXPECT_FALSE(r.model.tie_embeddings);
  const ParallelConfig want = MegatronFixtureConfig();
  EXPECT_EQ(r.config.tp, want.tp);
  EXPECT_EQ(r.config.pp, want.pp);
  EXPECT_EQ(r.config.dp, want.dp);
  EXPECT_EQ(r.config.vp, 1);
  EXPECT_EQ(r.config.micro_batch_size, want.micro_batch_size);
  EXPECT_EQ(r.config.global_batch_size, want.global_batch_size);
  EXPECT_EQ(r.config.seq_length, want.seq_length);
  EXPECT_TRUE(r.config.sequence_parallel);
  EXPECT_EQ(r.config.recompute, Recompute::kNone);
  EXPECT_EQ(r.config.zero_stage, 1);
  EXPECT_TRUE(r.config.overlap_grad_reduce);
  EXPECT_TRUE(r.config.overlap_param_gather);
  EXPECT_EQ(r.config.precision, Precision::kBf16);
  EXPECT_TRUE(r.config.flash_attention);
  // Five iteration lines: the first (warm-up) is left out of the mean.
  ASSERT_EQ(r.step_times_s.size(), 5u);
  EXPECT_DOUBLE_EQ(r.measured_step_time_s, Mean({4.1027, 4.0981, 4.1104, 4.1019}));
  // The larger of the two ranks' max allocated, in MiB.
  ASSERT_TRUE(r.max_allocated_bytes.has_value());
  EXPECT_DOUBLE_EQ(*r.max_allocated_bytes, 52110.20 * 1048576.0);
  EXPECT_DOUBLE_EQ(*r.max_reserved_bytes, 58000.0 * 1048576.0);
}

TEST(RunLog, TorchtitanLogReadsItsJobConfigurationAndTokensPerSecond) {
  LogDefaults d;
  d.gpus = 8;  // data_parallel_shard_degree -1
  const LoggedRun r = ReadTrainingLog(kTitan, d);
  EXPECT_EQ(r.format, "torchtitan");
  EXPECT_EQ(r.model.name, LoadModel("llama3-8b").name);
  EXPECT_EQ(r.gpus, 8);
  EXPECT_EQ(r.config.dp, 8);
  EXPECT_EQ(r.config.zero_stage, 3);  // FSDP2 over the 8 shards
  // fp32 parameters whose shard is the master: 16 bytes a parameter over the 8 shards.
  EXPECT_EQ(r.config.optimizer_impl, OptimizerImpl::kTorchFsdp);
  EXPECT_DOUBLE_EQ(BytesPerParam(r.config).total(), 16.0 / 8);
  EXPECT_TRUE(r.config.fp32_main_grads);  // mixed_precision_reduce float32 (its default)
  const std::string mp = "\"mixed_precision_param\": \"bfloat16\"";
  std::string reduce = ReadTextFile(kTitan);
  ASSERT_NE(reduce.find(mp), std::string::npos);
  reduce.replace(reduce.find(mp), mp.size(), mp + ",\n[rank0]:    \"mixed_precision_reduce\": \"bfloat16\"");
  const LoggedRun rb = ParseTrainingLog(reduce, "t.log", d);
  EXPECT_FALSE(rb.config.fp32_main_grads);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(rb.config), 2.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(rb.config).total(), 16.0 / 8);  // the shard stays fp32
  std::string odd = ReadTextFile(kTitan);
  odd.replace(odd.find(mp), mp.size(), mp + ",\n[rank0]:    \"mixed_precision_reduce\": \"float16\"");
  EXPECT_NE(testing::InputErrorOf([&] { ParseTrainingLog(odd, "t.log", d); })
                .find("mixed_precision_reduce: got \"float16\", expected float32 or bfloat16"),
            std::string::npos);
  EXPECT_EQ(r.config.cross_entropy, CrossEntropyImpl::kTorch);  // F.cross_entropy on fp32 logits
  EXPECT_EQ(r.config.micro_batch_size, 2);
  EXPECT_EQ(r.config.global_batch_size, 16);  // local 2 x dp 8
  EXPECT_EQ(r.config.seq_length, 8192);
  EXPECT_EQ(r.config.recompute, Recompute::kFull);
  // Step time = tokens per step (the log's 131072) / (GPUs x tokens per second per GPU).
  ASSERT_EQ(r.step_times_s.size(), 4u);
  const auto step = [](double tps) { return 131072.0 / (8.0 * tps); };
  EXPECT_DOUBLE_EQ(r.step_times_s[0], step(512));
  EXPECT_DOUBLE_EQ(r.measured_step_time_s, Mean({step(6234), step(6251), step(6240)}));
  EXPECT_FALSE(r.max_allocated_bytes.has_value());
  EXPECT_DOUBLE_EQ(*r.max_reserved_bytes, 61.60 * 1073741824.0);
}

TEST(RunLog, ValidatePredictsWhatSimulateDoesForTheLoggedConfiguration) {
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  LogDefaults d;
  d.gpus = 8;
  const std::vector<LoggedRun> runs = {ReadTrainingLog(kMegatron, d), ReadTrainingLog(kTitan, d)};
  const ValidationReport rep = ValidateLoggedRuns(runs, cl, prof);
  ASSERT_EQ(rep.rows.size(), 2u);
  ASSERT_EQ(rep.logs.size(), 2u);
  const ValidationRow& m = rep.rows[0];
  ASSERT_FALSE(m.skipped) << m.skip_reason;
  EXPECT_EQ(m.source_id, "MLM");
  const SimulationResult want = Simulate(LoadModel("llama3-8b"), MegatronFixtureConfig(), cl, 8, prof);
  EXPECT_DOUBLE_EQ(*m.predicted_step_time_s, want.step_time_s);
  EXPECT_DOUBLE_EQ(*m.step_time_error, want.step_time_s / runs[0].measured_step_time_s - 1.0);
  EXPECT_DOUBLE_EQ(*m.memory_error, want.peak_memory_bytes / *runs[0].max_allocated_bytes - 1.0);
  const ValidationRow& t = rep.rows[1];
  ASSERT_FALSE(t.skipped) << t.skip_reason;
  EXPECT_TRUE(t.step_time_derived);
  // torchtitan attends with PyTorch's SDPA: FlashAttention-2's rates on Hopper, said.
  const SimulationResult tw = Simulate(runs[1].model, runs[1].config, cl, 8, WithPyTorchAttention(prof, "hopper"));
  EXPECT_NE(std::find(t.assumptions.begin(), t.assumptions.end(),
                      "FlashAttention-2's attention rates on Hopper (PyTorch's SDPA flash kernel)"),
            t.assumptions.end());
  // Reserved only: compared with the predicted reserved figure, not the allocated peak.
  EXPECT_TRUE(t.memory_is_reserved);
  EXPECT_DOUBLE_EQ(*t.memory_error, tw.peak_reserved_bytes / *runs[1].max_reserved_bytes - 1.0);
  EXPECT_DOUBLE_EQ(*t.step_time_error, tw.step_time_s / runs[1].measured_step_time_s - 1.0);
  EXPECT_EQ(rep.summary.timed, 2u);
  EXPECT_DOUBLE_EQ(rep.summary.step_time_mape, (std::fabs(*m.step_time_error) + std::fabs(*t.step_time_error)) / 2);
}

/// An argument line as Megatron-LM's _print_args writes it.
std::string ArgLine(const std::string& name, const std::string& value) {
  return "  " + name + " " + std::string(48 - name.size(), '.') + " " + value;
}

TEST(RunLog, MalformedLinesNameTheFileAndLine) {
  const std::string text = ReadTextFile(kMegatron);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  auto error = [](const std::string& s, const LogDefaults& d = {}) {
    return testing::InputErrorOf([&] { ParseTrainingLog(s, "run.log", d); });
  };
  // The line of the third iteration, counted in the fixture.
  const auto third = text.find("(ms): 4098.1");
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(third), '\n');
  const std::string bad_time = error(replaced("(ms): 4098.1", "(ms): fast"));
  EXPECT_NE(bad_time.find("run.log:" + std::to_string(line) + ": elapsed time per iteration (ms): got \"fast\""),
            std::string::npos) << bad_time;
  EXPECT_NE(error(replaced("(ms): 4098.1", "(ms): -3")).find("expected a positive number"), std::string::npos);
  const std::string no_dots = error(replaced(ArgLine("hidden_size", "4096"), "  hidden_size 4096"));
  EXPECT_NE(no_dots.find("in the argument dump: got \"hidden_size 4096\""), std::string::npos) << no_dots;
  const std::string not_int = error(replaced(ArgLine("hidden_size", "4096"), ArgLine("hidden_size", "big")));
  EXPECT_NE(not_int.find("argument hidden_size: got \"big\", expected an integer"), std::string::npos) << not_int;
  const std::string world = error(replaced(ArgLine("world_size", "8"), ArgLine("world_size", "6")));
  EXPECT_NE(world.find("argument world_size: got \"6\""), std::string::npos) << world;
  EXPECT_NE(error("just some text\n").find("neither a Megatron-LM log"), std::string::npos);
  // A padded-vocab line whose new size is not the size plus the dummy tokens.
  const std::string vocab = error(replaced("(size: 128256) with 0 dummy tokens (new size: 128256)",
                                           "(size: 128256) with 0 dummy tokens (new size: 128000)"));
  EXPECT_NE(vocab.find("padded vocab: got size 128256 with 0 dummy tokens and new size 128000, expected the new size "
                       "to be the size plus the dummy tokens (128256)"),
            std::string::npos)
      << vocab;
  EXPECT_EQ(error(replaced("(size: 128256) with 0 dummy tokens (new size: 128256)",
                           "(size: 128000) with 256 dummy tokens (new size: 128256)")),
            "(no error)");  // Megatron-LM's own padding adds up
  const std::string no_steps = text.substr(0, text.find("iteration       10/"));
  EXPECT_NE(error(no_steps).find("expected at least one measured step"), std::string::npos);
  const std::string titan = ReadTextFile(kTitan);
  EXPECT_NE(error(titan).find("data_parallel_shard_degree is -1"), std::string::npos);  // no --gpus
  const std::string titan_no_cfg = titan.substr(titan.find("Building llama3"));
  EXPECT_NE(error(titan_no_cfg).find("--job.print_config"), std::string::npos);
  LogDefaults d;
  d.gpus = 8;
  std::string bad_tps = titan;
  bad_tps.replace(bad_tps.find("tps: 6,251"), 10, "tps: n/a");
  const std::string tps = error(bad_tps, d);
  EXPECT_NE(tps.find("tps (tokens per second per GPU): got \"n/a\""), std::string::npos) << tps;
}

// FSDP2 under torchtitan's pipeline keeps the gathered parameters through the step and
// reduce-scatters once after the stage's last backward: read as ZeRO-1 without the gradient
// overlap, and said so; fsdp_reshard_after_forward "always" stays ZeRO-3 (which a pipeline
// refuses, with its reason); another value is bad input.
TEST(RunLog, TorchtitanFsdpWithPipelineReadsAsZero1WithoutOverlap) {
  std::string titan = ReadTextFile(kTitan);
  const std::string pp1 = "\"pipeline_parallel_degree\": 1,";
  ASSERT_NE(titan.find(pp1), std::string::npos);
  titan.replace(titan.find(pp1), pp1.size(), "\"pipeline_parallel_degree\": 2,");
  LogDefaults d;
  d.gpus = 16;
  const LoggedRun r = ParseTrainingLog(titan, "t.log", d);
  EXPECT_EQ(r.config.pp, 2);
  EXPECT_EQ(r.config.dp, 8);
  EXPECT_EQ(r.config.zero_stage, 1);
  EXPECT_FALSE(r.config.overlap_grad_reduce);
  EXPECT_NE(Join(r.notes, "\n").find("FSDP2 with pipeline parallelism simulated as --optimizer fsdp --zero 1 "
                                     "--no-overlap-grad-reduce"),
            std::string::npos);
  // FSDP's state: the gathered bf16 parameters and the unsharded fp32 gradient through the
  // schedule beside the fp32 parameter and Adam shards (one flush: no gradient shard yet).
  EXPECT_EQ(r.config.optimizer_impl, OptimizerImpl::kTorchFsdp);
  EXPECT_DOUBLE_EQ(BytesPerParam(r.config).total(), 2.0 + 4.0 + 12.0 / 8);
  LogDefaults d8;
  d8.gpus = 8;
  EXPECT_EQ(ParseTrainingLog(ReadTextFile(kTitan), "t.log", d8).config.zero_stage, 3);  // no pipeline
  const std::string deg = "\"enable_async_tensor_parallel\": false";
  std::string always = titan;
  always.replace(always.find(deg), deg.size(), deg + ",\n[rank0]:    \"fsdp_reshard_after_forward\": \"always\"");
  const LoggedRun a = ParseTrainingLog(always, "t.log", d);
  EXPECT_EQ(a.config.zero_stage, 3);
  EXPECT_NE(Join(a.notes, "\n").find("fsdp_reshard_after_forward = \"always\" with pipeline parallelism"), std::string::npos);
  // Without a pipeline, "never" keeps the gathered parameters to the backward: ZeRO-2.
  std::string never = ReadTextFile(kTitan);
  never.replace(never.find(deg), deg.size(), deg + ",\n[rank0]:    \"fsdp_reshard_after_forward\": \"never\"");
  const LoggedRun n = ParseTrainingLog(never, "t.log", d8);
  EXPECT_EQ(n.config.zero_stage, 2);
  EXPECT_NE(Join(n.notes, "\n").find("simulated as ZeRO-2"), std::string::npos);
  // Gradient accumulation under a pipeline: global 64 over local 2 x dp 8 is 4 steps, each
  // a schedule of local 2 / pipeline micro-batch 1 = 2 micro-batches.
  std::string ga = titan;
  const std::string gbs = "\"global_batch_size\": -1", init = "global batch size 16, gradient accumulation steps 1";
  ASSERT_NE(ga.find(init), std::string::npos);
  ga.replace(ga.find(gbs), gbs.size(), "\"global_batch_size\": 64");
  ga.replace(ga.find(init), init.size(), "global batch size 64, gradient accumulation steps 4");
  const LoggedRun g = ParseTrainingLog(ga, "t.log", d);
  EXPECT_EQ(g.config.global_batch_size, 64);
  EXPECT_EQ(g.config.num_microbatches(), 8);
  EXPECT_EQ(g.config.pipeline_flushes, 4);
  EXPECT_TRUE(g.config.flush_grad_reduce);
  EXPECT_NE(Join(g.notes, "\n").find("4 gradient-accumulation steps (global batch 64 / (local batch 2 x dp 8)), each a "
                                     "pipeline schedule of its own that reduces its gradients: simulated as "
                                     "--pipeline-flushes 4"),
            std::string::npos);
  EXPECT_EQ(r.config.pipeline_flushes, 1);  // one local batch a step
  std::string bad = titan;
  bad.replace(bad.find(deg), deg.size(), deg + ",\n[rank0]:    \"fsdp_reshard_after_forward\": \"sometimes\"");
  EXPECT_NE(testing::InputErrorOf([&] { ParseTrainingLog(bad, "t.log", d); })
                .find("parallelism.fsdp_reshard_after_forward: got \"sometimes\", expected default, always or never"),
            std::string::npos);
}

// What would silently give a wrong measured figure is refused or left out, with the reason:
// iterations of a batch-size ramp-up, a second run in one log, misgrouped thousands separators,
// a report_memory line without its max allocated, a peak above the GPU's memory, a precision
// the GPU lacks, an output file that is an input.
TEST(RunLog, WhatWouldMismeasureTheRunIsRefusedOrLeftOut) {
  const std::string text = ReadTextFile(kMegatron);
  auto error = [](const std::string& s, const LogDefaults& d = {}) {
    return testing::InputErrorOf([&] { ParseTrainingLog(s, "run.log", d); });
  };
  // rampup_batch_size: the first two logged iterations ran at 16, not the dump's 32.
  const std::string dp_line = "  data_parallel_size .............................. 2\n";
  std::string ramp = text;
  ramp.insert(ramp.find(dp_line) + dp_line.size(), "  rampup_batch_size ............................... ['16', '16', '64']\n");
  for (int k = 0; k < 2; ++k) ramp.replace(ramp.find("global batch size:    32"), 24, "global batch size:    16");
  const LoggedRun r = ParseTrainingLog(ramp, "ramp.log", {});
  ASSERT_EQ(r.step_times_s.size(), 3u);
  EXPECT_NEAR(r.step_times_s[0], 4.0981, 1e-9);
  EXPECT_NEAR(r.measured_step_time_s, (4.1104 + 4.1019) / 2, 1e-9);
  EXPECT_NE(Join(r.notes, "\n").find("2 logged iterations at another global batch size than 32 (batch-size ramp-up) "
                                     "left out"),
            std::string::npos);
  std::string all_ramp = text;
  for (auto at = all_ramp.find("global batch size:    32"); at != std::string::npos; at = all_ramp.find("global batch size:    32"))
    all_ramp.replace(at, 24, "global batch size:    16");
  EXPECT_NE(error(all_ramp).find("all 5 logged iterations ran at another global batch size than the argument dump's 32 "
                                 "(the dump has no rampup_batch_size: another run's lines?)"),
            std::string::npos);
  // Without rampup_batch_size a batch that differs is not called a ramp-up.
  std::string other = text;
  other.replace(other.find("global batch size:    32"), 24, "global batch size:    16");
  EXPECT_NE(Join(ParseTrainingLog(other, "o.log", {}).notes, "\n")
                .find("1 logged iteration at another global batch size than 32 (the dump has no rampup_batch_size: "
                      "another run's lines?) left out"),
            std::string::npos);
  // Iteration lines above the argument dump are an earlier run's: left out, with a note.
  const std::string first_iter = text.substr(text.find(" [2026-11-20 10:03:00"),
                                             text.find('\n', text.find(" [2026-11-20 10:03:00")) -
                                                 text.find(" [2026-11-20 10:03:00") + 1);
  const std::string slow_first = std::string(first_iter).replace(first_iter.find("5210.3"), 6, "9999.9");
  const LoggedRun above = ParseTrainingLog(slow_first + slow_first + text, "above.log", {});
  EXPECT_DOUBLE_EQ(above.measured_step_time_s, ParseTrainingLog(text, "t.log", {}).measured_step_time_s);
  EXPECT_NE(Join(above.notes, "\n").find("2 iteration lines above the argument dump (line 4; an earlier run's) left out"),
            std::string::npos);
  // A line repeated word for word (a console captured into the file too) is one iteration.
  const LoggedRun twice = ParseTrainingLog(text + text.substr(text.rfind(" [2026-11-20 10:07:00")), "twice.log", {});
  EXPECT_EQ(twice.step_times_s.size(), 5u);
  EXPECT_NE(Join(twice.notes, "\n").find("1 iteration line repeated word for word, read once"), std::string::npos);
  // A second run appended without its own dump: its iteration count starts again.
  EXPECT_NE(error(text + first_iter).find("run.log:71: iteration 10 after iteration 50 (line 70): a second run appended "
                                          "without its own argument dump"),
            std::string::npos);
  // One file with a Megatron-LM run and a torchtitan run.
  EXPECT_NE(error(text + ReadTextFile(kTitan)).find("a Megatron-LM argument dump (line 2) and a torchtitan job "
                                                    "configuration (line "),
            std::string::npos);
  // Arguments Megatron-LM would never print together: an edited dump.
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return error(t);
  };
  EXPECT_NE(edited("  fp16 ............................................ False", "  fp16 ............................................ True")
                .find("argument bf16: got \"True\", expected False beside fp16 True"),
            std::string::npos);
  EXPECT_NE(edited(dp_line, "  data_parallel_size .............................. 4\n")
                .find("argument data_parallel_size: got \"4\", expected world_size / (tensor x pipeline x context "
                      "parallel) = 8 / (2 x 2 x 1) = 2"),
            std::string::npos);
  const std::string per = "  num_layers_per_virtual_pipeline_stage ........... None";
  const std::string vps = "  virtual_pipeline_model_parallel_size ............ None";
  std::string both = text;
  both.replace(both.find(per), per.size(), "  num_layers_per_virtual_pipeline_stage ........... 8");
  both.replace(both.find(vps), vps.size(), "  virtual_pipeline_model_parallel_size ............ 4");
  EXPECT_NE(error(both).find("argument virtual_pipeline_model_parallel_size: got \"4\", expected num_layers / "
                             "(num_layers_per_virtual_pipeline_stage x pp) = 32 / (8 x 2) = 2"),
            std::string::npos);
  const std::string vp4 = "virtual_pipeline_model_parallel_size ............ 4";
  both.replace(both.find(vp4), vp4.size(), "virtual_pipeline_model_parallel_size ............ 2");
  EXPECT_EQ(ParseTrainingLog(both, "vp.log", {}).config.vp, 2);
  // With a slot each for the embedding and the loss Megatron-LM splits 32 + 2 layers: 34 / (1 x 2)
  // gives 17 virtual stages of one layer, which the printed size must then be.
  const std::string acc_e = "  account_for_embedding_in_pipeline_split ......... True\n";
  const std::string acc_l = "  account_for_loss_in_pipeline_split .............. True\n";
  std::string slots = text;
  slots.insert(slots.find(dp_line), acc_e + acc_l);
  slots.replace(slots.find(per), per.size(), "  num_layers_per_virtual_pipeline_stage ........... 1");
  slots.replace(slots.find(vps), vps.size(), "  virtual_pipeline_model_parallel_size ............ 17");
  const LoggedRun seventeen = ParseTrainingLog(slots, "slots.log", {});
  EXPECT_EQ(seventeen.config.vp, 17);
  EXPECT_TRUE(seventeen.config.embedding_slots);
  const std::string vp17 = "virtual_pipeline_model_parallel_size ............ 17";
  slots.replace(slots.find(vp17), vp17.size(), "virtual_pipeline_model_parallel_size ............ 16");
  EXPECT_NE(error(slots).find("expected (num_layers + the embedding and loss slots) / "
                              "(num_layers_per_virtual_pipeline_stage x pp) = 34 / (1 x 2) = 17"),
            std::string::npos);
  // A restarted torchtitan job: its configuration printed twice.
  const std::string titan = ReadTextFile(kTitan);
  LogDefaults d;
  d.gpus = 8;
  EXPECT_NE(error(titan + titan, d).find("job configurations on lines"), std::string::npos);
  // A two-node job's log keeps local rank 0 of each node: rank 8's copy is left aside, and the
  // measured step is rank 0's.
  std::string rank8 = titan;
  for (auto at = rank8.find("[rank0]:"); at != std::string::npos; at = rank8.find("[rank0]:", at)) rank8.replace(at, 8, "[rank8]:");
  const LoggedRun two_nodes = ParseTrainingLog(titan + rank8, "t.log", d);
  EXPECT_DOUBLE_EQ(two_nodes.measured_step_time_s, ParseTrainingLog(titan, "t.log", d).measured_step_time_s);
  EXPECT_NE(Join(two_nodes.notes, "\n").find("the log holds 2 ranks' output; [rank0] lines read"), std::string::npos);
  // Without torchtitan's "Trainer is initialized" line a wrong --gpus cannot be caught: noted.
  std::string no_init;
  std::istringstream in(titan);
  for (std::string line; std::getline(in, line);)
    if (line.find("Trainer is initialized") == std::string::npos) no_init += line + "\n";
  EXPECT_NE(Join(ParseTrainingLog(no_init, "t.log", d).notes, "\n").find("could not be checked"), std::string::npos);
  EXPECT_EQ(Join(ParseTrainingLog(titan, "t.log", d).notes, "\n").find("could not be checked"), std::string::npos);
  std::string commas = titan;
  commas.replace(commas.find("tps: 6,251"), 10, "tps: 6,25,1");
  EXPECT_NE(error(commas, d).find("tps (tokens per second per GPU): got \"6,25,1\""), std::string::npos);
  std::string no_max = text;
  const std::string max_alloc = "| max allocated: 52110.20 ";
  no_max.erase(no_max.find(max_alloc), max_alloc.size());
  EXPECT_NE(error(no_max).find("a \"memory (MB)\" line without \"max allocated: N\""), std::string::npos);
  // The log's 52110.20 MiB peak (50.9 GiB) cannot have been measured on a 40 GB A100.
  const std::vector<LoggedRun> runs = {ReadTrainingLog(kMegatron, {})};
  const Cluster a100_40 = LoadCluster("dgx-a100-40gb");
  EXPECT_NE(testing::InputErrorOf([&] { ValidateLoggedRuns(runs, a100_40, DefaultProfile(a100_40)); })
                .find("the logged max allocated memory, 50.89 GiB, is more than the NVIDIA A100-SXM4-40GB's"),
            std::string::npos);
  // bf16 on a V100 (fp16 and fp32 only): skipped with the reason, as fp8 on an A100 is.
  LoggedRun v = runs[0];
  v.max_allocated_bytes.reset();
  v.max_reserved_bytes.reset();
  const Cluster v100 = LoadCluster("dgx-2");
  const ValidationReport rep = ValidateLoggedRuns({v}, v100, DefaultProfile(v100));
  ASSERT_EQ(rep.rows.size(), 1u);
  EXPECT_TRUE(rep.rows[0].skipped);
  EXPECT_NE(rep.rows[0].skip_reason.find("precision bf16 is not supported by the NVIDIA Tesla V100"), std::string::npos)
      << rep.rows[0].skip_reason;
  // The measured step stays on the skipped row (its CSV and JSON rows show it).
  ASSERT_TRUE(rep.rows[0].measured_step_time_s.has_value());
  EXPECT_DOUBLE_EQ(*rep.rows[0].measured_step_time_s, v.measured_step_time_s);
  EXPECT_EQ(ValidationJson(rep, "")["rows"][0]["measured_step_time_s"].get<double>(), v.measured_step_time_s);
  EXPECT_FALSE(ValidationJson(rep, "")["rows"][0]["measured_step_time_derived"].get<bool>());  // a Megatron log's
  const std::string copy = testing::WriteTemp("copy.log", text);
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + copy + " --cluster dgx-h100 --csv " + copy,
                                           "--csv: got " + copy + ", which is an input of this command"));
  EXPECT_EQ(ReadTextFile(copy), text);
  // One log: no pair to rank and no OOM row, so those figures are null, not 0 or 100%.
  const auto one = testing::RunShardcast("validate --log " + kMegatron + " --cluster dgx-h100 --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Json summary = Json::parse(one.out)["summary"];
  EXPECT_TRUE(summary["kendall_tau"].is_null());
  EXPECT_TRUE(summary["oom_rows_predicted_oom"].is_null());
  EXPECT_DOUBLE_EQ(summary["ok_rows_predicted_fit"].get<double>(), 1.0);
  // Errors over no rows are null too: no fitted row; the one timed row has its MAPE.
  EXPECT_TRUE(summary["step_time_mape_fitted"].is_null());
  EXPECT_EQ(summary["fitted_rows"], 0);
  EXPECT_FALSE(summary["step_time_mape"].is_null());
  // On a V100 (no FlashAttention) the log's fused attention is simulated unfused, and the row says so.
  std::string volta_log = ReadTextFile(kMegatron);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"bf16 ............................................ True",
                                                                     "bf16 ............................................ False"},
                                 {"fp16 ............................................ False",
                                  "fp16 ............................................ True"}}) {
    ASSERT_NE(volta_log.find(from), std::string::npos) << from;
    volta_log.replace(volta_log.find(from), from.size(), to);
  }
  volta_log = volta_log.substr(0, volta_log.find("[Rank 0] (after 10 iterations) memory"));  // no memory lines
  const std::string v100_log = testing::WriteTemp("v100_megatron.log", volta_log);
  const auto volta_run = testing::RunShardcast("validate --log " + v100_log + " --cluster dgx-2 --json");
  ASSERT_EQ(volta_run.exit_code, 0) << volta_run.err;
  EXPECT_NE(volta_run.out.find("attention simulated unfused: FlashAttention does not run on the"), std::string::npos) << volta_run.out;
}

// A Megatron-LM log of an MoE run: the expert grid, the dispatcher and forced balancing from the
// argument dump; a model of a preset's shape takes the preset's name and how its router was
// trained (an argument dump does not say).
TEST(RunLog, MegatronMoeLogReadsTheExpertSettings) {
  std::string text = ReadTextFile(kMegatron);
  auto set = [&](const std::string& name, const std::string& from, const std::string& to) {
    const auto at = text.find(ArgLine(name, from));
    ASSERT_NE(at, std::string::npos) << name;
    text.replace(at, ArgLine(name, from).size(), ArgLine(name, to));
  };
  set("num_experts", "None", "8");
  set("expert_model_parallel_size", "1", "2");
  const std::string extra = ArgLine("moe_router_topk", "2") + "\n" + ArgLine("moe_ffn_hidden_size", "14336") + "\n" +
                            ArgLine("moe_layer_freq", "1") + "\n" + ArgLine("moe_token_dispatcher_type", "alltoall") +
                            "\n" + ArgLine("moe_router_force_load_balancing", "True") + "\n" +
                            ArgLine("fine_grained_activation_offloading", "True") + "\n" +
                            ArgLine("offload_modules", "['expert_fc1', 'moe_act']") + "\n";
  text.insert(text.find(ArgLine("num_experts", "8")), extra);
  const LoggedRun r = ParseTrainingLog(text, "moe.log", {});
  EXPECT_EQ(r.model.moe.num_experts, 8);
  EXPECT_EQ(r.config.ep, 2);
  EXPECT_TRUE(r.config.moe_force_load_balancing);
  EXPECT_EQ(r.config.offload_modules, static_cast<unsigned>(kOffloadExpertFc1 | kOffloadMoeAct));
  EXPECT_FALSE(r.model.moe.router_global_batch_balance);  // no preset of this shape
  EXPECT_EQ(r.model.moe.router_score, "softmax");            // the dump has no router arguments: the defaults
  // The router arguments as the run printed them.
  std::string routed = text;
  const std::string router = ArgLine("moe_router_score_function", "sigmoid") + "\n" +
                             ArgLine("moe_router_topk_scaling_factor", "2.5") + "\n" +
                             ArgLine("moe_router_num_groups", "4") + "\n" + ArgLine("moe_router_group_topk", "2") +
                             "\n" + ArgLine("moe_router_enable_expert_bias", "True") + "\n" +
                             ArgLine("moe_router_pre_softmax", "False") + "\n";
  routed.insert(routed.find(ArgLine("num_experts", "8")), router);
  const LoggedRun with_router = ParseTrainingLog(routed, "moe_router.log", {});
  EXPECT_EQ(RouterSummary(with_router.model.moe), "sigmoid, times 2.5, top-k within 2 of 4 groups, expert bias (auxiliary-loss-free balancing)");
  // A combination Megatron-Core refuses names the dump's line: the expert bias under the default
  // softmax scores.
  std::string softmax_bias = text;
  softmax_bias.insert(softmax_bias.find(ArgLine("num_experts", "8")), ArgLine("moe_router_enable_expert_bias", "True") + "\n");
  const std::string err = testing::InputErrorOf([&] { ParseTrainingLog(softmax_bias, "bias.log", {}); });
  EXPECT_NE(err.find("bias.log:"), std::string::npos) << err;
  EXPECT_NE(err.find(": argument moe_router_enable_expert_bias: got \"True\", expected False with "
                     "moe_router_score_function softmax (Megatron-Core's expert bias needs sigmoid scores)"),
            std::string::npos)
      << err;
  // --moe-layer-freq 2: Megatron-LM's layer i is MoE when i % 2 == 0, so 0, 2, 4, ... of L layers.
  const std::string freq1 = ArgLine("moe_layer_freq", "1");
  text.replace(text.find(freq1), freq1.size(), ArgLine("moe_layer_freq", "2"));
  const LoggedRun every_other = ParseTrainingLog(text, "moe2.log", {});
  const std::int64_t layers = every_other.model.num_layers;
  EXPECT_TRUE(every_other.model.IsMoeLayer(0));
  EXPECT_EQ(every_other.model.MoeLayersIn(0, layers), (layers + 1) / 2);
  // The same layers as a per-layer list read back as the same rule; one counted from layer 1
  // (0, 1, 0, 1, ...) too; a list no layer step gives exits 2.
  auto with_list = [&](const std::function<bool(std::int64_t)>& moe) {
    std::string list = "[";
    for (std::int64_t i = 0; i < layers; ++i) list += std::string(i ? ", " : "") + (moe(i) ? "1" : "0");
    std::string t = text;
    const std::string freq2 = ArgLine("moe_layer_freq", "2");
    t.replace(t.find(freq2), freq2.size(), ArgLine("moe_layer_freq", list + "]"));
    return t;
  };
  const Model from0 = ParseTrainingLog(with_list([](std::int64_t i) { return i % 2 == 0; }), "l0.log", {}).model;
  const Model from1 = ParseTrainingLog(with_list([](std::int64_t i) { return i % 2 == 1; }), "l1.log", {}).model;
  for (std::int64_t i = 0; i < layers; ++i) {
    EXPECT_EQ(from0.IsMoeLayer(i), i % 2 == 0) << i;
    EXPECT_EQ(from1.IsMoeLayer(i), i % 2 == 1) << i;
  }
  EXPECT_THROW(ParseTrainingLog(with_list([](std::int64_t i) { return i == 1 || i == 2 || i == 4; }), "odd.log", {}),
               InputError);
}

// --cross-entropy-loss-fusion and its impl (Megatron-Core 0.8 on; absent before, so off).
TEST(RunLog, MegatronLogReadsTheCrossEntropyFusion) {
  const std::string text = ReadTextFile(kMegatron);
  EXPECT_EQ(ParseTrainingLog(text, "plain.log", {}).config.cross_entropy, CrossEntropyImpl::kUnfused);
  const std::string at = ArgLine("tp_comm_overlap", "False");
  ASSERT_NE(text.find(at), std::string::npos);
  std::string fused = text;
  fused.insert(fused.find(at), ArgLine("cross_entropy_loss_fusion", "True") + "\n");
  EXPECT_EQ(ParseTrainingLog(fused, "fused.log", {}).config.cross_entropy, CrossEntropyImpl::kNative);
  fused.insert(fused.find(at), ArgLine("cross_entropy_fusion_impl", "te") + "\n");
  EXPECT_EQ(ParseTrainingLog(fused, "te.log", {}).config.cross_entropy, CrossEntropyImpl::kTe);
  fused.replace(fused.find(ArgLine("cross_entropy_fusion_impl", "te")), ArgLine("cross_entropy_fusion_impl", "te").size(),
                ArgLine("cross_entropy_fusion_impl", "tee"));
  EXPECT_THROW(ParseTrainingLog(fused, "typo.log", {}), InputError);
}

// Llama 3.1's RoPE scaling and per-head query/key norms in the argument dump reach the model
// (neither is in the fixture: both off there).
TEST(RunLog, MegatronLogReadsRopeScalingAndQkLayernorm) {
  const std::string text = ReadTextFile(kMegatron);
  const Model plain = ParseTrainingLog(text, "plain.log", {}).model;
  EXPECT_EQ(plain.rope_scaling_factor, 0.0);
  EXPECT_FALSE(plain.qk_layernorm);
  const std::string at = ArgLine("tp_comm_overlap", "False");
  ASSERT_NE(text.find(at), std::string::npos);
  std::string more = text;
  more.insert(more.find(at), ArgLine("use_rope_scaling", "True") + "\n" + ArgLine("rope_scaling_factor", "8.0") + "\n" +
                                 ArgLine("qk_layernorm", "True") + "\n");
  const Model m = ParseTrainingLog(more, "more.log", {}).model;
  EXPECT_EQ(m.rope_scaling_factor, 8.0);
  // RoPE scaling changes no count or time: a dump with it alone still names the preset.
  std::string scaled = text;
  scaled.insert(scaled.find(at), ArgLine("use_rope_scaling", "True") + "\n");
  EXPECT_EQ(ParseTrainingLog(scaled, "scaled.log", {}).model.name, plain.name);
  EXPECT_TRUE(m.qk_layernorm);
  EXPECT_EQ(m.Parameters().total - plain.Parameters().total, m.num_layers * 2 * m.kv_channels);  // RMSNorm weights
  // --window-size (W, 0) and --window-attn-skip-freq, as the dump prints them.
  std::string windowed = text;
  windowed.insert(windowed.find(at), ArgLine("window_size", "(128, 0)") + "\n" + ArgLine("window_attn_skip_freq", "2") + "\n");
  const Model w = ParseTrainingLog(windowed, "w.log", {}).model;
  EXPECT_EQ(w.attention_window, 128);
  EXPECT_EQ(w.window_attn_skip_freq, 2);
  EXPECT_EQ(w.WindowedLayers(), w.num_layers - w.num_layers / 2);
  std::string listed = text;
  listed.insert(listed.find(at), ArgLine("window_size", "(128, 0)") + "\n" +
                                     ArgLine("window_attn_skip_freq", "[1, 1, 0" + std::string(", 1") + "]") + "\n");
  const std::string short_list = testing::InputErrorOf([&] { ParseTrainingLog(listed, "l.log", {}); });
  EXPECT_NE(short_list.find("/window_attn_skip_freq: got a list of 4 entries"), std::string::npos) << short_list;
  std::string plain_window = text;
  plain_window.insert(plain_window.find(at), ArgLine("window_size", "None") + "\n");
  EXPECT_EQ(ParseTrainingLog(plain_window, "n.log", {}).model.attention_window, 0);
  std::string both_sides = text;
  both_sides.insert(both_sides.find(at), ArgLine("window_size", "(128, 128)") + "\n");
  EXPECT_NE(testing::InputErrorOf([&] { ParseTrainingLog(both_sides, "b.log", {}); }).find("a causal window (W, 0)"),
            std::string::npos);
}

TEST(RunLog, ValuesOutsideWhatEachFrameworkPrintsAreRefused) {
  const std::string text = ReadTextFile(kMegatron);
  auto with = [&](const std::string& name, const std::string& value) {
    std::string s = text;
    const std::string line = ArgLine(name, "");
    const auto at = s.find(line.substr(0, line.size() - 1));
    EXPECT_NE(at, std::string::npos) << name;
    if (at != std::string::npos) s.replace(at, s.find('\n', at) - at, ArgLine(name, value));
    return s;
  };
  auto error = [](const std::string& s, const LogDefaults& d = {}) {
    return testing::InputErrorOf([&] { ParseTrainingLog(s, "run.log", d); });
  };
  EXPECT_NE(error(with("sequence_parallel", "Yes")).find("argument sequence_parallel: got \"Yes\", expected True or False"),
            std::string::npos);
  EXPECT_NE(error(with("fp8", "e5m2")).find("argument fp8: got \"e5m2\", expected None, hybrid or e4m3"), std::string::npos);
  // fp16 beside fp8 (Megatron-LM takes it; the formats are modelled beside bf16 only), as the
  // command line refuses --fp16 with --fp8-format.
  std::string fp16_fp8 = with("fp8", "hybrid");
  for (const char* name : {"fp16", "bf16"}) {
    const std::string old_line = ArgLine(name, "");
    const auto at = fp16_fp8.find(old_line.substr(0, old_line.size() - 1));
    ASSERT_NE(at, std::string::npos) << name;
    fp16_fp8.replace(at, fp16_fp8.find('\n', at) - at, ArgLine(name, std::string(name) == "fp16" ? "True" : "False"));
  }
  EXPECT_NE(error(fp16_fp8).find("argument fp16: got \"True\", expected False beside fp8 hybrid"), std::string::npos)
      << error(fp16_fp8);
  EXPECT_NE(error(with("cp_comm_type", "['p2p', 'a2a']")).find("one communication type for every layer"), std::string::npos);
  // The model's shape out of range names the argument and its line, not the JSON built from it.
  const std::string no_layers = error(with("num_layers", "0"));
  EXPECT_NE(no_layers.find("run.log:"), std::string::npos) << no_layers;
  EXPECT_NE(no_layers.find("argument num_layers: got \"0\", expected an integer from 1 to 65536"), std::string::npos)
      << no_layers;
  EXPECT_NE(error(with("kv_channels", "0")).find("argument kv_channels: got \"0\", expected an integer from 1 to"),
            std::string::npos);
  // A missing argument Megatron-LM always prints: a cut dump, not a default.
  std::string cut = text;
  const std::string tp = ArgLine("tensor_model_parallel_size", "2") + "\n";
  cut.erase(cut.find(tp), tp.size());
  EXPECT_NE(error(cut).find("argument tensor_model_parallel_size: not in the argument dump"), std::string::npos);
  // A restarted job's log: two dumps.
  EXPECT_NE(error(text + text).find("a restarted job's log holds more than one run"), std::string::npos);
  // A number must be all of its field.
  std::string garbled = text;
  garbled.replace(garbled.find("(ms): 4098.1"), 12, "(ms): 4098.1.5");
  EXPECT_NE(error(garbled).find("got \"4098.1.5\", expected a positive number"), std::string::npos);
  // Full recompute of the first recompute_num_layers layers of each chunk (the dump's 1): simulated
  // as such; uniform groups of more than one layer are simulated as every layer, and said.
  auto full_with = [&](const char* method) {
    return with("recompute_method", method)
        .replace(text.find(ArgLine("recompute_granularity", "None")), ArgLine("recompute_granularity", "None").size(),
                 ArgLine("recompute_granularity", "full"));
  };
  const LoggedRun block = ParseTrainingLog(full_with("block"), "run.log", {});
  EXPECT_EQ(block.config.recompute, Recompute::kFull);
  EXPECT_EQ(block.config.recompute_block_layers, 1);
  EXPECT_TRUE(block.config.PartialRecompute());
  EXPECT_EQ(Join(block.notes, "|").find("recompute_method"), std::string::npos) << Join(block.notes, "|");
  std::string groups = full_with("uniform");
  const std::string one = ArgLine("recompute_num_layers", "None");  // Megatron-LM's default: 1
  ASSERT_NE(groups.find(one), std::string::npos);
  groups.replace(groups.find(one), one.size(), ArgLine("recompute_num_layers", "2"));
  const LoggedRun uniform2 = ParseTrainingLog(groups, "run.log", {});
  EXPECT_FALSE(uniform2.config.PartialRecompute());
  EXPECT_NE(Join(uniform2.notes, "|").find("recompute_method uniform with recompute_num_layers 2"), std::string::npos);
  // torchtitan: a GPU count that does not match the log's own tokens per step and per rank.
  const std::string titan = ReadTextFile(kTitan);
  LogDefaults sixteen;
  sixteen.gpus = 16;
  EXPECT_NE(error(titan, sixteen).find("global batch size 16, sequence length 8192, but the configuration read gives 32"),
            std::string::npos)
      << error(titan, sixteen);
  // The later versions' line: tokens per DP rank and per train step.
  std::string later = titan;
  const std::string v02 = "local batch size 2, global batch size 16, gradient accumulation steps 1, sequence length 8192";
  later.replace(later.find(v02), v02.size(), "16384 tokens per DP rank, 131072 tokens per train step, gradient accumulation steps 1");
  EXPECT_NE(error(later, sixteen).find("131072 tokens per train step over 8 data-parallel ranks"), std::string::npos)
      << error(later, sixteen);
  EXPECT_EQ(ParseTrainingLog(later, "run.log", {.model = std::nullopt, .gpus = 8}).gpus, 8);
  // Validation steps are not training steps.
  std::string validation = titan;
  validation += "[rank0]:[titan] 2026-11-21 09:00:06,000 - root - INFO - validate step: 30  loss:  9.00000  memory: 61.60GiB(77.88%)  tps: 20,000\n";
  EXPECT_EQ(ParseTrainingLog(validation, "run.log", {.model = std::nullopt, .gpus = 8}).step_times_s.size(), 4u);
  LogDefaults eight;
  eight.gpus = 8;
  std::string mode = titan;
  mode.replace(mode.find("\"mode\": \"full\""), 14, "\"mode\": \"some\"");
  EXPECT_NE(error(mode, eight).find("activation_checkpoint.mode: got \"some\""), std::string::npos) << error(mode, eight);
  std::string conv = titan;
  conv.replace(conv.find("\"converters\": []"), 16, "\"converters\": [\"quantum\"]");
  EXPECT_NE(error(conv, eight).find("model.converters: got \"quantum\""), std::string::npos) << error(conv, eight);
}

// torchtitan's tensor parallelism shards the sequence; its async TP is a no-op at degree 1; its
// converters are read by their exact names and their float8 recipe under either version's key;
// its pipeline split spreads the layers plus the embedding and output slots evenly.
TEST(RunLog, TorchtitanTensorParallelConvertersAndPipelineSplit) {
  const std::string titan = ReadTextFile(kTitan);
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = titan;
    EXPECT_NE(t.find(from), std::string::npos) << from;
    if (t.find(from) != std::string::npos) t.replace(t.find(from), from.size(), to);
    return t;
  };
  const auto error = [](const std::string& text, const LogDefaults& d) {
    return testing::InputErrorOf([&] { ParseTrainingLog(text, "t.log", d); });
  };
  LogDefaults eight, sixteen;
  eight.gpus = 8;
  sixteen.gpus = 16;
  const std::string tp1 = "\"tensor_parallel_degree\": 1", async_off = "\"enable_async_tensor_parallel\": false";
  const LoggedRun tp2 = ParseTrainingLog(with(tp1, "\"tensor_parallel_degree\": 2"), "t.log", sixteen);
  EXPECT_EQ(tp2.config.tp, 2);
  EXPECT_TRUE(tp2.config.sequence_parallel);
  EXPECT_FALSE(ParseTrainingLog(titan, "t.log", eight).config.sequence_parallel);
  const LoggedRun async1 = ParseTrainingLog(with(async_off, "\"enable_async_tensor_parallel\": true"), "t.log", eight);
  EXPECT_FALSE(async1.config.tp_comm_overlap);
  const std::string none = "\"converters\": []";
  EXPECT_EQ(ParseTrainingLog(with(none, "\"converters\": [\"float8\"]"), "t.log", eight).config.precision, Precision::kFp8);
  EXPECT_EQ(ParseTrainingLog(with(none, "\"converters\": [\"quantize.linear.mx\"]"), "t.log", eight).config.precision,
            Precision::kMxfp8);
  EXPECT_NE(error(with(none, "\"converters\": [\"float8x\"]"), eight).find("model.converters: got \"float8x\""),
            std::string::npos);
  EXPECT_NE(error(with(none, "\"converters\": [\"quantize.grouped_mm.float8\"]"), eight).find("experts' GEMMs alone"),
            std::string::npos);
  std::string v01 = with(none, "\"converters\": [\"float8\"]");
  v01.insert(v01.find("[rank0]:  \"training\": {"), "[rank0]:  \"float8\": {\"recipe_name\": \"rowwise\"},\n");
  EXPECT_NE(error(v01, eight).find("float8.recipe_name: got \"rowwise\", expected tensorwise"), std::string::npos)
      << error(v01, eight);
  // Interleaved1F1B over pp 2 with 3 layers a stage: ceil((32 + 2) / 3) = 12 stages, vp 6; the
  // 34 slots spread 3 x 10 and 2 x 2, the embedding and the output taking a slot of the first and
  // the last (torchtitan's generate_llm_fqn_per_model_part).
  const std::string pp1 = "\"pipeline_parallel_degree\": 1,";
  std::string looped = with(pp1, "\"pipeline_parallel_degree\": 2,\n[rank0]:    \"pipeline_parallel_schedule\": "
                                  "\"Interleaved1F1B\",\n[rank0]:    \"pipeline_parallel_layers_per_stage\": 3,");
  const LoggedRun r = ParseTrainingLog(looped, "t.log", sixteen);
  EXPECT_EQ(r.config.vp, 6);
  EXPECT_TRUE(r.config.embedding_slots);
  EXPECT_TRUE(r.config.even_chunks);
  const PipelineLayout layout = PipelineLayoutOf(r.model, r.config);
  ASSERT_TRUE(layout.error.empty()) << layout.error;
  const std::vector<std::int64_t> expected = {2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1};
  EXPECT_EQ(layout.chunk_layers, expected);
  // 1F1B: one stage a rank, 34 slots as 17 and 17, so 16 layers on each stage.
  const LoggedRun one = ParseTrainingLog(with(pp1, "\"pipeline_parallel_degree\": 2,"), "t.log", sixteen);
  EXPECT_EQ(PipelineLayoutOf(one.model, one.config).chunk_layers, (std::vector<std::int64_t>{16, 16}));
  EXPECT_NE(error(with(pp1, "\"pipeline_parallel_degree\": 2,\n[rank0]:    \"pipeline_parallel_first_stage_less_layers\": 0,"),
                  sixteen)
                .find("got 0 and 1, expected both 0 or both 1"),
            std::string::npos);
  // Context parallelism alone enables FSDP (torchtitan's fsdp_enabled): ZeRO-3 over dp x cp.
  const std::string shard_all = "\"data_parallel_shard_degree\": -1", cp1 = "\"context_parallel_degree\": 1";
  std::string cp_only = with(shard_all, "\"data_parallel_shard_degree\": 1");
  cp_only.replace(cp_only.find(cp1), cp1.size(), "\"context_parallel_degree\": 8");
  const std::string init = "global batch size 16, gradient accumulation steps 1";
  cp_only.replace(cp_only.find(init), init.size(), "global batch size 2, gradient accumulation steps 1");
  const LoggedRun cp = ParseTrainingLog(cp_only, "t.log", eight);
  EXPECT_EQ(cp.config.cp, 8);
  EXPECT_EQ(cp.config.zero_stage, 3);
  EXPECT_EQ(cp.config.shard_dp(), 8);
  // Without FSDP: DDP all-reduces fp32 gradients whatever the reduce dtype, and tensor
  // parallelism runs without autocast (maybe_enable_amp), in fp32.
  std::string ddp_tp = with(shard_all, "\"data_parallel_shard_degree\": 1");
  ddp_tp.replace(ddp_tp.find(tp1), tp1.size(), "\"tensor_parallel_degree\": 8");
  ddp_tp.replace(ddp_tp.find(init), init.size(), "global batch size 2, gradient accumulation steps 1");
  const std::string mp = "\"mixed_precision_param\": \"bfloat16\"";
  ddp_tp.replace(ddp_tp.find(mp), mp.size(), mp + ",\n[rank0]:    \"mixed_precision_reduce\": \"bfloat16\"");
  const LoggedRun d = ParseTrainingLog(ddp_tp, "t.log", eight);
  EXPECT_EQ(d.config.zero_stage, 0);
  EXPECT_TRUE(d.config.fp32_main_grads);
  EXPECT_EQ(d.config.precision, Precision::kFp32);
  EXPECT_NE(Join(d.notes, "|").find("torchtitan trains in fp32"), std::string::npos);
  // FP8 parameter all-gathers under FSDP (v0.2's key).
  std::string gather = with(none, "\"converters\": [\"quantize.linear.float8\"]");
  gather.insert(gather.find("[rank0]:  \"training\": {"),
                "[rank0]:  \"quantize\": {\"linear\": {\"float8\": {\"enable_fsdp_float8_all_gather\": true}}},\n");
  EXPECT_TRUE(ParseTrainingLog(gather, "t.log", eight).config.fp8_param_gather);
}

TEST(RunLog, ARunTheProfileCannotSimulateIsSkippedNotFatal) {
  const Cluster cl = LoadCluster("dgx-h100");
  LoggedRun mx = ReadTrainingLog(kMegatron, {});
  mx.config.precision = Precision::kMxfp8;  // H100 has no MXFP8 GEMMs
  const std::vector<LoggedRun> runs = {mx, ReadTrainingLog(kMegatron, {})};
  const ValidationReport rep = ValidateLoggedRuns(runs, cl, DefaultProfile(cl));
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_TRUE(rep.rows[0].skipped);
  EXPECT_NE(rep.rows[0].skip_reason.find("mxfp8"), std::string::npos) << rep.rows[0].skip_reason;
  EXPECT_FALSE(rep.rows[1].skipped);
  EXPECT_NE(testing::InputErrorOf([&] { ValidateLoggedRuns(runs, cl, DefaultProfile(cl), "1"); }).find("run 1 was skipped"),
            std::string::npos);
  // Its JSON row names its log and keeps what was measured; its predictions are null.
  const Json row = ValidationJson(rep, kMegatron)["rows"][0];
  EXPECT_EQ(row["log"], rep.rows[0].log);
  EXPECT_FALSE(row["log"].get<std::string>().empty());
  EXPECT_TRUE(row["measured_step_time_s"].is_number());
  for (const char* k : {"predicted_step_time_s", "step_time_error", "predicted_peak_memory_bytes", "predicted_fits"}) {
    ASSERT_TRUE(row.contains(k)) << k;
    EXPECT_TRUE(row[k].is_null()) << k;
  }
}

TEST(RunLog, CommandLineNeedsTheClusterAndKeepsLogsApartFromPublishedRuns) {
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kMegatron + " --cluster dgx-h100 --gpus 0", "--gpus: got \"0\""));
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kMegatron, "--cluster: missing"));
  EXPECT_TRUE(testing::ExitsTwoWith("validate --cluster dgx-h100", "go with --log"));
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kMegatron + " --cluster dgx-h100 --runs x.csv", "not combined with --log"));
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kTitan + " --cluster dgx-h100", "pass --gpus N"));
  // One log given twice would count its run twice.
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kMegatron + " " + kMegatron + " --cluster dgx-h100",
                                    "command line: --log: got " + kMegatron + " twice"));
  // ... as would a copy of it under another name.
  const std::string copy = testing::WriteTemp("megatron_copy.log", ReadTextFile(kMegatron));
  EXPECT_TRUE(testing::ExitsTwoWith("validate --log " + kMegatron + " " + copy + " --cluster dgx-h100",
                                    "command line: --log: " + kMegatron + " and " + copy + " hold the same text"));
  const auto r = testing::RunShardcast("validate --log " + kMegatron + " " + kTitan + " --cluster dgx-h100 --gpus 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["logs"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["source_id"], "MLM");
  EXPECT_EQ(j["rows"][1]["source_id"], "TT");
  EXPECT_EQ(j["rows"][0]["log"], kMegatron);
  EXPECT_NEAR(j["rows"][1]["measured_reserved_bytes"].get<double>(), 61.60 * 1073741824.0, 1.0);  // whole bytes
  EXPECT_EQ(j["rows"][1]["measured_peak_memory_bytes"], j["rows"][1]["measured_reserved_bytes"]);
  EXPECT_TRUE(j["rows"][1]["measured_memory_is_reserved"].get<bool>());
  // The CSV names each row's log, as the JSON does.
  const auto csv = testing::RunShardcast("validate --log " + kMegatron + " " + kTitan + " --cluster dgx-h100 --gpus 8 --csv -");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const CsvTable rows = ParseCsv(csv.out, "stdout");
  ASSERT_EQ(rows.rows.size(), 2u) << csv.out;
  EXPECT_EQ(rows.Get(0, "log"), kMegatron);
  EXPECT_EQ(rows.Get(1, "log"), kTitan);
  EXPECT_EQ(rows.Get(1, "low_confidence"), "false");
  const auto text = testing::RunShardcast("validate --log " + kMegatron + " --cluster dgx-h100");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Training logs"), std::string::npos);
  EXPECT_NE(text.out.find("TP2 PP2 DP2 mbs1 SP Z1"), std::string::npos) << text.out;
  const auto explain = testing::RunShardcast("validate --log " + kMegatron + " --cluster dgx-h100 --explain 1");
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_NE(explain.out.find("shardcast simulate --model"), std::string::npos);
}

}  // namespace
}  // namespace shardcast
