#pragma once
/// \file hardware.h
/// GPU and cluster descriptions (models/gpu/*.json, models/cluster/*.json; schema in
/// docs/inputs.md). Bandwidths are GB/s = 1e9 B/s per direction; memory in bytes.

#include <cstdint>
#include <optional>
#include <string>

namespace shardcast {

enum class Precision { kBf16, kFp16, kFp8, kFp32 };
const char* ToString(Precision p);

struct Gpu {
  std::string name;
  std::string display_name;
  std::string arch;
  double peak_fp32_tflops = 0;
  double peak_tf32_tflops = 0;
  double peak_bf16_tflops = 0;
  double peak_fp16_tflops = 0;
  std::optional<double> peak_fp8_tflops;  ///< none on A100
  double memory_bytes = 0;                ///< device memory as the driver reports it
  double hbm_bandwidth_GBps = 0;
  std::int64_t sm_count = 0;
  double nvlink_GBps_per_direction = 0;
  double pcie_GBps_per_direction = 0;
  double tdp_W = 0;
  double price_usd_per_gpu_hour = 0;
  std::string price_date;
  std::string price_source;
  std::string source;

  /// Dense peak FLOP/s for `p`; InputError-free: returns 0 when the GPU lacks the type.
  double PeakFlops(Precision p) const;
};

struct Cluster {
  std::string name;
  Gpu gpu;
  std::int64_t gpus_per_node = 8;
  std::string intra_fabric;  ///< nvswitch | pcie | xgmi
  double intra_GBps_per_direction = 0;
  std::int64_t nics_per_node = 0;
  double nic_Gbps = 0;
  std::string inter_fabric;
  std::optional<std::int64_t> num_gpus;
  std::string source;

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
