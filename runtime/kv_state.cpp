// Session state save / restore (format: runtime/kv_state.h).  A state from
// a file or an app's buffer is hostile until proven otherwise: every field
// is checked, and the checksum verified, before the session changes.
#include "runtime/kv_state.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file.h"
#include "base/xxh3.h"
#include "models/builders.h"
#include "quant/quant.h"
#include "runtime/engine.h"

// Rows, tokens and logits are written in host order.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the session state format is little-endian; a big-endian target needs byte swaps here"
#endif

namespace lilims::runtime {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t mul_sat(uint64_t a, uint64_t b) { return a != 0 && b > kMax / a ? kMax : a * b; }
uint64_t add_sat(uint64_t a, uint64_t b) { return b > kMax - a ? kMax : a + b; }

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Offsets of the header's fields (kv_state.h).
constexpr size_t kOffVersion = 8, kOffHeaderBytes = 12, kOffLilims = 16, kOffKvType = 28,
                 kOffModel = 32, kOffRope = 40, kOffLayers = 48, kOffKvDim = 52,
                 kOffRowBytes = 56, kOffVocab = 60, kOffTokens = 64, kOffLogits = 68,
                 kOffTotal = 72;
static_assert(kOffTotal + 8 == kStateHeaderBytes, "the header's fields fill it");

// XXH3-64 over many small fields: they gather in a block first, as one
// update per token of a 49k vocabulary would cost more than the hashing.
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    if (used_ + n > sizeof block_) flush();
    if (n > sizeof block_) {
      st_.update(p, n);
      return;
    }
    std::memcpy(block_ + used_, p, n);
    used_ += n;
  }
  void u64(uint64_t v) {
    uint8_t b[8];
    put_u64(b, v);
    bytes(b, 8);
  }
  void f32(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u64(u);
  }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  uint64_t digest() {
    flush();
    return st_.digest_64();
  }

 private:
  void flush() {
    st_.update(block_, used_);
    used_ = 0;
  }

  Xxh3Stream st_;
  uint8_t block_[16384];
  size_t used_ = 0;
};

// The RoPE factors a session of n_ctx rotates keys with, hashed; 0 for none.
uint64_t rope_hash(const Model& model, int32_t n_ctx) {
  const float* f = models::rope_factors(model.weights(), n_ctx);
  if (!f) return 0;
  return xxh3_64(f, (size_t)(model.hparams().n_rot / 2) * sizeof(float));
}

// What a session's state must agree on, from the session itself.
struct SessionShape {
  uint64_t fingerprint, rope;
  uint32_t n_layer, kv_dim, row_bytes, n_vocab;
  quant::Type kv_type;
};

SessionShape shape_of(const Model& model, const graph::Executor& exec) {
  const models::HParams& hp = model.hparams();
  const graph::KvCache& kv = exec.kv_cache();
  return SessionShape{model.fingerprint(),
                      rope_hash(model, exec.n_ctx()),
                      (uint32_t)hp.n_layer,
                      (uint32_t)hp.kv_dim(),
                      (uint32_t)kv.row_bytes(),
                      (uint32_t)hp.n_vocab,
                      kv.type()};
}

StateLayout layout_of(const SessionShape& s, size_t n_tokens, bool has_logits) {
  return state_layout(n_tokens, s.n_layer, s.row_bytes, s.n_vocab, has_logits);
}

// Sends the state through write(p, n) in order, the checksum last.
template <typename Write>
void emit_state(const SessionShape& s, graph::Executor& exec, const std::vector<int32_t>& tokens,
                const float* logits, Write&& write) {
  const StateLayout lay = layout_of(s, tokens.size(), logits != nullptr);
  uint8_t h[kStateHeaderBytes] = {};
  std::memcpy(h, kStateMagic, sizeof kStateMagic);
  put_u32(h + kOffVersion, kStateFormatVersion);
  put_u32(h + kOffHeaderBytes, (uint32_t)kStateHeaderBytes);
  put_u32(h + kOffLilims, LILIMS_VERSION_MAJOR);
  put_u32(h + kOffLilims + 4, LILIMS_VERSION_MINOR);
  put_u32(h + kOffLilims + 8, LILIMS_VERSION_PATCH);
  put_u32(h + kOffKvType, (uint32_t)s.kv_type);
  put_u64(h + kOffModel, s.fingerprint);
  put_u64(h + kOffRope, s.rope);
  put_u32(h + kOffLayers, s.n_layer);
  put_u32(h + kOffKvDim, s.kv_dim);
  put_u32(h + kOffRowBytes, s.row_bytes);
  put_u32(h + kOffVocab, s.n_vocab);
  put_u32(h + kOffTokens, (uint32_t)tokens.size());
  put_u32(h + kOffLogits, logits ? 1 : 0);
  put_u64(h + kOffTotal, lay.total);

  Hasher sum;
  const auto put = [&](const void* p, size_t n) {
    if (n == 0) return;
    sum.bytes(p, n);
    write(p, n);
  };
  put(h, sizeof h);
  put(tokens.data(), tokens.size() * sizeof(int32_t));
  exec.sync();  // async commits may still be writing the last rows
  const graph::KvCache& kv = exec.kv_cache();
  // Whole rows (every kv head of a position together), as write_rows takes
  // them back; a few positions at a time.
  constexpr int32_t kRowsAtOnce = 64;
  std::vector<uint8_t> buf((size_t)kRowsAtOnce * s.row_bytes);
  const int32_t n_rows = (int32_t)tokens.size();
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    for (int kv_half = 0; kv_half < 2; ++kv_half) {
      for (int32_t p0 = 0; p0 < n_rows; p0 += kRowsAtOnce) {
        const int32_t n = std::min(kRowsAtOnce, n_rows - p0);
        kv.read_rows((int)l, kv_half, p0, n, buf.data());
        put(buf.data(), (size_t)n * s.row_bytes);
      }
    }
  }
  if (logits) put(logits, (size_t)s.n_vocab * sizeof(float));
  uint8_t tail[8];
  put_u64(tail, sum.digest());
  write(tail, sizeof tail);
}

[[noreturn]] void refuse(lilims_status st, const std::string& msg) {
  throw Error(st, "[state] " + msg);
}

std::string version_of(const uint8_t* h) {
  return std::to_string(get_u32(h + kOffLilims)) + "." + std::to_string(get_u32(h + kOffLilims + 4)) +
         "." + std::to_string(get_u32(h + kOffLilims + 8));
}

// A state checked against a session: where its parts are in the bytes.
struct StateView {
  uint32_t n_tokens = 0;
  const uint8_t* tokens = nullptr;
  const uint8_t* rows = nullptr;
  const uint8_t* logits = nullptr;  // null when the state has none
};

StateView check_state(const SessionShape& s, int32_t n_ctx, const uint8_t* d, size_t size) {
  const auto truncated = [&](uint64_t need) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the state is truncated: " + std::to_string(size) +
                                      " bytes where " + std::to_string(need) + " are needed");
  };
  if (size < sizeof kStateMagic) truncated(kStateHeaderBytes);
  if (std::memcmp(d, kStateMagic, sizeof kStateMagic) != 0) {
    refuse(LILIMS_ERR_BAD_FORMAT, "not a lilims session state (the magic is not LILIMSKV)");
  }
  if (size < kOffHeaderBytes) truncated(kStateHeaderBytes);
  const uint32_t version = get_u32(d + kOffVersion);
  if (version != kStateFormatVersion) {
    const std::string by = size >= kOffKvType ? " (written by lilims " + version_of(d) + ")" : "";
    refuse(LILIMS_ERR_UNSUPPORTED, "the state has format version " + std::to_string(version) + by +
                                       "; this build of lilims reads version " +
                                       std::to_string(kStateFormatVersion));
  }
  if (size < kOffLilims) truncated(kStateHeaderBytes);
  if (get_u32(d + kOffHeaderBytes) != kStateHeaderBytes) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the header size " + std::to_string(get_u32(d + kOffHeaderBytes)) +
                                      " is not " + std::to_string(kStateHeaderBytes) +
                                      " as format version 1 has it");
  }
  if (size < kStateHeaderBytes) truncated(kStateHeaderBytes);
  const uint64_t total = get_u64(d + kOffTotal);
  if (total < kStateHeaderBytes + 8) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the header gives a total size of " + std::to_string(total) +
                                      " bytes, less than the header and checksum");
  }
  if (size < total) truncated(total);
  if (size > total) {
    refuse(LILIMS_ERR_BAD_FORMAT, std::to_string(size - total) +
                                      " bytes follow the end of the state (" +
                                      std::to_string(total) + " bytes)");
  }
  const uint64_t want = get_u64(d + total - 8);
  const uint64_t got = xxh3_64(d, (size_t)(total - 8));
  if (want != got) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the state is corrupt: its checksum does not match its bytes");
  }

  // Intact: now whether it belongs to this session.
  const uint32_t n_layer = get_u32(d + kOffLayers), kv_dim = get_u32(d + kOffKvDim),
                 row_bytes = get_u32(d + kOffRowBytes), n_vocab = get_u32(d + kOffVocab),
                 n_tokens = get_u32(d + kOffTokens), has_logits = get_u32(d + kOffLogits),
                 kv_type = get_u32(d + kOffKvType);
  if (get_u64(d + kOffModel) != s.fingerprint || n_layer != s.n_layer || kv_dim != s.kv_dim ||
      n_vocab != s.n_vocab) {
    refuse(LILIMS_ERR_INVALID_ARGUMENT,
           "the state was saved from another model (" + std::to_string(n_layer) + " layers, " +
               "kv_dim " + std::to_string(kv_dim) + ", " + std::to_string(n_vocab) +
               " tokens in the vocabulary; this session's model has " + std::to_string(s.n_layer) +
               ", " + std::to_string(s.kv_dim) + ", " + std::to_string(s.n_vocab) +
               ", and the fingerprints differ)");
  }
  if (kv_type != (uint32_t)s.kv_type) {
    refuse(LILIMS_ERR_INVALID_ARGUMENT,
           std::string("the state holds a ") + quant::ggml_type_name(kv_type) +
               " KV cache and this session's is " + quant::ggml_type_name((uint32_t)s.kv_type) +
               "; rows are not converted (the values would differ from what the session computes): "
               "load it into a session with a " + quant::ggml_type_name(kv_type) + " cache");
  }
  if (get_u64(d + kOffRope) != s.rope) {
    refuse(LILIMS_ERR_INVALID_ARGUMENT,
           "the state's keys were rotated with other RoPE factors than this session's: the model "
           "scales RoPE by context length, so create the session with an n_ctx on the same side "
           "of its original context as the session that saved it");
  }
  if (has_logits > 1 || row_bytes != s.row_bytes) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the header is inconsistent (has_logits " +
                                      std::to_string(has_logits) + ", row bytes " +
                                      std::to_string(row_bytes) + ")");
  }
  const StateLayout lay = state_layout(n_tokens, n_layer, row_bytes, n_vocab, has_logits != 0);
  if (lay.total != total) {
    refuse(LILIMS_ERR_BAD_FORMAT, "the header's sizes give " + std::to_string(lay.total) +
                                      " bytes, but it says " + std::to_string(total));
  }
  if (n_tokens > (uint32_t)n_ctx) {
    refuse(LILIMS_ERR_CONTEXT_FULL, "the state holds " + std::to_string(n_tokens) +
                                        " tokens, more than this session's context of " +
                                        std::to_string(n_ctx));
  }
  StateView v;
  v.n_tokens = n_tokens;
  v.tokens = d + lay.tokens;
  v.rows = d + lay.rows;
  v.logits = has_logits ? d + lay.logits : nullptr;
  for (uint32_t i = 0; i < n_tokens; ++i) {
    const uint32_t t = get_u32(v.tokens + 4 * (size_t)i);
    if (t >= n_vocab && t != (uint32_t)Session::kEmbeddingRow) {
      refuse(LILIMS_ERR_BAD_FORMAT, "token " + std::to_string(i) + " of the state has id " +
                                        std::to_string((int32_t)t) + ", outside the vocabulary");
    }
  }
  return v;
}

}  // namespace

StateLayout state_layout(uint64_t n_tokens, uint64_t n_layer, uint64_t row_bytes, uint64_t n_vocab,
                         bool has_logits) {
  StateLayout l;
  l.tokens = kStateHeaderBytes;
  l.rows = add_sat(l.tokens, mul_sat(n_tokens, 4));
  l.logits = add_sat(l.rows, mul_sat(mul_sat(2 * n_layer, n_tokens), row_bytes));
  l.checksum = add_sat(l.logits, has_logits ? mul_sat(n_vocab, 4) : 0);
  l.total = add_sat(l.checksum, 8);
  return l;
}

uint64_t model_fingerprint(const Model& model) {
  Hasher h;
  h.str("lilims model fingerprint 1");
  const models::HParams& hp = model.hparams();
  h.str(models::arch_name(hp.arch));
  for (int64_t v : {(int64_t)hp.n_vocab, (int64_t)hp.n_ctx_train, (int64_t)hp.n_embd,
                    (int64_t)hp.n_layer, (int64_t)hp.n_head, (int64_t)hp.n_head_kv,
                    (int64_t)hp.head_dim, (int64_t)hp.n_ff, (int64_t)hp.n_rot,
                    (int64_t)hp.rope_neox, (int64_t)hp.sliding_window, (int64_t)hp.rope_orig_ctx}) {
    h.u64((uint64_t)v);
  }
  for (float f : {hp.rope_freq_base, hp.norm_eps, hp.rope_attn_factor}) h.f32(f);
  const tok::Tokenizer& tk = model.tokenizer();
  h.u64((uint64_t)tk.vocab_type());
  h.u64((uint64_t)(int64_t)tk.bos());
  h.u64((uint64_t)(int64_t)tk.eos());
  h.u64((uint64_t)tk.n_vocab());
  for (int32_t id = 0; id < tk.n_vocab(); ++id) {
    h.str(tk.token_text(id));
    h.u64(tk.token_type(id));
  }
  const models::Model& w = model.weights();
  if (w.file) {
    constexpr uint64_t kSample = 256;  // bytes at each of 4 points of a tensor
    for (const gguf::TensorInfo& t : w.file->tensors()) {
      h.str(t.name);
      h.u64(t.type);
      h.u64(t.ne.size());
      for (uint64_t n : t.ne) h.u64(n);
      h.u64(t.n_bytes);
      if (!t.data || t.n_bytes == 0) continue;
      const uint64_t n = std::min(kSample, t.n_bytes);
      for (uint64_t i = 0; i < 4; ++i) h.bytes(t.data + (t.n_bytes - n) * i / 3, (size_t)n);
    }
  }
  return h.digest();
}

uint64_t Model::fingerprint() const {
  std::call_once(fingerprint_once_, [&] { fingerprint_ = model_fingerprint(*this); });
  return fingerprint_;
}

uint64_t Session::state_size() {
  Call call(*this);
  const models::HParams& hp = model_.hparams();
  return state_layout(tokens_.size(), (uint64_t)hp.n_layer, exec_->kv_cache().row_bytes(),
                      (uint64_t)hp.n_vocab, has_logits_)
      .total;
}

size_t Session::save_state(void* buf, size_t capacity) {
  Call call(*this);
  const models::HParams& hp = model_.hparams();
  const uint64_t need = state_layout(tokens_.size(), (uint64_t)hp.n_layer,
                                     exec_->kv_cache().row_bytes(), (uint64_t)hp.n_vocab,
                                     has_logits_)
                            .total;
  if (!buf || need > capacity) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[state] a buffer of " + std::to_string(capacity) +
                                                 " bytes is too small: the state needs " +
                                                 std::to_string(need));
  }
  const SessionShape s = shape_of(model_, *exec_);
  uint8_t* out = static_cast<uint8_t*>(buf);
  emit_state(s, *exec_, tokens_, has_logits_ ? logits_.data() : nullptr,
             [&](const void* p, size_t n) {
               std::memcpy(out, p, n);
               out += n;
             });
  return (size_t)need;
}

void Session::save_state_file(const std::string& path) {
  Call call(*this);
  if (path.empty()) throw Error(LILIMS_ERR_IO, "[state] empty path: a file name is needed");
  const SessionShape s = shape_of(model_, *exec_);
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    throw Error(LILIMS_ERR_IO, "[state] cannot create " + tmp + ": " + std::strerror(errno));
  }
  int err = 0;
  try {
    emit_state(s, *exec_, tokens_, has_logits_ ? logits_.data() : nullptr,
               [&](const void* p, size_t n) {
                 if (!err && std::fwrite(p, 1, n, f) != n) err = errno ? errno : EIO;
               });
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  // On disk before the rename, so a crash leaves the old file or the new one.
  if (!err && (std::fflush(f) != 0 || fsync(fileno(f)) != 0)) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (!err && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    std::remove(tmp.c_str());
    throw Error(LILIMS_ERR_IO, "[state] cannot write " + path + ": " + std::strerror(err));
  }
}

namespace {

// Checks a state against the session's model and cache, then makes it the
// session's content.
void apply_state(const Model& model, graph::Executor& exec, std::vector<int32_t>& tokens,
                 std::vector<float>& logits, bool& has_logits, const uint8_t* data, size_t size) {
  const SessionShape s = shape_of(model, exec);
  const StateView v = check_state(s, exec.n_ctx(), data, size);
  // Nothing below can fail: the session changes only now.
  const int32_t n = (int32_t)v.n_tokens;
  exec.release_from(n);
  graph::KvCache& kv = exec.kv_cache();
  const size_t layer_rows = (size_t)n * s.row_bytes;
  const uint8_t* rows = v.rows;
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    kv.write_rows((int)l, 0, 0, n, rows);
    kv.write_rows((int)l, 1, 0, n, rows + layer_rows);
    rows += 2 * layer_rows;
  }
  tokens.resize((size_t)n);  // within the capacity reserved for n_ctx
  if (n > 0) std::memcpy(tokens.data(), v.tokens, (size_t)n * sizeof(int32_t));
  has_logits = v.logits != nullptr;
  if (v.logits) std::memcpy(logits.data(), v.logits, logits.size() * sizeof(float));
}

std::vector<uint8_t> read_state_file(const std::string& path) {
  unsigned long long size = 0;
  const int fd = open_regular_file(path, "state", &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size > std::numeric_limits<size_t>::max()) {
    throw Error(LILIMS_ERR_IO, "[state] " + path + " is too large to read");
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize((size_t)size);
  } catch (const std::bad_alloc&) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY,
                "[state] cannot allocate " + std::to_string(size) + " bytes to read " + path);
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(LILIMS_ERR_IO, "[state] cannot read " + path + ": " + std::strerror(errno));
    if (r == 0) break;  // shorter than fstat said: checked as a truncated state
    done += (size_t)r;
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace

void Session::load_state(const void* data, size_t size) {
  Call call(*this);
  if (!data && size) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[state] the data is NULL");
  apply_state(model_, *exec_, tokens_, logits_, has_logits_, static_cast<const uint8_t*>(data),
              size);
}

void Session::load_state_file(const std::string& path) {
  Call call(*this);
  const std::vector<uint8_t> bytes = read_state_file(path);
  apply_state(model_, *exec_, tokens_, logits_, has_logits_, bytes.data(), bytes.size());
}

}  // namespace lilims::runtime
