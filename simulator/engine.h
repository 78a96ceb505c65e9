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

/// The numbers of a task: what the engine needs to run it. Tasks doing the same work (every
/// forward pass of one chunk on one device, say) share one TaskCost, so a graph of many tasks
/// has few costs, and a graph whose shape is reused for another configuration only rewrites them.
struct TaskCost {
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

/// Where a task sits: what traces and reports name it by.
struct TaskPlace {
  TaskType type = TaskType::kForward;
  std::int32_t device = 0;     ///< GPU index in the simulated set (stage, replica)
  std::int32_t stream = 0;     ///< stream id within the device (for traces)
  std::int32_t microbatch = -1;
  std::int32_t chunk = -1;
  std::int32_t unit = 0;       ///< part of a split item (bucket or layer)
};

/// A task of a graph: where it sits and which of the graph's TaskCosts it runs.
struct TaskNode : TaskPlace {
  std::int32_t cost = -1;      ///< index of the task's TaskCost
};

/// A task with its own numbers (for small graphs and tests).
struct Task : TaskCost, TaskPlace {};

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
  /// Tasks whose times were not simulated event by event but copied from the same task one or
  /// more schedule periods earlier, shifted by whole periods (TaskGraph::Run); included in `events`.
  std::uint64_t copied_tasks = 0;
};

class TaskGraph {
 public:
  /// Pre-allocates room for `tasks` tasks and `edges` edges.
  void Reserve(std::size_t tasks, std::size_t edges) {
    nodes_.reserve(tasks);
    edges_.reserve(edges);
  }
  /// Removes all tasks, costs, edges, links and devices, keeping the allocated memory.
  void Clear() {
    nodes_.clear();
    costs_.clear();
    edges_.clear();
    links_.clear();
    devices_.clear();
    periods_.clear();
    csr_valid_ = false;
  }
  /// Adds a task with its own cost.
  std::int32_t AddTask(const Task& t);
  /// Adds a task running `node.cost`, an index returned by AddCost.
  std::int32_t AddTask(const TaskNode& node) {
    if (node.cost < 0 || static_cast<std::size_t>(node.cost) >= costs_.size()) ThrowBadCost(node.cost);
    nodes_.push_back(node);
    csr_valid_ = false;
    return static_cast<std::int32_t>(nodes_.size() - 1);
  }
  std::int32_t AddCost(const TaskCost& c) {
    costs_.push_back(c);
    return static_cast<std::int32_t>(costs_.size() - 1);
  }
  /// `before` must finish before `after` starts.
  void AddEdge(std::int32_t before, std::int32_t after) {
    if (before >= 0 && after >= 0 && before != after) {
      edges_.emplace_back(before, after);
      csr_valid_ = false;
    }
  }
  std::int32_t AddLink(double capacity_GBps);
  std::int32_t AddDevice(const Device& d);
  /// A translation symmetry of the structure: task u of device d and task u + periods[d] are
  /// expected to do the same work with the same dependencies, shifted the same way (a pipeline
  /// schedule's steady state one schedule period later). 0 or a missing entry: none. A hint:
  /// Run checks it task by task (same cost, kind, device and in-degree, successors shifted in the
  /// same order) and uses only the runs of tasks where it holds.
  void SetDevicePeriods(std::vector<std::int32_t> periods) {
    periods_ = std::move(periods);
    csr_valid_ = false;
  }

  /// New numbers for the same shape: costs, link capacities and devices may be rewritten
  /// between runs; tasks and edges stay (the dependency structure is built once).
  std::vector<TaskCost>& mutable_costs() { return costs_; }
  std::vector<Link>& mutable_links() { return links_; }
  std::vector<Device>& mutable_devices() { return devices_; }

  std::size_t num_tasks() const { return nodes_.size(); }
  const std::vector<TaskNode>& nodes() const { return nodes_; }
  const std::vector<TaskCost>& costs() const { return costs_; }
  const TaskCost& cost_of(std::int32_t id) const {
    return costs_[static_cast<std::size_t>(nodes_[static_cast<std::size_t>(id)].cost)];
  }
  /// Task `id` with its numbers.
  Task task(std::int32_t id) const;
  const std::vector<Device>& devices() const { return devices_; }
  std::size_t num_edges() const { return edges_.size(); }
  const std::vector<std::pair<std::int32_t, std::int32_t>>& edges() const { return edges_; }

  /// The period of task `u`'s device (SetDevicePeriods), 0: none. Valid after the first Run.
  std::int32_t PeriodOf(std::int32_t u) const {
    const auto d = static_cast<std::size_t>(hot_[static_cast<std::size_t>(u)].device);
    return d < device_period_.size() ? device_period_[d] : 0;
  }
  /// How many periods in a row task `u` matches the same task one period on: `u` is the same as
  /// u + j * PeriodOf(u) for every j <= PeriodRun(u); 0 without periods. Found when first asked
  /// (by a Run), then kept: so a graph, even one that has run before, must not be run from two
  /// threads at once (copies may). Valid after the first Run.
  std::int32_t PeriodRun(std::int32_t u) const;

  /// Runs the simulation. Throws InternalError naming the tasks of a dependency cycle (found
  /// with Boost.Graph's depth-first search) if some tasks can never start, and SimTimeOverflow
  /// when an event would be queued after kMaxSimTime, i.e. a task would end past it at its rate
  /// then (a slowed task's later finish that its pending event supersedes is not queued, so not
  /// an error; the result's timeline is then not filled). The first
  /// run after the edges change builds the successor lists, so one graph must not be run from
  /// two threads at once (copies and separate graphs may).
  ///
  /// Periods (SetDevicePeriods): once per period of one device, the engine's whole state (pending
  /// events, running tasks with their remaining work and rates, tasks waiting on some of their
  /// predecessors, flows on each link, each device's memory and flow counts) is compared with the
  /// state one period earlier, shifted by the period in tasks and in time. If they are equal, the
  /// run is deterministic and the graph is the same one period on, so every later period repeats
  /// the last one exactly for as long as the symmetry holds for the tasks involved: their times
  /// are copied, shifted by whole periods, and the run goes on from the state that many periods
  /// later. The timeline, memory peaks and counters are the ones an event-by-event run gives, to
  /// the bit (`skip_periods` = false runs event by event; tests compare the two).
  EngineResult Run(bool skip_periods = true) const;
  /// The same, reusing `out`'s memory (for callers that simulate many configurations).
  void Run(EngineResult* out, bool skip_periods = true) const;
  /// A readable name such as "device 3 F mb 7 chunk 1".
  std::string TaskName(std::int32_t id) const;

 private:
  /// Successor lists (CSR) and in-degrees, built on the first Run after the edges change, and
  /// the periodic runs of tasks (`period_run_`).
  void BuildCsr() const;
  /// Whether task `u` and task `u` + its device's period match (see SetDevicePeriods).
  bool MatchesNextPeriod(std::size_t u) const;
  /// The first task that matches its next period (the period checks' first anchor), -1: none.
  std::int32_t PeriodAnchor() const;
  [[noreturn]] void ThrowBadCost(std::int32_t cost) const;

  std::vector<TaskNode> nodes_;
  std::vector<TaskCost> costs_;
  std::vector<std::pair<std::int32_t, std::int32_t>> edges_;
  std::vector<Link> links_;
  std::vector<Device> devices_;
  mutable bool csr_valid_ = false;

 public:
  /// What the event loop reads of a task, in one place: its successors' range in `targets_`,
  /// its cost and device, whether it is a join (engine.cc's helpers read it).
  struct Hot {
    std::int32_t succ_begin, succ_end, cost, device;
    std::int32_t indeg;  // predecessors
    std::int32_t join;
  };

 private:
  mutable std::vector<Hot> hot_;
  mutable std::vector<std::int32_t> targets_;  // CSR successors
  mutable std::vector<std::int32_t> sources_;  // tasks without predecessors, in id order
  std::vector<std::int32_t> periods_;  // [device] period in tasks (SetDevicePeriods)
  /// [task] PeriodRun's answers, -1 where not asked yet.
  mutable std::vector<std::int32_t> period_run_;
  mutable std::vector<std::int32_t> period_chain_;   // PeriodRun's scratch
  mutable std::vector<std::int32_t> device_period_;  // [device] period in tasks, 0: none
  mutable std::int32_t anchor_ = -1;  // PeriodAnchor's answer; -2: not asked yet
};

}  // namespace shardcast
