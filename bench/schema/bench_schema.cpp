// JSON Schema constrained decoding on a real model, 1 thread:
//   - compile time of each example schema and of the function-call schema
//     of examples/tools (median of 21 compilations, no token walks);
//   - mask time per token (thread CPU time; avg, p50, p99, max) over greedy generations with
//     the example schemas: "cold" is the first generation with a schema in
//     the process (its node walks are computed then), "warm" the same
//     prompts again, beside the decode step time;
//   - decode tokens/s of Session::generate with and without a schema.
//
//   build/bench/schema/bench_schema [-m MODEL.gguf] [-n MAX_TOKENS]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/constrain/json_schema.h"
#include "runtime/constrain/tools.h"
#include "tokenizer/chat.h"

namespace {

using namespace lilims;
using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of this thread: a mask's cost without the time slices other
// processes take on a shared machine.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "bench_schema: cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct Named {
  std::string name, schema;
  std::vector<std::string> prompts;
};

std::vector<Named> schemas() {
  const std::string ex = std::string(LILIMS_SOURCE_DIR) + "/examples/";
  std::vector<runtime::Tool> tools;
  for (const char* t : {"open_app", "set_timer", "send_message", "take_photo", "navigate"}) {
    for (auto& x : runtime::parse_tools(read(ex + "tools/" + t + ".json"))) tools.push_back(x);
  }
  return {
      {"tools (function call)", runtime::tools_schema(tools),
       {"Open the camera.", "Set a timer for ten minutes for the pasta.",
        "Text Sam that I am running late.", "Take me to the nearest train station by bike."}},
      {"event", read(ex + "schemas/event.json"),
       {"Lunch with Ana on 2025-03-14 at 12:30 for an hour at Cafe Lumen.",
        "Team standup tomorrow 09:15, 15 minutes, with bob@example.com."}},
      {"person", read(ex + "schemas/person.json"),
       {"Maria Lopez, 34, maria.lopez@example.org, a friend from work.",
        "My grandfather Tom is 81 and not on email."}},
      {"order", read(ex + "schemas/order.json"),
       {"Order 2 of ABC-1234 at 9.99 each and 1 XYZ-0001 at 120, express.",
        "One box of tea, sku TEA-0042, 4.50."}},
      {"todo", read(ex + "schemas/todo.json"),
       {"Plan the trip: book flights (done), pack bags, buy sunscreen.",
        "Fix the bike: high priority, not done."}},
  };
}

std::vector<int32_t> chat(const runtime::Model& m, const std::string& system, const std::string& user) {
  std::vector<tok::ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system});
  msgs.push_back({"user", user});
  return tok::encode_chat(m.tokenizer(), m.chat_template().empty() ? "chatml" : m.chat_template(), msgs,
                          true, true, false);
}

struct Dist {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  double avg() const {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / (double)v.size();
  }
  double pct(double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(p * (double)v.size()))];
  }
};

// One greedy generation under the schema, timing each mask and decode step.
void generate_timed(runtime::Session& s, const std::shared_ptr<const runtime::CompiledSchema>& cs,
                    const std::vector<int32_t>& prompt, int max_tokens, Dist* mask, Dist* step) {
  s.reset();
  s.eval(prompt);
  runtime::SchemaConstraint sc(cs);
  runtime::Sampler sampler(runtime::SamplingParams{});
  const int32_t n_vocab = s.model().hparams().n_vocab;
  std::vector<uint8_t> allowed((size_t)n_vocab);
  int64_t left = max_tokens;
  const std::function<bool(int32_t)> room = [&](int32_t id) { return sc.accepts_within(id, left - 1); };
  for (int i = 0; i < max_tokens; ++i, --left) {
    const double t0 = thread_seconds();
    sc.fill_mask(allowed.data());
    mask->add(thread_seconds() - t0);
    const int32_t next = sampler.sample(s.logits().data(), n_vocab, s.tokens(), allowed.data(), &room);
    if (next < 0 || !sc.advance(next) || sc.complete()) break;
    const auto t1 = Clock::now();
    s.eval({next});
    step->add(secs(t1, Clock::now()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  int max_tokens = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-m") path = argv[i + 1];
    else if (a == "-n") max_tokens = std::atoi(argv[i + 1]);
  }
  if (path.empty()) {
    const char* home = std::getenv("HOME");
    path = std::string(home ? home : ".") + "/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  try {
    auto model = runtime::Model::open(path);
    const std::vector<Named> all = schemas();
    std::printf("model %s, vocabulary %zu tokens, 1 thread\n\n", path.c_str(), model->pieces().size());

    std::printf("%-24s %12s %10s\n", "compile (median of 21)", "ms", "nodes");
    for (const Named& n : all) {
      std::vector<double> t;
      size_t nodes = 0;
      for (int r = 0; r < 21; ++r) {
        const auto t0 = Clock::now();
        const runtime::Grammar g = runtime::compile_json_schema(runtime::canonical_json_schema(n.schema));
        t.push_back(secs(t0, Clock::now()));
        nodes = g.nodes.size();
      }
      std::sort(t.begin(), t.end());
      std::printf("%-24s %12.3f %10zu\n", n.name.c_str(), t[10] * 1e3, nodes);
    }

    runtime::SessionOptions so;
    so.n_threads = 1;
    so.n_ctx = 1024;
    runtime::Session session(*model, so);
    std::printf("\n%-24s %6s %9s %9s %9s %9s %11s %6s\n", "mask per token (us)", "pass", "avg", "p50",
                "p99", "max", "decode(us)", "walks");
    Dist all_warm, all_cold, all_step;
    for (const Named& n : all) {
      const auto cs = model->schema_cache().get(n.schema);
      for (const char* pass : {"cold", "warm"}) {
        Dist mask, step;
        for (const std::string& p : n.prompts) {
          const std::string sys = n.name.rfind("tools", 0) == 0
                                      ? std::string("Answer with a tool call.")
                                      : "Answer with JSON for the " + n.name + " schema.";
          generate_timed(session, cs, chat(*model, sys, p), max_tokens, &mask, &step);
        }
        for (double x : mask.v) (pass[0] == 'c' ? all_cold : all_warm).add(x);
        for (double x : step.v) all_step.add(x);
        const double avg = mask.avg();
        std::printf("%-24s %6s %9.1f %9.1f %9.1f %9.1f %11.0f %6lld\n", n.name.c_str(), pass, avg * 1e6,
                    mask.pct(0.5) * 1e6, mask.pct(0.99) * 1e6, mask.pct(1.0) * 1e6, step.avg() * 1e6,
                    (long long)cs->walks());
      }
    }
    std::printf("%-24s %6s %9.1f %9.1f %9.1f %9.1f %11.0f\n", "all schemas", "cold", all_cold.avg() * 1e6,
                all_cold.pct(0.5) * 1e6, all_cold.pct(0.99) * 1e6, all_cold.pct(1.0) * 1e6, all_step.avg() * 1e6);
    std::printf("%-24s %6s %9.1f %9.1f %9.1f %9.1f   share of a decode step (warm avg): %.2f%%\n",
                "all schemas", "warm", all_warm.avg() * 1e6, all_warm.pct(0.5) * 1e6,
                all_warm.pct(0.99) * 1e6, all_warm.pct(1.0) * 1e6, 100.0 * all_warm.avg() / all_step.avg());

    std::printf("\n%-24s %10s %10s %8s\n", "decode (generate)", "tokens", "tok/s", "mask %");
    for (const bool with : {false, true}) {
      int64_t n_tok = 0;
      double t = 0, tm = 0;
      for (const Named& n : all) {
        for (const std::string& p : n.prompts) {
          runtime::GenerateOptions go;
          go.max_tokens = max_tokens;
          if (with) go.json_schema = n.schema;
          session.reset();
          const runtime::GenerateResult r = session.generate_tokens(chat(*model, "", p), go);
          // generate_seconds runs from the first token: it times the rest.
          n_tok += (int64_t)r.tokens.size() - 1;
          t += r.generate_seconds;
          tm += r.mask_seconds;
        }
      }
      std::printf("%-24s %10lld %10.1f %8.2f\n", with ? "with schema" : "without schema",
                  (long long)n_tok, (double)n_tok / t, 100.0 * tm / t);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_schema: %s\n", e.what());
    return 1;
  }
  return 0;
}
