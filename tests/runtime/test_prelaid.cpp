// Pre-laid files (`lilims quantize IN OUT TYPE --layout TARGET`,
// models/layout_file.h, quant/prelaid.h): the matmul weights stored in a
// kernel layout, read in place by a load.
//
// What must hold, for every target and weight type:
//  - the scalar path (ExecMode::ref, which reads every layout block by block
//    and sums in one order) gives the plain file's logits bit for bit;
//  - the fast path gives them bit for bit too when every weight ends in the
//    layout the plain file's load repacks it into (the same bytes under the
//    same kernels); a file laid out for other CPUs runs on another kernel
//    (4-row groups where this CPU's best kernels read 16) and agrees within
//    kTolOtherLayout;
//  - a file laid out for this CPU copies nothing (Model::copied empty, no
//    repacked or re-quantized bytes) and stacks what the plain load stacks;
//    a file whose layout no kernel here reads is laid out again, with the
//    reason in Model::copied.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "models/gguf.h"
#include "models/layout_file.h"
#include "models/requantize.h"
#include "quant/prelaid.h"
#include "quant/repack.h"
#include "runtime/engine.h"
#include "requantized_stories.h"
#include "test_util.h"

namespace lilims {
namespace {

// Two kernels that read different layouts sum each output's blocks in
// another order: the same integer block products, float sums that differ in
// the last bits.  Through stories260K's five layers the paths end further
// apart than that for Q4_1: measured, the plain file's fast path on AVX-512
// VNNI (16-row kernels) and on AVX2 (4-row) differ by up to 0.036 in a logit
// of -6.5 (the same with or without a laid-out file; the scalar path over
// either layout agrees with AVX2's to 1e-6).  0.05 bounds that; a wrong
// block or a misread layout moves logits by O(1), and the scalar path's
// bit-for-bit check above is what proves the bytes.
constexpr float kTolOtherLayout = 0.05f;

using test::stories_as;
using test::stories_path;

std::vector<uint8_t> laid_out(const std::vector<uint8_t>& plain, const std::string& target) {
  auto f = gguf::File::from_borrowed(plain.data(), plain.size(), "plain");
  return gguf::lay_out(*f, target).to_bytes();
}

std::vector<float> logits(const runtime::Model& model, const std::vector<int32_t>& prompt,
                          models::ExecMode mode) {
  runtime::SessionOptions so;
  so.n_ctx = 64;
  so.n_batch = 5;
  so.n_threads = 2;
  so.mode = mode;
  runtime::Session s(model, so);
  std::vector<float> all;
  s.eval_all_logits(prompt, all);
  for (int i = 0; i < 3; ++i) {
    const std::vector<float>& l = s.logits();
    s.eval({(int32_t)(std::max_element(l.begin(), l.end()) - l.begin())});
    all.insert(all.end(), s.logits().begin(), s.logits().end());
  }
  return all;
}

// Every weight the kernels read, by name.
std::vector<const models::Weight*> matmul_weights(const models::Model& m) {
  std::vector<const models::Weight*> out{&m.output};  // (tok_embd is read row by row)
  for (const models::Layer& L : m.layers) {
    for (const models::Weight* w : L.weights()) out.push_back(w);
  }
  return out;
}

// Both models' weights all in one layout per weight type (stacked or not:
// a stack computes each row as its part would, bit for bit).
bool same_layouts(const models::Model& a, const models::Model& b) {
  std::map<quant::Type, std::set<int>> layouts;
  for (const models::Model* m : {&a, &b}) {
    for (const models::Weight* w : matmul_weights(*m)) {
      if (w->present()) layouts[w->type].insert(w->packed.layout);
    }
  }
  for (const auto& kv : layouts) {
    if (kv.second.size() != 1) return false;
  }
  return true;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(&a[i], &b[i], sizeof(float))) << "logit " << i << ": " << a[i] << " vs " << b[i];
  }
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 429, 30, 287, 342, 263, 4, 410};

std::vector<std::string> targets() {
  std::vector<std::string> t = {"avx2", "avx512vnni", "neon"};
  if (kernels::active_isa() != kernels::Isa::ref) t.push_back(gguf::layout_target("native"));
  return t;
}

TEST(Prelaid, Stories260kEveryTargetAndTypeMatchesThePlainFile) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  struct Case {
    quant::Type type;
    std::vector<gguf::TensorTypeRule> rules;
  };
  const Case cases[] = {{quant::Type::Q8_0, {}},
                        {quant::Type::Q4_0, {}},
                        {quant::Type::Q4_1, {}},
                        {quant::Type::Q4_0, {gguf::parse_tensor_type_rule("blk.*.attn_v.weight=Q8_0")}}};
  for (const Case& c : cases) {
    const std::vector<uint8_t> plain = stories_as(c.type, c.rules);
    auto p = runtime::Model::open_memory(plain.data(), plain.size());
    const std::vector<float> want_ref = logits(*p, kPrompt, models::ExecMode::ref);
    const std::vector<float> want_fast = logits(*p, kPrompt, models::ExecMode::fast);
    for (const std::string& target : targets()) {
      SCOPED_TRACE(std::string(quant::traits(c.type).name) + (c.rules.empty() ? "" : " + Q8_0 V") + ", laid out for " +
                   target + ", kernels " + kernels::kernel_path_name());
      const std::vector<uint8_t> laid = laid_out(plain, target);
      auto m = runtime::Model::open_memory(laid.data(), laid.size());
      expect_bits(logits(*m, kPrompt, models::ExecMode::ref), want_ref);
      const std::vector<float> fast = logits(*m, kPrompt, models::ExecMode::fast);
      if (same_layouts(m->weights(), p->weights())) {
        expect_bits(fast, want_fast);
      } else {
        ASSERT_EQ(fast.size(), want_fast.size());
        for (size_t i = 0; i < fast.size(); ++i) ASSERT_NEAR(fast[i], want_fast[i], kTolOtherLayout) << i;
      }
      const models::Model& w = m->weights();
      EXPECT_EQ(w.repacked_bytes + w.requantized_bytes, [&] {
        uint64_t n = 0;
        for (const auto& [why, bytes] : w.copied) n += bytes;
        return n;
      }());
      const bool native = kernels::active_isa() != kernels::Isa::ref && target == gguf::layout_target("native");
      if (native) {
        EXPECT_TRUE(w.copied.empty()) << models::describe_copies(w);
        EXPECT_EQ(w.repacked_bytes, 0u);
        // Parts stack in place when they follow each other in the file: a
        // part whose bytes are not a multiple of the 64-byte alignment is
        // followed by padding (stories260K's 172-row gate in 4-row Q8_0
        // groups), and stays a weight of its own.
        EXPECT_LE(w.n_fused, p->weights().n_fused);
        EXPECT_TRUE(same_layouts(w, p->weights()));
      }
      // Q4_0 in 4-row groups laid out for the other ISA family is laid out again.
      const bool other_family = (target == "neon") != (quant::kQ4_0X4Xor != 0);
      const bool q4_0_copied = std::any_of(w.copied.begin(), w.copied.end(), [](const auto& kv) {
        return kv.first.find("laid out for") != std::string::npos;
      });
      if (c.type == quant::Type::Q4_0 && target != "avx512vnni") {
        EXPECT_EQ(q4_0_copied, other_family);
      }
      // 16-row groups where no kernel reads them: laid out again, saying so.
      if (target == "avx512vnni" && !kernels::vnni_enabled() && kernels::active_isa() != kernels::Isa::ref) {
        EXPECT_NE(models::describe_copies(w).find("no kernel of this CPU reads"), std::string::npos)
            << models::describe_copies(w);
      }
    }
  }
}

// A plain file's load says what it copied and why; the laid-out file's
// weights are all mapped.
TEST(Prelaid, SmolLM2NativeCopiesNothing) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  if (kernels::active_isa() == kernels::Isa::ref) GTEST_SKIP() << "the reference kernels repack nothing";
  auto plain_file = gguf::File::open(test::smollm2_path());
  const std::vector<uint8_t> laid = gguf::lay_out(*plain_file, gguf::layout_target("native")).to_bytes();
  auto p = runtime::Model::open(test::smollm2_path());
  auto m = runtime::Model::open_memory(laid.data(), laid.size());
  const models::Model& pw = p->weights();
  const models::Model& mw = m->weights();
  EXPECT_GT(pw.repacked_bytes, 80u << 20);  // 84 MB of Q4_1 and the tied Q8_0 output
  ASSERT_EQ(pw.copied.size(), 1u);
  EXPECT_NE(pw.copied.begin()->first.find("repacked into"), std::string::npos);
  EXPECT_EQ(pw.copied.begin()->second, pw.repacked_bytes);
  EXPECT_TRUE(mw.copied.empty()) << models::describe_copies(mw);
  EXPECT_EQ(models::describe_copies(mw), "");
  EXPECT_EQ(mw.repacked_bytes + mw.requantized_bytes, 0u);
  EXPECT_EQ(mw.mapped_weight_bytes(), pw.mapped_weight_bytes() + pw.repacked_bytes);
  EXPECT_EQ(mw.n_fused, pw.n_fused);
  EXPECT_EQ(mw.n_fused, 60u);  // every layer's QKV and gate/up stacked in place
  const std::vector<int32_t> prompt =
      p->tokenizer().encode("The quick brown fox jumps over the lazy dog because", true, false);
  expect_bits(logits(*m, prompt, models::ExecMode::fast), logits(*p, prompt, models::ExecMode::fast));
}

// --- bad input -------------------------------------------------------------

// A small file holding one pre-laid Q8_0 matrix (16 x 64) after a 1-D F32
// tensor of `lead` floats, written with `alignment`.
std::vector<uint8_t> tiny_prelaid(uint32_t alignment, int lead, bool version = true, uint32_t v = 1) {
  gguf::Writer w;
  w.set_alignment(alignment);
  w.add_string("general.architecture", "llama");
  if (version) w.add_u32(quant::kLayoutVersionKey, v);
  std::vector<float> f((size_t)lead, 1.0f);
  w.add_tensor("lead", {(uint64_t)lead}, 0, f.data(), f.size() * 4);
  const quant::PrelaidType pl = quant::native_prelaid(quant::Type::Q8_0, quant::kLayoutX16);
  std::vector<uint8_t> bytes(quant::prelaid_bytes(pl, 16, 64), 0);
  w.add_tensor("blk.0.attn_q.weight", {64, 16}, quant::prelaid_type_id(pl), bytes.data(), bytes.size());
  return w.to_bytes();
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    gguf::File::from_bytes(b.data(), b.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The type id of tensor `name` in a GGUF image (after its name, dims).
void set_type(std::vector<uint8_t>& b, const std::string& name, uint32_t type) {
  const std::string key = std::string(8, '\0') + name;
  for (size_t at = 0; at + 8 + name.size() < b.size(); ++at) {
    uint64_t len;
    std::memcpy(&len, &b[at], 8);
    if (len != name.size() || std::memcmp(&b[at + 8], name.data(), name.size()) != 0) continue;
    size_t p = at + 8 + name.size();
    uint32_t n_dims;
    std::memcpy(&n_dims, &b[p], 4);
    p += 4 + 8 * (size_t)n_dims;
    std::memcpy(&b[p], &type, 4);
    return;
  }
  FAIL() << "no tensor " << name;
}

TEST(Prelaid, BadFilesAreRefusedNamingWhat) {
  EXPECT_EQ(parse_error(tiny_prelaid(64, 16)), "");
  // An unknown layout version, or none.
  EXPECT_NE(parse_error(tiny_prelaid(64, 16, true, 2)).find("layout version 2"), std::string::npos);
  EXPECT_NE(parse_error(tiny_prelaid(64, 16, false)).find(quant::kLayoutVersionKey), std::string::npos);
  // A pre-laid tensor at an offset that is not a multiple of 64.
  const std::string misaligned = parse_error(tiny_prelaid(32, 8));
  EXPECT_NE(misaligned.find("blk.0.attn_q.weight"), std::string::npos) << misaligned;
  EXPECT_NE(misaligned.find("multiple of 64"), std::string::npos) << misaligned;
  // Bytes that do not fit: the file ends inside the tensor.
  std::vector<uint8_t> cut = tiny_prelaid(64, 16);
  cut.resize(cut.size() - 100);
  EXPECT_NE(parse_error(cut).find("blk.0.attn_q.weight"), std::string::npos);
  // A pre-laid type on a 1-D tensor; an id in lilims' range that names no layout.
  std::vector<uint8_t> one_d = tiny_prelaid(64, 16);
  set_type(one_d, "lead", quant::prelaid_type_id(quant::native_prelaid(quant::Type::Q8_0, quant::kLayoutX4)));
  EXPECT_NE(parse_error(one_d).find("tensor lead"), std::string::npos) << parse_error(one_d);
  std::vector<uint8_t> unknown = tiny_prelaid(64, 16);
  set_type(unknown, "blk.0.attn_q.weight", quant::kPrelaidTypeBase + 4 * 1 + 1);  // F16 in 4-row groups
  EXPECT_NE(parse_error(unknown).find("nor a lilims layout this version reads"), std::string::npos)
      << parse_error(unknown);
  // The writer refuses a byte count that does not fit the shape.
  gguf::Writer w;
  std::vector<uint8_t> bytes(100);
  EXPECT_THROW(w.add_tensor("x", {64, 16}, quant::prelaid_type_id(quant::native_prelaid(quant::Type::Q8_0,
                                                                                          quant::kLayoutX16)),
                            bytes.data(), bytes.size()),
               Error);
}

// Tools that read plain tensors refuse a laid-out file saying so, and laying
// out takes a plain file only.
TEST(Prelaid, PlainToolsRefuseALaidOutFile) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  const std::vector<uint8_t> laid = laid_out(stories_as(quant::Type::Q8_0), "avx2");
  auto f = gguf::File::from_bytes(laid.data(), laid.size());
  try {
    gguf::requantize(*f, quant::Type::Q4_0, {});
    FAIL() << "requantize read a laid-out file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("laid out for lilims' kernels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gguf::lay_out(*f, "avx2"), Error);
  EXPECT_THROW(gguf::layout_target("sse4"), Error);
  EXPECT_EQ(gguf::layout_target("avx512"), "avx512vnni");
}

// Every pre-laid id names one (type, layout, variant) and back.
TEST(Prelaid, TypeIdsRoundTripAndStayOutsideGgml) {
  int n = 0;
  for (uint32_t id = 0; id < quant::kPrelaidTypeBase + 1024; ++id) {
    quant::PrelaidType p;
    if (!quant::prelaid_type(id, &p)) continue;
    ++n;
    EXPECT_GE(id, quant::kPrelaidTypeBase);
    EXPECT_EQ(quant::prelaid_type_id(p), id);
    EXPECT_NE(quant::prelaid_type_name(id).find(quant::traits(p.type).name), std::string::npos);
  }
  EXPECT_GE(n, 7);  // Q4_0, Q4_1, Q8_0 in x4 and x16, Q4_0's aarch64 x4
  EXPECT_FALSE(quant::prelaid_type(8, nullptr));
}

}  // namespace
}  // namespace lilims
