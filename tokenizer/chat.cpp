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

std::string chatml(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0 && msgs[0].role != "system") {
      out += "<|im_start|>system\n";
      out += kSmolLM2DefaultSystem;
      out += "<|im_end|>\n";
    }
    out += "<|im_start|>" + msgs[i].role + "\n" + msgs[i].content + "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Meta's Llama 2 chat format: the system prompt goes inside the first user
// turn; every user turn after the first starts a new <s>.  Contents are
// stripped as the reference template does.  There is no generation prompt:
// the model answers after [/INST].
std::string llama2(const std::vector<ChatMessage>& msgs, bool) {
  std::string out;
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
    std::string content = msgs[i].content;
    if (i == start && have_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (msgs[i].role == "user") {
      if (!first_turn) out += "<s>";
      out += "[INST] " + trim(content) + " [/INST]";
      first_turn = false;
    } else if (msgs[i].role == "assistant") {
      out += " " + trim(content) + " </s>";
      first_turn = false;
    }
  }
  if (have_system && start == msgs.size()) {
    out += "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n";  // a system prompt alone
  }
  return out;
}

std::string zephyr(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const ChatMessage& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
  if (gen) out += "<|assistant|>\n";
  return out;
}

std::string phi3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const ChatMessage& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  if (gen) out += "<|assistant|>\n";
  return out;
}

std::string llama3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
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

std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& msgs,
                                bool gen) {
  if (name == "chatml") return chatml(msgs, gen);
  if (name == "llama2") return llama2(msgs, gen);
  if (name == "zephyr") return zephyr(msgs, gen);
  if (name == "phi3") return phi3(msgs, gen);
  if (name == "llama3") return llama3(msgs, gen);
  throw Error(LILIMS_ERR_INVALID_ARGUMENT,
              "[tokenizer] unknown chat template '" + name +
                  "' (known: chatml, llama2, zephyr, phi3, llama3)");
}

}  // namespace lilims::tok
