#include "prior.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include "table.h"  // kMaxClasses
#include "tt/error.h"

namespace tt::tab {

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

at::Tensor activate(const at::Tensor& x, int kind) {
  switch (kind) {
    case 0: return x;
    case 1: return torch::tanh(x);
    case 2: return torch::relu(x);
    case 3: return torch::leaky_relu(x, 0.1);
    case 4: return torch::sin(x);
    case 5: return torch::abs(x);
    case 6: return torch::sigmoid(2 * x);
    default: return x * x;
  }
}

// A table whose class causes its features (class_cause_share): features [N, F] standardized,
// classes [N].
std::pair<at::Tensor, at::Tensor> class_caused_table(int64_t N, int64_t F, int64_t C, std::mt19937_64& rng,
                                                     at::Generator& gen) {
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  // The class causes the features: class c has a mean m_c in k latent factors, a row of class c
  // has factors m_c + N(0, 1) and nuisance factors N(0, 1), each feature a random mixture of them
  // plus its own noise; some features load on the nuisance factors only.
  const int64_t least = std::max<int64_t>(2, N / (4 * C));
  std::vector<double> share(static_cast<size_t>(C));
  double total = 0;
  for (auto& s : share) total += (s = uni(0.3, 1.0));
  std::vector<int64_t> labels;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t n = c + 1 == C ? N - static_cast<int64_t>(labels.size())
                                 : std::max(least, static_cast<int64_t>(share[c] / total * static_cast<double>(N)));
    labels.insert(labels.end(), static_cast<size_t>(std::max<int64_t>(0, n)), c);
  }
  labels.resize(static_cast<size_t>(N), C - 1);
  std::shuffle(labels.begin(), labels.end(), rng);
  const at::Tensor y = torch::tensor(labels, torch::kLong);
  const int64_t k = pick(1, std::min<int64_t>(8, C + 2)), nuisance = pick(0, 4);
  const at::Tensor means = at::normal(0, 1, {C, k}, gen, f32) * uni(0.5, 2.0);
  at::Tensor factors = torch::cat({means.index_select(0, y) + at::normal(0, 1, {N, k}, gen, f32),
                                   at::normal(0, 1, {N, nuisance}, gen, f32)}, 1);
  at::Tensor load = at::normal(0, 1, {k + nuisance, F}, gen, f32);
  const int64_t informative = pick(1, F);  // features that load on the class's factors
  std::vector<int64_t> order(static_cast<size_t>(F));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t j = informative; j < F; ++j) load.select(1, order[j]).slice(0, 0, k).zero_();
  const at::Tensor noise = torch::exp(at::rand({F}, gen, f32) * -std::log(0.1) + std::log(0.1));
  at::Tensor feats = factors.mm(load) + at::normal(0, 1, {N, F}, gen, f32) * noise;
  feats = ((feats - feats.mean(0)) / (feats.std(0) + 1e-6)).contiguous();
  return {feats, y};
}

}  // namespace

Batch sample_prior_table(const PriorOptions& o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto gen = at::detail::createCPUGenerator(seed ^ 0x5DEECE66Dull);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  const int64_t N = o.rows;
  const int64_t F = pick(o.min_features, o.max_features);
  const int64_t C = pick(o.min_classes, o.max_classes);
  const bool linear = uni(0, 1) < o.linear_share;
  const int64_t L = pick(1, o.max_layers);
  // Enough hidden nodes in all for F features and the target.
  const int64_t min_width = std::max<int64_t>(4, (F + 1 + L - 1) / L);
  const int64_t width = pick(min_width, std::max(min_width, o.max_width));
  auto f32 = torch::TensorOptions().dtype(torch::kFloat);

  at::Tensor feats;     // [N, F]
  at::Tensor target;   // a scalar cut into classes at quantiles, or
  at::Tensor y_direct;  // classes given directly (the argmax of C functions, or the causing class)
  // Drawn only when the share is set, so that a prior without it draws the tables it always did.
  if (o.class_cause_share > 0 && uni(0, 1) < o.class_cause_share) {
    std::tie(feats, y_direct) = class_caused_table(N, F, C, rng, gen);
  } else {
    at::Tensor h = uni(0, 1) < 0.7 ? at::normal(0, 1, {N, width}, gen, f32)
                                   : (at::rand({N, width}, gen, f32) * 2 - 1) * 1.7;
    std::vector<at::Tensor> nodes{h};
    for (int64_t l = 0; l < L; ++l) {
      const double keep = uni(0.4, 1.0);
      at::Tensor w = at::normal(0, 1, {width, width}, gen, f32) * (at::rand({width, width}, gen, f32) < keep) /
                     std::sqrt(keep * static_cast<double>(width));
      at::Tensor b = at::normal(0, 1, {width}, gen, f32) * uni(0, 0.5);
      const int act = linear ? 0 : static_cast<int>(pick(0, 7));
      const double noise = std::exp(uni(std::log(0.01), std::log(0.5)));
      h = activate(torch::addmm(b, h, w), act) + at::normal(0, 1, {N, width}, gen, f32) * noise;
      h = (h - h.mean(0)) / (h.std(0) + 1e-6);  // keep the scale sane through depth
      nodes.push_back(h);
    }
    // Candidate nodes: the root causes and every layer's nodes.
    at::Tensor all = torch::cat(nodes, 1);  // [N, (L+1)*width]
    std::vector<int64_t> cols(static_cast<size_t>(all.size(1)));
    std::iota(cols.begin(), cols.end(), 0);
    std::shuffle(cols.begin(), cols.end(), rng);
    feats = all.index_select(1, torch::tensor(std::vector<int64_t>(cols.begin() + 1, cols.begin() + 1 + F)));
    feats = feats.contiguous();
    if (uni(0, 1) < o.node_target_share) {
      // TabPFN's way: the target is one more node of the causal graph. Often weakly related to the
      // chosen features (its causes may be unobserved): these tables teach the model to fall back
      // on the class frequencies.
      target = all.select(1, cols[0]).clone();
    } else {
      // The target is a random function of some of the features (a small random MLP, its own noise):
      // the tables where the features tell the class, as in most real ones. Either one output cut
      // into ordered bands, or (argmax_share of these tables, when C > 2) one output per class and
      // the class is the largest, as in multinomial logistic regression: classes that differ along
      // several directions, none of them in between two others.
      const int64_t informative = pick(1, std::min<int64_t>(F, o.max_informative));
      std::vector<int64_t> fi(static_cast<size_t>(F));
      std::iota(fi.begin(), fi.end(), 0);
      std::shuffle(fi.begin(), fi.end(), rng);
      at::Tensor t = feats.index_select(1, torch::tensor(std::vector<int64_t>(fi.begin(), fi.begin() + informative)));
      const bool argmax = C > 2 && uni(0, 1) < o.argmax_share;
      const int64_t outputs = argmax ? C : 1;
      const int64_t depth = linear ? 1 : pick(1, 3);
      for (int64_t l = 0; l < depth; ++l) {
        const int64_t out = l + 1 == depth ? outputs : pick(4, 32);
        at::Tensor w = at::normal(0, 1, {t.size(1), out}, gen, f32) / std::sqrt(static_cast<double>(t.size(1)));
        t = torch::addmm(at::normal(0, 1, {out}, gen, f32) * uni(0, 0.5), t, w);
        if (l + 1 < depth) t = activate(t, static_cast<int>(pick(1, 7)));
        t = (t - t.mean(0)) / (t.std(0) + 1e-6);
      }
      const double noise = std::exp(uni(std::log(0.01), std::log(0.5)));
      if (!argmax) {
        target = t.select(1, 0) + at::normal(0, 1, {N}, gen, f32) * noise;
      } else {
        // Every class keeps at least a few rows: the rarest class's score is raised until it has them.
        at::Tensor logits = t + at::normal(0, 1, {N, C}, gen, f32) * noise;
        const int64_t least = std::max<int64_t>(2, N / (4 * C));
        for (int it = 0; it < 200; ++it) {
          y_direct = logits.argmax(1);
          const at::Tensor counts = torch::bincount(y_direct, {}, C);
          const int64_t rarest = counts.argmin().item<int64_t>();
          if (counts[rarest].item<int64_t>() >= least) break;
          logits.select(1, rarest).add_(0.1);
        }
      }
    }
  }
  // Real tables' columns are skewed, heavy-tailed or stepped (counts, ratings, concentrations),
  // where the causal graph's nodes are smooth. Some features are observed through a random
  // monotone warp after the target was drawn: the information stays, its shape changes (as
  // TabPFN's prior warps its inputs).
  for (int64_t j = 0; j < F; ++j) {
    if (uni(0, 1) >= o.warp_share) continue;
    at::Tensor c = feats.select(1, j);
    switch (pick(0, 2)) {
      case 0: {  // skewed: exp(a x), long right tail
        c.copy_(torch::exp(c.clamp(-8, 8) * uni(0.3, 1.5)));  // finite in float32 whatever the rows
        break;
      }
      case 1: {  // power: sign(x) |x|^p
        c.copy_(torch::sign(c) * torch::pow(torch::abs(c), uni(0.4, 2.5)));
        break;
      }
      default: {  // steps: k levels at the column's quantiles (an ordinal or count column)
        const int64_t k = pick(2, 10);
        at::Tensor s = std::get<0>(c.sort());
        std::vector<float> edges;
        for (int64_t e = 1; e < k; ++e) edges.push_back(s[std::min<int64_t>(N - 1, e * N / k)].item<float>());
        c.copy_(torch::bucketize(c.contiguous(), torch::tensor(edges), false, true).to(torch::kFloat));
        break;
      }
    }
  }
  at::Tensor y = y_direct;
  if (!y.defined()) {
    // Classes at random quantiles (each class holds a share in [0.3, 1] before normalization).
    std::vector<double> share(static_cast<size_t>(C));
    double total = 0;
    for (auto& s : share) total += (s = uni(0.3, 1.0));
    at::Tensor sorted = std::get<0>(target.sort());
    std::vector<float> cuts;
    double acc = 0;
    for (int64_t c = 0; c + 1 < C; ++c) {
      acc += share[c] / total;
      cuts.push_back(sorted[std::min<int64_t>(N - 1, static_cast<int64_t>(acc * static_cast<double>(N)))].item<float>());
    }
    y = torch::bucketize(target, torch::tensor(cuts), /*out_int32=*/false, /*right=*/true);
  }
  std::vector<int64_t> perm(static_cast<size_t>(C));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  y = torch::tensor(perm).index_select(0, y.clamp(0, C - 1));

  const auto n_support = std::clamp<int64_t>(std::llround(uni(o.support_min, o.support_max) * static_cast<double>(N)), 1, N - 1);
  at::Tensor support = torch::zeros({N}, torch::kBool);
  support.index_fill_(0, torch::randperm(N, gen, torch::kLong).slice(0, 0, n_support), true);

  at::Tensor x = torch::zeros({N, o.max_features}, f32);
  x.slice(1, 0, F).copy_(feats);
  at::Tensor fmask = torch::zeros({o.max_features}, torch::kBool);
  fmask.slice(0, 0, F).fill_(true);
  Batch b;
  b.set("x", x.unsqueeze(0));
  b.set("feature_mask", fmask.unsqueeze(0));
  b.set("y", y.unsqueeze(0));
  b.set("support", support.unsqueeze(0));
  b.set("n_classes", torch::full({1}, C, torch::kLong));
  b.set("id_seed", torch::full({1}, id_seed_of(seed), torch::kLong));
  return b;
}

namespace {
Batch stack(const std::vector<Batch>& parts) {
  Batch out;
  for (const auto& [k, _] : parts.at(0).tensors) {
    std::vector<at::Tensor> ts;
    for (const auto& p : parts) ts.push_back(p.at(k));
    out.set(k, torch::cat(ts, 0));
  }
  return out;
}
}  // namespace

Batch sample_prior(const PriorOptions& o, uint64_t seed_base, int64_t count) {
  std::vector<Batch> parts;
  for (int64_t i = 0; i < count; ++i) parts.push_back(sample_prior_table(o, seed_base + static_cast<uint64_t>(i)));
  return stack(parts);
}

Batch PriorDataset::get(const at::Tensor& indices) {
  at::Tensor idx = indices.to(torch::kLong).contiguous();
  std::vector<Batch> parts;
  for (int64_t i = 0; i < idx.numel(); ++i)
    parts.push_back(sample_prior_table(o_, mix(seed_, static_cast<uint64_t>(idx.data_ptr<int64_t>()[i]))));
  return stack(parts);
}

std::string PriorDataset::describe() const {
  return detail::cat(tables_, " synthetic tables of ", o_.rows, " rows, ", o_.min_features, "-", o_.max_features,
                     " features, ", o_.min_classes, "-", o_.max_classes, " classes");
}

namespace {
void check_prior(const Options& o) {
  const auto p = o.to<PriorOptions>();
  o.check(p.min_features <= p.max_features, "min_features", "must be between 1 and max_features");
  o.check(p.min_classes <= p.max_classes, "min_classes", "must be between 2 and max_classes");
  o.check(p.max_classes * 2 <= p.rows, "max_classes", "needs at least 2 rows per class: raise rows");
  o.check(p.support_min <= p.support_max, "support_min",
          "and support_max must satisfy 0 < support_min <= support_max < 1");
}
}  // namespace

Schema prior_schema() {
  using P = PriorOptions;
  return Schema()
      .field("tables", &P::tables, 100000, "synthetic tables per epoch (each one example)").range(ge(1))
      .field("validation_tables", &P::validation_tables, 64, "tables of a fixed validation set (0: none)").range(ge(0))
      .field("rows", &P::rows, 256, "rows per table (support + query)").range(ge(4))
      .field("min_features", &P::min_features, 1, "fewest features of a table").range(ge(1))
      .field("max_features", &P::max_features, 100, "most features (a batch's tables are padded to this and masked)").range(ge(1))
      .field("min_classes", &P::min_classes, 2, "fewest classes").range(ge(2), le(kMaxClasses))
      .field("max_classes", &P::max_classes, 10, "most classes (at most 10, the model's class limit)").range(ge(2), le(kMaxClasses))
      .field("support_min", &P::support_min, 0.3, "smallest share of a table's rows in its support set").range(gt(0), lt(1))
      .field("support_max", &P::support_max, 0.9, "largest share of a table's rows in its support set").range(gt(0), lt(1))
      .field("linear_share", &P::linear_share, 0.2, "share of tables from a linear SCM").range(ge(0), le(1))
      .field("node_target_share", &P::node_target_share, 0.3, "share of tables whose target is a node of the causal graph (else a random function of some features)").range(ge(0), le(1))
      .field("argmax_share", &P::argmax_share, 0.3, "share of the feature-function tables (3+ classes) whose class is the argmax of one random function per class (else ordered bands of one)").range(ge(0), le(1))
      .field("warp_share", &P::warp_share, 0.3, "share of features observed through a random monotone warp (exp skew, power, quantile steps)").range(ge(0), le(1))
      .field("class_cause_share", &P::class_cause_share, 0.0, "share of tables whose class causes the features (class means in a few latent factors, features noisy mixtures of them: correlated features carrying the same evidence)").range(ge(0), le(1))
      .field("max_informative", &P::max_informative, 8, "most features a feature-function target depends on (drawn uniformly from 1 to this, at most the table's)").range(ge(1))
      .field("max_layers", &P::max_layers, 4, "deepest random MLP").range(ge(1))
      .field("max_width", &P::max_width, 48, "widest random MLP layer").range(ge(4))
      .validate(check_prior);
}

Datasets make_prior(const Options& o, uint64_t seed) {
  const auto p = o.to<PriorOptions>();  // checked together when read (check_prior)
  Datasets d;
  d.train = std::make_shared<PriorDataset>(p, p.tables, seed);
  if (p.validation_tables > 0) d.validation = std::make_shared<PriorDataset>(p, p.validation_tables, mix(seed, 0xC0FFEE));
  return d;
}

}  // namespace tt::tab
