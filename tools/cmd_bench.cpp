// lilims bench: prefill and decode speed of one model over a grid of prompt
// lengths, generation lengths and thread counts, measured the way llama-bench
// measures them so the figures compare: random valid token ids (seeded), a
// warm-up run per configuration, then N timed runs from an empty cache, each
// a prefill of n_prompt tokens followed by n_gen single-token decode steps.
// Prints the median, min and max of the runs; --json prints one object per
// configuration and line, for scripts (bench/race.sh).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "runtime/engine.h"
#include "tools/cli.h"
#include "tools/common.h"

namespace {

using namespace lilims;
using Clock = std::chrono::steady_clock;

void usage(FILE* out) {
  std::fprintf(out,
               "usage: lilims bench [-m MODEL.gguf] [-p 128,512] [-n 64,128] [-t 1,2] [-r N]\n"
               "                    [--seed S] [--json] [--kv-commit LIST] [--chunk-layers K]\n"
               "                    [--kv-type f16|q8_0|f32] [--memory-budget BYTES]\n"
               "                    [--lora FILE] [--lora-scaled FILE:SCALE]\n"
               "  -p LIST   prompt lengths (tokens) to prefill, 1..65536 (default 512)\n"
               "  -n LIST   tokens to decode after the prompt, 1..65536 (default 128)\n"
               "  -t LIST   thread counts, 1..256 (default: the hardware threads)\n"
               "  -r N      timed runs per configuration, 1..1000 (default 5); a warm-up\n"
               "            run comes first and is not counted\n"
               "  --seed S  seed of the random prompt and decode token ids (default 1234)\n"
               "  --json    one JSON object per configuration and line instead of a table\n"
               "  --kv-commit LIST  how new K/V rows reach the cache: sync, async, or skip\n"
               "            (never committed: the timing without the commit, wrong results;\n"
               "            benchmarks only); default: the runtime's default\n"
               "  --chunk-layers K  transformer blocks per execution chunk (default 3)\n"
               "  --memory-budget BYTES  memory the model and each configuration's session\n"
               "            may take together (suffix K, M, G); refused when they do not fit\n"
               "  --lora FILE, --lora-scaled FILE:SCALE  LoRA adapters every session applies\n"
               "            (repeatable; as `lilims run` takes them)\n"
               "Every combination of -p, -n and -t is one configuration.  Figures: prefill\n"
               "tokens/s (pp), decode tokens/s after the prompt (tg), time to first token\n"
               "(prefill + choosing the first token), model load time (once per process) and\n"
               "peak RSS (the process-wide maximum so far, so it only grows over the rows);\n"
               "RssAnon (lilims' own pages: repacked weights, KV cache, scratch) and RssFile\n"
               "(the model file's clean pages) after the load and after each row, and the\n"
               "weight bytes read in place from the file vs copied (`quantize --layout`).\n");
}

struct Options {
  tools::CommonArgs common;
  std::vector<int32_t> n_prompt = {512};
  std::vector<int32_t> n_gen = {128};
  std::vector<int32_t> threads = {
      (int32_t)std::clamp(std::thread::hardware_concurrency(), 1u, 256u)};
  int32_t runs = 5;
  uint64_t seed = 1234;
  bool json = false;
  std::vector<graph::KvCommit> commits = {runtime::SessionOptions().kv_commit};
};

// "128,512" -> {128, 512}, each in [lo, hi].
std::vector<int32_t> parse_list(const std::string& flag, const std::string& text, long lo,
                                long hi) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    out.push_back((int32_t)cli::parse_int(flag.c_str(), item.c_str(), lo, hi));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "-m" || a == "--model") {
      o.common.model_path = tools::model_arg(a, next().c_str());
    } else if (a == "-p" || a == "--n-prompt") {
      o.n_prompt = parse_list("-p", next(), 1, 65536);
    } else if (a == "-n" || a == "--n-gen") {
      o.n_gen = parse_list("-n", next(), 1, 65536);
    } else if (a == "-t" || a == "--threads") {
      o.threads = parse_list("-t", next(), 1, 256);
    } else if (a == "-r" || a == "--repetitions") {
      o.runs = (int32_t)cli::parse_int("-r", next().c_str(), 1, 1000);
    } else if (a == "--seed") {
      o.seed = cli::parse_u64("--seed", next().c_str());
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--kv-commit") {
      o.commits.clear();
      const std::string list = next();
      size_t start = 0;
      while (true) {
        const size_t comma = list.find(',', start);
        const std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
        if (item == "sync") o.commits.push_back(graph::KvCommit::sync);
        else if (item == "async") o.commits.push_back(graph::KvCommit::async);
        else if (item == "skip") o.commits.push_back(graph::KvCommit::skip);
        else throw std::invalid_argument("--kv-commit expects a list of sync, async, skip");
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a == "--chunk-layers" || a == "--kv-type" || a == "--memory-budget" || a == "--lora" ||
               a == "--lora-scaled") {
      const std::string v = next();
      o.common.parse(a, [&]() { return v.c_str(); });
    } else {
      throw std::invalid_argument("unknown option '" + a + "' (see `lilims bench --help`)");
    }
  }
  return o;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {median, v.front(), v.back()};
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;  // Linux reports KiB
}

uint64_t weight_bytes(const models::Weight& w) {
  return (uint64_t)w.rows * quant::row_bytes(w.type, w.cols);
}

// Weight bytes one decode step reads: every layer's matrices and norms, the
// final norm and the LM head (the embedding table only through the head when
// tied; a lookup reads one row).  The figure a read-bandwidth roofline needs.
uint64_t decode_weight_bytes(const models::Model& m) {
  auto norm = [](const models::Norm& n) { return (n.w.size() + n.b.size()) * sizeof(float); };
  auto bytes = [](const models::Weight& w) {
    return w.present() ? weight_bytes(w) + w.bias.size() * sizeof(float) : 0;
  };
  uint64_t b = bytes(m.output) + norm(m.output_norm);
  for (const models::Layer& l : m.layers) {
    for (const models::Weight* w : l.weights()) b += bytes(*w);
    b += norm(l.attn_norm) + norm(l.ffn_norm);
  }
  return b;
}

struct Config {
  int32_t threads, n_prompt, n_gen;
  graph::KvCommit commit;
};

struct RunTimes {
  double prefill_s, ttft_s, decode_s;
};

int32_t argmax(const std::vector<float>& v) {
  return (int32_t)(std::max_element(v.begin(), v.end()) - v.begin());
}

// One run from an empty cache: the prompt in one eval (the session splits it
// into batches), the first token chosen greedily, then n_gen - 1 more decode
// steps on random ids, as llama-bench's generation test feeds them.
RunTimes timed_run(runtime::Session& s, const std::vector<int32_t>& prompt,
                   const std::vector<int32_t>& gen_ids) {
  s.reset();
  RunTimes t{};
  const auto t0 = Clock::now();
  s.eval(prompt);
  t.prefill_s = seconds_since(t0);
  int32_t tok = argmax(s.logits());
  t.ttft_s = seconds_since(t0);
  const auto t1 = Clock::now();
  for (size_t i = 0; i < gen_ids.size(); ++i) {
    s.eval({tok});
    tok = gen_ids[i];
  }
  t.decode_s = seconds_since(t1);
  return t;
}

// RssAnon and RssFile of /proc/self/status in MB (-1 where there is none):
// anonymous pages (lilims' own copies, dirty) and the file's pages (clean,
// dropped and read again under memory pressure).
struct Resident {
  double anon_mb = -1, file_mb = -1;
};
Resident resident_now() {
  Resident r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return r;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long kb = 0;
    if (std::sscanf(line, "RssAnon: %lld", &kb) == 1) r.anon_mb = (double)kb / 1024.0;
    if (std::sscanf(line, "RssFile: %lld", &kb) == 1) r.file_mb = (double)kb / 1024.0;
  }
  std::fclose(f);
  return r;
}

struct Row {
  Config cfg;
  Spread pp, tg, ttft_ms;
  int32_t n_ctx;
  double peak_rss_mb;
  Resident after;  // with the row's session still open
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = (unsigned char)c;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void print_json(const Row& r, const Options& o, const std::string& model_path,
                const runtime::Model& model, double load_ms, const Resident& at_load) {
  std::printf(
      "{\"model\": \"%s\", \"model_name\": \"%s\", \"isa\": \"%s\", \"threads\": %d, "
      "\"n_prompt\": %d, \"n_gen\": %d, \"n_ctx\": %d, \"runs\": %d, \"seed\": %llu, "
      "\"pp_tps\": %.3f, \"pp_tps_min\": %.3f, \"pp_tps_max\": %.3f, "
      "\"tg_tps\": %.3f, \"tg_tps_min\": %.3f, \"tg_tps_max\": %.3f, "
      "\"ttft_ms\": %.3f, \"ttft_ms_min\": %.3f, \"ttft_ms_max\": %.3f, "
      "\"load_ms\": %.3f, \"peak_rss_mb\": %.1f, \"n_params\": %llu, "
      "\"decode_weight_bytes\": %llu, \"fused_weights\": %zu, \"kv_commit\": \"%s\", "
      "\"chunk_layers\": %d, \"lora_adapters\": %zu, "
      "\"rss_anon_load_mb\": %.1f, \"rss_file_load_mb\": %.1f, \"rss_anon_mb\": %.1f, \"rss_file_mb\": %.1f, "
      "\"weight_bytes_mapped\": %llu, \"weight_bytes_copied\": %llu}\n",
      json_escape(model_path).c_str(), json_escape(model.name()).c_str(),
      kernels::kernel_path_name(), r.cfg.threads, r.cfg.n_prompt, r.cfg.n_gen,
      r.n_ctx, o.runs, (unsigned long long)o.seed, r.pp.median, r.pp.min, r.pp.max,
      r.tg.median, r.tg.min, r.tg.max, r.ttft_ms.median, r.ttft_ms.min, r.ttft_ms.max, load_ms,
      r.peak_rss_mb, (unsigned long long)model.weights().n_params,
      (unsigned long long)decode_weight_bytes(model.weights()), model.weights().n_fused,
      graph::kv_commit_name(r.cfg.commit),
      o.common.chunk_layers, o.common.loras.size(), at_load.anon_mb, at_load.file_mb, r.after.anon_mb,
      r.after.file_mb, (unsigned long long)model.weights().mapped_weight_bytes(),
      (unsigned long long)(model.weights().repacked_bytes + model.weights().requantized_bytes));
  std::fflush(stdout);
}

void print_table_header(const std::string& model_path, const runtime::Model& model,
                        double load_ms, const Options& o, const Resident& at_load) {
  const models::Model& m = model.weights();
  std::printf("model: %s (%s, %.1f M params, %.1f MB read per decoded token)\n",
              model_path.c_str(), model.name().empty() ? "unnamed" : model.name().c_str(),
              (double)m.n_params / 1e6, (double)decode_weight_bytes(m) / 1e6);
  std::printf("isa %s, load %.1f ms, %d runs per row after a warm-up, median [min-max]\n",
              kernels::kernel_path_name(), load_ms, o.runs);
  std::printf("weights %.1f MB read in place, %.1f MB copied; after load RssAnon %.1f MB, RssFile %.1f MB\n\n",
              (double)m.mapped_weight_bytes() / 1e6, (double)(m.repacked_bytes + m.requantized_bytes) / 1e6,
              at_load.anon_mb, at_load.file_mb);
  std::printf("| threads | n_prompt | n_gen | prefill t/s median [min-max] | decode t/s median [min-max]  |"
              " ttft ms  | peak RSS MB | commit |\n");
  std::printf("|--------:|---------:|------:|------------------------------|------------------------------|"
              "---------:|------------:|:-------|\n");
}

void print_table_row(const Row& r) {
  char pp[64], tg[64];
  std::snprintf(pp, sizeof pp, "%.1f [%.1f-%.1f]", r.pp.median, r.pp.min, r.pp.max);
  std::snprintf(tg, sizeof tg, "%.1f [%.1f-%.1f]", r.tg.median, r.tg.min, r.tg.max);
  std::printf("| %7d | %8d | %5d | %-28s | %-28s | %8.1f | %11.1f | %-6s |\n", r.cfg.threads,
              r.cfg.n_prompt, r.cfg.n_gen, pp, tg, r.ttft_ms.median, r.peak_rss_mb,
              graph::kv_commit_name(r.cfg.commit));
  std::fflush(stdout);
}

Row bench_config(const runtime::Model& model, const Config& cfg, const Options& o,
                 const std::vector<runtime::AdapterUse>& adapters) {
  const int32_t n_vocab = model.tokenizer().n_vocab();
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> pick(0, n_vocab - 1);
  std::vector<int32_t> prompt((size_t)cfg.n_prompt), gen_ids((size_t)cfg.n_gen);
  for (auto& t : prompt) t = pick(rng);
  for (auto& t : gen_ids) t = pick(rng);

  runtime::SessionOptions so = o.common.session_options(model);
  so.kv_commit = cfg.commit;
  so.n_threads = cfg.threads;
  so.n_ctx = cfg.n_prompt + cfg.n_gen;
  runtime::Session session(model, so);
  session.set_adapters(adapters);

  // The warm-up touches every weight page, the KV cache and the pool's threads.
  timed_run(session, prompt, std::vector<int32_t>(gen_ids.begin(), gen_ids.begin() + 1));

  std::vector<double> pp, tg, ttft;
  for (int32_t r = 0; r < o.runs; ++r) {
    const RunTimes t = timed_run(session, prompt, gen_ids);
    pp.push_back(cfg.n_prompt / t.prefill_s);
    tg.push_back(cfg.n_gen / t.decode_s);
    ttft.push_back(t.ttft_s * 1e3);
  }
  return {cfg, spread(pp), spread(tg), spread(ttft), session.n_ctx(), peak_rss_mb(), resident_now()};
}

int bench_main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
  }
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    cli::fail("bench", e.what());
    return 2;  // a usage error, as the other commands report it
  }
  try {
    const std::string path =
        o.common.model_path.empty() ? tools::default_model_path() : o.common.model_path;
    const auto t0 = Clock::now();
    const auto model = tools::open_model(o.common);
    const double load_ms = seconds_since(t0) * 1e3;
    const Resident at_load = resident_now();
    const tools::LoadedAdapters adapters = tools::open_adapters(o.common, *model);

    const int32_t n_ctx_train = model->hparams().n_ctx_train;
    for (int32_t p : o.n_prompt) {
      for (int32_t n : o.n_gen) {
        if (n_ctx_train > 0 && p + n > n_ctx_train) {
          throw std::invalid_argument("-p " + std::to_string(p) + " plus -n " + std::to_string(n) +
                                      " tokens exceed the model's context of " +
                                      std::to_string(n_ctx_train));
        }
      }
    }
    if (!o.json) print_table_header(path, *model, load_ms, o, at_load);
    for (int32_t t : o.threads) {
      for (int32_t p : o.n_prompt) {
        for (int32_t n : o.n_gen) {
          for (graph::KvCommit c : o.commits) {
            const Row row = bench_config(*model, {t, p, n, c}, o, adapters.uses);
            if (o.json) {
              print_json(row, o, path, *model, load_ms, at_load);
            } else {
              print_table_row(row);
            }
          }
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("bench", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(bench, "bench", "prefill and decode speed, as llama-bench measures it",
                        bench_main);
