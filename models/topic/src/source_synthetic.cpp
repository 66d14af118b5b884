#include "source_synthetic.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tt/error.h"

namespace tt::topic {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256**, seeded through splitmix64 from (seed, stream, index): one independent
// generator per document (or topic), cheap to make.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t s = seed;
    s = splitmix64(s) ^ (stream * 0xd1b54a32d192ed03ULL);
    s = splitmix64(s) ^ index;
    for (auto& w : s_) w = splitmix64(s);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double exponential() { return -std::log1p(-uniform()); }                    // Exp(1)
  int64_t poisson(double lam) {
    if (lam < 10) {  // multiplication of uniforms (Knuth)
      const double limit = std::exp(-lam);
      int64_t k = 0;
      double p = uniform();
      while (p > limit) {
        ++k;
        p *= uniform();
      }
      return k;
    }
    // PTRS, transformed rejection with squeeze (Hoermann 1993), as numpy does for lam >= 10
    const double slam = std::sqrt(lam), loglam = std::log(lam);
    const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
    while (true) {
      const double u = uniform() - 0.5, v = uniform(), us = 0.5 - std::fabs(u);
      const auto k = static_cast<int64_t>(std::floor((2 * a / us + b) * u + lam + 0.43));
      if (us >= 0.07 && v <= vr) return k;
      if (k < 0 || (us < 0.013 && v > us)) continue;
      if (std::log(v) + std::log(invalpha) - std::log(a / (us * us) + b) <=
          -lam + static_cast<double>(k) * loglam - std::lgamma(static_cast<double>(k) + 1))
        return k;
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

constexpr uint64_t kTopicStream = 1, kDocStream = 2;

}  // namespace

SyntheticCorpus::SyntheticCorpus(int64_t n, int64_t m, int64_t k, double avg_doc_length, uint64_t seed)
    : n_(n), m_(m), k_(k), avg_(avg_doc_length), seed_(seed) {
  TT_CHECK_AS(ConfigError, n >= 1, "synthetic corpus: n (documents) must be at least 1, got ", n);
  TT_CHECK_AS(ConfigError, m >= 1, "synthetic corpus: m (terms) must be at least 1, got ", m);
  TT_CHECK_AS(ConfigError, k >= 1, "synthetic corpus: k (topics) must be at least 1, got ", k);
  TT_CHECK_AS(ConfigError, k <= m, "synthetic corpus: k (", k, " topics) must not exceed m (", m, " terms)");
  TT_CHECK_AS(ConfigError, std::isfinite(avg_doc_length) && avg_doc_length > 0,
              "synthetic corpus: avg_doc_length must be positive, got ", avg_doc_length);
  TT_CHECK_AS(ConfigError, m < (int64_t{1} << 31), "synthetic corpus: m (", m, " terms) must be below 2^31");
  TT_CHECK_AS(ConfigError, avg_doc_length <= 1e9, "synthetic corpus: avg_doc_length ", avg_doc_length,
              " is too large (at most 1e9 words a document)");
  accept_.resize(static_cast<size_t>(k * m));
  alias_.resize(static_cast<size_t>(k * m));
  F_.resize(static_cast<size_t>(k * m));
  at::parallel_for(0, k, 1, [&](int64_t t0, int64_t t1) {
    std::vector<double> w(static_cast<size_t>(m_));
    std::vector<int64_t> small, large;
    for (int64_t t = t0; t < t1; ++t) {
      Rng rng(seed_, kTopicStream, static_cast<uint64_t>(t));
      double total = 0;
      for (auto& x : w) total += (x = rng.exponential());  // Dirichlet(1_m): normalised Exp(1)
      float* f = F_.data() + t * m_;
      float* accept = accept_.data() + t * m_;
      int32_t* alias = alias_.data() + t * m_;
      small.clear();
      large.clear();
      for (int64_t j = 0; j < m_; ++j) {
        f[j] = static_cast<float>(w[static_cast<size_t>(j)] / total);
        w[static_cast<size_t>(j)] *= static_cast<double>(m_) / total;  // mean 1
        (w[static_cast<size_t>(j)] < 1 ? small : large).push_back(j);
        alias[j] = static_cast<int32_t>(j);
      }
      while (!small.empty() && !large.empty()) {
        const int64_t s = small.back(), l = large.back();
        small.pop_back();
        accept[s] = static_cast<float>(w[static_cast<size_t>(s)]);
        alias[s] = static_cast<int32_t>(l);
        w[static_cast<size_t>(l)] += w[static_cast<size_t>(s)] - 1;
        if (w[static_cast<size_t>(l)] < 1) {
          large.pop_back();
          small.push_back(l);
        }
      }
      for (int64_t j : large) accept[j] = 1;
      for (int64_t j : small) accept[j] = 1;  // rounding leftovers
    }
  });
}

at::Tensor SyntheticCorpus::true_F() const {
  return at::from_blob(const_cast<float*>(F_.data()), {k_, m_}, at::kFloat).clone();
}

int64_t SyntheticCorpus::document(int64_t doc, float* l_row, float* x_row) const {
  Rng rng(seed_, kDocStream, static_cast<uint64_t>(doc));
  double l_cdf[64];
  std::vector<double> l_heap;
  double* cdf = l_cdf;
  if (k_ > 64) {
    l_heap.resize(static_cast<size_t>(k_));
    cdf = l_heap.data();
  }
  double total = 0;
  for (int64_t t = 0; t < k_; ++t) {
    cdf[t] = rng.exponential();
    total += cdf[t];
  }
  double acc = 0;
  for (int64_t t = 0; t < k_; ++t) {
    l_row[t] = static_cast<float>(cdf[t] / total);
    acc += cdf[t] / total;
    cdf[t] = acc;
  }
  cdf[k_ - 1] = 1.0;

  const int64_t length = std::max<int64_t>(1, rng.poisson(avg_));
  std::memset(x_row, 0, static_cast<size_t>(m_) * sizeof(float));
  const auto m = static_cast<double>(m_);
  for (int64_t w = 0; w < length; ++w) {
    const int64_t z = std::min<int64_t>(k_ - 1, std::upper_bound(cdf, cdf + k_, rng.uniform()) - cdf);
    const int64_t j = std::min<int64_t>(m_ - 1, static_cast<int64_t>(rng.uniform() * m));
    const int64_t term =
        rng.uniform() < accept_[static_cast<size_t>(z * m_ + j)] ? j : alias_[static_cast<size_t>(z * m_ + j)];
    x_row[term] += 1.0f;
  }
  return length;
}

int64_t SyntheticCorpus::documents(int64_t begin, int64_t end, float* L, float* X) const {
  std::vector<int64_t> lengths(static_cast<size_t>(end - begin));
  // grain: enough documents per task that a task's rows are worth a thread (~64 KiB of X)
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, m_));
  at::parallel_for(begin, end, grain, [&](int64_t d0, int64_t d1) {
    for (int64_t d = d0; d < d1; ++d)
      lengths[static_cast<size_t>(d - begin)] = document(d, L + (d - begin) * k_, X + (d - begin) * m_);
  });
  int64_t words = 0;
  for (int64_t n : lengths) words += n;
  return words;
}

}  // namespace tt::topic
