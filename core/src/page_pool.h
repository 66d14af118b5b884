#pragma once
// Whole pages for the meter's caching allocator: anonymous mappings, kept when freed and
// handed out again, so a training step does not fault its buffers back in every time.
//
// A request takes the smallest idle block that holds it (its head; the tail stays idle). When
// no idle block is large enough, the request is mapped fresh and the idle blocks' pages are
// moved into it with mremap (page tables move; nothing is copied or zeroed), largest first.
// So the pool maps a new page only when no idle one is left (or a request would be more than
// 256 pieces): what it holds stays at the peak of live tensors, the same pages serving tensors
// of any size in turn.
//
// mremap moves a range only within one kernel mapping (VMA), and pages moved from different
// places stay separate mappings, so each block remembers where its pieces begin (cuts) and a
// move never crosses one. Not thread-safe: the meter calls it under its lock.
#include <cstddef>
#include <map>
#include <vector>

namespace tt {

class PagePool {
 public:
  struct Block {
    char* base = nullptr;
    size_t size = 0;           // bytes, a multiple of the page size
    std::vector<size_t> cuts;  // offsets (ascending, > 0) where a separate mapping begins
  };

  PagePool();
  ~PagePool();  // leaves live blocks alone (tensors may outlive everything)
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  size_t page() const { return page_; }
  size_t round(size_t bytes) const { return (bytes + page_ - 1) / page_ * page_; }

  // A block of round(bytes) bytes; nullptr when the system has no memory for it.
  Block* take(size_t bytes);
  void give(Block* b);  // back to idle (all idle unmapped if they are in too many pieces)
  void release();       // unmaps every idle block

  size_t idle() const { return idle_bytes_; }
  size_t mapped() const { return mapped_; }  // live and idle blocks' bytes

 private:
  Block* split_head(Block* b, size_t size);  // b keeps its head; returns the tail (or nullptr)
  Block* assemble(size_t size);
  void add_idle(Block* b);
  std::multimap<size_t, Block*>::iterator by_size(Block* b);
  void remove_idle(std::multimap<size_t, Block*>::iterator it);

  size_t page_;
  std::multimap<size_t, Block*> idle_;  // size -> idle block
  std::map<char*, Block*> at_;          // base -> idle block, to join neighbours
  size_t idle_bytes_ = 0;
  size_t idle_pieces_ = 0;  // separate mappings among the idle blocks
  size_t mapped_ = 0;
};

}  // namespace tt
