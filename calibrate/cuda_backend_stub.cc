// The CUDA backend when the build has no CUDA toolkit.
#include "calibrate/cuda_backend.h"

namespace shardcast::cuda {

bool BuiltWithCuda() { return false; }
bool Usable(std::string* why) {
  *why = "this build has no CUDA backend";
  return false;
}
Measurements Measure(bool, bool, const std::vector<std::array<int, 3>>&, const AttentionHeads&) { return {}; }
std::string VerifyKernels() { return "this build has no CUDA backend"; }

}  // namespace shardcast::cuda
