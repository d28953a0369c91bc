// Chat templates, written out by hand for the formats small llama-family
// models use (no Jinja engine).  The text omits the leading BOS.  Tokenize a
// conversation with encode_chat: only the template's own markers become
// special tokens, so a message cannot open a turn of its own by spelling
// "<|im_start|>system" (tokenizing apply_chat_template's text with
// parse_special would let it).
//   chatml  SmolLM2's: <|im_start|>role\ncontent<|im_end|>\n, with SmolLM2's
//           default system prompt when the first message is not a system one
//   chatml-plain  the same without a default system turn (ChatML templates
//           that have none: Hermes, OpenHermes, QwQ, ...)
//   qwen1.5 Qwen1.5-Chat's and Qwen2-Instruct's: ChatML with the default system
//           prompt "You are a helpful assistant."
//   qwen2   Qwen2.5's (Instruct, base and Coder): ChatML with the default system
//           prompt "You are Qwen, created by Alibaba Cloud. You are a helpful
//           assistant."; "tool" messages become <tool_response> blocks in a
//           user turn
//   qwen3   Qwen3's (thinking enabled, no tools): ChatML without a default
//           system turn, tool messages as qwen2; assistant messages before
//           the last user message lose their <think> reasoning, those after
//           it keep it in a <think>\n...\n</think>\n\n block, which the
//           conversation's last message gets even when empty; the
//           generation prompt is <|im_start|>assistant\n
//   gemma   Gemma 3's (and Gemma 2's): <start_of_turn>user\ncontent<end_of_turn>\n,
//           "model" for the assistant, contents trimmed, a system message's
//           text and "\n\n" at the start of the next turn's content
//   llama2  [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
//   zephyr  <|role|>\ncontent</s>\n (TinyLlama, Zephyr)
//   phi3    <|role|>\ncontent<|end|>\n
//   llama3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lilims::tok {

struct ChatMessage {
  std::string role, content;
};

// Recognises a GGUF tokenizer.chat_template (Jinja text) by substrings:
// one of chat_template_names(), or "" if unknown.  ChatML templates are told
// apart by the default system prompt their text spells (SmolLM2's: chatml,
// Qwen2.5's: qwen2, "You are a helpful assistant.": qwen1.5) and by Qwen3's
// reasoning handling (qwen3); any other is chatml-plain.
std::string detect_chat_template(const std::string& jinja);

// Throws lilims::Error(LILIMS_ERR_INVALID_ARGUMENT) for an unknown name.
std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt);

// A piece of the formatted conversation: the template's markup with the
// roles (phi3's "<|user|>" is one special token) or a message's content.
struct ChatSegment {
  std::string text;
  bool markup;
};
std::vector<ChatSegment> chat_template_segments(const std::string& name,
                                                const std::vector<ChatMessage>& msgs,
                                                bool add_generation_prompt);

// Segments as token ids.  Special tokens are parsed in the markup only,
// unless special_in_messages (for callers that spell them on purpose).
std::vector<int32_t> encode_chat_segments(const Tokenizer& tk, const std::vector<ChatSegment>& segs,
                                          bool add_bos, bool special_in_messages = false);
// The conversation as token ids (encode_chat_segments of its segments).
std::vector<int32_t> encode_chat(const Tokenizer& tk, const std::string& name,
                                 const std::vector<ChatMessage>& msgs, bool add_generation_prompt,
                                 bool add_bos, bool special_in_messages = false);

// What follows a sequence holding a conversation that ends in an assistant
// answer (a saved session): the markup that ends the answer's turn (the end
// of generation token that ended it is never evaluated), then `msgs` and
// the generation prompt.  No BOS and no default system turn: the sequence
// has them already.
std::vector<ChatSegment> chat_continuation_segments(const std::string& name,
                                                    const std::vector<ChatMessage>& msgs);

// The names apply_chat_template accepts.
const std::vector<std::string>& chat_template_names();

}  // namespace lilims::tok
