// Chat templates, written out by hand for the formats small llama-family
// models use (no Jinja engine).  The text omits the leading BOS: tokenize
// it with add_bos = true and parse_special = true.
//   chatml  SmolLM2's: <|im_start|>role\ncontent<|im_end|>\n, with SmolLM2's
//           default system prompt when the first message is not a system one
//   llama2  [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
//   zephyr  <|role|>\ncontent</s>\n (TinyLlama, Zephyr)
//   phi3    <|role|>\ncontent<|end|>\n
//   llama3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
#pragma once

#include <string>
#include <vector>

namespace lilims::tok {

struct ChatMessage {
  std::string role, content;
};

// Recognises a GGUF tokenizer.chat_template (Jinja text) by substrings:
// "chatml", "llama2", "zephyr", "phi3", "llama3", or "" if unknown.
std::string detect_chat_template(const std::string& jinja);

// Throws lilims::Error(LILIMS_ERR_INVALID_ARGUMENT) for an unknown name.
std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);

// The names apply_chat_template accepts.
const std::vector<std::string>& chat_template_names();

}  // namespace lilims::tok
