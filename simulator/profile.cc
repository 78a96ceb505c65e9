#include "simulator/profile.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"
#include "models/loader.h"
#include "simulator/cost_model.h"

namespace shardcast {

const char* ToString(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllToAll: return "alltoall";
    case CollectiveOp::kSendRecv: return "sendrecv";
  }
  return "?";
}

double BusBwFactor(CollectiveOp op, int n) {
  if (n <= 1) return 0.0;
  const double dn = n;
  switch (op) {
    case CollectiveOp::kAllReduce: return 2.0 * (dn - 1) / dn;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return (dn - 1) / dn;
    case CollectiveOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

double InterpolateLogX(const std::vector<CurvePoint>& c, double x) {
  if (c.empty()) return 1.0;
  if (x <= c.front().x) return c.front().y;
  if (x >= c.back().x) return c.back().y;
  for (std::size_t i = 1; i < c.size(); ++i) {
    if (x <= c[i].x) {
      const double t = (std::log(x) - std::log(c[i - 1].x)) / (std::log(c[i].x) - std::log(c[i - 1].x));
      return c[i - 1].y + t * (c[i].y - c[i - 1].y);
    }
  }
  return c.back().y;
}

double HardwareProfile::NicShareGBps() const {
  if (gpus_per_node <= 0) return 0;
  return nic_effective_GBps * nics_per_node / gpus_per_node;
}

/// Sustained-training / MAMF GEMM throughput ratios (fits in docs/accuracy.md): A100 from
/// Korthikanti et al. 2022 Table 4 per-layer times; Hopper from the MPT-13B H100 runs
/// (llm-foundry), checked on MPT-70B and MPT-3B. Architectures without evidence use Hopper's.
constexpr double kSustainedOverMamfAmpere = 0.83;
constexpr double kSustainedOverMamfHopper = 0.735;
constexpr double kUnfusedAttentionCoreEfficiency = 0.765;

const std::vector<ValidationFit>& FitsOnValidationRows() {
  static const std::vector<ValidationFit> fits = {
      {fmt::format("Hopper sustained GEMM efficiency {} of MAMF, fitted on these step times", kSustainedOverMamfHopper),
       "S14", "MPT-13b", {512, 256, 128}, {}, ""},
      {fmt::format("A100 sustained GEMM efficiency {} of MAMF and unfused attention core {} of roofline, fitted on "
                   "the per-layer times of these runs (Table 4)",
                   kSustainedOverMamfAmpere, kUnfusedAttentionCoreEfficiency),
       "S3", "GPT-22B", {8}, {}, ""},
      // Not a profile constant: the reading of S7's TFLOP/s (validation/published_runs.csv's
      // flops_convention), a one-bit choice informed by these rows (docs/accuracy.md).
      {"S7's FLOP convention read as causal (attention halved), chosen with these rows: the full-matrix reading gives "
       "MAPE 31.4% and a TFLOP/s tau of -0.89",
       "S7", "LLAMA2-7B", {4, 8, 16, 32, 64, 128, 256, 512, 1024}, {}, ""},
      // Not a profile constant either: the routing skew of a trained Qwen3 router (cost_model.h).
      {fmt::format("trained global-batch-balanced router's busiest EP rank {} x the mean tokens, fitted on this "
                   "pair's step-time ratio (52 forced balance, 53 dropless)",
                   kGlobalBatchRouterImbalance),
       "M3", "Qwen3-235B-A22B", {256}, {16384}, ""},
      // A framework constant (cost_model.h): PyTorch's list collectives under DeepSpeed's ZeRO-3
      // of 2021; the 530B rows (14-16) are held out.
      {fmt::format("host time of PyTorch's list collectives {} us per rank and tensor (DeepSpeed ZeRO-3 of 2021), "
                   "fitted on these step times",
                   kListCollectiveSliceSeconds * 1e6),
       "S1", "GPT-174.6B", {384, 768, 1536}, {}, "ZeRO-3"}};
  return fits;
}

namespace {

/// The 16-bit dense peak: bf16, or fp16 on GPUs without bf16 (V100).
double Peak16(const Gpu& g) { return g.peak_bf16_tflops > 0 ? g.peak_bf16_tflops : g.peak_fp16_tflops; }

/// The GPU preset whose measurements (mamf_tflops, nvlink_ring_busbw_GBps) stand in for the other
/// GPUs of `g`'s architecture that have none: A100 SXM4 80GB (ampere), H100 SXM (hopper), B200
/// (blackwell), MI300X (cdna3); none elsewhere.
std::optional<Gpu> ArchReferenceGpu(const Gpu& g) {
  const char* name = g.arch == "ampere"      ? "a100-sxm4-80gb"
                     : g.arch == "hopper"    ? "h100-sxm"
                     : g.arch == "blackwell" ? "b200"
                     : g.arch == "cdna3"     ? "mi300x"
                                             : nullptr;
  if (name == nullptr) return std::nullopt;
  return LoadGpu(name);
}

/// GEMM rates of the GPU's other precisions: its dense peak for each, at the best fraction of it
/// measured for that precision (MAMF, stas00/ml-engineering's table: FP8 1402.6 of 1978.9 TFLOP/s
/// on H100, 3432.5 of 4500 on B200) times the sustained-training ratio that bf16 uses. Where no
/// measurement exists the bf16 (or FP8) fraction stands in, said in an estimate line shown only
/// to runs in that precision.
void AddLowPrecisionGemmRates(const Gpu& g, const std::optional<Gpu>& ref, double mamf16, double sustained,
                              HardwareProfile* p) {
  double fp8 = mamf16;
  std::string fp8_est = fmt::format("FP8 GEMMs at the bf16 MAMF fraction {:.3f} of peak (no FP8 measurement for '{}')",
                                    mamf16, g.arch);
  if (g.mamf_fp8_tflops > 0 && g.peak_fp8_tflops) {
    fp8 = g.mamf_fp8_tflops / *g.peak_fp8_tflops;  // the GPU's own measurement
    fp8_est.clear();
  } else if (ref && ref->mamf_fp8_tflops > 0 && ref->peak_fp8_tflops) {
    fp8 = ref->mamf_fp8_tflops / *ref->peak_fp8_tflops;
    fp8_est = fmt::format("FP8 GEMMs at the {}'s MAMF fraction {:.3f} of peak (no FP8 measurement for {})",
                          ref->display_name, fp8, g.name);
  }
  auto add = [&](Precision prec, double mamf, const std::string& estimate) {
    if (g.PeakFlops(prec) <= 0) return;
    p->gemm_rates.push_back({prec, g.PeakFlops(prec) / 1e12, mamf * sustained});
    if (!estimate.empty()) p->estimates.push_back({estimate, false, prec});
  };
  add(Precision::kFp8, fp8, fp8_est);
  add(Precision::kMxfp8, fp8,
      fmt::format("MXFP8 GEMMs at the FP8 MAMF fraction {:.3f} of peak (no public MXFP8 measurement)", fp8));
  add(Precision::kNvfp4, fp8,
      fmt::format("NVFP4 GEMMs at the FP8 MAMF fraction {:.3f} of the FP4 peak (no public NVFP4 measurement)", fp8));
  add(Precision::kTf32, mamf16,
      fmt::format("TF32 GEMMs at the bf16 MAMF fraction {:.3f} of the TF32 peak (no public TF32 measurement)", mamf16));
  add(Precision::kFp32, mamf16,
      fmt::format("FP32 GEMMs at the bf16 MAMF fraction {:.3f} of the FP32 peak (no public measurement)", mamf16));
}

/// The intra-node collectives of the built-in profile (DefaultProfile): ring busbw, NVLS, p2p and
/// a full mesh's links, with the estimate lines of what was measured on another GPU or not at all.
void AddIntraNodeCollectives(const Cluster& cl, const std::optional<Gpu>& ref, HardwareProfile* p) {
  const Gpu& g = cl.gpu;
  // Collectives. Intra-node ring busbw as a fraction of the NVLink line rate, measured:
  // A100 230/300, H100/H200 370/450, B200 682/900 (hardware.md 2.4); PCIe and others 0.8 [est].
  // The GPU file's measured ring (nvlink_ring_busbw_GBps) over its NVLink rate, else its
  // architecture's reference GPU's fraction (an estimate line names it).
  double intra_eff = 0.8;
  const bool nvlink_node = cl.intra_fabric == "nvswitch" || cl.intra_fabric == "nvlink";
  const Gpu* ring_of = nvlink_node && g.nvlink_ring_busbw_GBps > 0 && g.nvlink_GBps_per_direction > 0 ? &g
                       : nvlink_node && ref && ref->nvlink_ring_busbw_GBps > 0 && ref->nvlink_GBps_per_direction > 0
                           ? &*ref
                           : nullptr;
  if (ring_of != nullptr) intra_eff = ring_of->nvlink_ring_busbw_GBps / ring_of->nvlink_GBps_per_direction;
  p->intra_busbw_GBps = cl.intra_GBps_per_direction * intra_eff;
  // NCCL's NVLink SHARP (NVLS) all-reduce on third-generation and later NVSwitch systems: about
  // 480 GB/s busbw on 8 H100 (450 line; nccl-tests reports, the dgx-h100 preset's notes) and
  // about 850 on GB200 NVL72 (900 line; GTC24 S62129), where rings reach 370 and 680.
  if (cl.intra_fabric == "nvswitch") {
    if (g.arch == "hopper") p->nvls_allreduce_busbw_GBps = cl.intra_GBps_per_direction * 480.0 / 450.0;
    if (g.arch == "blackwell") p->nvls_allreduce_busbw_GBps = cl.intra_GBps_per_direction * 850.0 / 900.0;
  }
  if (ring_of == nullptr) {
    p->estimates.push_back({"intra-node collective busbw 0.8 of the " + cl.intra_fabric + " line rate (measured only "
                           "for A100, H100/H200 and B200 on NVLink)"});
  } else if (ring_of != &g) {
    // Measured on another GPU of the architecture (A800's and H800's NVLink is narrower than the
    // A100's and H100's); so is the p2p fraction on Ampere and Hopper (below).
    p->estimates.push_back({fmt::format("intra-node collective busbw {:.3f}{} of the NVLink line rate {} the {}'s "
                                       "measurement{} (none for {})",
                                       intra_eff,
                                       g.arch == "ampere" || g.arch == "hopper"
                                           ? fmt::format(" and p2p {:.3f}", g.arch == "ampere" ? 274.0 / 300.0 : 0.83)
                                           : "",
                                       g.arch == "ampere" || g.arch == "hopper" ? "are" : "is", ring_of->display_name,
                                       g.arch == "ampere" || g.arch == "hopper" ? "s" : "", g.name)});
  }
  // p2p inside a node: measured pair write bandwidth A100 274/300, H100 376/450 (hardware.md 1.2).
  p->p2p_intra_GBps = cl.intra_GBps_per_direction * (g.arch == "ampere" ? 274.0 / 300.0 : 0.83);
  // A full mesh (xGMI: one link a peer, the cluster's bandwidth their sum): a pair has one link,
  // and a group of k GPUs k - 1 of each GPU's links (HardwareProfile::IntraGroupBusbwGBps).
  if (cl.intra_fabric == "xgmi" && cl.gpus_per_node > 2) {
    p->intra_mesh_links = static_cast<int>(cl.gpus_per_node - 1);
    p->p2p_intra_GBps /= p->intra_mesh_links;
    p->estimates.push_back({fmt::format("a full xGMI mesh of {} links a GPU: a collective over k GPUs of a node at "
                                       "(k - 1) / {} of the node's busbw, a pair over one link (by link count; "
                                       "not measured)",
                                       p->intra_mesh_links, p->intra_mesh_links)});
  }
  const bool nvlink = cl.intra_fabric == "nvswitch" || cl.intra_fabric == "nvlink";
  if (!nvlink || (g.arch != "ampere" && g.arch != "hopper")) {
    p->estimates.push_back({fmt::format("intra-node p2p {:.2f} of {} is the {}'s NVLink pair write bandwidth",
                                       g.arch == "ampere" ? 274.0 / 300.0 : 0.83,
                                       p->intra_mesh_links > 0 ? "one " + cl.intra_fabric + " link's rate"
                                                              : "the " + cl.intra_fabric + " line rate",
                                       g.arch == "ampere" ? "A100" : "H100")});
  }
}

}  // namespace

HardwareProfile DefaultProfile(const Cluster& cl) {
  const Gpu& g = cl.gpu;
  HardwareProfile p;
  p.kind = "default";
  p.gpu = g.name;
  p.date = "2026-11";
  p.source = "built-in default for " + g.name + " on " + cl.name +
             " from spec sheets and public measurements (docs/profile.md)";
  // GEMM: MAMF / peak (stas00/ml-engineering MAMF table; hardware.md 4.1); g(F) saturation curve
  // [est] from hardware.md 4.2 (Calculon's size buckets and B200 cuBLAS shape sweeps).
  // The base GEMM rate is the 16-bit one: bf16, or fp16 on GPUs without bf16 (V100).
  p.gemm_peak_tflops = g.peak_bf16_tflops > 0 ? g.peak_bf16_tflops : g.peak_fp16_tflops;
  // Attention efficiencies (fraction of bf16 peak) at 2k tokens, the reference length of the
  // sequence curves below: FA2 on A100 (FA2 paper, 50-73%), FA3 on Hopper (FA3 paper figures,
  // hd128: causal forward 521 and backward 501 TF/s at 2k of 989.4), FA4 in-step on Blackwell
  // ~0.42.
  if (g.arch == "ampere") {
    p.attention_fwd_efficiency = 0.65;
    p.attention_bwd_efficiency = 0.55;
    p.attention_tiles = "fa2";
  } else if (g.arch == "hopper") {
    p.attention_fwd_efficiency = 521.0 / 989.4;
    p.attention_bwd_efficiency = 501.0 / 989.4;
    p.attention_tiles = "fa3";
  } else if (g.arch == "blackwell") {
    p.attention_fwd_efficiency = 0.42;
    p.attention_bwd_efficiency = 0.40;
  } else if (g.arch == "cdna3") {
    p.attention_fwd_efficiency = 0.35;  // [est]
    p.attention_bwd_efficiency = 0.30;  // [est]
  } else {
    p.attention_fwd_efficiency = 0.45;
    p.attention_bwd_efficiency = 0.40;
    p.estimates.push_back({"attention 0.45 / 0.40 of peak (no published measurement for '" + g.arch + "')"});
  }
  if (g.arch == "cdna3") p.estimates.push_back({"attention 0.35 / 0.30 of peak (no published in-training measurement)"});
  // MAMF / peak: the GPU file's measurement (mamf_tflops), else its architecture's reference
  // GPU's (ArchReferenceGpu), else 0.75 [est].
  const std::optional<Gpu> ref = ArchReferenceGpu(g);
  if (g.mamf_bf16_tflops > 0) {
    p.gemm_max_efficiency = g.mamf_bf16_tflops / p.gemm_peak_tflops;
  } else if (ref && ref->mamf_bf16_tflops > 0) {
    p.gemm_max_efficiency = ref->mamf_bf16_tflops / Peak16(*ref);
    p.estimates.push_back({fmt::format("GEMM MAMF {:.3f} of peak is the {}'s measurement (none for {})",
                                       p.gemm_max_efficiency, ref->display_name, g.name)});
  } else {
    p.gemm_max_efficiency = 0.75;
    p.estimates.push_back({"GEMM MAMF 0.75 of peak (no published measurement for '" + g.arch + "')"});
  }
  if (g.arch != "ampere" && g.arch != "hopper") {
    p.estimates.push_back({fmt::format(
        "sustained GEMM efficiency {} of MAMF is Hopper's (fitted on the MPT-13B H100 runs); no training runs of {} to "
        "fit it on",
        kSustainedOverMamfHopper, g.name)});
  }
  if (g.arch != "ampere") {
    p.estimates.push_back({fmt::format("unfused attention core {} of roofline is the A100's (Korthikanti et al. 2022 "
                                       "Table 4)",
                                       kUnfusedAttentionCoreEfficiency),
                           true});
  }
  // Sustained GEMM throughput inside training is below MAMF (best shape, short bursts): fitted on
  // Korthikanti et al. 2022 Table 4 (22B, TP8, mbs 4: per-layer forward and backward times of
  // its five configurations, 7.7/11.9 baseline, 7.2/11.8 SP, 7.7/19.5 full recompute, 7.7/13.2
  // selective, 7.2/13.1 selective + SP) the A100 needs 0.72 of peak, 0.83 of its MAMF (mean
  // error 2.0%, max 2.6%); H100 0.735 of MAMF (MPT-13B runs). docs/accuracy.md has the procedure.
  const double mamf16 = p.gemm_max_efficiency;
  const double sustained = g.arch == "ampere" ? kSustainedOverMamfAmpere : kSustainedOverMamfHopper;
  p.gemm_max_efficiency *= sustained;
  AddLowPrecisionGemmRates(g, ref, mamf16, sustained, &p);
  // Unfused attention core (Megatron's batched score/context GEMMs, fused softmax, dropout):
  // Korthikanti et al. 2022 Table 4 times the selective recompute of exactly these kernels at
  // 1.3 ms per layer (backward 13.2 vs 11.9 ms, and 13.1 vs 11.8 with SP) where their roofline
  // gives 0.994 ms: 0.765 of it. Fitted from these A100 per-layer times; used for every GPU.
  p.unfused_attention_core_efficiency = kUnfusedAttentionCoreEfficiency;
  p.gemm_efficiency_vs_gflop = {{0.5, 0.25}, {3, 0.5}, {20, 0.75}, {100, 0.93}, {500, 1.0}};
  // FA3 on H100 by sequence length relative to 2k (FA3 paper figures, hd128): causal forward
  // 292, 423, 521, 579, 602, 616 TF/s and backward 316, 424, 501, 542, 559, 561 TF/s at
  // 512..16k. The backward saturates earlier (1.12 at 16k against the forward's 1.18).
  p.attention_efficiency_vs_seq = {{512, 292.0 / 521}, {1024, 423.0 / 521}, {2048, 1.0},
                                   {4096, 579.0 / 521}, {8192, 602.0 / 521}, {16384, 616.0 / 521}};
  p.attention_bwd_efficiency_vs_seq = {{512, 316.0 / 501}, {1024, 424.0 / 501}, {2048, 1.0},
                                       {4096, 542.0 / 501}, {8192, 559.0 / 501}, {16384, 561.0 / 501}};
  // Memory-bound: Calculon's HBM efficiency buckets (calculon systems/*.json).
  p.hbm_GBps = g.hbm_bandwidth_GBps;
  p.memory_efficiency_vs_bytes = {{1e5, 0.3}, {1e6, 0.6}, {1e7, 0.75}, {1e8, 0.9}};
  p.launch_overhead_s = 4e-6;  // a few microseconds per kernel (hardware.md 4.2 / 5)
  AddIntraNodeCollectives(cl, ref, &p);
  // Per NIC: 0.92-0.96 of line rate in ring busbw (hardware.md 2.4: HDR ~24 of 25, NDR 46-48).
  p.nic_effective_GBps = 0.94 * cl.nic_Gbps / 8.0;
  if (cl.inter_fabric == "omni-path") {
    // Omni-Path has no native NCCL transport; NCCL 2.10 drives the hfi1 ports through IB verbs.
    // Measured on Jean Zay (4 x 100 Gb/s OPA per node, 8 A100 per node): a 4 GB all-reduce over
    // 32 ranks on 4 nodes ran at busbw 40.5-40.8 Gb/s (BigScience, experiments/bandwidth/
    // all_reduce_bench-a100-n4.txt), each ring direction crossing a node through one port: so
    // 40.6 Gb/s per 100 Gb/s port (0.41 of line rate), shared by the GPUs like an IB NIC.
    p.nic_effective_GBps = (40.6 / 8.0) * cl.nic_Gbps / 100.0;
  }
  p.nics_per_node = static_cast<int>(cl.nics_per_node);
  p.gpus_per_node = static_cast<int>(cl.gpus_per_node);
  // NCCL 2.30 tuning.cc Ring/Simple latencies (hardware.md 3.2).
  p.coll_base_latency_s = 8.4e-6;
  p.coll_intra_hop_latency_s = (cl.intra_fabric == "pcie" ? 5.7e-6 : 3.4e-6);
  p.coll_inter_hop_latency_s = 14.0e-6;
  // Overlap slowdown: ~15% while NVLink collectives share SMs, 2-5% for network-only traffic
  // (Lee et al. 2025; Calculon processor_usage; hardware.md 5).
  p.overlap_slowdown_nvlink = 0.15;
  p.overlap_slowdown_network = 0.03;
  // [est] CUDA context (~0.5 GiB) + NCCL communicator buffers + allocator fragmentation.
  p.framework_overhead_bytes = 1.0 * 1073741824.0;
  return p;
}

std::vector<std::string> HardwareProfile::Estimates(bool flash_attention, Precision precision) const {
  std::vector<std::string> out;
  for (const Estimate& e : estimates) {
    if (e.unfused_attention_only && flash_attention) continue;
    if (e.gemm_precision && *e.gemm_precision != precision) continue;
    out.push_back(e.text);
  }
  return out;
}

std::optional<HardwareProfile::GemmRate> HardwareProfile::GemmRateOf(Precision p) const {
  if (p == Precision::kBf16 || p == Precision::kFp16) return GemmRate{p, gemm_peak_tflops, gemm_max_efficiency};
  for (const GemmRate& r : gemm_rates) {
    if (r.precision == p) return r;
  }
  return std::nullopt;
}

HardwareProfile WithGemmRateFor(HardwareProfile p, const Cluster& cl, Precision precision) {
  if (p.GemmRateOf(precision) || !cl.gpu.Runs(precision)) return p;
  const auto def = DefaultProfile(cl).GemmRateOf(precision);
  if (!def) return p;
  p.gemm_rates.push_back(*def);
  p.adjustments.push_back(fmt::format("{} GEMM rate from the built-in default for {} ({:g} TFLOP/s peak x {:.3f}): the "
                                      "profile has none",
                                      ToString(precision), cl.gpu.name, def->peak_tflops, def->max_efficiency));
  return p;
}

HardwareProfile WithAttentionKernel(HardwareProfile p, const std::string& arch, const std::string& kernel) {
  if (kernel == "default") return p;
  if (kernel != "fa2" && kernel != "fa3") {
    throw InputError("attention kernel: got \"" + kernel + "\", expected fa2, fa3 or default");
  }
  // The built-in default already runs FA2 on Ampere and FA3 on Hopper.
  const bool is_default_kernel = (arch == "ampere" && kernel == "fa2") || (arch == "hopper" && kernel == "fa3");
  if (is_default_kernel) return p;
  if (arch == "hopper" && kernel == "fa2") {
    p.attention_fwd_efficiency = 0.28;
    p.attention_bwd_efficiency = 0.27;
    p.attention_kernel = kernel;
    p.attention_tiles = "fa2";
    // A measured profile's head-dim data were another kernel's.
    p.attention_head_dim = 0;
    p.attention_fwd_head_dim_factor.clear();
    p.attention_bwd_head_dim_factor.clear();
    p.adjustments.push_back(std::string("attention: FlashAttention-2 on Hopper (0.28 / 0.27 of peak, FA3 paper's FA2 "
                                        "curves)") +
                            (p.kind == "measured" ? ", replacing the profile's attention rates" : ""));
    return p;
  }
  const std::string allowed = arch == "ampere" ? "default or fa2 (the same here)" : "default";
  throw InputError("command line: --attention-kernel: got \"" + kernel + "\" for a GPU of architecture " + arch +
                   ", expected " + allowed + ": rates are known for FA2 on Ampere and Hopper and FA3 on Hopper");
}

HardwareProfile WithPyTorchAttention(HardwareProfile p, const std::string& arch) {
  if (p.kind != "default" || arch != "hopper" || p.attention_kernel != "default") return p;
  p = WithAttentionKernel(std::move(p), arch, "fa2");
  p.adjustments.back() += ": PyTorch's SDPA flash kernel under --optimizer fsdp (--attention-kernel fa3 for Transformer "
                          "Engine's or cuDNN's attention)";
  return p;
}

namespace {

/// An array of [x, y] points with x > 0 increasing and y > 0: an efficiency that a duration is
/// divided by, or a time of x > 0 bytes (zero would be an infinite rate); `what` names the y in
/// the error.
std::vector<CurvePoint> ReadCurve(const JsonReader& r, const std::string& key, const char* what = "rate") {
  const Json& arr = r.Value(key);
  const std::string ptr = r.PointerTo(key);
  if (!arr.is_array() || arr.empty()) {
    throw InputError::Field(r.file(), ptr, JsonForMessage(arr), "a non-empty array of [x, y] pairs");
  }
  std::vector<CurvePoint> c;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const Json& pt = arr[i];
    const bool y_ok = pt.is_array() && pt.size() == 2 && pt[1].is_number() && pt[1].get<double>() > 0 &&
                      std::isfinite(pt[1].get<double>());
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !std::isfinite(pt[0].get<double>()) ||
        !(pt[0].get<double>() > 0) || !y_ok) {
      throw InputError::Field(r.file(), ptr + "/" + std::to_string(i), JsonForMessage(pt),
                              std::string(what) == "time"
                                  ? "a pair [x > 0, y > 0] (a zero time would make the bandwidth infinite)"
                                  : "a pair [x > 0, y > 0] (a zero rate would make durations infinite)");
    }
    if (!c.empty() && pt[0].get<double>() <= c.back().x) {
      throw InputError::Field(r.file(), ptr + "/" + std::to_string(i), JsonForMessage(pt),
                              "x values in increasing order");
    }
    c.push_back({pt[0].get<double>(), pt[1].get<double>()});
  }
  return c;
}

Json CurveToJson(const std::vector<CurvePoint>& c) {
  Json a = Json::array();
  for (const auto& p : c) a.push_back({p.x, p.y});
  return a;
}

CollectiveOp ParseOp(const JsonReader& r, const std::string& key) {
  std::string s = r.Enum(key, {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"});
  if (s == "all_reduce") return CollectiveOp::kAllReduce;
  if (s == "all_gather") return CollectiveOp::kAllGather;
  if (s == "reduce_scatter") return CollectiveOp::kReduceScatter;
  if (s == "alltoall") return CollectiveOp::kAllToAll;
  return CollectiveOp::kSendRecv;
}

/// The profile's `gemm` object: peak and efficiency curve, the other precisions' rates, samples.
void ReadGemm(const JsonReader& g, const std::string& file, HardwareProfile* p) {
  g.RejectUnknownKeys({"peak_tflops", "max_efficiency", "efficiency_vs_gflop", "samples", "precisions"});
  p->gemm_peak_tflops = g.Number("peak_tflops", 1e-6, 1e6);
  p->gemm_max_efficiency = g.Number("max_efficiency", 1e-4, 1.0);
  p->gemm_efficiency_vs_gflop = ReadCurve(g, "efficiency_vs_gflop");
  if (g.Has("precisions")) {
    JsonReader pr = g.Object("precisions");
    for (Precision prec : AllPrecisions()) {
      if (prec == Precision::kBf16 || prec == Precision::kFp16 || !pr.Has(ToString(prec))) continue;
      JsonReader e = pr.Object(ToString(prec));
      e.RejectUnknownKeys({"peak_tflops", "max_efficiency"});
      p->gemm_rates.push_back({prec, e.Number("peak_tflops", 1e-6, 1e6), e.Number("max_efficiency", 1e-4, 1.0)});
    }
    std::set<std::string> names;
    for (Precision prec : AllPrecisions()) {
      if (prec != Precision::kBf16 && prec != Precision::kFp16) names.insert(ToString(prec));
    }
    pr.RejectUnknownKeys(names);
  }
  if (g.Has("samples")) {
    const Json& arr = g.json().at("samples");
    if (!arr.is_array()) {
      throw InputError::Field(file, "/gemm/samples", JsonForMessage(arr), "an array");
    }
    for (std::size_t i = 0; i < arr.size(); ++i) {
      JsonReader s(arr[i], file, "/gemm/samples/" + std::to_string(i));
      s.RejectUnknownKeys({"m", "n", "k", "tflops", "dtype"});
      p->gemm_samples.push_back({static_cast<double>(s.Int("m", 1, 1 << 24)),
                                static_cast<double>(s.Int("n", 1, 1 << 24)),
                                static_cast<double>(s.Int("k", 1, 1 << 24)),
                                s.Number("tflops", 1e-9, 1e6)});
    }
  }
}

/// The profile's `attention` object: flash attention's efficiencies and their curves, the head
/// dimension and its factors, the unfused core's efficiency.
void ReadAttention(const JsonReader& a, HardwareProfile* p) {
  a.RejectUnknownKeys({"forward_efficiency", "backward_efficiency", "efficiency_vs_seq", "backward_efficiency_vs_seq",
                       "unfused_core_efficiency", "head_dim", "head_dim_factors", "kernel_head_dims"});
  if (a.Has("head_dim")) p->attention_head_dim = static_cast<int>(a.Int("head_dim", 1, 4096));
  if (a.Has("kernel_head_dims")) p->attention_tiles = a.Enum("kernel_head_dims", {"fa2", "fa3"});
  if (a.Has("head_dim_factors")) {
    JsonReader f = a.Object("head_dim_factors");
    f.RejectUnknownKeys({"forward", "backward"});
    p->attention_fwd_head_dim_factor = ReadCurve(f, "forward");
    p->attention_bwd_head_dim_factor = ReadCurve(f, "backward");
  }
  p->attention_fwd_efficiency = a.Number("forward_efficiency", 1e-4, 1.0);
  p->attention_bwd_efficiency = a.Number("backward_efficiency", 1e-4, 1.0);
  p->attention_efficiency_vs_seq = ReadCurve(a, "efficiency_vs_seq");
  if (a.Has("backward_efficiency_vs_seq")) p->attention_bwd_efficiency_vs_seq = ReadCurve(a, "backward_efficiency_vs_seq");
  if (a.Has("unfused_core_efficiency")) {
    p->unfused_attention_core_efficiency = a.Number("unfused_core_efficiency", 1e-3, 1.0);
  }
}

/// The profile's `collectives` object: bus bandwidths, NICs, latencies, a full mesh's links and
/// measured tables.
void ReadCollectives(const JsonReader& c, const std::string& file, HardwareProfile* p) {
  c.RejectUnknownKeys({"intra_busbw_GBps", "p2p_intra_GBps", "nic_effective_GBps", "nics_per_node",
                       "gpus_per_node", "base_latency_us", "intra_hop_latency_us",
                       "inter_hop_latency_us", "tables", "nvls_allreduce_busbw_GBps", "intra_mesh_links"});
  p->intra_busbw_GBps = c.Number("intra_busbw_GBps", 1e-6, 1e7);
  p->nvls_allreduce_busbw_GBps = c.OptNumber("nvls_allreduce_busbw_GBps", 0, 1e7).value_or(0);
  p->p2p_intra_GBps = c.Number("p2p_intra_GBps", 1e-6, 1e7);
  p->nic_effective_GBps = c.Number("nic_effective_GBps", 0, 1e7);
  p->nics_per_node = static_cast<int>(c.Int("nics_per_node", 0, 1 << 16));
  p->gpus_per_node = static_cast<int>(c.Int("gpus_per_node", 1, 1 << 20));
  p->intra_mesh_links = static_cast<int>(c.OptInt("intra_mesh_links", 1, 1 << 20).value_or(0));
  if (p->intra_mesh_links > 0 && p->intra_mesh_links != p->gpus_per_node - 1) {
    throw InputError::Field(file, "/collectives/intra_mesh_links", std::to_string(p->intra_mesh_links),
                            fmt::format("gpus_per_node - 1 = {} (a full mesh: one link a peer), or the key left out",
                                        p->gpus_per_node - 1));
  }
  p->coll_base_latency_s = c.Number("base_latency_us", 0, 1e6) / 1e6;
  p->coll_intra_hop_latency_s = c.Number("intra_hop_latency_us", 0, 1e6) / 1e6;
  p->coll_inter_hop_latency_s = c.Number("inter_hop_latency_us", 0, 1e6) / 1e6;
  if (c.Has("tables")) {
    const Json& arr = c.json().at("tables");
    if (!arr.is_array()) {
      throw InputError::Field(file, "/collectives/tables", JsonForMessage(arr), "an array");
    }
    for (std::size_t i = 0; i < arr.size(); ++i) {
      JsonReader t(arr[i], file, "/collectives/tables/" + std::to_string(i));
      t.RejectUnknownKeys({"op", "ranks", "nodes", "bytes_to_seconds", "busbw_GBps", "alpha_us",
                           "beta_GBps"});
      CollectiveTable ct;
      ct.op = ParseOp(t, "op");
      ct.ranks = static_cast<int>(t.Int("ranks", 1, 1 << 24));
      ct.nodes = static_cast<int>(t.Int("nodes", 1, 1 << 24));
      ct.bytes_to_seconds = ReadCurve(t, "bytes_to_seconds", "time");
      p->collective_tables.push_back(std::move(ct));
    }
  }
}

/// The profile's `cluster` object: the machine it measured.
ProfileMachine ReadProfileMachine(const JsonReader& c) {
  c.RejectUnknownKeys({"name", "devices_per_node", "nodes", "memory_GiB_per_device", "tdp_W"});
  ProfileMachine pm;
  pm.name = c.OptString("name").value_or("measured machine");
  pm.devices_per_node = static_cast<int>(c.Int("devices_per_node", 1, 1 << 20));
  pm.nodes = static_cast<int>(c.Int("nodes", 1, 1 << 24));
  pm.memory_bytes_per_device = c.Number("memory_GiB_per_device", 1e-6, 1e7) * 1073741824.0;
  pm.tdp_W = c.OptNumber("tdp_W", 0, 1e6).value_or(0);
  return pm;
}

}  // namespace

HardwareProfile ProfileFromJson(const Json& j, const std::string& file) {
  JsonReader r(j, file);
  if (r.String("format") != "shardcast-hardware-profile") {
    throw InputError::Field(file, "/format", JsonForMessage(j.at("format")),
                            "\"shardcast-hardware-profile\"");
  }
  r.RejectUnknownKeys({"format", "version", "kind", "gpu", "conditions", "gemm", "attention",
                       "memory", "launch_overhead_us", "collectives", "overlap",
                       "framework_overhead_GiB", "cluster"});
  HardwareProfile p;
  p.version = static_cast<int>(r.Int("version", 1, 1));
  p.kind = r.Enum("kind", {"default", "measured"});
  p.gpu = r.String("gpu");
  if (r.Has("conditions")) {
    JsonReader c = r.Object("conditions");
    p.source = c.OptString("source").value_or("");
    p.date = c.OptString("date").value_or("");
  }
  ReadGemm(r.Object("gemm"), file, &p);
  ReadAttention(r.Object("attention"), &p);
  JsonReader m = r.Object("memory");
  m.RejectUnknownKeys({"hbm_GBps", "efficiency_vs_bytes", "memcpy_d2d_GBps"});
  p.hbm_GBps = m.Number("hbm_GBps", 1e-3, 1e7);
  p.memcpy_d2d_GBps = m.OptNumber("memcpy_d2d_GBps", 0, 1e7).value_or(0);
  p.memory_efficiency_vs_bytes = ReadCurve(m, "efficiency_vs_bytes");
  // Microsecond fields are divided by 1e6, not multiplied by 1e-6: the writer's * 1e6 then reads
  // back to the same double far more often (the built-in defaults all do).
  p.launch_overhead_s = r.Number("launch_overhead_us", 0, 1e6) / 1e6;
  ReadCollectives(r.Object("collectives"), file, &p);
  JsonReader o = r.Object("overlap");
  o.RejectUnknownKeys({"compute_slowdown_nvlink", "compute_slowdown_network"});
  p.overlap_slowdown_nvlink = o.Number("compute_slowdown_nvlink", 0, 10);
  p.overlap_slowdown_network = o.Number("compute_slowdown_network", 0, 10);
  p.framework_overhead_bytes = r.Number("framework_overhead_GiB", 0, 1e4) * 1073741824.0;
  if (r.Has("cluster")) p.machine = ReadProfileMachine(r.Object("cluster"));
  return p;
}

Cluster ClusterFromProfile(const HardwareProfile& p, const std::string& file) {
  Cluster c;
  bool preset = false;
  for (const auto& name : PresetNames(PresetKind::kGpu)) {
    if (name == p.gpu) preset = true;
  }
  if (preset) {
    c.gpu = LoadGpu(p.gpu);
  } else if (!p.machine) {
    throw InputError(file + ": /cluster: missing, expected a \"cluster\" section (or \"gpu\" naming a GPU preset) "
                            "so the profile says what machine it measured; or give --cluster");
  } else {
    c.gpu.name = p.gpu;
    c.gpu.display_name = p.gpu == "cpu" ? "CPU rank (Eigen fp32)" : p.gpu;
    c.gpu.arch = "measured";
    c.gpu.peak_bf16_tflops = c.gpu.peak_fp16_tflops = c.gpu.peak_fp32_tflops = p.gemm_peak_tflops;
    c.gpu.hbm_bandwidth_GBps = p.hbm_GBps;
    c.gpu.source = "measured profile " + file;
  }
  if (p.machine) {
    c.gpu.memory_bytes = p.machine->memory_bytes_per_device;
    if (p.machine->tdp_W > 0) c.gpu.tdp_W = p.machine->tdp_W;
    c.gpus_per_node = p.machine->devices_per_node;
    c.num_gpus = static_cast<std::int64_t>(p.machine->devices_per_node) * p.machine->nodes;
    c.name = p.machine->name;
  } else {
    c.gpus_per_node = p.gpus_per_node;
    c.name = "profile " + file;
  }
  c.intra_fabric = "measured";
  c.intra_GBps_per_direction = p.intra_busbw_GBps;
  c.nics_per_node = p.nics_per_node;
  c.nic_Gbps = p.nic_effective_GBps * 8.0;
  c.source = "measured profile " + file;
  return c;
}

HardwareProfile LoadProfile(const std::string& path) { return ProfileFromJson(ReadJsonFile(path), path); }

Json ProfileToJson(const HardwareProfile& p) {
  Json j;
  j["format"] = "shardcast-hardware-profile";
  j["version"] = p.version;
  j["kind"] = p.kind;
  j["gpu"] = p.gpu;
  j["conditions"] = {{"source", p.source}, {"date", p.date}};
  j["gemm"] = {{"peak_tflops", p.gemm_peak_tflops},
               {"max_efficiency", p.gemm_max_efficiency},
               {"efficiency_vs_gflop", CurveToJson(p.gemm_efficiency_vs_gflop)}};
  if (!p.gemm_rates.empty()) {
    Json rates = Json::object();
    for (const auto& r : p.gemm_rates) {
      rates[ToString(r.precision)] = {{"peak_tflops", r.peak_tflops}, {"max_efficiency", r.max_efficiency}};
    }
    j["gemm"]["precisions"] = rates;
  }
  if (!p.gemm_samples.empty()) {
    Json s = Json::array();
    for (const auto& g : p.gemm_samples) s.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"tflops", g.tflops}});
    j["gemm"]["samples"] = s;
  }
  j["attention"] = {{"forward_efficiency", p.attention_fwd_efficiency},
                    {"backward_efficiency", p.attention_bwd_efficiency},
                    {"efficiency_vs_seq", CurveToJson(p.attention_efficiency_vs_seq)},
                    {"unfused_core_efficiency", p.unfused_attention_core_efficiency}};
  if (p.attention_head_dim > 0) j["attention"]["head_dim"] = p.attention_head_dim;
  if (!p.attention_tiles.empty()) j["attention"]["kernel_head_dims"] = p.attention_tiles;
  if (!p.attention_fwd_head_dim_factor.empty()) {
    j["attention"]["head_dim_factors"] = {{"forward", CurveToJson(p.attention_fwd_head_dim_factor)},
                                          {"backward", CurveToJson(p.attention_bwd_head_dim_factor)}};
  }
  if (!p.attention_bwd_efficiency_vs_seq.empty()) {
    j["attention"]["backward_efficiency_vs_seq"] = CurveToJson(p.attention_bwd_efficiency_vs_seq);
  }
  j["memory"] = {{"hbm_GBps", p.hbm_GBps}, {"efficiency_vs_bytes", CurveToJson(p.memory_efficiency_vs_bytes)}};
  if (p.memcpy_d2d_GBps > 0) j["memory"]["memcpy_d2d_GBps"] = p.memcpy_d2d_GBps;
  j["launch_overhead_us"] = p.launch_overhead_s * 1e6;
  j["collectives"] = {{"intra_busbw_GBps", p.intra_busbw_GBps},
                      {"p2p_intra_GBps", p.p2p_intra_GBps},
                      {"nic_effective_GBps", p.nic_effective_GBps},
                      {"nics_per_node", p.nics_per_node},
                      {"gpus_per_node", p.gpus_per_node},
                      {"base_latency_us", p.coll_base_latency_s * 1e6},
                      {"intra_hop_latency_us", p.coll_intra_hop_latency_s * 1e6},
                      {"inter_hop_latency_us", p.coll_inter_hop_latency_s * 1e6}};
  if (p.nvls_allreduce_busbw_GBps > 0) j["collectives"]["nvls_allreduce_busbw_GBps"] = p.nvls_allreduce_busbw_GBps;
  if (p.intra_mesh_links > 0) j["collectives"]["intra_mesh_links"] = p.intra_mesh_links;
  if (!p.collective_tables.empty()) {
    Json t = Json::array();
    for (const auto& ct : p.collective_tables) {
      t.push_back({{"op", ToString(ct.op)}, {"ranks", ct.ranks}, {"nodes", ct.nodes},
                   {"bytes_to_seconds", CurveToJson(ct.bytes_to_seconds)}});
    }
    j["collectives"]["tables"] = t;
  }
  j["overlap"] = {{"compute_slowdown_nvlink", p.overlap_slowdown_nvlink},
                  {"compute_slowdown_network", p.overlap_slowdown_network}};
  j["framework_overhead_GiB"] = p.framework_overhead_bytes / 1073741824.0;
  if (p.machine) {
    j["cluster"] = {{"name", p.machine->name},
                    {"devices_per_node", p.machine->devices_per_node},
                    {"nodes", p.machine->nodes},
                    {"memory_GiB_per_device", p.machine->memory_bytes_per_device / 1073741824.0},
                    {"tdp_W", p.machine->tdp_W}};
  }
  return j;
}

bool ProfileDescribesGpu(const HardwareProfile& p, const Gpu& gpu) {
  const std::string measured = BareGpuName(p.gpu);
  return !measured.empty() && (measured == BareGpuName(gpu.name) || measured == BareGpuName(gpu.display_name));
}

std::string ProfileNetworkDiffers(const HardwareProfile& p, const Cluster& cl, std::int64_t gpus) {
  std::vector<std::string> d;
  // The simulator takes the NIC share per GPU and the intra-node busbw from the profile, and the
  // node layout from the cluster; so only rates above what the cluster's links carry tell of
  // another machine (a measured rate below line rate is what measuring is for).
  if (cl.HasInterNodeNetwork() && gpus > cl.gpus_per_node && cl.gpus_per_node > 0) {
    const double line_share = cl.NodeNetworkGBps() / static_cast<double>(cl.gpus_per_node);
    if (p.NicShareGBps() > 1.05 * line_share) {
      d.push_back(fmt::format("network {:.1f} GB/s per GPU, above the {:.1f} GB/s per GPU of the cluster's NICs at line "
                              "rate ({} x {:g} Gb/s for {} GPUs)",
                              p.NicShareGBps(), line_share, cl.nics_per_node, cl.nic_Gbps, cl.gpus_per_node));
    }
  }
  if (cl.intra_GBps_per_direction > 0 && p.intra_busbw_GBps > 1.3 * cl.intra_GBps_per_direction) {
    d.push_back(fmt::format("intra-node busbw {:.0f} GB/s, above the cluster's {} at {:g} GB/s per direction",
                            p.intra_busbw_GBps, cl.intra_fabric, cl.intra_GBps_per_direction));
  }
  return Join(d, "; ");
}

}  // namespace shardcast
