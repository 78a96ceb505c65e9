#pragma once
/// \file cuda_util.cuh
/// Error checks and device discovery shared by the CUDA translation units (calibrate, execute).

#include <stdexcept>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace shardcast::cudautil {

/// Throws std::runtime_error "what: <CUDA error string>" on failure.
inline void Ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void Ck(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(e));
}

/// Whether a GPU can be used; `why` gets the reason when not (e.g. "CUDA driver version is
/// insufficient for CUDA runtime version" on a machine with the toolkit but no driver).
inline bool DeviceUsable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device found";
    return false;
  }
  return true;
}

}  // namespace shardcast::cudautil
