// The merge algorithms: SentencePiece BPE (score-driven), byte-level BPE
// (rank-driven) and WordPiece (greedy longest match).
#include <algorithm>
#include <climits>
#include <queue>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace lilims::tok {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace

// SentencePiece BPE: start from single characters, repeatedly merge the
// adjacent pair whose concatenation is a vocabulary piece with the highest
// score (leftmost on ties), then map pieces to ids, falling back to <0xNN>
// byte tokens (or <unk>) for characters the vocabulary lacks.
void Tokenizer::encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const {
  std::string s;
  s.reserve(text.size() + 8);
  if (prefix_space) s += kSpace;
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s.push_back(c);
    }
  }

  // When no vocabulary piece has a U+2581 after another character (true of
  // the Llama 2 and Phi-3 vocabularies), no merge can cross the start of a
  // word, so words are merged one at a time: the result is identical and
  // the heaps stay small.
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
  const std::string_view all(s);
  size_t chunk = 0;
  if (spm_split_words_) {
    for (size_t i = 3; i + 3 <= all.size(); ++i) {
      if (all.compare(i, 3, kSpace) == 0 && all.compare(i - 3, 3, kSpace) != 0) {
        encode_spm_chunk(all.substr(chunk, i - chunk), &sym, &heap, out);
        chunk = i;
      }
    }
  }
  encode_spm_chunk(all.substr(chunk), &sym, &heap, out);
}

void Tokenizer::encode_spm_chunk(std::string_view s, std::vector<Symbol>* sym_buf,
                                 std::vector<Bigram>* heap_buf, std::vector<int32_t>* out) const {
  std::vector<Symbol>& sym = *sym_buf;
  std::vector<Bigram>& heap = *heap_buf;
  sym.clear();
  heap.clear();
  for (size_t i = 0; i < s.size();) {
    const size_t len = std::min(utf8_len(static_cast<uint8_t>(s[i])), s.size() - i);
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), idx - 1, idx + 1});
    i += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t size = sym[l].len + sym[r].len;
    const int32_t id = merge_index_.find(s.substr(sym[l].start, size));
    if (id < 0) return;
    heap.push_back({scores_[id], l, r, size});
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = s.substr(sym[i].start, sym[i].len);
    const int32_t id = merge_index_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      if (byte_token_[c] >= 0) {
        out->push_back(byte_token_[c]);
      } else if (unk_ >= 0) {
        out->push_back(unk_);
      }
    }
  }
}

// Byte-level BPE on one pre-token: each byte starts as the token of its
// byte-level code point; the adjacent pair with the lowest merge rank is
// merged until no pair has a merge (leftmost on ties).
void Tokenizer::encode_bpe_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char c : piece) utf8_append(mapped, byte_level_cp(c));
    const int32_t id = index_.find(mapped);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const size_t n = piece.size();
  if (n == 1) {
    const int32_t id = byte_token_[static_cast<unsigned char>(piece[0])];
    if (id >= 0) {
      out->push_back(id);
    } else if (unk_ >= 0) {
      out->push_back(unk_);
    }
    return;
  }

  // Small pieces (almost all words): merge in place in a short array, which
  // beats a heap at these sizes.  Long ones: linked list + heap, O(n log n).
  constexpr size_t kSmall = 32;
  auto lookup = [&](int32_t a, int32_t b) -> MergeInfo {
    if (a < 0 || b < 0) return {INT32_MAX, -1};
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == merges_.end() ? MergeInfo{INT32_MAX, -1} : it->second;
  };
  auto emit = [&](int32_t id) {
    if (id >= 0) {
      out->push_back(id);
    } else if (unk_ >= 0) {
      out->push_back(unk_);
    }
  };

  if (n <= kSmall) {
    int32_t ids[kSmall];
    MergeInfo pair[kSmall];
    size_t m = n;
    for (size_t i = 0; i < n; ++i) ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    for (size_t i = 0; i + 1 < m; ++i) pair[i] = lookup(ids[i], ids[i + 1]);
    for (;;) {
      size_t best = SIZE_MAX;
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < m; ++i) {
        if (pair[i].rank < best_rank) {
          best_rank = pair[i].rank;
          best = i;
        }
      }
      if (best == SIZE_MAX) break;
      ids[best] = pair[best].merged;
      for (size_t i = best + 1; i + 1 < m; ++i) ids[i] = ids[i + 1];
      for (size_t i = best + 1; i + 2 < m; ++i) pair[i] = pair[i + 1];
      --m;
      if (best > 0) pair[best - 1] = lookup(ids[best - 1], ids[best]);
      if (best + 1 < m) pair[best] = lookup(ids[best], ids[best + 1]);
    }
    for (size_t i = 0; i < m; ++i) emit(ids[i]);
    return;
  }

  struct Node {
    int32_t id, prev, next;
  };
  std::vector<Node> nodes(n);
  for (size_t i = 0; i < n; ++i) {
    nodes[i] = {byte_token_[static_cast<unsigned char>(piece[i])], static_cast<int32_t>(i) - 1,
                i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  }
  struct Cand {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Cand& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0 || nodes[l].next < 0) return;
    const int32_t r = nodes[l].next;
    const MergeInfo mi = lookup(nodes[l].id, nodes[r].id);
    if (mi.merged >= 0) heap.push({mi.rank, l, nodes[l].id, nodes[r].id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Node& l = nodes[c.left];
    if (l.id != c.left_id || l.next < 0 || nodes[l.next].id != c.right_id) continue;  // stale
    Node& r = nodes[l.next];
    l.id = lookup(c.left_id, c.right_id).merged;
    r.id = -2;  // dead
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = c.left;
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) emit(nodes[i].id);
}

namespace {

bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_bert_punct(uint32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  return unicode_is_punct(cp);
}

}  // namespace

// WordPiece as BERT does it: clean the text (drop NUL, U+FFFD and control
// characters, whitespace -> space), put spaces around CJK ideographs, strip
// accents and lowercase, split on whitespace and punctuation, then take the
// longest vocabulary prefix of each word repeatedly ("▁word" for a word's
// first piece, "piece" for the rest, as GGUF stores them); a word that cannot
// be covered becomes [UNK].
void Tokenizer::encode_wordpiece(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string> words;
  std::string cur;
  auto end_word = [&]() {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  for (size_t i = 0; i < text.size();) {
    size_t len;
    const uint32_t cp = utf8_decode(text, i, &len);
    i += len;
    if (cp == 0 || cp == 0xFFFD) continue;
    const uint8_t cat = unicode_category(cp);
    const bool ws = cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' ||
                    ((cat & kCatSeparator) && unicode_is_whitespace(cp));
    if (ws) {
      end_word();
      continue;
    }
    if ((cat & kCatControl) || cat == 0) continue;
    if (is_cjk_ideograph(cp) || is_bert_punct(cp)) {
      end_word();
      utf8_append(cur, cp);
      end_word();
      continue;
    }
    if (!wp_lowercase_) {
      utf8_append(cur, cp);
      continue;
    }
    const std::string stripped = unicode_strip_accents(cp);
    for (size_t k = 0; k < stripped.size();) {
      size_t l2;
      const uint32_t c2 = utf8_decode(stripped, k, &l2);
      k += l2;
      cur += unicode_lower(c2);
    }
  }
  end_word();

  std::string probe;
  for (const std::string& w : words) {
    size_t n_chars = 0;
    for (unsigned char c : w) n_chars += (c & 0xC0) != 0x80;
    if (n_chars > 100) {
      if (unk_ >= 0) out->push_back(unk_);
      continue;
    }
    const size_t before = out->size();
    bool ok = true;
    for (size_t start = 0; start < w.size();) {
      int32_t found = -1;
      size_t end = w.size();
      for (; end > start; --end) {
        if (end < w.size() && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) continue;
        probe.clear();
        if (start == 0) probe += kSpace;
        probe.append(w, start, end - start);
        found = index_.find(probe);
        if (found >= 0) break;
      }
      if (found < 0) {
        ok = false;
        break;
      }
      out->push_back(found);
      start = end;
    }
    if (!ok) {
      out->resize(before);
      if (unk_ >= 0) out->push_back(unk_);
    }
  }
}

}  // namespace lilims::tok
