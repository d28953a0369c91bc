// Token masks for grammar-constrained decoding.
//
// A trie over the vocabulary's pieces lets one walk test every token whose
// bytes share a prefix with that prefix checked once.  What a token does
// from a grammar node depends mostly on that node alone: for each node the
// walk is done once, starting inside the node's rule with an unknown caller
// below it, and its result kept (accepted tokens as a bitset; tokens that
// leave the rule with bytes to spare, whose fate the caller decides, as a
// short list).  A mask for a real state is then the union of the bitsets of
// its top nodes plus the listed tokens checked byte by byte.
//
// Compiled schemas are cached per model, keyed by XXH3 of the canonical
// schema text, so a schema used again costs neither compilation nor walks.
#pragma once

#include <cstdint>
#include <array>
#include <map>
#include <set>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/constrain/json_grammar.h"

namespace lilims::runtime {

class TokenTrie {
 public:
  // pieces[id]: a token's bytes; usable[id]: it may appear in constrained output.
  TokenTrie(const std::vector<std::string>& pieces, const std::vector<bool>& usable);

  struct Node {
    int32_t child_begin = 0, child_end = 0;  // children: nodes [child_begin, child_end)
    int32_t tok_begin = 0, tok_mid = 0, tok_end = 0;  // order_[tok_begin, tok_mid) end here;
                                                      // [tok_begin, tok_end): the subtree's
    uint8_t byte = 0;                                 // the byte that leads here
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& order() const { return order_; }  // usable ids, sorted by bytes
  int32_t n_vocab() const { return n_vocab_; }
  const std::string& piece(int32_t id) const { return (*pieces_)[(size_t)id]; }
  bool usable(int32_t id) const { return usable_[(size_t)id]; }
  size_t max_piece() const { return max_piece_; }  // bytes of the longest usable piece
  // Bytes that some usable token spells alone: completions are built from them.
  const bool* single_bytes() const { return single_; }

  // What each token does inside a JSON string's body: the characters it
  // completes before its end or a closing quote, whether it ends inside a
  // character, where the closing quote is (-1: none), or that it cannot be
  // there at all (a control byte, bad UTF-8 or escape).  Masks for positions
  // in a string of counted length follow from these without a trie walk.
  struct StringSpan {
    int32_t chars = 0;
    int32_t quote = -1;
    bool open = false;
    bool bad = false;
  };
  const std::vector<StringSpan>& string_spans() const { return spans_; }
  // Sets in `bits` every token that stays inside a string body (no closing
  // quote) and needs at most `room` characters (< 0: any number).
  void string_body_bits(int64_t room, uint64_t* bits) const;
  // Usable tokens with a closing quote after valid string characters.
  const std::vector<int32_t>& quoted() const { return quoted_; }

 private:
  void build(int32_t node, size_t depth);
  void build_string_spans();

  const std::vector<std::string>* pieces_;
  std::vector<bool> usable_;
  int32_t n_vocab_;
  std::vector<int32_t> order_;
  std::vector<Node> nodes_;
  bool single_[256] = {};
  size_t max_piece_ = 0;
  std::vector<StringSpan> spans_;  // (n_vocab)
  // Tokens that stay inside a string body, by characters needed
  // (chars + open) ascending; upto_[c]: how many need at most c.
  std::vector<int32_t> body_by_need_;
  std::vector<int32_t> upto_;
  std::vector<uint64_t> body_bits_;  // all of body_by_need_
  std::vector<int32_t> quoted_;
};

// A schema's grammar bound to a vocabulary, with the per-node walks kept.
// Shared by every session of a model; thread-safe.
class CompiledSchema {
 public:
  CompiledSchema(Grammar g, std::shared_ptr<const TokenTrie> trie);

  const Grammar& grammar() const { return g_; }
  const TokenTrie& trie() const { return *trie_; }
  // Fewest single-byte tokens that end each node's rule (Grammar::kInfinite: none).
  const std::vector<int32_t>& dist() const { return dist_; }

  struct NodeMask {
    std::vector<uint64_t> accepted;  // bit per token id
    std::vector<int32_t> uncertain;  // leave the node's rule with bytes left over
  };
  const NodeMask& node_mask(int32_t node) const;
  int64_t walks() const;  // node masks computed so far

 private:
  NodeMask walk(int32_t node) const;
  // Whether every byte string of at most `bytes` bytes does the same from
  // nodes a and b (by their structure: the same end flags, byte ranges,
  // called rules, and targets that do the same in turn), so that one's
  // walk serves the other: a token has at most max_piece() bytes.  `seen`
  // holds the pairs under comparison (assumed equal while they are).
  bool same_future(int32_t a, int32_t b, int32_t bytes, std::set<std::array<int32_t, 3>>& seen) const;
  // A hash of a node's first few bytes of structure, equal for nodes
  // same_future calls equal.
  uint64_t shape_hash(int32_t node, int depth) const;
  // A position of a counted string from the tokens' string spans: only
  // the bytes after a closing quote are followed through the grammar.
  NodeMask string_mask(const Grammar::CharRun& run, int64_t pos) const;

  Grammar g_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> dist_;
  mutable std::mutex mu_;
  std::vector<int32_t> alias_;  // (nodes) the node whose mask serves this one
  // (nodes) the char run and position of a string's character position; -1: none
  std::vector<std::pair<int32_t, int64_t>> string_pos_;
  mutable std::vector<std::unique_ptr<NodeMask>> masks_;  // (nodes) null until walked
  mutable int64_t walks_ = 0;
  // Walked nodes by shape_hash, and for a node not walked itself the walked
  // node whose mask serves it (-1: none yet).  Regular expressions repeat
  // their classes (an email's local part, then its host's labels).
  mutable std::unordered_map<uint64_t, std::vector<int32_t>> walked_;
  mutable std::vector<int32_t> same_;
};

// Compiled schemas of one model, keyed by XXH3-64 of the canonical text.
class SchemaCache {
 public:
  SchemaCache(const std::vector<std::string>& pieces, const std::vector<bool>& usable);
  // Throws LILIMS_ERR_INVALID_ARGUMENT ("[json-schema] ...") for a bad schema.
  std::shared_ptr<const CompiledSchema> get(const std::string& schema_text);
  size_t size() const;

 private:
  std::shared_ptr<const TokenTrie> trie_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const CompiledSchema>> map_;
};

// One generation's progress through a schema.
class SchemaConstraint {
 public:
  explicit SchemaConstraint(std::shared_ptr<const CompiledSchema> schema);

  // allowed[id] = 1 for every usable token whose bytes continue the output
  // (n_vocab entries; other entries 0).
  void fill_mask(uint8_t* allowed);
  // Whether `id` continues the output, its bytes fed one by one.
  bool accepts(int32_t id);
  // Whether after `id` the output can still be completed within `left`
  // single-byte tokens.
  bool accepts_within(int32_t id, int64_t left);
  bool advance(int32_t id);
  // Feeds bytes that are not one token's (the rest of a token that ended a
  // lazy constraint's trigger); false, the state unchanged, when the value
  // cannot go on with them or would leave it unclosable within `left`
  // single-byte tokens.
  bool advance_bytes(std::string_view bytes, int64_t left);
  // Whether advance_bytes(bytes) would succeed (without the room check).
  bool accepts_bytes(std::string_view bytes);
  // The value is complete (ended) and nothing can follow it.
  bool complete() const { return state_.ended && state_.tops.empty(); }
  // The value is complete but could go on (a top-level number).
  bool may_end() const { return state_.ended; }
  int64_t tokens_to_close() const { return m_.min_completion(state_, schema_->dist()); }
  // The bytes every valid continuation starts with (at most `max`): while
  // exactly one byte may follow and the value cannot end, that byte.
  std::string forced_bytes(size_t max);
  const CompiledSchema& compiled() const { return *schema_; }

 private:
  std::shared_ptr<const CompiledSchema> schema_;
  GrammarMatcher m_;
  GrammarMatcher::State state_, probe_;
  std::vector<uint64_t> bits_;
  std::vector<const CompiledSchema::NodeMask*> masks_;
};

}  // namespace lilims::runtime
