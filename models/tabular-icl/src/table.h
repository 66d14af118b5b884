#pragma once
// A numeric table read from a CSV file (no torch): a header row, feature columns (numbers, or
// categories read as their ranks) and a label column (by name, or the last one). Labels may be any text; they become class ids
// 0..C-1 in the sorted order of their values (numerically when all are numbers: labels equal as
// numbers, 1 and 1.0, are one class, named as the training table first spells it, and a --predict
// file's label is matched to it by value).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tt::tab {

constexpr int64_t kMaxClasses = 10;        // classes the model tells apart in one forward pass
constexpr int64_t kMaxTableClasses = 1000;  // classes a table may have (inference groups them into kMaxClasses)

struct Table {
  std::string source;                      // the file, for messages
  std::vector<std::string> feature_names;  // in file order
  std::vector<std::string> class_names;    // class id -> label text
  std::string label_name;                  // the label column's header
  std::vector<float> x;                    // rows x features, row-major
  std::vector<int64_t> y;                  // class id per row (-1: no label column)
  std::vector<int64_t> line;               // the file line of each row (1-based; read_csv and read_csv_like)
  std::vector<float> impute;               // per feature: what a missing value becomes (data.impute: mean: the
                                           // mean of the training rows' values); empty: a missing value is refused
  std::vector<std::vector<std::string>> categories;  // per feature: a categorical column's categories in their
                                                    // order (a value's code is its index), empty: numbers
  std::vector<std::pair<int64_t, int64_t>> missing;  // read_csv with impute mean: the (row, feature) cells missing
  std::map<std::string, int64_t> unknown_labels;  // read_csv_like: rows per label that is no class of like's (y -1)
  int64_t rows = 0;
  int64_t features() const { return static_cast<int64_t>(feature_names.size()); }
  int64_t classes() const { return static_cast<int64_t>(class_names.size()); }
  Table subset(const std::vector<int64_t>& rows) const;
};

// How a CSV is read. label and impute are tabular-csv's options (csv_schema in tabular_data.cpp
// declares them with their defaults and allowed values). A UTF-8 byte-order mark before the header
// (spreadsheets write one) is not part of the first column's name.
struct CsvOptions {
  std::optional<std::string> label;  // label column name; unset or "" = the last column
  std::string impute;                // "mean": a missing value becomes the column's mean; else ("none") an error
  std::string categorical = "auto";  // "auto": a column with text becomes categories; else ("none") an error
  bool require_label = true;         // false (predict): a table without the label column is fine
};

// A categorical column's categories are the whole file's (a test row's category that no
// training row has keeps its own code, where a --predict file's unseen one lies between its
// neighbours).
// Throws tt::ConfigError naming the file, line and column for: a missing file, an empty file or
// one without data rows, an unknown label column (listing those present), a non-numeric feature
// (with categorical: none; auto reads its column as categories),
// a missing value (with impute: none), rows of the wrong width, more than kMaxTableClasses classes.
Table read_csv(const std::string& path, const CsvOptions& o);
// data.impute: mean, fitted on `rows` (the training split): each feature's mean over the values
// those rows have (a categorical column's most frequent category) becomes t.impute and every
// missing cell's value, the other rows' values unread
// (scikit-learn's SimpleImputer fitted on the training rows). read_csv imputes the whole file's
// means; tabular-csv refits them on its training split before splitting. ConfigError where a
// feature has no value in `rows`.
void impute_means_of(Table& t, const std::vector<int64_t>& rows);

// The same columns as `like` (by name, in its order; others are ignored) from `path`, labels mapped
// to like's class names when the label column is present; for prediction. The label column is
// o.label, else like's label column by name, else a single column beyond the features. A label
// that is no class of like's gives y -1 and is counted in unknown_labels. Missing feature values
// take like.impute (the training table's means: scikit-learn's SimpleImputer fitted on it), or are
// refused where like has none (o.impute is not read). A categorical feature's value takes like's
// code; one like has not lies halfway between its neighbours in their order. ConfigError naming the file, the features
// it lacks and the columns it has that like has not, when a feature is missing.
Table read_csv_like(const std::string& path, const Table& like, const CsvOptions& o);

// A line of only spaces, tabs or a carriage return: read_csv skips it (before the header too).
bool is_blank_line(const std::string& line);

// Stratified split, the same rows as scikit-learn's
//   train_test_split(X, y, test_size=test_fraction, stratify=y, random_state=seed)
// (StratifiedShuffleSplit: ceil(test_fraction * rows) test rows, shared out over the classes by
// largest remainder, each class's rows permuted by numpy's RandomState(seed)), so tt's figures
// and a scikit-learn baseline are measured on the same test rows. Both lists ascending.
// ConfigError when a class has fewer than 2 rows (naming the label column as a regression target
// when it looks continuous: many distinct fractional numbers) or a side would have fewer rows than
// classes.
// test_fraction is in (0, 1) and seed in [0, 2^32 - 1] (numpy's seeds): tabular-csv's schema
// refuses other values.
struct Split {
  std::vector<int64_t> train, test;
};
Split stratified_split(const Table& t, double test_fraction, uint64_t seed);

}  // namespace tt::tab
