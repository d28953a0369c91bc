// HF directory -> GGUF: config.json to {arch}.* keys, safetensors to tensors.
#include "models/convert_hf.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file.h"
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

// config.json with HF's spellings: RoPE settings sit in rope_parameters
// (transformers >= 5), rope_scaling (before) or at the top level.
class Config {
 public:
  explicit Config(json j) : j_(std::move(j)) {}
  const json* find(const std::string& key) const {
    for (const char* sect : {"rope_parameters", "rope_scaling"}) {
      if (is_rope_key(key) && j_.contains(sect) && j_[sect].is_object() && j_[sect].contains(key) &&
          !j_[sect][key].is_null()) {
        return &j_[sect][key];
      }
    }
    return j_.contains(key) && !j_[key].is_null() ? &j_[key] : nullptr;
  }
  int64_t get_int(const std::string& key) const {
    const json* v = find(key);
    if (!v) throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no " + key);
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT32_MAX) {
      bad("config.json " + key + " = " + v->dump() + ", expected a positive integer");
    }
    return v->get<int64_t>();
  }
  int64_t get_int_or(const std::string& key, int64_t fallback) const {
    return find(key) ? get_int(key) : fallback;
  }
  double get_float_or(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) bad("config.json " + key + " = " + v->dump() + ", expected a number");
    return v->get<double>();
  }
  std::string rope_type() const {
    for (const char* k : {"rope_type", "type"}) {
      const json* v = find(k);
      if (v && v->is_string()) return v->get<std::string>();
    }
    return "default";
  }
  std::vector<float> factors(const std::string& key) const {
    const json* v = find(key);
    if (!v || !v->is_array()) {
      throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no " + key + " list");
    }
    std::vector<float> out;
    for (const json& x : *v) {
      if (!x.is_number()) bad("config.json " + key + " has a non-number");
      out.push_back(x.get<float>());
    }
    return out;
  }

 private:
  static bool is_rope_key(const std::string& k) {
    return k == "rope_theta" || k == "rope_type" || k == "type" || k == "partial_rotary_factor" ||
           k == "short_factor" || k == "long_factor" || k == "original_max_position_embeddings" ||
           k == "factor";
  }
  json j_;
};

struct Arch {
  const char* hf_class;
  const char* name;
  // HF name (after "model.layers.N.") -> GGUF name (after "blk.N.").
  std::vector<std::pair<const char*, const char*>> layer;
  std::vector<std::pair<const char*, const char*>> top;
};

const std::vector<Arch>& archs() {
  static const std::vector<Arch> kArchs = {
      {"LlamaForCausalLM", "llama",
       {{"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}},
       {{"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}}},
      {"PhiForCausalLM", "phi2",
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
      {"Phi3ForCausalLM", "phi3",
       {{"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}},
       {{"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}}},
  };
  return kArchs;
}

const Arch& arch_of(const json& cfg) {
  std::string cls;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string()) {
    cls = cfg["architectures"][0].get<std::string>();
  }
  if (cls.empty()) throw Error(LILIMS_ERR_MISSING, "[convert] config.json has no \"architectures\"");
  std::string known;
  for (const Arch& a : archs()) {
    if (cls == a.hf_class) return a;
    known += std::string(known.empty() ? "" : ", ") + a.hf_class;
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
bool lookup(const Arch& a, const std::string& hf, std::string* out, int* layer,
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
      for (const auto& m : a.layer) {
        if (rest == m.first) {
          *out = "blk." + std::to_string(n) + "." + m.second;
          *layer = static_cast<int>(n);
          *block_no = n;
          return true;
        }
      }
    }
    return false;
  }
  for (const auto& m : a.top) {
    if (hf == m.first) {
      *out = m.second;
      *layer = hf == "model.embed_tokens.weight" ? -1 : INT_MAX;
      return true;
    }
  }
  return false;
}

// Where an HF tensor goes: its GGUF name and layer; false for tensors that
// are not weights (buffers some checkpoints carry).
bool gguf_name(const Arch& a, const std::string& hf, int64_t n_layers, std::string* out,
               int* layer) {
  const std::string tail = "rotary_emb.inv_freq";
  if (hf.size() >= tail.size() && hf.compare(hf.size() - tail.size(), tail.size(), tail) == 0) {
    return false;
  }
  int64_t block_no = -1;
  if (!lookup(a, hf, out, layer, &block_no)) {
    unsupported("tensor " + hf + " has no GGUF name for " + a.hf_class);
  }
  if (block_no >= n_layers) {
    bad("tensor " + hf + " is in layer " + std::to_string(block_no) + " but config.json has " +
        std::to_string(n_layers) + " layers");
  }
  return true;
}

// llama's Q and K rows are reordered for its RoPE (see convert_hf.h).
HfWeightName::Rows rows_of(const std::string& arch, const std::string& hf) {
  if (arch != "llama") return HfWeightName::Rows::as_is;
  if (hf.find("self_attn.q_proj.") != std::string::npos) return HfWeightName::Rows::rope_q;
  if (hf.find("self_attn.k_proj.") != std::string::npos) return HfWeightName::Rows::rope_k;
  return HfWeightName::Rows::as_is;
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
  for (const Arch& a : archs()) {
    if (arch != a.name) continue;
    int layer = 0;
    int64_t block_no = -1;
    if (!lookup(a, hf, &out->gguf, &layer, &block_no)) return false;
    out->rows = rows_of(arch, hf);
    return true;
  }
  return false;
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
  const Arch& arch = arch_of(raw);
  const Config cfg(raw);
  const std::string A = arch.name;

  const int64_t n_embd = cfg.get_int("hidden_size");
  const int64_t n_layer = cfg.get_int("num_hidden_layers");
  const int64_t n_head = cfg.get_int("num_attention_heads");
  const int64_t n_kv = A == "phi2" ? n_head : cfg.get_int_or("num_key_value_heads", n_head);
  const int64_t n_ff = cfg.get_int("intermediate_size");
  const int64_t n_vocab = cfg.get_int("vocab_size");
  const int64_t n_ctx = cfg.get_int_or("max_position_embeddings", cfg.get_int_or("n_positions", 0));
  if (n_embd % n_head != 0 || n_head % n_kv != 0) {
    bad("hidden_size " + std::to_string(n_embd) + " must split into " + std::to_string(n_head) +
        " heads, and those into " + std::to_string(n_kv) + " kv groups");
  }
  // llama.cpp's phi2 takes MHA and a 4 x hidden MLP as given (it writes them
  // whatever config.json says): another shape would not load.
  if (A == "phi2" && (cfg.get_int_or("num_key_value_heads", n_head) != n_head || n_ff != 4 * n_embd)) {
    unsupported("PhiForCausalLM with num_key_value_heads != num_attention_heads or "
                "intermediate_size != 4 * hidden_size");
  }
  const int64_t head_dim = n_embd / n_head;
  if (cfg.find("head_dim") && cfg.get_int("head_dim") != head_dim) {
    unsupported("head_dim " + std::to_string(cfg.get_int("head_dim")) + " is not hidden_size / heads");
  }
  const double rot = cfg.get_float_or("partial_rotary_factor", 1.0);
  const int64_t n_rot = static_cast<int64_t>(rot * static_cast<double>(n_embd)) / n_head;
  const std::string rope_type = cfg.rope_type();
  const bool longrope = A == "phi3" && (rope_type == "longrope" || rope_type == "su");
  if (rope_type != "default" && !longrope) {
    unsupported("RoPE scaling '" + rope_type + "' for " + arch.hf_class + " is not supported");
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
  out.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(n_rot));
  if (A == "phi2") {
    out.add_f32(key("attention.layer_norm_epsilon"),
                static_cast<float>(cfg.get_float_or("layer_norm_eps", 1e-5)));
  } else {
    out.add_f32(key("rope.freq_base"), static_cast<float>(cfg.get_float_or("rope_theta", 10000.0)));
    out.add_f32(key("attention.layer_norm_rms_epsilon"),
                static_cast<float>(cfg.get_float_or("rms_norm_eps", 1e-6)));
  }
  if (A == "llama") out.add_u32(key("vocab_size"), static_cast<uint32_t>(n_vocab));
  std::vector<Pending> pending;
  if (A == "phi3") {
    const int64_t orig = cfg.get_int_or("original_max_position_embeddings", n_ctx);
    out.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(orig));
    if (const int64_t window = cfg.get_int_or("sliding_window", 0)) {
      out.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(window));
    }
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

  HfTokenizerOptions topt;
  topt.n_vocab = n_vocab;
  auto id_or_none = [&raw](const char* k) {
    return raw.contains(k) && raw[k].is_number_integer() ? raw[k].get<int64_t>() : int64_t{-1};
  };
  topt.bos_id = id_or_none("bos_token_id");
  topt.eos_id = id_or_none("eos_token_id");
  topt.force_no_bos = A == "phi2";
  std::vector<std::string> tok_notes;
  add_hf_tokenizer(dir, topt, &out, &tok_notes);
  if (notes) notes->insert(notes->end(), tok_notes.begin(), tok_notes.end());

  const SafetensorsSet st = SafetensorsSet::open_dir(dir);
  for (const auto& kv : st.tensors()) {
    std::string gname;
    int layer = 0;
    if (gguf_name(arch, kv.first, n_layer, &gname, &layer)) {
      pending.push_back({gname, layer, &kv.second, {}});
    }
  }
  if (!std::any_of(pending.begin(), pending.end(),
                   [](const Pending& p) { return p.name == "token_embd.weight"; })) {
    throw Error(LILIMS_ERR_MISSING, "[convert] the checkpoint has no model.embed_tokens.weight");
  }
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.name < b.name;
  });
  // One tensor at a time: only the Writer holds the whole model.
  for (size_t k = 0; k < pending.size(); ++k) {
    Pending& p = pending[k];
    std::vector<uint64_t> ne{p.values.size()};
    if (p.hf) {
      const StTensor& t = *p.hf;
      if (t.shape.empty() || t.shape.size() > 2) {
        unsupported("tensor " + t.name + " has " + std::to_string(t.shape.size()) +
                    " dimensions (1 or 2 convert)");
      }
      p.values = st_to_f32(t);
      const uint64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
      const HfWeightName::Rows order = rows_of(A, t.name);
      if (order != HfWeightName::Rows::as_is) {
        p.values = permute_rope_rows(p.values, rows, cols,
                                     order == HfWeightName::Rows::rope_q ? n_head : n_kv, t.name);
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
