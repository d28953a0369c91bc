// JSON-constrained generation end to end: for every token cap and context
// size, every sampler and seed, the output either parses as one JSON object
// (and is exactly the text streamed to on_token) or the call fails up front
// with a clear error and leaves the session as it was.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/engine.h"
#include "tokenizer/chat.h"
#include "test_util.h"

namespace lilims::runtime {
namespace {

struct Sampler {
  const char* name;
  SamplingParams p;
};

std::vector<Sampler> samplers(const std::vector<uint64_t>& seeds) {
  std::vector<Sampler> out;
  out.push_back({"greedy", SamplingParams{}});
  for (uint64_t seed : seeds) {
    SamplingParams t1;
    t1.temperature = 1.0f;
    t1.top_k = 40;
    t1.top_p = 0.95f;
    t1.min_p = 0.05f;
    t1.seed = seed;
    out.push_back({"temp 1.0 top-k 40 top-p 0.95 min-p 0.05", t1});
    SamplingParams t15;
    t15.temperature = 1.5f;
    t15.top_k = 0;
    t15.top_p = 0.9f;
    t15.min_p = 0.0f;
    t15.repeat_penalty = 1.3f;
    t15.seed = seed;
    out.push_back({"temp 1.5 top-p 0.9 repeat-penalty 1.3", t15});
  }
  return out;
}

// Runs one generation and returns "" when the outcome keeps the guarantee,
// else what went wrong.
std::string check_one(Session& session, const std::vector<int32_t>& prompt, int32_t cap,
                      const SamplingParams& sp) {
  GenerateOptions go;
  go.json = true;
  go.max_tokens = cap;
  go.sampling = sp;
  std::string streamed;
  go.on_token = [&](int32_t, const std::string& text) {
    streamed += text;
    return false;
  };
  session.reset();
  GenerateResult r;
  try {
    r = session.generate_tokens(prompt, go);
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (session.n_past() != 0) return "failed after evaluating: " + msg;
    if (!streamed.empty()) return "failed after streaming '" + streamed + "': " + msg;
    if (msg.rfind("[generate] ", 0) != 0) return "unclear failure: " + msg;
    if (e.status() == LILIMS_ERR_INTERNAL) return "internal failure: " + msg;
    return "";
  }
  if (streamed != r.text) return "streamed '" + streamed + "' but returned '" + r.text + "'";
  if (cap > 0 && (int32_t)r.tokens.size() > cap) return "more tokens than the cap: " + r.text;
  if (r.stop != StopReason::end_of_generation) {
    return "stopped (reason " + std::to_string((int)r.stop) + ") with '" + r.text + "'";
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(r.text);
    if (!j.is_object()) return "not an object: '" + r.text + "'";
  } catch (const std::exception& e) {
    return "does not parse: '" + r.text + "' (" + e.what() + ")";
  }
  return "";
}

struct Tally {
  int runs = 0, failures = 0;
  std::string first;  // the first few failures, one a line

  void add(const std::string& what, const std::string& err) {
    ++runs;
    if (err.empty()) return;
    if (++failures <= 8) first += what + ": " + err + "\n";
  }
};

// Cap 0 is no cap: the context of n_ctx is the limit.
void sweep_caps(const Model& model, int32_t n_ctx, const std::vector<std::vector<int32_t>>& prompts,
                const std::vector<int32_t>& caps, const std::vector<Sampler>& ss, Tally* t) {
  SessionOptions so;
  so.n_threads = 1;
  so.n_ctx = n_ctx;
  Session session(model, so);
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    for (const Sampler& s : ss) {
      for (int32_t cap : caps) {
        const std::string what = "prompt " + std::to_string(pi) + ", " + s.name + ", seed " +
                                 std::to_string(s.p.seed) + ", cap " + std::to_string(cap);
        t->add(what, check_one(session, prompts[pi], cap, s.p));
      }
    }
  }
}

// No token cap: the context is the limit (n_ctx = prompt + room).
void sweep_contexts(const Model& model, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& rooms, const std::vector<Sampler>& ss, Tally* t) {
  for (int32_t room : rooms) {
    SessionOptions so;
    so.n_threads = 1;
    so.n_ctx = (int32_t)prompt.size() + room;
    Session session(model, so);
    for (const Sampler& s : ss) {
      const std::string what = std::string(s.name) + ", seed " + std::to_string(s.p.seed) +
                               ", no cap, " + std::to_string(room) + " free positions";
      t->add(what, check_one(session, prompt, 0, s.p));
    }
  }
}

std::vector<int32_t> range(int32_t lo, int32_t hi) {
  std::vector<int32_t> v;
  for (int32_t i = lo; i <= hi; ++i) v.push_back(i);
  return v;
}

TEST(JsonGenerate, Stories260KEveryCapEverySampler) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  auto model = Model::open(path);
  const tok::Tokenizer& tk = model->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Once upon a time", "The cat said {\"name\": \"", "Lily had a big red ball."}) {
    prompts.push_back(tk.encode(p, true, false));
  }
  Tally t;
  sweep_caps(*model, 256, prompts, range(0, 64), samplers({1, 7}), &t);
  sweep_contexts(*model, prompts[0], range(0, 12), samplers({3}), &t);
  EXPECT_EQ(t.failures, 0) << t.failures << " of " << t.runs << " runs broke the guarantee:\n"
                           << t.first;
}

TEST(JsonGenerate, SmolLM2CapsAndSamplers) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = Model::open(path);
  const tok::Tokenizer& tk = model->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Reply with a JSON object for: open the camera.",
                        "Describe a cat as JSON with its name, age and favourite foods."}) {
    const std::string text = tok::apply_chat_template("chatml", {{"user", p}}, true);
    prompts.push_back(tk.encode(text, true, true));
  }
  Tally t;
  // The chat prompts take ~60 tokens: no cap leaves ~40 to the context.
  sweep_caps(*model, 100, prompts, {0, 1, 2, 3, 4, 5, 6, 7, 9, 12, 17, 24}, samplers({5}), &t);
  EXPECT_EQ(t.failures, 0) << t.failures << " of " << t.runs << " runs broke the guarantee:\n"
                           << t.first;
}

}  // namespace
}  // namespace lilims::runtime
