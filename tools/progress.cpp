#include "tools/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lilims::tools {

ProgressLine::ProgressLine(const char* what, bool enabled, double interval_s)
    : what_(what),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      interval_s_(interval_s),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void ProgressLine::update(uint64_t done, uint64_t total, const std::string& note) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = done >= total;
  if (!tty_ && printed_ && !last &&
      std::chrono::duration<double>(now - last_).count() < interval_s_) {
    return;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  char line[256];
  if (done > 0 && !last) {
    const double eta = elapsed / (double)done * (double)(total - done);
    std::snprintf(line, sizeof line, "%s: [%llu/%llu] %3d%% %.1fs, ETA %.0fs %s", what_.c_str(),
                  (unsigned long long)done, (unsigned long long)total, pct, elapsed, eta,
                  note.c_str());
  } else {
    std::snprintf(line, sizeof line, "%s: [%llu/%llu] %3d%% %.1fs %s", what_.c_str(),
                  (unsigned long long)done, (unsigned long long)total, pct, elapsed, note.c_str());
  }
  if (tty_) {
    std::fprintf(stderr, "\r%-79.79s", line);
    live_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
  printed_ = true;
  last_ = now;
}

void ProgressLine::finish() {
  if (!live_) return;
  std::fprintf(stderr, "\r%-79s\r", "");
  std::fflush(stderr);
  live_ = false;
}

}  // namespace lilims::tools
