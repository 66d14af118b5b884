#include "page_pool.h"

#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

namespace tt {
namespace {
// A block assembled from more pieces than this takes fresh pages for the rest: every piece is
// a kernel mapping of its own, and a process may have only so many (vm.max_map_count).
constexpr int kMaxPieces = 256;
// Pieces move, they never merge back, so over many steps idle blocks split into more of them.
// Past this many idle pieces, the idle blocks are unmapped: the next tensors take fresh pages
// (faulted in once) and the pieces start over, far from the process's mapping limit (65530).
constexpr size_t kMaxIdlePieces = 8192;
}  // namespace

PagePool::PagePool() : page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

PagePool::~PagePool() {
  for (auto& [size, b] : idle_) delete b;  // their pages go with the process
}

void PagePool::add_idle(Block* b) {
  // Join an idle neighbour on either side: fewer, larger blocks to serve requests from. The
  // seam becomes a cut, since the two may be separate mappings.
  auto next = at_.find(b->base + b->size);
  if (next != at_.end()) {
    Block* n = next->second;
    remove_idle(by_size(n));
    b->cuts.push_back(b->size);
    for (size_t c : n->cuts) b->cuts.push_back(b->size + c);
    b->size += n->size;
    delete n;
  }
  auto prev = at_.lower_bound(b->base);
  if (prev != at_.begin()) {
    --prev;
    Block* p = prev->second;
    if (p->base + p->size == b->base) {
      remove_idle(by_size(p));
      p->cuts.push_back(p->size);
      for (size_t c : b->cuts) p->cuts.push_back(p->size + c);
      p->size += b->size;
      delete b;
      b = p;
    }
  }
  idle_.emplace(b->size, b);
  at_.emplace(b->base, b);
  idle_bytes_ += b->size;
  idle_pieces_ += b->cuts.size() + 1;
}

std::multimap<size_t, PagePool::Block*>::iterator PagePool::by_size(Block* b) {
  auto [lo, hi] = idle_.equal_range(b->size);
  for (auto it = lo; it != hi; ++it)
    if (it->second == b) return it;
  return idle_.end();  // not reached: every idle block is in both maps
}

void PagePool::remove_idle(std::multimap<size_t, Block*>::iterator it) {
  idle_bytes_ -= it->second->size;
  idle_pieces_ -= it->second->cuts.size() + 1;
  at_.erase(it->second->base);
  idle_.erase(it);
}

PagePool::Block* PagePool::split_head(Block* b, size_t size) {
  if (b->size == size) return nullptr;
  auto* tail = new Block{b->base + size, b->size - size, {}};
  auto first_after = std::upper_bound(b->cuts.begin(), b->cuts.end(), size);
  for (auto c = first_after; c != b->cuts.end(); ++c) tail->cuts.push_back(*c - size);
  b->cuts.erase(std::lower_bound(b->cuts.begin(), b->cuts.end(), size), b->cuts.end());
  b->size = size;
  return tail;
}

PagePool::Block* PagePool::take(size_t bytes) {
  const size_t size = round(bytes);
  auto it = idle_.lower_bound(size);
  if (it != idle_.end()) {
    Block* b = it->second;
    remove_idle(it);
    if (Block* tail = split_head(b, size)) add_idle(tail);
    return b;
  }
  return assemble(size);
}

PagePool::Block* PagePool::assemble(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // Named in /proc/PID/maps and smaps as [anon:tt tensors] where the kernel supports it.
  (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, p, size, "tt tensors");
  auto* out = new Block{static_cast<char*>(p), size, {}};
  size_t fill = 0;
  int pieces = 0;
  bool failed = false;
  // Every idle block is smaller than size here (take() found none that holds it).
  while (fill < size && !idle_.empty() && pieces < kMaxPieces && !failed) {
    auto largest = std::prev(idle_.end());
    Block* src = largest->second;
    remove_idle(largest);
    size_t done = 0;  // bytes of src moved
    for (size_t s = 0; s <= src->cuts.size() && fill < size && pieces < kMaxPieces; ++s) {
      const size_t begin = s == 0 ? 0 : src->cuts[s - 1];
      const size_t end = s == src->cuts.size() ? src->size : src->cuts[s];
      const size_t len = std::min(end - begin, size - fill);
      if (mremap(src->base + begin, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, out->base + fill) == MAP_FAILED) {
        failed = true;  // e.g. the mapping count limit: the rest stays fresh pages
        break;
      }
      ++pieces;
      if (fill > 0) out->cuts.push_back(fill);
      fill += len;
      done = begin + len;
    }
    if (done == 0) {
      add_idle(src);
    } else if (done < src->size) {
      // What was not moved stays idle: src's head range is gone, its tail remains mapped.
      Block* rest = split_head(src, done);
      delete src;
      add_idle(rest);
    } else {
      delete src;
    }
  }
  if (fill > 0 && fill < size) out->cuts.push_back(fill);  // the fresh remainder
  mapped_ += size - fill;  // moved pages were already counted
  return out;
}

void PagePool::give(Block* b) {
  add_idle(b);
  if (idle_pieces_ > kMaxIdlePieces) release();
}

void PagePool::release() {
  for (auto& [size, b] : idle_) {
    munmap(b->base, b->size);
    mapped_ -= b->size;
    delete b;
  }
  idle_.clear();
  at_.clear();
  idle_bytes_ = 0;
  idle_pieces_ = 0;
}

}  // namespace tt
