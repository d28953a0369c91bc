#include "runtime/vision.h"

#include <chrono>

#include "base/error.h"

namespace lilims::runtime {

std::unique_ptr<Projector> Projector::open(const std::string& path) {
  auto p = std::make_unique<Projector>();
  p->clip_ = models::load_clip(gguf::File::open(path));
  return p;
}

int32_t Projector::eval_image(Session& session, const models::RgbImage& img) {
  const models::ClipHParams& hp = clip_->hp;
  const int32_t n_embd = session.model().hparams().n_embd;
  if (hp.n_out != n_embd) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[image] the projector's output width " + std::to_string(hp.n_out) +
                    " is not the model's embedding width " + std::to_string(n_embd) +
                    ": it was made for another model");
  }
  if (session.n_past() + hp.n_patches() > session.n_ctx()) {
    throw Error(LILIMS_ERR_CONTEXT_FULL,
                "[image] the image's " + std::to_string(hp.n_patches()) +
                    " positions do not fit: " + std::to_string(session.n_past()) + " of " +
                    std::to_string(session.n_ctx()) + " are in use");
  }
  models::check_image(img);
  const std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> pixels = models::clip_preprocess(img, clip_->image);
  const graph::ExecMode mode = session.executor().plan().opt.mode;
  if (!encoder_ || mode_ != mode || pool_->size() != session.n_threads()) {
    encoder_.reset();
    pool_ = std::make_unique<graph::ThreadPool>(session.n_threads());
    encoder_ = std::make_unique<models::ClipEncoder>(*clip_, mode, *pool_);
    mode_ = mode;
  }
  rows_.resize((size_t)encoder_->n_rows() * (size_t)encoder_->n_cols());
  encoder_->encode(pixels.data(), rows_.data());
  last_seconds_.store(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                      std::memory_order_relaxed);
  session.eval_embeddings(rows_.data(), encoder_->n_rows());
  return encoder_->n_rows();
}

}  // namespace lilims::runtime
