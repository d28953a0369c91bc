// Lazy constraints: a JSON / schema constraint that starts only once the
// output has spelled a trigger (a tool-call marker such as "<tool_call>"),
// so an answer can be free text, a tool call, or text then a tool call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lilims::runtime {

// Finds the first occurrence of a trigger in a stream of token bytes.
class TriggerMatch {
 public:
  explicit TriggerMatch(std::string trigger) : trigger_(std::move(trigger)) {}
  // Whether the trigger ends within `bytes` (the stream so far has not
  // completed it); *rest = the bytes of `bytes` after its end.
  bool ends_in(std::string_view bytes, std::string* rest) const;
  // Feeds one token's bytes: ends_in, then remembers the tail the next
  // token's bytes may complete.  Once found, nothing more is looked for.
  bool feed(std::string_view bytes, std::string* rest);
  bool found() const { return found_; }

 private:
  std::string trigger_;
  std::string tail_;  // the stream's last trigger_.size() - 1 bytes
  bool found_ = false;
};

// The bytes a token adds to the stream a trigger is looked for in: its
// piece, or for a control token (empty piece) its vocabulary text, so that a
// special token such as "<tool_call>" can be the trigger.
std::string_view trigger_bytes(const tok::Tokenizer& tk, const std::vector<std::string>& pieces,
                               int32_t id);

}  // namespace lilims::runtime
