// `lilims convert HF_DIR`: the Hugging Face directories of the tiny models
// (tests/data/hf, made by scripts/goldens/gen_hf_dirs.py with
// save_pretrained), converted in memory, must give HF transformers' logits.
//
// llama (one file, F16 + F32 tensors) and phi2 (sharded) hold exactly the
// weights of tests/data/tiny/*.gguf, so their goldens are
// tests/data/tiny/goldens.json; phi3 is BF16 with goldens of its own in
// tests/data/hf/goldens.json.
//
// Tolerances.  Converted to F32 the file holds the HF values exactly (F16 and
// BF16 widen exactly), so the bound is test_tiny_goldens.cpp's kTolF32: a
// K-term float32 dot product is off by at most K * 2^-24 of the sum of
// |terms|, over a chain of 7 products with K <= 256 on logits below 10.
// Converted to F16 (llama.cpp's default), a BF16 weight keeps its value
// unless it is below F16's normal range (2^-14), where it is rounded to a
// multiple of 2^-24, off by up to 2^-25; through the same chain that adds
// 7 * 256 * 2^-25 * 10.  A wrong layout costs more than 1 (the llama without
// its Q/K permutation is 2.4 to 4.9 away).
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "models/convert_hf.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

using nlohmann::json;

constexpr double kTolF32 = 7 * 256 * 0x1p-24 * 10;
constexpr double kTolF16FromBf16 = kTolF32 + 7 * 256 * 0x1p-25 * 10;

const json& load_json(const std::string& rel) {
  static std::map<std::string, json> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) it = cache.emplace(rel, json::parse(test::read_file(test::source_path(rel)))).first;
  return it->second;
}

struct Converted {
  std::vector<uint8_t> image;
  std::unique_ptr<runtime::Model> model;
};

Converted convert(const std::string& arch, quant::Type type) {
  models::HfConvertOptions opt;
  opt.type = type;
  Converted c;
  c.image = models::convert_hf_dir(test::source_path("tests/data/hf/" + arch), opt).to_bytes();
  c.model = runtime::Model::open_memory(c.image.data(), c.image.size());
  return c;
}

// Max |logit - golden| over every stored position of every case (one eval
// per case, F32 KV cache, reference kernels).
double worst_diff(const runtime::Model& model, const json& cases) {
  const std::vector<int32_t> prompt =
      load_json("tests/data/tiny/goldens.json")["prompt"]["token_ids"].get<std::vector<int32_t>>();
  const size_t n_vocab = static_cast<size_t>(model.hparams().n_vocab);
  double worst = 0.0;
  for (const json& c : cases) {
    const int n = c["n_tokens"].get<int>();
    const bool short_factors = c.contains("rope_factors") && c["rope_factors"] == "short";
    runtime::SessionOptions so;
    so.mode = models::ExecMode::ref;
    so.kv_type = quant::Type::F32;
    so.n_ctx = short_factors ? 32 : 128;  // lilims picks phi3's factor set by context
    so.n_threads = 1;
    runtime::Session s(model, so);
    std::vector<float> all;
    s.eval_all_logits(std::vector<int32_t>(prompt.begin(), prompt.begin() + n), all);
    const std::vector<int> positions = c["positions"].get<std::vector<int>>();
    for (size_t k = 0; k < positions.size(); ++k) {
      const json& want = c["logits"][k];
      EXPECT_EQ(want.size(), n_vocab);
      for (size_t v = 0; v < want.size() && v < n_vocab; ++v) {
        const double d = std::fabs(all[(size_t)positions[k] * n_vocab + v] - want[v].get<double>());
        worst = std::max(worst, d);
      }
    }
  }
  return worst;
}

TEST(ConvertHf, LlamaF32MatchesTransformers) {
  const Converted c = convert("llama", quant::Type::F32);
  const double d = worst_diff(*c.model, load_json("tests/data/tiny/goldens.json")["models"]["llama"]["cases"]);
  std::printf("[ llama F32 ] max |logit - golden| %.3g (tolerance %.3g)\n", d, kTolF32);
  EXPECT_LE(d, kTolF32);
}

TEST(ConvertHf, Phi2ShardedF32MatchesTransformers) {
  const Converted c = convert("phi2", quant::Type::F32);
  const double d = worst_diff(*c.model, load_json("tests/data/tiny/goldens.json")["models"]["phi2"]["cases"]);
  std::printf("[ phi2 F32 ] max |logit - golden| %.3g (tolerance %.3g)\n", d, kTolF32);
  EXPECT_LE(d, kTolF32);
}

TEST(ConvertHf, Phi3Bf16MatchesTransformers) {
  const json& cases = load_json("tests/data/hf/goldens.json")["phi3_bf16"]["cases"];
  const Converted f32 = convert("phi3", quant::Type::F32);
  const double d32 = worst_diff(*f32.model, cases);
  std::printf("[ phi3 BF16 -> F32 ] max |logit - golden| %.3g (tolerance %.3g)\n", d32, kTolF32);
  EXPECT_LE(d32, kTolF32);
  const Converted f16 = convert("phi3", quant::Type::F16);
  const double d16 = worst_diff(*f16.model, cases);
  std::printf("[ phi3 BF16 -> F16 ] max |logit - golden| %.3g (tolerance %.3g)\n", d16,
              kTolF16FromBf16);
  EXPECT_LE(d16, kTolF16FromBf16);
}

}  // namespace
}  // namespace lilims
