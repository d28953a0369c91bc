// lilims chat: an interactive multi-turn chat in the terminal.  Each turn
// re-renders the conversation with the chat template and reuses the KV cache
// for the part the session already holds.  With --context-shift a full
// context drops old tokens (the system turn stays), and a conversation whose
// rendering no longer fits drops its oldest turns.  With --mmproj, a line
// `/image PATH` attaches a picture to the next message.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/vision.h"
#include "tokenizer/chat.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/image_io.h"

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
      "  --mmproj FILE             the multimodal projector GGUF made for the model: then a\n"
      "                             line `/image PATH` (PNG or JPEG) attaches the picture to\n"
      "                             the next message, before its text\n"
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

// Where an attached image goes in its message's text.  A typed line never
// holds a newline, so the marker cannot come from the user.
constexpr const char kImageMark[] = "<__image__\n>";

// A picture in the conversation: its pixels, and its rows once evaluated.
struct ChatImage {
  tools::DecodedImage pixels;
  int32_t n_rows = 0;  // 0 until the projector ran it
};

// The rendered conversation cut at its images: token ids, or one image.
struct Part {
  std::vector<int32_t> ids;
  int image = -1;  // index into the chat's images, or -1 for ids
};

// Renders the conversation and cuts it where kImageMark stands; the marks
// appear in the order of `images_in_order` (the images of the kept turns).
std::vector<Part> render_parts(const tok::Tokenizer& tk, const std::string& tmpl,
                               const std::vector<tok::ChatMessage>& history,
                               const std::vector<int>& images_in_order, bool special) {
  std::vector<Part> parts;
  std::vector<tok::ChatSegment> run;
  bool first = true;
  const auto flush = [&] {
    parts.push_back({tok::encode_chat_segments(tk, run, first, special), -1});
    run.clear();
    first = false;
  };
  size_t next_image = 0;
  for (tok::ChatSegment seg : tok::chat_template_segments(tmpl, history, true)) {
    size_t at;
    while (!seg.markup && (at = seg.text.find(kImageMark)) != std::string::npos) {
      if (next_image == images_in_order.size()) {
        throw std::logic_error("the rendered conversation holds more image marks than images");
      }
      run.push_back({seg.text.substr(0, at), false});
      flush();
      parts.push_back({{}, images_in_order[next_image++]});
      seg.text.erase(0, at + sizeof kImageMark - 1);
    }
    run.push_back(seg);
  }
  flush();
  if (next_image != images_in_order.size()) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "the chat template dropped an image's place in the conversation");
  }
  return parts;
}

// Brings the session to hold every part but the last (the text the answer
// follows): parts it holds already are kept (an image only when the same
// image sits at the same position), the rest evaluated.  Returns the whole
// conversation as the session's ids (image rows as kEmbeddingRow), for
// generate_reusing_prefix to reuse all but the last part.
std::vector<int32_t> prepare_parts(runtime::Session& session, runtime::Projector& projector,
                                   std::vector<ChatImage>& images, std::vector<std::pair<int32_t, int>>& held,
                                   const std::vector<Part>& parts) {
  int32_t pos = 0;
  bool same = true;
  std::vector<int32_t> all;
  // Forgets the session's rows from n on, and the images held there.
  const auto truncate_to = [&](int32_t n) {
    session.truncate(std::min(session.n_past(), n));
    held.erase(std::remove_if(held.begin(), held.end(), [&](const auto& h) { return h.first >= n; }), held.end());
  };
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const Part& p = parts[i];
    if (p.image < 0) {
      size_t k = 0;
      const std::vector<int32_t>& toks = session.tokens();
      while (same && k < p.ids.size() && (size_t)pos + k < toks.size() && toks[(size_t)pos + k] == p.ids[k]) ++k;
      if (k < p.ids.size()) {
        if (same) truncate_to(pos + (int32_t)k);
        same = false;
        session.eval(std::vector<int32_t>(p.ids.begin() + (ptrdiff_t)k, p.ids.end()));
      }
      all.insert(all.end(), p.ids.begin(), p.ids.end());
      pos += (int32_t)p.ids.size();
      continue;
    }
    ChatImage& img = images[(size_t)p.image];
    const bool kept = same && pos + img.n_rows <= session.n_past() &&
                      std::find(held.begin(), held.end(), std::make_pair(pos, p.image)) != held.end();
    if (!kept) {
      if (same) truncate_to(pos);
      same = false;
      img.n_rows = projector.eval_image(
          session, {img.pixels.rgb.data(), img.pixels.width, img.pixels.height, 3 * (size_t)img.pixels.width});
      held.emplace_back(pos, p.image);
    }
    all.insert(all.end(), (size_t)img.n_rows, runtime::Session::kEmbeddingRow);
    pos += img.n_rows;
  }
  if (parts.back().ids.empty()) throw std::logic_error("the conversation ends in an image");
  all.insert(all.end(), parts.back().ids.begin(), parts.back().ids.end());
  return all;
}

int chat_main(int argc, char** argv) {
  tools::CommonArgs common;
  std::string system_prompt, template_name, mmproj_file;
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
      } else if (a == "--mmproj") {
        mmproj_file = next();
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
    std::unique_ptr<runtime::Projector> projector;
    if (!mmproj_file.empty()) projector = runtime::Projector::open(mmproj_file);
    std::vector<tok::ChatMessage> history;
    std::vector<int> image_of;  // per message of history: its image, or -1
    std::vector<ChatImage> images;
    std::vector<std::pair<int32_t, int>> held;  // (first position, image) the session holds
    int pending_image = -1;
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
      if (line.rfind("/image", 0) == 0 && (line.size() == 6 || line[6] == ' ')) {
        // A bad picture or a missing projector is said and the chat goes on.
        const size_t at = line.find_first_not_of(' ', 6);
        if (!projector) {
          std::fprintf(stderr, "lilims chat: /image needs --mmproj (the projector GGUF made for the model)\n");
        } else if (at == std::string::npos) {
          std::fprintf(stderr, "lilims chat: /image needs a path: /image PATH\n");
        } else {
          try {
            ChatImage img;
            img.pixels = tools::decode_image_file(line.substr(at));
            if (pending_image >= 0) {
              std::fprintf(stderr, "lilims chat: the previous /image is replaced\n");
            } else {
              pending_image = (int)images.size();
              images.emplace_back();
            }
            images[(size_t)pending_image] = std::move(img);
            std::fprintf(stderr, "[lilims] image %dx%d: it goes with your next message\n",
                         images[(size_t)pending_image].pixels.width, images[(size_t)pending_image].pixels.height);
          } catch (const Error& e) {
            std::fprintf(stderr, "lilims chat: %s\n", e.what());
          }
        }
        continue;
      }
      history.push_back({"user", pending_image >= 0 ? kImageMark + line : line});
      image_of.resize(history.size() - 1, -1);
      image_of.push_back(pending_image);
      pending_image = -1;
      const auto images_in_order = [&] {
        std::vector<int> order;
        for (int i : image_of) {
          if (i >= 0) order.push_back(i);
        }
        return order;
      };
      // Positions the conversation takes (an image not yet encoded counts
      // the projector's rows).
      const auto render = [&] {
        std::vector<Part> parts = render_parts(model->tokenizer(), tmpl, history, images_in_order(),
                                               special_in_messages);
        size_t n = 0;
        for (const Part& p : parts) n += p.image < 0 ? p.ids.size() : (size_t)projector->clip().hp.n_patches();
        return std::make_pair(std::move(parts), n);
      };
      auto [parts, n_positions] = render();
      // The oldest turns after the system message go first, a whole
      // exchange at a time, so the rendering still alternates as the template expects.
      const size_t first = system_prompt.empty() ? 0 : 1;
      while (shift && n_positions > (size_t)session.n_ctx() / 2 && history.size() - first > 2) {
        history.erase(history.begin() + (ptrdiff_t)first, history.begin() + (ptrdiff_t)first + 2);
        for (size_t k = first; k < first + 2; ++k) {
          // A dropped turn's picture is never evaluated again: its pixels go
          // (the slot stays, so the other turns' indices hold).
          if (image_of[k] >= 0) images[(size_t)image_of[k]] = ChatImage{};
        }
        image_of.erase(image_of.begin() + (ptrdiff_t)first, image_of.begin() + (ptrdiff_t)first + 2);
        std::tie(parts, n_positions) = render();
      }
      if (n_positions >= (size_t)session.n_ctx()) {
        return cli::fail("chat", "the conversation no longer fits the context of " +
                                     std::to_string(session.n_ctx()) + " tokens");
      }
      std::vector<int32_t> ids = parts.size() == 1
                                     ? std::move(parts[0].ids)
                                     : prepare_parts(session, *projector, images, held, parts);
      runtime::GenerateOptions turn = gen;
      if (shift) {
        // A shift within the answer evaluates the rows it moves again from
        // their ids, which a picture's rows do not have: this turn keeps the
        // conversation up to its last picture (the chat's own dropping of
        // whole turns, above, is what lets a picture go).
        const auto last = std::find(ids.rbegin(), ids.rend(), runtime::Session::kEmbeddingRow);
        if (last != ids.rend()) turn.n_keep = std::max(turn.n_keep, (int32_t)(ids.rend() - last));
      }
      const runtime::GenerateResult r = session.generate_reusing_prefix(ids, turn);
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
