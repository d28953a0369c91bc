#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace lilims::tok {
namespace {

using Range = std::pair<uint32_t, uint32_t>;  // code point indices [first, second)
// Returns the length of the pattern's match at c[p] within a piece ending at
// e (0: no match here).  Patterns never match the empty string.
using Matcher = size_t (*)(const uint32_t* c, size_t p, size_t e);

bool is_ws(uint32_t cp) { return unicode_is_whitespace(cp); }
bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
// [^\s\p{L}\p{N}]
bool is_other(uint32_t cp) {
  return !is_ws(cp) && !(unicode_category(cp) & (kCatLetter | kCatNumber));
}

template <typename Pred>
size_t run(const uint32_t* c, size_t p, size_t e, Pred pred) {
  size_t q = p;
  while (q < e && pred(c[q])) ++q;
  return q - p;
}

uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (llama3's (?i:...)).
size_t match_contraction(const uint32_t* c, size_t p, size_t e, bool icase) {
  if (p + 1 >= e || c[p] != '\'') return 0;
  auto lc = [&](size_t i) { return icase ? ascii_lower(c[i]) : c[i]; };
  const uint32_t a = lc(p + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (p + 2 < e) {
    const uint32_t b = lc(p + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace code point.
size_t match_ws_tail(const uint32_t* c, size_t p, size_t e) {
  const size_t n = run(c, p, e, is_ws);
  if (p + n == e || n == 1) return n;
  return n - 1;  // leave the last space to the word after it
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const uint32_t* c, size_t p, size_t e) {
  if (size_t n = match_contraction(c, p, e, false)) return n;
  const size_t q = (c[p] == ' ' && p + 1 < e) ? p + 1 : p;
  const uint8_t cat = unicode_category(c[q]);
  if (cat & kCatLetter) return q - p + run(c, q, e, unicode_is_letter);
  if (cat & kCatNumber) return q - p + run(c, q, e, unicode_is_number);
  if (is_other(c[q])) return q - p + run(c, q, e, is_other);
  return match_ws_tail(c, p, e);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (qwen2: \p{N} instead of \p{N}{1,3})
template <size_t kMaxDigits>
size_t match_llama3(const uint32_t* c, size_t p, size_t e) {
  if (size_t n = match_contraction(c, p, e, true)) return n;
  const uint32_t cp = c[p];
  const uint8_t cat = unicode_category(cp);
  if (!is_crlf(cp) && !(cat & (kCatLetter | kCatNumber)) && p + 1 < e && unicode_is_letter(c[p + 1])) {
    return 1 + run(c, p + 1, e, unicode_is_letter);
  }
  if (cat & kCatLetter) return run(c, p, e, unicode_is_letter);
  if (cat & kCatNumber) {
    const size_t n = run(c, p, e, unicode_is_number);
    return n < kMaxDigits ? n : kMaxDigits;
  }
  const size_t q = (cp == ' ' && p + 1 < e) ? p + 1 : p;
  if (is_other(c[q])) {
    size_t r = q + run(c, q, e, is_other);
    r += run(c, r, e, is_crlf);
    return r - p;
  }
  if (is_ws(cp)) {
    const size_t n = run(c, p, e, is_ws);
    for (size_t j = p + n; j-- > p;) {
      if (is_crlf(c[j])) return j + 1 - p;  // \s*[\r\n]+
    }
    return match_ws_tail(c, p, e);
  }
  return 0;
}

// GPT-4o's (o200k) pattern as llama.cpp runs it (llama-vocab.cpp's adapted
// regex over its category-collapsed text):
//   [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with C = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]), U a
// letter but a-z and L a letter but A-Z: llama.cpp tells case apart in ASCII
// only (tokenizer.json's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}] do it for every script and take marks in).
bool is_o200k_upper(uint32_t cp) { return unicode_is_letter(cp) && !(cp >= 'a' && cp <= 'z'); }
bool is_o200k_lower(uint32_t cp) { return unicode_is_letter(cp) && !(cp >= 'A' && cp <= 'Z'); }
bool is_not_crlf_letter_number(uint32_t cp) {
  return !is_crlf(cp) && !(unicode_category(cp) & (kCatLetter | kCatNumber));
}

// The end of U{min_upper,}L{min_lower,}C? at c[q] (backtracking the greedy
// U run as a regex engine does), or 0 if it does not match.
size_t o200k_word_end(const uint32_t* c, size_t q, size_t e, size_t min_upper, size_t min_lower) {
  for (size_t k = run(c, q, e, is_o200k_upper) + 1; k-- > min_upper;) {
    const size_t r = q + k;
    const size_t m = run(c, r, e, is_o200k_lower);
    if (m < min_lower) continue;
    return r + m + match_contraction(c, r + m, e, true);
  }
  return 0;
}

size_t match_o200k(const uint32_t* c, size_t p, size_t e) {
  const bool lead = is_not_crlf_letter_number(c[p]);
  // U*L+ before U+L*, each with the leading character first, then without.
  static constexpr std::pair<size_t, size_t> kWordShapes[] = {{0, 1}, {1, 0}};
  for (const auto& [min_upper, min_lower] : kWordShapes) {
    if (lead && p + 1 < e) {
      if (size_t end = o200k_word_end(c, p + 1, e, min_upper, min_lower)) return end - p;
    }
    if (size_t end = o200k_word_end(c, p, e, min_upper, min_lower)) return end - p;
  }
  if (unicode_is_number(c[p])) {
    const size_t n = run(c, p, e, unicode_is_number);
    return n < 3 ? n : 3;
  }
  const size_t q = (c[p] == ' ' && p + 1 < e && is_other(c[p + 1])) ? p + 1 : p;
  if (is_other(c[q])) {
    size_t r = q + run(c, q, e, is_other);
    r += run(c, r, e, [](uint32_t cp) { return is_crlf(cp) || cp == '/'; });
    return r - p;
  }
  if (is_ws(c[p])) {
    const size_t n = run(c, p, e, is_ws);
    for (size_t j = p + n; j-- > p;) {
      if (is_crlf(c[j])) return j + 1 - p;  // \s*[\r\n]+
    }
    return match_ws_tail(c, p, e);
  }
  return 0;
}

// \p{N}
size_t match_number1(const uint32_t* c, size_t p, size_t) { return unicode_is_number(c[p]) ? 1 : 0; }
// \p{N}+
size_t match_numbers(const uint32_t* c, size_t p, size_t e) { return run(c, p, e, unicode_is_number); }
// [\r\n]
size_t match_crlf(const uint32_t* c, size_t p, size_t) { return is_crlf(c[p]) ? 1 : 0; }

// \s?X+ for a class X.
template <typename Pred>
size_t match_ws_opt_run(const uint32_t* c, size_t p, size_t e, Pred pred) {
  if (is_ws(c[p]) && p + 1 < e && pred(c[p + 1])) return 1 + run(c, p + 1, e, pred);
  return run(c, p, e, pred);
}

// \s?\p{L}+  and  \s?\p{P}+
size_t match_ws_letters(const uint32_t* c, size_t p, size_t e) {
  return match_ws_opt_run(c, p, e, unicode_is_letter);
}
size_t match_ws_punct(const uint32_t* c, size_t p, size_t e) {
  return match_ws_opt_run(c, p, e, unicode_is_punct);
}

// [一-龥ࠀ-一가-퟿]+
bool is_deepseek_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x0800 && cp <= 0x4E00) ||
         (cp >= 0xAC00 && cp <= 0xD7FF);
}
size_t match_deepseek_cjk(const uint32_t* c, size_t p, size_t e) { return run(c, p, e, is_deepseek_cjk); }

// DeepSeek-LLM: \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+ (explicit ranges: kDeepseekLlmLetters)
bool is_deepseek_llm_letter(uint32_t cp) { return unicode_is_deepseek_llm_letter(cp); }
size_t match_deepseek_llm_letters(const uint32_t* c, size_t p, size_t e) {
  return match_ws_opt_run(c, p, e, is_deepseek_llm_letter);
}
// \s?[!-/:-~！-／：-～‘-‟　-。]+
bool is_deepseek_llm_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF5E) || (cp >= 0x2018 && cp <= 0x201F) ||
         (cp >= 0x3000 && cp <= 0x3002);
}
size_t match_deepseek_llm_punct(const uint32_t* c, size_t p, size_t e) {
  return match_ws_opt_run(c, p, e, is_deepseek_llm_punct);
}
// \s+$  (the end of the piece)
size_t match_ws_at_end(const uint32_t* c, size_t p, size_t e) {
  const size_t n = run(c, p, e, is_ws);
  return (n > 0 && p + n == e) ? n : 0;
}

// Falcon: [\p{P}\$\+<=>\^~\|`]+
bool is_falcon_punct(uint32_t cp) {
  switch (cp) {
    case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|': case '`':
      return true;
    default:
      return unicode_is_punct(cp);
  }
}
size_t match_falcon_punct(const uint32_t* c, size_t p, size_t e) { return run(c, p, e, is_falcon_punct); }
// llama.cpp's default: [\p{P}\$\+<=>\^~\|]+ (Falcon's class without `)
size_t match_default_punct(const uint32_t* c, size_t p, size_t e) {
  return run(c, p, e, [](uint32_t cp) { return cp != '`' && is_falcon_punct(cp); });
}
// [0-9][0-9][0-9]
size_t match_three_digits(const uint32_t* c, size_t p, size_t e) {
  auto d = [](uint32_t cp) { return cp >= '0' && cp <= '9'; };
  return (p + 3 <= e && d(c[p]) && d(c[p + 1]) && d(c[p + 2])) ? 3 : 0;
}

// One Split(pattern, Isolated) pass over every piece.
void split_pass(const uint32_t* c, Matcher m, std::vector<Range>* pieces) {
  std::vector<Range> out;
  out.reserve(pieces->size() * 2);
  for (const Range& r : *pieces) {
    size_t gap = r.first;
    for (size_t p = r.first; p < r.second;) {
      const size_t n = m(c, p, r.second);
      if (n == 0) {
        ++p;
        continue;
      }
      if (gap < p) out.emplace_back(gap, p);
      out.emplace_back(p, p + n);
      p += n;
      gap = p;
    }
    if (gap < r.second) out.emplace_back(gap, r.second);
  }
  pieces->swap(out);
}

}  // namespace

namespace {

struct NamedSpec {
  const char* name;
  PreTokenizerSpec spec;
};

// Every tokenizer.ggml.pre value llama.cpp maps to one of these splits, with
// the settings it gives each (llama-vocab.cpp, llama_vocab::impl::load).
// "gpt2" and "gpt-neox" are not llama.cpp's names; lilims has accepted them.
constexpr PreTokenizerSpec kGpt2Spec = {PreTokenizer::kGpt2, false, false};
constexpr PreTokenizerSpec kLlama3Spec = {PreTokenizer::kLlama3, true, true};
constexpr PreTokenizerSpec kLlama3MergesSpec = {PreTokenizer::kLlama3, false, false};
constexpr PreTokenizerSpec kQwen2Spec = {PreTokenizer::kQwen2, false, false};
constexpr PreTokenizerSpec kDigitsSpec = {PreTokenizer::kDigitsGpt2, false, false};
const NamedSpec kNames[] = {
    {"default", {PreTokenizer::kDefault, false, false}},
    {"gpt-2", kGpt2Spec}, {"phi-2", kGpt2Spec}, {"mpt", kGpt2Spec}, {"olmo", kGpt2Spec},
    {"jais", kGpt2Spec}, {"trillion", kGpt2Spec}, {"granite-docling", kGpt2Spec}, {"exaone4", kGpt2Spec},
    {"jina-es", kGpt2Spec}, {"jina-de", kGpt2Spec}, {"jina-v2-es", kGpt2Spec}, {"jina-v2-de", kGpt2Spec},
    {"jina-v1-en", kGpt2Spec}, {"jina-v2-code", kGpt2Spec}, {"roberta-bpe", kGpt2Spec},
    {"gigachat", kGpt2Spec}, {"a.x-4.0", kGpt2Spec}, {"mellum", kGpt2Spec}, {"modern-bert", kGpt2Spec},
    {"gpt2", kGpt2Spec}, {"gpt-neox", kGpt2Spec},
    {"llama3", kLlama3Spec}, {"llama-v3", kLlama3Spec}, {"llama-bpe", kLlama3Spec},
    {"falcon3", kLlama3Spec}, {"falcon-h1", kLlama3Spec}, {"pixtral", kLlama3Spec},
    {"midm-2.0", kLlama3Spec}, {"lfm2", kLlama3Spec}, {"jina-v5-nano", kLlama3Spec},
    {"dbrx", kLlama3MergesSpec}, {"smaug-bpe", kLlama3MergesSpec},
    {"qwen2", kQwen2Spec}, {"deepseek-r1-qwen", kQwen2Spec}, {"kormo", kQwen2Spec},
    {"f2llmv2", kQwen2Spec}, {"megrez", kQwen2Spec}, {"stablelm2", kQwen2Spec},
    {"hunyuan", kQwen2Spec}, {"solar-open", kQwen2Spec},
    {"starcoder", kDigitsSpec}, {"refact", kDigitsSpec}, {"command-r", kDigitsSpec},
    {"smollm", kDigitsSpec}, {"codeshell", kDigitsSpec}, {"exaone", kDigitsSpec},
    {"minerva-7b", kDigitsSpec}, {"mellum2", kDigitsSpec},
    {"deepseek-llm", {PreTokenizer::kDeepseekLlm, false, false}},
    {"deepseek-coder", {PreTokenizer::kDeepseekCoder, false, false}},
    {"falcon", {PreTokenizer::kFalcon, false, false}},
    {"gpt-4o", {PreTokenizer::kGpt4o, false, false}}, {"llama4", {PreTokenizer::kGpt4o, false, false}},
    {"kanana2", {PreTokenizer::kGpt4o, false, false}}, {"talkie", {PreTokenizer::kGpt4o, false, false}},
    {"minimax-m2", {PreTokenizer::kGpt4o, false, false}},
};

}  // namespace

bool pre_tokenizer_from_name(const std::string& name, PreTokenizerSpec* out) {
  for (const NamedSpec& e : kNames) {
    if (name == e.name) {
      *out = e.spec;
      return true;
    }
  }
  return false;
}

const std::vector<std::string>& pre_tokenizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const NamedSpec& e : kNames) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

const char* pre_tokenizer_name(PreTokenizer type) {
  switch (type) {
    case PreTokenizer::kNone: return nullptr;
    case PreTokenizer::kGpt2: return "gpt-2";
    case PreTokenizer::kLlama3: return "llama-bpe";
    case PreTokenizer::kQwen2: return "qwen2";
    case PreTokenizer::kDigitsGpt2: return "smollm";
    case PreTokenizer::kDeepseekLlm: return "deepseek-llm";
    case PreTokenizer::kDeepseekCoder: return "deepseek-coder";
    case PreTokenizer::kFalcon: return "falcon";
    case PreTokenizer::kGpt4o: return "gpt-4o";
    case PreTokenizer::kDefault: return "default";
  }
  return nullptr;
}

void pre_tokenize(PreTokenizer type, std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>* pieces) {
  if (text.empty()) return;
  if (type == PreTokenizer::kNone) {
    pieces->emplace_back(0, static_cast<uint32_t>(text.size()));
    return;
  }
  std::vector<uint32_t> offsets;
  const std::vector<uint32_t> cps = utf8_to_codepoints(text, &offsets);
  const uint32_t* c = cps.data();
  std::vector<Range> r{{0, static_cast<uint32_t>(cps.size())}};
  switch (type) {
    case PreTokenizer::kNone:
      break;
    case PreTokenizer::kGpt2:
      split_pass(c, match_gpt2, &r);
      break;
    case PreTokenizer::kLlama3:
      split_pass(c, match_llama3<3>, &r);
      break;
    case PreTokenizer::kQwen2:
      split_pass(c, match_llama3<1>, &r);
      break;
    case PreTokenizer::kDigitsGpt2:
      split_pass(c, match_number1, &r);
      split_pass(c, match_gpt2, &r);
      break;
    case PreTokenizer::kDeepseekLlm:
      split_pass(c, match_crlf, &r);
      split_pass(c, match_deepseek_llm_letters, &r);
      split_pass(c, match_deepseek_llm_punct, &r);
      split_pass(c, match_ws_at_end, &r);
      split_pass(c, match_deepseek_cjk, &r);
      split_pass(c, match_numbers, &r);
      break;
    case PreTokenizer::kDeepseekCoder:
      split_pass(c, match_crlf, &r);
      split_pass(c, match_ws_letters, &r);
      split_pass(c, match_ws_punct, &r);
      split_pass(c, match_deepseek_cjk, &r);
      split_pass(c, match_number1, &r);
      break;
    case PreTokenizer::kFalcon:
      split_pass(c, match_falcon_punct, &r);
      split_pass(c, match_gpt2, &r);
      split_pass(c, match_three_digits, &r);
      break;
    case PreTokenizer::kGpt4o:
      split_pass(c, match_o200k, &r);
      break;
    case PreTokenizer::kDefault:
      split_pass(c, match_default_punct, &r);
      split_pass(c, match_gpt2, &r);
      split_pass(c, match_numbers, &r);
      split_pass(c, match_three_digits, &r);
      break;
  }
  for (const Range& x : r) pieces->emplace_back(offsets[x.first], offsets[x.second]);
}

}  // namespace lilims::tok
