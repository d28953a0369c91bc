// lilims: run, chat, tokenize, inspect, convert, quantize, perplexity, bench.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "lilims/lilims.h"
#include "tools/cli.h"

static int usage(FILE* out) {
  std::fprintf(out, "lilims %s\nusage: lilims COMMAND [ARGS...]\n\ncommands:\n",
               lilims_version_string());
  auto cmds = lilims::cli::commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  for (const auto& c : cmds) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`lilims COMMAND --help` for a command's options.\n");
  return out == stdout ? 0 : 2;
}

// The library's warnings (a tensor re-quantized at load, a context lowered)
// are diagnostics: stderr, never stdout.
static void log_to_stderr(void*, lilims_log_level, const char* message) {
  std::fprintf(stderr, "lilims: %s\n", message);
}

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  lilims_set_log_callback(log_to_stderr, nullptr, LILIMS_LOG_WARN);
  const char* name = argv[1];
  if (!std::strcmp(name, "help") || !std::strcmp(name, "--help") || !std::strcmp(name, "-h")) {
    return usage(stdout);
  }
  if (!std::strcmp(name, "--version")) {
    std::printf("lilims %s\n", lilims_version_string());
    return 0;
  }
  for (const auto& c : lilims::cli::commands()) {
    if (std::strcmp(c.name, name)) continue;
    // Commands catch their own errors; this is the last line that keeps an
    // exception from reaching std::terminate (an abort and a core dump).
    try {
      return c.main(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      return lilims::cli::fail(name, e.what());
    } catch (...) {
      return lilims::cli::fail(name, "unexpected error");
    }
  }
  std::fprintf(stderr, "lilims: unknown command '%s' (try `lilims help`)\n", name);
  return 2;
}
