// Options and helpers the model-running subcommands share.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace lilims::tools {

// The largest -c (the runtime's own limit on a session's context).
constexpr int32_t kMaxCtx = 1 << 20;

// The value of -m: throws std::invalid_argument for an empty path (which
// would otherwise mean "the default model").
std::string model_arg(const std::string& flag, const char* value);

struct CommonArgs {
  std::string model_path;  // empty: the default model
  int32_t n_threads = 0;
  int32_t n_ctx = 0;
  models::ExecMode mode = models::ExecMode::fast;
  bool use_mmap = true;
  quant::Type kv_type = quant::Type::F16;
  bool ctx_beyond_train = false;
  int chunk_layers = runtime::SessionOptions().chunk_layers;
  graph::KvCommit kv_commit = runtime::SessionOptions().kv_commit;
  std::string manifest_path;  // --manifest FILE: the model must match it
  bool manifest_file_hash = false;
  // --memory-budget: bytes the model and the session may take together
  // (0: what the machine has available).
  uint64_t memory_budget = 0;
  // --lora FILE[,FILE...] (scale 1) and --lora-scaled FILE:SCALE[,...], in
  // the order given (llama.cpp's spelling).
  std::vector<std::pair<std::string, float>> loras;

  // Consumes -m/-t/-c/--ctx-beyond-train/--exec/--kv-type/--chunk-layers/
  // --kv-commit/--no-mmap/--manifest/--manifest-file-hash/--memory-budget/
  // --lora/--lora-scaled;
  // `next` returns the option's value.
  bool parse(const std::string& arg, const std::function<const char*()>& next);
  // With a --memory-budget, the session's budget is what the model leaves of
  // it; a session that does not fit is refused here, with both figures.
  runtime::SessionOptions session_options(const runtime::Model& model) const;
};

// The adapters of --lora / --lora-scaled, read for `model`; set on a
// session with session.set_adapters(adapters.uses).
struct LoadedAdapters {
  std::vector<std::unique_ptr<runtime::Adapter>> owned;
  std::vector<runtime::AdapterUse> uses;
};
LoadedAdapters open_adapters(const CommonArgs& args, const runtime::Model& model);
// The --help lines of --lora and --lora-scaled.
extern const char* const kLoraHelp;

// A byte count with an optional K, M or G suffix (powers of 1024): "1500000",
// "512K", "1.5G" is refused (whole numbers only).  Throws std::invalid_argument.
uint64_t parse_bytes(const char* flag, const char* text);

// ~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf (or $LILIMS_MODEL_DIR/...),
// where scripts/fetch_model.sh puts it.
std::string default_model_path();
std::unique_ptr<runtime::Model> open_model(const CommonArgs& args);

bool parse_sampling(const std::string& arg, const std::function<const char*()>& next,
                    runtime::SamplingParams& p);
// --stop, --logit-bias / -l, --frequency-penalty, --presence-penalty,
// --context-shift and --keep (the generation loop's options run and chat share).
bool parse_generation(const std::string& arg, const std::function<const char*()>& next,
                      runtime::GenerateOptions& g);
// The --help lines of parse_generation's options.
extern const char* const kGenerationHelp;
// A prompt or text file; only regular files (a FIFO or /dev/zero would block
// or never end).  Throws lilims::Error LILIMS_ERR_IO naming the path.
std::string read_text_file(const std::string& path);
// A text to score (perplexity, imatrix): the file without one trailing
// newline, as llama-perplexity reads -f, so the tokens and figures compare.
std::string read_scored_text(const std::string& path);
void print_stats(FILE* out, const runtime::GenerateResult& r, const runtime::Session& s);
// print_stats' line plus time to first token, reused prompt tokens, context
// shifts and the process's peak resident memory (--verbose).
void print_verbose_stats(FILE* out, const runtime::GenerateResult& r, const runtime::Session& s);

}  // namespace lilims::tools
