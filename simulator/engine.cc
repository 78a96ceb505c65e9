#include "simulator/engine.h"

#include <algorithm>
#include <cmath>

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>

#include "common/error.h"

namespace shardcast {

// The event loop's helpers are lambdas over the loop's locals; inlined, they cost nothing, while
// an out-of-line call reloads every captured pointer.
#if defined(__GNUC__)
#define SHARDCAST_INLINE __attribute__((always_inline))
#else
#define SHARDCAST_INLINE
#endif

const char* ToString(TaskType t) {
  switch (t) {
    case TaskType::kForward: return "F";
    case TaskType::kBackward: return "B";
    case TaskType::kWeight: return "W";
    case TaskType::kPpSend: return "pp_send";
    case TaskType::kDpReduce: return "dp_grad_reduce";
    case TaskType::kParamGather: return "param_all_gather";
    case TaskType::kEmbeddingSync: return "embedding_grad_all_reduce";
    case TaskType::kOptimizer: return "optimizer";
    case TaskType::kJoin: return "join";
  }
  return "?";
}

std::int32_t TaskGraph::AddTask(const Task& t) {
  TaskNode n;
  static_cast<TaskPlace&>(n) = t;
  n.cost = AddCost(t);
  return AddTask(n);
}

void TaskGraph::ThrowBadCost(std::int32_t cost) const {
  throw InternalError(fmt::format("task {} names cost {}, but the graph has {} costs", nodes_.size(), cost,
                                  costs_.size()));
}

Task TaskGraph::task(std::int32_t id) const {
  const TaskNode& n = nodes_[static_cast<std::size_t>(id)];
  Task t;
  static_cast<TaskCost&>(t) = costs_[static_cast<std::size_t>(n.cost)];
  static_cast<TaskPlace&>(t) = n;
  return t;
}

std::int32_t TaskGraph::AddLink(double cap) {
  links_.push_back({cap});
  return static_cast<std::int32_t>(links_.size() - 1);
}
std::int32_t TaskGraph::AddDevice(const Device& d) {
  devices_.push_back(d);
  return static_cast<std::int32_t>(devices_.size() - 1);
}

std::string TaskGraph::TaskName(std::int32_t id) const {
  const TaskNode& t = nodes_[static_cast<std::size_t>(id)];
  std::string s = fmt::format("device {} {}", t.device, ToString(t.type));
  if (t.microbatch >= 0) s += fmt::format(" mb {}", t.microbatch);
  if (t.chunk >= 0) s += fmt::format(" chunk {}", t.chunk);
  if (t.unit > 0) s += fmt::format(" part {}", t.unit);
  return s;
}

namespace {

using Csr = boost::compressed_sparse_row_graph<boost::directedS>;

/// 16 bytes, as the event queue moves these most. `seq` orders simultaneous events deterministically
/// and identifies the task's latest event (older ones are skipped when they surface).
struct Event {
  SimTime time;
  std::uint32_t seq;
  std::int32_t task;
};

struct CycleFinder : boost::default_dfs_visitor {
  std::vector<std::pair<int, int>>* back_edges;
  template <class E, class G>
  void back_edge(E e, const G& g) {
    back_edges->emplace_back(static_cast<int>(boost::source(e, g)), static_cast<int>(boost::target(e, g)));
  }
};

}  // namespace

void TaskGraph::BuildCsr() const {
  if (csr_valid_) return;
  const std::size_t n = nodes_.size();
  std::vector<std::int32_t> row(n + 1, 0);
  for (const auto& e : edges_) ++row[static_cast<std::size_t>(e.first) + 1];
  for (std::size_t i = 0; i < n; ++i) row[i + 1] += row[i];
  hot_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const TaskNode& t = nodes_[i];
    hot_[i] = {row[i], row[i + 1], t.cost, t.device, 0, t.type == TaskType::kJoin ? 1 : 0};
  }
  targets_.resize(edges_.size());
  sources_.clear();
  // Counting sort of the edges by source, in insertion order within a source.
  for (const auto& e : edges_) {
    targets_[static_cast<std::size_t>(row[static_cast<std::size_t>(e.first)]++)] = e.second;
    ++hot_[static_cast<std::size_t>(e.second)].indeg;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (hot_[i].indeg == 0) sources_.push_back(static_cast<std::int32_t>(i));
  }
  csr_valid_ = true;
}

namespace {

/// State of a started, unfinished task. Only running tasks have one (a few per device), so the
/// event loop's working set stays in cache however long the step.
struct Running {
  double remaining = 0;  // compute: ns of work left; comm: bytes left
  double rate = 0;       // compute: work ns per ns; comm: bytes per ns
  SimTime last_update = 0;
  SimTime sched_at = 0;        // time of the task's pending event
  std::uint32_t last_seq = 0;  // seq of the task's latest event
  std::uint8_t in_flow = 0;    // comm task is moving bytes
};

/// Per task, for one run: where its running state is and what the loop counts down.
struct TaskRun {
  std::int32_t slot;   // index in the running pool while the task runs, else -1
  std::int32_t indeg;  // predecessors not yet ended
};

/// Per device, for one run.
struct DeviceRun {
  double dyn_bytes = 0, peak_bytes = 0;
  double slow_nvlink = 0, slow_network = 0;  // the device's overlap slowdowns
  std::int32_t running_compute = -1;
  int nv_flows = 0, net_flows = 0;
};

/// Memory reused across runs (the planner and benchmarks run many graphs per thread).
struct Workspace {
  std::vector<TaskRun> task;
  std::vector<DeviceRun> dev;
  std::vector<Running> running;       // slot pool (its size is the pool's capacity)
  std::vector<std::int32_t> free_slots;
  std::vector<Event> pending;         // pending events, latest (time, seq) first; size = capacity
  std::vector<std::vector<std::int32_t>> link_flows;
};

}  // namespace

EngineResult TaskGraph::Run() const {
  EngineResult r;
  Run(&r);
  return r;
}

// The loop works on a few raw pointers hoisted out of the vectors, with per-task and per-device
// state grouped in one record each: the per-event work is a few dozen instructions, and every
// extra live pointer is a register spilled to the stack.
void TaskGraph::Run(EngineResult* out) const {
  const std::size_t n = nodes_.size();
  const std::size_t nd = devices_.size();
  BuildCsr();
  thread_local Workspace ws;
  ws.task.resize(n);
  for (std::size_t i = 0; i < n; ++i) ws.task[i].indeg = hot_[i].indeg;
  ws.dev.assign(nd, DeviceRun{});
  for (std::size_t d = 0; d < nd; ++d) {
    ws.dev[d].slow_nvlink = devices_[d].overlap_slowdown_nvlink;
    ws.dev[d].slow_network = devices_[d].overlap_slowdown_network;
  }
  if (ws.running.size() < 64) ws.running.resize(64);
  ws.free_slots.resize(ws.running.size());
  if (ws.pending.size() < 64) ws.pending.resize(64);
  ws.link_flows.resize(links_.size());
  for (auto& f : ws.link_flows) f.clear();
  auto& link_flows = ws.link_flows;

  EngineResult& r = *out;
  r.events = 0;
  r.heap_pushes = 0;
  r.makespan = 0;
  // Every entry is written when its task starts or ends; a run that cannot finish throws.
  r.start.resize(n);
  r.end.resize(n);
  r.gating_pred.resize(n);
  SimTime* const start = r.start.data();
  SimTime* const end = r.end.data();
  std::int32_t* const gating = r.gating_pred.data();

  const Hot* const hot = hot_.data();
  const TaskCost* const costs = costs_.data();
  const std::int32_t* const targets = targets_.data();
  TaskRun* const task = ws.task.data();
  DeviceRun* const dev = ws.dev.data();
  Running* run = ws.running.data();
  std::int32_t* free_slots = ws.free_slots.data();
  std::size_t used_slots = 0, nfree = 0;
  Event* pending = ws.pending.data();
  std::size_t npending = 0;

  std::uint32_t seq = 0;
  SimTime now = 0;
  double time_left = static_cast<double>(kMaxSimTime);  // kMaxSimTime - now
  std::size_t finished = 0;
  std::uint64_t pushes = 0;

  // The pending events, sorted latest first, so the next one is at the back. A step keeps a
  // few per device pending (7 on average in the 1,024-GPU GPT-3 benchmark), where a sorted
  // insertion moves fewer bytes than a binary heap's sift-down on every pop. Events are ordered
  // by (time, seq), and a new event has the largest seq yet: it goes after every pending event
  // of its time, so the insertion compares times only.
  auto push = [&](const Event& ev) SHARDCAST_INLINE {
    if (npending == ws.pending.size()) {
      ws.pending.resize(2 * npending);
      pending = ws.pending.data();
    }
    std::size_t i = npending++;
    while (i > 0 && ev.time >= pending[i - 1].time) {
      pending[i] = pending[i - 1];
      --i;
    }
    pending[i] = ev;
  };
  auto pop = [&]() SHARDCAST_INLINE { return pending[--npending]; };
  auto schedule = [&](std::int32_t id, Running& s, SimTime at) SHARDCAST_INLINE {
    s.sched_at = at;
    ++pushes;
    s.last_seq = seq;
    push({at, seq++, id});
  };
  // The time at which the task runs out of work at its current rate; SimTimeOverflow past
  // kMaxSimTime (a rate near zero, or work beyond any real step), before any integer conversion.
  // ceil(x) <= M exactly when x <= M for the integral M = kMaxSimTime - now, so the range is
  // checked before rounding up; the rounding is ceil's, done on integers (and x / 1.0 == x, so
  // the common full-speed case skips the division).
  auto finish_at = [&](std::int32_t id, const Running& s) SHARDCAST_INLINE {
    if (s.remaining <= 0) return now;
    const double x = (s.rate == 1.0 ? s.remaining : s.remaining / s.rate) - 1e-9;
    if (!(x <= time_left)) throw SimTimeOverflow(TaskName(id));
    SimTime delta = static_cast<SimTime>(x);  // toward zero
    if (static_cast<double>(delta) < x) ++delta;
    return now + delta;
  };
  // After a rate change: an earlier finish needs a new event; a later one keeps the pending
  // event, which re-checks the remaining work when it fires (halves the queue traffic).
  auto reschedule = [&](std::int32_t id, Running& s) SHARDCAST_INLINE {
    const SimTime f = finish_at(id, s);
    if (f < s.sched_at) schedule(id, s, f);
  };
  auto compute_rate = [&](const DeviceRun& d) SHARDCAST_INLINE {
    double slow = 0;
    if (d.nv_flows > 0) slow = std::max(slow, d.slow_nvlink);
    if (d.net_flows > 0) slow = std::max(slow, d.slow_network);
    return 1.0 / (1.0 + slow);
  };
  auto advance = [&](Running& s) SHARDCAST_INLINE {
    s.remaining -= static_cast<double>(now - s.last_update) * s.rate;
    if (s.remaining < 0) s.remaining = 0;
    s.last_update = now;
  };
  auto refresh_compute = [&](DeviceRun& d) SHARDCAST_INLINE {
    const std::int32_t c = d.running_compute;
    if (c < 0) return;
    Running& s = run[task[c].slot];
    const double nr = compute_rate(d);
    if (nr == s.rate) return;
    advance(s);
    s.rate = nr;
    reschedule(c, s);
  };
  auto refresh_link = [&](std::size_t l) SHARDCAST_INLINE {
    const auto& flows = link_flows[l];
    if (flows.empty()) return;
    // x / 1.0 == x: a lone flow's share is the link's capacity, without the division.
    const double share = flows.size() == 1 ? links_[l].capacity_GBps
                                           : links_[l].capacity_GBps / static_cast<double>(flows.size());
    for (std::int32_t f : flows) {
      Running& s = run[task[f].slot];
      const double nr = std::min(share, costs[hot[f].cost].rate_cap_GBps);  // GB/s == bytes/ns
      if (nr == s.rate) continue;
      advance(s);
      const bool was_stalled = s.rate == 0;
      s.rate = nr;
      if (was_stalled) {
        schedule(f, s, finish_at(f, s));
      } else {
        reschedule(f, s);
      }
    }
  };
  auto flow_count = [&](const TaskCost& c, DeviceRun& d, int delta) SHARDCAST_INLINE {
    if (!c.slows_compute) return;
    (c.network ? d.net_flows : d.nv_flows) += delta;
    refresh_compute(d);
  };
  auto new_slot = [&]() -> std::int32_t SHARDCAST_INLINE {
    if (nfree > 0) return free_slots[--nfree];
    if (used_slots == ws.running.size()) {
      ws.running.resize(2 * used_slots);
      ws.free_slots.resize(ws.running.size());
      run = ws.running.data();
      free_slots = ws.free_slots.data();
    }
    return static_cast<std::int32_t>(used_slots++);
  };

  auto start_task = [&](std::int32_t tid) SHARDCAST_INLINE {
    const Hot& h = hot[tid];
    const TaskCost& c = costs[h.cost];
    const std::int32_t slot = new_slot();
    TaskRun& tr = task[tid];
    tr.slot = slot;
    start[tid] = now;
    Running& s = run[slot];
    s = Running{};
    s.last_update = now;
    DeviceRun& d = dev[h.device];
    d.dyn_bytes += c.transient_bytes;
    d.peak_bytes = std::max(d.peak_bytes, d.dyn_bytes);
    if (c.link >= 0 && c.bytes > 0) {
      // A flow: its latency is charged as the bytes the flow would move at its own cap in that
      // time, so a lone flow ends at latency + bytes/cap with one event instead of two.
      s.in_flow = 1;
      s.remaining = c.bytes + c.work_ns * c.rate_cap_GBps;
      s.rate = 0;
      link_flows[static_cast<std::size_t>(c.link)].push_back(tid);
      flow_count(c, d, +1);
      refresh_link(static_cast<std::size_t>(c.link));
    } else if (c.link >= 0) {
      s.remaining = c.work_ns;
      s.rate = 1.0;
      s.in_flow = 0;
      schedule(tid, s, finish_at(tid, s));
    } else {
      s.remaining = c.work_ns;
      if (!h.join) {
        d.running_compute = tid;
        s.rate = compute_rate(d);
      } else {
        s.rate = 1.0;
      }
      schedule(tid, s, finish_at(tid, s));
    }
  };

  for (std::int32_t i : sources_) {
    gating[i] = -1;
    start_task(i);
  }

  while (npending > 0) {
    const Event e = pop();
    const std::int32_t id = e.task;
    TaskRun& tr = task[id];
    const std::int32_t slot = tr.slot;
    if (slot < 0 || run[slot].last_seq != e.seq) continue;
    if (e.time != now) {
      now = e.time;
      time_left = static_cast<double>(kMaxSimTime - now);
    }
    const Hot& h = hot[id];
    const TaskCost& c = costs[h.cost];
    Running& s = run[slot];
    if (s.rate > 0 && !h.join && (c.link >= 0 ? s.in_flow : 1)) {
      // The task may have slowed since this event was set: finish only when no work is left.
      advance(s);
      if (s.remaining > 1e-6) {
        schedule(id, s, finish_at(id, s));
        continue;
      }
    }
    // Task finished.
    end[id] = now;
    tr.slot = -1;
    ++finished;
    const bool was_flow = s.in_flow != 0;
    free_slots[nfree++] = slot;
    DeviceRun& d = dev[h.device];
    d.dyn_bytes += c.alloc_bytes - c.free_bytes - c.transient_bytes;
    d.peak_bytes = std::max(d.peak_bytes, d.dyn_bytes);
    if (c.link >= 0 && was_flow) {
      auto& flows = link_flows[static_cast<std::size_t>(c.link)];
      flows.erase(std::find(flows.begin(), flows.end(), id));
      flow_count(c, d, -1);
      refresh_link(static_cast<std::size_t>(c.link));
    } else if (d.running_compute == id) {
      d.running_compute = -1;
    }
    for (std::int32_t k = h.succ_begin; k < h.succ_end; ++k) {
      const std::int32_t v = targets[k];
      if (--task[v].indeg == 0) {
        gating[v] = id;
        start_task(v);
      }
    }
    // Events come in time order: the last task to end ends the step.
    r.makespan = now;
  }
  r.events = finished;
  r.heap_pushes = pushes;
  r.peak_dynamic_bytes.resize(nd);
  for (std::size_t i = 0; i < nd; ++i) r.peak_dynamic_bytes[i] = dev[i].peak_bytes;

  if (finished != n) {
    // Some tasks never became ready: find a cycle among them with Boost.Graph's DFS.
    Csr g(boost::edges_are_unsorted_multi_pass, edges_.begin(), edges_.end(), n);
    std::vector<std::pair<int, int>> back;
    CycleFinder vis;
    vis.back_edges = &back;
    std::vector<boost::default_color_type> color(n);
    boost::depth_first_search(
        g, vis, boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, g)));
    std::string msg = fmt::format("{} of {} tasks never ran", n - finished, n);
    if (!back.empty()) {
      msg += "; dependency cycle through: " + TaskName(back[0].second);
      // Walk forward from the back edge's target to its source along unfinished tasks.
      msg += " -> ... -> " + TaskName(back[0].first) + " -> " + TaskName(back[0].second);
    }
    throw InternalError(msg);
  }
}

}  // namespace shardcast
