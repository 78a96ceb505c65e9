#include "simulator/program.h"

#include <algorithm>
#include <map>
#include <cmath>

namespace shardcast {

const char* ToString(ProgKind k) {
  switch (k) {
    case ProgKind::kCompute: return "compute";
    case ProgKind::kTpCollective: return "tp_collective";
    case ProgKind::kSend: return "pp_send";
    case ProgKind::kRecv: return "pp_recv";
    case ProgKind::kAlloc: return "alloc";
    case ProgKind::kFree: return "free";
    case ProgKind::kDpCollective: return "dp_collective";
    case ProgKind::kDpWait: return "dp_wait";
    case ProgKind::kOptimizer: return "optimizer";
  }
  return "?";
}

RankProgram BuildRankProgram(const ParallelConfig& c, const CostModel& cm,
                             const PipelineSchedule& sched, const HardwareProfile& prof, int stage) {
  RankProgram rp;
  rp.stage = stage;
  const int p = sched.stages, v = sched.chunks;
  const auto& chunks = cm.chunks[static_cast<std::size_t>(stage)];
  auto tag = [&](int mb, int chunk_on_sender, int dir) { return (mb * v + chunk_on_sender) * 2 + dir; };
  auto add_ops = [&](const std::vector<Op>& ops, Pass pass, const ScheduleItem& it, bool reverse) {
    auto emit = [&](const Op& o) {
      if (o.pass != pass || o.overlapped) return;
      ProgOp x;
      x.kind = o.kind == OpKind::kCollective ? ProgKind::kTpCollective : ProgKind::kCompute;
      x.op = o;
      x.item = it.kind;
      x.microbatch = it.microbatch;
      x.chunk = it.chunk;
      x.bytes = o.bytes;
      rp.predicted_busy_s += o.duration_s;
      rp.ops.push_back(x);
    };
    if (reverse) {
      for (auto i = ops.rbegin(); i != ops.rend(); ++i) emit(*i);
    } else {
      for (const auto& o : ops) emit(o);
    }
  };
  // Layer ops are listed forward then backward in cost-model order (backward already reversed).
  for (const ScheduleItem& it : sched.order[static_cast<std::size_t>(stage)]) {
    const ChunkCost& cc = chunks[static_cast<std::size_t>(it.chunk)];
    const int mc = it.chunk * p + stage;
    const bool first = mc == 0, last = mc == p * v - 1;
    ProgOp marker;
    marker.item = it.kind;
    marker.microbatch = it.microbatch;
    marker.chunk = it.chunk;
    if (it.kind == ItemKind::kForward) {
      if (!first) {
        ProgOp r = marker;
        r.kind = ProgKind::kRecv;
        r.peer_stage = (stage + p - 1) % p;
        r.bytes = cm.pp_message_bytes;
        r.tag = tag(it.microbatch, stage == 0 ? it.chunk - 1 : it.chunk, 0);
        rp.ops.push_back(r);
        add_ops(cm.pp_recv_ops, Pass::kForward, it, false);  // scatter/gather: re-assemble over TP
      }
      if (cc.has_embedding) add_ops(cm.embedding_ops, Pass::kForward, it, false);
      for (int l = 0; l < cc.layers; ++l) add_ops(cm.layer_ops, Pass::kForward, it, false);
      if (cc.has_output) add_ops(cm.output_ops, Pass::kForward, it, false);
      ProgOp a = marker;
      a.kind = ProgKind::kAlloc;
      a.bytes = cc.saved_bytes;
      rp.ops.push_back(a);
      if (!last) {
        ProgOp s = marker;
        s.kind = ProgKind::kSend;
        s.peer_stage = (stage + 1) % p;
        s.bytes = cm.pp_message_bytes;
        s.tag = tag(it.microbatch, it.chunk, 0);
        rp.ops.push_back(s);
      }
    } else if (it.kind == ItemKind::kBackward) {
      if (!last) {
        ProgOp r = marker;
        r.kind = ProgKind::kRecv;
        r.peer_stage = (stage + 1) % p;
        r.bytes = cm.pp_message_bytes;
        r.tag = tag(it.microbatch, stage == p - 1 ? it.chunk + 1 : it.chunk, 1);
        rp.ops.push_back(r);
        add_ops(cm.pp_recv_ops, Pass::kBackwardInput, it, false);
      }
      if (cc.has_output) {
        add_ops(cm.output_ops, Pass::kBackwardInput, it, false);
        if (!sched.split_weight) add_ops(cm.output_ops, Pass::kBackwardWeight, it, false);
      }
      for (int l = 0; l < cc.layers; ++l) {
        add_ops(cm.layer_ops, Pass::kRecompute, it, false);
        add_ops(cm.layer_ops, Pass::kBackwardInput, it, false);
        if (!sched.split_weight) add_ops(cm.layer_ops, Pass::kBackwardWeight, it, false);
      }
      if (cc.has_embedding && !sched.split_weight) add_ops(cm.embedding_ops, Pass::kBackwardWeight, it, false);
      ProgOp f = marker;
      f.kind = ProgKind::kFree;
      f.bytes = sched.split_weight ? cc.saved_bytes - cc.weight_saved_bytes : cc.saved_bytes;
      rp.ops.push_back(f);
      if (!first) {
        ProgOp s = marker;
        s.kind = ProgKind::kSend;
        s.peer_stage = (stage + p - 1) % p;
        s.bytes = cm.pp_message_bytes;
        s.tag = tag(it.microbatch, it.chunk, 1);
        rp.ops.push_back(s);
      }
    } else {
      if (cc.has_output) add_ops(cm.output_ops, Pass::kBackwardWeight, it, false);
      for (int l = 0; l < cc.layers; ++l) add_ops(cm.layer_ops, Pass::kBackwardWeight, it, false);
      if (cc.has_embedding) add_ops(cm.embedding_ops, Pass::kBackwardWeight, it, false);
      ProgOp f = marker;
      f.kind = ProgKind::kFree;
      f.bytes = cc.weight_saved_bytes;
      rp.ops.push_back(f);
    }
  }
  // Data-parallel gradient reduction per bucket, then the optimizer, then ZeRO-1/2's all-gather.
  double params = 0;
  for (const auto& cc : chunks) params += cc.params_per_gpu;
  const double grad_per_param = GradReduceBytesPerParam(c);
  const CollectiveOp red = GradReduceIsAllReduce(c) ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter;
  auto buckets = [&](int chunk, bool async) {
    std::vector<ProgOp> out;
    const double cp = chunks[static_cast<std::size_t>(chunk)].params_per_gpu;
    const int nb = std::max(1, static_cast<int>(std::ceil(cp / static_cast<double>(c.BucketParams()))));
    for (int b = 0; b < nb; ++b) {
      ProgOp d;
      d.kind = ProgKind::kDpCollective;
      d.async = async;
      d.chunk = chunk;
      d.op.name = GradReduceIsAllReduce(c) ? "dp_grad_all_reduce" : "dp_grad_reduce_scatter";
      d.op.kind = OpKind::kCollective;
      d.op.collective = red;
      d.op.bytes = d.bytes = cp * grad_per_param / nb;
      d.op.duration_s = DataParallelCostOf(prof, cm, red, d.bytes).time_s();
      rp.predicted_busy_s += async ? 0.0 : d.op.duration_s;
      out.push_back(d);
    }
    return out;
  };
  // ZeRO-2 reduces after every micro-batch's gradient item (it keeps only its shard of the
  // gradients, as the simulator's Builder::BuildStage); otherwise after each chunk's last one.
  const bool every_microbatch = c.zero_stage == 2;
  if (c.dp > 1 && (c.overlap_grad_reduce || every_microbatch)) {
    const ItemKind grad_item = sched.split_weight ? ItemKind::kWeight : ItemKind::kBackward;
    auto is_grad = [&](std::size_t i) { return rp.ops[i].kind == ProgKind::kCompute && rp.ops[i].item == grad_item; };
    std::vector<std::pair<std::size_t, int>> at;  // insert position, chunk (latest first)
    if (every_microbatch) {
      // After each gradient item's last op of its pass (its compute ops and the tensor-parallel
      // collectives between them), before its release and pipeline send.
      std::map<std::pair<int, int>, std::size_t> item_end;  // (micro-batch, chunk) -> last op
      for (std::size_t i = 0; i < rp.ops.size(); ++i) {
        const ProgOp& x = rp.ops[i];
        if ((x.kind == ProgKind::kCompute || x.kind == ProgKind::kTpCollective) && x.item == grad_item) {
          item_end[{x.microbatch, x.chunk}] = i;
        }
      }
      for (const auto& [key, i] : item_end) at.emplace_back(i + 1, key.second);
    } else {
      std::vector<std::size_t> last(static_cast<std::size_t>(v), 0);
      for (std::size_t i = 0; i < rp.ops.size(); ++i) {
        if (is_grad(i)) last[static_cast<std::size_t>(rp.ops[i].chunk)] = i;
      }
      for (int k = 0; k < v; ++k) at.emplace_back(last[static_cast<std::size_t>(k)] + 1, k);
    }
    std::sort(at.rbegin(), at.rend());
    for (const auto& [pos, k] : at) {
      const auto ops = buckets(k, c.overlap_grad_reduce);
      rp.ops.insert(rp.ops.begin() + static_cast<std::ptrdiff_t>(pos), ops.begin(), ops.end());
    }
    if (c.overlap_grad_reduce) {
      ProgOp w;
      w.kind = ProgKind::kDpWait;
      w.op.name = "dp_wait";
      rp.ops.push_back(w);
    }
  } else if (c.dp > 1) {
    for (int k = 0; k < v; ++k) {
      const auto ops = buckets(k, false);
      rp.ops.insert(rp.ops.end(), ops.begin(), ops.end());
    }
  }
  ProgOp o;
  o.kind = ProgKind::kOptimizer;
  o.op.name = "optimizer";
  o.op.kind = OpKind::kMemory;
  o.op.bytes = o.bytes = OptimizerBytes(c, params);
  o.op.duration_s = OptimizerTime(prof, c, params);
  rp.predicted_busy_s += o.op.duration_s;
  rp.ops.push_back(o);
  if (c.dp > 1 && (c.zero_stage == 1 || c.zero_stage == 2)) {
    ProgOp g;
    g.kind = ProgKind::kDpCollective;
    g.op.name = "dp_param_all_gather";
    g.op.kind = OpKind::kCollective;
    g.op.collective = CollectiveOp::kAllGather;
    g.op.bytes = g.bytes = params * c.param_gather_bytes;
    g.op.duration_s = DataParallelCostOf(prof, cm, CollectiveOp::kAllGather, g.bytes).time_s();
    rp.predicted_busy_s += g.op.duration_s;
    rp.ops.push_back(g);
  }
  return rp;
}

}  // namespace shardcast
