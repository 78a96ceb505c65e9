// The CUDA executor when the build has no CUDA toolkit.
#include "executor/cuda_runner.h"

namespace shardcast::cuda_exec {

bool Built() { return false; }
bool Usable(std::string* why) {
  *why = "this build has no CUDA backend";
  return false;
}
Result Run(const std::vector<Op>&, int, int, double) { return {}; }

}  // namespace shardcast::cuda_exec
