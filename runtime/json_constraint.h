// Constrained decoding to strictly valid JSON (RFC 8259): a byte-level
// pushdown recognizer of JSON prefixes.  Generation only picks tokens whose
// bytes keep the output a prefix of some valid JSON value, and stops when the
// top-level value is complete, so the output always parses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
  // The fewest bytes that complete the value from here (closing open
  // strings, finishing a number or literal, a placeholder value or key where
  // one is required, then one closer per open container).  Generation near
  // its token limit only accepts tokens that lower it, so the output closes.
  int min_completion() const;

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
  uint8_t utf8_left_ = 0;
  uint8_t utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // allowed range of the next continuation byte
  Num num_ = Num::minus;
  uint8_t exp_digits_ = 0;
  const char* literal_ = nullptr;  // the rest of "true"/"false"/"null" to match
  uint8_t ws_run_ = 0;
  int depth_ = 0;
  char stack_[kMaxDepth] = {};     // '{' or '['
};

}  // namespace lilims::runtime
