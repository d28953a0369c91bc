// Resident memory of the test process, for tests that check what an
// allocation really costs rather than what it asks for.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace lilims::test {

// Anonymous resident bytes (heap and anonymous mappings; not the model
// file's pages, which come and go with the page cache): RssAnon of
// /proc/self/status.  -1 where there is no such file (tests then skip).
inline int64_t rss_anon_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::strncmp(line, "RssAnon:", 8) == 0 && std::sscanf(line + 8, "%lld", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// A sanitizer's shadow memory is anonymous and resident too, and it is not
// given back when the program's pages are: RSS figures under one are not
// the program's.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace lilims::test

#define LILIMS_REQUIRE_RSS()                                                        \
  do {                                                                              \
    if (::lilims::test::kUnderSanitizer) {                                          \
      GTEST_SKIP() << "resident memory under a sanitizer includes its shadow";      \
    }                                                                               \
    if (::lilims::test::rss_anon_bytes() < 0) {                                     \
      GTEST_SKIP() << "no RssAnon in /proc/self/status on this system";             \
    }                                                                               \
  } while (0)
