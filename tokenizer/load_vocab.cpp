// Tokenizer from a plain vocabulary description (tokenizer/vocab.h).
#include <cctype>
#include <climits>
#include <initializer_list>

#include "base/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {

namespace {

[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] " + msg);
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

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(const Vocab& v) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (v.model == "llama") {
    t->type_ = VocabType::kSpm;
  } else if (v.model == "gpt2") {
    t->type_ = VocabType::kBpe;
  } else if (v.model == "bert") {
    t->type_ = VocabType::kWordPiece;
  } else {
    throw Error(LILIMS_ERR_UNSUPPORTED,
                "[tokenizer] unsupported tokenizer model '" + v.model + "' (tokenizer.ggml.model)");
  }
  // Only byte-level BPE reads the pre-tokenizer (llama.cpp ignores it for
  // the others: SentencePiece files say "default").
  const std::string pre = v.pre.empty() ? "default" : v.pre;
  PreTokenizerSpec spec{};
  if (t->type_ == VocabType::kBpe) {
    if (!pre_tokenizer_from_name(pre, &spec)) {
      throw Error(LILIMS_ERR_UNSUPPORTED,
                  "[tokenizer] unsupported pre-tokenizer '" + pre +
                      "' (tokenizer.ggml.pre): none of the splits lilims implements has that name");
    }
    t->pre_ = spec.split;
    t->ignore_merges_ = spec.ignore_merges;
  }

  if (v.tokens.size() > static_cast<size_t>(INT32_MAX)) bad("the vocabulary has too many tokens");
  const size_t n = v.tokens.size();
  if (!v.scores.empty() && v.scores.size() != n) {
    bad("scores has " + std::to_string(v.scores.size()) + " entries for " + std::to_string(n) + " tokens");
  }
  if (!v.types.empty() && v.types.size() != n) {
    bad("token types has " + std::to_string(v.types.size()) + " entries for " + std::to_string(n) +
        " tokens");
  }
  t->tokens_ = v.tokens;
  t->scores_ = v.scores;
  t->types_ = v.types;

  const bool spm = t->type_ == VocabType::kSpm;
  const bool wpm = t->type_ == VocabType::kWordPiece;
  t->bos_ = v.bos.value_or(spm ? 1 : -1);
  t->eos_ = v.eos.value_or(spm ? 2 : -1);
  t->unk_ = v.unk.value_or(spm ? 0 : -1);
  t->eot_ = v.eot.value_or(-1);
  t->eom_ = v.eom.value_or(-1);
  t->add_bos_ = v.add_bos.value_or(spm || wpm || spec.add_bos);
  t->add_eos_ = v.add_eos.value_or(wpm);
  t->add_space_prefix_ = v.add_space_prefix.value_or(spm);
  t->chat_template_ = v.chat_template;

  t->gguf_token_rules_ = true;
  t->finalize();
  t->set_strip_by_name(v.name, v.architecture, v.pre);

  if (t->type_ == VocabType::kBpe) {
    t->merges_.reserve(v.merges.size() * 2);
    int32_t rank = 0;
    for (const std::string& m : v.merges) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) bad("bad merge '" + m + "' (tokenizer.ggml.merges)");
      t->add_merge(m.substr(0, sp), m.substr(sp + 1), rank++);
    }
  }
  return t;
}

}  // namespace lilims::tok
