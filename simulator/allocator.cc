#include "simulator/allocator.h"

#include <cmath>
#include <iterator>
#include <stdexcept>

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
  return {x.stream, x.size, x.segment, x.offset, b};
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
  auto it = pool.lower_bound(Key{stream, rounded, -1, -1, -1});
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
  const std::int64_t rounded = AllocatorRoundedBytes(static_cast<std::int64_t>(std::ceil(bytes)));
  const bool small = rounded <= kAllocSmallSizeBytes;
  int b = FindFree(rounded, small, stream);
  if (b < 0) {
    bool ok = NewSegment(rounded, small, stream);
    if (!ok) {
      ++retries_;
      ProcessEvents();  // release_cached_blocks synchronizes first
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
  allocated_ -= blocks_[static_cast<std::size_t>(handle)].size;
  ReturnBlock(handle);
}

void CachingAllocatorModel::FreeDeferred(int handle) {
  CheckLive(handle);
  Block& x = blocks_[static_cast<std::size_t>(handle)];
  allocated_ -= x.size;
  x.pending = true;
  pending_.push_back(handle);
}

void CachingAllocatorModel::ProcessEvents() {
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

}  // namespace shardcast
