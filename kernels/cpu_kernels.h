#pragma once
/// \file cpu_kernels.h
/// CPU reference versions of the memory-bound kernels of a transformer layer. The CUDA kernels
/// (cuda_kernels.cuh) are verified against these before they are timed.

#include <cstddef>
#include <vector>

namespace shardcast::kernels {

/// y = (x - mean) / sqrt(var + eps) * gamma + beta over each row of `rows` x `cols`.
void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::size_t rows,
                      std::size_t cols, float eps = 1e-5f);
/// GeLU, tanh approximation (Hendrycks & Gimpel 2016), elementwise.
void GeluForward(const float* x, float* y, std::size_t n);
/// Row-wise softmax of `rows` x `cols`, numerically stable (subtracts the row maximum).
void SoftmaxRows(const float* x, float* y, std::size_t rows, std::size_t cols);
/// One Adam step (Kingma & Ba 2015, with bias correction) on `n` parameters, step t >= 1.
void AdamStep(float* param, const float* grad, float* m, float* v, std::size_t n, float lr, float beta1,
              float beta2, float eps, int t);

}  // namespace shardcast::kernels
