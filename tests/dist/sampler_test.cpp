// DataLoader::shard, in one process (no collectives needed): every rank's part of a global
// batch is disjoint from the others', together they are the batch a single process would
// read from the same (seed, epoch) order, the order changes per epoch identically for every
// rank; owned sharding keeps each example on one rank; streams are rank-strided.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include <set>
#include <sstream>

#include "tt/data_loader.h"
#include "tt/log.h"
#include "tt/meter.h"
#include "tt/dataset.h"

namespace {

// Example i is the value i.
class Ids : public tt::Dataset {
 public:
  explicit Ids(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  tt::Batch get(const at::Tensor& idx) override {
    tt::Batch b;
    b.set("id", idx.clone());
    return b;
  }

 private:
  int64_t n_;
};

// A stream of the values 0, 1, 2, ... (n per epoch).
class IdStream : public tt::StreamDataset {
 public:
  explicit IdStream(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  void start_epoch(int64_t) override { next_ = 0; }
  tt::Batch next(int64_t k) override {
    const int64_t e = std::min(n_, next_ + k);
    tt::Batch b;
    b.set("id", torch::arange(next_, e, torch::kLong));
    next_ = e;
    return b;
  }
  std::string position() const override { return std::to_string(next_); }
  void restore(const std::string& p) override { next_ = std::stoll(p); }

 private:
  int64_t n_, next_ = 0;
};

std::vector<int64_t> ids(const tt::Batch& b) {
  at::Tensor t = b.at("id").contiguous();
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

}  // namespace

TEST(Sampler, RanksSplitTheGlobalBatchOfOneProcess) {
  auto data = std::make_shared<Ids>(70);
  const int world = 3;
  const int64_t b = 4;  // per rank: a global batch of 12
  tt::DataLoader single(data, b * world, true, 7);
  std::vector<std::unique_ptr<tt::DataLoader>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<tt::DataLoader>(data, b, true, 7));
    ranks.back()->shard(r, world);
  }
  // 70 = 5 x 12 + 10: the last global batch of 10 split 3/3/4
  EXPECT_EQ(ranks[0]->batches_per_epoch(), 6);
  EXPECT_EQ(single.batches_per_epoch(), 6);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < 6; ++i) {
      std::vector<int64_t> joined;
      for (int r = 0; r < world; ++r) {
        auto part = ids(ranks[r]->get(epoch, i));
        EXPECT_GE(part.size(), 3u);
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, ids(single.get(epoch, i))) << "epoch " << epoch << " batch " << i;
      for (auto v : joined) EXPECT_TRUE(seen.insert(v).second) << v << " twice";
    }
    EXPECT_EQ(seen.size(), 70u);
  }
  // reshuffled per epoch
  EXPECT_NE(ids(ranks[0]->get(0, 0)), ids(ranks[0]->get(1, 0)));
}

TEST(Sampler, AFinalBatchSmallerThanTheWorldIsDroppedAndRankZeroSaysSo) {
  std::ostringstream said;  // what the loader logs
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(said);
  tt::log().sinks().push_back(sink);
  auto data = std::make_shared<Ids>(25);  // 2 x 12 + 1
  tt::DataLoader l(data, 4, false, 0);
  l.shard(1, 3);
  EXPECT_EQ(l.batches_per_epoch(), 2);
  EXPECT_EQ(said.str(), "") << "rank 1 says nothing";
  tt::DataLoader r0(data, 4, false, 0);
  r0.shard(0, 3);
  EXPECT_NE(said.str().find("the epoch's last 1 example(s) of 25 are not trained: fewer than the 3 ranks are left after "
                            "2 global batches of 12 (trainer.batch_size 4 x 3 ranks)"),
            std::string::npos) << said.str();
  said.str("");
  tt::DataLoader even(std::make_shared<Ids>(26), 4, false, 0);  // 3 x 8 + 2: one example for each of 2 ranks
  even.shard(0, 2);
  EXPECT_EQ(said.str(), "");
  tt::log().sinks().pop_back();
}

TEST(Sampler, OwnedShardsKeepEachExampleOnOneRank) {
  auto data = std::make_shared<Ids>(41);
  const int world = 2;
  for (int r = 0; r < world; ++r) {
    tt::DataLoader l(data, 8, true, 3);
    l.shard(r, world, /*owned=*/true);
    EXPECT_EQ(l.batches_per_epoch(), 3);  // 20 examples on the smaller rank, batches of 8
    std::vector<int64_t> first;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::set<int64_t> seen;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < l.batches_per_epoch(); ++i)
        for (auto v : ids(l.get(epoch, i))) {
          EXPECT_EQ(v % world, r);
          EXPECT_TRUE(seen.insert(v).second);
          order.push_back(v);
        }
      EXPECT_EQ(seen.size(), r == 0 ? 21u : 20u);  // every owned example, every epoch
      if (epoch == 0) first = order;
      else EXPECT_NE(first, order);  // reshuffled
    }
  }
}

TEST(Sampler, StreamsAreRankStrided) {
  auto stream = std::make_shared<IdStream>(20);
  tt::DataLoader r0(stream, 3, false, 0), r1(std::make_shared<IdStream>(20), 3, false, 0);
  r0.shard(0, 2);
  r1.shard(1, 2);
  EXPECT_EQ(r0.batches_per_epoch(), 4);  // 3 x 6 + 2 (2 >= ranks: kept)
  EXPECT_EQ(ids(r0.get(0, 0)), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(ids(r1.get(0, 0)), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(ids(r0.get(0, 1)), (std::vector<int64_t>{6, 7, 8}));
  ids(r0.get(0, 2));
  ids(r1.get(0, 1));
  ids(r1.get(0, 2));
  EXPECT_EQ(ids(r0.get(0, 3)), (std::vector<int64_t>{18}));
  EXPECT_EQ(ids(r1.get(0, 3)), (std::vector<int64_t>{19}));
}

// With prefetch, the next epoch's shuffled order and its first batch are made on the loader's
// thread: both count as the step's (the meter's foreground, which its peak follows) once the step
// takes that batch, as they do where the step made them itself (a run resumed in that epoch); the
// order did not count at all before.
TEST(Sampler, APrefetchedEpochsOrderCountsOnceTheStepTakesItsFirstBatch) {
  tt::Meter& m = tt::Meter::global();
  ASSERT_TRUE(m.installed());
  auto data = std::make_shared<Ids>(200000);  // an order: 1,600,000 bytes; a batch's ids: 800,000
  tt::DataLoader l(data, 100000, true, 5, /*prefetch=*/true);
  const int64_t before = m.foreground_current();
  {
    const tt::Batch first = l.get(0, 0);  // made here (nothing prefetched yet)
    const tt::Batch second = l.get(0, 1);
  }
  const tt::Batch b = l.get(1, 0);  // epoch 1's order and batch made on the loader's thread
  EXPECT_EQ(m.foreground_current() - before, 1600000 + 800000);
}
