// tt-data synth-topics: tinytopics' generate_synthetic_data written to DIR/X.npy (float32
// n x m counts), DIR/true_L.npy (n x k) and DIR/true_F.npy (k x m), streamed in chunks of
// documents so that X may be larger than memory. The same generator as the topic-synthetic
// dataset (source_synthetic.h): equal seeds give equal counts, whatever the number of threads.
#include "synth_topics_tool.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "source_synthetic.h"
#include "tt/cli.h"
#include "tt/error.h"
#include "tt/npy.h"
#include "tt/options.h"
#include "tt/runtime.h"

namespace fs = std::filesystem;

namespace tt::topic {

namespace {

struct SynthArgs {
  int64_t n = 1000, m = 1000, k = 10;
  double avg_doc_length = 150;
  uint64_t seed = 0;
  std::string out;
  int threads = 0;
  int64_t chunk_rows = 0;
  bool quiet = false;
};

std::string mb_per_s(int64_t bytes, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB/s", seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0);
  return buf;
}

void check_args(const SynthArgs& a) {
  TT_CHECK_AS(ConfigError, a.n >= 1, "synth-topics: --n (documents) must be at least 1, got ", a.n);
  TT_CHECK_AS(ConfigError, a.m >= 1, "synth-topics: --m (terms) must be at least 1, got ", a.m);
  TT_CHECK_AS(ConfigError, a.k >= 2, "synth-topics: --k (topics) must be at least 2, got ", a.k);
  TT_CHECK_AS(ConfigError, a.k <= a.m, "synth-topics: --k (", a.k, " topics) must not exceed --m (", a.m, " terms)");
  TT_CHECK_AS(ConfigError, a.m < (int64_t{1} << 31) && a.n <= (int64_t{1} << 58) / a.m, "synth-topics: --n x --m (",
              a.n, " x ", a.m, ") is too large");
  TT_CHECK_AS(ConfigError, std::isfinite(a.avg_doc_length) && a.avg_doc_length > 0,
              "synth-topics: --avg-doc-length must be positive, got ", a.avg_doc_length);
  TT_CHECK_AS(ConfigError, a.threads >= 0,
              "synth-topics: --threads must be 0 (OMP_NUM_THREADS when set, else all cores) or positive, got ",
              a.threads);
  resolve_threads(a.threads);  // a malformed OMP_NUM_THREADS is refused before anything is written
  TT_CHECK_AS(ConfigError, a.chunk_rows >= 0, "synth-topics: --chunk-rows must be 0 (automatic) or positive");
  TT_CHECK_AS(ConfigError, !a.out.empty(), "synth-topics: name the output directory with --out DIR");
}

void prepare_dir(const fs::path& dir, int64_t bytes) {
  std::error_code ec;
  TT_CHECK_AS(ConfigError, !fs::exists(dir) || fs::is_directory(dir), "synth-topics: --out '", dir.string(),
              "' exists and is not a directory; choose another --out");
  fs::create_directories(dir, ec);
  TT_CHECK_AS(ConfigError, !ec && fs::is_directory(dir), "synth-topics: cannot create the output directory '",
              dir.string(), "': ", ec ? ec.message() : "unknown error");
  TT_CHECK_AS(ConfigError, ::access(dir.c_str(), W_OK) == 0, "synth-topics: the output directory '", dir.string(),
              "' is not writable; choose another --out");
  const auto space = fs::space(dir, ec);
  TT_CHECK_AS(ConfigError, ec || static_cast<int64_t>(space.available) >= bytes, "synth-topics: the files need ",
              format_bytes(bytes), " but '", dir.string(), "' has ",
              format_bytes(static_cast<int64_t>(space.available)), " free; lower --n or --m, or choose another --out");
}

void run_synth_topics(const SynthArgs& a) {
  check_args(a);
  const fs::path dir(a.out);
  const int64_t x_bytes = a.n * a.m * 4, total_bytes = x_bytes + a.n * a.k * 4 + a.k * a.m * 4;
  prepare_dir(dir, total_bytes);
  const int threads = configure_threads(a.threads);

  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  SyntheticCorpus corpus(a.n, a.m, a.k, a.avg_doc_length, a.seed);
  // Chunks of documents: at most 1024, and at most ~64 MiB of counts, so memory stays bounded.
  const int64_t chunk = a.chunk_rows > 0 ? a.chunk_rows : std::clamp<int64_t>((int64_t{64} << 20) / (a.m * 4), 1, 1024);
  std::vector<float> L(static_cast<size_t>(chunk * a.k)), X(static_cast<size_t>(chunk * a.m));
  NpyWriter x_out(dir / "X.npy", at::kFloat, {a.n, a.m});
  NpyWriter l_out(dir / "true_L.npy", at::kFloat, {a.n, a.k});
  if (!a.quiet)
    std::fprintf(stderr,
                 "synth-topics: %lld docs x %lld terms, k=%lld, avg length %g, seed %llu -> %s (%s), %d thread%s\n",
                 static_cast<long long>(a.n), static_cast<long long>(a.m), static_cast<long long>(a.k),
                 a.avg_doc_length, static_cast<unsigned long long>(a.seed), dir.c_str(),
                 format_bytes(total_bytes).c_str(), threads, threads == 1 ? "" : "s");
  double last_report = 0;
  int64_t words = 0;
  for (int64_t begin = 0; begin < a.n; begin += chunk) {
    TT_CHECK_AS(Interrupted, !interrupt_requested(), "interrupted after ", begin, " of ", a.n,
                " documents; nothing was written in ", dir.string());
    const int64_t end = std::min(a.n, begin + chunk), rows = end - begin;
    words += corpus.documents(begin, end, L.data(), X.data());
    x_out.append(X.data(), rows);
    l_out.append(L.data(), rows);
    const double t = seconds();
    if (!a.quiet && t - last_report >= 3.0 && end < a.n) {
      last_report = t;
      const double frac = static_cast<double>(end) / static_cast<double>(a.n);
      std::fprintf(stderr, "synth-topics: %lld / %lld rows (%.1f%%), %s, %.0f s left\n", static_cast<long long>(end),
                   static_cast<long long>(a.n), 100 * frac, mb_per_s(x_out.bytes_written(), t).c_str(), t / frac - t);
    }
  }
  // each file appears whole (written as .partial, renamed on close), the three together
  NpyWriter f_out(dir / "true_F.npy", at::kFloat, {a.k, a.m});
  f_out.append(corpus.true_F());
  x_out.close();
  l_out.close();
  f_out.close();
  const double t = seconds();
  if (!a.quiet) {
    std::fprintf(stderr,
                 "synth-topics: wrote %s (%lld x %lld float32, %lld words), true_L.npy, true_F.npy in %.1f s (%s)\n",
                 (dir / "X.npy").c_str(), static_cast<long long>(a.n), static_cast<long long>(a.m),
                 static_cast<long long>(words), t, mb_per_s(x_out.bytes_written(), t).c_str());
    std::fprintf(stderr, "synth-topics: train on it with\n  data: {name: topic-npy, path: %s, true_F: %s}\n",
                 (dir / "X.npy").c_str(), (dir / "true_F.npy").c_str());
  }
}

}  // namespace

int synth_topics_tool(const std::vector<std::string>& args) {
  SynthArgs a;
  CLI::App app{
      "a synthetic corpus as tinytopics' generate_synthetic_data, streamed to DIR/X.npy (float32 n x m counts), "
      "DIR/true_L.npy (n x k) and DIR/true_F.npy (k x m); X may be larger than memory",
      "tt-data synth-topics"};
  app.add_option("--n", a.n, "documents")->capture_default_str();
  app.add_option("--m", a.m, "terms (vocabulary size)")->capture_default_str();
  app.add_option("--k", a.k, "true topics (2 to m)")->capture_default_str();
  app.add_option("--avg-doc-length", a.avg_doc_length, "mean words per document (Poisson, at least 1)")
      ->capture_default_str();
  app.add_option("--seed", a.seed, "generator seed (same seed, same files, whatever --threads)")
      ->capture_default_str();
  app.add_option("--out", a.out, "output directory (created if missing)")->required();
  app.add_option("--threads", a.threads, "threads, at most the usable cores (0: OMP_NUM_THREADS when set, else all cores)")->capture_default_str();
  app.add_option("--chunk-rows", a.chunk_rows, "documents generated and written at a time (0: up to 1024, ~64 MiB)")
      ->capture_default_str();
  app.add_flag("--quiet,-q", a.quiet, "no progress on stderr");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  run_synth_topics(a);
  return 0;
}

}  // namespace tt::topic
