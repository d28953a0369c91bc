#include "runtime/constrain/token_mask.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/xxh3.h"
#include "runtime/constrain/json_schema.h"

namespace lilims::runtime {

TokenTrie::TokenTrie(const std::vector<std::string>& pieces, const std::vector<bool>& usable)
    : pieces_(&pieces), usable_(usable), n_vocab_((int32_t)pieces.size()) {
  usable_.resize(pieces.size(), false);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].empty()) usable_[id] = false;
    if (!usable_[id]) continue;
    order_.push_back((int32_t)id);
    if (pieces[id].size() == 1) single_[(uint8_t)pieces[id][0]] = true;
    max_piece_ = std::max(max_piece_, pieces[id].size());
  }
  std::sort(order_.begin(), order_.end(),
            [&](int32_t a, int32_t b) { return pieces[(size_t)a] < pieces[(size_t)b]; });
  nodes_.emplace_back();
  nodes_[0].tok_begin = 0;
  nodes_[0].tok_end = (int32_t)order_.size();
  build(0, 0);
  build_string_spans();
}

void TokenTrie::build_string_spans() {
  // One character of a string body as the schema compiler spells it, so
  // that the spans agree with the grammar byte for byte.
  Grammar g;
  g.root_rule = g.add_rule();
  g.nodes[(size_t)grammar_json_string_char(g, g.rule_start[0])].end = true;
  GrammarMatcher m(g);
  const int32_t start = m.intern_state(m.start());
  spans_.assign((size_t)n_vocab_, StringSpan{});
  for (int32_t id : order_) {
    const std::string& p = piece(id);
    StringSpan& sp = spans_[(size_t)id];
    int32_t st = start;
    for (size_t i = 0; i < p.size(); ++i) {
      const uint8_t b = (uint8_t)p[i];
      if (st == start && b == '"') {
        sp.quote = (int32_t)i;
        break;
      }
      st = m.step_id(st, b);
      const GrammarMatcher::State& s = m.state_at(st);
      if (GrammarMatcher::dead(s)) {
        sp.bad = true;
        break;
      }
      if (s.tops.empty()) {  // the character is complete (its automaton is deterministic)
        ++sp.chars;
        st = start;
      }
    }
    sp.open = !sp.bad && sp.quote < 0 && st != start;
    if (sp.bad) continue;
    if (sp.quote >= 0) {
      quoted_.push_back(id);
    } else {
      body_by_need_.push_back(id);
    }
  }
  const auto need = [&](int32_t id) { return spans_[(size_t)id].chars + spans_[(size_t)id].open; };
  std::stable_sort(body_by_need_.begin(), body_by_need_.end(),
                   [&](int32_t a, int32_t b) { return need(a) < need(b); });
  body_bits_.assign(((size_t)n_vocab_ + 63) / 64, 0);
  for (int32_t id : body_by_need_) {
    body_bits_[(size_t)id >> 6] |= 1ull << (id & 63);
    const size_t c = (size_t)need(id);
    if (upto_.size() <= c) upto_.resize(c + 1, 0);
    ++upto_[c];
  }
  for (size_t c = 1; c < upto_.size(); ++c) upto_[c] += upto_[c - 1];
}

void TokenTrie::string_body_bits(int64_t room, uint64_t* bits) const {
  const size_t total = body_by_need_.size();
  const size_t n = room < 0 || room >= (int64_t)upto_.size() ? total : (size_t)upto_[(size_t)room];
  // Whichever is shorter: set the tokens that fit, or clear those that do not.
  if (2 * n >= total) {
    for (size_t w = 0; w < body_bits_.size(); ++w) bits[w] |= body_bits_[w];
    for (size_t k = n; k < total; ++k) {
      const int32_t id = body_by_need_[k];
      bits[(size_t)id >> 6] &= ~(1ull << (id & 63));
    }
  } else {
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = body_by_need_[k];
      bits[(size_t)id >> 6] |= 1ull << (id & 63);
    }
  }
}

// Splits the node's token range by the byte at `depth`; children are made
// contiguous before any of them is split further.
void TokenTrie::build(int32_t node, size_t depth) {
  const auto byte_at = [&](int32_t k) { return (uint8_t)piece(order_[(size_t)k])[depth]; };
  int32_t k = nodes_[(size_t)node].tok_begin;
  const int32_t end = nodes_[(size_t)node].tok_end;
  while (k < end && piece(order_[(size_t)k]).size() == depth) ++k;
  nodes_[(size_t)node].tok_mid = k;
  const int32_t first = (int32_t)nodes_.size();
  while (k < end) {
    Node c;
    c.byte = byte_at(k);
    c.tok_begin = k;
    while (k < end && byte_at(k) == c.byte) ++k;
    c.tok_end = k;
    nodes_.push_back(c);
  }
  const int32_t last = (int32_t)nodes_.size();
  nodes_[(size_t)node].child_begin = first;
  nodes_[(size_t)node].child_end = last;
  for (int32_t c = first; c < last; ++c) build(c, depth + 1);
}

CompiledSchema::CompiledSchema(Grammar g, std::shared_ptr<const TokenTrie> trie)
    : g_(std::move(g)), trie_(std::move(trie)), masks_(g_.nodes.size()), same_(g_.nodes.size(), -1) {
  dist_ = g_.distances_to_end(trie_->single_bytes(), nullptr);
  alias_.resize(g_.nodes.size());
  std::iota(alias_.begin(), alias_.end(), 0);
  // No token spans more than D characters (each takes a byte at least), so
  // positions with at least D characters to go before the minimum (cannot
  // close yet) share one mask, and so do positions past the minimum with at
  // least D characters left before the maximum (may close or go on).
  const int64_t d = (int64_t)trie_->max_piece();
  for (const Grammar::CharRun& run : g_.char_runs) {
    const int64_t max = run.bounded ? (int64_t)run.nodes.size() - 1 : -1;
    int32_t open = -1, free = -1;
    for (size_t k = 0; k < run.nodes.size(); ++k) {
      const int64_t i = (int64_t)k;
      const int32_t node = run.nodes[k];
      if (run.min - i >= d) {
        if (open < 0) open = node;
        alias_[(size_t)node] = open;
      } else if (run.bounded && i >= run.min && max - i >= d) {
        if (free < 0) free = node;
        alias_[(size_t)node] = free;
      }
    }
  }
  string_pos_.assign(g_.nodes.size(), {-1, 0});
  for (size_t r = 0; r < g_.char_runs.size(); ++r) {
    const Grammar::CharRun& run = g_.char_runs[r];
    for (size_t k = 0; k < run.nodes.size(); ++k) string_pos_[(size_t)run.nodes[k]] = {(int32_t)r, (int64_t)k};
    if (run.loop >= 0) string_pos_[(size_t)run.loop] = {(int32_t)r, run.min};
  }
}

int64_t CompiledSchema::walks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return walks_;
}

const CompiledSchema::NodeMask& CompiledSchema::node_mask(int32_t node) const {
  node = alias_[(size_t)node];
  std::lock_guard<std::mutex> lock(mu_);
  if (same_[(size_t)node] >= 0) return *masks_[(size_t)same_[(size_t)node]];
  std::unique_ptr<NodeMask>& m = masks_[(size_t)node];
  if (!m) {
    const auto [run, pos] = string_pos_[(size_t)node];
    if (run >= 0) {
      m = std::make_unique<NodeMask>(string_mask(g_.char_runs[(size_t)run], pos));
    } else {
      constexpr int kHashDepth = 2;
      std::vector<int32_t>& bucket = walked_[shape_hash(node, kHashDepth)];
      for (int32_t w : bucket) {
        std::set<std::array<int32_t, 3>> seen;
        if (same_future(node, w, (int32_t)trie_->max_piece(), seen)) {
          same_[(size_t)node] = w;
          return *masks_[(size_t)w];
        }
      }
      m = std::make_unique<NodeMask>(walk(node));
      bucket.push_back(node);
    }
    ++walks_;
  }
  return *m;
}

bool CompiledSchema::same_future(int32_t a, int32_t b, int32_t bytes,
                                 std::set<std::array<int32_t, 3>>& seen) const {
  if (a == b) return true;
  if (!seen.insert({a, b, bytes}).second) return true;  // a cycle, or compared already
  const Grammar::Node& x = g_.nodes[(size_t)a];
  const Grammar::Node& y = g_.nodes[(size_t)b];
  if (x.end != y.end || x.bytes.size() != y.bytes.size() || x.calls.size() != y.calls.size() ||
      x.eps.size() != y.eps.size()) {
    return false;
  }
  for (size_t i = 0; i < x.bytes.size(); ++i) {
    const Grammar::ByteEdge &p = x.bytes[i], &q = y.bytes[i];
    if (p.lo != q.lo || p.hi != q.hi) return false;
    if (bytes > 0 && !same_future(p.to, q.to, bytes - 1, seen)) return false;
  }
  // A called rule may take no bytes, so its continuation keeps the budget.
  for (size_t i = 0; i < x.calls.size(); ++i) {
    if (x.calls[i].rule != y.calls[i].rule) return false;
    if (!same_future(x.calls[i].to, y.calls[i].to, bytes, seen)) return false;
  }
  for (size_t i = 0; i < x.eps.size(); ++i) {
    if (!same_future(x.eps[i], y.eps[i], bytes, seen)) return false;
  }
  return true;
}

uint64_t CompiledSchema::shape_hash(int32_t node, int depth) const {
  const Grammar::Node& n = g_.nodes[(size_t)node];
  uint64_t h = xxh3_64(nullptr, 0, (uint64_t)n.end << 48 | (uint64_t)n.bytes.size() << 32 |
                                       (uint64_t)n.calls.size() << 16 | n.eps.size());
  const auto mix = [&](uint64_t v) { h = xxh3_64(&v, sizeof v, h); };
  for (const Grammar::ByteEdge& e : n.bytes) {
    mix((uint64_t)e.lo << 8 | e.hi);
    if (depth > 0) mix(shape_hash(e.to, depth - 1));
  }
  for (const Grammar::CallEdge& c : n.calls) mix((uint64_t)(uint32_t)c.rule);
  return h;
}

CompiledSchema::NodeMask CompiledSchema::walk(int32_t node) const {
  const TokenTrie& t = *trie_;
  const std::vector<TokenTrie::Node>& tn = t.nodes();
  const std::vector<int32_t>& order = t.order();
  NodeMask out;
  out.accepted.assign(((size_t)t.n_vocab() + 63) / 64, 0);
  GrammarMatcher m(g_, node);
  const auto accept = [&](int32_t id) { out.accepted[(size_t)id >> 6] |= 1ull << (id & 63); };
  const auto uncertain_range = [&](int32_t a, int32_t b) {
    for (int32_t k = a; k < b; ++k) out.uncertain.push_back(order[(size_t)k]);
  };
  // Depth-first over the trie; states[d] is the state after d bytes.
  struct Item {
    int32_t trie_node;
    int32_t next_child;
    bool popped_before;  // the rule could end at a proper prefix of what follows
  };
  std::vector<int32_t> states(1, m.intern_state(m.start()));
  std::vector<Item> stack{{0, tn[0].child_begin, m.start().popped}};
  while (!stack.empty()) {
    Item& it = stack.back();
    if (it.next_child >= tn[(size_t)it.trie_node].child_end) {
      stack.pop_back();
      continue;
    }
    const int32_t c = it.next_child++;
    const bool popped_before = it.popped_before;
    const size_t depth = stack.size();
    if (states.size() <= depth) states.resize(depth + 1);
    const TokenTrie::Node& n = tn[(size_t)c];
    states[depth] = m.step_id(states[depth - 1], n.byte);
    const GrammarMatcher::State& s = m.state_at(states[depth]);
    if (!GrammarMatcher::dead(s)) {
      for (int32_t k = n.tok_begin; k < n.tok_mid; ++k) accept(order[(size_t)k]);
    } else if (popped_before) {
      uncertain_range(n.tok_begin, n.tok_mid);
    }
    if (!s.tops.empty()) {
      if (n.child_begin < n.child_end) stack.push_back({c, n.child_begin, popped_before || s.popped});
    } else if (popped_before || s.popped) {
      uncertain_range(n.tok_mid, n.tok_end);
    }
  }
  return out;
}

CompiledSchema::NodeMask CompiledSchema::string_mask(const Grammar::CharRun& run, int64_t pos) const {
  const TokenTrie& t = *trie_;
  NodeMask out;
  out.accepted.assign(((size_t)t.n_vocab() + 63) / 64, 0);
  const int64_t max = run.bounded ? (int64_t)run.nodes.size() - 1 : -1;
  // `accepted` is all zeros, so clearing the tokens that do not fit clears
  // nothing else.
  t.string_body_bits(max < 0 ? -1 : max - pos, out.accepted.data());
  GrammarMatcher m(g_, run.after);
  const int32_t after = m.intern_state(m.start());
  for (int32_t id : t.quoted()) {
    const TokenTrie::StringSpan& sp = t.string_spans()[(size_t)id];
    const int64_t end = pos + sp.chars;
    if (end < run.min || (max >= 0 && end > max)) continue;
    // The rest after the quote, as walk() would meet it: tokens that go on
    // after the node's rule ended are left to the caller's frames.
    const std::string& p = t.piece(id);
    int32_t st = after;
    bool popped = m.state_at(st).popped, accept = true;
    for (size_t i = (size_t)sp.quote + 1; i < p.size(); ++i) {
      st = m.step_id(st, (uint8_t)p[i]);
      const GrammarMatcher::State& s = m.state_at(st);
      const bool last = i + 1 == p.size();
      if (last ? GrammarMatcher::dead(s) : s.tops.empty()) {
        accept = false;
        if (popped || (!last && s.popped)) out.uncertain.push_back(id);
        break;
      }
      popped |= s.popped;
    }
    if (accept) out.accepted[(size_t)id >> 6] |= 1ull << (id & 63);
  }
  return out;
}

SchemaCache::SchemaCache(const std::vector<std::string>& pieces, const std::vector<bool>& usable)
    : trie_(std::make_shared<TokenTrie>(pieces, usable)) {}

std::shared_ptr<const CompiledSchema> SchemaCache::get(const std::string& schema_text) {
  const std::string canon = canonical_json_schema(schema_text);
  const uint64_t key = xxh3_64(canon.data(), canon.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = map_.find(key); it != map_.end()) return it->second;
  }
  auto compiled = std::make_shared<const CompiledSchema>(compile_json_schema(canon), trie_);
  std::lock_guard<std::mutex> lock(mu_);
  return map_.emplace(key, std::move(compiled)).first->second;
}

size_t SchemaCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

SchemaConstraint::SchemaConstraint(std::shared_ptr<const CompiledSchema> schema)
    : schema_(std::move(schema)), m_(schema_->grammar()), state_(m_.start()) {}

namespace {

// kSpreadBits[x]: the 8 bytes 0/1 of x's bits, bit 0 in the first byte in
// memory (the table is built in the machine's byte order).
struct SpreadTable {
  uint64_t v[256];
  SpreadTable() {
    for (int x = 0; x < 256; ++x) {
      uint8_t bytes[8];
      for (int k = 0; k < 8; ++k) bytes[k] = (uint8_t)(x >> k & 1);
      std::memcpy(&v[x], bytes, 8);
    }
  }
  const uint64_t& operator[](size_t i) const { return v[i]; }
};
const SpreadTable kSpreadBits;

}  // namespace

void SchemaConstraint::fill_mask(uint8_t* allowed) {
  const TokenTrie& t = schema_->trie();
  const size_t words = ((size_t)t.n_vocab() + 63) / 64;
  masks_.clear();
  for (int32_t top : state_.tops) {
    const CompiledSchema::NodeMask* nm = &schema_->node_mask(m_.node_of(top));
    if (std::find(masks_.begin(), masks_.end(), nm) == masks_.end()) masks_.push_back(nm);
  }
  const uint64_t* bits;
  bool own = masks_.size() != 1;
  for (const CompiledSchema::NodeMask* nm : masks_) own |= !nm->uncertain.empty();
  if (own) {
    bits_.assign(words, 0);
    for (const CompiledSchema::NodeMask* nm : masks_) {
      for (size_t w = 0; w < words; ++w) bits_[w] |= nm->accepted[w];
    }
    for (const CompiledSchema::NodeMask* nm : masks_) {
      for (int32_t id : nm->uncertain) {
        if (bits_[(size_t)id >> 6] >> (id & 63) & 1) continue;
        if (accepts(id)) bits_[(size_t)id >> 6] |= 1ull << (id & 63);
      }
    }
    bits = bits_.data();
  } else {
    bits = masks_[0]->accepted.data();  // one node, nothing to check: its mask as it is
  }
  // Most words are all zeros or all ones: whole runs of 64 tokens at once.
  const size_t n = (size_t)t.n_vocab();
  for (size_t w = 0; w < words; ++w) {
    const size_t base = w * 64, len = std::min<size_t>(64, n - base);
    const uint64_t b = bits[w];
    if (b == 0 || b == ~0ull) {
      std::memset(allowed + base, b ? 1 : 0, len);
      continue;
    }
    if (len < 64) {
      for (size_t k = 0; k < len; ++k) allowed[base + k] = (uint8_t)(b >> k & 1);
      continue;
    }
    // Eight tokens a byte of bits: one 8-byte store each.
    for (size_t j = 0; j < 8; ++j) {
      std::memcpy(allowed + base + 8 * j, &kSpreadBits[(b >> (8 * j)) & 0xff], 8);
    }
  }
}

bool SchemaConstraint::accepts(int32_t id) {
  const TokenTrie& t = schema_->trie();
  if (id < 0 || id >= t.n_vocab() || !t.usable(id)) return false;
  return m_.feed(state_, t.piece(id), &probe_) && !GrammarMatcher::dead(probe_);
}

bool SchemaConstraint::accepts_within(int32_t id, int64_t left) {
  return accepts(id) && m_.min_completion(probe_, schema_->dist()) <= left;
}

bool SchemaConstraint::advance(int32_t id) {
  if (!accepts(id)) return false;
  std::swap(state_, probe_);
  return true;
}

bool SchemaConstraint::accepts_bytes(std::string_view bytes) {
  return m_.feed(state_, bytes, &probe_) && !GrammarMatcher::dead(probe_);
}

bool SchemaConstraint::advance_bytes(std::string_view bytes, int64_t left) {
  if (!accepts_bytes(bytes)) return false;
  if (m_.min_completion(probe_, schema_->dist()) > left) return false;
  std::swap(state_, probe_);
  return true;
}

std::string SchemaConstraint::forced_bytes(size_t max) {
  const Grammar& g = schema_->grammar();
  std::string out;
  GrammarMatcher::State s = state_, next;
  while (out.size() < max && !s.ended) {
    int only = -1;
    for (int32_t top : s.tops) {
      for (const Grammar::ByteEdge& e : g.nodes[(size_t)m_.node_of(top)].bytes) {
        if (e.lo != e.hi || (only >= 0 && only != e.lo)) return out;
        only = e.lo;
      }
    }
    if (only < 0) break;
    m_.step(s, (uint8_t)only, &next);
    if (GrammarMatcher::dead(next)) break;
    out.push_back((char)only);
    std::swap(s, next);
  }
  return out;
}

}  // namespace lilims::runtime
