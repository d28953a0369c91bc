#include "models/llama.h"

#include <chrono>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "base/fp16.h"

namespace lilims::models {
namespace {

[[noreturn]] void bad(lilims_status st, const std::string& msg) {
  throw Error(st, "[llama] " + msg);
}

int32_t positive_int(const gguf::File& f, const std::string& key, int64_t limit) {
  const int64_t v = f.get_int(key);
  if (v <= 0 || v > limit) {
    bad(LILIMS_ERR_BAD_FORMAT, key + " = " + std::to_string(v) + " is out of range (1.." +
                                   std::to_string(limit) + ")");
  }
  return (int32_t)v;
}

// A 1-D F32/F16 tensor of n elements, copied to floats (norm weights).
std::vector<float> load_vector(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo& t = f.require_tensor(name);
  if (t.n_elements != (uint64_t)n || t.ne.size() != 1) {
    bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " should be a vector of " + std::to_string(n) +
                                   " elements");
  }
  if (t.type != (uint32_t)quant::Type::F32 && t.type != (uint32_t)quant::Type::F16) {
    bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has type " + quant::ggml_type_name(t.type) +
                                    "; norm weights must be F32 or F16");
  }
  std::vector<float> out((size_t)n);
  quant::type_traits(t.type)->to_float(t.data, out.data(), n);
  return out;
}

Weight load_weight(const gguf::File& f, const std::string& name, int64_t rows, int64_t cols,
                   bool repack, uint64_t* n_params) {
  const gguf::TensorInfo& t = f.require_tensor(name);
  if (t.ne.size() != 2 || (int64_t)t.ne[0] != cols || (int64_t)t.ne[1] != rows) {
    std::string shape;
    for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.ne[i]);
    bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " has shape [" + shape + "], expected [" +
                                   std::to_string(cols) + " x " + std::to_string(rows) + "]");
  }
  Weight w;
  w.name = name;
  w.type = static_cast<quant::Type>(t.type);
  w.rows = rows;
  w.cols = cols;
  w.data = t.data;
  w.packed = kernels::pack_weight(w.type, w.data, rows, cols, repack);
  *n_params += t.n_elements;
  return w;
}

}  // namespace

void dequantize_row(const Weight& w, int64_t row, float* out) {
  const size_t rb = quant::row_bytes(w.type, w.cols);
  quant::type_traits((uint32_t)w.type)->to_float(
      static_cast<const uint8_t*>(w.data) + (size_t)row * rb, out, w.cols);
}

std::unique_ptr<LlamaModel> load_llama(std::unique_ptr<gguf::File> file, const LoadOptions& opt) {
  const gguf::File& f = *file;
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama") {
    bad(LILIMS_ERR_UNSUPPORTED, "architecture '" + arch + "' is not supported yet (lilims runs llama)");
  }
  auto m = std::make_unique<LlamaModel>();
  LlamaHParams& hp = m->hp;
  hp.n_layer = positive_int(f, "llama.block_count", 4096);
  hp.n_embd = positive_int(f, "llama.embedding_length", 1 << 16);
  hp.n_ff = positive_int(f, "llama.feed_forward_length", 1 << 18);
  hp.n_head = positive_int(f, "llama.attention.head_count", 4096);
  hp.n_head_kv = f.find("llama.attention.head_count_kv")
                     ? positive_int(f, "llama.attention.head_count_kv", 4096)
                     : hp.n_head;
  hp.n_ctx_train = f.find("llama.context_length") ? positive_int(f, "llama.context_length", 1 << 24)
                                                  : 2048;
  if (hp.n_embd % hp.n_head != 0) {
    bad(LILIMS_ERR_BAD_FORMAT, "embedding length " + std::to_string(hp.n_embd) +
                                   " is not a multiple of the head count " +
                                   std::to_string(hp.n_head));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    bad(LILIMS_ERR_BAD_FORMAT, "head count " + std::to_string(hp.n_head) +
                                   " is not a multiple of the KV head count " +
                                   std::to_string(hp.n_head_kv));
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  hp.n_rot = f.find("llama.rope.dimension_count")
                 ? positive_int(f, "llama.rope.dimension_count", hp.head_dim)
                 : hp.head_dim;
  if (hp.n_rot % 2 != 0) bad(LILIMS_ERR_BAD_FORMAT, "llama.rope.dimension_count must be even");
  hp.rope_freq_base = (float)f.get_float_or("llama.rope.freq_base", 10000.0);
  hp.norm_eps = (float)f.get_float_or("llama.attention.layer_norm_rms_epsilon", 1e-5);
  if (!(hp.rope_freq_base > 0.0f) || !(hp.norm_eps > 0.0f) || hp.norm_eps > 1.0f) {
    bad(LILIMS_ERR_BAD_FORMAT, "rope.freq_base and layer_norm_rms_epsilon must be positive");
  }
  const gguf::TensorInfo& embd = f.require_tensor("token_embd.weight");
  if (embd.ne.size() != 2) bad(LILIMS_ERR_BAD_FORMAT, "token_embd.weight must be 2-D");
  if (embd.ne[1] > (uint64_t)INT32_MAX) bad(LILIMS_ERR_BAD_FORMAT, "token_embd.weight has too many rows");
  hp.n_vocab = (int32_t)embd.ne[1];
  if (f.find("llama.vocab_size") && f.get_int("llama.vocab_size") != hp.n_vocab) {
    bad(LILIMS_ERR_BAD_FORMAT, "llama.vocab_size disagrees with token_embd.weight");
  }
  // One token per embedding row, as llama.cpp requires: a shorter vocabulary
  // would let sampling pick an id the tokenizer cannot decode.
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens")) {
    if (toks->type == gguf::ValueType::ARRAY && toks->size() != (size_t)hp.n_vocab) {
      bad(LILIMS_ERR_BAD_FORMAT, "tokenizer.ggml.tokens has " + std::to_string(toks->size()) +
                                     " tokens but token_embd.weight has " +
                                     std::to_string(hp.n_vocab) + " rows");
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  uint64_t n_params = 0;
  const int64_t d = hp.n_embd, q_dim = (int64_t)hp.n_head * hp.head_dim, kv = hp.kv_dim();
  // The embedding table is only ever read row by row: never repacked.
  m->tok_embd = load_weight(f, "token_embd.weight", hp.n_vocab, d, false, &n_params);
  m->layers.resize((size_t)hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayer& L = m->layers[(size_t)l];
    L.attn_norm = load_vector(f, p + "attn_norm.weight", d);
    L.wq = load_weight(f, p + "attn_q.weight", q_dim, d, opt.repack, &n_params);
    L.wk = load_weight(f, p + "attn_k.weight", kv, d, opt.repack, &n_params);
    L.wv = load_weight(f, p + "attn_v.weight", kv, d, opt.repack, &n_params);
    L.wo = load_weight(f, p + "attn_output.weight", d, q_dim, opt.repack, &n_params);
    L.ffn_norm = load_vector(f, p + "ffn_norm.weight", d);
    L.w_gate = load_weight(f, p + "ffn_gate.weight", hp.n_ff, d, opt.repack, &n_params);
    L.w_up = load_weight(f, p + "ffn_up.weight", hp.n_ff, d, opt.repack, &n_params);
    L.w_down = load_weight(f, p + "ffn_down.weight", d, hp.n_ff, opt.repack, &n_params);
    n_params += 2 * (uint64_t)d;
  }
  m->output_norm = load_vector(f, "output_norm.weight", d);
  n_params += (uint64_t)d;
  if (f.find_tensor("output.weight")) {
    m->output = load_weight(f, "output.weight", hp.n_vocab, d, opt.repack, &n_params);
  } else {
    uint64_t ignored = 0;
    m->output = load_weight(f, "token_embd.weight", hp.n_vocab, d, opt.repack, &ignored);
    m->tied_output = true;
  }
  m->n_params = n_params;
  m->repack_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto count = [&](const Weight& w) { m->repacked_bytes += w.packed.storage.size(); };
  count(m->output);
  for (const LlamaLayer& L : m->layers) {
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) count(*w);
  }
  m->file = std::move(file);
  return m;
}

}  // namespace lilims::models
