// Owning pointers for the C API's handles in C++ tests.
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

}  // namespace lilims::test
