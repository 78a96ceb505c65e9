#include "simulator/what_if.h"

#include <cmath>

#include <fmt/format.h>

#include "common/error.h"
#include "common/text.h"

namespace shardcast {

const std::vector<std::string>& WhatIfKeys() {
  static const std::vector<std::string> keys = {"nic_Gbps",    "nics_per_node",        "nvlink_GBps", "hbm_GBps",
                                                "gemm_tflops", "gemm_efficiency",      "attention_efficiency",
                                                "memory_GiB"};
  return keys;
}

WhatIf ParseWhatIf(const std::string& s) {
  auto fail = [&](const std::string& why) {
    throw InputError(fmt::format("command line: --what-if: got \"{}\", expected KEY=VALUE or KEY=xFACTOR (a positive "
                                 "number) with KEY one of {}{}",
                                 s, Join(WhatIfKeys(), ", "), why.empty() ? "" : " (" + why + ")"));
  };
  const auto eq = s.find('=');
  if (eq == std::string::npos) fail("");
  WhatIf w;
  w.key = s.substr(0, eq);
  w.text = s;
  bool known = false;
  for (const auto& k : WhatIfKeys()) known = known || k == w.key;
  if (!known) fail("unknown key \"" + w.key + "\"");
  std::string v = s.substr(eq + 1);
  if (!v.empty() && (v[0] == 'x' || v[0] == 'X')) {
    w.scale = true;
    v = v.substr(1);
  }
  try {
    std::size_t pos = 0;
    w.value = std::stod(v, &pos);
    if (pos != v.size()) fail("");
  } catch (const std::logic_error&) {
    fail("");
  }
  if (!std::isfinite(w.value) || w.value <= 0) fail("");
  return w;
}

namespace {

/// The new value of a figure: `old` scaled or replaced.
double Changed(const WhatIf& w, double old) { return w.scale ? old * w.value : w.value; }

void RequireFraction(const WhatIf& w, double v) {
  if (v > 1.0) {
    throw InputError(fmt::format("command line: --what-if: got \"{}\", which gives {:.3g} of the peak; expected at "
                                 "most 1",
                                 w.text, v));
  }
}

void ApplyNetwork(const WhatIf& w, Cluster* cl, HardwareProfile* p) {
  if (w.key == "nic_Gbps") {
    if (!cl->HasInterNodeNetwork()) {
      throw InputError(fmt::format("command line: --what-if: got \"{}\", but cluster {} has no inter-node network; "
                                   "expected a cluster with NICs (give a cluster file for another network)",
                                   w.text, cl->name));
    }
    const double now = Changed(w, cl->nic_Gbps);
    p->adjustments.push_back(fmt::format("what if {}: NIC line rate {:g} -> {:g} Gb/s, achieved {:.4g} -> {:.4g} GB/s",
                                         w.text, cl->nic_Gbps, now, p->nic_effective_GBps,
                                         p->nic_effective_GBps * now / cl->nic_Gbps));
    p->nic_effective_GBps *= now / cl->nic_Gbps;
    cl->nic_Gbps = now;
  } else if (w.key == "nics_per_node") {
    const double now = Changed(w, static_cast<double>(cl->nics_per_node));
    if (now != std::floor(now) || now > 1024) {
      throw InputError(fmt::format("command line: --what-if: got \"{}\", which gives {:g} NICs; expected a whole "
                                   "number up to 1024",
                                   w.text, now));
    }
    p->adjustments.push_back(fmt::format("what if {}: NICs per node {} -> {:g}", w.text, cl->nics_per_node, now));
    cl->nics_per_node = static_cast<std::int64_t>(now);
    p->nics_per_node = static_cast<int>(now);
    // A single-node profile has no NIC rate: the built-in one for the cluster's NICs.
    if (p->nic_effective_GBps <= 0 && cl->nic_Gbps > 0) p->nic_effective_GBps = DefaultProfile(*cl).nic_effective_GBps;
  } else {  // nvlink_GBps
    const double old = cl->intra_GBps_per_direction;
    const double now = Changed(w, old);
    const double f = old > 0 ? now / old : 0;
    if (f <= 0) {
      throw InputError(fmt::format("command line: --what-if: got \"{}\", but cluster {} has no intra-node rate to "
                                   "scale; expected a cluster with one",
                                   w.text, cl->name));
    }
    p->adjustments.push_back(fmt::format("what if {}: intra-node {:g} -> {:g} GB/s per direction; ring busbw {:.4g} -> "
                                         "{:.4g}, point-to-point {:.4g} -> {:.4g} GB/s",
                                         w.text, old, now, p->intra_busbw_GBps, p->intra_busbw_GBps * f,
                                         p->p2p_intra_GBps, p->p2p_intra_GBps * f));
    cl->intra_GBps_per_direction = now;
    p->intra_busbw_GBps *= f;
    p->nvls_allreduce_busbw_GBps *= f;
    p->p2p_intra_GBps *= f;
  }
  // The tables that time the changed links go: all of them for NVLink (every table crosses it),
  // the multi-node ones for a NIC change (a one-node table never touches a NIC).
  const bool network_only = w.key != "nvlink_GBps";
  const auto before = p->collective_tables.size();
  std::erase_if(p->collective_tables, [&](const CollectiveTable& t) { return !network_only || t.nodes > 1; });
  if (p->collective_tables.size() != before) {
    p->adjustments.push_back(fmt::format("what if: the measured collective tables {}dropped (they time the old links); "
                                         "those collectives follow the alpha-beta model",
                                         network_only ? "across nodes " : ""));
  }
}

void ApplyCompute(const WhatIf& w, Cluster* cl, HardwareProfile* p) {
  if (w.key == "hbm_GBps") {
    const double now = Changed(w, p->hbm_GBps);
    p->adjustments.push_back(fmt::format("what if {}: HBM {} -> {} GB/s", w.text, FormatRate(p->hbm_GBps), FormatRate(now)));
    p->hbm_GBps = now;
  } else if (w.key == "gemm_tflops") {
    const double now = Changed(w, p->gemm_peak_tflops), f = now / p->gemm_peak_tflops;
    p->adjustments.push_back(fmt::format("what if {}: GEMM peak {} -> {} TFLOP/s (every precision x{:.4g})", w.text,
                                         FormatRate(p->gemm_peak_tflops), FormatRate(now), f));
    p->gemm_peak_tflops = now;
    for (auto& r : p->gemm_rates) r.peak_tflops *= f;
  } else if (w.key == "gemm_efficiency") {
    const double now = Changed(w, p->gemm_max_efficiency), f = now / p->gemm_max_efficiency;
    RequireFraction(w, now);
    for (auto& r : p->gemm_rates) RequireFraction(w, r.max_efficiency * f);
    p->adjustments.push_back(fmt::format("what if {}: GEMM efficiency {:.4g} -> {:.4g} of peak (every precision x{:.4g})",
                                         w.text, p->gemm_max_efficiency, now, f));
    p->gemm_max_efficiency = now;
    for (auto& r : p->gemm_rates) r.max_efficiency *= f;
  } else if (w.key == "attention_efficiency") {
    const double fwd = Changed(w, p->attention_fwd_efficiency);
    const double bwd = w.scale ? p->attention_bwd_efficiency * w.value : w.value;
    RequireFraction(w, std::max(fwd, bwd));
    p->adjustments.push_back(fmt::format("what if {}: attention efficiency forward {:.4g} -> {:.4g}, backward {:.4g} -> "
                                         "{:.4g}",
                                         w.text, p->attention_fwd_efficiency, fwd, p->attention_bwd_efficiency, bwd));
    p->attention_fwd_efficiency = fwd;
    p->attention_bwd_efficiency = bwd;
  } else {  // memory_GiB
    const double old = cl->gpu.memory_bytes / 1073741824.0, now = Changed(w, old);
    p->adjustments.push_back(fmt::format("what if {}: GPU memory {:.4g} -> {:.4g} GiB", w.text, old, now));
    cl->gpu.memory_bytes = now * 1073741824.0;
  }
}

}  // namespace

void ApplyWhatIf(const std::vector<WhatIf>& changes, Cluster* cl, HardwareProfile* p) {
  for (const WhatIf& w : changes) {
    if (w.key == "nic_Gbps" || w.key == "nics_per_node" || w.key == "nvlink_GBps") {
      ApplyNetwork(w, cl, p);
    } else {
      ApplyCompute(w, cl, p);
    }
  }
}

}  // namespace shardcast
