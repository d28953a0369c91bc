#include "runtime/constrain/lazy_constraint.h"

namespace lilims::runtime {

bool TriggerMatch::ends_in(std::string_view bytes, std::string* rest) const {
  if (found_ || trigger_.empty()) return false;
  std::string s = tail_;
  s.append(bytes);
  // tail_ is shorter than the trigger, so a match takes at least one new byte.
  const size_t at = s.find(trigger_);
  if (at == std::string::npos) return false;
  if (rest) rest->assign(s, at + trigger_.size(), std::string::npos);
  return true;
}

bool TriggerMatch::feed(std::string_view bytes, std::string* rest) {
  if (ends_in(bytes, rest)) {
    found_ = true;
    tail_.clear();
    return true;
  }
  if (found_ || trigger_.empty()) return false;
  tail_.append(bytes);
  const size_t keep = trigger_.size() - 1;
  if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  return false;
}

std::string_view trigger_bytes(const tok::Tokenizer& tk, const std::vector<std::string>& pieces,
                               int32_t id) {
  const std::string& p = pieces[(size_t)id];
  if (!p.empty() || !tk.is_control(id)) return p;
  return tk.token_text(id);
}

}  // namespace lilims::runtime
