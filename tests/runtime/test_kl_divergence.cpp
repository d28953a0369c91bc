// KL divergence against a saved base (runtime/eval/kl_divergence.h): the stored
// log-probabilities' error bound, the file's checks, a model against itself,
// and stories260K's Q8_0/Q4_0 against llama.cpp's llama-perplexity
// --kl-divergence (tests/data/stories260k_kld_llamacpp.json, made by
// scripts/goldens/run_llamacpp_kld.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "runtime/engine.h"
#include "runtime/eval/kl_divergence.h"
#include "runtime/eval/perplexity.h"
#include "test_util.h"

namespace lilims {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int32_t n, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> x((size_t)n);
  for (float& v : x) v = d(rng);
  return x;
}

double log_sum_exp(const std::vector<float>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double s = 0.0;
  for (float v : x) s += std::exp((double)v - mx);
  return mx + std::log(s);
}

// Each stored log-probability is within step/2 of the true one, plus the
// float rounding of lp_min and step (2^-22 of the range).
TEST(KlEncode, StoredLogProbsWithinHalfAStep) {
  const uint32_t seed = 20261126;
  std::mt19937 rng(seed);
  for (int32_t n : {1, 2, 7, 512, 49152}) {
    const std::vector<float> x = random_logits(rng, n, 6.0f);
    runtime::KlBaseRecord rec;
    runtime::kl_encode(x.data(), n, n / 2, rec);
    const double lse = log_sum_exp(x);
    const float lo = *std::min_element(x.begin(), x.end());
    const float hi = *std::max_element(x.begin(), x.end());
    const double range = (double)hi - lo;
    const double bound = rec.step / 2.0 + range * std::ldexp(1.0, -22) + 1e-12;
    double worst = 0.0;
    for (int32_t v = 0; v < n; ++v) {
      const double stored = (double)rec.lp_min + (double)rec.step * rec.q[(size_t)v];
      worst = std::max(worst, std::fabs(stored - ((double)x[(size_t)v] - lse)));
    }
    EXPECT_LE(worst, bound) << "n_vocab " << n << ", seed " << seed;
    EXPECT_EQ(rec.top, (int32_t)(std::max_element(x.begin(), x.end()) - x.begin()));
    EXPECT_NEAR(rec.nll, lse - x[(size_t)n / 2], 1e-5 * std::max(1.0, std::fabs(lse)));
    // Against its own logits: with every log ratio within D = step + 2^-21 *
    // range after renormalising, KLD <= D^2 / 2 to second order; D^2 covers it.
    runtime::KlStats st;
    const double self = st.add(rec, x.data(), n / 2);
    const double d = rec.step + range * std::ldexp(1.0, -21);
    EXPECT_LE(std::fabs(self), d * d + 1e-12) << "n_vocab " << n << ", seed " << seed;
    EXPECT_EQ(st.summary().same_top, 1.0);
  }
}

// A known KLD: two distributions over 3 tokens, computed by hand.
TEST(KlStats, MatchesTheDefinition) {
  const std::vector<float> p_logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const std::vector<float> q_logits = {std::log(0.2f), std::log(0.3f), std::log(0.5f)};
  runtime::KlBaseRecord rec;
  runtime::kl_encode(p_logits.data(), 3, 1, rec);
  runtime::KlStats st;
  const double kld = st.add(rec, q_logits.data(), 1);
  const double want = 0.5 * std::log(0.5 / 0.2) + 0.2 * std::log(0.2 / 0.5);
  // Stored log-probs are within step/2 = log(2.5)/131070 = 7e-6; the first-
  // order effect on the KLD is below 2 * that * sum p|log p/q| < 2e-5.
  EXPECT_NEAR(kld, want, 2e-5);
  const runtime::KlSummary s = st.summary();
  EXPECT_EQ(s.same_top, 0.0);  // argmax 0 vs 2
  EXPECT_NEAR(s.ppl, 1.0 / 0.3, 1e-5);
  EXPECT_NEAR(s.ppl_base, 1.0 / 0.3, 1e-5);
}

runtime::KlBaseHeader small_header() {
  runtime::KlBaseHeader h;
  h.n_vocab = 5;
  h.n_ctx = 8;  // 3 scored positions per chunk
  h.n_chunks = 2;
  for (int i = 0; i < 16; ++i) h.tokens.push_back(i % 5);
  return h;
}

void write_small(const std::string& path) {
  const runtime::KlBaseHeader h = small_header();
  runtime::KlBaseWriter w(path, h);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < h.n_positions(); ++i) {
    const std::vector<float> x = random_logits(rng, h.n_vocab, 3.0f);
    w.add(x.data(), (int32_t)(i % h.n_vocab));
  }
  w.finish();
}

TEST(KlBaseFile, RoundTrips) {
  const std::string path = test::temp_path("roundtrip.kld");
  write_small(path);
  runtime::KlBaseReader r(path);
  const runtime::KlBaseHeader h = small_header();
  EXPECT_EQ(r.header().n_vocab, h.n_vocab);
  EXPECT_EQ(r.header().n_ctx, h.n_ctx);
  EXPECT_EQ(r.header().n_chunks, h.n_chunks);
  EXPECT_EQ(r.header().tokens, h.tokens);
  std::mt19937 rng(7);
  for (int64_t i = 0; i < h.n_positions(); ++i) {
    const std::vector<float> x = random_logits(rng, h.n_vocab, 3.0f);
    runtime::KlBaseRecord want;
    runtime::kl_encode(x.data(), h.n_vocab, (int32_t)(i % h.n_vocab), want);
    const runtime::KlBaseRecord& got = r.next();
    EXPECT_EQ(got.q, want.q);
    EXPECT_EQ(got.lp_min, want.lp_min);
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.top, want.top);
    EXPECT_EQ(got.nll, want.nll);
  }
  try {
    r.next();
    FAIL() << "read past the last position";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT);
  }
  std::remove(path.c_str());
}

void expect_refused(const std::string& path, lilims_status status, const std::string& needle) {
  try {
    runtime::KlBaseReader r(path);
    FAIL() << "accepted " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[perplexity] ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KlBaseFile, RefusesBadFiles) {
  const std::string path = test::temp_path("bad.kld");
  write_small(path);
  const std::string good = test::read_file(path);
  auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  expect_refused(test::temp_path("does_not_exist.kld"), LILIMS_ERR_IO, "cannot open");
  write("");
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "not a KL base file");
  std::string b = good;
  b[0] = 'X';
  write(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "not a KL base file");
  b = good;
  b[8] = 2;  // version
  write(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "format version 2");
  write(good.substr(0, good.size() - 1));
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "truncated");
  write(good + "x");
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "truncated or corrupt");
  b = good;
  b[12] = 0;  // n_vocab 0
  write(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "impossible sizes");
  b = good;
  b[20] = (char)0xff;  // n_chunks 255: the size no longer matches
  write(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "bytes");
  b = good;
  b[24] = 9;  // the first token beyond the vocabulary of 5
  write(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "outside its vocabulary");
  b = good;
  const size_t first_record = 24 + 16 * 4;
  const float nan = std::nanf("");
  std::memcpy(&b[first_record + 4], &nan, 4);  // step
  write(b);
  {
    runtime::KlBaseReader r(path);
    try {
      r.next();
      FAIL() << "accepted a NaN step";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT);
      EXPECT_NE(std::string(e.what()).find("impossible values"), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
}

TEST(KlBaseFile, RefusesAnotherVocabularyContextOrText) {
  const std::string path = test::temp_path("match.kld");
  write_small(path);
  runtime::KlBaseReader r(path);
  std::vector<int32_t> tokens = small_header().tokens;
  tokens.push_back(3);  // a longer text is fine: only the chunks' tokens count
  EXPECT_NO_THROW(r.check_matches(5, 8, tokens));
  auto refused = [&](int32_t n_vocab, int32_t n_ctx, const std::vector<int32_t>& t,
                     const std::string& needle) {
    try {
      r.check_matches(n_vocab, n_ctx, t);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(6, 8, tokens, "vocabulary of 5 tokens; this model has 6");
  refused(5, 16, tokens, "saved with CTX 8; this run uses 16");
  refused(5, 8, std::vector<int32_t>(tokens.begin(), tokens.begin() + 10), "this text has only 10");
  std::vector<int32_t> other = tokens;
  other[11] = 4;
  refused(5, 8, other, "token 11 is 1 there, 4 here");
  std::remove(path.c_str());
}

// ---- on real models --------------------------------------------------------

std::vector<int32_t> text_tokens(const runtime::Model& model) {
  std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return model.tokenizer().encode(text, true, false);
}

runtime::SessionOptions session_options(int32_t n_ctx) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 2;
  so.n_batch = 128;
  return so;
}

// Saves `base`'s distributions, then compares `model` with them.
runtime::KlSummary kld_of(const runtime::Model& base, const runtime::Model& model, int32_t n_ctx,
                          int32_t n_chunks, const std::string& file) {
  const std::vector<int32_t> tokens = text_tokens(base);
  runtime::KlBaseHeader h;
  h.n_vocab = base.hparams().n_vocab;
  h.n_ctx = n_ctx;
  h.n_chunks = runtime::perplexity_chunks(tokens.size(), n_ctx, n_chunks);
  h.tokens.assign(tokens.begin(), tokens.begin() + (ptrdiff_t)h.n_chunks * n_ctx);
  {
    runtime::KlBaseWriter w(file, h);
    runtime::Session s(base, session_options(n_ctx));
    runtime::perplexity(s, tokens, n_ctx, n_chunks, {},
                        [&](const float* row, int32_t next) { w.add(row, next); });
    w.finish();
  }
  runtime::KlBaseReader r(file);
  r.check_matches(model.hparams().n_vocab, n_ctx, tokens);
  runtime::KlStats st;
  runtime::Session s(model, session_options(n_ctx));
  runtime::perplexity(s, tokens, n_ctx, n_chunks, {},
                      [&](const float* row, int32_t next) { st.add(r.next(), row, next); });
  std::remove(file.c_str());
  return st.summary();
}

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

// lilims quantize --method plain, as the golden script makes the files.
std::unique_ptr<runtime::Model> quantized(const std::string& src, quant::Type type,
                                          const std::string& out) {
  auto in = gguf::File::open(src);
  gguf::RequantizeOptions opt;
  opt.method = quant::QuantMethod::plain;
  gguf::requantize(*in, type, opt).write(out);
  return runtime::Model::open(out);
}

TEST(KlDivergence, ModelAgainstItselfIsZeroWithTheSameTopToken) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const runtime::KlSummary s = kld_of(*model, *model, 256, 8, test::temp_path("self.kld"));
  EXPECT_EQ(s.n, 8 * 127);
  // Both runs give bit-identical logits, so only the stored log-probs' error
  // is left: KLD <= step^2 per position (KlEncode test), with step <= 40/65535
  // for stories260K's logit ranges (< 40) -> 3.7e-7.
  EXPECT_LT(std::fabs(s.kld_mean), 3.7e-7);
  EXPECT_LT(s.kld_max, 3.7e-7);
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_NEAR(s.ppl, s.ppl_base, 1e-6 * s.ppl);
}

TEST(KlDivergence, Stories260kMatchesLlamaCpp) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const auto golden = nlohmann::json::parse(
      test::read_file(test::source_path("tests/data/stories260k_kld_llamacpp.json")));
  const int32_t n_ctx = golden["n_ctx"].get<int32_t>();
  const int32_t n_chunks = golden["n_chunks"].get<int32_t>();
  auto base = runtime::Model::open(stories_path());
  for (const auto& [name, type] :
       {std::pair<std::string, quant::Type>{"Q8_0", quant::Type::Q8_0}, {"Q4_0", quant::Type::Q4_0}}) {
    const auto& want = golden["results"][name];
    const std::string qpath = test::temp_path("stories260K." + name + ".gguf");
    auto model = quantized(stories_path(), type, qpath);
    const runtime::KlSummary s = kld_of(*base, *model, n_ctx, n_chunks, test::temp_path("s260.kld"));
    std::remove(qpath.c_str());
    const double kld = want["kld_mean"].get<double>();
    std::printf("%s: KLD lilims %.6f +/- %.6f, llama.cpp %.6f; p99 %.6f vs %.6f; same top "
                "%.3f%% vs %.3f%%; ppl %.4f vs %.4f (base %.4f vs %.4f)\n",
                name.c_str(), s.kld_mean, s.kld_se, kld, s.kld_p99, want["kld_p99"].get<double>(),
                100 * s.same_top, want["same_top_percent"].get<double>(), s.ppl,
                want["ppl"].get<double>(), s.ppl_base, want["ppl_base"].get<double>());
    // The two runtimes' logits differ by float rounding (summation order,
    // Q8 activation rounding paths): the perplexities agree within 0.5%, as
    // tests/runtime/test_perplexity.cpp asks of them.  llama.cpp's "PPL(base)"
    // comes from its clamped uint16 base file (16 nats below the top token),
    // so the base is compared with its plain run of the F32 model.
    EXPECT_NEAR(s.ppl_base, golden["results"]["F32"]["ppl"].get<double>(), 5e-3 * s.ppl_base);
    EXPECT_NEAR(s.ppl, want["ppl"].get<double>(), 5e-3 * s.ppl);
    // KLD: an absolute 3.5e-5, llama.cpp's own p99 KLD of the F32 model
    // against itself (its base file's resolution and F16 rounding), plus a
    // relative part for the runtimes' differing logits: 1% of the mean, 5%
    // of the median and p99 (single order statistics move more).
    EXPECT_NEAR(s.kld_mean, kld, 3.5e-5 + 0.01 * kld);
    EXPECT_NEAR(s.kld_median, want["kld_median"].get<double>(),
                3.5e-5 + 0.05 * want["kld_median"].get<double>());
    EXPECT_NEAR(s.kld_p99, want["kld_p99"].get<double>(), 3.5e-5 + 0.05 * want["kld_p99"].get<double>());
    // Same top token: within 1% of the positions (~2 standard errors), from near-ties.
    EXPECT_NEAR(100 * s.same_top, want["same_top_percent"].get<double>(), 1.0);
  }
}

}  // namespace
}  // namespace lilims
