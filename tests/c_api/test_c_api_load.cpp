// Loading through the public header: from memory and from a range of an
// open file (the same logits as from a path), the progress callback and its
// abort, and the model's memory budget.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api_ptr.h"
#include "kernels/cpu.h"
#include "lilims/lilims.h"
#include "models/gguf.h"
#include "models/layout_file.h"
#include "models/requantize.h"
#include "test_util.h"

namespace {

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

// A heap buffer aligned as lilims_model_open_memory asks, plus `shift`
// bytes (to test a misaligned start).
struct Buffer {
  explicit Buffer(const std::string& bytes, size_t shift = 0) : shift_(shift) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes.size() + shift + 1) != 0) std::abort();
    mem_.reset(static_cast<char*>(p));
    std::memcpy(mem_.get() + shift, bytes.data(), bytes.size());
  }
  const void* data() const { return mem_.get() + shift_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> mem_;
  size_t shift_;
};

// A file holding `prefix` bytes of junk, the model, then more junk: a model
// inside an Android APK or a bundle.
struct Bundle {
  Bundle(const std::string& model, size_t prefix) {
    char tmpl[] = "/tmp/lilims_bundle_XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) std::abort();
    path = tmpl;
    std::string bytes(prefix, 'x');
    bytes += model;
    bytes += std::string(777, 'y');
    if (write(fd, bytes.data(), bytes.size()) != (ssize_t)bytes.size()) std::abort();
    close(fd);
  }
  ~Bundle() { std::remove(path.c_str()); }
  std::string path;
};

using lilims::test::ModelPtr;
using lilims::test::SessionPtr;

// The logits after a short prompt, or empty (with a test failure) when a step fails.
std::vector<float> logits_of(lilims_model* m) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = 64;
  sp.n_threads = 1;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  if (!s) return {};
  SessionPtr session(s);
  const char* text = "Once upon a time, a little girl";
  lilims_token ids[64];
  size_t n = 0;
  EXPECT_EQ(lilims_tokenize(m, text, std::strlen(text), 1, 0, ids, 64, &n), LILIMS_OK);
  EXPECT_EQ(lilims_session_eval(s, ids, n), LILIMS_OK) << lilims_last_error();
  lilims_model_info info;
  info.struct_size = sizeof info;
  EXPECT_EQ(lilims_model_get_info(m, &info), LILIMS_OK);
  const float* l = lilims_session_logits(s);
  if (!l) return {};
  return std::vector<float>(l, l + info.n_vocab);
}

std::vector<float> logits_from_path(const std::string& path) {
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  ModelPtr model(m);
  return m ? logits_of(m) : std::vector<float>{};
}

// Memory and descriptor loads run the same weights through the same
// kernels as a path load: the logits are bit-identical.
void check_same_logits(const std::string& path) {
  const std::string bytes = lilims::test::read_file(path);
  ASSERT_FALSE(bytes.empty());
  const std::vector<float> want = logits_from_path(path);
  ASSERT_FALSE(want.empty());

  const Buffer buf(bytes);
  lilims_model* m = nullptr;
  ASSERT_EQ(lilims_model_open_memory(buf.data(), bytes.size(), nullptr, &m), LILIMS_OK)
      << lilims_last_error();
  ModelPtr from_memory(m);
  EXPECT_EQ(logits_of(m), want) << "memory";

  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  m = nullptr;
  const lilims_status st = lilims_model_open_fd(fd, 0, 0, nullptr, &m);
  close(fd);  // the model does not need it any more
  ASSERT_EQ(st, LILIMS_OK) << lilims_last_error();
  ModelPtr from_fd(m);
  EXPECT_EQ(logits_of(m), want) << "fd";
}

TEST(CApiLoad, MemoryAndFdGiveThePathLogitsStories260K) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  check_same_logits(stories_path());
}

TEST(CApiLoad, MemoryAndFdGiveThePathLogitsSmolLM2) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  check_same_logits(path);
}

// The model at an offset that is not a page multiple: mapped from the page
// before it (a multiple of 16) or read (an odd offset), mapped or not.
TEST(CApiLoad, FdAtAnOffsetInsideABiggerFile) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  const std::string bytes = lilims::test::read_file(stories_path());
  const std::vector<float> want = logits_from_path(stories_path());
  ASSERT_FALSE(want.empty());
  for (size_t offset : {size_t(3 * 4096 + 96), size_t(12345)}) {
    const Bundle bundle(bytes, offset);
    for (int mmap : {1, 0}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + ", use_mmap " + std::to_string(mmap));
      const int fd = open(bundle.path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      lilims_model_params mp = lilims_model_default_params();
      mp.use_mmap = mmap;
      lilims_model* m = nullptr;
      const lilims_status st = lilims_model_open_fd(fd, offset, bytes.size(), &mp, &m);
      close(fd);
      ASSERT_EQ(st, LILIMS_OK) << lilims_last_error();
      ModelPtr model(m);
      lilims_model_info info;
      info.struct_size = sizeof info;
      ASSERT_EQ(lilims_model_get_info(m, &info), LILIMS_OK);
      EXPECT_EQ(info.file_bytes, bytes.size());
      EXPECT_EQ(logits_of(m), want);
    }
  }
}

TEST(CApiLoad, FdRangesThatDoNotHoldTheModel) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  const std::string bytes = lilims::test::read_file(stories_path());
  const size_t offset = 5000;
  const Bundle bundle(bytes, offset);
  const int fd = open(bundle.path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  lilims_model* m = nullptr;
  // A size that cuts the model short: the last tensors run past the end.
  EXPECT_EQ(lilims_model_open_fd(fd, offset, bytes.size() - 4096, nullptr, &m),
            LILIMS_ERR_BAD_FORMAT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(lilims_last_error()).find("[gguf] tensor"), std::string::npos)
      << lilims_last_error();
  EXPECT_NE(std::string(lilims_last_error()).find("runs past the end"), std::string::npos)
      << lilims_last_error();
  // A range past the end of the file.
  EXPECT_EQ(lilims_model_open_fd(fd, offset, bytes.size() + 1000, nullptr, &m), LILIMS_ERR_IO);
  EXPECT_NE(std::string(lilims_last_error()).find("bytes asked but the file has"),
            std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(lilims_model_open_fd(fd, 1u << 30, 0, nullptr, &m), LILIMS_ERR_IO);
  EXPECT_NE(std::string(lilims_last_error()).find("past the end of the file"), std::string::npos)
      << lilims_last_error();
  close(fd);
  EXPECT_EQ(lilims_model_open_fd(fd, 0, 0, nullptr, &m), LILIMS_ERR_IO);  // closed
  EXPECT_EQ(lilims_model_open_fd(-1, 0, 0, nullptr, &m), LILIMS_ERR_IO);
  EXPECT_EQ(m, nullptr);
}

TEST(CApiLoad, MemoryMustBeAlignedAndWhole) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  const std::string bytes = lilims::test::read_file(stories_path());
  const Buffer shifted(bytes, 4);
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open_memory(shifted.data(), bytes.size(), nullptr, &m),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("not a multiple of 16"), std::string::npos)
      << lilims_last_error();
  const Buffer buf(bytes);
  EXPECT_EQ(lilims_model_open_memory(buf.data(), bytes.size() / 2, nullptr, &m),
            LILIMS_ERR_BAD_FORMAT);
  EXPECT_EQ(lilims_model_open_memory(nullptr, 10, nullptr, &m), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
}

struct Progress {
  std::vector<float> fractions;
  size_t abort_at = (size_t)-1;  // the call (0-based) that returns nonzero
};

int on_progress(void* user, float fraction) {
  auto* p = static_cast<Progress*>(user);
  p->fractions.push_back(fraction);
  return p->fractions.size() - 1 == p->abort_at ? 1 : 0;
}

lilims_status open_with_progress(const std::string& path, Progress& p, lilims_model** m) {
  lilims_model_params mp = lilims_model_default_params();
  mp.progress = on_progress;
  mp.progress_user_data = &p;
  return lilims_model_open(path.c_str(), &mp, m);
}

// From 0 to 1, nondecreasing, at least once per tensor.
TEST(CApiLoad, ProgressGoesFromZeroToOne) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  Progress p;
  lilims_model* m = nullptr;
  ASSERT_EQ(open_with_progress(path, p, &m), LILIMS_OK) << lilims_last_error();
  ModelPtr model(m);
  ASSERT_GE(p.fractions.size(), 30u * 9);  // 30 blocks of 9 tensors
  EXPECT_EQ(p.fractions.front(), 0.0f);
  EXPECT_EQ(p.fractions.back(), 1.0f);
  for (size_t i = 1; i < p.fractions.size(); ++i) {
    EXPECT_GE(p.fractions[i], p.fractions[i - 1]) << "call " << i;
  }
}

// Abandoned at the first, a middle and the last report: nothing is returned
// and (under ASan) nothing leaks.
TEST(CApiLoad, ProgressCanAbort) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  Progress all;
  lilims_model* m = nullptr;
  ASSERT_EQ(open_with_progress(stories_path(), all, &m), LILIMS_OK);
  lilims_model_free(m);
  ASSERT_GE(all.fractions.size(), 4u);
  for (size_t at : {size_t(0), all.fractions.size() / 2, all.fractions.size() - 1}) {
    Progress p;
    p.abort_at = at;
    m = reinterpret_cast<lilims_model*>(&p);  // must be reset to NULL
    EXPECT_EQ(open_with_progress(stories_path(), p, &m), LILIMS_ERR_CANCELLED) << "at " << at;
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(p.fractions.size(), at + 1) << "no report after the abort";
    EXPECT_STREQ(lilims_last_error(), "[model_open] cancelled by the progress callback");
  }
}

// The budget is checked before anything big is allocated: the load never
// gets past its first report.
TEST(CApiLoad, ModelBudget) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  const uint64_t file_bytes = lilims::test::read_file(path).size();
  for (int mmap : {1, 0}) {
    Progress p;
    lilims_model_params mp = lilims_model_default_params();
    mp.use_mmap = mmap;
    mp.progress = on_progress;
    mp.progress_user_data = &p;
    mp.memory_budget = file_bytes / 2;
    lilims_model* m = nullptr;
    EXPECT_EQ(lilims_model_open(path.c_str(), &mp, &m), LILIMS_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(m, nullptr);
    const std::string err = lilims_last_error();
    EXPECT_NE(err.find("over the memory budget of " + std::to_string(file_bytes / 2) + " bytes"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(" needs "), std::string::npos) << err;
    EXPECT_EQ(p.fractions, std::vector<float>{0.0f});
    // Three times the file is enough (a read file plus repacked copies).
    mp.memory_budget = 3 * file_bytes;
    ASSERT_EQ(lilims_model_open(path.c_str(), &mp, &m), LILIMS_OK) << lilims_last_error();
    lilims_model_free(m);
  }
}

}  // namespace

namespace {

// lilims_model_info names each family's file by its general.architecture.
TEST(CApiLoad, InfoNamesTheArchitecture) {
  const struct {
    const char* file;
    const char* arch;
  } cases[] = {{"gemma3", "gemma3"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"},
               {"llama3", "llama"},  {"phi2", "phi2"},   {"phi3", "phi3"}};
  for (const auto& c : cases) {
    const std::string path = lilims::test::source_path(std::string("tests/data/families/") + c.file + ".q8_0.gguf");
    lilims_model* m = nullptr;
    ASSERT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << c.file;
    ModelPtr model(m);
    lilims_model_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ASSERT_EQ(lilims_model_get_info(m, &info), LILIMS_OK);
    EXPECT_STREQ(info.architecture, c.arch) << c.file;
  }
}

}  // namespace

namespace {

// Where the weights live: a plain file's repacked copy is reported with its
// reason; a file laid out for this CPU (`lilims quantize --layout native`)
// is read in place; an app built against the header before these fields
// (a smaller struct_size) gets the rest and nothing past its struct.
TEST(CApiLoad, InfoReportsCopiedWeightBytesAndWhy) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  auto f = lilims::gguf::File::open(stories_path());
  lilims::gguf::RequantizeOptions ro;
  ro.method = lilims::quant::QuantMethod::plain;
  const std::vector<uint8_t> plain = lilims::gguf::requantize(*f, lilims::quant::Type::Q8_0, ro).to_bytes();
  const bool simd = lilims::kernels::active_isa() != lilims::kernels::Isa::ref;
  std::vector<uint8_t> laid = plain;
  if (simd) {
    auto pf = lilims::gguf::File::from_bytes(plain.data(), plain.size());
    laid = lilims::gguf::lay_out(*pf, lilims::gguf::layout_target("native")).to_bytes();
  }
  const Buffer a(std::string(plain.begin(), plain.end())), b(std::string(laid.begin(), laid.end()));
  lilims_model *pm = nullptr, *lm = nullptr;
  ASSERT_EQ(lilims_model_open_memory(a.data(), plain.size(), nullptr, &pm), LILIMS_OK);
  ModelPtr pmodel(pm);
  ASSERT_EQ(lilims_model_open_memory(b.data(), laid.size(), nullptr, &lm), LILIMS_OK);
  ModelPtr lmodel(lm);
  lilims_model_info pi, li;
  std::memset(&pi, 0, sizeof pi);
  std::memset(&li, 0, sizeof li);
  pi.struct_size = li.struct_size = sizeof pi;
  ASSERT_EQ(lilims_model_get_info(pm, &pi), LILIMS_OK);
  ASSERT_EQ(lilims_model_get_info(lm, &li), LILIMS_OK);
  EXPECT_GT(pi.weight_bytes_mapped + pi.weight_bytes_copied, 0u);
  if (simd) {
    EXPECT_GT(pi.weight_bytes_copied, 0u);
    EXPECT_NE(std::string(pi.weight_copy_reason).find("repacked into"), std::string::npos) << pi.weight_copy_reason;
    EXPECT_EQ(li.weight_bytes_copied, 0u);
    EXPECT_STREQ(li.weight_copy_reason, "");
    EXPECT_EQ(li.weight_bytes_mapped, pi.weight_bytes_mapped + pi.weight_bytes_copied);
  } else {
    EXPECT_EQ(pi.weight_bytes_copied, 0u);  // the reference kernels read the file's blocks
  }

  // The struct as it was before the placement fields.
  const size_t old_size = offsetof(lilims_model_info, weight_bytes_mapped);
  std::vector<unsigned char> raw(sizeof(lilims_model_info), 0xab);
  lilims_model_info* old = reinterpret_cast<lilims_model_info*>(raw.data());
  old->struct_size = old_size;
  ASSERT_EQ(lilims_model_get_info(pm, old), LILIMS_OK);
  EXPECT_EQ(old->n_vocab, pi.n_vocab);
  for (size_t k = old_size; k < raw.size(); ++k) ASSERT_EQ(raw[k], 0xab) << "byte " << k << " written";
  old->struct_size = old_size - 1;
  EXPECT_EQ(lilims_model_get_info(pm, old), LILIMS_ERR_INVALID_ARGUMENT);
}

}  // namespace
