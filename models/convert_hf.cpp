// HF directory -> GGUF: config.json to {arch}.* keys, safetensors to tensors.
// The architecture comes from models/arch.h's table (config.json's
// "architectures" class); what each family needs beyond the shared keys is
// here, after what llama.cpp's convert_hf_to_gguf.py writes for it.
#include "models/convert_hf.h"
#include "models/convert_util.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "base/error.h"
#include "base/file.h"
#include "base/nlohmann_json.h"
#include "base/strings.h"
#include "models/arch.h"
#include "models/hf_tokenizer.h"
#include "models/requantize.h"
#include "models/safetensors.h"

namespace lilims::models {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[convert] " + msg);
}
[[noreturn]] void unsupported(const std::string& msg) {
  throw Error(LILIMS_ERR_UNSUPPORTED, "[convert] " + msg);
}

// config.json with HF's spellings.  RoPE settings sit in rope_parameters
// (transformers >= 5; Gemma 3: one set per layer type, full_attention and
// sliding_attention), rope_scaling (before) or at the top level; each lookup
// also says where it found the value, for messages.
class Config {
 public:
  explicit Config(json j) : j_(std::move(j)) {}
  const json& raw() const { return j_; }
  const json* find(const std::string& key, std::string* where = nullptr) const {
    if (is_rope_key(key)) {
      for (const auto& s : rope_sections()) {
        const json& sect = *s.second;
        if (sect.contains(key) && !sect[key].is_null()) {
          if (where) *where = s.first + "." + key;
          return &sect[key];
        }
      }
    }
    if (where) *where = key;
    return j_.contains(key) && !j_[key].is_null() ? &j_[key] : nullptr;
  }
  int64_t get_int(const std::string& key) const {
    std::string where;
    const json* v = find(key, &where);
    if (!v) throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no " + key);
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT32_MAX) {
      bad("config.json " + where + " = " + v->dump() + ", expected a positive integer");
    }
    return v->get<int64_t>();
  }
  int64_t get_int_or(const std::string& key, int64_t fallback) const {
    return find(key) ? get_int(key) : fallback;
  }
  double get_float_or(const std::string& key, double fallback) const {
    std::string where;
    const json* v = find(key, &where);
    if (!v) return fallback;
    if (!v->is_number()) bad("config.json " + where + " = " + v->dump() + ", expected a number");
    return v->get<double>();
  }
  // The (global) RoPE type and the key that holds it.
  std::string rope_type(std::string* where) const {
    for (const char* k : {"rope_type", "type"}) {
      const json* v = find(k, where);
      if (v && v->is_string()) return v->get<std::string>();
    }
    *where = "rope_scaling.rope_type";
    return "default";
  }
  std::vector<float> factors(const std::string& key) const {
    std::string where;
    const json* v = find(key, &where);
    if (!v || !v->is_array()) {
      throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no " + key + " list");
    }
    std::vector<float> out;
    for (const json& x : *v) {
      if (!x.is_number()) bad("config.json " + where + " has a non-number");
      out.push_back(x.get<float>());
    }
    return out;
  }
  // Gemma 3's local layers: rope_parameters.sliding_attention (transformers
  // >= 5) or rope_local_base_freq (before); null when neither.
  const json* sliding_rope() const {
    const json* p = section("rope_parameters");
    return p && p->contains("sliding_attention") && (*p)["sliding_attention"].is_object()
               ? &(*p)["sliding_attention"]
               : nullptr;
  }

 private:
  static bool is_rope_key(const std::string& k) {
    return k == "rope_theta" || k == "rope_type" || k == "type" || k == "partial_rotary_factor" ||
           k == "short_factor" || k == "long_factor" || k == "original_max_position_embeddings" ||
           k == "factor" || k == "low_freq_factor" || k == "high_freq_factor";
  }
  const json* section(const char* name) const {
    return j_.contains(name) && j_[name].is_object() ? &j_[name] : nullptr;
  }
  // Where RoPE keys are looked for, in order: the global layers' set first.
  std::vector<std::pair<std::string, const json*>> rope_sections() const {
    std::vector<std::pair<std::string, const json*>> out;
    if (const json* p = section("rope_parameters")) {
      if (p->contains("full_attention") && (*p)["full_attention"].is_object()) {
        out.emplace_back("rope_parameters.full_attention", &(*p)["full_attention"]);
      }
      out.emplace_back("rope_parameters", p);
    }
    if (const json* s = section("rope_scaling")) out.emplace_back("rope_scaling", s);
    return out;
  }
  json j_;
};

// Where each HF tensor of a family goes.  HF name (after "model.layers.N.")
// -> GGUF name (after "blk.N."); a ".weight" must be in every block, a
// ".bias" may be absent.
struct TensorMap {
  const char* hf;
  const char* gguf;
};
struct Family {
  const char* arch;  // general.architecture, as in models/arch.h
  std::vector<TensorMap> layer;
  std::vector<TensorMap> top;  // embed_tokens and the final norm required; lm_head not (tied)
};

std::vector<TensorMap> operator+(std::vector<TensorMap> a, const std::vector<TensorMap>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Family>& families() {
  static const std::vector<TensorMap> kAttn = {
      {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"}};
  static const std::vector<TensorMap> kQkNorm = {{"self_attn.q_norm.weight", "attn_q_norm.weight"},
                                                 {"self_attn.k_norm.weight", "attn_k_norm.weight"}};
  static const std::vector<TensorMap> kGatedMlp = {{"mlp.gate_proj.weight", "ffn_gate.weight"},
                                                   {"mlp.up_proj.weight", "ffn_up.weight"},
                                                   {"mlp.down_proj.weight", "ffn_down.weight"}};
  static const std::vector<TensorMap> kLlamaLayer =
      std::vector<TensorMap>{{"input_layernorm.weight", "attn_norm.weight"},
                             {"post_attention_layernorm.weight", "ffn_norm.weight"}} +
      kAttn + kGatedMlp;
  static const std::vector<TensorMap> kTop = {{"model.embed_tokens.weight", "token_embd.weight"},
                                              {"model.norm.weight", "output_norm.weight"},
                                              {"lm_head.weight", "output.weight"}};
  static const std::vector<Family> kFamilies = {
      {"llama", kLlamaLayer, kTop},
      {"qwen2", kLlamaLayer, kTop},
      {"qwen3", kLlamaLayer + kQkNorm, kTop},
      {"gemma3",
       std::vector<TensorMap>{{"input_layernorm.weight", "attn_norm.weight"},
                              {"post_attention_layernorm.weight", "post_attention_norm.weight"},
                              {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
                              {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}} +
           kAttn + kQkNorm + kGatedMlp,
       kTop},
      {"phi2",
       {{"input_layernorm.weight", "attn_norm.weight"}, {"input_layernorm.bias", "attn_norm.bias"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.dense.weight", "attn_output.weight"}, {"self_attn.dense.bias", "attn_output.bias"},
        {"mlp.fc1.weight", "ffn_up.weight"}, {"mlp.fc1.bias", "ffn_up.bias"},
        {"mlp.fc2.weight", "ffn_down.weight"}, {"mlp.fc2.bias", "ffn_down.bias"}},
       {{"model.embed_tokens.weight", "token_embd.weight"},
        {"model.final_layernorm.weight", "output_norm.weight"},
        {"model.final_layernorm.bias", "output_norm.bias"},
        {"lm_head.weight", "output.weight"}, {"lm_head.bias", "output.bias"}}},
      {"phi3",
       {{"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}},
       kTop},
  };
  return kFamilies;
}

const Family* family_of(const std::string& arch) {
  for (const Family& f : families()) {
    if (arch == f.arch) return &f;
  }
  return nullptr;
}



// The family of config.json's "architectures" class, from models/arch.h.
const ArchDesc& arch_of(const json& cfg) {
  std::string cls;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string()) {
    cls = cfg["architectures"][0].get<std::string>();
  }
  if (cls.empty()) throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no \"architectures\"");
  const ArchDesc* a = find_arch_by_hf_class(cls);
  if (a && family_of(a->name)) return *a;
  std::string known;
  for (const ArchDesc* d : all_archs()) {
    if (!family_of(d->name)) continue;
    for (const std::string& c : d->hf_classes) known += (known.empty() ? "" : ", ") + c;
  }
  unsupported("architecture " + cls + " is not supported (known: " + known + ")");
}

// A tensor on its way into the GGUF: its name, where it goes, and either an
// HF tensor (converted when it is written) or values made here.
struct Pending {
  std::string name;
  int layer;  // -1 before the blocks, INT_MAX after
  const StTensor* hf = nullptr;
  std::vector<float> values;  // when hf is null
};

// The table's entry for an HF tensor: its GGUF name and layer (-1 before
// the blocks, INT_MAX after); false when the table has none.  *block_no is
// the block number the name carries (-1 outside the blocks).
bool lookup(const Family& a, const std::string& hf, std::string* out, int* layer,
            int64_t* block_no) {
  *block_no = -1;
  const std::string prefix = "model.layers.";
  if (hf.compare(0, prefix.size(), prefix) == 0) {
    size_t at = prefix.size();
    int64_t n = 0;
    while (at < hf.size() && hf[at] >= '0' && hf[at] <= '9' && n <= INT32_MAX) {
      n = n * 10 + (hf[at++] - '0');
    }
    if (at > prefix.size() && at < hf.size() && hf[at] == '.' && n <= INT32_MAX) {
      const std::string rest = hf.substr(at + 1);
      for (const TensorMap& m : a.layer) {
        if (rest == m.hf) {
          *out = "blk." + std::to_string(n) + "." + m.gguf;
          *layer = static_cast<int>(n);
          *block_no = n;
          return true;
        }
      }
    }
    return false;
  }
  for (const TensorMap& m : a.top) {
    if (hf == m.hf) {
      *out = m.gguf;
      *layer = hf == "model.embed_tokens.weight" ? -1 : INT_MAX;
      return true;
    }
  }
  return false;
}

// Where an HF tensor goes: its GGUF name and layer; false for tensors that
// are not weights (buffers some checkpoints carry).
bool gguf_name(const Family& a, const std::string& hf, const std::string& hf_class,
               int64_t n_layers, std::string* out, int* layer) {
  if (ends_with(hf, "rotary_emb.inv_freq")) return false;
  int64_t block_no = -1;
  if (!lookup(a, hf, out, layer, &block_no)) {
    unsupported("tensor " + hf + " has no GGUF name for " + hf_class);
  }
  if (block_no >= n_layers) {
    bad("tensor " + hf + " is in layer " + std::to_string(block_no) + " but config.json has " +
        std::to_string(n_layers) + " layers");
  }
  return true;
}

// Every weight the family's blocks and head need, named as HF and GGUF name
// it; throws for the first one the checkpoint lacks.
void require_tensors(const Family& a, const SafetensorsSet& st, int64_t n_layer) {
  auto need = [&st](const std::string& hf, const std::string& gguf) {
    if (!st.find(hf)) {
      throw Error(LILIMS_ERR_MISSING,
                  "[convert] the checkpoint has no " + hf + " (GGUF " + gguf + ")");
    }
  };
  for (const TensorMap& m : a.top) {
    if (ends_with(m.hf, ".weight") && std::string(m.hf) != "lm_head.weight") need(m.hf, m.gguf);
  }
  for (int64_t l = 0; l < n_layer; ++l) {
    for (const TensorMap& m : a.layer) {
      if (!ends_with(m.hf, ".weight")) continue;
      const std::string n = std::to_string(l);
      need("model.layers." + n + "." + m.hf, "blk." + n + "." + m.gguf);
    }
  }
}

// Q and K rows are reordered for the families whose RoPE turns adjacent
// pairs (llama; see convert_hf.h); NeoX-style families keep HF's order.
HfWeightName::Rows rows_of(const std::string& arch, const std::string& hf) {
  const ArchDesc* d = find_arch(arch);
  if (!d || d->rope_neox) return HfWeightName::Rows::as_is;
  if (hf.find("self_attn.q_proj.") != std::string::npos) return HfWeightName::Rows::rope_q;
  if (hf.find("self_attn.k_proj.") != std::string::npos) return HfWeightName::Rows::rope_k;
  return HfWeightName::Rows::as_is;
}

// config.json's layer_types (transformers >= 4.5x): one entry per layer,
// "full_attention" or "sliding_attention"; true = sliding.  Empty when absent.
std::vector<bool> layer_types(const Config& cfg, int64_t n_layer) {
  const json* v = cfg.find("layer_types");
  if (!v) return {};
  if (!v->is_array() || static_cast<int64_t>(v->size()) != n_layer) {
    bad("config.json layer_types has " + (v->is_array() ? std::to_string(v->size()) : v->dump()) +
        " entries, but num_hidden_layers is " + std::to_string(n_layer));
  }
  std::vector<bool> sliding;
  for (const json& t : *v) {
    const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    if (s != "full_attention" && s != "sliding_attention") {
      unsupported("config.json layer_types entry '" + s +
                  "' (full_attention and sliding_attention are supported)");
    }
    sliding.push_back(s == "sliding_attention");
  }
  return sliding;
}

// Llama 3's RoPE frequency factors (rope_type "llama3"), one per rotated
// pair, computed as llama.cpp's converter computes them: in float32, with
// PyTorch's x / t as reciprocal(t) * x (Tensor.__rtruediv__), so that the
// smoothed factors carry the same roundings.
std::vector<float> llama3_rope_factors(const Config& cfg, int64_t head_dim) {
  const float base = static_cast<float>(cfg.get_float_or("rope_theta", 10000.0));
  const float factor = static_cast<float>(cfg.get_float_or("factor", 8.0));
  const float low = static_cast<float>(cfg.get_float_or("low_freq_factor", 1.0));
  const float high = static_cast<float>(cfg.get_float_or("high_freq_factor", 4.0));
  const double old_ctx = cfg.get_float_or("original_max_position_embeddings", 8192.0);
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  if (!(factor > 0.0f) || !(high > low)) {
    bad("config.json llama3 RoPE scaling needs factor > 0 and high_freq_factor > low_freq_factor");
  }
  std::vector<float> out;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(base, static_cast<float>(i) / static_cast<float>(head_dim));
    const float wavelen = (1.0f / freq) * static_cast<float>(2.0 * M_PI);
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = ((1.0f / wavelen) * static_cast<float>(old_ctx) - low) / (high - low);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

}  // namespace

std::vector<float> permute_rope_rows(const std::vector<float>& w, uint64_t rows, uint64_t cols,
                                     int64_t n_head, const std::string& name) {
  if (n_head <= 0 || rows % (2 * static_cast<uint64_t>(n_head)) != 0 || w.size() != rows * cols) {
    bad("tensor " + name + ": " + std::to_string(rows) + " rows do not split into " +
        std::to_string(n_head) + " heads of an even size");
  }
  const uint64_t d = rows / static_cast<uint64_t>(n_head), half = d / 2;
  std::vector<float> out(w.size());
  for (uint64_t h = 0; h < static_cast<uint64_t>(n_head); ++h) {
    for (uint64_t i = 0; i < half; ++i) {
      std::copy_n(&w[(h * d + i) * cols], cols, &out[(h * d + 2 * i) * cols]);
      std::copy_n(&w[(h * d + i + half) * cols], cols, &out[(h * d + 2 * i + 1) * cols]);
    }
  }
  return out;
}

bool hf_weight_gguf_name(const std::string& arch, const std::string& hf, HfWeightName* out) {
  const Family* a = family_of(arch);
  if (!a) return false;
  int layer = 0;
  int64_t block_no = -1;
  if (!lookup(*a, hf, &out->gguf, &layer, &block_no)) return false;
  out->rows = rows_of(arch, hf);
  return true;
}

gguf::Writer convert_hf_dir(const std::string& dir, const HfConvertOptions& opt,
                            std::vector<std::string>* notes) {
  const int ftype = gguf::file_type_of(opt.type);
  if (ftype < 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                std::string("[convert] cannot convert to ") +
                    quant::ggml_type_name(static_cast<uint32_t>(opt.type)));
  }
  json raw;
  std::string text;
  try {
    text = read_regular_file(dir + "/config.json", "convert");
  } catch (const Error&) {
    throw Error(LILIMS_ERR_MISSING, "[convert] " + dir +
                                        " has no config.json (not a Hugging Face model directory)");
  }
  try {
    raw = json::parse(text);
  } catch (const json::exception& e) {
    bad(std::string("config.json is not JSON: ") + e.what());
  }
  if (!raw.is_object()) bad("config.json is not a JSON object");
  const ArchDesc& desc = arch_of(raw);
  const Family& family = *family_of(desc.name);
  const std::string hf_class = raw["architectures"][0].get<std::string>();
  const Config cfg(raw);
  const std::string A = desc.name;
  const bool gemma3 = A == "gemma3", phi = A == "phi2" || A == "phi3";

  const int64_t n_embd = cfg.get_int("hidden_size");
  const int64_t n_layer = cfg.get_int("num_hidden_layers");
  const int64_t n_head = cfg.get_int("num_attention_heads");
  const int64_t n_kv = A == "phi2" ? n_head : cfg.get_int_or("num_key_value_heads", n_head);
  const int64_t n_ff = cfg.get_int("intermediate_size");
  const int64_t n_vocab = cfg.get_int("vocab_size");
  const int64_t n_ctx = cfg.get_int_or("max_position_embeddings",
                                       cfg.get_int_or("n_positions", gemma3 ? 131072 : 0));
  if (n_head % n_kv != 0 || (!cfg.find("head_dim") && n_embd % n_head != 0)) {
    bad("hidden_size " + std::to_string(n_embd) + " must split into " + std::to_string(n_head) +
        " heads, and those into " + std::to_string(n_kv) + " kv groups");
  }
  // llama.cpp's phi2 takes MHA and a 4 x hidden MLP as given (it writes them
  // whatever config.json says): another shape would not load.
  if (A == "phi2" && (cfg.get_int_or("num_key_value_heads", n_head) != n_head || n_ff != 4 * n_embd)) {
    unsupported("PhiForCausalLM with num_key_value_heads != num_attention_heads or "
                "intermediate_size != 4 * hidden_size");
  }
  // The head size: head_dim when config.json has it (Gemma 3, Qwen3: not
  // hidden_size / heads), written as key_length / value_length.
  const int64_t head_dim = cfg.get_int_or("head_dim", gemma3 ? 256 : n_embd / n_head);
  if (phi && head_dim != n_embd / n_head) {
    unsupported("head_dim " + std::to_string(head_dim) + " is not hidden_size / heads");
  }
  if (head_dim % 2 != 0) bad("config.json head_dim " + std::to_string(head_dim) + " is odd");
  const double rot = cfg.get_float_or("partial_rotary_factor", 1.0);
  if (!phi && rot != 1.0) {
    unsupported("partial_rotary_factor " + std::to_string(rot) + " for " + hf_class);
  }
  const int64_t n_rot = phi ? static_cast<int64_t>(rot * static_cast<double>(n_embd)) / n_head : head_dim;

  // RoPE scaling: what each family's llama.cpp conversion writes and lilims
  // runs; anything else would give a model that runs and says wrong things.
  std::string rope_where;
  const std::string rope_type = cfg.rope_type(&rope_where);
  const bool longrope = A == "phi3" && (rope_type == "longrope" || rope_type == "su");
  const bool llama3 = A == "llama" && rope_type == "llama3";
  const bool linear = !phi && rope_type == "linear";
  if (rope_type != "default" && !longrope && !llama3 && !linear) {
    unsupported("config.json " + rope_where + ": RoPE scaling '" + rope_type + "' for " + hf_class +
                " is not supported");
  }

  gguf::Writer out;
  out.add_string("general.architecture", A);
  std::string name = opt.name;
  if (name.empty()) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    name = d.substr(d.rfind('/') == std::string::npos ? 0 : d.rfind('/') + 1);
  }
  out.add_string("general.name", name);
  out.add_u32("general.file_type", static_cast<uint32_t>(ftype));
  out.add_u32("general.quantization_version", 2);  // as llama.cpp's gguf writer, whatever the type
  auto key = [&](const std::string& k) { return A + "." + k; };
  if (n_ctx > 0) out.add_u32(key("context_length"), static_cast<uint32_t>(n_ctx));
  out.add_u32(key("embedding_length"), static_cast<uint32_t>(n_embd));
  out.add_u32(key("feed_forward_length"), static_cast<uint32_t>(n_ff));
  out.add_u32(key("block_count"), static_cast<uint32_t>(n_layer));
  out.add_u32(key("attention.head_count"), static_cast<uint32_t>(n_head));
  out.add_u32(key("attention.head_count_kv"), static_cast<uint32_t>(n_kv));
  // llama.cpp writes the rotated size for these; the others rotate whole heads.
  if (A == "llama" || phi) out.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(n_rot));
  if (!phi && (gemma3 || cfg.find("head_dim"))) {
    out.add_u32(key("attention.key_length"), static_cast<uint32_t>(head_dim));
    out.add_u32(key("attention.value_length"), static_cast<uint32_t>(head_dim));
  }
  if (A == "phi2") {
    out.add_f32(key("attention.layer_norm_epsilon"),
                static_cast<float>(cfg.get_float_or("layer_norm_eps", 1e-5)));
  } else {
    out.add_f32(key("rope.freq_base"),
                static_cast<float>(cfg.get_float_or("rope_theta", gemma3 ? 1e6 : 10000.0)));
    out.add_f32(key("attention.layer_norm_rms_epsilon"),
                static_cast<float>(cfg.get_float_or("rms_norm_eps", 1e-6)));
  }
  if (linear) {
    out.add_string(key("rope.scaling.type"), "linear");
    out.add_f32(key("rope.scaling.factor"), static_cast<float>(cfg.get_float_or("factor", 1.0)));
  }
  if (A == "llama") out.add_u32(key("vocab_size"), static_cast<uint32_t>(n_vocab));
  std::vector<Pending> pending;
  if (llama3) pending.push_back({"rope_freqs.weight", -1, nullptr, llama3_rope_factors(cfg, head_dim)});

  // Sliding-window attention, per layer.
  const std::vector<bool> sliding = layer_types(cfg, n_layer);
  if ((A == "qwen2" || A == "qwen3") &&
      (std::find(sliding.begin(), sliding.end(), true) != sliding.end() ||
       (cfg.find("use_sliding_window") && *cfg.find("use_sliding_window") == true))) {
    unsupported("config.json use_sliding_window / sliding_attention layers for " + hf_class +
                " (lilims runs its layers with full attention)");
  }
  if (gemma3) {
    // Which layers are local: layer_types, else every n-th global
    // (sliding_window_pattern n; HF's default 6).
    std::vector<bool> local = sliding;
    if (local.empty()) {
      const int64_t n =
          cfg.get_int_or("sliding_window_pattern", cfg.get_int_or("_sliding_window_pattern", 6));
      for (int64_t l = 0; l < n_layer; ++l) local.push_back((l + 1) % n != 0);
    }
    // llama.cpp's reader assumes every 6th layer global when the file says
    // nothing; only another pattern needs the per-layer key.
    bool default_pattern = true, any_local = false;
    for (int64_t l = 0; l < n_layer; ++l) {
      default_pattern = default_pattern && local[l] == (l % 6 < 5);
      any_local = any_local || local[l];
    }
    if (any_local) {
      const int64_t window = cfg.get_int("sliding_window");
      out.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(window));
      if (!default_pattern) {
        std::vector<gguf::Value> flags(static_cast<size_t>(n_layer));
        for (int64_t l = 0; l < n_layer; ++l) {
          flags[l].type = gguf::ValueType::BOOL;
          flags[l].u = local[l] ? 1 : 0;
        }
        out.add(key("attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::BOOL, flags));
      }
      if (const json* swa = cfg.sliding_rope()) {
        const std::string t = swa->value("rope_type", "default");
        if (t != "default") {
          unsupported("config.json rope_parameters.sliding_attention.rope_type: RoPE scaling '" + t +
                      "' for the local layers of " + hf_class + " is not supported");
        }
        if (swa->contains("rope_theta") && (*swa)["rope_theta"].is_number()) {
          out.add_f32(key("rope.freq_base_swa"), (*swa)["rope_theta"].get<float>());
        }
      } else if (cfg.find("rope_local_base_freq")) {
        out.add_f32(key("rope.freq_base_swa"),
                    static_cast<float>(cfg.get_float_or("rope_local_base_freq", 10000.0)));
      }
    }
    // What lilims' Gemma 3 (and llama.cpp's) fixes that config.json could vary.
    if (const json* soft = cfg.find("attn_logit_softcapping")) {
      unsupported("config.json attn_logit_softcapping = " + soft->dump() + " (Gemma 3 has none)");
    }
    const double final_cap = cfg.get_float_or("final_logit_softcapping", 0.0);
    if (final_cap != 0.0) out.add_f32(key("final_logit_softcapping"), static_cast<float>(final_cap));
    const int64_t qpas = cfg.get_int_or("query_pre_attn_scalar", head_dim);
    if (qpas != head_dim) {
      unsupported("config.json query_pre_attn_scalar " + std::to_string(qpas) + " != head_dim " +
                  std::to_string(head_dim) + " (lilims scales scores by 1 / sqrt(head_dim))");
    }
    const json* act = cfg.find("hidden_activation");
    if (!act) act = cfg.find("hidden_act");
    if (act && *act != "gelu_pytorch_tanh") {
      unsupported("config.json hidden_activation " + act->dump() + " (Gemma 3 uses gelu_pytorch_tanh)");
    }
  }
  if (A == "phi3") {
    const int64_t orig = cfg.get_int_or("original_max_position_embeddings", n_ctx);
    out.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(orig));
    // 0 (null in config.json) is Phi-4-mini's "no window", as llama.cpp writes it.
    out.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(cfg.get_int_or("sliding_window", 0)));
    if (longrope) {
      // As llama.cpp's converter: from the context ratio, not config.json's attention_factor.
      const double scale = static_cast<double>(n_ctx) / static_cast<double>(orig);
      const double attn =
          scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig)));
      out.add_f32(key("rope.scaling.attn_factor"), static_cast<float>(attn));
      for (const char* which : {"long", "short"}) {
        std::vector<float> f = cfg.factors(std::string(which) + "_factor");
        if (static_cast<int64_t>(f.size()) != n_rot / 2) {
          bad(std::string("config.json ") + which + "_factor has " + std::to_string(f.size()) +
              " values, expected rope dimensions / 2 = " + std::to_string(n_rot / 2));
        }
        pending.push_back(
            {std::string("rope_factors_") + which + ".weight", -1, nullptr, std::move(f)});
      }
    }
  }

  // The vocabulary: Gemma's from its SentencePiece model when the directory
  // has one (as llama.cpp), everything else from tokenizer.json.
  std::vector<std::string> tok_notes;
  int64_t n_tokens = n_vocab;
  if (gemma3 && hf::regular_file_exists(dir + "/tokenizer.model")) {
    n_tokens = add_sentencepiece_tokenizer(dir, n_vocab, &out, &tok_notes);
    out.add_bool("tokenizer.ggml.add_space_prefix", false);  // every Gemma: no dummy prefix
  } else {
    HfTokenizerOptions topt;
    topt.n_vocab = n_vocab;
    auto id_or_none = [&raw](const char* k) {
      return raw.contains(k) && raw[k].is_number_integer() ? raw[k].get<int64_t>() : int64_t{-1};
    };
    topt.bos_id = id_or_none("bos_token_id");
    topt.eos_id = id_or_none("eos_token_id");
    topt.force_no_bos = A == "phi2";
    add_hf_tokenizer(dir, topt, &out, &tok_notes);
  }
  if (notes) notes->insert(notes->end(), tok_notes.begin(), tok_notes.end());

  const SafetensorsSet st = SafetensorsSet::open_dir(dir);
  for (const auto& kv : st.tensors()) {
    std::string gname;
    int layer = 0;
    if (!gguf_name(family, kv.first, hf_class, n_layer, &gname, &layer)) continue;
    const StTensor& t = kv.second;
    if (t.dtype == StDtype::other) st_to_f32(t);  // throws, naming the tensor and its dtype
    if (t.shape.empty() || t.shape.size() > 2) {
      unsupported("tensor " + t.name + " has " + std::to_string(t.shape.size()) +
                  " dimensions (1 or 2 convert)");
    }
    pending.push_back({gname, layer, &t, {}});
  }
  require_tensors(family, st, n_layer);
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.name < b.name;
  });
  // One tensor at a time: only the Writer holds the whole model.
  for (size_t k = 0; k < pending.size(); ++k) {
    Pending& p = pending[k];
    std::vector<uint64_t> ne{p.values.size()};
    if (p.hf) {
      const StTensor& t = *p.hf;
      p.values = st_to_f32(t);
      uint64_t rows = t.shape[0];
      const uint64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
      const HfWeightName::Rows order = rows_of(A, t.name);
      if (order != HfWeightName::Rows::as_is) {
        p.values = permute_rope_rows(p.values, rows, cols,
                                     order == HfWeightName::Rows::rope_q ? n_head : n_kv, t.name);
      }
      if (gemma3) {
        // Gemma3RMSNorm multiplies by (1 + w): the GGUF holds 1 + w (in
        // float32, as HF adds it).
        if (ends_with(t.name, "norm.weight")) {
          for (float& v : p.values) v += 1.0f;
        }
        // Rows past the vocabulary (padding some checkpoints carry) go.
        if (p.name == "token_embd.weight" && t.shape.size() == 2 && rows > static_cast<uint64_t>(n_tokens)) {
          rows = static_cast<uint64_t>(n_tokens);
          p.values.resize(rows * cols);
        }
      }
      ne = t.shape.size() == 2 ? std::vector<uint64_t>{cols, rows} : std::vector<uint64_t>{rows};
    }
    out.add_tensor(p.name, ne, 0, p.values.data(), p.values.size() * sizeof(float));
    std::vector<float>().swap(p.values);
    if (opt.progress) opt.progress(k + 1, pending.size(), p.hf ? p.hf->name : p.name);
  }
  if (opt.type == quant::Type::F32) return out;

  // Other types: as `lilims quantize` from these F32 values.
  std::vector<uint8_t> image = out.to_bytes();
  out = gguf::Writer();
  const std::unique_ptr<gguf::File> f32 = gguf::File::from_borrowed(image.data(), image.size(), dir);
  gguf::RequantizeOptions ropt;
  if (opt.progress) {
    ropt.progress = [&opt](size_t k, size_t n, const gguf::TensorInfo& t) {
      opt.progress(k + 1, n, t.name);
    };
  }
  return gguf::requantize(*f32, opt.type, ropt);
}

}  // namespace lilims::models
