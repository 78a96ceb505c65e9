// Speed of shardcast itself (docs/performance.md). Run: ./build/bench/shardcast_bench
#include <benchmark/benchmark.h>

#include "bench/gpt3_config.h"
#include "models/loader.h"
#include "simulator/simulate.h"

namespace shardcast {
namespace {

// GPT-3 175B, TP8 PP8, interleaved v=3, mbs 1, SP + selective recompute, distributed optimizer,
// 96 micro-batches per replica (gbs 1536 at 1024 GPUs), at 64 / 1024 / 16384 GPUs.
void BM_SimulateGpt3_175b(benchmark::State& state) {
  const std::int64_t gpus = state.range(0);
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = Gpt3BenchConfig(8, gpus);
  std::size_t tasks = 0, copied = 0;
  for (auto _ : state) {
    SimulationResult r = Simulate(m, c, cl, gpus, prof);
    benchmark::DoNotOptimize(r.step_time_s);
    tasks = r.num_tasks;
    copied = r.copied_tasks;  // copied from an earlier schedule period (TaskGraph::Run)
  }
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["copied"] = static_cast<double>(copied);
}
BENCHMARK(BM_SimulateGpt3_175b)->Arg(64)->Arg(1024)->Arg(16384)->Unit(benchmark::kMicrosecond);

// The same model at PP16 (v = 3, two layers per chunk), 96 micro-batches per replica on 1024 GPUs
// (dp 8, gbs 768): the deepest pipeline of issue 14's speed targets.
void BM_SimulateGpt3_175b_Pp16(benchmark::State& state) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = Gpt3BenchConfig(16, 1024);
  std::size_t tasks = 0, copied = 0;
  for (auto _ : state) {
    SimulationResult r = Simulate(m, c, cl, 1024, prof);
    benchmark::DoNotOptimize(r.step_time_s);
    tasks = r.num_tasks;
    copied = r.copied_tasks;  // copied from an earlier schedule period (TaskGraph::Run)
  }
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["copied"] = static_cast<double>(copied);
}
BENCHMARK(BM_SimulateGpt3_175b_Pp16)->Unit(benchmark::kMicrosecond);

// The 1024-GPU cases (argument: PP 8 or 16) with the graph built anew every time
// (SimulateOptions::reuse_graph off): what the first configuration of a shape costs; the ones
// above reuse the graph as `plan` does for candidates of one shape.
void BM_SimulateGpt3_175b_NewGraph(benchmark::State& state) {
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = Gpt3BenchConfig(state.range(0), 1024);
  SimulateOptions o;
  o.reuse_graph = false;
  std::size_t tasks = 0, copied = 0;
  for (auto _ : state) {
    SimulationResult r = Simulate(m, c, cl, 1024, prof, o);
    benchmark::DoNotOptimize(r.step_time_s);
    tasks = r.num_tasks;
    copied = r.copied_tasks;  // copied from an earlier schedule period (TaskGraph::Run)
  }
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["copied"] = static_cast<double>(copied);
}
BENCHMARK(BM_SimulateGpt3_175b_NewGraph)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardcast

BENCHMARK_MAIN();

#include "planner/capacity.h"
#include "planner/planner.h"

namespace shardcast {
namespace {

/// Runs the plan search of `o` (threads from the benchmark's argument) and reports its counts.
void RunPlanBenchmark(benchmark::State& state, const char* model, const char* cluster, PlanOptions o) {
  const Model m = LoadModel(model);
  const Cluster cl = LoadCluster(cluster);
  const HardwareProfile prof = DefaultProfile(cl);
  o.threads = static_cast<int>(state.range(0));
  std::size_t generated = 0, simulated = 0, layer_sets = 0;
  for (auto _ : state) {
    PlanResult r = RunPlan(m, cl, prof, o);
    benchmark::DoNotOptimize(r.plans.data());
    generated = r.candidates_generated;
    simulated = r.candidates_simulated;
    layer_sets = r.layer_sets_kept;
  }
  state.counters["candidates"] = static_cast<double>(generated);
  state.counters["simulated"] = static_cast<double>(simulated);
  state.counters["layer_sets"] = static_cast<double>(layer_sets);
  state.counters["candidates_per_s"] =
      benchmark::Counter(static_cast<double>(generated), benchmark::Counter::kIsIterationInvariantRate);
}

// The full `plan` search of `make run`: GPT-3 175B on 1024 A100 80GB, global batch 1536.
void BM_PlanGpt3_175b_1024(benchmark::State& state) {
  PlanOptions o;
  o.gpus = 1024;
  o.global_batch_size = 1536;
  RunPlanBenchmark(state, "gpt3-175b", "dgx-a100", o);
}
BENCHMARK(BM_PlanGpt3_175b_1024)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Issue 16: the frontier case with context parallelism and the uneven splits in the search,
// Llama-3.1-405B on 16,384 H100 at sequence 8192, global batch 2048 (target: under 2 s on two
// cores), with the 2 GiB headroom the CLI keeps.
void BM_PlanLlama405b_16384(benchmark::State& state) {
  PlanOptions o;
  o.gpus = 16384;
  o.global_batch_size = 2048;
  o.seq_length = 8192;
  o.min_headroom_bytes = 2.0 * 1073741824.0;
  RunPlanBenchmark(state, "llama3.1-405b", "dgx-h100", o);
}
BENCHMARK(BM_PlanLlama405b_16384)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Issue 17: DeepSeek-V3 on 1,024 H100 at sequence 4096, global batch 8192, searching tp, pp, vp,
// cp, ep and etp (target: under 5 s on two cores).
void BM_PlanDeepSeekV3_1024(benchmark::State& state) {
  PlanOptions o;
  o.gpus = 1024;
  o.global_batch_size = 8192;
  o.seq_length = 4096;
  o.min_headroom_bytes = 2.0 * 1073741824.0;
  RunPlanBenchmark(state, "deepseek-v3", "dgx-h100", o);
}
BENCHMARK(BM_PlanDeepSeekV3_1024)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Issue 20: `capacity --solve` over four GPU types up to 16,384 GPUs (target: under 10 s on
// this machine): GPT-3 175B, 300B tokens, global batch 1536, a deadline of `state.range(0)` days
// (2 days puts the answers in the thousands of GPUs; A100 misses it up to 16,384).
void BM_CapacitySolveGpt3_175b(benchmark::State& state) {
  const Model m = LoadModel("gpt3-175b");
  CapacityOptions o;
  o.tokens = 300e9;
  o.global_batch_size = 1536;
  o.seq_length = 2048;
  o.days = static_cast<double>(state.range(0));
  o.plan.min_headroom_bytes = 2.0 * 1073741824.0;
  std::size_t tried = 0;
  for (auto _ : state) {
    tried = 0;
    for (const char* cluster : {"dgx-a100", "dgx-h100", "dgx-b200", "dgx-h200"}) {
      const SolveResult s = SolveForDeadline(m, cluster, o, 16384);
      benchmark::DoNotOptimize(s.row.cost_usd);
      tried += s.tried.size();
    }
  }
  state.counters["counts_simulated"] = static_cast<double>(tried);
}
BENCHMARK(BM_CapacitySolveGpt3_175b)->Arg(2)->Arg(30)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace shardcast
