// The `lilims` command line: subcommands register themselves here.
#pragma once

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

// Parses an integer/float argument or throws std::invalid_argument with a
// message naming the flag.
long parse_int(const char* flag, const char* text);
double parse_float(const char* flag, const char* text);

}  // namespace lilims::cli

#define LILIMS_REGISTER_COMMAND(ident, name, summary, fn) \
  static const bool ident##_registered = ::lilims::cli::register_command({name, summary, fn})
