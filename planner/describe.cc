#include "planner/describe.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace shardcast {
namespace {

/// ZeRO stage z's state on a stage holding `sp` per GPU with cfg's optimizer: the distributed
/// optimizer and FSDP shard the dense parameters' state over the dp x cp ranks holding the same
/// weights, the routed experts' over the expert-data-parallel ranks.
ZeroStateRow ZeroState(int z, const Model& m, const StageParameters& sp, const ParallelConfig& cfg, std::int64_t gpus,
                       const Cluster& cluster) {
  ParallelConfig cz = cfg;
  cz.zero_stage = z;
  const StateBytesPerParam bd = BytesPerParam(cz);
  const StateBytesPerParam be = BytesPerParam(cz, std::max<std::int64_t>(1, cfg.expert_dp()));
  const double dense = sp.total() - sp.expert_params;
  ZeroStateRow row;
  row.zero_stage = z;
  std::vector<std::string> why = InfeasibilityReasons(m, cz, gpus, cluster);
  const std::string no_stage = OptimizerZeroStageMismatch(cfg.optimizer_impl, z);
  if (!no_stage.empty()) why.insert(why.begin(), no_stage);
  if (cfg.optimizer_impl == OptimizerImpl::kTorchFsdp) {
    row.note = TorchtitanStageMismatch(z, cfg.tp, cfg.pp, cfg.cp, cfg.dp, cfg.ep);
  }
  row.supported = why.empty();
  if (!why.empty()) row.unsupported_reason = why.front();
  row.optimizer_runs = no_stage.empty();
  if (!row.optimizer_runs) return row;
  row.weights_bytes = dense * bd.weights + sp.expert_params * be.weights;
  row.grads_bytes = dense * bd.grads + sp.expert_params * be.grads;
  row.optimizer_bytes = dense * bd.optimizer + sp.expert_params * be.optimizer;
  row.fits = row.total_bytes() <= cluster.gpu.memory_bytes;
  return row;
}

/// "x" with up to 4 significant digits ("12", "0.5").
std::string Num(double x) { return fmt::format("{:.4g}", x); }

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
  cfg.optimizer_impl = r.optimizer;
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
  for (int z = 0; z <= 3; ++z) f.zero[z] = ZeroState(z, m, f.largest, cfg, f.gpus, cluster);
  return f;
}

}  // namespace

std::string StateBytesFormula(const ParallelConfig& c, bool total) {
  const StateBytesPerParam a = BytesPerParam(c, 1), b = BytesPerParam(c, 2);
  // Each part is k + s/d: at d = 1 it is k + s, at d = 2 k + s/2.
  const double parts1[] = {a.weights, a.grads, a.optimizer}, parts2[] = {b.weights, b.grads, b.optimizer};
  std::vector<std::string> fixed, sharded;
  double fixed_sum = 0, sharded_sum = 0;
  for (int i = 0; i < 3; ++i) {
    const double s = 2.0 * (parts1[i] - parts2[i]), k = parts1[i] - s;
    if (k > 1e-9) fixed.push_back(Num(k));
    if (s > 1e-9) sharded.push_back(Num(s));
    fixed_sum += k;
    sharded_sum += s;
  }
  // Every BytesPerParam part is k + s/d: check at d = 4 so a term of another shape fails loudly.
  const StateBytesPerParam q = BytesPerParam(c, 4);
  if (std::abs(fixed_sum + sharded_sum / 4.0 - q.total()) > 1e-9 * std::max(1.0, q.total())) {
    throw InternalError(fmt::format("StateBytesFormula: {} + {}/d does not give BytesPerParam's {} at d = 4",
                                    fixed_sum, sharded_sum, q.total()));
  }
  if (total) {
    fixed = fixed_sum > 1e-9 ? std::vector<std::string>{Num(fixed_sum)} : std::vector<std::string>{};
    sharded = sharded_sum > 1e-9 ? std::vector<std::string>{Num(sharded_sum)} : std::vector<std::string>{};
  }
  std::string out;
  for (const auto& k : fixed) out += (out.empty() ? "" : " + ") + k;
  if (!sharded.empty()) {
    std::string s;
    for (const auto& x : sharded) s += (s.empty() ? "" : " + ") + x;
    out += (out.empty() ? "" : " + ") + (sharded.size() > 1 ? "(" + s + ")" : s) + "/d";
  }
  return out.empty() ? "0" : out;
}

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
  d.optimizer = r.optimizer;
  d.params = m.Parameters();
  d.flops = m.Flops(d.seq);
  d.flops_per_sequence = d.flops.per_token * static_cast<double>(d.seq);
  d.exceeds_position_table = m.position_embedding == PositionEmbedding::kLearned && m.max_position_embeddings > 0 &&
                             d.seq > m.max_position_embeddings;
  if (cluster) d.fit = DescribeFit(m, r, *cluster);
  return d;
}

}  // namespace shardcast
