// One sequence's generation as a pipeline of steps, apart from how its
// tokens are evaluated:
//
//   propose  the constraint's mask for the next token, the bytes a schema
//            forces after it (jump-forward), prompt-lookup drafts;
//   sample   the sampler over the logits, within the mask;
//   accept   the token joins the output: end of generation, stop strings,
//            the lazy trigger, the value's constraint, UTF-8-safe text;
//   evaluate the caller runs the accepted tokens (and drafts) through the
//            model: Session::generate for one sequence, a Batch for many.
//
// A Generation holds everything of the first three that lives across steps
// (sampler, constraint, stop strings, decoder, the result so far); it reads
// the sequence's tokens but never changes them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/constrain/json_constraint.h"
#include "runtime/constrain/lazy_constraint.h"
#include "runtime/stop_strings.h"
#include "tokenizer/unicode.h"

namespace lilims::runtime {

// What accept made of a token.
enum class Took {
  go,        // generation goes on
  callback,  // on_token asked to stop (the token is evaluated, then generation ends)
  ended,     // result().stop says why; the token is not evaluated
};

class Generation {
 public:
  // Checks every option that does not depend on the sequence (sampling,
  // logit bias, stop strings, drafts, json / schema / trigger) and compiles
  // the schema.  Throws lilims::Error as Session::generate documents.
  Generation(const Model& model, const GenerateOptions& opt, int32_t n_ctx,
             std::chrono::steady_clock::time_point t0);

  // Throws unless the value (json / json_schema, when it starts at once)
  // fits after a sequence of n_after_prompt tokens.
  void check_room(size_t n_after_prompt);

  // The prompt is in: `seq` is the sequence in the KV cache (drafts
  // included) from now on; it must outlive the generation.
  void begin(const std::vector<int32_t>& seq);

  // Whether the token cap leaves room for another token.
  bool wants_more() const {
    return opt_.max_tokens <= 0 || (int32_t)r_.tokens.size() < opt_.max_tokens;
  }
  // propose + sample: the next token from the logits after the sequence's
  // last accepted token.  Throws when the constraint leaves no token.
  int32_t sample(const float* logits);
  // The token joins the output (or ends generation: end of generation, a
  // stop string, a value that closed).
  Took accept(int32_t token);

  // propose, after a token was accepted with Took::go: the tokens a schema
  // forces next (jump_forward), within the cap and the context, for a
  // sequence that will hold n_block more tokens than it evaluated.
  std::vector<int32_t> forced(size_t n_block);
  // Whether forced token f may be taken as sampling would have allowed it.
  bool may_force(int32_t f, size_t n_block);
  // Takes a forced token (accept, counted as forced).
  Took accept_forced(int32_t f) {
    ++r_.n_forced;
    return take(f);
  }

  // Prompt-lookup drafts to evaluate after `block` (taken, not evaluated),
  // within the cap and the context; empty without n_draft.
  std::vector<int32_t> drafts(const std::vector<int32_t>& block) const;
  // Drafts evaluated beyond the sequence's accepted tokens.
  std::vector<int32_t>& pending() { return pending_; }
  size_t n_seq() const { return seq_->size() - pending_.size(); }

  // Whether the value's constraint is on (a full context then ends
  // generation instead of shifting it).
  bool value_active() const { return active_ && constrained_; }
  // Whether a full context shifts (ContextPolicy::shift) rather than ends generation.
  bool may_shift() const { return opt_.context_policy == ContextPolicy::shift; }
  void stop(StopReason why) { r_.stop = why; }

  // The end: held-back text released, the value's offset, the timings.
  GenerateResult& finish();
  GenerateResult& result() { return r_; }

 private:
  Took take(int32_t next);
  bool emit(int32_t next);
  Took value_done();
  bool value_starts(const std::string& bytes, bool commit, int64_t left);
  bool trigger_ok(int32_t id);
  bool banned(int32_t id) const;
  StopReason budget_stop() const;
  // Tokens this call may still make with `made` made and n_past in the
  // sequence; value_room less the closing text's.
  int64_t room(int32_t made, size_t n_past) const;
  int64_t value_room(int32_t made, size_t n_past) const { return room(made, n_past) - n_close_; }
  void check_json_room(int64_t left, bool cap_binds) const;
  void check_schema_room(int64_t left, bool cap_binds) const;

  const Model& model_;
  const tok::Tokenizer& tk_;
  const GenerateOptions& opt_;
  const int32_t n_ctx_;
  const int32_t n_vocab_;
  const std::chrono::steady_clock::time_point t0_;
  std::chrono::steady_clock::time_point t_first_;
  GenerateResult r_;
  Sampler sampler_;
  StopStrings stops_;
  bool constrained_ = false;
  std::vector<int32_t> close_tokens_;
  int64_t n_close_ = 0;
  TriggerMatch trigger_;
  bool active_ = false;  // the value's constraint is on (no trigger, or it was spelled)
  std::unique_ptr<SchemaConstraint> schema_;
  JsonPrefix json_;
  int64_t left_ = 0;  // tokens this call may still make, counting the one being sampled
  std::function<bool(int32_t)> accept_json_, accept_schema_;
  std::vector<uint8_t> allowed_;    // the schema's mask for this step
  std::vector<uint8_t> free_mask_;  // before the trigger: tokens trigger_ok refused this step
  std::string banned_note_;
  const std::vector<int32_t>* seq_ = nullptr;
  std::vector<int32_t> pending_;
  std::vector<int32_t> recent_;  // the sequence without pending (repetition penalty)
  std::unique_ptr<tok::StreamDecoder> decoder_;
  // Bytes of the value so far (value_offset), and the text the closing
  // tokens added after it.
  int64_t value_bytes_ = 0;
  size_t close_text_ = 0;
};

}  // namespace lilims::runtime
