#pragma once
/// \file allocator.h
/// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, the native
/// allocator without expandable segments, the default from PyTorch 1.x through 2.x), so that a
/// simulated allocation trace can be replayed to predict what the allocator *reserves* from the
/// device (torch.cuda.max_memory_reserved, and what nvidia-smi shows beside the CUDA context),
/// not only what the tensors occupy (max_memory_allocated). docs/simulator.md, "Reserved memory".
///
/// The rules, as the allocator's source states them:
///  - every request is rounded up to a multiple of 512 bytes (kMinBlockSize);
///  - requests up to 1 MiB (kSmallSize) come from the small pool, larger ones from the large pool;
///  - a new segment (one cudaMalloc) is 2 MiB (kSmallBuffer) for a small request, 20 MiB
///    (kLargeBuffer) for a request under 10 MiB (kMinLargeAlloc), else the request rounded up to
///    a multiple of 2 MiB (kRoundLarge);
///  - a request takes the smallest free cached block of its pool that holds it (best fit; the
///    lowest address among equals), before any new segment. Addresses are the CUDA driver's:
///    on the H200 (driver 580, CUDA 13) later cudaMalloc segments got lower addresses, so among
///    blocks of one size the newest segment's is taken, the lowest offset within a segment;
///  - a block larger than the request is split when the remainder is at least 512 bytes (small
///    pool) or more than 1 MiB (large pool); otherwise the request gets the whole block;
///  - a freed block merges with its free neighbours within its segment; segments never merge;
///  - when a new segment does not fit in the device, the allocator frees every cached segment
///    that is wholly free (release_cached_blocks, counted in memory_stats' num_alloc_retries) and
///    tries once more; if that fails too, the request runs out of memory;
///  - blocks belong to the stream that allocated them: a request is served only from its own
///    stream's cached blocks (each stream its own pools);
///  - a block a tensor used on another stream (record_stream) is not reused when the tensor is
///    freed: it counts as freed (allocated bytes drop) but joins the cache only once the other
///    stream's work is done (insert_events, then process_events); releasing the cache first
///    synchronizes and takes those blocks back (synchronize_and_free_events).
///
/// Checked against PyTorch 2.11's allocator on an H200 (scripts/allocator-check.py,
/// validation/h200/allocator_check.txt; docs/simulator.md, "Reserved memory"): the same peak
/// allocated and reserved bytes, peak segments, retries and out-of-memory counts on every replay.

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

namespace shardcast {

/// PyTorch's allocator constants (CUDACachingAllocator.cpp), in bytes.
inline constexpr std::int64_t kAllocMinBlockBytes = 512;
inline constexpr std::int64_t kAllocSmallSizeBytes = 1 << 20;
inline constexpr std::int64_t kAllocSmallBufferBytes = 2 << 20;
inline constexpr std::int64_t kAllocLargeBufferBytes = 20 << 20;
inline constexpr std::int64_t kAllocMinLargeAllocBytes = 10 << 20;
inline constexpr std::int64_t kAllocRoundLargeBytes = 2 << 20;

/// Request size after rounding (round_size): a multiple of 512 bytes, at least 512.
std::int64_t AllocatorRoundedBytes(std::int64_t bytes);
/// Size of the segment a request of `rounded` bytes opens when no cached block holds it
/// (get_allocation_size).
std::int64_t AllocatorSegmentBytes(std::int64_t rounded);

/// One call on the allocator model, in the order it was made (CachingAllocatorModel::set_trace):
/// the requests a replayed step makes, which scripts/allocator-check.py replays through PyTorch's
/// own allocator to check the model against it (docs/simulator.md, "Reserved memory").
struct AllocatorEvent {
  enum class Kind : std::uint8_t {
    kAlloc,          ///< Allocate(bytes, stream); handle: what it returned (-1: out of memory)
    kFree,           ///< Free(handle)
    kFreeDeferred,   ///< FreeDeferred(handle): record_stream, then the tensor freed
    kProcessEvents,  ///< ProcessEvents() (the retry's own return of held blocks is not a call)
  };
  Kind kind = Kind::kAlloc;
  int handle = -1;
  std::int64_t bytes = 0;  ///< kAlloc: the request in whole bytes, before the 512-byte rounding
  int stream = 0;          ///< kAlloc: the stream
};

/// What the allocator model did over a run.
struct AllocatorRunStats {
  std::int64_t peak_allocated_bytes = 0;  ///< max_memory_allocated
  std::int64_t peak_reserved_bytes = 0;   ///< max_memory_reserved
  int peak_segments = 0;                  ///< cudaMalloc'd segments held at most at once
  int retries = 0;                        ///< num_alloc_retries
  int ooms = 0;                           ///< num_ooms
};

/// The caching allocator of one device. Handles are small integers, valid from Allocate until
/// Free.
class CachingAllocatorModel {
 public:
  /// `capacity_bytes`: what the allocator may reserve (the device's memory less what the CUDA
  /// context and libraries hold outside it); <= 0: unlimited.
  explicit CachingAllocatorModel(double capacity_bytes = 0);

  /// Allocates `bytes` (> 0) on stream `stream` (0: the compute stream); returns the handle, or
  /// -1 when the request runs out of memory (after the allocator's one retry with its cache
  /// released).
  int Allocate(double bytes, int stream = 0);
  /// Frees a handle returned by Allocate (not -1, not freed before).
  void Free(int handle);
  /// Frees a handle whose block another stream still uses (record_stream): the allocated bytes
  /// drop now, the block waits outside the cache until ProcessEvents (or a cache release).
  void FreeDeferred(int handle);
  /// The other streams' work is done: the blocks FreeDeferred set aside join the cache.
  void ProcessEvents();

  std::int64_t allocated_bytes() const { return allocated_; }  ///< rounded sizes of live blocks
  std::int64_t reserved_bytes() const { return reserved_; }    ///< sizes of all segments
  std::int64_t peak_allocated_bytes() const { return peak_allocated_; }
  std::int64_t peak_reserved_bytes() const { return peak_reserved_; }
  int segments() const { return segments_; }
  /// Times the cache was released to make room for a new segment (num_alloc_retries).
  int retries() const { return retries_; }
  int ooms() const { return ooms_; }  ///< requests that ran out of memory
  /// Rounded size of the first request that ran out of memory (0: none did).
  std::int64_t first_oom_request_bytes() const { return first_oom_bytes_; }
  int peak_segments() const { return peak_segments_; }  ///< segments held at most at once
  AllocatorRunStats stats() const {
    return {peak_allocated_, peak_reserved_, peak_segments_, retries_, ooms_};
  }
  /// Appends every later call to `sink` (not owned; nullptr: stop recording).
  void set_trace(std::vector<AllocatorEvent>* sink) { trace_ = sink; }

 private:
  struct Block {
    std::int64_t size = 0, offset = 0;
    int segment = 0;
    int prev = -1, next = -1;  ///< neighbouring blocks of the same segment
    bool allocated = false, small = false;
    bool pending = false;  ///< freed with FreeDeferred: still held, outside the cache
    int stream = 0;        ///< the stream whose pool the block's segment belongs to
  };
  using Key = std::tuple<int, std::int64_t, int, std::int64_t, int>;  // stream, size, segment, offset, block
  Key KeyOf(int b) const;
  std::set<Key>& PoolOf(bool small) { return small ? small_free_ : large_free_; }
  int NewBlock(const Block& b);
  int AllocateRounded(std::int64_t rounded, int stream);
  int FindFree(std::int64_t rounded, bool small, int stream);
  bool NewSegment(std::int64_t rounded, bool small, int stream);
  void ReleaseCached();
  void CheckLive(int handle) const;
  void ReturnBlock(int handle);  ///< an unallocated block back into its pool, merged
  void ReturnPending();          ///< the deferred blocks into the cache
  void Record(AllocatorEvent::Kind kind, int handle, std::int64_t bytes = 0, int stream = 0);

  double capacity_;
  std::vector<Block> blocks_;
  std::vector<int> unused_;  ///< indices of blocks_ to reuse
  std::vector<int> pending_;  ///< blocks freed by FreeDeferred, not yet back in the cache
  std::set<Key> small_free_, large_free_;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  int segments_ = 0, peak_segments_ = 0, next_segment_id_ = 0, retries_ = 0, ooms_ = 0;
  std::int64_t first_oom_bytes_ = 0;
  std::vector<AllocatorEvent>* trace_ = nullptr;
};

/// Runs a recorded event list through a fresh model with capacity `capacity_bytes` (<= 0:
/// unlimited), each recorded handle mapped to the one this run returns (a request that runs out
/// of memory here leaves its later frees out). Throws std::invalid_argument for a list that frees
/// a handle it never allocated.
AllocatorRunStats ReplayAllocatorEvents(const std::vector<AllocatorEvent>& events, double capacity_bytes);

}  // namespace shardcast
