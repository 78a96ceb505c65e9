#include "kernels/cpu_kernels.h"

#include <algorithm>
#include <cmath>

namespace shardcast::kernels {

void LayerNormForward(const float* x, const float* gamma, const float* beta, float* y, std::size_t rows,
                      std::size_t cols, float eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double mean = 0, var = 0;
    for (std::size_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::size_t c = 0; c < cols; ++c) {
      y[r * cols + c] = static_cast<float>((xr[c] - mean) * inv) * gamma[c] + beta[c];
    }
  }
}

void GeluForward(const float* x, float* y, std::size_t n) {
  constexpr float k = 0.7978845608f;  // sqrt(2/pi)
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void SoftmaxRows(const float* x, float* y, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float mx = *std::max_element(xr, xr + cols);
    double sum = 0;
    for (std::size_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    for (std::size_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(std::exp(xr[c] - mx) / sum);
  }
}

void AdamStep(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2, float eps,
              int t) {
  const float c1 = 1.0f - std::pow(b1, static_cast<float>(t)), c2 = 1.0f - std::pow(b2, static_cast<float>(t));
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
  }
}

}  // namespace shardcast::kernels
