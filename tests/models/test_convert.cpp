// llama2.c -> GGUF converter: stories260K.bin + tok512.bin must give the
// tensors and vocabulary of llama.cpp's stories260K.gguf (both from
// karpathy/tinyllamas and llama.cpp, see ../shared/data/SOURCES.md).
#include "models/convert_llama2c.h"

#include <cstring>

#include "base/error.h"
#include "test_util.h"

namespace lilims::models {
namespace {

using Bytes = std::vector<uint8_t>;

const char kWhere[] = "karpathy/tinyllamas stories260K, see SOURCES.md";

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

std::unique_ptr<gguf::File> reparse(const gguf::Writer& w) {
  const Bytes b = w.to_bytes();
  return gguf::File::from_bytes(b.data(), b.size());
}

void expect_bad(const Bytes& ckpt, const Bytes* tok, const std::string& what) {
  try {
    static const uint8_t empty = 0;  // non-null: an empty tokenizer, not none
    const void* t = !tok ? nullptr : tok->empty() ? &empty : tok->data();
    convert_llama2c(ckpt.data(), ckpt.size(), t, tok ? tok->size() : 0);
    ADD_FAILURE() << "converted, expected an error containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[convert] ", 0), 0u) << e.what();
  }
}

void expect_same_tensor(const gguf::TensorInfo& a, const gguf::TensorInfo& b) {
  SCOPED_TRACE(a.name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.ne, b.ne);
  EXPECT_EQ(a.type, b.type);
  ASSERT_EQ(a.n_bytes, b.n_bytes);
  ASSERT_NE(a.data, nullptr);
  ASSERT_NE(b.data, nullptr);
  EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0);
}

class ConvertStories : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = test::shared_data("stories260K/stories260K.bin");
    tok_ = test::shared_data("stories260K/tok512.bin");
    ref_ = test::shared_data("stories260K/stories260K.gguf");
    LILIMS_REQUIRE_FILE(bin_, kWhere);
    LILIMS_REQUIRE_FILE(tok_, kWhere);
    LILIMS_REQUIRE_FILE(ref_, kWhere);
    ckpt_ = to_bytes(test::read_file(bin_));
    tokb_ = to_bytes(test::read_file(tok_));
  }
  std::string bin_, tok_, ref_;
  Bytes ckpt_, tokb_;
};

TEST_F(ConvertStories, HeaderFacts) {
  const Llama2cConfig c = parse_llama2c_config(ckpt_.data(), ckpt_.size());
  EXPECT_EQ(c.version, 0);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
}

TEST_F(ConvertStories, TensorsAreByteEqualToLlamaCpp) {
  auto ref = gguf::File::open(ref_);
  // Default: no output.weight for a shared classifier; llama.cpp writes a copy.
  auto got = reparse(convert_llama2c_files(bin_, tok_));
  EXPECT_EQ(got->tensors().size(), 47u);
  EXPECT_EQ(got->find_tensor("output.weight"), nullptr);
  for (const gguf::TensorInfo& t : got->tensors()) {
    const gguf::TensorInfo* r = ref->find_tensor(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    expect_same_tensor(t, *r);
  }
  const gguf::TensorInfo& out = ref->require_tensor("output.weight");
  const gguf::TensorInfo& emb = got->require_tensor("token_embd.weight");
  EXPECT_EQ(std::memcmp(out.data, emb.data, emb.n_bytes), 0);

  // With the tied output written, the tensor lists are identical, in order.
  Llama2cOptions opt;
  opt.write_tied_output = true;
  auto tied = reparse(convert_llama2c(ckpt_.data(), ckpt_.size(), tokb_.data(), tokb_.size(), opt));
  ASSERT_EQ(tied->tensors().size(), ref->tensors().size());
  for (size_t k = 0; k < tied->tensors().size(); ++k) {
    expect_same_tensor(tied->tensors()[k], ref->tensors()[k]);
  }
}

TEST_F(ConvertStories, MetadataMatchesLlamaCpp) {
  auto ref = gguf::File::open(ref_);
  auto got = reparse(convert_llama2c_files(bin_, tok_));
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type"}) {
    SCOPED_TRACE(key);
    const gguf::Value* a = got->find(key);
    const gguf::Value* b = ref->find(key);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->elem_type, b->elem_type);
    ASSERT_EQ(a->size(), 512u);
    ASSERT_EQ(a->size(), b->size());
    for (size_t k = 0; k < a->size(); ++k) {
      EXPECT_EQ(a->at(k).s, b->at(k).s) << k;
      EXPECT_EQ(a->at(k).f, b->at(k).f) << k;
      EXPECT_EQ(a->at(k).i, b->at(k).i) << k;
    }
  }
  // Every key llama.cpp wrote is there with the same value, except the
  // context length: llama.cpp's converter wrote its default 2048, lilims the
  // checkpoint's seq_len (what the model was trained with).
  for (const gguf::KeyValue& kv : ref->metadata()) {
    SCOPED_TRACE(kv.key);
    const gguf::Value* v = got->find(kv.key);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->type, kv.value.type);
    if (kv.key == "llama.context_length") {
      EXPECT_EQ(v->u, 512u);
      continue;
    }
    if (kv.value.type == gguf::ValueType::ARRAY) continue;  // compared above
    EXPECT_EQ(v->u, kv.value.u);
    EXPECT_EQ(v->i, kv.value.i);
    EXPECT_EQ(v->f, kv.value.f);
    EXPECT_EQ(v->s, kv.value.s);
  }
  EXPECT_EQ(got->get_int("general.file_type"), 0);
}

TEST_F(ConvertStories, NoTokenizer) {
  auto got = reparse(convert_llama2c(ckpt_.data(), ckpt_.size(), nullptr, 0));
  EXPECT_EQ(got->find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(got->tensors().size(), 47u);
}

// Rewrites the v0 stories260K.bin as llama2.c export.py's version1_export
// would: "ak42" header, then norms first, then the matrices.
Bytes to_version1(const Bytes& v0, const Llama2cConfig& c) {
  const size_t L = c.n_layers, dim = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const size_t kv = dim * c.n_kv_heads / c.n_heads;
  const uint8_t* p = v0.data() + 28;
  size_t at = 0;
  auto take = [&](size_t n) {
    const uint8_t* here = p + 4 * at;
    at += n;
    return Bytes(here, here + 4 * n);
  };
  const Bytes emb = take(vocab * dim), att = take(L * dim), wq = take(L * dim * dim),
              wk = take(L * kv * dim), wv = take(L * kv * dim), wo = take(L * dim * dim),
              ffn = take(L * dim), w1 = take(L * hid * dim), w2 = take(L * dim * hid),
              w3 = take(L * hid * dim), fin = take(dim);
  Bytes out(256, 0);
  const uint32_t magic = 0x616b3432;
  const int32_t hdr[8] = {1, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                          c.vocab_size, c.seq_len};
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, hdr, sizeof hdr);
  out[36] = 1;  // shared classifier
  for (const Bytes* b : {&att, &ffn, &fin, &emb, &wq, &wk, &wv, &wo, &w1, &w2, &w3}) {
    out.insert(out.end(), b->begin(), b->end());
  }
  return out;
}

TEST_F(ConvertStories, Version1GivesTheSameTensors) {
  const Llama2cConfig c0 = parse_llama2c_config(ckpt_.data(), ckpt_.size());
  const Bytes v1 = to_version1(ckpt_, c0);
  const Llama2cConfig c1 = parse_llama2c_config(v1.data(), v1.size());
  EXPECT_EQ(c1.version, 1);
  EXPECT_TRUE(c1.shared_classifier);
  auto a = reparse(convert_llama2c(ckpt_.data(), ckpt_.size(), tokb_.data(), tokb_.size()));
  auto b = reparse(convert_llama2c(v1.data(), v1.size(), tokb_.data(), tokb_.size()));
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t k = 0; k < a->tensors().size(); ++k) {
    expect_same_tensor(a->tensors()[k], b->tensors()[k]);
  }
  Bytes v2 = v1;
  v2[4] = 2;
  expect_bad(v2, nullptr, "version 2 is not supported");
}

TEST_F(ConvertStories, SeparateClassifier) {
  // Negative vocab_size: a wcls matrix follows the freq_cis arrays.
  Bytes b = ckpt_;
  const int32_t neg = -512;
  std::memcpy(b.data() + 5 * 4, &neg, 4);
  Bytes wcls(512 * 64 * 4);
  for (size_t k = 0; k < wcls.size(); ++k) wcls[k] = static_cast<uint8_t>(k * 31 + 7);
  expect_bad(b, nullptr, "truncated");  // the classifier is missing
  b.insert(b.end(), wcls.begin(), wcls.end());
  auto f = reparse(convert_llama2c(b.data(), b.size(), nullptr, 0));
  const gguf::TensorInfo& out = f->require_tensor("output.weight");
  EXPECT_EQ(out.ne, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(std::memcmp(out.data, wcls.data(), wcls.size()), 0);
  EXPECT_EQ(f->tensors().size(), 48u);
}

TEST_F(ConvertStories, TruncatedAndGarbageCheckpoints) {
  for (size_t len : {size_t{0}, size_t{3}, size_t{27}}) {
    expect_bad(Bytes(ckpt_.begin(), ckpt_.begin() + len), nullptr, "truncated inside its 28-byte header");
  }
  for (size_t len : {size_t{28}, size_t{29}, ckpt_.size() / 2, ckpt_.size() - 1}) {
    expect_bad(Bytes(ckpt_.begin(), ckpt_.begin() + len), nullptr,
               "checkpoint truncated: a version 0 file with dim 64");
  }
  Bytes longer = ckpt_;
  longer.push_back(0);
  expect_bad(longer, nullptr, "trailing bytes");
  // Header fields that cannot be a model.
  Bytes b = ckpt_;
  const int32_t zero = 0, odd = 7, huge = 0x7fffffff;
  std::memcpy(b.data() + 3 * 4, &odd, 4);  // n_heads 7 does not divide dim 64
  expect_bad(b, nullptr, "n_heads");
  b = ckpt_;
  std::memcpy(b.data(), &zero, 4);
  expect_bad(b, nullptr, "implausible header");
  b = ckpt_;
  std::memcpy(b.data() + 2 * 4, &huge, 4);
  expect_bad(b, nullptr, "implausible header");
  // Text is not a checkpoint.
  const std::string text(4096, 'x');
  expect_bad(Bytes(text.begin(), text.end()), nullptr, "implausible header");
  // A 256 MiB-sized claim from a tiny file: refused from the header, nothing allocated.
  b = ckpt_;
  const int32_t big = 1 << 20;
  std::memcpy(b.data(), &big, 4);
  std::memcpy(b.data() + 4, &big, 4);
  expect_bad(b, nullptr, "truncated");
}

TEST_F(ConvertStories, BadTokenizers) {
  for (size_t len : {size_t{0}, size_t{2}, size_t{4}, size_t{100}, tokb_.size() - 1}) {
    const Bytes t(tokb_.begin(), tokb_.begin() + len);
    expect_bad(ckpt_, &t, "tokenizer truncated");
  }
  Bytes t = tokb_;
  t.push_back('!');
  expect_bad(ckpt_, &t, "tokenizer has 1 bytes left after the 512 tokens");
  t = tokb_;
  const int32_t neg = -5;
  std::memcpy(t.data() + 4 + 4, &neg, 4);  // length of token 0
  expect_bad(ckpt_, &t, "negative length");
  t = tokb_;
  const int32_t huge = 0x7fffffff;
  std::memcpy(t.data() + 4 + 4, &huge, 4);
  expect_bad(ckpt_, &t, "tokenizer truncated");
}

TEST(Convert, MissingFiles) {
  try {
    convert_llama2c_files("/nonexistent/model.bin", "");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_IO);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace lilims::models
