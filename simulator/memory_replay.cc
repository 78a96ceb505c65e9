#include "simulator/memory_replay.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/hardware.h"
#include "simulator/allocator.h"
#include "simulator/schedule.h"

namespace shardcast {
namespace {

/// One layer's saved tensors in forward order, and which of them the backward rebuilds.
struct LayerTensorsSaved {
  std::vector<double> bytes;
  std::vector<bool> rebuilt;
  /// Kept as one block before the tensors (CostModel::layer_checkpoint_bytes); 0: none.
  double checkpoint = 0;
  /// Full recompute: every tensor is dropped after the forward and rebuilt before the backward.
  bool full = false;
};

LayerTensorsSaved SavedTensorsOf(const std::vector<Op>& ops, double checkpoint) {
  LayerTensorsSaved t;
  t.checkpoint = checkpoint;
  for (const Op& o : ops) {
    if (o.pass != Pass::kForward || o.saved_bytes <= 0) continue;
    // The unfused attention dropout keeps two tensors: its 1-byte mask and its 16-bit output,
    // which it also writes (bytes = read scores + write output + write mask; saved = mask + output).
    const double output = o.bytes - o.saved_bytes;
    if (o.name == "attn_dropout" && output > 0 && output < o.saved_bytes) {
      t.bytes.push_back(o.saved_bytes - output);
      t.rebuilt.push_back(o.rebuilt);
      t.bytes.push_back(output);
      t.rebuilt.push_back(o.rebuilt);
      continue;
    }
    // Activation offloading: the offloaded part leaves after the forward and comes back before
    // the backward, as a rebuilt tensor does; the rest stays.
    if (o.offloaded_bytes > 0 && !o.rebuilt) {
      t.bytes.push_back(o.offloaded_bytes);
      t.rebuilt.push_back(true);
      if (o.saved_bytes - o.offloaded_bytes > 0) {
        t.bytes.push_back(o.saved_bytes - o.offloaded_bytes);
        t.rebuilt.push_back(false);
      }
      continue;
    }
    t.bytes.push_back(o.saved_bytes);
    t.rebuilt.push_back(o.rebuilt);
  }
  return t;
}

}  // namespace

bool FlattensWeightsAtInit(const ParallelConfig& c) {
  return c.deepspeed_zero12() ||
         c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16;
}

LazyGradients LazyGradientsOf(const ParallelConfig& c) {
  LazyGradients g;
  if (c.optimizer_impl == OptimizerImpl::kDeepSpeedZero && c.zero_stage == 1) {
    g.bytes_per_param = 2;
  } else if (c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16) {
    g.bytes_per_param = 2;
    g.per_microbatch = true;
  }
  return g;
}

double Zero3GatheredLayerBytes(const CostModel& cm, double param_gather_bytes, int stage) {
  double layer_params_max = 0;
  for (const auto& cc : cm.chunks.at(static_cast<std::size_t>(stage))) {
    if (cc.layers <= 0) continue;
    const double own = cc.params_per_gpu - (cc.has_embedding ? cm.embedding_params_per_gpu : 0.0) -
                       (cc.has_output ? cm.output_params_per_gpu : 0.0);
    layer_params_max = std::max(layer_params_max, own / cc.layers);
  }
  return param_gather_bytes * layer_params_max;
}

double Zero3GatheredStaticBytes(const CostModel& cm, const ParallelConfig& c, int stage) {
  const double layer = Zero3GatheredLayerBytes(cm, c.param_gather_bytes, stage);
  // The embedding and the output layer gather in the model's 16-bit (or fp32) width, not the
  // linear layers' FP8 copies.
  const double unit_bytes = c.fp8_param_gather ? ModelDtypeBytes(c.precision) : c.param_gather_bytes;
  double first = 0, last = 0;
  for (const auto& cc : cm.chunks.at(static_cast<std::size_t>(stage))) {
    if (cc.has_embedding) first = unit_bytes * cm.embedding_params_per_gpu;
    // A tied output layer without a pipeline is the embedding's unit again.
    if (cc.has_output) {
      last = unit_bytes * (cm.output_params_per_gpu > 0 ? cm.output_params_per_gpu
                                                        : cc.has_embedding ? cm.embedding_params_per_gpu : 0.0);
    }
  }
  return std::max({2 * layer, layer + first, layer + last});
}

bool ReplaysZero3Gathers(const ParallelConfig& c) {
  return c.zero_stage >= 3 && c.zero3_impl == Zero3Impl::kPerLayer && !c.zero3_limit_all_gathers;
}

namespace {

/// Replays passes through the allocator; remembers what each (micro-batch, chunk) keeps.
class Replayer {
 public:
  /// One lazily allocated .grad tensor: its allocator handle and its elements.
  struct GradTensor {
    int handle;
    double elements;
  };

  Replayer(const CostModel& cm, const ParallelConfig& c, int stage, double capacity)
      : cm_(cm), c_(c), alloc_(capacity), chunks_(cm.chunks.at(static_cast<std::size_t>(stage))),
        lazy_(LazyGradientsOf(c)), gather_bytes_(ReplaysZero3Gathers(c) ? Zero3GatheredLayerBytes(cm, c.param_gather_bytes, stage) : 0) {
    dense_ = SavedTensorsOf(cm.layer_ops, cm.layer_checkpoint_bytes);
    moe_ = SavedTensorsOf(cm.moe_layer_ops, cm.moe_layer_checkpoint_bytes);
    bf16_ = cm.bf16_layer_ops.empty() ? dense_ : SavedTensorsOf(cm.bf16_layer_ops, cm.bf16_layer_checkpoint_bytes);
    dense_.full = moe_.full = bf16_.full = c.recompute == Recompute::kFull;
    plain_ = SavedTensorsOf(cm.plain_layer_ops, 0.0);  // partial recompute: the layers that do not rerun
    plain_moe_ = SavedTensorsOf(cm.plain_moe_layer_ops, 0.0);
    embedding_ = SavedTensorsOf(cm.embedding_ops, 0.0);
    output_ = SavedTensorsOf(cm.output_ops, 0.0);
  }

  CachingAllocatorModel& allocator() { return alloc_; }

  /// DeepSpeed's optimizer setup: the model's 16-bit weights, made tensor by tensor, copied
  /// into one flat buffer of `params` elements; the tensors freed stay in the allocator's cache.
  void FlattenWeights(double params) {
    std::vector<int> tensors;
    for (const ChunkCost& cc : chunks_) {
      if (cc.has_embedding) tensors.push_back(Alloc(2 * cm_.embedding_params_per_gpu));
      for (int l = 0; l < cc.layers; ++l) {
        const bool moe = l >= cc.layers - cc.moe_layers && !cm_.layer_tensors.moe_order.empty();
        for (double e : moe ? cm_.layer_tensors.moe_order : cm_.layer_tensors.dense_order) tensors.push_back(Alloc(2 * e));
      }
      if (cc.has_output && cm_.output_params_per_gpu > 0) tensors.push_back(Alloc(2 * cm_.output_params_per_gpu));
    }
    const bool to_cpu_first = c_.optimizer_impl == OptimizerImpl::kDeepSpeedZero;
    if (to_cpu_first) {
      for (int h : tensors) Free(h);
    }
    Alloc(2 * params);
    if (!to_cpu_first) {
      for (int h : tensors) Free(h);
    }
  }

  /// The step is over: the optimizer steps (DeepSpeedZero12Step), and lazily allocated gradients
  /// are released (DeepSpeed's zero_grad sets them to None after the optimizer step).
  void EndStep(double params) {
    if (c_.deepspeed_zero12()) DeepSpeedZero12Step(params / static_cast<double>(c_.shard_dp()));
    ReleaseGradients();
  }

  /// DeepSpeed ZeRO-1/2's optimizer step (stage_1_and_2.py step(), February 2022 and v0.16 alike):
  /// the .grad tensors outside the rank's partition are freed (free_grad_in_param_list of
  /// params_not_in_partition); the 16-bit gradients of the partition (`partition_params`
  /// elements) are flattened into one tensor and cast to fp32, the fp32 master partition's .grad
  /// (`single_grad_partition`), and the flat 16-bit copy is freed once cast; then the partition's
  /// own .grad tensors are freed, and the fp32 gradient after the optimizer's step. The rank
  /// replayed holds the first partition, in parameter order (PartitionGradients).
  void DeepSpeedZero12Step(double partition_params) {
    if (partition_params <= 0) return;
    std::vector<int> in_partition = PartitionGradients(partition_params);
    const int flat = Alloc(2 * partition_params);
    const int fp32 = Alloc(4 * partition_params);
    Free(flat);
    for (int h : in_partition) Free(h);
    Free(fp32);
  }
  /// Frees the lazily allocated .grad tensors that do not overlap the first `partition_params`
  /// elements in parameter order (per chunk: embedding, layers, output layer; within a layer,
  /// forward order) and returns the handles of those that do, for the caller to free: the
  /// replayer holds no .grad tensor afterwards.
  std::vector<int> PartitionGradients(double partition_params) {
    std::vector<int> in_partition;
    double offset = 0;
    for (std::size_t chunk = 0; chunk < chunks_.size(); ++chunk) {
      const int ci = static_cast<int>(chunk);
      std::vector<int> order{-1};
      for (int l = 0; l < chunks_[chunk].layers; ++l) order.push_back(l);
      order.push_back(-2);
      for (int layer : order) {
        auto it = grads_.find({ci, layer});
        if (it == grads_.end()) continue;
        for (auto g = it->second.rbegin(); g != it->second.rend(); ++g) {  // stored in backward order
          if (offset < partition_params) {
            in_partition.push_back(g->handle);
          } else {
            Free(g->handle);
          }
          offset += g->elements;
        }
      }
    }
    grads_.clear();
    return in_partition;
  }
  int Alloc(double bytes) {
    if (bytes <= 0) return -1;
    const int h = alloc_.Allocate(bytes);
    return h;
  }
  void Free(int h) {
    if (h >= 0) alloc_.Free(h);
  }

  void Forward(int mb, int chunk) {
    const ChunkCost& cc = chunks_.at(static_cast<std::size_t>(chunk));
    std::vector<int>& keep = kept_[{mb, chunk}];
    const int fwd_transient = cc.has_output ? -1 : Alloc(cc.fwd_transient_bytes);
    if (cc.has_embedding) KeepAll(embedding_, &keep);
    int gathered = Gather(-1, cc.layers > 0);
    for (int l = 0; l < cc.layers; ++l) {
      const int next = Gather(-1, l + 1 < cc.layers);
      LayerForward(LayerKind(cc, l), &keep);
      Gather(gathered, false);
      gathered = next;
    }
    if (cc.has_output) {
      const int logits = Alloc(cc.fwd_transient_bytes);  // the loss's working memory (logits; torch's fp32 copy), one block
      KeepAll(output_, &keep);
      Free(logits);
    }
    Free(fwd_transient);
    alloc_.ProcessEvents();  // the CPU thread is at most a pass ahead of the GPU
  }

  void Backward(int mb, int chunk, bool split_weight) {
    const ChunkCost& cc = chunks_.at(static_cast<std::size_t>(chunk));
    auto it = kept_.find({mb, chunk});
    if (it == kept_.end()) return;
    std::vector<int> keep = std::move(it->second);
    kept_.erase(it);
    if (lazy_.per_microbatch) ReleaseGradients();  // BF16_Optimizer's clear_lp_grads
    std::size_t next = keep.size();  // tensors are freed from the back
    int grad = -1;
    if (cc.has_output) {
      grad = Alloc(cc.transient_bytes);  // the logits' gradient
      for (std::size_t j = output_.bytes.size(); j-- > 0;) {
        const int g = Alloc(output_.bytes[j]);
        Free(grad);
        Free(keep[--next]);
        grad = g;
      }
      if (cm_.output_params_per_gpu > 0) GradientsOf(chunk, -2, {cm_.output_params_per_gpu});
    }
    int gathered = Gather(-1, cc.layers > 0);
    for (int l = cc.layers; l-- > 0;) {
      const int prefetched = Gather(-1, l > 0);
      grad = LayerBackward(LayerKind(cc, l), keep, &next, grad);
      Gather(gathered, false);
      gathered = prefetched;
      const bool moe = l >= cc.layers - cc.moe_layers && !cm_.layer_tensors.moe_order.empty();
      GradientsOf(chunk, l, moe ? cm_.layer_tensors.moe_order : cm_.layer_tensors.dense_order);
    }
    while (next > 0) Free(keep[--next]);  // the embedding's
    if (cc.has_embedding) GradientsOf(chunk, -1, {cm_.embedding_params_per_gpu});
    Free(grad);
    if (split_weight) weight_hold_[{mb, chunk}] = Alloc(cc.weight_saved_bytes);
    alloc_.ProcessEvents();
  }

  void Weight(int mb, int chunk) {
    auto it = weight_hold_.find({mb, chunk});
    if (it == weight_hold_.end()) return;
    Free(it->second);
    weight_hold_.erase(it);
  }

 private:
  /// Per-layer ZeRO-3 without the rate limiter (gather_bytes_ > 0): frees the gathered block
  /// `done` (>= 0) as FSDP does after the layer's work was issued, the block held until the pass
  /// is done (record_stream), and allocates the next layer's when `next`. Returns its handle, or -1.
  int Gather(int done, bool next) {
    if (done >= 0) alloc_.FreeDeferred(done);
    return next && gather_bytes_ > 0 ? alloc_.Allocate(gather_bytes_, kGatherStream) : -1;
  }
  /// FSDP1 allocates the gathered parameters on its all-gather (unshard) stream: their blocks
  /// come from that stream's pool.
  static constexpr int kGatherStream = 1;

  /// Allocates the .grad of each parameter tensor (`elements` per GPU, in forward order) of
  /// chunk `chunk`'s layer `layer` (-1: embedding, -2: output layer) the first time its
  /// backward runs since they were released, in reverse order (as autograd reaches them).
  void GradientsOf(int chunk, int layer, const std::vector<double>& elements) {
    if (lazy_.bytes_per_param <= 0) return;
    std::vector<GradTensor>& g = grads_[{chunk, layer}];
    if (!g.empty()) return;
    for (std::size_t j = elements.size(); j-- > 0;) {
      g.push_back({Alloc(lazy_.bytes_per_param * elements[j]), elements[j]});
    }
  }
  void ReleaseGradients() {
    for (auto& [key, grads] : grads_) {
      for (const GradTensor& g : grads) Free(g.handle);
    }
    grads_.clear();
  }

  const LayerTensorsSaved& LayerKind(const ChunkCost& cc, int l) const {
    // bf16-kept layers first, then dense, then mixture-of-experts layers (their counts only
    // matter for the sizes; the order within a chunk barely moves the allocator's peak); under
    // partial recompute, which layers rerun and which are MoE, at their own positions.
    const bool moe = cc.layer_moe.empty() ? l >= cc.layers - cc.moe_layers && !moe_.bytes.empty()
                                          : static_cast<bool>(cc.layer_moe[static_cast<std::size_t>(l)]);
    if (!cc.Recomputed(l)) return moe ? plain_moe_ : plain_;
    if (l < cc.bf16_layers) return bf16_;
    return moe ? moe_ : dense_;
  }

  void KeepAll(const LayerTensorsSaved& t, std::vector<int>* keep) {
    for (double b : t.bytes) keep->push_back(Alloc(b));
  }

  void LayerForward(const LayerTensorsSaved& t, std::vector<int>* keep) {
    const bool full = t.full;
    if (t.checkpoint > 0) keep->push_back(Alloc(t.checkpoint));  // the checkpointed input (and kept outputs)
    int prev = -1;  // a dropped tensor, freed once the next one is made
    for (std::size_t j = 0; j < t.bytes.size(); ++j) {
      if (full || t.rebuilt[j]) {
        const int h = Alloc(t.bytes[j]);
        Free(prev);
        prev = h;
      } else {
        keep->push_back(Alloc(t.bytes[j]));
      }
    }
    Free(prev);
  }

  /// Frees the layer's kept tensors from keep[*next - 1] down; returns the input gradient.
  int LayerBackward(const LayerTensorsSaved& t, const std::vector<int>& keep, std::size_t* next, int grad) {
    const bool full = t.full;
    std::vector<int> live(t.bytes.size(), -1);
    // Kept tensors sit in keep in forward order; they end at *next.
    std::size_t kept = 0;
    for (std::size_t j = 0; j < t.bytes.size(); ++j) kept += (full || t.rebuilt[j]) ? 0 : 1;
    std::size_t pos = *next - kept;
    const bool checkpointed = t.checkpoint > 0;
    const int checkpoint = checkpointed ? keep[pos - 1] : -1;
    for (std::size_t j = 0; j < t.bytes.size(); ++j) {
      live[j] = (full || t.rebuilt[j]) ? Alloc(t.bytes[j]) : keep[pos++];
    }
    for (std::size_t j = t.bytes.size(); j-- > 0;) {
      const int g = Alloc(t.bytes[j]);
      Free(grad);
      Free(live[j]);
      grad = g;
    }
    Free(checkpoint);
    *next -= kept + (checkpointed ? 1 : 0);
    return grad;
  }

  const CostModel& cm_;
  const ParallelConfig& c_;
  CachingAllocatorModel alloc_;
  const std::vector<ChunkCost>& chunks_;
  LayerTensorsSaved dense_, moe_, bf16_, plain_, plain_moe_, embedding_, output_;
  std::map<std::pair<int, int>, std::vector<int>> kept_;
  std::map<std::pair<int, int>, int> weight_hold_;
  LazyGradients lazy_;
  /// [chunk, layer] -> its .grad tensors, in backward order (as autograd made them)
  std::map<std::pair<int, int>, std::vector<GradTensor>> grads_;
  double gather_bytes_ = 0;  ///< one layer's gathered parameters when the replay makes them
};

/// Micro-batches and pipeline flushes replayed per step: the step's, up to a cap past which the
/// steady state repeats (whole flushes with pipeline flushes: as many as the cap holds, at least
/// one, each a schedule of the step's micro-batches per flush).
std::pair<int, int> ReplayedMicrobatches(const ParallelConfig& c) {
  const int m = static_cast<int>(c.num_microbatches());
  const int f = static_cast<int>(std::max<std::int64_t>(1, c.pipeline_flushes));
  const int p = static_cast<int>(c.pp);
  int cap = std::max(2 * p, 4);
  if (c.schedule == Schedule::kInterleaved) cap = ((cap + p - 1) / p) * p;
  if (f > 1 && m % f == 0 && m / f <= cap) {
    const int per = m / f, flushes = std::clamp(cap / per, 1, f);
    return {per * flushes, flushes};
  }
  // A flush at least the cap long: one capped flush, as one schedule (GPipe: the whole flush).
  if (f > 1 && m % f == 0) return {c.schedule == Schedule::kGpipe ? m / f : cap, 1};
  if (c.schedule == Schedule::kGpipe) return {m, 1};
  return {std::max(1, std::min(m, cap)), 1};
}

}  // namespace

AllocatorReplay ReplayStageAllocations(const CostModel& cm, const ParallelConfig& c, int stage,
                                       double static_bytes, double capacity_bytes,
                                       std::vector<AllocatorEvent>* trace) {
  if (stage < 0 || static_cast<std::size_t>(stage) >= cm.chunks.size()) {
    throw std::out_of_range("ReplayStageAllocations: no such stage");
  }
  AllocatorReplay r;
  const auto [replayed, flushes] = ReplayedMicrobatches(c);
  r.microbatches = replayed;
  const int v = c.schedule == Schedule::kInterleaved ? static_cast<int>(c.vp) : 1;
  const PipelineSchedule sched = MakeSchedule(c.schedule, static_cast<int>(c.pp), r.microbatches, v, flushes);
  Replayer rp(cm, c, stage, capacity_bytes);
  rp.allocator().set_trace(trace);
  // The lazily allocated gradients are part of the stage's static bytes; the trace makes them.
  double params = 0;
  for (const ChunkCost& cc : cm.chunks[static_cast<std::size_t>(stage)]) params += cc.params_per_gpu;
  // With the gathers replayed one by one, the two layers StaticStageMemory counts are theirs.
  // (The embedding's or output layer's unit beyond a layer stays in the static bytes.)
  const double gathers = ReplaysZero3Gathers(c) ? 2.0 * Zero3GatheredLayerBytes(cm, c.param_gather_bytes, stage) : 0.0;
  const double rest = static_bytes - LazyGradientsOf(c).bytes_per_param * params - gathers;
  if (FlattensWeightsAtInit(c)) {
    rp.FlattenWeights(params);
    rp.Alloc(rest - 2 * params);
  } else {
    rp.Alloc(rest);
  }
  int first_step_retries = 0;
  for (int step = 0; step < 2; ++step) {
    if (step == 1) first_step_retries = rp.allocator().retries();
    for (const ScheduleItem& it : sched.order[static_cast<std::size_t>(stage)]) {
      switch (it.kind) {
        case ItemKind::kForward: rp.Forward(it.microbatch, it.chunk); break;
        case ItemKind::kBackward: rp.Backward(it.microbatch, it.chunk, sched.split_weight); break;
        case ItemKind::kWeight: rp.Weight(it.microbatch, it.chunk); break;
      }
    }
    rp.EndStep(params);
  }
  const CachingAllocatorModel& a = rp.allocator();
  r.peak_allocated_bytes = static_cast<double>(a.peak_allocated_bytes());
  r.peak_reserved_bytes = static_cast<double>(a.peak_reserved_bytes());
  r.retries = a.retries() - first_step_retries;  // the second step's: the steady state's
  r.out_of_memory = a.ooms() > 0;
  r.oom_request_bytes = static_cast<double>(a.first_oom_request_bytes());
  return r;
}

}  // namespace shardcast
