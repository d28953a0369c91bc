// The C API: wraps runtime::Model / runtime::Session, turns every exception
// into a status plus a message (lilims_last_error), never lets one cross.
// Engines are in c_api_engine.cpp.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "kernels/cpu.h"
#include "lilims/lilims.h"
#include "models/arch.h"
#include "runtime/capi/c_api_internal.h"
#include "runtime/engine.h"
#include "runtime/manifest.h"
#include "runtime/constrain/tool_format.h"
#include "runtime/constrain/tools.h"
#include "runtime/vision.h"
#include "tokenizer/chat.h"

using lilims::Error;
using lilims::runtime::Model;
using lilims::runtime::Session;
using lilims::capi::generate_options;
using lilims::capi::guarded;
using lilims::capi::null_arg;
using lilims::capi::set_error;

struct lilims_adapter {
  std::shared_ptr<const Model> model;  // declared first: outlives impl
  std::shared_ptr<const lilims::runtime::Adapter> impl;
};

struct lilims_session {
  std::shared_ptr<const Model> model;  // declared first: outlives impl
  // The adapters impl applies, kept alive while it does.
  std::vector<std::shared_ptr<const lilims::runtime::Adapter>> adapters;
  std::unique_ptr<Session> impl;
};

namespace {

// The chat template names lilims knows, for messages.
std::string template_names() {
  std::string s;
  for (const std::string& n : lilims::tok::chat_template_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Copies bytes into a caller buffer under the capacity rule of lilims.h.
lilims_status copy_out(const char* fn, const std::string& s, char* out, size_t capacity,
                       size_t* out_len, bool nul) {
  if (out_len) *out_len = s.size();
  if (!out && capacity > 0) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[") + fn +
                                                      "] the buffer is NULL but its capacity is " +
                                                      std::to_string(capacity));
  }
  const size_t need = s.size() + (nul ? 1 : 0);
  if (need > capacity) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[") + fn + "] buffer of " +
                                                      std::to_string(capacity) +
                                                      " bytes is too small: " +
                                                      std::to_string(need) + " needed");
  }
  if (!s.empty()) std::memcpy(out, s.data(), s.size());
  if (nul) out[s.size()] = '\0';
  return LILIMS_OK;
}

lilims::runtime::ToolFormat tool_format_of(const char* fn, int32_t format) {
  if (format < LILIMS_TOOL_FORMAT_GENERIC || format > LILIMS_TOOL_FORMAT_PHI4) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[") + fn + "] tool_format " + std::to_string(format) +
                                                 " is not a lilims_tool_format");
  }
  return static_cast<lilims::runtime::ToolFormat>(format);
}

std::vector<lilims::runtime::Tool> to_tools(const lilims_tool* tools, size_t n) {
  std::vector<lilims::runtime::Tool> out;
  for (size_t i = 0; i < n; ++i) {
    if (!tools[i].name) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[tools] tool " + std::to_string(i) + " has a NULL name");
    }
    out.push_back({tools[i].name, tools[i].description ? tools[i].description : "",
                   tools[i].parameters ? tools[i].parameters : ""});
  }
  return out;
}

// The options lilims_model_params asks for.
lilims_status model_options(const lilims_model_params* params,
                            lilims::runtime::ModelOptions& opt) {
  if (!params) return LILIMS_OK;
  if (!LILIMS_HAS_FIELD(params, lilims_model_params, use_mmap)) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[model_open] params.struct_size is not set");
  }
  opt.use_mmap = params->use_mmap != 0;
  if (LILIMS_HAS_FIELD(params, lilims_model_params, progress_user_data) && params->progress) {
    const lilims_progress_callback cb = params->progress;
    void* ud = params->progress_user_data;
    opt.progress = [cb, ud](float fraction) { return cb(ud, fraction) != 0; };
  }
  if (LILIMS_HAS_FIELD(params, lilims_model_params, memory_budget)) {
    opt.memory_budget = params->memory_budget;
  }
  if (LILIMS_HAS_FIELD(params, lilims_model_params, manifest_check_file_hash) &&
      params->manifest_path) {
    opt.manifest_path = params->manifest_path;
    opt.manifest_file_hash = params->manifest_check_file_hash != 0;
  }
  return LILIMS_OK;
}

// Opens a model with `open` (from a path, memory or a descriptor) and logs the load.
template <typename Open>
lilims_status open_model(const std::string& name, const lilims_model_params* params,
                         lilims_model** out_model, Open&& open) {
  return guarded([&] {
    lilims::runtime::ModelOptions opt;
    if (const lilims_status st = model_options(params, opt); st != LILIMS_OK) return st;
    const auto t0 = std::chrono::steady_clock::now();
    auto m = std::make_unique<lilims_model>();
    m->impl = std::shared_ptr<const Model>(open(opt));
    m->file_bytes = m->impl->weights().file->file_size();
    if (lilims::log_enabled(LILIMS_LOG_INFO)) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const auto& file = *m->impl->weights().file;
      char line[160];
      std::snprintf(line, sizeof line,
                    ": %.1f MiB, %llu parameters, loaded in %.1f ms (%s), lilims %s",
                    m->file_bytes / (1024.0 * 1024.0),
                    (unsigned long long)m->impl->weights().n_params, ms,
                    file.image_on_heap() ? "read" : name == "<memory>" ? "in place" : "mapped",
                    lilims_version_string());
      lilims::log(LILIMS_LOG_INFO, "[model_open] " + name + line);
    }
    *out_model = m.release();
    return LILIMS_OK;
  });
}

// The options lilims_session_params asks for.
lilims_status session_options(const char* fn, const lilims_session_params* params,
                              lilims::runtime::SessionOptions& opt) {
  if (!params) return LILIMS_OK;
  const std::string area = std::string("[") + fn + "] ";
  // Callers built against 0.1.0's header pass the struct without the fields
  // appended since: they get their defaults.
  if (!LILIMS_HAS_FIELD(params, lilims_session_params, n_threads)) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, area + "params.struct_size is not set");
  }
  if (params->n_ctx < 0 || params->n_threads < 0) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, area + "n_ctx and n_threads must not be negative");
  }
  opt.n_ctx = params->n_ctx;
  opt.n_threads = params->n_threads;
  opt.allow_ctx_beyond_train = LILIMS_HAS_FIELD(params, lilims_session_params, allow_ctx_beyond_train) &&
                               params->allow_ctx_beyond_train != 0;
  if (LILIMS_HAS_FIELD(params, lilims_session_params, memory_budget)) {
    opt.memory_budget = params->memory_budget;
  }
  if (LILIMS_HAS_FIELD(params, lilims_session_params, chunk_layers)) {
    if (params->n_batch < 0 || params->chunk_layers < 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       area + "n_batch and chunk_layers must not be negative");
    }
    if (params->n_batch > 0) opt.n_batch = params->n_batch;
    if (params->chunk_layers > 0) opt.chunk_layers = params->chunk_layers;
    switch (params->kv_type) {
      case LILIMS_KV_F16: opt.kv_type = lilims::quant::Type::F16; break;
      case LILIMS_KV_Q8_0: opt.kv_type = lilims::quant::Type::Q8_0; break;
      default:
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         area + "kv_type " + std::to_string(params->kv_type) +
                             " is not a lilims_kv_type (LILIMS_KV_F16 0, LILIMS_KV_Q8_0 1)");
    }
  }
  if (LILIMS_HAS_FIELD(params, lilims_session_params, kv_commit)) {
    switch (params->kv_commit) {
      case LILIMS_KV_COMMIT_DEFAULT: break;
      case LILIMS_KV_COMMIT_SYNC: opt.kv_commit = lilims::graph::KvCommit::sync; break;
      case LILIMS_KV_COMMIT_ASYNC: opt.kv_commit = lilims::graph::KvCommit::async; break;
      default:
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         area + "kv_commit " + std::to_string(params->kv_commit) +
                             " is not a lilims_kv_commit (LILIMS_KV_COMMIT_DEFAULT 0, "
                             "LILIMS_KV_COMMIT_SYNC 1, LILIMS_KV_COMMIT_ASYNC 2)");
    }
  }
  return LILIMS_OK;
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

}  // namespace

namespace lilims::capi {

lilims_status generate_options(const char* fn, const lilims_generate_params* params,
                               lilims::runtime::GenerateOptions& opt, std::string& prompt_tail,
                               bool& reuse_prefix) {
  const std::string area = std::string("[") + fn + "] ";
  // Callers built against 0.1.0's header pass the structs without the
  // fields appended since: those take their defaults.
  constexpr size_t kParams010 = offsetof(lilims_generate_params, json_schema);
  if (params->struct_size < kParams010) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT, area + "params.struct_size is not set");
  }
  const bool v020 = LILIMS_HAS_FIELD(params, lilims_generate_params, n_tools);
  const bool loop_fields = LILIMS_HAS_FIELD(params, lilims_generate_params, reuse_prefix);
  const char* schema = v020 ? params->json_schema : nullptr;
  const size_t n_tools = v020 ? params->n_tools : 0;
  if (n_tools > 0 && !params->tools) return null_arg(fn, "tools");
  if ((schema != nullptr) + (n_tools > 0) + (params->json_object != 0) > 1) {
    return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                     area + "json_object, json_schema and tools exclude each other");
  }
  opt.max_tokens = params->max_tokens;
  const lilims_sampling_params& sp = params->sampling;
  opt.sampling.temperature = sp.temperature;
  opt.sampling.top_k = sp.top_k;
  opt.sampling.top_p = sp.top_p;
  opt.sampling.min_p = sp.min_p;
  opt.sampling.repeat_penalty = sp.repeat_penalty;
  opt.sampling.repeat_last_n = sp.repeat_last_n;
  opt.sampling.seed = sp.seed;
  opt.add_bos = params->add_bos != 0;
  opt.parse_special = params->parse_special != 0;
  opt.json = params->json_object != 0;
  if (schema) {
    if (!*schema) return set_error(LILIMS_ERR_INVALID_ARGUMENT, area + "json_schema is empty");
    opt.json_schema = schema;
  }
  if (n_tools > 0) {
    int32_t format = LILIMS_TOOL_FORMAT_GENERIC, choice = 0;
    if (LILIMS_HAS_FIELD(params, lilims_generate_params, tool_choice)) {
      format = params->tool_format;
      choice = params->tool_choice;
    }
    if (choice != 0 && choice != 1) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, area + "tool_choice " + std::to_string(choice) +
                                                        " is neither 0 (required) nor 1 (auto)");
    }
    const lilims::runtime::ToolPrompt tp =
        lilims::runtime::tool_prompt(tool_format_of(fn, format), to_tools(params->tools, n_tools), choice == 1);
    opt.json_schema = tp.schema;
    opt.constraint_close = tp.close;
    if (choice == 1) {
      opt.constraint_trigger = tp.trigger;
    } else {
      prompt_tail = tp.trigger;  // the answer opens with the mark: the prompt ends with it
    }
  }
  if (loop_fields) {
    if (params->n_stop > 0 && !params->stop) return null_arg(fn, "stop");
    for (size_t i = 0; i < params->n_stop; ++i) {
      if (!params->stop[i]) {
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         area + "stop string " + std::to_string(i) + " is NULL");
      }
      opt.stop.emplace_back(params->stop[i]);
    }
    opt.sampling.frequency_penalty = params->frequency_penalty;
    opt.sampling.presence_penalty = params->presence_penalty;
    if (params->n_logit_bias > 0 && !params->logit_bias) return null_arg(fn, "logit_bias");
    for (size_t i = 0; i < params->n_logit_bias; ++i) {
      opt.sampling.logit_bias.emplace_back(params->logit_bias[i].token, params->logit_bias[i].bias);
    }
    if (params->context_policy != LILIMS_CONTEXT_STOP &&
        params->context_policy != LILIMS_CONTEXT_SHIFT) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       area + "context_policy " + std::to_string(params->context_policy) +
                           " is neither LILIMS_CONTEXT_STOP (0) nor LILIMS_CONTEXT_SHIFT (1)");
    }
    opt.context_policy = params->context_policy == LILIMS_CONTEXT_SHIFT
                             ? lilims::runtime::ContextPolicy::shift
                             : lilims::runtime::ContextPolicy::stop;
    opt.n_keep = params->n_keep < 0 ? -1 : params->n_keep;
    reuse_prefix = params->reuse_prefix != 0;
  }
  if (LILIMS_HAS_FIELD(params, lilims_generate_params, jump_forward)) {
    opt.jump_forward = params->jump_forward != 0;
  }
  if (LILIMS_HAS_FIELD(params, lilims_generate_params, n_draft)) opt.n_draft = params->n_draft;
  if (LILIMS_HAS_FIELD(params, lilims_generate_params, constraint_close)) {
    if (params->constraint_trigger && n_tools > 0 && !opt.constraint_trigger.empty() &&
        opt.constraint_trigger != params->constraint_trigger) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       area + "constraint_trigger with tools and tool_choice auto: the format's "
                       "opening mark is the trigger");
    }
    if (params->constraint_trigger) opt.constraint_trigger = params->constraint_trigger;
    if (params->constraint_close) opt.constraint_close = params->constraint_close;
  }
  return LILIMS_OK;
}

}  // namespace lilims::capi

extern "C" {

const char* lilims_last_error(void) { return lilims::capi::last_error().c_str(); }

const char* lilims_status_name(lilims_status status) {
  switch (status) {
    case LILIMS_OK: return "ok";
    case LILIMS_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LILIMS_ERR_IO: return "i/o error";
    case LILIMS_ERR_BAD_FORMAT: return "bad format";
    case LILIMS_ERR_UNSUPPORTED: return "unsupported";
    case LILIMS_ERR_MISSING: return "missing";
    case LILIMS_ERR_OUT_OF_MEMORY: return "out of memory";
    case LILIMS_ERR_CONTEXT_FULL: return "context full";
    case LILIMS_ERR_CANCELLED: return "cancelled";
    case LILIMS_ERR_INTERNAL: return "internal error";
    case LILIMS_ERR_BUSY: return "busy";
  }
  return "unknown status";
}

const char* lilims_version_string(void) {
  static const std::string v = std::to_string(LILIMS_VERSION_MAJOR) + "." +
                               std::to_string(LILIMS_VERSION_MINOR) + "." +
                               std::to_string(LILIMS_VERSION_PATCH) + " (isa: " +
                               lilims::kernels::kernel_path_name() + ")";
  return v.c_str();
}

void lilims_version(int* major, int* minor, int* patch) {
  if (major) *major = LILIMS_VERSION_MAJOR;
  if (minor) *minor = LILIMS_VERSION_MINOR;
  if (patch) *patch = LILIMS_VERSION_PATCH;
}

int lilims_abi_version(void) { return LILIMS_ABI_VERSION; }

void lilims_set_log_callback(lilims_log_callback callback, void* user_data,
                             lilims_log_level min_level) {
  lilims::set_log_callback(callback, user_data, min_level);
}

lilims_status lilims_model_check_manifest(const lilims_model* model, const char* manifest_path,
                                          int32_t check_file_hash) {
  if (!model) return null_arg("model_check_manifest", "model");
  if (!manifest_path) return null_arg("model_check_manifest", "manifest_path");
  return guarded([&] {
    lilims::runtime::ManifestCheck check;
    check.file_hash = check_file_hash != 0;
    lilims::runtime::check_manifest(*model->impl->weights().file,
                                    lilims::runtime::read_manifest_file(manifest_path), check);
    return LILIMS_OK;
  });
}

lilims_model_params lilims_model_default_params(void) {
  lilims_model_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.use_mmap = 1;
  return p;
}

lilims_status lilims_model_open(const char* path, const lilims_model_params* params,
                                lilims_model** out_model) {
  if (!out_model) return null_arg("model_open", "out_model");
  *out_model = nullptr;
  if (!path) return null_arg("model_open", "path");
  return open_model(path, params, out_model,
                    [&](const lilims::runtime::ModelOptions& opt) { return Model::open(path, opt); });
}

lilims_status lilims_model_open_memory(const void* data, size_t size,
                                       const lilims_model_params* params,
                                       lilims_model** out_model) {
  if (!out_model) return null_arg("model_open_memory", "out_model");
  *out_model = nullptr;
  if (!data) return null_arg("model_open_memory", "data");
  return open_model("<memory>", params, out_model, [&](const lilims::runtime::ModelOptions& opt) {
    return Model::open_memory(data, size, opt);
  });
}

lilims_status lilims_model_open_fd(int fd, uint64_t offset, uint64_t size,
                                   const lilims_model_params* params, lilims_model** out_model) {
  if (!out_model) return null_arg("model_open_fd", "out_model");
  *out_model = nullptr;
  const std::string name = "<fd " + std::to_string(fd) + " at offset " + std::to_string(offset) + ">";
  return open_model(name, params, out_model, [&](const lilims::runtime::ModelOptions& opt) {
    return Model::open_fd(fd, offset, size, opt);
  });
}

void lilims_model_free(lilims_model* model) { delete model; }

namespace {
static lilims_status fill_model_info(const lilims_model& model, lilims_model_info* info);
}  // namespace

lilims_status lilims_model_get_info(const lilims_model* model, lilims_model_info* info) {
  if (!model) return null_arg("model_get_info", "model");
  if (!info) return null_arg("model_get_info", "out_info");
  return guarded([&] {
    const size_t size = info->struct_size;
    if (size < offsetof(lilims_model_info, weight_bytes_mapped)) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[model_get_info] info.struct_size must be sizeof(lilims_model_info)");
    }
    lilims_model_info full;
    const lilims_status st = fill_model_info(*model, &full);
    std::memcpy(info, &full, std::min(size, sizeof full));
    info->struct_size = size;
    return st;
  });
}

namespace {

static lilims_status fill_model_info(const lilims_model& model, lilims_model_info* info) {
  std::memset(info, 0, sizeof *info);
  const Model& m = *model.impl;
  const auto& hp = m.hparams();
  copy_str(info->architecture, sizeof info->architecture, lilims::models::arch_name(hp.arch));
  copy_str(info->name, sizeof info->name, m.name());
  info->n_vocab = hp.n_vocab;
  info->n_ctx_train = hp.n_ctx_train;
  info->n_embd = hp.n_embd;
  info->n_layer = hp.n_layer;
  info->n_head = hp.n_head;
  info->n_head_kv = hp.n_head_kv;
  info->n_ff = hp.n_ff;
  info->n_params = m.weights().n_params;
  info->file_bytes = model.file_bytes;
  info->bos_token = m.tokenizer().bos();
  info->eos_token = m.tokenizer().eos();
  info->add_bos = m.tokenizer().add_bos() ? 1 : 0;
  info->has_chat_template = m.chat_template().empty() ? 0 : 1;
  const lilims::models::Model& w = m.weights();
  info->weight_bytes_mapped = w.mapped_weight_bytes();
  info->weight_bytes_copied = w.repacked_bytes + w.requantized_bytes;
  copy_str(info->weight_copy_reason, sizeof info->weight_copy_reason, lilims::models::describe_copies(w));
  return LILIMS_OK;
}

}  // namespace

lilims_status lilims_tokenize(const lilims_model* model, const char* text, size_t text_len,
                              int32_t add_bos, int32_t parse_special, lilims_token* out_tokens,
                              size_t capacity, size_t* out_count) {
  if (!model) return null_arg("tokenize", "model");
  if (!text && text_len) return null_arg("tokenize", "text");
  if (!out_count) return null_arg("tokenize", "out_count");
  return guarded([&] {
    const auto ids = model->impl->tokenizer().encode(std::string_view(text ? text : "", text_len),
                                                     add_bos != 0, parse_special != 0);
    *out_count = ids.size();
    if (!out_tokens && capacity > 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[tokenize] out_tokens is NULL but its "
                                                    "capacity is " + std::to_string(capacity));
    }
    if (ids.size() > capacity) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[tokenize] room for " +
                                                        std::to_string(capacity) + " tokens, " +
                                                        std::to_string(ids.size()) + " needed");
    }
    if (!ids.empty()) std::memcpy(out_tokens, ids.data(), ids.size() * sizeof(lilims_token));
    return LILIMS_OK;
  });
}

lilims_status lilims_token_to_piece(const lilims_model* model, lilims_token token, char* out,
                                    size_t capacity, size_t* out_len) {
  if (!model) return null_arg("token_to_piece", "model");
  return guarded([&] {
    const auto& tk = model->impl->tokenizer();
    if (token < 0 || token >= tk.n_vocab()) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[token_to_piece] token " + std::to_string(token) + " is out of range");
    }
    return copy_out("token_to_piece", tk.token_to_piece(token), out, capacity, out_len, false);
  });
}

lilims_status lilims_detokenize(const lilims_model* model, const lilims_token* tokens,
                                size_t n_tokens, char* out, size_t capacity, size_t* out_len) {
  if (!model) return null_arg("detokenize", "model");
  if (!tokens && n_tokens) return null_arg("detokenize", "tokens");
  return guarded([&] {
    const auto& tk = model->impl->tokenizer();
    std::vector<int32_t> ids(tokens, tokens + n_tokens);
    for (int32_t t : ids) {
      if (t < 0 || t >= tk.n_vocab()) {
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         "[detokenize] token " + std::to_string(t) + " is out of range");
      }
    }
    return copy_out("detokenize", tk.decode(ids), out, capacity, out_len, false);
  });
}

lilims_status lilims_chat_apply_template(const lilims_model* model, const char* template_name,
                                         const lilims_chat_message* messages, size_t n_messages,
                                         int32_t add_generation_prompt, char* out_text,
                                         size_t capacity, size_t* out_len) {
  if (!model) return null_arg("chat_apply_template", "model");
  if (!messages && n_messages) return null_arg("chat_apply_template", "messages");
  return guarded([&] {
    std::string name = template_name ? template_name : model->impl->chat_template();
    if (name.empty()) {
      return set_error(LILIMS_ERR_UNSUPPORTED,
                       "[chat_apply_template] the model has no chat template lilims knows; "
                       "name one (" + template_names() + ")");
    }
    std::vector<lilims::tok::ChatMessage> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      if (!messages[i].role || !messages[i].content) {
        return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[chat_apply_template] message " +
                                                          std::to_string(i) +
                                                          " has a NULL role or content");
      }
      msgs.push_back({messages[i].role, messages[i].content});
    }
    const std::string text =
        lilims::tok::apply_chat_template(name, msgs, add_generation_prompt != 0);
    return copy_out("chat_apply_template", text, out_text, capacity, out_len, true);
  });
}

lilims_status lilims_chat_tokenize(const lilims_model* model, const char* template_name,
                                   const lilims_chat_message* messages, size_t n_messages,
                                   int32_t add_generation_prompt, int32_t add_bos,
                                   int32_t special_in_messages, lilims_token* out_tokens,
                                   size_t capacity, size_t* out_count) {
  if (!model) return null_arg("chat_tokenize", "model");
  if (!messages && n_messages) return null_arg("chat_tokenize", "messages");
  if (!out_count) return null_arg("chat_tokenize", "out_count");
  return guarded([&] {
    *out_count = 0;
    const std::string name = template_name ? template_name : model->impl->chat_template();
    if (name.empty()) {
      return set_error(LILIMS_ERR_UNSUPPORTED,
                       "[chat_tokenize] the model has no chat template lilims knows; "
                       "name one (" + template_names() + ")");
    }
    std::vector<lilims::tok::ChatMessage> msgs;
    for (size_t i = 0; i < n_messages; ++i) {
      if (!messages[i].role || !messages[i].content) {
        return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[chat_tokenize] message " +
                                                          std::to_string(i) +
                                                          " has a NULL role or content");
      }
      msgs.push_back({messages[i].role, messages[i].content});
    }
    const auto ids =
        lilims::tok::encode_chat(model->impl->tokenizer(), name, msgs, add_generation_prompt != 0,
                                 add_bos != 0, special_in_messages != 0);
    *out_count = ids.size();
    if (!out_tokens && capacity > 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[chat_tokenize] out_tokens is NULL but its "
                                                    "capacity is " + std::to_string(capacity));
    }
    if (ids.size() > capacity) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[chat_tokenize] room for " +
                                                        std::to_string(capacity) + " tokens, " +
                                                        std::to_string(ids.size()) + " needed");
    }
    if (!ids.empty()) std::memcpy(out_tokens, ids.data(), ids.size() * sizeof(lilims_token));
    return LILIMS_OK;
  });
}

lilims_session_params lilims_session_default_params(void) {
  lilims_session_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  return p;
}

lilims_status lilims_session_create(lilims_model* model, const lilims_session_params* params,
                                    lilims_session** out_session) {
  if (!out_session) return null_arg("session_create", "out_session");
  *out_session = nullptr;
  if (!model) return null_arg("session_create", "model");
  return guarded([&] {
    lilims::runtime::SessionOptions opt;
    if (const lilims_status st = session_options("session_create", params, opt); st != LILIMS_OK) {
      return st;
    }
    auto s = std::make_unique<lilims_session>();
    s->model = model->impl;
    s->impl = std::make_unique<Session>(*s->model, opt);
    const int32_t n_train = s->model->hparams().n_ctx_train;
    if (opt.n_ctx == 0 && s->impl->n_ctx() < n_train && lilims::log_enabled(LILIMS_LOG_WARN)) {
      lilims::log(LILIMS_LOG_WARN, "[session_create] n_ctx 0: the context is " +
                                       std::to_string(s->impl->n_ctx()) + " of the model's " +
                                       std::to_string(n_train) +
                                       " trained tokens, as more would not fit " +
                                       (opt.memory_budget ? "the memory budget"
                                                          : "the memory available"));
    }
    if (lilims::log_enabled(LILIMS_LOG_INFO)) {
      lilims::log(LILIMS_LOG_INFO, "[session_create] n_ctx " + std::to_string(s->impl->n_ctx()) +
                                       ", " + std::to_string(s->impl->n_threads()) + " threads");
    }
    *out_session = s.release();
    return LILIMS_OK;
  });
}

void lilims_session_free(lilims_session* session) { delete session; }

lilims_status lilims_session_memory_estimate(const lilims_model* model,
                                             const lilims_session_params* params,
                                             uint64_t* out_bytes) {
  if (!model) return null_arg("session_memory_estimate", "model");
  if (!out_bytes) return null_arg("session_memory_estimate", "out_bytes");
  *out_bytes = 0;
  return guarded([&] {
    lilims::runtime::SessionOptions opt;
    if (const lilims_status st = session_options("session_memory_estimate", params, opt);
        st != LILIMS_OK) {
      return st;
    }
    opt.n_ctx = lilims::runtime::resolve_n_ctx(*model->impl, opt);
    *out_bytes = lilims::runtime::session_memory_estimate(*model->impl, opt);
    return LILIMS_OK;
  });
}

lilims_status lilims_session_memory(const lilims_session* session, lilims_memory_report* out) {
  if (!session) return null_arg("session_memory", "session");
  if (!out) return null_arg("session_memory", "out");
  return guarded([&] {
    if (out->struct_size < sizeof(lilims_memory_report)) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[session_memory] out.struct_size must be sizeof(lilims_memory_report)");
    }
    const Session::Call call(*session->impl);
    const lilims::runtime::MemoryReport r = session->impl->memory_report();
    out->weights_mapped = r.weights_mapped;
    out->weights_copied = r.weights_copied;
    out->kv_resident = r.kv_resident;
    out->kv_full = r.kv_full;
    out->scratch = r.scratch;
    out->host = r.host;
    out->total = r.total();
    return LILIMS_OK;
  });
}

lilims_status lilims_adapter_load(lilims_model* model, const char* path, lilims_adapter** out_adapter) {
  if (!out_adapter) return null_arg("adapter_load", "out_adapter");
  *out_adapter = nullptr;
  if (!model) return null_arg("adapter_load", "model");
  if (!path) return null_arg("adapter_load", "path");
  return guarded([&] {
    auto a = std::make_unique<lilims_adapter>();
    a->model = model->impl;
    a->impl = lilims::runtime::Adapter::open(*a->model, path);
    *out_adapter = a.release();
    return LILIMS_OK;
  });
}

void lilims_adapter_free(lilims_adapter* adapter) { delete adapter; }

int32_t lilims_adapter_tool_format(const lilims_adapter* adapter) {
  if (!adapter || !adapter->impl->has_tool_format()) return -1;
  return (int32_t)adapter->impl->tool_format();
}

lilims_status lilims_session_set_adapters(lilims_session* session, lilims_adapter* const* adapters,
                                          const float* scales, size_t n) {
  if (!session) return null_arg("session_set_adapters", "session");
  if (n > 0 && !adapters) return null_arg("session_set_adapters", "adapters");
  return guarded([&] {
    std::vector<lilims::runtime::AdapterUse> uses;
    std::vector<std::shared_ptr<const lilims::runtime::Adapter>> keep;
    for (size_t i = 0; i < n; ++i) {
      if (!adapters[i]) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session_set_adapters] adapters[" + std::to_string(i) + "] is NULL");
      }
      uses.push_back({adapters[i]->impl.get(), scales ? scales[i] : 1.0f});
      keep.push_back(adapters[i]->impl);
    }
    session->impl->set_adapters(uses);
    session->adapters.swap(keep);
    return LILIMS_OK;
  });
}

lilims_status lilims_session_reset(lilims_session* session) {
  if (!session) return null_arg("session_reset", "session");
  return guarded([&] {
    session->impl->reset();
    return LILIMS_OK;
  });
}

int32_t lilims_session_n_past(const lilims_session* session) {
  if (!session) return 0;
  try {
    const Session::Call call(*session->impl);
    return session->impl->n_past();
  } catch (const Error&) {
    return -1;  // busy
  }
}

int32_t lilims_session_n_ctx(const lilims_session* session) {
  return session ? session->impl->n_ctx() : 0;
}

lilims_status lilims_session_eval(lilims_session* session, const lilims_token* tokens,
                                  size_t n_tokens) {
  if (!session) return null_arg("session_eval", "session");
  if (!tokens && n_tokens) return null_arg("session_eval", "tokens");
  return guarded([&] {
    session->impl->eval(std::vector<int32_t>(tokens, tokens + n_tokens));
    return LILIMS_OK;
  });
}

const float* lilims_session_logits(const lilims_session* session) {
  if (!session) return nullptr;
  try {
    const Session::Call call(*session->impl);
    return session->impl->has_logits() ? session->impl->logits().data() : nullptr;
  } catch (const Error&) {
    return nullptr;  // busy
  }
}

// ---- session state ----

lilims_status lilims_session_truncate(lilims_session* session, int32_t n_keep) {
  if (!session) return null_arg("session_truncate", "session");
  return guarded([&] {
    session->impl->truncate(n_keep);
    return LILIMS_OK;
  });
}

lilims_status lilims_session_tokens(const lilims_session* session, lilims_token* out_tokens,
                                    size_t capacity, size_t* out_count) {
  if (!session) return null_arg("session_tokens", "session");
  if (!out_count) return null_arg("session_tokens", "out_count");
  return guarded([&] {
    const Session::Call call(*session->impl);
    const std::vector<int32_t>& ids = session->impl->tokens();
    *out_count = ids.size();
    if (!out_tokens && capacity > 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[session_tokens] out_tokens is NULL but its "
                                                    "capacity is " + std::to_string(capacity));
    }
    if (ids.size() > capacity) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[session_tokens] room for " +
                                                        std::to_string(capacity) + " tokens, " +
                                                        std::to_string(ids.size()) + " needed");
    }
    if (!ids.empty()) std::memcpy(out_tokens, ids.data(), ids.size() * sizeof(lilims_token));
    return LILIMS_OK;
  });
}

lilims_status lilims_session_state_size(const lilims_session* session, size_t* out_size) {
  if (!session) return null_arg("session_state_size", "session");
  if (!out_size) return null_arg("session_state_size", "out_size");
  return guarded([&] {
    const uint64_t n = session->impl->state_size();
    if (n > SIZE_MAX) {
      return set_error(LILIMS_ERR_OUT_OF_MEMORY, "[session_state_size] the state's " +
                                                     std::to_string(n) +
                                                     " bytes exceed the address space");
    }
    *out_size = (size_t)n;
    return LILIMS_OK;
  });
}

lilims_status lilims_session_save_state(lilims_session* session, void* buf, size_t capacity,
                                        size_t* out_written) {
  if (out_written) *out_written = 0;
  if (!session) return null_arg("session_save_state", "session");
  return guarded([&] {
    const uint64_t need = session->impl->state_size();
    if (out_written) *out_written = need > SIZE_MAX ? SIZE_MAX : (size_t)need;
    if (!buf && capacity > 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[session_save_state] buf is NULL but its "
                                                    "capacity is " + std::to_string(capacity));
    }
    const size_t n = session->impl->save_state(buf, capacity);
    if (out_written) *out_written = n;
    return LILIMS_OK;
  });
}

lilims_status lilims_session_load_state(lilims_session* session, const void* buf, size_t size) {
  if (!session) return null_arg("session_load_state", "session");
  if (!buf && size) return null_arg("session_load_state", "buf");
  return guarded([&] {
    session->impl->load_state(buf, size);
    return LILIMS_OK;
  });
}

lilims_status lilims_session_save_state_file(lilims_session* session, const char* path) {
  if (!session) return null_arg("session_save_state_file", "session");
  if (!path) return null_arg("session_save_state_file", "path");
  return guarded([&] {
    session->impl->save_state_file(path);
    return LILIMS_OK;
  });
}

lilims_status lilims_session_load_state_file(lilims_session* session, const char* path) {
  if (!session) return null_arg("session_load_state_file", "session");
  if (!path) return null_arg("session_load_state_file", "path");
  return guarded([&] {
    session->impl->load_state_file(path);
    return LILIMS_OK;
  });
}

lilims_sampling_params lilims_sampling_default_params(void) {
  lilims_sampling_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  const lilims::runtime::SamplingParams d;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.repeat_last_n = d.repeat_last_n;
  p.seed = d.seed;
  return p;
}

lilims_generate_params lilims_generate_default_params(void) {
  lilims_generate_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.max_tokens = 128;
  p.sampling = lilims_sampling_default_params();
  p.add_bos = 1;
  p.parse_special = 1;
  p.context_policy = LILIMS_CONTEXT_STOP;
  p.n_keep = -1;
  p.jump_forward = 1;
  return p;
}

lilims_status lilims_generate(lilims_session* session, const char* prompt,
                              const lilims_generate_params* params,
                              lilims_generate_stats* out_stats) {
  if (!session) return null_arg("generate", "session");
  if (!params) return null_arg("generate", "params");
  return guarded([&] {
    constexpr size_t kStats010 = offsetof(lilims_generate_stats, mask_seconds);
    if (out_stats && out_stats->struct_size < kStats010) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[generate] stats.struct_size is not set");
    }
    lilims::runtime::GenerateOptions opt;
    std::string prompt_tail;
    bool reuse_prefix = false;
    if (const lilims_status st = generate_options("generate", params, opt, prompt_tail, reuse_prefix);
        st != LILIMS_OK) {
      return st;
    }
    const std::string prompt_text = (prompt ? prompt : "") + prompt_tail;
    if (params->on_token) {
      const lilims_token_callback cb = params->on_token;
      void* ud = params->user_data;
      opt.on_token = [cb, ud](int32_t token, const std::string& text) {
        return cb(ud, token, text.c_str(), text.size()) != 0;
      };
    }
    lilims::runtime::GenerateResult r;
    if (reuse_prefix) {
      Session& s = *session->impl;
      const auto ids = s.model().tokenizer().encode(prompt_text, opt.add_bos, opt.parse_special);
      r = s.generate_reusing_prefix(ids, opt);
    } else {
      r = session->impl->generate(prompt_text, opt);
    }
    if (out_stats) {
      out_stats->n_prompt_tokens = r.n_prompt_tokens;
      out_stats->n_generated_tokens = (int32_t)r.tokens.size();
      out_stats->prompt_seconds = r.prompt_seconds;
      out_stats->generate_seconds = r.generate_seconds;
      out_stats->stop_reason = (int32_t)r.stop;
      if (LILIMS_HAS_FIELD(out_stats, lilims_generate_stats, mask_seconds)) {
        out_stats->mask_seconds = r.mask_seconds;
      }
      if (LILIMS_HAS_FIELD(out_stats, lilims_generate_stats, peak_resident_bytes)) {
        out_stats->first_token_seconds = r.first_token_seconds;
        out_stats->prompt_tokens_per_second = r.prompt_tokens_per_second();
        out_stats->decode_tokens_per_second = r.decode_tokens_per_second();
        out_stats->n_reused_tokens = r.n_reused_tokens;
        out_stats->n_context_shifts = r.n_shifts;
        out_stats->peak_resident_bytes = r.peak_resident_bytes;
      }
      if (LILIMS_HAS_FIELD(out_stats, lilims_generate_stats, n_accepted_tokens)) {
        out_stats->n_forced_tokens = r.n_forced;
        out_stats->n_drafted_tokens = r.n_drafted;
        out_stats->n_accepted_tokens = r.n_accepted;
      }
      if (LILIMS_HAS_FIELD(out_stats, lilims_generate_stats, value_offset)) {
        out_stats->constraint_triggered = r.constraint_triggered ? 1 : 0;
        out_stats->value_offset = r.value_offset;
      }
    }
    return LILIMS_OK;
  });
}

int32_t lilims_model_tool_format(const lilims_model* model) {
  return model ? (int32_t)model->impl->tool_format() : -1;
}

lilims_status lilims_tools_prompt_format(int32_t format, const lilims_tool* tools, size_t n_tools,
                                         int32_t allow_text, char* out_text, size_t capacity,
                                         size_t* out_len) {
  if (!out_len) return null_arg("tools_prompt_format", "out_len");
  *out_len = 0;
  if (!tools && n_tools) return null_arg("tools_prompt_format", "tools");
  return guarded([&] {
    const lilims::runtime::ToolPrompt tp = lilims::runtime::tool_prompt(
        tool_format_of("tools_prompt_format", format), to_tools(tools, n_tools), allow_text != 0);
    return copy_out("tools_prompt_format", tp.system, out_text, capacity, out_len, true);
  });
}

lilims_status lilims_parse_tool_calls(int32_t format, const char* text, size_t text_len, char* out_json,
                                      size_t capacity, size_t* out_len) {
  if (!out_len) return null_arg("parse_tool_calls", "out_len");
  *out_len = 0;
  if (!text && text_len) return null_arg("parse_tool_calls", "text");
  return guarded([&] {
    const auto calls =
        lilims::runtime::parse_tool_calls(tool_format_of("parse_tool_calls", format), std::string_view(text ? text : "", text_len));
    return copy_out("parse_tool_calls", lilims::runtime::tool_calls_json(calls), out_json, capacity, out_len,
                    true);
  });
}

lilims_status lilims_tools_prompt(const lilims_tool* tools, size_t n_tools, char* out_text,
                                  size_t capacity, size_t* out_len) {
  if (!out_len) return null_arg("tools_prompt", "out_len");
  *out_len = 0;
  if (!tools && n_tools) return null_arg("tools_prompt", "tools");
  return guarded([&] {
    const std::string text = lilims::runtime::tools_system_prompt(to_tools(tools, n_tools));
    return copy_out("tools_prompt", text, out_text, capacity, out_len, true);
  });
}

void lilims_session_cancel(lilims_session* session) {
  if (session) session->impl->cancel();
}

}  // extern "C"

struct lilims_mmproj {
  std::unique_ptr<lilims::runtime::Projector> impl;
};

lilims_status lilims_mmproj_open(const char* path, lilims_mmproj** out) {
  if (out) *out = nullptr;
  if (!path) return null_arg("mmproj_open", "path");
  if (!out) return null_arg("mmproj_open", "out");
  return guarded([&] {
    auto m = std::make_unique<lilims_mmproj>();
    m->impl = lilims::runtime::Projector::open(path);
    *out = m.release();
    return LILIMS_OK;
  });
}

void lilims_mmproj_free(lilims_mmproj* mmproj) { delete mmproj; }

double lilims_mmproj_last_encode_seconds(const lilims_mmproj* mmproj) {
  return mmproj ? mmproj->impl->last_encode_seconds() : 0.0;
}

lilims_status lilims_session_eval_image(lilims_session* session, lilims_mmproj* mmproj,
                                        const uint8_t* rgb, int32_t width, int32_t height,
                                        size_t stride, int32_t* out_n_positions) {
  if (out_n_positions) *out_n_positions = 0;
  if (!session) return null_arg("session_eval_image", "session");
  if (!mmproj) return null_arg("session_eval_image", "mmproj");
  if (!rgb) return null_arg("session_eval_image", "rgb");
  return guarded([&] {
    const int32_t n = mmproj->impl->eval_image(*session->impl, {rgb, width, height, stride});
    if (out_n_positions) *out_n_positions = n;
    return LILIMS_OK;
  });
}
