// Constrained decoding to strictly valid JSON (RFC 8259): a byte-level
// pushdown recognizer of JSON prefixes.  Generation only picks tokens whose
// bytes keep the output a prefix of some valid JSON value, and stops when the
// top-level value is complete, so the output always parses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lilims::runtime {

class JsonPrefix {
 public:
  // root_object: the top-level value must be an object (function calling).
  explicit JsonPrefix(bool root_object = true) : root_object_(root_object) {}

  // Feeds bytes; false (and the state unchanged is NOT guaranteed) when they
  // cannot continue a valid JSON text.  Work on a copy to test a candidate.
  bool feed(std::string_view bytes);
  bool feed_byte(uint8_t c);
  // The top-level value is complete (only whitespace may follow).
  bool complete() const { return state_ == St::done; }
  // The shortest bytes that complete the value from here: closing an open
  // string, finishing a number or literal, a placeholder value ("0") or key
  // ("\"\":0") where one is required, then one closer per open container.
  // Canonical: after feeding its first byte, the completion is the rest, so
  // a vocabulary with a token for each of its bytes can always close in
  // completion().size() tokens.
  std::string completion() const;
  int min_completion() const { return (int)completion().size(); }

  // Same state: the same bytes are accepted from here on.
  bool operator==(const JsonPrefix& o) const;

  static constexpr int kMaxDepth = 32;        // deeper nesting is refused
  static constexpr int kMaxWhitespaceRun = 2;  // keeps a model from padding forever
  // Exponents of at most two digits: |x| < 1e100 fits a double, so every
  // parser reads the number (1e999 is valid JSON but many parsers refuse it).
  static constexpr int kMaxExponentDigits = 2;

 private:
  enum class St : uint8_t {
    value,        // expecting a value (after '[', ':' or at the start)
    value_or_end, // after '[': a value or ']'
    key_or_end,   // after '{': a key string or '}'
    key,          // after ',' in an object: a key string
    colon,        // after a key
    after_value,  // after a value inside a container: ',' or the closer
    string,       // inside a string (key or value)
    escape,       // after a backslash
    unicode,      // in \uXXXX (hex_left digits to go)
    low_escape,   // after a high surrogate's \uD8XX-\uDBXX: the '\\' of its low half
    low_u,        // the 'u' of the low half
    utf8,         // inside a multi-byte UTF-8 sequence in a string
    number,       // inside a number (num_ says where)
    literal,      // inside true/false/null
    done,
  };
  enum class Num : uint8_t { minus, zero, int_digits, dot, frac, exp, exp_sign, exp_digits };

  bool end_value();                // a value just finished
  bool start_value(uint8_t c);     // c begins a value
  bool number_byte(uint8_t c, bool* consumed);
  bool whitespace(uint8_t c);

  bool root_object_;
  St state_ = St::value;
  bool string_is_key_ = false;
  uint8_t hex_left_ = 0;
  // In \uXXXX: plain, first digit D (maybe a surrogate), or a high surrogate.
  enum class Hex : uint8_t { plain, d, high };
  Hex hex_kind_ = Hex::plain;
  bool want_low_ = false;    // the \u being read must be a low surrogate (DC00-DFFF)
  uint8_t utf8_left_ = 0;
  uint8_t utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // allowed range of the next continuation byte
  Num num_ = Num::minus;
  uint8_t exp_digits_ = 0;
  const char* literal_ = nullptr;  // the rest of "true"/"false"/"null" to match
  uint8_t ws_run_ = 0;
  int depth_ = 0;
  char stack_[kMaxDepth] = {};     // '{' or '['
};

// What a vocabulary offers for closing JSON output: the token whose piece is
// exactly one byte, for each byte.  Generation keeps tokens_to_close() of the
// output within the tokens it may still produce, so a cap or a full context
// can never cut an object open.
class JsonClosers {
 public:
  // pieces[id]: the bytes of each token; empty for tokens that never appear
  // in JSON output (control tokens).
  explicit JsonClosers(const std::vector<std::string>& pieces);

  static constexpr int kUnreachable = 1 << 20;
  // Tokens that close p along its completion(), one single-byte token per
  // byte; kUnreachable when a byte of it has no token of its own.  An upper
  // bound on the fewest tokens: multi-byte tokens ("}}") may do better.
  int tokens_to_close(const JsonPrefix& p) const;
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }

 private:
  int32_t byte_token_[256];
};

}  // namespace lilims::runtime
