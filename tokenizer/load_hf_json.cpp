// Tokenizer from a Hugging Face tokenizer.json: the BPE model (byte-level,
// or SentencePiece-style with byte_fallback) or WordPiece, its vocab, merges
// and added_tokens, and the pre-tokenizer recognised from its components.
#include "base/error.h"
#include "base/nlohmann_json.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {

namespace {

using nlohmann::json;

void collect_steps(const json& node, std::vector<const json*>* out) {
  if (!node.is_object()) return;
  if (node.value("type", "") == "Sequence") {
    const char* key = node.contains("pretokenizers") ? "pretokenizers"
                      : node.contains("normalizers")  ? "normalizers"
                                                      : "decoders";
    if (node.contains(key) && node[key].is_array()) {
      for (const json& child : node[key]) collect_steps(child, out);
    }
    return;
  }
  out->push_back(&node);
}

std::string split_pattern(const json& step) {
  if (!step.contains("pattern")) return "";
  const json& p = step["pattern"];
  if (p.contains("Regex")) return p["Regex"].get<std::string>();
  if (p.contains("String")) return p["String"].get<std::string>();
  return "";
}

bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

PreTokenizer recognise_pre_tokenizer(const json& root) {
  std::vector<const json*> steps;
  if (root.contains("pre_tokenizer")) collect_steps(root["pre_tokenizer"], &steps);
  bool digits1 = false, byte_level_regex = false, punctuation = false;
  std::vector<std::string> patterns;
  for (const json* s : steps) {
    const std::string type = s->value("type", "");
    if (type == "Digits") {
      digits1 |= s->value("individual_digits", false);
    } else if (type == "ByteLevel") {
      byte_level_regex |= s->value("use_regex", true);
    } else if (type == "Punctuation") {
      punctuation = true;
    } else if (type == "Split") {
      patterns.push_back(split_pattern(*s));
    } else if (type == "Metaspace" || type == "WhitespaceSplit" || type == "BertPreTokenizer") {
      // handled by the model kind
    } else {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[tokenizer] unsupported pre-tokenizer step '" + type + "'");
    }
  }
  for (const std::string& p : patterns) {
    // GPT-4o's o200k: words split where upper case turns to lower.
    if (contains(p, "\\p{N}{1,3}") && contains(p, "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}")) {
      return PreTokenizer::kGpt4o;
    }
    if (contains(p, "\\p{N}{1,3}")) return PreTokenizer::kLlama3;
    if (contains(p, "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") && contains(p, "\\p{N}|")) return PreTokenizer::kQwen2;
  }
  if (!patterns.empty() && patterns[0] == "[\r\n]") {
    for (const std::string& p : patterns) {
      if (contains(p, "\xC2\xB5")) return PreTokenizer::kDeepseekLlm;  // the letter ranges list µ
    }
    return PreTokenizer::kDeepseekCoder;
  }
  if (punctuation) return PreTokenizer::kFalcon;
  if (digits1) return PreTokenizer::kDigitsGpt2;
  if (byte_level_regex) return PreTokenizer::kGpt2;
  for (const std::string& p : patterns) {
    if (contains(p, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+")) return PreTokenizer::kGpt2;
    throw Error(LILIMS_ERR_UNSUPPORTED, "[tokenizer] unsupported pre-tokenizer pattern '" + p + "'");
  }
  return PreTokenizer::kNone;
}

bool has_step(const json& root, const char* section, const char* type) {
  std::vector<const json*> steps;
  if (root.contains(section)) collect_steps(root[section], &steps);
  for (const json* s : steps) {
    if (s->value("type", "") == type) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(LILIMS_ERR_BAD_FORMAT, std::string("[tokenizer] tokenizer.json: ") + e.what());
  }
  try {
    if (!root.contains("model") || !root["model"].is_object()) {
      throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] tokenizer.json has no model");
    }
    const json& model = root["model"];
    const std::string mtype = model.value("type", "");
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    const bool byte_level = has_step(root, "pre_tokenizer", "ByteLevel") || has_step(root, "decoder", "ByteLevel");
    if (mtype == "BPE") {
      t->type_ = byte_level ? VocabType::kBpe : VocabType::kSpm;
    } else if (mtype == "WordPiece") {
      t->type_ = VocabType::kWordPiece;
    } else {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[tokenizer] unsupported tokenizer.json model '" + mtype + "'");
    }

    // Vocabulary and added tokens, by id.
    int32_t n = 0;
    for (const auto& kv : model.at("vocab").items()) n = std::max(n, kv.value().get<int32_t>() + 1);
    const json added = root.value("added_tokens", json::array());
    for (const json& a : added) n = std::max(n, a.at("id").get<int32_t>() + 1);
    t->tokens_.assign(n, "");
    t->types_.assign(n, kTokenUnused);
    // Written as null when unset (the `tokenizers` package writes every option).
    const std::string wp_prefix = model.contains("continuing_subword_prefix") &&
                                          model["continuing_subword_prefix"].is_string()
                                      ? model["continuing_subword_prefix"].get<std::string>()
                                      : "##";
    for (const auto& kv : model.at("vocab").items()) {
      const int32_t id = kv.value().get<int32_t>();
      std::string text = kv.key();
      uint8_t type = kTokenNormal;
      if (t->type_ == VocabType::kSpm && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
        type = kTokenByte;
      }
      if (t->type_ == VocabType::kWordPiece) {
        // GGUF's convention: "▁word" starts a word, "piece" continues one.
        if (text.compare(0, wp_prefix.size(), wp_prefix) == 0) {
          text = text.substr(wp_prefix.size());
        } else {
          text = "\xE2\x96\x81" + text;
        }
      }
      t->tokens_[id] = text;
      t->types_[id] = type;
    }
    t->strip_.assign(n, 0);
    for (const json& a : added) {
      const int32_t id = a.at("id").get<int32_t>();
      t->tokens_[id] = a.at("content").get<std::string>();
      t->types_[id] = a.value("special", false) ? kTokenControl : kTokenUserDefined;
      t->strip_[id] = (a.value("lstrip", false) ? kStripLeft : 0) |
                      (a.value("rstrip", false) ? kStripRight : 0);
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string unk = model["unk_token"].get<std::string>();
      for (int32_t id = 0; id < n; ++id) {
        if (t->tokens_[id] == unk) {
          t->unk_ = id;
          if (t->types_[id] == kTokenNormal) t->types_[id] = kTokenUnknown;
          break;
        }
      }
    }
    auto find_text = [&](const std::string& s) {
      for (int32_t id = 0; id < n; ++id) {
        if (t->tokens_[id] == s) return id;
      }
      return -1;
    };

    // BOS/EOS: from a TemplateProcessing post-processor when there is one.
    const json post = root.value("post_processor", json());
    std::vector<const json*> posts;
    collect_steps(post, &posts);
    for (const json* p : posts) {
      if (p->value("type", "") != "TemplateProcessing" || !p->contains("single")) continue;
      bool seen_a = false;
      for (const json& piece : (*p)["single"]) {
        if (piece.contains("Sequence")) {
          seen_a = true;
        } else if (piece.contains("SpecialToken")) {
          const int32_t id = find_text(piece["SpecialToken"].value("id", ""));
          if (id < 0) continue;
          if (!seen_a) {
            t->bos_ = id;
            t->add_bos_ = true;
          } else {
            t->eos_ = id;
            t->add_eos_ = true;
          }
        }
      }
    }
    if (t->type_ == VocabType::kWordPiece) {
      if (t->bos_ < 0) t->bos_ = find_text("[CLS]");
      if (t->eos_ < 0) t->eos_ = find_text("[SEP]");
    }
    for (const char* s : {"<s>", "<|begin_of_text|>", "<|im_start|>"}) {
      if (t->bos_ < 0) t->bos_ = find_text(s);
    }
    for (const char* s : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"}) {
      if (t->eos_ < 0) t->eos_ = find_text(s);
    }

    if (t->type_ == VocabType::kBpe) {
      t->pre_ = recognise_pre_tokenizer(root);
      t->ignore_merges_ = model.value("ignore_merges", false);
    } else if (t->type_ == VocabType::kSpm) {
      t->add_space_prefix_ = has_step(root, "normalizer", "Prepend") || has_step(root, "pre_tokenizer", "Metaspace");
    } else {
      std::vector<const json*> norms;
      if (root.contains("normalizer")) collect_steps(root["normalizer"], &norms);
      for (const json* s : norms) {
        if (s->value("type", "") == "BertNormalizer") t->wp_lowercase_ = s->value("lowercase", true);
      }
    }

    // Merges ("a b" strings or ["a", "b"] pairs).  SentencePiece-style
    // models rank pieces by score: a piece made by an earlier merge scores
    // higher, as in the original model.
    std::vector<std::pair<std::string, std::string>> merges;
    if (model.contains("merges")) {
      for (const json& m : model["merges"]) {
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          const size_t sp = s.find(' ', 1);
          if (sp == std::string::npos) throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] bad merge '" + s + "'");
          merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else {
          merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
        }
      }
    }
    if (t->type_ == VocabType::kSpm) {
      t->scores_.assign(n, 0.0f);
      std::vector<uint8_t> scored(n, 0);
      TokenIndex idx;
      idx.build(t->tokens_, {});
      for (size_t r = 0; r < merges.size(); ++r) {
        const int32_t id = idx.find(merges[r].first + merges[r].second);
        if (id >= 0 && !scored[id]) {
          t->scores_[id] = -static_cast<float>(r) - 1.0f;
          scored[id] = 1;
        }
      }
    }
    t->finalize();
    if (t->type_ == VocabType::kBpe) {
      t->merges_.reserve(merges.size() * 2);
      for (size_t r = 0; r < merges.size(); ++r) t->add_merge(merges[r].first, merges[r].second, static_cast<int32_t>(r));
    }
    return t;
  } catch (const json::exception& e) {
    throw Error(LILIMS_ERR_BAD_FORMAT, std::string("[tokenizer] tokenizer.json: ") + e.what());
  }
}

}  // namespace lilims::tok
