#include "planner/describe.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"

namespace shardcast {
namespace {

/// ZeRO stage z's state on a stage holding `sp` per GPU: the distributed optimizer and FSDP shard
/// the dense parameters' state over the dp x cp ranks holding the same weights, the routed
/// experts' over the expert-data-parallel ranks.
ZeroStateRow ZeroState(int z, const StageParameters& sp, const ParallelConfig& cfg, std::int64_t pp,
                       double memory_bytes) {
  const StateBytesPerParam bd = BytesPerParam(z, cfg.dp_cp(), true);
  const StateBytesPerParam be = BytesPerParam(z, std::max<std::int64_t>(1, cfg.expert_dp()), true);
  const double dense = sp.total() - sp.expert_params;
  ZeroStateRow row;
  row.zero_stage = z;
  row.supported = z < 2 || pp == 1;
  row.weights_bytes = dense * bd.weights + sp.expert_params * be.weights;
  row.grads_bytes = dense * bd.grads + sp.expert_params * be.grads;
  row.optimizer_bytes = dense * bd.optimizer + sp.expert_params * be.optimizer;
  row.fits = row.total_bytes() <= memory_bytes;
  return row;
}

FitDescription DescribeFit(const Model& m, const DescribeRequest& r, const Cluster& cluster) {
  FitDescription f;
  const Gpu& g = cluster.gpu;
  f.cluster = cluster.name;
  f.gpu = g.name;
  f.gpu_display_name = g.display_name;
  f.precision_list = g.PrecisionList();
  for (Precision p : AllPrecisions()) {
    if (g.Runs(p)) f.peaks_flops.emplace_back(p, g.PeakFlops(p));
  }
  f.memory_bytes = g.memory_bytes;
  f.gpus = r.gpus > 0 ? r.gpus : cluster.num_gpus.value_or(cluster.gpus_per_node);
  ParallelConfig& cfg = f.cfg;
  cfg.tp = r.tp;
  cfg.pp = r.pp;
  cfg.cp = r.cp;
  cfg.flash_attention = cluster.gpu.HasFlashAttention();  // V100: the unfused attention
  cfg.seq_length = r.seq;
  const bool dp_known = f.gpus % (r.tp * r.cp * r.pp) == 0;
  cfg.dp = dp_known ? f.gpus / (r.tp * r.cp * r.pp) : 1;
  cfg.global_batch_size = cfg.dp;
  cfg.ep = r.ep;
  cfg.etp = r.etp;
  cfg.sequence_parallel = cfg.tp > 1 && m.moe.enabled();  // Megatron-Core's MoE with tp > 1
  // Bad --ep / --etp exit 2, as in simulate, once the data-parallel size is known (a GPU count
  // tp*cp*pp does not divide is a reason below, not a placeholder dp to check experts against).
  if (dp_known) RequireExpertParallel(m, cfg, "command line");
  f.reasons = InfeasibilityReasons(m, cfg, f.gpus, cluster);
  if (!f.feasible()) return f;
  for (std::int64_t s = 0; s < r.pp; ++s) {
    StageParameters sp = ParametersOfStage(m, r.tp, r.pp, s, false, cfg.ep * cfg.expert_tp());
    if (sp.total() > f.largest.total()) {
      f.largest = sp;
      f.largest_stage = s;
    }
  }
  for (int z = 0; z <= 3; ++z) f.zero[z] = ZeroState(z, f.largest, cfg, r.pp, f.memory_bytes);
  return f;
}

}  // namespace

ModelDescription DescribeModel(const Model& m, const DescribeRequest& r, const Cluster* cluster) {
  if (!cluster && r.gpus > 0) {
    throw InputError("command line: --gpus: got " + std::to_string(r.gpus) +
                     ", expected --cluster as well (which GPU type?)");
  }
  if (!cluster && (r.tp != 1 || r.pp != 1)) {
    throw InputError(fmt::format("command line: --tp/--pp: got tp = {}, pp = {}, expected --cluster as well (the "
                                 "per-GPU memory needs a GPU type)", r.tp, r.pp));
  }
  if (!cluster && (r.ep != 1 || r.etp != 0)) {
    throw InputError(fmt::format("command line: --ep/--etp: got ep = {}, etp = {}, expected --cluster as well (the "
                                 "experts' memory per GPU needs a GPU type)",
                                 r.ep, r.etp > 0 ? std::to_string(r.etp) : std::string("tp")));
  }
  ModelDescription d;
  d.model = m;
  d.seq = r.seq > 0 ? r.seq : m.seq_length;
  d.gbs = r.gbs;
  d.params = m.Parameters();
  d.flops = m.Flops(d.seq);
  d.flops_per_sequence = d.flops.per_token * static_cast<double>(d.seq);
  d.exceeds_position_table = m.position_embedding == PositionEmbedding::kLearned && m.max_position_embeddings > 0 &&
                             d.seq > m.max_position_embeddings;
  if (cluster) d.fit = DescribeFit(m, r, *cluster);
  return d;
}

}  // namespace shardcast
