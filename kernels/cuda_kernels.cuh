#pragma once
/// \file cuda_kernels.cuh
/// CUDA versions of the kernels of cpu_kernels.h (same semantics, fp32), plus a random-normal
/// fill for calibration inputs. All launch on `stream` and return immediately.

#include <cstddef>
#include <cuda_runtime.h>

namespace shardcast::kernels {

void LaunchLayerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::size_t rows,
                            std::size_t cols, float eps, cudaStream_t stream);
void LaunchGeluForward(const float* x, float* y, std::size_t n, cudaStream_t stream);
void LaunchSoftmaxRows(const float* x, float* y, std::size_t rows, std::size_t cols, cudaStream_t stream);
void LaunchAdamStep(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2,
                    float eps, int t, cudaStream_t stream);
/// y = a * x + y (12 bytes moved per element): the memory-bandwidth probe.
void LaunchAxpy(float a, const float* x, float* y, std::size_t n, cudaStream_t stream);
/// The same with 16-byte loads and stores (float4, grid-stride; the n % 4 tail element-wise):
/// what a framework's vectorized elementwise kernels reach. `x` and `y` must be 16-byte aligned
/// (cudaMalloc's are; an offset into such a buffer must keep it). `n` a multiple of 4 runs one
/// kernel; otherwise a second, element-wise launch does the tail.
void LaunchAxpyVec(float a, const float* x, float* y, std::size_t n, cudaStream_t stream);
/// Fills `n` floats with approximately standard-normal values from `seed` (never zeros: GEMM
/// power and clocks depend on the data, hardware.md 4.1).
void LaunchFillNormal(float* out, std::size_t n, unsigned seed, cudaStream_t stream);
/// The same into bf16 storage (`out` points to __nv_bfloat16).
void LaunchFillNormalBf16(void* out, std::size_t n, unsigned seed, cudaStream_t stream);

}  // namespace shardcast::kernels
