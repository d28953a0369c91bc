// Fragment builders shared by the schema compiler, and the regular
// expressions of JSON Schema's "pattern" turned into grammar fragments.
#include <bitset>

#include "base/error.h"
#include "runtime/constrain/json_grammar.h"

namespace lilims::runtime {

int32_t grammar_byte_range(Grammar& g, int32_t from, uint8_t lo, uint8_t hi) {
  const int32_t to = g.add_node();
  g.nodes[(size_t)from].bytes.push_back({lo, hi, to});
  return to;
}

int32_t grammar_literal(Grammar& g, int32_t from, std::string_view bytes) {
  for (char c : bytes) from = grammar_byte_range(g, from, (uint8_t)c, (uint8_t)c);
  return from;
}

int32_t grammar_utf8_multibyte(Grammar& g, int32_t from) {
  // Lead bytes, the range their first continuation byte may take (narrower
  // after E0, ED, F0 and F4: no overlongs, surrogates or values past
  // U+10FFFF), and how many 80-BF bytes follow that one.
  struct Seq {
    uint8_t lo, hi, next_lo, next_hi;
    int rest;
  };
  static const Seq kSeqs[] = {{0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1},
                              {0xE1, 0xEC, 0x80, 0xBF, 1}, {0xED, 0xED, 0x80, 0x9F, 1},
                              {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
                              {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2}};
  const int32_t end = g.add_node();
  for (const Seq& s : kSeqs) {
    int32_t n = grammar_byte_range(g, from, s.lo, s.hi);
    if (s.rest == 0) {
      g.nodes[(size_t)n].bytes.push_back({s.next_lo, s.next_hi, end});
      continue;
    }
    n = grammar_byte_range(g, n, s.next_lo, s.next_hi);
    for (int k = 1; k < s.rest; ++k) n = grammar_byte_range(g, n, 0x80, 0xBF);
    g.nodes[(size_t)n].bytes.push_back({0x80, 0xBF, end});
  }
  return end;
}

int32_t grammar_json_string_char(Grammar& g, int32_t from) {
  const int32_t end = g.add_node();
  Grammar::Node& n = g.nodes[(size_t)from];
  n.bytes.push_back({0x20, 0x21, end});  // printable ASCII but '"' (22) and '\\' (5C)
  n.bytes.push_back({0x23, 0x5B, end});
  n.bytes.push_back({0x5D, 0x7E, end});
  g.nodes[(size_t)grammar_utf8_multibyte(g, from)].eps.push_back(end);
  const int32_t esc = grammar_byte_range(g, from, '\\', '\\');
  for (char c : std::string_view("\"\\/bfnrt")) {
    g.nodes[(size_t)esc].bytes.push_back({(uint8_t)c, (uint8_t)c, end});
  }
  // \uXXXX, leaving out D800-DFFF: a lone surrogate half is refused by many
  // parsers, and pairs are not needed as UTF-8 spells every character.
  const int32_t u = grammar_byte_range(g, esc, 'u', 'u');
  const int32_t h1 = g.add_node(), d = g.add_node(), h2 = g.add_node();
  const auto hex = [&](int32_t a, int32_t b) {
    g.nodes[(size_t)a].bytes.push_back({'0', '9', b});
    g.nodes[(size_t)a].bytes.push_back({'A', 'F', b});
    g.nodes[(size_t)a].bytes.push_back({'a', 'f', b});
  };
  g.nodes[(size_t)u].bytes.push_back({'0', '9', h1});
  g.nodes[(size_t)u].bytes.push_back({'A', 'C', h1});
  g.nodes[(size_t)u].bytes.push_back({'a', 'c', h1});
  g.nodes[(size_t)u].bytes.push_back({'E', 'F', h1});
  g.nodes[(size_t)u].bytes.push_back({'e', 'f', h1});
  g.nodes[(size_t)u].bytes.push_back({'D', 'D', d});
  g.nodes[(size_t)u].bytes.push_back({'d', 'd', d});
  hex(h1, h2);
  g.nodes[(size_t)d].bytes.push_back({'0', '7', h2});
  const int32_t h3 = g.add_node();
  hex(h2, h3);
  hex(h3, end);
  return end;
}

namespace {

// A parsed regular expression.
struct Re {
  enum Kind { set, seq, alt, rep } kind = seq;
  std::bitset<256> bytes;  // set: single bytes (>= 0x80 only inside a literal character)
  bool multibyte = false;  // set: also any multi-byte UTF-8 character
  std::vector<Re> kids;
  int min = 0, max = -1;   // rep: -1 is unbounded
};

constexpr int kMaxRepeat = 256;  // copies one repetition may unroll to

class ReParser {
 public:
  ReParser(std::string_view p, const std::string& where) : p_(p), where_(where) {}

  Re parse_all() {
    Re r = alternation();
    if (i_ < p_.size()) fail("unbalanced ')'");
    return r;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[json-schema] " + where_ + ": pattern \"" + std::string(p_) + "\": " + what);
  }

 private:
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  Re alternation() {
    Re a;
    a.kind = Re::alt;
    a.kids.push_back(sequence());
    while (more() && peek() == '|') {
      ++i_;
      a.kids.push_back(sequence());
    }
    return a.kids.size() == 1 ? std::move(a.kids[0]) : a;
  }

  Re sequence() {
    Re s;
    s.kind = Re::seq;
    while (more() && peek() != '|' && peek() != ')') {
      Re atom = this->atom();
      s.kids.push_back(quantified(std::move(atom)));
    }
    return s;
  }

  // An atom and at most one quantifier (and its lazy '?').  A second one is
  // an error, as in ECMA-262: compiled, each of a++++... would copy the one
  // before, doubling the grammar per character.
  Re quantified(Re atom) {
    for (bool done = false; more(); done = true) {
      int lo, hi;
      const char c = peek();
      if (c == '*') { lo = 0; hi = -1; ++i_; }
      else if (c == '+') { lo = 1; hi = -1; ++i_; }
      else if (c == '?') { lo = 0; hi = 1; ++i_; }
      else if (c == '{') { if (!counts(&lo, &hi)) return atom; }
      else return atom;
      if (done) fail(std::string("a quantifier may not follow another (nothing to repeat before '") + c + "')");
      if (more() && peek() == '?') ++i_;  // lazy: the same language
      if ((hi >= 0 && hi > kMaxRepeat) || lo > kMaxRepeat) {
        fail("repetition counts above " + std::to_string(kMaxRepeat) + " are unsupported");
      }
      Re r;
      r.kind = Re::rep;
      r.min = lo;
      r.max = hi;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  // {n}, {n,}, {n,m}; false (nothing consumed) when '{' is a literal.
  bool counts(int* lo, int* hi) {
    size_t j = i_ + 1;
    const auto num = [&](int* out) {
      const size_t s = j;
      long v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v <= 1000000) v = v * 10 + (p_[j++] - '0');
      *out = (int)std::min(v, 1000001L);
      return j > s;
    };
    if (!num(lo)) return false;
    *hi = *lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!num(hi)) *hi = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    if (*hi >= 0 && *hi < *lo) fail("repetition {" + std::to_string(*lo) + "," + std::to_string(*hi) + "} has max < min");
    i_ = j + 1;
    return true;
  }

  static Re byte_set(std::initializer_list<std::pair<int, int>> ranges, bool negate,
                     bool multibyte) {
    Re s;
    s.kind = Re::set;
    for (auto [a, b] : ranges) {
      for (int c = a; c <= b; ++c) s.bytes.set((size_t)c);
    }
    if (negate) {
      for (int c = 0; c < 128; ++c) s.bytes.flip((size_t)c);
      for (int c = 128; c < 256; ++c) s.bytes.reset((size_t)c);
    }
    s.multibyte = multibyte;
    return s;
  }

  // A class escape (\d \w \s and their negations); false when c is not one.
  bool class_escape(char c, Re* out) {
    switch (c) {
      case 'd': *out = byte_set({{'0', '9'}}, false, false); return true;
      case 'D': *out = byte_set({{'0', '9'}}, true, false); return true;
      case 'w': *out = byte_set({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}, false, false); return true;
      case 'W': *out = byte_set({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}, true, false); return true;
      case 's': *out = byte_set({{' ', ' '}, {'\t', '\r'}}, false, false); return true;
      case 'S': *out = byte_set({{' ', ' '}, {'\t', '\r'}}, true, false); return true;
      default: return false;
    }
  }

  // The byte a single-character escape stands for (after the backslash).
  uint8_t escaped_byte(char c) {
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'u': {
        unsigned v = 0;
        for (int k = 0; k < 4; ++k) {
          const char h = i_ < p_.size() ? p_[i_++] : '\0';
          const int d = h >= '0' && h <= '9' ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) fail("\\u needs four hex digits");
          v = v * 16 + (unsigned)d;
        }
        if (v >= 0x80) fail("\\u escapes beyond ASCII are unsupported; write the character");
        return (uint8_t)v;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          fail(std::string("the escape \\") + c + " is unsupported");
        }
        return (uint8_t)c;  // an escaped punctuation character is itself
    }
  }

  Re atom() {
    const char c = p_[i_++];
    switch (c) {
      case '(': {
        if (++depth_ > kMaxGroupDepth) fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
        if (more() && peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else {
            fail("lookaround and named groups are unsupported");
          }
        }
        Re inner = alternation();
        if (!more() || peek() != ')') fail("unclosed '('");
        ++i_;
        --depth_;
        return inner;
      }
      case '[': return bracket();
      case '.': return byte_set({{0, '\n' - 1}, {'\n' + 1, 127}}, false, true);
      case '^':
      case '$': fail("anchors are supported only at the very start (^) and end ($)");
      case '*':
      case '+':
      case '?': fail(std::string("nothing to repeat before '") + c + "'");
      case '\\': {
        if (!more()) fail("trailing backslash");
        const char e = p_[i_++];
        Re s;
        if (class_escape(e, &s)) return s;
        if (e >= '1' && e <= '9') fail("backreferences are unsupported");
        if (e == 'b' || e == 'B') fail("word boundaries are unsupported");
        const uint8_t b = escaped_byte(e);
        return byte_set({{b, b}}, false, false);
      }
      default: {
        const uint8_t b = (uint8_t)c;
        if (b < 0x80) return byte_set({{b, b}}, false, false);
        // A non-ASCII character: its bytes in sequence, so that a quantifier
        // after it repeats the whole character.
        Re s;
        s.kind = Re::seq;
        s.kids.push_back(byte_set({{b, b}}, false, false));
        while (more() && ((uint8_t)peek() & 0xC0) == 0x80) {
          const uint8_t cb = (uint8_t)p_[i_++];
          s.kids.push_back(byte_set({{cb, cb}}, false, false));
        }
        return s;
      }
    }
  }

  Re bracket() {
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    Re s;
    s.kind = Re::set;
    bool first = true;
    while (true) {
      if (!more()) fail("unclosed '['");
      char c = p_[i_++];
      if (c == ']' && !first) break;
      first = false;
      uint8_t lo;
      if (c == '\\') {
        if (!more()) fail("trailing backslash");
        const char e = p_[i_++];
        Re cls;
        if (class_escape(e, &cls)) {
          s.bytes |= cls.bytes;
          continue;
        }
        lo = escaped_byte(e);
      } else {
        lo = (uint8_t)c;
      }
      if (lo >= 0x80) fail("non-ASCII characters inside [...] are unsupported");
      uint8_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        char h = p_[i_++];
        if (h == '\\') {
          if (!more()) fail("trailing backslash");
          h = (char)escaped_byte(p_[i_++]);
        }
        hi = (uint8_t)h;
        if (hi >= 0x80) fail("non-ASCII characters inside [...] are unsupported");
        if (hi < lo) fail("class range out of order");
      }
      for (int b = lo; b <= hi; ++b) s.bytes.set((size_t)b);
    }
    if (negate) {
      for (int c = 0; c < 128; ++c) s.bytes.flip((size_t)c);
      s.multibyte = true;
    }
    return s;
  }

  static constexpr int kMaxGroupDepth = 64;
  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
  const std::string& where_;
};

// Adds the JSON-string spelling of one byte value of a set: the byte itself
// where JSON allows it raw, else an escape.
void emit_escaped(Grammar& g, int32_t from, int32_t end, uint8_t b) {
  static const char* const kShort = "\b\f\n\r\t";
  static const char* const kShortName = "bfnrt";
  std::string spelled;
  if (b == '"' || b == '\\') {
    spelled = std::string("\\") + (char)b;
  } else {
    for (int k = 0; kShort[k]; ++k) {
      if (kShort[k] == (char)b) spelled = std::string("\\") + kShortName[k];
    }
    if (spelled.empty()) {
      static const char* const kHex = "0123456789ABCDEF";
      spelled = std::string("\\u00") + kHex[b >> 4] + kHex[b & 15];
    }
  }
  g.nodes[(size_t)grammar_literal(g, from, spelled)].eps.push_back(end);
}

int32_t emit(Grammar& g, int32_t from, const Re& r) {
  switch (r.kind) {
    case Re::set: {
      const int32_t end = g.add_node();
      for (int b = 0; b < 256;) {
        const bool raw = r.bytes.test((size_t)b) && b >= 0x20 && b != '"' && b != '\\' && b != 0x7F;
        if (!raw) {
          if (r.bytes.test((size_t)b)) emit_escaped(g, from, end, (uint8_t)b);
          ++b;
          continue;
        }
        int e = b;
        while (e + 1 < 256 && r.bytes.test((size_t)e + 1) && e + 1 != '"' && e + 1 != '\\' &&
               e + 1 != 0x7F) {
          ++e;
        }
        g.nodes[(size_t)from].bytes.push_back({(uint8_t)b, (uint8_t)e, end});
        b = e + 1;
      }
      if (r.multibyte) g.nodes[(size_t)grammar_utf8_multibyte(g, from)].eps.push_back(end);
      return end;
    }
    case Re::seq:
      for (const Re& k : r.kids) from = emit(g, from, k);
      return from;
    case Re::alt: {
      const int32_t end = g.add_node();
      for (const Re& k : r.kids) g.nodes[(size_t)emit(g, from, k)].eps.push_back(end);
      return end;
    }
    case Re::rep: {
      for (int k = 0; k < r.min; ++k) from = emit(g, from, r.kids[0]);
      if (r.max < 0) {
        const int32_t loop = g.add_node();
        g.nodes[(size_t)from].eps.push_back(loop);
        g.nodes[(size_t)emit(g, loop, r.kids[0])].eps.push_back(loop);
        return loop;
      }
      const int32_t end = g.add_node();
      for (int k = r.min; k < r.max; ++k) {
        g.nodes[(size_t)from].eps.push_back(end);
        from = emit(g, from, r.kids[0]);
      }
      g.nodes[(size_t)from].eps.push_back(end);
      return end;
    }
  }
  return from;
}

// Any run of JSON string characters (the unanchored ends of a pattern).
int32_t any_chars(Grammar& g, int32_t from) {
  const int32_t loop = g.add_node();
  g.nodes[(size_t)from].eps.push_back(loop);
  g.nodes[(size_t)grammar_json_string_char(g, loop)].eps.push_back(loop);
  return loop;
}

}  // namespace

int32_t grammar_pattern(Grammar& g, int32_t from, std::string_view pattern,
                        const std::string& where) {
  std::string_view body = pattern;
  const bool start_anchor = !body.empty() && body.front() == '^';
  if (start_anchor) body.remove_prefix(1);
  // A trailing $ is an anchor unless escaped (an odd run of backslashes).
  bool end_anchor = false;
  if (!body.empty() && body.back() == '$') {
    size_t slashes = 0;
    while (slashes + 1 < body.size() && body[body.size() - 2 - slashes] == '\\') ++slashes;
    if (slashes % 2 == 0) {
      end_anchor = true;
      body.remove_suffix(1);
    }
  }
  ReParser parser(body, where);
  const Re re = parser.parse_all();
  if (re.kind == Re::alt && (start_anchor || end_anchor)) {
    parser.fail("anchors around a top-level '|' are ambiguous here; group it: ^(a|b)$");
  }
  if (!start_anchor) from = any_chars(g, from);
  from = emit(g, from, re);
  if (!end_anchor) from = any_chars(g, from);
  return from;
}

}  // namespace lilims::runtime
