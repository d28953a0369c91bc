// Owning pointers for the C API's handles in C++ tests, and the greedy
// generate params they share.
#pragma once

#include <memory>

#include "lilims/lilims.h"

namespace lilims::test {

struct ModelFree {
  void operator()(lilims_model* m) const { lilims_model_free(m); }
};
struct SessionFree {
  void operator()(lilims_session* s) const { lilims_session_free(s); }
};
using ModelPtr = std::unique_ptr<lilims_model, ModelFree>;
using SessionPtr = std::unique_ptr<lilims_session, SessionFree>;

// Greedy decoding of at most max_tokens tokens.
inline lilims_generate_params greedy(int32_t max_tokens) {
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = max_tokens;
  gp.sampling.temperature = 0.0f;
  return gp;
}

}  // namespace lilims::test
