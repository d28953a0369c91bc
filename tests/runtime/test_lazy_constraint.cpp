// Lazy constraints (GenerateOptions::constraint_trigger / constraint_close):
// free text until the output spells the trigger, then one value valid for
// the schema, checked with the independent validator of schema_validator.h.
// The free part is compared with an unconstrained run of the same settings.
#include "schema_validator.h"  // first: its pragma must precede <regex>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/constrain/lazy_constraint.h"
#include "runtime/constrain/tools.h"
#include "test_util.h"
#include "tokenizer/chat.h"

namespace lilims::runtime {
namespace {

using test::J;
using test::validate;

// The first occurrence of the trigger in the concatenated stream, found by
// a plain search, against the matcher fed token by token: random texts over
// a small alphabet (so triggers recur and overlap themselves), random token
// splits with empty pieces.
TEST(LazyConstraint, TriggerMatchFindsTheFirstOccurrenceAcrossTokens) {
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    const auto letters = [&](size_t n) {
      std::string s;
      for (size_t i = 0; i < n; ++i) s += "ab<>"[rng() % 4];
      return s;
    };
    const std::string trigger = letters(1 + rng() % 5), text = letters(rng() % 40);
    std::vector<std::string> tokens;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(rng() % 7, text.size() - at);
      tokens.push_back(text.substr(at, n));
      at += n;
    }
    const size_t pos = text.find(trigger);
    TriggerMatch m(trigger);
    size_t consumed = 0;
    int found_at = -1;
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string rest, probe_rest;
      const bool probe = m.ends_in(tokens[i], &probe_rest);
      const bool hit = m.feed(tokens[i], &rest);
      ASSERT_EQ(probe, hit) << "seed " << seed;
      consumed += tokens[i].size();
      if (!hit) continue;
      ASSERT_EQ(found_at, -1) << "seed " << seed << ": found twice";
      found_at = (int)i;
      ASSERT_NE(pos, std::string::npos) << "seed " << seed;
      EXPECT_EQ(rest, text.substr(pos + trigger.size(), consumed - pos - trigger.size()))
          << "seed " << seed;
      EXPECT_EQ(probe_rest, rest);
      // The token holds the trigger's last byte.
      EXPECT_LT(pos + trigger.size() - 1, consumed) << "seed " << seed;
      EXPECT_GE(pos + trigger.size() - 1, consumed - tokens[i].size()) << "seed " << seed;
    }
    EXPECT_EQ(found_at >= 0, pos != std::string::npos) << "seed " << seed;
    EXPECT_EQ(m.found(), found_at >= 0);
  }
  TriggerMatch none("");
  EXPECT_FALSE(none.feed("anything", nullptr));
}

const char* const kSchema =
    R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]{2,4}$"},)"
    R"("n":{"type":"integer","minimum":-50,"maximum":50}},"required":["id","n"]})";

// Where the trigger ends in a run's tokens (the index of the token that
// completes it) and the bytes after it in that token; -1 when it does not.
int trigger_end(const Model& m, const std::string& trigger, const std::vector<int32_t>& tokens,
                std::string* rest) {
  TriggerMatch tm(trigger);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tm.feed(trigger_bytes(m.tokenizer(), m.pieces(), tokens[i]), rest)) return (int)i;
  }
  return -1;
}

// Every cap, several samplers and triggers: the output is the unconstrained
// run's until the trigger, then a valid value (or, with too little room, it
// ends at the trigger); never an open value.
TEST(LazyConstraint, Stories260KFreeTextThenAValueEveryCap) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  auto model = Model::open(path);
  const J schema = J::parse(kSchema);
  const std::vector<int32_t> prompt = model->tokenizer().encode("Once upon a time", true, false);
  SessionOptions so;
  so.n_threads = 1;
  so.n_ctx = 256;
  Session session(*model, so);
  std::vector<SamplingParams> samplers(1);
  for (uint64_t seed : {1, 2, 3}) {
    SamplingParams t;
    t.temperature = 1.0f;
    t.seed = seed;
    samplers.push_back(t);
  }
  int runs = 0, triggered = 0, values = 0, no_room = 0, refused_tokens = 0, failures = 0;
  std::string first;
  for (const std::string trigger : {"was", "a", "Lily", "never spelled"}) {
    for (const std::string close : {"", ")"}) {
      for (int32_t cap = 1; cap <= 48; cap += (cap < 16 ? 1 : 4)) {
        for (const SamplingParams& sp : samplers) {
          GenerateOptions plain;
          plain.max_tokens = cap;
          plain.sampling = sp;
          session.reset();
          const GenerateResult p = session.generate_tokens(prompt, plain);
          GenerateOptions go = plain;
          go.json_schema = kSchema;
          go.constraint_trigger = trigger;
          go.constraint_close = close;
          std::string streamed;
          go.on_token = [&](int32_t, const std::string& t) {
            streamed += t;
            return false;
          };
          session.reset();
          ++runs;
          GenerateResult r;
          std::string err;
          try {
            r = session.generate_tokens(prompt, go);
          } catch (const Error& e) {
            err = e.what();
          }
          std::string rest;
          const int k = trigger_end(*model, trigger, p.tokens, &rest);
          const size_t same = k < 0 ? p.tokens.size() : (size_t)k;
          if (!err.empty()) {
          } else if (r.tokens.size() < same ||
              !std::equal(p.tokens.begin(), p.tokens.begin() + (ptrdiff_t)same, r.tokens.begin())) {
            err = "the free text differs from the unconstrained run's";
          } else if (k < 0) {
            if (r.tokens != p.tokens || r.text != p.text || r.stop != p.stop || r.constraint_triggered ||
                r.value_offset != -1) {
              err = "no trigger, yet not the unconstrained run";
            }
          } else if (r.tokens.size() > same && r.tokens[same] != p.tokens[same]) {
            // The unconstrained token ended the trigger with bytes no value starts with.
            SchemaConstraint sc(model->schema_cache().get(kSchema));
            if (sc.accepts_bytes(rest)) err = "a token ending the trigger was refused for no reason";
            ++refused_tokens;
          }
          if (err.empty() && (int32_t)r.tokens.size() > cap) err = "more tokens than the cap";
          if (err.empty() && streamed != r.text) err = "streamed text differs";
          if (err.empty() && r.constraint_triggered) {
            ++triggered;
            if (r.value_offset < 0) {
              ++no_room;
              if (r.stop != StopReason::max_tokens) err = "no room for a value, yet not the cap";
            } else if (r.stop != StopReason::end_of_generation) {
              err = "an open value: stop reason " + std::to_string((int)r.stop);
            } else {
              ++values;
              const std::string text = r.text.substr(0, r.text.size() - close.size());
              if (r.text.compare(r.text.size() - close.size(), close.size(), close) != 0) {
                err = "the closing text is missing";
              } else if (text.substr(0, (size_t)r.value_offset).find(trigger) == std::string::npos) {
                err = "the trigger is not before the value";
              } else {
                try {
                  err = validate(schema, schema, J::parse(text.substr((size_t)r.value_offset)), "#");
                } catch (const std::exception& e) {
                  err = std::string("does not parse: ") + e.what();
                }
              }
            }
          }
          if (!err.empty() && ++failures <= 8) {
            first += "trigger '" + trigger + "', close '" + close + "', cap " + std::to_string(cap) +
                     ", seed " + std::to_string(sp.seed) + ": " + err + ": " + r.text + "\n";
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << runs << " runs broke the guarantee:\n" << first;
  // The sweep reaches every branch.
  EXPECT_GT(values, runs / 10);
  EXPECT_GT(no_room, 0);
  EXPECT_LT(triggered, runs);
  std::printf("%d runs: %d triggered, %d values, %d without room, %d trigger tokens refused\n", runs,
              triggered, values, no_room, refused_tokens);
}

TEST(LazyConstraint, ControlTokenTriggerAndRefusals) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = Model::open(path);
  const tok::Tokenizer& tk = model->tokenizer();
  const std::vector<int32_t> special = tk.encode("<repo_name>", false, true);
  ASSERT_EQ(special.size(), 1u);
  const int32_t id = special[0];
  ASSERT_TRUE(tk.is_control(id));
  EXPECT_EQ(trigger_bytes(tk, model->pieces(), id), "<repo_name>");
  const int32_t plain = tk.encode("hello", false, false)[0];
  EXPECT_EQ(trigger_bytes(tk, model->pieces(), plain), model->pieces()[(size_t)plain]);

  SessionOptions so;
  so.n_threads = 2;
  so.n_ctx = 256;
  Session session(*model, so);
  const std::vector<int32_t> prompt = tk.encode("Write an id and a number.", false, false);
  GenerateOptions go;
  go.max_tokens = 60;
  go.json_schema = kSchema;
  go.constraint_trigger = "<repo_name>";
  go.sampling.logit_bias = {{id, 100.0f}};  // the first token is the trigger
  const GenerateResult r = session.generate_tokens(prompt, go);
  ASSERT_TRUE(r.constraint_triggered);
  ASSERT_EQ(r.tokens[0], id);
  ASSERT_EQ(r.stop, StopReason::end_of_generation) << r.text;
  const J schema = J::parse(kSchema);
  EXPECT_EQ(validate(schema, schema, J::parse(r.text.substr((size_t)r.value_offset)), "#"), "") << r.text;
  EXPECT_GT(r.n_forced, 0);  // jump-forward runs once the value starts

  // Too little room after the trigger: it ends there, no value.
  go.max_tokens = 3;
  session.reset();
  const GenerateResult s = session.generate_tokens(prompt, go);
  EXPECT_TRUE(s.constraint_triggered);
  EXPECT_EQ(s.value_offset, -1);
  EXPECT_EQ(s.stop, StopReason::max_tokens);
  EXPECT_EQ(s.tokens.size(), 1u);

  // Refused before anything is evaluated.
  session.reset();
  const auto refused = [&](GenerateOptions o, const char* what) {
    try {
      session.generate_tokens(prompt, o);
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT) << what;
      EXPECT_NE(std::string(e.what()).find("[generate]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(session.n_past(), 0) << what;
  };
  GenerateOptions bad;
  bad.constraint_trigger = "<tool_call>";
  refused(bad, "a trigger without a schema");
  bad = GenerateOptions();
  bad.constraint_close = "</tool_call>";
  refused(bad, "a closing text without a schema");
  bad.json = true;
  bad.constraint_trigger = std::string("\xC3(", 2);
  refused(bad, "a trigger of invalid UTF-8");
}

// The app's case: a tool call after text, or text alone, with the repo's
// tools, jump-forward and drafting; drafting changes nothing.
TEST(LazyConstraint, SmolLM2ToolCallAfterTextDraftsChangeNothing) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = Model::open(path);
  std::vector<Tool> tools;
  for (const char* t : {"open_app", "set_timer", "send_message", "take_photo", "navigate"}) {
    for (Tool& x : parse_tools(test::read_file(test::source_path(std::string("examples/tools/") + t + ".json")))) {
      tools.push_back(x);
    }
  }
  const std::string schema_text = tools_schema(tools);
  const J schema = J::parse(schema_text);
  SessionOptions so;
  so.n_threads = 2;
  so.n_ctx = 512;
  Session session(*model, so);
  // SmolLM2-135M follows no tool prompt reliably; it writes "You can call"
  // at once for the first request and code for the second, so this trigger
  // gives a call after text and an answer of text alone.
  const std::string trigger = "call";
  int with_value = 0;
  for (const char* ask : {"Open the camera.", "Set a timer for ten minutes."}) {
    const std::vector<tok::ChatMessage> msgs = {{"system", tools_system_prompt(tools, trigger)},
                                                {"user", ask}};
    const std::vector<int32_t> prompt =
        tok::encode_chat(model->tokenizer(), "chatml", msgs, true, true);
    GenerateOptions go;
    go.max_tokens = 48;
    go.json_schema = schema_text;
    go.constraint_trigger = trigger;
    go.constraint_close = "\nDone.";
    session.reset();
    const GenerateResult r = session.generate_tokens(prompt, go);
    go.n_draft = 4;
    session.reset();
    const GenerateResult d = session.generate_tokens(prompt, go);
    EXPECT_EQ(d.tokens, r.tokens) << ask;
    EXPECT_EQ(d.text, r.text) << ask;
    EXPECT_EQ(d.value_offset, r.value_offset) << ask;
    if (!r.constraint_triggered) continue;
    ++with_value;
    ASSERT_EQ(r.stop, StopReason::end_of_generation) << r.text;
    ASSERT_GE(r.value_offset, 0);
    const std::string value = r.text.substr((size_t)r.value_offset,
                                            r.text.size() - (size_t)r.value_offset - 6);
    EXPECT_EQ(r.text.substr(r.text.size() - 6), "\nDone.");
    EXPECT_EQ(validate(schema, schema, J::parse(value), "#"), "") << r.text;
  }
  EXPECT_EQ(with_value, 1);
}

}  // namespace
}  // namespace lilims::runtime
