#include "runtime/eval/imatrix.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "graph/executor.h"
#include "graph/thread_pool.h"
#include "kernels/ops.h"
#include "models/builders.h"

namespace lilims::runtime {

namespace {

struct Accumulator {
  std::vector<double> sum_sq;  // (cols)
  int64_t rows = 0;
  // The sum of x x^T (lower triangle), when this weight keeps the moments
  // of its input; null for a weight that shares another's.
  std::shared_ptr<std::vector<float>> moments;
};

// moments += sum over the rows of x x^T, lower triangle.  Row i of the
// matrix stays in cache while every token adds to it.
void add_moments(std::vector<float>& m, const float* a, int64_t lda, int32_t rows, size_t n) {
  const kernels::OpsTable& ops = kernels::ops();
  for (size_t i = 0; i < n; ++i) {
    float* mi = m.data() + i * n;
    for (int32_t t = 0; t < rows; ++t) {
      const float* x = a + (int64_t)t * lda;
      if (x[i] != 0.0f) ops.axpy(x[i], x, mi, (int64_t)i + 1);
    }
  }
}

struct Collector {
  // A weight stacked at load from several file tensors (models::Weight::
  // parts) feeds each of theirs: they all read its input.
  std::unordered_map<const kernels::PackedWeight*, std::vector<Accumulator*>> by_weight;

  static void observe(void* user, const kernels::PackedWeight& w, const float* a, int64_t lda,
                      int32_t rows) {
    auto* self = static_cast<Collector*>(user);
    const auto it = self->by_weight.find(&w);
    if (it == self->by_weight.end()) return;
    for (Accumulator* acc : it->second) {
      for (int32_t t = 0; t < rows; ++t) {
        const float* x = a + (int64_t)t * lda;
        for (size_t j = 0; j < acc->sum_sq.size(); ++j) acc->sum_sq[j] += (double)x[j] * x[j];
      }
      acc->rows += rows;
      if (acc->moments) add_moments(*acc->moments, a, lda, rows, acc->sum_sq.size());
    }
  }
};

}  // namespace

Calibration calibrate(const Model& model, const std::vector<int32_t>& tokens, const ImatrixOptions& opt,
                      const std::function<void(int32_t, int32_t)>& on_chunk) {
  if (opt.n_ctx < 4 || opt.n_ctx > model.hparams().n_ctx_train) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[imatrix] the chunk size " + std::to_string(opt.n_ctx) +
                                                 " must be in 4.." +
                                                 std::to_string(model.hparams().n_ctx_train));
  }
  int32_t n_chunks = (int32_t)(tokens.size() / (size_t)opt.n_ctx);
  if (opt.max_chunks > 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  if (n_chunks < 1) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[imatrix] the text has " + std::to_string(tokens.size()) +
                    " tokens; at least one chunk of " + std::to_string(opt.n_ctx) + " is needed");
  }
  const models::Model& w = model.weights();
  // Every matmul weight, by the name of its file tensor (a tied head is
  // token_embd.weight; a stacked weight gives one entry per tensor).
  std::unordered_map<std::string, Accumulator> acc;
  // Which weight's moments each weight reads (itself, or the first of the
  // weights that share its input).
  std::unordered_map<std::string, std::string> moments_of;
  Collector collector;
  auto add = [&](const models::Weight& weight, const models::Weight* shares) {
    if (!weight.present()) return;
    const std::vector<std::string> names =
        weight.parts.empty() ? std::vector<std::string>{weight.name} : weight.parts;
    for (size_t i = 0; i < names.size(); ++i) {
      Accumulator& a = acc[names[i]];
      a.sum_sq.assign((size_t)weight.cols, 0.0);
      collector.by_weight[&weight.packed].push_back(&a);
      if (!opt.second_moments) continue;
      if (i > 0) {  // the parts of a stack share its first one's
        moments_of[names[i]] = names[0];
      } else if (shares && shares->present() && shares != &weight) {
        moments_of[names[i]] = shares->name;
      } else {
        a.moments = std::make_shared<std::vector<float>>((size_t)(weight.cols * weight.cols), 0.0f);
        moments_of[names[i]] = names[i];
      }
    }
  };
  graph::PlanOptions po;
  po.n_ctx = opt.n_ctx;
  po.n_batch = std::max(1, opt.n_batch);
  po.n_threads = std::max(1, opt.n_threads);
  models::BuildOptions bo;
  bo.n_ctx = opt.n_ctx;
  graph::Graph g = models::build_graph(w, bo);
  // Every matmul of the graph, by its weight; weights whose matmuls read one
  // tensor (q, k and v the attention norm's output, gate and up the MLP
  // norm's, as the family's builder wires them) share the first one's moments.
  std::unordered_map<const kernels::PackedWeight*, const models::Weight*> by_packed;
  auto weight = [&](const models::Weight& x) {
    if (x.present()) by_packed[&x.packed] = &x;
  };
  for (const models::Layer& layer : w.layers) {
    for (const models::Weight* x : layer.weights()) weight(*x);
  }
  weight(w.output);
  std::unordered_map<int, const models::Weight*> first_reader;  // input tensor -> weight
  for (const graph::Node& n : g.nodes()) {
    if (n.op != graph::Op::matmul) continue;
    const auto it = by_packed.find(n.w);
    if (it == by_packed.end()) continue;
    const auto [first, fresh] = first_reader.emplace(g.root(n.a), it->second);
    add(*it->second, fresh ? nullptr : first->second);
  }
  graph::ThreadPool pool(po.n_threads);
  graph::Executor exec(std::move(g), po, pool, model.memory(opt.n_ctx));
  exec.set_matmul_observer({&Collector::observe, &collector});

  const tok::Tokenizer& tk = model.tokenizer();
  std::vector<float> logits((size_t)opt.n_ctx * (size_t)model.hparams().n_vocab);
  for (int32_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + (ptrdiff_t)c * opt.n_ctx,
                               tokens.begin() + (ptrdiff_t)(c + 1) * opt.n_ctx);
    if (tk.add_bos() && tk.bos() >= 0) chunk[0] = tk.bos();
    exec.sync();
    exec.release_from(0);
    exec.forward(chunk.data(), (int32_t)chunk.size(), 0, logits.data(), true);
    if (on_chunk) on_chunk(c + 1, n_chunks);
  }
  exec.sync();

  Calibration out;
  models::Imatrix& m = out.imatrix;
  m.n_ctx = opt.n_ctx;
  m.n_chunks = n_chunks;
  for (auto& [name, a] : acc) {
    if (a.rows == 0) continue;
    models::ImatrixEntry e;
    e.n_rows = a.rows;
    e.mean_sq.resize(a.sum_sq.size());
    for (size_t j = 0; j < a.sum_sq.size(); ++j) e.mean_sq[j] = (float)(a.sum_sq[j] / (double)a.rows);
    m.entries.emplace(name, std::move(e));
    if (a.moments) {
      const float inv = 1.0f / (float)a.rows;
      for (float& v : *a.moments) v *= inv;
    }
  }
  for (const auto& [name, owner] : moments_of) {
    const Accumulator& a = acc.at(owner);
    if (a.rows > 0 && a.moments) out.moments[name] = a.moments;
  }
  return out;
}

models::Imatrix collect_imatrix(const Model& model, const std::vector<int32_t>& tokens,
                                const ImatrixOptions& opt,
                                const std::function<void(int32_t, int32_t)>& on_chunk) {
  ImatrixOptions o = opt;
  o.second_moments = false;
  return calibrate(model, tokens, o, on_chunk).imatrix;
}

}  // namespace lilims::runtime
