#include "tools/serve_http.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

#include <httplib.h>

#include "base/error.h"

namespace lilims::serve {
namespace {

using Clock = std::chrono::steady_clock;

// What the engine's thread hands the HTTP thread of one request: the text
// as it is released, then the result.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  bool done = false;
  runtime::GenerateResult result;
  lilims_status status = LILIMS_OK;
  std::string error;

  void push(const std::string& piece) {
    if (piece.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      pieces.push_back(piece);
    }
    cv.notify_one();
  }
  void finish(runtime::GenerateResult& r, lilims_status s, const std::string& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(r);
      status = s;
      error = e;
      done = true;
    }
    cv.notify_one();
  }
};

std::string request_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%08llx%06llx", prefix, (unsigned long long)(rng() & 0xffffffffu),
                (unsigned long long)(++counter & 0xffffff));
  return buf;
}

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  runtime::BatchEngine& engine;
  ServerInfo info;
  HttpOptions opt;
  httplib::Server svr;
  int port = -1;

  Impl(runtime::BatchEngine& e, const ServerInfo& i, const HttpOptions& o) : engine(e), info(i), opt(o) {
    routes();
  }

  void routes() {
    const int threads = opt.http_threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
    svr.set_payload_max_length(opt.max_body);
    svr.set_read_timeout(60);
    svr.set_write_timeout(60);
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + opt.api_key) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      ApiError e;
      e.status = 401;
      e.message = "Incorrect or missing API key: send 'Authorization: Bearer KEY' with the key the "
                  "server was started with (--api-key).";
      e.code = "invalid_api_key";
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e;
      e.status = res.status;
      if (res.status == 413) {
        e.message = "The request body is larger than the limit of " + std::to_string(opt.max_body) + " bytes.";
        if (req.get_header_value("Content-Type").find("x-www-form-urlencoded") != std::string::npos) {
          // cpp-httplib's own limit for form bodies (CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH).
          e.message = "A body sent as application/x-www-form-urlencoded is limited to 8192 bytes; "
                      "send the JSON with 'Content-Type: application/json'.";
        }
        e.code = "request_too_large";
      } else if (res.status == 404) {
        e.message = "Unknown request URL: " + req.method + " " + req.path + ".";
        e.code = "unknown_url";
      } else {
        e.message = "The request could not be served (HTTP " + std::to_string(res.status) + ").";
      }
      send_error(res, e);
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      ApiError e{500, "server_error", "internal error", "", ""};
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& x) {
        e.message = x.what();
      } catch (...) {
      }
      send_error(res, e);
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\",\"running\":" + std::to_string(engine.n_running()) +
                          ",\"queued\":" + std::to_string(engine.n_queued()) +
                          ",\"slots\":" + std::to_string(engine.n_seq()) + "}",
                      "application/json");
    });
    const auto models = [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(models_json(info), "application/json");
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
      svr.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
        complete(Endpoint::chat, req, res);
      });
    }
    for (const char* path : {"/v1/completions", "/completions"}) {
      svr.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
        complete(Endpoint::completions, req, res);
      });
    }
  }

  void complete(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
    auto p = std::make_shared<Prepared>();
    ApiError err;
    if (!prepare(ep, engine.model(), info, req.body, *p, err)) return send_error(res, err);
    try {
      engine.check(p->prompt, p->opt);
    } catch (const Error& e) {
      return send_error(res, engine_error(e.status(), e.what()));
    } catch (const std::exception& e) {
      return send_error(res, engine_error(LILIMS_ERR_INTERNAL, e.what()));
    }
    auto ch = std::make_shared<Channel>();
    runtime::BatchRequest br;
    br.prompt = p->prompt;
    br.opt = p->opt;
    if (p->stream && !p->tools) {
      br.opt.on_token = [ch](int32_t, const std::string& piece) {
        ch->push(piece);
        return false;
      };
    }
    br.done = [ch](runtime::GenerateResult& r, lilims_status s, const std::string& e) { ch->finish(r, s, e); };
    std::shared_ptr<std::atomic<bool>> cancel = br.cancel;
    if (!engine.submit(std::move(br))) {
      ApiError e;
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      e.message = "The server is busy: its queue of waiting requests is full; retry later.";
      res.set_header("Retry-After", "1");
      return send_error(res, e);
    }
    const std::string id = request_id(ep == Endpoint::chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = now_seconds();
    if (p->stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [p, ch, cancel, id, created, first = true](size_t, httplib::DataSink& sink) mutable {
            return stream_step(*p, *ch, *cancel, id, created, first, sink);
          },
          [cancel](bool) { cancel->store(true, std::memory_order_release); });
      return;
    }
    // The answer comes once it is whole; while waiting, a space (JSON
    // allows leading whitespace) each second tells a closed connection.
    res.set_chunked_content_provider(
        "application/json",
        [p, ch, cancel, id, created](size_t, httplib::DataSink& sink) {
          std::unique_lock<std::mutex> lock(ch->mu);
          if (!ch->cv.wait_for(lock, std::chrono::seconds(1), [&] { return ch->done; })) {
            lock.unlock();
            if (!sink.write(" ", 1)) {
              cancel->store(true, std::memory_order_release);
              return false;
            }
            return true;
          }
          lock.unlock();
          std::string body;
          if (ch->status != LILIMS_OK) {
            body = error_json(engine_error(ch->status, ch->error));
          } else {
            body = response_json(*p, ch->result, make_answer(*p, ch->result), id, created);
          }
          sink.write(body.data(), body.size());
          sink.done();
          return true;
        },
        [cancel](bool) { cancel->store(true, std::memory_order_release); });
  }

  // Writes what the engine released since the last call as events; the
  // last call writes the finish, the usage and [DONE].
  static bool stream_step(const Prepared& p, Channel& ch, std::atomic<bool>& cancel, const std::string& id,
                          int64_t created, bool& first, httplib::DataSink& sink) {
    const auto event = [&](const std::string& data) {
      const std::string e = "data: " + data + "\n\n";
      if (!sink.write(e.data(), e.size())) {
        cancel.store(true, std::memory_order_release);
        return false;
      }
      return true;
    };
    if (first) {
      first = false;
      if (!p.tools && !event(chunk_json(p, id, created, true, "", nullptr, ""))) return false;
      if (p.tools) return true;
    }
    std::deque<std::string> pieces;
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(ch.mu);
      if (!ch.cv.wait_for(lock, std::chrono::seconds(1), [&] { return ch.done || !ch.pieces.empty(); })) {
        lock.unlock();
        static const char kKeepAlive[] = ": keep-alive\n\n";  // an SSE comment
        if (!sink.write(kKeepAlive, sizeof kKeepAlive - 1)) {
          cancel.store(true, std::memory_order_release);
          return false;
        }
        return true;
      }
      pieces.swap(ch.pieces);
      done = ch.done;
    }
    for (const std::string& piece : pieces) {
      if (!event(chunk_json(p, id, created, false, piece, nullptr, ""))) return false;
    }
    if (!done) return true;
    if (ch.status != LILIMS_OK) {
      event(error_json(engine_error(ch.status, ch.error)));
    } else {
      const Answer a = make_answer(p, ch.result);
      if (p.tools) {
        if (!event(chunk_json(p, id, created, true, a.content, &a.calls, ""))) return false;
      }
      if (!event(chunk_json(p, id, created, false, "", nullptr, a.finish_reason))) return false;
      if (p.include_usage && !event(usage_chunk_json(p, id, created, ch.result))) return false;
    }
    if (!event("[DONE]")) return false;
    sink.done();
    return true;
  }
};

HttpServer::HttpServer(runtime::BatchEngine& engine, const ServerInfo& info, const HttpOptions& opt)
    : impl_(std::make_unique<Impl>(engine, info, opt)) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    s.port = s.svr.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.svr.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  if (s.port < 0) {
    throw Error(LILIMS_ERR_IO, "[serve] cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                                   " (in use, or not an address of this machine)");
  }
  return s.port;
}

void HttpServer::run() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace lilims::serve
