// Fused projections (models::LoadOptions::fuse_projections): a llama layer's
// Q, K, V weights stacked into one matmul and its gate and up weights into
// another must give the logits of the separate matmuls bit for bit.  Each
// output row is the same dot product of the same weight row with the same
// quantized activations (the activations are quantized once per matmul, from
// the same input), so nothing may differ, on any thread count or kernel path.
//
// The kernel path is chosen once per process (LILIMS_ISA, kernels/cpu.h):
// tests/runtime/CMakeLists.txt runs these tests again with LILIMS_ISA=avx2
// and LILIMS_ISA=ref, so every path the CPU has is covered (ref keeps the
// GGUF layout, which is never stacked: there the test checks that nothing was
// fused).  ExecMode::ref and oracle_f32 run the scalar kernels over the
// stacked layout in the same process.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "kernels/cpu.h"
#include "models/gguf.h"
#include "models/imatrix.h"
#include "models/requantize.h"
#include "quant/repack.h"
#include "runtime/engine.h"
#include "runtime/eval/imatrix.h"
#include "runtime/manifest.h"
#include "requantized_stories.h"
#include "test_util.h"

namespace lilims {
namespace {

using test::stories_as;
using test::stories_path;

runtime::ModelOptions fused(bool on) {
  runtime::ModelOptions mo;
  mo.fuse_projections = on;
  return mo;
}

// How many weights the load should stack: per layer [Q; K; V] when Q, K and V
// share a type and Q's and K's rows are whole row groups of the layout the
// weights are repacked into, and [gate; up] likewise; nothing when the
// weights stay in the GGUF layout (kernel path ref).
size_t expected_fused(const models::Model& m, quant::Type qkv_type, quant::Type v_type,
                      quant::Type ffn_type) {
  size_t n = 0;
  const auto whole = [](quant::Type t, int64_t rows) {
    const int layout = kernels::preferred_layout(t);
    return layout != kernels::kLayoutGguf && rows % quant::layout_group_rows(layout) == 0;
  };
  const models::HParams& hp = m.hp;
  if (qkv_type == v_type && whole(qkv_type, hp.q_dim()) && whole(qkv_type, hp.kv_dim())) n += hp.n_layer;
  if (whole(ffn_type, hp.n_ff)) n += hp.n_layer;
  return n;
}

// Logits of a prompt run in blocks of `n_batch` (every position), then of
// n_decode greedy decode steps, one token each.
std::vector<float> run(const runtime::Model& model, const std::vector<int32_t>& prompt,
                       models::ExecMode mode, int threads, int n_decode) {
  runtime::SessionOptions so;
  so.n_ctx = 64;
  so.n_batch = 5;  // several blocks, the last one partial
  so.n_threads = threads;
  so.mode = mode;
  runtime::Session s(model, so);
  std::vector<float> all;
  s.eval_all_logits(prompt, all);
  for (int i = 0; i < n_decode; ++i) {
    const std::vector<float>& l = s.logits();
    int32_t best = 0;
    for (int32_t v = 1; v < (int32_t)l.size(); ++v) {
      if (l[(size_t)v] > l[(size_t)best]) best = v;
    }
    s.eval({best});
    all.insert(all.end(), s.logits().begin(), s.logits().end());
  }
  return all;
}

const char* mode_name(models::ExecMode m) { return graph::exec_mode_name(m); }

// Fused and separate loads of one model give identical logits in every mode
// and thread count given.
void expect_same_logits(const runtime::Model& on, const runtime::Model& off,
                        const std::vector<int32_t>& prompt,
                        const std::vector<models::ExecMode>& modes) {
  for (models::ExecMode mode : modes) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(kernels::kernel_path_name()) + ", " + mode_name(mode) + ", " +
                   std::to_string(threads) + " threads");
      const std::vector<float> a = run(on, prompt, mode, threads, 4);
      const std::vector<float> b = run(off, prompt, mode, threads, 4);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), (prompt.size() + 4) * (size_t)on.hparams().n_vocab);
      for (size_t i = 0; i < a.size(); ++i) {
        // bits, not values: -0.0 vs 0.0 or a NaN would be a difference too
        ASSERT_EQ(0, std::memcmp(&a[i], &b[i], sizeof(float)))
            << "logit " << i % (size_t)on.hparams().n_vocab << " of position "
            << i / (size_t)on.hparams().n_vocab << ": " << a[i] << " fused, " << b[i] << " separate";
      }
    }
  }
}

const std::vector<int32_t> kStoriesPrompt = {1, 403, 407, 261, 378, 429, 30, 287, 342, 263, 4, 410};

TEST(FusedProjections, Stories260kLogitsBitIdentical) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  for (quant::Type type : {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1}) {
    SCOPED_TRACE(quant::traits(type).name);
    const std::vector<uint8_t> bytes = stories_as(type);
    auto on = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
    auto off = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(false));
    // n_ff = 172 is 4-row groups but not 16-row ones: with the AVX-512 VNNI
    // layout gate and up stay separate while Q, K, V (64, 32, 32 rows) fuse.
    EXPECT_EQ(on->weights().n_fused, expected_fused(on->weights(), type, type, type));
    EXPECT_EQ(off->weights().n_fused, 0u);
    expect_same_logits(*on, *off, kStoriesPrompt,
                       {models::ExecMode::fast, models::ExecMode::ref, models::ExecMode::oracle_f32});
  }
}

// Phi-2 with separate Q, K, V projections and biases: the biases are
// stacked with the rows.
TEST(FusedProjections, Phi2WithBiasesLogitsBitIdentical) {
  auto f = gguf::File::open(test::source_path("tests/data/tiny/phi2.gguf"));
  ASSERT_NE(f->find_tensor("blk.0.attn_q.bias"), nullptr);
  gguf::RequantizeOptions ro;
  ro.method = quant::QuantMethod::plain;
  const std::vector<uint8_t> bytes = gguf::requantize(*f, quant::Type::Q8_0, ro).to_bytes();
  auto on = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
  auto off = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(false));
  const models::Model& w = on->weights();
  const int layout = kernels::preferred_layout(quant::Type::Q8_0);
  // 64-row Q, K and V: whole groups of every layout; phi2 has no gate
  EXPECT_EQ(w.n_fused, layout == kernels::kLayoutGguf ? 0u : (size_t)w.hp.n_layer);
  if (w.n_fused > 0) {
    const models::Layer& L = w.layers[1];
    const models::Layer& S = off->weights().layers[1];
    std::vector<float> bias = S.wq.bias;
    bias.insert(bias.end(), S.wk.bias.begin(), S.wk.bias.end());
    bias.insert(bias.end(), S.wv.bias.begin(), S.wv.bias.end());
    EXPECT_EQ(L.wqkv.bias, bias);
  }
  const std::vector<int32_t> prompt(kStoriesPrompt.begin(), kStoriesPrompt.end() - 2);
  expect_same_logits(*on, *off, prompt, {models::ExecMode::fast, models::ExecMode::ref});
}

TEST(FusedProjections, SmolLM2LogitsBitIdentical) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  auto on = runtime::Model::open(test::smollm2_path(), fused(true));
  auto off = runtime::Model::open(test::smollm2_path(), fused(false));
  const quant::Type t = quant::Type::Q4_1;
  EXPECT_EQ(on->weights().n_fused, expected_fused(on->weights(), t, t, t));
  if (kernels::preferred_layout(t) != kernels::kLayoutGguf) {
    EXPECT_EQ(on->weights().n_fused, 60u);  // 30 layers: 576/192/192 and 1536 rows are whole groups
  }
  const std::vector<int32_t> prompt =
      on->tokenizer().encode("The quick brown fox jumps over the lazy dog because", true, false);
  ASSERT_GE(prompt.size(), 8u);
  expect_same_logits(*on, *off, prompt, {models::ExecMode::fast, models::ExecMode::ref});
}

// A file that stores V in another type than Q and K (as llama.cpp's mixes
// do) keeps the three projections separate; gate and up still fuse.
TEST(FusedProjections, MixedTypesStaySeparateAndMatch) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const std::vector<uint8_t> bytes =
      stories_as(quant::Type::Q4_0, {gguf::parse_tensor_type_rule("blk.*.attn_v.weight=Q8_0")});
  auto on = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
  auto off = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(false));
  const models::Model& w = on->weights();
  EXPECT_EQ(w.n_fused, expected_fused(w, quant::Type::Q4_0, quant::Type::Q8_0, quant::Type::Q4_0));
  for (const models::Layer& L : w.layers) {
    EXPECT_FALSE(L.wqkv.present());
    EXPECT_EQ(L.wq.type, quant::Type::Q4_0);
    EXPECT_EQ(L.wv.type, quant::Type::Q8_0);
  }
  expect_same_logits(*on, *off, kStoriesPrompt, {models::ExecMode::fast});
}

// What a stacked weight holds and what the model's memory figures say are
// those of the separate weights.
TEST(FusedProjections, StackedWeightsKeepNamesAndMemory) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  auto on = runtime::Model::open(test::smollm2_path(), fused(true));
  auto off = runtime::Model::open(test::smollm2_path(), fused(false));
  const models::Model& a = on->weights();
  const models::Model& b = off->weights();
  EXPECT_EQ(a.repacked_bytes, b.repacked_bytes);
  EXPECT_EQ(a.mapped_weight_bytes(), b.mapped_weight_bytes());
  EXPECT_EQ(a.n_params, b.n_params);
  EXPECT_EQ(on->memory(512).weights_heap, off->memory(512).weights_heap);
  if (a.n_fused == 0) GTEST_SKIP() << "nothing fused on the " << kernels::kernel_path_name() << " path";
  const models::Layer& L = a.layers[3];
  const models::Layer& S = b.layers[3];
  ASSERT_TRUE(L.wqkv.present());
  EXPECT_FALSE(L.wq.present() || L.wk.present() || L.wv.present() || L.w_gate.present());
  EXPECT_EQ(L.wqkv.parts, (std::vector<std::string>{"blk.3.attn_q.weight", "blk.3.attn_k.weight",
                                                    "blk.3.attn_v.weight"}));
  EXPECT_EQ(L.w_up.parts, (std::vector<std::string>{"blk.3.ffn_gate.weight", "blk.3.ffn_up.weight"}));
  EXPECT_EQ(L.wqkv.rows, S.wq.rows + S.wk.rows + S.wv.rows);
  EXPECT_EQ(L.w_up.rows, S.w_gate.rows + S.w_up.rows);
  // The stack is the separate packed bytes one after the other.
  const auto& qkv = L.wqkv.packed.storage;
  ASSERT_EQ(qkv.size(), S.wq.packed.storage.size() + S.wk.packed.storage.size() +
                            S.wv.packed.storage.size());
  size_t at = 0;
  for (const models::Weight* w : {&S.wq, &S.wk, &S.wv}) {
    EXPECT_EQ(0, std::memcmp(qkv.data() + at, w->packed.storage.data(), w->packed.storage.size()))
        << w->name;
    at += w->packed.storage.size();
  }
}

// imatrix and calibration key their entries by file tensor: a stacked weight
// gives attn_q, attn_k and attn_v (ffn_gate and ffn_up) entries and second
// moments, equal to the separate ones.
TEST(FusedProjections, CalibrationEntriesEqualSeparate) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const std::vector<uint8_t> bytes = stories_as(quant::Type::Q8_0);
  auto on = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
  auto off = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(false));
  ASSERT_EQ(on->weights().n_fused, expected_fused(on->weights(), quant::Type::Q8_0,
                                                  quant::Type::Q8_0, quant::Type::Q8_0));
  const std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  const std::vector<int32_t> tokens = on->tokenizer().encode(text, true, false);
  runtime::ImatrixOptions opt;
  opt.n_ctx = 64;
  opt.max_chunks = 2;
  opt.n_threads = 2;
  opt.n_batch = 16;
  opt.second_moments = true;
  const runtime::Calibration a = runtime::calibrate(*on, tokens, opt);
  const runtime::Calibration b = runtime::calibrate(*off, tokens, opt);
  ASSERT_EQ(a.imatrix.entries.size(), 36u);  // 5 layers x (q, k, v, o, gate, up, down) + output
  ASSERT_EQ(a.imatrix.entries.size(), b.imatrix.entries.size());
  for (const auto& [name, e] : b.imatrix.entries) {
    ASSERT_TRUE(a.imatrix.entries.count(name)) << name;
    const models::ImatrixEntry& f = a.imatrix.entries.at(name);
    EXPECT_EQ(f.n_rows, e.n_rows) << name;
    ASSERT_EQ(f.mean_sq.size(), e.mean_sq.size()) << name;
    EXPECT_EQ(0, std::memcmp(f.mean_sq.data(), e.mean_sq.data(), e.mean_sq.size() * sizeof(float)))
        << name;
  }
  ASSERT_EQ(a.moments.size(), 36u);
  ASSERT_EQ(a.moments.size(), b.moments.size());
  for (const auto& [name, m] : b.moments) {
    ASSERT_TRUE(a.moments.count(name)) << name;
    const std::vector<float>& f = *a.moments.at(name);
    ASSERT_EQ(f.size(), m->size()) << name;
    EXPECT_EQ(0, std::memcmp(f.data(), m->data(), f.size() * sizeof(float))) << name;
  }
  // q, k and v share one matrix, as gate and up do, fused or not
  EXPECT_EQ(a.moments.at("blk.2.attn_v.weight"), a.moments.at("blk.2.attn_q.weight"));
  EXPECT_EQ(a.moments.at("blk.2.ffn_up.weight"), a.moments.at("blk.2.ffn_gate.weight"));
  // and the plain imatrix is the calibration's
  opt.second_moments = false;
  const models::Imatrix plain = runtime::collect_imatrix(*on, tokens, opt);
  for (const auto& [name, e] : plain.entries) {
    EXPECT_EQ(e.mean_sq, a.imatrix.entries.at(name).mean_sq) << name;
  }
}

// A manifest hashes the file's tensors, which stacking leaves as they are
// (it drops the copied pages of a mapping, which read back from the file):
// checked at load and again on the open, fused model, it still matches.
TEST(FusedProjections, ManifestStillMatchesAfterStacking) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const std::vector<uint8_t> bytes = stories_as(quant::Type::Q4_0);
  // The process id in the names: ctest runs this suite once per kernel path,
  // possibly at the same time.
  const std::string stem = testing::TempDir() + "fused_stories_q4_0_" + std::to_string(getpid());
  const std::string model_path = stem + ".gguf";
  const std::string manifest_path = stem + ".json";
  {
    std::ofstream m(model_path, std::ios::binary);
    m.write(reinterpret_cast<const char*>(bytes.data()), (std::streamsize)bytes.size());
    std::ofstream j(manifest_path);
    j << runtime::make_manifest(*gguf::File::from_bytes(bytes.data(), bytes.size()),
                                runtime::ManifestInfo());
  }
  runtime::ModelOptions mo = fused(true);
  mo.manifest_path = manifest_path;
  auto model = runtime::Model::open(model_path, mo);
  const quant::Type t = quant::Type::Q4_0;
  EXPECT_EQ(model->weights().n_fused, expected_fused(model->weights(), t, t, t));
  runtime::ManifestCheck check;
  check.file_hash = true;
  EXPECT_NO_THROW(runtime::check_manifest(*model->weights().file,
                                          runtime::read_manifest_file(manifest_path), check));
  std::remove(model_path.c_str());
  std::remove(manifest_path.c_str());
}

// LILIMS_FUSE=0 turns fusion off for every load, whatever the options say.
TEST(FusedProjections, EnvironmentTurnsItOff) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const std::vector<uint8_t> bytes = stories_as(quant::Type::Q8_0);
  const char* before = std::getenv("LILIMS_FUSE");
  const std::string saved = before ? before : "";
  ::setenv("LILIMS_FUSE", "0", 1);
  auto off = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
  ::setenv("LILIMS_FUSE", "1", 1);
  auto on = runtime::Model::open_memory(bytes.data(), bytes.size(), fused(true));
  if (before) {
    ::setenv("LILIMS_FUSE", saved.c_str(), 1);
  } else {
    ::unsetenv("LILIMS_FUSE");
  }
  EXPECT_EQ(off->weights().n_fused, 0u);
  const quant::Type t = quant::Type::Q8_0;
  EXPECT_EQ(on->weights().n_fused, expected_fused(on->weights(), t, t, t));
}

}  // namespace
}  // namespace lilims
