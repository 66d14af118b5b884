#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tt::tab {

double roc_auc(const std::vector<double>& scores, const std::vector<bool>& positive) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U with average ranks for ties.
  double rank_sum = 0;
  int64_t pos = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && scores[order[j + 1]] == scores[order[i]]) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k)
      if (positive[order[k]]) {
        rank_sum += avg_rank;
        ++pos;
      }
    i = j + 1;
  }
  const auto neg = static_cast<int64_t>(n) - pos;
  if (pos == 0 || neg == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - 0.5 * static_cast<double>(pos) * static_cast<double>(pos + 1)) /
         (static_cast<double>(pos) * static_cast<double>(neg));
}

std::map<std::string, double> classification_metrics(const std::vector<double>& probs, const std::vector<int64_t>& labels,
                                                     int64_t classes, int ece_bins) {
  const auto n = static_cast<int64_t>(labels.size());
  double correct = 0, logloss = 0, brier = 0;
  std::vector<double> bin_conf(ece_bins, 0), bin_acc(ece_bins, 0), bin_n(ece_bins, 0);
  for (int64_t i = 0; i < n; ++i) {
    const double* p = probs.data() + i * classes;
    const int64_t top = std::max_element(p, p + classes) - p;
    const bool ok = top == labels[i];
    correct += ok;
    logloss -= std::log(std::clamp(p[labels[i]], 1e-15, 1.0));
    // Brier (1950): summed over every class, so two classes give twice sklearn's brier_score_loss
    for (int64_t c = 0; c < classes; ++c) brier += std::pow(p[c] - (c == labels[i] ? 1.0 : 0.0), 2);
    const int b = std::min(ece_bins - 1, static_cast<int>(p[top] * ece_bins));
    bin_conf[b] += p[top];
    bin_acc[b] += ok;
    bin_n[b] += 1;
  }
  double ece = 0;
  for (int b = 0; b < ece_bins; ++b)
    if (bin_n[b] > 0) ece += std::abs(bin_acc[b] - bin_conf[b]) / static_cast<double>(n);
  // ROC-AUC: class 1 for two classes; else one-vs-rest averaged over the classes present.
  double auc = 0;
  int present = 0;
  for (int64_t c = classes == 2 ? 1 : 0; c < classes; ++c) {
    std::vector<double> s(n);
    std::vector<bool> pos(n);
    for (int64_t i = 0; i < n; ++i) {
      s[i] = probs[i * classes + c];
      pos[i] = labels[i] == c;
    }
    const double a = roc_auc(s, pos);
    if (!std::isnan(a)) {
      auc += a;
      ++present;
    }
  }
  const double dn = std::max<double>(1, static_cast<double>(n));
  return {{"accuracy", correct / dn},
          {"roc_auc", present ? auc / present : std::numeric_limits<double>::quiet_NaN()},
          {"log_loss", logloss / dn},
          {"brier", brier / dn},
          {"ece", ece},
          {"examples", static_cast<double>(n)}};
}

}  // namespace tt::tab
