// PyTorch's caching allocator model (simulator/allocator.h) and the replay of a stage's
// allocations through it (simulator/memory_replay.h). Every expected figure is worked out here
// from the allocator's rules as allocator.h states them.

#include <fstream>

#include <gtest/gtest.h>

#include "report/allocator_trace.h"
#include "simulator/allocator.h"
#include "simulator/memory_replay.h"
#include "simulator/simulate.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

constexpr double kMiB = 1048576.0;
constexpr std::int64_t kMi = 1048576;

TEST(Allocator, RoundingAndSegmentSizesFollowTheAllocatorsRules) {
  EXPECT_EQ(AllocatorRoundedBytes(1), 512);
  EXPECT_EQ(AllocatorRoundedBytes(512), 512);
  EXPECT_EQ(AllocatorRoundedBytes(513), 1024);
  EXPECT_EQ(AllocatorRoundedBytes(kMi + 1), kMi + 512);
  EXPECT_EQ(AllocatorSegmentBytes(kMi), 2 * kMi);               // small pool: 2 MiB segments
  EXPECT_EQ(AllocatorSegmentBytes(kMi + 512), 20 * kMi);        // 1-10 MiB: 20 MiB segments
  EXPECT_EQ(AllocatorSegmentBytes(10 * kMi - 512), 20 * kMi);
  EXPECT_EQ(AllocatorSegmentBytes(10 * kMi), 10 * kMi);         // >= 10 MiB: rounded to 2 MiB
  EXPECT_EQ(AllocatorSegmentBytes(10 * kMi + 512), 12 * kMi);
}

TEST(Allocator, SmallRequestsShareTwoMebibyteSegments) {
  CachingAllocatorModel a;
  for (int i = 0; i < 4; ++i) ASSERT_GE(a.Allocate(512 * 1024), 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMi);
  EXPECT_EQ(a.segments(), 1);
  ASSERT_GE(a.Allocate(1), 0);  // the first segment is full
  EXPECT_EQ(a.reserved_bytes(), 4 * kMi);
  EXPECT_EQ(a.allocated_bytes(), 2 * kMi + 512);
}

TEST(Allocator, BestFitSplitsAndARemainderTooSmallStrandsMemory) {
  CachingAllocatorModel a;
  a.Free(a.Allocate(100 * kMiB));
  const int x = a.Allocate(30 * kMiB);  // carved from the cached 100 MiB block: 70 MiB left over
  EXPECT_EQ(a.reserved_bytes(), 100 * kMi);
  ASSERT_GE(a.Allocate(80 * kMiB), 0);  // 70 MiB does not hold it: a new segment
  EXPECT_EQ(a.reserved_bytes(), 180 * kMi);
  EXPECT_EQ(a.allocated_bytes(), 110 * kMi);
  // The 30 MiB block merges back with its free neighbour: one 100 MiB block again.
  a.Free(x);
  ASSERT_GE(a.Allocate(100 * kMiB), 0);
  EXPECT_EQ(a.reserved_bytes(), 180 * kMi);
}

TEST(Allocator, LargeBlockIsNotSplitForARemainderOfAtMostOneMebibyte) {
  CachingAllocatorModel a;
  a.Free(a.Allocate(20 * kMiB));
  ASSERT_GE(a.Allocate(19.5 * kMiB), 0);  // remainder 0.5 MiB: the whole block is handed out
  EXPECT_EQ(a.allocated_bytes(), 20 * kMi);
  ASSERT_GE(a.Allocate(0.5 * kMiB), 0);  // so the next request opens a small segment
  EXPECT_EQ(a.reserved_bytes(), 22 * kMi);
}

TEST(Allocator, ReleasesItsCacheBeforeRunningOutOfMemory) {
  CachingAllocatorModel a(100 * kMiB);
  a.Free(a.Allocate(40 * kMiB));            // 40 MiB cached
  ASSERT_GE(a.Allocate(70 * kMiB), 0);      // 40 + 70 > 100: the cache goes, then 70 fits
  EXPECT_EQ(a.retries(), 1);
  EXPECT_EQ(a.reserved_bytes(), 70 * kMi);
  EXPECT_EQ(a.peak_reserved_bytes(), 70 * kMi);
  EXPECT_EQ(a.Allocate(40 * kMiB), -1);     // 70 + 40 > 100 with nothing cached to release
  EXPECT_EQ(a.ooms(), 1);
  EXPECT_EQ(a.first_oom_request_bytes(), 40 * kMi);
  EXPECT_THROW(a.Free(12345), std::invalid_argument);
  EXPECT_THROW(a.Allocate(0), std::invalid_argument);
}

// A hand-made cost model: one layer whose forward saves tensors of 100, 50 and 20 MiB, no
// embedding or output layer, one micro-batch per step.
CostModel OneLayer(ParallelConfig* c, Recompute rc) {
  CostModel cm;
  for (double mib : {100.0, 50.0, 20.0}) {
    Op o;
    o.pass = Pass::kForward;
    o.saved_bytes = mib * kMiB;
    o.rebuilt = rc == Recompute::kFull;
    cm.layer_ops.push_back(o);
  }
  cm.layer_saved_bytes = rc == Recompute::kFull ? 10 * kMiB : 170 * kMiB;
  cm.layer_checkpoint_bytes = rc == Recompute::kFull ? cm.layer_saved_bytes : 0.0;
  ChunkCost cc;
  cc.layers = 1;
  cm.chunks = {{cc}};
  c->tp = c->pp = c->dp = 1;
  c->micro_batch_size = c->global_batch_size = 1;
  c->recompute = rc;
  return cm;
}

// A block freed while another stream still uses it (record_stream) counts as freed at once but
// joins the cache only when that stream's work is done; a cache release waits for it.
TEST(Allocator, BlocksFreedForAnotherStreamAreHeldUntilItsWorkIsDone) {
  CachingAllocatorModel a;
  const int x = a.Allocate(30 * kMi);
  a.FreeDeferred(x);
  EXPECT_EQ(a.allocated_bytes(), 0);
  const int y = a.Allocate(30 * kMi);  // x's block is not in the cache yet: a second segment
  EXPECT_EQ(a.reserved_bytes(), 60 * kMi);
  a.FreeDeferred(y);
  a.ProcessEvents();
  ASSERT_GE(a.Allocate(30 * kMi), 0);  // now both are cached: no new segment
  EXPECT_EQ(a.reserved_bytes(), 60 * kMi);
  // At the limit, the retry synchronizes (the held blocks join the cache) and releases the cache.
  CachingAllocatorModel b(60 * kMi);
  const int u = b.Allocate(30 * kMi);
  const int v = b.Allocate(30 * kMi);
  b.FreeDeferred(u);
  b.FreeDeferred(v);
  EXPECT_THROW(b.FreeDeferred(v), std::invalid_argument);
  EXPECT_THROW(b.Free(u), std::invalid_argument);  // held: neither freed again nor reused
  ASSERT_GE(b.Allocate(50 * kMi), 0);  // no room for a 50 MiB segment until the two are released
  EXPECT_EQ(b.retries(), 1);
  EXPECT_EQ(b.reserved_bytes(), 50 * kMi);
  EXPECT_EQ(b.ooms(), 0);
  // A held block does not merge with a freed neighbour: a 20 MiB segment (requests of 1-10 MiB)
  // split into 8 + 8 + 4 MiB; the first held, the second freed (merging with the 4 MiB rest into
  // 12 MiB), a 14 MiB request finds no 14 MiB block and opens a segment of its own.
  CachingAllocatorModel s;
  const int lo = s.Allocate(8 * kMi), hi = s.Allocate(8 * kMi);
  ASSERT_EQ(s.segments(), 1);
  s.FreeDeferred(lo);
  s.Free(hi);
  ASSERT_GE(s.Allocate(14 * kMi), 0);
  EXPECT_EQ(s.segments(), 2);
  EXPECT_EQ(s.reserved_bytes(), 34 * kMi);
  // Blocks belong to their stream: a request on another stream opens its own segment.
  CachingAllocatorModel t;
  t.Free(t.Allocate(30 * kMi));
  ASSERT_GE(t.Allocate(30 * kMi, 1), 0);
  EXPECT_EQ(t.reserved_bytes(), 60 * kMi);
}

// PyTorch takes the lowest address among free blocks of one size; cudaMalloc gave later segments
// lower addresses on the H200 (scripts/allocator-check.py): the newest segment's block first.
TEST(Allocator, AmongBlocksOfOneSizeTheNewestSegmentsIsTaken) {
  CachingAllocatorModel a;
  const int older = a.Allocate(30 * kMi);
  const int newer = a.Allocate(30 * kMi);
  ASSERT_EQ(a.segments(), 2);
  a.Free(older);
  a.Free(newer);
  EXPECT_EQ(a.Allocate(30 * kMi), newer);
  EXPECT_EQ(a.Allocate(30 * kMi), older);
  EXPECT_EQ(a.segments(), 2);
  EXPECT_EQ(a.peak_segments(), 2);
}

// A replay's recorded calls, run again through a fresh model, give the replay's own figures: the
// trace `simulate --allocator-trace` writes is the replay, call for call.
TEST(Allocator, ARecordedTraceReplaysToTheSameFigures) {
  ParallelConfig c;
  const CostModel cm = OneLayer(&c, Recompute::kNone);
  std::vector<AllocatorEvent> events;
  const AllocatorReplay r = ReplayStageAllocations(cm, c, 0, 1000 * kMiB, 0, &events);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind, AllocatorEvent::Kind::kAlloc);
  EXPECT_EQ(events.front().bytes, 1000 * kMi);  // the static bytes first
  std::int64_t allocs = 0, frees = 0;
  for (const AllocatorEvent& e : events) {
    allocs += e.kind == AllocatorEvent::Kind::kAlloc;
    frees += e.kind == AllocatorEvent::Kind::kFree;
  }
  EXPECT_EQ(allocs - frees, 1) << "every tensor of the two steps is freed; the static block stays";
  const AllocatorRunStats s = ReplayAllocatorEvents(events, 0);
  EXPECT_DOUBLE_EQ(static_cast<double>(s.peak_allocated_bytes), r.peak_allocated_bytes);
  EXPECT_DOUBLE_EQ(static_cast<double>(s.peak_reserved_bytes), r.peak_reserved_bytes);
  EXPECT_EQ(s.retries, 0);
  // Within 1300 MiB: one release in each step (worked out in the next test); 1260 MiB: no room.
  const AllocatorRunStats tight = ReplayAllocatorEvents(events, 1300 * kMiB);
  EXPECT_EQ(tight.retries, 2);
  EXPECT_EQ(tight.peak_reserved_bytes, 1300 * kMi);
  EXPECT_EQ(tight.ooms, 0);
  EXPECT_GE(ReplayAllocatorEvents(events, 1260 * kMiB).ooms, 1);
  std::vector<AllocatorEvent> bad = {{AllocatorEvent::Kind::kFree, 7, 0, 0}};
  EXPECT_THROW(ReplayAllocatorEvents(bad, 0), std::invalid_argument);
}

// What PyTorch's own allocator did with two recorded stages on an H200 (tests/fixtures/
// allocator_pytorch_h200.json, from scripts/allocator-check.py): the model, given the same calls and
// limits, reports the same figures. Row 172's squeezed replay runs out of memory five times, which
// only the newest-segment-first order among equal blocks reproduces; the FSDP stage holds
// record_stream blocks on its own stream's pool. (A second H200 run of the same calls and limit
// gave 1 cache release and no OOM for row 172's squeezed replay: near the limit PyTorch's own
// outcome varies between processes; docs/simulator.md, "Reserved memory". This is the first run's.)
TEST(Allocator, ReproducesPyTorchsAllocatorOnRecordedTraces) {
  std::ifstream in(testing::FixturesDir() + "/allocator_pytorch_h200.json");
  ASSERT_TRUE(in) << "fixture missing";
  const Json fixture = Json::parse(in);
  int replays = 0;
  for (const Json& st : fixture["stages"]) {
    std::vector<AllocatorEvent> events;
    for (const Json& e : st["events"]) {
      AllocatorEvent ev;
      ev.kind = static_cast<AllocatorEvent::Kind>(e[0].get<int>());
      if (e.size() > 1) ev.handle = e[1].get<int>();
      if (e.size() > 2) ev.bytes = e[2].get<std::int64_t>();
      if (e.size() > 3) ev.stream = e[3].get<int>();
      events.push_back(ev);
    }
    for (const Json& r : st["replays"]) {
      const AllocatorRunStats s = ReplayAllocatorEvents(events, r["capacity_bytes"].get<double>());
      const Json& py = r["pytorch"];
      const std::string what = st["trace"].get<std::string>() + " " + r["mode"].get<std::string>();
      EXPECT_EQ(s.peak_allocated_bytes, py["peak_allocated_bytes"].get<std::int64_t>()) << what;
      EXPECT_EQ(s.peak_reserved_bytes, py["peak_reserved_bytes"].get<std::int64_t>()) << what;
      EXPECT_EQ(s.peak_segments, py["peak_segments"].get<int>()) << what;
      EXPECT_EQ(s.retries, py["retries"].get<int>()) << what;
      EXPECT_EQ(s.ooms, py["ooms"].get<int>()) << what;
      ++replays;
    }
  }
  EXPECT_EQ(replays, 5);
}

// The trace file's limits: the squeezed one halfway between the allocated and the reserved peak
// (in 2 MiB), none where nothing is cached beyond the tensors; none at a capacity of no room.
TEST(Allocator, TheTraceFileStatesItsLimitsAndTheModelsFiguresAtThem) {
  StageAllocatorTrace t;
  t.capacity_bytes = 1000.0 * kMiB;
  CachingAllocatorModel a;
  a.set_trace(&t.events);
  a.Free(a.Allocate(100 * kMiB));
  ASSERT_GE(a.Allocate(30 * kMiB), 0);  // carved from the cached 100 MiB segment
  ASSERT_GE(a.Allocate(80 * kMiB), 0);  // 70 MiB left there does not hold it: a new segment
  a.ProcessEvents();
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events.back().kind, AllocatorEvent::Kind::kProcessEvents);
  StageAllocatorTrace full;  // one tensor, nothing cached beside it
  full.stage = 1;
  full.capacity_bytes = -1;
  CachingAllocatorModel b;
  b.set_trace(&full.events);
  ASSERT_GE(b.Allocate(100 * kMiB), 0);
  const Json j = AllocatorTraceJson({t, full}, "test");
  const Json& s0 = j["stages"][0];
  // Reserved 180 MiB, allocated at most 110: halfway is 145 MiB, 144 in whole 2 MiB.
  EXPECT_EQ(s0["model"]["unlimited"]["peak_reserved_bytes"], 180 * kMi);
  EXPECT_EQ(s0["model"]["unlimited"]["peak_allocated_bytes"], 110 * kMi);
  EXPECT_EQ(s0["squeezed_capacity_bytes"], 144 * kMi);
  EXPECT_EQ(s0["model"]["squeezed"]["retries"], 1);  // the 80 MiB segment: the 100 MiB one stays split
  EXPECT_EQ(s0["model"]["squeezed"]["ooms"], 1);
  EXPECT_EQ(s0["model"]["at_capacity"]["peak_reserved_bytes"], 180 * kMi);
  EXPECT_EQ(s0["events"][0], Json::array({0, 0, 100 * kMi, 0}));
  const Json& s1 = j["stages"][1];
  EXPECT_TRUE(s1["squeezed_capacity_bytes"].is_null());
  EXPECT_TRUE(s1["model"]["squeezed"].is_null());
  EXPECT_TRUE(s1["model"]["at_capacity"].is_null());
}

TEST(MemoryReplay, BackwardGradientsFragmentTheCacheAsWorkedOutByHand) {
  ParallelConfig c;
  const CostModel cm = OneLayer(&c, Recompute::kNone);
  const double static_bytes = 1000 * kMiB;
  const AllocatorReplay r = ReplayStageAllocations(cm, c, 0, static_bytes, 0);
  // Forward: segments of 100, 50, 20 MiB. Backward, tensor by tensor from the last: its
  // gradient (20) finds no free block, then the 20 MiB tensor is freed; the next gradient (50)
  // does not fit in 20: new; the last (100) does not fit in 20 + 20 + 50: new. Reserved
  // 1000 + 100 + 50 + 20 + 20 + 50 + 100; allocated at most 1000 + 100 + 50 + 100 (the first
  // tensor, the 50 MiB gradient not yet freed, the 100 MiB one made). The second step finds
  // every size in the cache.
  EXPECT_DOUBLE_EQ(r.peak_reserved_bytes, (1000.0 + 340.0) * kMiB);
  EXPECT_DOUBLE_EQ(r.peak_allocated_bytes, (1000.0 + 250.0) * kMiB);
  EXPECT_DOUBLE_EQ(r.overhead_bytes(), 90.0 * kMiB);
  EXPECT_EQ(r.retries, 0);
  EXPECT_FALSE(r.out_of_memory);
  EXPECT_EQ(r.microbatches, 1);
  // Room for 1300 MiB: step 1's last gradient releases the three free segments (20, 20, 50:
  // 1250 reserved). Step 2 carves the 20 MiB tensor and the gradients 20 and 50 out of the
  // cached 100 MiB block (40 + 10 left free between them), so its 100 MiB gradient releases the
  // one wholly free segment (50) and opens a new one: 1300 MiB, one retry in the steady step.
  const AllocatorReplay tight = ReplayStageAllocations(cm, c, 0, static_bytes, 1300 * kMiB);
  EXPECT_EQ(tight.retries, 1);
  EXPECT_FALSE(tight.out_of_memory);
  EXPECT_DOUBLE_EQ(tight.peak_reserved_bytes, 1300 * kMiB);
  // Room for 1260 MiB, above the 1250 MiB allocated peak: step 1 still fits, but in step 2 the
  // free 40 + 10 MiB are stranded beside live blocks and the 100 MiB gradient finds no room.
  const AllocatorReplay oom = ReplayStageAllocations(cm, c, 0, static_bytes, 1260 * kMiB);
  EXPECT_TRUE(oom.out_of_memory);
  EXPECT_DOUBLE_EQ(oom.oom_request_bytes, 100 * kMiB);
  EXPECT_THROW(ReplayStageAllocations(cm, c, 1, static_bytes, 0), std::out_of_range);
}

// DeepSpeed ZeRO-1/2's step flattens the rank's gradient partition (16-bit) and casts it to fp32
// after the backward: 2 + 4 bytes per partition element, each a new segment unless a cached block
// holds it. On the layer above (cached: 100, 50, 20, 20, 50, 100 MiB) with 100 Mi parameters:
// at dp 1 they are 200 and 400 MiB, two new segments; at dp 4, 50 and 100 MiB, carved from the cache.
TEST(MemoryReplay, DeepSpeedsStepCastsTheGradientPartitionToFp32) {
  ParallelConfig c;
  CostModel cm = OneLayer(&c, Recompute::kNone);
  cm.chunks[0][0].params_per_gpu = 100.0 * kMi;
  c.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  c.zero_stage = 2;  // gradients in a flat buffer: no lazily allocated .grad
  const AllocatorReplay one = ReplayStageAllocations(cm, c, 0, 1000 * kMiB, 0);
  EXPECT_DOUBLE_EQ(one.peak_reserved_bytes, (1000.0 + 340.0 + 200.0 + 400.0) * kMiB);
  EXPECT_DOUBLE_EQ(one.peak_allocated_bytes, (1000.0 + 200.0 + 400.0) * kMiB);
  c.dp = 4;
  c.global_batch_size = 4;
  const AllocatorReplay four = ReplayStageAllocations(cm, c, 0, 1000 * kMiB, 0);
  EXPECT_DOUBLE_EQ(four.peak_reserved_bytes, (1000.0 + 340.0) * kMiB);
  EXPECT_DOUBLE_EQ(four.peak_allocated_bytes, (1000.0 + 250.0) * kMiB);
  c.optimizer_impl = OptimizerImpl::kMegatron;  // Megatron's fp32 gradients live in its buffers
  c.dp = 1;
  c.global_batch_size = 1;
  EXPECT_DOUBLE_EQ(ReplayStageAllocations(cm, c, 0, 1000 * kMiB, 0).peak_reserved_bytes, 1340.0 * kMiB);
}

// ZeRO-1 keeps every parameter's .grad (2 bytes, made lazily in the backward). Its step frees
// those outside the rank's partition, flattens and casts the partition (2 + 4 bytes per element),
// and only then frees the partition's own .grad tensors (stage_1_and_2.py step()). A layer of
// two weights, 240 Mi and 160 Mi elements; static 2000 MiB = 800 MiB of .grads + 1200 MiB
// (800 of them the flat 16-bit weights). At dp 1 the step holds 1200 + 800 (.grads) + 800
// (flat) + 1600 (fp32) MiB; at dp 2 the partition is the first 200 Mi elements, which the first
// weight overlaps: 1200 + 480 + 400 + 800 MiB. Both above the backward's peak.
TEST(MemoryReplay, ZeroOnesStepFreesTheGradientsOfItsPartitionAfterTheCast) {
  ParallelConfig c;
  CostModel cm = OneLayer(&c, Recompute::kNone);
  cm.chunks[0][0].params_per_gpu = 400.0 * kMi;
  cm.layer_tensors.dense_order = {240.0 * kMi, 160.0 * kMi};
  c.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  c.zero_stage = 1;
  EXPECT_DOUBLE_EQ(ReplayStageAllocations(cm, c, 0, 2000 * kMiB, 0).peak_allocated_bytes,
                   (1200.0 + 800.0 + 800.0 + 1600.0) * kMiB);
  c.dp = 2;
  c.global_batch_size = 2;
  EXPECT_DOUBLE_EQ(ReplayStageAllocations(cm, c, 0, 2000 * kMiB, 0).peak_allocated_bytes,
                   (1200.0 + 480.0 + 400.0 + 800.0) * kMiB);
  // A weight that starts inside the partition and ends past it belongs to it (DeepSpeed's
  // params_in_partition): weights of 100 Mi and 300 Mi elements, partition [0, 200 Mi): both
  // .grads (800 MiB) stay through the cast: 1200 + 800 + 400 + 800 MiB.
  cm.layer_tensors.dense_order = {100.0 * kMi, 300.0 * kMi};
  EXPECT_DOUBLE_EQ(ReplayStageAllocations(cm, c, 0, 2000 * kMiB, 0).peak_allocated_bytes,
                   (1200.0 + 800.0 + 400.0 + 800.0) * kMiB);
}

TEST(MemoryReplay, FullRecomputeKeepsTheCheckpointAndRebuildsTheRest) {
  ParallelConfig c;
  const CostModel cm = OneLayer(&c, Recompute::kFull);
  const AllocatorReplay r = ReplayStageAllocations(cm, c, 0, 0, 0);
  // Forward: the 10 MiB checkpoint, then 100 and 50 made, 100 freed, 20 carved from it (split),
  // 50 and 20 freed: 10 + 100 + 50 reserved. Backward: 100 and 50 rebuilt from the cache, 20
  // new; gradients 20 (new), 50 (new), 100 (new) as above: 10 + 100 + 50 + 20 + 20 + 50 + 100.
  EXPECT_DOUBLE_EQ(r.peak_reserved_bytes, 350.0 * kMiB);
  // At most: checkpoint + 100 + 50-gradient + 100-gradient = 260 MiB.
  EXPECT_DOUBLE_EQ(r.peak_allocated_bytes, 260.0 * kMiB);
}

TEST(MemoryReplay, WhichFrameworksAllocateGradientsLazilyAndFlattenWeights) {
  ParallelConfig c;
  EXPECT_EQ(LazyGradientsOf(c).bytes_per_param, 0);  // Megatron: flat gradient buffers
  EXPECT_FALSE(FlattensWeightsAtInit(c));
  c.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  c.zero_stage = 1;
  EXPECT_EQ(LazyGradientsOf(c).bytes_per_param, 2);
  EXPECT_FALSE(LazyGradientsOf(c).per_microbatch);
  EXPECT_TRUE(FlattensWeightsAtInit(c));
  c.optimizer_impl = OptimizerImpl::kDeepSpeedBf16;
  EXPECT_EQ(LazyGradientsOf(c).bytes_per_param, 2);
  EXPECT_TRUE(LazyGradientsOf(c).per_microbatch);
  EXPECT_TRUE(FlattensWeightsAtInit(c));
}

/// A GPT of 8 layers, hidden 1024, for the replays run through Simulate.
Model SmallAllocGpt() {
  return ModelFromJson(Json::parse(R"({"name": "small-gpt", "num_layers": 8, "hidden_size": 1024,
    "ffn_hidden_size": 4096, "num_attention_heads": 16, "vocab_size": 51200, "seq_length": 1024,
    "normalization": "layernorm", "activation": "gelu", "position_embedding": "learned",
    "tie_embeddings": true, "source": "test"})"), "small-gpt.json");
}

/// pp x dp ranks, micro-batch `mbs`, global batch `gbs`, the rest ParallelConfig's defaults.
ParallelConfig Batches(std::int64_t pp, std::int64_t dp, std::int64_t mbs, std::int64_t gbs) {
  ParallelConfig c;
  c.pp = pp;
  c.dp = dp;
  c.micro_batch_size = mbs;
  c.global_batch_size = gbs;
  return c;
}

TEST(MemoryReplay, SimulateReportsReservedAtLeastTheAllocatedPeakAndFitsByIt) {
  const Model m = SmallAllocGpt();
  const ParallelConfig c = Batches(2, 2, 2, 16);
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  SimulationResult r = Simulate(m, c, cl, 4, prof);
  ASSERT_TRUE(r.feasible);
  double reserved = 0;
  for (const auto& s : r.stages) {
    EXPECT_GE(s.memory.reserved_bytes, s.memory.peak_bytes);
    reserved = std::max(reserved, s.memory.reserved_bytes);
  }
  EXPECT_DOUBLE_EQ(r.peak_reserved_bytes, reserved);
  // Without the replay (the planner's search), reserved is the allocated peak.
  SimulateOptions o;
  o.allocator_replay = false;
  const SimulationResult q = Simulate(m, c, cl, 4, prof, o);
  EXPECT_DOUBLE_EQ(q.peak_reserved_bytes, q.peak_memory_bytes);
  EXPECT_DOUBLE_EQ(q.peak_memory_bytes, r.peak_memory_bytes);
}

// On a GPU too small for the cache the unlimited replay grows, the replay runs again within the
// limit; releasing its cache, it reserves at most what it would unlimited, and running out of
// room it reports that need. reserved_unlimited_bytes keeps what the step reserves on a larger
// GPU (the need the planner's advice quotes): the reserved figure of the stage on that GPU.
TEST(MemoryReplay, ReservedWithoutTheLimitIsWhatALargerGpuReserves) {
  const Model m = SmallAllocGpt();
  ParallelConfig c = Batches(1, 1, 8, 16);
  c.flash_attention = false;
  Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const SimulationResult big = Simulate(m, c, cl, 1, prof);
  ASSERT_TRUE(big.feasible);
  ASSERT_TRUE(big.fits);
  const StageMemory& mb = big.stages.at(0).memory;
  const double overhead = mb.reserved_bytes - mb.peak_bytes;
  ASSERT_GT(overhead, 0.0) << "the replay holds more than the allocated peak";
  EXPECT_DOUBLE_EQ(mb.reserved_unlimited_bytes, mb.reserved_bytes);  // no limit reached
  EXPECT_DOUBLE_EQ(big.peak_reserved_unlimited_bytes, big.peak_reserved_bytes);
  // Limits between the allocated peak and the reserved figure, and below the allocated peak.
  for (const double limit : {mb.peak_bytes + 0.9 * overhead, 0.9 * mb.peak_bytes}) {
    cl.gpu.memory_bytes = limit;
    const SimulationResult small = Simulate(m, c, cl, 1, prof);
    const StageMemory& ms = small.stages.at(0).memory;
    EXPECT_FALSE(small.fits) << limit;
    EXPECT_DOUBLE_EQ(ms.peak_bytes, mb.peak_bytes);
    EXPECT_LE(ms.reserved_bytes, ms.reserved_unlimited_bytes);
    EXPECT_DOUBLE_EQ(ms.reserved_unlimited_bytes, mb.reserved_bytes);
    EXPECT_DOUBLE_EQ(small.peak_reserved_unlimited_bytes, mb.reserved_bytes);
  }
}

}  // namespace
}  // namespace shardcast
