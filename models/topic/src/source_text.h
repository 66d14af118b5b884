#pragma once
// topic-text: a text corpus turned into term counts, as scikit-learn's CountVectorizer does
// for tinytopics users: tokens are runs of two or more word characters (ASCII letters,
// digits, '_', and any non-ASCII byte, so UTF-8 words stay whole), lowercased (ASCII) by
// default; optional English stopwords; terms pruned by document frequency (min_df, max_df)
// and then to the max_terms most frequent; vocabulary in alphabetical order. Documents left
// without words are dropped with a warning.
#include <string_view>

#include "topic_data.h"

namespace tt::topic {

// topic-text's options as text_schema() binds them (defaults, ranges and choices are there;
// code that builds one without a schema starts from
// Options::defaults(text_schema(), ...).to<TextOptions>()).
struct TextOptions {
  std::string format;  // lines: one document a line; tsv: id<TAB>label<TAB>text
  bool lowercase;
  bool stopwords;
  int64_t min_df;     // keep terms in at least this many documents
  double max_df;      // ... and in at most this fraction of them
  int64_t max_terms;  // then the most frequent (0: all)
};

struct TextCorpus {
  CsrCounts counts;
  std::vector<std::string> vocab;   // column j's term
  std::vector<std::string> labels;  // per kept document (tsv)
  std::vector<std::string> ids;     // per kept document (tsv)
  std::vector<int64_t> lines;       // per kept document: its line in the file (from 1)
  int64_t documents_read = 0;
  int64_t dropped = 0;  // documents with no words left
};

std::vector<std::string> tokenize(std::string_view text, bool lowercase);
const std::vector<std::string>& english_stopwords();
// `options` within text_schema()'s ranges and choices.
TextCorpus read_text_corpus(const std::string& path, const TextOptions& options);

// A TextCorpus as a dataset; ids and lines tell which document each row is.
class TextDataset : public SparseCountsDataset {
 public:
  TextDataset(TextCorpus corpus, bool dense_batches, const std::string& path);
  std::vector<std::string> doc_ids() const override { return ids_; }  // tsv's ids; none for lines
  std::vector<std::string> ids_;
  std::vector<int64_t> lines_;
};

Schema text_schema();
Datasets make_text(const Options& o, uint64_t pipeline_seed);

}  // namespace tt::topic
