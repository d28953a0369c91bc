#include "models/imatrix.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace lilims::models {

namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'S', 'I', 'M', 'A', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxCols = 1u << 24;

[[noreturn]] void fail(lilims_status status, const std::string& msg) {
  throw Error(status, "[imatrix] " + msg);
}

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};

class In {
 public:
  In(FILE* f, const std::string& path) : f_(f), path_(path) {}
  void read(void* dst, size_t n, const char* what) {
    if (n && std::fread(dst, 1, n, f_) != n) {
      fail(LILIMS_ERR_BAD_FORMAT, "truncated imatrix " + path_ + " (reading " + what + ")");
    }
  }
  template <typename T>
  T get(const char* what) {
    T v;
    read(&v, sizeof v, what);
    return v;
  }

 private:
  FILE* f_;
  const std::string& path_;
};

}  // namespace

std::map<std::string, std::vector<float>> Imatrix::importance() const {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, e] : entries) out[name] = e.mean_sq;
  return out;
}

void write_imatrix(const std::string& path, const Imatrix& m) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) fail(LILIMS_ERR_IO, "cannot create " + path + ": " + std::strerror(errno));
  bool ok = std::fwrite(kMagic, 1, 8, f.get()) == 8;
  const int32_t dims[2] = {m.n_ctx, m.n_chunks};
  const uint32_t n_entries = (uint32_t)m.entries.size();
  ok = ok && std::fwrite(&kVersion, 4, 1, f.get()) == 1;
  ok = ok && std::fwrite(dims, 4, 2, f.get()) == 2;
  ok = ok && std::fwrite(&n_entries, 4, 1, f.get()) == 1;
  for (const auto& [name, e] : m.entries) {
    const uint32_t len = (uint32_t)name.size();
    const uint32_t cols = (uint32_t)e.mean_sq.size();
    ok = ok && std::fwrite(&len, 4, 1, f.get()) == 1;
    ok = ok && std::fwrite(name.data(), 1, len, f.get()) == len;
    ok = ok && std::fwrite(&cols, 4, 1, f.get()) == 1;
    ok = ok && std::fwrite(&e.n_rows, 8, 1, f.get()) == 1;
    ok = ok && std::fwrite(e.mean_sq.data(), 4, cols, f.get()) == cols;
  }
  FILE* raw = f.release();
  const bool closed = std::fclose(raw) == 0;
  if (!ok || !closed) fail(LILIMS_ERR_IO, "cannot write " + path + " (disk full?)");
}

Imatrix read_imatrix(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(LILIMS_ERR_IO, "cannot open " + path + ": " + std::strerror(errno));
  In in(f.get(), path);
  char magic[8] = {};
  if (std::fread(magic, 1, 8, f.get()) != 8 || std::memcmp(magic, kMagic, 8) != 0) {
    fail(LILIMS_ERR_BAD_FORMAT, path + " is not an imatrix file (written by lilims imatrix)");
  }
  const uint32_t version = in.get<uint32_t>("the version");
  if (version != kVersion) {
    fail(LILIMS_ERR_BAD_FORMAT, path + " has imatrix format version " + std::to_string(version) +
                                    "; this lilims reads version " + std::to_string(kVersion));
  }
  Imatrix m;
  m.n_ctx = in.get<int32_t>("n_ctx");
  m.n_chunks = in.get<int32_t>("n_chunks");
  const uint32_t n_entries = in.get<uint32_t>("the entry count");
  for (uint32_t k = 0; k < n_entries; ++k) {
    const uint32_t len = in.get<uint32_t>("a name length");
    if (len == 0 || len > kMaxName) {
      fail(LILIMS_ERR_BAD_FORMAT, path + ": entry " + std::to_string(k) + " has a name of " +
                                      std::to_string(len) + " bytes");
    }
    std::string name(len, '\0');
    in.read(name.data(), len, "a name");
    const uint32_t cols = in.get<uint32_t>("a column count");
    if (cols == 0 || cols > kMaxCols) {
      fail(LILIMS_ERR_BAD_FORMAT, path + ": " + name + " has " + std::to_string(cols) + " columns");
    }
    ImatrixEntry e;
    e.n_rows = in.get<int64_t>("a row count");
    if (e.n_rows < 1) {
      fail(LILIMS_ERR_BAD_FORMAT, path + ": " + name + " averages " + std::to_string(e.n_rows) + " rows");
    }
    e.mean_sq.resize(cols);
    in.read(e.mean_sq.data(), (size_t)cols * 4, "values");
    for (uint32_t j = 0; j < cols; ++j) {
      if (!std::isfinite(e.mean_sq[j]) || e.mean_sq[j] < 0.0f) {
        fail(LILIMS_ERR_BAD_FORMAT, path + ": " + name + " column " + std::to_string(j) +
                                        " holds an impossible value");
      }
    }
    if (!m.entries.emplace(name, std::move(e)).second) {
      fail(LILIMS_ERR_BAD_FORMAT, path + " has " + name + " twice");
    }
  }
  if (std::fgetc(f.get()) != EOF) fail(LILIMS_ERR_BAD_FORMAT, path + " has bytes after its last entry");
  return m;
}

}  // namespace lilims::models
