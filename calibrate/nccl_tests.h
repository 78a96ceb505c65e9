#pragma once
/// \file nccl_tests.h
/// Reader for nccl-tests logs (NVIDIA/nccl-tests, doc/PERFORMANCE.md): the text output of the
/// current format (since 2.13, Aug 2022) and the older one, with mpirun/srun line prefixes and
/// interleaved NCCL INFO lines, and the JSON output of `-J`. Sizes are nccl-tests' `size` column;
/// busbw = algbw * factor(n) as nccl-tests defines it.

#include <string>
#include <vector>

#include "simulator/profile.h"

namespace shardcast {

struct NcclTestsRow {
  double size_bytes = 0;
  double time_us = 0;   ///< out-of-place
  double algbw_GBps = 0;
  double busbw_GBps = 0;
};

struct NcclTestsRun {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string binary;  ///< e.g. all_reduce_perf
  int ranks = 0;       ///< from the "Rank" lines, else from busbw/algbw
  int nodes = 1;       ///< distinct hosts in the "Rank" lines (1 when they name none)
  bool hosts_named = false;  ///< whether the log named its hosts (Rank lines or JSON devices)
  bool split_groups = false;  ///< the Rank lines name more than one Group (NCCL_TESTS_SPLIT_MASK)
  std::string device;  ///< the GPU: the first "Rank" line's (text logs) or device_info (JSON), e.g. "NVIDIA H100 80GB HBM3"
  std::vector<NcclTestsRow> rows;
};

/// Parses one log (text or JSON, detected). `file` names the source in errors. A log with no
/// result rows, an unknown collective, or a malformed row is an InputError naming the file and
/// line.
std::vector<NcclTestsRun> ParseNcclTestsLog(const std::string& text, const std::string& file);
std::vector<NcclTestsRun> ReadNcclTestsLog(const std::string& path);

/// The collective table of a run, for a profile: size -> out-of-place time.
CollectiveTable ToCollectiveTable(const NcclTestsRun& run);

}  // namespace shardcast
