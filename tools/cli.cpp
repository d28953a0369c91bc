#include "tools/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace lilims::cli {

static std::vector<Command>& table() {
  static std::vector<Command> t;
  return t;
}

bool register_command(const Command& cmd) {
  table().push_back(cmd);
  return true;
}

const std::vector<Command>& commands() { return table(); }

int fail(const char* name, const std::string& message) {
  std::fprintf(stderr, "lilims %s: %s\n", name, message.c_str());
  return 1;
}

namespace {

// Digits only, accumulated with an overflow check; false on anything else.
bool parse_digits(const char* text, uint64_t* out) {
  if (!*text) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, uint64_t(*p - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return true;
}

}  // namespace

int64_t parse_int(const char* flag, const char* text, int64_t lo, int64_t hi) {
  const bool negative = text[0] == '-';
  uint64_t mag = 0;
  const bool digits = parse_digits(text + (negative ? 1 : 0), &mag);
  // |INT64_MIN| = 2^63 is the largest magnitude any range here can hold.
  const bool fits = digits && mag <= (negative ? (uint64_t(1) << 63) : uint64_t(INT64_MAX));
  const int64_t v = !fits ? 0 : negative ? int64_t(0 - mag) : int64_t(mag);
  if (!fits || v < lo || v > hi) {
    throw std::invalid_argument(std::string(flag) + " expects an integer from " +
                                std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
                                text + "'");
  }
  return v;
}

uint64_t parse_u64(const char* flag, const char* text) {
  uint64_t v = 0;
  if (!parse_digits(text, &v)) {
    throw std::invalid_argument(std::string(flag) + " expects an integer from 0 to " +
                                std::to_string(UINT64_MAX) + ", got '" + text + "'");
  }
  return v;
}

double parse_float(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (!text[0] || *end || errno) {
    throw std::invalid_argument(std::string(flag) + " expects a number, got '" + text + "'");
  }
  return v;
}

}  // namespace lilims::cli
