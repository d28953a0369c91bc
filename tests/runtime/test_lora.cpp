// LoRA adapters (models/lora.h, graph Op::lora, Session::set_adapters).
//
// The unmerged path is checked against the weights merged in float by a
// separate path (models::merge_lora: W + s B A written as F32, then the base
// kernels only), on the fp32 oracle and on the fast path; against llama.cpp
// in test_lora_llamacpp.cpp.  Adapters here are written by the test with
// lilims' GGUF writer in llama.cpp's layout (the files llama.cpp's tools and
// gguf-py write are tested there).
//
// The kernel path is chosen once per process (LILIMS_ISA):
// tests/runtime/CMakeLists.txt runs these tests again with LILIMS_ISA=avx2
// and LILIMS_ISA=ref.
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "base/fp16.h"
#include "models/gguf.h"
#include "models/lora.h"
#include "models/requantize.h"
#include "runtime/engine.h"
#include "pool_delays.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

struct AdapterSpec {
  int rank = 4;
  float alpha = 8.0f;
  float b_scale = 0.05f;           // B's values: normal(0, b_scale)
  uint32_t type = 0;               // GGML type of A and B: 0 F32, 1 F16
  std::vector<std::string> only;   // substrings of the weights to adapt (empty: every blk.* 2-D weight)
  uint32_t seed = 1;
  std::string arch;                // empty: the base's
  bool embedding = false;          // also the token embedding (llama.cpp's layout for it)
};

// An adapter for the base file at `base` in llama.cpp's layout: X.lora_a
// ne [n_in, rank], X.lora_b ne [rank, n_out], seeded normal values.
gguf::Writer adapter_for(const std::string& base, const AdapterSpec& spec) {
  const auto f = gguf::File::open(base);
  gguf::Writer w;
  w.add_string("general.architecture", spec.arch.empty() ? f->get_string("general.architecture") : spec.arch);
  w.add_string("general.type", "adapter");
  w.add_string("adapter.type", "lora");
  w.add_f32("adapter.lora.alpha", spec.alpha);
  std::mt19937 rng(spec.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto put = [&](const std::string& name, uint64_t cols, uint64_t rows, float sd) {
    std::vector<float> v(cols * rows);
    for (float& x : v) x = nd(rng) * sd;
    if (spec.type == 1) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
      w.add_tensor(name, {cols, rows}, 1, h.data(), h.size() * 2);
    } else {
      w.add_tensor(name, {cols, rows}, 0, v.data(), v.size() * 4);
    }
  };
  if (spec.embedding) {
    const gguf::TensorInfo& e = f->require_tensor("token_embd.weight");  // ne [n_embd, n_vocab]
    put("token_embd.weight.lora_a", (uint64_t)spec.rank, e.ne[1], 1.0f);
    put("token_embd.weight.lora_b", (uint64_t)spec.rank, e.ne[0], spec.b_scale);
  }
  for (const gguf::TensorInfo& t : f->tensors()) {
    if (t.ne.size() != 2 || t.name.rfind("blk.", 0) != 0) continue;
    bool take = spec.only.empty();
    for (const std::string& o : spec.only) take = take || t.name.find(o) != std::string::npos;
    if (!take) continue;
    const uint64_t n_in = t.ne[0], n_out = t.ne[1], r = (uint64_t)spec.rank;
    put(t.name + ".lora_a", n_in, r, 1.0f / std::sqrt((float)n_in));
    put(t.name + ".lora_b", r, n_out, spec.b_scale);
  }
  return w;
}

std::string write_adapter(const std::string& base, const AdapterSpec& spec, const std::string& name) {
  const std::string path = test::temp_path(name);
  adapter_for(base, spec).write(path);
  return path;
}

runtime::SessionOptions session_opts(graph::ExecMode mode = graph::ExecMode::fast, int threads = 2) {
  runtime::SessionOptions so;
  so.n_ctx = 128;
  so.n_threads = threads;
  so.mode = mode;
  so.n_batch = 32;
  return so;
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 164, 8, 392, 127, 43, 250, 301, 17, 99};

// Every position's logits of kPrompt, then two decode steps' logits.
std::vector<float> logits_of(runtime::Session& s) {
  std::vector<float> all;
  s.eval_all_logits(kPrompt, all);
  for (int32_t tok : {42, 300}) {
    s.eval({tok});
    all.insert(all.end(), s.logits().begin(), s.logits().end());
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, (double)std::fabs(a[i] - b[i]));
  return m;
}

TEST(Lora, RefusesAdaptersThatDoNotFit) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto model = runtime::Model::open(stories_path());
  auto expect_refused = [&](const gguf::Writer& w, lilims_status want, const std::string& names) {
    const std::string path = test::temp_path("bad.lora.gguf");
    w.write(path);
    try {
      runtime::Adapter::open(*model, path);
      ADD_FAILURE() << "accepted; want an error naming " << names;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), want) << e.what();
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  AdapterSpec spec;
  spec.only = {"blk.1.attn_q."};
  {  // another architecture
    AdapterSpec s = spec;
    s.arch = "phi3";
    expect_refused(adapter_for(stories_path(), s), LILIMS_ERR_INVALID_ARGUMENT, "general.architecture");
  }
  {  // not an adapter: the model file itself
    const auto f = gguf::File::open(stories_path());
    gguf::Writer w;
    for (const gguf::KeyValue& kv : f->metadata()) w.add(kv.key, kv.value);
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "general.type");
  }
  auto base_writer = [&](const std::string& type) {
    gguf::Writer w;
    w.add_string("general.architecture", "llama");
    w.add_string("general.type", "adapter");
    w.add_string("adapter.type", type);
    w.add_f32("adapter.lora.alpha", 4.0f);
    return w;
  };
  expect_refused(base_writer("ia3"), LILIMS_ERR_BAD_FORMAT, "adapter.type");
  std::vector<float> z(64 * 64, 0.01f);
  {  // a name that matches no weight
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.9.attn_q.weight.lora_a", {64, 4}, 0, z.data(), 64 * 4 * 4);
    w.add_tensor("blk.9.attn_q.weight.lora_b", {4, 64}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_INVALID_ARGUMENT, "blk.9.attn_q.weight");
  }
  {  // a wrong shape: A over 32 inputs for a 64-input weight
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_q.weight.lora_a", {32, 4}, 0, z.data(), 32 * 4 * 4);
    w.add_tensor("blk.1.attn_q.weight.lora_b", {4, 64}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_INVALID_ARGUMENT, "blk.1.attn_q.weight.lora_a");
  }
  {  // B with the wrong output count (attn_k has 32)
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_k.weight.lora_a", {64, 4}, 0, z.data(), 64 * 4 * 4);
    w.add_tensor("blk.1.attn_k.weight.lora_b", {4, 64}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_INVALID_ARGUMENT, "blk.1.attn_k.weight.lora_b");
  }
  {  // ranks of A and B differ
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_q.weight.lora_a", {64, 4}, 0, z.data(), 64 * 4 * 4);
    w.add_tensor("blk.1.attn_q.weight.lora_b", {3, 64}, 0, z.data(), 64 * 3 * 4);
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "blk.1.attn_q.weight");
  }
  {  // A without B
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_q.weight.lora_a", {64, 4}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "blk.1.attn_q.weight.lora_a");
  }
  {  // a tensor that is neither
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_q.weight", {64, 4}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "blk.1.attn_q.weight");
  }
  {  // the token embedding's A laid out as a projection's (ne [n_embd, rank], not [rank, n_vocab])
    gguf::Writer w = base_writer("lora");
    w.add_tensor("token_embd.weight.lora_a", {64, 4}, 0, z.data(), 64 * 4 * 4);
    w.add_tensor("token_embd.weight.lora_b", {4, 64}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_INVALID_ARGUMENT, "token_embd.weight.lora_a");
  }
  {  // a value that is not finite
    std::vector<float> nan = z;
    nan[5] = std::nanf("");
    gguf::Writer w = base_writer("lora");
    w.add_tensor("blk.1.attn_q.weight.lora_a", {64, 4}, 0, nan.data(), 64 * 4 * 4);
    w.add_tensor("blk.1.attn_q.weight.lora_b", {4, 64}, 0, z.data(), 64 * 4 * 4);
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "blk.1.attn_q.weight.lora_a");
  }
  {  // no tensors
    expect_refused(base_writer("lora"), LILIMS_ERR_BAD_FORMAT, "no tensors");
  }
  {  // a tool format lilims does not know
    gguf::Writer w = adapter_for(stories_path(), spec);
    w.add_string("lilims.tool_format", "qwen9");
    expect_refused(w, LILIMS_ERR_BAD_FORMAT, "lilims.tool_format");
  }
}

// lilims.tool_format: the format the adapter was trained with.
TEST(Lora, ToolFormatItWasTrainedWith) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto model = runtime::Model::open(stories_path());
  AdapterSpec spec;
  spec.only = {"blk.0.attn_q."};
  gguf::Writer w = adapter_for(stories_path(), spec);
  const std::string plain = test::temp_path("plain.lora.gguf");
  w.write(plain);
  EXPECT_FALSE(runtime::Adapter::open(*model, plain)->has_tool_format());
  w.add_string("lilims.tool_format", "smollm2");
  const std::string tagged = test::temp_path("tagged.lora.gguf");
  w.write(tagged);
  const auto ad = runtime::Adapter::open(*model, tagged);
  ASSERT_TRUE(ad->has_tool_format());
  EXPECT_EQ(ad->tool_format(), runtime::ToolFormat::smollm2);
}

TEST(Lora, ScaleZeroAndNoAdapterGiveTheBase) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto model = runtime::Model::open(stories_path());
  const auto ad = runtime::Adapter::open(*model, write_adapter(stories_path(), {}, "zero.lora.gguf"));
  runtime::Session base(*model, session_opts());
  const std::vector<float> want = logits_of(base);
  runtime::Session s(*model, session_opts());
  s.set_adapters({{ad.get(), 0.0f}});
  EXPECT_EQ(logits_of(s), want) << "scale 0";
  s.set_adapters({{ad.get(), 1.0f}});
  const std::vector<float> with = logits_of(s);
  EXPECT_GT(max_abs_diff(with, want), 0.05) << "the adapter should change the logits";
  s.set_adapters({});
  EXPECT_EQ(s.n_past(), 0) << "a new list empties the sequence";
  EXPECT_EQ(logits_of(s), want) << "after removing the adapter";
  s.set_adapters({{ad.get(), 1.0f}});
  EXPECT_EQ(logits_of(s), with) << "the adapter set again";
  const int32_t n = s.n_past();
  s.set_adapters({{ad.get(), 1.0f}});
  EXPECT_EQ(s.n_past(), n) << "the same list keeps the sequence";
}

// The unmerged adapter against its weights merged in float: the merged F32
// model runs only the base kernels.  The unmerged path holds A in Q8_0 and
// B in Q8_0 (relative rounding <= 1/254 of each 32-block's largest value),
// so the adapter's contribution D = logits(adapter) - logits(base) is off
// by up to about 0.4% of each term before the layers compound it; the bound
// is 3% of max |D|, where 0.75-1.83% was measured (stories260K, tiny llama
// and phi3, oracle, fast and ref, adapters that move logits by 4-10).
void expect_merged_equal(const std::string& base_path, const AdapterSpec& spec, graph::ExecMode mode,
                         float user_scale) {
  SCOPED_TRACE(base_path + " mode " + graph::exec_mode_name(mode) + " scale " + std::to_string(user_scale));
  const std::string ad_path = write_adapter(base_path, spec, "merge.lora.gguf");
  const auto model = runtime::Model::open(base_path);
  const auto ad = runtime::Adapter::open(*model, ad_path);
  const std::string merged_path = test::temp_path("merged.gguf");
  {
    const auto bf = gguf::File::open(base_path);
    const auto af = gguf::File::open(ad_path);
    models::merge_lora(*bf, model->weights(), *af, user_scale, quant::Type::F32).write(merged_path);
  }
  const auto merged = runtime::Model::open(merged_path);
  runtime::Session sb(*model, session_opts(mode)), sl(*model, session_opts(mode)), sm(*merged, session_opts(mode));
  sl.set_adapters({{ad.get(), user_scale}});
  const std::vector<float> lb = logits_of(sb), ll = logits_of(sl), lm = logits_of(sm);
  const double d = max_abs_diff(lm, lb), e = max_abs_diff(ll, lm);
  EXPECT_GT(d, 0.05) << "the adapter should change the logits";
  EXPECT_LE(e, 0.03 * d) << "unmerged vs merged differ by " << e << "; the adapter moves logits by " << d;
  std::printf("[   info   ] %s %s: adapter moves logits by %.4f, unmerged vs merged %.5f (%.2f%%)\n",
              base_path.substr(base_path.rfind('/') + 1).c_str(), graph::exec_mode_name(mode), d, e, 100 * e / d);
}

TEST(Lora, UnmergedMatchesMergedWeights) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  for (graph::ExecMode mode : {graph::ExecMode::oracle_f32, graph::ExecMode::fast, graph::ExecMode::ref}) {
    // stories260K: ffn_down's 172 inputs keep A in F32; gate's and up's 172
    // outputs pad B's last block.
    expect_merged_equal(stories_path(), {}, mode, 1.0f);
    AdapterSpec embd;
    embd.embedding = true;
    embd.only = {"ffn_down"};
    expect_merged_equal(stories_path(), embd, mode, 1.0f);
    AdapterSpec f16;
    f16.type = 1;
    f16.rank = 3;
    f16.alpha = 0.0f;  // scale = the user's
    f16.b_scale = 0.1f;
    expect_merged_equal(test::source_path("tests/data/tiny/llama.gguf"), f16, mode, 0.5f);
    // phi3's file holds [Q; K; V] and [gate; up] fused: the adapter adapts them whole.
    AdapterSpec phi;
    phi.rank = 2;
    phi.b_scale = 0.1f;
    expect_merged_equal(test::source_path("tests/data/tiny/phi3.gguf"), phi, mode, 1.0f);
  }
}

// Q, K and V stacked into one matmul at load: their adapters act on their
// rows of its output, bit for bit as on three matmuls.
TEST(Lora, StackedProjectionsGiveTheSeparateLogits) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const std::string q8 = test::temp_path("stories_q8.gguf");
  {
    const auto f = gguf::File::open(stories_path());
    gguf::RequantizeOptions ro;
    ro.method = quant::QuantMethod::plain;
    gguf::requantize(*f, quant::Type::Q8_0, ro).write(q8);
  }
  const std::string ad_path = write_adapter(stories_path(), {}, "stack.lora.gguf");
  std::vector<float> out[2];
  size_t fused[2] = {0, 0};
  for (int on = 0; on < 2; ++on) {
    runtime::ModelOptions mo;
    mo.fuse_projections = on == 1;
    const auto model = runtime::Model::open(q8, mo);
    fused[on] = model->weights().n_fused;
    const auto ad = runtime::Adapter::open(*model, ad_path);
    runtime::Session s(*model, session_opts());
    s.set_adapters({{ad.get(), 1.0f}});
    out[on] = logits_of(s);
  }
  EXPECT_EQ(fused[0], 0u);
  if (fused[1] == 0) std::printf("[   info   ] nothing stacked on this kernel path\n");
  EXPECT_EQ(out[0], out[1]);
}

// Each row's terms do not depend on how the pool splits the work: the same
// logits on 1 to 5 threads (more than the machine's cores), for prefill
// blocks and decode steps, also with random delays at the pool's race points
// (tests/runtime/pool_delays.h; this test runs under ThreadSanitizer too).
TEST(Lora, SameLogitsOnEveryThreadCount) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto model = runtime::Model::open(stories_path());
  AdapterSpec two = {};
  two.seed = 7;
  const auto a1 = runtime::Adapter::open(*model, write_adapter(stories_path(), {}, "t1.lora.gguf"));
  const auto a2 = runtime::Adapter::open(*model, write_adapter(stories_path(), two, "t2.lora.gguf"));
  std::vector<float> want;
  for (int delays = 0; delays < 2; ++delays) {
    for (int threads = 1; threads <= 5; ++threads) {
      runtime::SessionOptions so = session_opts(graph::ExecMode::fast, threads);
      if (delays) so.pool_hook = graph::PoolHook{test::pool_delays, nullptr};
      runtime::Session s(*model, so);
      s.set_adapters({{a1.get(), 0.7f}, {a2.get(), -0.4f}});
      for (int round = 0; round < (delays ? 3 : 1); ++round) {
        s.reset();
        const std::vector<float> got = logits_of(s);
        if (want.empty()) {
          want = got;
        } else {
          EXPECT_EQ(got, want) << threads << " threads" << (delays ? ", with delays" : "");
        }
      }
    }
  }
}

// Two adapters add their terms: one adapter at 0.5 listed twice gives what
// it gives at 1, within the float rounding of adding the terms in two
// steps (the terms are a small part of each output).
TEST(Lora, SeveralAdaptersAddTheirTerms) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto model = runtime::Model::open(stories_path());
  const auto ad = runtime::Adapter::open(*model, write_adapter(stories_path(), {}, "sum.lora.gguf"));
  runtime::Session one(*model, session_opts()), twice(*model, session_opts());
  one.set_adapters({{ad.get(), 1.0f}});
  twice.set_adapters({{ad.get(), 0.5f}, {ad.get(), 0.5f}});
  EXPECT_LE(max_abs_diff(logits_of(one), logits_of(twice)), 1e-3);
}

TEST(Lora, RefusesAnotherModelsAdapter) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data (stories260K)");
  const auto m1 = runtime::Model::open(stories_path());
  const auto m2 = runtime::Model::open(stories_path());
  const auto ad = runtime::Adapter::open(*m1, write_adapter(stories_path(), {}, "other.lora.gguf"));
  runtime::Session s(*m2, session_opts());
  s.eval({1, 2, 3});
  try {
    s.set_adapters({{ad.get(), 1.0f}});
    ADD_FAILURE() << "accepted an adapter loaded for another model";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
  }
  EXPECT_EQ(s.n_past(), 3) << "a refused list changes nothing";
  EXPECT_THROW(s.set_adapters({{ad.get(), std::nanf("")}}), Error);
  EXPECT_THROW(s.set_adapters({{nullptr, 1.0f}}), Error);
}

}  // namespace
}  // namespace lilims
