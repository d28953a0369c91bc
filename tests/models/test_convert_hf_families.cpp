// `lilims convert` on the tiny random Gemma 3, Qwen2, Qwen3, Llama 3 (rope_type
// "llama3"), Phi-2 and Phi-3 (Phi-4-mini layout) directories of
// tests/data/families/hf (transformers 5 save_pretrained; see
// tests/data/families/SOURCE.md), against what llama.cpp's own
// convert_hf_to_gguf.py made of the same directories (<name>.f16.gguf) and
// against HF transformers' float64 logits (goldens.json).
//
// Layout: every tensor the same name, shape, type and bytes.  The 2-D weights
// are F16 values in the checkpoint, so F16 storage is exact on both sides; the
// 1-D ones are F32 (Gemma's norms: 1 + w added in float32 on both sides).
// rope_freqs.weight is computed, not copied: lilims repeats llama.cpp's
// float32 operations, but its powf may differ from PyTorch's by an ulp, which
// moves a smoothed factor by about one ulp; the test allows 1 ulp there (it
// finds 0 here).  Metadata: every key either file has must have the same type
// and value in both, but for the keys in kIgnored (nothing in lilims reads
// them) and tokenizer.ggml.pre (see pre_equivalent).
//
// Logits: the F16 file run by the runtime (reference kernels, F32 KV cache)
// at the golden positions of an 80-token prompt.  F16 storage costs nothing
// here (the weights are F16 values), so lilims and transformers in float32
// compute from the same weights, each off the float64 goldens by float32
// roundings of the same ops in another order: transformers by
// fp32_max_abs_dev (3.8e-6 to 6.7e-6, goldens.json).  The tolerance is 4x
// that per family (lilims measures 0.8x to 1.4x of it); a wrong layout, norm
// offset, RoPE factor or window costs 1e-2 or more.  The argmax must agree
// where the golden top-2 margin exceeds twice the tolerance.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "models/convert_hf.h"
#include "models/safetensors.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* const kFamilies[] = {"gemma3", "qwen2", "qwen3", "llama3", "phi2", "phi3"};

std::string family_dir(const std::string& name) {
  return test::source_path("tests/data/families/hf/" + name);
}

const json& goldens() {
  static const json g =
      json::parse(test::read_file(test::source_path("tests/data/families/goldens.json")));
  return g;
}

// llama.cpp's F16 file of a family, kept open for the whole run.
const gguf::File& llamacpp_f16(const std::string& name) {
  static std::map<std::string, std::unique_ptr<gguf::File>> files;
  auto& f = files[name];
  if (!f) f = gguf::File::open(test::source_path("tests/data/families/" + name + ".f16.gguf"));
  return *f;
}

struct Converted {
  std::vector<uint8_t> image;
  std::unique_ptr<gguf::File> file;
  std::vector<std::string> notes;
};

// Converted under llama.cpp's general.name: the runtime reads the name (the
// Phi-3 vocabulary rule for strip flags), so it must not differ by accident.
Converted convert(const std::string& dir, const std::string& name,
                  quant::Type type = quant::Type::F16) {
  HfConvertOptions opt;
  opt.type = type;
  opt.name = name;
  Converted c;
  c.image = convert_hf_dir(dir, opt, &c.notes).to_bytes();
  c.file = gguf::File::from_bytes(c.image.data(), c.image.size());
  return c;
}

Converted convert_family(const std::string& name, quant::Type type = quant::Type::F16) {
  return convert(family_dir(name), llamacpp_f16(name).get_string("general.name"), type);
}

// Keys llama.cpp writes that lilims does not (or may write otherwise), with why
// that is harmless: nothing in lilims reads them.
const std::map<std::string, const char*> kIgnored = {
    {"general.type", "llama.cpp writes 'model'; lilims reads general.type only to tell LoRA "
                     "adapters ('adapter'), and an absent key is a model"},
    {"general.size_label", "a label for file names (\"107K\"), read by nothing"},
    {"tokenizer.ggml.add_sep_token", "lilims' tokenizer never adds a separator (no key read)"},
};


// tokenizer.ggml.pre: llama.cpp names a real model's tokenizer by hashing its
// output on a fixed text (the goldens' wrapper passed the real family's name,
// SOURCE.md); lilims names the split it recognises.  What the runtime takes
// from the key is the split and the settings that come with the name
// (tokenizer/pretokenize.h), so those must agree.
bool pre_equivalent(const std::string& a, const std::string& b) {
  tok::PreTokenizerSpec x, y;
  if (!tok::pre_tokenizer_from_name(a, &x) || !tok::pre_tokenizer_from_name(b, &y)) return a == b;
  return x.split == y.split && x.ignore_merges == y.ignore_merges && x.add_bos == y.add_bos;
}

std::string show(const gguf::Value& v) {
  switch (v.type) {
    case gguf::ValueType::STRING: return "'" + v.s + "'";
    case gguf::ValueType::FLOAT32:
    case gguf::ValueType::FLOAT64: return std::to_string(v.f);
    case gguf::ValueType::ARRAY: return "[" + std::to_string(v.size()) + " values]";
    default: return std::to_string(v.u) + " (type " + std::to_string(static_cast<int>(v.type)) + ")";
  }
}

// Same type and value, arrays element by element (floats bit for bit).
bool same_value(const gguf::Value& a, const gguf::Value& b, std::string* why) {
  if (a.type != b.type) {
    *why = "types " + std::to_string(static_cast<int>(a.type)) + " vs " +
           std::to_string(static_cast<int>(b.type));
    return false;
  }
  if (a.type != gguf::ValueType::ARRAY) {
    if (a.u == b.u && a.i == b.i && a.s == b.s &&
        std::memcmp(&a.f, &b.f, sizeof a.f) == 0) {
      return true;
    }
    *why = show(a) + " vs " + show(b);
    return false;
  }
  if (a.elem_type != b.elem_type || a.size() != b.size()) {
    *why = "arrays of " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " values";
    return false;
  }
  for (size_t k = 0; k < a.size(); ++k) {
    if (!same_value(a.at(k), b.at(k), why)) {
      *why = "element " + std::to_string(k) + ": " + *why;
      return false;
    }
  }
  return true;
}

void expect_same_metadata(const std::string& family, const gguf::File& got, const gguf::File& want) {
  std::set<std::string> keys;
  for (const gguf::KeyValue& kv : got.metadata()) keys.insert(kv.key);
  for (const gguf::KeyValue& kv : want.metadata()) keys.insert(kv.key);
  for (const std::string& k : keys) {
    if (kIgnored.count(k)) continue;
    const gguf::Value* g = got.find(k);
    const gguf::Value* w = want.find(k);
    if (!g || !w) {
      ADD_FAILURE() << family << ": " << k << " only in " << (g ? "lilims'" : "llama.cpp's") << " file";
      continue;
    }
    if (k == "tokenizer.ggml.pre") {
      EXPECT_TRUE(pre_equivalent(g->s, w->s)) << family << ": pre '" << g->s << "' vs '" << w->s << "'";
      continue;
    }
    std::string why;
    EXPECT_TRUE(same_value(*g, *w, &why)) << family << ": " << k << ": lilims vs llama.cpp " << why;
  }
}

int32_t ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return std::abs(x - y);  // both positive here
}

void expect_same_tensors(const std::string& family, const gguf::File& got, const gguf::File& want) {
  std::set<std::string> names;
  for (const gguf::TensorInfo& t : got.tensors()) names.insert(t.name);
  EXPECT_EQ(names.size(), want.tensors().size()) << family;
  for (const gguf::TensorInfo& w : want.tensors()) {
    const gguf::TensorInfo* g = got.find_tensor(w.name);
    if (!g) {
      ADD_FAILURE() << family << ": no tensor " << w.name;
      continue;
    }
    names.erase(w.name);
    EXPECT_EQ(g->ne, w.ne) << family << ": " << w.name;
    EXPECT_EQ(g->type, w.type) << family << ": " << w.name;
    if (g->n_bytes != w.n_bytes || g->type != w.type) continue;
    if (w.name == "rope_freqs.weight") {
      const float* a = reinterpret_cast<const float*>(g->data);
      const float* b = reinterpret_cast<const float*>(w.data);
      int32_t worst = 0;
      for (uint64_t k = 0; k < w.n_bytes / 4; ++k) worst = std::max(worst, ulps(a[k], b[k]));
      std::printf("[ %s ] rope_freqs.weight: %d ulp from llama.cpp's (tolerance 1)\n", family.c_str(), worst);
      EXPECT_LE(worst, 1) << family;
      continue;
    }
    EXPECT_EQ(std::memcmp(g->data, w.data, w.n_bytes), 0) << family << ": " << w.name << " differs";
  }
  for (const std::string& n : names) ADD_FAILURE() << family << ": extra tensor " << n;
}

TEST(ConvertHfFamilies, F16EqualsLlamaCppConverter) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const Converted c = convert_family(family);
    const gguf::File& want = llamacpp_f16(family);
    expect_same_metadata(family, *c.file, want);
    expect_same_tensors(family, *c.file, want);
  }
}

// The converted vocabulary encodes as HF's tokenizer does (Gemma 3's from the
// SentencePiece model: "Once" -> [441, 416], no dummy prefix).
TEST(ConvertHfFamilies, TokenizerIdsEqualTransformers) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const Converted c = convert_family(family);
    const auto tok = tok::Tokenizer::from_gguf(*c.file);
    const json& m = goldens()["models"][family];
    for (const json& t : m["tokenizer"]) {
      const std::string text = t["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false, true), t["ids"].get<std::vector<int32_t>>()) << text;
    }
    const std::vector<int32_t> prompt = m["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->add_bos(), m["bos_added"].get<bool>());
    if (m["bos_added"].get<bool>()) {
      EXPECT_EQ(prompt[0], tok->bos());
    }
  }
}

TEST(ConvertHfFamilies, F16LogitsMatchTransformersFloat64) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const Converted c = convert_family(family);
    const auto model = runtime::Model::open_memory(c.image.data(), c.image.size());
    const json& m = goldens()["models"][family];
    const double tol = 4 * m["fp32_max_abs_dev"].get<double>();
    runtime::SessionOptions so;
    so.mode = graph::ExecMode::ref;
    so.kv_type = quant::Type::F32;
    so.n_ctx = 128;  // phi3: past original_max_position_embeddings 32, the long factors as HF
    so.n_threads = 1;
    runtime::Session s(*model, so);
    const std::vector<int32_t> prompt = m["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<float> all;
    s.eval_all_logits(prompt, all);
    const size_t n_vocab = static_cast<size_t>(model->hparams().n_vocab);
    const std::vector<int> positions = m["positions"].get<std::vector<int>>();
    double worst = 0.0;
    for (size_t k = 0; k < positions.size(); ++k) {
      const json& want = m["logits"][k];
      ASSERT_EQ(want.size(), n_vocab);
      const float* got = &all[static_cast<size_t>(positions[k]) * n_vocab];
      size_t argmax = 0;
      for (size_t v = 0; v < n_vocab; ++v) {
        worst = std::max(worst, std::fabs(got[v] - want[v].get<double>()));
        if (got[v] > got[argmax]) argmax = v;
      }
      if (m["top2_margin"][k].get<double>() > 2 * tol) {
        EXPECT_EQ(static_cast<int>(argmax), m["argmax"][k].get<int>()) << "position " << positions[k];
      }
    }
    std::printf("[ %s F16 ] max |logit - HF float64| %.3g (HF float32: %.3g; tolerance %.3g)\n", family,
                worst, m["fp32_max_abs_dev"].get<double>(), tol);
    EXPECT_LE(worst, tol);
  }
}

// --- config.json spellings ---------------------------------------------------

// A scratch copy of a family directory to rewrite.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& family) {
    path_ = test::temp_path("hffam_" + family + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::copy(family_dir(family), path_, fs::copy_options::recursive);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  json config() const { return json::parse(test::read_file(path_ + "/config.json")); }
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

// The checkpoints on the Hub use transformers 4.x's keys; converted, they must
// give the very file the 5.x spellings give.
TEST(ConvertHfFamilies, Transformers4SpellingsGiveTheSameFile) {
  struct Case {
    const char* family;
    json v4;  // keys replacing rope_parameters / layer_types
  };
  const Case cases[] = {
      {"gemma3", {{"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0}, {"rope_scaling", nullptr},
                  {"sliding_window_pattern", 6}}},
      {"qwen2", {{"rope_theta", 1000000.0}, {"rope_scaling", nullptr}}},
      {"qwen3", {{"rope_theta", 1000000.0}}},
      {"llama3", {{"rope_theta", 500000.0},
                  {"rope_scaling", {{"factor", 8.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                                    {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.family);
    ScratchDir d(c.family);
    json cfg = d.config();
    cfg.erase("rope_parameters");
    cfg.erase("layer_types");
    cfg.erase("_sliding_window_pattern");
    for (const auto& kv : c.v4.items()) cfg[kv.key()] = kv.value();
    d.write("config.json", cfg.dump(2));
    const std::string name = llamacpp_f16(c.family).get_string("general.name");
    EXPECT_EQ(convert(d.path(), name).image, convert_family(c.family).image);
  }
}

// Gemma 3 4B and up: linear scaling of the global layers' positions (4.x
// rope_scaling, 5.x rope_parameters.full_attention), written as llama.cpp does.
TEST(ConvertHfFamilies, Gemma3LinearRopeScaling) {
  ScratchDir d("gemma3");
  json cfg = d.config();
  cfg["rope_parameters"]["full_attention"]["rope_type"] = "linear";
  cfg["rope_parameters"]["full_attention"]["factor"] = 8.0;
  d.write("config.json", cfg.dump());
  const Converted c = convert(d.path(), "Gemma3");
  EXPECT_EQ(c.file->get_string("gemma3.rope.scaling.type"), "linear");
  EXPECT_EQ(c.file->find("gemma3.rope.scaling.factor")->f, 8.0);
  EXPECT_EQ(c.file->find("gemma3.rope.freq_base_swa")->f, 10000.0);
}

// A layer pattern other than llama.cpp's default (every 6th layer global)
// needs the per-layer key; the default one writes none.
TEST(ConvertHfFamilies, Gemma3OtherLayerPattern) {
  ScratchDir d("gemma3");
  json cfg = d.config();
  cfg["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"};
  d.write("config.json", cfg.dump());
  const Converted c = convert(d.path(), "Gemma3");
  const gguf::Value* pat = c.file->find("gemma3.attention.sliding_window_pattern");
  ASSERT_TRUE(pat);
  ASSERT_EQ(pat->size(), 7u);
  for (size_t l = 0; l < 7; ++l) {
    EXPECT_EQ(pat->at(l).u != 0, cfg["layer_types"][l] == "sliding_attention") << l;
  }
  EXPECT_EQ(convert_family("gemma3").file->find("gemma3.attention.sliding_window_pattern"), nullptr);
}

// --- bad input ---------------------------------------------------------------

lilims_status convert_status(const std::string& dir, std::string* what) {
  try {
    convert_hf_dir(dir);
  } catch (const Error& e) {
    *what = e.what();
    return e.status();
  }
  *what = "";
  return LILIMS_OK;
}

// Each case: a family directory, an edit of its config.json, the status and
// the words the message must hold (the key it names).
TEST(ConvertHfFamilies, BadConfigRefusedNamingTheKey) {
  struct Case {
    const char* family;
    std::function<void(json&)> edit;
    lilims_status status;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {"llama3", [](json& c) { c["rope_parameters"]["rope_type"] = "dynamic"; }, LILIMS_ERR_UNSUPPORTED,
       {"rope_parameters.rope_type", "RoPE scaling 'dynamic'", "LlamaForCausalLM"}},
      {"gemma3",
       [](json& c) {
         c.erase("rope_parameters");
         c["rope_theta"] = 1e6;
         c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       LILIMS_ERR_UNSUPPORTED, {"rope_scaling.rope_type", "RoPE scaling 'yarn'"}},
      {"qwen2", [](json& c) { c["rope_parameters"]["rope_type"] = "llama3"; }, LILIMS_ERR_UNSUPPORTED,
       {"rope_parameters.rope_type", "'llama3'", "Qwen2ForCausalLM"}},
      {"gemma3", [](json& c) { c["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"; },
       LILIMS_ERR_UNSUPPORTED, {"rope_parameters.sliding_attention.rope_type"}},
      {"gemma3", [](json& c) { c["layer_types"].erase(6); }, LILIMS_ERR_BAD_FORMAT,
       {"layer_types has 6 entries", "num_hidden_layers is 7"}},
      {"qwen3", [](json& c) { c["layer_types"] = {"full_attention"}; }, LILIMS_ERR_BAD_FORMAT,
       {"layer_types has 1 entries", "num_hidden_layers is 2"}},
      {"gemma3", [](json& c) { c["layer_types"][2] = "chunked_attention"; }, LILIMS_ERR_UNSUPPORTED,
       {"layer_types entry 'chunked_attention'"}},
      {"qwen2", [](json& c) { c["layer_types"][1] = "sliding_attention"; }, LILIMS_ERR_UNSUPPORTED,
       {"sliding_attention", "Qwen2ForCausalLM"}},
      {"gemma3", [](json& c) { c["query_pre_attn_scalar"] = 168; }, LILIMS_ERR_UNSUPPORTED,
       {"query_pre_attn_scalar 168"}},
      {"gemma3", [](json& c) { c["attn_logit_softcapping"] = 50.0; }, LILIMS_ERR_UNSUPPORTED,
       {"attn_logit_softcapping"}},
      {"gemma3", [](json& c) { c["sliding_window"] = nullptr; }, LILIMS_ERR_MISSING, {"sliding_window"}},
  };
  for (const Case& c : cases) {
    ScratchDir d(c.family);
    json cfg = d.config();
    c.edit(cfg);
    d.write("config.json", cfg.dump());
    std::string what;
    EXPECT_EQ(convert_status(d.path(), &what), c.status) << c.family << ": " << what;
    for (const std::string& w : c.words) {
      EXPECT_NE(what.find(w), std::string::npos) << c.family << ": '" << w << "' not in: " << what;
    }
  }
}

// A safetensors image of the directory's tensors but `drop`.
std::vector<uint8_t> without_tensor(const std::string& dir, const std::string& drop) {
  const auto st = SafetensorsFile::open(dir + "/model.safetensors");
  json header = json::object();
  std::vector<const StTensor*> keep;
  uint64_t at = 0;
  for (const auto& kv : st->tensors()) {
    if (kv.first == drop) continue;
    keep.push_back(&kv.second);
    header[kv.first] = {{"dtype", kv.second.dtype_name}, {"shape", kv.second.shape},
                        {"data_offsets", {at, at + kv.second.n_bytes}}};
    at += kv.second.n_bytes;
  }
  EXPECT_EQ(keep.size() + 1, st->tensors().size()) << drop << " is not in the checkpoint";
  const std::string h = header.dump();
  std::vector<uint8_t> img(8 + h.size());
  for (int k = 0; k < 8; ++k) img[k] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * k));
  std::memcpy(img.data() + 8, h.data(), h.size());
  for (const StTensor* t : keep) img.insert(img.end(), t->data, t->data + t->n_bytes);
  return img;
}

TEST(ConvertHfFamilies, MissingTensorRefusedNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen3", "model.layers.1.self_attn.k_norm.weight"},
      {"gemma3", "model.layers.6.post_feedforward_layernorm.weight"},
      {"llama3", "model.norm.weight"},
      {"qwen2", "model.layers.0.mlp.down_proj.weight"},
  };
  for (const auto& c : cases) {
    ScratchDir d(c.first);
    d.write("model.safetensors", without_tensor(d.path(), c.second));
    std::string what;
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_MISSING) << what;
    EXPECT_NE(what.find(std::string("the checkpoint has no ") + c.second), std::string::npos) << what;
  }
}

// tokenizer.model is read as hostile protobuf: a cut file or a piece whose
// length runs past its message is refused with the offset, not read past.
TEST(ConvertHfFamilies, CorruptSentencePieceModelRefused) {
  const std::string model = test::read_file(family_dir("gemma3") + "/tokenizer.model");
  ASSERT_EQ(model.substr(0, 2), std::string("\x0a\x0e", 2));  // pieces: field 1, 14 bytes
  // The first piece's length as a varint past the end of the file.
  std::string long_piece("\x0a");
  for (uint64_t n = model.size() + 100; ; n >>= 7) {
    long_piece += static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
    if (n < 0x80) break;
  }
  long_piece += model.substr(2);
  const std::string cases[] = {model.substr(0, model.size() - 3), long_piece, std::string("\x0a")};
  for (const std::string& bytes : cases) {
    ScratchDir d("gemma3");
    d.write("tokenizer.model", bytes);
    std::string what;
    EXPECT_EQ(convert_status(d.path(), &what), LILIMS_ERR_BAD_FORMAT) << what;
    EXPECT_NE(what.find("tokenizer.model: "), std::string::npos) << what;
    EXPECT_NE(what.find("not a SentencePiece model"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lilims::models
