#include "tokenizer/chat.h"

#include <cstring>

#include "base/error.h"
#include "base/strings.h"

namespace lilims::tok {

namespace {

bool has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// SmolLM2-Instruct's template adds this system turn when the conversation
// does not start with one.
constexpr const char* kSmolLM2DefaultSystem =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
// Qwen2.5-Instruct's template's (Qwen2.5 and Qwen2.5-Coder, base and instruct).
constexpr const char* kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
// Qwen1.5-Chat's and Qwen2-Instruct's.
constexpr const char* kQwen15DefaultSystem = "You are a helpful assistant.";

// Python's str.strip / lstrip / rstrip of the given characters.
std::string lstrip(const std::string& s, const char* chars) {
  const size_t b = s.find_first_not_of(chars);
  return b == std::string::npos ? "" : s.substr(b);
}
std::string rstrip(const std::string& s, const char* chars) {
  const size_t e = s.find_last_not_of(chars);
  return e == std::string::npos ? "" : s.substr(0, e + 1);
}

class Builder {
 public:
  Builder& markup(const std::string& s) { return add(s, true); }
  Builder& text(const std::string& s) { return add(s, false); }
  // Strips whitespace from both ends of the segments added since `from`, as
  // the reference templates strip a message.
  void trim_since(size_t from) {
    const char* ws = " \t\n\r\f\v";
    for (size_t i = from; i < segs.size(); ++i) {
      const size_t b = segs[i].text.find_first_not_of(ws);
      segs[i].text.erase(0, b == std::string::npos ? segs[i].text.size() : b);
      if (!segs[i].text.empty()) break;
    }
    for (size_t i = segs.size(); i > from; --i) {
      std::string& t = segs[i - 1].text;
      const size_t e = t.find_last_not_of(ws);
      t.erase(e == std::string::npos ? 0 : e + 1);
      if (!t.empty()) break;
    }
  }
  std::vector<ChatSegment> segs;

 private:
  Builder& add(const std::string& s, bool m) {
    if (!s.empty()) segs.push_back({s, m});
    return *this;
  }
};

// <|im_start|>role\ncontent<|im_end|>\n per message, with a default system
// turn (markup: no message wrote it) when the first message is not a
// system one and the template has one.
void chatml(const std::vector<ChatMessage>& msgs, bool gen, const char* default_system, Builder& out) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role != "system" && default_system) {
      out.markup("<|im_start|>system\n").markup(default_system).markup("<|im_end|>\n");
    }
    out.markup("<|im_start|>" + msgs[i].role + "\n").text(msgs[i].content);
    out.markup("<|im_end|>\n");
  }
  if (gen) out.markup("<|im_start|>assistant\n");
}

// Qwen's templates (Qwen2.5-Instruct's and Qwen3's, without tools): ChatML,
// but a run of "tool" messages is one user turn of
// <tool_response>\n...\n</tool_response> blocks.  Qwen3 (think = true) has
// no default system turn and rewrites assistant messages: before the last
// user query a message keeps only what follows its last </think>
// (newlines stripped at the front); after it, the last message and any with
// reasoning get the reasoning in a <think> block of their own.
void qwen(const std::vector<ChatMessage>& msgs, bool gen, const char* default_system, bool think,
          Builder& out) {
  if (!msgs.empty() && msgs[0].role == "system") {
    out.markup("<|im_start|>system\n").text(msgs[0].content).markup("<|im_end|>\n");
  } else if (default_system) {
    out.markup("<|im_start|>system\n").markup(default_system).markup("<|im_end|>\n");
  }
  // The last user message that is not a tool's answer spelled by hand.
  size_t last_query = msgs.empty() ? 0 : msgs.size() - 1;
  for (size_t i = msgs.size(); i-- > 0;) {
    const std::string& c = msgs[i].content;
    if (msgs[i].role == "user" && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      out.markup("<|im_start|>" + m.role + "\n").text(m.content).markup("<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      const size_t close = m.content.find("</think>");
      if (think && close != std::string::npos) {
        content = lstrip(m.content.substr(m.content.rfind("</think>") + 8), "\n");
        std::string before = rstrip(m.content.substr(0, close), "\n");
        const size_t open = before.rfind("<think>");
        if (open != std::string::npos) before = before.substr(open + 7);
        reasoning = lstrip(before, "\n");
      }
      if (think && i > last_query && (last || !reasoning.empty())) {
        out.markup("<|im_start|>assistant\n<think>\n").text(lstrip(rstrip(reasoning, "\n"), "\n"));
        out.markup("\n</think>\n\n").text(lstrip(content, "\n"));
      } else {
        out.markup("<|im_start|>assistant\n").text(content);
      }
      out.markup("<|im_end|>\n");
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out.markup("<|im_start|>user");
      out.markup("\n<tool_response>\n").text(m.content).markup("\n</tool_response>");
      if (last || msgs[i + 1].role != "tool") out.markup("<|im_end|>\n");
    }
  }
  if (gen) out.markup("<|im_start|>assistant\n");
}

// Gemma 3's instruct template: no system role (a system message's text and
// "\n\n" open the next turn's content), "model" for the assistant, contents
// trimmed; the BOS it writes first is the tokenizer's to add.  A system
// message before any other is its template's; one further on is put before
// the next turn in the same way (its template refuses it).
void gemma(const std::vector<ChatMessage>& msgs, bool gen, Builder& out) {
  std::string prefix;
  bool have_prefix = false;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system") {
      prefix += m.content + "\n\n";
      have_prefix = true;
      continue;
    }
    out.markup("<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n");
    if (have_prefix) {
      out.text(prefix.substr(0, prefix.size() - 2)).markup("\n\n");
      prefix.clear();
      have_prefix = false;
    }
    out.text(trim(m.content)).markup("<end_of_turn>\n");
  }
  if (gen) out.markup("<start_of_turn>model\n");
}

// Meta's Llama 2 chat format: the system prompt goes inside the first user
// turn; every user turn after the first starts a new <s>.  Contents are
// stripped as the reference template does.  There is no generation prompt:
// the model answers after [/INST].
void llama2(const std::vector<ChatMessage>& msgs, bool, Builder& out) {
  size_t start = 0;
  std::string system;
  bool have_system = false;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    have_system = true;
    start = 1;
  }
  bool first_turn = true;
  for (size_t i = start; i < msgs.size(); ++i) {
    const bool with_system = i == start && have_system;
    if (msgs[i].role == "user") {
      if (!first_turn) out.markup("<s>");
      out.markup("[INST] ");
      const size_t from = out.segs.size();
      if (with_system) out.markup("<<SYS>>\n").text(system).markup("\n<</SYS>>\n\n");
      out.text(msgs[i].content);
      out.trim_since(from);
      out.markup(" [/INST]");
      first_turn = false;
    } else if (msgs[i].role == "assistant") {
      out.markup(" ");
      const size_t from = out.segs.size();
      if (with_system) out.markup("<<SYS>>\n").text(system).markup("\n<</SYS>>\n\n");
      out.text(msgs[i].content);
      out.trim_since(from);
      out.markup(" </s>");
      first_turn = false;
    }
  }
  if (have_system && start == msgs.size()) {
    out.markup("[INST] <<SYS>>\n").text(system).markup("\n<</SYS>>\n\n");  // a system prompt alone
  }
}

void zephyr(const std::vector<ChatMessage>& msgs, bool gen, Builder& out) {
  for (const ChatMessage& m : msgs) {
    out.markup("<|" + m.role + "|>\n").text(m.content).markup("</s>\n");
  }
  if (gen) out.markup("<|assistant|>\n");
}

void phi3(const std::vector<ChatMessage>& msgs, bool gen, Builder& out) {
  for (const ChatMessage& m : msgs) {
    out.markup("<|" + m.role + "|>\n").text(m.content).markup("<|end|>\n");
  }
  if (gen) out.markup("<|assistant|>\n");
}

void llama3(const std::vector<ChatMessage>& msgs, bool gen, Builder& out) {
  for (const ChatMessage& m : msgs) {
    out.markup("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    out.text(trim(m.content)).markup("<|eot_id|>");
  }
  if (gen) out.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> kNames = {"chatml", "chatml-plain", "qwen1.5", "qwen2", "qwen3",
                                                  "llama2", "zephyr", "phi3", "llama3", "gemma"};
  return kNames;
}

std::string detect_chat_template(const std::string& t) {
  if (has(t, "<|im_start|>")) {
    // ChatML templates differ in their default system turn (its text is in
    // the template) and in what Qwen3's does with reasoning.
    if (has(t, kSmolLM2DefaultSystem)) return "chatml";
    if (has(t, "You are Qwen, created by Alibaba Cloud")) return "qwen2";
    if (has(t, "You are a helpful assistant.<|im_end|>")) return "qwen1.5";
    if (has(t, "last_query_index") && has(t, "</think>")) return "qwen3";
    return "chatml-plain";
  }
  if (has(t, "<start_of_turn>")) return "gemma";
  if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return "llama3";
  if (has(t, "<|assistant|>") && has(t, "<|end|>")) return "phi3";
  if (has(t, "<|user|>") && has(t, "<|assistant|>")) return "zephyr";
  if (has(t, "[INST]")) return "llama2";
  return "";
}

std::vector<ChatSegment> chat_template_segments(const std::string& name,
                                                const std::vector<ChatMessage>& msgs, bool gen) {
  Builder b;
  if (name == "chatml") chatml(msgs, gen, kSmolLM2DefaultSystem, b);
  else if (name == "chatml-plain") chatml(msgs, gen, nullptr, b);
  else if (name == "qwen1.5") chatml(msgs, gen, kQwen15DefaultSystem, b);
  else if (name == "qwen2") qwen(msgs, gen, kQwen25DefaultSystem, false, b);
  else if (name == "qwen3") qwen(msgs, gen, nullptr, true, b);
  else if (name == "gemma") gemma(msgs, gen, b);
  else if (name == "llama2") llama2(msgs, gen, b);
  else if (name == "zephyr") zephyr(msgs, gen, b);
  else if (name == "phi3") phi3(msgs, gen, b);
  else if (name == "llama3") llama3(msgs, gen, b);
  else {
    std::string known;
    for (const std::string& n : chat_template_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[tokenizer] unknown chat template '" + name + "' (known: " + known + ")");
  }
  return std::move(b.segs);
}

std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& msgs,
                                bool gen) {
  std::string out;
  for (const ChatSegment& s : chat_template_segments(name, msgs, gen)) out += s.text;
  return out;
}

std::vector<int32_t> encode_chat_segments(const Tokenizer& tk, const std::vector<ChatSegment>& segs,
                                          bool add_bos, bool special_in_messages) {
  std::vector<Tokenizer::Segment> parts;  // views into segs
  parts.reserve(segs.size());
  for (const ChatSegment& s : segs) parts.push_back({s.text, s.markup || special_in_messages});
  return tk.encode_segments(parts, add_bos);
}

std::vector<int32_t> encode_chat(const Tokenizer& tk, const std::string& name,
                                 const std::vector<ChatMessage>& msgs, bool gen, bool add_bos,
                                 bool special_in_messages) {
  return encode_chat_segments(tk, chat_template_segments(name, msgs, gen), add_bos,
                              special_in_messages);
}

std::vector<ChatSegment> chat_continuation_segments(const std::string& name,
                                                    const std::vector<ChatMessage>& msgs) {
  // Rendered after a stand-in exchange, the conversation's segments after
  // the stand-in answer are exactly what a longer conversation adds.
  std::vector<ChatMessage> all = {{"user", "u"}, {"assistant", "a"}};
  all.insert(all.end(), msgs.begin(), msgs.end());
  std::vector<ChatSegment> segs = chat_template_segments(name, all, true);
  size_t at = 0, texts = 0;
  while (at < segs.size() && texts < 2) {
    if (!segs[at].markup) ++texts;
    ++at;
  }
  segs.erase(segs.begin(), segs.begin() + (ptrdiff_t)at);
  return segs;
}

}  // namespace lilims::tok
