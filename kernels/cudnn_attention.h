#pragma once
/// \file cudnn_attention.h
/// Fused flash attention through cuDNN's scaled-dot-product-attention graphs (the cuDNN frontend,
/// third_party/cudnn-frontend), the kernels PyTorch's and Transformer Engine's fused attention
/// run on NVIDIA GPUs. cuDNN is loaded at run time (libcudnn.so.9), so a build needs only its
/// headers; where it cannot be loaded, or a configuration is not supported, the functions say
/// why instead of running. Built where the CUDA toolkit and cudnn.h are found
/// (SHARDCAST_HAVE_CUDNN).

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include <cuda_runtime.h>

namespace shardcast::kernels {

/// One attention call: `batch` sequences of `seq` tokens, `heads` query heads over `kv_heads`
/// key/value heads (GQA when fewer), `head_dim`; causal (top-left diagonal), bf16 in and out
/// with fp32 softmax statistics, in the (b, s, h, d) layout frameworks keep.
struct AttentionShape {
  int batch = 1, heads = 0, kv_heads = 0, seq = 0, head_dim = 0;
};

/// Loads cuDNN (once per process): true, or false with `why` (the loader's message).
bool LoadCudnn(std::string* why);
/// "cuDNN MAJOR.MINOR.PATCH" of the loaded library ("" before LoadCudnn succeeds).
std::string CudnnVersion();

/// The forward and backward graphs of one AttentionShape with their device tensors (random
/// normal Q, K, V and dO; never zeros, since power and clocks depend on the data) and workspace,
/// built once; Forward and Backward enqueue one call on the stream.
class CudnnAttention {
 public:
  /// Builds both graphs (heuristics A, then cuDNN's fallback list) and allocates the tensors;
  /// nullptr with `why` when cuDNN is missing, does not support the shape, or memory runs out.
  static std::unique_ptr<CudnnAttention> Create(const AttentionShape& shape, cudaStream_t stream, std::string* why);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// Enqueues one forward (O and the statistics); false with `why` when cuDNN refuses.
  bool Forward(std::string* why);
  /// Enqueues one backward (dQ, dK, dV from the last forward's O and statistics).
  bool Backward(std::string* why);

 private:
  CudnnAttention() = default;
  struct Graphs;
  std::unique_ptr<Graphs> g_;
};

}  // namespace shardcast::kernels
