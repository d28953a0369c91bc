// Chat templates of Gemma 3, Qwen2 / Qwen2.5 and Qwen3: recognition from
// the real Jinja texts (tests/data/tokenizer_families/templates, see its
// SOURCE.md) and the exact strings those texts render, written out by hand
// from them (the BOS a template writes first is left to the tokenizer).
#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/chat.h"
#include "test_util.h"

namespace lilims::tok {
namespace {

std::string tmpl(const std::string& file) {
  const std::string path = test::source_path("tests/data/tokenizer_families/templates/" + file);
  const std::string text = test::read_file(path);
  EXPECT_FALSE(text.empty()) << path;
  return text;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Open the camera"},
};

std::string render(const std::string& name, const std::vector<ChatMessage>& msgs, bool gen) {
  return apply_chat_template(name, msgs, gen);
}

TEST(ChatFamilies, DetectsTheRealTemplates) {
  EXPECT_EQ(detect_chat_template(tmpl("gemma-3-it.jinja")), "gemma");
  EXPECT_EQ(detect_chat_template(tmpl("gemma-2-it.jinja")), "gemma");
  EXPECT_EQ(detect_chat_template(tmpl("qwen2.5-instruct.jinja")), "qwen2");
  EXPECT_EQ(detect_chat_template(tmpl("qwen2-instruct.jinja")), "qwen1.5");
  EXPECT_EQ(detect_chat_template(tmpl("qwen3.jinja")), "qwen3");
  // QwQ has no default system turn and none of Qwen3's reasoning rules.
  EXPECT_EQ(detect_chat_template(tmpl("qwq-32b.jinja")), "chatml-plain");
  // ChatML without a default system turn (tests/data/hf's, Hermes-style).
  EXPECT_EQ(detect_chat_template(test::read_file(test::source_path("tests/data/hf/llama/chat_template.jinja"))),
            "chatml-plain");
  // SmolLM2-Instruct's (its default system prompt in the text) stays chatml.
  EXPECT_EQ(detect_chat_template(
                "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|im_start|>assistant\\n' }}{% endif %}"),
            "chatml");
}

TEST(ChatFamilies, EveryNameRenders) {
  for (const std::string& name : chat_template_names()) {
    EXPECT_FALSE(render(name, kConversation, true).empty()) << name;
  }
  try {
    render("gemma3", kConversation, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'gemma3' (known: chatml, chatml-plain"), std::string::npos) << e.what();
  }
}

// gemma-3-it.jinja: the system text and "\n\n" open the first turn's content
// (untrimmed; the turn's own content is trimmed), "model" for the assistant.
TEST(ChatFamilies, Gemma) {
  EXPECT_EQ(render("gemma", kConversation, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nOpen the camera<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {{"user", "Hi"}}, true), "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {{"system", " Sys \n"}, {"user", "  Hi \n"}, {"assistant", "\n Yes. "}}, false),
            "<start_of_turn>user\n Sys \n\n\nHi<end_of_turn>\n<start_of_turn>model\nYes.<end_of_turn>\n");
  // A system message alone renders nothing (the template's loop is empty).
  EXPECT_EQ(render("gemma", {{"system", "S"}}, true), "<start_of_turn>model\n");
  EXPECT_EQ(render("gemma", {}, false), "");
}

// qwen2.5-instruct.jinja, without tools.
TEST(ChatFamilies, Qwen25) {
  EXPECT_EQ(render("qwen2", kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nOpen the camera<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render("qwen2", {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Contents are not trimmed; tool answers join one user turn.
  EXPECT_EQ(render("qwen2",
                   {{"user", " What time is it? "},
                    {"assistant", "<tool_call>\n{\"name\": \"clock\", \"arguments\": {}}\n</tool_call>"},
                    {"tool", "12:00"},
                    {"tool", "UTC"}},
                   true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n What time is it? <|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"clock\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>\n<tool_response>\nUTC\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n");
  // A system message further on is a turn of its own.
  EXPECT_EQ(render("qwen2", {{"user", "Hi"}, {"system", "S"}}, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nS<|im_end|>\n");
}

// qwen2-instruct.jinja (Qwen1.5-Chat's too).
TEST(ChatFamilies, Qwen15) {
  EXPECT_EQ(render("qwen1.5", {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("qwen1.5", kConversation, false), render("chatml", kConversation, false));
}

// qwen3.jinja, without tools, enable_thinking not set.
TEST(ChatFamilies, Qwen3) {
  EXPECT_EQ(render("qwen3", kConversation, true), render("qwen2", kConversation, true));
  EXPECT_EQ(render("qwen3", {{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Before the last user message an answer loses its reasoning.
  EXPECT_EQ(render("qwen3",
                   {{"user", "Hi"},
                    {"assistant", "<think>\nThe user greets me.\n</think>\n\nHello!"},
                    {"user", "Open the camera"}},
                   true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nOpen the camera<|im_end|>\n<|im_start|>assistant\n");
  // After it, the last answer keeps it, and gets an empty block without one.
  EXPECT_EQ(render("qwen3", {{"user", "Hi"}, {"assistant", "<think>\n\nGreet back.\n\n</think>\n\n\nHello!"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet back.\n</think>\n\nHello!"
            "<|im_end|>\n");
  EXPECT_EQ(render("qwen3", {{"user", "Hi"}, {"assistant", "Hello!"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
  // A call, its answer (a user message spelled as one does not count as the
  // query), then the next step: the reasoning of the answers since the query stays.
  EXPECT_EQ(render("qwen3",
                   {{"user", "Time?"},
                    {"assistant", "<think>\nAsk the clock.\n</think>\n\n<tool_call>\n{\"name\": \"clock\"}\n</tool_call>"},
                    {"user", "<tool_response>\n12:00\n</tool_response>"},
                    {"assistant", "It is noon."},
                    {"tool", "ok"}},
                   true),
            "<|im_start|>user\nTime?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nAsk the clock.\n</think>\n\n<tool_call>\n{\"name\": \"clock\"}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\nIt is noon.<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

// ChatML with no default system turn (tests/data/hf/llama/chat_template.jinja).
TEST(ChatFamilies, ChatMLPlain) {
  EXPECT_EQ(render("chatml-plain", {{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render("chatml-plain", kConversation, true), render("chatml", kConversation, true));
}

// A saved conversation goes on after the stand-in answer: the markup that
// ends the answer's turn, the new messages, the generation prompt.
TEST(ChatFamilies, Continuation) {
  auto joined = [](const std::vector<ChatSegment>& segs) {
    std::string s;
    for (const ChatSegment& seg : segs) s += seg.text;
    return s;
  };
  EXPECT_EQ(joined(chat_continuation_segments("gemma", {{"user", "And Italy?"}})),
            "<end_of_turn>\n<start_of_turn>user\nAnd Italy?<end_of_turn>\n<start_of_turn>model\n");
  for (const char* name : {"qwen2", "qwen3", "qwen1.5", "chatml-plain"}) {
    EXPECT_EQ(joined(chat_continuation_segments(name, {{"user", "And Italy?"}})),
              "<|im_end|>\n<|im_start|>user\nAnd Italy?<|im_end|>\n<|im_start|>assistant\n")
        << name;
  }
  EXPECT_EQ(joined(chat_continuation_segments("qwen2", {{"tool", "12:00"}})),
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  // Every message's text is a segment of its own, not markup.
  for (const std::string& name : chat_template_names()) {
    for (const ChatSegment& s : chat_template_segments(name, kConversation, true)) {
      const bool marker = s.text.find("<start_of_turn>") != std::string::npos ||
                          s.text.find("<|im_start|>") != std::string::npos;
      if (s.text.find("camera") != std::string::npos) {
        EXPECT_FALSE(s.markup) << name;
      }
      if (marker) {
        EXPECT_TRUE(s.markup) << name;
      }
    }
  }
}

}  // namespace
}  // namespace lilims::tok
