#pragma once
// The generative model of tinytopics' generate_synthetic_data, one document at a time, so
// that a corpus can be made in memory (topic-synthetic) or streamed to disk in chunks
// (tt-data synth-topics) with the same numbers either way:
//   topic-term rows F_t ~ Dirichlet(1_m), document-topic rows L_i ~ Dirichlet(1_k),
//   length_i ~ Poisson(avg_doc_length) (at least 1, so no document is empty),
//   document i = length_i words, each a topic z ~ L_i then a term ~ F_z (a multinomial
//   draw from the mixture L_i F).
// Every random number of document i comes from a generator seeded by (seed, i) alone, so a
// document does not depend on which thread made it or on the other documents.
// Plain C++ and ATen only: tools/tt-data compiles this file too.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace tt::topic {

class SyntheticCorpus {
 public:
  // Draws F (k x m); checks the arguments (tt::ConfigError naming the bad one).
  SyntheticCorpus(int64_t n, int64_t m, int64_t k, double avg_doc_length, uint64_t seed);

  int64_t n_docs() const { return n_; }
  int64_t n_terms() const { return m_; }
  int64_t k() const { return k_; }
  at::Tensor true_F() const;  // k x m float32

  // Document `doc`: its topic proportions (k floats) and its counts (m floats, overwritten).
  // Returns the document's length (its number of words).
  int64_t document(int64_t doc, float* l_row, float* x_row) const;
  // Documents [begin, end) into row-major L ((end-begin) x k) and X ((end-begin) x m), in
  // parallel over documents (at::parallel_for); the result does not depend on the threads.
  // Returns their number of words.
  int64_t documents(int64_t begin, int64_t end, float* L, float* X) const;

 private:
  int64_t n_, m_, k_;
  double avg_;
  uint64_t seed_;
  // F's rows as Walker alias tables (Vose's construction): a term is drawn in O(1) as
  // column j ~ U{0..m-1}, kept with probability accept_[j], else alias_[j].
  std::vector<float> accept_;   // k x m
  std::vector<int32_t> alias_;  // k x m
  std::vector<float> F_;        // k x m
};

}  // namespace tt::topic
