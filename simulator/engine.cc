#include "simulator/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

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
  // Each device's period (SetDevicePeriods), 0 for devices without one; the runs of matching
  // tasks are found when the period checks ask (PeriodRun).
  std::int32_t devices = static_cast<std::int32_t>(devices_.size());
  for (const TaskNode& t : nodes_) devices = std::max(devices, t.device + 1);
  device_period_.assign(static_cast<std::size_t>(devices), 0);
  bool any = false;
  for (std::size_t d = 0; d < periods_.size() && d < device_period_.size(); ++d) {
    device_period_[d] = std::max(0, periods_[d]);
    any = any || periods_[d] > 0;
  }
  period_run_.assign(any ? n : 0, -1);
  anchor_ = any ? -2 : -1;
  csr_valid_ = true;
}

bool TaskGraph::MatchesNextPeriod(std::size_t u) const {
  const std::int32_t period = PeriodOf(static_cast<std::int32_t>(u));
  const std::size_t w = u + static_cast<std::size_t>(period);
  if (period <= 0 || w >= nodes_.size()) return false;
  const TaskNode &a = nodes_[u], &b = nodes_[w];
  const Hot &ha = hot_[u], &hb = hot_[w];
  const std::int32_t succ = ha.succ_end - ha.succ_begin;
  if (a.device != b.device || a.cost != b.cost || a.type != b.type || ha.indeg != hb.indeg ||
      succ != hb.succ_end - hb.succ_begin) {
    return false;
  }
  const std::int32_t* const ta = targets_.data() + ha.succ_begin;
  const std::int32_t* const tb = targets_.data() + hb.succ_begin;
  for (std::int32_t k = 0; k < succ; ++k) {
    // Successor k of u, one period on (its own device's period), is successor k of w.
    const std::int32_t pk = PeriodOf(ta[k]);
    if (pk <= 0 || static_cast<std::int64_t>(ta[k]) + pk != tb[k]) return false;
  }
  return true;
}

std::int32_t TaskGraph::PeriodRun(std::int32_t u) const {
  if (period_run_.empty()) return 0;  // no periods
  std::int32_t* const run = period_run_.data();
  if (run[u] >= 0) return run[u];
  // Follow u's chain of periods until a task that does not match its next, or a known one.
  period_chain_.clear();
  std::int32_t v = u;
  while (run[v] < 0 && MatchesNextPeriod(static_cast<std::size_t>(v))) {
    period_chain_.push_back(v);
    v += PeriodOf(v);
  }
  if (run[v] < 0) run[v] = 0;
  std::int32_t r = run[v];
  for (auto it = period_chain_.rbegin(); it != period_chain_.rend(); ++it) run[*it] = ++r;
  return run[u];
}

std::int32_t TaskGraph::PeriodAnchor() const {
  if (anchor_ == -2) {
    anchor_ = -1;
    for (std::size_t u = 0; u < nodes_.size(); ++u) {
      if (MatchesNextPeriod(u)) {
        anchor_ = static_cast<std::int32_t>(u);
        break;
      }
    }
  }
  return anchor_;
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
  // The rate has not changed since the pending event was set: that event is the exact finish
  // (the loop's full-speed fast path; a rate change without a new event clears it).
  std::uint8_t exact = 0;
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

/// The event loop's scalars, copied into and out of the period checks (so that the loop keeps
/// them in registers: a local whose address escapes lives in memory).
struct LoopScalars {
  SimTime now;
  std::size_t head, tail, finished, nend;  // pending events: [head, tail)
  std::uint64_t pushes;
};

/// What the period checks see of the loop's arrays and of the graph.
struct LoopArrays {
  Event* pending;
  Running* run;
  TaskRun* task;
  DeviceRun* dev;
  std::size_t ndev;
  std::vector<std::vector<std::int32_t>>* link_flows;
  SimTime* start;
  SimTime* end;
  std::int32_t* gating;
  const std::int32_t* end_log;     // tasks in the order they ended
  const TaskGraph::Hot* hot;
  const std::int32_t* targets;     // successors (Hot::succ_begin..succ_end)
  const TaskGraph* graph;          // periods: PeriodOf, PeriodRun
  std::int32_t* mark;              // [task] scratch, all 0 between checks
};

/// The period check of TaskGraph::Run: the engine's state once per period of the anchor task's
/// device, compared with the state one period earlier shifted by the period; when they are
/// equal, the periods that follow are copied instead of simulated (see engine.h).
class PeriodSkipper {
 public:
  /// Forgets the last snapshot (a new run).
  void Reset() {
    prev_.valid = false;
    copied_ = 0;
  }
  /// At the loop's top, after the anchor task started: snapshot, compare, and copy as many
  /// periods as the symmetry allows. Returns the anchor task to check at next (-1: none).
  std::int32_t Checkpoint(std::int32_t anchor, LoopScalars& s, const LoopArrays& a);
  std::uint64_t copied_tasks() const { return copied_; }

 private:
  using Waiting = std::pair<std::int32_t, std::int32_t>;  // task, predecessors not yet ended
  struct Ev {
    std::int32_t task;
    SimTime dt, dlast, dstart;  // event time, last rate change and start, relative to now
    double remaining, rate;
    std::uint8_t in_flow;
  };
  struct Snap {
    bool valid = false;
    SimTime now = 0;
    SimTime latest = 0;  // now, or the latest event queued (superseded ones too), if later
    std::uint64_t pushes = 0;
    std::size_t nend = 0;
    std::vector<Ev> ev;  // live events, in queue order
    std::vector<Waiting> waiting;
    std::vector<double> dyn;
    std::vector<std::int32_t> compute, flows;  // running compute per device; per link: count, tasks
    std::vector<int> nv, net;
  };
  static std::int64_t Shift(const LoopArrays& a, std::int32_t u, std::int64_t periods) {
    return u < 0 ? u : u + periods * a.graph->PeriodOf(u);
  }
  /// The state at the loop's top; its waiting tasks from the tasks that ended since `prev` (or
  /// since the start), unless the caller knows them.
  void Take(Snap& sn, const LoopScalars& s, const LoopArrays& a, const Snap& prev, const std::vector<Waiting>* known);
  void TakeWaiting(Snap& sn, const LoopArrays& a, const Snap& prev) const;
  /// Also marks the waiting tasks that stay as they are (`fixed_`, mark 1).
  bool OnePeriodOn(const Snap& prev, const Snap& cur, const LoopArrays& a);
  std::int64_t PeriodsToCopy(const Snap& prev, const Snap& cur, const LoopArrays& a) const;
  void Copy(std::int64_t periods, const Snap& prev, const Snap& cur, LoopScalars& s, const LoopArrays& a);

  Snap prev_, cur_;
  std::uint64_t copied_ = 0;
  std::vector<std::int32_t> fixed_;    // waiting tasks the periods leave alone
  std::vector<std::int32_t> started_;  // the tasks started in the copied period
  std::vector<Waiting> waiting_;       // the waiting tasks after a copy
  std::vector<std::pair<std::int32_t, std::int32_t>> moved_;  // (task, slot)
};

void PeriodSkipper::TakeWaiting(Snap& sn, const LoopArrays& a, const Snap& prev) const {
  // A task waits when some but not all of its predecessors ended: it waited at `prev` or has a
  // predecessor that ended since (mark 1 for the tasks seen).
  sn.waiting.clear();
  auto consider = [&](std::int32_t v) {
    const std::int32_t left = a.task[v].indeg;
    if (a.mark[v] != 0 || left <= 0 || left == a.hot[v].indeg) return;
    a.mark[v] = 1;
    sn.waiting.emplace_back(v, left);
  };
  if (prev.valid) {
    for (const Waiting& w : prev.waiting) consider(w.first);
  }
  for (std::size_t i = prev.valid ? prev.nend : 0; i < sn.nend; ++i) {
    const TaskGraph::Hot& h = a.hot[a.end_log[i]];
    for (std::int32_t k = h.succ_begin; k < h.succ_end; ++k) consider(a.targets[k]);
  }
  for (const Waiting& w : sn.waiting) a.mark[w.first] = 0;
}

void PeriodSkipper::Take(Snap& sn, const LoopScalars& s, const LoopArrays& a, const Snap& prev,
                         const std::vector<Waiting>* known) {
  sn.valid = true;
  sn.now = s.now;
  sn.latest = s.now;
  sn.pushes = s.pushes;
  sn.nend = s.nend;
  sn.ev.clear();
  for (std::size_t i = s.head; i < s.tail; ++i) {
    const Event& e = a.pending[i];
    sn.latest = std::max(sn.latest, e.time);
    const std::int32_t slot = a.task[e.task].slot;
    if (slot < 0 || a.run[slot].last_seq != e.seq) continue;  // superseded
    const Running& r = a.run[slot];
    sn.ev.push_back({e.task, e.time - s.now, r.last_update - s.now, a.start[e.task] - s.now, r.remaining, r.rate,
                     r.in_flow});
  }
  if (known != nullptr) {
    sn.waiting = *known;
  } else {
    TakeWaiting(sn, a, prev);
  }
  sn.dyn.resize(a.ndev);
  sn.compute.resize(a.ndev);
  sn.nv.resize(a.ndev);
  sn.net.resize(a.ndev);
  for (std::size_t d = 0; d < a.ndev; ++d) {
    sn.dyn[d] = a.dev[d].dyn_bytes;
    sn.compute[d] = a.dev[d].running_compute;
    sn.nv[d] = a.dev[d].nv_flows;
    sn.net[d] = a.dev[d].net_flows;
  }
  sn.flows.clear();
  for (const auto& f : *a.link_flows) {
    sn.flows.push_back(static_cast<std::int32_t>(f.size()));
    sn.flows.insert(sn.flows.end(), f.begin(), f.end());
  }
}

// Whether `cur` is `prev` one period on: every task one period later, every relative time and
// every amount the same.
bool PeriodSkipper::OnePeriodOn(const Snap& prev, const Snap& cur, const LoopArrays& a) {
  if (prev.ev.size() != cur.ev.size() || prev.waiting.size() != cur.waiting.size() ||
      prev.flows.size() != cur.flows.size()) {
    return false;
  }
  for (std::size_t i = 0; i < prev.ev.size(); ++i) {
    const Ev &p = prev.ev[i], &c = cur.ev[i];
    if (a.graph->PeriodOf(p.task) <= 0 || Shift(a, p.task, 1) != c.task || p.dt != c.dt || p.dlast != c.dlast ||
        p.dstart != c.dstart || p.remaining != c.remaining || p.rate != c.rate || p.in_flow != c.in_flow) {
      return false;
    }
  }
  for (std::size_t d = 0; d < a.ndev; ++d) {
    if (prev.dyn[d] != cur.dyn[d] || prev.nv[d] != cur.nv[d] || prev.net[d] != cur.net[d] ||
        Shift(a, prev.compute[d], 1) != cur.compute[d]) {
      return false;
    }
  }
  for (std::size_t i = 0; i < prev.flows.size();) {
    const std::int32_t count = prev.flows[i];
    if (cur.flows[i] != count) return false;
    for (std::int32_t k = 1; k <= count; ++k) {
      if (Shift(a, prev.flows[i + static_cast<std::size_t>(k)], 1) != cur.flows[i + static_cast<std::size_t>(k)]) return false;
    }
    i += static_cast<std::size_t>(count) + 1;
  }
  // Waiting tasks, matched one to one: one period on, or the same task waiting as it was (a task
  // outside the periodic runs, say one whose other predecessor comes after the steady state)
  // where no task of the runs becomes it a period on (so that no copied period would touch it).
  // mark = predecessors left + 1 for `cur`'s, -1 once matched.
  for (const Waiting& w : cur.waiting) a.mark[w.first] = w.second + 1;
  fixed_.clear();
  bool ok = true;
  for (const Waiting& w : prev.waiting) {
    const std::int32_t u = w.first, p = a.graph->PeriodOf(u);
    const bool no_image = p <= 0 || u < p || a.graph->PeriodRun(u - p) == 0;
    if (no_image && a.mark[u] == w.second + 1) {
      fixed_.push_back(u);
      a.mark[u] = -1;
    } else if (p > 0 && a.graph->PeriodRun(u) >= 1 && a.mark[u + p] == w.second + 1) {  // u + p < n
      a.mark[u + p] = -1;
    } else {
      ok = false;
      break;
    }
  }
  for (const Waiting& w : cur.waiting) a.mark[w.first] = 0;
  if (!ok) return false;
  for (std::int32_t u : fixed_) a.mark[u] = 1;  // until the check ends
  return true;
}

// How many periods after `cur` repeat the one from `prev` to `cur`: as many as the symmetry
// holds for every task of that period (ended, started, waiting or running at either end), and
// no event would pass the engine's time range. Tasks running across the whole period: none.
// The tasks started in the period are those that ended in it, but for those running at `prev`,
// and those running at `cur`.
std::int64_t PeriodSkipper::PeriodsToCopy(const Snap& prev, const Snap& cur, const LoopArrays& a) const {
  std::int64_t m = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = prev.nend; i < cur.nend; ++i) m = std::min<std::int64_t>(m, a.graph->PeriodRun(a.end_log[i]));
  for (const Ev& e : cur.ev) m = std::min<std::int64_t>(m, a.graph->PeriodRun(e.task));
  for (const Ev& e : prev.ev) {
    if (a.task[e.task].slot >= 0) return 0;  // still running a period later
    m = std::min<std::int64_t>(m, a.graph->PeriodRun(e.task) - 1);
  }
  for (const Waiting& w : prev.waiting) {
    if (a.mark[w.first] == 0) m = std::min<std::int64_t>(m, a.graph->PeriodRun(w.first) - 1);  // not fixed
  }
  // Every event queued in the period was taken by `cur` or is still queued.
  const SimTime delta = cur.now - prev.now;
  if (delta > 0) m = std::min<std::int64_t>(m, (kMaxSimTime - cur.latest) / delta);
  return std::max<std::int64_t>(m, 0);
}

// Fills the timeline of `periods` periods after `cur` from the period before it, and moves the
// state that many periods on.
void PeriodSkipper::Copy(std::int64_t periods, const Snap& prev, const Snap& cur, LoopScalars& s,
                         const LoopArrays& a) {
  const SimTime delta = cur.now - prev.now;
  started_.clear();
  for (const Ev& e : prev.ev) a.mark[e.task] = 2;
  for (std::size_t i = prev.nend; i < cur.nend; ++i) {
    if (a.mark[a.end_log[i]] != 2) started_.push_back(a.end_log[i]);
  }
  for (const Ev& e : prev.ev) a.mark[e.task] = 0;
  for (const Ev& e : cur.ev) started_.push_back(e.task);
  for (std::size_t i = prev.nend; i < cur.nend; ++i) {
    const std::int32_t u = a.end_log[i];
    const std::int64_t p = a.graph->PeriodOf(u);
    for (std::int64_t j = 1; j <= periods; ++j) a.end[u + j * p] = a.end[u] + j * delta;
  }
  for (const std::int32_t u : started_) {
    const std::int64_t p = a.graph->PeriodOf(u);
    const std::int32_t g = a.gating[u];
    const std::int64_t gp = g < 0 ? 0 : a.graph->PeriodOf(g);
    for (std::int64_t j = 1; j <= periods; ++j) {
      a.start[u + j * p] = a.start[u] + j * delta;
      a.gating[u + j * p] = static_cast<std::int32_t>(g + j * gp);
    }
  }
  const SimTime dt = periods * delta;
  const std::uint64_t tasks = static_cast<std::uint64_t>(periods) * (cur.nend - prev.nend);
  copied_ += tasks;
  s.finished += tasks;
  s.pushes += static_cast<std::uint64_t>(periods) * (cur.pushes - prev.pushes);
  s.now += dt;
  // Live events and their tasks' running state, `periods` periods on; superseded events go.
  std::size_t kept = s.head;
  moved_.clear();
  for (std::size_t i = s.head; i < s.tail; ++i) {
    const Event e = a.pending[i];
    const std::int32_t slot = a.task[e.task].slot;
    if (slot < 0 || a.run[slot].last_seq != e.seq) continue;
    a.pending[kept++] = {e.time + dt, e.seq, static_cast<std::int32_t>(Shift(a, e.task, periods))};
    a.run[slot].last_update += dt;
    a.run[slot].sched_at += dt;
    moved_.emplace_back(e.task, slot);
  }
  s.tail = kept;
  for (const auto& [u, slot] : moved_) a.task[u].slot = -1;
  for (const auto& [u, slot] : moved_) {
    TaskRun& t = a.task[Shift(a, u, periods)];
    t.slot = slot;
    t.indeg = 0;
  }
  // Waiting tasks `periods` periods on (the fixed ones, mark 1, stay).
  waiting_.clear();
  for (const Waiting& w : cur.waiting) {
    waiting_.emplace_back(a.mark[w.first] == 1 ? w.first : static_cast<std::int32_t>(Shift(a, w.first, periods)), w.second);
  }
  for (const Waiting& w : waiting_) a.task[w.first].indeg = w.second;
  for (std::size_t d = 0; d < a.ndev; ++d) {
    a.dev[d].running_compute = static_cast<std::int32_t>(Shift(a, a.dev[d].running_compute, periods));
  }
  for (auto& f : *a.link_flows) {
    for (auto& u : f) u = static_cast<std::int32_t>(Shift(a, u, periods));
  }
}

std::int32_t PeriodSkipper::Checkpoint(std::int32_t anchor, LoopScalars& s, const LoopArrays& a) {
  // A check costs about as much as simulating the tasks of a period and can copy at most
  // period_run[anchor] periods here (and one fewer at the next check): checks start where they
  // could copy two periods or more, and stop where they no longer can.
  const std::int32_t run = a.graph->PeriodRun(anchor);
  if (run < (prev_.valid ? 2 : 3)) return -1;
  Take(cur_, s, a, prev_, nullptr);
  std::int64_t periods = 0;
  if (prev_.valid && OnePeriodOn(prev_, cur_, a)) {
    periods = PeriodsToCopy(prev_, cur_, a);
    if (periods > 0) {
      Copy(periods, prev_, cur_, s, a);
      // The state `periods` periods on: the reference for the next check.
      Take(cur_, s, a, prev_, &waiting_);
    }
    for (std::int32_t u : fixed_) a.mark[u] = 0;
  }
  std::swap(prev_, cur_);
  // The next check: the anchor one period after the state reached.
  if (a.graph->PeriodRun(anchor) < periods + 1) return -1;
  return static_cast<std::int32_t>(Shift(a, anchor, periods + 1));
}

/// Moves the pending events [head, tail) of `events` to its middle, doubling its size first when
/// they fill more than a quarter of it; returns their new range.
[[gnu::noinline]] std::pair<std::size_t, std::size_t> Recentre(std::vector<Event>& events, std::size_t head,
                                                              std::size_t tail) {
  const std::size_t len = tail - head;
  if (4 * len >= events.size()) {
    std::vector<Event> bigger(2 * events.size());
    std::copy(events.begin() + static_cast<std::ptrdiff_t>(head), events.begin() + static_cast<std::ptrdiff_t>(tail),
              bigger.begin() + static_cast<std::ptrdiff_t>((bigger.size() - len) / 2));
    events.swap(bigger);
  } else {
    std::memmove(events.data() + (events.size() - len) / 2, events.data() + head, len * sizeof(Event));
  }
  const std::size_t h = (events.size() - len) / 2;
  return {h, h + len};
}

/// Memory reused across runs (the planner and benchmarks run many graphs per thread).
struct Workspace {
  std::vector<TaskRun> task;
  std::vector<DeviceRun> dev;
  std::vector<Running> running;       // slot pool (its size is the pool's capacity)
  std::vector<std::int32_t> free_slots;
  std::vector<Event> pending;         // pending events in (time, seq) order, amid free room
  std::vector<std::vector<std::int32_t>> link_flows;
  std::vector<std::int32_t> end_log, mark;  // [n] each (LoopArrays)
  PeriodSkipper periods;
};

}  // namespace

EngineResult TaskGraph::Run(bool skip_periods) const {
  EngineResult r;
  Run(&r, skip_periods);
  return r;
}

// The loop works on a few raw pointers hoisted out of the vectors, with per-task and per-device
// state grouped in one record each: the per-event work is a few dozen instructions, and every
// extra live pointer is a register spilled to the stack.
void TaskGraph::Run(EngineResult* out, bool skip_periods) const {
  const std::size_t n = nodes_.size();
  const std::size_t nd = devices_.size();
  BuildCsr();
  thread_local Workspace ws;
  ws.task.resize(n);
  {
    TaskRun* const t = ws.task.data();
    const Hot* const h = hot_.data();
    for (std::size_t i = 0; i < n; ++i) t[i].indeg = h[i].indeg;
  }
  ws.dev.assign(nd, DeviceRun{});
  for (std::size_t d = 0; d < nd; ++d) {
    ws.dev[d].slow_nvlink = devices_[d].overlap_slowdown_nvlink;
    ws.dev[d].slow_network = devices_[d].overlap_slowdown_network;
  }
  if (ws.running.size() < 64) ws.running.resize(64);
  ws.free_slots.resize(ws.running.size());
  if (ws.pending.size() < 256) ws.pending.resize(256);
  ws.link_flows.resize(links_.size());
  for (auto& f : ws.link_flows) f.clear();
  auto& link_flows = ws.link_flows;
  ws.end_log.resize(n);
  ws.mark.resize(n);  // all 0: every check clears what it marks
  ws.periods.Reset();

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
  std::size_t pending_size = ws.pending.size();
  std::size_t head = pending_size / 2, tail = head;

  std::uint32_t seq = 0;
  SimTime now = 0;
  double time_left = static_cast<double>(kMaxSimTime);  // kMaxSimTime - now
  std::size_t finished = 0;
  std::uint64_t pushes = 0;
  std::int32_t* const end_log = ws.end_log.data();
  std::size_t nend = 0;
  // The period check's next anchor task (PeriodSkipper), and whether it has just started.
  std::int32_t anchor = skip_periods ? PeriodAnchor() : -1;
  bool check_due = false;

  // The pending events, sorted, in [head, tail) of an array with room on both sides: the next
  // one is at the head. A step keeps a few per device pending (7 on average in the 1,024-GPU
  // GPT-3 benchmark, 14 at PP16), where a sorted insertion moves fewer bytes than a binary heap's
  // sift-down on every pop. Events are ordered by (time, seq), and a new event has the largest
  // seq yet: it goes after every pending event of its time, so the insertion compares times
  // only. It moves the events between its place and the nearer end: a send's end is usually
  // among the first, a compute pass's among the last.
  auto push = [&](const Event& ev) SHARDCAST_INLINE {
    if (head == tail || ev.time >= pending[(head + tail) / 2].time) {
      if (tail == pending_size) {
        std::tie(head, tail) = Recentre(ws.pending, head, tail);
        pending = ws.pending.data();
        pending_size = ws.pending.size();
      }
      std::size_t j = tail++;
      while (j > head && pending[j - 1].time > ev.time) {
        pending[j] = pending[j - 1];
        --j;
      }
      pending[j] = ev;
    } else {
      if (head == 0) {
        std::tie(head, tail) = Recentre(ws.pending, head, tail);
        pending = ws.pending.data();
        pending_size = ws.pending.size();
      }
      std::size_t j = --head;
      while (pending[j + 1].time <= ev.time) {  // stops before the middle event, later than ev
        pending[j] = pending[j + 1];
        ++j;
      }
      pending[j] = ev;
    }
  };
  auto pop = [&]() SHARDCAST_INLINE { return pending[head++]; };
  auto schedule = [&](std::int32_t id, Running& s, SimTime at) SHARDCAST_INLINE {
    s.sched_at = at;
    s.exact = 1;
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
  // event, which re-checks the remaining work when it fires (halves the queue traffic). A
  // finish past the engine's range is later than the pending event (which is in range), so it
  // is not an error here: only an event to be queued past the range is, and an estimate that
  // never comes to pass (a task slowed for a moment) cannot end the run.
  auto reschedule = [&](std::int32_t id, Running& s) SHARDCAST_INLINE {
    if (s.remaining > 0 && !((s.rate == 1.0 ? s.remaining : s.remaining / s.rate) - 1e-9 <= time_left)) return;
    const SimTime f = finish_at(id, s);
    if (f < s.sched_at) schedule(id, s, f);
  };
  auto compute_rate = [&](const DeviceRun& d) SHARDCAST_INLINE {
    if ((d.nv_flows | d.net_flows) == 0) return 1.0;  // 1 / (1 + 0), without the division
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
    s.exact = 0;
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
      s.exact = 0;
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
    check_due |= tid == anchor;
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
      auto& flows = link_flows[static_cast<std::size_t>(c.link)];
      flows.push_back(tid);
      flow_count(c, d, +1);
      if (flows.size() == 1) {
        // Alone on its link (most pipeline sends): refresh_link's one step for a stalled flow,
        // whose advance over no time changes nothing.
        const double nr = std::min(links_[static_cast<std::size_t>(c.link)].capacity_GBps, c.rate_cap_GBps);
        if (nr != 0) {
          s.rate = nr;
          schedule(tid, s, finish_at(tid, s));
        }
      } else {
        refresh_link(static_cast<std::size_t>(c.link));
      }
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

  while (head != tail) {
    if (check_due) {
      check_due = false;
      LoopScalars ls{now, head, tail, finished, nend, pushes};
      const LoopArrays la{pending, run, task, dev, nd, &link_flows, start, end, gating, end_log, hot, targets,
                          this, ws.mark.data()};
      anchor = ws.periods.Checkpoint(anchor, ls, la);
      if (ls.now != now) {
        now = ls.now;
        time_left = static_cast<double>(kMaxSimTime - now);
        r.makespan = now;
      }
      head = ls.head;
      tail = ls.tail;
      finished = ls.finished;
      pushes = ls.pushes;
      continue;
    }
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
    // A task at full speed whose rate has not changed since its event was set ends now: its
    // remaining work is at most 1e-9 + half an ulp of the work it had then (finish_at's ceiling
    // on x - 1e-9), under the 1e-6 below, so the check is skipped. Flows and slowed tasks check.
    if (!(s.exact && s.rate == 1.0) && s.rate > 0 && !h.join && (c.link >= 0 ? s.in_flow : 1)) {
      // The task may have slowed since this event was set: finish only when no work is left.
      advance(s);
      if (s.remaining > 1e-6) {
        schedule(id, s, finish_at(id, s));
        continue;
      }
    }
    // Task finished.
    end[id] = now;
    if (anchor >= 0) end_log[nend++] = id;  // read by the period checks only
    tr.slot = -1;
    ++finished;
    const bool was_flow = s.in_flow != 0;
    free_slots[nfree++] = slot;
    DeviceRun& d = dev[h.device];
    d.dyn_bytes += c.alloc_bytes - c.free_bytes - c.transient_bytes;
    d.peak_bytes = std::max(d.peak_bytes, d.dyn_bytes);
    if (c.link >= 0 && was_flow) {
      auto& flows = link_flows[static_cast<std::size_t>(c.link)];
      if (flows.size() == 1) {
        flows.clear();  // it was alone on its link
      } else {
        flows.erase(std::find(flows.begin(), flows.end(), id));
      }
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
  }
  // Events come in time order, and the last one (never superseded, never a re-check, which
  // queues another) ends the last task: its time is the step's end.
  r.makespan = now;
  r.events = finished;
  r.heap_pushes = pushes;
  r.copied_tasks = ws.periods.copied_tasks();
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
