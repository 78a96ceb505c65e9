#include "simulator/schedule.h"

#include <algorithm>
#include <deque>
#include <memory>

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
  // Qi et al. 2024 ZB-H1, in the order of the reference implementation (Megatron-DeepSpeed's
  // ZeroBubbleH1Pipeline): p-i-1 warm-up forwards; then i steps of F and B whose W passes are
  // deferred (the later stages, which idle longest in 1F1B's cool-down, defer the most); then
  // F B W steps (W of the oldest pending micro-batch) while forwards remain; then B W steps; then
  // the i deferred W passes. In-flight activations stay at 1F1B's p-i.
  std::vector<ScheduleItem> out;
  const int warmup = std::min(p - i - 1, m);
  std::deque<int> pending;
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({ItemKind::kForward, f, 0});
  for (int k = 0; k < i && f < m; ++k) {
    out.push_back({ItemKind::kForward, f++, 0});
    out.push_back({ItemKind::kBackward, b, 0});
    pending.push_back(b++);
  }
  auto backward_then_weight = [&] {
    out.push_back({ItemKind::kBackward, b, 0});
    pending.push_back(b++);
    out.push_back({ItemKind::kWeight, pending.front(), 0});
    pending.pop_front();
  };
  while (f < m) {
    out.push_back({ItemKind::kForward, f++, 0});
    backward_then_weight();
  }
  while (b < m) backward_then_weight();
  while (!pending.empty()) {
    out.push_back({ItemKind::kWeight, pending.front(), 0});
    pending.pop_front();
  }
  return out;
}

}  // namespace

PipelineSchedule MakeSchedule(Schedule kind, int p, int m, int v, int flushes) {
  if (flushes > 1) {
    Check(m % flushes == 0, "pipeline flushes must divide the micro-batches");
    const int per = m / flushes;
    PipelineSchedule s = MakeSchedule(kind, p, per, v);
    s.microbatches = m;
    for (auto& o : s.order) {
      const std::size_t n = o.size();
      o.reserve(n * static_cast<std::size_t>(flushes));
      for (int k = 1; k < flushes; ++k) {
        for (std::size_t i = 0; i < n; ++i) {
          ScheduleItem it = o[i];
          it.microbatch += k * per;
          o.push_back(it);
        }
      }
    }
    return s;
  }
  PipelineSchedule s;
  s.stages = p;
  s.microbatches = m;
  s.chunks = kind == Schedule::kInterleaved ? v : 1;
  s.split_weight = SplitsWeightGradients(kind);
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

SteadyPeriod SteadyPeriodOf(const std::vector<ScheduleItem>& order) {
  const std::size_t size = order.size();
  auto same = [&](std::size_t a, std::size_t b) {
    return order[a].kind == order[b].kind && order[a].chunk == order[b].chunk;
  };
  for (const std::size_t mid : {size / 2, size / 4}) {
    for (std::size_t q = 1; mid + q < size; ++q) {
      std::size_t lo = mid, hi = mid;  // [lo, hi): positions that repeat q items later
      while (hi + q < size && same(hi, hi + q)) ++hi;
      while (lo > 0 && same(lo - 1, lo - 1 + q)) --lo;
      // The first q repeating over two periods and a quarter of the order: a shorter
      // repetition (interleaved 1F1B's q = 2 within a group of p micro-batches) spans less,
      // and multiples of the period would be tried after it. Counted in the middle of the
      // stretch, away from the warm-up's and drain's odd items.
      if (hi - lo >= 2 * q && 4 * (hi - lo) >= size) {
        return {static_cast<int>(q), static_cast<int>(lo + (hi - lo - q) / 2)};
      }
    }
  }
  return {};
}

const PipelineSchedule& SharedSchedule(Schedule kind, int p, int m, int v, int flushes) {
  // Most recent first; the planner bounds thousands of candidates with a handful of shapes.
  constexpr std::size_t kKept = 8;
  struct Entry {
    Schedule kind;
    int p, m, v, flushes;
    std::shared_ptr<const PipelineSchedule> sched;
  };
  thread_local std::vector<Entry> cache;
  for (std::size_t i = 0; i < cache.size(); ++i) {
    const Entry& e = cache[i];
    if (e.kind != kind || e.p != p || e.m != m || e.v != v || e.flushes != flushes) continue;
    std::rotate(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(i),
                cache.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return *cache.front().sched;
  }
  auto made = std::make_shared<const PipelineSchedule>(MakeSchedule(kind, p, m, v, flushes));
  if (cache.size() >= kKept) cache.pop_back();
  cache.insert(cache.begin(), Entry{kind, p, m, v, flushes, std::move(made)});
  return *cache.front().sched;
}

}  // namespace shardcast
