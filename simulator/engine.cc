#include "simulator/engine.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <fmt/format.h>

#include "common/error.h"

namespace shardcast {

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
  tasks_.push_back(t);
  return static_cast<std::int32_t>(tasks_.size() - 1);
}
void TaskGraph::AddEdge(std::int32_t a, std::int32_t b) {
  if (a >= 0 && b >= 0 && a != b) edges_.emplace_back(a, b);
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
  const Task& t = tasks_[static_cast<std::size_t>(id)];
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

namespace {

/// Per-task state of a run. Kept in a thread-local workspace so that repeated runs (the planner,
/// benchmarks) reuse memory instead of faulting in fresh pages every time.
struct TaskState {
  double remaining = 0;  // compute: ns of work left; comm: bytes left
  double rate = 0;       // compute: work ns per ns; comm: bytes per ns
  SimTime last_update = 0;
  SimTime sched_at = 0;  // time of the task's pending event
  std::uint32_t last_seq = 0;  // seq of the task's latest event
  std::int32_t indeg = 0;
  std::uint8_t in_flow = 0;  // comm task is moving bytes
};

struct Workspace {
  std::vector<TaskState> st;
  std::vector<std::int32_t> row;      // CSR offsets (n + 1)
  std::vector<std::int32_t> targets;  // CSR successors
  std::vector<Event> heap;
  std::vector<std::vector<std::int32_t>> link_flows;
};

}  // namespace

EngineResult TaskGraph::Run() const {
  EngineResult r;
  Run(&r);
  return r;
}

void TaskGraph::Run(EngineResult* out) const {
  const std::size_t n = tasks_.size();
  thread_local Workspace ws;
  // Flat CSR adjacency for the event loop (Boost.Graph is used to name a cycle, below).
  ws.row.assign(n + 1, 0);
  for (const auto& e : edges_) ++ws.row[static_cast<std::size_t>(e.first) + 1];
  for (std::size_t i = 0; i < n; ++i) ws.row[i + 1] += ws.row[i];
  ws.targets.resize(edges_.size());
  ws.st.assign(n, TaskState{});
  {
    // Counting sort of edges by source; reuse `sched_at` as the per-row cursor temporarily.
    for (std::size_t i = 0; i < n; ++i) ws.st[i].sched_at = ws.row[i];
    for (const auto& e : edges_) {
      auto& cur = ws.st[static_cast<std::size_t>(e.first)].sched_at;
      ws.targets[static_cast<std::size_t>(cur++)] = e.second;
      ++ws.st[static_cast<std::size_t>(e.second)].indeg;
    }
    for (std::size_t i = 0; i < n; ++i) ws.st[i].sched_at = 0;
  }
  auto& st = ws.st;
  auto& heap = ws.heap;
  heap.clear();
  ws.link_flows.resize(links_.size());
  for (auto& f : ws.link_flows) f.clear();
  auto& link_flows = ws.link_flows;

  EngineResult& r = *out;
  r.events = 0;
  r.heap_pushes = 0;
  r.makespan = 0;
  r.start.assign(n, -1);
  r.end.assign(n, -1);
  r.gating_pred.assign(n, -1);
  r.peak_dynamic_bytes.assign(devices_.size(), 0.0);
  std::vector<double> dyn_bytes(devices_.size(), 0.0);
  std::vector<std::int32_t> running_compute(devices_.size(), -1);
  std::vector<int> dev_nv_flows(devices_.size(), 0), dev_net_flows(devices_.size(), 0);

  std::uint32_t seq = 0;
  SimTime now = 0;
  std::size_t finished = 0;

  auto is_comm = [&](const Task& t) { return t.link >= 0; };
  auto schedule = [&](std::int32_t id, SimTime at) {
    st[static_cast<std::size_t>(id)].sched_at = at;
    ++r.heap_pushes;
    st[static_cast<std::size_t>(id)].last_seq = seq;
    heap.push_back({at, seq++, id});
    std::push_heap(heap.begin(), heap.end(), std::greater<Event>());
  };
  // After a rate change: an earlier finish needs a new event; a later one keeps the pending
  // event, which re-checks the remaining work when it fires (halves the heap traffic).
  // The time at which `id` runs out of work at its current rate; SimTimeOverflow past
  // kMaxSimTime (a rate near zero, or work beyond any real step), before any integer conversion.
  auto finish_at = [&](std::size_t id) {
    if (st[id].remaining <= 0) return now;
    const double delta = std::ceil(st[id].remaining / st[id].rate - 1e-9);
    if (!(delta <= static_cast<double>(kMaxSimTime - now))) throw SimTimeOverflow(TaskName(static_cast<std::int32_t>(id)));
    return now + static_cast<SimTime>(delta);
  };
  auto reschedule = [&](std::size_t id) {
    const SimTime f = finish_at(id);
    if (f < st[id].sched_at) {
      schedule(static_cast<std::int32_t>(id), f);
    }
  };
  auto compute_rate = [&](std::size_t dev) {
    const Device& d = devices_[dev];
    double slow = 0;
    if (dev_nv_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_nvlink);
    if (dev_net_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_network);
    return 1.0 / (1.0 + slow);
  };
  auto advance = [&](std::size_t id) {
    st[id].remaining -= static_cast<double>(now - st[id].last_update) * st[id].rate;
    if (st[id].remaining < 0) st[id].remaining = 0;
    st[id].last_update = now;
  };
  auto refresh_compute = [&](std::size_t dev) {
    const std::int32_t c = running_compute[dev];
    if (c < 0) return;
    const auto id = static_cast<std::size_t>(c);
    const double nr = compute_rate(dev);
    if (nr == st[id].rate) return;
    advance(id);
    st[id].rate = nr;
    reschedule(id);
  };
  auto refresh_link = [&](std::size_t l) {
    const auto& flows = link_flows[l];
    if (flows.empty()) return;
    const double share = links_[l].capacity_GBps / static_cast<double>(flows.size());
    for (std::int32_t f : flows) {
      const auto id = static_cast<std::size_t>(f);
      const double nr = std::min(share, tasks_[id].rate_cap_GBps);  // GB/s == bytes/ns
      if (nr == st[id].rate) continue;
      advance(id);
      const bool was_stalled = st[id].rate == 0;
      st[id].rate = nr;
      if (was_stalled) {
          schedule(f, finish_at(id));
      } else {
        reschedule(id);
      }
    }
  };
  auto flow_count = [&](const Task& t, int delta) {
    if (!t.slows_compute) return;
    const auto dev = static_cast<std::size_t>(t.device);
    (t.network ? dev_net_flows[dev] : dev_nv_flows[dev]) += delta;
    refresh_compute(dev);
  };

  auto start_task = [&](std::int32_t tid) {
    const auto id = static_cast<std::size_t>(tid);
    const Task& t = tasks_[id];
    r.start[id] = now;
    st[id].last_update = now;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += t.transient_bytes;
    r.peak_dynamic_bytes[dev] = std::max(r.peak_dynamic_bytes[dev], dyn_bytes[dev]);
    if (is_comm(t) && t.bytes > 0) {
      // A flow: its latency is charged as the bytes the flow would move at its own cap in that
      // time, so a lone flow ends at latency + bytes/cap with one event instead of two.
      st[id].in_flow = 1;
      st[id].remaining = t.bytes + t.work_ns * t.rate_cap_GBps;
      st[id].rate = 0;
      link_flows[static_cast<std::size_t>(t.link)].push_back(tid);
      flow_count(t, +1);
      refresh_link(static_cast<std::size_t>(t.link));
    } else if (is_comm(t)) {
      st[id].remaining = t.work_ns;
      st[id].rate = 1.0;
      st[id].in_flow = 0;
      schedule(tid, finish_at(id));
    } else {
      st[id].remaining = t.work_ns;
      if (t.type != TaskType::kJoin) {
        running_compute[dev] = tid;
        st[id].rate = compute_rate(dev);
      } else {
        st[id].rate = 1.0;
      }
      schedule(tid, finish_at(id));
    }
  };

  for (std::size_t i = 0; i < n; ++i) {
    if (st[i].indeg == 0) start_task(static_cast<std::int32_t>(i));
  }

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Event>());
    const Event e = heap.back();
    heap.pop_back();
    const auto id = static_cast<std::size_t>(e.task);
    if (e.seq != st[id].last_seq || r.end[id] >= 0) continue;
    now = e.time;
    const Task& t = tasks_[id];
    if (st[id].rate > 0 && t.type != TaskType::kJoin && (t.link >= 0 ? st[id].in_flow : 1)) {
      // The task may have slowed since this event was set: finish only when no work is left.
      advance(id);
      if (st[id].remaining > 1e-6) {
        schedule(e.task, finish_at(id));
        continue;
      }
    }
    ++r.events;
    // Task finished.
    r.end[id] = now;
    ++finished;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += t.alloc_bytes - t.free_bytes - t.transient_bytes;
    r.peak_dynamic_bytes[dev] = std::max(r.peak_dynamic_bytes[dev], dyn_bytes[dev]);
    if (is_comm(t) && st[id].in_flow) {
      auto& flows = link_flows[static_cast<std::size_t>(t.link)];
      flows.erase(std::find(flows.begin(), flows.end(), e.task));
      flow_count(t, -1);
      refresh_link(static_cast<std::size_t>(t.link));
    } else if (running_compute[dev] == e.task) {
      running_compute[dev] = -1;
    }
    for (std::int32_t k = ws.row[id]; k < ws.row[id + 1]; ++k) {
      const auto v = static_cast<std::size_t>(ws.targets[static_cast<std::size_t>(k)]);
      if (--st[v].indeg == 0) {
        r.gating_pred[v] = e.task;
        start_task(static_cast<std::int32_t>(v));
      }
    }
    r.makespan = std::max(r.makespan, now);
  }

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
