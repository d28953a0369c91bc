// tokenizer.json + tokenizer_config.json -> tokenizer.ggml.* metadata.
#include "models/hf_tokenizer.h"

#include <unistd.h>

#include <unordered_map>

#include "base/error.h"
#include "base/file.h"
#include "base/nlohmann_json.h"
#include "models/convert_util.h"
#include "models/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::models {
namespace {

using nlohmann::json;
using hf::kByte;
using hf::kControl;
using hf::kNormal;
using hf::kUnknown;
using hf::kUnused;
using hf::kUserDefined;


[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[convert] " + msg);
}



// Every step of a pre_tokenizer / normalizer / decoder, Sequences flattened.
void collect_types(const json& node, std::vector<std::string>* out) {
  if (!node.is_object()) return;
  for (const char* key : {"pretokenizers", "normalizers", "decoders"}) {
    if (node.contains(key) && node[key].is_array()) {
      for (const json& child : node[key]) collect_types(child, out);
    }
  }
  if (node.contains("type") && node["type"].is_string()) out->push_back(node["type"].get<std::string>());
}

bool has_step(const json& root, const char* section, const char* type) {
  std::vector<std::string> types;
  if (root.contains(section)) collect_types(root[section], &types);
  for (const std::string& t : types) {
    if (t == type) return true;
  }
  return false;
}

// tokenizer_config.json names special tokens as a string or {"content": ...}.
std::string token_content(const json& cfg, const std::string& key) {
  return cfg.contains(key) ? hf::token_content(cfg[key]) : "";
}


}  // namespace

void add_hf_tokenizer(const std::string& dir, const HfTokenizerOptions& opt, gguf::Writer* out,
                      std::vector<std::string>* notes) {
  const std::string path = dir + "/tokenizer.json";
  if (!hf::regular_file_exists(path)) {
    throw Error(LILIMS_ERR_MISSING, "[convert] " + dir + " has no tokenizer.json (a tokenizer.model "
                                    "alone is not supported)");
  }
  const std::string text = read_regular_file(path, "convert");
  // lilims must be able to run what it writes: this also checks the file.
  const std::unique_ptr<tok::Tokenizer> probe = tok::Tokenizer::from_hf_json(text);
  const json root = json::parse(text);  // valid: from_hf_json parsed it
  const json cfg = hf::regular_file_exists(dir + "/tokenizer_config.json")
                       ? hf::parse_json_file(dir + "/tokenizer_config.json", "tokenizer_config.json")
                       : json::object();
  try {
    const json& model = root.at("model");
    if (model.value("type", "") != "BPE") {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[convert] tokenizer.json model '" +
                                              model.value("type", "") +
                                              "' (llama and phi models use BPE)");
    }
    const bool byte_level = probe->vocab_type() == tok::VocabType::kBpe;

    int64_t n = 0;
    for (const auto& kv : model.at("vocab").items()) n = std::max(n, kv.value().get<int64_t>() + 1);
    const json added = root.value("added_tokens", json::array());
    for (const json& a : added) n = std::max(n, a.at("id").get<int64_t>() + 1);
    if (opt.n_vocab > 0 && n > opt.n_vocab) {
      bad("tokenizer.json has ids up to " + std::to_string(n - 1) + " but config.json vocab_size is " +
          std::to_string(opt.n_vocab));
    }
    n = std::max(n, opt.n_vocab);
    if (n > (int64_t{1} << 24)) {
      bad("tokenizer.json has ids up to " + std::to_string(n - 1) + ", not a vocabulary");
    }
    std::vector<std::string> tokens(static_cast<size_t>(n));
    std::vector<int32_t> types(static_cast<size_t>(n), kUnused);
    std::vector<uint8_t> present(static_cast<size_t>(n), 0);
    std::unordered_map<std::string, int32_t> id_of;
    for (const auto& kv : model.at("vocab").items()) {
      const int64_t id = kv.value().get<int64_t>();
      if (id < 0) bad("tokenizer.json vocab id " + std::to_string(id) + " for '" + kv.key() + "'");
      tokens[id] = kv.key();
      const bool byte_tok = !byte_level && kv.key().size() == 6 && kv.key().compare(0, 3, "<0x") == 0 &&
                            kv.key()[5] == '>';
      types[id] = byte_tok ? kByte : kNormal;
      present[id] = 1;
      id_of[kv.key()] = static_cast<int32_t>(id);
    }
    for (const json& a : added) {
      const int64_t id = a.at("id").get<int64_t>();
      if (id < 0) bad("tokenizer.json added token id " + std::to_string(id));
      const std::string content = a.at("content").get<std::string>();
      tokens[id] = content;
      types[id] = a.value("special", false) ? kControl : kUserDefined;
      present[id] = 1;
      id_of[content] = static_cast<int32_t>(id);
    }
    for (int64_t id = 0; id < n; ++id) {
      if (!present[id]) tokens[id] = "[PAD" + std::to_string(id) + "]";
    }
    auto find_id = [&](const std::string& s) -> int64_t {
      if (s.empty()) return -1;
      const auto it = id_of.find(s);
      return it == id_of.end() ? -1 : it->second;
    };
    int64_t unk = -1;
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      unk = find_id(model["unk_token"].get<std::string>());
      if (unk >= 0 && types[unk] == kNormal) types[unk] = kUnknown;
    }

    std::vector<std::string> merges;
    if (model.contains("merges")) {
      for (const json& m : model["merges"]) {
        merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
      }
    }

    if (byte_level) {
      const char* pre = tok::pre_tokenizer_name(probe->pre_tokenizer());
      if (!pre) {
        throw Error(LILIMS_ERR_UNSUPPORTED,
                    "[convert] tokenizer.json: a byte-level BPE without a pre-tokenizer split");
      }
      out->add_string("tokenizer.ggml.model", "gpt2");
      out->add_string("tokenizer.ggml.pre", pre);
      out->add_string_array("tokenizer.ggml.tokens", tokens);
      out->add_i32_array("tokenizer.ggml.token_type", types);
      out->add_string_array("tokenizer.ggml.merges", merges);
    } else {
      std::vector<float> scores(static_cast<size_t>(n), 0.0f);
      std::vector<uint8_t> scored(static_cast<size_t>(n), 0);
      for (size_t r = 0; r < merges.size(); ++r) {
        const size_t sp = merges[r].find(' ', 1);
        if (sp == std::string::npos) continue;
        const int64_t id = find_id(merges[r].substr(0, sp) + merges[r].substr(sp + 1));
        if (id >= 0 && !scored[id]) {
          scores[id] = -static_cast<float>(r) - 1.0f;
          scored[id] = 1;
        }
      }
      out->add_string("tokenizer.ggml.model", "llama");
      out->add_string("tokenizer.ggml.pre", "default");
      out->add_string_array("tokenizer.ggml.tokens", tokens);
      out->add_f32_array("tokenizer.ggml.scores", scores);
      out->add_i32_array("tokenizer.ggml.token_type", types);
      out->add_bool("tokenizer.ggml.add_space_prefix",
                    has_step(root, "normalizer", "Prepend") || has_step(root, "pre_tokenizer", "Metaspace"));
    }

    int64_t bos = find_id(token_content(cfg, "bos_token"));
    int64_t eos = find_id(token_content(cfg, "eos_token"));
    if (bos < 0 && opt.bos_id >= 0 && opt.bos_id < n) bos = opt.bos_id;
    if (eos < 0 && opt.eos_id >= 0 && opt.eos_id < n) eos = opt.eos_id;
    const int64_t pad = find_id(token_content(cfg, "pad_token"));
    if (unk < 0) unk = find_id(token_content(cfg, "unk_token"));
    if (bos >= 0) out->add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
    if (eos >= 0) out->add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
    if (unk >= 0) out->add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unk));
    if (pad >= 0) out->add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(pad));

    // What HF's tokenizer adds: the post-processor's template, unless
    // tokenizer_config.json says otherwise.
    bool add_bos = probe->add_bos(), add_eos = probe->add_eos();
    auto flag = [&cfg](const char* k, bool* v) {
      if (cfg.contains(k) && cfg[k].is_boolean()) *v = cfg[k].get<bool>();
    };
    flag("add_bos_token", &add_bos);
    flag("add_eos_token", &add_eos);
    if (opt.force_no_bos) add_bos = false;
    out->add_bool("tokenizer.ggml.add_bos_token", add_bos);
    out->add_bool("tokenizer.ggml.add_eos_token", add_eos);

    const std::string tmpl = hf::chat_template(dir, cfg);
    if (!tmpl.empty()) out->add_string("tokenizer.chat_template", tmpl);

    // GGUF has no key for lstrip/rstrip: readers derive them from the
    // token's text, the model's name and architecture (llama.cpp's rules, which
    // lilims follows).  Name every added token where that differs from HF.
    const std::vector<uint8_t> image = out->to_bytes();
    const auto as_read =
        tok::Tokenizer::from_gguf(*gguf::File::from_bytes(image.data(), image.size()));
    for (const json& a : added) {
      const int32_t id = a.at("id").get<int32_t>();
      const bool l = a.value("lstrip", false), r = a.value("rstrip", false);
      if (l == as_read->strips_left(id) && r == as_read->strips_right(id)) continue;
      auto flags = [](bool left, bool right) {
        return std::string(left && right ? "lstrip and rstrip"
                           : left        ? "lstrip"
                           : right       ? "rstrip"
                                         : "neither lstrip nor rstrip");
      };
      notes->push_back("added token '" + tokens[id] + "' has " + flags(l, r) +
                       " in tokenizer.json, but GGUF readers give it " +
                       flags(as_read->strips_left(id), as_read->strips_right(id)) +
                       " (derived from its text and the model's name and architecture; "
                       "GGUF has no key for them)");
    }
  } catch (const json::exception& e) {
    bad(std::string("tokenizer.json: ") + e.what());
  }
}

}  // namespace lilims::models
