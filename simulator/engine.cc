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

struct Event {
  SimTime time;
  std::uint64_t seq;
  std::int32_t task;
  std::uint32_t version;
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

EngineResult TaskGraph::Run() const {
  const std::size_t n = tasks_.size();
  Csr g(boost::edges_are_unsorted_multi_pass, edges_.begin(), edges_.end(), n);
  std::vector<std::int32_t> indeg(n, 0);
  for (const auto& e : edges_) ++indeg[static_cast<std::size_t>(e.second)];

  EngineResult r;
  r.start.assign(n, -1);
  r.end.assign(n, -1);
  r.gating_pred.assign(n, -1);
  r.peak_dynamic_bytes.assign(devices_.size(), 0.0);
  std::vector<double> dyn_bytes(devices_.size(), 0.0);

  // Running state.
  std::vector<double> remaining(n, 0.0);   // compute: ns of work left; comm: bytes left
  std::vector<double> rate(n, 0.0);        // compute: work ns per ns; comm: bytes per ns
  std::vector<SimTime> last_update(n, 0);
  std::vector<std::uint32_t> version(n, 0);
  std::vector<std::uint8_t> in_flow(n, 0);  // comm task is moving bytes
  std::vector<std::vector<std::int32_t>> link_flows(links_.size());
  std::vector<std::int32_t> running_compute(devices_.size(), -1);
  std::vector<int> dev_nv_flows(devices_.size(), 0), dev_net_flows(devices_.size(), 0);

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  std::uint64_t seq = 0;
  SimTime now = 0;
  std::size_t finished = 0;

  auto is_comm = [&](const Task& t) { return t.link >= 0; };
  auto schedule = [&](std::int32_t id, SimTime at) {
    q.push({at, seq++, id, version[static_cast<std::size_t>(id)]});
  };
  auto compute_rate = [&](std::size_t dev) {
    const Device& d = devices_[dev];
    double slow = 0;
    if (dev_nv_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_nvlink);
    if (dev_net_flows[dev] > 0) slow = std::max(slow, d.overlap_slowdown_network);
    return 1.0 / (1.0 + slow);
  };
  auto finish_at = [&](std::size_t id) {
    if (remaining[id] <= 0) return now;
    return now + static_cast<SimTime>(std::ceil(remaining[id] / rate[id] - 1e-9));
  };
  auto advance = [&](std::size_t id) {
    remaining[id] -= static_cast<double>(now - last_update[id]) * rate[id];
    if (remaining[id] < 0) remaining[id] = 0;
    last_update[id] = now;
  };
  auto refresh_compute = [&](std::size_t dev) {
    const std::int32_t c = running_compute[dev];
    if (c < 0) return;
    const auto id = static_cast<std::size_t>(c);
    const double nr = compute_rate(dev);
    if (nr == rate[id]) return;
    advance(id);
    rate[id] = nr;
    ++version[id];
    schedule(c, finish_at(id));
  };
  auto refresh_link = [&](std::size_t l) {
    const auto& flows = link_flows[l];
    if (flows.empty()) return;
    const double share = links_[l].capacity_GBps / static_cast<double>(flows.size());
    for (std::int32_t f : flows) {
      const auto id = static_cast<std::size_t>(f);
      const double nr = std::min(share, tasks_[id].rate_cap_GBps);  // GB/s == bytes/ns
      if (nr == rate[id]) continue;
      advance(id);
      rate[id] = nr;
      ++version[id];
      schedule(f, finish_at(id));
    }
  };
  auto flow_count = [&](const Task& t, int delta) {
    const auto dev = static_cast<std::size_t>(t.device);
    (t.network ? dev_net_flows[dev] : dev_nv_flows[dev]) += delta;
    refresh_compute(dev);
  };

  auto start_task = [&](std::int32_t tid) {
    const auto id = static_cast<std::size_t>(tid);
    const Task& t = tasks_[id];
    r.start[id] = now;
    last_update[id] = now;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += t.transient_bytes;
    r.peak_dynamic_bytes[dev] = std::max(r.peak_dynamic_bytes[dev], dyn_bytes[dev]);
    if (is_comm(t) && t.bytes > 0) {
      // A flow: its latency is charged as the bytes the flow would move at its own cap in that
      // time, so a lone flow ends at latency + bytes/cap with one event instead of two.
      in_flow[id] = 1;
      remaining[id] = t.bytes + t.work_ns * t.rate_cap_GBps;
      rate[id] = 0;
      link_flows[static_cast<std::size_t>(t.link)].push_back(tid);
      flow_count(t, +1);
      refresh_link(static_cast<std::size_t>(t.link));
    } else if (is_comm(t)) {
      remaining[id] = t.work_ns;
      rate[id] = 1.0;
      in_flow[id] = 0;
      schedule(tid, finish_at(id));
    } else {
      remaining[id] = t.work_ns;
      if (t.type != TaskType::kJoin) {
        running_compute[dev] = tid;
        rate[id] = compute_rate(dev);
      } else {
        rate[id] = 1.0;
      }
      schedule(tid, finish_at(id));
    }
  };

  for (std::size_t i = 0; i < n; ++i) {
    if (indeg[i] == 0) start_task(static_cast<std::int32_t>(i));
  }

  while (!q.empty()) {
    Event e = q.top();
    q.pop();
    const auto id = static_cast<std::size_t>(e.task);
    if (e.version != version[id] || r.end[id] >= 0) continue;
    now = e.time;
    ++r.events;
    const Task& t = tasks_[id];
    // Task finished.
    r.end[id] = now;
    ++finished;
    const auto dev = static_cast<std::size_t>(t.device);
    dyn_bytes[dev] += t.alloc_bytes - t.free_bytes - t.transient_bytes;
    r.peak_dynamic_bytes[dev] = std::max(r.peak_dynamic_bytes[dev], dyn_bytes[dev]);
    if (is_comm(t) && in_flow[id]) {
      auto& flows = link_flows[static_cast<std::size_t>(t.link)];
      flows.erase(std::find(flows.begin(), flows.end(), e.task));
      flow_count(t, -1);
      refresh_link(static_cast<std::size_t>(t.link));
    } else if (running_compute[dev] == e.task) {
      running_compute[dev] = -1;
    }
    auto [ei, ee] = boost::out_edges(id, g);
    for (; ei != ee; ++ei) {
      const auto v = boost::target(*ei, g);
      if (--indeg[v] == 0) {
        r.gating_pred[v] = e.task;
        start_task(static_cast<std::int32_t>(v));
      }
    }
    r.makespan = std::max(r.makespan, now);
  }

  if (finished != n) {
    // Some tasks never became ready: find a cycle among them with Boost.Graph's DFS.
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
  return r;
}

}  // namespace shardcast
