// Tokenizer from GGUF metadata (the tokenizer.ggml.* keys llama.cpp's
// converter writes).
#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {

namespace {

const gguf::Value* find_array(const gguf::File& f, const std::string& key, bool required) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) throw Error(LILIMS_ERR_MISSING, "[tokenizer] missing required key " + key);
    return nullptr;
  }
  if (v->type != gguf::ValueType::ARRAY) {
    throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] " + key + " is not an array");
  }
  return v;
}

}  // namespace

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

  const gguf::Value* toks = find_array(f, "tokenizer.ggml.tokens", true);
  t->tokens_.reserve(toks->arr.size());
  for (const gguf::Value& v : toks->arr) t->tokens_.push_back(v.s);
  const size_t n = t->tokens_.size();
  if (const gguf::Value* sc = find_array(f, "tokenizer.ggml.scores", false)) {
    if (sc->arr.size() != n) throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] tokenizer.ggml.scores has the wrong length");
    t->scores_.reserve(n);
    for (const gguf::Value& v : sc->arr) t->scores_.push_back(static_cast<float>(v.f));
  }
  if (const gguf::Value* ty = find_array(f, "tokenizer.ggml.token_type", false)) {
    if (ty->arr.size() != n) throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] tokenizer.ggml.token_type has the wrong length");
    t->types_.reserve(n);
    for (const gguf::Value& v : ty->arr) t->types_.push_back(static_cast<uint8_t>(v.i));
  }

  auto id_key = [&](const char* key, int32_t fallback) {
    return static_cast<int32_t>(f.get_int_or(key, fallback));
  };
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

  if (t->type_ == VocabType::kBpe) {
    const gguf::Value* merges = find_array(f, "tokenizer.ggml.merges", true);
    t->merges_.reserve(merges->arr.size() * 2);
    int32_t rank = 0;
    for (const gguf::Value& v : merges->arr) {
      const size_t sp = v.s.find(' ', 1);
      if (sp == std::string::npos) {
        throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] bad merge '" + v.s + "' (tokenizer.ggml.merges)");
      }
      t->add_merge(v.s.substr(0, sp), v.s.substr(sp + 1), rank++);
    }
  }
  return t;
}

}  // namespace lilims::tok
