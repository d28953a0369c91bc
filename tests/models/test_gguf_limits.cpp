// GGUF files that are well-formed but hostile in what they cost or claim:
// huge metadata arrays, alignments that would misalign tensor data, paths
// that are not regular files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <string>

#include "base/error.h"
#include "models/gguf.h"
#include "raw_gguf.h"
#include "test_util.h"

namespace lilims::gguf {
namespace {

using test::RawGguf;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lilims_gguf_" + std::to_string(getpid()) + "_" + name;
}

void write_file(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

// Resident set size of this process in bytes (Linux).
uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void expect_error(const std::function<void()>& fn, lilims_status status, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[gguf] ", 0), 0u) << e.what();
  }
}

// The parsed metadata of a file made of one big array costs at most about
// the file's own size again (the mapping counts once, any index once more):
// before, every element became a ~96-byte Value.
TEST(GgufLimits, BigMetadataArraysCostBoundedMemory) {
  struct Case {
    const char* name;
    uint32_t elem_type;
    uint64_t count;
    size_t elem_bytes;
  };
  // 8 MiB of UINT8, 1 M empty strings (8 bytes each), 1 M INT32.
  for (const Case& c : {Case{"u8", RawGguf::U8, 8u << 20, 1}, Case{"str", RawGguf::STR, 1u << 20, 8},
                        Case{"i32", RawGguf::I32, 1u << 20, 4}}) {
    SCOPED_TRACE(c.name);
    const std::string path = temp_path(std::string("big_") + c.name + ".gguf");
    uint64_t file_bytes = 0;
    {
      RawGguf g;
      g.key("test.big", RawGguf::ARR).array_header(c.elem_type, c.count).bytes(c.count * c.elem_bytes, 0);
      const std::string img = g.image();
      file_bytes = img.size();
      write_file(path, img);
    }
    for (bool mmap : {true, false}) {
      SCOPED_TRACE(mmap ? "mmap" : "read");
      const uint64_t before = rss_bytes();
      OpenOptions o;
      o.use_mmap = mmap;
      auto f = File::open(path, o);
      const uint64_t after = rss_bytes();
      const uint64_t delta = after > before ? after - before : 0;
      ASSERT_NE(f->find("test.big"), nullptr);
      EXPECT_LT(delta, 2 * file_bytes + (4u << 20))
          << "file " << file_bytes << " bytes, RSS grew by " << delta;
    }
    std::remove(path.c_str());
  }
}

TEST(GgufLimits, MetadataKeyCountIsBounded) {
  // 100k tiny keys fit the bytes, but no model has more than a few hundred.
  RawGguf g;
  for (int k = 0; k < 100000; ++k) g.key("k" + std::to_string(k), RawGguf::U8).u8(1);
  const std::string img = g.image();
  expect_error([&] { File::from_bytes(img.data(), img.size()); }, LILIMS_ERR_BAD_FORMAT,
               "metadata count");
}

// Tensor data is read as floats in place: an alignment below 8 would let an
// offset misalign them.
TEST(GgufLimits, AlignmentBelowEightIsRefused) {
  for (uint32_t a : {1u, 2u, 4u}) {
    SCOPED_TRACE(a);
    Writer w;
    w.add_u32("general.alignment", a);
    const std::vector<float> x(8, 1.0f);
    w.add_tensor("t", {8}, 0, x.data(), x.size() * 4);
    const std::vector<uint8_t> b = w.to_bytes();
    expect_error([&] { File::from_bytes(b.data(), b.size()); }, LILIMS_ERR_BAD_FORMAT,
                 "general.alignment");
  }
  Writer w;
  w.add_u32("general.alignment", 8);
  const std::vector<float> x(8, 1.0f);
  w.add_tensor("t", {8}, 0, x.data(), x.size() * 4);
  const std::vector<uint8_t> b = w.to_bytes();
  EXPECT_EQ(File::from_bytes(b.data(), b.size())->alignment(), 8u);
}

// open() on a FIFO blocks until a writer appears: the reader must refuse it
// without waiting.  The open runs in a thread; if it hangs, a writer is
// opened to release it and the test fails instead of hanging.
TEST(GgufLimits, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = temp_path("model.fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (bool mmap : {true, false}) {
    auto fut = std::async(std::launch::async, [&] {
      OpenOptions o;
      o.use_mmap = mmap;
      try {
        File::open(fifo, o);
        return std::string("opened");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    });
    if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      fut.wait();
      if (w >= 0) ::close(w);
      ADD_FAILURE() << "File::open blocked on a FIFO";
      continue;
    }
    const std::string msg = fut.get();
    EXPECT_EQ(msg.rfind("[gguf] ", 0), 0u) << msg;
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  }
  std::remove(fifo.c_str());
}

TEST(GgufLimits, DevicesAndDirectoriesAreRefused) {
  for (const char* p : {"/dev/zero", "/dev/null", "/tmp"}) {
    SCOPED_TRACE(p);
    expect_error([&] { File::open(p); }, LILIMS_ERR_IO, "not a regular file");
  }
  expect_error([&] { File::open(""); }, LILIMS_ERR_IO, "empty");
}

}  // namespace
}  // namespace lilims::gguf
