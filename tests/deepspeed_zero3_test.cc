// DeepSpeed stage 3's parameter coordinator (Zero3Impl::kDeepSpeed, simulator/deepspeed_zero3.h):
// expected figures are worked out here by hand from its rules on small traces.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "simulator/deepspeed_zero3.h"

namespace shardcast {
namespace {

const std::vector<double> kLayer = {30, 10, 40, 20};  // one layer's gathered tensors, forward order
constexpr double kLayerElems = 100;
constexpr int kLayers = 4;

// A bucket and a live limit above the model, and a reuse distance beyond the trace: the first
// fetch prefetches everything, nothing is released, and every backward finds its tensors gathered.
TEST(DeepSpeedZero3, UnlimitedKnobsGatherEverythingOnceAtTheFirstFetch) {
  const DeepSpeedZero3Plan p = PlanDeepSpeedZero3(kLayer, kLayers, false, 1e9, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(p.gathered_elems, kLayers * kLayerElems);
  EXPECT_DOUBLE_EQ(p.on_demand_elems, kLayer[0]);
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
  EXPECT_DOUBLE_EQ(p.gathered_elems, 2 * kLayers * kLayerElems);
  // At the turn, the last fetch of the forward pops the last tensor's backward use while it is
  // gathered (not counted) and prefetches the one before it; the last tensor is then released
  // (no reuse distance) and fetched on demand for its backward, whose fetch prefetches one more:
  // from there the backward holds the running tensor and the next two in reverse order, at
  // most 30 + 20 + 40 = 90 (the forward, running and next, at most 40 + 20 = 60).
  EXPECT_DOUBLE_EQ(p.peak_live_elems, 90);
  // Every backward gather leads its use by two modules but the on-demand one (20 elements, 0).
  EXPECT_DOUBLE_EQ(p.backward_lead_layers, (kLayers * kLayerElems - kLayer[3]) * 2 / (kLayers * kLayerElems) / 4);
  EXPECT_DOUBLE_EQ(p.on_demand_elems, kLayer[0] + kLayer[3]);
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
  EXPECT_DOUBLE_EQ(p.gathered_elems, 2 * kLayers * kLayerElems - kLayerElems - kLayer[3]);
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
  EXPECT_DOUBLE_EQ(kept.gathered_elems, 2 * kLayers * kLayerElems - kLayerElems);
  EXPECT_EQ(kept.kept_layers, 1);
  // Without it the recomputed and the backward use gather apart, except where a fetch popped the
  // next use while the tensor was still gathered (DeepSpeed keeps those): more than the two
  // passes' 800, less than three passes' 1200.
  const DeepSpeedZero3Plan none = PlanDeepSpeedZero3(kLayer, kLayers, true, 1, 1e9, 0);
  EXPECT_GT(none.gathered_elems, 2 * kLayers * kLayerElems);
  EXPECT_LT(none.gathered_elems, 3 * kLayers * kLayerElems);
}

TEST(DeepSpeedZero3, BadKnobsAreRefused) {
  EXPECT_THROW(PlanDeepSpeedZero3(kLayer, kLayers, false, -1, 1e9, 1e9), std::invalid_argument);
  EXPECT_THROW(PlanDeepSpeedZero3({10, 0}, kLayers, false, 1, 1e9, 1e9), std::invalid_argument);
  const DeepSpeedZero3Plan empty = PlanDeepSpeedZero3({}, kLayers, false, 1, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(empty.gathered_elems, 0);
}

}  // namespace
}  // namespace shardcast
