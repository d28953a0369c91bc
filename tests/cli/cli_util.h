// Helpers for the command-line tests: run the built `lilims` binary with
// stdout, stderr and stdin on separate pipes, a private temp dir, and model
// files broken on purpose (built from stories260K.gguf with gguf::Writer).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "test_util.h"

extern char** environ;

namespace lilims::test::cli {

struct Result {
  int exit_code = -1;    // the exit status when the process exited
  int term_signal = 0;   // nonzero when a signal killed it (a crash)
  bool timed_out = false;
  long max_rss_kb = 0;   // the process's peak resident memory
  std::string out, err;  // stdout and stderr, separately

  bool exited() const { return term_signal == 0 && !timed_out; }
  // For failure messages: the whole picture in one string.
  std::string describe() const {
    std::string s = "exit " + std::to_string(exit_code);
    if (term_signal) s += ", killed by signal " + std::to_string(term_signal);
    if (timed_out) s += ", timed out";
    return s + "\n--- stdout (" + std::to_string(out.size()) + " bytes) ---\n" + out.substr(0, 2000) +
           "\n--- stderr ---\n" + err.substr(0, 4000);
  }
};

inline std::string cli_path() {
  if (const char* p = std::getenv("LILIMS_CLI")) return p;
  return LILIMS_CLI_PATH;
}

// Runs `lilims ARGS...`, feeding `input` on stdin (then EOF).  The child gets
// the default SIGPIPE disposition; it is killed after timeout_s seconds.
inline Result run(const std::vector<std::string>& args, const std::string& input = "",
                  double timeout_s = 180.0) {
  static const bool sigpipe_ignored = [] { return signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  int in_p[2], out_p[2], err_p[2];
  if (pipe2(in_p, O_CLOEXEC) || pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC)) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_p[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out_p[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_p[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);

  const std::string exe = cli_path();
  std::vector<std::string> argv_s;
  argv_s.push_back(exe);
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in_p[0]);
  close(out_p[1]);
  close(err_p[1]);
  if (rc != 0) {
    close(in_p[1]);
    close(out_p[0]);
    close(err_p[0]);
    throw std::runtime_error("posix_spawn " + exe + ": " + std::strerror(rc));
  }

  Result r;
  int in_fd = in_p[1];
  size_t in_off = 0;
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  }
  int fds[2] = {out_p[0], err_p[0]};
  std::string* bufs[2] = {&r.out, &r.err};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[3];
    int n = 0;
    for (int k = 0; k < 2; ++k) p[n++] = {fds[k], POLLIN, 0};
    p[n++] = {in_fd, POLLOUT, 0};  // a negative fd is ignored by poll
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int pr = poll(p, n, (int)left.count());
    if (pr < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k] < 0 || !(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t got = read(fds[k], buf, sizeof buf);
      if (got > 0) {
        bufs[k]->append(buf, (size_t)got);
      } else if (got == 0 || errno != EINTR) {
        close(fds[k]);
        fds[k] = -1;
      }
    }
    if (in_fd >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t put = write(in_fd, input.data() + in_off, input.size() - in_off);
      if (put > 0) in_off += (size_t)put;
      if ((put < 0 && errno != EAGAIN && errno != EINTR) || in_off == input.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
  }
  for (int fd : {fds[0], fds[1], in_fd}) {
    if (fd >= 0) close(fd);
  }
  int status = 0;
  struct rusage ru {};
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  r.max_rss_kb = ru.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status) && !r.timed_out) r.term_signal = WTERMSIG(status);
  return r;
}

// A directory private to this test process, removed at exit.
inline const std::string& tmp_dir() {
  struct Dir {
    std::string path;
    Dir() {
      const char* t = std::getenv("TMPDIR");
      std::string templ = std::string(t && *t ? t : "/tmp") + "/lilims_cli_XXXXXX";
      if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
      path = templ;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir d;
  return d.path;
}
inline std::string tmp_path(const std::string& name) { return tmp_dir() + "/" + name; }

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string stories_gguf() { return shared_data("stories260K/stories260K.gguf"); }
inline std::string stories_dir() { return shared_data("stories260K"); }
constexpr const char* kStoriesFrom = "../shared/data/stories260K, see SOURCES.md";
constexpr const char* kSmolFrom = "scripts/fetch_model.sh";

// The first `len` bytes of `src`.
inline std::string write_truncated(const std::string& src, size_t len, const std::string& name) {
  const std::string bytes = read_file(src);
  const std::string path = tmp_path(name);
  write_bytes(path, bytes.substr(0, std::min(len, bytes.size())));
  return path;
}

// A copy of a GGUF file through gguf::Writer, with its metadata and tensor
// lists edited first.
struct EditableTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  std::vector<uint8_t> data;
};
inline std::string write_variant(
    const std::string& src, const std::string& name,
    const std::function<void(std::vector<gguf::KeyValue>&, std::vector<EditableTensor>&)>& edit) {
  auto f = gguf::File::open(src);
  std::vector<gguf::KeyValue> kv = f->metadata();
  std::vector<EditableTensor> ts;
  for (const auto& t : f->tensors()) {
    ts.push_back({t.name, t.ne, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes)});
  }
  edit(kv, ts);
  gguf::Writer w;
  for (const auto& k : kv) w.add(k.key, k.value);
  for (const auto& t : ts) w.add_tensor(t.name, t.ne, t.type, t.data.data(), t.data.size());
  const std::string path = tmp_path(name);
  w.write(path);
  return path;
}

// stories260K with blk.0.ffn_down.weight replaced by an IQ2_XXS tensor (GGML
// type 16, one 66-byte block of 256 elements): a valid file lilims can neither
// run nor dequantize.
inline std::string write_unreadable_type_model() {
  return write_variant(stories_gguf(), "iq2xxs.gguf", [](auto&, std::vector<EditableTensor>& ts) {
    for (auto& t : ts) {
      if (t.name == "blk.0.ffn_down.weight") t = {t.name, {256}, 16u, std::vector<uint8_t>(66, 0x11)};
    }
  });
}

// stories260K claiming general.architecture "mamba" (one lilims does not run).
inline std::string write_unsupported_arch_model() {
  return write_variant(stories_gguf(), "mamba.gguf", [](std::vector<gguf::KeyValue>& kv, auto&) {
    for (auto& k : kv) {
      if (k.key == "general.architecture") k.value.s = "mamba";
    }
  });
}

// stories260K without one tensor / one required key.
inline std::string write_without_tensor(const std::string& tensor) {
  return write_variant(stories_gguf(), "no_tensor.gguf",
                       [&](auto&, std::vector<EditableTensor>& ts) {
                         for (size_t k = 0; k < ts.size(); ++k) {
                           if (ts[k].name == tensor) ts.erase(ts.begin() + (long)k);
                         }
                       });
}
inline std::string write_without_key(const std::string& key) {
  return write_variant(stories_gguf(), "no_key.gguf", [&](std::vector<gguf::KeyValue>& kv, auto&) {
    for (size_t k = 0; k < kv.size(); ++k) {
      if (kv[k].key == key) kv.erase(kv.begin() + (long)k);
    }
  });
}

// Cut points through every region of stories260K.gguf: the header, the
// metadata (strings, arrays), the tensor infos, the padding before the data
// section and the data itself.
inline std::vector<size_t> truncation_lengths(const std::string& src) {
  auto f = gguf::File::open(src);
  const size_t data = (size_t)f->data_offset(), size = (size_t)f->file_size();
  return {0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 40, 100, 1000, 5000, 9000, 12000,
          data - 40, data - 1, data, data + 1, data + 4096, size / 2, size - 4, size - 1};
}

// Valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = (unsigned char)s[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;  // the continuation bytes run past the end
    for (size_t k = 1; k <= n; ++k) {
      const auto d = (unsigned char)s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// ---- expectations ------------------------------------------------------------

inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

inline size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// No crash, no sanitizer report.
inline void expect_no_crash(const Result& r) {
  EXPECT_TRUE(r.exited()) << r.describe();
  EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << r.describe();
  EXPECT_EQ(r.err.find("runtime error:"), std::string::npos) << r.describe();
}

// A failure as scripts need it: nonzero exit, nothing on stdout, and a first
// stderr line "lilims CMD: ..." that contains `needle`.  one_line: the
// message is all there is on stderr (errors after parsing; usage errors
// print the usage after the message).
inline void expect_failure(const Result& r, const std::string& cmd, const std::string& needle,
                           bool one_line = true) {
  expect_no_crash(r);
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "") << r.describe();
  const std::string line = first_line(r.err);
  EXPECT_EQ(line.rfind("lilims " + cmd + ": ", 0), 0u) << r.describe();
  EXPECT_NE(line.find(needle), std::string::npos) << "no '" << needle << "' in: " << line;
  if (one_line) {
    EXPECT_EQ(count_lines(r.err), 1u) << r.describe();
    EXPECT_EQ(r.err.back(), '\n') << r.describe();
  }
}

}  // namespace lilims::test::cli
