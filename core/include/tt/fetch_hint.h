#pragma once
// What makes a missing data file that `tt-data fetch` writes (the shipped configs read
// data/brown/ and data/tabular/), for the data sources' "no such file" errors.
#include <string>

#include "tt/export.h"

namespace tt {

// "; `tt-data fetch tabular` makes it" for a file named as one of tt-data fetch's outputs
// (brown_train.txt, brown_val.txt, brown_docs.tsv; iris.csv, wine.csv, breast_cancer.csv), else "".
TT_API std::string fetch_hint(const std::string& path);

}  // namespace tt
