#pragma once
/// \file cuda_runner.h
/// The CUDA backend of `execute`, behind a plain interface (no project JSON headers in the CUDA
/// translation unit). It runs a single-rank program (TP = PP = DP = 1): cuBLASLt bf16 GEMMs of
/// the real shapes on random normal data, flash attention through cuDNN's fused SDPA (where
/// cuDNN loads; else the attention's GEMMs, and Result says why), the vectorized axpy for
/// memory-bound ops, real cudaMalloc/cudaFree of saved activations, each op timed with CUDA
/// events.

#include <string>
#include <vector>

namespace shardcast::cuda_exec {

struct Op {
  enum Kind { kGemm, kMemory, kAlloc, kFree, kAttention } kind = kGemm;
  /// GEMM shape and repetitions; for kAttention, the GEMMs that stand in for it without cuDNN.
  int m = 0, n = 0, k = 0, reps = 1;
  /// kAttention: micro-batch, query and key/value heads on this GPU, tokens, head dim; causal.
  int batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
  bool backward = false;  ///< kAttention: the backward (dQ, dK, dV) instead of the forward
  double bytes = 0;                   ///< memory / alloc / free
  int key = 0;                        ///< alloc/free pairing
};

struct Result {
  std::vector<double> op_secs;  ///< median per op over the measured steps
  std::vector<double> step_s;   ///< each measured step
  double peak_bytes = 0;        ///< high-water mark of this run's allocations (static included)
  /// How attention ran: "cuDNN 9.19.0 SDPA", or why it fell back to GEMMs ("" without attention).
  std::string attention_note;
};

bool Built();
bool Usable(std::string* why);
/// Runs `ops` `warmup + steps` times on device 0. Throws std::runtime_error on a CUDA error.
Result Run(const std::vector<Op>& ops, int warmup, int steps, double static_bytes);

}  // namespace shardcast::cuda_exec
