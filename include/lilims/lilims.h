/*
 * lilims: small language models on the device.  The public C API.
 *
 * This is the only header an app includes.  It is plain C (C99), usable from
 * C, C++, Objective-C and Swift.  Every function returns a lilims_status; when
 * it is not LILIMS_OK, lilims_last_error() returns a message that says what
 * went wrong ("[gguf] tensor blk.0.ffn_down.weight has type Q6_K, ...").
 *
 * Handles are opaque.  One lilims_model may be shared by several sessions on
 * different threads; a lilims_session is used by one thread at a time (except
 * lilims_session_cancel, which any thread may call).  A call made on a
 * session while another call on it is running returns LILIMS_ERR_BUSY and
 * changes nothing (lilims_session_n_past returns -1 and lilims_session_logits
 * NULL then); freeing a session while a call on it runs is not detected.
 *
 * Structs passed in carry their own size (struct_size) so that the ABI can
 * grow: always start from the lilims_*_default_params() function.
 */
#ifndef LILIMS_LILIMS_H
#define LILIMS_LILIMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LILIMS_VERSION_MAJOR 0
#define LILIMS_VERSION_MINOR 1
#define LILIMS_VERSION_PATCH 0
/* Raised when a change to this header breaks programs built against an
 * earlier one (a struct's layout, a function's signature or meaning).  New
 * functions and fields added at the end of a struct with struct_size keep
 * it.  An app built with this header checks
 * lilims_abi_version() == LILIMS_ABI_VERSION at start-up. */
#define LILIMS_ABI_VERSION 1

typedef enum lilims_status {
  LILIMS_OK = 0,
  LILIMS_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad parameter */
  LILIMS_ERR_IO = 2,               /* a file cannot be opened, read or mapped */
  LILIMS_ERR_BAD_FORMAT = 3,       /* a model file is truncated, corrupt or malformed */
  LILIMS_ERR_UNSUPPORTED = 4,      /* a valid file that lilims cannot run (tensor type, architecture) */
  LILIMS_ERR_MISSING = 5,          /* a required tensor or hyperparameter is absent */
  LILIMS_ERR_OUT_OF_MEMORY = 6,
  LILIMS_ERR_CONTEXT_FULL = 7,     /* the tokens do not fit the session's context */
  LILIMS_ERR_CANCELLED = 8,        /* lilims_session_cancel was called */
  LILIMS_ERR_INTERNAL = 9,
  LILIMS_ERR_BUSY = 10             /* another call is running on the same session;
                                      an engine's queue is full */
} lilims_status;

typedef struct lilims_model lilims_model;
typedef struct lilims_session lilims_session;
typedef struct lilims_adapter lilims_adapter;
typedef int32_t lilims_token;

/* The message of the last failure on the calling thread ("" if none).  Valid
 * until the next lilims call on this thread. */
const char *lilims_last_error(void);
const char *lilims_status_name(lilims_status status);
/* "0.1.0 (isa: avx2)": the library version and the kernel path in use. */
const char *lilims_version_string(void);
/* The version of the library linked in (each pointer may be NULL). */
void lilims_version(int *major, int *minor, int *patch);
/* LILIMS_ABI_VERSION as the library linked in was built with it. */
int lilims_abi_version(void);

/* ---- logging --------------------------------------------------------- */

typedef enum lilims_log_level {
  LILIMS_LOG_DEBUG = 0,
  LILIMS_LOG_INFO = 1,  /* a model loaded (and in how long), a session's settings */
  LILIMS_LOG_WARN = 2,  /* a setting not honoured as asked (a default context lowered) */
  LILIMS_LOG_ERROR = 3
} lilims_log_level;

/* message: one line, no newline, starting with the area ("[model_open] ...");
 * valid during the call.  Called on the thread that made the report. */
typedef void (*lilims_log_callback)(void *user_data, lilims_log_level level, const char *message);

/* Sends the library's reports at min_level and above to callback, for the
 * whole process; NULL (the default) drops them: the library never prints.
 * Set it once before other calls; setting it again is safe from any thread,
 * though a report under way may still reach the previous callback. */
void lilims_set_log_callback(lilims_log_callback callback, void *user_data,
                             lilims_log_level min_level);

/* ---- models ---------------------------------------------------------- */

/* Called while a model loads with the fraction done: 0 first, then at least
 * once per tensor (nondecreasing), 1 last, on the loading thread.  Return
 * nonzero to abandon the load: the open call frees everything and returns
 * LILIMS_ERR_CANCELLED. */
typedef int (*lilims_progress_callback)(void *user_data, float fraction);

typedef struct lilims_model_params {
  size_t struct_size; /* sizeof(lilims_model_params) */
  int32_t use_mmap;   /* map the file (default 1); 0 reads it into memory */
  /* Appended after 0.1.0 (a caller built against 0.1.0's header gets NULL / 0). */
  lilims_progress_callback progress; /* NULL: no reports */
  void *progress_user_data;
  /* Bytes the model may take (0: what the machine has available).  The open
   * refuses, before reading or allocating the weights, a model whose estimate
   * exceeds it, with LILIMS_ERR_OUT_OF_MEMORY and the figure in
   * lilims_last_error().  The estimate is the file's size (every token reads
   * every weight, so all of it becomes resident, mapped or not), plus the
   * repacked copies of quantized weights when use_mmap is 0, plus a bound on
   * the tokenizer's structures. */
  uint64_t memory_budget;
  /* A manifest the model must match (written by `lilims manifest`), or NULL.
   * Checked before the weights are read: every tensor's XXH3-128, and the
   * whole file's when manifest_check_file_hash is nonzero.  A model that
   * differs is LILIMS_ERR_BAD_FORMAT naming what differs; one that needs a
   * newer lilims is LILIMS_ERR_UNSUPPORTED; an unreadable manifest is
   * LILIMS_ERR_IO. */
  const char *manifest_path;
  int32_t manifest_check_file_hash;
} lilims_model_params;

lilims_model_params lilims_model_default_params(void);

lilims_status lilims_model_open(const char *path, const lilims_model_params *params,
                                lilims_model **out_model);
/* Opens a GGUF image the app holds in memory, without copying it: the app
 * owns the buffer and must keep it valid and unchanged until the model and
 * every session made from it are freed.  data must be aligned to 16 bytes
 * (malloc, mmap and posix_memalign give that); weights the kernels repack
 * are copied as from a file.  use_mmap is ignored. */
lilims_status lilims_model_open_memory(const void *data, size_t size,
                                       const lilims_model_params *params,
                                       lilims_model **out_model);
/* Opens the GGUF image at bytes [offset, offset + size) of an open file: an
 * Android asset (AAsset_openFileDescriptor64 gives fd, offset and size), a
 * model inside a bigger bundle.  size 0 means up to the end of the file.  The
 * range is mapped (from the page holding offset); it is read into memory
 * instead when use_mmap is 0 or offset is not a multiple of 16.  lilims does
 * not keep fd: the app may close it once the call returns.  A range outside
 * the file is LILIMS_ERR_IO; one that cuts the model short is
 * LILIMS_ERR_BAD_FORMAT ("[gguf] truncated ..."). */
lilims_status lilims_model_open_fd(int fd, uint64_t offset, uint64_t size,
                                   const lilims_model_params *params, lilims_model **out_model);
/* Checks an open model against a manifest, as manifest_path does at open
 * (the same errors).  Tensors the kernels repacked are read again from the
 * file or image. */
lilims_status lilims_model_check_manifest(const lilims_model *model, const char *manifest_path,
                                          int32_t check_file_hash);
/* Drops the app's reference to the model.  Sessions created from it keep
 * their own: the weights stay in memory until the model and every session
 * made from it are freed, so a session stays usable after lilims_model_free. */
void lilims_model_free(lilims_model *model);

typedef struct lilims_model_info {
  size_t struct_size;
  char architecture[32]; /* general.architecture: "llama", "phi2", "phi3", "gemma3", "qwen2", "qwen3" */
  char name[128];        /* general.name, may be empty */
  int32_t n_vocab;
  int32_t n_ctx_train;   /* the context length the model was trained for */
  int32_t n_embd;
  int32_t n_layer;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t n_ff;
  uint64_t n_params;
  uint64_t file_bytes;
  lilims_token bos_token; /* -1 if none */
  lilims_token eos_token; /* -1 if none */
  int32_t add_bos;        /* the tokenizer adds BOS to a prompt */
  int32_t has_chat_template;
  /* Where the weights live.  A plain GGUF's matmul weights are repacked
   * into the kernels' layout (dirty memory); a file laid out once with
   * `lilims quantize IN OUT TYPE --layout native` is read in place from a
   * read-only mapping (clean pages the system may drop and read again).
   * These fields are filled only when struct_size covers them (an app built
   * against an older header passes a smaller size and gets the rest). */
  uint64_t weight_bytes_mapped; /* read in place from the file's mapping (or the app's buffer) */
  uint64_t weight_bytes_copied; /* copied into lilims' memory: repacked, re-quantized, laid out again */
  char weight_copy_reason[320]; /* "BYTES: why" per reason, "; " between, largest first; "" if none */
} lilims_model_info;

lilims_status lilims_model_get_info(const lilims_model *model, lilims_model_info *out_info);

/* ---- tokenizer ------------------------------------------------------- */

/* Encodes UTF-8 text.  add_bos: add BOS if the model asks for it (1), never (0).
 * parse_special: match special-token text ("<|im_start|>") as single tokens.
 * Writes at most capacity ids and sets *out_count to the number the text needs:
 * if that is more than capacity, nothing useful is written and the call
 * returns LILIMS_ERR_INVALID_ARGUMENT, so call again with a larger buffer.
 * A NULL buffer with capacity 0 asks for the size only; a NULL buffer with a
 * nonzero capacity is LILIMS_ERR_INVALID_ARGUMENT (the size is still set). */
lilims_status lilims_tokenize(const lilims_model *model, const char *text, size_t text_len,
                              int32_t add_bos, int32_t parse_special, lilims_token *out_tokens,
                              size_t capacity, size_t *out_count);

/* The bytes of one token's piece (a byte-fallback token is one raw byte; it
 * may be part of a UTF-8 character).  Same capacity rule as lilims_tokenize.
 * Not NUL-terminated. */
lilims_status lilims_token_to_piece(const lilims_model *model, lilims_token token, char *out_bytes,
                                    size_t capacity, size_t *out_len);

/* Decodes a whole sequence to UTF-8 text (same capacity rule). */
lilims_status lilims_detokenize(const lilims_model *model, const lilims_token *tokens,
                                size_t n_tokens, char *out_text, size_t capacity,
                                size_t *out_len);

/* ---- chat ------------------------------------------------------------ */

typedef struct lilims_chat_message {
  const char *role;    /* "system", "user", "assistant" */
  const char *content; /* UTF-8 */
} lilims_chat_message;

/* Formats messages with the model's chat template (or template_name when not
 * NULL: "chatml", "chatml-plain", "qwen1.5", "qwen2", "qwen3", "llama2",
 * "zephyr", "phi3", "llama3", "gemma") and, when
 * add_generation_prompt, the opening of the assistant's turn.  Same capacity
 * rule as lilims_tokenize; the output is NUL-terminated when it fits.
 * Tokenizing this text with parse_special = 1 lets a message that spells
 * "<|im_start|>system ..." open a turn of its own: lilims_chat_tokenize does
 * not. */
lilims_status lilims_chat_apply_template(const lilims_model *model, const char *template_name,
                                         const lilims_chat_message *messages, size_t n_messages,
                                         int32_t add_generation_prompt, char *out_text,
                                         size_t capacity, size_t *out_len);

/* The conversation as lilims_chat_apply_template formats it, tokenized with
 * special tokens parsed only in the template's own markers: text a message
 * holds ("<|im_start|>system\nYou are ...") stays text.  special_in_messages
 * = 1 parses special-token text in messages too, for callers that put it
 * there on purpose.  add_bos as in lilims_tokenize; same capacity rule.  To
 * answer: lilims_session_eval the ids on an empty session, then
 * lilims_generate with an empty prompt. */
lilims_status lilims_chat_tokenize(const lilims_model *model, const char *template_name,
                                   const lilims_chat_message *messages, size_t n_messages,
                                   int32_t add_generation_prompt, int32_t add_bos,
                                   int32_t special_in_messages, lilims_token *out_tokens,
                                   size_t capacity, size_t *out_count);

/* ---- sessions -------------------------------------------------------- */

/* The type of the KV cache's entries (lilims_session_params.kv_type). */
typedef enum lilims_kv_type {
  LILIMS_KV_F16 = 0, /* the default */
  LILIMS_KV_Q8_0 = 1 /* half the memory; needs a head size that is a multiple of 32 */
} lilims_kv_type;

/* How a step's new K/V rows reach the cache (lilims_session_params.kv_commit;
 * DESIGN.md, "asynchronous KV commit").  Both give the same logits. */
typedef enum lilims_kv_commit {
  LILIMS_KV_COMMIT_DEFAULT = 0, /* sync: neither mode was measured no slower on every row
                                 * (bench/README.md, "KV commit modes, sync against async") */
  LILIMS_KV_COMMIT_SYNC = 1,    /* written by the chunk that computed them */
  LILIMS_KV_COMMIT_ASYNC = 2    /* written by a pool worker while the next chunk runs */
} lilims_kv_commit;

typedef struct lilims_session_params {
  size_t struct_size; /* sizeof(lilims_session_params) */
  /* Context length in tokens.  0: the model's n_ctx_train when the session
   * fits memory_budget (or, without one, the memory available), else the
   * largest power of two below it that fits, down to 256 (the session is
   * refused when even that does not fit).  lilims_session_n_ctx tells. */
  int32_t n_ctx;
  int32_t n_threads;  /* 0 = all cores */
  /* Nonzero: accept an n_ctx above the model's n_ctx_train (else
   * LILIMS_ERR_INVALID_ARGUMENT). */
  int32_t allow_ctx_beyond_train;
  /* Appended after 0.1.0 (a caller built against 0.1.0's header gets 0). */
  /* Bytes the session may take beyond its model (KV cache at full context,
   * scratch, logits: lilims_session_memory_estimate); 0 = what the machine
   * has available. */
  uint64_t memory_budget;
  int32_t n_batch;      /* tokens per prefill block, capped at n_ctx; 0 = 256, halved
                         * down to 64 while the session would not fit the budget */
  int32_t kv_type;      /* a lilims_kv_type; 0 = LILIMS_KV_F16 */
  int32_t chunk_layers; /* transformer blocks per execution chunk; 0 = 3 */
  int32_t kv_commit;    /* a lilims_kv_commit; 0 = LILIMS_KV_COMMIT_DEFAULT */
} lilims_session_params;

lilims_session_params lilims_session_default_params(void);

/* LILIMS_ERR_OUT_OF_MEMORY, before allocating, when the session's KV cache
 * and scratch for n_ctx would exceed memory_budget or the memory the machine
 * has available; the message gives the bytes needed.  The KV cache becomes
 * resident as tokens fill it, and lilims_session_reset gives those pages
 * back. */
lilims_status lilims_session_create(lilims_model *model, const lilims_session_params *params,
                                    lilims_session **out_session);
/* The bytes lilims_session_create would check for these params (the
 * context n_ctx 0 resolves to included), without creating anything. */
lilims_status lilims_session_memory_estimate(const lilims_model *model,
                                             const lilims_session_params *params,
                                             uint64_t *out_bytes);

typedef struct lilims_memory_report {
  size_t struct_size;      /* sizeof(lilims_memory_report) */
  uint64_t weights_mapped; /* weights read in place from the file's mapping or the app's buffer,
                              as resident once every token has read them */
  uint64_t weights_copied; /* weights on lilims' heap: repacked and re-quantized copies, the file when read */
  uint64_t kv_resident;    /* KV cache pages written so far (reset gives them back) */
  uint64_t kv_full;        /* the KV cache once the context is full */
  uint64_t scratch;        /* activations, attention scratch, staging, logits */
  uint64_t host;           /* tokenizer and vocabulary */
  uint64_t total;          /* weights_mapped + weights_copied + kv_resident + scratch + host */
} lilims_memory_report;

/* What the session and its model hold in memory now, from the plan's
 * figures and the pages the KV cache has written.  The model's part is
 * shared by every session made from it. */
lilims_status lilims_session_memory(const lilims_session *session, lilims_memory_report *out);
void lilims_session_free(lilims_session *session);

/* LoRA adapters.  lilims_adapter_load reads one in llama.cpp's GGUF adapter
 * format (`lilims convert PEFT_DIR OUT.gguf --base MODEL.gguf` makes one from a
 * Hugging Face PEFT adapter) and checks it against the model: an adapter for
 * another architecture, a tensor that names no weight of the model, shapes
 * or ranks that do not fit are refused (LILIMS_ERR_INVALID_ARGUMENT or
 * LILIMS_ERR_BAD_FORMAT, the message naming the tensor).  It holds its own
 * copy of the weights (about a quarter of an F32 file's bytes), not the file.
 * lilims_session_set_adapters sets the adapters every later evaluation of
 * the session applies, all at once, each with its scale (scales may be NULL:
 * all 1; the adapter's alpha / rank comes on top, as llama.cpp applies it);
 * n = 0 removes them.  A list other than the current one forgets the
 * session's tokens, whose KV rows the old list computed; the same list
 * changes nothing.  Several sessions may use one adapter at once; the
 * sessions keep what they use alive, so lilims_adapter_free may come
 * before the sessions are freed.  The base model is never reloaded. */
lilims_status lilims_adapter_load(lilims_model *model, const char *path, lilims_adapter **out_adapter);
void lilims_adapter_free(lilims_adapter *adapter);
/* The tool format (lilims_tool_format) the adapter was trained with, when
 * its file says (lilims.tool_format, written by `lilims convert PEFT_DIR
 * --tool-format NAME`); -1 when it does not or for NULL.  Use it for
 * tool_format and lilims_tools_prompt_format with that adapter. */
int32_t lilims_adapter_tool_format(const lilims_adapter *adapter);
lilims_status lilims_session_set_adapters(lilims_session *session, lilims_adapter *const *adapters,
                                          const float *scales, size_t n);

/* Forgets every token: the next eval starts at position 0. */
lilims_status lilims_session_reset(lilims_session *session);
/* Number of tokens in the session's KV cache. */
int32_t lilims_session_n_past(const lilims_session *session);
int32_t lilims_session_n_ctx(const lilims_session *session);

/* Runs the model over n tokens appended after the tokens already evaluated.
 * Afterwards lilims_session_logits returns the logits of the last one.
 * LILIMS_ERR_CONTEXT_FULL (nothing evaluated) if they do not fit. */
lilims_status lilims_session_eval(lilims_session *session, const lilims_token *tokens,
                                  size_t n_tokens);
/* The n_vocab logits after the last evaluated token (NULL before any eval).
 * Valid until the next call on the session. */
const float *lilims_session_logits(const lilims_session *session);

/* ---- session state --------------------------------------------------- */

/* Keeps the first n_keep tokens of the session (and their KV cache rows) and
 * forgets the rest; the next eval continues at position n_keep, and
 * lilims_session_logits returns NULL until then.  n_keep < 0 or above
 * lilims_session_n_past is LILIMS_ERR_INVALID_ARGUMENT (nothing changes). */
lilims_status lilims_session_truncate(lilims_session *session, int32_t n_keep);

/* The tokens the session holds, oldest first (to choose where to truncate).
 * Same capacity rule as lilims_tokenize. */
lilims_status lilims_session_tokens(const lilims_session *session, lilims_token *out_tokens,
                                    size_t capacity, size_t *out_count);

/* A session's state: its tokens, their KV cache rows and the last logits, so
 * that a conversation (or a long system prompt evaluated once) can be put
 * aside and resumed later, in this process or another, without evaluating it
 * again.  The state holds only the rows of its tokens (bytes per token:
 * 2 * n_layer * n_head_kv * head_dim * 2 for the F16 cache, plus 4), a
 * header naming the format version, the lilims version and a fingerprint of
 * the model, and a checksum.  It loads into any session of the same model
 * and KV cache type whose n_ctx holds its tokens.  An image's positions
 * (lilims_session_eval_image) are kept as a token's are, under id -1.
 *
 * The bytes lilims_session_save_state writes for the session as it is now. */
lilims_status lilims_session_state_size(const lilims_session *session, size_t *out_size);

/* Writes the state into buf.  *out_written (may be NULL) gets its size; a
 * capacity below it is LILIMS_ERR_INVALID_ARGUMENT and writes nothing. */
lilims_status lilims_session_save_state(lilims_session *session, void *buf, size_t capacity,
                                        size_t *out_written);

/* Replaces everything the session holds with the state in buf.  Every check
 * comes before any change: a refused state leaves the session as it was.
 * LILIMS_ERR_BAD_FORMAT: not a state, truncated, or corrupt (checksum);
 * LILIMS_ERR_UNSUPPORTED: a format version this build does not read;
 * LILIMS_ERR_INVALID_ARGUMENT: saved from another model, or with another KV
 * cache type (rows are not converted) or RoPE scaling;
 * LILIMS_ERR_CONTEXT_FULL: more tokens than the session's n_ctx. */
lilims_status lilims_session_load_state(lilims_session *session, const void *buf, size_t size);

/* The same through a file.  Saving writes path + ".partial" and renames it
 * over path, so a failed save never leaves a half-written state at path.
 * Loading reads the whole file into memory, then as lilims_session_load_state
 * (LILIMS_ERR_IO when the file cannot be read). */
lilims_status lilims_session_save_state_file(lilims_session *session, const char *path);
lilims_status lilims_session_load_state_file(lilims_session *session, const char *path);

/* ---- generation ------------------------------------------------------ */

typedef struct lilims_sampling_params {
  size_t struct_size;
  float temperature; /* 0 = greedy (argmax) */
  int32_t top_k;     /* 0 = off */
  float top_p;       /* 1 = off */
  float min_p;       /* 0 = off */
  float repeat_penalty; /* 1 = off */
  int32_t repeat_last_n;
  uint64_t seed;
} lilims_sampling_params;

lilims_sampling_params lilims_sampling_default_params(void);

/* Called with each newly generated piece of text (always whole UTF-8
 * characters; may be empty when a token completes no character yet, or when
 * its text could still begin a stop string and is held back until a later
 * token shows it does not) and its token (-1 for text held back until the
 * end and flushed then: the tail that could have begun a stop string, and
 * bytes that never formed a character, replaced by U+FFFD).  Return nonzero
 * to stop generation. */
typedef int (*lilims_token_callback)(void *user_data, lilims_token token, const char *text,
                                     size_t text_len);

/* How a model family describes tools and writes its calls
 * (lilims_generate_params.tool_format; README, "Tool formats"). */
typedef enum lilims_tool_format {
  LILIMS_TOOL_FORMAT_GENERIC = 0, /* lilims' own (lilims_tools_prompt): {"name", "arguments"} alone */
  LILIMS_TOOL_FORMAT_HERMES = 1,  /* Qwen2 / Qwen2.5 / Hermes: <tool_call>{"name", "arguments"}</tool_call> */
  LILIMS_TOOL_FORMAT_SMOLLM2 = 2, /* SmolLM2: <tool_call>[{"name", "arguments"}, ...]</tool_call>;
                                     [] when no tool fits */
  LILIMS_TOOL_FORMAT_LLAMA3 = 3,  /* Llama 3.1 / 3.2 JSON: {"name", "parameters"} */
  LILIMS_TOOL_FORMAT_PHI4 = 4     /* Phi-4-mini: <|tool_call|>[{"name", "arguments"}, ...]<|/tool_call|> */
} lilims_tool_format;

/* A function the model may call (lilims_generate_params.tools). */
typedef struct lilims_tool {
  const char *name;        /* UTF-8, unique within the list */
  const char *description; /* may be NULL */
  const char *parameters;  /* JSON Schema (an object) of the arguments; NULL = no arguments */
} lilims_tool;

/* One entry of lilims_generate_params.logit_bias. */
typedef struct lilims_logit_bias {
  lilims_token token;
  float bias; /* added to the token's logit; -INFINITY bans it */
} lilims_logit_bias;

/* What generation does when the context is full (lilims_generate_params.context_policy). */
typedef enum lilims_context_policy {
  LILIMS_CONTEXT_STOP = 0, /* stop with stop_reason 3 */
  /* Keep the first n_keep tokens, drop the older half (rounded down) of the
   * tokens after them, evaluate the remaining ones again at their new
   * positions (the cache holds rotated keys) and go on generating.  The
   * dropped text is forgotten. */
  LILIMS_CONTEXT_SHIFT = 1
} lilims_context_policy;

typedef struct lilims_generate_params {
  size_t struct_size;
  int32_t max_tokens;        /* stop after this many new tokens (<= 0: until EOS or context full) */
  lilims_sampling_params sampling;
  int32_t add_bos;           /* add BOS when the session is empty and the model asks for it */
  int32_t parse_special;     /* parse special-token text in the prompt (1 by default) */
  int32_t json_object;       /* 1: the output is one strictly valid JSON object; generation
                                ends when it closes (constrained decoding) */
  lilims_token_callback on_token;
  void *user_data;
  /* Appended after 0.1.0 (a caller built against 0.1.0's header gets NULL / 0). */
  /* A JSON Schema (UTF-8 JSON text): the output is one JSON value valid for
   * it, with the guarantees of json_object.  NULL = none.  The keywords
   * lilims supports are listed in the README; any other is refused with
   * LILIMS_ERR_INVALID_ARGUMENT naming it, and so is a schema whose grammar
   * would exceed 2^22 states (nested counted repeats multiply: maxItems
   * around maxLength, {n} inside {n} in a pattern). */
  const char *json_schema;
  /* n_tools > 0: the output is {"name": <one of the names>, "arguments":
   * <that tool's arguments>}.  Describe the tools to the model in the prompt
   * (lilims_tools_prompt).  Excludes json_schema and json_object. */
  const lilims_tool *tools;
  size_t n_tools;
  /* Appended after 0.2.0 (a caller built against an older header gets the defaults). */
  /* Stop strings (UTF-8, NUL-terminated, none empty): generation ends with
   * stop_reason 5 when the text contains one, even across tokens.  The stop
   * string and what follows it are neither streamed nor counted as text;
   * on_token holds back only text that could still begin one.  The tokens
   * that spelled it stay in the session, except the last (as after an end
   * of generation token).  Refused with json_object, json_schema and tools:
   * their output ends when the value closes. */
  const char *const *stop;
  size_t n_stop;
  /* OpenAI's penalties, over the tokens generated in this call (the prompt
   * does not count): with c the times token j was generated so far,
   *   logit[j] -= c * frequency_penalty + (c > 0 ? presence_penalty : 0).
   * Applied after logit_bias and repeat_penalty, before temperature and
   * the top-k / top-p / min-p filters.  0 = off (the default); finite. */
  float frequency_penalty;
  float presence_penalty;
  /* Added to the logits before anything else; a token listed twice gets
   * both.  A token outside the vocabulary or a NaN / +INFINITY bias is
   * LILIMS_ERR_INVALID_ARGUMENT, as is banning every token. */
  const lilims_logit_bias *logit_bias;
  size_t n_logit_bias;
  int32_t context_policy; /* lilims_context_policy (default LILIMS_CONTEXT_STOP) */
  /* LILIMS_CONTEXT_SHIFT: tokens kept at the start of the sequence (a system
   * prompt); -1 (the default): the BOS token when the sequence starts with
   * one, else none.  At most n_ctx - 2.  The prompt itself must fit the
   * context; json_object / json_schema / tools output is planned to close
   * within the context and never shifts. */
  int32_t n_keep;
  /* Nonzero: prompt is the whole sequence the session should hold (a chat
   * rendered anew each turn, tokenized with add_bos as for an empty
   * session): the longest prefix of it already in the session is kept and
   * only the rest is evaluated (stats.n_reused_tokens).  0 (the default):
   * the prompt is appended after the session's tokens. */
  int32_t reuse_prefix;
  /* json_schema / tools: where the schema allows only certain bytes next
   * (keys, punctuation, the rest of an enum value with one choice left),
   * append the tokenizer's tokens for them without sampling and evaluate
   * them in one block (stats.n_forced_tokens).  The output is valid for the
   * schema either way; the forced bytes may be spelled with other tokens than
   * the model would have picked, so the text can differ from decoding without
   * it.  1 (the default) = on, 0 = off. */
  int32_t jump_forward;
  /* Prompt-lookup decoding: after each token, draft up to n_draft (at most
   * 64) tokens from an earlier occurrence of the latest tokens in the prompt
   * and output, verify them in one block and keep those sampling picks.  The
   * output is identical to n_draft 0 for every sampling setting; it is faster
   * when the answer copies from the prompt.  0 (the default) = off. */
  int32_t n_draft;
  /* Lazy constraint, with json_object, json_schema or tools: the output is
   * free text until it spells constraint_trigger (UTF-8; a special token
   * counts as its text, so "<tool_call>" may be one token), then one value
   * with the guarantees above; stats.constraint_triggered and
   * stats.value_offset say whether and where.  So an answer may be text, a
   * tool call, or both.  The free text is sampled as without a constraint,
   * except that a token ending the trigger must let a value start with its
   * remaining bytes.  When too few tokens are left for a value after the
   * trigger, generation ends there (stop_reason 0 or 3) without one.  NULL
   * (the default): the value starts at once, and room for it is checked
   * up front. */
  const char *constraint_trigger;
  /* Text appended after the value (e.g. "</tool_call>"; special tokens
   * parsed), streamed and counted as generated tokens but not evaluated.
   * Room for it is kept.  NULL (the default): none. */
  const char *constraint_close;
  /* Appended after 0.3.0 (a caller built against an older header gets the defaults). */
  /* With tools: the format of the call (a lilims_tool_format; default
   * GENERIC, whose answer is the object alone; lilims_model_tool_format
   * gives the model's own).  Describe the tools in the system message with
   * lilims_tools_prompt_format for the same format. */
  int32_t tool_format;
  /* With tools: 0 (the default) required: the answer is a call; the
   * format's opening mark (HERMES and SMOLLM2 "<tool_call>", PHI4
   * "<|tool_call|>") is appended to the prompt, so the generated text starts
   * after it, and the closing mark after the value.  1 auto: the answer is
   * text, or a call after the opening mark (a lazy constraint; GENERIC's
   * mark is "<tool_call>", LLAMA3's "<|python_tag|>", as the prompt of
   * lilims_tools_prompt_format with allow_text says).  Any other value is
   * LILIMS_ERR_INVALID_ARGUMENT; so is constraint_trigger with tools and
   * auto. */
  int32_t tool_choice;
} lilims_generate_params;

lilims_generate_params lilims_generate_default_params(void);

typedef struct lilims_generate_stats {
  size_t struct_size;
  int32_t n_prompt_tokens; /* the prompt's tokens (reuse_prefix: the whole sequence's) */
  int32_t n_generated_tokens;
  double prompt_seconds;   /* time to evaluate the prompt */
  double generate_seconds; /* from the first token sampled to the end of the call */
  /* 0 max_tokens, 1 end of generation token, 2 callback, 3 context full,
   * 4 cancelled, 5 a stop string */
  int32_t stop_reason;
  /* Appended after 0.1.0: */
  double mask_seconds;     /* computing token masks for json_schema / tools (part of generate_seconds) */
  /* Appended after 0.2.0: */
  double first_token_seconds; /* time to first token: from the call's start to the first
                                 token sampled (prompt evaluation + one sample) */
  /* (n_prompt_tokens - n_reused_tokens) / prompt_seconds; 0 when nothing was evaluated */
  double prompt_tokens_per_second;
  /* (n_generated_tokens - 1) / generate_seconds: every token after the first is one
   * decode step and one sample; 0 with fewer than two tokens */
  double decode_tokens_per_second;
  /* prompt tokens found in the session and not evaluated again (reuse_prefix) */
  int32_t n_reused_tokens;
  int32_t n_context_shifts; /* times LILIMS_CONTEXT_SHIFT shifted the context */
  /* The process's peak resident memory in bytes when the call ended (Linux
   * VmHWM / getrusage ru_maxrss): the whole process, mapped model weights
   * included, and never lower than at an earlier call.  0 when unknown. */
  uint64_t peak_resident_bytes;
  int32_t n_forced_tokens;   /* jump_forward: tokens appended unsampled (part of n_generated_tokens) */
  int32_t n_drafted_tokens;  /* n_draft: tokens drafted and evaluated for verification */
  int32_t n_accepted_tokens; /* n_draft: drafted tokens kept (part of n_generated_tokens) */
  int32_t constraint_triggered; /* constraint_trigger: 1 when the output spelled it */
  /* json_object / json_schema / tools: the byte offset in the generated text
   * where the value starts (0 without a trigger); -1 when no value started */
  int64_t value_offset;
} lilims_generate_stats;

/* Appends the prompt (raw text, tokenized here; may be empty) to the session,
 * then generates up to max_tokens tokens, calling on_token for each.  stats
 * may be NULL.  Every parameter is checked before the prompt is evaluated: a
 * rejected call leaves the session as it was.
 * json_object, json_schema, tools: the value closes within max_tokens and the
 * context (stop reason 1); when they leave no room for one the call fails up
 * front (LILIMS_ERR_INVALID_ARGUMENT for max_tokens, LILIMS_ERR_CONTEXT_FULL
 * for the context).  Only a cancel (4) or a callback stop (2) can leave it
 * open. */
lilims_status lilims_generate(lilims_session *session, const char *prompt,
                              const lilims_generate_params *params,
                              lilims_generate_stats *out_stats);

/* ---- engines: many requests, one model, one forward pass per step ----- */

/* An engine runs up to n_seq requests at once on one model: each step
 * samples the next token of every running request and evaluates them all in
 * one forward pass (every weight is read once for all of them), so several
 * clients share a model's throughput.  Each request has its own KV cache
 * slot; a request starts in the free slot whose cache shares the longest
 * prefix with its prompt, and reuses it.  Requests that find no free slot
 * wait in a queue of max_queued.  The engine steps on a thread of its own;
 * every callback of its requests runs on that thread, one at a time.
 *
 * Threads: lilims_engine_submit, lilims_engine_cancel, lilims_engine_n_queued
 * and lilims_engine_n_running may be called from any thread at once, the
 * engine's callbacks included.  lilims_engine_free is called once, from a
 * thread that is not running one of the engine's callbacks, after the app's
 * other calls on the engine have returned (a callback that submits while it
 * runs gets LILIMS_ERR_CANCELLED).
 *
 * Greedy text equals lilims_generate's on a session for the same prompt
 * tokens unless two tokens tie within float rounding (a session evaluates a
 * prompt as one block, the engine in steps). */
typedef struct lilims_engine lilims_engine;

typedef struct lilims_engine_params {
  size_t struct_size; /* sizeof(lilims_engine_params) */
  int32_t n_seq;      /* requests running at once, each with its own KV cache (default 4) */
  int32_t n_ctx;      /* context per request; 0 as lilims_session_params.n_ctx */
  int32_t n_threads;  /* 0 = all cores */
  int32_t n_batch;    /* rows a step evaluates at most (next tokens, then prompt blocks); 0 = 128 */
  int32_t max_queued; /* requests that may wait for a free slot, at least 1 (default 64) */
  int32_t kv_type;    /* a lilims_kv_type; 0 = LILIMS_KV_F16 */
  int32_t chunk_layers; /* transformer blocks per execution chunk; 0 = 3 */
  int32_t allow_ctx_beyond_train; /* as lilims_session_params */
} lilims_engine_params;

lilims_engine_params lilims_engine_default_params(void);

/* The engine keeps its own reference to the model: lilims_model_free may
 * come first.  LILIMS_ERR_OUT_OF_MEMORY when the n_seq KV caches do not
 * fit; LILIMS_ERR_INVALID_ARGUMENT for negative fields, n_seq < 1 or
 * max_queued < 1. */
lilims_status lilims_engine_create(lilims_model *model, const lilims_engine_params *params,
                                   lilims_engine **out_engine);

/* Cancels every request, queued or running, waits for their on_done
 * callbacks (status LILIMS_ERR_CANCELLED) and stops the engine's thread.
 * NULL does nothing. */
void lilims_engine_free(lilims_engine *engine);

/* How a request ended, passed to its on_done callback.  Pointers are valid
 * during the callback only. */
typedef struct lilims_engine_result {
  size_t struct_size;   /* sizeof(lilims_engine_result) as the library has it */
  uint64_t request_id;
  /* LILIMS_OK; LILIMS_ERR_CANCELLED after lilims_engine_cancel or
   * lilims_engine_free (text and tokens hold what was generated before);
   * another status when the request failed (error says why). */
  lilims_status status;
  const char *error;    /* "" with LILIMS_OK; NUL-terminated */
  const char *text;     /* the generated text, UTF-8, not NUL-terminated */
  size_t text_len;
  const lilims_token *tokens; /* the generated ids (end of generation excluded) */
  size_t n_tokens;
  int32_t n_prompt_tokens;
  int32_t n_reused_tokens; /* prompt tokens found in the slot's cache, not evaluated again */
  int32_t stop_reason;     /* as lilims_generate_stats.stop_reason */
  double first_token_seconds; /* from the request's start (leaving the queue) to its first token */
  double generate_seconds;    /* from the first token to the end */
} lilims_engine_result;

typedef void (*lilims_engine_done_callback)(void *user_data, const lilims_engine_result *result);

/* Queues a request: prompt (n > 0 token ids, BOS included when wanted; the
 * ids are copied) and gen (NULL: lilims_generate_default_params()).  gen's
 * sampling, max_tokens, stop strings, penalties, logit bias, json_object,
 * json_schema, tools (tool_format, tool_choice; with a required call the
 * format's opening mark, tokenized alone, is appended to the prompt),
 * constraint_trigger / constraint_close and jump_forward apply as in
 * lilims_generate; add_bos, parse_special and reuse_prefix do not (the
 * prompt is ids, and a slot's cached prefix is always reused).  Refused
 * with LILIMS_ERR_INVALID_ARGUMENT: context_policy LILIMS_CONTEXT_SHIFT (a
 * request stops at a full context), n_draft > 0, and gen->on_token (pass
 * on_token here); a prompt that leaves no room in n_ctx is
 * LILIMS_ERR_CONTEXT_FULL.  on_token (may be NULL) receives each token and
 * its text as in lilims_generate (nonzero stops the request, stop_reason
 * 2); on_done (may be NULL) runs exactly once when the request ends; both
 * on the engine's thread, with user_data.  *out_request_id (may be NULL)
 * gets the request's id (never 0), set before any callback runs.
 * LILIMS_ERR_BUSY when max_queued requests wait already;
 * LILIMS_ERR_CANCELLED from a callback while lilims_engine_free runs.  A
 * call that does not return LILIMS_OK queued nothing and runs no callback. */
lilims_status lilims_engine_submit(lilims_engine *engine, const lilims_token *prompt, size_t n,
                                   const lilims_generate_params *gen,
                                   lilims_token_callback on_token,
                                   lilims_engine_done_callback on_done, void *user_data,
                                   uint64_t *out_request_id);

/* Asks a request to end (any thread): a queued one ends without running,
 * a running one at its next step; its on_done gets LILIMS_ERR_CANCELLED
 * (a request already ending may still report LILIMS_OK).  An id of a
 * request that has ended is accepted and does nothing; an id the engine
 * never gave is LILIMS_ERR_INVALID_ARGUMENT. */
lilims_status lilims_engine_cancel(lilims_engine *engine, uint64_t request_id);

/* Requests waiting for a slot and requests running (-1 for NULL); a
 * snapshot that may change at once. */
int32_t lilims_engine_n_queued(const lilims_engine *engine);
int32_t lilims_engine_n_running(const lilims_engine *engine);

/* The system prompt lilims uses to describe tools to a model whose chat
 * template has no tool syntax of its own: one line of JSON per tool
 * ({"name", "description", "parameters"}), then the answer format.  Put it in
 * the system message; constrain the answer with lilims_generate_params.tools.
 * Same capacity rule as lilims_tokenize; NUL-terminated when it fits. */
lilims_status lilims_tools_prompt(const lilims_tool *tools, size_t n_tools, char *out_text,
                                  size_t capacity, size_t *out_len);

/* The tool format the model's chat template writes calls in: its
 * template's tool syntax, else its family's (SmolLM2's own for a ChatML
 * template without one), else GENERIC.  -1 for NULL. */
int32_t lilims_model_tool_format(const lilims_model *model);

/* The system text describing tools in `format` (lilims_tool_format);
 * allow_text: the answer may be plain text (tool_choice auto), which the
 * formats without an opening mark of their own then describe.  Same
 * capacity rule as lilims_tokenize. */
lilims_status lilims_tools_prompt_format(int32_t format, const lilims_tool *tools, size_t n_tools,
                                         int32_t allow_text, char *out_text, size_t capacity,
                                         size_t *out_len);

/* The calls an answer in `format` makes, as a JSON array of {"name":
 * string, "arguments": object} (LLAMA3's "parameters" become "arguments"),
 * "[]" when it makes none (plain text).  text: the generated text (with or
 * without the opening mark a required call's prompt ended with).
 * LILIMS_ERR_BAD_FORMAT when a call does not parse.  Same capacity rule as
 * lilims_tokenize. */
lilims_status lilims_parse_tool_calls(int32_t format, const char *text, size_t text_len,
                                      char *out_json, size_t capacity, size_t *out_len);

/* Asks the eval/generate running on the session at this moment to stop soon
 * (any thread).  The call it interrupts returns LILIMS_ERR_CANCELLED (generate
 * returns LILIMS_OK with stop_reason 4 and keeps the tokens it made).  A
 * cancel while no call runs does nothing: it never affects a later call.  A
 * call is running from its entry until it returns, so a cancel made once
 * lilims_generate was entered stops it (before its prompt if need be); one
 * arriving as the call finishes is dropped with it. */
void lilims_session_cancel(lilims_session *session);

/* Images (LLaVA-style vision).  A lilims_mmproj is a multimodal projector
 * file as llama.cpp's tools write it (a CLIP vision tower and a LLaVA
 * projector: general.architecture "clip", v.* / mm.* tensors) for the text
 * model it was made with.  It may be shared by sessions on several threads
 * (calls using it run one at a time). */
typedef struct lilims_mmproj lilims_mmproj;

/* Opens and maps the projector file.  LILIMS_ERR_IO / BAD_FORMAT /
 * UNSUPPORTED / MISSING as lilims_model_open. */
lilims_status lilims_mmproj_open(const char *path, lilims_mmproj **out);
void lilims_mmproj_free(lilims_mmproj *mmproj);

/* Evaluates an image after the session's tokens: RGB8 pixels (row y starts
 * at rgb + y * stride, pixel x at + 3 * x, bytes R, G, B) are resized and
 * cropped as CLIP's processor does, encoded, and their embedding rows run as
 * a prefill block at the next positions.  *out_n_positions (if not NULL)
 * gets the positions the image took.  Put the text before the image in the
 * session first (lilims_session_eval or lilims_generate with max_tokens 0),
 * and continue with lilims_generate and the text after it.
 * LILIMS_ERR_INVALID_ARGUMENT for NULL pointers, a zero or too large size
 * (a side above 16384 or more than 2^26 pixels), a stride below 3 * width, or
 * a projector whose output width is not the model's embedding width;
 * LILIMS_ERR_CONTEXT_FULL (nothing evaluated) when the image does not fit.
 * A saved state keeps the image's rows (loading it needs no projector); a
 * context shift may not move them (keep the image within n_keep). */
lilims_status lilims_session_eval_image(lilims_session *session, lilims_mmproj *mmproj,
                                        const uint8_t *rgb, int32_t width, int32_t height,
                                        size_t stride, int32_t *out_n_positions);

/* Seconds the projector spent preprocessing and encoding the last image it
 * handled (0 before any). */
double lilims_mmproj_last_encode_seconds(const lilims_mmproj *mmproj);

#ifdef __cplusplus
}
#endif

#endif /* LILIMS_LILIMS_H */
