// SmolLM2-135M-Instruct (Q4_1) against llama.cpp on the same GGUF: logits at
// every position of five prompts, and greedy continuations of 64 tokens.
// Goldens: tests/data/smollm2_llamacpp_goldens.json, made by
// scripts/goldens/gen_smollm2_goldens.py (llama-cpp-python; versions inside).
//
// Tolerances, and why.  llama.cpp multiplies the Q4_1 weights with
// activations quantized to Q8_1 (the Q8_0 LM head with Q8_0 activations) and
// keeps K/V in F16.  Quantizing activations makes the forward pass
// discontinuous: a 1-ulp change in an input (a different but correct order
// of float additions, x*(1/d) instead of x/d) can move an int8 value across a
// rounding boundary, and 30 layers amplify that.  We measured the size of
// this intrinsic noise between paths of our own that are all correct: for a
// single token, our AVX2 and scalar paths (identical integer arithmetic;
// element-wise ops 1 ulp apart) differ by 0.19 in mean |logit| and so do our
// scalar Q8 path and the fp32 oracle.  llama.cpp is one more such path, so:
//  - every llama.cpp top-20 logit within kTol = 2.5 of ours (logits span
//    about [-20, 30]; the worst case we saw was 2.2), and the mean over
//    those entries within kMeanTol = 0.35 (about twice the intrinsic noise;
//    measured 0.08-0.28 for every path and prompt);
//  - our argmax equals llama.cpp's at >= 90% of positions (measured 94-100%);
//  - greedy: our 64 tokens equal llama.cpp's up to the first difference,
//    where llama.cpp's own two best logits must be closer than
//    kNearTie = 0.5 (the noise of a difference of two logits; the
//    divergences we saw had margins 0.01-0.21).
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

using nlohmann::json;

constexpr double kTol = 2.5, kMeanTol = 0.35, kNearTie = 0.5, kMinArgmaxAgreement = 0.9;

const json& goldens() {
  static const json j =
      json::parse(test::read_file(test::source_path("tests/data/smollm2_llamacpp_goldens.json")));
  return j;
}

const runtime::Model& smollm2() {
  static std::unique_ptr<runtime::Model> m = runtime::Model::open(test::smollm2_path());
  return *m;
}

struct Case {
  models::ExecMode mode;
  const char* name;
};

class SmolLM2VsLlamaCpp : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  }
  double tol() const { return kTol; }
  double mean_tol() const { return kMeanTol; }
  runtime::SessionOptions options() const {
    runtime::SessionOptions so;
    so.mode = GetParam().mode;
    so.n_ctx = 512;
    so.n_threads = 1;  // ctest runs tests side by side on the cores
    return so;
  }
};

TEST_P(SmolLM2VsLlamaCpp, TopLogitsAtEveryPosition) {
  const runtime::Model& model = smollm2();
  const int n_vocab = model.hparams().n_vocab;
  for (const json& p : goldens()["prompts"]) {
    const std::vector<int32_t> ids = p["token_ids"].get<std::vector<int32_t>>();
    runtime::Session s(model, options());
    std::vector<float> logits;
    s.eval_all_logits(ids, logits);
    double sum = 0.0, worst = 0.0;
    size_t count = 0, top1_agree = 0;
    const json& positions = p["positions"];
    ASSERT_EQ(positions.size(), ids.size());
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const float* row = &logits[pos * (size_t)n_vocab];
      const json& top = positions[pos]["top"];
      for (const json& e : top) {
        const int id = e[0].get<int>();
        const double want = e[1].get<double>();
        const double diff = std::fabs(row[id] - want);
        sum += diff;
        worst = std::max(worst, diff);
        ++count;
        EXPECT_LE(diff, tol()) << p["name"] << " position " << pos << " token " << id;
      }
      int best = 0;
      for (int v = 1; v < n_vocab; ++v) best = row[v] > row[best] ? v : best;
      top1_agree += best == top[0][0].get<int>();
    }
    const double mean = sum / (double)count;
    EXPECT_LE(mean, mean_tol()) << p["name"];
    EXPECT_GE((double)top1_agree, kMinArgmaxAgreement * (double)ids.size()) << p["name"];
    std::printf("[ %s ] %-8s mean |diff| %.4f, max %.4f over %zu top-20 logits; argmax agrees at "
                "%zu of %zu positions\n",
                GetParam().name, p["name"].get<std::string>().c_str(), mean, worst, count,
                top1_agree, ids.size());
  }
}

// Greedy generation runs token by token: only the fast path here (the
// scalar paths' per-position agreement is checked above and, teacher-forced,
// in test_isa_agreement.cpp; stories260K checks all three paths greedily).
class SmolLM2GreedyVsLlamaCpp : public SmolLM2VsLlamaCpp {};

TEST_P(SmolLM2GreedyVsLlamaCpp, ContinuationsMatchUpToNearTies) {
  const runtime::Model& model = smollm2();
  for (const json& p : goldens()["prompts"]) {
    const std::vector<int32_t> ids = p["token_ids"].get<std::vector<int32_t>>();
    const json& g = p["greedy"];
    runtime::Session s(model, options());
    runtime::GenerateOptions go;
    go.max_tokens = g["n"].get<int>();
    go.sampling.temperature = 0.0f;
    const runtime::GenerateResult r = s.generate_tokens(ids, go);
    const std::vector<int32_t> want = g["ids"].get<std::vector<int32_t>>();
    size_t i = 0;
    while (i < want.size() && i < r.tokens.size() && r.tokens[i] == want[i]) ++i;
    if (i == want.size()) {
      std::printf("[ %s ] %-8s all %zu greedy tokens equal llama.cpp's\n", GetParam().name,
                  p["name"].get<std::string>().c_str(), want.size());
      continue;
    }
    if (i == r.tokens.size() && r.stop == runtime::StopReason::end_of_generation) {
      // We stopped at an end-of-generation token where llama.cpp went on
      // (llama.cpp's generation loop in the script does not stop at EOG).
      const auto& step = g["steps"][i];
      const double margin = step["top2"][0][1].get<double>() - step["top2"][1][1].get<double>();
      EXPECT_LT(margin, kNearTie) << p["name"] << ": stopped at " << i;
      continue;
    }
    ASSERT_LT(i, g["steps"].size());
    const json& step = g["steps"][i];
    const double margin = step["top2"][0][1].get<double>() - step["top2"][1][1].get<double>();
    std::printf("[ %s ] %-8s diverges from llama.cpp at generated token %zu (ours %d, theirs %d); "
                "llama.cpp's top-2 margin there: %.4f\n",
                GetParam().name, p["name"].get<std::string>().c_str(), i,
                i < r.tokens.size() ? r.tokens[i] : -1, want[i], margin);
    EXPECT_LT(margin, kNearTie) << p["name"] << ": divergence at " << i
                             << " is not at a near-tie of llama.cpp's logits";
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, SmolLM2VsLlamaCpp,
                         ::testing::Values(Case{models::ExecMode::fast, "fast"},
                                           Case{models::ExecMode::ref, "ref"},
                                           Case{models::ExecMode::oracle_f32, "oracle"}),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(Paths, SmolLM2GreedyVsLlamaCpp,
                         ::testing::Values(Case{models::ExecMode::fast, "fast"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lilims
