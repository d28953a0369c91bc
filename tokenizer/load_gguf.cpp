// Tokenizer from GGUF metadata (the tokenizer.ggml.* keys llama.cpp's
// converter writes).
#include <cctype>
#include <climits>
#include <initializer_list>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {

namespace {

[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] " + msg);
}

// The array under `key`, with elements of one of the accepted types.
const gguf::Value* find_array(const gguf::File& f, const std::string& key, bool required,
                              std::initializer_list<gguf::ValueType> elem_types) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) throw Error(LILIMS_ERR_MISSING, "[tokenizer] missing required key " + key);
    return nullptr;
  }
  if (v->type != gguf::ValueType::ARRAY) {
    bad(key + " has type " + gguf::value_type_name(v->type) + ", expected an array");
  }
  for (gguf::ValueType t : elem_types) {
    if (v->elem_type == t) return v;
  }
  bad(key + " is an array of " + gguf::value_type_name(v->elem_type) + ", expected an array of " +
      gguf::value_type_name(*elem_types.begin()));
}

bool is_integer_type(gguf::ValueType t) {
  gguf::Value probe;
  probe.type = t;
  return probe.is_integer() && t != gguf::ValueType::BOOL;
}

// A special-token id: an integer in [-1, 2^32).  UINT32 0xFFFFFFFF is how
// some converters write "none"; ids past the vocabulary are dropped later
// (finalize), as llama.cpp ignores them.  Anything else would be truncated.
int32_t token_id(const gguf::File& f, const std::string& key, int32_t fallback) {
  const gguf::Value* v = f.find(key);
  if (!v) return fallback;
  if (!is_integer_type(v->type)) {
    bad(key + " has type " + gguf::value_type_name(v->type) + ", expected an integer token id");
  }
  const bool negative = v->i < 0;
  if ((negative && v->i != -1) || (!negative && v->u > 0xFFFFFFFFull)) {
    bad(key + " is " + (negative ? std::to_string(v->i) : std::to_string(v->u)) +
        ", not a token id");
  }
  if (negative || v->u == 0xFFFFFFFFull) return -1;
  return v->u > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int32_t>(v->u);
}

}  // namespace

void Tokenizer::set_strip_by_name(std::string name, const std::string& arch, const std::string& pre) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto contains = [](const std::string& s, std::initializer_list<const char*> parts) {
    for (const char* p : parts) {
      if (s.find(p) != std::string::npos) return true;
    }
    return false;
  };
  auto set = [&](const char* text, uint8_t flag, bool on) {
    const int32_t id = index_.find(text);
    if (id < 0) return;
    strip_[id] = on ? (strip_[id] | flag) : (strip_[id] & ~flag);
  };
  if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", kStripLeft, true);
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (size_t id = 0; id < types_.size(); ++id) {
      const uint8_t ty = types_[id];
      if (ty == kTokenControl || ty == kTokenUserDefined || ty == kTokenUnknown) strip_[id] |= kStripRight;
    }
    set("</s>", kStripRight, true);
    for (const char* s : {"<unk>", "<s>", "<|endoftext|>"}) set(s, kStripRight, false);
  } else if (contains(name, {"modern-bert"})) {
    set("[MASK]", kStripLeft, true);
  }
}

void Tokenizer::add_merge(const std::string& left, const std::string& right, int32_t rank) {
  const int32_t a = index_.find(left), b = index_.find(right);
  if (a < 0 || b < 0) return;
  const int32_t m = index_.find(left + right);
  if (m < 0) return;  // HF skips merges whose result is not in the vocabulary
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  merges_.emplace(key, MergeInfo{rank, m});  // the first (lowest) rank wins
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const gguf::Value* model_v = f.find("tokenizer.ggml.model");
  if (!model_v) throw Error(LILIMS_ERR_MISSING, "[tokenizer] missing required key tokenizer.ggml.model");
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "llama") {
    t->type_ = VocabType::kSpm;
  } else if (model == "gpt2") {
    t->type_ = VocabType::kBpe;
  } else if (model == "bert") {
    t->type_ = VocabType::kWordPiece;
  } else {
    throw Error(LILIMS_ERR_UNSUPPORTED,
                "[tokenizer] unsupported tokenizer model '" + model + "' (tokenizer.ggml.model)");
  }
  if (t->type_ == VocabType::kBpe) {
    const std::string pre = f.get_string_or("tokenizer.ggml.pre", "default");
    if (!pre_tokenizer_from_name(pre, &t->pre_)) {
      throw Error(LILIMS_ERR_UNSUPPORTED,
                  "[tokenizer] unsupported pre-tokenizer '" + pre + "' (tokenizer.ggml.pre)");
    }
    t->ignore_merges_ = t->pre_ == PreTokenizer::kLlama3;
  }

  using VT = gguf::ValueType;
  const gguf::Value* toks = find_array(f, "tokenizer.ggml.tokens", true, {VT::STRING});
  if (toks->size() > static_cast<size_t>(INT32_MAX)) bad("tokenizer.ggml.tokens has too many tokens");
  t->tokens_.reserve(toks->size());
  for (size_t k = 0; k < toks->size(); ++k) t->tokens_.emplace_back(toks->string_at(k));
  const size_t n = t->tokens_.size();
  if (const gguf::Value* sc =
          find_array(f, "tokenizer.ggml.scores", false, {VT::FLOAT32, VT::FLOAT64})) {
    if (sc->size() != n) {
      bad("tokenizer.ggml.scores has " + std::to_string(sc->size()) + " entries for " +
          std::to_string(n) + " tokens");
    }
    t->scores_.reserve(n);
    for (size_t k = 0; k < n; ++k) t->scores_.push_back(static_cast<float>(sc->at(k).f));
  }
  if (const gguf::Value* ty = find_array(f, "tokenizer.ggml.token_type", false,
                                         {VT::INT32, VT::UINT32, VT::INT8, VT::UINT8, VT::INT16,
                                          VT::UINT16, VT::INT64, VT::UINT64})) {
    if (ty->size() != n) {
      bad("tokenizer.ggml.token_type has " + std::to_string(ty->size()) + " entries for " +
          std::to_string(n) + " tokens");
    }
    t->types_.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      const gguf::Value e = ty->at(k);
      if (e.i < 0 || e.u > 0xFF) {
        bad("tokenizer.ggml.token_type[" + std::to_string(k) + "] is " +
            (e.i < 0 ? std::to_string(e.i) : std::to_string(e.u)) + ", not a token type");
      }
      t->types_.push_back(static_cast<uint8_t>(e.u));
    }
  }

  auto id_key = [&](const char* key, int32_t fallback) { return token_id(f, key, fallback); };
  const bool spm = t->type_ == VocabType::kSpm;
  const bool wpm = t->type_ == VocabType::kWordPiece;
  t->bos_ = id_key(wpm ? "tokenizer.ggml.cls_token_id" : "tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  if (wpm) t->bos_ = id_key("tokenizer.ggml.bos_token_id", t->bos_);
  t->eos_ = id_key(wpm ? "tokenizer.ggml.seperator_token_id" : "tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  if (wpm) t->eos_ = id_key("tokenizer.ggml.eos_token_id", t->eos_);
  t->unk_ = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  t->eot_ = id_key("tokenizer.ggml.eot_token_id", -1);
  t->eom_ = id_key("tokenizer.ggml.eom_token_id", -1);
  t->add_bos_ = f.get_bool_or("tokenizer.ggml.add_bos_token", spm || wpm);
  t->add_eos_ = f.get_bool_or("tokenizer.ggml.add_eos_token", wpm);
  t->add_space_prefix_ = f.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
  t->chat_template_ = f.get_string_or("tokenizer.chat_template", "");

  t->finalize();
  t->set_strip_by_name(f.get_string_or("general.name", ""), f.get_string_or("general.architecture", ""),
                       f.get_string_or("tokenizer.ggml.pre", ""));

  if (t->type_ == VocabType::kBpe) {
    const gguf::Value* merges = find_array(f, "tokenizer.ggml.merges", true, {VT::STRING});
    t->merges_.reserve(merges->size() * 2);
    int32_t rank = 0;
    for (size_t k = 0; k < merges->size(); ++k) {
      const std::string_view m = merges->string_at(k);
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos) {
        bad("bad merge '" + std::string(m) + "' (tokenizer.ggml.merges)");
      }
      t->add_merge(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)), rank++);
    }
  }
  return t;
}

}  // namespace lilims::tok
