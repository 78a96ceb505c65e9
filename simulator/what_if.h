#pragma once
/// \file what_if.h
/// Hypothetical hardware: `--what-if KEY=VALUE` replaces one figure of the cluster and its
/// profile, `KEY=xFACTOR` scales it (docs/simulator.md, "What if"). Rates that follow from the
/// changed figure move with it in proportion (a faster NIC keeps the fraction of its line rate
/// the profile achieves); nothing else changes.

#include <string>
#include <vector>

#include "models/hardware.h"
#include "simulator/profile.h"

namespace shardcast {

/// One change. Keys and what they move:
///  - nic_Gbps: each NIC's line rate (cluster) and the achieved rate per NIC (profile), in
///    proportion;
///  - nics_per_node: NICs per node (cluster and profile; an integer);
///  - nvlink_GBps: the intra-node rate per GPU and direction (cluster), and in proportion the
///    ring busbw, the NVLS all-reduce busbw and the point-to-point rate inside a node;
///  - hbm_GBps: HBM bandwidth (profile; memory-bound ops and GEMMs' memory side);
///  - gemm_tflops: the dense GEMM peak of every precision (profile; MFU keeps the GPU's peak);
///  - gemm_efficiency: the best fraction of the peak GEMMs reach, every precision (at most 1);
///  - attention_efficiency: flash attention's fraction of peak, forward and backward (at most 1);
///  - memory_GiB: each GPU's memory (cluster), which decides what fits.
/// Changing nvlink_GBps drops a measured profile's collective tables, nic_Gbps or nics_per_node
/// its tables across nodes (they describe the old links), so those collectives follow the
/// alpha-beta model on the new rates.
struct WhatIf {
  std::string key;
  double value = 0;
  bool scale = false;  ///< `value` multiplies the figure (KEY=xFACTOR) instead of replacing it
  std::string text;    ///< as given, e.g. "nic_Gbps=800"
};

/// The keys ParseWhatIf accepts, in the order above.
const std::vector<std::string>& WhatIfKeys();

/// "KEY=VALUE" or "KEY=xFACTOR" (a positive finite number). InputError naming --what-if, the
/// value and the keys otherwise.
WhatIf ParseWhatIf(const std::string& s);

/// Applies `changes` in order to `cl` and `p`, each adding a line to p->adjustments with the old
/// and the new figure. InputError when a change cannot apply: an efficiency above 1, a NIC rate
/// on a cluster without an inter-node network, a fractional NIC count.
void ApplyWhatIf(const std::vector<WhatIf>& changes, Cluster* cl, HardwareProfile* p);

}  // namespace shardcast
