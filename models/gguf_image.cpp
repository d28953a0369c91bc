// Bringing a GGUF image into memory: a file mapped or read, a range of an
// open descriptor (mapped from the page holding its start), or bytes the
// caller owns.  Parsing is gguf.cpp's.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/file.h"
#include "models/gguf.h"

namespace lilims::gguf {

namespace {

// Reads n bytes at `offset` of fd into dst.
void read_at(int fd, uint64_t offset, uint8_t* dst, uint64_t n, const std::string& name) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, static_cast<size_t>(n - done),
                              static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw Error(LILIMS_ERR_IO, "[gguf] cannot read " + name + ": " +
                                     (r < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    done += static_cast<uint64_t>(r);
  }
}

}  // namespace

// Brings bytes [offset, offset + size) of fd into memory: a private mapping
// (from the page holding `offset`) or a heap copy.
void File::load_image(int fd, uint64_t offset, uint64_t size, bool use_mmap) {
  if (size > std::numeric_limits<size_t>::max()) {
    throw Error(LILIMS_ERR_IO, "[gguf] " + path_ + " is too large to map");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lead = offset % page;
  if (use_mmap && size > 0 && size <= std::numeric_limits<size_t>::max() - lead) {
    const size_t len = static_cast<size_t>(size + lead);
    void* m = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(offset - lead));
    if (m == MAP_FAILED) {
      throw Error(LILIMS_ERR_IO, "[gguf] cannot map " + path_ + ": " + std::strerror(errno));
    }
    mapping_ = m;
    mapping_bytes_ = len;
    base_ = static_cast<const uint8_t*>(m) + lead;
  } else {
    try {
      owned_.resize(static_cast<size_t>(size));
    } catch (const std::bad_alloc&) {
      throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                  "[gguf] cannot allocate " + std::to_string(size) + " bytes to read " + path_);
    }
    read_at(fd, offset, owned_.data(), size, path_);
    base_ = owned_.data();
  }
  size_ = size;
}

std::unique_ptr<File> File::open(const std::string& path, const OpenOptions& opt) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  unsigned long long file_size = 0;
  const int fd = open_regular_file(path, "gguf", &file_size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  f->load_image(fd, 0, file_size, opt.use_mmap);
  f->parse();
  return f;
}

std::unique_ptr<File> File::open_fd(int fd, uint64_t offset, uint64_t size,
                                    const OpenOptions& opt) {
  std::unique_ptr<File> f(new File());
  f->path_ = "<fd " + std::to_string(fd) + " at offset " + std::to_string(offset) + ">";
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    throw Error(LILIMS_ERR_IO, "[gguf] " + f->path_ + ": not an open file descriptor" +
                                   (fd < 0 ? "" : std::string(" (") + std::strerror(errno) + ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(LILIMS_ERR_IO, "[gguf] " + f->path_ + " is not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (offset > file_size) {
    throw Error(LILIMS_ERR_IO, "[gguf] " + f->path_ + ": the offset is past the end of the file (" +
                                   std::to_string(file_size) + " bytes)");
  }
  if (size == 0) size = file_size - offset;
  if (size > file_size - offset) {
    throw Error(LILIMS_ERR_IO, "[gguf] " + f->path_ + ": " + std::to_string(size) +
                                   " bytes asked but the file has " +
                                   std::to_string(file_size - offset) + " after the offset");
  }
  f->load_image(fd, offset, size, opt.use_mmap && offset % kImageAlignment == 0);
  f->parse();
  return f;
}

std::unique_ptr<File> File::from_bytes(const void* data, size_t size) {
  std::unique_ptr<File> f(new File());
  f->path_ = "<memory>";
  f->owned_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  f->parse();
  return f;
}

std::unique_ptr<File> File::from_borrowed(const void* data, size_t size, const std::string& name) {
  if (!data && size > 0) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gguf] " + name + " is NULL");
  if (reinterpret_cast<uintptr_t>(data) % kImageAlignment != 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[gguf] " + name + " starts at an address that is not a multiple of " +
                    std::to_string(kImageAlignment) +
                    " bytes; weights are read in place (malloc, mmap and posix_memalign "
                    "give aligned buffers)");
  }
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->base_ = static_cast<const uint8_t*>(data);
  f->size_ = size;
  f->parse();
  return f;
}

File::~File() {
  if (mapping_) munmap(mapping_, mapping_bytes_);
}

void File::drop_pages(const void* p, size_t n) const {
  if (!mapping_ || n == 0) return;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t b = ((uintptr_t)p + page - 1) / page * page, e = ((uintptr_t)p + n) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace lilims::gguf
