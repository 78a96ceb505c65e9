#pragma once
/// \file profile.h
/// The hardware profile: how fast one GPU (and its fabrics) runs each kind of op. Written by
/// `shardcast calibrate` from measurements, or built in as a default per GPU preset from spec
/// sheets and public measurements (docs/profile.md gives the format and every default's source).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json_reader.h"
#include "models/hardware.h"

namespace shardcast {

/// Collective operations, named as nccl-tests names them.
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
const char* ToString(CollectiveOp op);

/// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw * factor(n).
/// all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; send/recv 1.
double BusBwFactor(CollectiveOp op, int ranks);

/// A point on a piecewise log-linear curve.
struct CurvePoint {
  double x = 0;
  double y = 0;
};
/// y at x, interpolated linearly in log(x) between points (sorted by x), clamped at the ends.
double InterpolateLogX(const std::vector<CurvePoint>& curve, double x);

/// A measured GEMM: C[m,n] = A[m,k] B[k,n] achieved `tflops`.
struct GemmSample {
  double m = 0, n = 0, k = 0;
  double tflops = 0;
};

/// A measured collective: time per message size for one (op, ranks, nodes).
struct CollectiveTable {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int ranks = 0;
  int nodes = 1;
  std::vector<CurvePoint> bytes_to_seconds;  ///< x = message size as nccl-tests' `size`, y = s
};

/// The machine a measured profile describes, so that `simulate --profile FILE` needs no cluster.
struct ProfileMachine {
  std::string name;                ///< e.g. "cpu-ranks on host1" or "8x NVIDIA H200"
  int devices_per_node = 1;        ///< GPUs (or CPU ranks) sharing the fast fabric
  int nodes = 1;
  double memory_bytes_per_device = 0;
  double tdp_W = 0;
};

struct HardwareProfile {
  int version = 1;
  std::string kind;  ///< "default" or "measured"
  std::string gpu;   ///< GPU preset name it describes
  std::string source;
  /// In-memory changes made to the profile after it was built or loaded (e.g. WithAttentionKernel),
  /// one line each, for reports; not written to JSON.
  std::vector<std::string> adjustments;
  /// Built-in defaults that have no public measurement for this GPU or fabric and were carried
  /// over from another GPU or estimated, one line each, for reports (Estimates() picks those a
  /// configuration uses); empty for A100 on NVLink. In memory only, not written to profile JSON.
  struct Estimate {
    Estimate(std::string t, bool unfused_only = false, std::optional<Precision> gemm = std::nullopt)
        : text(std::move(t)), unfused_attention_only(unfused_only), gemm_precision(gemm) {}
    std::string text;
    bool unfused_attention_only = false;  ///< matters only without flash attention
    /// Matters only for runs whose linear-layer GEMMs use this precision (a GEMM rate).
    std::optional<Precision> gemm_precision;
  };
  std::vector<Estimate> estimates;
  /// The estimate lines that matter for a run with or without flash attention, in `precision`.
  std::vector<std::string> Estimates(bool flash_attention, Precision precision = Precision::kBf16) const;
  /// The attention kernel WithAttentionKernel switched the rates to ("fa2" on Hopper), or
  /// "default" when the profile's own rates apply; in memory only, like `adjustments`.
  std::string attention_kernel = "default";
  std::string date;

  // GEMM: t = max(flops / (peak * max_eff * g(GFLOP)), bytes / (hbm * mem_eff)) + launch
  double gemm_peak_tflops = 0;
  double gemm_max_efficiency = 0;
  std::vector<CurvePoint> gemm_efficiency_vs_gflop;  ///< g(F), relative to max_efficiency
  std::vector<GemmSample> gemm_samples;              ///< measured shapes (override the curve)
  /// GEMMs in another precision than the base (bf16 = fp16) one: their dense peak and the best
  /// fraction of it reached. The shape curve g(F) and the samples apply to every precision,
  /// scaled by max_efficiency / gemm_max_efficiency (a shape that loses 20% in bf16 loses 20%
  /// in fp8).
  struct GemmRate {
    Precision precision = Precision::kBf16;
    double peak_tflops = 0;
    double max_efficiency = 0;
  };
  std::vector<GemmRate> gemm_rates;
  /// The rate of GEMMs in `p`: the base rate for bf16 and fp16, else the entry of gemm_rates;
  /// none when the profile has no rate for `p`.
  std::optional<GemmRate> GemmRateOf(Precision p) const;

  // Attention (flash): achieved fraction of the bf16 peak, forward and backward, at the curves'
  // reference length (the sequence where they are 1; 2k in the built-in defaults), scaled by
  // attention_efficiency_vs_seq (forward) and attention_bwd_efficiency_vs_seq (backward) at
  // other lengths.
  double attention_fwd_efficiency = 0;
  double attention_bwd_efficiency = 0;
  std::vector<CurvePoint> attention_efficiency_vs_seq;  ///< forward's relative factor by sequence length
  /// Backward's relative factor by sequence length; empty: the forward's curve (profiles written
  /// before 2026-12 have one curve).
  std::vector<CurvePoint> attention_bwd_efficiency_vs_seq;
  /// The head dimension the efficiencies and curves above were measured at (0: not stated), and
  /// the forward's and backward's relative factors by head dimension (x = head dim, y = the
  /// efficiency at that head dim over the one at attention_head_dim; interpolated in log(head
  /// dim), clamped; empty: 1 at every head dim). A calibration that times several head dims
  /// writes them (JSON attention.head_dim, head_dim_factors.forward / .backward).
  int attention_head_dim = 0;
  std::vector<CurvePoint> attention_fwd_head_dim_factor, attention_bwd_head_dim_factor;
  /// Whose flash-attention kernels the efficiencies above are rates of, for the head dimension
  /// those kernels compute on (FlashKernelHeadDim): "fa2" (FlashAttention-2), "fa3"
  /// (FlashAttention-3), or "" (not known: the head dimension as given). The built-in default
  /// is fa2 on Ampere and fa3 on Hopper (JSON attention.kernel_head_dims, optional). Ignored
  /// where head_dim_factors were measured.
  std::string attention_tiles;
  /// Unfused attention (no flash): the attention core's kernels (the batched score and context
  /// GEMMs, one dimension the head dim, and the softmax and dropout passes over the s x s
  /// scores) take their cost-model time (GemmTime / MemoryBoundTime: the profile's GEMM and
  /// memory efficiency curves, launch included) divided by this. 1 = no correction, the value
  /// when a profile file omits it. Default 0.765, fitted on Korthikanti et al. 2022 Table 4
  /// (docs/accuracy.md); a calibrated profile keeps it, as calibration does not time this core.
  double unfused_attention_core_efficiency = 1.0;

  // Memory-bound kernels: achieved fraction of HBM bandwidth by bytes moved.
  double hbm_GBps = 0;
  std::vector<CurvePoint> memory_efficiency_vs_bytes;
  /// A calibration's device-to-device cudaMemcpy of 1 GiB in the same run, read + write GB/s: the
  /// reference the memory-bound peak is judged against (0: not measured; JSON
  /// memory.memcpy_d2d_GBps, written when measured).
  double memcpy_d2d_GBps = 0;
  double launch_overhead_s = 0;

  // Collectives (alpha-beta, NCCL ring/Simple form) unless a measured table matches.
  double intra_busbw_GBps = 0;         ///< ring busbw inside a node (all GPUs of the node)
  /// NCCL's NVLink SHARP (NVLS) all-reduce busbw inside a node; 0 where the fabric has none.
  /// An all-reduce on one node runs at the faster of it and the ring's.
  double nvls_allreduce_busbw_GBps = 0;
  double nic_effective_GBps = 0;       ///< per NIC
  int nics_per_node = 0;
  int gpus_per_node = 0;
  double p2p_intra_GBps = 0;           ///< point-to-point inside a node
  /// A node whose GPUs are fully meshed without a switch (AMD's Infinity Fabric / xGMI): the links
  /// of each GPU, one per peer (gpus_per_node - 1); 0 for a switched fabric (NVSwitch, PCIe).
  /// intra_busbw_GBps is then the whole node's, over all of them.
  int intra_mesh_links = 0;
  /// The ring busbw of a collective over `ranks` GPUs of one node: intra_busbw_GBps on a switched
  /// fabric; on a full mesh the share of it their links carry, intra_busbw_GBps x (ranks - 1) /
  /// intra_mesh_links (a group of k GPUs drives k - 1 of each GPU's links).
  /// One rank (a group with one GPU a node) crosses no link of the node: no cap, the whole rate.
  double IntraGroupBusbwGBps(int ranks) const {
    if (intra_mesh_links <= 0 || ranks <= 1 || ranks - 1 >= intra_mesh_links) return intra_busbw_GBps;
    return intra_busbw_GBps * static_cast<double>(ranks - 1) / intra_mesh_links;
  }
  double coll_base_latency_s = 0;      ///< NCCL baseLatencies Ring Simple
  double coll_intra_hop_latency_s = 0; ///< NCCL hwLatencies NVLINK/PCI Ring Simple, per step
  double coll_inter_hop_latency_s = 0; ///< NCCL hwLatencies NET Ring Simple, per step
  std::vector<CollectiveTable> collective_tables;

  // Overlap: compute slows by this fraction while a collective of the same GPU runs.
  double overlap_slowdown_nvlink = 0;
  double overlap_slowdown_network = 0;

  double framework_overhead_bytes = 0;  ///< CUDA context, NCCL buffers, fragmentation
  std::optional<ProfileMachine> machine;  ///< present in measured profiles

  /// Per-GPU share of the node's NICs, GB/s.
  double NicShareGBps() const;
};

/// The built-in default profile for a cluster's GPU and fabric (sources in docs/profile.md).
HardwareProfile DefaultProfile(const Cluster& cluster);

/// Built-in default constants fitted on measurements of runs that are also rows of
/// validation/published_runs.csv; every other row is their held-out check (docs/accuracy.md,
/// "Global constants fitted, and how"). The runs are named by content (source_id, model and GPU
/// count columns), so renumbered rows still match.
struct ValidationFit {
  std::string constant;  ///< what was fitted, with its value and the data it was fitted on
  std::string source_id, model;  ///< the rows' source_id and model columns
  std::vector<std::int64_t> gpus;  ///< the rows' num_gpus values
  std::vector<std::int64_t> seq_lengths;  ///< the rows' seq_len values; empty: any
  std::string dp_sharding;  ///< text the rows' dp_sharding column contains; empty: any
};

/// Every built-in constant fitted on validation runs: the Hopper sustained GEMM / MAMF ratio on
/// the three MPT-13B H100 step times (rows 211-213), and the A100 ratio and the unfused attention
/// core efficiency on Korthikanti et al. 2022 Table 4's per-layer times of the 22B runs whose
/// iteration times are rows 32-33; and, though no constant, the causal reading of NeMo's
/// long-sequence TFLOP/s (S7 rows 68-76), chosen with those rows; and the imbalance of a
/// global-batch-balanced router (kGlobalBatchRouterImbalance) on the MoE table's Qwen3-235B-A22B
/// pair at 16K tokens (published_runs_moe.csv rows 52-53).
const std::vector<ValidationFit>& FitsOnValidationRows();

/// The profile with the attention efficiencies of a named kernel: "fa2" (FlashAttention-2) on
/// Hopper runs at about 0.28 (forward, causal) and 0.27 (backward) of the bf16 peak at 2k tokens
/// (FA3 paper figures for FA2, hd128), half of FA3; this replaces a measured profile's rates too
/// (the adjustment line says so). "fa2" on Ampere and "fa3" on Hopper are the built-in defaults
/// (profile unchanged); "default" changes nothing. Throws InputError for an unknown kernel or a
/// kernel without known rates on `arch`.
HardwareProfile WithAttentionKernel(HardwareProfile profile, const std::string& arch,
                                    const std::string& kernel);
/// The profile a PyTorch-native run attends with (torchtitan's, PyTorch FSDP's: --optimizer
/// fsdp): PyTorch's scaled-dot-product attention runs its flash backend, FlashAttention-2's
/// kernels (aten/src/ATen/native/transformers/cuda/flash_attn), so on Hopper the built-in
/// profile's FA3 rates become FA2's (WithAttentionKernel "fa2"), said in an adjustment line.
/// Unchanged for a measured profile, a profile whose kernel was already chosen, or another
/// architecture.
HardwareProfile WithPyTorchAttention(HardwareProfile profile, const std::string& arch);
/// The profile with a GEMM rate for `precision`: unchanged when it has one; else, for a GPU that
/// runs the precision, the built-in default's rate for `cl` (its dense peak and maximum
/// efficiency), said in an adjustment line (a calibration that timed bf16 GEMMs only still
/// predicts an FP8 run). Unchanged otherwise (GemmTime then names the missing rate).
HardwareProfile WithGemmRateFor(HardwareProfile profile, const Cluster& cl, Precision precision);
/// The cluster a measured profile describes: its GPU preset when `gpu` names one (memory from
/// the machine section if given), else a device built from the profile (peak = GEMM peak).
/// InputError when the profile has neither a GPU preset nor a machine section.
Cluster ClusterFromProfile(const HardwareProfile& p, const std::string& file);

/// Whether a profile's `gpu` (a preset name, or a raw CUDA device name such as "NVIDIA L4" for a
/// GPU without a preset) names `gpu`: equal to its name or display name, ignoring case and an
/// "NVIDIA " prefix.
bool ProfileDescribesGpu(const HardwareProfile& p, const Gpu& gpu);

/// Where a profile's network rates exceed what `cl`'s links can carry for a run on `gpus` GPUs,
/// or "" when they do not: the per-GPU NIC share (NicShareGBps) above 1.05 x the cluster's line
/// rate per GPU (checked only when the run spans nodes), or the intra-node busbw above 1.3 x the
/// cluster's per-direction rate (room for NVLink SHARP busbw). The simulator takes these rates
/// from the profile and the node layout from the cluster, so such a pairing runs the cluster
/// at another machine's speed. Rates below the links' are not flagged (measurements are).
std::string ProfileNetworkDiffers(const HardwareProfile& p, const Cluster& cl, std::int64_t gpus);

/// Reads a profile JSON; errors name file, pointer, value.
HardwareProfile LoadProfile(const std::string& path);
HardwareProfile ProfileFromJson(const Json& j, const std::string& file);
Json ProfileToJson(const HardwareProfile& p);

}  // namespace shardcast
