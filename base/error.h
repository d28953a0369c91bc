// Errors inside the library.  C++ code throws lilims::Error; the C API
// (runtime/capi/c_api.cpp) catches it and returns its status with its message.
// Messages start with the operation that failed: "[gguf] ...".
#pragma once

#include <stdexcept>
#include <string>

#include "lilims/lilims.h"

namespace lilims {

class Error : public std::runtime_error {
 public:
  Error(lilims_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  lilims_status status() const { return status_; }

 private:
  lilims_status status_;
};

}  // namespace lilims
