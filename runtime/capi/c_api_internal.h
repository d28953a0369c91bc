// What the C API's source files share: the model handle, the error
// plumbing (a thread-local message, exceptions turned into statuses) and
// the reading of lilims_generate_params.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "base/error.h"
#include "lilims/lilims.h"
#include "runtime/engine.h"

// The app's reference to a model; each session holds another, so the
// weights live until lilims_model_free and the last lilims_session_free.
struct lilims_model {
  std::shared_ptr<const lilims::runtime::Model> impl;
  uint64_t file_bytes = 0;
};

// True when a caller's struct (struct_size bytes) reaches past `field`.
#define LILIMS_HAS_FIELD(p, type, field) \
  ((p)->struct_size >= offsetof(type, field) + sizeof(((type*)nullptr)->field))

namespace lilims::capi {

// The message lilims_last_error returns, per thread.
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

inline lilims_status set_error(lilims_status st, const std::string& msg) {
  last_error() = msg;
  return st;
}

// Runs fn, mapping exceptions to statuses.
template <typename Fn>
lilims_status guarded(Fn&& fn) {
  last_error().clear();
  try {
    return fn();
  } catch (const lilims::Error& e) {
    return set_error(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(LILIMS_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_error(LILIMS_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return set_error(LILIMS_ERR_INTERNAL, "internal error");
  }
}

inline lilims_status null_arg(const char* fn, const char* what) {
  return set_error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[") + fn + "] " + what + " is NULL");
}

// The options lilims_generate_params asks for (all but on_token).
// prompt_tail: text the prompt must end with (a required tool call's opening
// mark).
lilims_status generate_options(const char* fn, const lilims_generate_params* params,
                               lilims::runtime::GenerateOptions& opt, std::string& prompt_tail,
                               bool& reuse_prefix);

}  // namespace lilims::capi
