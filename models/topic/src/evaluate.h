#pragma once
// Evaluating a fitted topic model (L: n x k document-topic proportions, F: k x m topic-term
// distributions) as tinytopics does: topic alignment against a ground truth, top terms,
// the whole-corpus loss, and the structure plot. Plain functions on tensors.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tt::topic {

// The matching of learned topics to true topics.
struct Alignment {
  std::vector<int64_t> assignment;  // learned topic for each true topic; -1 when unmatched (k_true > k_learned)
  std::vector<double> cosine;       // cosine similarity of each matched pair; NaN when unmatched
  double mean = 0, min = 0;         // over the matched pairs
};

// The one-to-one matching of rows to columns with the largest total weight (Hungarian
// algorithm, O(r^2 c)); min(r, c) pairs. Returns the column of each row, or -1.
std::vector<int64_t> max_weight_assignment(const std::vector<std::vector<double>>& weight);

// tinytopics' align_topics: cosine similarity of the L2-normalised rows of true_F (k1 x m)
// and learned_F (k2 x m), matched one-to-one to maximise the total similarity.
Alignment align_topics(const torch::Tensor& true_F, const torch::Tensor& learned_F);

// Reorders the learned topics along dim (0 for F, 1 for L) so that position i holds the topic
// matched to true topic i; learned topics without a match follow, in their original order.
torch::Tensor permute_topics(const torch::Tensor& L_or_F, const Alignment& alignment, int dim);

// The n most probable terms of each topic with their probabilities, most probable first.
// vocab names the m terms; when empty, terms are called "term<j>".
using TopTerms = std::vector<std::vector<std::pair<std::string, double>>>;
TopTerms top_terms(const torch::Tensor& F, const std::vector<std::string>& vocab, int n);

// One line per topic: "topic 3: money (0.031), bank (0.022), ...".
void write_top_terms(const std::filesystem::path& path, const TopTerms& terms);
// `lines`, one a line (vocab.txt, doc_ids.txt), whole or not at all (WriteError naming the file).
void write_lines(const std::filesystem::path& path, const std::vector<std::string>& lines);

// The whole-corpus tinytopics loss sum_ij (Xhat_ij - X_ij log(max(Xhat_ij, 1e-10))), Xhat = L F.
struct CorpusLoss {
  double sum = 0;           // over all documents and terms
  double mean_per_doc = 0;  // sum / n_docs
  int64_t n_docs = 0;
};

// rows(begin, end) returns the dense float32 counts of documents [begin, end) ((end-begin) x m);
// the loss is computed block_rows documents at a time, so n x m is never held at once.
CorpusLoss corpus_loss(const torch::Tensor& L, const torch::Tensor& F,
                       const std::function<torch::Tensor(int64_t begin, int64_t end)>& rows,
                       int64_t block_rows = 1024);

// tinytopics' plot_structure: one stacked bar of topic proportions per document, documents
// grouped by dominant topic and sorted within a group by that topic's weight (decreasing).
// With doc_labels (one per document), documents are first grouped by label (in sorted
// order), labels marking the x axis. When n > max_docs, about max_docs documents are kept,
// evenly spaced within each group. Writes <png stem>.dat and <png stem>.gp beside the png;
// returns false (with a warning) when gnuplot is missing or fails.
bool plot_structure(const torch::Tensor& L, const std::filesystem::path& png, const std::string& title,
                    int max_docs = 2000, const std::vector<std::string>& doc_labels = {});

}  // namespace tt::topic
