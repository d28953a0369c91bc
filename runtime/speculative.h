// Tokens generation takes without a decode step of their own: prompt-lookup
// drafts (evaluated in one block, then kept as far as the sampler picks the
// same tokens) and the tokens a schema forces (jump-forward).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/constrain/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace lilims::runtime {

// The longest n-gram tried first; one-token matches draft too often to pay
// for the verification block when nothing copies.
constexpr int kDraftMaxNgram = 3;
constexpr int kDraftMinNgram = 2;
// GenerateOptions::n_draft's largest value: a longer block mostly computes
// rows a mismatch throws away.
constexpr int32_t kMaxDraft = 64;
// Forced bytes looked at once (keys and punctuation are far shorter).
constexpr size_t kMaxForcedBytes = 256;

// Prompt-lookup drafts: the (up to k) tokens that followed the most recent
// earlier occurrence of the sequence's last n tokens, the longest n from
// kDraftMaxNgram down to kDraftMinNgram that matches.  The sequence is
// seq[0, n_seq) followed by tail.  Negative ids (embedding rows, see
// Session::kEmbeddingRow) match nothing and are never drafted: drafts stop
// before one.  Empty when nothing matches.
std::vector<int32_t> draft_tokens(const std::vector<int32_t>& seq, size_t n_seq,
                                  const std::vector<int32_t>& tail, int32_t k);

// Jump-forward: the tokens that spell the start of sc.forced_bytes() as the
// tokenizer encodes those bytes alone.  The last token is left to the model
// when a longer token begins with it (the bytes after the forced ones could
// merge with it), and the run stops at a token whose piece does not continue
// the forced bytes exactly (a tokenizer's space prefix).  sc is unchanged.
std::vector<int32_t> forced_tokens(SchemaConstraint& sc, const tok::Tokenizer& tk,
                                   const std::vector<std::string>& pieces, size_t max_bytes);

}  // namespace lilims::runtime
