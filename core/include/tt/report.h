#pragma once
// Run outputs: metrics.jsonl lines, the progress display, gnuplot plots.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "tt/export.h"

namespace tt {

// Appends one JSON object per line; flushed each line so a crash loses nothing. A line that
// cannot be written (disk full) throws WriteError.
class TT_API MetricsFile {
 public:
  MetricsFile() = default;
  void open(const std::filesystem::path& path, int64_t truncate_after_step = -1);
  void write(const std::string& json_line);
  ~MetricsFile();

 private:
  std::FILE* f_ = nullptr;
  std::filesystem::path path_;
};

// Writes `text` to `path` whole or not at all: a temp file beside it, renamed over it once
// written and flushed. A failed write (disk full) removes the temp file and throws WriteError
// naming `path` and the cause; what was at `path` before stays.
TT_API void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// Where memory a plugin reported holding is (summary.json's memory.held[].where, tt::report_held's
// "tensors", "file" or "host"), as the printed summary and compare say it.
TT_API std::string held_place(const std::string& where);

// A progress bar on a terminal; plain periodic lines otherwise.
class TT_API Progress {
 public:
  enum class Mode { Auto, Bar, Lines, Off };
  static Mode parse_mode(const std::string& s);
  Progress(Mode mode, int64_t total, int64_t start);
  void update(int64_t done, double loss, int64_t tensor_bytes, int64_t rss);
  void finish();

 private:
  Mode mode_;
  int64_t total_, start_;
  std::chrono::steady_clock::time_point t0_, last_;
  int64_t first_done_ = -1;  // the step of the first update: the rate counts from its end (warm-up left out)
  std::chrono::steady_clock::time_point first_at_;
  bool drawn_ = false;
};

// `s` as a single-quoted gnuplot string: a quote inside is written twice (a name "bob's").
TT_API std::string gnuplot_quoted(const std::string& s);

// Runs gnuplot on `commands` (everything after the terminal and output lines) to draw `png` of
// `size` ("900,500"): the pngcairo terminal, else plain png where a minimal gnuplot lacks it.
// gnuplot's messages go to `log_file`, removed once the PNG is drawn. Returns whether the PNG
// was drawn (false when gnuplot is missing or fails; the caller says so and names the log).
TT_API bool gnuplot_png(const std::string& commands, const std::filesystem::path& png, const std::string& size,
                        const std::filesystem::path& log_file);

// Where to print the labels of a scatter plot's points so that they overlap neither each other nor
// the points: each label takes the first of a few places around its point (above, below, right,
// left, the four corners, then further above or below) where it overlaps nothing taken and stays
// inside the plot, else the place that overlaps least. In the plot's pixels (origin bottom left,
// `width` x `height`); a character is `char_w` x `char_h`; `keep_clear` are boxes already taken
// (a key). Returns, for each point in order, gnuplot's `offset dx,dy` (in characters), its
// alignment ("left", "center", "right") and the box the label covers.
struct PlotBox {
  double x0, y0, x1, y1;
};
struct LabelPoint {
  double x, y;
  std::string text;
};
struct LabelSpot {
  double dx, dy;
  std::string align;
  PlotBox box;
};
TT_API std::vector<LabelSpot> place_labels(const std::vector<LabelPoint>& points, double width, double height,
                                           double char_w, double char_h, const std::vector<PlotBox>& keep_clear = {});

// The median of `values` (the mean of the middle two for an even count); 0 for none.
TT_API double median(std::vector<double> values);
// Local time as "20261125-204501", for the names of run and output directories.
TT_API std::string timestamp();
// `t` in UTC as ISO 8601 ("2026-11-30T14:05:12Z").
TT_API std::string iso_time(std::time_t t);
// Now, in seconds since the Unix epoch, to the millisecond (metrics.jsonl's "time": TensorBoard's
// wall_time, W&B's _timestamp).
TT_API double unix_seconds();
// parent/stem-<timestamp>, or with -2, -3, ... appended while that exists: made here (parents too),
// so that two processes started in the same second take two names.
TT_API std::filesystem::path timestamped_dir(const std::filesystem::path& parent, const std::string& stem);

// Draws y over x from columns of a whitespace data file with gnuplot into a PNG; `points`, where
// given, is a second file whose columns 1:2 are drawn as points over it, the two named in a key
// (`line_title`, `points_title`). Returns false (and logs why) when gnuplot is missing or fails.
TT_API bool plot_png(const std::filesystem::path& data, const std::filesystem::path& png, const std::string& title,
                     const std::string& xlabel, const std::string& ylabel, const std::string& using_cols,
                     bool logy = false, const std::filesystem::path& points = {}, const std::string& line_title = "",
                     const std::string& points_title = "");

}  // namespace tt
