// An image in the prompt, end to end against HF transformers: the tiny
// LLaVA's landscape PNG decoded (tools/image_io.h), preprocessed and encoded
// by lilims (models/clip.h), its 16 embedding rows evaluated as a prefill
// block between the prompt's text pieces (graph::Executor::forward_embd), and
// the text model's logits at the first image row, the first text row after
// the image and the last row compared with HF's float64 logits for the same
// prompt (tests/data/llava/goldens.json, scripts/goldens/gen_tiny_llava.py).
//
// Tolerances (tests/runtime/test_tiny_goldens.cpp derives both for this text
// model's shapes): fp32 arithmetic with an F32 KV cache is within 7 * 256 *
// 2^-24 * 10 = 1.1e-3 of float64 on logits below 10; an F16 KV cache adds
// 2 * 2 * 2^-11 * 10 = 2.0e-2.  The image rows add the encoder's error, below
// 2e-5 (test_clip.cpp), which the text model's 2 layers do not amplify
// beyond those bounds.  Another image moves these logits by far more (checked).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/executor.h"
#include "models/builders.h"
#include "models/clip.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "tools/image_io.h"

namespace lilims::test {
namespace {

using json = nlohmann::json;

std::string llava(const std::string& f) { return source_path("tests/data/llava/" + f); }

constexpr double kTolF32 = 7 * 256 * 0x1p-24 * 10;
constexpr double kTolF16Kv = 2 * 2 * 0x1p-11 * 10;

// The image's embedding rows, as lilims makes them from the PNG.
std::vector<float> image_rows(const std::string& png, int32_t* n_rows) {
  const auto clip = models::load_clip(gguf::File::open(llava("mmproj.gguf")));
  const tools::DecodedImage d = tools::decode_image_file(llava(png));
  const std::vector<float> px =
      models::clip_preprocess({d.rgb.data(), d.width, d.height, 3 * (size_t)d.width}, clip->image);
  graph::ThreadPool pool(2);
  models::ClipEncoder enc(*clip, graph::ExecMode::fast, pool);
  std::vector<float> rows((size_t)enc.n_rows() * enc.n_cols());
  enc.encode(px.data(), rows.data());
  *n_rows = enc.n_rows();
  return rows;
}

double max_diff(const float* row, const json& want) {
  double worst = 0.0;
  for (size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::fabs(row[v] - want[v].get<double>()));
  return worst;
}

TEST(LlavaPrompt, TextPiecesTokenizeAsTransformers) {
  const json g = json::parse(read_file(llava("goldens.json")))["prompt"];
  const auto model = runtime::Model::open(llava("text.gguf"));
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> before = model->tokenizer().encode(g["text_before"].get<std::string>(), true, false);
  const std::vector<int32_t> after = model->tokenizer().encode(g["text_after"].get<std::string>(), false, false);
  const int first_image = g["positions"][0].get<int>();
  EXPECT_EQ(before, std::vector<int32_t>(ids.begin(), ids.begin() + first_image));
  EXPECT_EQ(after, std::vector<int32_t>(ids.begin() + first_image + 16, ids.end()));
}

// Runs BOS + text before, the image rows, the text after through the text
// model; returns the logits at the golden positions.
std::vector<std::vector<float>> prompt_logits(const runtime::Model& model, const std::vector<float>& img,
                                              int32_t n_img, graph::ExecMode mode, quant::Type kv) {
  const json g = json::parse(read_file(llava("goldens.json")))["prompt"];
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  const int first = g["positions"][0].get<int>();
  const int n_vocab = model.hparams().n_vocab;
  models::BuildOptions bo;
  bo.n_ctx = 64;
  bo.chunk_layers = 1;
  graph::PlanOptions po;
  po.n_ctx = 64;
  po.n_batch = 8;  // the image's 16 rows run as two prefill blocks
  po.mode = mode;
  po.kv_type = kv;
  graph::ThreadPool pool(2);
  graph::Executor ex(models::build_graph(model.weights(), bo), po, pool);
  ex.forward(ids.data(), first, 0, nullptr, false);
  std::vector<float> img_logits((size_t)n_img * n_vocab);
  ex.forward_embd(img.data(), n_img, first, img_logits.data(), true);
  const int n_after = (int)ids.size() - first - n_img;
  std::vector<float> text_logits((size_t)n_after * n_vocab);
  ex.forward(ids.data() + first + n_img, n_after, first + n_img, text_logits.data(), true);
  std::vector<std::vector<float>> out;
  for (const json& p : g["positions"]) {
    const int pos = p.get<int>();
    const float* row = pos < first + n_img ? &img_logits[(size_t)(pos - first) * n_vocab]
                                            : &text_logits[(size_t)(pos - first - n_img) * n_vocab];
    out.emplace_back(row, row + n_vocab);
  }
  return out;
}

TEST(LlavaPrompt, LogitsMatchTransformers) {
  const json g = json::parse(read_file(llava("goldens.json")))["prompt"];
  ASSERT_EQ(g["image"].get<std::string>(), "landscape");
  const auto model = runtime::Model::open(llava("text.gguf"));
  int32_t n_img = 0;
  const std::vector<float> img = image_rows("img_landscape.png", &n_img);
  ASSERT_EQ(n_img, 16);
  struct Mode {
    graph::ExecMode mode;
    quant::Type kv;
    double tol;
  };
  for (const Mode& m : {Mode{graph::ExecMode::oracle_f32, quant::Type::F32, kTolF32},
                        Mode{graph::ExecMode::ref, quant::Type::F32, kTolF32},
                        Mode{graph::ExecMode::fast, quant::Type::F32, kTolF32},
                        Mode{graph::ExecMode::fast, quant::Type::F16, kTolF16Kv}}) {
    const auto got = prompt_logits(*model, img, n_img, m.mode, m.kv);
    double worst = 0.0;
    for (size_t k = 0; k < got.size(); ++k) {
      const double d = max_diff(got[k].data(), g["logits"][k]);
      EXPECT_LE(d, m.tol) << graph::exec_mode_name(m.mode) << " position " << g["positions"][k];
      worst = std::max(worst, d);
    }
    std::printf("[ %s, %s KV ] max |logit - golden| %.3g (tolerance %.3g)\n", graph::exec_mode_name(m.mode),
                quant::ggml_type_name((uint32_t)m.kv), worst, m.tol);
  }
  // The image matters: another one moves the logits after it far beyond the tolerance.
  const std::vector<float> other = image_rows("img_square.png", &n_img);
  const auto got = prompt_logits(*model, other, n_img, graph::ExecMode::fast, quant::Type::F32);
  EXPECT_GT(max_diff(got[1].data(), g["logits"][1]), 100 * kTolF32);
}

}  // namespace
}  // namespace lilims::test
