#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/csv.h"
#include "common/json_reader.h"
#include "common/text.h"
#include "models/loader.h"
#include "models/parallel.h"
#include "report/text.h"
#include "simulator/simulate.h"
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
  // The architecture flags the memory model uses: GPT-3 (Megatron) trains with dropout, Llama without.
  EXPECT_TRUE(j["model"]["dropout"].get<bool>());
  EXPECT_FALSE(Json::parse(RunShardcast("describe --model llama2-7b --json").out)["model"]["dropout"].get<bool>());
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
  // The params column counts the MTP modules; the note gives the count without them.
  const ParameterCounts ds = LoadModel("deepseek-v3").Parameters();
  EXPECT_NE(r.out.find("deepseek-v3: " + FormatCount(static_cast<double>(ds.total)) + " = " +
                       FormatCount(static_cast<double>(ds.total - ds.mtp)) + " + " +
                       FormatCount(static_cast<double>(ds.mtp)) + " of MTP"),
            std::string::npos)
      << r.out;
  // describe's memory per GPU is whole bytes, as simulate's usable memory.
  const Json d = Json::parse(RunShardcast("describe --model llama3-8b --cluster dgx-h100 --gpus 8 --json").out);
  const Json s = Json::parse(
      RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 2 --mbs 1 --gbs 8 --json").out);
  EXPECT_TRUE(d["fit"]["memory_bytes_per_gpu"].is_number_integer()) << d["fit"];
  EXPECT_EQ(d["fit"]["memory_bytes_per_gpu"].get<double>(), std::round(s["usable_memory_bytes"].get<double>()));
}

TEST(Cli, ExitCodes) {
  EXPECT_EQ(RunShardcast("describe --model no-such-model").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe --model gpt3-175b --tp 0").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe").exit_code, 2);
  EXPECT_EQ(RunShardcast("describe --model llama2-70b --tp 8").exit_code, 2);  // --tp needs --cluster
  EXPECT_EQ(RunShardcast("no-such-command").exit_code, 2);
  auto cmd_typo = RunShardcast("plann --model gpt3-1.3b");
  EXPECT_EQ(cmd_typo.exit_code, 2);
  EXPECT_NE(cmd_typo.err.find("got unknown command \"plann\", expected one of models, describe, simulate, plan,"),
            std::string::npos)
      << cmd_typo.err;
  EXPECT_NE(cmd_typo.err.find("; did you mean plan?"), std::string::npos) << cmd_typo.err;
  auto sub_typo = RunShardcast("calibrate imprt x.log --out x.json");
  EXPECT_EQ(sub_typo.exit_code, 2);
  EXPECT_NE(sub_typo.err.find("got unknown subcommand of calibrate \"imprt\", expected one of import; did you mean "
                              "import?"),
            std::string::npos)
      << sub_typo.err;
  EXPECT_EQ(RunShardcast("--version").exit_code, 0);
  // Output that cannot be written is a failure.
  EXPECT_EQ(testing::RunCommand(std::string(SHARDCAST_BINARY) + " models > /dev/full").exit_code, 2);
  // A folder where a file is expected: said so, not "cannot open" or "cannot rename".
  const auto folder = shardcast::testing::TestTempDir() / "a_folder";
  std::filesystem::create_directories(folder);
  EXPECT_EQ(RunShardcast("describe --model " + folder.string()).err,
            "shardcast: error: " + folder.string() +
                ": is a folder without a config.json, expected a JSON file or a Hugging Face model folder\n");
  EXPECT_NE(RunShardcast("simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --gbs 64 --trace " + folder.string())
                .err.find("--trace: got \"" + folder.string() + "\", a folder; expected the path of a file to write"),
            std::string::npos);
  // A folder named like a preset in the working directory does not hide the preset.
  std::filesystem::create_directories(folder / "gpt3-125m");
  std::filesystem::create_directories(folder / "dgx-a100");
  EXPECT_EQ(testing::RunCommand("cd " + folder.string() + " && " + SHARDCAST_BINARY +
                                " simulate --model gpt3-125m --cluster dgx-a100 --gpus 8 --gbs 64 > /dev/null")
                .exit_code,
            0);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-175b --cluster dgx-a100 --bogus 3",
                                    "got unexpected arguments \"--bogus 3\""));
  auto typo = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --recompue full");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("; for --recompue did you mean --recompute?"), std::string::npos) << typo.err;
  EXPECT_EQ(RunShardcast("describe --help").exit_code, 0);
  EXPECT_EQ(RunShardcast("--help").exit_code, 0);
  auto r = RunShardcast("describe --model gpt3-17b");
  EXPECT_NE(r.err.find("close matches: gpt3-13b, gpt3-175b"), std::string::npos) << r.err;
  // An output file that is an input, or that another output names, is refused before anything is written.
  const std::string model_copy = testing::WriteTemp("emit-model.json", ModelToJson(LoadModel("gpt3-125m")).dump());
  const std::string before = ReadTextFile(model_copy);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model " + model_copy + " --cluster dgx-a100 --gpus 8 --gbs 8 "
                                    "--emit megatron --emit-file " + model_copy,
                                    "command line: --emit-file: got " + model_copy + ", which is an input"));
  EXPECT_EQ(ReadTextFile(model_copy), before);
  const std::string same = (std::filesystem::temp_directory_path() / "shardcast-same.out").string();
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-125m --cluster dgx-a100 --gpus 8 --gbs 8 --emit megatron "
                                    "--emit-file " + same + " --trace " + same,
                                    "command line: --trace and --emit-file: both got " + same));
  // torchtitan refuses DDP beside tp at start-up: said at the top of the file; FSDP2 (--zero 3) runs there.
  const std::string titan = "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --tp 2 --gbs 8 --sequence-parallel "
                            "--emit torchtitan";
  const auto ddp = RunShardcast(titan);
  EXPECT_NE(ddp.out.find("# WARNING: torchtitan replicates (DDP, data_parallel_replicate_degree = 4) only as the sole "
                         "parallelism"),
            std::string::npos)
      << ddp.out;
  EXPECT_EQ(RunShardcast(titan + " --zero 3").out.find("# WARNING"), std::string::npos);
  // Expert parallelism wider than data_parallel_shard_degree x cp x tp: torchtitan's ParallelDims refuses it.
  const std::string mixtral = "simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --tp 2 --pp 4 --ep 8 --etp 1 "
                              "--mbs 1 --gbs 256 --sequence-parallel --emit torchtitan";
  const auto ep = RunShardcast(mixtral + " --zero 0");
  EXPECT_NE(ep.out.find("# WARNING: torchtitan borrows expert-parallel ranks from data_parallel_shard_degree x cp x tp "
                        "(1 x 1 x 2), which ep = 8 must divide, with cp x tp dividing ep"),
            std::string::npos)
      << ep.out << ep.err;
  // ZeRO-1 under a pipeline is FSDP2's equivalent: written as FSDP2 over the 8 data-parallel ranks.
  const auto fsdp2 = RunShardcast(mixtral + " --zero 1 --no-overlap-grad-reduce");
  EXPECT_NE(fsdp2.out.find("data_parallel_shard_degree = 8"), std::string::npos) << fsdp2.out;
  EXPECT_NE(fsdp2.out.find("fsdp_reshard_after_forward = \"default\""), std::string::npos) << fsdp2.out;
  EXPECT_EQ(fsdp2.out.find("# WARNING"), std::string::npos) << fsdp2.out;
  // A window shorter than the sequence is modelled and said so (Mistral-7B v0.1: 4096 on every
  // layer, 3/4 of the causal FLOPs at 8192); Qwen's from max_window_layers on (24 of 32 layers).
  const std::string mistral = testing::WriteTemp("mistral-window.json", R"({"model_type": "mistral",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096})");
  const auto described = RunShardcast("describe --model " + mistral);
  EXPECT_NE(described.out.find("note: sliding_window = 4096 is shorter than seq 8192: the attention terms below count "
                               "the whole causal sequence (the convention); simulate costs the 32 windowed layers' flash "
                               "attention at 0.750 of it"),
            std::string::npos)
      << described.out;
  const std::string qwen = testing::WriteTemp("qwen-window.json", R"({"model_type": "qwen2",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
    "use_sliding_window": true, "max_window_layers": 8})");
  EXPECT_NE(RunShardcast("describe --model " + qwen).out.find("simulate costs the 24 windowed layers' flash attention at "
                                                             "0.750 of it"),
            std::string::npos);
  // A skip frequency of 1 windows no layer: no note.
  Json one = ModelToJson(LoadModel("llama3-8b"));
  one["window_size"] = 1024;
  one["window_attn_skip_freq"] = 1;
  const std::string one_file = testing::WriteTemp("window-skip1.json", one.dump());
  EXPECT_EQ(RunShardcast("describe --model " + one_file + " --seq 8192").out.find("window"), std::string::npos);
  // Transformer Engine runs a sliding window under context parallelism only with a2a or
  // all-gather: p2p is refused with the reason, and plan searches the all-gather.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model " + mistral + " --cluster dgx-h100 --gpus 8 --cp 2 --gbs 4 --seq 16384",
                                    "Transformer Engine runs sliding-window attention (sliding_window = 4096) under "
                                    "context parallelism only with --cp-comm-type a2a or allgather (got p2p)"));
  EXPECT_EQ(RunShardcast("simulate --model " + mistral + " --cluster dgx-h100 --gpus 8 --cp 2 --gbs 4 --seq 16384 "
                         "--cp-comm-type allgather --json").exit_code,
            0);
  EXPECT_EQ(RunShardcast("describe --model " + mistral + " --seq 4096").out.find("sliding_window"), std::string::npos);
  const auto simulated = RunShardcast("simulate --model " + mistral + " --cluster dgx-h100 --gpus 8 --tp 8 --gbs 8");
  EXPECT_NE(simulated.out.find("Note: sliding_window = 4096 is shorter than the sequence (8192 tokens): 32 of the 32 "
                               "layers attend within the window, their flash attention at 0.750"),
            std::string::npos)
      << simulated.out << simulated.err;
  // --no-scatter-gather describes Megatron-LM 2021-22's pipeline messages; Megatron-Core has none to turn off.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-125m --cluster dgx-a100 --gpus 8 --pp 2 --gbs 8 "
                                    "--no-scatter-gather",
                                    "command line: --no-scatter-gather: given with --framework megatron-core"));
  EXPECT_EQ(RunShardcast("simulate --model gpt3-125m --cluster dgx-a100 --gpus 8 --pp 2 --gbs 8 --no-scatter-gather "
                         "--framework megatron-2022").exit_code,
            0);
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model nope --tokens 1B --gbs 8 --gpus-options dgx-a100:8",
                                    "command line: --model: unknown model preset 'nope'"));
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model gpt3-125m --cluster dgx-a99 --gpus 8 --gbs 8",
                                    "command line: --cluster: unknown cluster preset 'dgx-a99'"));
}

// --allocator-trace: each stage's replayed calls and the model's figures over them. The unlimited
// run's reserved - allocated is the allocator overhead simulate adds to the stage's peak.
TEST(Cli, SimulateWritesTheAllocatorTraceOfEveryStage) {
  const auto path = shardcast::testing::TestTempDir() / "allocator-trace.json";
  auto r = RunShardcast("simulate --model gpt3-125m --cluster dgx-a100 --gpus 4 --pp 2 --mbs 2 --gbs 16 --json "
                        "--allocator-trace " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json sim = Json::parse(r.out);
  std::ifstream in(path);
  const Json trace = Json::parse(in);
  EXPECT_EQ(trace["format"], "shardcast-allocator-trace/1");
  ASSERT_EQ(trace["stages"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const Json& st = trace["stages"][i];
    const Json& stage = sim["stages"][i];
    EXPECT_EQ(st["stage"], static_cast<int>(i));
    ASSERT_FALSE(st["events"].empty());
    EXPECT_EQ(st["events"][0][0], 0);  // an allocation: the static bytes
    const Json& unl = st["model"]["unlimited"];
    const double overhead = unl["peak_reserved_bytes"].get<double>() - unl["peak_allocated_bytes"].get<double>();
    EXPECT_NEAR(stage["reserved_memory_bytes"].get<double>() - stage["peak_memory_bytes"].get<double>(), overhead, 1.0);
    EXPECT_GT(st["capacity_bytes"].get<double>(), unl["peak_reserved_bytes"].get<double>());  // 80 GB: room
  }
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-125m --cluster dgx-a100 --gpus 4 --gbs 16 --allocator-trace " +
                                        shardcast::testing::TestTempDir().string(),
                                    "--allocator-trace"));
}

TEST(Cli, NonDividingSizesAreAResultNotACrash) {
  auto r = RunShardcast("describe --model gpt3-175b --cluster dgx-a100 --gpus 1000 --tp 8 --pp 12 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_FALSE(j["fit"]["feasible"].get<bool>());
  EXPECT_EQ(j["fit"]["reasons"][0], "tp*pp = 8*12 = 96 does not divide 1000 GPUs");
}

TEST(CliSimulate, DeepSpeedOptimizerFlags) {
  const std::string base =
      "simulate --model gpt3-175b --cluster jean-zay-a100 --gpus 64 --tp 8 --pp 8 --mbs 1 --gbs 64 "
      "--recompute full --no-flash-attention --json ";
  // The BF16_Optimizer: all-reduce of fp32 gradients, 2 + 6 + 12/dp bytes per parameter, shown in
  // the JSON so the memory can be explained.
  auto r = RunShardcast(base + "--dp 1 --zero 1 --optimizer deepspeed-bf16 --p2p-blocking");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json c = Json::parse(r.out)["config"];
  EXPECT_EQ(c["optimizer_impl"], "deepspeed-bf16");
  EXPECT_EQ(c["grad_reduce"], "all_reduce");
  EXPECT_EQ(c["grad_reduce_bytes_per_param"].get<double>(), 4.0);
  EXPECT_EQ(c["state_bytes_per_param"]["grads"].get<double>(), 6.0);
  EXPECT_TRUE(c["p2p_blocking"].get<bool>());
  EXPECT_FALSE(c.contains("fp32_main_grads"));
  // Combinations the optimizers do not have are input errors (exit 2) naming the flag.
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 0 --optimizer deepspeed-bf16",
                                    "--zero: got 0, expected 1 with --optimizer deepspeed-bf16"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 0 --optimizer deepspeed-zero",
                                    "--zero: got 0, expected 1, 2 or 3 with --optimizer deepspeed-zero"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 1 --zero3-impl deepspeed-2021",
                                    "--zero3-impl: got deepspeed-2021 with --zero 1, expected --zero 3"));
  EXPECT_EQ(RunShardcast(base + "--zero 3 --zero3-impl fsdp1").exit_code, 2);
  // Given explicitly, even the default is refused below stage 3 rather than ignored.
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 2 --zero3-impl per-layer",
                                    "--zero3-impl: got per-layer with --zero 2, expected --zero 3"));
  EXPECT_EQ(RunShardcast(base + "--zero 1 --optimizer deepspeed-zero --bf16-main-grads").exit_code, 2);
  EXPECT_EQ(RunShardcast(base + "--optimizer apex").exit_code, 2);
}

TEST(CliSimulate, TorchFsdpStateAndItsRefusals) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 --recompute full ";
  // FULL_SHARD over 8: 16/8 bytes a parameter against Megatron's 18/8, gradients reduced in fp32.
  auto fsdp = RunShardcast(base + "--zero 3 --optimizer fsdp --json");
  auto megatron = RunShardcast(base + "--zero 3 --json");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.err;
  ASSERT_EQ(megatron.exit_code, 0) << megatron.err;
  const Json f = Json::parse(fsdp.out), m = Json::parse(megatron.out);
  EXPECT_EQ(f["config"]["optimizer_impl"], "fsdp");
  EXPECT_DOUBLE_EQ(f["config"]["state_bytes_per_param"]["weights"].get<double>(), 4.0 / 8);
  EXPECT_DOUBLE_EQ(f["config"]["state_bytes_per_param"]["grads"].get<double>(), 4.0 / 8);
  EXPECT_DOUBLE_EQ(f["config"]["state_bytes_per_param"]["optimizer"].get<double>(), 8.0 / 8);
  EXPECT_DOUBLE_EQ(f["config"]["grad_reduce_bytes_per_param"].get<double>(), 4.0);
  EXPECT_TRUE(f["config"]["fp32_main_grads"].get<bool>());
  // The state is 16/18 of Megatron's (its 18/8 bytes a parameter: bf16 weights, fp32 main
  // gradients, fp32 master and Adam, all sharded).
  const auto state = [](const Json& j) {
    const Json& s = j["stages"][0]["memory_bytes"];
    return s["weights"].get<double>() + s["grads"].get<double>() + s["optimizer"].get<double>();
  };
  EXPECT_NEAR(state(f), state(m) * 16.0 / 18.0, 1e-9 * state(m));
  // --bf16-main-grads is FSDP's reduce_dtype bf16: 2-byte reduce-scatters, the shard stays fp32.
  auto bf16 = RunShardcast(base + "--zero 3 --optimizer fsdp --bf16-main-grads --json");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const Json b = Json::parse(bf16.out)["config"];
  EXPECT_DOUBLE_EQ(b["grad_reduce_bytes_per_param"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(b["state_bytes_per_param"]["grads"].get<double>(), 4.0 / 8);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 3 --optimizer fsdp --zero3-impl deepspeed",
                                    "--zero3-impl: got deepspeed with --optimizer fsdp, expected per-layer"));
  // FSDP's hybrid sharding (HSDP) is FSDP's own: the state sharded over groups of 4.
  auto hsdp = RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --mbs 1 --gbs 16 --recompute full "
                           "--zero 3 --optimizer fsdp --dp-shard 4 --json");
  ASSERT_EQ(hsdp.exit_code, 0) << hsdp.err;
  EXPECT_DOUBLE_EQ(Json::parse(hsdp.out)["config"]["state_bytes_per_param"]["optimizer"].get<double>(), 8.0 / 4);
  // plan --optimizer fsdp: each plan's simulate command reproduces it, with FSDP's state.
  const auto plan = RunShardcast("plan --model llama3-8b --cluster dgx-h100 --gpus 16 --gbs 32 --optimizer fsdp "
                                 "--top 3 --threads 1 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const Json pj = Json::parse(plan.out);
  ASSERT_FALSE(pj["plans"].empty());
  for (const Json& p : pj["plans"]) {
    const std::string cmd = p["simulate_command"].get<std::string>();
    EXPECT_NE(cmd.find("--optimizer fsdp"), std::string::npos) << cmd;
    const auto sim = RunShardcast(cmd.substr(std::string("shardcast ").size()) + " --json");
    ASSERT_EQ(sim.exit_code, 0) << cmd << "\n" << sim.err;
    EXPECT_DOUBLE_EQ(Json::parse(sim.out)["step_time_s"].get<double>(), p["step_time_s"].get<double>()) << cmd;
  }
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model llama3-8b --cluster dgx-h100 --gpus 8 --gbs 8 --optimizer fsdp "
                                    "--zero3-impl deepspeed",
                                    "--zero3-impl: got deepspeed with --optimizer fsdp, expected per-layer"));
}

// FlashAttention does not run on Volta: the V100 simulates and plans the unfused attention (its
// s x s scores saved), says so, and the launch writes the unfused backend; asking for flash exits 2.
TEST(CliSimulate, VoltaRunsTheUnfusedAttention) {
  const std::string base = "simulate --model gpt3-1.3b --cluster dgx-2 --gpus 16 --tp 2 --mbs 1 --gbs 32 --precision fp16 ";
  auto j = RunShardcast(base + "--json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_FALSE(Json::parse(j.out)["config"]["flash_attention"].get<bool>());
  auto text = RunShardcast(base + "--emit megatron");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("attention: unfused, saving the s x s scores (FlashAttention needs Turing or later; the "),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("--attention-backend unfused"), std::string::npos);
  EXPECT_EQ(text.out.find("--use-flash-attn"), std::string::npos);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--use-flash-attn", "--use-flash-attn: given on v100-sxm2-32gb (volta)"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--cp 2", "--cp: got 2, expected 1 on v100-sxm2-32gb (volta)"));
  const std::string nemo = RunShardcast(base + "--emit nemo").out;
  EXPECT_NE(nemo.find("recipe.model.config.attention_backend = AttnBackend.unfused"), std::string::npos) << nemo;
  EXPECT_NE(nemo.find("from megatron.core.transformer.enums import AttnBackend"), std::string::npos);
  auto cap = RunShardcast("capacity --model gpt3-1.3b --tokens 1B --gbs 32 --precision fp16 --gpus-options dgx-2:16 "
                          "--price-per-gpu-hour v100-sxm2-32gb=1 --json");
  ASSERT_EQ(cap.exit_code, 0) << cap.err;
  EXPECT_NE(Json::parse(cap.out)["options"][0]["profile_estimates"].dump().find("unfused attention core"),
            std::string::npos);
  auto plan = RunShardcast("plan --model gpt3-1.3b --cluster dgx-2 --gpus 16 --gbs 32 --precision fp16 --top 1");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("--attention-backend unfused"), std::string::npos) << plan.out;
}

TEST(CliSimulate, UnknownInterNodeFabricIsAnInputError) {
  const std::string bad = testing::WriteTemp("opa_cluster.json", R"({"name": "x", "gpu": "a100-sxm4-80gb",
    "gpus_per_node": 8, "intra_node": {"fabric": "nvswitch", "bandwidth_GBps_per_direction": 300},
    "inter_node": {"nics_per_node": 4, "nic_Gbps": 100, "fabric": "OPA"}})");
  auto r = RunShardcast("simulate --model gpt3-175b --gpus 8 --tp 8 --cluster " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/inter_node/fabric"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("omni-path"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

using testing::RunShardcast;
using testing::WriteTemp;

const char* kDoneCommand =
    "simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 --tp 8 --pp 8 --vp 3 --mbs 1 --gbs 64 "
    "--recompute selective --sequence-parallel --schedule interleaved";

TEST(CliSimulate, JsonHasThePinnedKeys) {
  auto r = RunShardcast(std::string(kDoneCommand) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  for (const char* k : {"step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction",
                        "peak_memory_bytes", "fits", "stages", "breakdown_s"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  ASSERT_EQ(j["stages"].size(), 8u);
  EXPECT_TRUE(j["stages"][0]["peak_memory_bytes"].is_number());
  // 96 layers over pp 8 x vp 3 chunks: every stage holds 3 chunks of 4 layers.
  for (const auto& s : j["stages"]) EXPECT_EQ(s["chunk_layers"], Json::parse("[4, 4, 4]")) << s["stage"];
  // The text names the stage with the least bubble as the busiest, the first of equals.
  std::size_t least = 0;
  for (std::size_t i = 1; i < j["stages"].size(); ++i) {
    if (j["stages"][i]["breakdown_s"]["bubble"].get<double>() < j["stages"][least]["breakdown_s"]["bubble"].get<double>()) least = i;
  }
  const auto text = RunShardcast(kDoneCommand);
  EXPECT_NE(text.out.find(fmt::format("busiest: stage {} (", least)), std::string::npos) << text.out;
  // tokens/s is gbs * seq / step time.
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 64.0 * 2048 / j["step_time_s"].get<double>(), 1e-6);
  double sum = 0;
  for (auto& [k, v] : j["breakdown_s"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, j["step_time_s"].get<double>(), 1e-6);
}

TEST(CliSimulate, HumanOutputAndTrace) {
  const std::string trace = WriteTemp("trace.json", "");
  auto r = RunShardcast(std::string(kDoneCommand) + " --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"step time", "MFU / HFU", "bubble fraction", "Critical path", "fits"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  // The schedule's own bubble beside the simulated one: p 8, v 3, m 64 -> 7 / (3*64 + 7).
  const std::string ideal = fmt::format("would give {:.1f}% = (p-1)/(v*m+p-1) (p 8, v 3, m 64)", 100.0 * 7 / (3 * 64 + 7));
  EXPECT_NE(r.out.find(ideal), std::string::npos) << ideal << "\n" << r.out;
  // Four pipeline flushes of 16 micro-batches: 4 * 7 / (3*64 + 4*7), in the header and JSON.
  auto f = RunShardcast(std::string(kDoneCommand) + " --pipeline-flushes 4");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const std::string flushed =
      fmt::format("would give {:.1f}% = f*(p-1)/(v*m+f*(p-1)) (p 8, v 3, m 64, f 4 flushes)", 100.0 * 28 / (3 * 64 + 28));
  EXPECT_NE(f.out.find(flushed), std::string::npos) << flushed << "\n" << f.out;
  EXPECT_NE(f.out.find(" flushes4 "), std::string::npos);
  auto fj = RunShardcast(std::string(kDoneCommand) + " --pipeline-flushes 4 --json");
  ASSERT_EQ(fj.exit_code, 0) << fj.err;
  EXPECT_EQ(Json::parse(fj.out)["config"]["pipeline_flushes"], 4);
  EXPECT_EQ(Json::parse(fj.out)["config"]["flush_grad_reduce"], "every");
  // Integers are decimal: a leading zero is not octal (CLI11 alone reads 064 as 52).
  auto dec = RunShardcast("simulate --model llama2-7b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 064 --json");
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(Json::parse(dec.out)["config"]["global_batch_size"], 64);
  // Flushes need a pipeline; Megatron-Core's EP A2A overlap runs one schedule a step.
  auto nopp = RunShardcast("simulate --model llama2-7b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 64 --pipeline-flushes 2");
  EXPECT_NE(nopp.out.find("pipeline flushes: got 2 with pp = 1, expected 1 without pipeline parallelism"), std::string::npos)
      << nopp.out;
  auto alone = RunShardcast("simulate --model llama2-7b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 --flush-grad-reduce last");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--flush-grad-reduce last: given without --pipeline-flushes"), std::string::npos) << alone.err;
  auto a2a = RunShardcast("simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 16 --pp 2 --vp 2 --ep 8 --mbs 1 "
                          "--gbs 16 --pipeline-flushes 2 --overlap-moe-expert-parallel-comm");
  EXPECT_EQ(a2a.exit_code, 2);
  EXPECT_NE(a2a.err.find("--overlap-moe-expert-parallel-comm is Megatron-Core's, which runs one schedule a step; "
                         "pipeline flushes (2) are PyTorch pipelining's"),
            std::string::npos)
      << a2a.err;
  Json t = ReadJsonFile(trace);
  ASSERT_TRUE(t["traceEvents"].is_array());
  EXPECT_GT(t["traceEvents"].size(), 1000u);
}

TEST(CliSimulate, OpsTableShapesAndFlops) {
  auto r = RunShardcast(std::string(kDoneCommand) + " --ops");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // GPT-3 at TP8, mbs 1, seq 2048: the QKV GEMM is tokens x 3h/t x h = 2048 x 4608 x 12288,
  // 2*m*n*k = 231.928 GFLOP; the output layer is 2048 x V/t x h with V = 51200 -> 6400.
  for (const char* s : {"Ops per micro-batch", "one transformer layer", "2048 x 4608 x 12288", "231.928",
                        "output layer and loss", "2048 x 6400 x 12288", "TFLOP/s", "GB/s"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  // Without --ops the table is not printed; with --json it is an input error.
  EXPECT_EQ(RunShardcast(kDoneCommand).out.find("Ops per micro-batch"), std::string::npos);
  auto j = RunShardcast(std::string(kDoneCommand) + " --ops --json");
  EXPECT_EQ(j.exit_code, 2);
  EXPECT_NE(j.err.find("--ops: the op table is text; not combined with --json"), std::string::npos) << j.err;
}

TEST(CliSimulate, MegatronAliases) {
  auto a = RunShardcast(std::string(kDoneCommand) + " --json");
  auto b = RunShardcast(
      "simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 4 --micro-batch-size 1 "
      "--global-batch-size 64 --recompute-granularity selective --sequence-parallel --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(Json::parse(a.out)["step_time_s"], Json::parse(b.out)["step_time_s"]);
  // The embedding-slot flags plan exports: 96 + 2 = 98 layer slots over pp 7.
  const std::string slots = "simulate --model gpt3-175b --cluster dgx-a100 --gpus 56 --tp 8 --pp 7 --mbs 1 --gbs 14 --json ";
  auto c = RunShardcast(slots + "--embedding-pipeline-slots");
  auto d = RunShardcast(slots + "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_TRUE(Json::parse(d.out)["config"]["embedding_slots"].get<bool>());
  EXPECT_EQ(Json::parse(c.out)["step_time_s"], Json::parse(d.out)["step_time_s"]);
  // One of Megatron's two flags alone is a split the model does not represent.
  EXPECT_TRUE(testing::ExitsTwoWith(slots + "--account-for-loss-in-pipeline-split",
                                    "--account-for-loss-in-pipeline-split: given alone, expected both"));
  // Megatron-LM's FSDP switches that plan writes for ZeRO-2/3 (MegatronArgs): the same stages.
  const std::string z = "simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --mbs 1 --gbs 16 --recompute full --json ";
  const auto zero_of = [](const testing::RunResult& r) { return Json::parse(r.out)["config"]["zero_stage"].get<int>(); };
  for (const auto& [flags, stage] : std::vector<std::pair<std::string, int>>{
           {"--use-torch-fsdp2", 3},
           {"--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads --ckpt-format fsdp_dtensor", 2},
           {"--use-megatron-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy optim_grads_params", 3},
           {"--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor "
            "--num-distributed-optimizer-instances 2 --outer-dp-sharding-strategy no_shard",
            3}}) {
    const auto r = RunShardcast(z + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    EXPECT_EQ(zero_of(r), stage) << flags;
  }
  EXPECT_TRUE(testing::ExitsTwoWith(z + "--zero 1 --use-torch-fsdp2", "--zero 1 and --use-torch-fsdp2: ZeRO-1 and ZeRO-3"));
  EXPECT_TRUE(testing::ExitsTwoWith(z + "--data-parallel-sharding-strategy optim",
                                    "--data-parallel-sharding-strategy: given without --use-megatron-fsdp"));
  EXPECT_TRUE(testing::ExitsTwoWith(z + "--use-megatron-fsdp", "--use-megatron-fsdp: given without "
                                                              "--data-parallel-sharding-strategy"));
}

TEST(CliSimulate, UnevenPipelineSplitNamesStagesAndLayers) {
  // 32 layers over pp 4 with 7 on the first and last stage: (32 - 14) / 2 = 9 on each middle stage.
  auto r = RunShardcast("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --tp 2 --pp 4 --mbs 1 --gbs 16 "
                        "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Pipeline split (transformer layers per stage): 1 stage of 7, then 2 stages of 9, then 1 "
                       "stage of 7"),
            std::string::npos)
      << r.out;
}

TEST(CliSimulate, InfeasibleIsAResultWithAReason) {
  auto r = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 --tp 8 --pp 8 --dp 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_EQ(j["reason"], "dp = 2 but 64 GPUs / (tp*pp = 64) = 1");
  auto big = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --tp 8 --json");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_FALSE(Json::parse(big.out)["fits"].get<bool>());
  // 10 GPUs at TP8: the data-parallel size is undetermined, and the header says so rather than DP1.
  auto odd = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 10 --tp 8");
  ASSERT_EQ(odd.exit_code, 0) << odd.err;
  EXPECT_NE(odd.out.find("TP8 PP1 DP? mbs1 gbs?"), std::string::npos) << odd.out;
  EXPECT_NE(odd.out.find("micro-batches per step ?"), std::string::npos) << odd.out;
  EXPECT_NE(odd.out.find("tp*pp = 8*1 = 8 does not divide 10 GPUs"), std::string::npos) << odd.out;
  // A step of hours: the text's throughput keeps three significant digits, as the JSON has them.
  const std::string wide = testing::WriteTemp("wide_model.json", R"({"name": "wide", "num_layers": 512,
    "hidden_size": 65536, "ffn_hidden_size": 262144, "num_attention_heads": 512, "kv_channels": 128,
    "vocab_size": 50000, "seq_length": 4096, "normalization": "layernorm", "activation": "swiglu",
    "position_embedding": "rope", "tie_embeddings": false})");
  auto slow = RunShardcast("simulate --model " + wide + " --cluster dgx-h100 --gpus 8 --tp 8 --mbs 1 --gbs 1 --json");
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  const double tps = Json::parse(slow.out)["tokens_per_s"].get<double>();
  ASSERT_GT(tps, 0.0);
  ASSERT_LT(tps, 100.0);  // premise
  auto slow_text = RunShardcast("simulate --model " + wide + " --cluster dgx-h100 --gpus 8 --tp 8 --mbs 1 --gbs 1");
  EXPECT_NE(slow_text.out.find(fmt::format("throughput       {:.3g} tokens/s", tps)), std::string::npos) << slow_text.out;
  // gbs 64 is no multiple of mbs 3 * dp 2: no whole micro-batch count (not 64 / 6 rounded down).
  auto uneven = RunShardcast("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --tp 2 --pp 2 --mbs 3 --gbs 64");
  ASSERT_EQ(uneven.exit_code, 0) << uneven.err;
  EXPECT_NE(uneven.out.find("micro-batches per step ?"), std::string::npos) << uneven.out;
  auto uneven_json = RunShardcast("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --tp 2 --pp 2 --mbs 3 --gbs 64 --json");
  ASSERT_EQ(uneven_json.exit_code, 0) << uneven_json.err;
  EXPECT_TRUE(Json::parse(uneven_json.out)["num_microbatches"].is_null()) << uneven_json.out;
  auto odd_json = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 10 --tp 8 --zero 3 --json");
  ASSERT_EQ(odd_json.exit_code, 0) << odd_json.err;
  const Json oj = Json::parse(odd_json.out);
  EXPECT_TRUE(oj["config"]["dp"].is_null());
  EXPECT_TRUE(oj["config"]["global_batch_size"].is_null());
  EXPECT_FALSE(oj["config"].contains("state_bytes_per_param"));  // no dp to shard over
}

// FlashAttention-2 on Hopper changes the attention rates (and says so); the defaults are no-ops;
// a kernel without known rates on the GPU is an input error.
TEST(CliSimulate, AttentionKernel) {
  const std::string base = "simulate --model gpt3-1.3b --gpus 8 --cluster ";
  auto step = [](const std::string& out) { return out.substr(out.find("  step time "), 40); };
  auto h100 = RunShardcast(base + "dgx-h100");
  auto h100_fa3 = RunShardcast(base + "dgx-h100 --attention-kernel fa3");
  auto h100_fa2 = RunShardcast(base + "dgx-h100 --attention-kernel fa2");
  ASSERT_EQ(h100_fa2.exit_code, 0) << h100_fa2.err;
  EXPECT_EQ(step(h100_fa3.out), step(h100.out));
  EXPECT_NE(step(h100_fa2.out), step(h100.out));
  EXPECT_NE(h100_fa2.out.find("profile adjusted: attention: FlashAttention-2 on Hopper"), std::string::npos);
  EXPECT_EQ(step(RunShardcast(base + "dgx-a100 --attention-kernel fa2").out), step(RunShardcast(base + "dgx-a100").out));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "dgx-a100 --attention-kernel fa3",
                                    "--attention-kernel: got \"fa3\" for a GPU of architecture ampere, expected default or fa2"));
  EXPECT_EQ(RunShardcast(base + "dgx-b200 --attention-kernel fa2").exit_code, 2);
}

// describe says when --seq exceeds a learned position table, which simulate and plan refuse.
TEST(CliDescribe, SequenceBeyondThePositionTableIsNoted) {
  auto r = RunShardcast("describe --model gpt3-1.3b --seq 4096");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("note: seq 4096 exceeds the learned position table (max_position_embeddings 2048)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(RunShardcast("describe --model gpt3-1.3b --seq 2048").out.find("exceeds the learned"), std::string::npos);
}

// Tensor parallelism wider than a node is simulated, with a note that its collectives cross nodes.
// GPT-2's 50257 rows over tp = 4: Megatron pads to the next multiple of 128 * 4 = 512.
TEST(CliSimulate, UnpaddedVocabularyIsNoted) {
  const std::string gpt2 = testing::FixturesDir() + "/hf/gpt2.json";
  auto r = RunShardcast("simulate --model " + gpt2 + " --cluster dgx-a100 --gpus 8 --tp 4 --mbs 4 --gbs 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::int64_t padded = (50257 + 511) / 512 * 512;
  EXPECT_NE(r.out.find(fmt::format("Note: vocab_size 50257 is not a multiple of tp = 4: the simulation shards it as it is "
                                   "(12564.25 rows per rank); Megatron-LM pads it to {}",
                                   padded)),
            std::string::npos)
      << r.out;
  EXPECT_EQ(RunShardcast("simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --tp 4 --mbs 4 --gbs 64").out.find("vocab_size"),
            std::string::npos);  // 51200 is padded already
}

TEST(CliSimulate, TensorParallelismAcrossNodesIsNoted) {
  auto r = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 16 --tp 16 --mbs 1 --gbs 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Note: tensor parallelism spans nodes (tp = 16 > 8 GPUs per node)"), std::string::npos) << r.out;
  EXPECT_EQ(RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --tp 8 --mbs 1 --gbs 1")
                .out.find("spans nodes"),
            std::string::npos);
}

// Named choices ignore case, as model and cluster names do.
TEST(CliSimulate, ChoicesIgnoreCase) {
  auto r = RunShardcast("simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --pp 2 --mbs 1 --gbs 8 --schedule 1F1B "
                        "--recompute FULL --precision BF16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["config"]["schedule"], "1f1b");
  EXPECT_EQ(j["config"]["recompute"], "full");
}

TEST(CliSimulate, BadInputExitsTwo) {
  EXPECT_EQ(RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --tp 0").exit_code, 2);
  EXPECT_EQ(RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --schedule zigzag").exit_code, 2);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --gpus 16",
                                    "command line: --gpus: given 2 times, expected once"));
  const std::string bad = WriteTemp("bad_profile.json", R"({"format": "other"})");
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-175b --cluster dgx-a100 --profile " + bad,
                                    "bad_profile.json: /format: got \"other\", expected \"shardcast-hardware-profile\""));
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

using testing::RunShardcast;

TEST(CliPlan, JsonKeysAndMegatronArguments) {
  auto r = RunShardcast("plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --top 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  for (const char* k : {"candidates_generated", "candidates_simulated", "rejected", "plans"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  ASSERT_EQ(j["plans"].size(), 3u);
  EXPECT_TRUE(j["plans"][0]["step_time_s"].is_number());
  EXPECT_TRUE(j["plans"][0]["fits"].get<bool>());
  EXPECT_NE(j["plans"][0]["megatron_arguments"].get<std::string>().find("--tensor-model-parallel-size"),
            std::string::npos);
  EXPECT_LE(j["plans"][0]["step_time_s"].get<double>(), j["plans"][1]["step_time_s"].get<double>());
  // Each plan carries the simulate command that reproduces it (the text's Details line for the
  // recommended one), and the simulate notes.
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string cmd = j["plans"][i]["simulate_command"].get<std::string>();
    ASSERT_EQ(cmd.rfind("shardcast simulate --model gpt3-13b --cluster dgx-a100 ", 0), 0u) << cmd;
    const auto sim = RunShardcast(cmd.substr(std::string("shardcast ").size()) + " --json");
    ASSERT_EQ(sim.exit_code, 0) << cmd << "\n" << sim.err;
    EXPECT_DOUBLE_EQ(Json::parse(sim.out)["step_time_s"].get<double>(), j["plans"][i]["step_time_s"].get<double>());
    EXPECT_TRUE(j["plans"][i]["notes"].is_array());
  }
  EXPECT_EQ(j["recommended"]["simulate_command"], j["plans"][j["recommended_rank"].get<int>() - 1]["simulate_command"]);
  const auto text = RunShardcast("plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --top 3");
  EXPECT_NE(text.out.find("Details: " + j["recommended"]["simulate_command"].get<std::string>() + "\n"), std::string::npos)
      << text.out;
}

// simulate --json carries the text's qualifying lines and notes, one string each, as the text
// has them (lines joined): here a partial node and a pipeline split pp does not divide.
TEST(CliSimulate, JsonHasTheTextsNotes) {
  const std::string args = "simulate --model llama2-7b --cluster dgx-h100 --gpus 12 --pp 3 --tp 4 --mbs 1 --gbs 8";
  const auto text = RunShardcast(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const auto json = RunShardcast(args + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json notes = Json::parse(json.out)["notes"];
  ASSERT_EQ(notes.size(), 2u) << notes.dump(1);
  EXPECT_EQ(notes[0], "Partial node: 12 GPUs are 1.50 nodes of 8; whole nodes are 16 GPUs");
  const std::string split = notes[1].get<std::string>();
  EXPECT_EQ(split.rfind("Pipeline split (transformer layers per stage): ", 0), 0u) << split;
  EXPECT_NE(split.find("32 layers over pp = 3 do not divide"), std::string::npos) << split;
  EXPECT_NE(text.out.find("\nPipeline split (transformer layers per stage): "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(notes[0].get<std::string>()), std::string::npos) << text.out;
  // A note over several lines is one string, its lines joined by a space.
  const auto sel = RunShardcast("simulate --model llama2-7b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 "
                                "--recompute selective --json");
  ASSERT_EQ(sel.exit_code, 0) << sel.err;
  const Json sel_notes = Json::parse(sel.out)["notes"];
  ASSERT_EQ(sel_notes.size(), 1u) << sel_notes.dump(1);
  EXPECT_EQ(sel_notes[0].get<std::string>().rfind("selective recompute of core_attn with flash attention reruns the "
                                                  "flash forward before its backward (Megatron-Core checkpoints the "
                                                  "core attention) but saves almost nothing: flash attention keeps no",
                                                  0),
            0u)
      << sel_notes[0];
}

// The Megatron-LM arguments plan prints run in simulate as they are (Megatron's switches for
// simulate's defaults included: --overlap-grad-reduce, --overlap-param-gather, --use-flash-attn,
// --fp8-amax-compute-algo) and give the plan's step time; each switch refuses its --no- twin.
TEST(CliPlan, PrintedMegatronArgumentsRunInSimulate) {
  const std::string where = "--model gpt3-1.3b --cluster dgx-h100 --gpus 16 ";
  const Json j = Json::parse(RunShardcast("plan " + where + "--gbs 512 --precision fp8 --top 1 --json").out);
  ASSERT_EQ(j["plans"].size(), 1u);
  const std::string args = j["plans"][0]["megatron_arguments"].get<std::string>();
  for (const char* f : {"--overlap-grad-reduce", "--use-flash-attn", "--fp8-amax-compute-algo max"}) {
    ASSERT_NE(args.find(f), std::string::npos) << "premise: " << args;
  }
  const auto sim = RunShardcast("simulate " + where + args + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_DOUBLE_EQ(Json::parse(sim.out)["step_time_s"].get<double>(), j["plans"][0]["step_time_s"].get<double>());
  EXPECT_EQ(RunShardcast("simulate " + where + args + " --no-overlap-grad-reduce").exit_code, 2);
  EXPECT_EQ(RunShardcast("simulate " + where + args + " --no-flash-attention").exit_code, 2);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate " + where + "--mbs 1 --gbs 16 --fp8-amax-compute-algo max",
                                    "--fp8-amax-compute-algo: given with precision bf16"));
  // most_recent would not reach the launches, which write max: refused, not dropped.
  EXPECT_EQ(RunShardcast("simulate " + where + "--mbs 1 --gbs 16 --precision fp8 --fp8-amax-compute-algo most_recent")
                .exit_code,
            2);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate " + where + "--mbs 1 --gbs 16 --overlap-param-gather",
                                    "--overlap-param-gather: given with ZeRO-0, expected --use-distributed-optimizer"));
  // An MoE plan's arguments begin with the model's --num-experts and --moe-router-topk and carry
  // --moe-grouped-gemm: simulate takes them, checked against the model's file.
  const std::string moe = "--model mixtral-8x7b --cluster dgx-h100 --gpus 32 ";
  const Json jm = Json::parse(RunShardcast("plan " + moe + "--gbs 256 --top 1 --json").out);
  ASSERT_EQ(jm["plans"].size(), 1u);
  const std::string margs = jm["plans"][0]["megatron_arguments"].get<std::string>();
  ASSERT_EQ(margs.rfind("--num-experts 8 --moe-router-topk 2 ", 0), 0u) << "premise: " << margs;
  ASSERT_NE(margs.find("--moe-grouped-gemm"), std::string::npos) << "premise: " << margs;
  const auto msim = RunShardcast("simulate " + moe + margs + " --json");
  ASSERT_EQ(msim.exit_code, 0) << msim.err;
  EXPECT_DOUBLE_EQ(Json::parse(msim.out)["step_time_s"].get<double>(), jm["plans"][0]["step_time_s"].get<double>());
  EXPECT_TRUE(testing::ExitsTwoWith("simulate " + moe + "--num-experts 16 --ep 8 --mbs 1 --gbs 32",
                                    "command line: --num-experts: got 16, expected 8, mixtral-8x7b's"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate " + moe + "--moe-router-topk 1 --mbs 1 --gbs 32",
                                    "command line: --moe-router-topk: got 1, expected 2, mixtral-8x7b's"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate " + where + "--num-experts 8 --mbs 1 --gbs 16",
                                    "command line: --num-experts: got 8, but gpt3-1.3b has no routed experts"));
}

TEST(CliPlan, TextAndBadInput) {
  auto r = RunShardcast("plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Best plan as Megatron-LM arguments"), std::string::npos);
  // "Not searched" names only what was left out: full recompute is searched by default.
  EXPECT_NE(r.out.find("pipeline parallelism (widen with --zero-stages 0,1,2,3).\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--recompute none,selective,full"), std::string::npos) << r.out;
  EXPECT_EQ(RunShardcast("plan --model gpt3-13b --cluster dgx-a100 --gpus 64").exit_code, 2);  // no --gbs
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --fix tq=8",
                                    "--fix: got \"tq=8\""));
  // Every --fix value is checked, not silently matched against nothing.
  const std::string base = "plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --top 1 --fix ";
  for (const char* v : {"sp=banana", "recompute=banana", "zero=9", "mbs=0", "tp=x", "schedule=pipedream"}) {
    auto b = RunShardcast(base + v);
    EXPECT_EQ(b.exit_code, 2) << v;
    EXPECT_NE(b.err.find(std::string("--fix: got \"") + v + "\", expected"), std::string::npos) << b.err;
  }
  EXPECT_TRUE(testing::ExitsTwoWith(base + "tp=8,tp=4", "expected tp once (it is already fixed to 8)"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "schedule=interleaved,vp=1",
                                    "expected vp >= 2 with the interleaved schedule"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "cp=1,cp_comm=a2a", "expected cp >= 2 with cp_comm"));
  // sp=y is sp=true; values outside the default search lists are searched when fixed, and the
  // "Details" line is a simulate command for the best plan.
  auto fixed = RunShardcast(base + "sp=y,zero=2,mbs=32 --json");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  const Json best = Json::parse(fixed.out)["plans"][0]["config"];
  EXPECT_TRUE(best["sequence_parallel"].get<bool>());
  EXPECT_EQ(best["zero_stage"], 2);
  EXPECT_EQ(best["micro_batch_size"], 32);
  auto text = RunShardcast(base + "tp=2,pp=1,mbs=4");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Details: shardcast simulate --model gpt3-13b --cluster dgx-a100 --gpus 64 --tp 2 --pp 1 "
                          "--mbs 4 --gbs 256"),
            std::string::npos)
      << text.out;
}

// A ranked plan fits by the caching allocator's replay: its reserved figure plus the headroom is
// within the GPU's memory. Plans that fit only by releasing the allocator's cache are marked at
// risk; the recommendation is the best one that is not, and --exclude-at-risk leaves them out.
TEST(CliPlan, AtRiskPlansAreMarkedAndNotRecommended) {
  const double gib = 1073741824.0;
  const Json def = Json::parse(RunShardcast("plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --gbs 1536 --json").out);
  ASSERT_FALSE(def["plans"].empty());
  EXPECT_GT(def["candidates_replayed"].get<std::size_t>(), 0u);
  EXPECT_LE(def["candidates_replayed"].get<std::size_t>(), def["candidates_simulated"].get<std::size_t>());
  for (const auto& p : def["plans"]) {
    EXPECT_GE(p["peak_reserved_memory_bytes"].get<double>(), p["peak_memory_bytes"].get<double>());
    EXPECT_LE(p["peak_reserved_memory_bytes"].get<double>() + 2 * gib, 80 * gib);  // the 2 GiB default headroom
    EXPECT_FALSE(p["memory_at_risk"].get<bool>());
  }
  // Without headroom, a plan on H100 needs the cache released: at risk (premise: one in the top 10).
  const std::string base = "plan --model gpt3-175b --cluster dgx-h100 --gpus 256 --gbs 1536 --min-headroom 0 --top 10 "
                           "--schedules 1f1b,interleaved,zb-h1";  // the plans at risk are ZB-H1's
  const Json j = Json::parse(RunShardcast(base + " --json").out);
  std::size_t at_risk = 0, first_safe = j["plans"].size();
  for (std::size_t i = 0; i < j["plans"].size(); ++i) {
    const Json& p = j["plans"][i];
    if (!p["memory_at_risk"].get<bool>()) {
      first_safe = std::min(first_safe, i);
      continue;
    }
    ++at_risk;
    EXPECT_LE(p["peak_memory_bytes"].get<double>(), p["usable_memory_bytes"].get<double>());
    int retries = 0;
    for (const auto& st : p["stages"]) {
      retries += st["allocator_retries"].get<int>();
      // The retries count over the replayed step's micro-batches (a cap past the steady state).
      EXPECT_GE(st["allocator_replayed_microbatches"].get<int>(), 1);
    }
    EXPECT_GT(retries, 0) << "what \"at risk\" means: the replay released its cache";
    EXPECT_LE(p["peak_reserved_memory_bytes"].get<double>(), p["usable_memory_bytes"].get<double>());
  }
  ASSERT_GT(at_risk, 0u) << "premise: some plan shown is at risk";
  // The text names the replayed micro-batches the releases are counted over: the replay's cap of
  // max(2p, 4) = 16 of the step's 1536 / (2 * 8) = 96 (premise: this plan releases its cache).
  const auto zb = RunShardcast("simulate --model gpt3-175b --cluster dgx-h100 --gpus 256 --tp 4 --pp 8 --mbs 2 --gbs 1536 "
                               "--sequence-parallel --zero 1 --tp-comm-overlap --schedule zb-h1");
  EXPECT_NE(zb.out.find("times in a replayed step of 16 of the step's 96 micro-batches"), std::string::npos) << zb.out;
  ASSERT_LT(first_safe, j["plans"].size()) << "premise: some plan shown is not";
  EXPECT_EQ(j["recommended_rank"], first_safe + 1);
  const Json ex = Json::parse(RunShardcast(base + " --exclude-at-risk --json").out);
  ASSERT_FALSE(ex["plans"].empty());
  for (const auto& p : ex["plans"]) EXPECT_FALSE(p["memory_at_risk"].get<bool>());
  EXPECT_EQ(ex["plans"][0]["step_time_s"], j["plans"][first_safe]["step_time_s"]);
  const auto text = RunShardcast(base);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("  at risk"), std::string::npos) << text.out;
  // The best plan not at risk is found below --top: rank 1 alone is shown, and it is at risk.
  const Json one = Json::parse(RunShardcast("plan --model gpt3-175b --cluster dgx-h100 --gpus 256 --gbs 1536 "
                                            "--min-headroom 0 --top 1 --recompute none "
                                            "--fix tp=4,pp=8,schedule=zb-h1,sp=true,tp_comm_overlap=true --json")
                                   .out);
  ASSERT_EQ(one["plans"].size(), 1u);
  ASSERT_TRUE(one["plans"][0]["memory_at_risk"].get<bool>()) << "premise";
  EXPECT_TRUE(one["recommended_rank"].is_null());
  ASSERT_TRUE(one["recommended"].is_object());
  EXPECT_FALSE(one["recommended"]["memory_at_risk"].get<bool>());
  EXPECT_GT(one["recommended"]["step_time_s"].get<double>(), one["plans"][0]["step_time_s"].get<double>());
  // A plan the replay turns away: the advice gives what it reserves with the headroom, not its
  // allocated peak (which fits, and would read as a negative shortfall).
  const auto away = RunShardcast("plan --model llama2-70b --cluster dgx-a100 --gpus 16 --gbs 256 --fix "
                                 "tp=4,pp=4,mbs=2,schedule=zb-h1,zero=0,recompute=full,sp=true,tp_comm_overlap=true");
  ASSERT_EQ(away.exit_code, 0) << away.err;
  EXPECT_NE(away.out.find("reserved by PyTorch's caching allocator"), std::string::npos) << away.out;
  EXPECT_NE(away.out.find("less than the 2.00 GiB of headroom asked for"), std::string::npos) << away.out;
  EXPECT_EQ(away.out.find("more than the"), std::string::npos) << away.out;
  EXPECT_EQ(away.out.find("h100-pcie"), std::string::npos) << "a GPU smaller than the A100's 80 GiB: " << away.out;
  // A configuration that does not fit is not also "at risk".
  const Json nf = Json::parse(RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 --tp 8 --pp 8 "
                                           "--mbs 4 --gbs 192 --sequence-parallel --json").out);
  ASSERT_FALSE(nf["fits"].get<bool>()) << "premise";
  EXPECT_FALSE(nf["memory_at_risk"].get<bool>());
}

// Numeric flags name the flag, the value and what was expected, in words (CLI11's own range
// checks printed a 309-digit upper bound).
TEST(Cli, NumericFlagErrorsSayWhatWasExpected) {
  const std::string sim = "simulate --model llama3-8b --cluster dgx-a100 --gpus 8 ";
  EXPECT_TRUE(testing::ExitsTwoWith(sim + "--zero 3 --zero3-impl deepspeed-2021 --stage3-max-live-parameters -5",
                                    "--stage3-max-live-parameters: got \"-5\", expected a number of at least 0"));
  EXPECT_TRUE(testing::ExitsTwoWith(sim + "--reduce-bucket-size inf", "got \"inf\", expected a positive number"));
  EXPECT_TRUE(testing::ExitsTwoWith(sim + "--zero 4", "--zero: got \"4\", expected an integer from 0 to 3"));
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model llama3-8b --cluster dgx-a100 --gpus 8 --gbs 8 --min-headroom -1",
                                    "--min-headroom: got \"-1\", expected a number from 0 to 10000"));
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model llama3-8b --checkpoint-minutes -1",
                                    "--checkpoint-minutes: got \"-1\", expected a number of at least 0"));
}

// Sizes that would overflow or run for minutes are refused or reported, not simulated.
TEST(Cli, OutOfRangeSizesAreReasonsOrErrors) {
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-175b --cluster dgx-a100 --gpus 4294967296",
                                    "expected a positive integer up to 1048576"));
  auto m = RunShardcast("simulate --model llama2-70b --cluster dgx-h100 --gpus 64 --tp 8 --pp 4 --gbs 10000000");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(m.out.find(fmt::format("= 5000000 micro-batches per step, more than the {}", kMaxMicrobatchesPerStep)),
            std::string::npos)
      << m.out;
  auto d = RunShardcast("describe --model llama2-70b --cluster dgx-h100 --gpus 64 --tp 8 --pp 4");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("ZeRO-3:"), std::string::npos);
  // As simulate says (InfeasibilityReasons).
  EXPECT_NE(d.out.find("cannot run: ZeRO-2 shards gradients across data parallelism, which Megatron-LM and DeepSpeed "
                       "do not support with pipeline parallelism (pp = 4)"),
            std::string::npos)
      << d.out;
  auto f = RunShardcast("plan --model gpt3-13b --cluster dgx-a100 --gpus 64 --gbs 256 --fix mbs=7");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("the fixed mbs does not divide the batch per data-parallel replica"), std::string::npos)
      << f.out;
  EXPECT_NE(f.out.find("(none could be formed: see \"Not generated\")"), std::string::npos) << f.out;
  EXPECT_EQ(f.out.find("simulated in all"), std::string::npos) << f.out;
}

// A sequence longer than a learned position table: nothing is generated, and plan says why
// (this used to crash on a candidate with no stages).
TEST(CliPlan, SequenceBeyondThePositionTable) {
  auto r = RunShardcast("plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --gbs 1536 --seq 2049");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("seq_length = 2049 exceeds the learned position embeddings' max_position_embeddings = 2048"),
            std::string::npos)
      << r.out;
  auto sp = RunShardcast("plan --model llama2-7b --cluster dgx-a100 --gpus 8 --gbs 64 --seq 4098 --fix tp=8,sp=true");
  ASSERT_EQ(sp.exit_code, 0) << sp.err;
  EXPECT_NE(sp.out.find("sequence parallelism splits the sequence over tp: seq_length = 4098 is not a multiple of tp = 8"),
            std::string::npos)
      << sp.out;
}

// A cluster whose GPU is a user file: capacity prices it from that file (it used to look the GPU
// up among the presets and fail after printing the table), and a price override may name it.
TEST(CliCapacity, CustomGpuFile) {
  const std::string gpu = WriteTemp("cap_gpu.json", R"({"name": "my-h100", "display_name": "My H100", "arch": "hopper",
    "peak_tflops": {"bf16": 835, "fp16": 835}, "memory_GiB": 93.0, "hbm_bandwidth_GBps": 3900, "sm_count": 132,
    "nvlink_GBps_per_direction": 300, "pcie_GBps_per_direction": 64, "tdp_W": 400, "price_usd_per_gpu_hour": 2.5,
    "price_date": "2026-11", "price_source": "test quote", "source": "test"})");
  // The GPU named by a path relative to the cluster file's folder.
  const std::string gpu_name = std::filesystem::path(gpu).filename().string();
  const std::string cluster = WriteTemp("cap_cluster.json", R"({"name": "mine", "gpu": ")" + gpu_name + R"(",
    "gpus_per_node": 8, "intra_node": {"fabric": "nvswitch", "bandwidth_GBps_per_direction": 300},
    "inter_node": {"nics_per_node": 8, "nic_Gbps": 400, "fabric": "infiniband-ndr"}, "source": "test"})");
  auto r = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options " + cluster + ":16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("my-h100            2.50  (2026-11, test quote)"), std::string::npos) << r.out;
  auto j = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options " + cluster +
                        ":16 --price-per-gpu-hour my-h100=2 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(Json::parse(j.out)["options"][0]["price_usd_per_gpu_hour"].get<double>(), 2.0);
  // Without tdp_W there is no energy: "-" and nulls, not 0 MWh; a board power of 0 and an empty
  // arch exit 2.
  const std::string gpu_text = ReadTextFile(gpu);
  auto variant = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string text = gpu_text;
    text.replace(text.find(from), from.size(), to);
    WriteTemp(name + "_gpu.json", text);
    std::string c = ReadTextFile(cluster);
    c.replace(c.find(gpu_name), gpu_name.size(), name + "_gpu.json");
    return WriteTemp(name + "_cluster.json", c);
  };
  const std::string no_tdp = variant("cap_notdp", R"("tdp_W": 400, )", "");
  auto n = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options " + no_tdp + ":16");
  ASSERT_EQ(n.exit_code, 0) << n.err;
  EXPECT_NE(n.out.find("my-h100               -  (its GPU file has no tdp_W: no energy)"), std::string::npos) << n.out;
  const std::size_t row = n.out.find(no_tdp + " ");
  ASSERT_NE(row, std::string::npos) << n.out;
  std::string line = n.out.substr(row, n.out.find('\n', row) - row);
  line.erase(line.find_last_not_of(' ') + 1);
  EXPECT_EQ(line.back(), '-') << line;  // the MWh cell
  auto nj = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options " + no_tdp + ":16 --json");
  ASSERT_EQ(nj.exit_code, 0) << nj.err;
  EXPECT_TRUE(Json::parse(nj.out)["options"][0]["energy_kwh"].is_null());
  EXPECT_TRUE(Json::parse(nj.out)["options"][0]["tdp_W"].is_null());
  EXPECT_TRUE(testing::ExitsTwoWith(
      "capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options " +
          variant("cap_tdp0", R"("tdp_W": 400)", R"("tdp_W": 0)") + ":16",
      "/tdp_W: got 0, expected a number in [1, 1e+06]"));
  EXPECT_TRUE(testing::ExitsTwoWith(
      "simulate --model gpt3-1.3b --gpus 16 --cluster " + variant("cap_arch", R"("arch": "hopper")", R"("arch": "")"),
      R"(/arch: got "", expected an architecture name)"));
}

TEST(CliCapacity, ThreeGpuTypes) {
  auto r = RunShardcast(
      "capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:64 dgx-h100:32,64 "
      "dgx-b200:32 --days 30 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["options"].size(), 4u);
  // The built-in defaults carried over to a GPU without measurements are listed, as simulate lists them.
  auto sim = RunShardcast("simulate --model gpt3-1.3b --cluster dgx-b200 --gpus 32 --tp 1 --pp 1 --mbs 1 --gbs 512 --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const Json b200_estimates = Json::parse(sim.out)["profile_estimates"];
  ASSERT_FALSE(b200_estimates.empty());
  for (const auto& o : j["options"]) {
    ASSERT_TRUE(o["feasible"].get<bool>());
    EXPECT_NEAR(o["train_time_s"].get<double>(), o["steps"].get<double>() * o["step_time_s"].get<double>(), 1e-6);
    EXPECT_TRUE(o["goodput"].is_null());  // no failure model given
    EXPECT_TRUE(o["checkpoint_interval_s"].is_null());
    // Energy = GPUs x board power x 1.3 x wall time, the board power the GPU preset's.
    EXPECT_DOUBLE_EQ(o["tdp_W"].get<double>(), LoadGpu(o["gpu"].get<std::string>()).tdp_W);
    EXPECT_NEAR(o["energy_kwh"].get<double>(),
                o["gpus"].get<double>() * o["tdp_W"].get<double>() * 1.3 * o["wall_time_s"].get<double>() / 3.6e6, 1e-6);
    if (o["gpu"] == "b200") {
      EXPECT_EQ(o["profile_estimates"], b200_estimates);
    }
    if (o["gpu"] == "a100-sxm4-80gb") {
      EXPECT_TRUE(o["profile_estimates"].empty());  // A100 on NVLink is measured
    }
  }
  // The text gives a known bias once, naming the rows whose best plan it concerns (those without
  // activation recompute), as --json gives it per option.
  auto text = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:64 dgx-h100:32,64 "
                           "dgx-b200:32 --days 30");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  std::vector<std::string> biased;
  for (const auto& o : j["options"]) {
    if (!o["known_bias"].is_null()) biased.push_back(fmt::format("{}:{}", o["cluster"].get<std::string>(), o["gpus"].get<int>()));
  }
  ASSERT_FALSE(biased.empty());
  EXPECT_NE(text.out.find(fmt::format("  {:<16} {:>6.0f}\n", "h100-sxm", LoadGpu("h100-sxm").tdp_W)), std::string::npos)
      << text.out;  // under "Board power"
  const std::string once = "Known bias (" + Join(biased, ", ") + "): without activation recompute";
  const auto at = text.out.find(once);
  ASSERT_NE(at, std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("without activation recompute", at + once.size()), std::string::npos) << text.out;
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:64 dgx-a100:32,64",
                                    "--gpus-options: got dgx-a100:64 twice, expected each option once"));
}

// A measured profile replaces the built-in one for the options of its cluster, and only those:
// capacity's step time is plan's recommended step time under the same profile.
TEST(CliCapacity, MeasuredProfilePerCluster) {
  const auto dir = shardcast::testing::TestTempDir();
  const std::string log = testing::FixturesDir() + "/nccl/all_reduce_h200_8.log";
  const std::string imported = (dir / "cap_h200.json").string(), a100 = (dir / "cap_a100.json").string();
  ASSERT_EQ(RunShardcast("calibrate import " + log + " --cluster dgx-h200 --out " + imported).exit_code, 0);
  // Halve the GEMM efficiency so the measured profile is visibly slower than the default; the
  // GPU as a CUDA device name ("NVIDIA H200", its display name) matches the preset.
  Json prof = ReadJsonFile(imported);
  prof["gemm"]["max_efficiency"] = prof["gemm"]["max_efficiency"].get<double>() / 2;
  prof["gpu"] = "NVIDIA H200";
  const std::string slow = WriteTemp("cap_h200_slow.json", prof.dump());
  const std::string base = "capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-h200:16 dgx-h100:16 ";
  auto with = RunShardcast(base + "--profile " + slow + " --json");
  auto without = RunShardcast(base + "--json");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  auto row = [](const Json& j, const std::string& cluster) {
    for (const auto& o : j["options"]) {
      if (o["cluster"] == cluster) return o;
    }
    return Json();
  };
  const Json jw = Json::parse(with.out), jo = Json::parse(without.out);
  EXPECT_EQ(row(jw, "dgx-h200")["profile"], slow);
  EXPECT_EQ(row(jw, "dgx-h100")["profile"], "built-in default");
  EXPECT_EQ(row(jw, "dgx-h100")["step_time_s"], row(jo, "dgx-h100")["step_time_s"]);
  EXPECT_GT(row(jw, "dgx-h200")["step_time_s"].get<double>(), row(jo, "dgx-h200")["step_time_s"].get<double>());
  auto plan = RunShardcast("plan --model gpt3-1.3b --cluster dgx-h200 --gpus 16 --gbs 512 --top 1 --json --profile " + slow);
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(plan.err, "");  // the device name is the cluster's GPU: no mismatch warning
  EXPECT_EQ(Json::parse(plan.out)["profile"], slow);
  auto plan_text = RunShardcast("plan --model gpt3-1.3b --cluster dgx-h200 --gpus 16 --gbs 512 --top 1 --profile " + slow);
  EXPECT_NE(plan_text.out.find("Details: shardcast simulate --model gpt3-1.3b --cluster dgx-h200 --profile " + slow + " "),
            std::string::npos)
      << plan_text.out;
  EXPECT_DOUBLE_EQ(row(jw, "dgx-h200")["step_time_s"].get<double>(),
                   Json::parse(plan.out)["recommended"]["step_time_s"].get<double>());
  auto text = RunShardcast(base + "--profile dgx-h200=" + slow);
  EXPECT_NE(text.out.find("  dgx-h200         " + slow + "\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  dgx-h100         built-in default\n"), std::string::npos) << text.out;
  // A profile describes one machine, network included: with two clusters of its GPU it must say
  // which (dgx-a100 and jean-zay-a100 share the A100 but not the fabric).
  ASSERT_EQ(RunShardcast("calibrate import " + log + " --cluster dgx-a100 --out " + a100).exit_code, 0);
  const std::string two = "capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:16 jean-zay-a100:16 ";
  auto ambiguous = RunShardcast(two + "--profile " + a100);
  EXPECT_EQ(ambiguous.exit_code, 2);
  EXPECT_NE(ambiguous.err.find("measured a100-sxm4-80gb, which clusters dgx-a100, jean-zay-a100 all have; a profile "
                               "describes one machine's GPU and network, expected CLUSTER=" + a100),
            std::string::npos)
      << ambiguous.err;
  // With one cluster of its GPU the profile applies, and a different network is warned about.
  auto jz = RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options jean-zay-a100:16 --profile " + a100);
  EXPECT_EQ(jz.exit_code, 0) << jz.err;
  EXPECT_NE(jz.err.find("warning: profile " + a100 + " has network rates cluster jean-zay-a100's links cannot carry "
                        "(network "),
            std::string::npos)
      << jz.err;
  auto named = RunShardcast(two + "--profile DGX-A100=" + a100 + " --json");
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(row(Json::parse(named.out), "dgx-a100")["profile"], a100);
  EXPECT_EQ(row(Json::parse(named.out), "jean-zay-a100")["profile"], "built-in default");
  // A profile of a GPU no option has, of another GPU than the named cluster's, or a second one
  // for a cluster, would be silently unused or wrong.
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:16 --profile " + slow,
                                    slow + ": /gpu: got \"NVIDIA H200\", expected the GPU of a --gpus-options cluster (dgx-a100)"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--profile dgx-h100=" + slow,
                                    slow + ": /gpu: got \"NVIDIA H200\", expected dgx-h100's GPU h100-sxm"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--profile dgx-b200=" + slow,
                                    "expected FILE or CLUSTER=FILE with CLUSTER one of the --gpus-options clusters "
                                    "(dgx-h200, dgx-h100)"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--profile DGX-H200=",
                                    "--profile: got \"DGX-H200=\", expected a profile file after dgx-h200="));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--profile " + slow + " " + imported,
                                    "both for cluster dgx-h200, expected one profile each"));
}

// --csv - writes on standard output exactly what --csv FILE writes, in place of the text; it is
// refused beside --json (and validate's --explain), which print there too.
TEST(CliPlan, CsvToStandardOutput) {
  const auto dir = shardcast::testing::TestTempDir();
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string base = "plan --model gpt3-1.3b --cluster dgx-a100 --gpus 16 --gbs 512 --top 3 ";
  const std::string plan_csv = (dir / "plan_table.csv").string();
  ASSERT_EQ(RunShardcast(base + "--csv " + plan_csv).exit_code, 0);
  auto r = RunShardcast(base + "--csv -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, read(plan_csv));
  const auto lines = Split(r.out, '\n');
  ASSERT_EQ(lines.size(), 1u + 3u + 1u) << r.out;  // header, 3 plans, the empty piece after the last newline
  // The recommended plan is the first one not at risk (here rank 1 is at risk, so it is not rank 1).
  const CsvTable table = ParseCsv(r.out, "stdout");
  bool seen_safe = false;
  for (std::size_t i = 0; i < 3; ++i) {
    const bool at_risk = table.Get(i, "memory_at_risk") == "true", recommended = table.Get(i, "recommended") == "true";
    const auto& line = lines[i + 1];
    EXPECT_EQ(recommended, !at_risk && !seen_safe) << line;
    seen_safe = seen_safe || !at_risk;
  }
  EXPECT_TRUE(seen_safe) << r.out;
  EXPECT_FALSE(std::filesystem::exists("-"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--csv - --json",
                                    "command line: --csv -: writes the CSV to standard output, where --json also writes"));
  // Files beside it are still written (the HTML page, the launch file); what only the text report
  // would print (a launch without its file, the what-if search) is refused, not dropped.
  const std::string page = (dir / "plan_beside_csv.html").string(), launch = (dir / "plan_beside_csv.sh").string();
  auto with_files = RunShardcast(base + "--csv - --html " + page + " --emit megatron --emit-file " + launch);
  ASSERT_EQ(with_files.exit_code, 0) << with_files.err;
  EXPECT_EQ(with_files.out, read(plan_csv));
  EXPECT_NE(read(page).find("<html"), std::string::npos);
  EXPECT_NE(read(launch).find("--tensor-model-parallel-size"), std::string::npos);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--csv - --emit megatron",
                                    "command line: --emit without --emit-file: not with --csv - (the CSV holds the plans "
                                    "alone); use --csv FILE, whose text report has the launch command, or --json"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--csv - --what-if nic_Gbps=x2", "command line: --what-if: not with --csv -"));
  // Nothing fits: the CSV is a header alone, and standard error says why.
  auto none = RunShardcast("plan --model gpt3-175b --cluster dgx-a100 --gpus 8 --gbs 64 --csv -");
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_EQ(Split(none.out, '\n').size(), 2u) << none.out;
  EXPECT_NE(none.err.find("shardcast: no candidate fits\n  - the closest candidate"), std::string::npos) << none.err;
  // Other output paths are files: "-" there is refused rather than written as a file named "-".
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --gbs 64 --trace -",
                                    "command line: --trace: got \"-\", expected a file name (only --csv takes - for standard "
                                    "output)"));
  // Output paths are checked when the command line is read, before any work.
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--csv /nonexistent-folder/plan.csv",
                                    "--csv: got \"/nonexistent-folder/plan.csv\", whose folder /nonexistent-folder does not "
                                    "exist"));
  EXPECT_FALSE(std::filesystem::exists("-"));
  const std::string runs = testing::FixturesDir() + "/validation/runs_small.csv";
  const std::string validate_csv = (dir / "validate_table.csv").string();
  ASSERT_EQ(RunShardcast("validate --runs " + runs + " --csv " + validate_csv).exit_code, 0);
  auto v = RunShardcast("validate --runs " + runs + " --csv -");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, read(validate_csv));
  EXPECT_EQ(RunShardcast("validate --runs " + runs + " --csv - --json").exit_code, 2);
  const std::string validate_page = (dir / "validate_beside_csv.html").string();
  auto vh = RunShardcast("validate --runs " + runs + " --csv - --html " + validate_page);
  ASSERT_EQ(vh.exit_code, 0) << vh.err;
  EXPECT_EQ(vh.out, read(validate_csv));
  EXPECT_NE(read(validate_page).find("<html"), std::string::npos);
  // The CSV has the JSON's row flags too: one low_confidence cell a row, true or false.
  const CsvTable vt = ParseCsv(v.out, "stdout");
  ASSERT_FALSE(vt.rows.empty());
  for (std::size_t i = 0; i < vt.rows.size(); ++i) {
    const std::string lc = vt.Get(i, "low_confidence");
    EXPECT_TRUE(lc == "true" || lc == "false") << lc;
  }
}

// A fixed tp above the search's limit is searched as given, and the report says it overrode the
// limit (--max-tp, or by default a node's GPUs).
TEST(CliPlan, FixedTpBeyondTheLimitIsSaid) {
  const std::string base = "plan --model gpt3-6.7b --cluster dgx-a100 --gpus 64 --gbs 512 --top 1 ";
  const auto over = RunShardcast(base + "--fix tp=8 --max-tp 4");
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_NE(over.out.find("\nFixed beyond --max-tp 4: tp = 8 is searched as --fix gives it\n"), std::string::npos)
      << over.out;
  const auto nodes = RunShardcast(base + "--fix tp=16");
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_NE(nodes.out.find("Fixed beyond the default --max-tp (8 GPUs a node: tensor parallelism across nodes): tp = 16"),
            std::string::npos)
      << nodes.out;
  EXPECT_EQ(RunShardcast(base + "--fix tp=4 --max-tp 4").out.find("Fixed beyond"), std::string::npos);
}

// Without a price or a board power the cost and energy objectives would rank every plan as 0.
TEST(CliPlan, CostObjectiveNeedsAPrice) {
  const std::string gpu = WriteTemp("noprice_gpu.json", R"({"name": "no-price", "display_name": "No Price", "arch": "hopper",
    "peak_tflops": {"bf16": 989, "fp16": 989}, "memory_GiB": 79.65, "hbm_bandwidth_GBps": 3350, "sm_count": 132,
    "nvlink_GBps_per_direction": 450, "pcie_GBps_per_direction": 64, "source": "test"})");
  const std::string cluster = WriteTemp("noprice_cluster.json", R"({"name": "np", "gpu": ")" +
                                        std::filesystem::path(gpu).filename().string() + R"(", "gpus_per_node": 8,
    "intra_node": {"fabric": "nvswitch", "bandwidth_GBps_per_direction": 450},
    "inter_node": {"nics_per_node": 8, "nic_Gbps": 400, "fabric": "infiniband-ndr"}, "source": "test"})");
  const std::string base = "plan --model gpt3-1.3b --cluster " + cluster + " --gpus 8 --gbs 64 --top 2 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--objective cost",
                                    "--objective cost: GPU 'no-price' has no price_usd_per_gpu_hour"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--objective energy", "--objective energy: GPU 'no-price' has no tdp_W"));
  // Ranked by throughput, the missing figures are empty cells and nulls, not zeros.
  auto csv = RunShardcast(base + "--csv -");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const CsvTable t = ParseCsv(csv.out, "stdout");
  ASSERT_FALSE(t.rows.empty());
  EXPECT_EQ(t.Get(0, "usd_per_million_tokens"), "");
  EXPECT_EQ(t.Get(0, "joules_per_token"), "");
  auto json = RunShardcast(base + "--json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(Json::parse(json.out)["recommended"]["usd_per_million_tokens"].is_null());
  EXPECT_TRUE(Json::parse(json.out)["price_usd_per_gpu_hour"].is_null());
  // --price-per-gpu-hour gives the price: cost = GPUs x price / 3600 x step / tokens x 1e6.
  auto priced = RunShardcast(base + "--objective cost --price-per-gpu-hour 3 --json");
  ASSERT_EQ(priced.exit_code, 0) << priced.err;
  const Json pj = Json::parse(priced.out);
  EXPECT_EQ(pj["price_usd_per_gpu_hour"].get<double>(), 3.0);
  const Json& best = pj["recommended"];
  EXPECT_NEAR(best["usd_per_million_tokens"].get<double>(),
              8 * 3.0 / 3600 * best["step_time_s"].get<double>() / (64.0 * 2048) * 1e6, 1e-12);
  const auto text = RunShardcast(base + "--objective cost --price-per-gpu-hour 3");
  EXPECT_NE(text.out.find("USD per million tokens (at 3 USD per GPU-hour, --price-per-gpu-hour)"), std::string::npos)
      << text.out;
}

// Groups that do not tile a node (tp 16 or ep 64 on a 72-GPU rack, tp 6 on 8-GPU nodes) are said
// to be placed inside nodes; groups that tile, and jobs of one node, say nothing.
TEST(CliSimulate, GroupsThatDoNotTileANodeAreSaid) {
  ParallelConfig c;
  c.tp = 16;
  EXPECT_NE(StraddlingGroupsLine(c, 2048, 72).find("tp 16 does not tile the 72 GPUs of a node"), std::string::npos);
  EXPECT_EQ(StraddlingGroupsLine(c, 72, 72), "");  // one node holds everything
  EXPECT_EQ(StraddlingGroupsLine(c, 2048, 8), "");  // two whole nodes a group
  c.tp = 6;
  EXPECT_NE(StraddlingGroupsLine(c, 48, 8).find("tp 6 does not"), std::string::npos);
  c.tp = 8;
  EXPECT_EQ(StraddlingGroupsLine(c, 2048, 72), "");
  c.tp = 12;  // larger than a node: it spans nodes, as simulated
  EXPECT_EQ(StraddlingGroupsLine(c, 96, 8), "");
  c.tp = 2;
  c.cp = 3;
  EXPECT_NE(StraddlingGroupsLine(c, 48, 8).find("tp x cp 6 does not"), std::string::npos);
  c.cp = 1;
  c.tp = 1;
  c.ep = 64;
  EXPECT_NE(StraddlingGroupsLine(c, 256, 72).find("ep x etp 64 does not"), std::string::npos);
  const auto sim = RunShardcast("simulate --model deepseek-v3 --cluster gb200-nvl72 --gpus 2048 --tp 16 "
                                "--sequence-parallel --pp 8 --ep 64 --etp 1 --mbs 1 --gbs 4096");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find("Node boundaries: tp 16 and ep x etp 64 do not tile the 72 GPUs"), std::string::npos) << sim.out;
}

// A GPU count that is not whole nodes is said, with the whole-node count (ceil(N / per node) x per node);
// a low-precision MFU names the peak it is against.
TEST(CliCapacity, PartialNodesAndTheMfuPeakAreSaid) {
  const auto plan = RunShardcast("plan --model gpt3-1.3b --cluster dgx-h100 --gpus 12 --gbs 48 --top 1 --precision fp8");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("Partial node: 12 GPUs are 1.50 nodes of 8; whole nodes are 16 GPUs"), std::string::npos)
      << plan.out;
  const auto sim = RunShardcast("simulate --model gpt3-1.3b --cluster dgx-h100 --gpus 12 --tp 4 --mbs 1 --gbs 48");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find("\n  Partial node: 12 GPUs are 1.50 nodes of 8; whole nodes are 16 GPUs\n"), std::string::npos)
      << sim.out;
  EXPECT_EQ(RunShardcast("simulate --model gpt3-1.3b --cluster dgx-h100 --gpus 16 --tp 4 --mbs 1 --gbs 48")
                .out.find("Partial node"),
            std::string::npos);
  EXPECT_NE(plan.out.find("MFU is against the GPU's dense bf16 peak, as the field reports fp8 runs"), std::string::npos);
  // The CSV says which run it is: precision, the peak MFU is against, cluster and GPUs; a dense
  // model has no expert sizes.
  const auto csv = RunShardcast("plan --model gpt3-1.3b --cluster dgx-h100 --gpus 12 --gbs 48 --top 1 --precision fp8 "
                                "--csv -");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const CsvTable t = ParseCsv(csv.out, "stdout");
  ASSERT_FALSE(t.rows.empty());
  EXPECT_EQ(t.Get(0, "precision"), "fp8");
  EXPECT_EQ(t.Get(0, "mfu_peak_precision"), "bf16");
  EXPECT_EQ(t.Get(0, "cluster"), "dgx-h100");
  EXPECT_EQ(t.Get(0, "gpus"), "12");
  EXPECT_EQ(t.Get(0, "ep"), "");
  EXPECT_EQ(t.Get(0, "etp"), "");
  const std::string cap = "capacity --model gpt3-1.3b --tokens 1B --gbs 48 --gpus-options dgx-h100:8,12 --precision fp8";
  const auto text = RunShardcast(cap);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Partial node: dgx-h100:12 is 1.50 nodes of 8 GPUs; whole nodes are 16 GPUs"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("Partial node: dgx-h100:8 "), std::string::npos);
  const Json j = Json::parse(RunShardcast(cap + " --json").out);
  EXPECT_EQ(j["precision"], "fp8");
  EXPECT_EQ(j["mfu_peak_precision"], "bf16");
  EXPECT_EQ(j["options"][0]["gpus_per_node"], 8);
}

TEST(CliCapacity, BadInput) {
  EXPECT_EQ(RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a1000:64").exit_code, 2);
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens lots --gbs 512 --gpus-options dgx-a100:64",
                                    "--tokens: got \"lots\""));
  // Under one token there is nothing to train ("on 0 tokens" used to print, charged one step).
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens 0.5 --gbs 512 --gpus-options dgx-a100:64",
                                    "expected a number of tokens of at least 1"));
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:0",
                                    "expected a positive GPU count"));
  // Goodput inputs come together, and a price must be for a GPU that is offered.
  const std::string base = "capacity --model gpt3-1.3b --tokens 20B --gbs 512 --gpus-options dgx-a100:64 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--mtbf-hours 1000",
                                    "--mtbf-hours: got 1000 with --checkpoint-minutes 0 (or none)"));
  EXPECT_EQ(RunShardcast(base + "--checkpoint-minutes 5").exit_code, 2);
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--price-per-gpu-hour h100-sxm=2",
                                    "expected a GPU that a --gpus-options cluster has"));
  EXPECT_EQ(RunShardcast(base + "--mtbf-hours 1000 --checkpoint-minutes 5").exit_code, 0);
  // A price that is no plain decimal number from 1e-4 to 1e4 USD says what a price must be; a
  // second price for one GPU is refused rather than silently replacing the first.
  for (const char* price : {"a100-sxm4-80gb=-1", "a100-sxm4-80gb=2.5x", "a100-sxm4-80gb=inf", "a100-sxm4-80gb=nan",
                            "a100-sxm4-80gb=0x10", "a100-sxm4-80gb=1e300", "a100-sxm4-80gb=1e-300", "2.5"}) {
    EXPECT_TRUE(testing::ExitsTwoWith(base + "--price-per-gpu-hour " + price, "with USD a number from 0.0001 to 10000"))
        << price;
  }
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--price-per-gpu-hour a100-sxm4-80gb=2 a100-sxm4-80gb=3",
                                    "got a price for a100-sxm4-80gb twice"));
  EXPECT_EQ(RunShardcast(base + "--price-per-gpu-hour a100-sxm4-80gb=2.5e0").exit_code, 0);
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model gpt3-1.3b --tokens 1e30 --gbs 512 --gpus-options dgx-a100:64",
                                    "--tokens: got 1e+30, expected a positive token count of at most 1e16"));
}

}  // namespace
// Issue 14 (3): sizes whose products overflowed int64 (SIGFPE, or exit 0 with undefined
// behaviour) are refused where they are read, naming the flag and the limit.
TEST(Cli, SizesBeyondTheLimitsExitTwoNamingTheFlag) {
  const std::string base = "simulate --model gpt3-175b --cluster dgx-a100 --gpus 64 ";
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--tp 4294967296 --pp 4294967296",
                                    "--tp: got \"4294967296\", expected a positive integer up to 1048576"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--pp 1099511627776 --vp 1099511627776",
                                    "--pp: got \"1099511627776\", expected a positive integer up to 1048576"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--vp 1099511627776", "--vp: got \"1099511627776\", expected a positive "
                                                                  "integer up to 65536"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--dp 1099511627776 --mbs 1099511627776",
                                    "--dp: got \"1099511627776\", expected a positive integer up to 1048576"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--mbs 1099511627776", "--mbs: got \"1099511627776\", expected a positive "
                                                                   "integer up to 65536"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--gbs 16777217", "--gbs: got \"16777217\", expected a positive integer up "
                                                             "to 16777216"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--seq 16777217", "--seq: got \"16777217\", expected a positive integer up "
                                                             "to 16777216"));
  EXPECT_TRUE(testing::ExitsTwoWith("plan --model gpt3-175b --cluster dgx-a100 --gpus 64 --gbs 64 --fix tp=2000000",
                                    "tp=N with N a positive integer up to 1048576"));
  // At every limit together the products stay in range: a result with reasons, exit 0.
  const auto r = RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 1048576 --tp 1048576 --pp 1048576 "
                              "--dp 1048576 --vp 65536 --mbs 65536 --gbs 16777216 --seq 16777216 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_NE(j["reason"].get<std::string>().find("tp*pp = 1048576*1048576 = 1099511627776 GPUs for one model replica, "
                                                "more than the 1048576 GPUs given"),
            std::string::npos);
}

}  // namespace shardcast

namespace shardcast {
namespace {

TEST(CliCapacity, SolveGivesEachClustersSmallestCount) {
  const std::string base = "capacity --model gpt3-1.3b --tokens 20B --gbs 256 --gpus-options dgx-a100 dgx-h100 "
                           "--max-gpus 64 --solve --days 3 --json";
  const auto r = testing::RunShardcast(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["solve"].size(), 2u);
  EXPECT_EQ(j["days"], 3.0);  // the deadline meets_deadline refers to
  for (std::size_t i = 0; i < 2; ++i) {
    const Json& s = j["solve"][i];
    const Json& row = j["options"][i];
    EXPECT_EQ(s["cluster"], row["cluster"]);
    if (s["found"].get<bool>()) {
      EXPECT_EQ(s["gpus"], row["gpus"]);
      EXPECT_TRUE(row["meets_deadline"].get<bool>());
      EXPECT_LE(row["wall_time_s"].get<double>(), 3 * 86400.0);
    }
    EXPECT_EQ(s["max_gpus"], 64);
  }
  // Rows in capacity's documented order (docs/planner.md): feasible, meeting the deadline,
  // cheapest first, as without --solve.
  const Json& a = j["options"][0];
  const Json& b = j["options"][1];
  if (a["feasible"] == b["feasible"] && a["meets_deadline"] == b["meets_deadline"]) {
    EXPECT_LE(a["cost_usd"].get<double>(), b["cost_usd"].get<double>()) << r.out;
  }
  const auto text = testing::RunShardcast(base.substr(0, base.size() - 7));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Smallest GPU count meeting 3 days"), std::string::npos) << text.out;
  // Bad input: no deadline, counts with --solve, a maximum below one node.
  EXPECT_EQ(testing::RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 256 --gpus-options dgx-a100 --solve")
                .exit_code, 2);
  const auto counts = testing::RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 256 --gpus-options "
                                            "dgx-a100:64 --solve --days 3");
  EXPECT_EQ(counts.exit_code, 2);
  EXPECT_NE(counts.err.find("with --solve, expected a cluster without counts"), std::string::npos) << counts.err;
  EXPECT_EQ(testing::RunShardcast("capacity --model gpt3-1.3b --tokens 20B --gbs 256 --gpus-options dgx-a100 --solve "
                                  "--days 3 --max-gpus 4")
                .exit_code, 2);
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

// plan and capacity take the loss's implementation for every plan they simulate, and the emitted
// NeMo recipe says which one the plan ran.
TEST(Cli, PlanTakesTheCrossEntropyImplementation) {
  const std::string base = "plan --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --gbs 64 --top 1";
  const auto bad = testing::RunShardcast(base + " --cross-entropy bogus");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--cross-entropy"), std::string::npos) << bad.err;
  const auto fused = testing::RunShardcast(base + " --cross-entropy native --emit nemo");
  ASSERT_EQ(fused.exit_code, 0) << fused.err;
  EXPECT_NE(fused.out.find("cross_entropy_loss_fusion = True"), std::string::npos) << fused.out;
  const auto unfused = testing::RunShardcast(base + " --emit nemo");
  ASSERT_EQ(unfused.exit_code, 0) << unfused.err;
  EXPECT_NE(unfused.out.find("cross_entropy_loss_fusion = False"), std::string::npos) << unfused.out;
  const auto cap = testing::RunShardcast("capacity --help");
  EXPECT_NE(cap.out.find("--cross-entropy"), std::string::npos);
}

}  // namespace

// capacity searches each option as plan does, with the same optimizer flags (cli/plan_common.h).
TEST(Cli, CapacitySearchesDeepSpeedAsPlanDoes) {
  const std::string flags = "--optimizer deepspeed-zero --zero-stages 1,3 --stage3-max-live-parameters 5e8 --json";
  auto c = RunShardcast("capacity --model llama2-7b --tokens 10B --gbs 256 --gpus-options dgx-a100:64 " + flags);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const Json cap = Json::parse(c.out);
  EXPECT_EQ(cap["optimizer_impl"], "deepspeed-zero");
  EXPECT_EQ(cap["zero3_impl"], "deepspeed");
  EXPECT_EQ(cap["zero_stages"], Json::parse("[1,3]"));
  const Json& best = cap["options"][0];
  ASSERT_TRUE(best["feasible"].get<bool>()) << c.out;
  EXPECT_NE(best["config"].get<std::string>().find("optimizer=deepspeed-zero"), std::string::npos) << best["config"];
  auto p = RunShardcast("plan --model llama2-7b --cluster dgx-a100 --gpus 64 --gbs 256 " + flags);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const Json rec = Json::parse(p.out)["recommended"];
  EXPECT_DOUBLE_EQ(best["step_time_s"].get<double>(), rec["step_time_s"].get<double>());
  auto t = RunShardcast("capacity --model llama2-7b --tokens 10B --gbs 256 --gpus-options dgx-a100:64 --zero3-impl deepspeed");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("Every plan runs the deepspeed-zero optimizer, ZeRO-3 as deepspeed (ZeRO stages 1,2,3)"),
            std::string::npos) << t.out;
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model llama2-7b --tokens 10B --gbs 256 --gpus-options dgx-a100:64 "
                                    "--stage3-prefetch-bucket-size 1e6",
                                    "--stage3-prefetch-bucket-size: given, but no plan runs what it tunes (--optimizer "
                                    "megatron --zero-stages 0,1)"));
  EXPECT_TRUE(testing::ExitsTwoWith("capacity --model llama2-7b --tokens 10B --gbs 256 --gpus-options dgx-a100:64 "
                                    "--optimizer deepspeed-bf16 --precision fp16",
                                    "--optimizer deepspeed-bf16: got it with precision fp16, expected bf16"));
}

// plan --optimizer deepspeed-zero searches what DeepSpeed runs, says so, and its Details command
// reproduces the recommended plan; flags no plan would take are errors (exit 2).
TEST(Cli, PlanSearchesDeepSpeed) {
  const std::string plan = "plan --model llama2-7b --cluster dgx-a100 --gpus 64 --gbs 256 --top 3 ";
  auto j = RunShardcast(plan + "--optimizer deepspeed-zero --stage3-max-live-parameters 5e8 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const Json doc = Json::parse(j.out);
  EXPECT_EQ(doc["zero_stages"], Json::parse("[1,2,3]"));
  EXPECT_EQ(doc["optimizer_impl"], "deepspeed-zero");
  EXPECT_EQ(doc["zero3_impl"], "deepspeed");
  for (const auto& p : doc["plans"]) {
    EXPECT_EQ(p["config"]["optimizer_impl"], "deepspeed-zero");
    EXPECT_EQ(p["config"]["schedule"], "1f1b");
    if (p["config"]["zero_stage"] == 3) {
      EXPECT_EQ(p["config"]["stage3_max_live_parameters"], 5e8);
    }
  }
  auto t = RunShardcast(plan + "--zero3-impl deepspeed");  // implies DeepSpeed's optimizer
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("Every plan runs the deepspeed-zero optimizer, ZeRO-3 as deepspeed (ZeRO stages 1,2,3)"),
            std::string::npos) << t.out;
  const auto at = t.out.find("Details: shardcast simulate ");
  ASSERT_NE(at, std::string::npos) << t.out;
  const std::size_t from = at + std::string("Details: shardcast ").size();
  const std::string details = t.out.substr(from, t.out.find('\n', at) - from);
  EXPECT_NE(details.find("--optimizer deepspeed-zero"), std::string::npos) << details;
  auto s = RunShardcast(details + " --json");
  auto tj = RunShardcast(plan + "--zero3-impl deepspeed --json");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  ASSERT_EQ(tj.exit_code, 0) << tj.err;
  EXPECT_DOUBLE_EQ(Json::parse(s.out)["step_time_s"].get<double>(),
                   Json::parse(tj.out)["recommended"]["step_time_s"].get<double>()) << details;

  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--optimizer deepspeed-zero --zero-stages 0,1",
                                    "--zero-stages: got 0 with --optimizer deepspeed-zero, expected "
                                    "stages 1, 2 or 3"));
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--optimizer deepspeed-bf16 --fix zero=2",
                                    "got 2 with --optimizer deepspeed-bf16, expected 1"));
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--zero3-impl deepspeed-2021 --zero-stages 1",
                                    "--zero3-impl: got deepspeed-2021 with --zero-stages 1, expected 3 among the stages"));
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--stage3-prefetch-bucket-size 1e6",
                                    "--stage3-prefetch-bucket-size: given, but no plan runs what it tunes (--optimizer "
                                    "megatron --zero-stages 0,1)"));
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--reduce-bucket-size 1e8 --zero-stages 0,1,3",
                                    "--reduce-bucket-size: given, but no plan runs what it tunes"));
  // ZeRO-3 does not run with a fixed pipeline: its knobs would reach no plan.
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--optimizer deepspeed-zero --zero-stages 1,3 --fix pp=2 "
                                           "--stage3-max-live-parameters 1e8",
                                    "--fix pp=2, where ZeRO-2/3 do not run"));
  // The BF16_Optimizer keeps bf16 weights.
  EXPECT_TRUE(testing::ExitsTwoWith(plan + "--optimizer deepspeed-bf16 --precision fp16",
                                    "--optimizer deepspeed-bf16: got it with precision fp16, expected bf16"));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --zero 1 --optimizer "
                                    "deepspeed-bf16 --fp16",
                                    "--optimizer deepspeed-bf16: got it with precision fp16, expected bf16"));
  // --no-contiguous-gradients tunes DeepSpeed's ZeRO-1/2 only; in simulate it round-trips.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --zero 3 "
                                    "--zero3-impl deepspeed --no-contiguous-gradients",
                                    "--no-contiguous-gradients: got it with --optimizer deepspeed-zero --zero 3, expected "
                                    "--optimizer deepspeed-zero with --zero 1 or 2"));
  auto nc = RunShardcast("simulate --model llama2-7b --cluster dgx-a100 --gpus 8 --zero 1 --optimizer deepspeed-zero "
                         "--no-contiguous-gradients --json");
  ASSERT_EQ(nc.exit_code, 0) << nc.err;
  EXPECT_FALSE(Json::parse(nc.out)["config"]["contiguous_gradients"].get<bool>());
  // DeepSpeed's 2021 stage 3 also implies DeepSpeed's optimizer; the CSV says whose each plan runs.
  auto csv = RunShardcast(plan + "--zero3-impl deepspeed-2021 --csv -");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  const CsvTable table = ParseCsv(csv.out, "plan");
  ASSERT_FALSE(table.rows.empty());
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    EXPECT_EQ(table.Get(r, "optimizer_impl"), "deepspeed-zero");
    EXPECT_EQ(table.Get(r, "zero3_impl"), table.Get(r, "zero_stage") == "3" ? "deepspeed-2021" : "");
  }
  // A fixed pipeline with ZeRO-3 forms no candidate, and says why.
  auto none = RunShardcast(plan + "--optimizer deepspeed-zero --fix pp=2,zero=3");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("(pp, ZeRO) choices: ZeRO-2/3 run without pipeline parallelism"), std::string::npos)
      << none.out;
}

}  // namespace shardcast
