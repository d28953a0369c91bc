#include "tools/common.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "base/error.h"
#include "base/file.h"
#include "kernels/cpu.h"
#include "runtime/speculative.h"
#include "tools/cli.h"

namespace lilims::tools {

const char* const kLoraHelp =
    "  --lora FILE            apply a LoRA adapter (llama.cpp's GGUF adapter format; `lilims\n"
    "                         convert PEFT_DIR` makes one); repeatable, or FILE,FILE\n"
    "  --lora-scaled FILE:SCALE  the same with a scale (times the adapter's alpha / rank)\n";

LoadedAdapters open_adapters(const CommonArgs& args, const runtime::Model& model) {
  LoadedAdapters out;
  for (const auto& [path, scale] : args.loras) {
    out.owned.push_back(runtime::Adapter::open(model, path));
    out.uses.push_back({out.owned.back().get(), scale});
  }
  return out;
}

std::string model_arg(const std::string& flag, const char* value) {
  if (!*value) throw std::invalid_argument(flag + " was given an empty path");
  return value;
}

bool CommonArgs::parse(const std::string& a, const std::function<const char*()>& next) {
  if (a == "-m" || a == "--model") {
    model_path = model_arg(a, next());
  } else if (a == "-t" || a == "--threads") {
    n_threads = (int32_t)cli::parse_int("-t", next(), 1, 256);
  } else if (a == "-c" || a == "--ctx" || a == "--ctx-size") {
    n_ctx = (int32_t)cli::parse_int("-c", next(), 1, kMaxCtx);
  } else if (a == "--ctx-beyond-train") {
    ctx_beyond_train = true;
  } else if (a == "--exec") {
    const std::string m = next();
    if (m == "fast") mode = models::ExecMode::fast;
    else if (m == "ref") mode = models::ExecMode::ref;
    else if (m == "oracle") mode = models::ExecMode::oracle_f32;
    else throw std::invalid_argument("--exec expects fast, ref or oracle");
  } else if (a == "--kv-type") {
    const quant::TypeTraits* t = quant::type_traits_by_name(next());
    if (!t || !t->kv) throw std::invalid_argument("--kv-type expects one of " + quant::kv_type_names());
    kv_type = t->type;
  } else if (a == "--chunk-layers") {
    chunk_layers = (int)cli::parse_int("--chunk-layers", next(), 1, 4096);
  } else if (a == "--kv-commit") {
    const std::string c = next();
    if (c == "sync") kv_commit = graph::KvCommit::sync;
    else if (c == "async") kv_commit = graph::KvCommit::async;
    else throw std::invalid_argument("--kv-commit expects sync or async");
  } else if (a == "--no-mmap") {
    use_mmap = false;
  } else if (a == "--manifest") {
    manifest_path = next();
  } else if (a == "--manifest-file-hash") {
    manifest_file_hash = true;
  } else if (a == "--memory-budget") {
    memory_budget = parse_bytes("--memory-budget", next());
    if (memory_budget == 0) throw std::invalid_argument("--memory-budget must be above 0");
  } else if (a == "--lora" || a == "--lora-scaled") {
    const std::string list = next();
    size_t start = 0;
    while (true) {
      const size_t comma = list.find(',', start);
      const std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
      if (a == "--lora") {
        if (item.empty()) throw std::invalid_argument("--lora was given an empty path");
        loras.emplace_back(item, 1.0f);
      } else {
        const size_t colon = item.rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
          throw std::invalid_argument("--lora-scaled expects FILE:SCALE, not '" + item + "'");
        }
        const std::string scale = item.substr(colon + 1);
        char* end = nullptr;
        const float v = std::strtof(scale.c_str(), &end);
        if (end == scale.c_str() || *end || !std::isfinite(v)) {
          throw std::invalid_argument("--lora-scaled: '" + scale + "' is not a number");
        }
        loras.emplace_back(item.substr(0, colon), v);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    return false;
  }
  return true;
}

runtime::SessionOptions CommonArgs::session_options(const runtime::Model& model) const {
  runtime::SessionOptions o;
  o.n_threads = n_threads;
  o.n_ctx = n_ctx;
  o.mode = mode;
  o.kv_type = kv_type;
  o.allow_ctx_beyond_train = ctx_beyond_train;
  o.chunk_layers = chunk_layers;
  o.kv_commit = kv_commit;
  if (memory_budget == 0) return o;
  // What the model holds whatever the context (its per-position embedding
  // rows are part of the session's estimate).
  const graph::ModelMemory mm = model.memory(0);
  const uint64_t taken = mm.weights_mapped + mm.weights_heap + mm.host;
  const std::string budget = "--memory-budget of " + std::to_string(memory_budget) + " bytes";
  if (taken >= memory_budget) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[session] the model takes " + std::to_string(taken) +
                                              " bytes: nothing is left of the " + budget);
  }
  o.memory_budget = memory_budget - taken;
  const uint64_t need = runtime::session_memory_estimate(model, o);
  if (need > o.memory_budget) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                "[session] the model takes " + std::to_string(taken) + " bytes and the session " +
                    std::to_string(need) + " more (" + std::to_string(taken + need) +
                    " bytes in all), over the " + budget);
  }
  return o;
}

uint64_t parse_bytes(const char* flag, const char* text) {
  std::string digits = text;
  uint64_t scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': scale = 1ull << 10; break;
      case 'M': case 'm': scale = 1ull << 20; break;
      case 'G': case 'g': scale = 1ull << 30; break;
      default: break;
    }
    if (scale > 1) digits.pop_back();
  }
  const std::string expected =
      std::string(flag) + " expects a byte count (digits, then K, M or G), got '" + text + "'";
  if (digits.empty()) throw std::invalid_argument(expected);
  uint64_t v = 0;
  try {
    v = cli::parse_u64(flag, digits.c_str());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(expected);
  }
  if (v > UINT64_MAX / scale) {
    throw std::invalid_argument(std::string(flag) + " is too large: '" + text + "'");
  }
  return v * scale;
}

std::string default_model_path() {
  const std::string file = "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* d = std::getenv("LILIMS_MODEL_DIR")) return std::string(d) + "/" + file;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/lilims/models/" + file;
}

std::unique_ptr<runtime::Model> open_model(const CommonArgs& args) {
  std::string path = args.model_path;
  if (path.empty()) {
    path = default_model_path();
    if (::access(path.c_str(), R_OK) != 0) {  // no open: the path might be a FIFO
      throw Error(LILIMS_ERR_IO, "no -m MODEL given and the default model is not at " + path +
                                     " (run scripts/fetch_model.sh)");
    }
  }
  runtime::ModelOptions o;
  o.use_mmap = args.use_mmap;
  if (args.manifest_file_hash && args.manifest_path.empty()) {
    throw std::invalid_argument("--manifest-file-hash needs --manifest FILE");
  }
  o.manifest_path = args.manifest_path;
  o.manifest_file_hash = args.manifest_file_hash;
  o.memory_budget = args.memory_budget;
  return runtime::Model::open(path, o);
}

bool parse_sampling(const std::string& a, const std::function<const char*()>& next,
                    runtime::SamplingParams& p) {
  if (a == "--temp") {
    p.temperature = (float)cli::parse_float("--temp", next());
  } else if (a == "--top-k") {
    p.top_k = (int32_t)cli::parse_int("--top-k", next(), 0, INT32_MAX);
  } else if (a == "--top-p") {
    p.top_p = (float)cli::parse_float("--top-p", next());
  } else if (a == "--min-p") {
    p.min_p = (float)cli::parse_float("--min-p", next());
  } else if (a == "--repeat-penalty") {
    p.repeat_penalty = (float)cli::parse_float("--repeat-penalty", next());
  } else if (a == "-s" || a == "--seed") {
    p.seed = cli::parse_u64("--seed", next());
  } else if (a == "--repeat-last-n") {
    p.repeat_last_n = (int32_t)cli::parse_int("--repeat-last-n", next(), -1, INT32_MAX);
  } else {
    return false;
  }
  return true;
}

const char* const kGenerationHelp =
    "  --stop STR             stop when the text contains STR (repeatable; the stop string is\n"
    "                         not printed; not with --json, --json-schema or --tools)\n"
    "  -l, --logit-bias ID(+|-)BIAS  add BIAS to token ID's logit; ID-inf bans it (repeatable)\n"
    "  --frequency-penalty F  subtract F times the count of each token generated so far\n"
    "                         (default 0: off)\n"
    "  --presence-penalty F   subtract F from each token generated so far (default 0: off)\n"
    "  --context-shift        when the context is full, drop the older half of the tokens\n"
    "                         after the kept start and go on (default: stop; with -n -1\n"
    "                         generation then runs until the model ends the text)\n"
    "  --keep N               tokens --context-shift keeps at the start (default: the system\n"
    "                         turn in chat, else the BOS token)\n"
    "  --draft N              prompt-lookup decoding: draft up to N tokens (1 to 64) from\n"
    "                         earlier text and verify them in one step; the output is\n"
    "                         the same as without (default 0: off)\n"
    "  --no-jump-forward      with --json-schema / --tools, sample every token instead of\n"
    "                         appending the bytes the schema forces in one step\n";

bool parse_generation(const std::string& a, const std::function<const char*()>& next,
                      runtime::GenerateOptions& g) {
  if (a == "--stop") {
    g.stop.emplace_back(next());
    if (g.stop.back().empty()) throw std::invalid_argument("--stop was given an empty string");
  } else if (a == "-l" || a == "--logit-bias") {
    // llama.cpp's form: the id, then the bias with its sign ("15043+1.5", "2-inf").
    const std::string v = next();
    const size_t sign = v.find_first_of("+-", 1);
    if (sign == std::string::npos || sign == 0) {
      throw std::invalid_argument(a + " expects ID+BIAS or ID-BIAS, got '" + v + "'");
    }
    const auto id = (int32_t)cli::parse_int(a.c_str(), v.substr(0, sign).c_str(), 0, INT32_MAX);
    const double bias = cli::parse_float(a.c_str(), v.substr(sign + 1).c_str());
    if (v[sign + 1] == '+' || v[sign + 1] == '-') {
      throw std::invalid_argument(a + " expects one sign between ID and BIAS, got '" + v + "'");
    }
    g.sampling.logit_bias.emplace_back(id, (float)(v[sign] == '-' ? -bias : bias));
  } else if (a == "--frequency-penalty") {
    g.sampling.frequency_penalty = (float)cli::parse_float("--frequency-penalty", next());
  } else if (a == "--presence-penalty") {
    g.sampling.presence_penalty = (float)cli::parse_float("--presence-penalty", next());
  } else if (a == "--context-shift") {
    g.context_policy = runtime::ContextPolicy::shift;
  } else if (a == "--keep") {
    g.n_keep = (int32_t)cli::parse_int("--keep", next(), 0, kMaxCtx);
  } else if (a == "--draft") {
    g.n_draft = (int32_t)cli::parse_int("--draft", next(), 0, runtime::kMaxDraft);
  } else if (a == "--no-jump-forward") {
    g.jump_forward = false;
  } else {
    return false;
  }
  return true;
}

std::string read_text_file(const std::string& path) { return read_regular_file(path, "file"); }

std::string read_scored_text(const std::string& path) {
  std::string text = read_text_file(path);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

void print_stats(FILE* out, const runtime::GenerateResult& r, const runtime::Session& s) {
  const int n = (int)r.tokens.size();
  std::fprintf(out,
               "[lilims] prompt: %d tokens in %.3f s (%.1f t/s) | generated: %d tokens in "
               "%.3f s (%.1f t/s) | %d threads, isa %s\n",
               r.n_prompt_tokens - r.n_reused_tokens, r.prompt_seconds,
               r.prompt_tokens_per_second(), n, r.generate_seconds,
               r.decode_tokens_per_second(),
               s.n_threads(), kernels::kernel_path_name());
  if (r.mask_seconds > 0) {
    std::fprintf(out, "[lilims] schema masks: %.3f s (%.1f us per token)\n", r.mask_seconds,
                 n > 0 ? 1e6 * r.mask_seconds / n : 0.0);
  }
  if (r.n_forced > 0 || r.n_drafted > 0) {
    std::fprintf(out, "[lilims] jump-forward: %d tokens forced | drafts: %d of %d accepted\n",
                 r.n_forced, r.n_accepted, r.n_drafted);
  }
}

void print_verbose_stats(FILE* out, const runtime::GenerateResult& r, const runtime::Session& s) {
  print_stats(out, r, s);
  std::fprintf(out,
               "[lilims] time to first token: %.3f s | prompt tokens reused: %d of %d | context "
               "shifts: %d | peak resident memory: %.1f MiB (process)\n",
               r.first_token_seconds, r.n_reused_tokens, r.n_prompt_tokens, r.n_shifts,
               (double)r.peak_resident_bytes / (1 << 20));
  const models::Model& w = s.model().weights();
  const std::string copies = models::describe_copies(w);
  std::fprintf(out, "[lilims] weights: %.1f MiB read in place from the file, %.1f MiB copied%s%s\n",
               (double)w.mapped_weight_bytes() / (1 << 20),
               (double)(w.repacked_bytes + w.requantized_bytes) / (1 << 20), copies.empty() ? "" : ": ",
               copies.c_str());
}

}  // namespace lilims::tools
