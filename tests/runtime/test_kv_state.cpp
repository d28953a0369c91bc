// Saving and restoring a session's state (runtime/kv_state.h): a restored
// session continues bit for bit as the original would; a state from another
// model, another KV type, another format version, a truncated or corrupt
// one, or one too long for the context is refused and the session is left
// exactly as it was.  Uses stories260K (../shared/data) and the tiny models
// in tests/data/tiny.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "memory_util.h"
#include "models/gguf.h"
#include "runtime/engine.h"
#include "runtime/kv_state.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md")

runtime::SessionOptions options(int32_t n_ctx, quant::Type kv = quant::Type::F16,
                                graph::KvCommit commit = graph::KvCommit::sync) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  so.kv_type = kv;
  so.kv_commit = commit;
  return so;
}

std::vector<uint8_t> save(runtime::Session& s) {
  std::vector<uint8_t> b((size_t)s.state_size());
  EXPECT_EQ(s.save_state(b.data(), b.size()), b.size());
  return b;
}

lilims_status load_status(runtime::Session& s, const std::vector<uint8_t>& b, size_t size,
                          std::string* msg = nullptr) {
  try {
    s.load_state(b.data(), size);
    return LILIMS_OK;
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
}

void expect_same_floats(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << " differ";
}

std::vector<int32_t> greedy(runtime::Session& s, int n) {
  runtime::GenerateOptions go;
  go.max_tokens = n;
  go.sampling.temperature = 0.0f;
  return s.generate_tokens({}, go).tokens;
}

// What a session holds, to show that a refused load changed nothing.
struct Snapshot {
  std::vector<int32_t> tokens;
  bool has_logits;
  std::vector<float> logits;
  explicit Snapshot(const runtime::Session& s)
      : tokens(s.tokens()), has_logits(s.has_logits()), logits(s.logits()) {}
};

void expect_unchanged(const Snapshot& before, const runtime::Session& s) {
  EXPECT_EQ(s.tokens(), before.tokens);
  EXPECT_EQ(s.has_logits(), before.has_logits);
  if (before.has_logits) expect_same_floats(s.logits(), before.logits, "logits");
}

// Bytes of one K (or V) row of a layer in the cache type, from the format's
// definition rather than the cache's.
uint64_t expected_row_bytes(quant::Type kv, int64_t kv_dim) {
  switch (kv) {
    case quant::Type::F32: return (uint64_t)kv_dim * 4;
    case quant::Type::Q8_0: return (uint64_t)kv_dim / 32 * 34;  // 32 int8 + an fp16 scale
    default: return (uint64_t)kv_dim * 2;
  }
}

struct RoundTripCase {
  const char* name;
  bool smollm2;  // stories260K's head dimension (8) is too small for a Q8_0 cache
  quant::Type kv;
  graph::KvCommit commit;
  bool file;
};

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << c.name; }

class KvStateRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

// The restored session's next logits and its greedy continuation equal the
// original's, bit for bit; the restoring session may have another n_ctx.
TEST_P(KvStateRoundTrip, ContinuesExactlyAsTheOriginal) {
  const RoundTripCase c = GetParam();
  const std::string path = c.smollm2 ? test::smollm2_path() : stories_path();
  LILIMS_REQUIRE_FILE(path, c.smollm2 ? "scripts/fetch_model.sh fetches it"
                                      : "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(path);
  const models::HParams& hp = model->hparams();
  runtime::Session a(*model, options(256, c.kv, c.commit));
  const std::vector<int32_t> prompt = model->tokenizer().encode("Once upon a time, a little fox", true, false);
  a.eval(prompt);
  const uint64_t n = prompt.size();
  EXPECT_EQ(a.state_size(), runtime::kStateHeaderBytes + 4 * n +
                                2 * (uint64_t)hp.n_layer * n * expected_row_bytes(c.kv, hp.kv_dim()) +
                                4 * (uint64_t)hp.n_vocab + 8);
  runtime::Session b(*model, options(128, c.kv));
  b.eval(model->tokenizer().encode("Something else entirely", true, false));  // replaced by the load
  if (c.file) {
    const std::string file = ::lilims::test::temp_path(std::string("kv_state_") + c.name + ".bin");
    a.save_state_file(file);
    EXPECT_EQ(test::read_file(file).size(), a.state_size());
    EXPECT_FALSE(test::file_exists(file + ".partial"));
    b.load_state_file(file);
    std::remove(file.c_str());
  } else {
    const std::vector<uint8_t> st = save(a);
    b.load_state(st.data(), st.size());
  }
  EXPECT_EQ(b.tokens(), a.tokens());
  ASSERT_TRUE(b.has_logits());
  expect_same_floats(b.logits(), a.logits(), "restored logits");
  const std::vector<int32_t> next = model->tokenizer().encode(" jumped", false, false);
  a.eval(next);
  b.eval(next);
  expect_same_floats(b.logits(), a.logits(), "logits after one more token");
  const std::vector<int32_t> ga = greedy(a, 40), gb = greedy(b, 40);
  EXPECT_GE(ga.size(), 10u) << "too short a continuation to compare";
  EXPECT_EQ(gb, ga) << "greedy continuations differ";
}

INSTANTIATE_TEST_SUITE_P(
    KvTypes, KvStateRoundTrip,
    ::testing::Values(
        RoundTripCase{"f16_buffer", false, quant::Type::F16, graph::KvCommit::sync, false},
        RoundTripCase{"f16_file", false, quant::Type::F16, graph::KvCommit::sync, true},
        RoundTripCase{"f32_buffer", false, quant::Type::F32, graph::KvCommit::sync, false},
        RoundTripCase{"f16_async", false, quant::Type::F16, graph::KvCommit::async, false},
        RoundTripCase{"smollm2_f16_file", true, quant::Type::F16, graph::KvCommit::sync, true},
        RoundTripCase{"smollm2_q8_0_buffer", true, quant::Type::Q8_0, graph::KvCommit::sync, false},
        RoundTripCase{"smollm2_q8_0_file", true, quant::Type::Q8_0, graph::KvCommit::async, true}),
    [](const auto& info) { return std::string(info.param.name); });

// Restoring writes only the rows of the state's tokens: a session with room
// for 8192 positions becomes resident for the 64 restored, not the context.
TEST(KvState, RestoreMakesOnlyTheRestoredRowsResident) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  LILIMS_REQUIRE_RSS();
  auto model = runtime::Model::open(test::smollm2_path());
  const models::HParams& hp = model->hparams();
  std::vector<int32_t> t{1};
  for (int i = 1; i < 64; ++i) t.push_back(1000 + 37 * i);
  std::vector<uint8_t> st;
  {
    runtime::Session src(*model, options(256));
    src.eval(t);
    st = save(src);
  }
  runtime::Session s(*model, options(8192));
  const int64_t per_pos = 2 * (int64_t)hp.n_layer * (int64_t)expected_row_bytes(quant::Type::F16, hp.kv_dim());
  const int64_t page = (int64_t)sysconf(_SC_PAGESIZE);
  // Each (layer, K|V) region may hold one partly used page at each end.
  const int64_t region_pages = (int64_t)2 * hp.n_layer * 2 * page;
  const int64_t r0 = test::rss_anon_bytes();
  s.load_state(st.data(), st.size());
  const int64_t grown = test::rss_anon_bytes() - r0;
  std::printf("restoring 64 tokens into n_ctx 8192: +%lld bytes (rows %lld, whole cache %lld)\n",
              (long long)grown, (long long)(64 * per_pos), (long long)(8192 * per_pos));
  EXPECT_LE(grown, 64 * per_pos + region_pages + (1 << 20));
  EXPECT_EQ(s.n_past(), 64);
}

TEST(KvState, SizeWithoutTokensOrLogits) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  const models::HParams& hp = model->hparams();
  runtime::Session s(*model, options(64));
  // An empty session: header and checksum only.
  EXPECT_EQ(s.state_size(), runtime::kStateHeaderBytes + 8);
  s.eval({1, 400, 401});
  s.truncate(2);  // no logits until the next eval, so none are saved
  EXPECT_EQ(s.state_size(), runtime::kStateHeaderBytes + 2 * 4 +
                                2 * (uint64_t)hp.n_layer * 2 * expected_row_bytes(quant::Type::F16, hp.kv_dim()) + 8);
}

// A truncated session saves no logits; the restored one has none either
// and evaluates on as the original does.
TEST(KvState, StateWithoutLogits) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session a(*model, options(64)), b(*model, options(64));
  a.eval({1, 400, 401, 402, 403});
  a.truncate(3);
  const std::vector<uint8_t> st = save(a);
  b.eval({1, 7, 8});
  b.load_state(st.data(), st.size());
  EXPECT_EQ(b.tokens(), (std::vector<int32_t>{1, 400, 401}));
  EXPECT_FALSE(b.has_logits());
  a.eval({404});
  b.eval({404});
  expect_same_floats(b.logits(), a.logits(), "logits after the truncated state");
}

TEST(KvState, EmptyStateEmptiesTheSession) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session a(*model, options(64)), b(*model, options(64)), fresh(*model, options(64));
  const std::vector<uint8_t> st = save(a);
  b.eval({1, 400, 401});
  b.load_state(st.data(), st.size());
  EXPECT_EQ(b.n_past(), 0);
  EXPECT_FALSE(b.has_logits());
  b.eval({1, 500});
  fresh.eval({1, 500});
  expect_same_floats(b.logits(), fresh.logits(), "logits after loading an empty state");
}

TEST(KvState, BufferTooSmallWritesNothing) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, options(64));
  s.eval({1, 400});
  std::vector<uint8_t> b((size_t)s.state_size() - 1, 0xAB);
  try {
    s.save_state(b.data(), b.size());
    FAIL() << "a buffer one byte short was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()).rfind("[state]", 0), 0u) << e.what();
  }
  for (uint8_t v : b) ASSERT_EQ(v, 0xAB);
}

// A state and the session it is refused by, the latter holding other
// tokens so that a load which changed it would show.
struct Refusal {
  std::unique_ptr<runtime::Model> model;
  std::unique_ptr<runtime::Session> target;
  std::vector<uint8_t> state;
};

Refusal refusal_setup(int n_tokens) {
  Refusal r;
  r.model = runtime::Model::open(stories_path());
  runtime::Session src(*r.model, options(64));
  std::vector<int32_t> t{1};
  for (int i = 1; i < n_tokens; ++i) t.push_back(300 + i);
  src.eval(t);
  r.state = save(src);
  r.target = std::make_unique<runtime::Session>(*r.model, options(64));
  r.target->eval({1, 20, 21, 22});
  return r;
}

// Twin of the target that saw the same tokens: after a refused load the
// target must still compute what the twin computes.
void expect_still_works(const Refusal& r, runtime::Session& target) {
  runtime::Session twin(*r.model, options(64));
  twin.eval({1, 20, 21, 22});
  twin.eval({23});
  target.eval({23});
  expect_same_floats(target.logits(), twin.logits(), "logits after a refused load");
}

// Every prefix of a real state is refused as truncated, without a crash.
TEST(KvState, EveryTruncationIsRefused) {
  REQUIRE_STORIES();
  Refusal r = refusal_setup(8);
  ASSERT_GT(r.state.size(), 4000u);  // a few KB: every prefix is tried
  const Snapshot before(*r.target);
  for (size_t len = 0; len < r.state.size(); ++len) {
    // A copy of exactly len bytes, so that ASan sees any read past them.
    const std::vector<uint8_t> prefix(r.state.begin(), r.state.begin() + (ptrdiff_t)len);
    std::string msg;
    ASSERT_EQ(load_status(*r.target, prefix, len, &msg), LILIMS_ERR_BAD_FORMAT) << "length " << len;
    ASSERT_NE(msg.find("truncated"), std::string::npos) << "length " << len << ": " << msg;
  }
  expect_unchanged(before, *r.target);
  expect_still_works(r, *r.target);
}

// Any single corrupt byte (header, tokens, rows, logits, checksum) is
// refused: as a format version this build does not read when it hits that
// field, else as a bad format.
TEST(KvState, EveryCorruptByteIsRefused) {
  REQUIRE_STORIES();
  Refusal r = refusal_setup(8);
  const Snapshot before(*r.target);
  const runtime::StateLayout lay = runtime::state_layout(8, (uint64_t)r.model->hparams().n_layer,
                                                         (uint64_t)r.model->hparams().kv_dim() * 2,
                                                         (uint64_t)r.model->hparams().n_vocab, true);
  ASSERT_EQ(lay.total, r.state.size());
  size_t corrupt_messages = 0;
  for (size_t at = 0; at < r.state.size(); ++at) {
    std::vector<uint8_t> bad = r.state;
    bad[at] ^= 0x20;
    std::string msg;
    const lilims_status st = load_status(*r.target, bad, bad.size(), &msg);
    const bool version = at >= 8 && at < 12;
    ASSERT_EQ(st, version ? LILIMS_ERR_UNSUPPORTED : LILIMS_ERR_BAD_FORMAT) << "byte " << at << ": " << msg;
    ASSERT_EQ(msg.rfind("[state]", 0), 0u) << msg;
    if (at >= lay.tokens && msg.find("corrupt") != std::string::npos) ++corrupt_messages;
  }
  // Past the header, every refusal is the checksum's.
  EXPECT_EQ(corrupt_messages, r.state.size() - lay.tokens);
  expect_unchanged(before, *r.target);
  expect_still_works(r, *r.target);
}

TEST(KvState, NewerFormatVersionIsRefusedNamingIt) {
  REQUIRE_STORIES();
  Refusal r = refusal_setup(4);
  r.state[8] = 2;  // format version 2 (the checksum no longer matters)
  std::string msg;
  EXPECT_EQ(load_status(*r.target, r.state, r.state.size(), &msg), LILIMS_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("format version 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("written by lilims " + std::to_string(LILIMS_VERSION_MAJOR) + "." +
                     std::to_string(LILIMS_VERSION_MINOR)),
            std::string::npos)
      << msg;
}

TEST(KvState, NotAStateIsRefused) {
  REQUIRE_STORIES();
  Refusal r = refusal_setup(4);
  const std::string gguf = test::read_file(stories_path());
  const std::vector<uint8_t> bytes(gguf.begin(), gguf.begin() + 4096);
  std::string msg;
  EXPECT_EQ(load_status(*r.target, bytes, bytes.size(), &msg), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(msg.find("not a lilims session state"), std::string::npos) << msg;
  // One byte too many is not a state either.
  std::vector<uint8_t> longer = r.state;
  longer.push_back(0);
  EXPECT_EQ(load_status(*r.target, longer, longer.size(), &msg), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(msg.find("follow the end"), std::string::npos) << msg;
}

TEST(KvState, MoreTokensThanTheContextAreRefused) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session src(*model, options(128));
  std::vector<int32_t> t{1};
  for (int i = 1; i < 40; ++i) t.push_back(300 + i);
  src.eval(t);
  const std::vector<uint8_t> st = save(src);
  runtime::Session small(*model, options(39));
  small.eval({1, 20});
  const Snapshot before(small);
  std::string msg;
  EXPECT_EQ(load_status(small, st, st.size(), &msg), LILIMS_ERR_CONTEXT_FULL);
  EXPECT_NE(msg.find("40 tokens"), std::string::npos) << msg;
  expect_unchanged(before, small);
  // Exactly full fits, and the context is then full.
  runtime::Session exact(*model, options(40));
  exact.load_state(st.data(), st.size());
  EXPECT_EQ(exact.n_past(), 40);
  EXPECT_THROW(exact.eval({5}), Error);
  expect_same_floats(exact.logits(), src.logits(), "logits of a state that fills the context");
}

TEST(KvState, OtherKvTypeIsRefused) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session f16(*model, options(64, quant::Type::F16));
  f16.eval({1, 400, 401});
  const std::vector<uint8_t> st = save(f16);
  runtime::Session f32(*model, options(64, quant::Type::F32));
  f32.eval({1, 20});
  const Snapshot before(f32);
  std::string msg;
  EXPECT_EQ(load_status(f32, st, st.size(), &msg), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("F16 KV cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find("this session's is F32"), std::string::npos) << msg;
  expect_unchanged(before, f32);
  // And the other way round.
  const std::vector<uint8_t> st32 = save(f32);
  EXPECT_EQ(load_status(f16, st32, st32.size(), &msg), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("F32 KV cache"), std::string::npos) << msg;
}

void expect_other_model(runtime::Session& s, const std::vector<uint8_t>& st) {
  const Snapshot before(s);
  std::string msg;
  EXPECT_EQ(load_status(s, st, st.size(), &msg), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
  expect_unchanged(before, s);
}

// The tiny llama shares stories260K's vocabulary and K/V width (32): only
// the fingerprint tells them apart.
TEST(KvState, StateOfAnotherModelIsRefused) {
  REQUIRE_STORIES();
  auto stories = runtime::Model::open(stories_path());
  auto tiny = runtime::Model::open(test::source_path("tests/data/tiny/llama.gguf"));
  ASSERT_EQ(tiny->hparams().kv_dim(), stories->hparams().kv_dim());
  ASSERT_EQ(tiny->hparams().n_vocab, stories->hparams().n_vocab);
  EXPECT_NE(runtime::model_fingerprint(*tiny), runtime::model_fingerprint(*stories));
  runtime::Session src(*stories, options(64));
  src.eval({1, 400, 401});
  const std::vector<uint8_t> st = save(src);
  runtime::Session t(*tiny, options(64));
  t.eval({1, 20});
  expect_other_model(t, st);
  if (test::file_exists(test::smollm2_path())) {
    auto smol = runtime::Model::open(test::smollm2_path());
    runtime::Session s(*smol, options(64));
    s.eval({1, 20});
    expect_other_model(s, st);
  }
}

// The same file with one weight changed (a fine-tune of the same shapes)
// has another fingerprint; the same file opened twice, or read instead of
// mapped, has the same.
TEST(KvState, FingerprintSeesTheWeights) {
  REQUIRE_STORIES();
  auto a = runtime::Model::open(stories_path());
  runtime::ModelOptions read;
  read.use_mmap = false;
  EXPECT_EQ(runtime::model_fingerprint(*runtime::Model::open(stories_path(), read)),
            runtime::model_fingerprint(*a));
  // The cached value (what save and load use) is the same hash.
  EXPECT_EQ(a->fingerprint(), runtime::model_fingerprint(*a));
  EXPECT_EQ(a->fingerprint(), a->fingerprint());
  std::string bytes = test::read_file(stories_path());
  const gguf::TensorInfo* t = a->weights().file->find_tensor("blk.2.attn_v.weight");
  ASSERT_NE(t, nullptr);
  const size_t at = (size_t)(a->weights().file->data_offset() + t->offset);
  float w;
  std::memcpy(&w, &bytes[at], 4);
  w = w * 1.01f + 1e-3f;
  std::memcpy(&bytes[at], &w, 4);
  const std::string path = ::lilims::test::temp_path("kv_state_finetune.gguf");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  auto b = runtime::Model::open(path);
  std::remove(path.c_str());
  EXPECT_NE(runtime::model_fingerprint(*b), runtime::model_fingerprint(*a));
  runtime::Session src(*a, options(64));
  src.eval({1, 400, 401});
  runtime::Session dst(*b, options(64));
  dst.eval({1, 20});
  expect_other_model(dst, save(src));
}

// phi3's LongRoPE rotates keys with short factors up to its original
// context (32 in the tiny model) and long ones beyond: a state moves only
// between sessions on the same side.
TEST(KvState, Phi3StateNeedsTheSameRopeFactors) {
  auto model = runtime::Model::open(test::source_path("tests/data/tiny/phi3.gguf"));
  ASSERT_EQ(model->hparams().rope_orig_ctx, 32);
  runtime::Session long_a(*model, options(64)), long_b(*model, options(128)),
      short_ctx(*model, options(32));
  long_a.eval({1, 400, 401, 402});
  const std::vector<uint8_t> st = save(long_a);
  long_b.load_state(st.data(), st.size());
  long_a.eval({403});
  long_b.eval({403});
  expect_same_floats(long_b.logits(), long_a.logits(), "phi3 logits after a restore");
  std::string msg;
  EXPECT_EQ(load_status(short_ctx, st, st.size(), &msg), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(msg.find("RoPE"), std::string::npos) << msg;
  EXPECT_EQ(short_ctx.n_past(), 0);
}

TEST(KvState, BusySessionRefusesEveryStateCall) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, options(64));
  s.eval({1, 400});
  const std::vector<uint8_t> st = save(s);
  std::vector<lilims_status> seen;
  const auto status_of = [&](const std::function<void()>& fn) {
    try {
      fn();
      seen.push_back(LILIMS_OK);
    } catch (const Error& e) {
      seen.push_back(e.status());
    }
  };
  std::vector<uint8_t> buf(st.size() * 2);
  const std::string path = ::lilims::test::temp_path("kv_state_busy.bin");
  runtime::GenerateOptions go;
  go.max_tokens = 2;
  go.sampling.temperature = 0.0f;
  s.save_state_file(path);  // so that only the busy flag can refuse the load
  const std::string saved = test::read_file(path);
  go.on_token = [&](int32_t, const std::string&) {
    if (!seen.empty()) return false;
    status_of([&] { s.state_size(); });
    status_of([&] { s.save_state(buf.data(), buf.size()); });
    status_of([&] { s.save_state_file(path); });
    status_of([&] { s.load_state(st.data(), st.size()); });
    status_of([&] { s.load_state_file(path); });
    status_of([&] { s.truncate(1); });
    return false;
  };
  s.generate_tokens({401}, go);
  ASSERT_EQ(seen.size(), 6u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], LILIMS_ERR_BUSY) << "call " << i;
  EXPECT_EQ(test::read_file(path), saved);
  EXPECT_FALSE(test::file_exists(path + ".partial"));
  std::remove(path.c_str());
}

TEST(KvState, FileErrors) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, options(64));
  s.eval({1, 400});
  const auto status_of = [&](const std::function<void()>& fn) {
    try {
      fn();
      return LILIMS_OK;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[state]", 0), 0u) << e.what();
      return e.status();
    }
  };
  EXPECT_EQ(status_of([&] { s.load_state_file(::lilims::test::temp_path("no_such_state.bin")); }),
            LILIMS_ERR_IO);
  EXPECT_EQ(status_of([&] { s.load_state_file(testing::TempDir()); }), LILIMS_ERR_IO);  // a directory
  EXPECT_EQ(status_of([&] { s.save_state_file(testing::TempDir() + "no_such_dir/state.bin"); }),
            LILIMS_ERR_IO);
  EXPECT_EQ(status_of([&] { s.save_state_file(""); }), LILIMS_ERR_IO);
  EXPECT_EQ(s.n_past(), 2);
}

}  // namespace
}  // namespace lilims
