#include "runtime/eval/kl_divergence.h"

#include <sys/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace lilims::runtime {

namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'S', 'K', 'L', 'D', '\0'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderFixedBytes = 8 + 4 + 3 * 4;
constexpr int64_t kRecordFixedBytes = 4 * 4;

[[noreturn]] void fail(lilims_status status, const std::string& msg) {
  throw Error(status, "[perplexity] " + msg);
}

int64_t record_bytes(int32_t n_vocab) { return kRecordFixedBytes + 2 * (int64_t)n_vocab; }

// log(sum_v exp(x[v])) in double, with the maximum taken out.
template <typename T>
double log_sum_exp(const T* x, int32_t n, double* max_out = nullptr) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int32_t v = 0; v < n; ++v) mx = std::max(mx, (double)x[v]);
  double s = 0.0;
  for (int32_t v = 0; v < n; ++v) s += std::exp((double)x[v] - mx);
  if (max_out) *max_out = mx;
  return mx + std::log(s);
}

int32_t argmax(const float* x, int32_t n) {
  int32_t best = 0;
  for (int32_t v = 1; v < n; ++v) {
    if (x[v] > x[best]) best = v;
  }
  return best;
}

}  // namespace

void kl_encode(const float* logits, int32_t n_vocab, int32_t target, KlBaseRecord& rec) {
  const double lse = log_sum_exp(logits, n_vocab);
  float lo = logits[0];
  float hi = logits[0];
  for (int32_t v = 1; v < n_vocab; ++v) {
    lo = std::min(lo, logits[v]);
    hi = std::max(hi, logits[v]);
  }
  rec.lp_min = (float)((double)lo - lse);
  rec.step = (float)(((double)hi - (double)lo) / 65535.0);
  rec.top = argmax(logits, n_vocab);
  rec.nll = (float)(lse - (double)logits[target]);
  rec.q.assign((size_t)n_vocab, 0);
  if (rec.step > 0.0f) {
    // Quantized against the stored (float) lp_min and step, so the decoded
    // value is the nearest level to the true one.
    const double inv = 1.0 / (double)rec.step;
    for (int32_t v = 0; v < n_vocab; ++v) {
      const double lp = (double)logits[v] - lse;
      const double level = std::nearbyint((lp - (double)rec.lp_min) * inv);
      rec.q[(size_t)v] = (uint16_t)std::clamp(level, 0.0, 65535.0);
    }
  }
}

void kl_decode(const KlBaseRecord& rec, std::vector<double>& logp) {
  const int32_t n = (int32_t)rec.q.size();
  logp.resize((size_t)n);
  for (int32_t v = 0; v < n; ++v) {
    logp[(size_t)v] = (double)rec.lp_min + (double)rec.step * rec.q[(size_t)v];
  }
  const double lse = log_sum_exp(logp.data(), n);
  for (double& x : logp) x -= lse;
}

// ---- writer ----------------------------------------------------------------

KlBaseWriter::KlBaseWriter(const std::string& path, const KlBaseHeader& header)
    : path_(path), header_(header) {
  if (header.n_vocab < 1 || header.n_ctx < 4 || header.n_chunks < 1 ||
      (int64_t)header.tokens.size() != (int64_t)header.n_chunks * header.n_ctx) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "inconsistent KL base header for " + path);
  }
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail(LILIMS_ERR_IO, "cannot create " + path + ": " + std::strerror(errno));
  const int32_t dims[3] = {header.n_vocab, header.n_ctx, header.n_chunks};
  bool ok = std::fwrite(kMagic, 1, 8, f_) == 8;
  ok = ok && std::fwrite(&kVersion, 4, 1, f_) == 1;
  ok = ok && std::fwrite(dims, 4, 3, f_) == 3;
  ok = ok && std::fwrite(header.tokens.data(), 4, header.tokens.size(), f_) == header.tokens.size();
  if (!ok) fail(LILIMS_ERR_IO, "cannot write " + path);
}

KlBaseWriter::~KlBaseWriter() {
  if (f_) std::fclose(f_);
}

void KlBaseWriter::add(const float* logits, int32_t target) {
  if (written_ >= header_.n_positions()) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "more positions than the KL base header announces");
  }
  kl_encode(logits, header_.n_vocab, target, rec_);
  const float fixed[2] = {rec_.lp_min, rec_.step};
  bool ok = std::fwrite(fixed, 4, 2, f_) == 2;
  ok = ok && std::fwrite(&rec_.top, 4, 1, f_) == 1;
  ok = ok && std::fwrite(&rec_.nll, 4, 1, f_) == 1;
  ok = ok && std::fwrite(rec_.q.data(), 2, rec_.q.size(), f_) == rec_.q.size();
  if (!ok) fail(LILIMS_ERR_IO, "cannot write " + path_ + " (disk full?)");
  ++written_;
}

void KlBaseWriter::finish() {
  if (written_ != header_.n_positions()) {
    fail(LILIMS_ERR_INTERNAL, "KL base " + path_ + " has " + std::to_string(written_) + " of " +
                                  std::to_string(header_.n_positions()) + " positions");
  }
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) fail(LILIMS_ERR_IO, "cannot write " + path_ + " (disk full?)");
}

// ---- reader ----------------------------------------------------------------

KlBaseReader::KlBaseReader(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) fail(LILIMS_ERR_IO, "cannot open KL base " + path + ": " + std::strerror(errno));
  if (fseeko(f_, 0, SEEK_END) != 0) fail(LILIMS_ERR_IO, "cannot read " + path);
  const int64_t size = (int64_t)ftello(f_);
  std::rewind(f_);
  char magic[8] = {};
  uint32_t version = 0;
  int32_t dims[3] = {};
  if (size < kHeaderFixedBytes || std::fread(magic, 1, 8, f_) != 8 ||
      std::memcmp(magic, kMagic, 8) != 0) {
    fail(LILIMS_ERR_BAD_FORMAT, path + " is not a KL base file (saved by --kl-base)");
  }
  if (std::fread(&version, 4, 1, f_) != 1 || std::fread(dims, 4, 3, f_) != 3) {
    fail(LILIMS_ERR_BAD_FORMAT, "truncated KL base " + path);
  }
  if (version != kVersion) {
    fail(LILIMS_ERR_BAD_FORMAT, "KL base " + path + " has format version " +
                                    std::to_string(version) + "; this lilims reads version " +
                                    std::to_string(kVersion));
  }
  header_.n_vocab = dims[0];
  header_.n_ctx = dims[1];
  header_.n_chunks = dims[2];
  constexpr int32_t kLimit = 1 << 24;
  if (dims[0] < 1 || dims[0] > kLimit || dims[1] < 4 || dims[1] > kLimit || dims[2] < 1 ||
      dims[2] > kLimit) {
    fail(LILIMS_ERR_BAD_FORMAT, "KL base " + path + " holds impossible sizes (n_vocab " +
                                    std::to_string(dims[0]) + ", n_ctx " + std::to_string(dims[1]) +
                                    ", chunks " + std::to_string(dims[2]) + ")");
  }
  // Each factor is below 2^24, so these products fit in int64.
  const int64_t n_tokens = (int64_t)header_.n_chunks * header_.n_ctx;
  const int64_t want = kHeaderFixedBytes + 4 * n_tokens +
                       header_.n_positions() * record_bytes(header_.n_vocab);
  if (size != want) {
    fail(LILIMS_ERR_BAD_FORMAT, "KL base " + path + " has " + std::to_string(size) +
                                    " bytes; its header announces " + std::to_string(want) +
                                    " (truncated or corrupt)");
  }
  header_.tokens.resize((size_t)n_tokens);
  if (std::fread(header_.tokens.data(), 4, (size_t)n_tokens, f_) != (size_t)n_tokens) {
    fail(LILIMS_ERR_IO, "cannot read " + path);
  }
  for (int32_t t : header_.tokens) {
    if (t < 0 || t >= header_.n_vocab) {
      fail(LILIMS_ERR_BAD_FORMAT, "KL base " + path + " holds token id " + std::to_string(t) +
                                      " outside its vocabulary of " +
                                      std::to_string(header_.n_vocab));
    }
  }
}

KlBaseReader::~KlBaseReader() {
  if (f_) std::fclose(f_);
}

void KlBaseReader::check_matches(int32_t n_vocab, int32_t n_ctx,
                                 const std::vector<int32_t>& tokens) const {
  if (n_vocab != header_.n_vocab) {
    fail(LILIMS_ERR_INVALID_ARGUMENT,
         "KL base " + path_ + " was saved with a vocabulary of " + std::to_string(header_.n_vocab) +
             " tokens; this model has " + std::to_string(n_vocab));
  }
  if (n_ctx != header_.n_ctx) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "KL base " + path_ + " was saved with CTX " +
                                          std::to_string(header_.n_ctx) + "; this run uses " +
                                          std::to_string(n_ctx) + " (-c)");
  }
  if (tokens.size() < header_.tokens.size()) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "KL base " + path_ + " covers " +
                                          std::to_string(header_.tokens.size()) +
                                          " tokens; this text has only " +
                                          std::to_string(tokens.size()));
  }
  for (size_t i = 0; i < header_.tokens.size(); ++i) {
    if (tokens[i] != header_.tokens[i]) {
      fail(LILIMS_ERR_INVALID_ARGUMENT,
           "KL base " + path_ + " was saved from other tokens (token " + std::to_string(i) +
               " is " + std::to_string(header_.tokens[i]) + " there, " + std::to_string(tokens[i]) +
               " here): another text or tokenizer");
    }
  }
}

const KlBaseRecord& KlBaseReader::next() {
  if (read_ >= header_.n_positions()) {
    fail(LILIMS_ERR_BAD_FORMAT, "KL base " + path_ + " has no more positions");
  }
  float fixed[2] = {};
  rec_.q.resize((size_t)header_.n_vocab);
  bool ok = std::fread(fixed, 4, 2, f_) == 2;
  ok = ok && std::fread(&rec_.top, 4, 1, f_) == 1;
  ok = ok && std::fread(&rec_.nll, 4, 1, f_) == 1;
  ok = ok && std::fread(rec_.q.data(), 2, rec_.q.size(), f_) == rec_.q.size();
  if (!ok) fail(LILIMS_ERR_IO, "cannot read " + path_);
  rec_.lp_min = fixed[0];
  rec_.step = fixed[1];
  if (!std::isfinite(rec_.lp_min) || !std::isfinite(rec_.step) || rec_.step < 0.0f ||
      !std::isfinite(rec_.nll) || rec_.top < 0 || rec_.top >= header_.n_vocab) {
    fail(LILIMS_ERR_BAD_FORMAT,
         "KL base " + path_ + ": position " + std::to_string(read_) + " holds impossible values");
  }
  ++read_;
  return rec_;
}

// ---- statistics ------------------------------------------------------------

double KlStats::add(const KlBaseRecord& base, const float* logits, int32_t target) {
  const int32_t n = (int32_t)base.q.size();
  kl_decode(base, logp_);
  const double lse = log_sum_exp(logits, n);
  double kld = 0.0;
  for (int32_t v = 0; v < n; ++v) {
    const double lp = logp_[(size_t)v];
    kld += std::exp(lp) * (lp - ((double)logits[v] - lse));
  }
  kld_.push_back(kld);
  sum_nll_ += lse - (double)logits[target];
  sum_nll_base_ += (double)base.nll;
  if (argmax(logits, n) == base.top) ++same_top_;
  return kld;
}

KlSummary KlStats::summary() const {
  KlSummary s;
  s.n = (int64_t)kld_.size();
  if (s.n == 0) return s;
  const double n = (double)s.n;
  s.ppl = std::exp(sum_nll_ / n);
  s.ppl_base = std::exp(sum_nll_base_ / n);
  double sum = 0.0, sum2 = 0.0;
  for (double k : kld_) {
    sum += k;
    sum2 += k * k;
  }
  s.kld_mean = sum / n;
  const double var = sum2 / n - s.kld_mean * s.kld_mean;
  s.kld_se = s.n > 1 && var > 0.0 ? std::sqrt(var / (n - 1.0)) : 0.0;
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  // Linear interpolation between neighbours, as llama-perplexity does.
  auto percentile = [&](double fraction) {
    const double p = fraction * (double)(sorted.size() - 1);
    const size_t i = (size_t)p;
    const size_t j = std::min(i + 1, sorted.size() - 1);
    return (1.0 - (p - (double)i)) * sorted[i] + (p - (double)i) * sorted[j];
  };
  s.kld_median = percentile(0.5);
  s.kld_p99 = percentile(0.99);
  s.kld_max = sorted.back();
  s.same_top = (double)same_top_ / n;
  s.same_top_se = s.n > 1 ? std::sqrt(s.same_top * (1.0 - s.same_top) / (n - 1.0)) : 0.0;
  return s;
}

}  // namespace lilims::runtime
