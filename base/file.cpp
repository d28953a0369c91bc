#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace lilims {
namespace {

[[noreturn]] void io_error(const char* area, const std::string& msg) {
  throw Error(LILIMS_ERR_IO, std::string("[") + area + "] " + msg);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "special";
}

}  // namespace

int open_regular_file(const std::string& path, const char* area, unsigned long long* size) {
  if (path.empty()) io_error(area, "empty path: a file name is needed");
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) io_error(area, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_error(area, "cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    io_error(area, path + " is not a regular file (it is " + kind_of(st.st_mode) + ")");
  }
  // Reads of a regular file never return EAGAIN, but leave no surprise for
  // code that reads the descriptor later.
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    io_error(area, "cannot configure " + path + ": " + std::strerror(err));
  }
  *size = static_cast<unsigned long long>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const char* area) {
  unsigned long long size = 0;
  const int fd = open_regular_file(path, area, &size);
  std::string out;
  try {
    out.reserve(static_cast<size_t>(size));
    char buf[65536];
    while (true) {
      const ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) io_error(area, "cannot read " + path + ": " + std::strerror(errno));
      if (r == 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

}  // namespace lilims
