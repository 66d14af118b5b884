#include "source_text.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "tt/error.h"
#include "tt/fetch_hint.h"
#include "tt/text_file.h"
#include "tt/log.h"

namespace tt::topic {

namespace {

bool word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

// One document's tokens as provisional term ids (first-seen order over the corpus).
struct Vocabulary {
  std::unordered_map<std::string, int64_t> ids;
  std::vector<std::string> terms;
  int64_t id(std::string&& term) {
    auto [it, added] = ids.try_emplace(std::move(term), static_cast<int64_t>(terms.size()));
    if (added) terms.push_back(it->first);
    return it->second;
  }
};

}  // namespace

std::vector<std::string> tokenize(std::string_view text, bool lowercase) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    while (i < n && !word_byte(static_cast<unsigned char>(text[i]))) ++i;
    const size_t begin = i;
    while (i < n && word_byte(static_cast<unsigned char>(text[i]))) ++i;
    if (i - begin >= 2) {
      std::string t(text.substr(begin, i - begin));
      if (lowercase)
        for (auto& c : t)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      out.push_back(std::move(t));
    }
  }
  return out;
}

const std::vector<std::string>& english_stopwords() {
  // A small, common list (close to NLTK's English stopwords, without "won"), lowercase.
  static const std::vector<std::string> words = {
      "a",      "about",   "above",   "after", "again",   "against", "all",     "also",       "am",        "an",
      "and",    "any",     "are",     "aren",  "as",      "at",      "be",      "because",    "been",      "before",
      "being",  "below",   "between", "both",  "but",     "by",      "can",     "could",      "couldn",    "did",
      "didn",   "do",      "does",    "doesn", "doing",   "don",     "down",    "during",     "each",      "even",
      "ever",   "few",     "for",     "from",  "further", "had",     "hadn",    "has",        "hasn",      "have",
      "haven",  "having",  "he",      "her",   "here",    "hers",    "herself", "him",        "himself",   "his",
      "how",    "however", "i",       "if",    "in",      "into",    "is",      "isn",        "it",        "its",
      "itself", "just",    "ll",      "may",   "me",      "might",   "more",    "most",       "much",      "must",
      "mustn",  "my",      "myself",  "no",    "nor",     "not",     "now",     "of",         "off",       "on",
      "once",   "one",     "only",    "or",    "other",   "our",     "ours",    "ourselves",  "out",       "over",
      "own",    "re",      "said",    "same",  "shall",   "she",     "should",  "shouldn",    "so",        "some",
      "such",   "than",    "that",    "the",   "their",   "theirs",  "them",    "themselves", "then",      "there",
      "these",  "they",    "this",    "those", "through", "to",      "too",     "under",      "until",     "up",
      "upon",   "us",      "ve",      "very",  "was",     "wasn",    "we",      "were",       "weren",     "what",
      "when",   "where",   "whether", "which", "while",   "who",     "whom",    "whose",      "why",       "will",
      "with",   "would",   "wouldn",  "yet",   "you",     "your",    "yours",   "yourself",   "yourselves"};
  return words;
}

TextCorpus read_text_corpus(const std::string& path, const TextOptions& o) {
  const bool tsv = o.format == "tsv";
  std::unordered_set<std::string> stop;
  if (o.stopwords) stop.insert(english_stopwords().begin(), english_stopwords().end());

  {  // a binary file would be read as lines of garbage words
    std::ifstream head(path, std::ios::binary);
    std::string bytes(65536, '\0');
    head.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(head.gcount()));
    const std::string why = not_text_reason(bytes);
    TT_CHECK_AS(ConfigError, why.empty(), path, " is not a text file (", why, "); give UTF-8 text, one document a line",
                tsv ? " (id<TAB>label<TAB>text)" : "");
  }

  // Pass over the file: every document as sorted (term, count) runs of provisional ids.
  Vocabulary voc;
  std::vector<int64_t> df, total;
  std::vector<int64_t> doc_ptr{0}, doc_terms, doc_counts, doc_lines;
  std::vector<std::string> doc_ids, doc_labels;
  int64_t stopped = 0, tokens = 0;  // tokens read, and those that were stopwords
  std::vector<int64_t> toks;
  LineReader in(path);
  size_t len = 0;
  while (const char* line = in.next(&len)) {
    std::string_view text(line, len);
    if (tsv) {
      if (text.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line
      const size_t t1 = text.find('\t'), t2 = t1 == std::string_view::npos ? t1 : text.find('\t', t1 + 1);
      TT_CHECK_AS(ConfigError, t2 != std::string_view::npos, path, ": line ", in.line(),
                  ": expected id<TAB>label<TAB>text (format: tsv), found ",
                  t1 == std::string_view::npos ? "no tab" : "one tab", "; for one document a line use format: lines");
      doc_ids.emplace_back(text.substr(0, t1));
      doc_labels.emplace_back(text.substr(t1 + 1, t2 - t1 - 1));
      text = text.substr(t2 + 1);
    }
    toks.clear();
    for (auto& t : tokenize(text, o.lowercase)) {
      if (!stop.empty()) {
        std::string key = t;
        if (!o.lowercase)
          for (auto& c : key)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        if (stop.count(key)) {
          ++stopped, ++tokens;
          continue;
        }
      }
      ++tokens;
      toks.push_back(voc.id(std::move(t)));
    }
    std::sort(toks.begin(), toks.end());
    df.resize(voc.terms.size(), 0);
    total.resize(voc.terms.size(), 0);
    for (size_t i = 0; i < toks.size();) {
      size_t j = i;
      while (j < toks.size() && toks[j] == toks[i]) ++j;
      doc_terms.push_back(toks[i]);
      doc_counts.push_back(static_cast<int64_t>(j - i));
      ++df[static_cast<size_t>(toks[i])];
      total[static_cast<size_t>(toks[i])] += static_cast<int64_t>(j - i);
      i = j;
    }
    doc_ptr.push_back(static_cast<int64_t>(doc_terms.size()));
    doc_lines.push_back(in.line());
  }
  const auto n_docs = static_cast<int64_t>(doc_lines.size());
  TT_CHECK_AS(ConfigError, n_docs > 0, path, ": no documents in the file (format: ", o.format, ")");

  // Pruning: document frequency, then the most frequent terms.
  const double max_count = o.max_df * static_cast<double>(n_docs);
  std::vector<int64_t> kept;
  for (size_t t = 0; t < voc.terms.size(); ++t)
    if (df[t] >= o.min_df && static_cast<double>(df[t]) <= max_count) kept.push_back(static_cast<int64_t>(t));
  if (o.max_terms > 0 && static_cast<int64_t>(kept.size()) > o.max_terms) {
    std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) {
      if (total[static_cast<size_t>(a)] != total[static_cast<size_t>(b)])
        return total[static_cast<size_t>(a)] > total[static_cast<size_t>(b)];
      return voc.terms[static_cast<size_t>(a)] < voc.terms[static_cast<size_t>(b)];
    });
    kept.resize(static_cast<size_t>(o.max_terms));
  }
  // When the stopwords took most of the words, they are the cause rather than min_df or max_df.
  const std::string stopwords_took =
      stopped > 0 && 2 * stopped >= tokens
          ? detail::cat(": the English stopwords (data.stopwords: true) removed ", stopped, " of its ", tokens,
                        " words, leaving ", voc.terms.size(), " distinct terms in ", n_docs,
                        " documents; set data.stopwords: false to keep them")
          : std::string();
  TT_CHECK_AS(ConfigError, !kept.empty() || stopwords_took.empty(), path, ": no terms left", stopwords_took);
  TT_CHECK_AS(ConfigError, !kept.empty(), path, ": no terms left: ", voc.terms.size(), " distinct terms in ", n_docs,
              " documents, none in at least min_df = ", o.min_df, " and at most max_df = ", o.max_df,
              " of the documents; lower min_df or raise max_df");
  std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) {
    return voc.terms[static_cast<size_t>(a)] < voc.terms[static_cast<size_t>(b)];
  });
  std::vector<int64_t> new_id(voc.terms.size(), -1);
  TextCorpus c;
  for (size_t j = 0; j < kept.size(); ++j) {
    new_id[static_cast<size_t>(kept[j])] = static_cast<int64_t>(j);
    c.vocab.push_back(voc.terms[static_cast<size_t>(kept[j])]);
  }

  // The kept documents in CSR over the final ids.
  std::vector<int64_t> row_ptr{0}, cols;
  std::vector<float> vals;
  std::vector<std::pair<int64_t, int64_t>> row;
  for (int64_t d = 0; d < n_docs; ++d) {
    row.clear();
    for (int64_t p = doc_ptr[static_cast<size_t>(d)]; p < doc_ptr[static_cast<size_t>(d) + 1]; ++p) {
      const int64_t id = new_id[static_cast<size_t>(doc_terms[static_cast<size_t>(p)])];
      if (id >= 0) row.emplace_back(id, doc_counts[static_cast<size_t>(p)]);
    }
    if (row.empty()) {
      ++c.dropped;
      continue;
    }
    std::sort(row.begin(), row.end());
    for (const auto& [id, count] : row) {
      cols.push_back(id);
      vals.push_back(static_cast<float>(count));
    }
    row_ptr.push_back(static_cast<int64_t>(cols.size()));
    c.lines.push_back(doc_lines[static_cast<size_t>(d)]);
    if (tsv) {
      c.ids.push_back(std::move(doc_ids[static_cast<size_t>(d)]));
      c.labels.push_back(std::move(doc_labels[static_cast<size_t>(d)]));
    }
  }
  c.documents_read = n_docs;
  TT_CHECK_AS(ConfigError, c.dropped < n_docs || stopwords_took.empty(), path, ": every document is empty",
              stopwords_took);
  TT_CHECK_AS(ConfigError, c.dropped < n_docs, path, ": every document is empty after tokenizing and pruning (",
              c.vocab.size(), " terms kept); lower min_df, raise max_df or max_terms");
  c.counts = CsrCounts::from_vectors(row_ptr, cols, vals, static_cast<int64_t>(c.vocab.size()));
  return c;
}

TextDataset::TextDataset(TextCorpus corpus, bool dense_batches, const std::string& path)
    : SparseCountsDataset(std::move(corpus.counts), dense_batches, path),
      ids_(std::move(corpus.ids)),
      lines_(std::move(corpus.lines)) {
  vocab_ = std::move(corpus.vocab);
  labels_ = std::move(corpus.labels);
}

Schema text_schema() {
  Schema s;
  s.add("path", Type::String, "~", "the text corpus")
      .field("format", &TextOptions::format, "lines", "lines: one document a line; tsv: id<TAB>label<TAB>text a line")
      .choices({"lines", "tsv"})
      .field("lowercase", &TextOptions::lowercase, true, "lowercase (ASCII) before counting")
      .field("stopwords", &TextOptions::stopwords, false, "drop a built-in list of common English words")
      .field("min_df", &TextOptions::min_df, 1, "keep terms that occur in at least this many documents").range(ge(1))
      .field("max_df", &TextOptions::max_df, 1.0, "... and in at most this fraction of the documents")
      .range(gt(0), le(1))
      .field("max_terms", &TextOptions::max_terms, 0, "then keep the most frequent terms (0: all)").range(ge(0));
  return add_batch_format_option(s);
}

Datasets make_text(const Options& o, uint64_t) {
  const std::string path = o.get_string("path");
  const auto t = o.to<TextOptions>();
  const bool dense = dense_batches(o);
  o.check(std::filesystem::exists(path), "path", "names no such file " + describe_path(path) + fetch_hint(path));
  TextCorpus corpus = read_text_corpus(path, t);
  if (corpus.dropped > 0)
    log().warn(
        "{}: dropped {} of {} documents left without words after tokenizing and pruning (min_df {}, max_df {}, "
        "max_terms {}{})",
        path, corpus.dropped, corpus.documents_read, t.min_df, t.max_df, t.max_terms, t.stopwords ? ", stopwords" : "");
  Datasets out;
  out.train = std::make_shared<TextDataset>(std::move(corpus), dense, path);
  return out;
}

}  // namespace tt::topic
