// Issue 19: PyTorch FSDP's limit_all_gathers (ParallelConfig::zero3_limit_all_gathers). With the
// rate limiter the CPU issues a layer's all-gather only once the layer two back is freed; without
// it the gathers are issued as the CPU runs ahead, run back to back, and each layer's gathered
// block stays held by the caching allocator until the GPU is done with it (record_stream).
// Expected figures are derived here from the allocator's segment rule and the layer sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "models/loader.h"
#include "models/parallel.h"
#include "simulator/allocator.h"
#include "simulator/cost_model.h"
#include "simulator/memory_replay.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

ParallelConfig FullShard(bool limit) {
  ParallelConfig c;
  c.dp = 8;
  c.zero_stage = 3;
  c.micro_batch_size = 1;
  c.global_batch_size = 16;
  c.recompute = Recompute::kFull;
  c.zero3_limit_all_gathers = limit;
  return c;
}

TEST(FsdpRateLimiter, WithoutItTheAllocatorHoldsEveryLayersGatherOfAPass) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const SimulationResult limited = Simulate(m, FullShard(true), cl, 8, prof);
  const SimulationResult ahead = Simulate(m, FullShard(false), cl, 8, prof);
  ASSERT_TRUE(limited.feasible);
  ASSERT_TRUE(ahead.feasible);
  const StageMemory& a = limited.stages.at(0).memory;
  const StageMemory& b = ahead.stages.at(0).memory;
  // What the tensors occupy does not change: two layers' gathered parameters at a time.
  EXPECT_DOUBLE_EQ(a.peak_bytes, b.peak_bytes);
  EXPECT_DOUBLE_EQ(a.comm_buffer_bytes, b.comm_buffer_bytes);
  // Without the limiter, at the end of a forward the allocator holds every layer's gathered
  // block (each its own segment, the bytes rounded up to 2 MiB) beside the static state.
  ParallelConfig c = FullShard(false);
  c.seq_length = m.seq_length;
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  const double layer = Zero3GatheredLayerBytes(cm, c.param_gather_bytes, 0);
  // A Llama-2 layer from its shape (Q, K, V, O of h x h, SwiGLU's three h x f, two RMSNorms),
  // with the final norm's h shared over the layers: the embedding and output layer are units of
  // their own.
  const double h = static_cast<double>(m.hidden_size), f = static_cast<double>(m.ffn_hidden_size),
               n = static_cast<double>(m.num_layers);
  EXPECT_DOUBLE_EQ(layer, 2.0 * (4 * h * h + 3 * h * f + 2 * h + h / n));
  const double segment = static_cast<double>(AllocatorSegmentBytes(AllocatorRoundedBytes(static_cast<std::int64_t>(layer))));
  const double static_rest = b.weights_bytes + b.grads_bytes + b.optimizer_bytes + b.comm_buffer_bytes - 2 * layer;
  EXPECT_GE(b.reserved_bytes - b.framework_bytes, static_rest + static_cast<double>(m.num_layers) * segment);
  // With the limiter the gathered parameters are two layers in the static state: what reserved
  // adds to the allocated peak is the activations' fragmentation alone, less than the two layers'
  // segments the replay without it holds beside every other layer's.
  EXPECT_LT(a.reserved_bytes - a.peak_bytes, 2 * segment);
}

// The gathered layers ZeRO-3 holds are at the configuration's gather width: 1 byte per parameter
// with --fp8-param-gather (torchtitan's float8 all-gather), 2 for 16-bit parameters; the
// embedding and output layer gather 16-bit weights either way.
TEST(FsdpRateLimiter, GatheredLayersAreCountedAtTheGatherWidth) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig c = FullShard(true);
  c.precision = Precision::kFp8;
  c.seq_length = m.seq_length;
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  const double output = cm.output_params_per_gpu, embedding = cm.embedding_params_per_gpu;
  const double layer_params = (cm.chunks[0][0].params_per_gpu - embedding - output) / static_cast<double>(m.num_layers);
  EXPECT_DOUBLE_EQ(Zero3GatheredLayerBytes(cm, 1.0, 0), layer_params);
  const SimulationResult bf16 = Simulate(m, c, cl, 8, prof);
  c.fp8_param_gather = true;
  const SimulationResult fp8 = Simulate(m, c, cl, 8, prof);
  ASSERT_TRUE(bf16.feasible);
  ASSERT_TRUE(fp8.feasible);
  // Two layers' gathered parameters, or a layer beside the embedding or the output layer (FSDP2's
  // units; untied Llama-2: the same size), whichever is more: the layers at 2 bytes against 1,
  // the embedding and output at 2 bytes either way.
  const double unit = std::max(embedding, output);
  EXPECT_NEAR(bf16.stages.at(0).memory.comm_buffer_bytes - fp8.stages.at(0).memory.comm_buffer_bytes,
              std::max(4.0 * layer_params, 2.0 * layer_params + 2.0 * unit) -
                  std::max(2.0 * layer_params, layer_params + 2.0 * unit),
              1.0);
  EXPECT_NEAR(fp8.stages.at(0).memory.comm_buffer_bytes, layer_params + 2.0 * unit, 1.0);  // the output's unit
}

// Near the limit the held blocks make the allocator release its cache: the step fits only at
// risk, what it holds stays within the device, and what it would hold unlimited is larger.
TEST(FsdpRateLimiter, NearTheLimitTheHeldBlocksPutThePlanAtRisk) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig c = FullShard(true);
  c.dp = 64;
  c.micro_batch_size = 8;
  c.global_batch_size = 512;
  const SimulationResult limited = Simulate(m, c, cl, 64, prof);
  c.zero3_limit_all_gathers = false;
  const SimulationResult ahead = Simulate(m, c, cl, 64, prof);
  ASSERT_TRUE(limited.fits);
  EXPECT_FALSE(limited.memory_at_risk);
  ASSERT_TRUE(ahead.fits);
  EXPECT_TRUE(ahead.memory_at_risk);
  const StageMemory& s = ahead.stages.at(0).memory;
  EXPECT_GT(s.allocator_retries, 0);
  EXPECT_LE(s.reserved_bytes, ahead.usable_memory_bytes);
  EXPECT_GT(s.reserved_unlimited_bytes, ahead.usable_memory_bytes);
  EXPECT_DOUBLE_EQ(ahead.peak_reserved_unlimited_bytes, s.reserved_unlimited_bytes);
}

TEST(FsdpRateLimiter, CommandLine) {
  const std::string base = "simulate --model llama3-8b --cluster dgx-a100 --gpus 64 --mbs 1 --gbs 128 ";
  const auto r = testing::RunShardcast(base + "--zero 3 --no-limit-all-gathers --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["zero3_limit_all_gathers"], false);
  const auto d = nlohmann::json::parse(testing::RunShardcast(base + "--zero 3 --json").out);
  EXPECT_EQ(d["config"]["zero3_limit_all_gathers"], true);
  EXPECT_GT(j["peak_reserved_memory_bytes"].get<double>(), d["peak_reserved_memory_bytes"].get<double>());
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 1 --no-limit-all-gathers",
                                    "--no-limit-all-gathers: got it with --zero 1, expected --zero 3"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero 3 --zero3-impl deepspeed-2021 --optimizer deepspeed-zero "
                                           "--no-limit-all-gathers",
                                    "--zero3-impl deepspeed-2021, expected --zero 3 with the per-layer gathers"));
  // The summary and the command that reproduces it carry the switch.
  const auto text = testing::RunShardcast(base + "--zero 3 --no-limit-all-gathers");
  EXPECT_NE(text.out.find("no-limit-all-gathers"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace shardcast
