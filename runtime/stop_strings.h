// Stop strings over streamed text: a stop string may span several tokens, so
// text that could still be the start of one is held back until the next
// text proves it is not (or the stream ends), and the matched stop string
// is never released.
#pragma once

#include <string>
#include <vector>

namespace lilims::runtime {

class StopStrings {
 public:
  // Throws LILIMS_ERR_INVALID_ARGUMENT for an empty string or one that is
  // not valid UTF-8 (the text held back starts where a stop string could,
  // so valid stop strings keep what is released whole characters).
  explicit StopStrings(std::vector<std::string> stops);

  // Appends text (whole UTF-8 characters) and returns what may be released:
  // everything except the longest tail that is a proper prefix of a stop
  // string.  When a stop string completes, returns the text before it,
  // drops the rest and sets matched().  The first stop string to complete
  // wins; of several completed by the same push, the one that starts first.
  std::string push(const std::string& text);
  // The text still held back (the stream ended without a match).
  std::string flush();
  bool matched() const { return matched_; }
  bool empty() const { return stops_.empty(); }
  size_t held() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

}  // namespace lilims::runtime
