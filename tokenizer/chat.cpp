#include "tokenizer/chat.h"

#include "base/error.h"

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

void chatml(const std::vector<ChatMessage>& msgs, bool gen, Builder& out) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role != "system") {
      out.markup("<|im_start|>system\n").markup(kSmolLM2DefaultSystem).markup("<|im_end|>\n");
    }
    out.markup("<|im_start|>" + msgs[i].role + "\n").text(msgs[i].content);
    out.markup("<|im_end|>\n");
  }
  if (gen) out.markup("<|im_start|>assistant\n");
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
  static const std::vector<std::string> kNames = {"chatml", "llama2", "zephyr", "phi3", "llama3"};
  return kNames;
}

std::string detect_chat_template(const std::string& t) {
  if (has(t, "<|im_start|>")) return "chatml";
  if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return "llama3";
  if (has(t, "<|assistant|>") && has(t, "<|end|>")) return "phi3";
  if (has(t, "<|user|>") && has(t, "<|assistant|>")) return "zephyr";
  if (has(t, "[INST]")) return "llama2";
  return "";
}

std::vector<ChatSegment> chat_template_segments(const std::string& name,
                                                const std::vector<ChatMessage>& msgs, bool gen) {
  Builder b;
  if (name == "chatml") chatml(msgs, gen, b);
  else if (name == "llama2") llama2(msgs, gen, b);
  else if (name == "zephyr") zephyr(msgs, gen, b);
  else if (name == "phi3") phi3(msgs, gen, b);
  else if (name == "llama3") llama3(msgs, gen, b);
  else {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[tokenizer] unknown chat template '" + name +
                    "' (known: chatml, llama2, zephyr, phi3, llama3)");
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
