#include "simulator/allocator.h"

#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace shardcast {

std::int64_t AllocatorRoundedBytes(std::int64_t bytes) {
  if (bytes < kAllocMinBlockBytes) return kAllocMinBlockBytes;
  return kAllocMinBlockBytes * ((bytes + kAllocMinBlockBytes - 1) / kAllocMinBlockBytes);
}

std::int64_t AllocatorSegmentBytes(std::int64_t rounded) {
  if (rounded <= kAllocSmallSizeBytes) return kAllocSmallBufferBytes;
  if (rounded < kAllocMinLargeAllocBytes) return kAllocLargeBufferBytes;
  return kAllocRoundLargeBytes * ((rounded + kAllocRoundLargeBytes - 1) / kAllocRoundLargeBytes);
}

CachingAllocatorModel::CachingAllocatorModel(double capacity_bytes) : capacity_(capacity_bytes) {}

CachingAllocatorModel::Key CachingAllocatorModel::KeyOf(int b) const {
  const Block& x = blocks_[static_cast<std::size_t>(b)];
  // Among blocks of one size, the newest segment's first (-segment): cudaMalloc hands out lower
  // addresses to later segments and PyTorch orders equal sizes by address (see allocator.h).
  return {x.stream, x.size, -x.segment, x.offset, b};
}

int CachingAllocatorModel::NewBlock(const Block& b) {
  if (!unused_.empty()) {
    const int i = unused_.back();
    unused_.pop_back();
    blocks_[static_cast<std::size_t>(i)] = b;
    return i;
  }
  blocks_.push_back(b);
  return static_cast<int>(blocks_.size()) - 1;
}

int CachingAllocatorModel::FindFree(std::int64_t rounded, bool small, int stream) {
  std::set<Key>& pool = PoolOf(small);
  auto it = pool.lower_bound(Key{stream, rounded, std::numeric_limits<int>::min(), -1, -1});
  if (it == pool.end() || std::get<0>(*it) != stream) return -1;
  const int b = std::get<4>(*it);
  pool.erase(it);
  return b;
}

bool CachingAllocatorModel::NewSegment(std::int64_t rounded, bool small, int stream) {
  const std::int64_t seg = AllocatorSegmentBytes(rounded);
  if (capacity_ > 0 && static_cast<double>(reserved_ + seg) > capacity_) return false;
  Block b;
  b.size = seg;
  b.segment = next_segment_id_++;
  b.small = small;
  b.stream = stream;
  PoolOf(small).insert(KeyOf(NewBlock(b)));
  reserved_ += seg;
  ++segments_;
  if (segments_ > peak_segments_) peak_segments_ = segments_;
  if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  return true;
}

void CachingAllocatorModel::ReleaseCached() {
  for (std::set<Key>* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const int b = std::get<4>(*it);
      Block& x = blocks_[static_cast<std::size_t>(b)];
      if (x.prev == -1 && x.next == -1) {  // a whole segment, unsplit and free
        reserved_ -= x.size;
        --segments_;
        unused_.push_back(b);
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
}

int CachingAllocatorModel::Allocate(double bytes, int stream) {
  if (!(bytes > 0) || !std::isfinite(bytes)) throw std::invalid_argument("CachingAllocatorModel::Allocate: bytes must be positive");
  const std::int64_t requested = static_cast<std::int64_t>(std::ceil(bytes));
  const int b = AllocateRounded(AllocatorRoundedBytes(requested), stream);
  Record(AllocatorEvent::Kind::kAlloc, b, requested, stream);
  return b;
}

int CachingAllocatorModel::AllocateRounded(std::int64_t rounded, int stream) {
  const bool small = rounded <= kAllocSmallSizeBytes;
  int b = FindFree(rounded, small, stream);
  if (b < 0) {
    bool ok = NewSegment(rounded, small, stream);
    if (!ok) {
      ++retries_;
      ReturnPending();  // release_cached_blocks synchronizes first
      ReleaseCached();
      ok = NewSegment(rounded, small, stream);
    }
    if (!ok) {
      if (ooms_++ == 0) first_oom_bytes_ = rounded;
      return -1;
    }
    b = FindFree(rounded, small, stream);
  }
  Block& x = blocks_[static_cast<std::size_t>(b)];
  const std::int64_t remaining = x.size - rounded;
  const bool split = small ? remaining >= kAllocMinBlockBytes : remaining > kAllocSmallSizeBytes;
  if (split) {
    Block rest;
    rest.size = remaining;
    rest.offset = x.offset + rounded;
    rest.segment = x.segment;
    rest.small = x.small;
    rest.stream = x.stream;
    rest.prev = b;
    rest.next = x.next;
    const int r = NewBlock(rest);
    Block& y = blocks_[static_cast<std::size_t>(b)];  // NewBlock may have moved blocks_
    if (y.next >= 0) blocks_[static_cast<std::size_t>(y.next)].prev = r;
    y.next = r;
    y.size = rounded;
    PoolOf(small).insert(KeyOf(r));
  }
  Block& z = blocks_[static_cast<std::size_t>(b)];
  z.allocated = true;
  allocated_ += z.size;
  if (allocated_ > peak_allocated_) peak_allocated_ = allocated_;
  return b;
}

void CachingAllocatorModel::CheckLive(int handle) const {
  if (handle < 0 || static_cast<std::size_t>(handle) >= blocks_.size() ||
      !blocks_[static_cast<std::size_t>(handle)].allocated || blocks_[static_cast<std::size_t>(handle)].pending) {
    throw std::invalid_argument("CachingAllocatorModel::Free: not a live handle");
  }
}

void CachingAllocatorModel::Free(int handle) {
  CheckLive(handle);
  Record(AllocatorEvent::Kind::kFree, handle);
  allocated_ -= blocks_[static_cast<std::size_t>(handle)].size;
  ReturnBlock(handle);
}

void CachingAllocatorModel::FreeDeferred(int handle) {
  CheckLive(handle);
  Record(AllocatorEvent::Kind::kFreeDeferred, handle);
  Block& x = blocks_[static_cast<std::size_t>(handle)];
  allocated_ -= x.size;
  x.pending = true;
  pending_.push_back(handle);
}

void CachingAllocatorModel::ProcessEvents() {
  Record(AllocatorEvent::Kind::kProcessEvents, -1);
  ReturnPending();
}

void CachingAllocatorModel::Record(AllocatorEvent::Kind kind, int handle, std::int64_t bytes, int stream) {
  if (trace_ != nullptr) trace_->push_back({kind, handle, bytes, stream});
}

void CachingAllocatorModel::ReturnPending() {
  for (int h : pending_) {
    blocks_[static_cast<std::size_t>(h)].pending = false;
    ReturnBlock(h);
  }
  pending_.clear();
}

void CachingAllocatorModel::ReturnBlock(int handle) {
  Block& x = blocks_[static_cast<std::size_t>(handle)];
  x.allocated = false;
  std::set<Key>& pool = PoolOf(x.small);
  // Merge with a free neighbour: the surviving block is the lower one.
  auto absorb_next = [&](int lo) {
    Block& a = blocks_[static_cast<std::size_t>(lo)];
    const int hi = a.next;
    Block& h = blocks_[static_cast<std::size_t>(hi)];
    pool.erase(KeyOf(hi));
    a.size += h.size;
    a.next = h.next;
    if (a.next >= 0) blocks_[static_cast<std::size_t>(a.next)].prev = lo;
    unused_.push_back(hi);
  };
  int b = handle;
  if (x.next >= 0 && !blocks_[static_cast<std::size_t>(x.next)].allocated) absorb_next(b);
  const int p = blocks_[static_cast<std::size_t>(b)].prev;
  if (p >= 0 && !blocks_[static_cast<std::size_t>(p)].allocated) {
    pool.erase(KeyOf(p));
    absorb_next(p);
    b = p;
  }
  pool.insert(KeyOf(b));
}

AllocatorRunStats ReplayAllocatorEvents(const std::vector<AllocatorEvent>& events, double capacity_bytes) {
  CachingAllocatorModel a(capacity_bytes);
  std::unordered_map<int, int> live;  // recorded handle -> this run's (-1: ran out of memory here)
  auto take = [&live](int recorded) {
    auto it = live.find(recorded);
    if (it == live.end()) throw std::invalid_argument("ReplayAllocatorEvents: frees a handle never allocated");
    const int h = it->second;
    live.erase(it);
    return h;
  };
  for (const AllocatorEvent& e : events) {
    switch (e.kind) {
      case AllocatorEvent::Kind::kAlloc: {
        const int h = a.Allocate(static_cast<double>(e.bytes), e.stream);
        if (e.handle >= 0) live[e.handle] = h;
        break;
      }
      case AllocatorEvent::Kind::kFree:
        if (const int h = take(e.handle); h >= 0) a.Free(h);
        break;
      case AllocatorEvent::Kind::kFreeDeferred:
        if (const int h = take(e.handle); h >= 0) a.FreeDeferred(h);
        break;
      case AllocatorEvent::Kind::kProcessEvents: a.ProcessEvents(); break;
    }
  }
  return a.stats();
}

}  // namespace shardcast
