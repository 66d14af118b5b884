#pragma once
// A second core's worth of help for steps too small for an OpenMP team.
//
// A Helper is one background thread that runs posted jobs in order (the data loader's
// prefetch) and, between jobs, joins tt::parallel_for loops. Waking a sleeping thread on
// another core costs tens of microseconds in a VM, and an OpenMP worker spinning beside
// the prefetch thread takes turns with it on two cores; for a step of a few hundred
// microseconds (the topic model's) both cost more than the split saves. So after a job
// the helper spins for a while looking for work (posted jobs before loops), loops never
// wait for it to start (the calling thread claims chunks from the front, the helper from
// the back, whichever are left when it arrives), and the prefetch and the loops share the one thread instead of fighting for
// the second core.
//
// A helper is used for loops only once registered with use_for_loops() (the trainer
// does that when a model asks for it and trainer.threads >= 2); otherwise
// tt::parallel_for is at::parallel_for.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "tt/export.h"

namespace tt {

class TT_API Helper {
 public:
  Helper();
  ~Helper();  // finishes the posted jobs, then stops (and unregisters itself)
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  // Runs `job` on the helper thread after every job posted before it. The job must not throw
  // (catch inside it and hand the error over); one that does ends the process.
  void post(std::function<void()> job);

  // The helper tt::parallel_for uses, or none (nullptr).
  static void use_for_loops(Helper* helper);
  static Helper* for_loops();

  struct Loop;  // one parallel_for in flight (helper.cpp)
  // Runs the chunks of `loop` not yet claimed, alongside the helper when it is free.
  void run(Loop& loop);

 private:
  void worker();
  bool join_offered();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};   // stop_, readable while spinning
  std::atomic<int> pending_{0};         // jobs_.size(), readable without the lock
  std::atomic<bool> sleeping_{false};   // waiting on cv_ (post() must notify)
  std::atomic<Loop*> offered_{nullptr}; // the loop the caller is running, if any
  std::atomic<bool> in_loop_{false};    // the helper is inside offered_'s chunks
};

// Runs fn(b, e) over [begin, end) split into chunks of max(grain, ~1/16 of the range): the
// chunk boundaries depend only on (begin, end, grain), never on who runs them, so per-chunk
// partial results combined in chunk order are deterministic. With a helper registered,
// the calling thread and the helper share the chunks; without one, at::parallel_for runs
// them. Nested calls, and calls on the helper thread, run serially in the caller.
TT_API void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The number of chunks parallel_for splits [begin, end) into with this grain, and chunk i's
// range: for per-chunk partial results.
TT_API int64_t parallel_chunks(int64_t begin, int64_t end, int64_t grain);
TT_API std::pair<int64_t, int64_t> parallel_chunk(int64_t begin, int64_t end, int64_t grain, int64_t i);

}  // namespace tt
