// lilims chat: an interactive multi-turn chat in the terminal.  Each turn
// re-renders the conversation with the chat template and reuses the KV cache
// for the part the session already holds.
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "base/error.h"
#include "runtime/engine.h"
#include "tokenizer/chat.h"
#include "tools/cli.h"
#include "tools/common.h"

namespace {

using namespace lilims;

void usage() {
  std::fprintf(stdout,
               "usage: lilims chat [-m MODEL.gguf] [--system TEXT] [options]\n"
               "  reads one user message per line from stdin; an empty line or EOF ends.\n"
               "  -n N (max tokens per answer, default 512), --template NAME, --temp T,\n"
               "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N, -s/--seed S,\n"
               "  -t THREADS, -c/--ctx-size CTX, --ctx-beyond-train, --kv-type f16|q8_0|f32,\n"
               "  --exec fast|ref|oracle, --no-mmap,\n"
               "  --chunk-layers K, --kv-commit sync|async\n"
               "  --parse-special-in-prompt  special-token text in messages becomes special tokens\n"
               "                             (by default it is plain text: only the template's\n"
               "                             markers are special)\n");
}

int chat_main(int argc, char** argv) {
  tools::CommonArgs common;
  std::string system_prompt, template_name;
  runtime::GenerateOptions gen;
  gen.max_tokens = 512;
  gen.sampling.temperature = 0.7f;
  bool special_in_messages = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (common.parse(a, next) || tools::parse_sampling(a, next, gen.sampling)) continue;
      if (a == "--system") {
        system_prompt = next();
      } else if (a == "--template") {
        template_name = next();
      } else if (a == "--parse-special-in-prompt") {
        special_in_messages = true;
      } else if (a == "-n" || a == "--n-predict") {
        gen.max_tokens = (int32_t)cli::parse_int("-n", next(), -1, INT32_MAX);
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
  } catch (const std::invalid_argument& e) {
    cli::fail("chat", std::string(e.what()) + " (see lilims chat --help)");
    return 2;
  }
  try {
    auto model = tools::open_model(common);
    const std::string tmpl = template_name.empty() ? model->chat_template() : template_name;
    if (tmpl.empty()) {
      return cli::fail("chat", "the model has no chat template lilims knows; use --template NAME");
    }
    runtime::Session session(*model, common.session_options());
    std::vector<tok::ChatMessage> history;
    if (!system_prompt.empty()) history.push_back({"system", system_prompt});
    const bool tty = isatty(0);
    gen.on_token = [](int32_t, const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return false;
    };
    std::string line;
    while (true) {
      if (tty) std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line) || line.empty()) break;
      history.push_back({"user", line});
      const auto ids =
          tok::encode_chat(model->tokenizer(), tmpl, history, true, true, special_in_messages);
      if (ids.size() >= (size_t)session.n_ctx()) {
        return cli::fail("chat", "the conversation no longer fits the context of " +
                                     std::to_string(session.n_ctx()) + " tokens");
      }
      const runtime::GenerateResult r = session.generate_reusing_prefix(ids, gen);
      std::fputc('\n', stdout);
      std::fflush(stdout);
      history.push_back({"assistant", r.text});
      if (r.stop == runtime::StopReason::context_full) {
        std::fprintf(stderr, "lilims chat: the context is full\n");
        break;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("chat", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(chat, "chat", "interactive multi-turn chat", chat_main);
