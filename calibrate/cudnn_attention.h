#pragma once
/// \file cudnn_attention.h
/// Fused flash attention through cuDNN's scaled-dot-product-attention graphs (the cuDNN frontend,
/// third_party/cudnn-frontend), the kernels PyTorch's and Transformer Engine's fused attention
/// run on NVIDIA GPUs. cuDNN is loaded at run time (libcudnn.so.9), so a build needs only its
/// headers; where it cannot be loaded, or a configuration is not supported, the functions say
/// why instead of timing. Built where the CUDA toolkit and cudnn.h are found.

#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "calibrate/cuda_backend.h"

namespace shardcast::cuda {

/// Loads cuDNN (once per process): true, or false with `why` (the loader's message).
bool LoadCudnn(std::string* why);
/// "cuDNN MAJOR.MINOR.PATCH" of the loaded library ("" before LoadCudnn succeeds).
std::string CudnnVersion();

/// Times forward and backward of each of `shapes` (AttentionSample's fields but the times) on
/// `stream`: `warmup` untimed calls, then the median of `reps` timed ones (CUDA events).
/// Returns the samples timed; stops at the first failure (no cuDNN, a graph cuDNN cannot run,
/// out of memory) with `why` set, keeping what was timed before it.
std::vector<AttentionSample> TimeCudnnAttention(const std::vector<AttentionSample>& shapes, cudaStream_t stream,
                                                int warmup, int reps, std::string* why);

}  // namespace shardcast::cuda
