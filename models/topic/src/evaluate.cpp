#include "evaluate.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "tt/error.h"
#include "tt/log.h"
#include "tt/report.h"

namespace fs = std::filesystem;

namespace tt::topic {

namespace {

// Kuhn-Munkres with potentials (rows <= cols): minimises the total cost of a matching that
// covers every row. Returns the column of each row.
std::vector<int64_t> hungarian_min(const std::vector<std::vector<double>>& a, size_t n, size_t m) {
  const double inf = std::numeric_limits<double>::infinity();
  // 1-based: p[j] is the row matched to column j (0 = none); column 0 is the virtual start
  std::vector<double> u(n + 1, 0.0), v(m + 1, 0.0);
  std::vector<size_t> p(m + 1, 0), way(m + 1, 0);
  for (size_t i = 1; i <= n; ++i) {
    p[0] = i;
    size_t j0 = 0;
    std::vector<double> minv(m + 1, inf);
    std::vector<char> used(m + 1, 0);
    do {
      used[j0] = 1;
      size_t i0 = p[j0], j1 = 0;
      double delta = inf;
      for (size_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        double cur = a[i0 - 1][j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (size_t j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {  // augment along the alternating path
      size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int64_t> col(n, -1);
  for (size_t j = 1; j <= m; ++j)
    if (p[j] != 0) col[p[j] - 1] = static_cast<int64_t>(j - 1);
  return col;
}

// Rows of a 2-D tensor as CPU doubles.
torch::Tensor cpu_double(const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kDouble).contiguous(); }

std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) dir = ".";
    if (access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Runs gnuplot on a script file; its output is returned in `output`.
bool run_gnuplot(const fs::path& script, std::string& output) {
  // reading (not writing) the pipe: no SIGPIPE if gnuplot dies early
  FILE* gp = popen(("gnuplot " + sh_quote(script.string()) + " 2>&1").c_str(), "r");
  if (!gp) return false;
  output.clear();
  char buf[1024];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, gp)) > 0) output.append(buf, got);
  int status = pclose(gp);
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// tab10, then hues spread by the golden ratio.
std::string topic_colour(int64_t i) {
  static const char* tab10[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  if (i < 10) return tab10[i];
  double h = std::fmod(0.13 + 0.6180339887 * static_cast<double>(i), 1.0) * 6.0;
  double s = i % 2 ? 0.45 : 0.7, v = i % 3 ? 0.85 : 0.65;
  double c = v * s, x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), mm = v - c;
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h)) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  char out[8];
  std::snprintf(out, sizeof out, "#%02x%02x%02x", static_cast<int>(std::lround((r + mm) * 255)),
                static_cast<int>(std::lround((g + mm) * 255)), static_cast<int>(std::lround((b + mm) * 255)));
  return out;
}

}  // namespace

std::vector<int64_t> max_weight_assignment(const std::vector<std::vector<double>>& weight) {
  const size_t r = weight.size();
  if (r == 0) return {};
  const size_t c = weight[0].size();
  for (const auto& row : weight) {
    TT_CHECK(row.size() == c, "max_weight_assignment: rows of different lengths (", row.size(), " and ", c, ")");
    for (double w : row) TT_CHECK(std::isfinite(w), "max_weight_assignment: weights must be finite");
  }
  if (c == 0) return std::vector<int64_t>(r, -1);
  if (r <= c) {
    std::vector<std::vector<double>> cost(r, std::vector<double>(c));
    for (size_t i = 0; i < r; ++i)
      for (size_t j = 0; j < c; ++j) cost[i][j] = -weight[i][j];
    return hungarian_min(cost, r, c);
  }
  // more rows than columns: match every column to a row instead
  std::vector<std::vector<double>> cost(c, std::vector<double>(r));
  for (size_t i = 0; i < r; ++i)
    for (size_t j = 0; j < c; ++j) cost[j][i] = -weight[i][j];
  auto row_of_col = hungarian_min(cost, c, r);
  std::vector<int64_t> col(r, -1);
  for (size_t j = 0; j < c; ++j) col[static_cast<size_t>(row_of_col[j])] = static_cast<int64_t>(j);
  return col;
}

Alignment align_topics(const torch::Tensor& true_F, const torch::Tensor& learned_F) {
  TT_CHECK(true_F.dim() == 2 && learned_F.dim() == 2, "align_topics: F must be 2-D (k x m), got ", true_F.sizes(),
           " and ", learned_F.sizes());
  TT_CHECK(true_F.size(1) == learned_F.size(1), "align_topics: true F has ", true_F.size(1),
           " terms but learned F has ", learned_F.size(1));
  TT_CHECK(true_F.size(0) >= 1 && learned_F.size(0) >= 1, "align_topics: no topics");
  auto t = cpu_double(true_F), l = cpu_double(learned_F);
  t = t / t.norm(2, {1}, true).clamp_min(1e-12);
  l = l / l.norm(2, {1}, true).clamp_min(1e-12);
  auto sim = t.mm(l.t()).contiguous();
  const int64_t k1 = sim.size(0), k2 = sim.size(1);
  auto s = sim.accessor<double, 2>();
  std::vector<std::vector<double>> w(static_cast<size_t>(k1), std::vector<double>(static_cast<size_t>(k2)));
  for (int64_t i = 0; i < k1; ++i)
    for (int64_t j = 0; j < k2; ++j) w[i][j] = s[i][j];

  Alignment a;
  a.assignment = max_weight_assignment(w);
  a.cosine.assign(static_cast<size_t>(k1), std::numeric_limits<double>::quiet_NaN());
  double sum = 0;
  int64_t matched = 0;
  a.min = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < k1; ++i) {
    int64_t j = a.assignment[i];
    if (j < 0) continue;
    a.cosine[i] = w[i][j];
    sum += w[i][j];
    a.min = std::min(a.min, w[i][j]);
    ++matched;
  }
  a.mean = sum / static_cast<double>(matched);
  return a;
}

torch::Tensor permute_topics(const torch::Tensor& L_or_F, const Alignment& alignment, int dim) {
  TT_CHECK(dim >= -L_or_F.dim() && dim < L_or_F.dim(), "permute_topics: dim ", dim, " out of range for a ",
           L_or_F.dim(), "-D tensor");
  const int64_t k = L_or_F.size(dim);
  std::vector<char> used(static_cast<size_t>(k), 0);
  std::vector<int64_t> order;
  for (int64_t j : alignment.assignment) {
    if (j < 0) continue;
    TT_CHECK(j < k, "permute_topics: alignment refers to topic ", j, " but the tensor has ", k, " along dim ", dim);
    TT_CHECK(!used[j], "permute_topics: topic ", j, " is assigned twice");
    used[j] = 1;
    order.push_back(j);
  }
  for (int64_t j = 0; j < k; ++j)
    if (!used[j]) order.push_back(j);
  auto index = torch::tensor(order, torch::kLong).to(L_or_F.device());
  return L_or_F.index_select(dim, index);
}

TopTerms top_terms(const torch::Tensor& F, const std::vector<std::string>& vocab, int n) {
  TT_CHECK(F.dim() == 2, "top_terms: F must be 2-D (k x m), got ", F.sizes());
  TT_CHECK(n >= 0, "top_terms: n must be non-negative, got ", n);
  const int64_t k = F.size(0), m = F.size(1);
  TT_CHECK(vocab.empty() || static_cast<int64_t>(vocab.size()) == m, "top_terms: vocabulary has ", vocab.size(),
           " terms but F has ", m);
  auto f = cpu_double(F);
  const double* p = f.data_ptr<double>();
  const int64_t take = std::min<int64_t>(n, m);
  TopTerms out(static_cast<size_t>(k));
  std::vector<int64_t> idx(static_cast<size_t>(m));
  for (int64_t t = 0; t < k; ++t) {
    const double* row = p + t * m;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + take, idx.end(), [row](int64_t a, int64_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t r = 0; r < take; ++r) {
      int64_t j = idx[r];
      out[t].emplace_back(vocab.empty() ? "term" + std::to_string(j) : vocab[j], row[j]);
    }
  }
  return out;
}

void write_top_terms(const fs::path& path, const TopTerms& terms) {
  std::ostringstream out;
  for (size_t t = 0; t < terms.size(); ++t) {
    out << "topic " << t << ":";
    for (size_t r = 0; r < terms[t].size(); ++r) {
      char prob[32];
      std::snprintf(prob, sizeof prob, "%.4g", terms[t][r].second);
      out << (r ? ", " : " ") << terms[t][r].first << " (" << prob << ")";
    }
    out << '\n';
  }
  write_file_atomic(path, out.str());  // whole or not at all, WriteError naming the file
}

void write_lines(const fs::path& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + '\n';
  write_file_atomic(path, text);
}

CorpusLoss corpus_loss(const torch::Tensor& L, const torch::Tensor& F,
                       const std::function<torch::Tensor(int64_t, int64_t)>& rows, int64_t block_rows) {
  TT_CHECK(L.dim() == 2 && F.dim() == 2 && L.size(1) == F.size(0), "corpus_loss: L (n x k) and F (k x m) expected, got ",
           L.sizes(), " and ", F.sizes());
  TT_CHECK(block_rows >= 1, "corpus_loss: block_rows must be at least 1, got ", block_rows);
  torch::NoGradGuard no_grad;
  const int64_t n = L.size(0), m = F.size(1);
  auto Ld = L.detach(), Fd = F.detach();
  CorpusLoss out;
  out.n_docs = n;
  for (int64_t b = 0; b < n; b += block_rows) {
    const int64_t e = std::min(n, b + block_rows);
    auto x = rows(b, e);
    TT_CHECK(x.dim() == 2 && x.size(0) == e - b && x.size(1) == m, "corpus_loss: rows(", b, ", ", e,
             ") returned ", x.sizes(), ", expected [", e - b, ", ", m, "]");
    x = x.to(Ld.device(), Ld.scalar_type());
    auto xhat = Ld.narrow(0, b, e - b).mm(Fd);
    // the same expression as the training loss, summed in double
    out.sum += (xhat - x * torch::log(torch::clamp_min(xhat, 1e-10))).sum(torch::kDouble).item<double>();
  }
  out.mean_per_doc = n > 0 ? out.sum / static_cast<double>(n) : 0.0;
  return out;
}

bool plot_structure(const torch::Tensor& L, const fs::path& png, const std::string& title, int max_docs,
                    const std::vector<std::string>& doc_labels) {
  TT_CHECK(L.dim() == 2 && L.size(0) >= 1 && L.size(1) >= 1, "plot_structure: L must be n x k, got ", L.sizes());
  TT_CHECK(max_docs >= 1, "plot_structure: max_docs must be at least 1, got ", max_docs);
  const int64_t n = L.size(0), k = L.size(1);
  TT_CHECK(doc_labels.empty() || static_cast<int64_t>(doc_labels.size()) == n, "plot_structure: ",
           doc_labels.size(), " labels for ", n, " documents");
  auto l = cpu_double(L);
  l = l / l.sum(1, true).clamp_min(1e-300);
  auto p = l.accessor<double, 2>();

  // label rank (sorted labels), dominant topic, its weight
  std::map<std::string, int64_t> label_rank;
  for (const auto& s : doc_labels) label_rank.emplace(s, 0);
  int64_t r = 0;
  for (auto& kv : label_rank) kv.second = r++;
  std::vector<std::string> label_names;
  for (const auto& kv : label_rank) label_names.push_back(kv.first);
  std::vector<int64_t> label(static_cast<size_t>(n), 0), top(static_cast<size_t>(n), 0);
  std::vector<double> weight(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (!doc_labels.empty()) label[i] = label_rank[doc_labels[i]];
    for (int64_t t = 1; t < k; ++t)
      if (p[i][t] > p[i][top[i]]) top[i] = t;
    weight[i] = p[i][top[i]];
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (label[a] != label[b]) return label[a] < label[b];
    if (top[a] != top[b]) return top[a] < top[b];
    if (weight[a] != weight[b]) return weight[a] > weight[b];
    return a < b;
  });

  // groups = runs of equal (label, top); keep about max_docs, proportionally, evenly spaced
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) in order
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && label[order[j]] == label[order[i]] && top[order[j]] == top[order[i]]) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  std::vector<int64_t> kept;
  if (n <= max_docs) {
    kept = order;
  } else {
    std::vector<size_t> quota(groups.size());
    std::vector<std::pair<double, size_t>> remainder;
    size_t total = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      double share = static_cast<double>(max_docs) * static_cast<double>(groups[g].second - groups[g].first) /
                     static_cast<double>(n);
      quota[g] = std::max<size_t>(1, static_cast<size_t>(share));  // no group vanishes
      total += quota[g];
      remainder.emplace_back(share - std::floor(share), g);
    }
    std::sort(remainder.begin(), remainder.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (size_t q = 0; q < remainder.size() && total < static_cast<size_t>(max_docs); ++q) {
      size_t g = remainder[q].second;
      if (quota[g] < groups[g].second - groups[g].first) ++quota[g], ++total;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const size_t size = groups[g].second - groups[g].first;
      for (size_t q = 0; q < quota[g]; ++q) {
        size_t at = static_cast<size_t>((static_cast<double>(q) + 0.5) * static_cast<double>(size) /
                                        static_cast<double>(quota[g]));
        kept.push_back(order[groups[g].first + std::min(at, size - 1)]);
      }
    }
  }

  fs::path data = fs::path(png).replace_extension(".dat");
  fs::path script_path = fs::path(png).replace_extension(".gp");
  {
    std::ofstream out(data);
    TT_CHECK(out, "cannot write ", data.string());
    out << "# structure plot of " << n << " documents (" << kept.size() << " shown), " << k << " topics\n"
        << "# position document dominant_topic proportion_0 ... proportion_" << k - 1 << "\n";
    char num[32];
    for (size_t pos = 0; pos < kept.size(); ++pos) {
      int64_t i = kept[pos];
      out << pos << ' ' << i << ' ' << top[i];
      for (int64_t t = 0; t < k; ++t) {
        std::snprintf(num, sizeof num, " %.6g", p[i][t]);
        out << num;
      }
      out << '\n';
    }
    TT_CHECK(out.flush(), "cannot write ", data.string());
  }

  const size_t shown = kept.size();
  std::ostringstream s;
  s << "set terminal pngcairo size 1200,500 noenhanced\n"
    << "set output " << gnuplot_quoted(png.string()) << "\n"
    << "set title " << gnuplot_quoted(title) << "\n"
    << "set style data histograms\nset style histogram rowstacked\nset style fill solid 1.0 noborder\n"
    << "set boxwidth 1\nset yrange [0:1]\nset xrange [-0.5:" << static_cast<double>(shown) - 0.5 << "]\n"
    << "set ylabel 'topic proportion'\nset xlabel 'documents'\n";
  if (!doc_labels.empty()) {
    // a tic at the middle of each label's run, a line between runs
    std::ostringstream tics;
    size_t begin = 0;
    for (size_t pos = 1; pos <= shown; ++pos) {
      if (pos < shown && label[kept[pos]] == label[kept[begin]]) continue;
      tics << (begin ? ", " : "") << gnuplot_quoted(label_names[label[kept[begin]]]) << ' '
           << (static_cast<double>(begin + pos) - 1) / 2.0;
      if (pos < shown)
        s << "set arrow from " << static_cast<double>(pos) - 0.5 << ",0 to " << static_cast<double>(pos) - 0.5
          << ",1 nohead front lc rgb 'black' lw 1\n";
      begin = pos;
    }
    s << "set xtics rotate by -45 scale 0 (" << tics.str() << ")\n";
  } else {
    s << "unset xtics\n";
  }
  if (k <= 20) s << "set key outside right top vertical\n";
  else s << "set key off\n";
  for (int64_t t = 0; t < k; ++t) s << "set linetype " << t + 1 << " lc rgb '" << topic_colour(t) << "'\n";
  s << "plot for [c=4:" << k + 3 << "] " << gnuplot_quoted(data.string()) << " using c title sprintf('topic %d', c-4)\n";
  {
    std::ofstream out(script_path);
    TT_CHECK(out, "cannot write ", script_path.string());
    out << s.str();
  }

  if (!on_path("gnuplot")) {
    log().warn("no structure plot {}: gnuplot not found (apt-get install gnuplot-nox)", png.string());
    return false;
  }
  std::string output;
  bool ok = run_gnuplot(script_path, output);
  if (!ok) {
    // pngcairo may be missing in minimal gnuplot builds: fall back to the plain png terminal
    std::string alt = s.str();
    alt.replace(alt.find("pngcairo"), 8, "png");
    std::ofstream(script_path) << alt;
    ok = run_gnuplot(script_path, output);
  }
  if (!ok || !fs::exists(png) || fs::file_size(png) == 0) {
    log().warn("no structure plot {}: gnuplot failed: {}", png.string(), output);
    return false;
  }
  return true;
}

}  // namespace tt::topic
