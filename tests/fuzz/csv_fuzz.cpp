// The CSV reader of tabular-icl (models/tabular-icl/src/table.cpp): read_csv with the options
// chosen by the bytes after the first NUL, then read_csv_like and the stratified split of what
// it read, each checked for the table's invariants.
#include <cmath>
#include <set>

#include "fuzz_util.h"
#include "table.h"

namespace {

void check_table(const tt::tab::Table& t, int64_t features) {
  using tt::fuzz::expect;
  expect(t.rows >= 1 && t.features() == features, "read_csv: rows and the expected columns");
  expect(static_cast<int64_t>(t.x.size()) == t.rows * t.features(), "read_csv: x is rows x features");
  expect(static_cast<int64_t>(t.y.size()) == t.rows, "read_csv: a label per row");
  expect(t.classes() <= tt::tab::kMaxClasses, "read_csv: at most kMaxClasses classes");
  for (float v : t.x) expect(std::isfinite(v), "read_csv: finite features");
  for (int64_t y : t.y) expect(y >= -1 && y < t.classes(), "read_csv: class ids within the classes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt::fuzz;
  const auto [text, tail] = split_at_nul(as_view(data, size));
  const uint8_t flags = tail.empty() ? 0 : static_cast<uint8_t>(tail[0]);
  tt::tab::CsvOptions o;
  o.impute = (flags & 1) ? "mean" : "none";
  o.require_label = !(flags & 2);
  if (flags & 4) o.label = tail.size() > 1 ? std::string(tail.substr(1)) : std::string();

  const auto path = write_file("input.csv", text);
  refusing([&] {
    const tt::tab::Table t = tt::tab::read_csv(path.string(), o);
    check_table(t, t.features());
    refusing([&] {
      const tt::tab::Table u = tt::tab::read_csv_like(path.string(), t, o);
      check_table(u, t.features());
      expect(u.rows == t.rows && u.class_names == t.class_names, "read_csv_like: the same table again");
    });
    refusing([&] {
      const double fraction = 0.05 + 0.9 * ((flags >> 3) & 7) / 7.0;
      const tt::tab::Split s = tt::tab::stratified_split(t, fraction, flags);
      std::set<int64_t> seen;
      for (int64_t r : s.train) expect(r >= 0 && r < t.rows && seen.insert(r).second, "split: distinct train rows");
      for (int64_t r : s.test) expect(r >= 0 && r < t.rows && seen.insert(r).second, "split: test rows not in train");
      expect(static_cast<int64_t>(seen.size()) == t.rows, "split: every row on one side");
    });
  });
  return 0;
}
