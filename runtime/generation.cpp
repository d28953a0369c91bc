#include "runtime/generation.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/memory_info.h"
#include "runtime/speculative.h"

namespace lilims::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A token JSON output may use: one with bytes that never ends generation.
bool json_usable(const tok::Tokenizer& tk, const std::vector<std::string>& pieces, int32_t id) {
  return id < (int32_t)pieces.size() && !pieces[(size_t)id].empty() && !tk.is_eog(id) &&
         id != tk.bos();
}

// Whether `id` keeps the output `json` valid and closable in the `left - 1`
// tokens that remain after it.
bool json_accepts(const Model& model, const JsonPrefix& json, int64_t left, int32_t id) {
  const std::vector<std::string>& pieces = model.pieces();
  if (!json_usable(model.tokenizer(), pieces, id)) return false;
  JsonPrefix probe = json;
  if (!probe.feed(pieces[(size_t)id])) return false;
  return model.json_closers().tokens_to_close(probe) <= left - 1;
}

// The stop strings, once the logit bias is checked (the order of the checks
// decides which error an options struct with several faults gets).
std::vector<std::string> checked_stops(const Model& model, const GenerateOptions& opt) {
  check_logit_bias(opt.sampling.logit_bias, model.hparams().n_vocab);
  return opt.stop;
}

}  // namespace

Generation::Generation(const Model& model, const GenerateOptions& opt, int32_t n_ctx,
                       std::chrono::steady_clock::time_point t0)
    : model_(model),
      tk_(model.tokenizer()),
      opt_(opt),
      n_ctx_(n_ctx),
      n_vocab_(model.hparams().n_vocab),
      t0_(t0),
      t_first_(t0),
      sampler_(opt.sampling),
      stops_(checked_stops(model, opt)),
      trigger_(opt.constraint_trigger) {
  if (opt.n_draft < 0 || opt.n_draft > kMaxDraft) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[generate] n_draft " + std::to_string(opt.n_draft) +
                                                 " is outside 0.." + std::to_string(kMaxDraft));
  }
  if (!stops_.empty() && (opt.json || !opt.json_schema.empty())) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[generate] stop strings do not apply to json or json_schema output: it ends "
                "when the value closes");
  }
}

void Generation::check_room(size_t n_after_prompt) {
  const GenerateOptions& opt = opt_;
  const int64_t ctx_left = (int64_t)n_ctx_ - (int64_t)n_after_prompt + 1;
  const bool cap_binds = opt.max_tokens > 0 && opt.max_tokens < ctx_left;
  if (opt.json && !opt.json_schema.empty()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[generate] json and json_schema exclude each other");
  }
  constrained_ = opt.json || !opt.json_schema.empty();
  for (const std::string* s : {&opt.constraint_trigger, &opt.constraint_close}) {
    if (s->empty()) continue;
    if (!constrained_) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] constraint_trigger and constraint_close apply to json or json_schema "
                  "output");
    }
    if (!tok::utf8_is_valid(*s)) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] constraint_trigger and constraint_close must be valid UTF-8");
    }
  }
  if (!opt.constraint_close.empty()) close_tokens_ = tk_.encode(opt.constraint_close, false, true);
  n_close_ = (int64_t)close_tokens_.size();
  active_ = opt.constraint_trigger.empty();
  if (!opt.json_schema.empty()) {
    schema_ = std::make_unique<SchemaConstraint>(model_.schema_cache().get(opt.json_schema));
  }
  if (active_ && opt.json) check_json_room(value_room(0, n_after_prompt), cap_binds);
  if (active_ && schema_) check_schema_room(value_room(0, n_after_prompt), cap_binds);
}

int64_t Generation::room(int32_t made, size_t n_past) const {
  // The loop makes a token, then stops if the context is full, so the last
  // position holds one token more than it evaluates.
  int64_t left = (int64_t)n_ctx_ - (int64_t)n_past + 1;
  if (opt_.max_tokens > 0) left = std::min<int64_t>(left, (int64_t)opt_.max_tokens - made);
  return left;
}

void Generation::check_json_room(int64_t left, bool cap_binds) const {
  const JsonPrefix start;
  if (model_.json_closers().tokens_to_close(start) <= left) return;
  const int32_t n_vocab = (int32_t)model_.pieces().size();
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (json_accepts(model_, start, left, id)) return;  // one token is a whole object ("{}")
  }
  if (model_.json_closers().tokens_to_close(start) >= JsonClosers::kUnreachable) {
    throw Error(LILIMS_ERR_UNSUPPORTED,
                "[generate] the vocabulary has no single-byte tokens for '{' and '}', so JSON "
                "output cannot be guaranteed to close");
  }
  const std::string need = std::to_string(model_.json_closers().tokens_to_close(start));
  if (cap_binds) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[generate] max_tokens " + std::to_string(left) +
                    " is too small for a JSON object: it needs at least " + need + " tokens");
  }
  throw Error(LILIMS_ERR_CONTEXT_FULL, "[generate] the context has room for " +
                                           std::to_string(left) +
                                           " generated tokens, too few for a JSON object (" +
                                           need + " needed)");
}

void Generation::check_schema_room(int64_t left, bool cap_binds) const {
  SchemaConstraint& sc = *schema_;
  const int64_t need = sc.tokens_to_close();
  if (need <= left) return;
  // One token may spell more of the value than the single-byte completion.
  std::vector<uint8_t> allowed(model_.pieces().size());
  sc.fill_mask(allowed.data());
  for (int32_t id = 0; id < (int32_t)allowed.size(); ++id) {
    if (allowed[(size_t)id] && sc.accepts_within(id, left - 1)) return;
  }
  if (need >= Grammar::kInfinite) {
    throw Error(LILIMS_ERR_UNSUPPORTED,
                "[generate] the vocabulary lacks the single-byte tokens needed to spell a value "
                "of the schema");
  }
  if (cap_binds) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[generate] max_tokens " + std::to_string(left) +
                    " is too small for a value of the schema: it needs at least " +
                    std::to_string(need) + " tokens");
  }
  throw Error(LILIMS_ERR_CONTEXT_FULL, "[generate] the context has room for " +
                                           std::to_string(left) +
                                           " generated tokens, too few for a value of the schema (" +
                                           std::to_string(need) + " needed)");
}

void Generation::begin(const std::vector<int32_t>& seq) {
  seq_ = &seq;
  r_.prompt_seconds = seconds_since(t0_);
  decoder_ = std::make_unique<tok::StreamDecoder>(tk_);
  t_first_ = std::chrono::steady_clock::now();
  accept_json_ = [this](int32_t id) { return json_accepts(model_, json_, left_, id); };
  // The mask holds the tokens the grammar allows; this adds the room check,
  // asked only of the tokens the sampler considers.
  accept_schema_ = [this](int32_t id) {
    return tk_.is_eog(id) ? schema_->may_end() : schema_->accepts_within(id, left_ - 1);
  };
  if (schema_) allowed_.resize((size_t)n_vocab_);
  banned_note_ = opt_.sampling.logit_bias.empty() ? "" : " that the logit bias does not ban";
  if (active_ && constrained_) r_.value_offset = 0;
}

bool Generation::banned(int32_t id) const {
  for (const auto& [t, b] : opt_.sampling.logit_bias) {
    if (t == id && b == -INFINITY) return true;
  }
  return false;
}

int32_t Generation::sample(const float* cur) {
  const int32_t i = (int32_t)r_.tokens.size();
  const std::vector<int32_t>* history = seq_;
  if (!pending_.empty() && opt_.sampling.repeat_penalty != 1.0f) {
    recent_.assign(seq_->begin(), seq_->begin() + (ptrdiff_t)n_seq());
    history = &recent_;
  }
  int32_t next;
  if (opt_.json && active_) {
    // The sampler filters only the tokens this accepts, so top-k, top-p and
    // min-p cannot remove every way to close.
    left_ = value_room(i, n_seq());
    next = sampler_.sample(cur, n_vocab_, *history, nullptr, &accept_json_);
    if (next < 0) {
      throw Error(banned_note_.empty() ? LILIMS_ERR_INTERNAL : LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] no token continues the JSON output" + banned_note_);
    }
  } else if (schema_ && active_) {
    left_ = value_room(i, n_seq());
    const auto tm = std::chrono::steady_clock::now();
    schema_->fill_mask(allowed_.data());
    if (schema_->may_end() && tk_.eos() >= 0) allowed_[(size_t)tk_.eos()] = 1;
    r_.mask_seconds += seconds_since(tm);
    next = sampler_.sample(cur, n_vocab_, *history, allowed_.data(), &accept_schema_);
    if (next < 0) {
      throw Error(banned_note_.empty() ? LILIMS_ERR_INTERNAL : LILIMS_ERR_INVALID_ARGUMENT,
                  "[generate] no token continues the schema's value" + banned_note_);
    }
  } else {
    next = sampler_.sample(cur, n_vocab_, *history);
    if (!active_ && !trigger_ok(next)) {
      free_mask_.assign((size_t)n_vocab_, 1);
      do {
        free_mask_[(size_t)next] = 0;
        next = sampler_.sample(cur, n_vocab_, *history, free_mask_.data());
      } while (next >= 0 && !trigger_ok(next));
      if (next < 0) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                    "[generate] every token allowed here ends the constraint trigger with bytes "
                    "no value can start with");
      }
    }
  }
  if (i == 0) {
    t_first_ = std::chrono::steady_clock::now();
    r_.first_token_seconds = seconds_since(t0_);
  }
  return next;
}

bool Generation::emit(int32_t next) {
  const bool first = r_.tokens.empty();
  r_.tokens.push_back(next);
  sampler_.accept(next);
  std::string piece = decoder_->push(next);
  // SentencePiece marks word starts with a space; the first word after BOS
  // has none to show (llama2.c and llama.cpp strip it too).
  const size_t n = n_seq();
  if (first && n > 0 && (*seq_)[n - 1] == tk_.bos() && !piece.empty() && piece[0] == ' ' &&
      tk_.vocab_type() == tok::VocabType::kSpm) {
    piece.erase(0, 1);
  }
  if (!stops_.empty()) piece = stops_.push(piece);
  r_.text += piece;
  return opt_.on_token && opt_.on_token(next, piece);
}

StopReason Generation::budget_stop() const {
  const int64_t cap_left =
      opt_.max_tokens > 0 ? opt_.max_tokens - (int64_t)r_.tokens.size() : INT64_MAX;
  const int64_t ctx_left = (int64_t)n_ctx_ - (int64_t)n_seq();
  return cap_left <= ctx_left ? StopReason::max_tokens : StopReason::context_full;
}

Took Generation::value_done() {
  r_.stop = StopReason::end_of_generation;
  const size_t before = r_.text.size();
  for (int32_t c : close_tokens_) emit(c);
  close_text_ = r_.text.size() - before;
  return Took::ended;
}

bool Generation::value_starts(const std::string& bytes, bool commit, int64_t left) {
  if (opt_.json) {
    if (!commit) {
      JsonPrefix probe = json_;
      return probe.feed(bytes);
    }
    return json_.feed(bytes) && model_.json_closers().tokens_to_close(json_) <= left;
  }
  return commit ? schema_->advance_bytes(bytes, left) : schema_->accepts_bytes(bytes);
}

bool Generation::trigger_ok(int32_t id) {
  std::string rest;
  return !trigger_.ends_in(trigger_bytes(tk_, model_.pieces(), id), &rest) ||
         value_starts(rest, false, 0);
}

Took Generation::accept(int32_t next) {
  if (tk_.is_eog(next) || (next == tk_.bos() && tk_.bos() != -1)) {  // BOS: a new document
    r_.stop = StopReason::end_of_generation;
    // A value that may end (a top-level number) ended here.
    if (active_ && schema_) value_done();
    return Took::ended;
  }
  return take(next);
}

Took Generation::take(int32_t next) {
  const bool stop = emit(next);
  if (stops_.matched()) {  // like an end of generation: the last token is not evaluated
    r_.stop = StopReason::stop_string;
    return Took::ended;
  }
  const std::string& piece = model_.pieces()[(size_t)next];
  if (!active_) {
    std::string rest;
    if (trigger_.feed(trigger_bytes(tk_, model_.pieces(), next), &rest)) {
      r_.constraint_triggered = true;
      // What follows the trigger in its token starts the value; sample made
      // sure it can (trigger_ok).
      if (!value_starts(rest, true, value_room((int32_t)r_.tokens.size(), n_seq() + 1))) {
        r_.stop = budget_stop();
        return Took::ended;
      }
      active_ = true;
      value_bytes_ = (int64_t)rest.size();
      if (opt_.json ? json_.complete() : schema_->complete()) return value_done();
    }
  } else if (opt_.json) {
    value_bytes_ += (int64_t)piece.size();
    json_.feed(piece);
    if (json_.complete()) return value_done();
  } else if (schema_) {
    value_bytes_ += (int64_t)piece.size();
    schema_->advance(next);
    if (schema_->complete()) return value_done();
  }
  return stop ? Took::callback : Took::go;
}

std::vector<int32_t> Generation::forced(size_t n_block) {
  if (!(schema_ && active_ && opt_.jump_forward)) return {};
  std::vector<int32_t> f = forced_tokens(*schema_, tk_, model_.pieces(), kMaxForcedBytes);
  // Within the cap, and within the context: a value never shifts it.
  int64_t most = (int64_t)n_ctx_ - (int64_t)(n_seq() + n_block);
  if (opt_.max_tokens > 0) most = std::min<int64_t>(most, opt_.max_tokens - (int64_t)r_.tokens.size());
  if ((int64_t)f.size() > most) f.resize((size_t)std::max<int64_t>(0, most));
  return f;
}

bool Generation::may_force(int32_t f, size_t n_block) {
  // What sampling would check of the token: allowed, and room to close after it.
  left_ = value_room((int32_t)r_.tokens.size(), n_seq() + n_block);
  return !banned(f) && schema_->accepts_within(f, left_ - 1);
}

std::vector<int32_t> Generation::drafts(const std::vector<int32_t>& block) const {
  if (opt_.n_draft <= 0) return {};
  int64_t k = std::min<int64_t>(opt_.n_draft,
                                (int64_t)n_ctx_ - (int64_t)(seq_->size() + block.size()));
  if (opt_.max_tokens > 0) k = std::min<int64_t>(k, opt_.max_tokens - (int64_t)r_.tokens.size());
  if (k <= 0) return {};
  return draft_tokens(*seq_, seq_->size(), block, (int32_t)k);
}

GenerateResult& Generation::finish() {
  std::string rest;
  if (decoder_ && !stops_.matched()) {
    rest = decoder_->flush();
    if (!stops_.empty()) {
      rest = stops_.push(rest) + stops_.flush();
      if (stops_.matched()) r_.stop = StopReason::stop_string;
    }
  }
  if (!rest.empty()) {
    r_.text += rest;
    if (opt_.on_token) opt_.on_token(-1, rest);
  }
  if (r_.constraint_triggered && active_) {
    // The value's bytes are the pieces fed to the constraint, and end the
    // text before the closing tokens' (a value is whole UTF-8 once complete).
    r_.value_offset = std::max<int64_t>(0, (int64_t)(r_.text.size() - close_text_) - value_bytes_);
  }
  r_.generate_seconds = seconds_since(t_first_);
  r_.peak_resident_bytes = peak_resident_bytes();
  return r_;
}

}  // namespace lilims::runtime
