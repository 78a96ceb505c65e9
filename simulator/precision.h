#pragma once
/// \file precision.h
/// What a training precision costs beyond its GEMM rate: the bytes of the linear layers' inputs,
/// weights and gradients once quantized, the copies each GEMM needs, and the scaling state
/// (docs/simulator.md, "Precisions", with sources). The cost model asks these questions; the
/// formats' facts live here, in one place.

#include <string>

#include "models/parallel.h"

namespace shardcast {

/// The format of the linear layers' GEMM operands under a configuration on a GPU architecture.
///
/// Sources: Transformer Engine's FP8 primer and its recipes (per-tensor delayed and current
/// scaling; MXFP8BlockScaling; NVFP4BlockScaling; Float8BlockScaling), the OCP Microscaling
/// Formats spec v1.0 (MXFP8: E4M3 elements, one E8M0 scale per 32), NVIDIA's NVFP4 paper
/// ("Pretraining Large Language Models with NVFP4", 2025: E2M1 elements, one E4M3 scale per 16,
/// 2-D 16x16 blocks for weights), DeepSeek-V3's report (1x128 / 128x128 blocks with fp32
/// scales), and cuBLASLt's FP8 layout rule: Hopper and Ada take FP8 operands only as "TN"
/// (A transposed), so the weight-gradient and data-gradient GEMMs need transposed copies, which
/// Transformer Engine makes in the same pass as the cast (cast_transpose); Blackwell takes any
/// layout. Block-scaled formats always need a second, column-wise quantized copy: their scales
/// run along the reduction dimension, which differs between the forward and the gradient GEMMs.
struct LinearFormat {
  Precision gemm = Precision::kBf16;  ///< precision of the linear layers' GEMMs
  double element_bytes = 2;           ///< one quantized element: 1 (FP8), 0.5 (FP4), else the dtype's
  double scale_bytes_per_element = 0; ///< block scales: 1/32 (MXFP8), 1/16 (NVFP4), 4/128 (blockwise)
  /// A second (transposed or column-wise) copy is written with each cast, for the other GEMMs.
  bool second_copy = false;
  /// One copy with its scales, per element.
  double CopyBytes() const { return element_bytes + scale_bytes_per_element; }
  /// Bytes a cast writes per element (one or two copies).
  double CastWriteBytes() const { return CopyBytes() * (second_copy ? 2.0 : 1.0); }
  bool low_precision() const { return IsLowPrecision(gemm); }
};

/// The linear layers' format for `c` on GPUs of architecture `arch` ("hopper", "blackwell", ...).
/// Without a low-precision format it is the model dtype (2 or 4 bytes, one copy, no scales).
LinearFormat LinearFormatOf(const ParallelConfig& c, const std::string& arch);

/// Extra bytes of device memory per parameter of the linear layers that the format keeps: the
/// quantized weight copies (both copies where the format needs two), minus the 16-bit weight
/// that --fp8-param-gather replaces. 0 without a low-precision format, and under PyTorch FSDP
/// (OptimizerImpl::kTorchFsdp: torchao's Float8Linear casts the weight in each pass and frees
/// the cast; its FP8 all-gather casts the fp32 shard).
double QuantizedWeightBytesPerParam(const ParallelConfig& c, const LinearFormat& f);

/// Bytes per parameter that the parameter all-gather moves: the quantized copy with
/// --fp8-param-gather, else the configuration's param_gather_bytes (at least 4 in fp32/tf32
/// training, whose weights are fp32).
double ParamGatherBytesPerParam(const ParallelConfig& c, const LinearFormat& f);

/// Bytes of scaling state per transformer layer under delayed scaling: each of the four linear
/// GEMMs keeps an amax history (fp8_amax_history_len fp32 values) and a scale and inverse scale
/// for its input, weight and output gradient. 0 for the other recipes (their scales are computed
/// from the current tensor, or stored with the blocks).
double ScalingStateBytesPerLayer(const ParallelConfig& c);

}  // namespace shardcast
