// A session's state as bytes: the tokens it holds, their K/V rows and the
// last logits, so an app can put a conversation (or a long system prompt
// evaluated once) aside and pick it up later without evaluating it again.
// Session::save_state / load_state (runtime/engine.h) read and write it.
//
// Layout, every integer little-endian (the rows and logits are the cache's
// and float's own bytes, little-endian on every target lilims builds for):
//
//   header (kStateHeaderBytes)
//      0  char[8]  magic "LILIMSKV"
//      8  u32      format version (kStateFormatVersion)
//     12  u32      header bytes (80)
//     16  u32 x3   lilims version that wrote it (major, minor, patch)
//     28  u32      KV cache type (GGML type id: 0 F32, 1 F16, 8 Q8_0)
//     32  u64      model fingerprint (model_fingerprint)
//     40  u64      XXH3-64 of the RoPE frequency factors in use, 0 for none
//     48  u32      n_layer
//     52  u32      kv_dim (floats of one position's K in one layer)
//     56  u32      row bytes (kv_dim in the cache type)
//     60  u32      n_vocab
//     64  u32      n_tokens
//     68  u32      has_logits (0 or 1)
//     72  u64      total bytes of the state, checksum included
//   tokens          n_tokens x i32 (-1 at a position that holds an embedding
//                   row, e.g. an image's: its K/V rows are stored as a token's)
//   rows            per layer: K of positions [0, n_tokens), then V of them
//   logits          n_vocab x f32 when has_logits
//   checksum        u64 XXH3-64 of every byte before it
//
// Only the rows of the tokens are stored, never the whole cache, and n_ctx
// is not part of the state: it loads into any session of the same model and
// KV type whose context holds its tokens.  phi3's LongRoPE rotates keys with
// factors that depend on the context length, hence the RoPE hash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lilims::runtime {

class Model;

constexpr char kStateMagic[8] = {'L', 'I', 'L', 'I', 'M', 'S', 'K', 'V'};
constexpr uint32_t kStateFormatVersion = 1;
constexpr uint64_t kStateHeaderBytes = 80;

// Where each part of a state starts, and its total size.  Sizes saturate at
// UINT64_MAX instead of wrapping (a hostile header cannot make them small).
struct StateLayout {
  uint64_t tokens = 0, rows = 0, logits = 0, checksum = 0, total = 0;
};
StateLayout state_layout(uint64_t n_tokens, uint64_t n_layer, uint64_t row_bytes,
                         uint64_t n_vocab, bool has_logits);

// XXH3-64 over what makes two models' K/V rows interchangeable: the
// architecture and hyperparameters as loaded, the vocabulary (each token's
// text and type), every tensor's name, type and shape, and samples of every
// tensor's bytes (its start, two inner points and its end), so that two
// fine-tunes of one base model, identical in everything but their weights,
// differ.  Reads 1 KiB of each tensor (about a millisecond for SmolLM2-135M).
uint64_t model_fingerprint(const Model& model);

}  // namespace lilims::runtime
