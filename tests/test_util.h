// Helpers shared by the tests: where data lives, seeded randomness.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lilims::test {

// ../shared/data (override: LILIMS_SHARED_DATA_DIR in the environment).
inline std::string shared_data(const std::string& rel) {
  const char* env = std::getenv("LILIMS_SHARED_DATA_DIR");
  return std::string(env ? env : LILIMS_SHARED_DATA_DIR) + "/" + rel;
}

// A file in the source tree (goldens under tests/data).
inline std::string source_path(const std::string& rel) {
  return std::string(LILIMS_SOURCE_DIR) + "/" + rel;
}

// The default model, SmolLM2-135M-Instruct Q4_1, as scripts/fetch_model.sh
// caches it: $LILIMS_MODEL, else $LILIMS_MODEL_DIR/<file>, else
// ~/.cache/lilims/models/<file>.
inline std::string smollm2_path() {
  if (const char* m = std::getenv("LILIMS_MODEL")) return m;
  const std::string file = "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* d = std::getenv("LILIMS_MODEL_DIR")) return std::string(d) + "/" + file;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/lilims/models/" + file;
}

// A path under the test temp directory that no other test process uses:
// ctest runs every test as a process of its own, two at a time, and two
// tests writing one fixed name let one truncate a file the other has mapped
// (SIGBUS). Tests within one process run one after another. Whatever is left
// at such a path is removed when the process exits.
inline std::string temp_path(const std::string& name) {
  struct Created {
    std::vector<std::string> paths;
    ~Created() {
      for (const std::string& p : paths) std::remove(p.c_str());
    }
  };
  static Created created;
  const std::string path = ::testing::TempDir() + "lilims_" + std::to_string(getpid()) + "_" + name;
  created.paths.push_back(path);
  return path;
}

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace lilims::test

// Data that comes from outside the repo: skipped with a message saying where
// it comes from, or a failure when LILIMS_REQUIRE_DATA=1 (as CI sets it).
#define LILIMS_REQUIRE_FILE(path, where_from)                                          \
  do {                                                                                 \
    if (!::lilims::test::file_exists(path)) {                                          \
      if (std::getenv("LILIMS_REQUIRE_DATA")) {                                        \
        FAIL() << "missing " << (path) << " (" << (where_from) << ")";                 \
      } else {                                                                         \
        GTEST_SKIP() << "missing " << (path) << " (" << (where_from) << ")";           \
      }                                                                                \
    }                                                                                  \
  } while (0)
