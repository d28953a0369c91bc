// Opening files a user named: only regular files are read.  A FIFO would
// block open() until some writer appears, and a character device such as
// /dev/zero never ends, so both are refused before any read.
#pragma once

#include <string>

namespace lilims {

// Opens `path` read-only (close-on-exec) and returns the descriptor of a
// regular file; *size gets its size.  The open itself does not block: it
// uses O_NONBLOCK, checks the file type with fstat, then clears the flag.
// Throws lilims::Error LILIMS_ERR_IO with a message "[AREA] ..." that names
// the path: empty path, cannot open, not a regular file (directory, FIFO,
// device, socket).
int open_regular_file(const std::string& path, const char* area, unsigned long long* size);

// The whole of a regular text file (same checks and errors as above).
std::string read_regular_file(const std::string& path, const char* area);

}  // namespace lilims
