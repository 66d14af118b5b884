#include "tt/report.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "atomic_file.h"
#include "tt/error.h"
#include "tt/log.h"
#include "tt/options.h"

namespace fs = std::filesystem;

namespace tt {

void write_file_atomic(const fs::path& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit("cannot write", "(is the disk full?)");
}

void MetricsFile::open(const fs::path& path, int64_t truncate_after_step) {
  if (truncate_after_step >= 0 && fs::exists(path)) {
    // On resume, drop lines the interrupted run wrote after the checkpoint we resume from.
    std::ifstream in(path);
    std::vector<std::string> keep;
    std::string line;
    while (std::getline(in, line)) {
      auto pos = line.find("\"step\":");
      const int64_t step = pos != std::string::npos ? std::stoll(line.substr(pos + 7)) : -1;
      if (step > truncate_after_step) continue;
      // an earlier resume from the same checkpoint: the new resume's line takes its place
      if (step == truncate_after_step && line.find("\"resumed\":true") != std::string::npos) continue;
      keep.push_back(line);
    }
    in.close();
    std::string text;
    for (const auto& l : keep) text += l + '\n';
    write_file_atomic(path, text);
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) TT_FAIL_AS(WriteError, "cannot write ", path.string(), ": ", std::strerror(errno));
  path_ = path;
}

void MetricsFile::write(const std::string& line) {
  if (!f_) return;
  if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) == EOF || std::fflush(f_) != 0) {
    const std::string why = std::strerror(errno);
    std::fclose(f_);
    f_ = nullptr;
    TT_FAIL_AS(WriteError, "cannot append to ", path_.string(), ": ", why, " (is the disk full?)");
  }
}

MetricsFile::~MetricsFile() {
  if (f_) std::fclose(f_);
}

Progress::Mode Progress::parse_mode(const std::string& s) {
  if (s == "auto") return Mode::Auto;
  if (s == "bar") return Mode::Bar;
  if (s == "lines") return Mode::Lines;
  if (s == "off") return Mode::Off;
  TT_FAIL_AS(ConfigError, "trainer.progress must be auto, bar, lines or off, got '", s, "'");
}

Progress::Progress(Mode mode, int64_t total, int64_t start) : mode_(mode), total_(total), start_(start) {
  if (mode_ == Mode::Auto) mode_ = isatty(STDERR_FILENO) ? Mode::Bar : Mode::Lines;
  t0_ = last_ = std::chrono::steady_clock::now();
}

static std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  return buf;
}

void Progress::update(int64_t done, double loss, int64_t tensor_bytes, int64_t rss) {
  if (mode_ == Mode::Off) return;
  auto now = std::chrono::steady_clock::now();
  if (first_done_ < 0) {
    first_done_ = done;
    first_at_ = now;
  }
  double since_last = std::chrono::duration<double>(now - last_).count();
  double elapsed = std::chrono::duration<double>(now - t0_).count();
  const bool last = done >= total_;
  if (mode_ == Mode::Bar && since_last < 0.1 && !last) return;
  if (mode_ == Mode::Lines && since_last < 10.0 && !last && done - start_ != 1) return;
  last_ = now;
  // From the first step's end once a second is done: the first (allocations, pages read in) can
  // take many times a step and put the ETA far off
  const double since_first = std::chrono::duration<double>(now - first_at_).count();
  double rate = done > first_done_ && since_first > 0 ? static_cast<double>(done - first_done_) / since_first
                : elapsed > 0                       ? static_cast<double>(done - start_) / elapsed
                                                    : 0;
  double eta = rate > 0 && done > first_done_ ? static_cast<double>(total_ - done) / rate : NAN;  // --:-- till then
  char info[256];
  std::snprintf(info, sizeof info, "%lld/%lld  %.1f it/s  ETA %s  loss %.5g  live tensors %s  rss %s",
                static_cast<long long>(done), static_cast<long long>(total_), rate, hms(eta).c_str(), loss,
                format_bytes(tensor_bytes).c_str(), format_bytes(rss).c_str());
  if (mode_ == Mode::Bar) {
    const int width = 24;
    int filled = total_ > 0 ? static_cast<int>(width * done / total_) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar += std::string(static_cast<size_t>(width - filled), '.');
    std::string line = "[" + bar + "] ";
    char pct[8];
    std::snprintf(pct, sizeof pct, "%3d%% ", total_ > 0 ? static_cast<int>(100 * done / total_) : 0);
    line += std::string(pct) + info;
    // no wider than the terminal: a wrapped line would not be redrawn in place
    struct winsize ws {};
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && line.size() >= ws.ws_col) line.resize(ws.ws_col - 1);
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "step %s\n", info);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

namespace {
// A whole PNG ends with its IEND chunk (length 0, "IEND", the chunk's CRC).
bool png_complete(const fs::path& png) {
  std::ifstream in(png, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() < 8) return false;
  in.seekg(-8, std::ios::end);
  char tail[8];
  in.read(tail, 8);
  return in && std::string(tail, 8) == std::string("IEND\xAE\x42\x60\x82", 8);
}
// Whether an executable `name` is in one of PATH's folders.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) return true;
  return false;
}
}  // namespace

bool gnuplot_png(const std::string& commands, const fs::path& png, const std::string& size, const fs::path& log_file) {
  if (!on_path("gnuplot")) {
    std::ofstream(log_file) << "gnuplot is not on PATH\n";
    return false;
  }
  // A gnuplot that dies before reading its script would end tt with SIGPIPE: ignored while
  // the script is written (the write then fails, and pclose reports it).
  struct IgnorePipe {
    struct sigaction old {};
    IgnorePipe() {
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      ::sigaction(SIGPIPE, &ign, &old);
    }
    ~IgnorePipe() { ::sigaction(SIGPIPE, &old, nullptr); }
  } ignore_pipe;
  // drawn beside the target and renamed over it once whole: a full disk leaves no half image
  const fs::path tmp = png.parent_path() / ("." + png.filename().string() + ".tmp");
  std::error_code ec;
  for (const std::string terminal : {"pngcairo", "png"}) {
    FILE* gp = popen(("gnuplot > '" + log_file.string() + "' 2>&1").c_str(), "w");
    if (!gp) return false;
    std::fprintf(gp, "set terminal %s size %s noenhanced\nset output '%s'\n%s", terminal.c_str(), size.c_str(),
                 tmp.c_str(), commands.c_str());
    if (pclose(gp) == 0 && png_complete(tmp)) {
      fs::rename(tmp, png, ec);
      if (!ec) {
        fs::remove(log_file, ec);  // kept only to say why a plot is missing
        return true;
      }
    }
    fs::remove(tmp, ec);
  }
  return false;
}

std::string gnuplot_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

bool plot_png(const fs::path& data, const fs::path& png, const std::string& title, const std::string& xlabel,
              const std::string& ylabel, const std::string& using_cols, bool logy, const fs::path& points,
              const std::string& line_title, const std::string& points_title) {
  std::ostringstream script;
  script << "set title " << gnuplot_quoted(title) << "\n"
         << "set xlabel " << gnuplot_quoted(xlabel) << "\nset ylabel " << gnuplot_quoted(ylabel) << "\n"
         << "set grid\n" << (points.empty() ? "set key off\n" : "set key top right\n")
         << (logy ? "set logscale y\n" : "") << "plot " << gnuplot_quoted(data.string()) << " using " << using_cols
         << " with lines lw 2" << (points.empty() ? " notitle" : " title " + gnuplot_quoted(line_title));
  if (!points.empty())
    script << ", " << gnuplot_quoted(points.string()) << " using 1:2 with linespoints lw 2 pt 7 ps 1.2 title "
           << gnuplot_quoted(points_title);
  script << "\n";
  const fs::path log_file = png.parent_path() / "gnuplot.log";
  if (gnuplot_png(script.str(), png, "900,500", log_file)) return true;
  log().warn("no plot {}: gnuplot is missing, failed, or could not write the image (disk full?); see {} "
             "(apt-get install gnuplot-nox)", png.string(), log_file.string());
  return false;
}

std::vector<LabelSpot> place_labels(const std::vector<LabelPoint>& points, double width, double height,
                                    double char_w, double char_h, const std::vector<PlotBox>& keep_clear) {
  auto overlap = [](const PlotBox& a, const PlotBox& b) {
    const double w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
    return w > 0 && h > 0 ? w * h : 0.0;
  };
  std::vector<PlotBox> taken = keep_clear;
  for (const auto& p : points)  // each point's mark, a character's size
    taken.push_back({p.x - char_w / 2, p.y - char_h / 2, p.x + char_w / 2, p.y + char_h / 2});
  // (dx, dy) in characters from the point to the label's anchor; the label's side of the anchor
  struct Place {
    double dx, dy;
    const char* align;
  };
  static const Place places[] = {{0, 1, "center"},     {0, -1, "center"},   {1, 0, "left"},      {-1, 0, "right"},
                                 {0.5, 1, "left"},     {-0.5, 1, "right"},  {0.5, -1, "left"},   {-0.5, -1, "right"},
                                 {0, 2, "center"},     {0, -2, "center"},   {1, 1.5, "left"},    {-1, 1.5, "right"},
                                 {1, -1.5, "left"},    {-1, -1.5, "right"}, {1, 2, "left"},      {-1, 2, "right"},
                                 {1, -2, "left"},      {-1, -2, "right"},   {0, 3, "center"},    {0, -3, "center"}};
  const PlotBox frame{0, 0, width, height};
  std::vector<LabelSpot> spots;
  for (const auto& p : points) {
    size_t chars = 0;  // UTF-8: every byte but continuation bytes starts a character
    for (unsigned char c : p.text) chars += (c & 0xC0) != 0x80;
    const double w = static_cast<double>(chars) * char_w;
    LabelSpot best{};
    double best_cost = -1;
    for (const auto& pl : places) {
      const double ax = p.x + pl.dx * char_w, ay = p.y + pl.dy * char_h;
      const double x0 = pl.align[0] == 'l' ? ax : pl.align[0] == 'r' ? ax - w : ax - w / 2;
      const PlotBox box{x0, ay - char_h / 2, x0 + w, ay + char_h / 2};
      double cost = (box.x1 - box.x0) * (box.y1 - box.y0) - overlap(box, frame);  // outside the plot
      for (const auto& t : taken) cost += overlap(box, t);
      if (best_cost < 0 || cost < best_cost) {
        best = {pl.dx, pl.dy, pl.align, box};
        best_cost = cost;
      }
      if (cost == 0) break;
    }
    taken.push_back(best.box);
    spots.push_back(std::move(best));
  }
  return spots;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

double unix_seconds() {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  return static_cast<double>(ms.count()) / 1000.0;
}

std::string iso_time(std::time_t t) {
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

fs::path timestamped_dir(const fs::path& parent, const std::string& stem) {
  const std::string name = stem + "-" + timestamp();
  std::error_code ec;
  fs::create_directories(parent, ec);
  // Made here, exclusively: two runs started in the same second take two names.
  fs::path dir = parent / name;
  // (a file of that name counts as taken; where it cannot be made at all, its user's writes say why)
  for (int i = 2; !fs::create_directory(dir, ec) && (!ec || fs::exists(dir)); ++i)
    dir = parent / (name + "-" + std::to_string(i));
  return dir;
}

std::string held_place(const std::string& where) {
  if (where == "tensors") return "in tensors (part of the tensor peak, not of its rest)";
  if (where == "file") return "in a memory-mapped file (outside the tensor peak)";
  if (where == "host") return "in host memory (outside the device's peak)";
  return "in " + where;
}

}  // namespace tt
