// Progress of a long command (quantize, convert, perplexity) on stderr, as
// llama.cpp's tools show it: on a terminal one line rewritten in place; when
// stderr is a file or a pipe (CI logs, `2> log`), a line at the first
// update, then at most one every few seconds, and one at the end, so a log
// shows the work moving without a line per tensor.  `--no-progress` turns
// it off.  stdout is never touched.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace lilims::tools {

class ProgressLine {
 public:
  // what: the command ("quantize"); enabled: false for --no-progress.
  ProgressLine(const char* what, bool enabled, double interval_s = 5.0);
  ~ProgressLine() { finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // done of total units are finished; note says what (a tensor's name, a figure).
  void update(uint64_t done, uint64_t total, const std::string& note);
  // Clears a live line (so the next message starts on a clean line).
  void finish();

 private:
  std::string what_;
  bool enabled_, tty_, live_ = false, printed_ = false;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace lilims::tools
