#include "runtime/constrain/json_constraint.h"

#include <cstring>

namespace lilims::runtime {

bool JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!feed_byte((uint8_t)c)) return false;
  }
  return true;
}

bool JsonPrefix::operator==(const JsonPrefix& o) const {
  if (root_object_ != o.root_object_ || state_ != o.state_ || ws_run_ != o.ws_run_ ||
      depth_ != o.depth_ || std::memcmp(stack_, o.stack_, (size_t)depth_) != 0) {
    return false;
  }
  // Fields of other states are left over from earlier values and do not count.
  switch (state_) {
    case St::string:
    case St::escape:
    case St::low_escape:
    case St::low_u: return string_is_key_ == o.string_is_key_;
    case St::unicode:
      return string_is_key_ == o.string_is_key_ && hex_left_ == o.hex_left_ &&
             hex_kind_ == o.hex_kind_ && want_low_ == o.want_low_;
    case St::utf8:
      return string_is_key_ == o.string_is_key_ && utf8_left_ == o.utf8_left_ &&
             utf8_lo_ == o.utf8_lo_ && utf8_hi_ == o.utf8_hi_;
    case St::number:
      return num_ == o.num_ && (num_ != Num::exp_digits || exp_digits_ == o.exp_digits_);
    case St::literal: return std::strcmp(literal_, o.literal_) == 0;
    default: return true;
  }
}

std::string JsonPrefix::completion() const {
  std::string out;
  const char* key_rest = string_is_key_ ? ":0" : "";
  switch (state_) {
    case St::done: return out;
    case St::value:
      // At the top level a number only ends at a following byte, so a bare
      // top-level value closes fastest as "" (two bytes, like "{}").
      if (depth_ == 0) return root_object_ ? "{}" : "\"\"";
      out = "0";
      break;
    case St::value_or_end:
    case St::key_or_end:
    case St::after_value: break;
    case St::key: out = "\"\":0"; break;
    case St::colon: out = ":0"; break;
    case St::string: out = std::string("\"") + key_rest; break;
    case St::escape: out = std::string("\"\"") + key_rest; break;  // \" then the closing quote
    case St::unicode:
      if (want_low_ && hex_left_ == 4) {
        out = "DC00";
      } else if (want_low_ && hex_left_ == 3) {
        out = "C00";
      } else {
        out = std::string(hex_left_, '0');
        // Zeros after D8-DB still make a high surrogate, which needs its low half.
        if (hex_kind_ == Hex::high) out += "\\uDC00";
      }
      out += std::string("\"") + key_rest;
      break;
    case St::low_escape: out = std::string("\\uDC00\"") + key_rest; break;
    case St::low_u: out = std::string("uDC00\"") + key_rest; break;
    case St::utf8:
      out.push_back((char)utf8_lo_);
      out.append((size_t)utf8_left_ - 1, (char)0x80);
      out += std::string("\"") + key_rest;
      break;
    case St::number: {
      const bool needs_digit = num_ == Num::minus || num_ == Num::dot || num_ == Num::exp ||
                               num_ == Num::exp_sign;
      if (needs_digit) out = "0";
      if (depth_ == 0) out += ' ';
      break;
    }
    case St::literal: out = literal_; break;
  }
  for (int d = depth_ - 1; d >= 0; --d) out += stack_[d] == '{' ? '}' : ']';
  return out;
}

bool JsonPrefix::whitespace(uint8_t c) {
  if (c != ' ' && c != '\n' && c != '\t' && c != '\r') return false;
  return ++ws_run_ <= kMaxWhitespaceRun;
}

bool JsonPrefix::end_value() {
  if (depth_ == 0) {
    state_ = St::done;
  } else {
    state_ = St::after_value;
  }
  return true;
}

bool JsonPrefix::start_value(uint8_t c) {
  if (depth_ == 0 && root_object_ && c != '{') return false;
  switch (c) {
    case '{':
    case '[':
      if (depth_ >= kMaxDepth) return false;
      stack_[depth_++] = (char)c;
      state_ = c == '{' ? St::key_or_end : St::value_or_end;
      return true;
    case '"':
      string_is_key_ = false;
      state_ = St::string;
      return true;
    case 't': literal_ = "rue"; state_ = St::literal; return true;
    case 'f': literal_ = "alse"; state_ = St::literal; return true;
    case 'n': literal_ = "ull"; state_ = St::literal; return true;
    case '-': num_ = Num::minus; state_ = St::number; return true;
    case '0': num_ = Num::zero; state_ = St::number; return true;
    default:
      if (c >= '1' && c <= '9') {
        num_ = Num::int_digits;
        state_ = St::number;
        return true;
      }
      return false;
  }
}

// Handles c while in a number.  *consumed = false means the number ended
// before c and c must be processed in the state after the value.
bool JsonPrefix::number_byte(uint8_t c, bool* consumed) {
  const bool digit = c >= '0' && c <= '9';
  *consumed = true;
  switch (num_) {
    case Num::minus:
      if (c == '0') { num_ = Num::zero; return true; }
      if (digit) { num_ = Num::int_digits; return true; }
      return false;
    case Num::zero:
    case Num::int_digits:
      if (digit && num_ == Num::int_digits) return true;
      if (c == '.') { num_ = Num::dot; return true; }
      if (c == 'e' || c == 'E') { num_ = Num::exp; return true; }
      break;  // the number may end here
    case Num::dot:
      if (digit) { num_ = Num::frac; return true; }
      return false;
    case Num::frac:
      if (digit) return true;
      if (c == 'e' || c == 'E') { num_ = Num::exp; return true; }
      break;
    case Num::exp:
      if (c == '+' || c == '-') { num_ = Num::exp_sign; return true; }
      if (digit) { num_ = Num::exp_digits; exp_digits_ = 1; return true; }
      return false;
    case Num::exp_sign:
      if (digit) { num_ = Num::exp_digits; exp_digits_ = 1; return true; }
      return false;
    case Num::exp_digits:
      if (digit) return ++exp_digits_ <= kMaxExponentDigits;
      break;
  }
  // A complete number followed by c.  At the top level a number cannot be
  // followed by anything we could check, so only containers get here.
  *consumed = false;
  if (digit) return false;  // "01"
  return end_value();
}

bool JsonPrefix::feed_byte(uint8_t c) {
  if (state_ == St::number) {
    bool consumed;
    if (!number_byte(c, &consumed)) return false;
    if (consumed) return true;
  }
  switch (state_) {
    case St::done:
      return whitespace(c);
    case St::value:
      if (whitespace(c)) return true;
      ws_run_ = 0;
      return start_value(c);
    case St::value_or_end:
      if (whitespace(c)) return true;
      ws_run_ = 0;
      if (c == ']') {
        --depth_;
        return end_value();
      }
      return start_value(c);
    case St::key_or_end:
    case St::key:
      if (whitespace(c)) return true;
      ws_run_ = 0;
      if (c == '}' && state_ == St::key_or_end) {
        --depth_;
        return end_value();
      }
      if (c != '"') return false;
      string_is_key_ = true;
      state_ = St::string;
      return true;
    case St::colon:
      if (whitespace(c)) return true;
      ws_run_ = 0;
      if (c != ':') return false;
      state_ = St::value;
      return true;
    case St::after_value: {
      if (whitespace(c)) return true;
      ws_run_ = 0;
      const char top = stack_[depth_ - 1];
      if (c == ',') {
        state_ = top == '{' ? St::key : St::value;
        return true;
      }
      if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
        --depth_;
        return end_value();
      }
      return false;
    }
    case St::string:
      if (c == '"') {
        if (string_is_key_) {
          state_ = St::colon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') {
        state_ = St::escape;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      if (c < 0x80) return true;
      // UTF-8 lead byte: well-formed sequences only (no overlongs, no surrogates)
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        utf8_left_ = 1;
      } else if (c >= 0xE0 && c <= 0xEF) {
        utf8_left_ = 2;
        if (c == 0xE0) utf8_lo_ = 0xA0;
        if (c == 0xED) utf8_hi_ = 0x9F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        utf8_left_ = 3;
        if (c == 0xF0) utf8_lo_ = 0x90;
        if (c == 0xF4) utf8_hi_ = 0x8F;
      } else {
        return false;
      }
      state_ = St::utf8;
      return true;
    case St::utf8:
      if (c < utf8_lo_ || c > utf8_hi_) return false;
      utf8_lo_ = 0x80;
      utf8_hi_ = 0xBF;
      if (--utf8_left_ == 0) state_ = St::string;
      return true;
    case St::escape:
      switch (c) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          state_ = St::string;
          return true;
        case 'u':
          hex_left_ = 4;
          hex_kind_ = Hex::plain;
          state_ = St::unicode;
          return true;
        default:
          return false;
      }
    case St::unicode: {
      int h;
      if (c >= '0' && c <= '9') h = c - '0';
      else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
      else return false;
      // UTF-16 surrogates come in pairs: a high one (D800-DBFF) is followed by
      // \u and a low one (DC00-DFFF); a lone half is refused as soon as it
      // shows, since many parsers (nlohmann::json among them) reject it.
      if (hex_left_ == 4) {
        if (want_low_ && h != 0xD) return false;
        hex_kind_ = h == 0xD ? Hex::d : Hex::plain;
      } else if (hex_left_ == 3 && hex_kind_ == Hex::d) {
        const bool low = h >= 0xC;
        if (low != want_low_) return false;
        hex_kind_ = !want_low_ && h >= 0x8 ? Hex::high : Hex::plain;
      }
      if (--hex_left_ > 0) return true;
      state_ = hex_kind_ == Hex::high ? St::low_escape : St::string;
      want_low_ = false;
      return true;
    }
    case St::low_escape:
      if (c != '\\') return false;
      state_ = St::low_u;
      return true;
    case St::low_u:
      if (c != 'u') return false;
      hex_left_ = 4;
      hex_kind_ = Hex::plain;
      want_low_ = true;
      state_ = St::unicode;
      return true;
    case St::literal:
      if (*literal_ != (char)c) return false;
      if (*++literal_ == '\0') return end_value();
      return true;
    case St::number:
      return false;  // handled above
  }
  return false;
}

}  // namespace lilims::runtime

namespace lilims::runtime {

JsonClosers::JsonClosers(const std::vector<std::string>& pieces) {
  for (int32_t& t : byte_token_) t = -1;
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& p = pieces[id];
    if (p.size() == 1 && byte_token_[(uint8_t)p[0]] < 0) byte_token_[(uint8_t)p[0]] = (int32_t)id;
  }
}

int JsonClosers::tokens_to_close(const JsonPrefix& p) const {
  const std::string c = p.completion();
  for (char b : c) {
    if (byte_token_[(uint8_t)b] < 0) return kUnreachable;
  }
  return (int)c.size();
}

}  // namespace lilims::runtime
