#include "kernels/cuda_kernels.cuh"

#include <cuda_bf16.h>

#include <algorithm>

namespace shardcast::kernels {
namespace {

constexpr int kThreads = 256;
unsigned Blocks(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ float HashUniform(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return (static_cast<float>(x) + 1.0f) / 4294967297.0f;  // (0, 1)
}

__device__ float Normal(std::size_t i, unsigned seed) {
  const float u1 = HashUniform(static_cast<unsigned>(i) * 2u + seed * 0x9e3779b9U);
  const float u2 = HashUniform(static_cast<unsigned>(i) * 2u + 1u + seed * 0x9e3779b9U);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

__global__ void FillNormal(float* out, std::size_t n, unsigned seed) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = Normal(i, seed);
}

__global__ void FillNormalBf16(__nv_bfloat16* out, std::size_t n, unsigned seed) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(Normal(i, seed));
}

__global__ void Axpy(float a, const float* x, float* y, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

/// y = a * x + y on 16-byte vectors, grid-stride (one float4 load of x and y, one store of y).
__global__ void AxpyVec4(float a, const float4* x, float4* y, std::size_t n4) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4; i += stride) {
    const float4 xv = x[i];
    float4 yv = y[i];
    yv.x = a * xv.x + yv.x;
    yv.y = a * xv.y + yv.y;
    yv.z = a * xv.z + yv.z;
    yv.w = a * xv.w + yv.w;
    y[i] = yv;
  }
}

__global__ void Gelu(const float* x, float* y, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

// One block per row; shared-memory reductions.
__global__ void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, std::size_t cols, float eps) {
  __shared__ float s1[kThreads], s2[kThreads];
  const float* xr = x + blockIdx.x * cols;
  float a = 0, b = 0;
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
    a += xr[c];
    b += xr[c] * xr[c];
  }
  s1[threadIdx.x] = a;
  s2[threadIdx.x] = b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      s1[threadIdx.x] += s1[threadIdx.x + s];
      s2[threadIdx.x] += s2[threadIdx.x + s];
    }
    __syncthreads();
  }
  const float mean = s1[0] / cols;
  const float var = fmaxf(s2[0] / cols - mean * mean, 0.0f);
  const float inv = rsqrtf(var + eps);
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[blockIdx.x * cols + c] = (xr[c] - mean) * inv * gamma[c] + beta[c];
  }
}

__global__ void Softmax(const float* x, float* y, std::size_t cols) {
  __shared__ float s[kThreads];
  const float* xr = x + blockIdx.x * cols;
  float mx = -INFINITY;
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, xr[c]);
  s[threadIdx.x] = mx;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + k]);
    __syncthreads();
  }
  mx = s[0];
  __syncthreads();
  float sum = 0;
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(xr[c] - mx);
  s[threadIdx.x] = sum;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  sum = s[0];
  for (std::size_t c = threadIdx.x; c < cols; c += blockDim.x) y[blockIdx.x * cols + c] = expf(xr[c] - mx) / sum;
}

__global__ void Adam(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2,
                     float eps, float c1, float c2) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
  }
}

}  // namespace

void LaunchLayerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::size_t rows,
                            std::size_t cols, float eps, cudaStream_t stream) {
  LayerNorm<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, gamma, beta, y, cols, eps);
}
void LaunchGeluForward(const float* x, float* y, std::size_t n, cudaStream_t stream) {
  Gelu<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
}
void LaunchSoftmaxRows(const float* x, float* y, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  Softmax<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, cols);
}
void LaunchAdamStep(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2,
                    float eps, int t, cudaStream_t stream) {
  const float c1 = 1.0f - powf(b1, static_cast<float>(t)), c2 = 1.0f - powf(b2, static_cast<float>(t));
  Adam<<<Blocks(n), kThreads, 0, stream>>>(p, g, m, v, n, lr, b1, b2, eps, c1, c2);
}
void LaunchAxpy(float a, const float* x, float* y, std::size_t n, cudaStream_t stream) {
  Axpy<<<Blocks(n), kThreads, 0, stream>>>(a, x, y, n);
}
void LaunchAxpyVec(float a, const float* x, float* y, std::size_t n, cudaStream_t stream) {
  const std::size_t n4 = n / 4, tail = n - 4 * n4;
  if (n4 > 0) {
    // Four waves' worth of blocks at most: each thread then strides over several vectors. The SM
    // count is read once (a process drives one device), outside any timed launch after the first.
    static const int sms = [] {
      int device = 0, n = 0;
      cudaGetDevice(&device);
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
      return n;
    }();
    const unsigned cap = static_cast<unsigned>(std::max(1, sms) * 32);
    AxpyVec4<<<std::min(Blocks(n4), cap), kThreads, 0, stream>>>(a, reinterpret_cast<const float4*>(x),
                                                                 reinterpret_cast<float4*>(y), n4);
  }
  if (tail > 0) Axpy<<<1, kThreads, 0, stream>>>(a, x + 4 * n4, y + 4 * n4, tail);
}
void LaunchFillNormal(float* out, std::size_t n, unsigned seed, cudaStream_t stream) {
  FillNormal<<<Blocks(n), kThreads, 0, stream>>>(out, n, seed);
}
void LaunchFillNormalBf16(void* out, std::size_t n, unsigned seed, cudaStream_t stream) {
  FillNormalBf16<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), n, seed);
}

}  // namespace shardcast::kernels
