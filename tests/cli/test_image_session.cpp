// An image in a session through the runtime, the C API and `lilims run`:
// the tiny LLaVA's landscape PNG evaluated after "USER:" and before the
// rest of the prompt reproduces HF's logits (tests/data/llava/goldens.json,
// scripts/goldens/gen_tiny_llava.py), and the guards of a session holding
// image rows (a saved state keeps them; context shift and prompt-lookup
// drafts do not move or copy them) hold.
//
// Tolerance: as test_llava_prompt.cpp derives it, fp32 arithmetic with an
// F32 KV cache is within 7 * 256 * 2^-24 * 10 = 1.1e-3 of float64 on logits
// below 10, the encoder's error (below 2e-5) included; the C API's F16 KV
// cache adds 2 * 2 * 2^-11 * 10 = 2.0e-2.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/xxh3.h"
#include "cli_util.h"
#include "lilims/lilims.h"
#include "runtime/engine.h"
#include "runtime/kv_state.h"
#include "runtime/speculative.h"
#include "runtime/vision.h"
#include "test_util.h"
#include "tokenizer/chat.h"
#include "tools/image_io.h"

namespace lilims::test {
namespace {

using json = nlohmann::json;

std::string llava(const std::string& f) { return source_path("tests/data/llava/" + f); }
std::string tiny_random() { return shared_data("tiny-gguf/llama-2-tiny-random.gguf"); }

constexpr double kTolF32 = 7 * 256 * 0x1p-24 * 10;
constexpr double kTolF16Kv = 2 * 2 * 0x1p-11 * 10;
constexpr int kImageRows = 16;

json prompt_goldens() { return json::parse(read_file(llava("goldens.json")))["prompt"]; }

double max_diff(const float* row, const json& want) {
  double worst = 0.0;
  for (size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::fabs(row[v] - want[v].get<double>()));
  return worst;
}

int32_t argmax(const json& logits) {
  int32_t best = 0;
  for (size_t v = 1; v < logits.size(); ++v) {
    if (logits[v].get<double>() > logits[(size_t)best].get<double>()) best = (int32_t)v;
  }
  return best;
}

struct ModelDel {
  void operator()(lilims_model* m) const { lilims_model_free(m); }
};
struct SessionDel {
  void operator()(lilims_session* s) const { lilims_session_free(s); }
};
struct MmprojDel {
  void operator()(lilims_mmproj* p) const { lilims_mmproj_free(p); }
};

std::unique_ptr<lilims_model, ModelDel> open_model(const std::string& path) {
  const lilims_model_params mp = lilims_model_default_params();
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(path.c_str(), &mp, &m), LILIMS_OK) << lilims_last_error();
  return std::unique_ptr<lilims_model, ModelDel>(m);
}

std::unique_ptr<lilims_session, SessionDel> open_session(lilims_model* m) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = 64;
  sp.n_threads = 2;
  sp.n_batch = 8;  // the image's rows run as two prefill blocks
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  return std::unique_ptr<lilims_session, SessionDel>(s);
}

std::unique_ptr<lilims_mmproj, MmprojDel> open_mmproj() {
  lilims_mmproj* p = nullptr;
  EXPECT_EQ(lilims_mmproj_open(llava("mmproj.gguf").c_str(), &p), LILIMS_OK) << lilims_last_error();
  return std::unique_ptr<lilims_mmproj, MmprojDel>(p);
}

// The golden prompt's ids before and after the image.
void split_ids(const json& g, std::vector<int32_t>* before, std::vector<int32_t>* after) {
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  const int first = g["positions"][0].get<int>();
  before->assign(ids.begin(), ids.begin() + first);
  after->assign(ids.begin() + first + kImageRows, ids.end());
}

TEST(CApiImage, LogitsMatchTransformers) {
  const json g = prompt_goldens();
  ASSERT_EQ(g["image"].get<std::string>(), "landscape");
  std::vector<int32_t> before, after;
  split_ids(g, &before, &after);
  auto model = open_model(llava("text.gguf"));
  auto session = open_session(model.get());
  auto mmproj = open_mmproj();
  ASSERT_TRUE(model && session && mmproj);
  EXPECT_EQ(lilims_mmproj_last_encode_seconds(mmproj.get()), 0.0);
  const tools::DecodedImage img = tools::decode_image_file(llava("img_landscape.png"));
  ASSERT_EQ(lilims_session_eval(session.get(), before.data(), before.size()), LILIMS_OK);
  int32_t n = 0;
  ASSERT_EQ(lilims_session_eval_image(session.get(), mmproj.get(), img.rgb.data(), img.width,
                                      img.height, 3 * (size_t)img.width, &n),
            LILIMS_OK)
      << lilims_last_error();
  EXPECT_EQ(n, kImageRows);
  EXPECT_EQ(lilims_session_n_past(session.get()), (int32_t)before.size() + kImageRows);
  EXPECT_GT(lilims_mmproj_last_encode_seconds(mmproj.get()), 0.0);
  // The first text row after the image (golden position 23), then the last (49).
  ASSERT_EQ(lilims_session_eval(session.get(), after.data(), 1), LILIMS_OK);
  const float* logits = lilims_session_logits(session.get());
  ASSERT_NE(logits, nullptr);
  EXPECT_LE(max_diff(logits, g["logits"][1]), kTolF16Kv);
  ASSERT_EQ(lilims_session_eval(session.get(), after.data() + 1, after.size() - 1), LILIMS_OK);
  logits = lilims_session_logits(session.get());
  EXPECT_LE(max_diff(logits, g["logits"][2]), kTolF16Kv);
  // The session's tokens hold -1 at the image's positions.
  std::vector<lilims_token> toks(64);
  size_t count = 0;
  ASSERT_EQ(lilims_session_tokens(session.get(), toks.data(), toks.size(), &count), LILIMS_OK);
  ASSERT_EQ(count, before.size() + kImageRows + after.size());
  for (size_t i = 0; i < count; ++i) {
    const bool image = i >= before.size() && i < before.size() + kImageRows;
    EXPECT_EQ(toks[i] == -1, image) << "position " << i;
  }
  // Another image moves the logits far beyond the tolerance.
  const tools::DecodedImage other = tools::decode_image_file(llava("img_square.png"));
  ASSERT_EQ(lilims_session_reset(session.get()), LILIMS_OK);
  ASSERT_EQ(lilims_session_eval(session.get(), before.data(), before.size()), LILIMS_OK);
  ASSERT_EQ(lilims_session_eval_image(session.get(), mmproj.get(), other.rgb.data(), other.width,
                                      other.height, 3 * (size_t)other.width, &n),
            LILIMS_OK);
  ASSERT_EQ(lilims_session_eval(session.get(), after.data(), after.size()), LILIMS_OK);
  EXPECT_GT(max_diff(lilims_session_logits(session.get()), g["logits"][2]), 5 * kTolF16Kv);
}

TEST(CApiImage, PaddedRowsAreReadByStride) {
  // The same pixels with 5 bytes of junk after each row give the same logits.
  const json g = prompt_goldens();
  std::vector<int32_t> before, after;
  split_ids(g, &before, &after);
  auto model = open_model(llava("text.gguf"));
  auto mmproj = open_mmproj();
  const tools::DecodedImage img = tools::decode_image_file(llava("img_landscape.png"));
  const size_t row = 3 * (size_t)img.width, stride = row + 5;
  std::vector<uint8_t> padded(stride * (size_t)img.height, 0xA5);
  for (int y = 0; y < img.height; ++y) {
    std::copy_n(img.rgb.data() + (size_t)y * row, row, padded.data() + (size_t)y * stride);
  }
  auto session = open_session(model.get());
  ASSERT_EQ(lilims_session_eval(session.get(), before.data(), before.size()), LILIMS_OK);
  ASSERT_EQ(lilims_session_eval_image(session.get(), mmproj.get(), padded.data(), img.width,
                                      img.height, stride, nullptr),
            LILIMS_OK)
      << lilims_last_error();
  ASSERT_EQ(lilims_session_eval(session.get(), after.data(), after.size()), LILIMS_OK);
  EXPECT_LE(max_diff(lilims_session_logits(session.get()), g["logits"][2]), kTolF16Kv);
}

TEST(CApiImage, BadInputIsRefusedWithClearErrors) {
  auto model = open_model(llava("text.gguf"));
  auto session = open_session(model.get());
  auto mmproj = open_mmproj();
  const std::vector<uint8_t> px(3 * 8 * 8, 128);
  int32_t n = 7;
  const auto refused = [&](lilims_status st, lilims_status want, const std::string& needle) {
    EXPECT_EQ(st, want) << lilims_last_error();
    EXPECT_NE(std::string(lilims_last_error()).find(needle), std::string::npos) << lilims_last_error();
    EXPECT_EQ(n, 0);
    EXPECT_EQ(lilims_session_n_past(session.get()), 0);
    n = 7;
  };
  refused(lilims_session_eval_image(nullptr, mmproj.get(), px.data(), 8, 8, 24, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[session_eval_image] session is NULL");
  refused(lilims_session_eval_image(session.get(), nullptr, px.data(), 8, 8, 24, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[session_eval_image] mmproj is NULL");
  refused(lilims_session_eval_image(session.get(), mmproj.get(), nullptr, 8, 8, 24, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[session_eval_image] rgb is NULL");
  refused(lilims_session_eval_image(session.get(), mmproj.get(), px.data(), 0, 8, 24, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[image]");
  refused(lilims_session_eval_image(session.get(), mmproj.get(), px.data(), 8, -1, 24, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[image]");
  refused(lilims_session_eval_image(session.get(), mmproj.get(), px.data(), 8, 8, 23, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[image]");
  refused(lilims_session_eval_image(session.get(), mmproj.get(), px.data(), 100000, 1, 300000, &n),
          LILIMS_ERR_INVALID_ARGUMENT, "[image]");
  // No room: the context holds 64 positions, 50 of them in use.
  std::vector<lilims_token> fill(50, 410);
  ASSERT_EQ(lilims_session_eval(session.get(), fill.data(), fill.size()), LILIMS_OK);
  EXPECT_EQ(lilims_session_eval_image(session.get(), mmproj.get(), px.data(), 8, 8, 24, &n),
            LILIMS_ERR_CONTEXT_FULL);
  EXPECT_NE(std::string(lilims_last_error()).find("do not fit"), std::string::npos) << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(session.get()), 50);
  ASSERT_EQ(lilims_session_reset(session.get()), LILIMS_OK);
  // A projector made for another model (its width 64, this model's 8).
  auto other = open_model(tiny_random());
  auto other_session = open_session(other.get());
  EXPECT_EQ(lilims_session_eval_image(other_session.get(), mmproj.get(), px.data(), 8, 8, 24, &n),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("output width 64 is not the model's embedding width 8"),
            std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(other_session.get()), 0);
  // Opening: NULLs, a missing file, a text model instead of a projector.
  lilims_mmproj* p = reinterpret_cast<lilims_mmproj*>(&n);
  EXPECT_EQ(lilims_mmproj_open(nullptr, &p), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(lilims_mmproj_open(llava("mmproj.gguf").c_str(), nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_mmproj_open("/nonexistent/mmproj.gguf", &p), LILIMS_ERR_IO);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(lilims_mmproj_open(llava("text.gguf").c_str(), &p), LILIMS_ERR_UNSUPPORTED) << lilims_last_error();
  EXPECT_NE(std::string(lilims_last_error()).find("[clip]"), std::string::npos) << lilims_last_error();
  EXPECT_EQ(p, nullptr);
  lilims_mmproj_free(nullptr);
  EXPECT_EQ(lilims_mmproj_last_encode_seconds(nullptr), 0.0);
}

// A session holding image rows through the C++ API.
struct ImageSession {
  std::unique_ptr<runtime::Model> model = runtime::Model::open(llava("text.gguf"));
  std::unique_ptr<runtime::Session> session;
  std::unique_ptr<runtime::Projector> projector = runtime::Projector::open(llava("mmproj.gguf"));
  std::vector<int32_t> before, after;

  explicit ImageSession(int32_t n_ctx = 64) {
    runtime::SessionOptions so;
    so.n_ctx = n_ctx;
    so.n_threads = 2;
    so.n_batch = 8;
    so.kv_type = quant::Type::F32;
    session = std::make_unique<runtime::Session>(*model, so);
    split_ids(prompt_goldens(), &before, &after);
  }
  void eval_image() {
    const tools::DecodedImage img = tools::decode_image_file(llava("img_landscape.png"));
    session->eval(before);
    EXPECT_EQ(projector->eval_image(*session, {img.rgb.data(), img.width, img.height, 3 * (size_t)img.width}),
              kImageRows);
  }
};

lilims_status status_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.status();
  }
  return LILIMS_OK;
}

TEST(SessionImage, GreedyAnswerStartsAtTheGoldenArgmax) {
  ImageSession s;
  s.eval_image();
  runtime::GenerateOptions opt;
  opt.max_tokens = 4;
  opt.sampling.temperature = 0.0f;
  const runtime::GenerateResult r = s.session->generate_tokens(s.after, opt);
  ASSERT_FALSE(r.tokens.empty());
  EXPECT_EQ(r.tokens[0], argmax(prompt_goldens()["logits"][2]));
}

// A state saved while the session holds image rows keeps them: loaded into
// a fresh session (no projector), the logits and the greedy answer are the
// ones the saving session gives.  Both sessions run the same kernels on the
// same rows, so equality is exact.
TEST(SessionImage, StateKeepsTheImageRows) {
  ImageSession s;
  s.eval_image();
  const size_t size = s.session->state_size();
  std::vector<uint8_t> buf(size);
  ASSERT_EQ(s.session->save_state(buf.data(), buf.size()), size);
  const std::string path = cli::tmp_path("image_state.bin");
  s.session->save_state_file(path);
  EXPECT_EQ(read_file(path).size(), size);
  runtime::GenerateOptions opt;
  opt.max_tokens = 6;
  opt.sampling.temperature = 0.0f;
  const std::vector<int32_t> held = s.session->tokens();
  ASSERT_EQ(std::count(held.begin(), held.end(), runtime::Session::kEmbeddingRow), kImageRows);
  std::vector<float> want_logits;
  s.session->eval_all_logits(s.after, want_logits);
  s.session->truncate((int32_t)held.size());
  const runtime::GenerateResult want = s.session->generate_tokens(s.after, opt);

  for (int from_file = 0; from_file < 2; ++from_file) {
    runtime::SessionOptions so;
    so.n_ctx = 64;
    so.n_threads = 2;
    so.n_batch = 8;
    so.kv_type = quant::Type::F32;
    runtime::Session fresh(*s.model, so);
    if (from_file) {
      fresh.load_state_file(path);
    } else {
      fresh.load_state(buf.data(), buf.size());
    }
    EXPECT_EQ(fresh.tokens(), held);
    // Saved again, the bytes are the same state.
    std::vector<uint8_t> again(fresh.state_size());
    fresh.save_state(again.data(), again.size());
    EXPECT_EQ(again, buf);
    std::vector<float> got_logits;
    fresh.eval_all_logits(s.after, got_logits);
    EXPECT_EQ(got_logits, want_logits);
    fresh.truncate((int32_t)held.size());
    const runtime::GenerateResult got = fresh.generate_tokens(s.after, opt);
    EXPECT_EQ(got.tokens, want.tokens);
  }
  // Into a session of another model: refused, the session unchanged.
  auto other = runtime::Model::open(tiny_random());
  runtime::SessionOptions so;
  so.n_ctx = 64;
  runtime::Session wrong(*other, so);
  wrong.eval({1, 2});
  EXPECT_EQ(status_of([&] { wrong.load_state(buf.data(), buf.size()); }), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wrong.n_past(), 2);
  // An id of -2 is neither a token nor an embedding row.
  std::vector<uint8_t> bad = buf;
  const int32_t minus_two = -2;
  std::memcpy(bad.data() + runtime::kStateHeaderBytes + 4 * s.before.size(), &minus_two, 4);
  const uint64_t sum = xxh3_64(bad.data(), bad.size() - 8);
  std::memcpy(bad.data() + bad.size() - 8, &sum, 8);
  runtime::SessionOptions f32 = so;
  f32.kv_type = quant::Type::F32;
  runtime::Session target(*s.model, f32);
  try {
    target.load_state(bad.data(), bad.size());
    ADD_FAILURE() << "an id of -2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_EQ(target.n_past(), 0);
}

TEST(SessionImage, ContextShiftCannotMoveTheImage) {
  ImageSession s(32);  // BOS + 6 + 16 image rows leave 9 positions
  s.eval_image();
  const int32_t n_past = s.session->n_past();
  runtime::GenerateOptions opt;
  opt.max_tokens = 40;
  opt.sampling.temperature = 0.0f;
  opt.context_policy = runtime::ContextPolicy::shift;
  try {
    s.session->generate_tokens({s.after[0]}, opt);
    ADD_FAILURE() << "a shift over the image was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("[generate] a context shift cannot move embedding rows"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(s.session->n_past(), n_past);  // refused before anything ran
  // With the image inside n_keep, the shift runs and generation goes on.
  opt.n_keep = n_past;
  const runtime::GenerateResult r = s.session->generate_tokens({s.after[0]}, opt);
  EXPECT_GT(r.n_shifts, 0);
  EXPECT_EQ((int32_t)r.tokens.size(), opt.max_tokens);
  const std::vector<int32_t>& toks = s.session->tokens();
  EXPECT_EQ(std::count(toks.begin(), toks.end(), runtime::Session::kEmbeddingRow), kImageRows);
}

TEST(SessionImage, DraftsStopAtImageRows) {
  const int32_t E = runtime::Session::kEmbeddingRow;
  // "5 6" occurred before, followed by an image row: nothing to draft from it.
  EXPECT_EQ(runtime::draft_tokens({5, 6, E, E, 7, 5}, 6, {6}, 4), std::vector<int32_t>());
  // Followed by tokens then an image: the draft stops before the image.
  EXPECT_EQ(runtime::draft_tokens({5, 6, 8, 9, E, E, 5}, 7, {6}, 4), (std::vector<int32_t>{8, 9}));
  // Image rows never match: the sequence ending in one drafts nothing.
  EXPECT_EQ(runtime::draft_tokens({E, E, 3, E, E}, 5, {}, 4), std::vector<int32_t>());
  // Generation with drafts over a session holding an image gives the same tokens.
  ImageSession plain, drafted;
  plain.eval_image();
  drafted.eval_image();
  runtime::GenerateOptions opt;
  opt.max_tokens = 12;
  opt.sampling.temperature = 0.0f;
  const runtime::GenerateResult a = plain.session->generate_tokens(plain.after, opt);
  opt.n_draft = 4;
  const runtime::GenerateResult b = drafted.session->generate_tokens(drafted.after, opt);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(plain.session->tokens(), drafted.session->tokens());
}

TEST(SessionImage, EvalEmbeddingsChecksItsArguments) {
  ImageSession s;
  const std::vector<float> rows(64 * 64, 0.0f);
  EXPECT_EQ(status_of([&] { s.session->eval_embeddings(nullptr, 4); }), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { s.session->eval_embeddings(rows.data(), 0); }), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { s.session->eval_embeddings(rows.data(), 65); }), LILIMS_ERR_CONTEXT_FULL);
  EXPECT_EQ(s.session->n_past(), 0);
  EXPECT_EQ(status_of([&] { s.session->eval_embeddings(rows.data(), 64); }), LILIMS_OK);
  EXPECT_EQ(s.session->n_past(), 64);
}

// `lilims run --image`: the same text as the runtime path above.
TEST(CliImage, RunPrintsTheSessionsGreedyText) {
  const json g = prompt_goldens();
  ImageSession s;
  s.eval_image();
  runtime::GenerateOptions opt;
  opt.max_tokens = 4;
  opt.sampling.temperature = 0.0f;
  const runtime::GenerateResult want = s.session->generate_tokens(s.after, opt);
  const std::string prompt = g["text_before"].get<std::string>() + "<image>" + g["text_after"].get<std::string>();
  for (const std::string& p : {prompt, std::string(prompt).replace(prompt.find("<image>"), 7, "<__media__>")}) {
    const cli::Result r = cli::run({"run", "-m", llava("text.gguf"), "--mmproj", llava("mmproj.gguf"),
                                    "--image", llava("img_landscape.png"), "--raw", "-p", p, "-n", "4",
                                    "--temp", "0", "-t", "2", "-c", "64", "--kv-type", "f32"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, want.text + "\n") << r.describe();
    EXPECT_NE(r.err.find("[lilims] image: 72x48, 16 positions, encoded in"), std::string::npos) << r.describe();
  }
}

// With a chat template the marker splits the formatted conversation; with
// none in the prompt the image goes before the user's text.
TEST(CliImage, MarkerSplitsTheChatTemplatedPrompt) {
  ImageSession s(128);  // the model's trained context: its character-level vocabulary spends many tokens on markup
  const std::string question = "What?";
  for (const std::string& user : {"<image>" + question, question}) {
    const std::string text = tok::apply_chat_template("chatml", {{"system", "S"}, {"user", "<image>" + question}}, true);
    const size_t at = text.find("<image>");
    s.session->reset();
    s.session->eval(s.model->tokenizer().encode(text.substr(0, at), true, true));
    const tools::DecodedImage img = tools::decode_image_file(llava("img_landscape.png"));
    s.projector->eval_image(*s.session, {img.rgb.data(), img.width, img.height, 3 * (size_t)img.width});
    runtime::GenerateOptions opt;
    opt.max_tokens = 4;
    opt.sampling.temperature = 0.0f;
    const runtime::GenerateResult want =
        s.session->generate_tokens(s.model->tokenizer().encode(text.substr(at + 7), false, true), opt);
    const cli::Result r = cli::run({"run", "-m", llava("text.gguf"), "--mmproj", llava("mmproj.gguf"), "--image",
                                    llava("img_landscape.png"), "--template", "chatml", "--system", "S", "-p", user, "-n", "4",
                                    "--temp", "0", "-t", "2", "-c", "128", "--kv-type", "f32", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, want.text + "\n") << user << "\n" << r.describe();
  }
}

// `lilims run --image --save-state`: the state holds the image's rows.
TEST(CliImage, RunSavesAStateHoldingTheImage) {
  const std::string path = cli::tmp_path("run_image_state.bin");
  const cli::Result r = cli::run({"run", "-m", llava("text.gguf"), "--mmproj", llava("mmproj.gguf"), "--image",
                                  llava("img_landscape.png"), "--raw", "-p", "<image>a", "-n", "2", "--temp", "0",
                                  "-c", "64", "--save-state", path});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto model = runtime::Model::open(llava("text.gguf"));
  runtime::SessionOptions so;
  so.n_ctx = 64;
  runtime::Session session(*model, so);
  session.load_state_file(path);
  const std::vector<int32_t>& toks = session.tokens();
  EXPECT_EQ(std::count(toks.begin(), toks.end(), runtime::Session::kEmbeddingRow), kImageRows);
}

// `lilims chat --mmproj` with `/image PATH`: each answer is what a fresh
// session gives for the whole conversation so far (text before the image,
// its rows, text after; the template's rendering split at the image), and
// the second turn reuses the first turn's rows, image included.  A bad
// path or /image without a projector is said and the chat goes on.
TEST(CliImage, ChatImageTurnsMatchAFreshSession) {
  auto model = runtime::Model::open(llava("text.gguf"));
  auto projector = runtime::Projector::open(llava("mmproj.gguf"));
  const tools::DecodedImage img = tools::decode_image_file(llava("img_landscape.png"));
  const auto answer = [&](const std::vector<tok::ChatMessage>& msgs) {
    runtime::SessionOptions so;
    so.n_ctx = 256;  // beyond the trained 128: the character-level vocabulary spends a token a letter
    so.allow_ctx_beyond_train = true;
    so.n_threads = 2;
    so.kv_type = quant::Type::F32;
    runtime::Session session(*model, so);
    const std::string text = tok::apply_chat_template("chatml", msgs, true);
    const size_t at = text.find("<image>");
    session.eval(model->tokenizer().encode(text.substr(0, at), true, true));
    projector->eval_image(session, {img.rgb.data(), img.width, img.height, 3 * (size_t)img.width});
    runtime::GenerateOptions opt;
    opt.max_tokens = 4;
    opt.sampling.temperature = 0.0f;
    return session.generate_tokens(model->tokenizer().encode(text.substr(at + 7), false, true), opt).text;
  };
  std::vector<tok::ChatMessage> msgs = {{"system", "S"}, {"user", "<image>What?"}};
  const std::string first = answer(msgs);
  msgs.push_back({"assistant", first});
  msgs.push_back({"user", "More?"});
  const std::string second = answer(msgs);

  const cli::Result r = cli::run({"chat", "-m", llava("text.gguf"), "--mmproj", llava("mmproj.gguf"), "--template",
                                  "chatml", "--system", "S", "-n", "4", "--temp", "0", "-t", "2", "-c", "256",
                                  "--ctx-beyond-train", "--kv-type", "f32", "-v"},
                                 "/image /nonexistent.png\n/image " + llava("img_landscape.png") + "\nWhat?\nMore?\n");
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, first + "\n" + second + "\n") << r.describe();
  EXPECT_NE(r.err.find("lilims chat: [image] /nonexistent.png: cannot open"), std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("[lilims] image 72x48: it goes with your next message"), std::string::npos) << r.describe();
  // The second turn reuses everything before its own message: more
  // positions than the image's rows.
  const size_t at = r.err.rfind("prompt tokens reused: ");
  ASSERT_NE(at, std::string::npos) << r.describe();
  EXPECT_GT(std::stoi(r.err.substr(at + 22)), kImageRows) << r.describe();

  const cli::Result no_projector =
      cli::run({"chat", "-m", llava("text.gguf"), "--template", "chatml", "-n", "2", "--temp", "0", "-c", "128"},
               "/image " + llava("img_landscape.png") + "\nWhat?\n");
  EXPECT_EQ(no_projector.exit_code, 0) << no_projector.describe();
  EXPECT_NE(no_projector.err.find("/image needs --mmproj"), std::string::npos) << no_projector.describe();
}

// With --context-shift, the exchange that holds the picture is dropped once
// the conversation passes half the context; its pixels are released and the
// chat goes on with the text turns, each answer that of a fresh session
// over the turns kept (text only once the picture's turn is gone).
TEST(CliImage, ChatDropsTheImageTurnAndGoesOn) {
  const std::string ask = "Tell me more about the colours there, please.";
  std::string input = "/image " + llava("img_landscape.png") + "\nWhat?\n";
  for (int k = 0; k < 5; ++k) input += ask + "\n";
  const cli::Result r = cli::run({"chat", "-m", llava("text.gguf"), "--mmproj", llava("mmproj.gguf"), "--template",
                                  "chatml", "--system", "S", "-n", "4", "--temp", "0", "-t", "2", "-c", "256",
                                  "--ctx-beyond-train", "--kv-type", "f32", "--context-shift"},
                                 input);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // Six answers, one a line.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6) << r.describe();

  // The last answer against a fresh session over the text-only turns the
  // chat kept: the same drops (oldest exchange first while the rendering
  // passes 128 positions) replayed on the answers it printed.
  std::vector<std::string> answers;
  for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1) {
    answers.push_back(r.out.substr(at, nl - at));
  }
  ASSERT_EQ(answers.size(), 6u);
  auto model = runtime::Model::open(llava("text.gguf"));
  std::vector<tok::ChatMessage> kept;
  for (int k = 0; k < 5; ++k) {
    kept.push_back({"user", ask});
    kept.push_back({"assistant", answers[(size_t)k + 1]});
  }
  kept.pop_back();  // the last answer is the one to compare
  std::vector<tok::ChatMessage> msgs = {{"system", "S"}};
  msgs.insert(msgs.end(), kept.begin(), kept.end());
  const auto positions = [&](const std::vector<tok::ChatMessage>& m) {
    return model->tokenizer().encode(tok::apply_chat_template("chatml", m, true), true, true).size();
  };
  while (positions(msgs) > 128 && msgs.size() > 3) msgs.erase(msgs.begin() + 1, msgs.begin() + 3);
  runtime::SessionOptions so;
  so.n_ctx = 256;
  so.allow_ctx_beyond_train = true;
  so.n_threads = 2;
  so.kv_type = quant::Type::F32;
  runtime::Session session(*model, so);
  runtime::GenerateOptions opt;
  opt.max_tokens = 4;
  opt.sampling.temperature = 0.0f;
  const std::string want =
      session.generate_tokens(model->tokenizer().encode(tok::apply_chat_template("chatml", msgs, true), true, true), opt)
          .text;
  EXPECT_EQ(answers.back(), want) << r.describe();
}

TEST(CliImage, RunRefusesBadImageArguments) {
  const std::string model = llava("text.gguf"), mmproj = llava("mmproj.gguf"), png = llava("img_landscape.png");
  cli::expect_failure(cli::run({"run", "-m", model, "--image", png, "-p", "x"}), "run", "--image needs --mmproj");
  cli::expect_failure(cli::run({"run", "-m", model, "--mmproj", mmproj, "-p", "x"}), "run", "--mmproj needs --image");
  cli::expect_failure(cli::run({"run", "-m", model, "--mmproj", mmproj, "--image", "/nonexistent.png", "-p", "x"}),
                      "run", "[image] /nonexistent.png: cannot open");
  const std::string junk = cli::tmp_path("junk.png");
  cli::write_bytes(junk, "\x89PNG\r\n\x1a\n truncated");
  cli::expect_failure(cli::run({"run", "-m", model, "--mmproj", mmproj, "--image", junk, "-p", "x"}), "run",
                      "[image]");
  cli::expect_failure(
      cli::run({"run", "-m", tiny_random(), "--mmproj", mmproj, "--image", png, "-p", "x", "--raw"}), "run",
      "output width 64 is not the model's embedding width 8");
  cli::expect_failure(cli::run({"run", "-m", model, "--mmproj", model, "--image", png, "-p", "x"}), "run", "[clip]");
}

}  // namespace
}  // namespace lilims::test
