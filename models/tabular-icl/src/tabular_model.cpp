#include "tabular_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <optional>
#include <random>

#include "metrics.h"
#include "tabular_data.h"
#include "tt/error.h"
#include "tt/log.h"

namespace tt::tab {

std::string Shape::to_string() const {
  return detail::cat("max_features ", max_features, ", d_cell ", d_cell, ", d_model ", d_model, ", ", n_layers,
                     " layers, ", n_heads, " heads, d_ff ", d_ff);
}

Shape preset(const std::string& size) {
  Shape s;
  if (size == "large") {  // TabICL's in-context transformer widths: 12 layers of 512, 4 heads, d_ff 1024
    s.max_features = 100;
    s.d_cell = 32;
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

// ---------------------------------------------------------------- model

TabularIcl::TabularIcl(const Shape& s, std::shared_ptr<const Table> context, int64_t eval_chunk)
    : s_(s), mask_(std::make_shared<SupportMask>()), context_(std::move(context)), eval_chunk_(eval_chunk) {
  cell = register_module("cell", tt::nn::Linear(2, s.d_cell));
  row = register_module("row", tt::nn::Linear(s.max_features * s.d_cell, s.d_model));
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

at::Tensor TabularIcl::probabilities(const at::Tensor& x_in, const at::Tensor& feature_mask, const at::Tensor& y,
                                     const at::Tensor& support) {
  TT_CHECK(x_in.dim() == 3 && support.sizes() == x_in.sizes().slice(0, 2) && y.sizes() == support.sizes(),
           "tabular-icl: x must be [tables, rows, features] with y and support [tables, rows]; got ", x_in.sizes(), ", ",
           y.sizes(), ", ", support.sizes());
  const int64_t B = x_in.size(0), N = x_in.size(1), F = x_in.size(2), M = s_.max_features;
  TT_CHECK_AS(ConfigError, F <= M, "tabular-icl: the table has ", F, " features; this model takes at most ", M,
              " (model.max_features): drop columns, or pretrain a model with a larger max_features");
  const at::Tensor sw = support.to(x_in.scalar_type()).unsqueeze(-1);  // [B, N, 1]
  const at::Tensor fm = feature_mask.to(x_in.scalar_type());           // [B, F]
  // 1. per-table standardization from the support rows
  const at::Tensor n_support = sw.sum(1).clamp_min(1);                 // [B, 1]
  const at::Tensor mean = (x_in * sw).sum(1) / n_support;              // [B, F]
  const at::Tensor centred = x_in - mean.unsqueeze(1);
  const at::Tensor var = (centred * centred * sw).sum(1) / n_support;
  const at::Tensor inv = torch::where(var > 1e-12, var.clamp_min(1e-12).rsqrt(), torch::zeros_like(var));
  at::Tensor z = (centred * inv.unsqueeze(1)).clamp(-8, 8) * fm.unsqueeze(1);
  at::Tensor present = fm.unsqueeze(1).expand({B, N, F});
  if (F < M) {
    z = torch::constant_pad_nd(z, {0, M - F});
    present = torch::constant_pad_nd(present, {0, M - F});
  }
  // 2. per-feature embedding, row representation
  at::Tensor cells = torch::gelu(cell->forward(torch::stack({z, present}, -1)));  // [B, N, M, d_cell]
  cells = cells * present.unsqueeze(-1);
  at::Tensor h = row->forward(cells.reshape({B, N, M * s_.d_cell}));              // [B, N, d]
  // 3. label embedding from the class's support rows (equivariant to relabelling)
  const at::Tensor onehot =
      torch::one_hot(y.clamp(0, kMaxClasses - 1), kMaxClasses).to(h.scalar_type()) * sw * (y >= 0).unsqueeze(-1);
  const at::Tensor counts = onehot.sum(1).clamp_min(1);                                       // [B, C]
  const at::Tensor class_mean = torch::bmm(onehot.transpose(1, 2), h) / counts.unsqueeze(-1);  // [B, C, d]
  h = h + label->forward(torch::bmm(onehot, class_mean)) * sw + query_token * (1 - sw);
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

ModelOutput TabularIcl::forward_loss(const Batch& batch) {
  const at::Tensor& y = batch.at("y");
  const at::Tensor& support = batch.at("support");
  const at::Tensor p = probabilities(batch.at("x"), batch.at("feature_mask"), y, support);
  // Query rows whose class occurs among the support rows.
  const at::Tensor yc = y.clamp(0, kMaxClasses - 1);
  const at::Tensor in_support =
      torch::one_hot(yc, kMaxClasses).mul(support.unsqueeze(-1)).sum(1).gt(0).gather(1, yc);  // [B, N]
  const at::Tensor scored = support.logical_not() & y.ge(0) & in_support;
  const at::Tensor nll = -torch::log(p.gather(-1, yc.unsqueeze(-1)).squeeze(-1).clamp_min(1e-12));
  const at::Tensor count = scored.sum();
  ModelOutput o;
  o.loss = (nll * scored).sum() / count.clamp_min(1);
  o.reduction = Reduction::Mean;
  o.items = support.numel();
  return o;
}

namespace {
// The table with its feature columns in the order `perm` (perm[j] = the source column of column j).
Table permute_features(const Table& t, const std::vector<int64_t>& perm) {
  Table out = t;
  const int64_t F = t.features();
  for (int64_t j = 0; j < F; ++j) out.feature_names[j] = t.feature_names[perm[j]];
  for (int64_t i = 0; i < t.rows; ++i)
    for (int64_t j = 0; j < F; ++j) out.x[i * F + j] = t.x[i * F + perm[j]];
  return out;
}
// Each feature through the context's empirical CDF onto a standard normal (a quantile
// transform, TabPFN's "quantile" preprocessing): rank r of n -> Phi^-1((r + 0.5) / n), ties
// share their mean rank, query values interpolated between the context's.
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
}  // namespace

at::Tensor TabularIcl::predict_table(const Table& context, const Table& queries) {
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  const int64_t C = context.classes(), F = context.features();
  auto predict = [&](const Table& ctx, const Table& qs) {  // [Q, C], queries in chunks
    std::vector<at::Tensor> parts;
    for (int64_t begin = 0; begin < qs.rows; begin += eval_chunk_) {
      std::vector<int64_t> idx;
      for (int64_t i = begin; i < std::min(qs.rows, begin + eval_chunk_); ++i) idx.push_back(i);
      Batch b = table_batch(ctx, qs.subset(idx));
      at::Tensor y = b.at("y").clone();
      y.slice(1, ctx.rows).fill_(-1);  // the queries' labels are not the model's to see
      at::Tensor p = probabilities(b.at("x"), b.at("feature_mask"), y, b.at("support"));
      parts.push_back(p[0].slice(0, ctx.rows).slice(1, 0, C).to(torch::kDouble));
    }
    return torch::cat(parts, 0);
  };
  // An ensemble over feature orders (TabPFN's ensemble configurations): the row representation
  // depends on where a feature sits, so each order is another view of the same table; the
  // probabilities are averaged. Member 0 is the file's order; member e shuffles with seed e.
  // preprocess: mixed alternates the raw values (standardized inside the model) with their
  // quantile transform (odd members), as TabPFN mixes preprocessings. No more members than
  // there are distinct views (F! orders, times 2 when mixed).
  const int64_t views = preprocess_ == Preprocess::Mixed ? 2 : 1;
  int64_t members = views;
  for (int64_t f = 2; f <= F && members < ensemble_; ++f) members *= f;
  members = std::min(members, ensemble_);
  std::optional<std::pair<Table, Table>> quantile;
  if (preprocess_ != Preprocess::Standard) quantile = quantile_normal(context, queries);
  at::Tensor sum;
  for (int64_t e = 0; e < members; ++e) {
    const bool q = preprocess_ == Preprocess::Quantile || (preprocess_ == Preprocess::Mixed && e % 2 == 1);
    const Table& ctx = q ? quantile->first : context;
    const Table& qs = q ? quantile->second : queries;
    const int64_t order = preprocess_ == Preprocess::Mixed ? e / 2 : e;  // 0: the file's order
    at::Tensor p;
    if (order == 0) {
      p = predict(ctx, qs);
    } else {
      std::vector<int64_t> perm(static_cast<size_t>(F));
      std::iota(perm.begin(), perm.end(), 0);
      std::mt19937_64 rng(static_cast<uint64_t>(order));
      std::shuffle(perm.begin(), perm.end(), rng);
      p = predict(permute_features(ctx, perm), permute_features(qs, perm));
    }
    sum = sum.defined() ? sum + p : p;
  }
  train(was_training);
  return sum / static_cast<double>(members);
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
  return out;
}

void TabularIcl::predict(const std::filesystem::path& input, const std::filesystem::path& output) {
  TT_CHECK_AS(ConfigError, context_, "tabular-icl: --predict needs a training table as context: run it with the "
              "tabular-csv dataset (the pipeline's data.path), not the synthetic prior");
  CsvOptions o = Options::defaults(csv_schema(), "data").to<CsvDataOptions>();  // the file's label column, impute: none
  o.require_label = false;
  Table q = read_csv_like(input.string(), *context_, o);
  at::Tensor p = predict_table(*context_, q).contiguous();
  std::ofstream out(output);
  TT_CHECK_AS(ConfigError, out.good(), "tabular-icl: cannot write ", output.string());
  const int64_t C = context_->classes();
  for (int64_t c = 0; c < C; ++c) out << "p_" << context_->class_names[c] << ",";
  out << "predicted\n";
  const double* pp = p.data_ptr<double>();
  for (int64_t i = 0; i < q.rows; ++i) {
    int64_t best = 0;
    for (int64_t c = 0; c < C; ++c) {
      out << pp[i * C + c] << ",";
      if (pp[i * C + c] > pp[i * C + best]) best = c;
    }
    out << context_->class_names[best] << "\n";
  }
  TT_CHECK(out.good(), "tabular-icl: writing ", output.string(), " failed");
  bool labelled = q.rows > 0;
  for (auto v : q.y) labelled = labelled && v >= 0;
  if (labelled) {
    std::vector<double> probs(pp, pp + p.numel());
    const auto m = classification_metrics(probs, q.y, C);
    log().info("tabular-icl: {} rows of {} predicted: accuracy {:.4f}, log-loss {:.4f}", q.rows, input.string(),
               m.at("accuracy"), m.at("log_loss"));
  }
}

std::string TabularIcl::describe() const {
  std::string d = "tabular-icl: " + s_.to_string();
  if (context_) d += detail::cat("; context ", context_->rows, " rows of ", context_->source);
  return d;
}

Schema model_schema() {
  using M = ModelOptions;
  return Schema()
      .field("size", &M::size, "small", "preset: small (~0.38M parameters, pretrains in minutes on a CPU) or large (TabICL-like, ~28M)")
      .choices({"small", "large"})
      .field("max_features", &M::max_features, std::nullopt, "features a table may have (padded and masked up to it); preset's when unset").range(ge(1))
      .field("d_cell", &M::d_cell, std::nullopt, "per-feature embedding width").range(ge(1))
      .field("d_model", &M::d_model, std::nullopt, "row representation width (the readout's values are the 10 classes' one-hot labels)").range(ge(kMaxClasses))
      .field("n_layers", &M::n_layers, std::nullopt, "in-context transformer blocks").range(ge(1))
      .field("n_heads", &M::n_heads, std::nullopt, "attention heads (d_model must be a multiple)").range(ge(1))
      .field("d_ff", &M::d_ff, std::nullopt, "MLP width").range(ge(1))
      .field("eval_chunk", &M::eval_chunk, 1024, "query rows per forward pass at evaluation and prediction").range(ge(1))
      .field("ensemble", &M::ensemble, 8, "evaluation and prediction: average over this many members (feature orders, and preprocessings when mixed; 1: the file's order only)").range(ge(1))
      .field("preprocess", &M::preprocess, "standard", "evaluation and prediction: standard (values standardized by the support rows), quantile (each feature through the context's empirical CDF onto a normal) or mixed (members alternate)")
      .choices({"standard", "quantile", "mixed"});
}

std::shared_ptr<Model> make_model(const Options& o, const Datasets& data) {
  const auto mo = o.to<ModelOptions>();
  Shape s = preset(mo.size);
  auto take = [](const std::optional<int64_t>& value, int64_t& field) {  // unset: the preset's
    if (value) field = *value;
  };
  take(mo.max_features, s.max_features);
  take(mo.d_cell, s.d_cell);
  take(mo.d_model, s.d_model);
  take(mo.n_layers, s.n_layers);
  take(mo.n_heads, s.n_heads);
  take(mo.d_ff, s.d_ff);
  o.check(s.d_model % s.n_heads == 0, "d_model", detail::cat("(", s.d_model, ") must be a multiple of n_heads (", s.n_heads, ")"));
  std::shared_ptr<const Table> context;
  if (auto* ev = dynamic_cast<EvalSet*>(data.validation.get())) context = ev->shared_context();
  for (const auto& d : {data.train, data.validation}) {
    if (!d) continue;
    const auto info = d->info();
    for (const char* key : {"features", "max_features"}) {
      auto it = info.find(key);
      if (it != info.end())
        o.check(it->second <= s.max_features, "max_features",
                detail::cat("is ", s.max_features, " but the data (", d->describe(), ") has ", it->second,
                            " features: drop columns, or use a model pretrained with a larger max_features"));
    }
  }
  auto m = std::make_shared<TabularIcl>(s, context, mo.eval_chunk);
  m->set_ensemble(mo.ensemble, mo.preprocess == "standard"   ? TabularIcl::Preprocess::Standard
                               : mo.preprocess == "quantile" ? TabularIcl::Preprocess::Quantile
                                                             : TabularIcl::Preprocess::Mixed);
  return m;
}

}  // namespace tt::tab
