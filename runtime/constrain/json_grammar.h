// A byte-level grammar for constrained decoding: a recursive transition
// network.  Each rule is a small automaton over bytes whose nodes may also
// call another rule (and continue at a node of their own once it ends), so
// recursion ($ref) needs no bound in the grammar itself.  A JSON Schema
// compiles to one (json_schema.h); a GrammarMatcher follows a prefix of the
// output through it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lilims::runtime {

struct Grammar {
  struct ByteEdge {
    uint8_t lo, hi;  // inclusive byte range
    int32_t to;
  };
  struct CallEdge {
    int32_t rule;  // enter this rule, then continue at `to` when it ends
    int32_t to;
  };
  struct Node {
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    std::vector<int32_t> eps;
    bool end = false;  // the rule this node belongs to may end here
  };
  std::vector<Node> nodes;
  std::vector<int32_t> rule_start;  // (n_rules) start node of each rule
  int32_t root_rule = 0;
  // (n_rules) fewest bytes that complete each rule; after trim() every rule
  // and node left reachable can be completed.
  std::vector<int32_t> rule_min;

  // The character positions of a string with counted length: nodes[k]
  // starts character k.  Positions far enough from both bounds accept the
  // same next bytes up to any horizon shorter than that distance, so one
  // token mask serves them all (CompiledSchema uses this).
  struct CharRun {
    std::vector<int32_t> nodes;
    int64_t min = 0;
    bool bounded = true;  // false: nodes holds only the first `min` positions, a loop follows
    int32_t loop = -1;    // unbounded: the node of every position from `min` on
    int32_t after = -1;   // the node after the closing quote
  };
  std::vector<CharRun> char_runs;

  static constexpr int32_t kInfinite = 1 << 29;
  // The most states a grammar may have.  Counted repeats multiply when
  // nested (a pattern group {100} inside a group {100} inside ...), so a
  // schema of a few dozen bytes could otherwise ask for gigabytes.  At ~160
  // bytes a state while compiling, this is ~670 MB at most; an array of up
  // to 100 strings of up to 512 characters takes 1.33 M states, the schemas
  // of the examples a few thousand.
  static constexpr size_t kMaxNodes = size_t(1) << 22;

  // Throws LILIMS_ERR_INVALID_ARGUMENT past kMaxNodes.
  int32_t add_node() {
    if (nodes.size() >= kMaxNodes) too_many_nodes();
    nodes.emplace_back();
    return (int32_t)nodes.size() - 1;
  }
  [[noreturn]] static void too_many_nodes();
  int32_t add_rule() {  // returns the rule id; its start node is new
    rule_start.push_back(add_node());
    return (int32_t)rule_start.size() - 1;
  }
  // Fewest bytes from each node to the end of its rule, over byte values
  // for which usable[b] (all when usable is null); kInfinite when none.
  std::vector<int32_t> distances_to_end(const bool* usable, std::vector<int32_t>* rule_min) const;
  // Drops edges into nodes and rules that cannot be completed, so that
  // every prefix the grammar accepts extends to a complete text.  Returns
  // false when the root rule itself cannot be completed.
  bool trim();
};

// Fragment builders: each adds an automaton to `g` starting at node `from`
// and returns the node where it ends.
int32_t grammar_literal(Grammar& g, int32_t from, std::string_view bytes);
int32_t grammar_byte_range(Grammar& g, int32_t from, uint8_t lo, uint8_t hi);
// One well-formed UTF-8 character of 2 to 4 bytes (no surrogates, no overlongs).
int32_t grammar_utf8_multibyte(Grammar& g, int32_t from);
// One character of a JSON string's body: printable ASCII but '"' and '\',
// a multi-byte UTF-8 character, or an escape (\uXXXX outside surrogates).
int32_t grammar_json_string_char(Grammar& g, int32_t from);
// The bytes inside a JSON string (no quotes) whose decoded text matches
// the ECMA-262 regular expression `pattern` (JSON Schema's search semantics:
// unanchored unless it starts with ^ / ends with $).  The subset: literals,
// ., classes, \d\w\s and their negations, groups, alternation, * + ? {n}
// {n,} {n,m}, ^ and $ at the ends.  Throws LILIMS_ERR_INVALID_ARGUMENT
// ("[json-schema] <where>: ...") for anything else.
int32_t grammar_pattern(Grammar& g, int32_t from, std::string_view pattern,
                        const std::string& where);

// A prefix of the output followed through the grammar: the set of call
// stacks it may be in (several when alternatives share a prefix).  Stack
// frames are interned, so a stack is one int and equal stacks compare equal.
class GrammarMatcher {
 public:
  struct State {
    std::vector<int32_t> tops;  // sorted frame ids; each top frame's node has byte edges
    bool ended = false;         // the root rule may end here: the text is complete
    bool popped = false;        // a rule below `base` ended (only with a base frame)
  };

  // base_node >= 0: start inside a rule at that node with an unknown caller
  // below it (token-mask precomputation); else at the root rule's start.
  explicit GrammarMatcher(const Grammar& g, int32_t base_node = -1);

  const State& start() const { return start_; }
  // The state after byte b from `in`; dead (no tops, not ended) when b cannot follow.
  void step(const State& in, uint8_t b, State* out);
  bool feed(const State& in, std::string_view bytes, State* out);
  static bool dead(const State& s) { return s.tops.empty() && !s.ended && !s.popped; }

  // States interned as ids, with transitions kept once computed: a walk
  // over the vocabulary trie meets the same few states again and again
  // (inside a string every character leads back to the same one), so most
  // of its steps are one table lookup.
  int32_t intern_state(const State& s);
  const State& state_at(int32_t id) const { return states_[(size_t)id]; }
  int32_t step_id(int32_t id, uint8_t b);

  // The grammar node of a top frame.
  int32_t node_of(int32_t frame) const { return frames_[(size_t)frame].node; }
  // Fewest bytes that complete the text from s, using node distances
  // computed by Grammar::distances_to_end; Grammar::kInfinite when none.
  int64_t min_completion(const State& s, const std::vector<int32_t>& dist) const;

 private:
  struct Frame {
    int32_t node;
    int32_t parent;  // frame to return to; kRoot or kBase at the bottom
  };
  static constexpr int32_t kRoot = -1, kBase = -2;
  // Calls entered in one closure without consuming a byte (left recursion).
  static constexpr int kMaxCallChain = 64;

  int32_t intern(int32_t node, int32_t parent);
  void closure(int32_t frame, State* out, int chain);

  const Grammar& g_;
  std::deque<State> states_;  // a deque: state_at() references stay valid
  std::unordered_map<std::string, int32_t> state_index_;
  std::vector<std::unique_ptr<std::array<int32_t, 256>>> trans_;  // (states) -1: not computed
  std::vector<Frame> frames_;
  std::vector<uint32_t> seen_;  // (frames) == stamp_: already closed over in this step
  uint32_t stamp_ = 0;
  std::unordered_map<uint64_t, int32_t> index_;
  State start_;
};

}  // namespace lilims::runtime
