// PEFT LoRA adapters to llama.cpp's GGUF LoRA (models/convert_peft.h), on
// adapters PEFT itself wrote for the tiny models (tests/data/peft, from
// scripts/goldens/gen_peft_adapters.py) converted against their bases
// (tests/data/tiny/*.gguf): the metadata, every tensor's name, shape and
// value against the safetensors (with a name table and the llama Q/K row
// order written out here, not taken from the converter), and the adapters
// the format cannot hold (broken copies made here) against clear errors.
// The logits the adapters give (tests/data/peft/goldens.json) are for the
// runtime's tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/fp16.h"
#include "models/convert_peft.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace lilims::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string peft_dir(const std::string& name) {
  return test::source_path("tests/data/peft/" + name);
}
std::string tiny(const std::string& arch) {
  return test::source_path("tests/data/tiny/" + arch + ".gguf");
}

std::unique_ptr<gguf::File> convert(const std::string& dir, const std::string& base,
                                    quant::Type type = quant::Type::F32,
                                    std::vector<std::string>* notes = nullptr,
                                    const std::string& name = "") {
  PeftConvertOptions opt;
  opt.type = type;
  opt.name = name;
  const std::vector<uint8_t> image = convert_peft_dir(dir, base, opt, notes).to_bytes();
  return gguf::File::from_bytes(image.data(), image.size());
}

lilims_status convert_status(const std::string& dir, const std::string& base, std::string* what,
                             quant::Type type = quant::Type::F32) {
  try {
    PeftConvertOptions opt;
    opt.type = type;
    convert_peft_dir(dir, base, opt);
  } catch (const Error& e) {
    *what = e.what();
    return e.status();
  }
  *what = "";
  return LILIMS_OK;
}

// The GGUF weight a PEFT module adapts, by llama.cpp's names (written out
// here as a second table, so that a slip in convert_hf's shows).
std::string gguf_weight(const std::string& arch, const std::string& module) {
  static const std::map<std::string, std::map<std::string, std::string>> kLayer = {
      {"llama",
       {{"self_attn.q_proj", "attn_q"},
        {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},
        {"self_attn.o_proj", "attn_output"},
        {"mlp.gate_proj", "ffn_gate"},
        {"mlp.up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}}},
      {"phi3",
       {{"self_attn.qkv_proj", "attn_qkv"},
        {"self_attn.o_proj", "attn_output"},
        {"mlp.gate_up_proj", "ffn_up"},
        {"mlp.down_proj", "ffn_down"}}},
  };
  if (module == "model.embed_tokens") return "token_embd.weight";
  if (module == "lm_head") return "output.weight";
  const std::string prefix = "model.layers.";
  EXPECT_EQ(module.compare(0, prefix.size(), prefix), 0) << module;
  const size_t dot = module.find('.', prefix.size());
  const std::string block = module.substr(prefix.size(), dot - prefix.size());
  const auto& table = kLayer.at(arch);
  const auto it = table.find(module.substr(dot + 1));
  EXPECT_NE(it, table.end()) << module;
  return it == table.end() ? "" : "blk." + block + "." + it->second + ".weight";
}

// One PEFT tensor: its module, whether it is A, whether it is PEFT's
// embedding pair.  False for what is not a LoRA factor.
bool parse_key(const std::string& key, std::string* module, bool* is_a, bool* embedding) {
  std::string k = key;
  if (k.compare(0, 17, "base_model.model.") == 0) k = k.substr(17);
  for (const char* s :
       {".lora_A.weight", ".lora_B.weight", ".lora_embedding_A", ".lora_embedding_B"}) {
    const size_t n = std::strlen(s);
    if (k.size() > n && k.compare(k.size() - n, n, s) == 0) {
      *module = k.substr(0, k.size() - n);
      *is_a = std::strstr(s, "_A") != nullptr;
      *embedding = std::strstr(s, "embedding") != nullptr;
      return true;
    }
  }
  return false;
}

// llama's q/k rows for its RoPE: GGUF row 2i of a head = HF row i, row 2i + 1
// = HF row i + d/2 (d = 16, the tiny llama's head size).
std::vector<float> rope_rows(const std::vector<float>& w, size_t rows, size_t cols) {
  const size_t d = 16, half = d / 2;
  std::vector<float> out(w.size());
  for (size_t r = 0; r < rows; ++r) {
    const size_t head = r / d, i = r % d;
    const size_t src = head * d + (i % 2 == 0 ? i / 2 : i / 2 + half);
    std::memcpy(&out[r * cols], &w[src * cols], cols * sizeof(float));
  }
  return out;
}

// Every LoRA tensor of the adapter is in `got` under its GGUF name, with
// llama.cpp's shape and PEFT's values (bit for bit in F32; F16 rounded to
// nearest even), and fits the base weight as llama.cpp's loader checks.
void expect_adapter_tensors(const gguf::File& got, const std::string& dir, const std::string& arch,
                            quant::Type type) {
  const auto st = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  const auto base = gguf::File::open(tiny(arch));
  size_t n_lora = 0;
  for (const auto& kv : st->tensors()) {
    std::string module;
    bool is_a = false, embedding = false;
    if (!parse_key(kv.first, &module, &is_a, &embedding)) {
      EXPECT_NE(kv.first.find(".base_layer.weight"), std::string::npos) << kv.first;
      continue;
    }
    ++n_lora;
    const StTensor& t = kv.second;
    const std::string weight = gguf_weight(arch, module);
    const std::string name = weight + (is_a ? ".lora_a" : ".lora_b");
    SCOPED_TRACE(kv.first + " -> " + name);
    const gguf::TensorInfo* g = got.find_tensor(name);
    ASSERT_TRUE(g) << "missing " << name;
    EXPECT_EQ(g->type, static_cast<uint32_t>(type));
    const uint64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> want = st_to_f32(t);
    if (embedding && is_a) {  // (r, vocab) -> (vocab, r): llama.cpp gathers rows by token
      std::vector<float> tr(want.size());
      for (uint64_t i = 0; i < rows; ++i) {
        for (uint64_t j = 0; j < cols; ++j) tr[j * rows + i] = want[i * cols + j];
      }
      want.swap(tr);
      EXPECT_EQ(g->ne, (std::vector<uint64_t>{rows, cols}));
    } else {
      EXPECT_EQ(g->ne, (std::vector<uint64_t>{cols, rows}));
    }
    if (!is_a && arch == "llama" &&
        (module.find("self_attn.q_proj") != std::string::npos ||
         module.find("self_attn.k_proj") != std::string::npos)) {
      want = rope_rows(want, rows, cols);
    }
    ASSERT_EQ(g->n_elements, want.size());
    if (type == quant::Type::F32) {
      EXPECT_EQ(std::memcmp(g->data, want.data(), g->n_bytes), 0) << name << " differs";
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(g->data);
      size_t bad = 0;
      for (size_t k = 0; k < want.size(); ++k) bad += h[k] != fp32_to_fp16(want[k]);
      EXPECT_EQ(bad, 0u) << name;
    }
    // llama.cpp's loader: lora_a ne[0] = the weight's ne[0] and lora_b
    // ne[1] = its ne[1]; for token_embd, lora_b ne[1] = ne[0] and lora_a
    // ne[1] = ne[1].
    const gguf::TensorInfo* w = base->find_tensor(weight);
    ASSERT_TRUE(w) << weight;
    const gguf::TensorInfo* ga = got.find_tensor(weight + ".lora_a");
    const gguf::TensorInfo* gb = got.find_tensor(weight + ".lora_b");
    ASSERT_TRUE(ga && gb) << weight;
    if (embedding) {
      EXPECT_EQ(gb->ne[1], w->ne[0]);
      EXPECT_EQ(ga->ne[1], w->ne[1]);
      EXPECT_EQ(ga->ne[0], gb->ne[0]);
    } else {
      EXPECT_EQ(ga->ne[0], w->ne[0]);
      EXPECT_EQ(gb->ne[1], w->ne[1]);
      EXPECT_EQ(ga->ne[1], gb->ne[0]);
    }
  }
  EXPECT_GT(n_lora, 0u);
  EXPECT_EQ(got.tensors().size(), n_lora);
}

void expect_metadata(const gguf::File& got, const std::string& arch, const std::string& name,
                     float alpha) {
  EXPECT_EQ(got.metadata().size(), 5u);
  EXPECT_EQ(got.get_string("general.architecture"), arch);
  EXPECT_EQ(got.get_string("general.type"), "adapter");
  EXPECT_EQ(got.get_string("general.name"), name);
  EXPECT_EQ(got.get_string("adapter.type"), "lora");
  const gguf::Value* a = got.find("adapter.lora.alpha");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->type, gguf::ValueType::FLOAT32);
  EXPECT_EQ(a->f, alpha);
}

TEST(ConvertPeftLayout, Llama) {
  std::vector<std::string> notes;
  const auto got = convert(peft_dir("llama"), tiny("llama"), quant::Type::F32, &notes);
  expect_metadata(*got, "llama", "llama", 8.0f);
  expect_adapter_tensors(*got, peft_dir("llama"), "llama", quant::Type::F32);
  EXPECT_EQ(got->tensors().size(), 2u * 7u * 2u);  // 2 blocks x 7 projections x (A, B)
  EXPECT_TRUE(notes.empty());
  // In the base's tensor order, A before B.
  EXPECT_EQ(got->tensors()[0].name, "blk.0.attn_q.weight.lora_a");
  EXPECT_EQ(got->tensors()[1].name, "blk.0.attn_q.weight.lora_b");
}

TEST(ConvertPeftLayout, Phi3FusedProjections) {
  const auto got = convert(peft_dir("phi3"), tiny("phi3"));
  expect_metadata(*got, "phi3", "phi3", 8.0f);
  expect_adapter_tensors(*got, peft_dir("phi3"), "phi3", quant::Type::F32);
  EXPECT_EQ(got->find_tensor("blk.1.attn_qkv.weight.lora_b")->ne, (std::vector<uint64_t>{4, 128}));
  EXPECT_EQ(got->find_tensor("blk.1.ffn_up.weight.lora_b")->ne, (std::vector<uint64_t>{4, 256}));
}

TEST(ConvertPeftLayout, F16AndName) {
  const auto got = convert(peft_dir("phi3"), tiny("phi3"), quant::Type::F16, nullptr, "my-adapter");
  expect_metadata(*got, "phi3", "my-adapter", 8.0f);
  expect_adapter_tensors(*got, peft_dir("phi3"), "phi3", quant::Type::F16);
  const auto got_llama = convert(peft_dir("llama"), tiny("llama"), quant::Type::F16);
  expect_adapter_tensors(*got_llama, peft_dir("llama"), "llama", quant::Type::F16);
}

// PEFT's Embedding LoRA, written as llama.cpp's converter writes
// token_embd; the full embedding and head PEFT saved beside (its
// save_embedding_layers default) are left out, with a note.
TEST(ConvertPeftLayout, EmbeddingAndHead) {
  std::vector<std::string> notes;
  const auto got = convert(peft_dir("llama_embed"), tiny("llama"), quant::Type::F32, &notes);
  expect_metadata(*got, "llama", "llama_embed", 8.0f);
  expect_adapter_tensors(*got, peft_dir("llama_embed"), "llama", quant::Type::F32);
  EXPECT_EQ(got->find_tensor("token_embd.weight.lora_a")->ne, (std::vector<uint64_t>{4, 512}));
  EXPECT_EQ(got->find_tensor("token_embd.weight.lora_b")->ne, (std::vector<uint64_t>{4, 64}));
  EXPECT_EQ(got->find_tensor("output.weight.lora_a")->ne, (std::vector<uint64_t>{64, 4}));
  EXPECT_EQ(got->find_tensor("output.weight.lora_b")->ne, (std::vector<uint64_t>{4, 512}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("skipped 2 full weight(s)"), std::string::npos) << notes[0];
}

// The golden logits the runtime's tests read: one case per adapter (phi3:
// short and long RoPE factors), 512 logits with and without the adapter.
TEST(ConvertPeftLayout, GoldensDescribeTheAdapters) {
  const json g = json::parse(test::read_file(peft_dir("goldens.json")));
  EXPECT_EQ(g["token_ids"].size(), 7u);
  for (const char* name : {"llama", "phi3", "llama_embed"}) {
    const json& a = g["adapters"][name];
    EXPECT_TRUE(test::file_exists(test::source_path(a["base_gguf"].get<std::string>()))) << name;
    EXPECT_EQ(a["scale"].get<double>(), 2.0);
    for (const json& c : a["cases"]) {
      EXPECT_EQ(c["logits"][0].size(), 512u) << name;
      EXPECT_EQ(c["base_logits"][0].size(), 512u) << name;
      EXPECT_GT(c["lora_max_abs_effect"].get<double>(), 0.5) << name;
    }
  }
}

// --- copies to break ---------------------------------------------------------

// A safetensors file as editable entries.
struct StEntry {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};
using StMap = std::map<std::string, StEntry>;

StMap st_read(const std::string& path) {
  StMap out;
  const auto st = SafetensorsFile::open(path);
  for (const auto& kv : st->tensors()) {
    const StTensor& t = kv.second;
    out[kv.first] = {t.dtype_name, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes)};
  }
  return out;
}

void st_write(const std::string& path, const StMap& m) {
  json header = json::object();
  uint64_t at = 0;
  for (const auto& kv : m) {
    header[kv.first] = {{"dtype", kv.second.dtype},
                        {"shape", kv.second.shape},
                        {"data_offsets", {at, at + kv.second.bytes.size()}}};
    at += kv.second.bytes.size();
  }
  const std::string h = header.dump();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint8_t len[8];
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * k));
  f.write(reinterpret_cast<const char*>(len), 8);
  f << h;
  for (const auto& kv : m) {
    f.write(reinterpret_cast<const char*>(kv.second.bytes.data()),
            static_cast<std::streamsize>(kv.second.bytes.size()));
  }
}

StEntry f32_entry(std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return {"F32", shape, std::vector<uint8_t>(n * 4, 0)};
}

// A scratch copy of a tests/data/peft directory.
class ScratchAdapter {
 public:
  explicit ScratchAdapter(const std::string& name) {
    path_ = test::temp_path("peft_" + name + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::copy(peft_dir(name), path_, fs::copy_options::recursive);
  }
  ~ScratchAdapter() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  json config() const { return json::parse(test::read_file(path_ + "/adapter_config.json")); }
  void set_config(const json& j) const {
    std::ofstream(path_ + "/adapter_config.json") << j.dump(2);
  }
  void edit_config(const std::function<void(json&)>& f) const {
    json j = config();
    f(j);
    set_config(j);
  }
  StMap tensors() const { return st_read(path_ + "/adapter_model.safetensors"); }
  void set_tensors(const StMap& m) const { st_write(path_ + "/adapter_model.safetensors", m); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

const char kQA[] = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
const char kQB[] = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";

// Keys without "base_model.model." and with the adapter's name
// (lora_A.default.weight, as some PEFT versions save), and fan_in_fan_out
// (which leaves PEFT's A and B as they are): the same file.
TEST(ConvertPeftLayout, KeySpellingsAndFanInFanOut) {
  const auto want = convert(peft_dir("llama"), tiny("llama"));
  ScratchAdapter d("llama");
  StMap renamed;
  for (auto& kv : d.tensors()) {
    std::string k = kv.first.substr(std::strlen("base_model.model."));
    const size_t w = k.rfind(".weight");
    renamed[k.substr(0, w) + ".default.weight"] = kv.second;
  }
  d.set_tensors(renamed);
  d.edit_config([](json& j) { j["fan_in_fan_out"] = true; });
  const auto got = convert(d.path(), tiny("llama"));
  ASSERT_EQ(got->tensors().size(), want->tensors().size());
  for (const gguf::TensorInfo& t : want->tensors()) {
    const gguf::TensorInfo* g = got->find_tensor(t.name);
    ASSERT_TRUE(g) << t.name;
    EXPECT_EQ(g->ne, t.ne);
    EXPECT_EQ(std::memcmp(g->data, t.data, t.n_bytes), 0) << t.name;
  }
}

// One alpha for the file: rank_pattern that agrees with the tensors, an
// alpha_pattern that covers every module and use_rslora (one rank) convert,
// with the alpha that gives PEFT's scale; per-module scales do not.
TEST(ConvertPeftScale, OneAlphaForTheFile) {
  std::string what;
  std::vector<std::string> notes;
  {
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["rank_pattern"] = {{"q_proj", 4}}; });
    expect_metadata(*convert(d.path(), tiny("llama")), "llama",
                    fs::path(d.path()).filename().string(), 8.0f);
  }
  {
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["alpha_pattern"] = {{".*_proj", 16}}; });
    expect_metadata(*convert(d.path(), tiny("llama"), quant::Type::F32, &notes), "llama",
                    fs::path(d.path()).filename().string(), 16.0f);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("adapter.lora.alpha = 16, not lora_alpha 8"), std::string::npos)
        << notes[0];
  }
  {
    ScratchAdapter d("phi3");
    d.edit_config([](json& j) { j["use_rslora"] = true; });
    notes.clear();
    // PEFT's scale 8 / sqrt(4) = 4 = alpha / r with alpha 16.
    expect_metadata(*convert(d.path(), tiny("phi3"), quant::Type::F32, &notes), "phi3",
                    fs::path(d.path()).filename().string(), 16.0f);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("use_rslora"), std::string::npos) << notes[0];
  }
  {
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["alpha_pattern"] = {{"q_proj", 16}}; });
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("per-module scales"), std::string::npos) << what;
    EXPECT_NE(what.find("self_attn.q_proj needs 16"), std::string::npos) << what;
  }
  {
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["rank_pattern"] = {{"model.layers.1.mlp.up_proj", 8}}; });
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_BAD_FORMAT);
    EXPECT_NE(
        what.find("module model.layers.1.mlp.up_proj has rank 4 but adapter_config.json gives it "
                  "r = 8 (rank_pattern)"),
        std::string::npos)
        << what;
  }
  {
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["lora_alpha"] = 0; });
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(what.find("the adapter's alpha is 0"), std::string::npos) << what;
  }
}

// --rank K: each module's product (PEFT's scale included) against the
// adapter's own, rebuilt here from the safetensors in double.  At K = r the
// products come back to float rounding (1e-5 of the largest entry); below r
// the kept part must be the best rank-K one, whose residual is orthogonal to
// it: |P|^2 = |P'|^2 + |P - P'|^2 (to 1e-4 relative: float factors), and
// a rank-K product (the tensors' shapes say K).
struct Products {
  std::map<std::string, std::vector<double>> by_weight;  // row-major n_out x n_in
  std::map<std::string, size_t> cols;
};

Products peft_products(const std::string& dir, const std::string& arch, const std::map<std::string, double>& scale) {
  Products out;
  const auto st = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  std::map<std::string, std::pair<const StTensor*, const StTensor*>> pairs;
  std::map<std::string, bool> emb;
  for (const auto& kv : st->tensors()) {
    std::string module;
    bool is_a = false, embedding = false;
    if (!parse_key(kv.first, &module, &is_a, &embedding)) continue;
    (is_a ? pairs[module].first : pairs[module].second) = &kv.second;
    emb[module] = embedding;
  }
  for (const auto& kv : pairs) {
    const std::string& module = kv.first;
    std::vector<float> a = st_to_f32(*kv.second.first), b = st_to_f32(*kv.second.second);
    const size_t r = kv.second.first->shape[0], n_in = kv.second.first->shape[1], n_out = kv.second.second->shape[0];
    if (arch == "llama" && (module.find("q_proj") != std::string::npos || module.find("k_proj") != std::string::npos)) {
      b = rope_rows(b, n_out, r);
    }
    double sc = 0.0;
    for (const auto& p : scale) {
      if (module.find(p.first) != std::string::npos) sc = p.second;
    }
    EXPECT_NE(sc, 0.0) << module;
    std::vector<double> w(n_out * n_in, 0.0);
    for (size_t o = 0; o < n_out; ++o) {
      for (size_t j = 0; j < r; ++j) {
        for (size_t n = 0; n < n_in; ++n) w[o * n_in + n] += sc * (double)b[o * r + j] * a[j * n_in + n];
      }
    }
    const std::string weight = gguf_weight(arch, module);
    out.by_weight[weight] = std::move(w);
    out.cols[weight] = n_in;
  }
  return out;
}

// The products a converted adapter gives, alpha / rank included.
Products gguf_products(const gguf::File& f, size_t want_rank) {
  Products out;
  const float alpha = f.find("adapter.lora.alpha")->f;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const size_t at = t.name.rfind(".lora_a");
    if (at == std::string::npos) continue;
    const std::string weight = t.name.substr(0, at);
    const gguf::TensorInfo* tb = f.find_tensor(weight + ".lora_b");
    EXPECT_TRUE(tb) << weight;
    if (!tb) continue;
    const float* a = reinterpret_cast<const float*>(t.data);
    const float* b = reinterpret_cast<const float*>(tb->data);
    const bool embedding = weight == "token_embd.weight";
    // lora_b ne [k, n_out]; lora_a ne [n_in, k], or for the embedding [k, vocab] (vocab rows of k).
    const size_t k = tb->ne[0], n_out = tb->ne[1], n_in = embedding ? t.ne[1] : t.ne[0];
    EXPECT_EQ(k, want_rank) << weight;
    EXPECT_EQ(embedding ? t.ne[0] : t.ne[1], k) << weight;
    std::vector<double> w(n_out * n_in, 0.0);
    for (size_t o = 0; o < n_out; ++o) {
      for (size_t j = 0; j < k; ++j) {
        for (size_t n = 0; n < n_in; ++n) {
          const double av = embedding ? a[n * k + j] : a[j * n_in + n];
          w[o * n_in + n] += (double)alpha / (double)k * b[o * k + j] * av;
        }
      }
    }
    out.by_weight[weight] = std::move(w);
  }
  return out;
}

std::unique_ptr<gguf::File> convert_rank(const std::string& dir, const std::string& base, int64_t rank,
                                         std::vector<std::string>* notes) {
  PeftConvertOptions opt;
  opt.rank = rank;
  const std::vector<uint8_t> image = convert_peft_dir(dir, base, opt, notes).to_bytes();
  return gguf::File::from_bytes(image.data(), image.size());
}

void expect_rank_cut(const Products& full, const Products& cut, bool exact) {
  ASSERT_EQ(full.by_weight.size(), cut.by_weight.size());
  for (const auto& kv : full.by_weight) {
    SCOPED_TRACE(kv.first);
    const auto it = cut.by_weight.find(kv.first);
    ASSERT_NE(it, cut.by_weight.end());
    const std::vector<double>& p = kv.second;
    const std::vector<double>& q = it->second;
    ASSERT_EQ(p.size(), q.size());
    double np = 0.0, nq = 0.0, nd = 0.0, peak = 0.0, worst = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      np += p[i] * p[i];
      nq += q[i] * q[i];
      nd += (p[i] - q[i]) * (p[i] - q[i]);
      peak = std::max(peak, std::fabs(p[i]));
      worst = std::max(worst, std::fabs(p[i] - q[i]));
    }
    if (exact) {
      EXPECT_LE(worst, 1e-5 * peak);
    } else {
      EXPECT_NEAR(nq + nd, np, 1e-4 * np);
      EXPECT_GT(nd, 1e-6 * np);  // the tiny adapters' random factors have full rank: something is cut
    }
  }
}

TEST(ConvertPeftRank, BestLowRankProducts) {
  // The tiny adapters are rank 4, lora_alpha 8: scale 2.
  std::vector<std::string> notes;
  for (const char* name : {"llama", "llama_embed"}) {
    SCOPED_TRACE(name);
    const Products full = peft_products(peft_dir(name), "llama", {{"", 2.0}});
    notes.clear();
    const auto same = convert_rank(peft_dir(name), tiny("llama"), 4, &notes);
    EXPECT_EQ(same->find("adapter.lora.alpha")->f, 4.0f);
    expect_rank_cut(full, gguf_products(*same, 4), true);
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.back().find("keeping of its squared norm 100.00% on average"), std::string::npos) << notes.back();
    notes.clear();
    const auto cut = convert_rank(peft_dir(name), tiny("llama"), 2, &notes);
    EXPECT_EQ(cut->find("adapter.lora.alpha")->f, 2.0f);
    expect_rank_cut(full, gguf_products(*cut, 2), false);
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes.back().find("rank 2: each product B A cut to its best rank-2 approximation"), std::string::npos)
        << notes.back();
  }
  const Products phi3 = peft_products(peft_dir("phi3"), "phi3", {{"", 2.0}});
  expect_rank_cut(phi3, gguf_products(*convert_rank(peft_dir("phi3"), tiny("phi3"), 4, nullptr), 4), true);
  expect_rank_cut(phi3, gguf_products(*convert_rank(peft_dir("phi3"), tiny("phi3"), 3, nullptr), 3), false);

  // Per-module scales one alpha cannot give convert with --rank: the scale is in B.
  ScratchAdapter d("llama");
  d.edit_config([](json& j) { j["alpha_pattern"] = {{"q_proj", 16}}; });
  const Products mixed = peft_products(d.path(), "llama", {{"", 2.0}, {"q_proj", 4.0}});
  expect_rank_cut(mixed, gguf_products(*convert_rank(d.path(), tiny("llama"), 4, nullptr), 4), true);

  // A rank above the adapter's.
  std::string what;
  try {
    convert_rank(peft_dir("llama"), tiny("llama"), 5, nullptr);
  } catch (const Error& e) {
    what = e.what();
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
  }
  EXPECT_NE(what.find("--rank 5 is more than module model.layers."), std::string::npos) << what;
  EXPECT_NE(what.find("'s rank 4"), std::string::npos) << what;
}

TEST(ConvertPeftErrors, Config) {
  struct Case {
    std::function<void(json&)> edit;
    lilims_status status;
    const char* message;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["use_dora"] = true; }, LILIMS_ERR_UNSUPPORTED,
       "adapter_config.json sets use_dora = true"},
      {[](json& j) { j["modules_to_save"] = {"lm_head"}; }, LILIMS_ERR_UNSUPPORTED,
       "sets modules_to_save = [\"lm_head\"]"},
      {[](json& j) { j["lora_bias"] = true; }, LILIMS_ERR_UNSUPPORTED, "sets lora_bias"},
      {[](json& j) { j["alora_invocation_tokens"] = {5, 6}; }, LILIMS_ERR_UNSUPPORTED,
       "alora_invocation_tokens"},
      {[](json& j) { j["init_lora_weights"] = "pissa_niter_4"; }, LILIMS_ERR_UNSUPPORTED,
       "changed the base weights"},
      {[](json& j) { j["peft_type"] = "IA3"; }, LILIMS_ERR_UNSUPPORTED, "peft_type is \"IA3\""},
      {[](json& j) { j.erase("peft_type"); }, LILIMS_ERR_MISSING,
       "adapter_config.json has no peft_type"},
      {[](json& j) { j.erase("r"); }, LILIMS_ERR_MISSING, "adapter_config.json has no r"},
      {[](json& j) { j.erase("lora_alpha"); }, LILIMS_ERR_MISSING,
       "adapter_config.json has no lora_alpha"},
      {[](json& j) { j["r"] = "4"; }, LILIMS_ERR_BAD_FORMAT,
       "r = \"4\", expected a positive integer"},
      {[](json& j) { j["alpha_pattern"] = {{"q_proj(", 16}}; }, LILIMS_ERR_BAD_FORMAT,
       "alpha_pattern key \"q_proj(\" is not a regular expression"},
      // Inert settings: a bias mode with no bias tensors, VeLoRA (its own
      // backward pass only), null variants.
      {[](json& j) {
         j["bias"] = "all";
         j["velora_config"] = {{"rank", 2}};
         j["use_dora"] = nullptr;
       },
       LILIMS_OK, ""},
  };
  for (const Case& c : cases) {
    ScratchAdapter d("llama");
    d.edit_config(c.edit);
    std::string what;
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), c.status)
        << c.message << ": " << what;
    EXPECT_NE(what.find(c.message), std::string::npos) << what;
  }
  std::string what;
  ScratchAdapter d("llama");
  std::ofstream(d.path() + "/adapter_config.json") << "{\"peft_type\": \"LORA\", ";
  EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(what.find("adapter_config.json is not JSON"), std::string::npos) << what;
  fs::remove(d.path() + "/adapter_config.json");
  EXPECT_FALSE(is_peft_dir(d.path()));
  EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_MISSING);
  EXPECT_NE(what.find("has no adapter_config.json (not a PEFT adapter directory)"),
            std::string::npos)
      << what;
  EXPECT_TRUE(is_peft_dir(peft_dir("llama")));
}

TEST(ConvertPeftErrors, Tensors) {
  struct Case {
    std::function<void(StMap&)> edit;
    lilims_status status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](StMap& m) { m.erase(kQB); }, LILIMS_ERR_MISSING,
       std::string("tensor ") + kQA +
           " has no lora_B beside it (module model.layers.0.self_attn.q_proj)"},
      {[](StMap& m) { m.erase(kQA); }, LILIMS_ERR_MISSING, "has no lora_A beside it"},
      {[](StMap& m) { m[kQB] = f32_entry({64, 3}); }, LILIMS_ERR_BAD_FORMAT,
       "lora_A (4, 64) has rank 4 but lora_B (64, 3) has rank 3"},
      {[](StMap& m) { m[kQA] = f32_entry({4, 32}); }, LILIMS_ERR_INVALID_ARGUMENT,
       "lora_A (4, 32) and lora_B (64, 4) do not fit"},
      {[](StMap& m) { m[kQA] = f32_entry({4, 8, 8}); }, LILIMS_ERR_BAD_FORMAT,
       "expected a non-empty matrix"},
      {[](StMap& m) { m["base_model.model.lm_head.weight"] = f32_entry({512, 64}); },
       LILIMS_ERR_UNSUPPORTED, "tensor base_model.model.lm_head.weight is not a LoRA factor"},
      {[](StMap& m) {
         m["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"] =
             f32_entry({64});
       },
       LILIMS_ERR_UNSUPPORTED, "is a DoRA magnitude"},
      {[](StMap& m) {
         m["base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias"] = f32_entry({64});
       },
       LILIMS_ERR_UNSUPPORTED, "lora_B has a bias"},
      {[](StMap& m) {
         m["base_model.model.model.layers.0.self_attn.rotary_proj.lora_A.weight"] =
             f32_entry({4, 64});
         m["base_model.model.model.layers.0.self_attn.rotary_proj.lora_B.weight"] =
             f32_entry({64, 4});
       },
       LILIMS_ERR_UNSUPPORTED,
       "module model.layers.0.self_attn.rotary_proj has no GGUF name for architecture llama"},
      {[](StMap& m) {  // a block the 2-block base does not have
         m["base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"] = f32_entry({4, 64});
         m["base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight"] = f32_entry({64, 4});
       },
       LILIMS_ERR_INVALID_ARGUMENT, "which is blk.7.attn_q.weight in GGUF, but"},
      {[](StMap& m) {
         m["base_model.model.model.layers.0.self_attn.q_proj.lora_A.other.weight"] = m[kQA];
       },
       LILIMS_ERR_BAD_FORMAT, "holds the tensors of two adapters"},
      {[](StMap& m) { m.clear(); }, LILIMS_ERR_MISSING, "holds no LoRA tensors"},
  };
  for (const Case& c : cases) {
    ScratchAdapter d("llama");
    StMap m = d.tensors();
    c.edit(m);
    d.set_tensors(m);
    std::string what;
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), c.status)
        << c.message << ": " << what;
    EXPECT_NE(what.find(c.message), std::string::npos) << what;
  }
  {  // bias tensors with bias = "all": the base's biases were trained
    ScratchAdapter d("llama");
    d.edit_config([](json& j) { j["bias"] = "all"; });
    StMap m = d.tensors();
    m["base_model.model.model.layers.0.self_attn.q_proj.bias"] = f32_entry({64});
    d.set_tensors(m);
    std::string what;
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_UNSUPPORTED) << what;
    EXPECT_NE(what.find("trains biases (adapter_config.json bias = \"all\")"), std::string::npos)
        << what;
  }
  {  // the full embedding PEFT saves must be the base's shape (no resized vocabulary)
    ScratchAdapter d("llama_embed");
    StMap m = d.tensors();
    m["base_model.model.model.embed_tokens.base_layer.weight"] = f32_entry({520, 64});
    d.set_tensors(m);
    std::string what;
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_INVALID_ARGUMENT) << what;
    EXPECT_NE(what.find("(520, 64) is not the shape of"), std::string::npos) << what;
  }
  {
    ScratchAdapter d("llama");
    fs::rename(d.path() + "/adapter_model.safetensors", d.path() + "/adapter_model.bin");
    std::string what;
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_UNSUPPORTED) << what;
    EXPECT_NE(what.find("adapter_model.bin, a PyTorch pickle"), std::string::npos) << what;
    fs::remove(d.path() + "/adapter_model.bin");
    EXPECT_EQ(convert_status(d.path(), tiny("llama"), &what), LILIMS_ERR_MISSING) << what;
    EXPECT_NE(what.find("has no adapter_model.safetensors"), std::string::npos) << what;
  }
}

// The adapter against a base it is not for.
TEST(ConvertPeftErrors, WrongBase) {
  std::string what;
  EXPECT_EQ(convert_status(peft_dir("llama"), tiny("phi3"), &what), LILIMS_ERR_UNSUPPORTED);
  EXPECT_NE(what.find("has no GGUF name for architecture phi3"), std::string::npos) << what;
  EXPECT_EQ(convert_status(peft_dir("phi3"), tiny("llama"), &what), LILIMS_ERR_UNSUPPORTED);
  EXPECT_NE(
      what.find("module model.layers.0.mlp.gate_up_proj has no GGUF name for architecture llama"),
      std::string::npos)
      << what;

  // A llama base with other shapes (ffn 96, not 128): every weight named, the
  // shapes not.
  const auto llama = gguf::File::open(tiny("llama"));
  gguf::Writer other;
  for (const gguf::KeyValue& kv : llama->metadata()) other.add(kv.key, kv.value);
  for (const gguf::TensorInfo& t : llama->tensors()) {
    std::vector<uint64_t> ne = t.ne;
    for (uint64_t& d : ne) d = d == 128 ? 96 : d;
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    const std::vector<uint8_t> zeros(n * (t.type == 0 ? 4 : 2), 0);
    other.add_tensor(t.name, ne, t.type, zeros.data(), zeros.size());
  }
  const std::string narrow = test::temp_path("peft_llama_ffn96.gguf");
  other.write(narrow);
  EXPECT_EQ(convert_status(peft_dir("llama"), narrow, &what), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(
      what.find(
          "module model.layers.0.mlp.down_proj: lora_A (4, 128) and lora_B (64, 4) do not fit " +
          narrow + " tensor blk.0.ffn_down.weight ne [96, 64]"),
      std::string::npos)
      << what;

  // Tied embeddings: no output.weight for lm_head's LoRA.
  gguf::Writer tied;
  for (const gguf::KeyValue& kv : llama->metadata()) tied.add(kv.key, kv.value);
  for (const gguf::TensorInfo& t : llama->tensors()) {
    if (t.name != "output.weight") tied.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
  }
  const std::string tied_path = test::temp_path("peft_llama_tied.gguf");
  tied.write(tied_path);
  EXPECT_EQ(convert_status(peft_dir("llama_embed"), tied_path, &what), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(what.find("adapts lm_head, which is output.weight in GGUF, but " + tied_path +
                      " has no such tensor"),
            std::string::npos)
      << what;

  // An adapter as the base, a base that is not there, a type the format does not take.
  const std::string adapter = test::temp_path("peft_llama_adapter.gguf");
  convert_peft_dir(peft_dir("llama"), tiny("llama")).write(adapter);
  EXPECT_EQ(convert_status(peft_dir("llama"), adapter, &what), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(what.find("is an adapter, not the base model"), std::string::npos) << what;
  EXPECT_EQ(convert_status(peft_dir("llama"), test::temp_path("absent.gguf"), &what), LILIMS_ERR_IO)
      << what;
  EXPECT_EQ(convert_status(peft_dir("llama"), tiny("llama"), &what, quant::Type::Q8_0),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(what.find("converts to F32 or F16, not Q8_0"), std::string::npos) << what;
}

}  // namespace
}  // namespace lilims::models
