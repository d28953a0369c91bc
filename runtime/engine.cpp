#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/error.h"
#include "base/memory_info.h"
#include "runtime/generation.h"
#include "tokenizer/chat.h"
#include "tokenizer/unicode.h"

namespace lilims::runtime {
namespace {

graph::PlanOptions plan_options(const Model& model, const SessionOptions& opt) {
  graph::PlanOptions po;
  po.mode = opt.mode;
  po.kv_type = opt.kv_type;
  po.kv_commit = opt.kv_commit;
  po.n_threads = threads_or_cores(opt.n_threads);
  if (opt.n_batch < 0 || opt.chunk_layers < 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[session] n_batch and chunk_layers must not be negative");
  }
  const int32_t n_train = model.hparams().n_ctx_train;
  po.n_ctx = opt.n_ctx > 0 ? opt.n_ctx : resolve_n_ctx(model, opt);
  if (po.n_ctx > n_train && !opt.allow_ctx_beyond_train) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[session] n_ctx " + std::to_string(po.n_ctx) + " is beyond the " +
                    std::to_string(n_train) +
                    " positions the model was trained for; to run it anyway set "
                    "allow_ctx_beyond_train (CLI: --ctx-beyond-train)");
  }
  po.n_batch = opt.n_batch;
  return po;
}

graph::Graph session_graph(const Model& model, const SessionOptions& opt, int32_t n_ctx,
                           bool lora = false) {
  models::BuildOptions bo;
  bo.n_ctx = n_ctx;
  bo.lora = lora;
  bo.chunk_layers = opt.chunk_layers > 0 ? opt.chunk_layers : SessionOptions().chunk_layers;
  return models::build_graph(model.weights(), bo);
}

std::string mib(uint64_t bytes) {
  return std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

}  // namespace

graph::ModelMemory Model::memory(int32_t n_ctx) const {
  graph::ModelMemory mm;
  mm.weights_mapped = model_->mapped_weight_bytes();
  mm.weights_heap = model_->repacked_bytes + model_->requantized_bytes;
  // Each token's embedding row is read from the mapping: at most one page
  // per row (two when a row straddles pages), for every position.  A
  // re-quantized embedding is on the heap, counted whole above, and so is
  // a tied output's repacked copy when the rows are read from it.
  const models::Weight& e = model_->tok_embd;
  const uint64_t row = quant::row_bytes(e.type, e.cols), page = 4096;
  const uint64_t per_row = (row + page - 1) / page * page + (row % page ? page : 0);
  const bool on_heap = e.requantized || &models::embedding_table(*model_) != &e.packed;
  mm.embed_rows = on_heap ? 0 : std::min<uint64_t>(row * (uint64_t)e.rows, per_row * (uint64_t)n_ctx);
  // The load reads the metadata through the mapping, and the pages a
  // copied tensor shares with its neighbours stay when its own are dropped
  // (models::drop_copied_pages): about one page per tensor.
  if (model_->file) {
    mm.file_header = model_->file->data_offset() + (uint64_t)page * model_->file->tensors().size();
  }
  mm.host = tokenizer_->memory_bytes();
  for (const std::string& p : pieces_) mm.host += string_bytes(p);
  return mm;
}

PlannedSession plan_session(const Model& model, const SessionOptions& opt) {
  graph::PlanOptions po = plan_options(model, opt);
  graph::Graph g = session_graph(model, opt, po.n_ctx);
  const graph::ModelMemory mm = model.memory(po.n_ctx);
  if (po.n_batch != 0) {
    graph::Plan p = graph::make_plan(g, po, mm);
    return PlannedSession{std::move(g), std::move(p)};
  }
  // The largest default block the memory holds at this context: the one
  // graph planned for each candidate.
  const uint64_t limit = opt.memory_budget > 0 ? opt.memory_budget : available_memory_bytes();
  for (po.n_batch = kMaxDefaultBatch;; po.n_batch /= 2) {
    graph::Plan p = graph::make_plan(g, po, mm);
    if (po.n_batch <= kMinDefaultBatch || limit == 0 || p.mem.session() <= limit) {
      return PlannedSession{std::move(g), std::move(p)};
    }
  }
}

SchemaCache& Model::schema_cache() const {
  std::call_once(schema_cache_once_, [&] {
    std::vector<bool> usable(pieces_.size());
    for (size_t id = 0; id < pieces_.size(); ++id) {
      usable[id] = !pieces_[id].empty() && !tokenizer_->is_eog((int32_t)id) &&
                   (int32_t)id != tokenizer_->bos();
    }
    schema_cache_ = std::make_unique<SchemaCache>(pieces_, usable);
  });
  return *schema_cache_;
}

uint64_t session_memory_estimate(const Model& model, const SessionOptions& opt) {
  return plan_session(model, opt).plan.mem.session();
}

int32_t resolve_n_ctx(const Model& model, const SessionOptions& opt) {
  if (opt.n_ctx > 0) return opt.n_ctx;
  const int32_t n_train = model.hparams().n_ctx_train;
  const uint64_t limit = opt.memory_budget > 0 ? opt.memory_budget : available_memory_bytes();
  SessionOptions o = opt;
  o.n_ctx = n_train;
  if (limit == 0 || session_memory_estimate(model, o) <= limit) return n_train;
  int32_t c = 1;
  while (c <= n_train / 2) c *= 2;  // the largest power of two below n_train
  if (c == n_train) c /= 2;
  for (; c >= kMinDefaultCtx; c /= 2) {
    o.n_ctx = c;
    if (session_memory_estimate(model, o) <= limit) return c;
  }
  return std::min(kMinDefaultCtx, n_train);
}

Session::Session(const Model& model, const SessionOptions& opt) : model_(model) {
  SessionOptions resolved = opt;
  resolved.n_ctx = resolve_n_ctx(model, opt);
  // One graph and one plan: the memory check reads the plan the executor runs.
  pool_ = std::make_unique<graph::ThreadPool>(threads_or_cores(opt.n_threads), opt.pool_hook);
  resolved.n_threads = pool_->size();
  PlannedSession planned = plan_session(model, resolved);
  const graph::PlanOptions& po = planned.plan.opt;
  // The whole cache counts, though it becomes resident only as tokens fill
  // it: a context the machine cannot hold would fail later, mid-chat.
  const uint64_t need = planned.plan.mem.session();
  if (opt.memory_budget > 0 && need > opt.memory_budget) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                "[session] a context of " + std::to_string(po.n_ctx) + " tokens needs " +
                    std::to_string(need) + " bytes (" + mib(need) +
                    "), over the memory budget of " + std::to_string(opt.memory_budget) +
                    " bytes (" + mib(opt.memory_budget) + ")");
  }
  const uint64_t avail = available_memory_bytes();
  if (avail > 0 && need > avail) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                "[session] a context of " + std::to_string(po.n_ctx) + " tokens needs " +
                    std::to_string(need) + " bytes (" + mib(need) + ") but " +
                    std::to_string(avail) + " bytes (" + mib(avail) + ") are available");
  }
  opt_ = resolved;
  opt_.n_threads = opt.n_threads;
  plan_opt_ = po;
  try {
    exec_ = std::make_unique<graph::Executor>(std::move(planned.graph), std::move(planned.plan), *pool_,
                                              opt.commit_hook);
  } catch (const std::bad_alloc&) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[session] not enough memory for a KV cache of " +
                                              std::to_string(po.n_ctx) + " tokens");
  }
  logits_.resize((size_t)model.hparams().n_vocab);
  tokens_.reserve((size_t)po.n_ctx);  // so that a decode step allocates nothing
}

MemoryReport Session::memory_report() const {
  const graph::MemoryPlan& mem = exec_->plan().mem;
  MemoryReport r;
  const gguf::File& file = *model_.weights().file;
  if (file.image_on_heap()) {
    r.weights_copied = file.file_size() + mem.weights_heap;
  } else {
    r.weights_mapped = mem.weights_mapped + mem.embed_rows;
    r.weights_copied = mem.weights_heap;
  }
  r.kv_full = mem.kv;
  r.kv_resident = std::min<uint64_t>(exec_->kv_resident_bytes(), mem.kv);
  r.scratch = mem.session() - mem.kv;
  r.host = mem.model_host;
  return r;
}

Session::Call::Call(Session& s) : s_(s) {
  uint32_t idle = 0;
  if (!s_.state_.compare_exchange_strong(idle, kBusy, std::memory_order_acquire)) {
    throw Error(LILIMS_ERR_BUSY, "[session] another call is running on this session; a session "
                                 "is used by one thread at a time");
  }
}

Session::Call::~Call() { s_.state_.store(0, std::memory_order_release); }

void Session::cancel() {
  uint32_t v = state_.load(std::memory_order_relaxed);
  while ((v & kBusy) && !state_.compare_exchange_weak(v, v | kCancel, std::memory_order_release)) {
  }
}

std::unique_ptr<Adapter> Adapter::open(const Model& model, const std::string& path) {
  return from_file(model, *gguf::File::open(path));
}

std::unique_ptr<Adapter> Adapter::from_file(const Model& model, const gguf::File& file) {
  auto lora = models::load_lora(file, model.weights());
  if (!lora->tool_format.empty()) {
    try {
      tool_format_from_name(lora->tool_format);
    } catch (const Error&) {
      throw Error(LILIMS_ERR_BAD_FORMAT, "[lora] lilims.tool_format '" + lora->tool_format +
                                             "' is not a tool format (generic, hermes, smollm2, llama3, phi4)");
    }
  }
  return std::unique_ptr<Adapter>(new Adapter(model, std::move(lora)));
}

void Session::set_adapters(const std::vector<AdapterUse>& adapters) {
  Call call(*this);
  for (const AdapterUse& u : adapters) {
    if (!u.adapter) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session] an adapter in the list is null");
    if (&u.adapter->model() != &model_) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session] an adapter was loaded for another model");
    }
    if (!std::isfinite(u.scale)) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session] an adapter's scale is not finite");
    }
  }
  if (adapters == adapters_) return;
  // The graph has lora nodes from the first time a session sets adapters:
  // without any, it runs as a session that never did.
  std::unique_ptr<graph::Executor> fresh;
  if (!adapters.empty() && exec_->graph().lora_targets().empty()) {
    try {
      fresh = std::make_unique<graph::Executor>(session_graph(model_, opt_, plan_opt_.n_ctx, true), plan_opt_,
                                                *pool_, model_.memory(plan_opt_.n_ctx), opt_.commit_hook);
    } catch (const std::bad_alloc&) {
      throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[session] not enough memory to plan the session for adapters");
    }
  }
  graph::Executor& ex = fresh ? *fresh : *exec_;
  const auto& targets = ex.graph().lora_targets();
  std::vector<std::vector<graph::LoraTerm>> terms(adapters.empty() ? 0 : targets.size());
  for (size_t slot = 0; slot < terms.size(); ++slot) {
    for (const AdapterUse& u : adapters) {
      const models::LoraAdapter& ad = u.adapter->lora();
      if (const models::LoraWeight* w = ad.find(targets[slot].name)) {
        graph::LoraTerm t;
        if (w->embedding) {
          t.a_rows = w->a_rows.data();
        } else {
          t.a = &w->a;
        }
        t.b = w->b.begin();
        t.rank = w->rank;
        t.scale = ad.scale(*w, u.scale);
        terms[slot].push_back(t);
      }
    }
  }
  ex.set_lora(terms);
  if (fresh) {
    exec_->sync();
    exec_ = std::move(fresh);
  } else {
    exec_->release_from(0);
  }
  tokens_.clear();
  has_logits_ = false;
  adapters_ = adapters;
}

void Session::reset() {
  Call call(*this);
  exec_->release_from(0);
  tokens_.clear();
  has_logits_ = false;
}

void Session::truncate(int32_t n) {
  Call call(*this);
  truncate_impl(n);
}

void Session::truncate_impl(int32_t n) {
  if (n < 0 || n > (int32_t)tokens_.size()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session] cannot truncate " +
                                                 std::to_string(tokens_.size()) +
                                                 " tokens to " + std::to_string(n));
  }
  tokens_.resize((size_t)n);
  exec_->release_from(n);
  has_logits_ = false;
}

GenerateResult Session::generate_reusing_prefix(const std::vector<int32_t>& full_prompt,
                                                const GenerateOptions& opt) {
  Call call(*this);
  size_t common = 0;
  while (common < tokens_.size() && common < full_prompt.size() &&
         tokens_[common] == full_prompt[common]) {
    ++common;
  }
  // At least one token must run to give logits to sample from.
  if (common == full_prompt.size() && common > 0) --common;
  GenerateResult r = generate_after(
      common, std::vector<int32_t>(full_prompt.begin() + (ptrdiff_t)common, full_prompt.end()),
      opt);
  r.n_prompt_tokens = (int32_t)full_prompt.size();
  r.n_reused_tokens = (int32_t)common;
  return r;
}

double GenerateResult::prompt_tokens_per_second() const {
  const int32_t n = n_prompt_tokens - n_reused_tokens;
  return n > 0 && prompt_seconds > 0 ? n / prompt_seconds : 0.0;
}

double GenerateResult::decode_tokens_per_second() const {
  return tokens.size() > 1 && generate_seconds > 0 ? (double)(tokens.size() - 1) / generate_seconds
                                                   : 0.0;
}

void Session::shift_context(int32_t n_keep, int32_t next) {
  const int32_t n_past = (int32_t)tokens_.size();
  const int32_t n_discard = (n_past - n_keep) / 2;
  std::vector<int32_t> rest(tokens_.begin() + n_keep + n_discard, tokens_.end());
  rest.push_back(next);
  truncate_impl(n_keep);
  eval_impl(rest);
}

void Session::check_tokens(size_t n_past, const std::vector<int32_t>& tokens) const {
  if (n_past + tokens.size() > (size_t)exec_->n_ctx()) {
    throw Error(LILIMS_ERR_CONTEXT_FULL,
                "[session] " + std::to_string(tokens.size()) + " tokens do not fit: " +
                    std::to_string(n_past) + " of " + std::to_string(exec_->n_ctx()) +
                    " positions are in use");
  }
  const int32_t n_vocab = model_.hparams().n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[session] token id " + std::to_string(t) +
                                                   " is outside the vocabulary (0.." +
                                                   std::to_string(n_vocab - 1) + ")");
    }
  }
}

void Session::eval(const std::vector<int32_t>& tokens) {
  Call call(*this);
  eval_impl(tokens);
}

void Session::eval_in_blocks(size_t n,
                             const std::function<void(size_t done, int32_t m)>& forward) {
  const size_t step = (size_t)exec_->plan().opt.n_batch;
  for (size_t done = 0; done < n; done += step) {
    if (cancel_requested()) throw Error(LILIMS_ERR_CANCELLED, "[session] cancelled");
    forward(done, (int32_t)std::min(step, n - done));
    has_logits_ = true;
  }
}

void Session::eval_impl(const std::vector<int32_t>& tokens) {
  check_tokens(tokens_.size(), tokens);
  eval_in_blocks(tokens.size(), [&](size_t done, int32_t m) {
    exec_->forward(tokens.data() + done, m, (int32_t)tokens_.size(), logits_.data(), false);
    tokens_.insert(tokens_.end(), tokens.begin() + (ptrdiff_t)done,
                   tokens.begin() + (ptrdiff_t)done + m);
  });
}

void Session::eval_embeddings(const float* rows, int32_t n) {
  Call call(*this);
  if (!rows || n < 1) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[session] eval_embeddings needs rows (got " + std::string(rows ? "" : "NULL, ") +
                    std::to_string(n) + " rows)");
  }
  if (tokens_.size() + (size_t)n > (size_t)exec_->n_ctx()) {
    throw Error(LILIMS_ERR_CONTEXT_FULL,
                "[session] " + std::to_string(n) + " embedding rows do not fit: " +
                    std::to_string(tokens_.size()) + " of " + std::to_string(exec_->n_ctx()) +
                    " positions are in use");
  }
  const size_t width = (size_t)model_.hparams().n_embd;
  eval_in_blocks((size_t)n, [&](size_t done, int32_t m) {
    exec_->forward_embd(rows + done * width, m, (int32_t)tokens_.size(), logits_.data(), false);
    tokens_.insert(tokens_.end(), (size_t)m, kEmbeddingRow);
  });
}

size_t Session::embedding_rows_end(size_t n) const {
  for (size_t i = std::min(n, tokens_.size()); i > 0; --i) {
    if (tokens_[i - 1] == kEmbeddingRow) return i;
  }
  return 0;
}

void Session::eval_all_logits(const std::vector<int32_t>& tokens, std::vector<float>& logits) {
  Call call(*this);
  eval_block_impl(tokens, &logits, false);
}

void Session::eval_all_logits_as_decode(const std::vector<int32_t>& tokens,
                                        std::vector<float>& logits) {
  Call call(*this);
  eval_block_impl(tokens, &logits, true);
}

void Session::eval_block_impl(const std::vector<int32_t>& tokens, std::vector<float>* all,
                              bool as_decode) {
  check_tokens(tokens_.size(), tokens);
  const int32_t n_vocab = model_.hparams().n_vocab;
  float* out = logits_.data();
  if (all) {
    all->resize(tokens.size() * (size_t)n_vocab);
    out = all->data();
  }
  const int32_t n = (int32_t)tokens.size(), pos0 = (int32_t)tokens_.size();
  if (as_decode) {
    exec_->forward_as_decode(tokens.data(), n, pos0, out, all != nullptr);
  } else {
    exec_->forward(tokens.data(), n, pos0, out, all != nullptr);
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  if (!tokens.empty()) {
    if (all) std::copy(all->end() - n_vocab, all->end(), logits_.begin());
    has_logits_ = true;
  }
}

GenerateResult Session::generate(const std::string& prompt, const GenerateOptions& opt) {
  Call call(*this);
  const bool bos = opt.add_bos && tokens_.empty();
  return generate_after(tokens_.size(), model_.tokenizer().encode(prompt, bos, opt.parse_special),
                       opt);
}

GenerateResult Session::generate_tokens(const std::vector<int32_t>& prompt,
                                        const GenerateOptions& opt) {
  Call call(*this);
  return generate_after(tokens_.size(), prompt, opt);
}


GenerateResult Session::generate_after(size_t keep, const std::vector<int32_t>& prompt,
                                       const GenerateOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything is checked before the session changes.
  if (prompt.empty() && !(keep == tokens_.size() && has_logits_)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[generate] nothing to continue: the prompt is empty and the session has no tokens");
  }
  Generation gen(model_, opt, exec_->n_ctx(), t0);
  check_tokens(keep, prompt);
  gen.result().n_prompt_tokens = (int32_t)prompt.size();
  const int32_t n_keep = shift_keep(keep, prompt, opt);
  gen.check_room(keep + prompt.size());
  if (keep < tokens_.size()) truncate_impl((int32_t)keep);
  try {
    eval_impl(prompt);
  } catch (const Error& e) {
    if (e.status() != LILIMS_ERR_CANCELLED) throw;
    gen.stop(StopReason::cancelled);
    return gen.result();
  }
  gen.begin(tokens_);
  const int32_t n_vocab = model_.hparams().n_vocab;
  std::vector<float> block_logits;    // a verification block's rows
  const float* cur = logits_.data();  // logits after the sequence's last accepted token
  std::vector<int32_t> block;         // tokens accepted but not yet evaluated
  while (gen.wants_more()) {
    if (cancel_requested()) {
      gen.stop(StopReason::cancelled);
      break;
    }
    const int32_t next = gen.sample(cur);
    Took took = gen.accept(next);
    if (took == Took::ended) break;
    block.clear();
    std::vector<int32_t>& pending = gen.pending();
    if (!pending.empty() && pending.front() == next) {  // drafted, evaluated already
      // Without drafts its evaluation would see the cancel and leave it out.
      if (cancel_requested()) {
        gen.stop(StopReason::cancelled);
        break;
      }
      pending.erase(pending.begin());
      ++gen.result().n_accepted;
      cur += n_vocab;
    } else {
      if (!pending.empty()) cur = drop_drafts(gen, cur);
      block.push_back(next);
    }
    bool ended = false;
    if (took == Took::go) {
      for (int32_t f : gen.forced(block.size())) {
        if (!gen.may_force(f, block.size())) break;
        if (!pending.empty()) cur = drop_drafts(gen, cur);
        took = gen.accept_forced(f);
        if (took == Took::ended) {
          ended = true;
          break;
        }
        block.push_back(f);
        if (took == Took::callback) break;
      }
    }
    if (!block.empty() && !evaluate(gen, block, next, n_keep, !ended && took == Took::go,
                                    block_logits, cur)) {
      break;
    }
    if (ended) break;
    if (took == Took::callback) {
      gen.stop(StopReason::callback);
      break;
    }
  }
  if (!gen.pending().empty()) drop_drafts(gen, cur);
  return gen.finish();
}

int32_t Session::shift_keep(size_t keep, const std::vector<int32_t>& prompt,
                            const GenerateOptions& opt) const {
  if (opt.context_policy != ContextPolicy::shift) return 0;
  const tok::Tokenizer& tk = model_.tokenizer();
  const int32_t first = keep > 0 ? tokens_[0] : prompt.empty() ? -1 : prompt[0];
  const int32_t n_keep = opt.n_keep >= 0 ? opt.n_keep : (first >= 0 && first == tk.bos() ? 1 : 0);
  if (n_keep > exec_->n_ctx() - 2) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[generate] n_keep " + std::to_string(n_keep) + " leaves nothing to shift in a "
                "context of " + std::to_string(exec_->n_ctx()) + " tokens (at most " +
                std::to_string(exec_->n_ctx() - 2) + ")");
  }
  // Shifted rows are evaluated again from their ids, which embedding rows
  // (an image) do not have: they must stay within the kept start.
  const size_t end = embedding_rows_end(keep);
  if (end > (size_t)n_keep) {
    throw Error(LILIMS_ERR_UNSUPPORTED,
                "[generate] a context shift cannot move embedding rows (an image): they end "
                "at position " + std::to_string(end) + ", after n_keep " +
                std::to_string(n_keep) + "; keep at least " + std::to_string(end) +
                " tokens or use the stop policy");
  }
  return n_keep;
}

const float* Session::drop_drafts(Generation& gen, const float* cur) {
  std::copy(cur, cur + model_.hparams().n_vocab, logits_.begin());
  truncate_impl((int32_t)gen.n_seq());
  has_logits_ = true;
  gen.pending().clear();
  return logits_.data();
}

bool Session::evaluate(Generation& gen, std::vector<int32_t>& block, int32_t next, int32_t n_keep,
                       bool may_draft, std::vector<float>& block_logits, const float*& cur) {
  // A token joins the sequence even when generation ends here, so that a
  // later call continues from the text the caller has seen.
  const bool full = tokens_.size() >= (size_t)exec_->n_ctx();
  if (full && (!gen.may_shift() || gen.value_active())) {
    gen.stop(StopReason::context_full);
    return false;
  }
  try {
    if (full) {
      shift_context(n_keep, next);
      ++gen.result().n_shifts;
      cur = logits_.data();
      return true;
    }
    const std::vector<int32_t> draft = may_draft ? gen.drafts(block) : std::vector<int32_t>();
    if (block.size() == 1 && draft.empty()) {
      eval_impl(block);
      cur = logits_.data();
      return true;
    }
    // One block, each position computed as one-token decoding would.
    if (cancel_requested()) throw Error(LILIMS_ERR_CANCELLED, "[session] cancelled");
    const size_t taken = block.size();
    block.insert(block.end(), draft.begin(), draft.end());
    eval_block_impl(block, draft.empty() ? nullptr : &block_logits, true);
    gen.pending() = draft;
    gen.result().n_drafted += (int32_t)draft.size();
    const size_t n_vocab = (size_t)model_.hparams().n_vocab;
    cur = draft.empty() ? logits_.data() : block_logits.data() + (taken - 1) * n_vocab;
    return true;
  } catch (const Error& e) {
    if (e.status() != LILIMS_ERR_CANCELLED) throw;
    gen.stop(StopReason::cancelled);
    return false;
  }
}

}  // namespace lilims::runtime
