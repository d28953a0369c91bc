// PEFT LoRA adapter directory -> llama.cpp's GGUF LoRA (see convert_peft.h).
#include "models/convert_peft.h"

#include "models/low_rank.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <regex>

#include "base/error.h"
#include "base/file.h"
#include "base/nlohmann_json.h"
#include "models/convert_hf.h"
#include "models/low_rank.h"
#include "models/safetensors.h"
#include "quant/quantize.h"

namespace lilims::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(lilims_status status, const std::string& msg) {
  throw Error(status, "[convert] " + msg);
}

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out = "(";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + ")";
}

// A config value that turns a feature on: true, a number, a non-empty
// string, list or object.
bool is_set(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get<std::string>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

// Settings whose adapters are not W + scale * B A on the base's own weights.
struct Refused {
  const char* key;
  const char* why;
};
const Refused kRefused[] = {
    {"use_dora", "DoRA rescales each adapted weight by a learned magnitude vector"},
    {"use_qalora", "QA-LoRA pools the input before lora_A"},
    {"alora_invocation_tokens", "activated LoRA applies only after its invocation tokens"},
    {"use_bdlora", "BD-LoRA's factors are block-diagonal"},
    {"monteclora_config", "MonteCLoRA samples its factors"},
    {"arrow_config", "Arrow routes between several adapters"},
    {"kasa_config", "KaSA puts a learned diagonal between lora_A and lora_B"},
    {"lora_bias", "lora_B has a bias, which the format has no tensor for"},
    {"layer_replication", "the adapter is for a model with replicated layers"},
    {"target_parameters", "LoRA on parameters (not modules) has other names and layouts"},
    {"modules_to_save", "it trains full copies of modules: full weights, not LoRA"},
    {"trainable_token_indices", "it trains rows of the embedding: full values, not LoRA"},
};

// What adapter_config.json says about the scales.
struct AdapterConfig {
  int64_t r = 0;
  double alpha = 0.0;
  bool rslora = false;
  json rank_pattern = json::object(), alpha_pattern = json::object();
  std::string bias = "none";
};

AdapterConfig read_config(const std::string& dir) {
  std::string text;
  try {
    text = read_regular_file(dir + "/adapter_config.json", "convert");
  } catch (const Error&) {
    fail(LILIMS_ERR_MISSING, dir + " has no adapter_config.json (not a PEFT adapter directory)");
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(LILIMS_ERR_BAD_FORMAT, std::string("adapter_config.json is not JSON: ") + e.what());
  }
  if (!j.is_object()) fail(LILIMS_ERR_BAD_FORMAT, "adapter_config.json is not a JSON object");
  auto has = [&j](const char* k) { return j.contains(k) && !j[k].is_null(); };

  if (!has("peft_type")) fail(LILIMS_ERR_MISSING, "adapter_config.json has no peft_type");
  if (j["peft_type"] != "LORA") {
    fail(LILIMS_ERR_UNSUPPORTED, "adapter_config.json peft_type is " + j["peft_type"].dump() +
                                     ": only LoRA adapters (\"LORA\") convert");
  }
  AdapterConfig c;
  if (!has("r")) fail(LILIMS_ERR_MISSING, "adapter_config.json has no r");
  if (!j["r"].is_number_integer() || j["r"].get<int64_t>() <= 0) {
    fail(LILIMS_ERR_BAD_FORMAT,
         "adapter_config.json r = " + j["r"].dump() + ", expected a positive integer");
  }
  c.r = j["r"].get<int64_t>();
  if (!has("lora_alpha")) fail(LILIMS_ERR_MISSING, "adapter_config.json has no lora_alpha");
  if (!j["lora_alpha"].is_number()) {
    fail(LILIMS_ERR_BAD_FORMAT,
         "adapter_config.json lora_alpha = " + j["lora_alpha"].dump() + ", expected a number");
  }
  c.alpha = j["lora_alpha"].get<double>();

  for (const Refused& x : kRefused) {
    if (j.contains(x.key) && is_set(j[x.key])) {
      fail(LILIMS_ERR_UNSUPPORTED, std::string("adapter_config.json sets ") + x.key + " = " +
                                       j[x.key].dump() +
                                       ": llama.cpp's LoRA format cannot hold it (" + x.why + ")");
    }
  }
  if (has("init_lora_weights") && j["init_lora_weights"].is_string()) {
    const std::string init = j["init_lora_weights"].get<std::string>();
    for (const char* mutating : {"pissa", "olora", "corda", "loftq"}) {
      if (init.compare(0, std::char_traits<char>::length(mutating), mutating) == 0) {
        fail(LILIMS_ERR_UNSUPPORTED,
             "adapter_config.json init_lora_weights = \"" + init + "\": that initialisation " +
                 "changed the base weights, so the adapter does not apply to the original model " +
                 "(PEFT's save_pretrained(path_initial_model_for_weight_conversion=...) turns it " +
                 "into a plain LoRA)");
      }
    }
  }
  if (has("use_rslora")) {
    if (!j["use_rslora"].is_boolean()) {
      fail(LILIMS_ERR_BAD_FORMAT, "adapter_config.json use_rslora is not a boolean");
    }
    c.rslora = j["use_rslora"].get<bool>();
  }
  if (has("bias")) {
    if (!j["bias"].is_string()) {
      fail(LILIMS_ERR_BAD_FORMAT, "adapter_config.json bias is not a string");
    }
    c.bias = j["bias"].get<std::string>();
  }
  for (const char* k : {"rank_pattern", "alpha_pattern"}) {
    if (!has(k)) continue;
    if (!j[k].is_object()) {
      fail(LILIMS_ERR_BAD_FORMAT, std::string("adapter_config.json ") + k + " is not an object");
    }
    for (const auto& kv : j[k].items()) {
      const bool ok = k[0] == 'r' ? kv.value().is_number_integer() && kv.value().get<int64_t>() > 0
                                  : kv.value().is_number();
      if (!ok) {
        fail(LILIMS_ERR_BAD_FORMAT, std::string("adapter_config.json ") + k + " \"" + kv.key() +
                                        "\" = " + kv.value().dump() + " is not a " +
                                        (k[0] == 'r' ? "positive integer" : "number"));
      }
    }
    (k[0] == 'r' ? c.rank_pattern : c.alpha_pattern) = j[k];
  }
  return c;
}

// PEFT's get_pattern_key: the value of the first key k (the file's order,
// which PEFT writes sorted, as json objects iterate) for which the module
// name matches (.*\.)?(k)$ in full; null when none does.
const json* pattern_value(const json& patterns, const std::string& module, const char* what) {
  for (const auto& kv : patterns.items()) {
    try {
      if (std::regex_match(module, std::regex("(.*\\.)?(" + kv.key() + ")"))) return &kv.value();
    } catch (const std::regex_error& e) {
      fail(LILIMS_ERR_BAD_FORMAT, std::string("adapter_config.json ") + what + " key \"" +
                                      kv.key() + "\" is not a regular expression: " + e.what());
    }
  }
  return nullptr;
}

// The tensors of one adapted module.
struct Module {
  std::string path;                      // "model.layers.3.self_attn.q_proj"
  const StTensor* a = nullptr;           // lora_A.weight (r, n_in) or lora_embedding_A (r, vocab)
  const StTensor* b = nullptr;           // lora_B.weight (n_out, r) or lora_embedding_B (dim, r)
  bool embedding = false;                // the lora_embedding_* pair
  const StTensor* base_layer = nullptr;  // a full weight PEFT saved beside (save_embedding_layers)
  HfWeightName target;                   // where convert_hf_dir puts the module's weight
  const gguf::TensorInfo* base = nullptr;
  int64_t rank = 0;
  double scale = 0.0;  // PEFT's: alpha_m / r_m, or alpha_m / sqrt(r_m) with use_rslora
};

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t dot; (dot = s.find('.', at)) != std::string::npos; at = dot + 1) {
    out.push_back(s.substr(at, dot - at));
  }
  out.push_back(s.substr(at));
  return out;
}

std::string join_dots(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t k = 0; k < n; ++k) out += (k ? "." : "") + parts[k];
  return out;
}

[[noreturn]] void not_lora(const std::string& key) {
  fail(LILIMS_ERR_UNSUPPORTED,
       "adapter_model.safetensors tensor " + key + " is not a LoRA factor (lora_A / lora_B / " +
           "lora_embedding_A / lora_embedding_B): full weights (modules_to_save, trainable " +
           "tokens) cannot be written as a LoRA adapter");
}

// Sorts the file's tensors into modules.  Keys are PEFT's
// [base_model.model.]MODULE.lora_A[.ADAPTER].weight and the like.
std::map<std::string, Module> group_tensors(const SafetensorsFile& st, const AdapterConfig& cfg) {
  std::map<std::string, Module> modules;
  std::string adapter_name;  // "" for keys without one
  bool named_seen = false;
  for (const auto& kv : st.tensors()) {
    const std::string& key = kv.first;
    const std::string prefix = "base_model.model.";
    const std::string name =
        key.compare(0, prefix.size(), prefix) == 0 ? key.substr(prefix.size()) : key;
    const std::vector<std::string> parts = split_dots(name);
    size_t at = 0;
    while (at < parts.size() && parts[at].compare(0, 5, "lora_") != 0) ++at;
    if (at == parts.size()) {
      const size_t n = parts.size();
      if (n >= 3 && parts[n - 2] == "base_layer" && parts[n - 1] == "weight") {
        Module& m = modules[join_dots(parts, n - 2)];
        m.path = join_dots(parts, n - 2);
        m.base_layer = &kv.second;
        continue;
      }
      if (parts.back() == "bias" && cfg.bias != "none") {
        fail(LILIMS_ERR_UNSUPPORTED, "adapter_model.safetensors tensor " + key + ": the adapter " +
                                         "trains biases (adapter_config.json bias = \"" + cfg.bias +
                                         "\"), which llama.cpp's LoRA format cannot hold");
      }
      not_lora(key);
    }
    if (at == 0) not_lora(key);
    const std::string& kind = parts[at];
    const std::vector<std::string> rest(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1,
                                        parts.end());
    std::string adapter;
    bool weight = false;
    if (kind == "lora_A" || kind == "lora_B") {
      if (!rest.empty() && rest.back() == "bias") {
        fail(LILIMS_ERR_UNSUPPORTED,
             "adapter_model.safetensors tensor " + key + ": lora_B has a " +
                 "bias (lora_bias), which llama.cpp's LoRA format cannot hold");
      }
      weight = (rest.size() == 1 || rest.size() == 2) && rest.back() == "weight";
      if (rest.size() == 2) adapter = rest[0];
    } else if (kind == "lora_embedding_A" || kind == "lora_embedding_B") {
      weight = rest.size() <= 1;
      if (rest.size() == 1) adapter = rest[0];
    } else if (kind == "lora_magnitude_vector") {
      fail(LILIMS_ERR_UNSUPPORTED, "adapter_model.safetensors tensor " + key + " is a DoRA " +
                                       "magnitude, which llama.cpp's LoRA format cannot hold");
    }
    if (!weight) not_lora(key);
    if (!named_seen) {
      adapter_name = adapter;
      named_seen = true;
    } else if (adapter != adapter_name) {
      fail(LILIMS_ERR_BAD_FORMAT,
           "adapter_model.safetensors holds the tensors of two adapters (\"" + adapter_name +
               "\" and \"" + adapter + "\"): " + key);
    }
    const std::string path = join_dots(parts, at);
    Module& m = modules[path];
    m.path = path;
    const bool is_a = kind.back() == 'A';
    const bool is_embedding = kind.size() > 6;  // lora_embedding_*
    if ((m.a || m.b) && m.embedding != is_embedding) {
      fail(LILIMS_ERR_BAD_FORMAT,
           "module " + path + " has both lora_A/lora_B and lora_embedding tensors");
    }
    m.embedding = is_embedding;
    const StTensor*& slot = is_a ? m.a : m.b;
    if (slot) {
      fail(LILIMS_ERR_BAD_FORMAT, "module " + path + " has two " + kind + " tensors: " + key);
    }
    slot = &kv.second;
  }
  return modules;
}

// Where the module goes in the base, and whether its shapes fit.
void check_module(Module& m, const std::string& arch, const gguf::File& base,
                  const std::string& base_path) {
  const char* a_name = m.embedding ? "lora_embedding_A" : "lora_A";
  const char* b_name = m.embedding ? "lora_embedding_B" : "lora_B";
  if (!m.a && !m.b) {
    not_lora(m.base_layer->name);  // a full weight without LoRA factors beside it
  }
  if (!m.a || !m.b) {
    const StTensor* have = m.a ? m.a : m.b;
    fail(LILIMS_ERR_MISSING, "adapter_model.safetensors tensor " + have->name + " has no " +
                                 (m.a ? b_name : a_name) + " beside it (module " + m.path + ")");
  }
  if (!hf_weight_gguf_name(arch, m.path + ".weight", &m.target)) {
    fail(LILIMS_ERR_UNSUPPORTED, "adapter_model.safetensors tensor " + m.a->name + ": module " +
                                     m.path + " has no GGUF name for architecture " + arch);
  }
  m.base = base.find_tensor(m.target.gguf);
  if (!m.base) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "adapter_model.safetensors tensor " + m.a->name + " adapts " +
                                          m.path + ", which is " + m.target.gguf +
                                          " in GGUF, but " + base_path +
                                          " has no such tensor (an adapter for another model?)");
  }
  const bool is_embd = m.target.gguf == "token_embd.weight";
  if (is_embd != m.embedding) {
    fail(LILIMS_ERR_UNSUPPORTED,
         "module " + m.path + " (" + m.target.gguf + ") is adapted by " + a_name + " / " + b_name +
             ": llama.cpp's format expects lora_embedding_A / " +
             "lora_embedding_B for the token embedding and lora_A / lora_B elsewhere");
  }
  const std::vector<uint64_t>& ne = m.base->ne;
  if (ne.size() != 2) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, base_path + " tensor " + m.target.gguf + " has " +
                                          std::to_string(ne.size()) + " dimensions, not 2");
  }
  for (const StTensor* t : {m.a, m.b}) {
    if (t->shape.size() != 2 || t->shape[0] == 0 || t->shape[1] == 0) {
      fail(LILIMS_ERR_BAD_FORMAT, "adapter_model.safetensors tensor " + t->name + " has shape " +
                                      shape_str(t->shape) + ", expected a non-empty matrix");
    }
  }
  // Linear: A (r, n_in), B (n_out, r) against ne [n_in, n_out].  Embedding:
  // A (r, vocab), B (dim, r) against ne [dim, vocab].
  const uint64_t a_rank = m.a->shape[0], b_rank = m.b->shape[1];
  if (a_rank != b_rank) {
    fail(LILIMS_ERR_BAD_FORMAT, "module " + m.path + ": " + a_name + " " + shape_str(m.a->shape) +
                                    " has rank " + std::to_string(a_rank) + " but " + b_name + " " +
                                    shape_str(m.b->shape) + " has rank " + std::to_string(b_rank));
  }
  const uint64_t a_cols = m.embedding ? ne[1] : ne[0], b_rows = m.embedding ? ne[0] : ne[1];
  if (m.a->shape[1] != a_cols || m.b->shape[0] != b_rows) {
    fail(LILIMS_ERR_INVALID_ARGUMENT,
         "module " + m.path + ": " + a_name + " " + shape_str(m.a->shape) + " and " + b_name + " " +
             shape_str(m.b->shape) + " do not fit " + base_path + " tensor " + m.target.gguf +
             " ne [" + std::to_string(ne[0]) + ", " + std::to_string(ne[1]) + "] (expected (r, " +
             std::to_string(a_cols) + ") and (" + std::to_string(b_rows) + ", r))");
  }
  if (m.base_layer && (m.base_layer->shape.size() != 2 || m.base_layer->shape[0] != ne[1] ||
                       m.base_layer->shape[1] != ne[0])) {
    fail(LILIMS_ERR_INVALID_ARGUMENT,
         "adapter_model.safetensors tensor " + m.base_layer->name + " " +
             shape_str(m.base_layer->shape) + " is not the shape of " + base_path + " tensor " +
             m.target.gguf + " (a resized vocabulary?): the adapter is for another model");
  }
  m.rank = static_cast<int64_t>(a_rank);
}

void add_matrix(gguf::Writer* out, const std::string& name, const std::vector<float>& v,
                uint64_t cols, quant::Type type) {
  const std::vector<uint64_t> ne{cols, v.size() / cols};
  std::vector<uint8_t> bytes(quant::row_bytes(type, (int64_t)v.size()));
  quant::quantize_row(type, v.data(), bytes.data(), (int64_t)v.size());
  out->add_tensor(name, ne, static_cast<uint32_t>(type), bytes.data(), bytes.size());
}

std::string dir_name(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

bool is_peft_dir(const std::string& dir) {
  struct stat st;
  return ::stat((dir + "/adapter_config.json").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

gguf::Writer convert_peft_dir(const std::string& dir, const std::string& base_path,
                              const PeftConvertOptions& opt, std::vector<std::string>* notes) {
  if (opt.type != quant::Type::F32 && opt.type != quant::Type::F16) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, std::string("a PEFT adapter converts to F32 or F16, not ") +
                                          quant::ggml_type_name(static_cast<uint32_t>(opt.type)));
  }
  const AdapterConfig cfg = read_config(dir);
  const std::unique_ptr<gguf::File> base = gguf::File::open(base_path);
  if (base->get_string_or("general.type", "model") == "adapter") {
    fail(LILIMS_ERR_INVALID_ARGUMENT, base_path + " is an adapter, not the base model");
  }
  const std::string arch = base->get_string("general.architecture");

  const std::string st_path = dir + "/adapter_model.safetensors";
  struct stat sb;
  if (::stat(st_path.c_str(), &sb) != 0) {
    if (::stat((dir + "/adapter_model.bin").c_str(), &sb) == 0) {
      fail(LILIMS_ERR_UNSUPPORTED, dir +
                                       " holds adapter_model.bin, a PyTorch pickle, which is not " +
                                       "read: save the adapter with safe_serialization=True");
    }
    fail(LILIMS_ERR_MISSING, dir + " has no adapter_model.safetensors");
  }
  const std::unique_ptr<SafetensorsFile> st = SafetensorsFile::open(st_path);
  std::map<std::string, Module> modules = group_tensors(*st, cfg);
  if (modules.empty()) fail(LILIMS_ERR_MISSING, st_path + " holds no LoRA tensors");

  // The one alpha that gives every module PEFT's scale (see convert_peft.h).
  std::map<std::string, const Module*> by_target;
  double alpha = 0.0;
  const Module* alpha_from = nullptr;
  size_t n_base_layers = 0;
  for (auto& kv : modules) {
    Module& m = kv.second;
    check_module(m, arch, *base, base_path);
    if (!by_target.emplace(m.target.gguf, &m).second) {
      fail(LILIMS_ERR_BAD_FORMAT, "modules " + by_target[m.target.gguf]->path + " and " + m.path +
                                      " both adapt " + m.target.gguf);
    }
    n_base_layers += m.base_layer != nullptr;
    const json* r_pat = pattern_value(cfg.rank_pattern, m.path, "rank_pattern");
    const int64_t want_r = r_pat ? r_pat->get<int64_t>() : cfg.r;
    if (m.rank != want_r) {
      fail(LILIMS_ERR_BAD_FORMAT, "module " + m.path + " has rank " + std::to_string(m.rank) +
                                      " but adapter_config.json gives it r = " +
                                      std::to_string(want_r) + (r_pat ? " (rank_pattern)" : ""));
    }
    const json* a_pat = pattern_value(cfg.alpha_pattern, m.path, "alpha_pattern");
    const double alpha_m = a_pat ? a_pat->get<double>() : cfg.alpha;
    const double rank = static_cast<double>(m.rank);
    const double scale = alpha_m / (cfg.rslora ? std::sqrt(rank) : rank);
    m.scale = scale;
    if (opt.rank > 0) {
      if (m.rank < opt.rank) {
        fail(LILIMS_ERR_INVALID_ARGUMENT, "--rank " + std::to_string(opt.rank) + " is more than module " +
                                              m.path + "'s rank " + std::to_string(m.rank));
      }
      if (scale == 0.0) fail(LILIMS_ERR_UNSUPPORTED, "module " + m.path + " has scale 0 (its alpha is 0)");
      continue;  // the scales go into the factors: any per-module scale converts
    }
    const double need = scale * rank;
    if (!alpha_from) {
      alpha = need;
      alpha_from = &m;
    } else if (std::fabs(need - alpha) > 1e-6 * std::max(std::fabs(need), std::fabs(alpha))) {
      fail(LILIMS_ERR_UNSUPPORTED,
           "per-module scales llama.cpp's format cannot hold: it has one adapter.lora.alpha and "
           "scales each weight by alpha / rank, but module " +
               alpha_from->path + " needs alpha " + num(alpha) + " and module " + m.path +
               " needs " + num(need) +
               " (from lora_alpha, alpha_pattern, rank_pattern and use_rslora)");
    }
  }
  if (opt.rank > 0) alpha = static_cast<double>(opt.rank);  // alpha / rank = 1
  if (alpha == 0.0) {
    fail(LILIMS_ERR_UNSUPPORTED,
         "the adapter's alpha is 0: PEFT's scale is 0, but llama.cpp reads an alpha of 0 "
         "as \"no alpha\" (scale 1)");
  }
  if (notes && opt.rank == 0 && static_cast<float>(alpha) != static_cast<float>(cfg.alpha)) {
    notes->push_back("adapter.lora.alpha = " + num(static_cast<float>(alpha)) +
                     ", not lora_alpha " + num(cfg.alpha) + ": with " +
                     (cfg.rslora ? "use_rslora" : "alpha_pattern") +
                     " it is the alpha whose alpha / rank is PEFT's scale");
  }
  if (notes && n_base_layers) {
    notes->push_back(
        "skipped " + std::to_string(n_base_layers) + " full weight(s) the adapter carries " +
        "beside its LoRA factors (*.base_layer.weight, PEFT's save_embedding_layers): " +
        "the base model's own are used");
  }

  gguf::Writer out;
  out.add_string("general.architecture", arch);
  out.add_string("general.type", "adapter");
  out.add_string("general.name", opt.name.empty() ? dir_name(dir) : opt.name);
  out.add_string("adapter.type", "lora");
  out.add_f32("adapter.lora.alpha", static_cast<float>(alpha));
  if (!opt.tool_format.empty()) out.add_string("lilims.tool_format", opt.tool_format);
  double least_kept = 2.0, kept_sum = 0.0;
  std::string least_kept_module;
  size_t n_truncated = 0;
  const int64_t n_head = base->get_int(arch + ".attention.head_count");
  const int64_t n_head_kv = base->get_int_or(arch + ".attention.head_count_kv", n_head);
  for (const gguf::TensorInfo& t : base->tensors()) {
    const auto it = by_target.find(t.name);
    if (it == by_target.end()) continue;
    const Module& m = *it->second;
    uint64_t r = static_cast<uint64_t>(m.rank);
    std::vector<float> a = st_to_f32(*m.a);
    std::vector<float> b = st_to_f32(*m.b);
    const uint64_t a_cols = m.a->shape[1], b_rows = m.b->shape[0];
    if (opt.rank > 0) {
      LowRankFactors f = truncate_lora(b.data(), a.data(), (int64_t)b_rows, (int64_t)a_cols,
                                       (int64_t)r, opt.rank, m.scale);
      if (f.kept < least_kept) {
        least_kept = f.kept;
        least_kept_module = m.path;
      }
      kept_sum += f.kept;
      ++n_truncated;
      a.swap(f.a);
      b.swap(f.b);
      r = static_cast<uint64_t>(opt.rank);
    }
    if (m.embedding) {
      // llama.cpp gathers rows of lora_a by token: (vocab, r), A transposed.
      std::vector<float> at(a.size());
      for (uint64_t i = 0; i < r; ++i) {
        for (uint64_t j = 0; j < a_cols; ++j) at[j * r + i] = a[i * a_cols + j];
      }
      a.swap(at);
      add_matrix(&out, t.name + ".lora_a", a, r, opt.type);
    } else {
      add_matrix(&out, t.name + ".lora_a", a, a_cols, opt.type);
    }
    if (m.target.rows != HfWeightName::Rows::as_is) {
      const int64_t heads = m.target.rows == HfWeightName::Rows::rope_q ? n_head : n_head_kv;
      b = permute_rope_rows(b, b_rows, r, heads, m.b->name);
    }
    add_matrix(&out, t.name + ".lora_b", b, r, opt.type);
  }
  if (notes && n_truncated) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.2f%% on average, %.2f%% at the least (", 100.0 * kept_sum / n_truncated,
                  100.0 * least_kept);
    notes->push_back("rank " + std::to_string(opt.rank) + ": each product B A cut to its best rank-" +
                     std::to_string(opt.rank) + " approximation, keeping of its squared norm " + buf +
                     least_kept_module + "); PEFT's scales are in the factors, adapter.lora.alpha = " +
                     std::to_string(opt.rank));
  }
  return out;
}

}  // namespace lilims::models
