#pragma once
/// \file describe_report.h
/// `describe`'s result (planner/describe.h) rendered as JSON and as text, from the same figures.

#include <iosfwd>

#include "common/json_reader.h"
#include "planner/describe.h"

namespace shardcast {

/// The JSON document: model, parameters (total, active, breakdown), flops (with the formula's
/// convention), state_bytes_per_param, and with a cluster `fit` (feasible, reasons, the largest
/// stage's parameters and each ZeRO stage's bytes). Bytes are numbers of bytes.
Json DescribeJson(const ModelDescription& d);
/// The text report: shape, parameters (experts, MLA and MTP where the model has them), FLOPs
/// with the formula filled in, training state per parameter, and the per-GPU fit.
void WriteDescription(std::ostream& out, const ModelDescription& d);

}  // namespace shardcast
