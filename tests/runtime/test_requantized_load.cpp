// Loading a GGUF whose weights are in types lilims has no kernels for (Q2_K,
// Q3_K, Q5_1, IQ4_NL, BF16), or no kernel on this CPU as fast as the
// converted type's (Q5_0, Q4_K, Q5_K, Q6_K where kernels::kept_at_load is
// false): they are dequantized with the reference dequantizers and
// re-quantized at load (models/load.cpp).  A weight this CPU runs in its
// own type is kept as it is in the file.
//
// The model: a 1-layer llama of width 256 (whole K-quant super-blocks) on the
// tiny llama's tokenizer, every weight random blocks of one of those types,
// its scales chosen so weights are ~0.1.  Two references from the same bytes:
//  - the same model with every weight dequantized to F32: logits within
//    kTolF32Ref (below);
//  - what the load must make of it, built here: kept types' bytes as they
//    are, Q4_K weights transcoded to Q4_1, the others' floats quantized to Q8_0 with
//    GGML's plain rounding (as `lilims quantize --method plain` does): the
//    logits must be equal, bit for bit.
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "base/fp16.h"
#include "base/log.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "models/gguf.h"
#include "models/layout_file.h"
#include "models/requantize.h"
#include "quant/dequant_ref.h"
#include "quant/quantize.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

constexpr int kEmbd = 256, kFf = 512, kHeads = 4, kHeadsKv = 2;

struct TypeRecipe {
  uint32_t type;
  // fp16 fields of each block: byte offset and value (scale d, min m).
  std::vector<std::pair<size_t, float>> halves;
};

// Scales that give weights of magnitude ~0.1: d times the largest
// scale * quant the format can hold (Q4_K: 63 * 15, Q6_K: 128 * 32, ...).
const TypeRecipe kRecipes[] = {
    {12, {{0, 0.1f / 945}, {2, 0.05f / 63}}},   // Q4_K: d, dmin
    {13, {{0, 0.1f / 1953}, {2, 0.05f / 63}}},  // Q5_K
    {14, {{208, 0.1f / 4096}}},                 // Q6_K
    {10, {{80, 0.1f / 45}, {82, 0.05f / 15}}},  // Q2_K
    {11, {{108, 0.1f / 128}}},                  // Q3_K
    {6, {{0, 0.1f / 16}}},                      // Q5_0 (kept: blk.0.ffn_gate.weight)
    {7, {{0, 0.1f / 31}, {2, -0.05f}}},         // Q5_1: d, m
    {20, {{0, 0.1f / 127}}},                    // IQ4_NL
    {30, {}},                                   // BF16
};

std::vector<uint8_t> random_tensor(const TypeRecipe& r, int64_t n, std::mt19937& rng) {
  const quant::TypeTraits& t = *quant::readable_traits(r.type);
  const size_t n_blocks = (size_t)(n / t.block_size);
  std::vector<uint8_t> b(n_blocks * t.block_bytes);
  if (r.type == 30) {
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (size_t i = 0; i < b.size() / 2; ++i) {
      const float f = u(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const uint16_t h = (uint16_t)(bits >> 16);
      std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }
  for (uint8_t& x : b) x = (uint8_t)(rng() & 0xff);
  for (size_t k = 0; k < n_blocks; ++k) {
    for (const auto& [off, v] : r.halves) {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(&b[k * t.block_bytes + off], &h, 2);
    }
  }
  return b;
}

struct Files {
  std::vector<uint8_t> kquant, f32, q8, loaded;
};

Files make_models(uint32_t seed) {
  const std::string tiny = test::read_file(test::source_path("tests/data/tiny/llama.gguf"));
  auto src = gguf::File::from_bytes(tiny.data(), tiny.size());
  gguf::Writer kq, f32, loaded;
  for (const gguf::KeyValue& kv : src->metadata()) {
    kq.add(kv.key, kv.value);
    f32.add(kv.key, kv.value);
    loaded.add(kv.key, kv.value);
  }
  for (gguf::Writer* w : {&kq, &f32, &loaded}) {
    w->add_u32("llama.embedding_length", kEmbd);
    w->add_u32("llama.feed_forward_length", kFf);
    w->add_u32("llama.block_count", 1);
    w->add_u32("llama.attention.head_count", kHeads);
    w->add_u32("llama.attention.head_count_kv", kHeadsKv);
    w->add_u32("llama.rope.dimension_count", kEmbd / kHeads);
  }
  const uint64_t vocab = 512, kv = kEmbd / kHeads * kHeadsKv;
  const struct { const char* name; uint64_t cols, rows; } weights[] = {
      {"token_embd.weight", kEmbd, vocab}, {"blk.0.attn_q.weight", kEmbd, kEmbd},
      {"blk.0.attn_k.weight", kEmbd, kv},  {"blk.0.attn_v.weight", kEmbd, kv},
      {"blk.0.attn_output.weight", kEmbd, kEmbd}, {"blk.0.ffn_gate.weight", kEmbd, kFf},
      {"blk.0.ffn_up.weight", kEmbd, kFf}, {"blk.0.ffn_down.weight", kFf, kEmbd},
      {"output.weight", kEmbd, vocab}};
  std::mt19937 rng(seed);
  size_t k = 0;
  for (const auto& w : weights) {
    const TypeRecipe& r = kRecipes[k++ % (sizeof kRecipes / sizeof kRecipes[0])];
    const int64_t n = (int64_t)(w.cols * w.rows);
    const std::vector<uint8_t> blocks = random_tensor(r, n, rng);
    kq.add_tensor(w.name, {w.cols, w.rows}, r.type, blocks.data(), blocks.size());
    std::vector<float> floats((size_t)n);
    const quant::TypeTraits* dq = quant::readable_traits(r.type);
    dq->to_float(blocks.data(), floats.data(), n);
    f32.add_tensor(w.name, {w.cols, w.rows}, 0, floats.data(), floats.size() * 4);
    if (kernels::kept_at_load(dq->type)) {  // a kernel type this CPU runs as it is
      loaded.add_tensor(w.name, {w.cols, w.rows}, r.type, blocks.data(), blocks.size());
      continue;
    }
    std::vector<uint8_t> as_loaded(quant::row_bytes(dq->load_as, (int64_t)w.cols) * w.rows);
    if (dq->transcode) {
      dq->transcode(blocks.data(), as_loaded.data(), n);
    } else {
      quant::quantize_row(dq->load_as, floats.data(), as_loaded.data(), n, quant::QuantMethod::plain);
    }
    loaded.add_tensor(w.name, {w.cols, w.rows}, (uint32_t)dq->load_as, as_loaded.data(), as_loaded.size());
  }
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (const char* norm : {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"}) {
    std::vector<float> v(kEmbd);
    for (float& x : v) x = u(rng);
    for (gguf::Writer* w : {&kq, &f32, &loaded}) w->add_tensor(norm, {(uint64_t)kEmbd}, 0, v.data(), v.size() * 4);
  }
  Files out;
  out.kquant = kq.to_bytes();
  out.f32 = f32.to_bytes();
  out.loaded = loaded.to_bytes();
  auto f = gguf::File::from_bytes(out.f32.data(), out.f32.size());
  gguf::RequantizeOptions ro;
  ro.method = quant::QuantMethod::plain;
  out.q8 = gguf::requantize(*f, quant::Type::Q8_0, ro).to_bytes();
  return out;
}

std::vector<float> logits(const runtime::Model& m, const std::vector<int32_t>& ids) {
  runtime::SessionOptions so;
  so.n_ctx = 32;
  so.n_threads = 1;
  runtime::Session s(m, so);
  std::vector<float> all;
  s.eval_all_logits(ids, all);
  return all;
}

const std::vector<int32_t> kPrompt = {1, 17, 300, 42, 7, 511, 99, 256};

TEST(RequantizedLoad, LogitsEqualWhatTheLoadMustMake) {
  const uint32_t seed = 13;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Files f = make_models(seed);
  for (bool repack : {true, false}) {
    runtime::ModelOptions mo;
    mo.repack = repack;
    auto kq = runtime::Model::open_memory(f.kquant.data(), f.kquant.size(), mo);
    auto q8 = runtime::Model::open_memory(f.loaded.data(), f.loaded.size(), mo);
    const std::vector<float> a = logits(*kq, kPrompt), b = logits(*q8, kPrompt);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i], b[i]) << "logit " << i << (repack ? " repacked" : " not repacked");
    }
  }
}

// The Q8_0 rounding of weights and activations against exact F32 weights
// (the Q4_K embedding, transcoded to Q4_1, is off by 2^-11 relative at most):
// each Q8_0 value is off by at most half a step, 1/254 of its block's
// largest magnitude, so a dot product moves by at most 2/254 of
// sum |w| |x| (both operands rounded).  Through one layer and the head, with
// sums of |w||x| here at most ~10 (weights ~0.1, 256-512 terms, normalised
// activations), kTolF32Ref = 3 chains * 2/254 * 10 = 0.24 bounds it
// (measured 0.06 on logits up to 4: rounding errors partly cancel).
constexpr double kTolF32Ref = 3 * 2.0 / 254 * 10;

TEST(RequantizedLoad, LogitsCloseToDequantizedF32) {
  const uint32_t seed = 29;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Files f = make_models(seed);
  auto kq = runtime::Model::open_memory(f.kquant.data(), f.kquant.size());
  auto ref = runtime::Model::open_memory(f.f32.data(), f.f32.size());
  const std::vector<float> a = logits(*kq, kPrompt), b = logits(*ref, kPrompt);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs((double)a[i] - b[i]));
    scale = std::max(scale, std::fabs((double)b[i]));
  }
  std::printf("[ requantized load ] max |logit - F32 reference| %.3g (logits up to %.3g, tolerance %.3g)\n",
              worst, scale, kTolF32Ref);
  EXPECT_LE(worst, kTolF32Ref);
  EXPECT_GT(scale, 10 * kTolF32Ref) << "logits too small for the comparison to mean anything";
}

void capture(void* user, lilims_log_level, const char* msg) {
  static_cast<std::vector<std::string>*>(user)->push_back(msg);
}

TEST(RequantizedLoad, NoticeAndMemoryReport) {
  const Files f = make_models(7);
  std::vector<std::string> lines;
  set_log_callback(capture, &lines, LILIMS_LOG_WARN);
  runtime::ModelOptions mo;
  mo.repack = false;  // every re-quantized copy stays as the kernels' source
  auto kq = runtime::Model::open_memory(f.kquant.data(), f.kquant.size(), mo);
  set_log_callback(nullptr, nullptr, LILIMS_LOG_WARN);
  // The weights (make_models: one recipe each, in order) and what this CPU
  // makes of them: a type kernels::kept_at_load keeps is read from the
  // file's bytes, every other one is a heap copy in its load type (Q4_K ->
  // Q4_1: 20 bytes per 32 weights, the rest Q8_0: 34).
  const struct { uint32_t type; uint64_t n; } w_of[] = {
      {12, 512ull * kEmbd}, {13, 1ull * kEmbd * kEmbd}, {14, 128ull * kEmbd}, {10, 128ull * kEmbd},
      {11, 1ull * kEmbd * kEmbd}, {6, 1ull * kEmbd * kFf}, {7, 1ull * kEmbd * kFf}, {20, 1ull * kFf * kEmbd},
      {30, 512ull * kEmbd}};
  uint64_t heap = 0, mapped = 0;
  int n_converted = 0;
  uint64_t embed_rows = 0;  // the embedding, read row by row: not counted as mapped
  for (const auto& w : w_of) {
    const quant::TypeTraits* kt = quant::type_traits(w.type);
    if (kt && kernels::kept_at_load(kt->type)) {
      (&w == &w_of[0] ? embed_rows : mapped) += quant::row_bytes(kt->type, (int64_t)w.n);
      EXPECT_EQ(lines.empty() ? std::string::npos : lines[0].find(std::string(kt->name) + " ->"), std::string::npos)
          << kt->name << " is kept here";
      continue;
    }
    const quant::TypeTraits* dq = quant::readable_traits(w.type);
    heap += quant::row_bytes(dq->load_as, (int64_t)w.n);
    ++n_converted;
    if (!lines.empty()) {
      EXPECT_NE(lines[0].find("1 " + std::string(dq->name) + " -> " + quant::traits(dq->load_as).name),
                std::string::npos) << lines[0];
    }
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("[model] re-quantized " + std::to_string(n_converted) + " tensors"), std::string::npos)
      << lines[0];
  const graph::ModelMemory mm = kq->memory(32);
  EXPECT_EQ(mm.weights_heap, heap);
  EXPECT_EQ(mm.weights_mapped, mapped);
  EXPECT_EQ(mm.embed_rows, embed_rows);
  auto file = gguf::File::from_bytes(f.kquant.data(), f.kquant.size());
  EXPECT_GE(runtime::model_memory_estimate(*file, mo), file->file_size() + mm.weights_heap);

  // Repacked, the copies give way to the kernels' layouts; Q5_0, where it
  // is kept, is repacked where the 16-row layout's kernels run; the
  // K-quants kept are read in place.
  auto packed = runtime::Model::open_memory(f.kquant.data(), f.kquant.size());
  const graph::ModelMemory pm = packed->memory(32);
  const bool q5_packed = kernels::kept_at_load(quant::Type::Q5_0) &&
                         kernels::preferred_layout(quant::Type::Q5_0) != kernels::kLayoutGguf;
  EXPECT_EQ(pm.weights_mapped, mapped - (q5_packed ? 1ull * kEmbd * kFf / 32 * 22 : 0));
}

// `lilims quantize` to Q4_1 writes what the load makes of a Q4_K weight
// where it converts one: the transcode.
TEST(RequantizedLoad, QuantizeQ4_KToQ4_1Transcodes) {
  const Files f = make_models(3);
  auto kq = gguf::File::from_bytes(f.kquant.data(), f.kquant.size());
  const std::vector<uint8_t> out = gguf::requantize(*kq, quant::Type::Q4_1).to_bytes();
  auto a = gguf::File::from_bytes(out.data(), out.size());
  const gguf::TensorInfo& t = a->require_tensor("token_embd.weight");  // the Q4_K one
  const gguf::TensorInfo& src = kq->require_tensor("token_embd.weight");
  ASSERT_EQ(t.type, (uint32_t)quant::Type::Q4_1);
  std::vector<uint8_t> want(quant::row_bytes(quant::Type::Q4_1, (int64_t)src.n_elements));
  quant::transcode_q4_k_to_q4_1(src.data, want.data(), (int64_t)src.n_elements);
  ASSERT_EQ(t.n_bytes, want.size());
  EXPECT_EQ(0, std::memcmp(t.data, want.data(), t.n_bytes));
}

TEST(RequantizedLoad, QuantizeConvertsOnce) {
  const Files f = make_models(5);
  auto kq = gguf::File::from_bytes(f.kquant.data(), f.kquant.size());
  gguf::RequantizeOptions ro;
  ro.method = quant::QuantMethod::plain;
  const std::vector<uint8_t> out = gguf::requantize(*kq, quant::Type::Q8_0, ro).to_bytes();
  auto a = gguf::File::from_bytes(out.data(), out.size());
  auto b = gguf::File::from_bytes(f.q8.data(), f.q8.size());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const gguf::TensorInfo& t : a->tensors()) {
    const gguf::TensorInfo& u = b->require_tensor(t.name);
    EXPECT_EQ(t.type, u.type) << t.name;
    ASSERT_EQ(t.n_bytes, u.n_bytes) << t.name;
    EXPECT_EQ(0, std::memcmp(t.data, u.data, t.n_bytes)) << t.name;
  }
}


// `lilims quantize --layout` on a file of types a load converts: each such
// weight converted as the load would (models/weight_convert.h) and laid out.
// Laid out for this CPU, the load copies nothing and the logits are the
// plain file's, bit for bit, on the fast and the scalar path; laid out for
// another CPU family, the scalar path (which reads every layout) is within
// kTolF32Ref of the plain file's (a type one CPU keeps, another converts).
TEST(RequantizedLoad, LaidOutFileCopiesNothingAndMatches) {
  if (kernels::active_isa() == kernels::Isa::ref) GTEST_SKIP() << "the reference kernels read no laid-out file in place";
  const Files f = make_models(11);
  auto kq = runtime::Model::open_memory(f.kquant.data(), f.kquant.size());
  const auto run = [&](const runtime::Model& m, models::ExecMode mode) {
    runtime::SessionOptions so;
    so.n_ctx = 32;
    so.n_threads = 2;
    so.mode = mode;
    runtime::Session s(m, so);
    std::vector<float> all;
    s.eval_all_logits(kPrompt, all);
    return all;
  };
  const std::vector<float> want_fast = run(*kq, models::ExecMode::fast), want_ref = run(*kq, models::ExecMode::ref);
  auto file = gguf::File::from_bytes(f.kquant.data(), f.kquant.size());
  const std::string native = gguf::layout_target("native");
  for (const std::string& target : {std::string("avx2"), std::string("avx512vnni"), std::string("neon")}) {
    SCOPED_TRACE("laid out for " + target + ", this CPU's layout " + native);
    gguf::LayOutStats stats;
    const std::vector<uint8_t> laid = gguf::lay_out(*file, target, &stats).to_bytes();
    EXPECT_GE(stats.converted.size(), 5u);  // Q2_K, Q3_K, Q4_K, Q5_1, IQ4_NL, BF16 ... a load converts everywhere
    EXPECT_EQ(stats.converted.count("Q4_K -> Q4_1"), 1u);
    auto m = runtime::Model::open_memory(laid.data(), laid.size());
    const models::Model& w = m->weights();
    if (target == native) {
      EXPECT_TRUE(w.copied.empty()) << models::describe_copies(w);
      EXPECT_EQ(w.repacked_bytes + w.requantized_bytes, 0u);
      EXPECT_EQ(run(*m, models::ExecMode::fast), want_fast);
      EXPECT_EQ(run(*m, models::ExecMode::ref), want_ref);
    } else {
      const std::vector<float> got = run(*m, models::ExecMode::ref);
      ASSERT_EQ(got.size(), want_ref.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want_ref[i], kTolF32Ref) << i;
      // No kernel of this path reads 16-row groups (an AVX2 path) or the
      // other architecture's variant: every weight is turned back into GGUF
      // rows and loaded as the plain file's is (Q5_0 converted where it is
      // not kept), so the fast path gives the plain file's logits, as long
      // as the file holds the types this path keeps (a file laid out for
      // neon holds Q5_0 converted to Q8_0, kept on a VNNI path).  The 4-row
      // x86 layout on an AVX-512 VNNI path is read in place by the AVX2
      // kernels instead: close, not equal.
      if (target == "avx512vnni" || (target == "neon" && !kernels::kept_at_load(quant::Type::Q5_0))) {
        EXPECT_EQ(run(*m, models::ExecMode::fast), want_fast);
        if (target == "avx512vnni" && !kernels::kept_at_load(quant::Type::Q5_0)) {
          EXPECT_NE(models::describe_copies(w).find("then re-quantized from Q5_0 to Q8_0"), std::string::npos)
              << models::describe_copies(w);
        }
      }
    }
  }
}


// A block whose scale is NaN or infinite (or a BF16 infinity) in a weight a
// load converts: the load and `lilims quantize --layout` refuse it, naming
// the tensor, row and block, instead of running to NaN logits.  Each
// converted weight of the model in turn, a NaN in the middle of row 1.
TEST(RequantizedLoad, NonFiniteBlockIsRefusedByName) {
  const Files f = make_models(17);
  auto file = gguf::File::from_bytes(f.kquant.data(), f.kquant.size());
  int n_tried = 0;
  size_t k = 0;
  for (const gguf::TensorInfo& victim : file->tensors()) {
    if (victim.ne.size() != 2) continue;
    const TypeRecipe& r = kRecipes[k++ % (sizeof kRecipes / sizeof kRecipes[0])];
    const quant::TypeTraits* kt = quant::type_traits(victim.type);
    if (kt && kernels::kept_at_load(kt->type)) continue;  // read in place: no conversion to check it
    ASSERT_EQ(victim.type, r.type) << victim.name;
    const quant::TypeTraits& t = *quant::readable_traits(victim.type);
    for (const uint16_t bad : {uint16_t(0x7E00), uint16_t(0xFC00)}) {  // fp16 NaN, -infinity
      SCOPED_TRACE(victim.name + " (" + t.name + ")");
      gguf::Writer w;
      for (const gguf::KeyValue& kv : file->metadata()) w.add(kv.key, kv.value);
      const size_t row = quant::row_bytes(t.type, (int64_t)victim.ne[0]);
      const size_t blocks_per_row = (size_t)victim.ne[0] / t.block_size;
      const size_t block = blocks_per_row / 2;
      for (const gguf::TensorInfo& u : file->tensors()) {
        std::vector<uint8_t> bytes(u.data, u.data + u.n_bytes);
        if (&u == &victim) {
          uint8_t* b = bytes.data() + row + block * t.block_bytes;
          // BF16: an infinity or NaN of its own (the high half of the float's bits).
          const uint16_t v = r.halves.empty() ? uint16_t(bad == 0x7E00 ? 0x7FC0 : 0xFF80) : bad;
          std::memcpy(b + (r.halves.empty() ? 0 : r.halves[0].first), &v, 2);
        }
        w.add_tensor(u.name, u.ne, u.type, bytes.data(), bytes.size());
      }
      const std::vector<uint8_t> image = w.to_bytes();
      const std::string want = "tensor " + victim.name + " (" + t.name + ") row 1, block " +
                               std::to_string(block) + ": a value that is not finite";
      try {
        runtime::Model::open_memory(image.data(), image.size());
        ADD_FAILURE() << "loaded";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT);
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      auto in = gguf::File::from_bytes(image.data(), image.size());
      try {
        gguf::lay_out(*in, "native");
        ADD_FAILURE() << "laid out";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      ++n_tried;
    }
  }
  EXPECT_GE(n_tried, 2 * 7);  // Q2_K, Q3_K, Q4_K (transcoded), Q5_1, IQ4_NL, BF16, and the ones this CPU converts
}

}  // namespace
}  // namespace lilims
