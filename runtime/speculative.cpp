#include "runtime/speculative.h"

#include <algorithm>

namespace lilims::runtime {

std::vector<int32_t> draft_tokens(const std::vector<int32_t>& seq, size_t n_seq,
                                  const std::vector<int32_t>& tail, int32_t k) {
  std::vector<int32_t> out;
  const size_t n = n_seq + tail.size();
  const auto at = [&](size_t i) { return i < n_seq ? seq[i] : tail[i - n_seq]; };
  for (size_t g = kDraftMaxNgram; g >= (size_t)kDraftMinNgram && k > 0; --g) {
    if (n <= g) continue;
    // j: start of an earlier occurrence, newest first; it must be followed
    // by at least one token.
    for (size_t j = n - g; j-- > 0;) {
      size_t q = 0;
      while (q < g && at(j + q) == at(n - g + q) && at(j + q) >= 0) ++q;
      if (q < g) continue;
      // Negative ids mark embedding rows (an image): no token to draft.
      for (size_t i = j + g; i < n && out.size() < (size_t)k && at(i) >= 0; ++i) out.push_back(at(i));
      if (out.empty()) continue;
      return out;
    }
  }
  return out;
}

namespace {

// Whether some token of the trie is longer than `piece` and begins with it.
bool extendable(const TokenTrie& trie, const std::string& piece) {
  const std::vector<TokenTrie::Node>& nodes = trie.nodes();
  int32_t node = 0;
  for (char ch : piece) {
    const TokenTrie::Node& nd = nodes[(size_t)node];
    int32_t next = -1;
    for (int32_t c = nd.child_begin; c < nd.child_end; ++c) {
      if (nodes[(size_t)c].byte == (uint8_t)ch) {
        next = c;
        break;
      }
    }
    if (next < 0) return false;
    node = next;
  }
  return nodes[(size_t)node].child_begin < nodes[(size_t)node].child_end;
}

}  // namespace

std::vector<int32_t> forced_tokens(SchemaConstraint& sc, const tok::Tokenizer& tk,
                                   const std::vector<std::string>& pieces, size_t max_bytes) {
  const std::string bytes = sc.forced_bytes(max_bytes);
  std::vector<int32_t> out;
  if (bytes.empty()) return out;
  const TokenTrie& trie = sc.compiled().trie();
  size_t at = 0;
  for (int32_t id : tk.encode(bytes, false, false)) {
    if (id < 0 || id >= (int32_t)pieces.size() || !trie.usable(id)) break;
    const std::string& p = pieces[(size_t)id];
    if (p.empty() || bytes.compare(at, p.size(), p) != 0) break;
    out.push_back(id);
    at += p.size();
  }
  if (!out.empty() && extendable(trie, pieces[(size_t)out.back()])) out.pop_back();
  return out;
}

}  // namespace lilims::runtime
