// DeepSpeed stage 3's parameter coordinator (Zero3Impl::kDeepSpeed, simulator/deepspeed_zero3.h):
// expected figures are worked out here by hand from its rules on small traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/config_args.h"
#include "models/loader.h"
#include "models/parallel.h"
#include "simulator/cost_model.h"
#include "simulator/deepspeed_zero3.h"
#include "simulator/profile.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

const std::vector<double> kLayer = {30, 10, 40, 20};  // one layer's gathered tensors, forward order
constexpr double kLayerElems = 100;
constexpr int kLayers = 4;

double Total(const double (&by_pass)[2]) { return by_pass[0] + by_pass[1]; }

// A bucket and a live limit above the model, and a reuse distance beyond the trace: the first
// fetch prefetches everything, nothing is released, and every backward finds its tensors gathered.
TEST(DeepSpeedZero3, UnlimitedKnobsGatherEverythingOnceAtTheFirstFetch) {
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1e9, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(Total(p.gathered_elems), kLayers * kLayerElems);
  EXPECT_DOUBLE_EQ(Total(p.on_demand_elems), 0);  // the first module starts cold; not counted
  EXPECT_DOUBLE_EQ(p.gathered_elems[1], 0);
  EXPECT_DOUBLE_EQ(p.peak_live_elems, kLayers * kLayerElems);
  EXPECT_EQ(p.kept_layers, kLayers);
  EXPECT_DOUBLE_EQ(p.backward_lead_layers, 0);  // nothing gathered in the backward
  // Layer l's tensor j (all issued at step 0) is used at step 4l + j: the element-weighted mean
  // of 4l + j over layers 1-3, in layers of 4 modules.
  double sum = 0;
  for (int l = 1; l < kLayers; ++l) {
    for (int j = 0; j < 4; ++j) sum += (4 * l + j) * kLayer[static_cast<std::size_t>(j)];
  }
  EXPECT_NEAR(p.forward_lead_layers, sum / (3 * kLayerElems) / 4, 1e-12);
}

// A one-element bucket prefetches exactly the next tensor at every fetch; with no reuse distance
// every tensor is released after each use and gathered again for the backward.
TEST(DeepSpeedZero3, AOneElementBucketPrefetchesTheNextTensor) {
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1, 1e9, 0);
  EXPECT_DOUBLE_EQ(p.forward_lead_layers, 0.25);  // one module of four
  EXPECT_EQ(p.kept_layers, 0);
  EXPECT_DOUBLE_EQ(Total(p.gathered_elems), 2 * kLayers * kLayerElems);
  // At the turn, the last fetch of the forward pops the last tensor's backward use while it is
  // gathered (not counted) and prefetches the one before it; the last tensor is then released
  // (no reuse distance) and fetched on demand for its backward, whose fetch prefetches one more:
  // from there the backward holds the running tensor and the next two in reverse order, at
  // most 30 + 20 + 40 = 90 (the forward, running and next, at most 40 + 20 = 60).
  EXPECT_DOUBLE_EQ(p.peak_live_elems, 90);
  // Every backward gather leads its use by two modules but the on-demand one (20 elements, 0).
  EXPECT_DOUBLE_EQ(p.backward_lead_layers, (kLayers * kLayerElems - kLayer[3]) * 2 / (kLayers * kLayerElems) / 4);
  // On demand: only each pass's first module (the forward's first tensor, the backward's last
  // tensor at the turn), which starts cold and is not counted.
  EXPECT_DOUBLE_EQ(Total(p.on_demand_elems), 0);
  EXPECT_DOUBLE_EQ(p.gathered_elems[0], kLayers * kLayerElems);
}

// The live limit caps the prefetch: with an unlimited bucket a fetch takes at most
// max_live - gathered, so the gathered elements never pass max_live plus the one tensor that
// may overshoot.
TEST(DeepSpeedZero3, TheLiveLimitCapsWhatIsGathered) {
  const double max_live = 2 * kLayerElems;
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1e9, max_live, 0);
  EXPECT_LE(p.peak_live_elems, max_live + 40);
  EXPECT_GE(p.peak_live_elems, max_live);
  // More than one module of lead, less than the two layers the limit holds.
  EXPECT_GT(p.forward_lead_layers, 0.25);
  EXPECT_LT(p.forward_lead_layers, 2.0);
}

// The reuse distance keeps the tensors next to the turn. Tensor j of the k-th layer from the end
// is used again after 2 x (the tensors after it in its layer) + 2k layers of elements; with a
// distance of two layers plus one element that is under the distance for the whole last layer
// and, of the layer before, for its last tensor only: one whole layer kept.
TEST(DeepSpeedZero3, TheReuseDistanceKeepsTheLayersAtTheTurn) {
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1, 1e9, 2 * kLayerElems + 1);
  EXPECT_EQ(p.kept_layers, 1);
  EXPECT_DOUBLE_EQ(Total(p.gathered_elems), 2 * kLayers * kLayerElems - kLayerElems - kLayer[3]);
  const DeepSpeedZero3Plan none = PlanDeepSpeedZero3(kLayer, kLayers, false, 1, 1e9, 0);
  EXPECT_EQ(none.kept_layers, 0);
}

// With full recompute the backward uses each tensor twice in a row (recomputed forward, then
// backward). Between the two lie the tensors after it, twice: under two layers' elements, so a
// reuse distance of two layers keeps every tensor for its backward, and the recompute adds no
// gather. The turn keeps the last layer (its tensors' forward and recomputed uses are less than
// a layer apart) and nothing of the layer before (three layers apart): 400 forward + 300.
TEST(DeepSpeedZero3, RecomputeAddsNoGatherWithinTheReuseDistance) {
  const DeepSpeedZero3Plan kept = PlanDeepSpeedZero3(kLayer, kLayers, true, 1, 1e9, 2 * kLayerElems);
  EXPECT_DOUBLE_EQ(Total(kept.gathered_elems), 2 * kLayers * kLayerElems - kLayerElems);
  EXPECT_EQ(kept.kept_layers, 1);
  // Without it the recomputed and the backward use gather apart, except where a fetch popped the
  // next use while the tensor was still gathered (DeepSpeed keeps those): more than the two
  // passes' 800, less than three passes' 1200.
  const DeepSpeedZero3Plan none = PlanDeepSpeedZero3(kLayer, kLayers, true, 1, 1e9, 0);
  EXPECT_GT(Total(none.gathered_elems), 2 * kLayers * kLayerElems);
  EXPECT_LT(Total(none.gathered_elems), 3 * kLayers * kLayerElems);
}

// Layers of their own tensors (a dense layer, then a MoE layer of larger tensors): the trace
// takes each layer's, and a layer's elements are the mean. With a one-element bucket and no
// reuse the largest neighbours are the MoE layer's two tensors and the next one prefetched in
// the backward's lead of two: 50 + 50 + 10.
TEST(DeepSpeedZero3, LayersOfTheirOwnKinds) {
  const std::vector<std::vector<double>> orders = {{10, 10}, {50, 50}};
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(orders, false, 1, 1e9, 0);
  EXPECT_DOUBLE_EQ(p.layer_elems, 60);
  EXPECT_DOUBLE_EQ(p.gathered_elems[0], 120);
  EXPECT_DOUBLE_EQ(p.gathered_elems[1], 120);
  EXPECT_DOUBLE_EQ(p.peak_live_elems, 110);
}

// A live limit under every tensor: nothing is ever prefetched (a fetch finds the running tensor
// over the limit), so every use past each pass's first waits for its own gather.
TEST(DeepSpeedZero3, UnderALiveLimitBelowATensorEverythingIsFetchedOnDemand) {
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1e9, 1, 0);
  EXPECT_DOUBLE_EQ(Total(p.gathered_elems), 2 * kLayers * kLayerElems);
  EXPECT_DOUBLE_EQ(Total(p.on_demand_elems), 2 * kLayers * kLayerElems - kLayer[0] - kLayer[3]);
  EXPECT_DOUBLE_EQ(p.peak_live_elems, 40);  // one tensor at a time
  EXPECT_DOUBLE_EQ(p.forward_lead_layers, 0);
}

ParallelConfig DeepSpeedConfig() {
  ParallelConfig c;
  c.dp = 8;
  c.zero_stage = 3;
  c.zero3_impl = Zero3Impl::kDeepSpeed;
  c.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  c.micro_batch_size = 1;
  c.global_batch_size = 16;
  c.recompute = Recompute::kFull;
  return c;
}

// What the simulation holds for the coordinator: its gathered peak, the small tensors whole, and
// the contiguous 16-bit reduce bucket (the pipeline terms are 0 without pipeline parallelism).
TEST(DeepSpeedZero3, TheStageHoldsTheCoordinatorsPeakAndTheBucket) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig c = DeepSpeedConfig();
  c.seq_length = m.seq_length;
  const LayerTensors t = LayerTensorsOf(m, c);
  const DeepSpeedZero3Plan plan = PlanDeepSpeedZero3(t.dense_order, static_cast<int>(m.num_layers), true, 5e7, 1e9, 1e9);
  const SimulationResult r = Simulate(m, c, cl, 8, prof);
  ASSERT_TRUE(r.feasible);
  EXPECT_DOUBLE_EQ(r.ds_zero3.peak_live_elems, plan.peak_live_elems);
  EXPECT_NEAR(r.stages.at(0).memory.comm_buffer_bytes,
              2.0 * plan.peak_live_elems + 2.0 * static_cast<double>(m.num_layers) * t.persistent_elems + 2.0 * 5e8, 1.0);
  // The defaults keep some layers at the turn and prefetch several layers ahead (1e9 live
  // elements over Llama-2-7B's 202M per layer).
  EXPECT_GT(plan.kept_layers, 0);
  EXPECT_GE(plan.forward_lead_layers, 1.0);
}

// A live limit below every tensor leaves every gather on demand: the step waits for them, so it
// is slower than with the defaults, which prefetch.
TEST(DeepSpeedZero3, OnDemandGathersAreExposed) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig c = DeepSpeedConfig();
  c.dp = 64;
  c.global_batch_size = 64;
  const SimulationResult d = Simulate(m, c, cl, 64, prof);
  c.ds_max_live_elems = 1e6;
  const SimulationResult tight = Simulate(m, c, cl, 64, prof);
  ASSERT_TRUE(d.feasible);
  ASSERT_TRUE(tight.feasible);
  EXPECT_GT(tight.ds_zero3.on_demand_elems[0], 0.9 * tight.ds_zero3.gathered_elems[0]);
  EXPECT_GT(tight.breakdown.dp_comm_s, d.breakdown.dp_comm_s);
  EXPECT_GT(tight.step_time_s, d.step_time_s);
}

// The task graph follows the coordinator (Llama-2-7B, 202M gathered elements per layer, its
// defaults: 1e9 live elements, a 5e8-element reduce bucket):
//  - each micro-batch gathers every layer in the forward and all but the kept ones in the
//    backward, and reduce-scatters every layer's gradients;
//  - a forward gather waits for the compute unit lead + 1 before its layer, no later one;
//  - reduce-scatters leave in buckets of floor(5e8 / 202M) = 2 layers, after the unit that
//    fills the bucket;
//  - the next micro-batch's first compute waits for the backward's last reduce-scatter.
TEST(DeepSpeedZero3, TheTaskGraphFollowsTheCoordinator) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  ParallelConfig c = DeepSpeedConfig();  // dp 8, mbs 1, gbs 16: two micro-batches
  SimulateOptions o;
  o.keep_graph = true;
  o.reuse_graph = false;
  const SimulationResult r = Simulate(m, c, cl, 8, DefaultProfile(cl), o);
  ASSERT_TRUE(r.feasible);
  const DeepSpeedZero3Plan& d = r.ds_zero3;
  const int L = static_cast<int>(m.num_layers), lead = static_cast<int>(d.forward_lead_layers);
  ASSERT_GT(d.kept_layers, 0);
  ASSERT_GE(lead, 2);
  ASSERT_EQ(d.on_demand_elems[0] + d.on_demand_elems[1], 0);  // no on-demand tasks with the defaults
  const int bucket = static_cast<int>(5e8 / d.layer_elems);
  ASSERT_EQ(bucket, 2);
  const auto& nodes = r.graph.nodes();
  std::vector<std::int32_t> compute;  // the compute-stream item units, in order
  int gathers = 0, reduces = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].device != 0) continue;
    if (nodes[i].type == TaskType::kParamGather) ++gathers;
    if (nodes[i].type == TaskType::kDpReduce) ++reduces;
    if (nodes[i].type == TaskType::kForward || nodes[i].type == TaskType::kBackward) {
      compute.push_back(static_cast<std::int32_t>(i));
    }
  }
  EXPECT_EQ(gathers, 2 * (2 * L - d.kept_layers));
  EXPECT_EQ(reduces, 2 * L);
  ASSERT_EQ(compute.size(), static_cast<std::size_t>(4 * L));
  std::map<std::int32_t, std::vector<std::int32_t>> preds;
  for (const auto& [a, b] : r.graph.edges()) preds[b].push_back(a);
  auto has_edge = [&](std::int32_t a, std::int32_t b) {
    const auto& p = preds[b];
    return std::find(p.begin(), p.end(), a) != p.end();
  };
  auto gather_of = [&](std::int32_t unit_task) {  // the gather a compute unit waits for
    for (std::int32_t p : preds[unit_task]) {
      if (nodes[static_cast<std::size_t>(p)].type == TaskType::kParamGather) return p;
    }
    return std::int32_t{-1};
  };
  // The first micro-batch's forward: unit u's gather after unit u - lead - 1.
  for (int u = lead + 1; u < L; ++u) {
    const std::int32_t g = gather_of(compute[static_cast<std::size_t>(u)]);
    ASSERT_GE(g, 0) << "unit " << u;
    EXPECT_TRUE(has_edge(compute[static_cast<std::size_t>(u - lead - 1)], g)) << "unit " << u;
  }
  // Its backward: the first kept_layers units have no gather, the next one has.
  for (int u = 0; u < d.kept_layers; ++u) EXPECT_LT(gather_of(compute[static_cast<std::size_t>(L + u)]), 0) << u;
  EXPECT_GE(gather_of(compute[static_cast<std::size_t>(L + d.kept_layers)]), 0);
  // Reduce-scatters hang off every second backward unit (the bucket's filling one).
  std::vector<int> reduces_after(static_cast<std::size_t>(L), 0);
  for (int u = 0; u < L; ++u) {
    for (const auto& [a, b] : r.graph.edges()) {
      if (a == compute[static_cast<std::size_t>(L + u)] && nodes[static_cast<std::size_t>(b)].type == TaskType::kDpReduce) {
        ++reduces_after[static_cast<std::size_t>(u)];
      }
    }
  }
  for (int u = 0; u < L; ++u) EXPECT_EQ(reduces_after[static_cast<std::size_t>(u)], u % 2 == 1 ? 2 : 0) << u;
  // The second micro-batch's first unit waits for the first backward's last reduce-scatter.
  bool waits = false;
  for (std::int32_t p : preds[compute[static_cast<std::size_t>(2 * L)]]) {
    waits = waits || nodes[static_cast<std::size_t>(p)].type == TaskType::kDpReduce;
  }
  EXPECT_TRUE(waits);
}

// A reused graph of another DeepSpeed configuration gives this one's step: the on-demand
// gathers change the graph's shape.
TEST(DeepSpeedZero3, AReusedGraphGivesTheSameStep) {
  const Model m = LoadModel("llama2-7b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig a = DeepSpeedConfig();
  a.ds_prefetch_bucket_elems = 1e6;
  a.ds_max_reuse_distance_elems = 1;
  a.ds_max_live_elems = 1e8;
  ParallelConfig b = a;
  b.ds_max_live_elems = 5e7;
  SimulateOptions fresh;
  fresh.reuse_graph = false;
  const SimulationResult alone = Simulate(m, b, cl, 8, prof, fresh);
  SimulateOptions reuse;
  reuse.reuse_graph = true;
  Simulate(m, a, cl, 8, prof, reuse);
  const SimulationResult after = Simulate(m, b, cl, 8, prof, reuse);
  EXPECT_DOUBLE_EQ(after.step_time_s, alone.step_time_s);
}

TEST(DeepSpeedZero3, CommandLine) {
  const std::string base = "simulate --model llama2-7b --cluster dgx-a100 --gpus 64 --mbs 1 --gbs 64 --zero 3 ";
  const auto d = testing::RunShardcast(base + "--zero3-impl deepspeed --json");
  const auto k = testing::RunShardcast(base + "--zero3-impl deepspeed --stage3-prefetch-bucket-size 1e6 "
                                              "--stage3-max-reuse-distance 0 --stage3-max-live-parameters 1e6 --json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  ASSERT_EQ(k.exit_code, 0) << k.err;
  const auto a = nlohmann::json::parse(d.out), b = nlohmann::json::parse(k.out);
  EXPECT_EQ(a["config"]["zero3_impl"], "deepspeed");
  EXPECT_EQ(a["config"]["optimizer_impl"], "deepspeed-zero");  // implied
  EXPECT_EQ(a["config"]["stage3_prefetch_bucket_size"], 5e7);
  EXPECT_EQ(a["config"]["stage3_max_reuse_distance"], 1e9);
  EXPECT_EQ(a["config"]["reduce_bucket_size"], 5e8);
  EXPECT_EQ(b["config"]["stage3_prefetch_bucket_size"], 1e6);
  EXPECT_EQ(b["config"]["stage3_max_live_parameters"], 1e6);
  EXPECT_EQ(b["config"]["stage3_max_reuse_distance"], 0);  // DeepSpeed's "none" is accepted
  EXPECT_GT(b["step_time_s"].get<double>(), a["step_time_s"].get<double>());
  // What the coordinator did: with no reuse distance nothing is kept into the backward.
  EXPECT_GT(a["deepspeed_zero3"]["kept_layers"].get<int>(), 0);
  EXPECT_EQ(b["deepspeed_zero3"]["kept_layers"].get<int>(), 0);
  const auto text = testing::RunShardcast(base + "--zero3-impl deepspeed");
  EXPECT_NE(text.out.find("DeepSpeed stage 3 (its parameter coordinator"), std::string::npos) << text.out;
  // The knobs of today's DeepSpeed are refused elsewhere, naming what was given.
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--zero3-impl deepspeed-2021 --stage3-prefetch-bucket-size 1e6",
                                    "--stage3-prefetch-bucket-size: got 1000000 with --zero 3 --zero3-impl "
                                    "deepspeed-2021, expected --zero 3 --zero3-impl deepspeed (the DeepSpeed"));
  EXPECT_TRUE(testing::ExitsTwoWith(base + "--stage3-max-reuse-distance 1e6",
                                    "--stage3-max-reuse-distance: got 1000000 with --zero 3 --zero3-impl per-layer"));
  // DeepSpeed's engine refuses expert parallelism with stage 3: a result with the reason.
  const auto moe = testing::RunShardcast("simulate --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --mbs 1 --gbs 64 "
                                         "--zero 3 --zero3-impl deepspeed --ep 8");
  EXPECT_NE(moe.out.find("DeepSpeed's stage 3 does not run expert parallelism (ep = 8)"), std::string::npos) << moe.out;
  // The command that reproduces it carries the knobs.
  ParallelConfig c = DeepSpeedConfig();
  c.ds_prefetch_bucket_elems = 1e6;
  c.ds_max_reuse_distance_elems = 2e8;
  std::vector<std::string> unexpressed;
  const std::string flags = cli::SimulateFlags(c, LoadModel("llama2-7b"), 8, &unexpressed);
  for (const char* f : {"--zero3-impl deepspeed", "--stage3-prefetch-bucket-size 1000000",
                        "--stage3-max-reuse-distance 200000000", "--optimizer deepspeed-zero"}) {
    EXPECT_NE(flags.find(f), std::string::npos) << flags;
  }
}

TEST(DeepSpeedZero3, BadKnobsAreRefused) {
  EXPECT_THROW(PlanDeepSpeedZero3(kLayer, kLayers, false, -1, 1e9, 1e9), std::invalid_argument);
  EXPECT_THROW(PlanDeepSpeedZero3({10, 0}, kLayers, false, 1, 1e9, 1e9), std::invalid_argument);
  const DeepSpeedZero3Plan empty = PlanDeepSpeedZero3({}, kLayers, false, 1, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(Total(empty.gathered_elems), 0);
}

}  // namespace
}  // namespace shardcast
