#include "runtime/stop_strings.h"

#include <algorithm>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace lilims::runtime {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] stop string " + std::to_string(i) + " is empty");
    }
    if (!tok::utf8_is_valid(stops_[i])) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] stop string " + std::to_string(i) + " is not valid UTF-8");
    }
  }
}

std::string StopStrings::push(const std::string& text) {
  if (matched_) return {};
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    matched_ = true;
    return out;
  }
  // No stop string occurs in held_, so only a tail shorter than the longest
  // one can still grow into a match.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(held_.size(), s.size() - 1); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace lilims::runtime
