// KL divergence of a model's next-token distributions from a base model's,
// over the positions llama-perplexity scores (runtime/eval/perplexity.h), as
// llama-perplexity --kl-divergence reports it: mean KLD (with its standard
// error), median / p99 / max, and how often both models rank the same token
// first.
//
// The base run saves its distributions to a file (`lilims perplexity
// --kl-base FILE`), read back by the compared run (`--kl-ref FILE`).
// File format, version 1, little-endian:
//   char     magic[8] = "LLMSKLD\0"
//   uint32   version = 1
//   int32    n_vocab, n_ctx, n_chunks
//   int32    tokens[n_chunks * n_ctx]   the text's tokens the chunks hold
//                                       (before any BOS replacement)
//   then, per scored position (n_chunks * (n_ctx - 1 - n_ctx/2), in order):
//   float    lp_min                     the smallest log-probability
//   float    step                       (max - min log-probability) / 65535
//   int32    top                        argmax of the base logits (first max)
//   float    nll                        -log p(next token) of the base model
//   uint16   q[n_vocab]                 log p_v ~ lp_min + step * q[v]
// The whole range of log-probabilities is kept (nothing clamped), so a
// stored log-probability is off by at most step/2 (plus float rounding of
// lp_min and step, below 2^-22 of the range): with SmolLM2's ranges of
// 29-53 nats (measured over ppl_text.txt) that is <= 4.0e-4 nats.  The reader renormalises the decoded
// row, which cancels the part of that error shared by all tokens; what is
// left moves a position's KLD by at most ~2 * step * sum_v p_v |log p_v/q_v|
// (first order), and the KLD of a model against itself by at most
// ~step^2 (second order): ~6e-7 for step 8e-4.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace lilims::runtime {

struct KlBaseHeader {
  int32_t n_vocab = 0;
  int32_t n_ctx = 0;
  int32_t n_chunks = 0;
  std::vector<int32_t> tokens;  // (n_chunks * n_ctx)
  int64_t scored_per_chunk() const { return n_ctx - 1 - n_ctx / 2; }
  int64_t n_positions() const { return (int64_t)n_chunks * scored_per_chunk(); }
};

// One scored position as stored.
struct KlBaseRecord {
  float lp_min = 0.0f;
  float step = 0.0f;
  int32_t top = 0;
  float nll = 0.0f;
  std::vector<uint16_t> q;  // (n_vocab)
};

// Quantizes one row of logits (n_vocab) whose next token is `target`.
void kl_encode(const float* logits, int32_t n_vocab, int32_t target, KlBaseRecord& rec);
// The stored log-probabilities, renormalised so that sum_v exp(logp[v]) = 1.
void kl_decode(const KlBaseRecord& rec, std::vector<double>& logp);

// Writes a base file position by position; throws LILIMS_ERR_IO.
class KlBaseWriter {
 public:
  KlBaseWriter(const std::string& path, const KlBaseHeader& header);
  ~KlBaseWriter();
  KlBaseWriter(const KlBaseWriter&) = delete;
  KlBaseWriter& operator=(const KlBaseWriter&) = delete;
  void add(const float* logits, int32_t target);
  // Checks that every position was written and closes the file.
  void finish();

 private:
  std::string path_;
  KlBaseHeader header_;
  FILE* f_ = nullptr;
  int64_t written_ = 0;
  KlBaseRecord rec_;
};

// Reads a base file; the constructor checks the header and the file's size
// (LILIMS_ERR_IO when it cannot be read, LILIMS_ERR_BAD_FORMAT when it is not
// a base file, is truncated or holds impossible values).
class KlBaseReader {
 public:
  explicit KlBaseReader(const std::string& path);
  ~KlBaseReader();
  KlBaseReader(const KlBaseReader&) = delete;
  KlBaseReader& operator=(const KlBaseReader&) = delete;
  const KlBaseHeader& header() const { return header_; }
  // Throws LILIMS_ERR_INVALID_ARGUMENT with the first difference when the
  // file was not saved for this vocabulary, chunk size and text.
  void check_matches(int32_t n_vocab, int32_t n_ctx, const std::vector<int32_t>& tokens) const;
  // The next position; LILIMS_ERR_BAD_FORMAT past the end or on a bad record.
  const KlBaseRecord& next();

 private:
  std::string path_;
  KlBaseHeader header_;
  FILE* f_ = nullptr;
  int64_t read_ = 0;
  KlBaseRecord rec_;
};

struct KlSummary {
  int64_t n = 0;
  double ppl = 0.0, ppl_base = 0.0;
  double kld_mean = 0.0, kld_se = 0.0;  // standard error of the mean
  double kld_median = 0.0, kld_p99 = 0.0, kld_max = 0.0;
  double same_top = 0.0, same_top_se = 0.0;  // fractions
};

// Accumulates the per-position figures.
class KlStats {
 public:
  // logits: the compared model's row (n_vocab) at the position `base` holds.
  // Returns that position's KLD(base || model).
  double add(const KlBaseRecord& base, const float* logits, int32_t target);
  KlSummary summary() const;

 private:
  std::vector<double> kld_;
  std::vector<double> logp_;
  double sum_nll_ = 0.0, sum_nll_base_ = 0.0;
  int64_t same_top_ = 0;
};

}  // namespace lilims::runtime
