#include "simulator/engine.h"

#include <algorithm>
#include <cmath>
#include <queue>

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
  n.type = t.type;
  n.device = t.device;
  n.stream = t.stream;
  n.microbatch = t.microbatch;
  n.chunk = t.chunk;
  n.unit = t.unit;
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
  t.type = n.type;
  t.device = n.device;
  t.stream = n.stream;
  t.microbatch = n.microbatch;
  t.chunk = n.chunk;
  t.unit = n.unit;
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

/// 16 bytes, as the heap moves these most. `seq` orders simultaneous events deterministically
/// and identifies the task's latest event (older ones are skipped when they surface).
struct Event {
  SimTime time;
  std::uint32_t seq;
  std::int32_t task;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
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
  row_.assign(n + 1, 0);
  indeg_.assign(n, 0);
  for (const auto& e : edges_) ++row_[static_cast<std::size_t>(e.first) + 1];
  for (std::size_t i = 0; i < n; ++i) row_[i + 1] += row_[i];
  targets_.resize(edges_.size());
  // Counting sort of the edges by source, in insertion order within a source.
  std::vector<std::int32_t> cursor(row_.begin(), row_.end() - 1);
  for (const auto& e : edges_) {
    targets_[static_cast<std::size_t>(cursor[static_cast<std::size_t>(e.first)]++)] = e.second;
    ++indeg_[static_cast<std::size_t>(e.second)];
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

/// Memory reused across runs (the planner and benchmarks run many graphs per thread).
struct Workspace {
  std::vector<std::int32_t> indeg;
  std::vector<std::int32_t> slot_of;  // task -> index in `running` while it runs
  std::vector<Running> running;       // slot pool (its size is the pool's capacity)
  std::vector<std::int32_t> free_slots;
  std::vector<Event> heap;            // binary min-heap on (time, seq); its size is the capacity
  std::vector<std::vector<std::int32_t>> link_flows;
  std::vector<double> dyn_bytes;
  std::vector<std::int32_t> running_compute;
  std::vector<int> dev_nv_flows, dev_net_flows;
};

}  // namespace

EngineResult TaskGraph::Run() const {
  EngineResult r;
  Run(&r);
  return r;
}

// The loop works on raw pointers hoisted out of the vectors: the per-event work is a few dozen
// instructions, and reloading vector bases after every store would be a good part of it.
void TaskGraph::Run(EngineResult* out) const {
  const std::size_t n = nodes_.size();
  const std::size_t nd = devices_.size();
  BuildCsr();
  thread_local Workspace ws;
  ws.indeg.assign(indeg_.begin(), indeg_.end());
  ws.slot_of.resize(n);  // written when a task starts, before anything reads it
  if (ws.running.size() < 64) ws.running.resize(64);
  ws.free_slots.resize(ws.running.size());
  if (ws.heap.size() < 64) ws.heap.resize(64);
  ws.link_flows.resize(links_.size());
  for (auto& f : ws.link_flows) f.clear();
  ws.dyn_bytes.assign(nd, 0.0);
  ws.running_compute.assign(nd, -1);
  ws.dev_nv_flows.assign(nd, 0);
  ws.dev_net_flows.assign(nd, 0);

  EngineResult& r = *out;
  r.events = 0;
  r.heap_pushes = 0;
  r.makespan = 0;
  // Every entry is written when its task starts or ends; a run that cannot finish throws.
  r.start.resize(n);
  r.end.resize(n);
  r.gating_pred.resize(n);
  r.peak_dynamic_bytes.assign(nd, 0.0);

  const TaskNode* const node = nodes_.data();
  const TaskCost* const costs = costs_.data();
  const Link* const links = links_.data();
  const Device* const devs = devices_.data();
  const std::int32_t* const row = row_.data();
  const std::int32_t* const targets = targets_.data();
  std::int32_t* const indeg = ws.indeg.data();
  std::int32_t* const slot_of = ws.slot_of.data();
  SimTime* const start = r.start.data();
  SimTime* const end = r.end.data();
  std::int32_t* const gating = r.gating_pred.data();
  double* const peak = r.peak_dynamic_bytes.data();
  double* const dyn_bytes = ws.dyn_bytes.data();
  std::int32_t* const running_compute = ws.running_compute.data();
  int* const dev_nv_flows = ws.dev_nv_flows.data();
  int* const dev_net_flows = ws.dev_net_flows.data();
  auto& link_flows = ws.link_flows;
  Running* run = ws.running.data();
  std::int32_t* free_slots = ws.free_slots.data();
  std::size_t used_slots = 0, nfree = 0;
  Event* heap = ws.heap.data();
  std::size_t hn = 0;

  std::uint32_t seq = 0;
  SimTime now = 0;
  std::size_t finished = 0;
  std::uint64_t pushes = 0;

  auto push = [&](const Event& ev) SHARDCAST_INLINE {
    if (hn == ws.heap.size()) {
      ws.heap.resize(2 * hn);
      heap = ws.heap.data();
    }
    std::size_t i = hn++;
    while (i > 0) {
      const std::size_t p = (i - 1) / 2;
      if (!(heap[p] > ev)) break;
      heap[i] = heap[p];
      i = p;
    }
    heap[i] = ev;
  };
  auto pop = [&]() SHARDCAST_INLINE {
    const Event top = heap[0];
    const Event last = heap[--hn];
    std::size_t i = 0;
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= hn) break;
      if (c + 1 < hn && heap[c] > heap[c + 1]) ++c;
      if (!(last > heap[c])) break;
      heap[i] = heap[c];
      i = c;
    }
    heap[i] = last;
    return top;
  };
  auto schedule = [&](std::int32_t id, Running& s, SimTime at) SHARDCAST_INLINE {
    s.sched_at = at;
    ++pushes;
    s.last_seq = seq;
    push({at, seq++, id});
  };
  // The time at which the task runs out of work at its current rate; SimTimeOverflow past
  // kMaxSimTime (a rate near zero, or work beyond any real step), before any integer conversion.
  // (x / 1.0 == x exactly, so the common full-speed case skips the division.)
  // ceil(x) <= M exactly when x <= M for the integral M = kMaxSimTime - now, so the range is
  // checked before rounding up; the rounding is ceil's, done on integers.
  auto finish_at = [&](std::int32_t id, const Running& s) SHARDCAST_INLINE {
    if (s.remaining <= 0) return now;
    const double x = (s.rate == 1.0 ? s.remaining : s.remaining / s.rate) - 1e-9;
    if (!(x <= static_cast<double>(kMaxSimTime - now))) throw SimTimeOverflow(TaskName(id));
    SimTime delta = static_cast<SimTime>(x);  // toward zero
    if (static_cast<double>(delta) < x) ++delta;
    return now + delta;
  };
  // After a rate change: an earlier finish needs a new event; a later one keeps the pending
  // event, which re-checks the remaining work when it fires (halves the heap traffic).
  auto reschedule = [&](std::int32_t id, Running& s) SHARDCAST_INLINE {
    const SimTime f = finish_at(id, s);
    if (f < s.sched_at) schedule(id, s, f);
  };
  auto compute_rate = [&](std::size_t dev) SHARDCAST_INLINE {
    const Device& d = devs[dev];
    double slow = 0;
    if (dev_nv_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_nvlink);
    if (dev_net_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_network);
    return 1.0 / (1.0 + slow);
  };
  auto advance = [&](Running& s) SHARDCAST_INLINE {
    s.remaining -= static_cast<double>(now - s.last_update) * s.rate;
    if (s.remaining < 0) s.remaining = 0;
    s.last_update = now;
  };
  auto refresh_compute = [&](std::size_t dev) SHARDCAST_INLINE {
    const std::int32_t c = running_compute[dev];
    if (c < 0) return;
    Running& s = run[slot_of[c]];
    const double nr = compute_rate(dev);
    if (nr == s.rate) return;
    advance(s);
    s.rate = nr;
    reschedule(c, s);
  };
  auto refresh_link = [&](std::size_t l) SHARDCAST_INLINE {
    const auto& flows = link_flows[l];
    if (flows.empty()) return;
    const double share = links[l].capacity_GBps / static_cast<double>(flows.size());
    for (std::int32_t f : flows) {
      Running& s = run[slot_of[f]];
      const double nr = std::min(share, costs[node[f].cost].rate_cap_GBps);  // GB/s == bytes/ns
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
  auto flow_count = [&](const TaskCost& c, std::size_t dev, int delta) SHARDCAST_INLINE {
    if (!c.slows_compute) return;
    (c.network ? dev_net_flows[dev] : dev_nv_flows[dev]) += delta;
    refresh_compute(dev);
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
    const TaskNode& t = node[tid];
    const TaskCost& c = costs[t.cost];
    const std::int32_t slot = new_slot();
    slot_of[tid] = slot;
    Running& s = run[slot];
    s = Running{};
    start[tid] = now;
    end[tid] = -1;
    s.last_update = now;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += c.transient_bytes;
    peak[dev] = std::max(peak[dev], dyn_bytes[dev]);
    if (c.link >= 0 && c.bytes > 0) {
      // A flow: its latency is charged as the bytes the flow would move at its own cap in that
      // time, so a lone flow ends at latency + bytes/cap with one event instead of two.
      s.in_flow = 1;
      s.remaining = c.bytes + c.work_ns * c.rate_cap_GBps;
      s.rate = 0;
      link_flows[static_cast<std::size_t>(c.link)].push_back(tid);
      flow_count(c, dev, +1);
      refresh_link(static_cast<std::size_t>(c.link));
    } else if (c.link >= 0) {
      s.remaining = c.work_ns;
      s.rate = 1.0;
      s.in_flow = 0;
      schedule(tid, s, finish_at(tid, s));
    } else {
      s.remaining = c.work_ns;
      if (t.type != TaskType::kJoin) {
        running_compute[dev] = tid;
        s.rate = compute_rate(dev);
      } else {
        s.rate = 1.0;
      }
      schedule(tid, s, finish_at(tid, s));
    }
  };

  for (std::size_t i = 0; i < n; ++i) {
    if (indeg[i] == 0) {
      gating[i] = -1;
      start_task(static_cast<std::int32_t>(i));
    }
  }

  while (hn > 0) {
    const Event e = pop();
    const std::int32_t id = e.task;
    const std::int32_t slot = slot_of[id];
    if (slot < 0 || run[slot].last_seq != e.seq) continue;
    now = e.time;
    const TaskNode& t = node[id];
    const TaskCost& c = costs[t.cost];
    Running& s = run[slot];
    if (s.rate > 0 && t.type != TaskType::kJoin && (c.link >= 0 ? s.in_flow : 1)) {
      // The task may have slowed since this event was set: finish only when no work is left.
      advance(s);
      if (s.remaining > 1e-6) {
        schedule(id, s, finish_at(id, s));
        continue;
      }
    }
    ++r.events;
    // Task finished.
    end[id] = now;
    ++finished;
    const bool was_flow = s.in_flow != 0;
    slot_of[id] = -1;
    free_slots[nfree++] = slot;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += c.alloc_bytes - c.free_bytes - c.transient_bytes;
    peak[dev] = std::max(peak[dev], dyn_bytes[dev]);
    if (c.link >= 0 && was_flow) {
      auto& flows = link_flows[static_cast<std::size_t>(c.link)];
      flows.erase(std::find(flows.begin(), flows.end(), id));
      flow_count(c, dev, -1);
      refresh_link(static_cast<std::size_t>(c.link));
    } else if (running_compute[dev] == id) {
      running_compute[dev] = -1;
    }
    for (std::int32_t k = row[id]; k < row[id + 1]; ++k) {
      const std::int32_t v = targets[k];
      if (--indeg[v] == 0) {
        gating[v] = id;
        start_task(v);
      }
    }
    r.makespan = std::max(r.makespan, now);
  }
  r.heap_pushes = pushes;

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
