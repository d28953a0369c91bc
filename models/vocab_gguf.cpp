// The vocabulary of a GGUF file (the tokenizer.ggml.* keys llama.cpp's
// converter writes) as a tok::Vocab, and Tokenizer::from_gguf on top of it.
#include "models/vocab_gguf.h"

#include <climits>
#include <initializer_list>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/tokenizer.h"

namespace lilims::models {

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
std::optional<int32_t> token_id(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
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

tok::Vocab vocab_from_gguf(const gguf::File& f) {
  tok::Vocab v;
  if (!f.find("tokenizer.ggml.model")) {
    throw Error(LILIMS_ERR_MISSING, "[tokenizer] missing required key tokenizer.ggml.model");
  }
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string_or("tokenizer.ggml.pre", "");

  using VT = gguf::ValueType;
  const gguf::Value* toks = find_array(f, "tokenizer.ggml.tokens", true, {VT::STRING});
  if (toks->size() > static_cast<size_t>(INT32_MAX)) bad("tokenizer.ggml.tokens has too many tokens");
  v.tokens.reserve(toks->size());
  for (size_t k = 0; k < toks->size(); ++k) v.tokens.emplace_back(toks->string_at(k));
  const size_t n = v.tokens.size();
  if (const gguf::Value* sc =
          find_array(f, "tokenizer.ggml.scores", false, {VT::FLOAT32, VT::FLOAT64})) {
    if (sc->size() != n) {
      bad("tokenizer.ggml.scores has " + std::to_string(sc->size()) + " entries for " +
          std::to_string(n) + " tokens");
    }
    v.scores.reserve(n);
    for (size_t k = 0; k < n; ++k) v.scores.push_back(static_cast<float>(sc->at(k).f));
  }
  if (const gguf::Value* ty = find_array(f, "tokenizer.ggml.token_type", false,
                                         {VT::INT32, VT::UINT32, VT::INT8, VT::UINT8, VT::INT16,
                                          VT::UINT16, VT::INT64, VT::UINT64})) {
    if (ty->size() != n) {
      bad("tokenizer.ggml.token_type has " + std::to_string(ty->size()) + " entries for " +
          std::to_string(n) + " tokens");
    }
    v.types.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      const gguf::Value e = ty->at(k);
      if (e.i < 0 || e.u > 0xFF) {
        bad("tokenizer.ggml.token_type[" + std::to_string(k) + "] is " +
            (e.i < 0 ? std::to_string(e.i) : std::to_string(e.u)) + ", not a token type");
      }
      v.types.push_back(static_cast<uint8_t>(e.u));
    }
  }

  // WordPiece files name BOS/EOS cls/seperator (sic); bos/eos take precedence.
  const bool wpm = v.model == "bert";
  v.bos = token_id(f, wpm ? "tokenizer.ggml.cls_token_id" : "tokenizer.ggml.bos_token_id");
  if (wpm) {
    if (auto b = token_id(f, "tokenizer.ggml.bos_token_id")) v.bos = b;
  }
  v.eos = token_id(f, wpm ? "tokenizer.ggml.seperator_token_id" : "tokenizer.ggml.eos_token_id");
  if (wpm) {
    if (auto e = token_id(f, "tokenizer.ggml.eos_token_id")) v.eos = e;
  }
  v.unk = token_id(f, "tokenizer.ggml.unknown_token_id");
  v.eot = token_id(f, "tokenizer.ggml.eot_token_id");
  v.eom = token_id(f, "tokenizer.ggml.eom_token_id");
  auto flag = [&](const char* key) -> std::optional<bool> {
    if (!f.find(key)) return std::nullopt;
    return f.get_bool_or(key, false);
  };
  v.add_bos = flag("tokenizer.ggml.add_bos_token");
  v.add_eos = flag("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
  v.chat_template = f.get_string_or("tokenizer.chat_template", "");
  v.name = f.get_string_or("general.name", "");
  v.architecture = f.get_string_or("general.architecture", "");

  if (v.model == "gpt2") {
    const gguf::Value* merges = find_array(f, "tokenizer.ggml.merges", true, {VT::STRING});
    v.merges.reserve(merges->size());
    for (size_t k = 0; k < merges->size(); ++k) v.merges.emplace_back(merges->string_at(k));
  }
  return v;
}

}  // namespace lilims::models

namespace lilims::tok {

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& f) {
  return from_vocab(models::vocab_from_gguf(f));
}

}  // namespace lilims::tok
