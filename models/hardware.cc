#include "models/hardware.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace shardcast {

const char* ToString(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
    case Precision::kMxfp8: return "mxfp8";
    case Precision::kNvfp4: return "nvfp4";
    case Precision::kTf32: return "tf32";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

const std::vector<Precision>& AllPrecisions() {
  static const std::vector<Precision> all = {Precision::kBf16,  Precision::kFp16, Precision::kFp8,
                                             Precision::kMxfp8, Precision::kNvfp4, Precision::kTf32,
                                             Precision::kFp32};
  return all;
}

std::optional<Precision> ParsePrecision(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (Precision p : AllPrecisions()) {
    if (n == ToString(p)) return p;
  }
  return std::nullopt;
}

bool IsLowPrecision(Precision p) {
  return p == Precision::kFp8 || p == Precision::kMxfp8 || p == Precision::kNvfp4;
}

Precision ModelDtype(Precision p) {
  if (IsLowPrecision(p)) return Precision::kBf16;
  if (p == Precision::kTf32) return Precision::kFp32;
  return p;
}

double ModelDtypeBytes(Precision p) { return ModelDtype(p) == Precision::kFp32 ? 4.0 : 2.0; }

double Gpu::PeakFlops(Precision p) const {
  switch (p) {
    case Precision::kBf16: return peak_bf16_tflops * 1e12;
    case Precision::kFp16: return peak_fp16_tflops * 1e12;
    case Precision::kFp8: return peak_fp8_tflops.value_or(0.0) * 1e12;
    case Precision::kMxfp8: return peak_mxfp8_tflops.value_or(0.0) * 1e12;
    case Precision::kNvfp4: return peak_nvfp4_tflops.value_or(0.0) * 1e12;
    case Precision::kTf32: return peak_tf32_tflops * 1e12;
    case Precision::kFp32: return peak_fp32_tflops * 1e12;
  }
  return 0;
}

std::string Gpu::PrecisionList() const {
  std::string out;
  for (Precision p : AllPrecisions()) {
    if (!Runs(p)) continue;
    if (!out.empty()) out += ", ";
    out += ToString(p);
    out += " ";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", PeakFlops(p) / 1e12);
    out += buf;
  }
  return out.empty() ? "none" : out + " TFLOP/s";
}

std::string BareGpuName(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return n.rfind("nvidia ", 0) == 0 ? n.substr(7) : n;
}

}  // namespace shardcast
