// The HTTP side of `lilims serve` (cpp-httplib): routes, the API key, the
// body limit, server-sent events, and cancelling a request whose client
// went away.  Requests run on a runtime::BatchEngine.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/batch_engine.h"
#include "tools/serve_api.h"

namespace lilims::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (bind() says which)
  std::string api_key;         // "": no key needed
  size_t max_body = 8u << 20;  // bytes of a request body
  int http_threads = 32;       // connections served at once (waiting ones included)
};

class HttpServer {
 public:
  HttpServer(runtime::BatchEngine& engine, const ServerInfo& info, const HttpOptions& opt);
  ~HttpServer();
  // Binds the socket; returns the port.  Throws lilims::Error (LILIMS_ERR_IO)
  // when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lilims::serve
