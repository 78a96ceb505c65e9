// Calls Simulate a fixed number of times on the GPT-3 175B benchmark configuration, for
// instruction counts under callgrind (docs/performance.md), which do not depend on the machine's
// load the way Google Benchmark's times do. Usage:
//   shardcast_simulate_count ITERATIONS PP REUSE
// ITERATIONS calls after one warm-up call (which builds the graph); PP 8 or 16; REUSE 1 to reuse
// the graph of the same shape (as `plan` does), 0 to build it every time. Run it with 0 and with N
// iterations under `valgrind --tool=callgrind`: the difference of the totals / N is one call.
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "bench/gpt3_config.h"
#include "models/loader.h"
#include "simulator/simulate.h"

int main(int argc, char** argv) {
  using namespace shardcast;
  if (argc != 4) {
    fmt::print(stderr, "usage: {} ITERATIONS PP REUSE\n", argv[0]);
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  const int pp = std::atoi(argv[2]);
  if (iterations < 0 || (pp != 8 && pp != 16)) {
    fmt::print(stderr, "ITERATIONS must be >= 0 and PP 8 or 16\n");
    return 2;
  }
  const Model m = LoadModel("gpt3-175b");
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  const ParallelConfig c = Gpt3BenchConfig(pp, 1024);  // as BM_SimulateGpt3_175b at 1,024 GPUs
  SimulateOptions o;
  o.reuse_graph = std::string(argv[3]) != "0";
  SimulationResult r = Simulate(m, c, cl, 1024, prof, o);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) r = Simulate(m, c, cl, 1024, prof, o);
  const auto t1 = std::chrono::steady_clock::now();
  fmt::print("step {:.9f} s, {} tasks ({} copied), {:.1f} us per call\n", r.step_time_s, r.num_tasks, r.copied_tasks,
             iterations > 0 ? std::chrono::duration<double, std::micro>(t1 - t0).count() / iterations : 0.0);
  return 0;
}
