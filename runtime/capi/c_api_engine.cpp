// The C API's engines: lilims_engine wraps runtime::BatchEngine; request
// ids map to the requests' cancel flags.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/batch_engine.h"
#include "runtime/capi/c_api_internal.h"

using lilims::capi::generate_options;
using lilims::capi::guarded;
using lilims::capi::null_arg;
using lilims::capi::set_error;
using lilims::runtime::Model;

// Requests' cancel flags by id: an entry lives from submit until the
// request's done callback.
struct lilims_engine {
  std::shared_ptr<const Model> model;  // declared first: outlives impl
  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<std::atomic<bool>>> live;  // under mu
  uint64_t next_id = 1;                                                  // under mu
  bool freeing = false;                                                  // under mu
  std::unique_ptr<lilims::runtime::BatchEngine> impl;
};

extern "C" {

lilims_engine_params lilims_engine_default_params(void) {
  lilims_engine_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.n_seq = 4;
  p.max_queued = 64;
  p.kv_type = LILIMS_KV_F16;
  return p;
}

lilims_status lilims_engine_create(lilims_model* model, const lilims_engine_params* params,
                                   lilims_engine** out_engine) {
  if (!model) return null_arg("engine_create", "model");
  if (!out_engine) return null_arg("engine_create", "out_engine");
  *out_engine = nullptr;
  return guarded([&] {
    lilims_engine_params p = lilims_engine_default_params();
    if (params) {
      // Every field so far came with the struct: a smaller size is a caller
      // that did not set it.
      if (params->struct_size < sizeof(lilims_engine_params)) {
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         "[engine_create] params.struct_size " + std::to_string(params->struct_size) +
                             " is not sizeof(lilims_engine_params) (" +
                             std::to_string(sizeof(lilims_engine_params)) +
                             "): start from lilims_engine_default_params()");
      }
      p = *params;
    }
    if (p.n_seq < 1 || p.max_queued < 1) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[engine_create] n_seq " + std::to_string(p.n_seq) +
                                                        " and max_queued " + std::to_string(p.max_queued) +
                                                        " must be at least 1");
    }
    if (p.n_ctx < 0 || p.n_threads < 0 || p.n_batch < 0 || p.chunk_layers < 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[engine_create] n_ctx, n_threads, n_batch and chunk_layers must not be negative");
    }
    lilims::runtime::BatchOptions opt;
    opt.n_seq = p.n_seq;
    opt.n_ctx = p.n_ctx;
    opt.n_threads = p.n_threads;
    if (p.n_batch > 0) opt.n_batch = p.n_batch;
    if (p.chunk_layers > 0) opt.chunk_layers = p.chunk_layers;
    opt.allow_ctx_beyond_train = p.allow_ctx_beyond_train != 0;
    switch (p.kv_type) {
      case LILIMS_KV_F16: opt.kv_type = lilims::quant::Type::F16; break;
      case LILIMS_KV_Q8_0: opt.kv_type = lilims::quant::Type::Q8_0; break;
      default:
        return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                         "[engine_create] kv_type " + std::to_string(p.kv_type) +
                             " is not a lilims_kv_type (LILIMS_KV_F16 0, LILIMS_KV_Q8_0 1)");
    }
    auto e = std::make_unique<lilims_engine>();
    e->model = model->impl;
    e->impl = std::make_unique<lilims::runtime::BatchEngine>(*e->model, opt, (size_t)p.max_queued);
    *out_engine = e.release();
    return LILIMS_OK;
  });
}

void lilims_engine_free(lilims_engine* engine) {
  if (!engine) return;
  {
    std::lock_guard<std::mutex> lock(engine->mu);
    engine->freeing = true;
  }
  // The engine's destructor ends every request (their done callbacks run on
  // its thread) before it joins.  engine->impl keeps pointing at it
  // meanwhile: a callback's submit reaches a live engine that refuses it
  // (unique_ptr::reset would clear the pointer first).
  try {
    delete engine->impl.get();
  } catch (...) {
  }
  (void)engine->impl.release();
  delete engine;
}

lilims_status lilims_engine_submit(lilims_engine* engine, const lilims_token* prompt, size_t n,
                                   const lilims_generate_params* gen,
                                   lilims_token_callback on_token,
                                   lilims_engine_done_callback on_done, void* user_data,
                                   uint64_t* out_request_id) {
  if (!engine) return null_arg("engine_submit", "engine");
  if (!prompt) return null_arg("engine_submit", "prompt");
  if (out_request_id) *out_request_id = 0;
  return guarded([&] {
    if (n == 0) return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[engine_submit] the prompt is empty");
    {
      std::lock_guard<std::mutex> lock(engine->mu);
      if (engine->freeing) {
        return set_error(LILIMS_ERR_CANCELLED, "[engine_submit] the engine is being freed");
      }
    }
    const lilims_generate_params defaults = lilims_generate_default_params();
    if (!gen) gen = &defaults;
    lilims::runtime::BatchRequest r;
    std::string prompt_tail;
    bool reuse_prefix = false;
    if (const lilims_status st = generate_options("engine_submit", gen, r.opt, prompt_tail, reuse_prefix);
        st != LILIMS_OK) {
      return st;
    }
    if (gen->on_token) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[engine_submit] gen->on_token is set: pass the token callback as "
                       "lilims_engine_submit's on_token");
    }
    if (r.opt.context_policy != lilims::runtime::ContextPolicy::stop) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[engine_submit] context_policy LILIMS_CONTEXT_SHIFT: an engine's requests "
                       "stop at a full context");
    }
    if (r.opt.n_draft != 0) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT,
                       "[engine_submit] n_draft " + std::to_string(r.opt.n_draft) +
                           ": an engine does no prompt-lookup decoding");
    }
    r.prompt.assign(prompt, prompt + n);
    if (!prompt_tail.empty()) {
      const auto tail = engine->model->tokenizer().encode(prompt_tail, false, true);
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    }
    engine->impl->check(r.prompt, r.opt);
    if (on_token) {
      r.opt.on_token = [on_token, user_data](int32_t token, const std::string& text) {
        return on_token(user_data, token, text.c_str(), text.size()) != 0;
      };
    }
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(engine->mu);
      id = engine->next_id++;
      engine->live.emplace(id, r.cancel);
    }
    r.done = [engine, id, on_done, user_data](lilims::runtime::GenerateResult& res, lilims_status status,
                                              const std::string& error) {
      {
        std::lock_guard<std::mutex> lock(engine->mu);
        engine->live.erase(id);
      }
      if (!on_done) return;
      lilims_engine_result out;
      std::memset(&out, 0, sizeof out);
      out.struct_size = sizeof out;
      out.request_id = id;
      out.status = status;
      if (status == LILIMS_OK && res.stop == lilims::runtime::StopReason::cancelled) {
        out.status = LILIMS_ERR_CANCELLED;
      }
      std::string message = error;
      if (out.status == LILIMS_ERR_CANCELLED && message.empty()) {
        message = "[engine] request " + std::to_string(id) + " was cancelled";
      }
      out.error = message.c_str();
      out.text = res.text.data();
      out.text_len = res.text.size();
      out.tokens = res.tokens.data();
      out.n_tokens = res.tokens.size();
      out.n_prompt_tokens = res.n_prompt_tokens;
      out.n_reused_tokens = res.n_reused_tokens;
      out.stop_reason = (int32_t)res.stop;
      out.first_token_seconds = res.first_token_seconds;
      out.generate_seconds = res.generate_seconds;
      on_done(user_data, &out);
    };
    if (out_request_id) *out_request_id = id;
    if (!engine->impl->submit(std::move(r))) {
      bool freeing = false;
      {
        std::lock_guard<std::mutex> lock(engine->mu);
        engine->live.erase(id);
        freeing = engine->freeing;
      }
      if (out_request_id) *out_request_id = 0;
      if (freeing) {
        return set_error(LILIMS_ERR_CANCELLED, "[engine_submit] the engine is being freed");
      }
      return set_error(LILIMS_ERR_BUSY, "[engine_submit] the queue is full: " +
                                            std::to_string(engine->impl->n_queued()) +
                                            " requests wait for one of " +
                                            std::to_string(engine->impl->n_seq()) + " slots");
    }
    return LILIMS_OK;
  });
}

lilims_status lilims_engine_cancel(lilims_engine* engine, uint64_t request_id) {
  if (!engine) return null_arg("engine_cancel", "engine");
  return guarded([&] {
    std::lock_guard<std::mutex> lock(engine->mu);
    if (request_id == 0 || request_id >= engine->next_id) {
      return set_error(LILIMS_ERR_INVALID_ARGUMENT, "[engine_cancel] no request has id " +
                                                        std::to_string(request_id));
    }
    auto it = engine->live.find(request_id);
    if (it != engine->live.end()) it->second->store(true, std::memory_order_release);
    return LILIMS_OK;
  });
}

int32_t lilims_engine_n_queued(const lilims_engine* engine) {
  return engine ? (int32_t)engine->impl->n_queued() : -1;
}

int32_t lilims_engine_n_running(const lilims_engine* engine) {
  return engine ? (int32_t)engine->impl->n_running() : -1;
}

}  // extern "C"
