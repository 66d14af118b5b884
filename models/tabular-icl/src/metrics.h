#pragma once
// Classification metrics from class probabilities (no torch): accuracy, ROC-AUC (binary: of
// class 1; multiclass: one-vs-rest, macro over the classes present in the labels), log-loss
// (probabilities clipped to [1e-15, 1]), Brier score (multiclass form: mean over rows of the
// squared distance between the probability vector and the one-hot label, summed over all classes
// as in Brier 1950; for two classes twice sklearn's brier_score_loss, which scores class 1 only),
// ECE (15 equal-width bins of the top-class confidence).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tt::tab {

// probs: n x classes, row-major; labels in [0, classes).
std::map<std::string, double> classification_metrics(const std::vector<double>& probs, const std::vector<int64_t>& labels,
                                                     int64_t classes, int ece_bins = 15);
// Area under the ROC curve of scores against binary labels (ties averaged); NaN without both kinds.
double roc_auc(const std::vector<double>& scores, const std::vector<bool>& positive);

}  // namespace tt::tab
