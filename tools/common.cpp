#include "tools/common.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "base/error.h"
#include "kernels/cpu.h"
#include "tools/cli.h"

namespace lilims::tools {

bool CommonArgs::parse(const std::string& a, const std::function<const char*()>& next) {
  if (a == "-m" || a == "--model") {
    model_path = next();
  } else if (a == "-t" || a == "--threads") {
    n_threads = (int32_t)cli::parse_int("-t", next());
    if (n_threads < 1 || n_threads > 256) throw std::invalid_argument("-t must be 1..256");
  } else if (a == "-c" || a == "--ctx") {
    n_ctx = (int32_t)cli::parse_int("-c", next());
    if (n_ctx < 1) throw std::invalid_argument("-c must be positive");
  } else if (a == "--ctx-beyond-train") {
    ctx_beyond_train = true;
  } else if (a == "--exec") {
    const std::string m = next();
    if (m == "fast") mode = models::ExecMode::fast;
    else if (m == "ref") mode = models::ExecMode::ref;
    else if (m == "oracle") mode = models::ExecMode::oracle_f32;
    else throw std::invalid_argument("--exec expects fast, ref or oracle");
  } else if (a == "--kv-type") {
    const std::string t = next();
    if (t == "f16") kv_type = quant::Type::F16;
    else if (t == "q8_0") kv_type = quant::Type::Q8_0;
    else if (t == "f32") kv_type = quant::Type::F32;
    else throw std::invalid_argument("--kv-type expects f16, q8_0 or f32");
  } else if (a == "--no-mmap") {
    use_mmap = false;
  } else {
    return false;
  }
  return true;
}

runtime::SessionOptions CommonArgs::session_options() const {
  runtime::SessionOptions o;
  o.n_threads = n_threads;
  o.n_ctx = n_ctx;
  o.mode = mode;
  o.kv_type = kv_type;
  o.allow_ctx_beyond_train = ctx_beyond_train;
  return o;
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
    if (!std::ifstream(path).good()) {
      throw Error(LILIMS_ERR_IO, "no -m MODEL given and the default model is not at " + path +
                                     " (run scripts/fetch_model.sh)");
    }
  }
  runtime::ModelOptions o;
  o.use_mmap = args.use_mmap;
  return runtime::Model::open(path, o);
}

bool parse_sampling(const std::string& a, const std::function<const char*()>& next,
                    runtime::SamplingParams& p) {
  if (a == "--temp") {
    p.temperature = (float)cli::parse_float("--temp", next());
  } else if (a == "--top-k") {
    p.top_k = (int32_t)cli::parse_int("--top-k", next());
  } else if (a == "--top-p") {
    p.top_p = (float)cli::parse_float("--top-p", next());
  } else if (a == "--min-p") {
    p.min_p = (float)cli::parse_float("--min-p", next());
  } else if (a == "--repeat-penalty") {
    p.repeat_penalty = (float)cli::parse_float("--repeat-penalty", next());
  } else if (a == "--seed") {
    p.seed = (uint64_t)cli::parse_int("--seed", next());
  } else {
    return false;
  }
  return true;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void print_stats(FILE* out, const runtime::GenerateResult& r, const runtime::Session& s) {
  const int n = (int)r.tokens.size();
  std::fprintf(out,
               "[lilims] prompt: %d tokens in %.3f s (%.1f t/s) | generated: %d tokens in "
               "%.3f s (%.1f t/s) | %d threads, isa %s\n",
               r.n_prompt_tokens, r.prompt_seconds,
               r.prompt_seconds > 0 ? r.n_prompt_tokens / r.prompt_seconds : 0.0, n,
               r.generate_seconds, r.generate_seconds > 0 ? n / r.generate_seconds : 0.0,
               s.n_threads(), kernels::isa_name(kernels::active_isa()));
}

}  // namespace lilims::tools
