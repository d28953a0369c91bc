// The tiny random-weight llama (tests/data/tiny/llama.gguf) against float64
// logits from HF transformers (tests/data/tiny/goldens.json, made by
// scripts/goldens/gen_tiny_models.py; see tests/data/tiny/SOURCE.md). The
// phi2 and phi3 files beside it carry goldens of the same form for their
// builders.
//
// Every case runs its prompt (1, 7, 20, 40 or 100 tokens) in one eval, which
// prefills in blocks, and again one token at a time; the logits at the stored
// positions must match the goldens in all 512 entries.
//
// Tolerances, and why.  The weights are F16 values used exactly, so with an
// F32 KV cache the only error is float32 rounding.  A K-term float32 dot
// product is off by at most K * 2^-24 of the sum of |terms|; the longest chain
// here is 7 products (q/k/v, attention, output, gate/up, down per layer, 2
// layers, then the head) with K <= 128, and logits are below 10 in magnitude,
// so kTolF32 = 7 * 128 * 2^-24 * 10 = 5.3e-4 bounds the first-order error
// (measured: 4.6e-6 on every path, HF's own float32 run 5.3e-6).  An F16 KV
// cache rounds every K and V entry by up to 2^-11 relative; through 2 layers
// of 2 such roundings on a logit scale of 10, kTolF16Kv = 2 * 2 * 2^-11 * 10 =
// 2.0e-2 (measured 3.6e-3).  A layout mistake costs far more: the same model
// without the Q/K permutation llama.cpp's converter applies is 2.4 to 4.9 away.
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

using nlohmann::json;

constexpr double kTolF32 = 7 * 128 * 0x1p-24 * 10;
constexpr double kTolF16Kv = 2 * 2 * 0x1p-11 * 10;

const json& goldens() {
  static const json j =
      json::parse(test::read_file(test::source_path("tests/data/tiny/goldens.json")));
  return j;
}

struct Case {
  models::ExecMode mode;
  quant::Type kv;
  double tol;
  const char* name;
};

class TinyLlamaVsTransformers : public ::testing::TestWithParam<Case> {
 protected:
  runtime::SessionOptions options() const {
    runtime::SessionOptions so;
    so.mode = GetParam().mode;
    so.kv_type = GetParam().kv;
    so.n_ctx = 128;
    so.n_threads = 1;
    return so;
  }
};

double max_diff(const float* row, const json& want) {
  double worst = 0.0;
  for (size_t v = 0; v < want.size(); ++v) {
    worst = std::max(worst, std::fabs((double)row[v] - want[v].get<double>()));
  }
  return worst;
}

TEST_P(TinyLlamaVsTransformers, LogitsAtStoredPositions) {
  const std::unique_ptr<runtime::Model> model =
      runtime::Model::open(test::source_path("tests/data/tiny/llama.gguf"));
  const int n_vocab = model->hparams().n_vocab;
  const std::vector<int32_t> prompt = goldens()["prompt"]["token_ids"].get<std::vector<int32_t>>();
  double worst_batch = 0.0, worst_steps = 0.0;
  for (const json& c : goldens()["models"]["llama"]["cases"]) {
    const int n = c["n_tokens"].get<int>();
    const std::vector<int32_t> ids(prompt.begin(), prompt.begin() + n);
    runtime::Session batch(*model, options());
    std::vector<float> all;
    batch.eval_all_logits(ids, all);
    ASSERT_EQ(all.size(), (size_t)n * (size_t)n_vocab);

    // One token at a time: the logits after token p are position p's.
    runtime::Session steps(*model, options());
    std::vector<std::vector<float>> step_logits;
    for (int p = 0; p < n; ++p) {
      steps.eval({ids[(size_t)p]});
      step_logits.push_back(steps.logits());
    }

    const std::vector<int> positions = c["positions"].get<std::vector<int>>();
    for (size_t k = 0; k < positions.size(); ++k) {
      const int p = positions[k];
      const json& want = c["logits"][k];
      ASSERT_EQ(want.size(), (size_t)n_vocab);
      const double d_batch = max_diff(&all[(size_t)p * (size_t)n_vocab], want);
      const double d_steps = max_diff(step_logits[(size_t)p].data(), want);
      EXPECT_LE(d_batch, GetParam().tol) << n << "-token prompt, position " << p << " (one eval)";
      EXPECT_LE(d_steps, GetParam().tol) << n << "-token prompt, position " << p << " (stepwise)";
      worst_batch = std::max(worst_batch, d_batch);
      worst_steps = std::max(worst_steps, d_steps);
    }
  }
  std::printf("[ %s ] max |logit - golden|: %.3g in one eval, %.3g stepwise (tolerance %.3g)\n",
              GetParam().name, worst_batch, worst_steps, GetParam().tol);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, TinyLlamaVsTransformers,
    ::testing::Values(Case{models::ExecMode::oracle_f32, quant::Type::F32, kTolF32, "oracle_f32"},
                      Case{models::ExecMode::ref, quant::Type::F32, kTolF32, "ref_kv_f32"},
                      Case{models::ExecMode::fast, quant::Type::F32, kTolF32, "fast_kv_f32"},
                      Case{models::ExecMode::fast, quant::Type::F16, kTolF16Kv, "fast_kv_f16"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lilims
