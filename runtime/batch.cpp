#include "runtime/batch.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.h"
#include "runtime/generation.h"

namespace lilims::runtime {

struct Batch::Seq {
  std::unique_ptr<graph::KvCache> kv;
  std::vector<int32_t> tokens;  // the sequence in its cache
  uint64_t last_used = 0;       // for the choice of a slot: least recently used first
  bool busy = false;
  // While busy:
  std::unique_ptr<GenerateOptions> opt;  // the Generation reads it
  std::unique_ptr<Generation> gen;
  Done done;
  const std::atomic<bool>* cancel = nullptr;
  std::vector<int32_t> todo;  // tokens to evaluate: the prompt's rest, or the accepted block
  size_t todo_done = 0;       // of them, evaluated
  bool reading_prompt = false;
  std::vector<float> logits;  // (n_vocab) after the last evaluated token
  // After the accepted block is evaluated, generation ends: Took::ended
  // among forced tokens (stop already set), or the callback asked.
  bool end_after = false;
  bool callback_after = false;
  int32_t n_reused = 0, n_prompt = 0;
};

Batch::Batch(const Model& model, const BatchOptions& opt) : model_(model), opt_(opt) {
  if (opt.n_seq < 1 || opt.n_batch < 1) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[batch] n_seq and n_batch must be at least 1");
  }
  if (opt.n_batch < opt.n_seq) opt_.n_batch = opt.n_seq;  // every sequence's next token fits a step
  SessionOptions so;
  so.n_ctx = opt.n_ctx;
  so.n_threads = opt.n_threads;
  so.n_batch = opt_.n_batch;
  so.kv_type = opt.kv_type;
  so.chunk_layers = opt.chunk_layers;
  so.mode = opt.mode;
  so.kv_commit = graph::KvCommit::sync;
  so.allow_ctx_beyond_train = opt.allow_ctx_beyond_train;
  pool_ = std::make_unique<graph::ThreadPool>(threads_or_cores(opt.n_threads), opt.pool_hook);
  so.n_threads = pool_->size();
  so.n_ctx = resolve_n_ctx(model, so);
  PlannedSession planned = plan_session(model, so);
  try {
    exec_ = std::make_unique<graph::Executor>(std::move(planned.graph), std::move(planned.plan), *pool_);
    for (int i = 0; i < opt_.n_seq; ++i) {
      auto s = std::make_unique<Seq>();
      s->kv = exec_->make_sequence_cache();
      s->tokens.reserve((size_t)exec_->n_ctx());
      s->logits.resize((size_t)model.hparams().n_vocab);
      seqs_.push_back(std::move(s));
    }
  } catch (const std::bad_alloc&) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[batch] not enough memory for " +
                                              std::to_string(opt_.n_seq) + " KV caches of " +
                                              std::to_string(so.n_ctx) + " tokens");
  }
  rows_.resize((size_t)opt_.n_batch);
  runs_.resize((size_t)opt_.n_seq);
  run_seq_.resize((size_t)opt_.n_seq);
  logits_.resize((size_t)opt_.n_seq * (size_t)model.hparams().n_vocab);
}

Batch::~Batch() = default;

int Batch::n_active() const {
  int n = 0;
  for (const auto& s : seqs_) n += s->busy;
  return n;
}

void Batch::check_prompt(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const {
  if (prompt.empty()) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[generate] the prompt is empty");
  if (opt.context_policy != ContextPolicy::stop) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[batch] a batch's sequences stop at a full context");
  }
  if (opt.n_draft != 0) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[batch] no prompt-lookup drafts in a batch");
  const int32_t n_vocab = model_.hparams().n_vocab;
  if (prompt.size() > (size_t)n_ctx()) {
    throw Error(LILIMS_ERR_CONTEXT_FULL, "[batch] the prompt's " + std::to_string(prompt.size()) +
                                             " tokens do not fit a context of " +
                                             std::to_string(n_ctx()));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[batch] token id " + std::to_string(t) +
                                                   " is outside the vocabulary");
    }
  }
}

void Batch::check(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const {
  check_prompt(prompt, opt);
  Generation gen(model_, opt, n_ctx(), std::chrono::steady_clock::now());
  gen.check_room(prompt.size());
}

int Batch::add(const std::vector<int32_t>& prompt, const GenerateOptions& opt, Done done,
               const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  if (n_free() == 0) return -1;
  check_prompt(prompt, opt);
  auto own = std::make_unique<GenerateOptions>(opt);
  auto gen = std::make_unique<Generation>(model_, *own, n_ctx(), t0);
  gen->check_room(prompt.size());
  // The free slot sharing the longest prefix; among equals the least
  // recently used.  A first token alone (BOS) is no reason to overwrite a
  // cached sequence.
  Seq* best = nullptr;
  int slot = -1;
  size_t best_common = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    Seq& s = *seqs_[i];
    if (s.busy) continue;
    size_t c = 0;
    while (c < s.tokens.size() && c < prompt.size() && s.tokens[c] == prompt[c]) ++c;
    if (c <= 1) c = 0;
    if (!best || c > best_common || (c == best_common && s.last_used < best->last_used)) {
      best = &s;
      slot = (int)i;
      best_common = c;
    }
  }
  if (!best) return -1;
  Seq& s = *best;
  // At least one token must run to give logits to sample from.
  if (best_common == prompt.size()) --best_common;
  s.tokens.resize(best_common);
  s.kv->release_from((int32_t)best_common);
  s.busy = true;
  s.last_used = ++n_used_;
  s.opt = std::move(own);
  s.gen = std::move(gen);
  s.gen->result().n_prompt_tokens = (int32_t)prompt.size();
  s.done = std::move(done);
  s.cancel = cancel;
  s.todo.assign(prompt.begin() + (ptrdiff_t)best_common, prompt.end());
  s.todo_done = 0;
  s.reading_prompt = true;
  s.end_after = s.callback_after = false;
  s.n_reused = (int32_t)best_common;
  s.n_prompt = (int32_t)prompt.size();
  return slot;
}

void Batch::finish(Seq& s, lilims_status status, const std::string& error) {
  GenerateResult& r = s.gen->finish();
  r.n_prompt_tokens = s.n_prompt;
  r.n_reused_tokens = s.n_reused;
  Done done = std::move(s.done);
  s.busy = false;
  s.todo.clear();
  s.cancel = nullptr;
  if (done) done(r, status, error);
  s.gen.reset();
  s.opt.reset();
}

bool Batch::propose(Seq& s) {
  Generation& gen = *s.gen;
  if (s.cancel && s.cancel->load(std::memory_order_acquire)) {
    gen.stop(StopReason::cancelled);
    return false;
  }
  if (!gen.wants_more()) return false;  // StopReason::max_tokens
  const int32_t next = gen.sample(s.logits.data());
  Took took = gen.accept(next);
  if (took == Took::ended) return false;
  s.todo.assign(1, next);
  for (int32_t f : took == Took::go ? gen.forced(1) : std::vector<int32_t>()) {
    if (!gen.may_force(f, s.todo.size())) break;
    took = gen.accept_forced(f);
    if (took == Took::ended) {
      s.end_after = true;
      break;
    }
    s.todo.push_back(f);
    if (took == Took::callback) break;
  }
  s.callback_after = took == Took::callback;
  // A token joins the sequence even when generation ends after it, so that
  // a later request continues from the text the caller has seen.
  if (s.tokens.size() >= (size_t)n_ctx()) {
    gen.stop(StopReason::context_full);
    return false;
  }
  s.todo_done = 0;
  return true;
}

int Batch::step() {
  const size_t n_vocab = (size_t)model_.hparams().n_vocab;
  // Sample every sequence that has logits; the others read their prompt.
  for (auto& sp : seqs_) {
    Seq& s = *sp;
    if (!s.busy || s.reading_prompt || !s.todo.empty()) continue;
    try {
      if (!propose(s)) finish(s);
    } catch (const Error& e) {
      finish(s, e.status(), e.what());
    }
  }
  for (auto& sp : seqs_) {
    Seq& s = *sp;
    if (s.busy && s.reading_prompt && s.cancel && s.cancel->load(std::memory_order_acquire)) {
      s.gen->stop(StopReason::cancelled);
      finish(s);
    }
  }
  // Rows: the sampled blocks first, then prompt blocks in what is left.
  int n_runs = 0;
  int32_t m = 0;
  const auto add_run = [&](Seq& s, size_t n) {
    graph::BatchRun& br = runs_[(size_t)n_runs];
    br.kv = s.kv.get();
    br.row0 = m;
    br.n = (int32_t)n;
    br.pos0 = (int32_t)s.tokens.size();
    std::copy(s.todo.begin() + (ptrdiff_t)s.todo_done, s.todo.begin() + (ptrdiff_t)(s.todo_done + n),
              rows_.begin() + m);
    run_seq_[(size_t)n_runs++] = &s;
    m += (int32_t)n;
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& sp : seqs_) {
      Seq& s = *sp;
      if (!s.busy || s.todo.empty() || s.reading_prompt != (pass == 1)) continue;
      const size_t want = s.todo.size() - s.todo_done, room = (size_t)(opt_.n_batch - m);
      // A sampled block goes whole or waits; a prompt goes in pieces.
      const size_t n = pass == 0 ? (want <= room ? want : 0) : std::min(want, room);
      if (n > 0) add_run(s, n);
    }
  }
  if (n_runs > 0) {
    try {
      exec_->forward_batch(rows_.data(), runs_.data(), n_runs, logits_.data());
    } catch (const Error& e) {
      for (int r = 0; r < n_runs; ++r) {
        Seq& s = *run_seq_[(size_t)r];
        s.kv->release_from((int32_t)s.tokens.size());
        finish(s, e.status(), e.what());
      }
      return n_active();
    }
    ++n_steps_;
    n_rows_ += (uint64_t)m;
  }
  for (int r = 0; r < n_runs; ++r) {
    Seq& s = *run_seq_[(size_t)r];
    const graph::BatchRun& br = runs_[(size_t)r];
    s.tokens.insert(s.tokens.end(), rows_.begin() + br.row0, rows_.begin() + br.row0 + br.n);
    s.todo_done += (size_t)br.n;
    if (s.todo_done < s.todo.size()) continue;
    std::memcpy(s.logits.data(), logits_.data() + (size_t)r * n_vocab, n_vocab * sizeof(float));
    s.todo.clear();
    s.todo_done = 0;
    if (s.reading_prompt) {
      s.reading_prompt = false;
      s.gen->begin(s.tokens);
    } else if (s.end_after) {
      finish(s);
    } else if (s.callback_after) {
      s.gen->stop(StopReason::callback);
      finish(s);
    }
  }
  return n_active();
}

}  // namespace lilims::runtime
