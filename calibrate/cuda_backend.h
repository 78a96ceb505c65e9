#pragma once
/// \file cuda_backend.h
/// The CUDA measurements of `calibrate --backend cuda`, behind a plain C++ interface so that the
/// CUDA translation unit needs none of the project's JSON headers. Built only where the CUDA
/// toolkit is found (cuda_backend.cu); elsewhere cuda_backend_stub.cc reports it absent.

#include <array>
#include <string>
#include <vector>

namespace shardcast::cuda {

struct GemmSample {
  int m = 0, n = 0, k = 0;
  double heuristic0_s = 0;  ///< cuBLASLt heuristic algorithm #0 (what frameworks run)
  double best_s = 0;        ///< best of the top few heuristic algorithms
  /// Read through NVML while the shape ran back to back just before it was timed (0: not
  /// read): the SM clock, the GPU temperature and the board power.
  int sm_clock_mhz = 0, temperature_c = 0;
  double power_w = 0;
};
struct MemSample {
  double bytes = 0, seconds = 0;
};
/// One fused attention configuration timed with cuDNN's SDPA: `batch` sequences of `seq` tokens,
/// `heads` query heads over `kv_heads` key/value heads (GQA), `head_dim`, causal (top-left
/// diagonal), bf16 in and out with fp32 softmax statistics, the (b, s, h, d) layout frameworks
/// keep; forward and backward seconds per call.
struct AttentionSample {
  int batch = 1, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  double fwd_s = 0, bwd_s = 0;
};
struct CollSample {
  int op = 0;  ///< 0 all-reduce, 1 all-gather, 2 reduce-scatter, 3 all-to-all, 4 send/recv
  double bytes = 0, seconds = 0;  ///< bytes as nccl-tests' size
};

struct Measurements {
  std::string device_name, driver_version, runtime_version, nccl_version;
  double memory_bytes = 0;
  int sm_count = 0, clock_mhz = 0;
  int ranks = 1, nodes = 1, ranks_per_node = 1;
  std::vector<GemmSample> gemm;
  std::vector<MemSample> memory;  ///< the vectorized axpy (12 bytes per element) by bytes moved
  /// A 1 GiB device-to-device cudaMemcpy, read + write bytes per second / 1e9 (0: not measured).
  double memcpy_d2d_GBps = 0;
  std::vector<CollSample> collectives;
  std::vector<AttentionSample> attention;  ///< cuDNN SDPA by head dim and sequence length (empty: not measured)
  int attention_head_dim = 0;  ///< the head dim timed at every length (the model's); others at fewer
  /// What was timed ("cuDNN 9.19.0 SDPA") or why attention was not measured.
  std::string attention_note;
  double gemm_alone_s = 0, gemm_with_comm_s = 0;
  std::string kernel_check;  ///< "ok" or what differed from the CPU reference
  double gemm_soak_s = 0;    ///< seconds of back-to-back GEMMs before the first GEMM sample
  std::string nvml_note;     ///< why NVML could not be read ("" when it was)
};

/// Whether this build contains the CUDA backend.
bool BuiltWithCuda();
/// Whether a GPU can be used; `why` says why not (e.g. "CUDA driver version is insufficient").
bool Usable(std::string* why);
/// Runs each CUDA kernel of kernels/ on a small input and compares with its CPU reference:
/// "ok", or what differed.
std::string VerifyKernels();
/// The attention heads calibrate times: the model's when `calibrate --model` names one, else
/// 32 query heads of 128 over 8 key/value heads (a Llama-style GQA layer).
struct AttentionHeads {
  int heads = 32, kv_heads = 8, head_dim = 128;
};

/// Runs the sweep on this rank's GPU (device = local rank modulo the device count) and NCCL
/// collectives across MPI ranks (ncclUniqueId broadcast over MPI). `extra_shapes` (m, n, k) are
/// timed too (the model's own GEMMs); attention with `heads` at 1K-32K tokens (cuDNN, where it
/// loads). MPI must be initialized.
Measurements Measure(bool quick, bool progress, const std::vector<std::array<int, 3>>& extra_shapes,
                     const AttentionHeads& heads = {});

}  // namespace shardcast::cuda
