#include "models/hardware.h"

#include <algorithm>
#include <cctype>

namespace shardcast {

const char* ToString(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

double Gpu::PeakFlops(Precision p) const {
  switch (p) {
    case Precision::kBf16: return peak_bf16_tflops * 1e12;
    case Precision::kFp16: return peak_fp16_tflops * 1e12;
    case Precision::kFp8: return peak_fp8_tflops.value_or(0.0) * 1e12;
    case Precision::kFp32: return peak_fp32_tflops * 1e12;
  }
  return 0;
}

std::string BareGpuName(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return n.rfind("nvidia ", 0) == 0 ? n.substr(7) : n;
}

}  // namespace shardcast
