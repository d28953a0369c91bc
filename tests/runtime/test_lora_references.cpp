// LoRA adapters against independent implementations.
//
// PEFT: adapters PEFT itself wrote for the tiny llama and phi3
// (tests/data/peft, scripts/goldens/gen_peft_adapters.py), converted by
// `lilims convert`'s code and applied unmerged on the fp32 oracle, against
// the logits HF transformers + PEFT computed in float64.  lilims holds A and
// B in Q8_0 (each value within 1/254 of its 32-block's largest), so the
// adapter's effect on a logit is off by up to about 1% before the layers
// compound it: the bound is 3% of the largest effect the golden records,
// plus the oracle's own 1e-4 against the float64 base.
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "models/convert_peft.h"
#include "models/gguf.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

using Json = nlohmann::json;

Json peft_goldens() {
  std::ifstream f(test::source_path("tests/data/peft/goldens.json"));
  return Json::parse(f);
}

void check_peft_adapter(const std::string& name) {
  SCOPED_TRACE(name);
  const Json g = peft_goldens();
  const Json& a = g.at("adapters").at(name);
  const std::string base = test::source_path(a.at("base_gguf").get<std::string>());
  const std::string out = test::temp_path(name + ".lora.gguf");
  models::convert_peft_dir(test::source_path(a.at("dir").get<std::string>()), base).write(out);
  const auto model = runtime::Model::open(base);
  const auto ad = runtime::Adapter::open(*model, out);
  const std::vector<int32_t> ids = g.at("token_ids").get<std::vector<int32_t>>();
  for (const Json& c : a.at("cases")) {
    const std::string rf = c.at("rope_factors").is_string() ? c.at("rope_factors").get<std::string>() : "";
    SCOPED_TRACE("rope factors " + rf);
    runtime::SessionOptions so;
    so.mode = graph::ExecMode::oracle_f32;
    so.n_threads = 2;
    so.n_ctx = rf == "long" ? 128 : 32;  // phi3: the long factors beyond its original 32
    runtime::Session s(*model, so);
    s.set_adapters({{ad.get(), 1.0f}});
    const int32_t n = c.at("n_tokens").get<int32_t>();
    s.eval(std::vector<int32_t>(ids.begin(), ids.begin() + n));
    const std::vector<double> want = c.at("logits").at(0).get<std::vector<double>>();
    const double effect = c.at("lora_max_abs_effect").get<double>();
    const double tol = 0.03 * effect + 1e-4;
    ASSERT_EQ(s.logits().size(), want.size());
    double worst = 0;
    size_t arg = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(s.logits()[i] - want[i]));
      if (s.logits()[i] > s.logits()[arg]) arg = i;
    }
    EXPECT_LE(worst, tol) << "largest difference from PEFT's logits";
    EXPECT_EQ((int64_t)arg, c.at("argmax").at(0).get<int64_t>());
    std::printf("[   info   ] %s %s: max |lilims - PEFT| %.5f, adapter effect %.3f (%.2f%%)\n", name.c_str(),
                rf.c_str(), worst, effect, 100 * worst / effect);
  }
}

TEST(LoraReferences, PeftLlamaAdapter) { check_peft_adapter("llama"); }
TEST(LoraReferences, PeftPhi3AdapterOnFusedProjections) { check_peft_adapter("phi3"); }
// embed_tokens (llama.cpp's token_embd layout) and lm_head.
TEST(LoraReferences, PeftEmbeddingAndHeadAdapter) { check_peft_adapter("llama_embed"); }

}  // namespace
}  // namespace lilims
