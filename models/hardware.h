#pragma once
/// \file hardware.h
/// GPU and cluster descriptions (models/gpu/*.json, models/cluster/*.json; schema in
/// docs/inputs.md). Bandwidths are GB/s = 1e9 B/s per direction; memory in bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardcast {

/// The training precision, as Megatron-LM's flags set it (docs/simulator.md, "Precisions"):
///  - kBf16, kFp16: 16-bit mixed precision (--bf16 / --fp16), fp32 master weights;
///  - kFp8: bf16 mixed precision with the linear layers' GEMMs in FP8 (Transformer Engine,
///    --fp8-format hybrid|e4m3 with a per-tensor recipe, delayed or current scaling; or the
///    1x128/128x128 block-scaled recipe, --fp8-recipe blockwise);
///  - kMxfp8: the same with MXFP8 (OCP microscaling: E4M3 elements, one E8M0 scale per 32
///    elements; --fp8-recipe mxfp8), Blackwell tensor cores;
///  - kNvfp4: the linear layers in NVFP4 (E2M1 elements, one E4M3 scale per 16 elements and a
///    per-tensor fp32 scale; --fp4-format e2m1 --fp4-recipe nvfp4), Blackwell tensor cores;
///  - kTf32, kFp32: fp32 training (weights, gradients and activations in fp32), GEMMs on TF32
///    tensor cores or fp32 CUDA cores.
enum class Precision { kBf16, kFp16, kFp8, kMxfp8, kNvfp4, kTf32, kFp32 };
const char* ToString(Precision p);
/// The precision named `name` (ToString's names, case-insensitive), or none.
std::optional<Precision> ParsePrecision(const std::string& name);
/// Every precision, in ToString order of the enum.
const std::vector<Precision>& AllPrecisions();
/// Whether the linear layers' GEMMs run in a format below 16 bits (fp8, mxfp8, nvfp4); the rest
/// of the model (attention core, embedding, output layer, norms) stays in the 16-bit dtype.
bool IsLowPrecision(Precision p);
/// The 16- or 32-bit dtype of weights and activations: bf16 under the low-precision formats,
/// fp32 under tf32/fp32, else `p` itself.
Precision ModelDtype(Precision p);
/// The precision whose dense peak MFU and HFU divide by: the 16-bit one under the low-precision
/// formats (the convention of NVIDIA's and Meta's reports, so that an FP8 run's MFU compares
/// with a bf16 run's), else `p`.
inline Precision MfuPeakPrecision(Precision p) { return IsLowPrecision(p) ? Precision::kBf16 : p; }
/// Bytes of one element of the model dtype: 2 (bf16/fp16 and the low-precision formats), 4 (tf32/fp32).
double ModelDtypeBytes(Precision p);

struct Gpu {
  std::string name;
  std::string display_name;
  std::string arch;
  /// Whether FlashAttention runs on it: FA1 needs Turing (sm75) or later, FA2 Ampere (Dao et al.'s
  /// flash-attention README), so not Volta (V100, sm70), which runs the unfused attention.
  bool HasFlashAttention() const { return arch != "volta"; }
  double peak_fp32_tflops = 0;
  double peak_tf32_tflops = 0;
  double peak_bf16_tflops = 0;
  double peak_fp16_tflops = 0;
  std::optional<double> peak_fp8_tflops;    ///< none on A100 and V100
  std::optional<double> peak_mxfp8_tflops;  ///< block-scaled FP8 (Blackwell)
  std::optional<double> peak_nvfp4_tflops;  ///< block-scaled FP4 (Blackwell)
  double memory_bytes = 0;                ///< device memory as the driver reports it
  double hbm_bandwidth_GBps = 0;
  std::int64_t sm_count = 0;
  double nvlink_GBps_per_direction = 0;
  double pcie_GBps_per_direction = 0;  ///< the host link (PCIe, or NVLink-C2C on Grace superchips)
  /// GPUs that share that host link and use it at once (2 on a GB200/GB300 superchip: one Grace,
  /// two GPUs, one C2C link); 1 where each GPU has its own.
  int host_link_shared_by = 1;
  double tdp_W = 0;
  /// Measured maximum achievable matmul TFLOP/s of this GPU (stas00/ml-engineering's MAMF table),
  /// 16-bit and FP8; 0 where the GPU file gives none (its architecture's measurement on another
  /// GPU stands in, said as a profile estimate).
  double mamf_bf16_tflops = 0, mamf_fp8_tflops = 0;
  /// Measured ring busbw (nccl-tests all-reduce) among the GPUs of one NVLink node, GB/s; 0 where
  /// the GPU file gives none (its architecture's reference GPU's fraction of the line rate stands in).
  double nvlink_ring_busbw_GBps = 0;
  double price_usd_per_gpu_hour = 0;
  std::string price_date;
  std::string price_source;
  std::string source;

  /// Dense peak FLOP/s of the GEMMs that run in `p` (the linear layers' format for fp8, mxfp8
  /// and nvfp4); 0 when the GPU lacks the type.
  double PeakFlops(Precision p) const;
  /// Whether the GPU runs training in `p`: its peak is known and so is the model dtype's.
  bool Runs(Precision p) const { return PeakFlops(p) > 0 && PeakFlops(ModelDtype(p)) > 0; }
  /// The precisions the GPU runs, with their dense peaks: "bf16 989.4, fp16 989.4, fp8 1978.9,
  /// tf32 494.7, fp32 66.9 TFLOP/s".
  std::string PrecisionList() const;
};

struct Cluster {
  std::string name;
  Gpu gpu;
  std::int64_t gpus_per_node = 8;
  /// GPUs of one host (one operating system, torchrun's --nproc-per-node): gpus_per_node unless
  /// the scale-up domain spans hosts (GB200 NVL72: 18 compute trays of 4 GPUs); 0: gpus_per_node
  /// (GpusPerHost).
  std::int64_t gpus_per_host = 0;
  std::string intra_fabric;  ///< nvswitch | pcie | xgmi
  double intra_GBps_per_direction = 0;
  std::int64_t nics_per_node = 0;
  double nic_Gbps = 0;
  std::string inter_fabric;
  std::optional<std::int64_t> num_gpus;
  std::string source;

  std::int64_t GpusPerHost() const { return gpus_per_host > 0 ? gpus_per_host : gpus_per_node; }
  /// Network bandwidth out of one node, GB/s per direction (NICs x rate / 8).
  double NodeNetworkGBps() const { return static_cast<double>(nics_per_node) * nic_Gbps / 8.0; }
  /// Whether nodes are connected at all: inter_node.fabric is not "none" and the NICs have a
  /// rate. Without it a configuration can use one node only.
  bool HasInterNodeNetwork() const { return inter_fabric != "none" && nics_per_node > 0 && nic_Gbps > 0; }
};

/// A GPU name as tools print it, compared loosely: lower case, without a leading "nvidia "
/// (nvidia-smi and CUDA print "NVIDIA H200"; older drivers and presets leave the prefix out).
std::string BareGpuName(const std::string& name);

}  // namespace shardcast
