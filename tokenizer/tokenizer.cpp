// Tokenizer core: indexes, special tokens, encode dispatch, decode and the
// streaming decoder.  The merge algorithms are in encode.cpp, the loaders in
// load_gguf.cpp and load_hf_json.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/memory_info.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace lilims::tok {

namespace {

constexpr const char* kSpmSpace = "\xE2\x96\x81";  // U+2581

// The whitespace lstrip/rstrip remove: C's isspace() in the C locale, as
// llama.cpp strips (HF strips Unicode whitespace; the two agree on ASCII).
bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

}  // namespace

void TokenIndex::build(const std::vector<std::string>& tokens, const std::vector<uint8_t>& include) {
  tokens_ = &tokens;
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap <<= 1;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!include.empty() && !include[id]) continue;
    uint64_t h = hash_bytes(tokens[id]) & mask_;
    for (;; h = (h + 1) & mask_) {
      const int32_t s = slots_[h];
      if (s < 0) {
        slots_[h] = static_cast<int32_t>(id);
        break;
      }
      if (tokens[s] == tokens[id]) break;  // duplicate text: the first id wins
    }
  }
}

int32_t TokenIndex::find(std::string_view s) const {
  if (slots_.empty()) return -1;
  for (uint64_t h = hash_bytes(s) & mask_;; h = (h + 1) & mask_) {
    const int32_t id = slots_[h];
    if (id < 0) return -1;
    if ((*tokens_)[id] == s) return id;
  }
}

Tokenizer::Tokenizer() {
  byte_token_.fill(-1);
  cp_to_byte_.fill(-1);
}
Tokenizer::~Tokenizer() = default;

void Tokenizer::finalize() {
  const size_t n = tokens_.size();
  if (n == 0) throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] the vocabulary is empty");
  if (scores_.empty()) scores_.assign(n, 0.0f);
  if (types_.empty()) types_.assign(n, kTokenNormal);
  if (strip_.empty()) strip_.assign(n, 0);
  if (scores_.size() != n || types_.size() != n || strip_.size() != n) {
    throw Error(LILIMS_ERR_BAD_FORMAT, "[tokenizer] tokens, scores and token types differ in length");
  }
  auto valid = [&](int32_t& id) {
    if (id >= static_cast<int32_t>(n) || id < -1) id = -1;
  };
  valid(bos_), valid(eos_), valid(unk_), valid(eot_), valid(eom_);

  index_.build(tokens_, {});
  // Tokens that end a turn, found by their text as llama.cpp finds them
  // (llama-vocab.cpp; GGUF has no such flag).  In a GGUF vocabulary
  // llama.cpp also makes each one a control token whatever its stored type
  // (Gemma 3's "</s>" is user-defined), so that it is matched in text only
  // with parse_special; a tokenizer.json says which added tokens are special.
  // "</s>" is an ordinary token where "<|tool_response>" or "<|plamo:eos|>"
  // is the end of a turn instead (Gemma 4, PLaMo).
  std::vector<int32_t> eog_by_text;
  const bool s_is_normal = index_.find("<|tool_response>") >= 0 || index_.find("<|plamo:eos|>") >= 0;
  for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                        "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                        "<end_of_utterance>", "<eos>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"}) {
    const int32_t id = index_.find(s);
    if (id < 0) continue;
    if (s_is_normal && tokens_[id] == "</s>") {
      if (gguf_token_rules_) types_[id] = kTokenNormal;
      continue;
    }
    if (gguf_token_rules_) types_[id] = kTokenControl;
    if (types_[id] == kTokenControl) eog_by_text.push_back(id);
  }
  std::vector<uint8_t> mergeable(n);
  for (size_t i = 0; i < n; ++i) {
    mergeable[i] = types_[i] == kTokenNormal || types_[i] == kTokenUserDefined;
  }
  merge_index_.build(tokens_, mergeable);

  spm_split_words_ = type_ == VocabType::kSpm;
  for (size_t i = 0; i < n && spm_split_words_; ++i) {
    if (!mergeable[i]) continue;
    const std::string& s = tokens_[i];
    for (size_t k = s.find(kSpmSpace, 1); k != std::string::npos; k = s.find(kSpmSpace, k + 1)) {
      if (k < 3 || s.compare(k - 3, 3, kSpmSpace) != 0) {
        spm_split_words_ = false;
        break;
      }
    }
  }

  if (type_ == VocabType::kSpm) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_token_[b] = index_.find(name);
    }
  } else if (type_ == VocabType::kBpe) {
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = byte_level_cp(static_cast<uint8_t>(b));
      cp_to_byte_[cp] = static_cast<int16_t>(b);
      std::string s;
      utf8_append(s, cp);
      byte_token_[b] = index_.find(s);
    }
  }

  // Special and added tokens, matched whole in the text.
  trie_.assign(1, TrieNode{});
  trie_first_.fill(false);
  for (size_t id = 0; id < n; ++id) {
    if (types_[id] != kTokenControl && types_[id] != kTokenUserDefined) continue;
    const std::string& s = tokens_[id];
    if (s.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : s) {
      auto& ch = trie_[node].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, INT32_MIN));
      if (it != ch.end() && it->first == c) {
        node = it->second;
      } else {
        const int32_t next = static_cast<int32_t>(trie_.size());
        ch.insert(it, {c, next});
        trie_.emplace_back();
        node = next;
      }
    }
    if (trie_[node].token < 0) trie_[node].token = static_cast<int32_t>(id);
    trie_first_[static_cast<unsigned char>(s[0])] = true;
  }

  eog_.assign(n, 0);
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) eog_[id] = 1;
  }
  for (int32_t id : eog_by_text) eog_[id] = 1;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[tokenizer] token id " + std::to_string(id) + " is out of range (n_vocab " +
                    std::to_string(n_vocab()) + ")");
  }
}

int32_t Tokenizer::match_special(std::string_view text, size_t pos, bool parse_special,
                                 size_t* len) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& ch = trie_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(c, INT32_MIN));
    if (it == ch.end() || it->first != c) break;
    node = it->second;
    const int32_t id = trie_[node].token;
    if (id >= 0 && (parse_special || types_[id] == kTokenUserDefined)) {
      best = id;
      *len = i + 1 - pos;
    }
  }
  return best;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  return encode_segments({{text, parse_special}}, add_bos);
}

std::vector<int32_t> Tokenizer::encode_segments(const std::vector<Segment>& segments,
                                                bool add_bos) const {
  std::string owned;
  std::string_view text;
  std::vector<size_t> ends;  // where each segment ends in text
  if (segments.size() == 1 && utf8_is_valid(segments[0].text)) {
    text = segments[0].text;
    ends.push_back(text.size());
  } else {
    for (const Segment& s : segments) {
      owned += utf8_is_valid(s.text) ? std::string(s.text) : utf8_sanitize(s.text);
      ends.push_back(owned.size());
    }
    text = owned;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);

  // Cut the text at special/added tokens (leftmost, then longest match).
  size_t frag = 0, seg = 0;
  bool first = true;  // the fragment follows the start or a special token
  for (size_t pos = 0; pos < text.size();) {
    while (pos >= ends[seg]) ++seg;
    size_t len = 0;
    int32_t id = -1;
    if (trie_first_[static_cast<unsigned char>(text[pos])]) {
      const bool special = segments[seg].parse_special;
      id = match_special(text, pos, special, &len);
      // A special token may not reach out of the segment that allows it.
      if (id >= 0 && special && pos + len > ends[seg]) id = match_special(text, pos, false, &len);
    }
    if (id < 0) {
      ++pos;
      continue;
    }
    std::string_view left = text.substr(frag, pos - frag);
    if (strip_[id] & kStripLeft) {
      while (!left.empty() && is_c_space(left.back())) left.remove_suffix(1);
    }
    encode_fragment(left, first, &out);
    out.push_back(id);
    pos += len;
    if (strip_[id] & kStripRight) {
      while (pos < text.size() && is_c_space(text[pos])) ++pos;
    }
    frag = pos;
    first = true;
  }
  encode_fragment(text.substr(frag), first, &out);

  if (add_bos && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, bool first, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  switch (type_) {
    case VocabType::kSpm:
      encode_spm(text, first && add_space_prefix_, out);
      break;
    case VocabType::kBpe: {
      std::vector<std::pair<uint32_t, uint32_t>> pieces;
      pre_tokenize(pre_, text, &pieces);
      for (const auto& p : pieces) encode_bpe_piece(text.substr(p.first, p.second - p.first), out);
      break;
    }
    case VocabType::kWordPiece:
      encode_wordpiece(text, out);
      break;
  }
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[id];
}

uint8_t Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

int32_t Tokenizer::find_token(std::string_view text) const { return index_.find(text); }

bool Tokenizer::covers_all_bytes() const {
  if (type_ == VocabType::kWordPiece) return false;
  for (int32_t id : byte_token_) {
    if (id < 0) return false;
  }
  return true;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id]; }

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && types_[id] == kTokenControl;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  check_id(id);
  const std::string& s = tokens_[id];
  const uint8_t t = types_[id];
  std::string out;
  switch (type_) {
    case VocabType::kSpm: {
      if (t == kTokenByte) {
        // "<0xNN>"
        if (s.size() == 6) return std::string(1, static_cast<char>(std::strtol(s.c_str() + 3, nullptr, 16)));
        return s;
      }
      if (t == kTokenControl) return s;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (s.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581
          out.push_back(' ');
          i += 2;
        } else {
          out.push_back(s[i]);
        }
      }
      return out;
    }
    case VocabType::kBpe: {
      if (t == kTokenControl || t == kTokenUserDefined) return s;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        size_t len;
        const uint32_t cp = utf8_decode(s, i, &len);
        if (cp < cp_to_byte_.size() && cp_to_byte_[cp] >= 0) {
          out.push_back(static_cast<char>(cp_to_byte_[cp]));
        } else {
          out.append(s, i, len);  // not in the byte-level alphabet: keep as is
        }
        i += len;
      }
      return out;
    }
    case VocabType::kWordPiece:
      if (t == kTokenControl) return s;
      if (s.compare(0, 3, "\xE2\x96\x81") == 0) return " " + s.substr(3);
      return s;
  }
  return s;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool strip = (type_ == VocabType::kSpm && add_space_prefix_) || type_ == VocabType::kWordPiece;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check_id(id);
    if (i == 0 && add_bos_ && id == bos_ && types_[id] == kTokenControl) continue;
    std::string piece = token_to_piece(id);
    if (strip && types_[id] != kTokenControl) {
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  // Byte tokens need not form UTF-8: a model may emit a lone continuation
  // byte, and encode drops bytes a vocabulary has no token for.
  return utf8_is_valid(out) ? out : utf8_sanitize(out);
}

StreamDecoder::StreamDecoder(const Tokenizer& t) : tok_(t) {}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id);
  return drain(false);
}

std::string StreamDecoder::flush() { return drain(true); }

// Emits every complete character of pending_; invalid bytes become U+FFFD;
// an incomplete sequence at the end is kept unless final.
std::string StreamDecoder::drain(bool final) {
  std::string out;
  size_t i = 0;
  const std::string_view s = pending_;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t need = utf8_len(b);
    if (need > 1 && i + need > s.size() && !final) {
      // Keep it back only if what we have so far can still become valid.
      bool prefix_ok = true;
      for (size_t k = i + 1; k < s.size(); ++k) prefix_ok &= (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80;
      if (prefix_ok && b >= 0xC2 && b <= 0xF4) {
        // Also reject prefixes that can only be overlong/surrogate/too large.
        bool ok = true;
        if (i + 1 < s.size()) {
          const auto b1 = static_cast<uint8_t>(s[i + 1]);
          if (b == 0xE0 && b1 < 0xA0) ok = false;
          if (b == 0xED && b1 > 0x9F) ok = false;
          if (b == 0xF0 && b1 < 0x90) ok = false;
          if (b == 0xF4 && b1 > 0x8F) ok = false;
        }
        if (ok) break;
      }
    }
    size_t len;
    const uint32_t cp = utf8_decode(s, i, &len);
    if (cp == 0xFFFD && len == 1) {
      utf8_append(out, 0xFFFD);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}


size_t Tokenizer::memory_bytes() const {
  size_t n = sizeof(*this);
  for (const std::string& t : tokens_) n += string_bytes(t);
  n += scores_.capacity() * sizeof(float) + types_.capacity() + strip_.capacity() + eog_.capacity();
  n += index_.memory_bytes() + merge_index_.memory_bytes();
  // a node per merge (key, value, next pointer, cached hash) and the buckets
  n += merges_.size() * (sizeof(uint64_t) + sizeof(MergeInfo) + 2 * sizeof(void*)) +
       merges_.bucket_count() * sizeof(void*);
  for (const TrieNode& t : trie_) n += sizeof(TrieNode) + t.children.capacity() * sizeof(t.children[0]);
  return n + chat_template_.capacity();
}

}  // namespace lilims::tok
