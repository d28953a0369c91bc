// Images in a session: a projector file (models/clip.h) with its planned
// encoder, turning RGB8 pixels into embedding rows the session evaluates
// after its tokens (Session::eval_embeddings).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/thread_pool.h"
#include "models/clip.h"
#include "runtime/engine.h"

namespace lilims::runtime {

class Projector {
 public:
  // Throws lilims::Error ("[clip] ..." / "[gguf] ...") for a file it cannot use.
  static std::unique_ptr<Projector> open(const std::string& path);

  const models::ClipModel& clip() const { return *clip_; }

  // Preprocesses and encodes the image, then evaluates its rows after the
  // session's sequence; returns the positions they took.  Checked before
  // any work: the projector's output width against the model's embedding
  // width (LILIMS_ERR_INVALID_ARGUMENT), room in the context
  // (LILIMS_ERR_CONTEXT_FULL), the image (models::check_image).  The encoder
  // runs with the session's thread count and execution mode, planned on the
  // first image and kept for the next.  One image at a time per projector
  // (calls from several threads wait for each other).
  int32_t eval_image(Session& session, const models::RgbImage& img);

  // Seconds the last image took to preprocess and encode (0 before any).
  double last_encode_seconds() const { return last_seconds_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<models::ClipModel> clip_;
  std::mutex mu_;
  std::unique_ptr<graph::ThreadPool> pool_;
  std::unique_ptr<models::ClipEncoder> encoder_;
  graph::ExecMode mode_ = graph::ExecMode::fast;
  std::vector<float> rows_;
  std::atomic<double> last_seconds_{0.0};
};

}  // namespace lilims::runtime
