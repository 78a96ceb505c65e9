#include "report/catalog.h"

#include <ostream>

#include <fmt/format.h>

#include "common/text.h"
#include "models/loader.h"

namespace shardcast {

void WriteCatalog(std::ostream& out) {
  out << "Models (models/llm/; use with --model NAME, case-insensitive)\n";
  out << fmt::format("  {:<18} {:>10} {:>6} {:>7} {:>6} {:>5} {:>7}  {}\n", "name", "params",
                           "layers", "hidden", "heads", "kv", "vocab", "source");
  std::string mtp_notes;
  for (const auto& name : PresetNames(PresetKind::kModel)) {
    Model m = LoadModel(name);
    const ParameterCounts pc = m.Parameters();
    out << fmt::format("  {:<18} {:>10} {:>6} {:>7} {:>6} {:>5} {:>7}  {}\n", m.name,
                             FormatCount(static_cast<double>(pc.total)), m.num_layers,
                             m.hidden_size, m.num_attention_heads, m.num_query_groups,
                             m.vocab_size, m.source);
    if (pc.mtp > 0) {
      mtp_notes += fmt::format("{}{}: {} = {} + {} of MTP (sharing the embedding and output layer)",
                               mtp_notes.empty() ? "" : "; ", m.name, FormatCount(static_cast<double>(pc.total)),
                               FormatCount(static_cast<double>(pc.total - pc.mtp)), FormatCount(static_cast<double>(pc.mtp)));
    }
  }
  out << "  params: every trained parameter, multi-token-prediction (MTP) modules included" +
             (mtp_notes.empty() ? std::string() : "; " + mtp_notes) + "\n";
  out << "\nGPUs (models/gpu/; dense peak TFLOP/s per precision, - where the GPU lacks it)\n";
  out << fmt::format("  {:<16} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>8} {:>9} {:>7} {:>6}  {}\n", "name",
                           "bf16", "fp16", "fp8", "mxfp8", "nvfp4", "tf32", "fp32", "mem GiB", "HBM GB/s", "NVLink",
                           "$/h", "display name");
  for (const auto& name : PresetNames(PresetKind::kGpu)) {
    Gpu g = LoadGpu(name);
    auto peak = [&](Precision p) {
      return g.Runs(p) ? fmt::format("{:.0f}", g.PeakFlops(p) / 1e12) : std::string("-");
    };
    out << fmt::format("  {:<16} {:>7} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>8.1f} {:>9.0f} {:>7.0f} {:>6}  {}\n",
                             g.name, peak(Precision::kBf16), peak(Precision::kFp16), peak(Precision::kFp8),
                             peak(Precision::kMxfp8), peak(Precision::kNvfp4), peak(Precision::kTf32),
                             peak(Precision::kFp32), g.memory_bytes / 1073741824.0, g.hbm_bandwidth_GBps,
                             g.nvlink_GBps_per_direction,
                             g.price_usd_per_gpu_hour > 0 ? fmt::format("{:.2f}", g.price_usd_per_gpu_hour) : "-",
                             g.display_name);
  }
  out << "\nClusters (models/cluster/)\n";
  out << fmt::format("  {:<16} {:<16} {:>9} {:<9} {:>10} {:>14}\n", "name", "gpu",
                           "gpus/node", "fabric", "intra GB/s", "NICs x Gb/s");
  for (const auto& name : PresetNames(PresetKind::kCluster)) {
    Cluster c = LoadCluster(name);
    out << fmt::format("  {:<16} {:<16} {:>9} {:<9} {:>10.0f} {:>14}\n", c.name, c.gpu.name,
                             c.gpus_per_node, c.intra_fabric, c.intra_GBps_per_direction,
                             fmt::format("{} x {:g}", c.nics_per_node, c.nic_Gbps));
  }
}

}  // namespace shardcast
