// Per-tensor type overrides of gguf::requantize (`lilims quantize
// --tensor-type PATTERN=TYPE`): the glob, the rule parser, first-match order
// and the errors, on the tiny llama of tests/data/tiny (F16 weights).
#include <cstdio>
#include <map>

#include "base/error.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "test_util.h"

namespace lilims::gguf {
namespace {

using quant::Type;

TEST(GlobMatch, WholeNameWithStarQuestionAndClasses) {
  EXPECT_TRUE(glob_match("token_embd.weight", "token_embd.weight"));
  EXPECT_FALSE(glob_match("token_embd.weight", "token_embd.weight2"));
  EXPECT_FALSE(glob_match("token_embd", "token_embd.weight"));  // whole name, not a search
  EXPECT_TRUE(glob_match("blk.*.ffn_down.weight", "blk.0.ffn_down.weight"));
  EXPECT_TRUE(glob_match("blk.*.ffn_down.weight", "blk.17.ffn_down.weight"));
  EXPECT_FALSE(glob_match("blk.*.ffn_down.weight", "blk.0.ffn_up.weight"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "anything"));
  EXPECT_TRUE(glob_match("**a", "ba"));
  EXPECT_TRUE(glob_match("blk.?.attn_q.weight", "blk.3.attn_q.weight"));
  EXPECT_FALSE(glob_match("blk.?.attn_q.weight", "blk.13.attn_q.weight"));
  EXPECT_TRUE(glob_match("blk.[0-3].*", "blk.2.attn_k.weight"));
  EXPECT_FALSE(glob_match("blk.[0-3].*", "blk.4.attn_k.weight"));
  EXPECT_TRUE(glob_match("blk.[!0-3].*", "blk.4.attn_k.weight"));
  EXPECT_FALSE(glob_match("blk.[!0-3].*", "blk.1.attn_k.weight"));
  EXPECT_TRUE(glob_match("blk.[13579].x", "blk.7.x"));
  EXPECT_TRUE(glob_match("a[b", "a[b"));  // no ']': a literal '['
  EXPECT_FALSE(glob_match("a[b", "ab"));
  EXPECT_TRUE(glob_match("a.b", "a.b"));
  EXPECT_FALSE(glob_match("a.b", "axb"));  // '.' is literal, not a regex dot
  EXPECT_FALSE(glob_match("", "a"));
}

TEST(TensorTypeRule, Parses) {
  TensorTypeRule r = parse_tensor_type_rule("token_embd.weight=Q8_0");
  EXPECT_EQ(r.pattern, "token_embd.weight");
  EXPECT_EQ(r.type, Type::Q8_0);
  r = parse_tensor_type_rule("blk.*.ffn_down.weight=F16");
  EXPECT_EQ(r.pattern, "blk.*.ffn_down.weight");
  EXPECT_EQ(r.type, Type::F16);
  r = parse_tensor_type_rule("a=b=Q4_1");  // the last '=' splits
  EXPECT_EQ(r.pattern, "a=b");
  EXPECT_EQ(r.type, Type::Q4_1);
  for (const char* bad : {"Q8_0", "=Q8_0", "x=Q5_K", "x=", "x=q9"}) {
    try {
      parse_tensor_type_rule(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(std::string(e.what()).rfind("[quantize] --tensor-type", 0), 0u) << e.what();
    }
  }
}

std::string tiny_llama() { return test::source_path("tests/data/tiny/llama.gguf"); }

std::map<std::string, uint32_t> types_after(const std::vector<TensorTypeRule>& rules, Type type,
                                             std::vector<uint8_t>* embd_bytes = nullptr) {
  auto in = File::open(tiny_llama());
  RequantizeOptions opt;
  opt.method = quant::QuantMethod::plain;
  opt.tensor_types = rules;
  const std::string path = ::lilims::test::temp_path("tensor_type.gguf");
  requantize(*in, type, opt).write(path);
  auto out = File::open(path);
  std::map<std::string, uint32_t> types;
  for (const TensorInfo& t : out->tensors()) {
    types[t.name] = t.type;
    if (embd_bytes && t.name == "token_embd.weight") embd_bytes->assign(t.data, t.data + t.n_bytes);
  }
  std::remove(path.c_str());
  return types;
}

constexpr uint32_t u(Type t) { return static_cast<uint32_t>(t); }

TEST(TensorTypeRule, FirstMatchWins) {
  const auto types = types_after({{"token_embd.weight", Type::Q8_0},
                                  {"blk.0.*", Type::F16},
                                  {"blk.*.ffn_down.weight", Type::Q8_0}},
                                 Type::Q4_0);
  EXPECT_EQ(types.at("token_embd.weight"), u(Type::Q8_0));
  EXPECT_EQ(types.at("blk.0.ffn_down.weight"), u(Type::F16));  // blk.0.* comes first
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), u(Type::F16));
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), u(Type::Q8_0));
  EXPECT_EQ(types.at("blk.1.attn_q.weight"), u(Type::Q4_0));  // no rule: the main type
  EXPECT_EQ(types.at("blk.0.attn_norm.weight"), u(Type::F32));  // 1-D: never a rule's
  const auto reversed = types_after({{"blk.*.ffn_down.weight", Type::Q8_0}, {"blk.0.*", Type::F16}},
                                    Type::Q4_0);
  EXPECT_EQ(reversed.at("blk.0.ffn_down.weight"), u(Type::Q8_0));
  EXPECT_EQ(reversed.at("blk.0.attn_q.weight"), u(Type::F16));
}

TEST(TensorTypeRule, OverriddenTensorHasTheBytesOfThatType) {
  std::vector<uint8_t> with_rule, whole_q8;
  types_after({{"token_embd.weight", Type::Q8_0}}, Type::Q4_0, &with_rule);
  types_after({}, Type::Q8_0, &whole_q8);
  EXPECT_FALSE(with_rule.empty());
  EXPECT_EQ(with_rule, whole_q8);
}

void expect_requantize_error(const std::string& path, const std::vector<TensorTypeRule>& rules,
                             const std::string& needle) {
  auto in = File::open(path);
  RequantizeOptions opt;
  opt.tensor_types = rules;
  try {
    requantize(*in, Type::Q4_0, opt);
    ADD_FAILURE() << "accepted: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()).rfind("[quantize] --tensor-type", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TensorTypeRule, RefusesPatternsMatchingNothingAndUnsplittableRows) {
  expect_requantize_error(tiny_llama(), {{"nothing.*", Type::Q8_0}},
                          "pattern 'nothing.*' matches no 2-D weight");
  // Only 1-D tensors match: no 2-D weight takes the rule.
  expect_requantize_error(tiny_llama(), {{"*_norm.weight", Type::Q8_0}}, "matches no 2-D weight");
  // A later rule that matches only tensors an earlier one took still counts as matching.
  auto in = File::open(tiny_llama());
  RequantizeOptions opt;
  opt.tensor_types = {{"blk.*", Type::F16}, {"blk.0.*", Type::Q8_0}};
  EXPECT_NO_THROW(requantize(*in, Type::Q4_0, opt));
  const std::string stories = test::shared_data("stories260K/stories260K.gguf");
  if (test::file_exists(stories)) {  // ffn_down has rows of 172
    expect_requantize_error(stories, {{"blk.*.ffn_down.weight", Type::Q8_0}},
                            "blk.0.ffn_down.weight has rows of 172, not a multiple of 32");
  }
}

}  // namespace
}  // namespace lilims::gguf
