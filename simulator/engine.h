#pragma once
/// \file engine.h
/// Discrete-event engine over a task graph. Integer simulated time (ns); events ordered by
/// (time, sequence number), so runs are deterministic. Compute tasks run at rate 1, slowed by an
/// overlap factor while a communication flow of the same device is moving bytes; a communication
/// task is a flow of (latency * its own bandwidth cap + bytes) over a link whose bandwidth is split
/// equally among the flows on it (fluid model, rates recomputed whenever the set of flows
/// changes), so a lone flow takes latency + bytes / cap.
/// Streams (program order) are plain dependency edges between consecutive tasks of a stream.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/units.h"

namespace shardcast {

/// The latest simulated time the engine represents: 10^18 ns (31.7 years), well inside int64 so
/// that sums of two times cannot overflow. No real training step comes near it.
inline constexpr SimTime kMaxSimTime = 1'000'000'000'000'000'000;

/// Thrown by TaskGraph::Run when a task would end after kMaxSimTime: the inputs' rates are so
/// small (or the work so large) that the step time is not a number worth printing. Simulate turns
/// it into an infeasible result with a reason.
class SimTimeOverflow : public std::runtime_error {
 public:
  explicit SimTimeOverflow(const std::string& task)
      : std::runtime_error(task), task_name(task) {}
  std::string task_name;  ///< the task whose end was out of range
};

enum class TaskType : std::uint8_t {
  kForward, kBackward, kWeight, kPpSend, kDpReduce, kParamGather, kEmbeddingSync, kOptimizer, kJoin
};
const char* ToString(TaskType t);

struct Task {
  TaskType type = TaskType::kForward;
  std::int32_t device = 0;     ///< GPU index in the simulated set (stage, replica)
  std::int32_t stream = 0;     ///< stream id within the device (for traces)
  std::int32_t microbatch = -1;
  std::int32_t chunk = -1;
  std::int32_t unit = 0;       ///< part of a split item (bucket or layer)
  double work_ns = 0;          ///< compute: duration at full speed; comm: latency
  double bytes = 0;            ///< comm: bytes through the link
  std::int32_t link = -1;      ///< link index, or -1
  double rate_cap_GBps = 0;    ///< comm: the flow's own bandwidth cap
  bool network = false;        ///< comm over the network (smaller overlap slowdown)
  /// Whether this flow slows the device's compute (collectives run many CTAs on the SMs; a
  /// point-to-point send uses one channel and is not counted).
  bool slows_compute = true;
  double alloc_bytes = 0;      ///< device memory allocated when the task ends (saved activations)
  double free_bytes = 0;       ///< device memory freed when the task ends
  double transient_bytes = 0;  ///< device memory held only while the task runs
};

struct Link {
  double capacity_GBps = 0;
};

struct Device {
  double overlap_slowdown_nvlink = 0;
  double overlap_slowdown_network = 0;
  double static_bytes = 0;  ///< memory held all step (weights, grads, optimizer, overheads)
};

/// Result of running the graph.
struct EngineResult {
  std::vector<SimTime> start, end;
  std::vector<std::int32_t> gating_pred;  ///< the predecessor whose completion released the task
  std::vector<double> peak_dynamic_bytes;  ///< per device: peak of allocations above static
  SimTime makespan = 0;
  std::uint64_t events = 0;       ///< events that changed state
  std::uint64_t heap_pushes = 0;  ///< events queued (incl. superseded ones)
};

class TaskGraph {
 public:
  /// Pre-allocates room for `tasks` tasks and `edges` edges.
  void Reserve(std::size_t tasks, std::size_t edges) {
    tasks_.reserve(tasks);
    edges_.reserve(edges);
  }
  /// Removes all tasks, edges, links and devices, keeping the allocated memory.
  void Clear() {
    tasks_.clear();
    edges_.clear();
    links_.clear();
    devices_.clear();
  }
  std::int32_t AddTask(const Task& t);
  /// `before` must finish before `after` starts.
  void AddEdge(std::int32_t before, std::int32_t after);
  std::int32_t AddLink(double capacity_GBps);
  std::int32_t AddDevice(const Device& d);

  const std::vector<Task>& tasks() const { return tasks_; }
  const std::vector<Device>& devices() const { return devices_; }
  std::size_t num_edges() const { return edges_.size(); }
  const std::vector<std::pair<std::int32_t, std::int32_t>>& edges() const { return edges_; }

  /// Runs the simulation. Throws InternalError naming the tasks of a dependency cycle (found
  /// with Boost.Graph's depth-first search) if some tasks can never start, and SimTimeOverflow
  /// when a task would end after kMaxSimTime.
  EngineResult Run() const;
  /// The same, reusing `out`'s memory (for callers that simulate many configurations).
  void Run(EngineResult* out) const;
  /// A readable name such as "stage 3 F mb 7 chunk 1".
  std::string TaskName(std::int32_t id) const;

 private:
  std::vector<Task> tasks_;
  std::vector<std::pair<std::int32_t, std::int32_t>> edges_;
  std::vector<Link> links_;
  std::vector<Device> devices_;
};

}  // namespace shardcast
