#include "tools/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace lilims::cli {

static std::vector<Command>& table() {
  static std::vector<Command> t;
  return t;
}

bool register_command(const Command& cmd) {
  table().push_back(cmd);
  return true;
}

const std::vector<Command>& commands() { return table(); }

int fail(const char* name, const std::string& message) {
  std::fprintf(stderr, "lilims %s: %s\n", name, message.c_str());
  return 1;
}

long parse_int(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (!text[0] || *end || errno) {
    throw std::invalid_argument(std::string(flag) + " expects an integer, got '" + text + "'");
  }
  return v;
}

double parse_float(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (!text[0] || *end || errno) {
    throw std::invalid_argument(std::string(flag) + " expects a number, got '" + text + "'");
  }
  return v;
}

}  // namespace lilims::cli
