#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_info.h"
#include "models/model.h"
#include "quant/dequant_ref.h"
#include "quant/quantize.h"

namespace lilims::models {
namespace {

[[noreturn]] void bad(lilims_status st, const std::string& msg) { throw Error(st, "[model] " + msg); }

// Reads one architecture's tensors and keys, remembering which tensors it
// took: a tensor nobody takes (a bias lilims would ignore, say) is an error,
// not a silently different model.
class Reader {
 public:
  Reader(const gguf::File& f, std::string arch, const LoadOptions& opt)
      : f_(f), arch_(std::move(arch)), repack_(opt.repack), fuse_(opt.fuse_projections),
        threads_(load_threads(opt)),
        progress_(opt.progress) {
    for (const gguf::TensorInfo& t : f_.tensors()) total_bytes_ += t.n_bytes;
  }

  std::string key(const std::string& k) const { return arch_ + "." + k; }
  bool has(const std::string& k) const { return f_.find(key(k)) != nullptr; }

  int32_t positive_int(const std::string& k, int64_t limit) const {
    const int64_t v = f_.get_int(key(k));
    if (v <= 0 || v > limit) {
      bad(LILIMS_ERR_BAD_FORMAT, key(k) + " = " + std::to_string(v) + " is out of range (1.." +
                                     std::to_string(limit) + ")");
    }
    return (int32_t)v;
  }
  int32_t positive_int_or(const std::string& k, int64_t limit, int32_t fallback) const {
    return has(k) ? positive_int(k, limit) : fallback;
  }
  float positive_float_or(const std::string& k, double fallback, double limit) const {
    const double v = f_.get_float_or(key(k), fallback);
    if (!(v > 0.0) || v > limit) {
      bad(LILIMS_ERR_BAD_FORMAT, key(k) + " = " + std::to_string(v) + " is out of range");
    }
    return (float)v;
  }

  bool has_tensor(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  // A 1-D F32/F16 tensor of n elements, copied to floats (norms, biases, factors).
  std::vector<float> vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = f_.require_tensor(name);
    if (t.n_elements != (uint64_t)n || t.ne.size() != 1) {
      bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " should be a vector of " + std::to_string(n) +
                                     " elements");
    }
    quant::ReadableType rt;
    if (!quant::readable_type(t.type, &rt) || rt.block_size != 1) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has type " + quant::ggml_type_name(t.type) +
                                      "; norm weights, biases and rope factors must be F32, F16 or BF16");
    }
    std::vector<float> out((size_t)n);
    rt.to_float(t.data, out.data(), n);
    take(t);
    return out;
  }

  // A 2-D weight in a type the kernels read (re-quantized if need be), not
  // yet packed: pack() or stack() it.
  Weight source(const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& t = f_.require_tensor(name);
    if (t.ne.size() != 2 || (int64_t)t.ne[0] != cols || (int64_t)t.ne[1] != rows) {
      std::string shape;
      for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.ne[i]);
      bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " has shape [" + shape + "], expected [" +
                                     std::to_string(cols) + " x " + std::to_string(rows) + "]");
    }
    Weight w = weight_of(t, name, rows, cols);
    if (!quant::type_traits(t.type)) requantize(t, w);
    return w;
  }

  // Packs a source() for the kernels.  A repacked weight is read from its
  // copy: its file pages need not stay resident beside it, and go slice by
  // slice, so the load never holds both.
  void pack(Weight& w, bool repack = true) {
    w.packed = kernels::pack_weight(w.type, w.data, w.rows, w.cols, repack && repack_, drop_for(w),
                                    threads_, &arena_);
    if (w.requantized && !w.packed.storage.empty()) {
      w.requantized.reset();  // the kernels read the repacked copy
      w.data = nullptr;
    }
    take(f_.require_tensor(w.name));
  }

  Weight weight(const std::string& name, int64_t rows, int64_t cols, bool repack = true) {
    Weight w = source(name, rows, cols);
    pack(w, repack);
    return w;
  }

  // Weights that read the same input, stacked into `into` (rows of parts[0],
  // then parts[1], ...; biases likewise) when fusion is on and the kernels
  // can stack them (one type, whole row groups: kernels::can_stack); the
  // parts are then cleared.  Otherwise each is packed on its own and `into`
  // stays absent.  Returns whether it stacked.
  bool stack(const std::vector<Weight*>& parts, Weight& into) {
    std::vector<kernels::WeightPart> wp;
    bool same = fuse_;
    for (const Weight* w : parts) {
      wp.push_back({w->data, w->rows, drop_for(*w)});
      same = same && w->type == parts[0]->type && w->cols == parts[0]->cols &&
             w->bias.empty() == parts[0]->bias.empty();
    }
    if (!same || !kernels::can_stack(parts[0]->type, wp, repack_)) {
      for (Weight* w : parts) pack(*w);
      return false;
    }
    Weight s;
    s.type = parts[0]->type;
    s.cols = parts[0]->cols;
    s.file_type = parts[0]->file_type;
    for (const Weight* w : parts) {
      s.name += (s.name.empty() ? "" : "+") + w->name;
      s.parts.push_back(w->name);
      s.part_rows.push_back(w->rows);
      s.rows += w->rows;
      s.bias.insert(s.bias.end(), w->bias.begin(), w->bias.end());
      if (w->file_type != s.file_type) s.file_type = (uint32_t)s.type;
    }
    s.packed = kernels::pack_stacked(s.type, wp, s.cols, threads_, &arena_);
    for (Weight* w : parts) {
      take(f_.require_tensor(w->name));
      *w = Weight{};  // releases a re-quantized copy: the stack holds its rows
    }
    into = std::move(s);
    return true;
  }

  // Tensors re-quantized so far, by source type, for the load's notice.
  const std::map<std::string, int>& requantized() const { return requantized_; }
  // A weight "P.weight" with its bias "P.bias" (rows), which must exist.
  Weight biased_source(const std::string& prefix, int64_t rows, int64_t cols) {
    Weight w = source(prefix + ".weight", rows, cols);
    w.bias = vector(prefix + ".bias", rows);
    return w;
  }
  Weight biased(const std::string& prefix, int64_t rows, int64_t cols) {
    Weight w = biased_source(prefix, rows, cols);
    pack(w);
    return w;
  }
  Norm rms_norm(const std::string& prefix, int64_t n) { return Norm{vector(prefix + ".weight", n), {}}; }
  Norm layer_norm(const std::string& prefix, int64_t n) {
    return Norm{vector(prefix + ".weight", n), vector(prefix + ".bias", n)};
  }

  void check_all_taken() const {
    for (const gguf::TensorInfo& t : f_.tensors()) {
      if (!taken_.count(t.name)) {
        bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " is not part of a " + arch_ +
                                        " model as lilims runs it; refusing to ignore it");
      }
    }
  }
  uint64_t n_params() const { return n_params_; }

 private:
  // Counts a tensor once (a tied output reads the embedding again) and reports progress.
  void take(const gguf::TensorInfo& t) {
    if (!taken_.insert(t.name).second) return;
    n_params_ += t.n_elements;
    done_bytes_ += t.n_bytes;
    if (progress_) {
      progress_(total_bytes_ ? (float)((double)done_bytes_ / (double)total_bytes_) : 1.0f);
    }
  }

  // A weight in a type lilims only dequantizes: each row converted directly
  // when its traits can, else to floats and then to the kernel type its
  // traits name (quant/dequant_ref.cpp says why that one).
  // GGML's plain rounding: the error it adds is bounded (half a Q8_0 step)
  // and the load stays fast; `lilims quantize` offers the search.
  void requantize(const gguf::TensorInfo& t, Weight& w) {
    const quant::DequantTraits* src = quant::dequant_traits(t.type);
    if (!src) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " has type " + quant::ggml_type_name(t.type) +
                                      ", which lilims cannot read");
    }
    const quant::Type to = src->load_as;
    const size_t src_row = (size_t)w.cols / (size_t)src->block_size * src->block_bytes;
    const size_t dst_row = quant::row_bytes(to, w.cols);
    if (w.cols % quant::traits(to).block_size != 0) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " (" + src->name + ") has rows of " +
                                      std::to_string(w.cols) + " elements, not whole " +
                                      quant::traits(to).name + " blocks");
    }
    auto bytes = std::make_shared<std::vector<uint8_t>>(dst_row * (size_t)w.rows);
    std::vector<float> row((size_t)w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      if (src->transcode) {
        src->transcode(t.data + (size_t)r * src_row, bytes->data() + (size_t)r * dst_row, w.cols);
        continue;
      }
      src->to_float(t.data + (size_t)r * src_row, row.data(), w.cols);
      quant::quantize_row(to, row.data(), bytes->data() + (size_t)r * dst_row, w.cols,
                          quant::QuantMethod::plain);
    }
    f_.drop_pages(t.data, t.n_bytes);
    w.type = to;
    w.data = bytes->data();
    w.requantized = std::move(bytes);
    // A tied output reads the embedding again: one tensor, counted once.
    if (!taken_.count(t.name)) ++requantized_[std::string(src->name) + " -> " + quant::traits(to).name];
  }

  // A file-backed weight's pages go once copied; a re-quantized one's bytes
  // are on the heap, not the file's.
  kernels::SourceDone drop_for(const Weight& w) const {
    return w.requantized ? kernels::SourceDone{} : drop_copied_pages(f_);
  }

  const gguf::File& f_;
  std::string arch_;
  bool repack_;
  bool fuse_;
  int threads_;
  kernels::WeightArena arena_;  // the repacked weights, in load order
  const std::function<void(float)>& progress_;
  std::set<std::string> taken_;
  std::map<std::string, int> requantized_;
  uint64_t n_params_ = 0;
  uint64_t total_bytes_ = 0, done_bytes_ = 0;
};

void read_common(Reader& r, const gguf::File& f, HParams& hp) {
  hp.n_layer = r.positive_int("block_count", 4096);
  hp.n_embd = r.positive_int("embedding_length", 1 << 16);
  hp.n_ff = r.positive_int("feed_forward_length", 1 << 18);
  hp.n_head = r.positive_int("attention.head_count", 4096);
  hp.n_head_kv = r.positive_int_or("attention.head_count_kv", 4096, hp.n_head);
  hp.n_ctx_train = r.positive_int_or("context_length", 1 << 24, 2048);
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
  hp.n_rot = r.positive_int_or("rope.dimension_count", hp.head_dim, hp.head_dim);
  if (hp.n_rot % 2 != 0) bad(LILIMS_ERR_BAD_FORMAT, r.key("rope.dimension_count") + " must be even");
  hp.rope_freq_base = r.positive_float_or("rope.freq_base", 10000.0, 1e12);
  // Scalings lilims does not implement would give a model that runs and
  // says the wrong things: refuse them.
  const std::string scaling = f.get_string_or(r.key("rope.scaling.type"), "none");
  if (scaling != "none" && !(hp.arch == Arch::phi3 && (scaling == "longrope" || scaling == "su"))) {
    bad(LILIMS_ERR_UNSUPPORTED, r.key("rope.scaling.type") + " '" + scaling + "' is not supported");
  }
  if (r.has("rope.scaling.factor") && f.get_float_or(r.key("rope.scaling.factor"), 1.0) != 1.0 &&
      hp.arch != Arch::phi3) {
    bad(LILIMS_ERR_UNSUPPORTED, r.key("rope.scaling.factor") + " other than 1 is not supported");
  }

  const gguf::TensorInfo& embd = f.require_tensor("token_embd.weight");
  if (embd.ne.size() != 2) bad(LILIMS_ERR_BAD_FORMAT, "token_embd.weight must be 2-D");
  if (embd.ne[1] > (uint64_t)INT32_MAX) bad(LILIMS_ERR_BAD_FORMAT, "token_embd.weight has too many rows");
  hp.n_vocab = (int32_t)embd.ne[1];
  if (r.has("vocab_size") && f.get_int(r.key("vocab_size")) != hp.n_vocab) {
    bad(LILIMS_ERR_BAD_FORMAT, r.key("vocab_size") + " disagrees with token_embd.weight");
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
}

void read_output(Reader& r, Model& m, bool layer_norm) {
  const HParams& hp = m.hp;
  m.output_norm = layer_norm ? r.layer_norm("output_norm", hp.n_embd) : r.rms_norm("output_norm", hp.n_embd);
  if (r.has_tensor("output.weight")) {
    m.output = r.weight("output.weight", hp.n_vocab, hp.n_embd);
    if (r.has_tensor("output.bias")) m.output.bias = r.vector("output.bias", hp.n_vocab);
  } else {
    m.output = r.weight("token_embd.weight", hp.n_vocab, hp.n_embd);
    m.tied_output = true;
  }
}

void load_llama(Reader& r, Model& m) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.rms_norm(p + "attn_norm", d);
    L.wq = r.source(p + "attn_q.weight", q, d);
    L.wk = r.source(p + "attn_k.weight", kv, d);
    L.wv = r.source(p + "attn_v.weight", kv, d);
    m.n_fused += r.stack({&L.wq, &L.wk, &L.wv}, L.wqkv);
    L.wo = r.weight(p + "attn_output.weight", d, q);
    L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
    L.w_gate = r.source(p + "ffn_gate.weight", hp.n_ff, d);
    L.w_up = r.source(p + "ffn_up.weight", hp.n_ff, d);
    Weight gate_up;
    if (r.stack({&L.w_gate, &L.w_up}, gate_up)) {
      L.w_up = std::move(gate_up);
      ++m.n_fused;
    }
    L.w_down = r.weight(p + "ffn_down.weight", d, hp.n_ff);
  }
  // Llama 3's frequency scaling, as the converter stores it.
  if (r.has_tensor("rope_freqs.weight")) m.rope_factors_long = r.vector("rope_freqs.weight", hp.n_rot / 2);
  read_output(r, m, false);
}

void load_phi2(Reader& r, Model& m) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.layer_norm(p + "attn_norm", d);
    // The converter writes a fused attn_qkv for the original checkpoints and
    // separate projections for HF-format ones.
    if (r.has_tensor(p + "attn_qkv.weight")) {
      L.wqkv = r.biased(p + "attn_qkv", q + 2 * kv, d);
    } else {
      L.wq = r.biased_source(p + "attn_q", q, d);
      L.wk = r.biased_source(p + "attn_k", kv, d);
      L.wv = r.biased_source(p + "attn_v", kv, d);
      m.n_fused += r.stack({&L.wq, &L.wk, &L.wv}, L.wqkv);
    }
    L.wo = r.biased(p + "attn_output", d, q);
    L.w_up = r.biased(p + "ffn_up", hp.n_ff, d);
    L.w_down = r.biased(p + "ffn_down", d, hp.n_ff);
  }
  read_output(r, m, true);
}

void load_phi3(Reader& r, Model& m) {
  HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.rms_norm(p + "attn_norm", d);
    L.wqkv = r.weight(p + "attn_qkv.weight", q + 2 * kv, d);
    L.wo = r.weight(p + "attn_output.weight", d, q);
    L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
    L.w_up = r.weight(p + "ffn_up.weight", 2 * (int64_t)hp.n_ff, d);
    L.w_down = r.weight(p + "ffn_down.weight", d, hp.n_ff);
  }
  const bool has_long = r.has_tensor("rope_factors_long.weight");
  if (has_long != r.has_tensor("rope_factors_short.weight")) {
    bad(LILIMS_ERR_BAD_FORMAT, "phi3 needs both rope_factors_long and rope_factors_short, or neither");
  }
  if (has_long) {
    m.rope_factors_long = r.vector("rope_factors_long.weight", hp.n_rot / 2);
    m.rope_factors_short = r.vector("rope_factors_short.weight", hp.n_rot / 2);
    hp.rope_orig_ctx = r.positive_int("rope.scaling.original_context_length", 1 << 24);
  }
  read_output(r, m, false);
}

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::phi2: return "phi2";
    case Arch::phi3: return "phi3";
  }
  return "?";
}

const kernels::PackedWeight& embedding_table(const Model& m) {
  const bool packed_copy = m.tied_output && m.output.packed.layout != kernels::kLayoutGguf &&
                           m.output.packed.type == m.tok_embd.type;
  return packed_copy ? m.output.packed : m.tok_embd.packed;
}

void dequantize_row(const Weight& w, int64_t row, float* out) {
  const size_t rb = quant::row_bytes(w.type, w.cols);
  quant::type_traits((uint32_t)w.type)->to_float(
      static_cast<const uint8_t*>(w.data) + (size_t)row * rb, out, w.cols);
}

uint64_t Model::mapped_weight_bytes() const {
  uint64_t n = 0;
  auto count = [&](const Weight& w) {
    if (w.present() && w.packed.storage.empty() && !w.requantized) {
      n += quant::row_bytes(w.type, w.cols) * w.rows;
    }
  };
  count(output);
  for (const Layer& L : layers) {
    for (const Weight* w : L.weights()) count(*w);
  }
  return n;
}

std::unique_ptr<Model> load_model(std::unique_ptr<gguf::File> file, const LoadOptions& opt) {
  const gguf::File& f = *file;
  const std::string arch = f.get_string("general.architecture");
  auto m = std::make_unique<Model>();
  HParams& hp = m->hp;
  if (arch == "llama") {
    hp.arch = Arch::llama;
  } else if (arch == "phi2") {
    hp.arch = Arch::phi2;
  } else if (arch == "phi3") {
    hp.arch = Arch::phi3;
  } else {
    bad(LILIMS_ERR_UNSUPPORTED,
        "architecture '" + arch + "' is not supported (lilims runs llama, phi2 and phi3)");
  }
  Reader r(f, arch, opt);
  read_common(r, f, hp);
  hp.rope_neox = hp.arch != Arch::llama;
  if (hp.arch == Arch::phi2) {
    hp.norm_eps = r.positive_float_or("attention.layer_norm_epsilon", 1e-5, 1.0);
  } else {
    hp.norm_eps = r.positive_float_or("attention.layer_norm_rms_epsilon", 1e-5, 1.0);
  }
  if (hp.arch == Arch::phi3) {
    hp.sliding_window = r.positive_int_or("attention.sliding_window", 1 << 24, 0);
    hp.rope_attn_factor = r.positive_float_or("rope.scaling.attn_factor", 1.0, 100.0);
  }

  const auto t0 = std::chrono::steady_clock::now();
  // The embedding table is only ever read row by row: never repacked.
  m->tok_embd = r.weight("token_embd.weight", hp.n_vocab, hp.n_embd, false);
  m->layers.resize((size_t)hp.n_layer);
  switch (hp.arch) {
    case Arch::llama: load_llama(r, *m); break;
    case Arch::phi2: load_phi2(r, *m); break;
    case Arch::phi3: load_phi3(r, *m); break;
  }
  r.check_all_taken();
  m->n_params = r.n_params();
  m->repack_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto count = [&](const Weight& w) {
    m->repacked_bytes += w.packed.storage.size();
    if (w.requantized) m->requantized_bytes += w.requantized->size();
  };
  count(m->tok_embd);
  count(m->output);
  for (const Layer& L : m->layers) {
    for (const Weight* w : L.weights()) count(*w);
  }
  if (!r.requantized().empty()) {
    std::string what;
    for (const auto& [conv, n] : r.requantized()) {
      what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + conv;
      m->n_requantized += (size_t)n;
    }
    if (log_enabled(LILIMS_LOG_WARN)) {
      log(LILIMS_LOG_WARN, "[model] re-quantized " + std::to_string(m->n_requantized) +
                               " tensors lilims has no kernels for at load (" + what + "; " +
                               std::to_string((m->requantized_bytes + (1u << 19)) >> 20) +
                               " MiB kept on the heap); `lilims quantize` converts the file once");
    }
  }
  m->file = std::move(file);
  return m;
}

Weight weight_of(const gguf::TensorInfo& t, const std::string& name, int64_t rows, int64_t cols) {
  Weight w;
  w.name = name;
  w.file_type = t.type;
  w.type = static_cast<quant::Type>(t.type);
  w.rows = rows;
  w.cols = cols;
  w.data = t.data;
  return w;
}

int load_threads(const LoadOptions& opt) {
  return threads_or_cores(opt.n_threads);
}

kernels::SourceDone drop_copied_pages(const gguf::File& f) {
  return kernels::SourceDone{[](void* file, const void* p, size_t n) {
                               static_cast<const gguf::File*>(file)->drop_pages(p, n);
                             },
                             const_cast<gguf::File*>(&f)};
}

}  // namespace lilims::models
