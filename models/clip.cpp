#include "models/clip.h"

#include <cmath>
#include <set>
#include <string>

#include "base/error.h"
#include "quant/quant.h"

namespace lilims::models {
namespace {

[[noreturn]] void bad(lilims_status st, const std::string& msg) { throw Error(st, "[clip] " + msg); }

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s;
  for (size_t i = 0; i < t.ne.size(); ++i) s += (i ? " x " : "") + std::to_string(t.ne[i]);
  return "[" + s + "]";
}

// The projector file's tensors, each taken once: one the encoder does not
// use is refused rather than ignored.
class ClipReader {
 public:
  explicit ClipReader(const gguf::File& f, const LoadOptions& opt)
      : f_(f), repack_(opt.repack), threads_(load_threads(opt)) {}

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  int32_t count(const std::string& key, int64_t limit) const {
    const int64_t v = f_.get_int(key);
    if (v <= 0 || v > limit) {
      bad(LILIMS_ERR_BAD_FORMAT, key + " = " + std::to_string(v) + " is out of range (1.." +
                                     std::to_string(limit) + ")");
    }
    return (int32_t)v;
  }

  // n floats of a tensor holding exactly n elements (any shape), F32 or F16.
  std::vector<float> floats(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = tensor(name);
    const quant::TypeTraits* rt = quant::readable_traits(t.type);
    if (!rt || rt->block_size != 1) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has type " + quant::ggml_type_name(t.type) +
                                      "; vectors and tables must be F32 or F16");
    }
    if (t.n_elements != (uint64_t)n) {
      bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " has shape " + shape_of(t) + ", expected " +
                                     std::to_string(n) + " elements");
    }
    std::vector<float> out((size_t)n);
    rt->to_float(t.data, out.data(), n);
    return out;
  }

  Norm norm(const std::string& prefix, int64_t n) {
    return Norm{floats(prefix + ".weight", n), floats(prefix + ".bias", n)};
  }

  // A matrix of `rows` outputs and `cols` inputs: ne[0] * ... * ne[k-2] = cols
  // (the patch kernel is 4-D: width, height, channels, outputs), ne[k-1] = rows.
  Weight matrix(const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& t = tensor(name);
    uint64_t inner = 1;
    for (size_t i = 0; i + 1 < t.ne.size(); ++i) inner *= t.ne[i];
    if (t.ne.size() < 2 || inner != (uint64_t)cols || t.ne.back() != (uint64_t)rows) {
      bad(LILIMS_ERR_BAD_FORMAT, "tensor " + name + " has shape " + shape_of(t) + ", expected " +
                                     std::to_string(cols) + " inputs x " + std::to_string(rows) +
                                     " outputs");
    }
    const quant::TypeTraits* tr = quant::type_traits(t.type);
    if (!tr) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has type " + quant::ggml_type_name(t.type) +
                                      "; projector matrices must be F32, F16, Q8_0, Q4_0 or Q4_1");
    }
    if (cols % tr->block_size != 0) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " (" + tr->name + ") has rows of " +
                                      std::to_string(cols) + " values, not whole blocks");
    }
    Weight w = weight_of(t, name, rows, cols);
    // A repacked weight is read from its copy: its file pages go as it is copied.
    w.packed = kernels::pack_weight(w.type, w.data, rows, cols, repack_, drop_copied_pages(f_), threads_);
    (w.packed.storage.empty() ? mapped_bytes_ : heap_bytes_) += t.n_bytes;
    return w;
  }

  Weight biased(const std::string& prefix, int64_t rows, int64_t cols) {
    Weight w = matrix(prefix + ".weight", rows, cols);
    w.bias = floats(prefix + ".bias", rows);
    return w;
  }

  void check_all_taken() const {
    for (const gguf::TensorInfo& t : f_.tensors()) {
      if (!taken_.count(t.name)) {
        bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " is not part of a CLIP encoder with a LLaVA "
                                        "MLP projector as lilims runs it; refusing to ignore it");
      }
    }
  }
  uint64_t n_params() const { return n_params_; }
  uint64_t mapped_bytes() const { return mapped_bytes_; }  // matrices the kernels read in place
  uint64_t heap_bytes() const { return heap_bytes_; }      // matrices repacked into copies

 private:
  const gguf::TensorInfo& tensor(const std::string& name) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) bad(LILIMS_ERR_MISSING, "tensor " + name + " is missing");
    if (!t->data) bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has a type lilims cannot read");
    if (taken_.insert(name).second) n_params_ += t->n_elements;
    return *t;
  }

  const gguf::File& f_;
  bool repack_;
  int threads_;
  std::set<std::string> taken_;
  uint64_t n_params_ = 0;
  uint64_t mapped_bytes_ = 0, heap_bytes_ = 0;
};

void read_hparams(const gguf::File& f, const ClipReader& r, ClipHParams& hp) {
  hp.image_size = r.count("clip.vision.image_size", 4096);
  hp.patch_size = r.count("clip.vision.patch_size", 1024);
  hp.n_embd = r.count("clip.vision.embedding_length", 1 << 16);
  hp.n_ff = r.count("clip.vision.feed_forward_length", 1 << 18);
  hp.n_head = r.count("clip.vision.attention.head_count", 1024);
  hp.n_layer = r.count("clip.vision.block_count", 1024);
  const double eps = f.get_float("clip.vision.attention.layer_norm_epsilon");
  if (!(eps > 0.0) || eps > 1.0) bad(LILIMS_ERR_BAD_FORMAT, "layer_norm_epsilon is out of range");
  hp.eps = (float)eps;
  hp.gelu = f.get_bool_or("clip.use_gelu", false);
  if (f.get_bool_or("clip.use_silu", false)) bad(LILIMS_ERR_UNSUPPORTED, "a SiLU vision MLP is not supported");
  if (hp.image_size % hp.patch_size != 0) {
    bad(LILIMS_ERR_BAD_FORMAT, "image size " + std::to_string(hp.image_size) +
                                   " is not a whole number of patches of " + std::to_string(hp.patch_size));
  }
  if (hp.n_embd % hp.n_head != 0 || (hp.n_embd / hp.n_head) % 8 != 0) {
    bad(LILIMS_ERR_UNSUPPORTED, "embedding_length " + std::to_string(hp.n_embd) + " over " +
                                    std::to_string(hp.n_head) +
                                    " heads: the head size must be a whole multiple of 8");
  }
  hp.head_dim = hp.n_embd / hp.n_head;
}

}  // namespace

std::unique_ptr<ClipModel> load_clip(std::unique_ptr<gguf::File> file, const LoadOptions& opt) {
  const gguf::File& f = *file;
  const std::string arch = f.get_string_or("general.architecture", "");
  if (arch != "clip") bad(LILIMS_ERR_UNSUPPORTED, "general.architecture is '" + arch + "', not 'clip'");
  if (!f.get_bool_or("clip.has_vision_encoder", false)) {
    bad(LILIMS_ERR_UNSUPPORTED, "the file has no vision encoder (clip.has_vision_encoder)");
  }
  const std::string proj = f.get_string_or("clip.projector_type", "mlp");
  if (proj != "mlp") {
    bad(LILIMS_ERR_UNSUPPORTED, "projector type '" + proj + "' is not supported (lilims runs 'mlp')");
  }
  auto m = std::make_unique<ClipModel>();
  ClipHParams& hp = m->hp;
  ClipReader r(f, opt);
  read_hparams(f, r, hp);
  m->image = clip_image_params(f);
  const int64_t d = hp.n_embd;

  m->patch_embd = r.matrix("v.patch_embd.weight", d, hp.patch_cols());
  std::vector<float> patch_bias;
  if (r.has("v.patch_embd.bias")) {
    patch_bias = r.floats("v.patch_embd.bias", d);
    m->patch_embd.bias = patch_bias;
  }
  m->embd_table = r.floats("v.position_embd.weight", (int64_t)hp.n_pos() * d);
  const std::vector<float> cls = r.floats("v.class_embd", d);
  for (int64_t i = 0; i < d; ++i) {
    m->embd_table[(size_t)i] += cls[(size_t)i] - (patch_bias.empty() ? 0.0f : patch_bias[(size_t)i]);
  }
  m->pre_ln = r.norm("v.pre_ln", d);
  m->layers.resize((size_t)hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    ClipLayer& L = m->layers[(size_t)l];
    L.ln1 = r.norm(p + "ln1", d);
    L.ln2 = r.norm(p + "ln2", d);
    L.wq = r.biased(p + "attn_q", d, d);
    L.wk = r.biased(p + "attn_k", d, d);
    L.wv = r.biased(p + "attn_v", d, d);
    L.wo = r.biased(p + "attn_out", d, d);
    // gguf-py names fc1 ffn_up; llama.cpp's older LLaVA converter called it
    // ffn_down.  The shapes tell which is which (as llama.cpp's loader checks).
    const gguf::TensorInfo* up = f.find_tensor(p + "ffn_up.weight");
    const bool legacy = up && up->ne.size() == 2 && up->ne[0] == (uint64_t)hp.n_ff &&
                        up->ne[1] == (uint64_t)d && hp.n_ff != d;
    L.ffn_up = r.biased(p + (legacy ? "ffn_down" : "ffn_up"), hp.n_ff, d);
    L.ffn_down = r.biased(p + (legacy ? "ffn_up" : "ffn_down"), d, hp.n_ff);
  }
  if (r.has("v.post_ln.weight")) m->post_ln = r.norm("v.post_ln", d);
  const gguf::TensorInfo* mm0 = f.find_tensor("mm.0.weight");
  if (!mm0 || mm0->ne.size() != 2) bad(LILIMS_ERR_MISSING, "tensor mm.0.weight (the projector) is missing");
  hp.n_out = (int32_t)mm0->ne[1];
  m->mm0 = r.biased("mm.0", hp.n_out, d);
  m->mm2 = r.biased("mm.2", hp.n_out, hp.n_out);
  r.check_all_taken();
  m->n_params = r.n_params();
  m->weights_mapped = r.mapped_bytes();
  m->weights_heap = r.heap_bytes();
  size_t floats = m->embd_table.size() + m->pre_ln.w.size() * 2 + m->post_ln.w.size() * 2 +
                  m->patch_embd.bias.size() + m->mm0.bias.size() + m->mm2.bias.size();
  for (const ClipLayer& L : m->layers) {
    floats += 4 * L.ln1.w.size() + L.wq.bias.size() * 4 + L.ffn_up.bias.size() + L.ffn_down.bias.size();
  }
  m->host_bytes = floats * sizeof(float);
  m->file = std::move(file);
  return m;
}

graph::Graph build_clip_graph(const ClipModel& m, int chunk_layers) {
  if (chunk_layers < 1) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[graph] chunk_layers must be at least 1");
  const ClipHParams& hp = m.hp;
  graph::ModelShape s;
  s.n_layer = 0;  // no KV cache
  s.n_head = s.n_head_kv = hp.n_head;
  s.head_dim = hp.head_dim;
  s.n_vocab = hp.n_out;
  graph::Graph g(s);
  auto at = [](const char* what, int l) { return std::string(what) + "." + std::to_string(l); };

  // chunk 0: patches -> embeddings (+ class token, positions) -> pre-LayerNorm
  g.begin_chunk(graph::ChunkKind::embed);
  const int patches = g.input(hp.patch_cols(), "patches");
  const int pe = g.matmul(m.patch_embd.packed, m.patch_embd.bias, patches, "patch_embd");
  const int e = g.add_table(pe, m.embd_table, "embd");
  const int x = g.layer_norm(e, m.pre_ln.w, m.pre_ln.b, hp.eps, "x");

  for (int l0 = 0; l0 < hp.n_layer; l0 += chunk_layers) {
    const int l1 = std::min(hp.n_layer, l0 + chunk_layers);
    g.begin_chunk(graph::ChunkKind::blocks, l0, l1);
    for (int l = l0; l < l1; ++l) {
      const ClipLayer& L = m.layers[(size_t)l];
      const int h = g.layer_norm(x, L.ln1.w, L.ln1.b, hp.eps, at("ln1", l));
      const int q = g.matmul(L.wq.packed, L.wq.bias, h, at("q", l));
      const int k = g.matmul(L.wk.packed, L.wk.bias, h, at("k", l));
      const int v = g.matmul(L.wv.packed, L.wv.bias, h, at("v", l));
      const int att = g.self_attention(q, k, v, 1.0f / std::sqrt((float)hp.head_dim), at("att", l));
      g.add(x, g.matmul(L.wo.packed, L.wo.bias, att, at("att_out", l)), x);
      const int h2 = g.layer_norm(x, L.ln2.w, L.ln2.b, hp.eps, at("ln2", l));
      const int up = g.matmul(L.ffn_up.packed, L.ffn_up.bias, h2, at("ffn_up", l));
      const int act = hp.gelu ? g.gelu_erf(up, at("gelu", l)) : g.quick_gelu(up, at("quick_gelu", l));
      g.add(x, g.matmul(L.ffn_down.packed, L.ffn_down.bias, act, at("ffn_out", l)), x);
    }
  }

  // last chunk: post-norm, the patch rows without the class row, the projector
  g.begin_chunk(graph::ChunkKind::head);
  const int y = m.post_ln.w.empty() ? x : g.layer_norm(x, m.post_ln.w, m.post_ln.b, hp.eps, "post_ln");
  const int feats = g.drop_rows(y, 1, "features");
  const int p0 = g.matmul(m.mm0.packed, m.mm0.bias, feats, "mm0");
  g.matmul(m.mm2.packed, m.mm2.bias, g.gelu_erf(p0, "mm_gelu"), g.logits());
  g.validate();
  return g;
}

std::vector<float> unfold_patches(const ClipHParams& hp, const float* pixels) {
  const int side = hp.patches_per_side(), p = hp.patch_size, n = hp.image_size;
  const int64_t cols = hp.patch_cols();
  std::vector<float> rows((size_t)hp.n_pos() * (size_t)cols, 0.0f);
  for (int py = 0; py < side; ++py) {
    for (int px = 0; px < side; ++px) {
      float* row = rows.data() + (size_t)(1 + py * side + px) * (size_t)cols;
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < p; ++y) {
          const float* src = pixels + ((size_t)c * n + (size_t)(py * p + y)) * n + (size_t)px * p;
          std::copy(src, src + p, row + ((size_t)c * p + (size_t)y) * p);
        }
      }
    }
  }
  return rows;
}

ClipEncoder::ClipEncoder(const ClipModel& m, graph::ExecMode mode, graph::ThreadPool& pool, int chunk_layers)
    : hp_(m.hp), exec_(build_clip_graph(m, chunk_layers), [&] {
        graph::PlanOptions o;
        o.n_ctx = o.n_batch = m.hp.n_pos();
        o.mode = mode;
        return o;
      }(), pool, [&] {
        graph::ModelMemory mem;
        mem.weights_mapped = m.weights_mapped;
        mem.weights_heap = m.weights_heap;
        mem.host = m.host_bytes;
        return mem;
      }()) {}

void ClipEncoder::encode(const float* pixels, float* out) {
  const std::vector<float> rows = unfold_patches(hp_, pixels);
  exec_.encode(rows.data(), hp_.n_pos(), out);
}

}  // namespace lilims::models
