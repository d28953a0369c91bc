// lilims run: one prompt in, generated text out (stdout carries only the
// text, streamed; diagnostics and statistics go to stderr).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/constrain/tool_format.h"
#include "runtime/constrain/tools.h"
#include "runtime/vision.h"
#include "tokenizer/chat.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/image_io.h"

namespace {

using namespace lilims;

// Where --image goes in the prompt.
constexpr const char* kImageMarkers[] = {"<__media__>", "<image>"};

// A piece of the prompt: the chat template's markup or the caller's text.
using Piece = tok::ChatSegment;

// The pieces split at the first image marker in the caller's text: those
// before it and those after it.
void split_at_image(const std::vector<Piece>& pieces, std::vector<Piece>* before,
                    std::vector<Piece>* after) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].markup) continue;
    for (const char* marker : kImageMarkers) {
      const size_t at = pieces[i].text.find(marker);
      if (at == std::string::npos) continue;
      before->assign(pieces.begin(), pieces.begin() + (ptrdiff_t)i);
      before->push_back({pieces[i].text.substr(0, at), false});
      after->push_back({pieces[i].text.substr(at + std::strlen(marker)), false});
      after->insert(after->end(), pieces.begin() + (ptrdiff_t)i + 1, pieces.end());
      return;
    }
  }
  throw std::logic_error("no image marker in the prompt");
}

// On stdout for --help (exit 0); a usage error names the flag on stderr instead.
void usage() {
  std::fputs(
      "usage: lilims run [-m MODEL.gguf] -p PROMPT [options]\n"
      "  -m, --model PATH       GGUF model (default: the cached SmolLM2-135M-Instruct)\n"
      "  -p, --prompt TEXT      the prompt (a user turn in the model's chat template)\n"
      "  -f, --file PATH        read the prompt from a file\n"
      "  -n, --n-predict N      tokens to generate (default 128; -1: until the end or a full context)\n"
      "  --system TEXT          system turn of the chat template\n"
      "  --raw                  use the prompt as it is, without the chat template\n"
      "  --parse-special-in-prompt  special-token text in the prompt and --system becomes\n"
      "                         special tokens (by default it is plain text: only the\n"
      "                         template's markers are; --raw prompts always parse it)\n"
      "  --json                 the output is one strictly valid JSON object\n"
      "  --json-schema FILE|JSON  the output is one JSON value valid for this JSON Schema\n"
      "                         (a file, or the schema itself when it starts with '{')\n"
      "  --tools FILE           tools the model may call (one tool object or an array;\n"
      "                         repeatable): they are described in the system turn and\n"
      "                         the output is {\"name\": ..., \"arguments\": {...}}\n"
"  --tool-format NAME     how the tools are described and the call is written: generic,\n"
      "                         hermes (Qwen2.5), smollm2, llama3, phi4 (default: the one a\n"
      "                         --lora adapter was trained with, else the model's chat\n"
      "                         template's; README, \"Tool formats\")\n"
      "  --tool-choice C        required (default): the answer is a call, opened with the\n"
      "                         format's mark; auto: text, or a call after the mark\n"
      "  --trigger TEXT         with --json, --json-schema or --tools: free text until the\n"
      "                         output spells TEXT, then the value (a tool call after a\n"
      "                         preamble, or no call at all); stdout carries the whole text\n"
      "  --trigger-close TEXT   text appended after the value (e.g. \"</tool_call>\")\n"
      "  --template NAME        chat template: chatml, chatml-plain, qwen1.5, qwen2, qwen3,\n"
      "                         llama2, zephyr, phi3, llama3, gemma\n"
      "  --load-state FILE      start from a session state saved by --save-state (same\n"
      "                         model and --kv-type); with a chat template the prompt is\n"
      "                         the next user turn of the loaded conversation\n"
      "  --save-state FILE      after generating, save the session (prompt and output\n"
      "                         tokens, their KV cache rows) to FILE; with -n 0 the\n"
      "                         prompt is evaluated and saved, nothing generated\n"
      "  --temp T               temperature (default 0: greedy)\n"
      "  --top-k K              keep the K most likely tokens (default 40; 0: off)\n"
      "  --top-p P              nucleus sampling (default 0.95; 1: off)\n"
      "  --min-p P              drop tokens below P times the top one (default 0.05; 0: off)\n"
      "  --repeat-penalty R     penalise recent tokens (default 1: off)\n"
      "  --repeat-last-n N      how many recent tokens the penalty sees (default 64; -1: all)\n"
      "  --image FILE           a PNG or JPEG the model sees (LLaVA-style; needs --mmproj): its\n"
      "                         rows go where the prompt says <__media__> or <image>, else\n"
      "                         before the prompt's text\n"
      "  --mmproj FILE          the multimodal projector GGUF made for the model\n",
      stdout);
  std::fputs(tools::kGenerationHelp, stdout);
  std::fputs(tools::kLoraHelp, stdout);
  std::fputs(
      "  -s, --seed S           sampling seed, 0 to 2^64-1 (default 0)\n"
      "  -t, --threads N        threads, 1 to 256 (default: all cores)\n"
      "  -c, --ctx-size N       context length, 1 to 2^20 (default: the model's trained\n"
      "                         context if its KV cache fits the memory available, else\n"
      "                         the largest power of two that fits; refused when even\n"
      "                         256 does not, or when a given N does not fit)\n"
      "  --ctx-beyond-train     allow -c above the context the model was trained for\n"
      "  --kv-type TYPE         KV cache type: f16 (default), q8_0, f32\n"
      "  --exec MODE            fast (default), ref (scalar kernels), oracle (fp32)\n"
      "  --chunk-layers K       transformer blocks per execution chunk (default 3)\n"
      "  --kv-commit MODE       new K/V rows reach the cache sync or async (default sync)\n"
      "  --no-mmap              read the model into memory instead of mapping it\n"
      "  --manifest FILE        refuse the model unless it matches FILE (`lilims manifest`)\n"
      "  --manifest-file-hash   with --manifest: also check the whole file's hash\n"
      "  --memory-budget BYTES  memory the model and the session may take together (suffix\n"
      "                         K, M, G: KiB, MiB, GiB); refused, with the bytes needed,\n"
      "                         when they do not fit; without -c, the longest context that fits\n"
      "  -q, --quiet            no statistics on stderr\n"
      "  -v, --verbose          also time to first token, reused prompt tokens, context\n"
      "                         shifts, the process's peak resident memory and the weight\n"
      "                         bytes read in place from the file vs copied (and why) on stderr\n",
      stdout);
}

int run_main(int argc, char** argv) {
  tools::CommonArgs common;
  std::string prompt, prompt_file, system_prompt, template_name, schema_arg, tool_format_arg;
  bool tool_choice_auto = false;
  std::string load_state, save_state, image_file, mmproj_file;
  std::vector<std::string> tool_files;
  bool have_prompt = false, raw = false, quiet = false, verbose = false, special_in_prompt = false;
  runtime::GenerateOptions gen;
  gen.max_tokens = 128;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (common.parse(a, next)) continue;
      if (a == "-p" || a == "--prompt") {
        prompt = next();
        have_prompt = true;
      } else if (a == "-f" || a == "--file") {
        prompt_file = next();
        have_prompt = true;
      } else if (a == "-n" || a == "--n-predict") {
        gen.max_tokens = (int32_t)cli::parse_int("-n", next(), -1, INT32_MAX);
      } else if (a == "--system") {
        system_prompt = next();
      } else if (a == "--raw") {
        raw = true;
      } else if (a == "--parse-special-in-prompt") {
        special_in_prompt = true;
      } else if (a == "--template") {
        template_name = next();
      } else if (a == "--json") {
        gen.json = true;
      } else if (a == "--json-schema") {
        schema_arg = next();
      } else if (a == "--tools") {
        tool_files.push_back(next());
      } else if (a == "--tool-format") {
        tool_format_arg = next();
        try {
          runtime::tool_format_from_name(tool_format_arg);
        } catch (const std::exception& e) {
          throw std::invalid_argument(std::string("--tool-format: ") + e.what());
        }
      } else if (a == "--tool-choice") {
        const std::string c = next();
        if (c != "auto" && c != "required") throw std::invalid_argument("--tool-choice expects auto or required");
        tool_choice_auto = c == "auto";
      } else if (a == "--trigger") {
        gen.constraint_trigger = next();
      } else if (a == "--trigger-close") {
        gen.constraint_close = next();
      } else if (a == "--image") {
        image_file = next();
      } else if (a == "--mmproj") {
        mmproj_file = next();
      } else if (a == "--load-state") {
        load_state = next();
      } else if (a == "--save-state") {
        save_state = next();
      } else if (a == "-q" || a == "--quiet") {
        quiet = true;
      } else if (a == "-v" || a == "--verbose") {
        verbose = true;
      } else if (tools::parse_sampling(a, next, gen.sampling) ||
                 tools::parse_generation(a, next, gen)) {
        continue;
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
    if (!have_prompt) throw std::invalid_argument("a prompt is needed (-p TEXT or -f FILE)");
    if (image_file.empty() != mmproj_file.empty()) {
      throw std::invalid_argument(image_file.empty() ? "--mmproj needs --image"
                                                     : "--image needs --mmproj (the projector GGUF)");
    }
    if (gen.json + !schema_arg.empty() + !tool_files.empty() > 1) {
      throw std::invalid_argument("--json, --json-schema and --tools exclude each other");
    }
    if ((!gen.constraint_trigger.empty() || !gen.constraint_close.empty()) &&
        !(gen.json || !schema_arg.empty() || !tool_files.empty())) {
      throw std::invalid_argument("--trigger and --trigger-close need --json, --json-schema or --tools");
    }
    if (!gen.stop.empty() && (gen.json || !schema_arg.empty() || !tool_files.empty())) {
      throw std::invalid_argument("--stop does not apply to --json, --json-schema or --tools "
                                  "(their output ends when the value closes)");
    }
  } catch (const std::invalid_argument& e) {
    cli::fail("run", std::string(e.what()) + " (see lilims run --help)");
    return 2;
  }

  try {
    if (!prompt_file.empty()) prompt = tools::read_text_file(prompt_file);
    std::string tools_text;
    if (!schema_arg.empty()) {
      const size_t first = schema_arg.find_first_not_of(" \t\r\n");
      gen.json_schema = first != std::string::npos && schema_arg[first] == '{'
                            ? schema_arg
                            : tools::read_text_file(schema_arg);
    }
    std::vector<runtime::Tool> all_tools;
    std::string call_opening;  // a required call's opening mark, as the prompt's end
    for (const std::string& f : tool_files) {
      for (runtime::Tool& t : runtime::parse_tools(tools::read_text_file(f))) all_tools.push_back(std::move(t));
    }
    if (!all_tools.empty()) runtime::tools_schema(all_tools);  // the list's checks, before the model loads
    auto model = tools::open_model(common);
    const tools::LoadedAdapters adapters = tools::open_adapters(common, *model);
    if (!all_tools.empty()) {
      // The format the model's template writes calls in, unless --tool-format
      // says otherwise; generic keeps --trigger as the mark it describes,
      // the others bring their own marks (which --trigger / --trigger-close
      // replace).
      // An adapter trained for one format (lilims.tool_format) brings it.
      runtime::ToolFormat fmt = model->tool_format();
      for (const auto& a : adapters.owned) {
        if (a->has_tool_format()) fmt = a->tool_format();
      }
      if (!tool_format_arg.empty()) fmt = runtime::tool_format_from_name(tool_format_arg);
      // auto: the answer is text, a call, or both (a lazy constraint from the
      // format's opening mark); required: the answer opens with the mark and
      // is a call.
      const bool text_allowed = tool_choice_auto || !gen.constraint_trigger.empty();
      const runtime::ToolPrompt tp =
          fmt == runtime::ToolFormat::generic && !gen.constraint_trigger.empty()
              ? runtime::ToolPrompt{runtime::tools_system_prompt(all_tools, gen.constraint_trigger),
                                    gen.constraint_trigger, "", runtime::tools_schema(all_tools)}
              : runtime::tool_prompt(fmt, all_tools, text_allowed);
      gen.json_schema = tp.schema;
      tools_text = tp.system;
      if (gen.constraint_close.empty()) gen.constraint_close = tp.close;
      if (text_allowed) {
        gen.constraint_trigger = tp.trigger;
      } else {
        call_opening = tp.trigger;
      }
    }
    const bool constrained = gen.json || !gen.json_schema.empty();
    if (!call_opening.empty() && (!image_file.empty() || !load_state.empty())) call_opening.clear();
    runtime::Session session(*model, common.session_options(*model));
    session.set_adapters(adapters.uses);
    if (!load_state.empty()) {
      session.load_state_file(load_state);
      if (!quiet) {
        std::fprintf(stderr, "[lilims] state: %d tokens loaded from %s\n", session.n_past(),
                     load_state.c_str());
      }
    }
    // After a loaded state the prompt continues the sequence: no second BOS.
    const bool bos = session.n_past() == 0;
    const auto save = [&] {
      if (save_state.empty()) return;
      session.save_state_file(save_state);
      if (!quiet) {
        std::fprintf(stderr, "[lilims] state: %d tokens saved to %s\n", session.n_past(),
                     save_state.c_str());
      }
    };
    const std::string tmpl = template_name.empty() ? model->chat_template() : template_name;
    // The image, decoded and its projector loaded before anything runs.
    std::unique_ptr<runtime::Projector> projector;
    tools::DecodedImage image;
    if (!image_file.empty()) {
      projector = runtime::Projector::open(mmproj_file);
      image = tools::decode_image_file(image_file);
      bool marked = false;
      for (const char* marker : kImageMarkers) marked = marked || prompt.find(marker) != std::string::npos;
      if (!marked) prompt = std::string(kImageMarkers[0]) + prompt;
    }
    std::vector<Piece> segs;
    // call_opening (a format's mark before a required call) ends the prompt.
    if (!raw && !tmpl.empty()) {
      std::vector<tok::ChatMessage> msgs;
      // The tools join the system turn (after the caller's own system text).
      if (!tools_text.empty()) {
        system_prompt = system_prompt.empty() ? tools_text : system_prompt + "\n\n" + tools_text;
      }
      if (!bos) {
        // A loaded conversation goes on with a user turn; its system turn is in it.
        if (!system_prompt.empty()) {
          std::fprintf(stderr, "lilims run: after --load-state the system turn (--system, --tools) "
                               "is the loaded one; the new one is ignored\n");
        }
        segs = tok::chat_continuation_segments(tmpl, {{"user", prompt}});
      } else {
        if (!system_prompt.empty()) msgs.push_back({"system", system_prompt});
        msgs.push_back({"user", prompt});
        segs = tok::chat_template_segments(tmpl, msgs, true);
      }
    } else {
      if (!raw && !system_prompt.empty()) {
        std::fprintf(stderr, "lilims run: the model has no chat template; --system is ignored\n");
      }
      // A raw prompt is the caller's own; tools, if any, go before it.
      if (!tools_text.empty()) prompt = tools_text + "\n\n" + prompt;
      segs.push_back({prompt, false});
    }
    // Special-token text becomes special tokens in the template's markup,
    // and in the caller's text when asked or when the prompt is raw.
    const bool special_in_text = special_in_prompt || raw || tmpl.empty();
    std::vector<int32_t> ids;
    if (projector) {
      // Text before the image, the image's rows, then the text after it as the prompt.
      std::vector<Piece> before, after;
      split_at_image(segs, &before, &after);
      session.eval(tok::encode_chat_segments(model->tokenizer(), before, bos, special_in_text));
      const int32_t n = projector->eval_image(
          session, {image.rgb.data(), image.width, image.height, 3 * (size_t)image.width});
      if (!quiet) {
        std::fprintf(stderr, "[lilims] image: %dx%d, %d positions, encoded in %.1f ms\n", image.width,
                     image.height, n, projector->last_encode_seconds() * 1e3);
      }
      ids = tok::encode_chat_segments(model->tokenizer(), after, false, special_in_text);
    } else {
      if (!call_opening.empty()) segs.push_back({call_opening, true});
      ids = tok::encode_chat_segments(model->tokenizer(), segs, bos, special_in_text);
    }
    // A JSON value is printed only once it is complete, so a failure never
    // leaves half a value on stdout.
    if (!constrained) {
      gen.on_token = [](int32_t, const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return false;
      };
    }
    if (gen.max_tokens == 0) {
      if (constrained) return cli::fail("run", "-n 0 leaves no room for a JSON value");
      if (!save_state.empty() || projector) {
        session.eval(ids);
        save();
      }
      return 0;  // nothing to generate
    }
    if (gen.max_tokens < 0) gen.max_tokens = 0;  // the runtime's "no limit"
    const runtime::GenerateResult r = session.generate_tokens(ids, gen);
    if (constrained) {
      // With a trigger, an answer without it is free text, complete as it is.
      const bool value_started = gen.constraint_trigger.empty() || r.constraint_triggered;
      if (value_started && r.stop != runtime::StopReason::end_of_generation) {
        return cli::fail("run", r.value_offset < 0
                                    ? "the output spelled the trigger with too few tokens left "
                                      "for a value (-n or -c)"
                                    : "the JSON output did not close");
      }
      std::fwrite(call_opening.data(), 1, call_opening.size(), stdout);
      std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    }
    std::fputc('\n', stdout);
    if (r.stop == runtime::StopReason::context_full) {
      std::fprintf(stderr, "lilims run: stopped: the context of %d tokens is full (-c to enlarge, "
                   "or --context-shift)\n",
                   session.n_ctx());
    }
    save();
    if (verbose) {
      tools::print_verbose_stats(stderr, r, session);
    } else if (!quiet) {
      tools::print_stats(stderr, r, session);
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("run", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(run, "run", "generate text from a prompt", run_main);
