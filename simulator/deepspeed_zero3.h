#pragma once
/// \file deepspeed_zero3.h
/// DeepSpeed stage 3's parameter coordinator (Zero3Impl::kDeepSpeed), replayed over one GPU's
/// module trace of a micro-batch: which parameters each module's fetch gathers, how far ahead of
/// their use, and how many gathered elements are live at once. Read off DeepSpeed v0.16
/// (deepspeed/runtime/zero/partitioned_param_coordinator.py at commit 38327e0, February 2025):
///  - fetch_sub_module(m): gathers m's parameters that are not available, then pops the traced
///    order after m and prefetches, in one coalesced all-gather, the parameters found not
///    available until it has taken min(stage3_max_live_parameters - gathered,
///    stage3_prefetch_bucket_size) elements (the last one may overshoot; an available parameter
///    is popped without counting);
///  - release_sub_module(m): frees m's parameters unless a later use of them was popped while
///    they were available, or a module within stage3_max_reuse_distance elements after m uses
///    them again;
///  - the gathered count rises when a gather is issued (in flight counts) and falls on release;
///    the trace restarts at every forward (reset_step in the forward's start hook), so its first
///    module is fetched on demand, and the queue runs on across the turn into the backward.
/// The trace: every layer's gathered tensors in forward order (LayerTensors' dense_order or
/// moe_order by the layer's kind, one module per tensor: Megatron's fused QKV and gate/up, where
/// a Hugging Face model has separate modules; tensors under the persistence threshold are never
/// gathered), then the backward from the last layer down, each layer's recomputed forward (with
/// full recompute) before its modules in reverse order. The embedding and output layer are not
/// in it.
#include <algorithm>
#include <cmath>
#include <vector>

namespace shardcast {

/// What the coordinator does over one micro-batch of one GPU (elements are parameter elements on
/// that GPU, i.e. after tensor parallelism).
struct DeepSpeedZero3Plan {
  /// The most gathered elements (in flight or available) at once.
  double peak_live_elems = 0;
  /// Mean lead of a prefetch before its use, in layers (the modules between the fetch that
  /// issued it and its use, over a layer's modules in that pass: n in the forward, 2n in a
  /// backward with full recompute, weighted by elements; on-demand gathers left out): in the
  /// forward (all layers but the first) and in the backward pass. 0 when nothing is prefetched.
  double forward_lead_layers = 0, backward_lead_layers = 0;
  /// The lead the simulation gives a layer's prefetched share in `pass` (0 forward, 1 backward):
  /// the mean rounded down, at least one layer (below a layer, module by module, a gather still
  /// overlaps the compute before it).
  int SimulatedLeadLayers(int pass) const {
    return std::max(1, static_cast<int>(std::floor(pass == 0 ? forward_lead_layers : backward_lead_layers)));
  }
  /// Elements whose backward (or recomputed forward) use finds them still gathered from the
  /// forward, as whole layers: the layers next to the turn from forward to backward that the
  /// reuse distance keeps (their backward gathers do not happen).
  int kept_layers = 0;
  /// Elements gathered per micro-batch, by pass ([0] forward, [1] backward with its recomputed
  /// forward), and of them those fetched on demand (not prefetched: the module waits for them),
  /// but for the forward's first module and the backward's first, single fetches at a pass's
  /// start rather than a share of every layer.
  double gathered_elems[2] = {0, 0}, on_demand_elems[2] = {0, 0};
  /// A layer's gathered elements (the mean over the trace's layers).
  double layer_elems = 0;
};

/// Replays the coordinator over `layers` layers whose gathered tensors, in forward order, are
/// `layer_order` (elements each), with the full-recompute trace when `recompute`, and DeepSpeed's
/// knobs in elements. Throws std::invalid_argument for a non-positive knob or tensor size.
DeepSpeedZero3Plan PlanDeepSpeedZero3(const std::vector<double>& layer_order, int layers, bool recompute,
                                      double prefetch_bucket_elems, double max_live_elems,
                                      double max_reuse_distance_elems);
/// The same over layers of their own tensors (`layer_orders[l]`: layer l's gathered tensors in
/// forward order; dense and MoE layers differ).
DeepSpeedZero3Plan PlanDeepSpeedZero3(const std::vector<std::vector<double>>& layer_orders, bool recompute,
                                      double prefetch_bucket_elems, double max_live_elems,
                                      double max_reuse_distance_elems);

}  // namespace shardcast
