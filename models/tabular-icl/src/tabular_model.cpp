#include "tabular_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "metrics.h"
#include "tabular_data.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/npy.h"
#include "tt/report.h"
#include "tt/runtime.h"

namespace tt::tab {

std::string Shape::to_string() const {
  return detail::cat("d_cell ", d_cell, ", d_id ", d_id, ", d_model ", d_model, ", ", n_layers,
                     " layers, ", n_heads, " heads, d_ff ", d_ff);
}

Shape preset(const std::string& size) {
  Shape s;
  if (size == "large") {  // TabICL's in-context transformer widths: 12 layers of 512, 4 heads, d_ff 1024
    s.d_cell = 32;
    s.d_id = 64;
    s.d_model = 512;
    s.n_layers = 12;
    s.n_heads = 4;
    s.d_ff = 1024;
    return s;
  }
  TT_CHECK(size == "small", "internal: tabular-icl has no preset '", size, "' (model_schema's choices: small, large)");
  return s;
}

// ---------------------------------------------------------------- block

IclBlock::IclBlock(const Shape& s, std::shared_ptr<SupportMask> mask) : mask_(std::move(mask)) {
  ln1 = register_module("ln1", tt::nn::LayerNorm(s.d_model));
  tt::nn::AttentionImpl::Options a;
  a.d_model = s.d_model;
  a.n_heads = s.n_heads;
  a.causal = false;
  attn = register_module("attn", tt::nn::Attention(a));
  ln2 = register_module("ln2", tt::nn::LayerNorm(s.d_model));
  mlp = register_module("mlp", tt::nn::MLP(s.d_model, s.d_ff));
}

at::Tensor IclBlock::forward(const at::Tensor& x) {
  at::Tensor h = x + attn->forward(ln1->forward(x), mask_->support);
  return h + mlp->forward(ln2->forward(h));
}

namespace {
std::vector<at::Tensor> heads(tt::nn::AttentionImpl& a, const at::Tensor& x) {  // q, k, v [B, H, T, D]
  const int64_t B = x.size(0), T = x.size(1), H = a.options.n_heads, D = a.options.d_model / H;
  return a.qkv->forward(x).view({B, T, 3, H, D}).permute({2, 0, 3, 1, 4}).unbind(0);
}
}  // namespace

std::pair<at::Tensor, at::Tensor> IclBlock::keys_values(const at::Tensor& x) {
  auto p = heads(*attn, ln1->forward(x));
  return {p[1], p[2]};
}

at::Tensor IclBlock::attend(const at::Tensor& x, const at::Tensor& k, const at::Tensor& v) {
  const int64_t B = x.size(0), T = x.size(1);
  tt::nn::AttentionInputs in;
  in.q = heads(*attn, ln1->forward(x))[0];
  in.k = k;
  in.v = v;
  in.causal = false;
  in.training = is_training();
  at::Tensor y = attn->kernel().forward(in).transpose(1, 2).contiguous().view({B, T, attn->options.d_model});
  at::Tensor h = x + attn->proj->forward(y);
  return h + mlp->forward(ln2->forward(h));
}

// ---------------------------------------------------------------- model

TabularIcl::TabularIcl(const Shape& s, std::shared_ptr<const Table> context, int64_t eval_chunk)
    : s_(s), mask_(std::make_shared<SupportMask>()), context_(std::move(context)), eval_chunk_(eval_chunk) {
  cell = register_module("cell", tt::nn::Linear(1, s.d_cell));
  row = register_module("row", tt::nn::Linear(s.d_id * s.d_cell, s.d_model));
  label = register_module("label", tt::nn::Linear(s.d_model, s.d_model));
  query_token = register_parameter("query_token", torch::randn({s.d_model}) * 0.02);
  blocks = register_module("blocks", tt::nn::BlockStack());
  for (int64_t i = 0; i < s.n_layers; ++i) blocks->push_back(std::make_shared<IclBlock>(s, mask_));
  ln_f = register_module("ln_f", tt::nn::LayerNorm(s.d_model));
  readout_q = register_module("readout_q", tt::nn::Linear(s.d_model, s.d_model));
  readout_k = register_module("readout_k", tt::nn::Linear(s.d_model, s.d_model));
  torch::NoGradGuard no_grad;  // residual branches start small: 1/sqrt(2 layers)
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto& b = static_cast<IclBlock&>((*blocks)[i]);
    b.attn->proj->weight.mul_(1.0 / std::sqrt(2.0 * static_cast<double>(s.n_layers)));
    b.mlp->fc2->weight.mul_(1.0 / std::sqrt(2.0 * static_cast<double>(s.n_layers)));
  }
}

at::Tensor TabularIcl::feature_ids(int64_t features, uint64_t seed) const {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor g = torch::randn({s_.d_id, features}, gen, torch::kFloat);
  if (features == 0) return g.t().contiguous();
  if (features <= s_.d_id) return std::get<0>(at::linalg_qr(g)).t().contiguous();  // orthonormal rows
  return (g / g.norm(2, 0, true)).t().contiguous();
}

at::Tensor TabularIcl::table_ids(const at::Tensor& feature_mask, const at::Tensor& seeds) const {
  const int64_t B = feature_mask.size(0), F = feature_mask.size(1);
  at::Tensor ids = torch::zeros({B, F, s_.d_id});
  const at::Tensor s = seeds.to(torch::kCPU, torch::kLong).contiguous(), mask = feature_mask.cpu();
  for (int64_t b = 0; b < B; ++b) {
    const at::Tensor where = mask[b].nonzero().squeeze(1);
    ids[b].index_copy_(0, where, feature_ids(where.size(0), static_cast<uint64_t>(s.data_ptr<int64_t>()[b])));
  }
  return ids;
}

at::Tensor TabularIcl::represent(const at::Tensor& z, const at::Tensor& ids, const at::Tensor& fw, int64_t chunk) {
  const int64_t B = z.size(0), N = z.size(1), F = z.size(2);
  const int64_t step = chunk > 0 ? chunk : std::max<int64_t>(N, 1);
  const at::Tensor codes = (ids * fw.unsqueeze(-1)).transpose(1, 2);  // [B, d_id, F]
  std::vector<at::Tensor> rows;
  for (int64_t begin = 0; begin < N; begin += step) {
    // the cells feature-major, [B, F, n, d_cell], so that one product per table sums over features
    const at::Tensor zt = z.slice(1, begin, begin + step).transpose(1, 2).unsqueeze(-1);
    const int64_t n = zt.size(2);
    const at::Tensor e = torch::gelu(cell->forward(zt)).reshape({B, F, n * s_.d_cell});
    const at::Tensor bound = torch::bmm(codes, e).view({B, s_.d_id, n, s_.d_cell});  // sum_j id_j (x) e_j
    rows.push_back(row->forward(bound.permute({0, 2, 1, 3}).reshape({B, n, s_.d_id * s_.d_cell})));
  }
  return rows.size() == 1 ? rows[0] : torch::cat(rows, 1);
}

namespace {
// Per-table standardization with the support rows' statistics: (x - mean) / deviation, clipped to
// +-8, 0 where a column is constant over the support or masked.
at::Tensor standardize(const at::Tensor& x, const at::Tensor& sw, const at::Tensor& fm) {
  const at::Tensor w = sw.unsqueeze(-1);                  // [B, N, 1]
  const at::Tensor n_support = w.sum(1).clamp_min(1);     // [B, 1]
  const at::Tensor mean = (x * w).sum(1) / n_support;     // [B, F]
  const at::Tensor centred = x - mean.unsqueeze(1);
  const at::Tensor var = (centred * centred * w).sum(1) / n_support;
  const at::Tensor inv = torch::where(var > 1e-12, var.clamp_min(1e-12).rsqrt(), torch::zeros_like(var));
  return (centred * inv.unsqueeze(1)).clamp(-8, 8) * fm.unsqueeze(1);
}
}  // namespace

at::Tensor TabularIcl::probabilities(const at::Tensor& x_in, const at::Tensor& feature_mask, const at::Tensor& y,
                                     const at::Tensor& support, at::Tensor ids) {
  TT_CHECK(x_in.dim() == 3 && support.sizes() == x_in.sizes().slice(0, 2) && y.sizes() == support.sizes(),
           "tabular-icl: x must be [tables, rows, features] with y and support [tables, rows]; got ", x_in.sizes(), ", ",
           y.sizes(), ", ", support.sizes());
  const int64_t B = x_in.size(0), F = x_in.size(2);
  TT_CHECK(feature_mask.dim() == 2 && feature_mask.size(0) == B && feature_mask.size(1) == F,
           "tabular-icl: feature_mask must be [", B, ", ", F, "], got ", feature_mask.sizes());
  if (!ids.defined()) ids = table_ids(feature_mask, torch::randint(0, int64_t{1} << 62, {B}, torch::kLong)).to(x_in.options());
  TT_CHECK(ids.dim() == 3 && ids.size(0) == B && ids.size(1) == F && ids.size(2) == s_.d_id,
           "tabular-icl: ids must be [", B, ", ", F, ", ", s_.d_id, "], got ", ids.sizes());
  const at::Tensor sw = support.to(x_in.scalar_type());
  const at::Tensor fm = feature_mask.to(x_in.scalar_type());
  // 1-2. standardization, column-wise embedding, row representation
  at::Tensor h = represent(standardize(x_in, sw, fm), ids, fm, 0);  // [B, N, d]
  // 3. label embedding from the class's support rows (equivariant to relabelling)
  const at::Tensor sw3 = sw.unsqueeze(-1);
  const at::Tensor onehot =
      torch::one_hot(y.clamp(0, kMaxClasses - 1), kMaxClasses).to(h.scalar_type()) * sw3 * (y >= 0).unsqueeze(-1);
  const at::Tensor counts = onehot.sum(1).clamp_min(1);                                       // [B, C]
  const at::Tensor class_mean = torch::bmm(onehot.transpose(1, 2), h) / counts.unsqueeze(-1);  // [B, C, d]
  h = h + label->forward(torch::bmm(onehot, class_mean)) * sw3 + query_token * (1 - sw3);
  // 4. the in-context transformer: keys are the support rows
  mask_->support = support;
  h = ln_f->forward(blocks->forward(h));
  // 5. readout: attention over support rows, the one-hot labels as values
  tt::nn::AttentionInputs in;
  in.q = readout_q->forward(h).unsqueeze(1);
  in.k = readout_k->forward(h).unsqueeze(1);
  in.v = torch::constant_pad_nd(onehot, {0, s_.d_model - kMaxClasses}).unsqueeze(1);
  in.causal = false;
  in.key_padding = support;
  in.training = is_training();
  auto& kernel = static_cast<IclBlock&>((*blocks)[0]).attn->kernel();
  return kernel.forward(in).squeeze(1).slice(-1, 0, kMaxClasses);  // [B, N, C]
}

at::Tensor TabularIcl::infer(const at::Tensor& context, const at::Tensor& y, const at::Tensor& queries,
                             const at::Tensor& ids) {
  torch::NoGradGuard no_grad;
  const int64_t S = context.size(0), F = context.size(1), Q = queries.size(0);
  TT_CHECK(context.dim() == 2 && queries.dim() == 2 && queries.size(1) == F && y.dim() == 1 && y.size(0) == S &&
               ids.dim() == 2 && ids.size(0) == F && ids.size(1) == s_.d_id,
           "tabular-icl: infer takes context [S, F], y [S], queries [Q, F], ids [F, d_id]; got ", context.sizes(),
           ", ", y.sizes(), ", ", queries.sizes(), ", ", ids.sizes());
  const int64_t chunk = eval_chunk_;
  // 1-2. the queries standardized with the support's statistics (standardize() on the stacked rows)
  const at::Tensor x = torch::cat({context, queries}, 0).unsqueeze(0);
  const at::Tensor sw = torch::cat({torch::ones({1, S}), torch::zeros({1, Q})}, 1);
  const at::Tensor fm = torch::ones({1, F});
  const at::Tensor h_all = represent(standardize(x, sw, fm), ids.unsqueeze(0), fm, chunk);
  at::Tensor hs = h_all.slice(1, 0, S), hq = h_all.slice(1, S);
  // 3. label embedding
  const at::Tensor onehot = torch::one_hot(y.clamp(0, kMaxClasses - 1), kMaxClasses).to(hs.scalar_type()).unsqueeze(0);
  const at::Tensor class_mean = torch::bmm(onehot.transpose(1, 2), hs) / onehot.sum(1).clamp_min(1).unsqueeze(-1);
  hs = hs + label->forward(torch::bmm(onehot, class_mean));
  hq = hq + query_token;
  // 4. block by block: the support's keys and values once, every chunk of rows attends to them
  auto in_chunks = [&](const at::Tensor& rows, const std::function<at::Tensor(const at::Tensor&)>& f) {
    std::vector<at::Tensor> parts;
    for (int64_t begin = 0; begin < rows.size(1); begin += chunk) parts.push_back(f(rows.slice(1, begin, begin + chunk)));
    return parts.empty() ? rows : torch::cat(parts, 1);
  };
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto& block = static_cast<IclBlock&>((*blocks)[i]);
    const auto [k, v] = block.keys_values(hs);
    auto step = [&](const at::Tensor& r) { return block.attend(r, k, v); };
    hs = in_chunks(hs, step);
    hq = in_chunks(hq, step);
  }
  hs = ln_f->forward(hs);
  hq = ln_f->forward(hq);
  // 5. readout
  tt::nn::AttentionInputs in;
  in.k = readout_k->forward(hs).unsqueeze(1);
  in.v = torch::constant_pad_nd(onehot, {0, s_.d_model - kMaxClasses}).unsqueeze(1);
  in.causal = false;
  auto& kernel = static_cast<IclBlock&>((*blocks)[0]).attn->kernel();
  return in_chunks(hq, [&](const at::Tensor& r) {
           in.q = readout_q->forward(r).unsqueeze(1) / readout_temperature_;
           return kernel.forward(in).squeeze(1);
         })
      .squeeze(0)
      .slice(-1, 0, kMaxClasses);  // [Q, 10]
}

ModelOutput TabularIcl::forward_loss(const Batch& batch) {
  const at::Tensor& y = batch.at("y");
  if (batch.has("n_classes")) {
    const int64_t most = batch.at("n_classes").max().item<int64_t>();
    TT_CHECK_AS(ConfigError, most <= kMaxClasses, "tabular-icl: a training table has ", most, " classes",
                context_ ? " (" + context_->source + ")" : std::string(), "; training and fine-tuning take at most ",
                kMaxClasses, ": run it as inference (trainer.max_steps: 0), which tells up to ", kMaxTableClasses,
                " classes apart through grouped ensemble members");
  }
  const at::Tensor& support = batch.at("support");
  const at::Tensor& x = batch.at("x");
  // training: each table's own feature identities (its id_seed: the same on any rank and in any
  // micro-batch; an example repeated in a later epoch has them again, as it has its rows); without
  // an id_seed drawn at random; evaluation: the same ones every time
  at::Tensor ids;
  if (!is_training()) ids = feature_ids(x.size(2), 0).unsqueeze(0).expand({x.size(0), x.size(2), s_.d_id});
  else if (batch.has("id_seed")) ids = table_ids(batch.at("feature_mask"), batch.at("id_seed")).to(x.options());
  const at::Tensor p = probabilities(x, batch.at("feature_mask"), y, support, ids);
  // Query rows whose class occurs among the support rows.
  const at::Tensor yc = y.clamp(0, kMaxClasses - 1);
  const at::Tensor in_support =
      torch::one_hot(yc, kMaxClasses).mul(support.unsqueeze(-1)).sum(1).gt(0).gather(1, yc);  // [B, N]
  const at::Tensor scored = support.logical_not() & y.ge(0) & in_support;
  const at::Tensor nll = -torch::log(p.gather(-1, yc.unsqueeze(-1)).squeeze(-1).clamp_min(1e-12));
  // Each table's mean over its scored rows, averaged over the tables (a table without a scored
  // row counts 0, as it does in any micro-batch or rank): a micro-batch's loss is then
  // weighted by its share of the tables, as the trainer weighs it (and an all-reduce over ranks),
  // so that micro-batches and data-parallel ranks train as the whole batch does (the rows pooled
  // over the tables would weigh a table by its query count, which the prior draws at random).
  const at::Tensor count = scored.sum(1);
  ModelOutput o;
  o.loss = ((nll * scored).sum(1) / count.clamp_min(1)).mean();
  o.reduction = Reduction::Mean;
  o.items = support.numel();
  return o;
}

namespace {
// The table's columns `cols`, in that order.
Table select_features(const Table& t, const std::vector<int64_t>& cols) {
  Table out;
  out.source = t.source;
  out.class_names = t.class_names;
  out.label_name = t.label_name;
  out.y = t.y;
  out.rows = t.rows;
  const int64_t F = t.features(), G = static_cast<int64_t>(cols.size());
  for (int64_t c : cols) out.feature_names.push_back(t.feature_names[c]);
  out.x.resize(static_cast<size_t>(t.rows * G));
  for (int64_t i = 0; i < t.rows; ++i)
    for (int64_t j = 0; j < G; ++j) out.x[i * G + j] = t.x[i * F + cols[j]];
  return out;
}
at::Tensor rows_tensor(const Table& t) {  // [rows, features], a copy
  return torch::from_blob(const_cast<float*>(t.x.data()), {t.rows, t.features()}, torch::kFloat).clone();
}
}  // namespace

std::pair<Table, Table> quantile_normal(const Table& ctx, const Table& qs) {
  Table c = ctx, q = qs;
  const int64_t F = ctx.features(), n = ctx.rows;
  if (n == 0) return {c, q};  // no context: nothing to rank against
  auto inv_phi = [](double p) {  // Phi^-1 by bisection on erfc (the standard library has no erfinv)
    double lo = -10, hi = 10;
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  };
  std::vector<double> vals(static_cast<size_t>(n));
  for (int64_t j = 0; j < F; ++j) {
    for (int64_t i = 0; i < n; ++i) vals[i] = ctx.x[i * F + j];
    std::vector<double> sorted = vals;
    std::sort(sorted.begin(), sorted.end());
    // value -> normal score, by the mid-rank of the value among the context's: a value present
    // there takes the mean rank of its ties; one between two present values is interpolated
    // between their mid-ranks; one outside them lies half a rank beyond the end
    auto mid_rank = [&](double v) {
      const auto lo = std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin();
      const auto hi = std::upper_bound(sorted.begin(), sorted.end(), v) - sorted.begin();
      return 0.5 * static_cast<double>(lo + hi - 1);
    };
    auto score = [&](double v) {
      const auto lo = std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin();
      double r;
      if (lo < n && sorted[lo] == v) r = mid_rank(v);
      else if (lo == 0) r = -0.5;
      else if (lo == n) r = static_cast<double>(n) - 0.5;
      else {
        const double a = sorted[lo - 1], b = sorted[lo], ra = mid_rank(a), rb = mid_rank(b);
        r = ra + (v - a) / (b - a) * (rb - ra);
      }
      return inv_phi(std::clamp((r + 0.5) / static_cast<double>(n), 0.5 / n, 1.0 - 0.5 / n));
    };
    for (int64_t i = 0; i < n; ++i) c.x[i * F + j] = static_cast<float>(score(vals[i]));
    for (int64_t i = 0; i < qs.rows; ++i) q.x[i * F + j] = static_cast<float>(score(qs.x[i * F + j]));
  }
  return {c, q};
}

std::pair<Table, Table> principal_components(const Table& ctx, const Table& qs, double variance, int64_t most) {
  Table c = ctx, q = qs;
  const int64_t F = ctx.features(), n = ctx.rows;
  if (n < 2 || F == 0) return {c, q};
  const at::Tensor xc = rows_tensor(ctx).to(torch::kDouble);
  const at::Tensor mean = xc.mean(0), sd = xc.std(0, /*unbiased=*/false);
  const at::Tensor scale = torch::where(sd > 1e-12 * (mean.abs() + 1), sd.reciprocal(), torch::zeros_like(sd));
  const at::Tensor zc = (xc - mean) * scale;
  const auto usv = at::linalg_svd(zc, /*full_matrices=*/false);
  const at::Tensor sv = std::get<1>(usv), vh = std::get<2>(usv);  // [k], [k, F]
  const at::Tensor var = sv.square(), share = var.cumsum(0) / var.sum().clamp_min(1e-300);
  int64_t k = 1;
  while (k < sv.size(0) && share[k - 1].item<double>() < variance) ++k;
  k = std::min(k, most);
  const at::Tensor top = vh.slice(0, 0, k);
  const at::Tensor biggest = top.abs().argmax(1, /*keepdim=*/true);
  const at::Tensor v = (top * top.gather(1, biggest).ge(0).to(torch::kDouble).mul(2).sub(1)).t();  // [F, k]
  auto project = [&](const at::Tensor& z, Table& out) {
    const at::Tensor f = z.mm(v).to(torch::kFloat).contiguous();
    out.x.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
    out.feature_names.clear();
    for (int64_t j = 0; j < k; ++j) out.feature_names.push_back(detail::cat("pc", j + 1));
  };
  project(zc, c);
  project((rows_tensor(qs).to(torch::kDouble) - mean) * scale, q);
  return {c, q};
}

std::vector<Member> plan_members(const Table& t, int64_t ensemble, int64_t per_member,
                                 const TabularIcl::Preprocess& views, int64_t max_members) {
  TT_CHECK(!views.empty(), "internal: plan_members without a view");
  const int64_t F = t.features(), C = t.classes();
  const int64_t covers = (F + per_member - 1) / per_member;  // members that see every feature once
  const int64_t wanted = std::max(ensemble, covers);
  auto too_many = [&](int64_t n, const std::string& why) {
    return detail::cat("tabular-icl: ", t.source, " has ", F, " features and ", C, " classes: the ensemble needs ", n,
                       " members (", why, "), more than model.max_members (", max_members,
                       "): raise model.max_members (or model.member_features), or select fewer features");
  };
  TT_CHECK_AS(ConfigError, wanted <= max_members,
              too_many(wanted, detail::cat("model.ensemble is ", ensemble, "; seeing every feature in subsets of "
                                           "model.member_features (", per_member, ") takes ", covers)));
  std::vector<Member> members(static_cast<size_t>(wanted));
  std::mt19937_64 rng(0x7461626c65ULL);  // fixed: the same table, the same members
  // features: member e takes slot e % covers of round e / covers's permutation
  std::vector<int64_t> perm(static_cast<size_t>(F));
  for (int64_t e = 0; e < wanted; ++e) {
    if (F <= per_member) {
      members[e].features.resize(static_cast<size_t>(F));
      std::iota(members[e].features.begin(), members[e].features.end(), 0);
      continue;
    }
    if (e % covers == 0) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
    }
    const int64_t begin = std::min((e % covers) * per_member, F - per_member);  // the last slot overlaps
    members[e].features.assign(perm.begin() + begin, perm.begin() + begin + per_member);
  }
  // classes
  auto grouping = [&]() {
    std::vector<int64_t> g(static_cast<size_t>(C));
    std::iota(g.begin(), g.end(), 0);
    if (C <= kMaxClasses) return g;
    std::vector<int64_t> order(g);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t i = 0; i < C; ++i) g[order[i]] = i % kMaxClasses;
    return g;
  };
  for (auto& m : members) m.group = grouping();
  if (C > kMaxClasses) {
    auto weakest_pair = [&]() {  // the fewest members telling a pair of classes apart
      int64_t fewest = static_cast<int64_t>(members.size());
      for (int64_t a = 0; a < C; ++a)
        for (int64_t b = a + 1; b < C; ++b) {
          int64_t apart = 0;
          for (const auto& m : members) apart += m.group[a] != m.group[b];
          fewest = std::min(fewest, apart);
        }
      return fewest;
    };
    while (weakest_pair() < 2) {
      TT_CHECK_AS(ConfigError, static_cast<int64_t>(members.size()) < max_members,
                  too_many(static_cast<int64_t>(members.size()) + 1, "to tell every pair of classes apart twice"));
      Member m;
      m.features = members[members.size() % static_cast<size_t>(covers)].features;
      m.group = grouping();
      members.push_back(std::move(m));
    }
  }
  for (size_t e = 0; e < members.size(); ++e) members[e].view = views[e % views.size()];
  return members;
}


at::Tensor TabularIcl::predict_table(const Table& context, const Table& queries) {
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  const int64_t C = context.classes();
  // preprocess: the members take the views in turn, as TabPFN mixes preprocessings
  const auto members = plan_members(context, ensemble_, member_features_, preprocess_, max_members_);
  // each view made once (quantile-pca from the quantile view): its context and queries, whole and
  // as tensors
  std::map<View, std::pair<Table, Table>> views;
  std::map<View, std::pair<at::Tensor, at::Tensor>> whole;
  std::function<const std::pair<Table, Table>&(View)> view = [&](View v) -> const std::pair<Table, Table>& {
    if (auto it = views.find(v); it != views.end()) return it->second;
    std::pair<Table, Table> made{context, queries};
    if (v == View::Quantile) made = quantile_normal(context, queries);
    if (v == View::Pca) made = principal_components(context, queries, pca_variance_, member_features_);
    if (v == View::QuantilePca) {
      const auto& q = view(View::Quantile);
      made = principal_components(q.first, q.second, pca_variance_, member_features_);
    }
    return views[v] = std::move(made);
  };
  for (View v : preprocess_)
    if (!whole.count(v)) whole[v] = {rows_tensor(view(v).first), rows_tensor(view(v).second)};
  at::Tensor sum;  // C <= 10: the members' probabilities summed; else their log-probabilities
  for (size_t e = 0; e < members.size(); ++e) {
    tt::stop_if_interrupted();  // a periodic evaluation gives way to an interrupt's checkpoint
    const Member& m = members[e];
    const auto& [ctx, qs] = views.at(m.view);
    // a pca member sees the leading components (as many as member_features), whatever its subset
    const bool all = m.view == View::Pca || m.view == View::QuantilePca ||
                     static_cast<int64_t>(m.features.size()) == context.features();
    const at::Tensor xc = all ? whole.at(m.view).first : rows_tensor(select_features(ctx, m.features));
    const at::Tensor xq = all ? whole.at(m.view).second : rows_tensor(select_features(qs, m.features));
    std::vector<int64_t> told_as(context.y.size());
    for (size_t i = 0; i < told_as.size(); ++i) told_as[i] = m.group[static_cast<size_t>(context.y[i])];
    const at::Tensor y = torch::tensor(told_as, torch::kLong);
    const int64_t told = std::min(C, kMaxClasses);
    at::Tensor p = infer(xc, y, xq, feature_ids(xc.size(1), e)).slice(1, 0, told).to(torch::kDouble);  // [Q, told]
    if (C > kMaxClasses) {  // each class takes its group's probability
      const at::Tensor g = torch::from_blob(const_cast<int64_t*>(m.group.data()), {C}, torch::kLong);
      p = p.index_select(1, g).clamp_min(1e-12).log();
    }
    sum = sum.defined() ? sum + p : p;
  }
  train(was_training);
  const double n = static_cast<double>(members.size());
  if (C > kMaxClasses) return torch::softmax(sum / n, 1);  // the normalized geometric mean
  return sum / n;
}

std::map<std::string, double> TabularIcl::evaluate(Dataset& data, int64_t batch_size) {
  auto* set = dynamic_cast<EvalSet*>(&data);
  if (!set) {
    auto m = Model::evaluate(data, batch_size);
    return m;
  }
  at::Tensor p = predict_table(set->context(), set->queries()).contiguous();
  std::vector<double> probs(p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
  auto m = classification_metrics(probs, set->queries().y, set->context().classes());
  std::map<std::string, double> out;
  for (const auto& [k, v] : m) out["val_" + k] = v;
  out["val_loss"] = out.at("val_log_loss");  // every model's val_loss (compare's validation column): the cross-entropy
  return out;
}

Table TabularIcl::read_predict_rows(const std::filesystem::path& input) const {
  TT_CHECK_AS(ConfigError, context_, "tabular-icl: --predict needs a training table as context: run it with the "
              "tabular-csv dataset (the pipeline's data.path), not the synthetic prior");
  CsvOptions o;  // the training table's label column, where the file has it; its imputation (read_csv_like)
  o.require_label = false;
  return read_csv_like(input.string(), *context_, o);
}

void TabularIcl::check_predict_input(const std::filesystem::path& input) const { read_predict_rows(input); }


void TabularIcl::predict(const std::filesystem::path& input, const std::filesystem::path& output) {
  Table q = read_predict_rows(input);
  at::Tensor p = predict_table(*context_, q).contiguous();
  std::ostringstream out;
  const int64_t C = context_->classes();
  for (int64_t c = 0; c < C; ++c) out << tt::csv_field("p_" + context_->class_names[c]) << ",";
  out << "predicted\n";
  const double* pp = p.data_ptr<double>();
  for (int64_t i = 0; i < q.rows; ++i) {
    int64_t best = 0;
    for (int64_t c = 0; c < C; ++c) {
      out << pp[i * C + c] << ",";
      if (pp[i * C + c] > pp[i * C + best]) best = c;
    }
    out << tt::csv_field(context_->class_names[best]) << "\n";
  }
  write_file_atomic(output, out.str());  // a device (/dev/stdout) in place
  // The score: the rows labelled with a class of the training table (one it has not is predicted,
  // but cannot be scored).
  std::vector<double> probs;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < q.rows; ++i)
    if (q.y[i] >= 0) {
      probs.insert(probs.end(), pp + i * C, pp + (i + 1) * C);
      labels.push_back(q.y[i]);
    }
  if (!q.unknown_labels.empty()) {
    std::string unknown;
    int64_t rows = 0;
    for (const auto& [label, n] : q.unknown_labels) {
      unknown += detail::cat(unknown.empty() ? "" : ", ", "'", label, "' (", n, n == 1 ? " row)" : " rows)");
      rows += n;
    }
    log().warn("tabular-icl: {} of the {} rows of {} {} a label that is no class of the training table: {}; "
               "predicted, but left out of the score", rows, q.rows, input.string(), rows == 1 ? "has" : "have",
               unknown);
  }
  if (!labels.empty()) {
    const auto m = classification_metrics(probs, labels, C);
    log().info("tabular-icl: {} rows of {} predicted: accuracy {:.4f}, log-loss {:.4f}{}", q.rows, input.string(),
               m.at("accuracy"), m.at("log_loss"),
               static_cast<int64_t>(labels.size()) == q.rows
                   ? std::string()
                   : detail::cat(" (of the ", labels.size(), " rows labelled with a class of the training table)"));
  }
}

std::string TabularIcl::describe() const {
  std::string d = "tabular-icl: " + s_.to_string();
  if (context_) d += detail::cat("; context ", context_->rows, " rows of ", context_->source);
  return d;
}

std::optional<TabularIcl::Preprocess> parse_preprocess(const std::string& value) {
  using V = TabularIcl::View;
  const std::map<std::string, V> names = {
      {"standard", V::Standard}, {"quantile", V::Quantile}, {"pca", V::Pca}, {"quantile-pca", V::QuantilePca}};
  TabularIcl::Preprocess views;
  const std::string spelled = value == "mixed" ? "standard+quantile" : value;
  size_t begin = 0;
  while (begin <= spelled.size()) {
    const size_t end = std::min(spelled.find('+', begin), spelled.size());
    const auto it = names.find(spelled.substr(begin, end - begin));
    if (it == names.end()) return std::nullopt;
    views.push_back(it->second);
    begin = end + 1;
  }
  return views;
}

namespace {
// The shape's and the views' checks, run when the pipeline is read.
void check_model(const Options& o) {
  const auto mo = o.to<ModelOptions>();
  const Shape p = preset(mo.size);
  const int64_t d_model = mo.d_model.value_or(p.d_model), n_heads = mo.n_heads.value_or(p.n_heads);
  o.check(d_model % n_heads == 0, "d_model", detail::cat("(", d_model, ") must be a multiple of n_heads (", n_heads, ")"));
  if (!parse_preprocess(mo.preprocess))
    o.fail("preprocess", detail::cat("must be standard, quantile, pca or quantile-pca, or several of them joined by + "
                                     "(mixed: standard+quantile), got '", mo.preprocess, "'"));
}
}  // namespace

Schema model_schema() {
  using M = ModelOptions;
  return Schema()
      .field("size", &M::size, "small", "preset: small (~0.38M parameters, pretrains in minutes on a CPU) or large (TabICL-like, ~28M)")
      .choices({"small", "large"})
      .field("d_cell", &M::d_cell, std::nullopt, "a cell's embedding width; preset's when unset").range(ge(1))
      .field("d_id", &M::d_id, std::nullopt, "width of a feature's random identity (up to this many features get orthogonal ones)").range(ge(1))
      .field("d_model", &M::d_model, std::nullopt, "row representation width (the readout's values are the 10 classes' one-hot labels)").range(ge(kMaxClasses))
      .field("n_layers", &M::n_layers, std::nullopt, "in-context transformer blocks").range(ge(1))
      .field("n_heads", &M::n_heads, std::nullopt, "attention heads (d_model must be a multiple)").range(ge(1)).architecture()
      .field("d_ff", &M::d_ff, std::nullopt, "MLP width").range(ge(1))
      .field("eval_chunk", &M::eval_chunk, 1024, "query rows per forward pass at evaluation and prediction").range(ge(1))
      .field("ensemble", &M::ensemble, 8, "evaluation and prediction: average over at least this many members (each its own feature identities; taking the views of preprocess in turn)").range(ge(1))
      .field("member_features", &M::member_features, 100, "evaluation and prediction: a wider table gives each member a random subset of this many features, the subsets covering them all").range(ge(1))
      .field("max_members", &M::max_members, 64, "evaluation and prediction: the most members a table may need (its features / member_features; more than 10 classes add members until every pair of classes is told apart twice)").range(ge(1))
      .field("preprocess", &M::preprocess, "standard+quantile-pca", "evaluation and prediction: the members' views of the values, taken in turn: standard (standardized by the support rows), quantile (each feature through the support's empirical CDF onto a normal), pca (the support's principal components of the standardized values), quantile-pca (those of the quantile transform); several joined by + (mixed: standard+quantile)")
      .field("readout_temperature", &M::readout_temperature, 0.5, "evaluation and prediction: the readout attention's temperature (its logits divided by it; below 1 sharpens the class probabilities, which training at 1 leaves too soft on real tables)").range(gt(0))
      .field("pca_variance", &M::pca_variance, 0.99, "evaluation and prediction: the pca views keep the leading components that hold this share of the support's variance (at most member_features)").range(gt(0), le(1))
      .validate(check_model);
}

std::map<std::string, std::string> TabularIcl::derived_options() const {
  return {{"d_cell", std::to_string(s_.d_cell)},   {"d_id", std::to_string(s_.d_id)},
          {"d_model", std::to_string(s_.d_model)}, {"n_layers", std::to_string(s_.n_layers)},
          {"n_heads", std::to_string(s_.n_heads)}, {"d_ff", std::to_string(s_.d_ff)}};
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  const auto mo = o.to<ModelOptions>();
  Shape s = preset(mo.size);
  auto take = [](const std::optional<int64_t>& value, int64_t& field) {  // unset: the preset's
    if (value) field = *value;
  };
  take(mo.d_cell, s.d_cell);
  take(mo.d_id, s.d_id);
  take(mo.d_model, s.d_model);
  take(mo.n_layers, s.n_layers);
  take(mo.n_heads, s.n_heads);
  take(mo.d_ff, s.d_ff);  // the shape and preprocess were checked when the options were read (check_model)
  std::shared_ptr<const Table> context;
  if (auto* ev = dynamic_cast<EvalSet*>(data.validation.get())) context = ev->shared_context();
  // a table the ensemble cannot take is refused before any work
  const auto views = parse_preprocess(mo.preprocess);
  if (context) plan_members(*context, mo.ensemble, mo.member_features, *views, mo.max_members);
  auto m = std::make_shared<TabularIcl>(s, context, mo.eval_chunk);
  m->set_ensemble(mo.ensemble, *views, mo.member_features, mo.max_members, mo.pca_variance);
  m->set_readout_temperature(mo.readout_temperature);
  return m;
}

}  // namespace tt::tab
