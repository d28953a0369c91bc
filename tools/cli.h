// The `lilims` command line: subcommands register themselves here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lilims::cli {

struct Command {
  const char* name;
  const char* summary;  // one line for `lilims help`
  int (*main)(int argc, char** argv);  // argv[0] is the subcommand name
};

// Called from a static initializer in each cmd_*.cpp.
bool register_command(const Command& cmd);
const std::vector<Command>& commands();

// Prints "lilims NAME: MESSAGE" to stderr and returns 1 (for `return fail(...)`).
int fail(const char* name, const std::string& message);

// Parse an option's value or throw std::invalid_argument with a message
// naming the flag and the accepted range.  Integers are plain decimal (an
// optional '-', then digits: no spaces, no '+', no hex) and must lie in
// [lo, hi]: a value that does not fit is refused, never wrapped.
int64_t parse_int(const char* flag, const char* text, int64_t lo, int64_t hi);
uint64_t parse_u64(const char* flag, const char* text);  // 0 .. 2^64-1
double parse_float(const char* flag, const char* text);

}  // namespace lilims::cli

#define LILIMS_REGISTER_COMMAND(ident, name, summary, fn) \
  static const bool ident##_registered = ::lilims::cli::register_command({name, summary, fn})
