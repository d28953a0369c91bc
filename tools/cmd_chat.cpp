// lilims chat: an interactive multi-turn chat in the terminal.  Each turn
// re-renders the conversation with the chat template and reuses the KV cache
// for the part the session already holds.  With --context-shift a full
// context drops old tokens (the system turn stays), and a conversation whose
// rendering no longer fits drops its oldest turns.
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
  std::fputs(
      "usage: lilims chat [-m MODEL.gguf] [--system TEXT] [options]\n"
      "  reads one user message per line from stdin; an empty line or EOF ends.\n"
      "  -n N (max tokens per answer, default 512), --template NAME, --temp T,\n"
      "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N, -s/--seed S,\n"
      "  -t THREADS, -c/--ctx-size CTX, --ctx-beyond-train, --kv-type f16|q8_0|f32,\n"
      "  --exec fast|ref|oracle, --no-mmap, --memory-budget BYTES (model and session;\n"
      "  suffix K, M, G),\n"
      "  --chunk-layers K, --kv-commit sync|async\n"
      "  --parse-special-in-prompt  special-token text in messages becomes special tokens\n"
      "                             (by default it is plain text: only the template's\n"
      "                             markers are special)\n"
      "  -v, --verbose             after each answer, on stderr: the prompt tokens reused\n"
      "                             from the KV cache, time to first token, speeds\n",
      stdout);
  std::fputs(tools::kGenerationHelp, stdout);
  std::fputs(tools::kLoraHelp, stdout);
  std::fputs("  (chat: --keep defaults to the tokens before the first user message, the system\n"
             "  turn; with --context-shift a conversation that no longer fits the context drops\n"
             "  its oldest turns until it takes at most half of it)\n",
             stdout);
}

// Tokens before the first user message's text: the template's system turn
// (its default one when there is none), which a context shift keeps.
size_t system_turn_tokens(const tok::Tokenizer& tk, const std::string& tmpl,
                          const std::vector<tok::ChatMessage>& system, bool special) {
  std::vector<tok::ChatMessage> a = system, b = system;
  a.push_back({"user", "a"});
  b.push_back({"user", "b"});
  const auto x = tok::encode_chat(tk, tmpl, a, false, true, special);
  const auto y = tok::encode_chat(tk, tmpl, b, false, true, special);
  size_t n = 0;
  while (n < x.size() && n < y.size() && x[n] == y[n]) ++n;
  return n;
}

int chat_main(int argc, char** argv) {
  tools::CommonArgs common;
  std::string system_prompt, template_name;
  runtime::GenerateOptions gen;
  gen.max_tokens = 512;
  gen.sampling.temperature = 0.7f;
  bool special_in_messages = false, verbose = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (common.parse(a, next) || tools::parse_sampling(a, next, gen.sampling) ||
          tools::parse_generation(a, next, gen)) {
        continue;
      }
      if (a == "--system") {
        system_prompt = next();
      } else if (a == "--template") {
        template_name = next();
      } else if (a == "--parse-special-in-prompt") {
        special_in_messages = true;
      } else if (a == "-v" || a == "--verbose") {
        verbose = true;
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
    runtime::Session session(*model, common.session_options(*model));
    const tools::LoadedAdapters adapters = tools::open_adapters(common, *model);
    session.set_adapters(adapters.uses);
    std::vector<tok::ChatMessage> history;
    if (!system_prompt.empty()) history.push_back({"system", system_prompt});
    const bool shift = gen.context_policy == runtime::ContextPolicy::shift;
    if (shift && gen.n_keep < 0) {
      gen.n_keep = (int32_t)system_turn_tokens(model->tokenizer(), tmpl, history,
                                               special_in_messages);
    }
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
      const auto render = [&] {
        return tok::encode_chat(model->tokenizer(), tmpl, history, true, true, special_in_messages);
      };
      auto ids = render();
      // The oldest turns after the system message go first, a whole
      // exchange at a time, so the rendering still alternates as the template expects.
      const size_t first = system_prompt.empty() ? 0 : 1;
      while (shift && ids.size() > (size_t)session.n_ctx() / 2 && history.size() - first > 2) {
        history.erase(history.begin() + (ptrdiff_t)first, history.begin() + (ptrdiff_t)first + 2);
        ids = render();
      }
      if (ids.size() >= (size_t)session.n_ctx()) {
        return cli::fail("chat", "the conversation no longer fits the context of " +
                                     std::to_string(session.n_ctx()) + " tokens");
      }
      const runtime::GenerateResult r = session.generate_reusing_prefix(ids, gen);
      std::fputc('\n', stdout);
      std::fflush(stdout);
      if (verbose) {
        tools::print_verbose_stats(stderr, r, session);
      }
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
