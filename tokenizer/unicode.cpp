#include "tokenizer/unicode.h"

#include <algorithm>
#include <iterator>

namespace lilims::tok {
namespace {

struct CategoryRange {
  uint32_t first;
  uint8_t flags;
};
struct CodepointMapping {
  uint32_t cp;
  const char* utf8;
};

#include "tokenizer/unicode_tables.inc"

const CodepointMapping* find_mapping(const CodepointMapping* begin, const CodepointMapping* end,
                                     uint32_t cp) {
  auto it = std::lower_bound(begin, end, cp,
                             [](const CodepointMapping& m, uint32_t c) { return m.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

}  // namespace

uint8_t unicode_category(uint32_t cp) {
  if (cp < 0x80) {
    // ASCII fast path (the common case in byte-level BPE pre-tokenization).
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kCatLetter;
    if (cp >= '0' && cp <= '9') return kCatNumber;
    if (cp < 0x20 || cp == 0x7F) return kCatControl;
    if (cp == ' ') return kCatSeparator;
    switch (cp) {
      case '$': case '+': case '<': case '=': case '>': case '^': case '`': case '|': case '~':
        return kCatSymbol;
      default:
        return kCatPunctuation;
    }
  }
  if (cp > 0x10FFFF) return 0;
  auto it = std::upper_bound(std::begin(kCategoryRanges), std::end(kCategoryRanges), cp,
                             [](uint32_t c, const CategoryRange& r) { return c < r.first; });
  return std::prev(it)->flags;
}

bool unicode_is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return std::binary_search(std::begin(kWhitespace), std::end(kWhitespace), cp);
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) cp = 0xFFFD;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  *len = 1;
  if (b0 < 0x80) return b0;
  const size_t n = utf8_len(b0);
  if (n == 1 || i + n > s.size()) return 0xFFFD;
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (b & 0x3F);
  }
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0xFFFD;
  *len = n;
  return cp;
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = utf8_decode(s, i, &len);
    if (cp == 0xFFFD && len == 1) return false;
    i += len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  if (utf8_is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = utf8_decode(s, i, &len);
    if (cp == 0xFFFD && len == 1) {
      utf8_append(out, 0xFFFD);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::vector<uint32_t> utf8_to_codepoints(std::string_view s, std::vector<uint32_t>* offsets) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  if (offsets) {
    offsets->clear();
    offsets->reserve(s.size() + 1);
  }
  for (size_t i = 0; i < s.size();) {
    size_t len;
    cps.push_back(utf8_decode(s, i, &len));
    if (offsets) offsets->push_back(static_cast<uint32_t>(i));
    i += len;
  }
  if (offsets) offsets->push_back(static_cast<uint32_t>(s.size()));
  return cps;
}

std::string unicode_lower(uint32_t cp) {
  if (cp < 0x80) {
    return std::string(1, static_cast<char>((cp >= 'A' && cp <= 'Z') ? cp + 32 : cp));
  }
  if (const auto* m = find_mapping(std::begin(kLowercase), std::end(kLowercase), cp)) return m->utf8;
  std::string out;
  utf8_append(out, cp);
  return out;
}

std::string unicode_strip_accents(uint32_t cp) {
  std::string out;
  if (cp >= 0xAC00 && cp <= 0xD7A3) {
    // Hangul syllable: the algorithmic canonical decomposition (no marks).
    const uint32_t s = cp - 0xAC00;
    utf8_append(out, 0x1100 + s / (21 * 28));
    utf8_append(out, 0x1161 + (s % (21 * 28)) / 28);
    if (s % 28) utf8_append(out, 0x11A7 + s % 28);
    return out;
  }
  if (const auto* m = find_mapping(std::begin(kStripAccents), std::end(kStripAccents), cp)) return m->utf8;
  utf8_append(out, cp);
  return out;
}

uint32_t byte_level_cp(uint8_t b) {
  auto printable = [](uint32_t x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (uint32_t x = 0; x < b; ++x) n += !printable(x);
  return 256 + n;
}

bool unicode_is_deepseek_llm_letter(uint32_t cp) {
  auto it = std::upper_bound(std::begin(kDeepseekLlmLetters), std::end(kDeepseekLlmLetters), cp,
                             [](uint32_t c, const uint32_t (&r)[2]) { return c < r[0]; });
  if (it == std::begin(kDeepseekLlmLetters)) return false;
  return cp <= (*std::prev(it))[1];
}

const char* unicode_data_version() { return LILIMS_UNICODE_VERSION; }

}  // namespace lilims::tok
