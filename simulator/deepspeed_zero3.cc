#include "simulator/deepspeed_zero3.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace shardcast {

namespace {

/// One module's use of one parameter tensor in the traced order.
struct Use {
  int param = 0;
  double elems = 0;
  bool backward = false;  ///< in the backward pass (its recomputed forward included)
};

/// Forward over all layers, then each layer from the last down: its recomputed forward (with
/// full recompute) and its modules in reverse order. Layer l's tensors are parameters
/// first[l] .. first[l] + its order's size.
std::vector<Use> TraceOf(const std::vector<std::vector<double>>& orders, bool recompute) {
  const int layers = static_cast<int>(orders.size());
  std::vector<int> first(orders.size() + 1, 0);
  for (int l = 0; l < layers; ++l) first[l + 1] = first[l] + static_cast<int>(orders[l].size());
  std::vector<Use> t;
  t.reserve(static_cast<std::size_t>(first.back() * (recompute ? 3 : 2)));
  auto pass = [&](int l, bool backward, bool reverse) {
    const auto& o = orders[static_cast<std::size_t>(l)];
    const int n = static_cast<int>(o.size());
    for (int k = 0; k < n; ++k) {
      const int j = reverse ? n - 1 - k : k;
      t.push_back({first[l] + j, o[static_cast<std::size_t>(j)], backward});
    }
  };
  for (int l = 0; l < layers; ++l) pass(l, false, false);
  for (int l = layers - 1; l >= 0; --l) {
    if (recompute) pass(l, true, false);
    pass(l, true, true);
  }
  return t;
}

/// The coordinator's state over the trace (see the header for the rules).
class Coordinator {
 public:
  Coordinator(std::vector<Use> trace, int params, double bucket, double max_live, double reuse)
      : trace_(std::move(trace)), first_backward_(params), bucket_(bucket), max_live_(max_live), reuse_(reuse),
        available_(static_cast<std::size_t>(params), false), fresh_(static_cast<std::size_t>(params), false),
        issued_(static_cast<std::size_t>(params), -1), popped_use_(static_cast<std::size_t>(params), -1) {
    // The reuse-distance scan in O(1): each use's next use of the same tensor, and the elements
    // of the trace before each position.
    const std::size_t n = trace_.size();
    next_use_.assign(n, -1);
    before_.assign(n + 1, 0);
    std::vector<int> last(static_cast<std::size_t>(params), -1);
    for (std::size_t t = n; t-- > 0;) {
      const auto p = static_cast<std::size_t>(trace_[t].param);
      next_use_[t] = last[p];
      last[p] = static_cast<int>(t);
    }
    for (std::size_t t = 0; t < n; ++t) before_[t + 1] = before_[t] + trace_[t].elems;
  }

  /// What a use found: the lead (modules) of the gather it waited for, or -1 when the tensor was
  /// still gathered; and whether that gather was a counted on-demand fetch.
  struct Found {
    int lead = -1;
    bool on_demand = false;
  };

  /// fetch_sub_module then release_sub_module of the module at trace position s.
  Found Step(int s, DeepSpeedZero3Plan* plan) {
    Found f;
    const Use& u = trace_[static_cast<std::size_t>(s)];
    const auto p = static_cast<std::size_t>(u.param);
    if (!available_[p]) {
      Gather(u, s, plan);
      // The forward's first module starts cold whatever the knobs, and so may the backward's
      // first (the turn): single fetches, not a share of every layer. The others wait when the
      // prefetch did not reach them.
      f.on_demand = s != 0 && s != first_backward_;
      if (f.on_demand) plan->on_demand_elems[u.backward] += u.elems;
    }
    f.lead = fresh_[p] ? s - issued_[p] : -1;
    fresh_[p] = false;
    if (next_ <= s) {  // this use was not popped by an earlier prefetch: pop it now
      next_ = s + 1;
      popped_use_[p] = std::max(popped_use_[p], s);
    }
    Prefetch(s, plan);
    plan->peak_live_elems = std::max(plan->peak_live_elems, live_);
    if (!Kept(u.param, s)) {
      available_[p] = false;
      live_ -= u.elems;
    }
    return f;
  }

 private:
  /// Gathers the tensor of `u` at step s, counted in the pass of `u` (a prefetch may reach
  /// across the turn into the backward).
  void Gather(const Use& u, int s, DeepSpeedZero3Plan* plan) {
    const auto p = static_cast<std::size_t>(u.param);
    available_[p] = fresh_[p] = true;
    issued_[p] = s;
    live_ += u.elems;
    plan->gathered_elems[u.backward] += u.elems;
  }

  /// Pops the traced order after s, gathering what is not available, until it has taken
  /// min(max_live - gathered, bucket) elements.
  void Prefetch(int s, DeepSpeedZero3Plan* plan) {
    const double budget = std::min(max_live_ - live_, bucket_);
    double taken = 0;
    while (next_ < static_cast<int>(trace_.size()) && taken < budget) {
      const Use& e = trace_[static_cast<std::size_t>(next_)];
      const auto p = static_cast<std::size_t>(e.param);
      popped_use_[p] = std::max(popped_use_[p], next_);
      if (!available_[p]) {
        Gather(e, s, plan);
        taken += e.elems;
      }
      ++next_;
    }
  }

  /// Whether release_sub_module keeps tensor `param` after its use at s: a later use was popped
  /// while it was available, or a module within the reuse distance uses it.
  /// DeepSpeed's scan walks the modules after s while the elements passed stay under the
  /// distance: it finds the next use t when the modules strictly between hold less than it.
  bool Kept(int param, int s) const {
    if (popped_use_[static_cast<std::size_t>(param)] > s + 1) return true;
    const int t = next_use_[static_cast<std::size_t>(s)];
    return t >= 0 && before_[static_cast<std::size_t>(t)] - before_[static_cast<std::size_t>(s) + 1] < reuse_;
  }

  std::vector<Use> trace_;
  int first_backward_;  ///< the backward's first step (the forward uses each tensor once)
  double bucket_, max_live_, reuse_;
  std::vector<bool> available_, fresh_;  ///< gathered (or in flight); gathered and not yet used
  std::vector<int> issued_, popped_use_;  ///< step of the last gather; last popped use
  std::vector<int> next_use_;             ///< per trace position: the tensor's next use, or -1
  std::vector<double> before_;            ///< elements of the trace before each position
  int next_ = 0;                          ///< the queue's front (trace position)
  double live_ = 0;                       ///< DeepSpeed's __n_available_params
};

}  // namespace

DeepSpeedZero3Plan PlanDeepSpeedZero3(const std::vector<double>& layer_order, int layers, bool recompute,
                                      double prefetch_bucket_elems, double max_live_elems,
                                      double max_reuse_distance_elems) {
  return PlanDeepSpeedZero3(std::vector<std::vector<double>>(static_cast<std::size_t>(std::max(0, layers)), layer_order),
                            recompute, prefetch_bucket_elems, max_live_elems, max_reuse_distance_elems);
}

DeepSpeedZero3Plan PlanDeepSpeedZero3(const std::vector<std::vector<double>>& layer_orders, bool recompute,
                                      double prefetch_bucket_elems, double max_live_elems,
                                      double max_reuse_distance_elems) {
  for (double v : {prefetch_bucket_elems, max_live_elems, max_reuse_distance_elems}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      throw std::invalid_argument("PlanDeepSpeedZero3: a knob is " + std::to_string(v) + ", expected a finite number >= 0");
    }
  }
  DeepSpeedZero3Plan plan;
  const int layers = static_cast<int>(layer_orders.size());
  int params = 0;
  double all_elems = 0;
  for (const auto& o : layer_orders) {
    for (double e : o) {
      if (!(e > 0) || !std::isfinite(e)) {
        throw std::invalid_argument("PlanDeepSpeedZero3: a tensor has " + std::to_string(e) + " elements, expected > 0");
      }
      all_elems += e;
    }
    params += static_cast<int>(o.size());
  }
  if (params == 0) return plan;
  // Per layer: the mean over layers (dense and MoE layers differ), and the modules of a mean layer.
  plan.layer_elems = all_elems / layers;
  const double n = static_cast<double>(params) / layers;
  std::vector<Use> trace = TraceOf(layer_orders, recompute);
  const int steps = static_cast<int>(trace.size());
  Coordinator co(trace, params, prefetch_bucket_elems, max_live_elems, max_reuse_distance_elems);
  double lead_sum[2] = {0, 0}, lead_count[2] = {0, 0}, kept_elems = 0;
  std::vector<bool> seen_backward(static_cast<std::size_t>(params), false);
  const int first_layer_params = static_cast<int>(layer_orders.front().size());
  for (int s = 0; s < steps; ++s) {
    const Use& u = trace[static_cast<std::size_t>(s)];
    const auto [lead, on_demand] = co.Step(s, &plan);
    if (u.backward && !seen_backward[static_cast<std::size_t>(u.param)]) {
      seen_backward[static_cast<std::size_t>(u.param)] = true;
      if (lead < 0) kept_elems += u.elems;
    }
    // The lead of what was prefetched: not kept tensors (-1), not on-demand gathers (the
    // simulation times those apart), not the first layer's forward (it starts cold).
    if (lead < 0 || on_demand || (!u.backward && u.param < first_layer_params)) {
      continue;
    }
    lead_sum[u.backward] += lead * u.elems;
    lead_count[u.backward] += u.elems;
  }
  plan.forward_lead_layers = lead_count[0] > 0 ? lead_sum[0] / lead_count[0] / n : 0;
  // A layer's backward is 2n modules of the trace with full recompute (its recomputed forward).
  plan.backward_lead_layers = lead_count[1] > 0 ? lead_sum[1] / lead_count[1] / (recompute ? 2 * n : n) : 0;
  plan.kept_layers = static_cast<int>(std::floor(kept_elems / plan.layer_elems + 1e-9));
  return plan;
}

}  // namespace shardcast
