#include "simulator/schedule.h"

#include <algorithm>
#include <deque>

#include "common/error.h"

namespace shardcast {
namespace {

std::vector<ScheduleItem> OneFOneB(int i, int p, int m) {
  std::vector<ScheduleItem> out;
  const int warmup = std::min(p - i - 1, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({ItemKind::kForward, f, 0});
  while (f < m) {
    out.push_back({ItemKind::kForward, f++, 0});
    out.push_back({ItemKind::kBackward, b++, 0});
  }
  while (b < m) out.push_back({ItemKind::kBackward, b++, 0});
  return out;
}

// Megatron-LM get_model_chunk_id / microbatch id for the k-th forward (or backward) chunk pass.
ScheduleItem InterleavedItem(int k, int p, int v, bool forward) {
  const int group = p * v;
  const int in_group = k % group;
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  const int mb = (k / group) * p + in_group % p;
  return {forward ? ItemKind::kForward : ItemKind::kBackward, mb, chunk};
}

std::vector<ScheduleItem> Interleaved(int i, int p, int m, int v) {
  const int total = m * v;
  int warmup = (p - i - 1) * 2 + (v - 1) * p;
  warmup = std::min(warmup, total);
  std::vector<ScheduleItem> out;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(InterleavedItem(f, p, v, true));
  while (f < total) {
    out.push_back(InterleavedItem(f++, p, v, true));
    out.push_back(InterleavedItem(b++, p, v, false));
  }
  while (b < total) out.push_back(InterleavedItem(b++, p, v, false));
  return out;
}

std::vector<ScheduleItem> ZbH1(int i, int p, int m) {
  // 1F1B order; after each B the stage runs a W, except that the W passes of the first p-i-1
  // steady backwards wait in a queue, and the queue is drained one W after each drain B (where
  // 1F1B idles) and the rest at the end.
  std::vector<ScheduleItem> out;
  const int warmup = std::min(p - i - 1, m);
  const int deferred = p - i - 1;
  std::deque<int> pending;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({ItemKind::kForward, f, 0});
  while (f < m) {
    out.push_back({ItemKind::kForward, f++, 0});
    out.push_back({ItemKind::kBackward, b, 0});
    pending.push_back(b++);
    if (static_cast<int>(pending.size()) > deferred) {
      out.push_back({ItemKind::kWeight, pending.front(), 0});
      pending.pop_front();
    }
  }
  while (b < m) {
    // Drain: where 1F1B waits for the next gradient, run up to two deferred W passes.
    out.push_back({ItemKind::kBackward, b, 0});
    pending.push_back(b++);
    for (int k = 0; k < 2 && !pending.empty(); ++k) {
      out.push_back({ItemKind::kWeight, pending.front(), 0});
      pending.pop_front();
    }
  }
  while (!pending.empty()) {
    out.push_back({ItemKind::kWeight, pending.front(), 0});
    pending.pop_front();
  }
  return out;
}

}  // namespace

PipelineSchedule MakeSchedule(Schedule kind, int p, int m, int v) {
  PipelineSchedule s;
  s.stages = p;
  s.microbatches = m;
  s.chunks = kind == Schedule::kInterleaved ? v : 1;
  s.split_weight = kind == Schedule::kZbH1;
  s.order.resize(static_cast<std::size_t>(p));
  for (int i = 0; i < p; ++i) {
    auto& o = s.order[static_cast<std::size_t>(i)];
    switch (kind) {
      case Schedule::kGpipe:
        for (int f = 0; f < m; ++f) o.push_back({ItemKind::kForward, f, 0});
        for (int b = m - 1; b >= 0; --b) o.push_back({ItemKind::kBackward, b, 0});
        break;
      case Schedule::k1F1B:
        o = OneFOneB(i, p, m);
        break;
      case Schedule::kInterleaved:
        Check(v == 1 || p == 1 || m % p == 0, "interleaved schedule needs m % p == 0");
        o = (p == 1 && v > 1) ? Interleaved(i, 1, m, v) : Interleaved(i, p, m, v);
        break;
      case Schedule::kZbH1:
        o = ZbH1(i, p, m);
        break;
    }
  }
  return s;
}

}  // namespace shardcast
