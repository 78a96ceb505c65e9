#include "simulator/precision.h"

#include <algorithm>

namespace shardcast {

LinearFormat LinearFormatOf(const ParallelConfig& c, const std::string& arch) {
  LinearFormat f;
  f.gemm = c.precision;
  f.element_bytes = ModelDtypeBytes(c.precision);
  const bool tn_only = arch != "blackwell";  // Hopper, Ada (and MI300's FP8 GEMMs, [est])
  switch (c.precision) {
    case Precision::kFp8:
      f.element_bytes = 1;
      if (c.fp8_recipe == Fp8Recipe::kBlockwise) {
        f.scale_bytes_per_element = 4.0 / 128.0;  // one fp32 scale per 1x128 block
        f.second_copy = true;
      } else {
        f.second_copy = tn_only;
      }
      break;
    case Precision::kMxfp8:
      f.element_bytes = 1;
      f.scale_bytes_per_element = 1.0 / 32.0;  // one E8M0 byte per 32 elements
      f.second_copy = true;
      break;
    case Precision::kNvfp4:
      f.element_bytes = 0.5;
      f.scale_bytes_per_element = 1.0 / 16.0;  // one E4M3 byte per 16 elements
      f.second_copy = true;
      break;
    default:
      break;
  }
  return f;
}

double QuantizedWeightBytesPerParam(const ParallelConfig& c, const LinearFormat& f) {
  if (!f.low_precision() || c.optimizer_impl == OptimizerImpl::kTorchFsdp) return 0;
  const double copies = f.CastWriteBytes();
  return c.fp8_param_gather ? copies - ModelDtypeBytes(c.precision) : copies;
}

double ParamGatherBytesPerParam(const ParallelConfig& c, const LinearFormat& f) {
  if (c.fp8_param_gather && f.low_precision()) return f.CopyBytes();
  // fp32/tf32 training gathers its fp32 weights.
  return std::max(c.param_gather_bytes, ModelDtypeBytes(c.precision));
}

double ScalingStateBytesPerLayer(const ParallelConfig& c) {
  if (c.precision != Precision::kFp8 || c.fp8_recipe != Fp8Recipe::kDelayed) return 0;
  const double per_tensor = 4.0 * (static_cast<double>(c.fp8_amax_history_len) + 2.0);
  return 4.0 /* GEMMs */ * 3.0 /* input, weight, output gradient */ * per_tensor;
}

}  // namespace shardcast
