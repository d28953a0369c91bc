// The CLIP vision tower + LLaVA projector (models/clip.h) against HF
// transformers: tests/data/llava/mmproj.gguf fed HF's pixel tensors must give
// HF's float64 image embeddings (scripts/goldens/gen_tiny_llava.py), with the
// file's F16 weights, the same weights as F32, and re-quantized to Q8_0.
#include "models/clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace lilims::models {
namespace {

using json = nlohmann::json;

std::string llava(const std::string& f) { return test::source_path("tests/data/llava/" + f); }

std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = test::read_file(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// The projector file with its matrices converted: to F32 (exact), or to Q8_0
// where the rows are whole blocks (all but the 588-wide patch kernel).
std::vector<uint8_t> converted(const gguf::File& f, quant::Type to) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.add(kv.key, kv.value);
  for (const gguf::TensorInfo& t : f.tensors()) {
    const int64_t cols = (int64_t)t.ne[0];
    const int64_t rows = (int64_t)(t.n_elements / (uint64_t)cols);
    const bool matrix = t.type == (uint32_t)quant::Type::F16 && t.ne.size() >= 2 &&
                        t.name != "v.position_embd.weight";
    if (!matrix || (to == quant::Type::Q8_0 && cols % 32 != 0)) {
      w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
      continue;
    }
    std::vector<float> fl((size_t)t.n_elements);
    quant::type_traits(t.type)->to_float(t.data, fl.data(), (int64_t)t.n_elements);
    std::vector<uint8_t> out(quant::row_bytes(to, cols) * (size_t)rows);
    for (int64_t r = 0; r < rows; ++r) {
      quant::quantize_row(to, fl.data() + r * cols, out.data() + (size_t)r * quant::row_bytes(to, cols), cols);
    }
    w.add_tensor(t.name, t.ne, (uint32_t)to, out.data(), out.size());
  }
  return w.to_bytes();
}

// The projector file with its MLP n_ff wide (64 in the file), the MLP's
// weights seeded random Q8_0 (so the loader repacks them), its biases F32:
// fc1's n_ff rows then span several of the repack's 256-row slices.
std::vector<uint8_t> widened_mlp(const gguf::File& f, int64_t n_ff, uint32_t seed) {
  const uint64_t file_n_ff = (uint64_t)f.get_int("clip.vision.feed_forward_length");
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 0.1f);
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.add(kv.key, kv.value);
  w.add_u32("clip.vision.feed_forward_length", (uint32_t)n_ff);
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.find(".ffn_") == std::string::npos) {
      w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
      continue;
    }
    std::vector<uint64_t> ne = t.ne;
    for (uint64_t& n : ne) n = n == file_n_ff ? (uint64_t)n_ff : n;
    uint64_t count = 1;
    for (uint64_t n : ne) count *= n;
    std::vector<float> fl((size_t)count);
    for (float& v : fl) v = gauss(rng);
    if (ne.size() == 1) {
      w.add_tensor(t.name, ne, (uint32_t)quant::Type::F32, fl.data(), fl.size() * sizeof(float));
      continue;
    }
    const int64_t cols = (int64_t)ne[0], rows = (int64_t)(count / ne[0]);
    const size_t rb = quant::row_bytes(quant::Type::Q8_0, cols);
    std::vector<uint8_t> q(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; ++r) {
      quant::quantize_row(quant::Type::Q8_0, fl.data() + r * cols, q.data() + (size_t)r * rb, cols);
    }
    w.add_tensor(t.name, ne, (uint32_t)quant::Type::Q8_0, q.data(), q.size());
  }
  return w.to_bytes();
}

struct EmbdError {
  float max_err = 0.0f;  // against HF's float64 embeddings, over the three images
  float max_abs = 0.0f;  // of those embeddings
};

EmbdError run_goldens(const ClipModel& m, graph::ExecMode mode, int threads) {
  const json g = json::parse(test::read_file(llava("goldens.json")));
  graph::ThreadPool pool(threads);
  ClipEncoder enc(m, mode, pool, 1);
  EXPECT_EQ(enc.n_rows(), g["n_patches"].get<int>());
  EXPECT_EQ(enc.n_cols(), g["n_embd_text"].get<int>());
  EmbdError r;
  for (const json& im : g["images"]) {
    const std::vector<float> px = read_f32(llava(im["pixels"]));
    const std::vector<float> want = read_f32(llava(im["embd"]));
    std::vector<float> got((size_t)enc.n_rows() * enc.n_cols(), NAN);
    enc.encode(px.data(), got.data());
    EXPECT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      r.max_err = std::max(r.max_err, std::fabs(got[i] - want[i]));
      r.max_abs = std::max(r.max_abs, std::fabs(want[i]));
    }
  }
  return r;
}

TEST(Clip, LoadsTheProjectorFile) {
  const auto m = load_clip(gguf::File::open(llava("mmproj.gguf")));
  EXPECT_EQ(m->hp.image_size, 56);
  EXPECT_EQ(m->hp.patch_size, 14);
  EXPECT_EQ(m->hp.n_patches(), 16);
  EXPECT_EQ(m->hp.n_embd, 32);
  EXPECT_EQ(m->hp.n_head, 2);
  EXPECT_EQ(m->hp.n_ff, 64);
  EXPECT_EQ(m->hp.n_layer, 2);  // 3 in HF, the layer after the feature layer dropped
  EXPECT_FALSE(m->hp.gelu);     // quick-GELU
  EXPECT_EQ(m->hp.n_out, 64);
  EXPECT_TRUE(m->post_ln.w.empty());
  EXPECT_EQ(m->patch_embd.cols, 3 * 14 * 14);
}

// float64 HF vs our float32 arithmetic on the same F16 values: rounding only.
// A dot product of K terms in fp32 errs by at most ~K u sum|a_i w_i| (u =
// 2^-24); the widest here are K = 588 (patches) and 64, on values whose
// products sum to O(10), i.e. ~4e-4 worst case and ~sqrt(K) u in practice
// (~1e-6); LayerNorm and attention pass errors on at O(1) gain.  HF's own fp32
// run is 5.6e-7 from its float64 one (goldens.json).  Allowed: 2e-5 absolute
// on outputs of magnitude up to 1.3, 35x that.
constexpr float kFp32Tol = 2e-5f;

TEST(Clip, F16WeightsMatchTransformers) {
  const auto m = load_clip(gguf::File::open(llava("mmproj.gguf")));
  for (graph::ExecMode mode : {graph::ExecMode::oracle_f32, graph::ExecMode::ref, graph::ExecMode::fast}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(graph::exec_mode_name(mode)) + " x" + std::to_string(threads));
      const EmbdError r = run_goldens(*m, mode, threads);
      EXPECT_GT(r.max_abs, 0.5f);
      EXPECT_LE(r.max_err, kFp32Tol);
      std::printf("F16 weights, %s x%d: max error %.3g\n", graph::exec_mode_name(mode), threads, r.max_err);
    }
  }
}

TEST(Clip, F32WeightsMatchTransformers) {
  const auto f16 = gguf::File::open(llava("mmproj.gguf"));
  const std::vector<uint8_t> bytes = converted(*f16, quant::Type::F32);
  const auto m = load_clip(gguf::File::from_bytes(bytes.data(), bytes.size()));
  EXPECT_EQ(m->layers[0].wq.type, quant::Type::F32);
  for (graph::ExecMode mode : {graph::ExecMode::oracle_f32, graph::ExecMode::fast}) {
    SCOPED_TRACE(graph::exec_mode_name(mode));
    EXPECT_LE(run_goldens(*m, mode, 2).max_err, kFp32Tol);
  }
}

// Q8_0 weights are a different model: each weight moves by up to half a step,
// max|w_block| / 254, about 0.2% of the largest weights (std 0.1, max ~0.3),
// and the fast path also quantizes the activations to Q8_0 (as llama.cpp
// does), another ~0.2% per matmul input.  Seven matmuls deep, with LayerNorms
// renormalising between them, that is of the order of 1% of the outputs (up
// to 1.3); allowed: 2% of the largest output (measured: 0.7% for fp32
// activations on the dequantized weights, 1.1% for the integer kernels).
TEST(Clip, Q8_0WeightsStayClose) {
  const auto f16 = gguf::File::open(llava("mmproj.gguf"));
  const std::vector<uint8_t> bytes = converted(*f16, quant::Type::Q8_0);
  const auto m = load_clip(gguf::File::from_bytes(bytes.data(), bytes.size()));
  EXPECT_EQ(m->layers[0].wq.type, quant::Type::Q8_0);
  EXPECT_EQ(m->patch_embd.type, quant::Type::F16);
  const EmbdError oracle = run_goldens(*m, graph::ExecMode::oracle_f32, 2);
  const EmbdError fast = run_goldens(*m, graph::ExecMode::fast, 2);
  EXPECT_LE(oracle.max_err, 0.02f * oracle.max_abs);
  EXPECT_LE(fast.max_err, 0.02f * fast.max_abs);
  EXPECT_GT(oracle.max_err, kFp32Tol) << "the weights were not re-quantized";
  std::printf("Q8_0 weights: max error %.3g (oracle), %.3g (fast) on outputs up to %.3g\n",
              oracle.max_err, fast.max_err, oracle.max_abs);
}

// The loader repacks on LoadOptions::n_threads threads; the bytes do not
// depend on it.  fc1 widened to 608 rows repacks in three slices.
TEST(Clip, LoadThreadsChangeNoByte) {
  const uint32_t seed = 20240611;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto f16 = gguf::File::open(llava("mmproj.gguf"));
  const std::vector<uint8_t> bytes = widened_mlp(*f16, 608, seed);
  auto load = [&](int threads) {
    LoadOptions opt;
    opt.n_threads = threads;
    return load_clip(gguf::File::from_bytes(bytes.data(), bytes.size()), opt);
  };
  const auto one = load(1), three = load(3);
  ASSERT_EQ(one->layers[0].ffn_up.rows, 608);
  if (one->layers[0].ffn_up.packed.storage.empty()) GTEST_SKIP() << "the ref path repacks nothing";
  auto weights = [](const ClipModel& m) {
    std::vector<const Weight*> w = {&m.patch_embd, &m.mm0, &m.mm2};
    for (const ClipLayer& L : m.layers) {
      for (const Weight* x : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_up, &L.ffn_down}) w.push_back(x);
    }
    return w;
  };
  const std::vector<const Weight*> a = weights(*one), b = weights(*three);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->packed.layout, b[i]->packed.layout) << a[i]->name;
    EXPECT_TRUE(a[i]->packed.storage == b[i]->packed.storage) << a[i]->name;
  }
}

TEST(Clip, PlanIsKnownBeforeItRuns) {
  const auto m = load_clip(gguf::File::open(llava("mmproj.gguf")));
  graph::ThreadPool pool(2);
  ClipEncoder enc(*m, graph::ExecMode::fast, pool, 1);
  const graph::MemoryPlan& mem = enc.plan().mem;
  EXPECT_GT(mem.arena, 0u);
  EXPECT_EQ(mem.kv, 0u);
  EXPECT_EQ(mem.staging, 0u);
  // The arena holds (17 rows x the widest tensor, 64 floats) times a few live
  // tensors, far less than every tensor at once.
  EXPECT_LT(mem.arena, 40u * 17 * 64 * sizeof(float));
  const std::string d = enc.describe();
  EXPECT_NE(d.find("self_attention x1"), std::string::npos) << d;
  EXPECT_NE(d.find("quick_gelu x1"), std::string::npos) << d;
  EXPECT_NE(d.find("drop_rows x1"), std::string::npos) << d;
}

TEST(Clip, BadFilesAreRefused) {
  const auto f = gguf::File::open(llava("mmproj.gguf"));
  auto expect_error = [](const gguf::Writer& w, lilims_status st, const std::string& needle) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    try {
      load_clip(gguf::File::from_bytes(bytes.data(), bytes.size()));
      ADD_FAILURE() << "loaded; wanted " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), st) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("[clip] ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto copy = [&](const std::string& skip_tensor) {
    gguf::Writer w;
    for (const gguf::KeyValue& kv : f->metadata()) w.add(kv.key, kv.value);
    for (const gguf::TensorInfo& t : f->tensors()) {
      if (t.name != skip_tensor) w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
    }
    return w;
  };
  expect_error(copy("v.blk.1.attn_k.bias"), LILIMS_ERR_MISSING, "v.blk.1.attn_k.bias");
  gguf::Writer w = copy("");
  w.add_string("clip.projector_type", "ldp");
  expect_error(w, LILIMS_ERR_UNSUPPORTED, "'ldp'");
  w = copy("");
  w.add_string("general.architecture", "llama");
  expect_error(w, LILIMS_ERR_UNSUPPORTED, "'llama'");
  w = copy("");
  w.add_u32("clip.vision.patch_size", 15);
  expect_error(w, LILIMS_ERR_BAD_FORMAT, "not a whole number of patches");
  w = copy("");
  w.add_u32("clip.vision.block_count", 3);
  expect_error(w, LILIMS_ERR_MISSING, "v.blk.2.");
  w = copy("");
  std::vector<float> extra(32, 1.0f);
  w.add_tensor("v.blk.0.ls1.weight", {32}, 0, extra.data(), extra.size() * 4);
  expect_error(w, LILIMS_ERR_UNSUPPORTED, "v.blk.0.ls1.weight");
}

}  // namespace
}  // namespace lilims::models
