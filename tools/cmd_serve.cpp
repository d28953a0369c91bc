// lilims serve: an OpenAI-compatible HTTP server (POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models, GET /health) over one model, whose
// requests run as a batch of sequences (runtime/batch_engine.h).
#include <csignal>
#include <cstdio>
#include <ctime>
#include <pthread.h>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <thread>

#include "base/error.h"
#include "runtime/batch_engine.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/serve_http.h"

namespace {

using namespace lilims;

void usage() {
  std::fputs(
      "usage: lilims serve [-m MODEL.gguf] [--host 127.0.0.1] [--port 8080] [--parallel N]\n"
      "                    [-c/--ctx-size C] [--api-key KEY] [options]\n"
      "  an OpenAI-compatible server: POST /v1/chat/completions, POST /v1/completions,\n"
      "  GET /v1/models, GET /health.\n"
      "  --host ADDR        address to listen on (default 127.0.0.1: this machine only)\n"
      "  --port N           port (default 8080; 0: any free port, printed on stderr)\n"
      "  --parallel N       sequences decoded together in one batch (default 4); each\n"
      "                     has its own KV cache of the context size\n"
      "  -c, --ctx-size C   tokens per sequence (default: as lilims run picks)\n"
      "  --api-key KEY      requests need 'Authorization: Bearer KEY' (else 401)\n"
      "  --queue N          requests that may wait for a free sequence (default 64;\n"
      "                     more get 429)\n"
      "  --batch-rows N     rows one step evaluates at most: every sequence's next token\n"
      "                     and prompt blocks of new ones (default 128)\n"
      "  --alias NAME       the model id clients name (default: the file's name)\n"
      "  -t THREADS, --kv-type f16|q8_0|f32, --chunk-layers K, --exec fast|ref|oracle,\n"
      "  --no-mmap, --ctx-beyond-train, --memory-budget BYTES\n",
      stdout);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string b = slash == std::string::npos ? path : path.substr(slash + 1);
  if (b.size() > 5 && b.compare(b.size() - 5, 5, ".gguf") == 0) b.resize(b.size() - 5);
  return b;
}

int serve_main(int argc, char** argv) {
  tools::CommonArgs common;
  serve::HttpOptions http;
  int parallel = 4;
  size_t queue = 64;
  int32_t batch_rows = 128;
  std::string alias;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (common.parse(a, next)) continue;
      if (a == "--host") {
        http.host = next();
      } else if (a == "--port") {
        http.port = (int)cli::parse_int("--port", next(), 0, 65535);
      } else if (a == "--parallel" || a == "-np") {
        parallel = (int)cli::parse_int("--parallel", next(), 1, 256);
      } else if (a == "--api-key") {
        http.api_key = next();
        if (http.api_key.empty()) throw std::invalid_argument("--api-key must not be empty");
      } else if (a == "--queue") {
        queue = (size_t)cli::parse_int("--queue", next(), 0, 1 << 20);
      } else if (a == "--batch-rows") {
        batch_rows = (int32_t)cli::parse_int("--batch-rows", next(), 1, 4096);
      } else if (a == "--alias") {
        alias = next();
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
    if (!common.loras.empty()) throw std::invalid_argument("--lora is not supported by serve");
  } catch (const std::invalid_argument& e) {
    cli::fail("serve", std::string(e.what()) + " (see lilims serve --help)");
    return 2;
  }
  // SIGINT / SIGTERM end the server from a thread of its own; a client that
  // goes away must not end the process (SIGPIPE).
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    auto model = tools::open_model(common);
    runtime::BatchOptions bo;
    const runtime::SessionOptions so = common.session_options(*model);
    bo.n_ctx = so.n_ctx;
    bo.n_seq = parallel;
    bo.n_threads = common.n_threads;
    bo.n_batch = batch_rows;
    bo.kv_type = common.kv_type;
    bo.chunk_layers = common.chunk_layers;
    bo.mode = common.mode;
    bo.allow_ctx_beyond_train = common.ctx_beyond_train;
    runtime::BatchEngine engine(*model, bo, queue);
    serve::ServerInfo info;
    info.model_id = !alias.empty() ? alias
                    : !common.model_path.empty() ? base_name(common.model_path)
                                                 : model->name();
    info.n_ctx = engine.n_ctx();
    struct stat st {};
    info.created = !common.model_path.empty() && stat(common.model_path.c_str(), &st) == 0
                       ? (int64_t)st.st_mtime
                       : (int64_t)std::time(nullptr);
    serve::HttpServer server(engine, info, http);
    const int port = server.bind();
    std::fprintf(stderr,
                 "lilims serve: listening on http://%s:%d (model '%s', %d sequences of %d tokens, "
                 "%d threads)\n",
                 http.host.c_str(), port, info.model_id.c_str(), parallel, engine.n_ctx(),
                 common.n_threads > 0 ? common.n_threads : (int)std::thread::hardware_concurrency());
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      server.stop();
    });
    server.run();
    // run() returns after stop(), or when listening failed: wake the waiter.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    std::fprintf(stderr, "lilims serve: stopped\n");
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("serve", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(serve, "serve", "an OpenAI-compatible HTTP server", serve_main);
