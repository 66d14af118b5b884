// tt::Helper and tt::parallel_for: every index once, chunk boundaries that depend only on
// the range and grain, the helper thread sharing a loop's chunks, errors reaching the
// caller, nesting, and posted jobs run in order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tt/helper.h"

namespace {

struct Registered {  // registers a helper for loops for one test, whatever happens
  explicit Registered(tt::Helper& h) { tt::Helper::use_for_loops(&h); }
  ~Registered() { tt::Helper::use_for_loops(nullptr); }
};

// Runs parallel_for over [begin, end) and checks each index is visited once and each call
// is one of parallel_chunk's ranges.
void expect_each_index_once(int64_t begin, int64_t end, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(end - begin));
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> calls;
  tt::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - begin)].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    calls.insert({b, e});
  });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "index " << begin + int64_t(i);
  std::set<std::pair<int64_t, int64_t>> expected;
  for (int64_t c = 0; c < tt::parallel_chunks(begin, end, grain); ++c)
    expected.insert(tt::parallel_chunk(begin, end, grain, c));
  EXPECT_EQ(calls, expected);
}

}  // namespace

TEST(Helper, ChunksDependOnlyOnTheRangeAndGrain) {
  EXPECT_EQ(tt::parallel_chunks(0, 0, 8), 0);
  EXPECT_EQ(tt::parallel_chunks(5, 3, 8), 0);
  EXPECT_EQ(tt::parallel_chunks(0, 10, 1), 10);   // one topic a chunk
  EXPECT_EQ(tt::parallel_chunks(0, 4000, 1024), 4);
  EXPECT_EQ(tt::parallel_chunks(0, 100000, 1), 16);  // at most ~16 chunks
  EXPECT_EQ(tt::parallel_chunk(0, 4000, 1024, 3), std::make_pair(int64_t{3072}, int64_t{4000}));
  EXPECT_EQ(tt::parallel_chunk(10, 20, 0, 0), std::make_pair(int64_t{10}, int64_t{11}));  // grain 0 is 1
}

TEST(Helper, WithoutAHelperEveryIndexRunsOnce) {
  ASSERT_EQ(tt::Helper::for_loops(), nullptr);
  expect_each_index_once(0, 1, 1);
  expect_each_index_once(3, 1003, 7);
  expect_each_index_once(0, 100000, 1);
}

TEST(Helper, TheHelperSharesALoopsChunks) {
  tt::Helper h;
  Registered reg(h);
  expect_each_index_once(0, 4000, 1024);
  expect_each_index_once(-50, 12345, 100);

  // The caller holds the first chunk until another thread has taken one (nudging the
  // helper awake with posted jobs meanwhile): the helper joins loops it was not woken for.
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  tt::parallel_for(0, 16, 1, [&](int64_t b, int64_t) {
    if (std::this_thread::get_id() != caller) {
      elsewhere.fetch_add(1);
      return;
    }
    if (b != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (elsewhere.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      h.post([] {});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_GT(elsewhere.load(), 0) << "the helper never took a chunk";
}

TEST(Helper, AChunksErrorReachesTheCallerAfterTheHelperIsDone) {
  tt::Helper h;
  Registered reg(h);
  std::atomic<int> running{0};
  auto loop = [&] {
    tt::parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
      running.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      running.fetch_sub(1);
      if (b <= 5 && 5 < e) throw std::runtime_error("index 5 failed");
    });
  };
  EXPECT_THROW(
      {
        try {
          loop();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "index 5 failed");
          EXPECT_EQ(running.load(), 0) << "a chunk still ran after the loop returned";
          throw;
        }
      },
      std::runtime_error);
  expect_each_index_once(0, 1000, 10);  // the helper is still usable
}

TEST(Helper, NestedLoopsRunSeriallyInsideAChunk) {
  tt::Helper h;
  Registered reg(h);
  std::atomic<int64_t> sum{0};
  tt::parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto outer = std::this_thread::get_id();
      tt::parallel_for(0, 100, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        for (int64_t j = b2; j < e2; ++j) sum.fetch_add(i * 100 + j);
      });
    }
  });
  int64_t expected = 0;
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 100; ++j) expected += i * 100 + j;
  EXPECT_EQ(sum.load(), expected);
}

TEST(Helper, PostedJobsRunInOrderAndFinishBeforeItStops) {
  std::vector<int> order;
  std::thread::id ran_on;
  {
    tt::Helper h;
    for (int i = 0; i < 100; ++i)
      h.post([&order, &ran_on, i] {
        if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the rest queue up
        order.push_back(i);
        ran_on = std::this_thread::get_id();
      });
  }  // the destructor waits for all 100
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(Helper, ADestroyedHelperIsNoLongerUsedForLoops) {
  {
    tt::Helper h;
    tt::Helper::use_for_loops(&h);
    EXPECT_EQ(tt::Helper::for_loops(), &h);
  }
  EXPECT_EQ(tt::Helper::for_loops(), nullptr);
  expect_each_index_once(0, 1000, 10);
}
