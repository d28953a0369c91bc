// The C++ side of the runtime: a loaded model (weights + tokenizer, shared
// read-only by sessions) and a session (KV cache, thread pool, generation).
// The C API (c_api.cpp) wraps these; tools and tests may use them directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "models/builders.h"
#include "models/lora.h"
#include "models/model.h"
#include "runtime/constrain/json_constraint.h"
#include "runtime/sampling.h"
#include "runtime/constrain/token_mask.h"
#include "runtime/constrain/tool_format.h"
#include "tokenizer/tokenizer.h"

namespace lilims::runtime {

class Generation;

struct ModelOptions {
  bool use_mmap = true;
  bool repack = true;
  // models::LoadOptions::fuse_projections; the environment variable
  // LILIMS_FUSE=0 turns it off for every model a process opens.
  bool fuse_projections = true;
  // Bytes the model may take (model_memory_estimate); 0: what the machine
  // has available.  Checked before the weights are read or allocated.
  uint64_t memory_budget = 0;
  // A manifest (runtime/manifest.h) the file must match, checked before the
  // weights are read; empty: none.  manifest_file_hash also hashes the file.
  std::string manifest_path;
  bool manifest_file_hash = false;
  // Called with the fraction of the load done: 0 first, then at least once
  // per tensor, nondecreasing, 1 last.  Returning true abandons the load
  // (LILIMS_ERR_CANCELLED) and frees everything.
  std::function<bool(float fraction)> progress;
};

class Model {
 public:
  // Throws lilims::Error.
  static std::unique_ptr<Model> open(const std::string& path, const ModelOptions& opt = {});
  // From a GGUF image the caller owns and keeps valid, unchanged, until the
  // model and every session made from it are gone; not copied (weights the
  // kernels repack are, as from a file).  The image must start at a
  // multiple of gguf::File::kImageAlignment bytes.
  static std::unique_ptr<Model> open_memory(const void* data, size_t size,
                                            const ModelOptions& opt = {});
  // From bytes [offset, offset + size) of an open file (size 0: to its end);
  // see gguf::File::open_fd.  The descriptor may be closed once this returns.
  static std::unique_ptr<Model> open_fd(int fd, uint64_t offset, uint64_t size,
                                        const ModelOptions& opt = {});

  const models::Model& weights() const { return *model_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const models::HParams& hparams() const { return model_->hp; }
  // The recognised chat template ("chatml", ...) or "" when the model has none we know.
  const std::string& chat_template() const { return chat_template_; }
  bool has_chat_template_text() const { return has_template_text_; }
  // The format its chat template writes tool calls in (runtime/constrain/tool_format.h).
  ToolFormat tool_format() const { return tool_format_; }
  const std::string& name() const { return name_; }
  // Every token's decoded bytes (constrained decoding tests them).
  const std::vector<std::string>& pieces() const { return pieces_; }
  // What the model takes beyond the session, for a context of n_ctx.
  graph::ModelMemory memory(int32_t n_ctx) const;
  // The single-byte tokens JSON output can always close with.
  const JsonClosers& json_closers() const { return *json_closers_; }
  // Compiled JSON schemas for this vocabulary (built on first use).
  SchemaCache& schema_cache() const;
  // model_fingerprint (kv_state.h), hashed on first use.
  uint64_t fingerprint() const;

 private:
  // Checks the budget against the parsed file, then reads the weights.
  // `borrowed`: the image is the app's memory, resident already.
  static std::unique_ptr<Model> load(std::unique_ptr<gguf::File> file, const ModelOptions& opt,
                                     bool borrowed);

  std::unique_ptr<models::Model> model_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::string chat_template_;
  ToolFormat tool_format_ = ToolFormat::generic;
  bool has_template_text_ = false;
  std::string name_;
  std::vector<std::string> pieces_;
  std::unique_ptr<JsonClosers> json_closers_;
  mutable std::once_flag schema_cache_once_;
  mutable std::unique_ptr<SchemaCache> schema_cache_;
  mutable std::once_flag fingerprint_once_;
  mutable uint64_t fingerprint_ = 0;
};

// Bytes a model takes once loaded, from its parsed file before any weight is
// read: the image (every token reads every weight, so all of it becomes
// resident, mapped or not), the repacked copies of quantized weights when the
// image is on the heap (a mapped weight's pages are dropped once repacked),
// and an upper bound on the tokenizer's and vocabulary's host structures.
uint64_t model_memory_estimate(const gguf::File& file, const ModelOptions& opt);

struct SessionOptions {
  // 0: the model's training context when the session fits memory_budget (or,
  // without one, the memory available), else the largest power of two below
  // it that does, down to kMinDefaultCtx (resolve_n_ctx).
  int32_t n_ctx = 0;
  int32_t n_threads = 0;  // 0: hardware concurrency
  // Tokens per prefill block.  0: kMaxDefaultBatch, halved down to
  // kMinDefaultBatch while the session would not fit memory_budget (or the
  // memory available) at its context: the block never costs context.
  int32_t n_batch = 0;
  graph::ExecMode mode = graph::ExecMode::fast;
  quant::Type kv_type = quant::Type::F16;
  int chunk_layers = 3;  // transformer blocks per chunk
  // How staged K/V rows reach the cache (graph/kv_cache.h); skip only for benchmarks.
  graph::KvCommit kv_commit = graph::KvCommit::sync;
  graph::CommitHook commit_hook;  // called before each KV commit (tests inject delays)
  graph::PoolHook pool_hook;      // called at the thread pool's race points (tests inject delays)
  // n_ctx beyond the model's training context: refused unless set, as
  // positions the model never saw give poor text rather than an error.
  bool allow_ctx_beyond_train = false;
  // Bytes the session may take beyond the model (session_memory_estimate);
  // 0: what the machine has available.
  uint64_t memory_budget = 0;
};

// The smallest context n_ctx 0 falls back to (smaller still when the model
// was trained for less).
constexpr int32_t kMinDefaultCtx = 256;
// The range of the default prefill block (SessionOptions::n_batch).  Larger
// blocks read each weight fewer times per prompt and share each K/V block
// among more queries; each block row costs the activations of one token.
constexpr int32_t kMaxDefaultBatch = 256, kMinDefaultBatch = 64;

// The context a session with these options gets: opt.n_ctx when set, else
// the rule of SessionOptions::n_ctx.  When not even kMinDefaultCtx fits, that
// context is returned and the Session constructor refuses it with the figure.
int32_t resolve_n_ctx(const Model& model, const SessionOptions& opt);

// Bytes a session with these options takes once its context is full (KV
// cache, scratch, logits; the model's weights are not included), as the
// Session constructor computes it before allocating.  Throws lilims::Error
// for options the constructor would refuse for other reasons than memory.
uint64_t session_memory_estimate(const Model& model, const SessionOptions& opt);

// The plan a session with these options would run (memory, chunks), made
// without allocating it.  Throws as the Session constructor would for bad options.
struct PlannedSession {
  graph::Graph graph;
  graph::Plan plan;
};
PlannedSession plan_session(const Model& model, const SessionOptions& opt);

// What a session and its model hold in memory (lilims_session_memory).
struct MemoryReport {
  uint64_t weights_mapped = 0;  // weights read in place: the file's mapping or the app's buffer
  uint64_t weights_copied = 0;  // weights on lilims' heap: repacked copies, the image when read
  uint64_t kv_resident = 0;     // the KV cache's pages written so far
  uint64_t kv_full = 0;         // the KV cache once every position is written
  uint64_t scratch = 0;         // activations, quantized activations, attention scratch, staging, logits
  uint64_t host = 0;            // tokenizer and vocabulary
  uint64_t total() const { return weights_mapped + weights_copied + kv_resident + scratch + host; }
};

enum class StopReason { max_tokens = 0, end_of_generation = 1, callback = 2, context_full = 3,
                        cancelled = 4, stop_string = 5 };

// What generation does when the context is full.
enum class ContextPolicy {
  stop,   // end with StopReason::context_full
  // Keep the first n_keep tokens, drop half of the tokens after them (the
  // oldest), evaluate the rest again at their new positions (the cache holds
  // rotated keys, so moving them needs a new evaluation) and go on.
  shift,
};

struct GenerateOptions {
  int32_t max_tokens = 128;  // <= 0: until EOG or the context is full
  SamplingParams sampling;
  bool add_bos = true;       // when the session is empty and the vocabulary asks for BOS
  bool parse_special = true;
  // Constrain the output to one valid JSON object; generation ends when it
  // closes (stop == end_of_generation), within max_tokens and the context.
  // When they leave room for no object, generate throws before evaluating
  // anything.  Only a cancel or an on_token stop can leave it open.
  bool json = false;
  // Constrain the output to one JSON value valid for this JSON Schema
  // (json_schema.h says which keywords); the same guarantees as `json`.  An
  // invalid or unsupported schema throws LILIMS_ERR_INVALID_ARGUMENT before
  // anything is evaluated.  Empty: no schema.
  std::string json_schema;
  // Called with each token and the complete UTF-8 text it releases; return
  // true to stop.  With stop strings, text that could begin one is held back
  // and released with a later token (or at the end, with token -1).
  std::function<bool(int32_t token, const std::string& text)> on_token;
  // Generation ends (StopReason::stop_string) when the text contains one of
  // these; the stop string and anything after it are neither in the result's
  // text nor streamed.  The tokens that spelled it are in `tokens`, and in
  // the session all but the last (not evaluated, as after an end of
  // generation).  Empty strings and invalid UTF-8 are refused.  Not with
  // json or json_schema (refused: those end when the value closes).
  std::vector<std::string> stop;
  ContextPolicy context_policy = ContextPolicy::stop;
  // shift: the tokens kept at the start of the sequence; < 0: the BOS token
  // when the sequence starts with one, else none.  Must leave at least two
  // positions of the context to shift.  A json / json_schema value is
  // planned to close within the context, so it never shifts.
  int32_t n_keep = -1;
  // json_schema: where the schema allows only certain bytes next (keys,
  // punctuation, the rest of an enum value with one choice left), append the
  // tokenizer's tokens for them (speculative.h: forced_tokens) without
  // sampling and evaluate them with the next token as one block.  The output
  // is valid for the schema either way, but may differ from decoding without
  // it: the model might have spelled the forced bytes with other tokens, and
  // at temperature > 0 forced tokens take no random draw.
  bool jump_forward = true;
  // Prompt-lookup decoding: after each token, draft up to n_draft tokens
  // from an earlier occurrence of the latest tokens in the sequence (prompt
  // and output), evaluate them with it in one block, and keep those the
  // sampler then picks; the rest leave the KV cache.  Each position's logits
  // are bit-identical to one-token decoding (forward_as_decode) and each
  // token is sampled as without drafts, so the output, the streamed text and
  // the session afterwards are the same, for any sampling settings.  0: off.
  int32_t n_draft = 0;
  // Lazy constraint (json or json_schema only): the output is free text
  // until it spells this trigger (UTF-8; a control token counts as its
  // vocabulary text, so "<tool_call>" may be one special token), then one
  // value with the usual guarantees.  Free text is sampled as without a
  // constraint, except that a token ending the trigger must let the value
  // start with its remaining bytes (else it is banned for that step and the
  // sampler draws again).  When too few tokens are left for a value after
  // the trigger, generation ends there (max_tokens or context_full) with no
  // value.  An answer without the trigger ends as free text does.  Empty:
  // the value starts at once.
  std::string constraint_trigger;
  // Appended after the value (tokenized with special tokens parsed, e.g.
  // "</tool_call>"), streamed and counted as generated tokens, not
  // evaluated; room for it is kept from the start of the value.
  std::string constraint_close;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, EOG excluded
  std::string text;
  int32_t n_prompt_tokens = 0;
  // Prompt tokens found in the KV cache and not evaluated again
  // (generate_reusing_prefix); n_prompt_tokens - n_reused_tokens were evaluated.
  int32_t n_reused_tokens = 0;
  double prompt_seconds = 0.0;       // evaluating the prompt
  double first_token_seconds = 0.0;  // from the call's start to the first token sampled
  double generate_seconds = 0.0;     // from the first token sampled to the end
  double mask_seconds = 0.0;  // computing schema token masks (part of generate_seconds)
  int32_t n_shifts = 0;       // context shifts (ContextPolicy::shift)
  int32_t n_forced = 0;       // tokens appended by jump_forward, unsampled (part of tokens)
  int32_t n_drafted = 0;      // tokens drafted and evaluated for verification (n_draft)
  int32_t n_accepted = 0;     // drafted tokens the sampler picked (part of tokens)
  // constraint_trigger: whether the output spelled it.
  bool constraint_triggered = false;
  // json / json_schema: the byte offset in `text` where the value starts
  // (0 without a trigger); -1 when no value started.
  int64_t value_offset = -1;
  // The process's peak resident memory when the call ended (VmHWM, see
  // base/memory_info.h: whole process, model mapping included, never lower
  // than an earlier call's); 0 when the platform does not tell.
  uint64_t peak_resident_bytes = 0;
  StopReason stop = StopReason::max_tokens;

  // Prompt tokens evaluated per second (0 when none were).
  double prompt_tokens_per_second() const;
  // Tokens after the first per second of generate_seconds (each one a
  // decode step and a sample; 0 with fewer than two tokens).
  double decode_tokens_per_second() const;
};

// A LoRA adapter (models/lora.h) read and checked for one model; any of that
// model's sessions may use it, at once, while it lives.
class Adapter {
 public:
  // Throws lilims::Error as models::load_lora does, LILIMS_ERR_IO or
  // LILIMS_ERR_BAD_FORMAT for a file that cannot be read as GGUF.
  static std::unique_ptr<Adapter> open(const Model& model, const std::string& path);
  // From a parsed file (the adapter copies what it needs; the file may go).
  static std::unique_ptr<Adapter> from_file(const Model& model, const gguf::File& file);
  const models::LoraAdapter& lora() const { return *lora_; }
  // The tool format it was trained with (lilims.tool_format), if it says.
  bool has_tool_format() const { return !lora_->tool_format.empty(); }
  ToolFormat tool_format() const { return tool_format_from_name(lora_->tool_format); }
  const Model& model() const { return model_; }

 private:
  Adapter(const Model& model, std::unique_ptr<models::LoraAdapter> lora)
      : model_(model), lora_(std::move(lora)) {}
  const Model& model_;
  std::unique_ptr<models::LoraAdapter> lora_;
};

// An adapter and the scale it is applied with (its alpha / rank comes on top).
struct AdapterUse {
  const Adapter* adapter = nullptr;
  float scale = 1.0f;
  bool operator==(const AdapterUse& o) const { return adapter == o.adapter && scale == o.scale; }
};

// A session is used by one thread at a time: every call below (except
// cancel and the const accessors) marks the session busy on entry and throws
// LILIMS_ERR_BUSY, touching nothing, when another call is running.
class Session {
 public:
  // Throws LILIMS_ERR_INVALID_ARGUMENT for n_ctx beyond the training context
  // unless opt.allow_ctx_beyond_train, and LILIMS_ERR_OUT_OF_MEMORY, before
  // allocating, when session_memory_estimate() exceeds the memory available
  // (base/memory_info.h).  The KV cache becomes resident as tokens fill it.
  Session(const Model& model, const SessionOptions& opt);

  // Appends tokens to the sequence and runs them; throws LILIMS_ERR_CONTEXT_FULL
  // (nothing evaluated) when they do not fit, LILIMS_ERR_INVALID_ARGUMENT for an
  // id outside the vocabulary, LILIMS_ERR_CANCELLED when cancelled (the tokens
  // evaluated so far stay).
  void eval(const std::vector<int32_t>& tokens);
  // Logits for every position of `tokens` appended now (n * n_vocab), for
  // perplexity and numerics tests.
  void eval_all_logits(const std::vector<int32_t>& tokens, std::vector<float>& logits);
  // Same, each position's logits bit-identical to evaluating the tokens one
  // at a time (graph::Executor::forward_as_decode): how drafts are verified.
  void eval_all_logits_as_decode(const std::vector<int32_t>& tokens, std::vector<float>& logits);
  const std::vector<float>& logits() const { return logits_; }  // of the last token
  bool has_logits() const { return has_logits_; }

  // The id tokens() holds at a position eval_embeddings filled.
  static constexpr int32_t kEmbeddingRow = -1;
  // Appends n rows of n_embd floats (an image's projected features) to the
  // sequence and runs them as prefill blocks, as eval does tokens; tokens()
  // holds kEmbeddingRow at their positions.  Same errors as eval.  A saved
  // state keeps their K/V rows under the same id (no projector is needed to
  // load it); a context shift that would move them is refused before
  // generate evaluates anything, and prompt-lookup drafts never copy or
  // match them.
  void eval_embeddings(const float* rows, int32_t n);

  // Every option is checked before the prompt is evaluated: an invalid one
  // throws with the session unchanged.
  GenerateResult generate(const std::string& prompt, const GenerateOptions& opt);
  // Same, from token ids already tokenized.
  GenerateResult generate_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& opt);

  // The adapters every later evaluation applies, all at once (empty: none),
  // in place of those set before.  A different list empties the sequence
  // (its KV rows were computed with the old list); the same list changes
  // nothing.  Throws LILIMS_ERR_INVALID_ARGUMENT, changing nothing, for an
  // adapter of another model, a null one or a scale that is not finite.
  void set_adapters(const std::vector<AdapterUse>& adapters);
  const std::vector<AdapterUse>& adapters() const { return adapters_; }

  // Both give the KV cache pages of the dropped tokens back to the system.
  void reset();
  // Keeps the first n tokens of the sequence (and their KV rows); the next
  // eval continues at position n.  No logits until the next eval.
  void truncate(int32_t n);
  // The tokens in the KV cache.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Generates after `full_prompt`, the whole sequence the session should
  // hold: reuses the KV cache for the longest prefix it already holds and
  // evaluates only the rest (multi-turn chat, repeated system prompts);
  // the result's n_reused_tokens says how many were kept.
  GenerateResult generate_reusing_prefix(const std::vector<int32_t>& full_prompt,
                                         const GenerateOptions& opt);
  // Any thread: asks the call running at this moment to stop soon (eval
  // throws LILIMS_ERR_CANCELLED, generate returns with StopReason::cancelled).
  // A cancel while no call runs is dropped; one that arrives after the call
  // checked for the last time is dropped with that call's end.
  void cancel();
  // The session's state (tokens, their K/V rows, the last logits) as bytes,
  // in the format of runtime/kv_state.h.  Each is a call on the session
  // (busy rule above).  state_size(): the bytes save_state writes now.
  uint64_t state_size();
  // Returns the bytes written; LILIMS_ERR_INVALID_ARGUMENT, writing nothing,
  // when capacity is below state_size().
  size_t save_state(void* buf, size_t capacity);
  // Writes a temporary file beside `path` and renames it, so a failed save
  // leaves any earlier file at `path` whole.  LILIMS_ERR_IO on failure.
  void save_state_file(const std::string& path);
  // Replaces the tokens, K/V rows and logits with a saved state's.  Every
  // check comes first, and a refused state leaves the session as it was:
  // LILIMS_ERR_BAD_FORMAT (not a state, truncated, corrupt), UNSUPPORTED
  // (another format version), INVALID_ARGUMENT (another model, KV type or
  // RoPE scaling), CONTEXT_FULL (more tokens than n_ctx).  The file form
  // reads the whole file into memory first (LILIMS_ERR_IO if it cannot).
  void load_state(const void* data, size_t size);
  void load_state_file(const std::string& path);

  int32_t n_past() const { return (int32_t)tokens_.size(); }
  int32_t n_ctx() const { return exec_->n_ctx(); }
  const graph::Executor& executor() const { return *exec_; }
  const Model& model() const { return model_; }
  int n_threads() const { return pool_->size(); }
  // From the plan's figures and the pages the KV cache has written; the
  // mapped weights count as they will be once every token has read them.
  MemoryReport memory_report() const;

  // Marks the session busy for the life of a call (LILIMS_ERR_BUSY when it
  // already is); the C API holds one around its reads too.
  class Call {
   public:
    explicit Call(Session& s);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    Session& s_;
  };

 private:
  static constexpr uint32_t kBusy = 1, kCancel = 2;

  void eval_impl(const std::vector<int32_t>& tokens);
  // The block loop of eval_impl and eval_embeddings: rows [0, n) in blocks
  // of n_batch, cancellation checked before each; forward(done, m)
  // evaluates rows [done, done + m) at position tokens_.size() and appends
  // their ids to tokens_.
  void eval_in_blocks(size_t n, const std::function<void(size_t done, int32_t m)>& forward);
  // Every position's logits into *all (and the last's into logits_), or
  // with all null the last's only.
  void eval_block_impl(const std::vector<int32_t>& tokens, std::vector<float>* all, bool as_decode);
  void truncate_impl(int32_t n);
  // Generates after keeping the first `keep` tokens of the sequence and
  // appending `prompt`; validates everything before changing anything.
  // Drives a Generation (runtime/generation.h) through its steps.
  GenerateResult generate_after(size_t keep, const std::vector<int32_t>& prompt,
                                const GenerateOptions& opt);
  // The evaluate step of generate_after: runs `block` (accepted tokens;
  // `next` the sampled one), with prompt-lookup drafts when may_draft, or
  // shifts a full context; `cur` then points at the logits to sample from.
  // False when generation ends (gen's stop says why).
  bool evaluate(Generation& gen, std::vector<int32_t>& block, int32_t next, int32_t n_keep,
                bool may_draft, std::vector<float>& block_logits, const float*& cur);
  // Drafts the sampler did not pick leave the KV cache; returns the logits
  // to sample from (cur, copied into logits_).
  const float* drop_drafts(Generation& gen, const float* cur);
  // ContextPolicy::shift: the tokens a shift keeps (0 for stop), checked.
  int32_t shift_keep(size_t keep, const std::vector<int32_t>& prompt,
                     const GenerateOptions& opt) const;
  void check_tokens(size_t n_past, const std::vector<int32_t>& tokens) const;
  // One past the last embedding row among the first n positions (0: none).
  size_t embedding_rows_end(size_t n) const;
  // ContextPolicy::shift: drops tokens after the kept start and evaluates
  // the rest, with `next` (not yet evaluated) appended, at their new positions.
  void shift_context(int32_t n_keep, int32_t next);
  bool cancel_requested() const { return (state_.load(std::memory_order_acquire) & kCancel) != 0; }

  const Model& model_;
  SessionOptions opt_;       // with n_ctx resolved
  graph::PlanOptions plan_opt_;
  std::unique_ptr<graph::ThreadPool> pool_;
  std::unique_ptr<graph::Executor> exec_;
  std::vector<AdapterUse> adapters_;
  std::vector<int32_t> tokens_;  // the sequence in the KV cache
  std::vector<float> logits_;
  bool has_logits_ = false;
  std::atomic<uint32_t> state_{0};  // kBusy while a call runs, | kCancel once cancelled
};

}  // namespace lilims::runtime
