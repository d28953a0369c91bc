// Hugging Face directories to GGUF (models/convert_hf.h): the layout against
// the files the `gguf` package wrote for the same models
// (tests/data/tiny/*.gguf, from the same seeds: scripts/goldens/
// gen_hf_dirs.py), the tokenizer against HF's ids, and hostile input
// (corrupt safetensors headers, missing files, unknown architectures and
// tensors) against clear errors.
#include "models/convert_hf.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/safetensors.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::unique_ptr<gguf::File> convert(const std::string& dir, quant::Type type = quant::Type::F16,
                                    const std::string& name = "",
                                    std::vector<std::string>* notes = nullptr) {
  HfConvertOptions opt;
  opt.type = type;
  opt.name = name;
  const std::vector<uint8_t> image = convert_hf_dir(dir, opt, notes).to_bytes();
  return gguf::File::from_bytes(image.data(), image.size());
}

std::string hf_dir(const std::string& arch) { return test::source_path("tests/data/hf/" + arch); }

// A scratch copy of a tests/data/hf directory to break.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& arch) {
    path_ = ::testing::TempDir() + "/lilims_hfconv_" + std::to_string(getpid()) + "_" + arch + "_" +
            std::to_string(counter_++);
    fs::remove_all(path_);
    fs::copy(hf_dir(arch), path_, fs::copy_options::recursive);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << text;
  }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream(path_ + "/" + name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// Every metadata value of `want` under the architecture's prefix, in `got`.
void expect_same_arch_keys(const gguf::File& got, const gguf::File& want, const std::string& arch) {
  for (const gguf::KeyValue& kv : want.metadata()) {
    if (kv.key.compare(0, arch.size() + 1, arch + ".") != 0) continue;
    const gguf::Value* g = got.find(kv.key);
    ASSERT_TRUE(g) << "missing " << kv.key;
    EXPECT_EQ(g->type, kv.value.type) << kv.key;
    EXPECT_EQ(g->u, kv.value.u) << kv.key;
    EXPECT_EQ(g->f, kv.value.f) << kv.key;
  }
}

// Same tensor names, shapes and types; same bytes when `bytes`.
void expect_same_tensors(const gguf::File& got, const gguf::File& want, bool bytes) {
  EXPECT_EQ(got.tensors().size(), want.tensors().size());
  for (const gguf::TensorInfo& w : want.tensors()) {
    const gguf::TensorInfo* g = got.find_tensor(w.name);
    ASSERT_TRUE(g) << "missing tensor " << w.name;
    EXPECT_EQ(g->ne, w.ne) << w.name;
    EXPECT_EQ(g->type, w.type) << w.name;
    ASSERT_EQ(g->n_bytes, w.n_bytes) << w.name;
    if (bytes) {
      EXPECT_EQ(std::memcmp(g->data, w.data, w.n_bytes), 0) << w.name << " differs";
    }
  }
}

// llama and phi2 are the very models of tests/data/tiny: converted to F16
// (2-D F16, 1-D F32, as there) every tensor must be byte for byte the one the
// gguf package wrote, the llama Q/K permutation included.
TEST(ConvertHfLayout, LlamaEqualsGgufPackageFile) {
  const auto got = convert(hf_dir("llama"));
  const auto want = gguf::File::open(test::source_path("tests/data/tiny/llama.gguf"));
  expect_same_arch_keys(*got, *want, "llama");
  expect_same_tensors(*got, *want, true);
  EXPECT_EQ(got->get_int("general.file_type"), 1);
}

TEST(ConvertHfLayout, Phi2ShardedEqualsGgufPackageFile) {
  const auto got = convert(hf_dir("phi2"));
  const auto want = gguf::File::open(test::source_path("tests/data/tiny/phi2.gguf"));
  expect_same_arch_keys(*got, *want, "phi2");
  expect_same_tensors(*got, *want, true);
  EXPECT_FALSE(got->get_bool_or("tokenizer.ggml.add_bos_token", true));  // as llama.cpp forces
}

// phi3 is stored in BF16 (other values): same layout, not the same bytes.
TEST(ConvertHfLayout, Phi3Bf16HasGgufPackageLayout) {
  const auto got = convert(hf_dir("phi3"));
  const auto want = gguf::File::open(test::source_path("tests/data/tiny/phi3.gguf"));
  expect_same_arch_keys(*got, *want, "phi3");
  expect_same_tensors(*got, *want, false);
  for (const char* f : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    EXPECT_EQ(std::memcmp(got->find_tensor(f)->data, want->find_tensor(f)->data, 32), 0) << f;
  }
}

TEST(ConvertHfLayout, QuantizedTypes) {
  for (quant::Type t : {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1, quant::Type::F32}) {
    const auto got = convert(hf_dir("llama"), t);
    EXPECT_EQ(got->find_tensor("blk.0.attn_q.weight")->type, static_cast<uint32_t>(t));
    EXPECT_EQ(got->find_tensor("token_embd.weight")->type, static_cast<uint32_t>(t));
    EXPECT_EQ(got->find_tensor("blk.0.attn_norm.weight")->type, 0u);
  }
}

// The converted vocabulary tokenizes as HF's tokenizer does.  The name has
// no "phi3" in it: see StripFlagsGgufCannotHold.
TEST(ConvertHfTokenizer, IdsEqualTransformers) {
  const json g = json::parse(test::read_file(test::source_path("tests/data/hf/goldens.json")));
  for (const char* arch : {"llama", "phi2", "phi3"}) {
    std::vector<std::string> notes;
    const auto f = convert(hf_dir(arch), quant::Type::F16, "lilims tiny random", &notes);
    EXPECT_TRUE(notes.empty()) << notes[0];
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "smollm");
    EXPECT_EQ(f->get_string("tokenizer.chat_template"), g["chat_template"].get<std::string>());
    const auto tok = tok::Tokenizer::from_gguf(*f);
    EXPECT_EQ(tok->token_text(tok->bos()), g["bos_token"].get<std::string>());
    EXPECT_EQ(tok->token_text(tok->eos()), g["eos_token"].get<std::string>());
    EXPECT_EQ(f->get_int("tokenizer.ggml.padding_token_id"), tok->find_token(g["pad_token"].get<std::string>()));
    for (const json& c : g["tokenizer"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false, true), c["ids"].get<std::vector<int32_t>>()) << arch << ": " << text;
    }
  }
}

// A model named phi3 gets llama.cpp's Phi-3 rule (every special token but
// <|endoftext|> strips the whitespace after it); this tokenizer.json says
// rstrip false, and GGUF has no key to say so: the converter must tell.
TEST(ConvertHfTokenizer, StripFlagsGgufCannotHold) {
  std::vector<std::string> notes;
  const auto f = convert(hf_dir("phi3"), quant::Type::F16, "", &notes);
  EXPECT_EQ(f->get_string("general.name"), "phi3");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("'<|im_start|>' has neither lstrip nor rstrip in tokenizer.json, but GGUF "
                          "readers give it rstrip"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("'<|im_end|>'"), std::string::npos) << notes[1];
}

// SentencePiece-style BPE (byte_fallback, Prepend normalizer) becomes a
// "llama" vocabulary scored by merge rank; it tokenizes as the tokenizer.json
// it came from (tokenizer/load_hf_json.cpp reads that directly).
TEST(ConvertHfTokenizer, SentencePieceStyleBpe) {
  const std::string text = R"({
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5,
                        "\u2581": 6, "a": 7, "b": 8, "ab": 9, "\u2581ab": 10},
              "merges": ["a b", "\u2581 ab"]},
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
  })";
  ScratchDir d("llama");
  d.write("tokenizer.json", text);
  d.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})");
  const auto f = convert(d.path());
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f->get_bool_or("tokenizer.ggml.add_space_prefix", false));
  EXPECT_TRUE(f->get_bool_or("tokenizer.ggml.add_bos_token", false));
  EXPECT_EQ(f->get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 2);
  const gguf::Value& types = *f->find("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);  // padded to config.json's vocab_size
  EXPECT_EQ(types.at(3).i, 6);    // <0x0A>: byte
  EXPECT_EQ(types.at(7).i, 1);
  EXPECT_EQ(types.at(11).i, 5);   // [PAD11]: unused
  const auto tok = tok::Tokenizer::from_gguf(*f);
  const auto ref = tok::Tokenizer::from_hf_json(text);
  for (const char* s : {"ab", "ab\n\xC3\xA9", "b a ab"}) {
    EXPECT_EQ(tok->encode(s, true, false), ref->encode(s, true, false)) << s;
  }
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{1, 10}));
}

// --- hostile input ---------------------------------------------------------

lilims_status status_of(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.status();
  }
  return LILIMS_OK;
}

std::vector<uint8_t> st_image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> img(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  for (int k = 0; k < 8; ++k) img[k] = static_cast<uint8_t>(n >> (8 * k));
  std::memcpy(img.data() + 8, header.data(), header.size());
  return img;
}

lilims_status parse_st(const std::vector<uint8_t>& img, std::string* what) {
  return status_of([&] { SafetensorsFile::from_image(img.data(), img.size(), "x.safetensors"); }, what);
}

TEST(ConvertHfErrors, CorruptSafetensorsHeaders) {
  struct Case {
    std::string header;
    size_t data;
    const char* expect;  // in the message
  };
  const Case cases[] = {
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8, nullptr},
      {"{not json", 0, "not JSON"},
      {"[1, 2]", 0, "not a JSON object"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "outside"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 4]}})", 8, "outside"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "bytes for 3"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, "shape entry"},
      {R"({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8, "unknown dtype Q4"},
      {R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296],
                 "data_offsets": [0, 8]}})", 8, "overflows"},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", 8, "expected {"},
  };
  for (const Case& c : cases) {
    std::string what;
    const lilims_status s = parse_st(st_image(c.header, c.data), &what);
    if (!c.expect) {
      EXPECT_EQ(s, LILIMS_OK) << what;
      continue;
    }
    EXPECT_EQ(s, LILIMS_ERR_BAD_FORMAT) << c.header;
    EXPECT_NE(what.find("[safetensors] x.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find(c.expect), std::string::npos) << what;
  }
  // A header length past the end of the file, and a file too short for one.
  std::vector<uint8_t> img = st_image("{}", 0);
  img[0] = 200;
  std::string what;
  EXPECT_EQ(parse_st(img, &what), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
  img.resize(5);
  EXPECT_EQ(parse_st(img, &what), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(what.find("truncated"), std::string::npos) << what;
}

lilims_status convert_status(const std::string& dir, std::string* what) {
  return status_of([&] { convert_hf_dir(dir); }, what);
}

TEST(ConvertHfErrors, MissingFiles) {
  std::string what;
  {
    ScratchDir d("llama");
    fs::remove(d.path() + "/config.json");
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_MISSING);
    EXPECT_NE(what.find("no config.json"), std::string::npos) << what;
  }
  {
    ScratchDir d("llama");
    fs::remove(d.path() + "/model.safetensors");
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_MISSING);
    EXPECT_NE(what.find("neither model.safetensors"), std::string::npos) << what;
  }
  {
    ScratchDir d("llama");
    fs::remove(d.path() + "/tokenizer.json");
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_MISSING);
    EXPECT_NE(what.find("no tokenizer.json"), std::string::npos) << what;
  }
  {
    ScratchDir d("phi2");
    fs::remove(d.path() + "/model-00002-of-00004.safetensors");
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_IO);
    EXPECT_NE(what.find("model-00002-of-00004.safetensors"), std::string::npos) << what;
  }
}

TEST(ConvertHfErrors, UnknownArchitectureAndTensor) {
  std::string what;
  {
    ScratchDir d("llama");
    json cfg = json::parse(test::read_file(d.path() + "/config.json"));
    cfg["architectures"] = {"GPT2LMHeadModel"};
    d.write("config.json", cfg.dump());
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("architecture GPT2LMHeadModel is not supported"), std::string::npos) << what;
  }
  {
    ScratchDir d("llama");
    json cfg = json::parse(test::read_file(d.path() + "/config.json"));
    cfg["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
    d.write("config.json", cfg.dump());
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("RoPE scaling 'yarn'"), std::string::npos) << what;
  }
  {
    ScratchDir d("phi2");
    json cfg = json::parse(test::read_file(d.path() + "/config.json"));
    cfg["num_key_value_heads"] = 2;
    d.write("config.json", cfg.dump());
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("PhiForCausalLM with num_key_value_heads"), std::string::npos) << what;
  }
  {
    ScratchDir d("llama");
    d.write("model.safetensors",
            st_image(R"({"model.layers.0.self_attn.rotary_proj.weight": {"dtype": "F32",
                        "shape": [1], "data_offsets": [0, 4]}})", 4));
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("tensor model.layers.0.self_attn.rotary_proj.weight has no GGUF name"),
              std::string::npos) << what;
  }
  {
    ScratchDir d("llama");
    d.write("model.safetensors",
            st_image(R"({"model.embed_tokens.weight": {"dtype": "I64", "shape": [1],
                        "data_offsets": [0, 8]}})", 8));
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("dtype I64"), std::string::npos) << what;
  }
}

// A safetensors image of `tensors` (their dtypes, shapes and bytes kept).
std::vector<uint8_t> st_rewrite(const std::vector<const StTensor*>& tensors) {
  json header = json::object();
  uint64_t at = 0;
  for (const StTensor* t : tensors) {
    header[t->name] = {{"dtype", t->dtype_name}, {"shape", t->shape}, {"data_offsets", {at, at + t->n_bytes}}};
    at += t->n_bytes;
  }
  std::vector<uint8_t> img = st_image(header.dump(), at);
  uint8_t* data = img.data() + img.size() - at;
  for (const StTensor* t : tensors) {
    std::memcpy(data, t->data, t->n_bytes);
    data += t->n_bytes;
  }
  return img;
}

// Tied embeddings (SmolLM2): no lm_head.weight in the checkpoint, and then
// no output.weight in the GGUF (llama.cpp's readers use token_embd.weight).
TEST(ConvertHfLayout, TiedEmbeddings) {
  ScratchDir d("llama");
  {
    const auto st = SafetensorsFile::open(d.path() + "/model.safetensors");
    std::vector<const StTensor*> keep;
    for (const auto& kv : st->tensors()) {
      if (kv.first != "lm_head.weight") keep.push_back(&kv.second);
    }
    d.write("model.safetensors", st_rewrite(keep));
  }
  json cfg = json::parse(test::read_file(d.path() + "/config.json"));
  cfg["tie_word_embeddings"] = true;
  d.write("config.json", cfg.dump());
  const auto f = convert(d.path());
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_NE(f->find_tensor("token_embd.weight"), nullptr);
  EXPECT_EQ(f->tensors().size(), gguf::File::open(test::source_path("tests/data/tiny/llama.gguf"))->tensors().size() - 1);
}

TEST(ConvertHfErrors, BadShardIndex) {
  std::string what;
  ScratchDir d("phi2");
  json index = json::parse(test::read_file(d.path() + "/model.safetensors.index.json"));
  index["weight_map"]["lm_head.weight"] = "../model-00001-of-00004.safetensors";
  d.write("model.safetensors.index.json", index.dump());
  EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(what.find("is not a file name"), std::string::npos) << what;
  index["weight_map"]["lm_head.weight"] = "model-00001-of-00004.safetensors";  // not there
  d.write("model.safetensors.index.json", index.dump());
  EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_MISSING);
  EXPECT_NE(what.find("lacks it"), std::string::npos) << what;
}

}  // namespace
}  // namespace lilims::models
