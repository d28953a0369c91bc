#include "base/log.h"

#include <mutex>

namespace lilims {
namespace {

struct Sink {
  lilims_log_callback callback = nullptr;
  void* user_data = nullptr;
  lilims_log_level min_level = LILIMS_LOG_ERROR;
};

// Reports are rare (a model load, a session), so a lock costs nothing and
// keeps callback and user_data from being read half-updated.
std::mutex g_mutex;
Sink g_sink;

Sink current() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_sink;
}

}  // namespace

void set_log_callback(lilims_log_callback callback, void* user_data, lilims_log_level min_level) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sink = Sink{callback, user_data, min_level};
}

bool log_enabled(lilims_log_level level) {
  const Sink s = current();
  return s.callback && level >= s.min_level;
}

void log(lilims_log_level level, const std::string& message) {
  const Sink s = current();
  // Called outside the lock: the callback may set another one.
  if (s.callback && level >= s.min_level) s.callback(s.user_data, level, message.c_str());
}

}  // namespace lilims
