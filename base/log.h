// The library's few reports (load time, a setting it could not honour) go to
// the callback an app sets with lilims_set_log_callback, and nowhere when
// none is set: the library never prints.
#pragma once

#include <string>

#include "lilims/lilims.h"

namespace lilims {

// One receiver per process, meant to be set once before other calls;
// setting it again is safe from any thread (a report already under way may
// still reach the previous receiver).
void set_log_callback(lilims_log_callback callback, void* user_data, lilims_log_level min_level);

// Whether a report at this level would reach anyone: callers skip building
// the message when it would not.
bool log_enabled(lilims_log_level level);
void log(lilims_log_level level, const std::string& message);

}  // namespace lilims
