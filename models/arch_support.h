// What a family's file (models/arch_*.cpp) needs to read its model and build
// its graph: a Reader over the GGUF's keys and tensors, and the graph pieces
// the families share (projections with their lora nodes, the attention
// sub-block, the gated MLPs).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/ir.h"
#include "models/arch.h"
#include "models/builders.h"
#include "models/model.h"
#include "models/weight_convert.h"
#include "quant/prelaid.h"
#include "quant/repack.h"
#include "quant/quantize.h"

namespace lilims::models {

[[noreturn]] inline void bad(lilims_status st, const std::string& msg) { throw Error(st, "[model] " + msg); }

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

  const gguf::File& file() const { return f_; }
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
  // An integer key in [lo, hi], or fallback when the file has none.
  int32_t int_or(const std::string& k, int64_t lo, int64_t hi, int32_t fallback) const {
    if (!has(k)) return fallback;
    const int64_t v = f_.get_int(key(k));
    if (v < lo || v > hi) {
      bad(LILIMS_ERR_BAD_FORMAT, key(k) + " = " + std::to_string(v) + " is out of range (" +
                                     std::to_string(lo) + ".." + std::to_string(hi) + ")");
    }
    return (int32_t)v;
  }
  float nonnegative_float_or(const std::string& k, double fallback, double limit) const {
    const double v = f_.get_float_or(key(k), fallback);
    if (!(v >= 0.0) || v > limit) {
      bad(LILIMS_ERR_BAD_FORMAT, key(k) + " = " + std::to_string(v) + " is out of range");
    }
    return (float)v;
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
    const quant::TypeTraits* rt = quant::readable_traits(t.type);
    if (!rt || rt->block_size != 1) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + name + " has type " + quant::ggml_type_name(t.type) +
                                      "; norm weights, biases and rope factors must be F32, F16 or BF16");
    }
    std::vector<float> out((size_t)n);
    rt->to_float(t.data, out.data(), n);
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
    if (quant::prelaid_type(t.type, &w.prelaid)) {
      w.type = w.prelaid.type;
    } else if (!quant::type_traits(t.type) || !kernels::kept_at_load(w.type)) {
      requantize(t, w);
    }
    return w;
  }

  // Packs a source() for the kernels.  A repacked weight is read from its
  // copy: its file pages need not stay resident beside it, and go slice by
  // slice, so the load never holds both.
  void pack(Weight& w, bool repack = true) {
    if (w.prelaid.layout != kernels::kLayoutGguf) {
      pack_prelaid(w);
      take(f_.require_tensor(w.name));
      return;
    }
    w.packed = kernels::pack_weight(w.type, w.data, w.rows, w.cols, repack && repack_, drop_for(w),
                                    threads_, &arena_);
    if (!w.packed.storage.empty()) w.copy_reason = repack_reason(w, w.packed.layout);
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
    if (parts[0]->prelaid.layout != kernels::kLayoutGguf) return stack_prelaid(parts, into, same);
    if (!same || !kernels::can_stack(parts[0]->type, wp, repack_)) {
      for (Weight* w : parts) pack(*w);
      return false;
    }
    Weight s;
    s.type = parts[0]->type;
    s.cols = parts[0]->cols;
    s.file_type = parts[0]->file_type;
    for (const Weight* w : parts) s.rows += w->rows;
    s.packed = kernels::pack_stacked(s.type, wp, s.cols, threads_, &arena_);
    s.copy_reason = repack_reason(*parts[0], s.packed.layout);
    finish_stack(parts, s, into);
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

  // A weight in a type lilims only dequantizes, or one this CPU runs faster
  // converted: into the kernel type its traits' load_as names
  // (models/weight_convert.h).
  void requantize(const gguf::TensorInfo& t, Weight& w) {
    const quant::TypeTraits* src = quant::readable_traits(t.type);
    if (!src || src->load_as == src->type) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " has type " + quant::ggml_type_name(t.type) +
                                      ", which lilims cannot read");
    }
    const quant::Type to = src->load_as;
    if (w.cols % quant::traits(to).block_size != 0) {
      bad(LILIMS_ERR_UNSUPPORTED, "tensor " + t.name + " (" + src->name + ") has rows of " +
                                      std::to_string(w.cols) + " elements, not whole " +
                                      quant::traits(to).name + " blocks");
    }
    auto bytes = convert_rows(*src, t.data, w);
    f_.drop_pages(t.data, t.n_bytes);
    w.copy_reason = std::string("re-quantized from ") + src->name + " to " + quant::traits(to).name +
                    " (no kernel reads " + src->name + ")";
    w.data = bytes->data();
    w.requantized = std::move(bytes);
  }

  // w's rows of src's type at `data` converted to src.load_as (w.type set
  // to it), and the conversion counted.
  std::shared_ptr<std::vector<uint8_t>> convert_rows(const quant::TypeTraits& src, const uint8_t* data, Weight& w) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(convert_for_kernels(src, data, w.rows, w.cols, w.name));
    w.type = src.load_as;
    // A tied output reads the embedding again: one tensor, counted once.
    if (!taken_.count(w.name)) ++requantized_[std::string(src.name) + " -> " + quant::traits(src.load_as).name];
    return bytes;
  }

  // Why a plain weight was repacked (Weight::copy_reason).
  static std::string repack_reason(const Weight& w, int layout) {
    const std::string into = std::to_string(quant::layout_group_rows(layout)) + "-row groups";
    return w.requantized ? w.copy_reason + ", then repacked into " + into
                         : "repacked into " + into + " for this CPU's kernels (`lilims quantize --layout native` "
                           "lays the file out once)";
  }

  // Why a pre-laid weight cannot be read in place here ("" when it can).
  std::string prelaid_copy_reason(const Weight& w) const {
    const quant::PrelaidType& p = w.prelaid;
    const std::string laid = quant::prelaid_type_name(quant::prelaid_type_id(p));
    if (!repack_) return "laid out (" + laid + ") but the load asks for GGUF rows (repacking off)";
    if (p.arm_variant != quant::native_prelaid(p.type, p.layout).arm_variant) {
      return std::string("laid out for ") + (p.arm_variant ? "aarch64" : "x86") + " (" + laid + "), this build is " +
             (p.arm_variant ? "x86" : "aarch64");
    }
    const kernels::Isa isa = kernels::active_isa();
    if (isa == kernels::Isa::ref) return "";  // the reference kernels read every layout
    for (const kernels::MatmulKernel& k : kernels::matmul_kernels()) {
      // (LILIMS_ISA=avx2 keeps an AVX-512 VNNI CPU off its VNNI kernels)
      const bool usable = kernels::feature_available(k.needs) &&
                          (k.needs != kernels::Feature::avx512vnni || kernels::vnni_enabled());
      if (k.wtype == p.type && k.layout == p.layout && k.isa == isa && usable) {
        return "";
      }
    }
    return "laid out in " + std::to_string(quant::layout_group_rows(p.layout)) + "-row groups (" + laid +
           "), which no kernel of this CPU reads";
  }

  // A pre-laid weight: read in place from the file when this CPU's kernels
  // read its layout, else turned back into GGUF rows and packed as a plain
  // weight would be (a copy, counted with its reason).
  void pack_prelaid(Weight& w) {
    const std::string why = prelaid_copy_reason(w);
    if (why.empty()) {
      w.packed = kernels::PackedWeight{w.type, w.rows, w.cols, w.data, w.prelaid.layout, {}};
      return;
    }
    const size_t rb = quant::row_bytes(w.type, w.cols);
    auto bytes = std::make_shared<std::vector<uint8_t>>(rb * (size_t)w.rows);
    const quant::TypeTraits& tt = quant::traits(w.type);
    // block_from_packed undoes this build's XOR; where the file holds the
    // other variant, its XOR too.
    const uint8_t flip = w.prelaid.arm_variant != quant::native_prelaid(w.type, w.prelaid.layout).arm_variant
                             ? quant::variant_xor(w.type, w.prelaid.layout)
                             : 0;
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t b = 0; b < w.cols / tt.block_size; ++b) {
        uint8_t* blk = bytes->data() + (size_t)r * rb + (size_t)b * tt.block_bytes;
        quant::block_from_packed(w.type, w.prelaid.layout, w.data, w.cols, r, b, blk);
        for (size_t k = tt.scale_bytes; flip && k < tt.block_bytes; ++k) blk[k] ^= flip;
      }
    }
    f_.drop_pages(w.data, quant::prelaid_bytes(w.prelaid, w.rows, w.cols));
    std::string reason = why;
    if (!kernels::kept_at_load(w.type)) {
      // Q5_0 in 16-row groups on a CPU without the VNNI kernel: what a load
      // of the plain file would make of it.
      const quant::TypeTraits& from = quant::traits(w.type);
      bytes = convert_rows(from, bytes->data(), w);
      reason += std::string(", then re-quantized from ") + from.name + " to " + quant::traits(w.type).name;
    }
    w.packed = kernels::pack_weight(w.type, bytes->data(), w.rows, w.cols, repack_, {}, threads_, &arena_);
    w.copy_reason = reason;
    if (w.packed.storage.empty()) {
      w.data = bytes->data();
      w.requantized = std::move(bytes);
    } else {
      w.data = nullptr;
    }
    w.prelaid = {};
  }

  // Pre-laid parts of one type and layout, each in place, whole row groups
  // but the last, that follow each other in the file without a gap: one
  // weight over their bytes (what pack_stacked would have built).  Otherwise
  // each part on its own, still in place where it can be.
  bool stack_prelaid(const std::vector<Weight*>& parts, Weight& into, bool same) {
    const Weight& p0 = *parts[0];
    const int64_t g = quant::layout_group_rows(p0.prelaid.layout);
    bool ok = same && prelaid_copy_reason(p0).empty();
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      const Weight& w = *parts[i];
      ok = w.prelaid.layout == p0.prelaid.layout && w.prelaid.arm_variant == p0.prelaid.arm_variant;
      if (ok && i + 1 < parts.size()) {
        ok = w.rows % g == 0 && static_cast<const uint8_t*>(w.data) + quant::prelaid_bytes(w.prelaid, w.rows, w.cols) ==
                                    parts[i + 1]->data;
      }
    }
    if (!ok) {
      for (Weight* w : parts) pack(*w);
      return false;
    }
    Weight s;
    s.type = p0.type;
    s.cols = p0.cols;
    s.file_type = p0.file_type;
    s.prelaid = p0.prelaid;
    for (const Weight* w : parts) s.rows += w->rows;
    s.packed = kernels::PackedWeight{s.type, s.rows, s.cols, p0.data, p0.prelaid.layout, {}};
    s.data = p0.data;
    finish_stack(parts, s, into);
    return true;
  }

  // Names, rows and biases of the parts into the stack s; the parts are taken and cleared.
  void finish_stack(const std::vector<Weight*>& parts, Weight& s, Weight& into) {
    for (const Weight* w : parts) {
      s.name += (s.name.empty() ? "" : "+") + w->name;
      s.parts.push_back(w->name);
      s.part_rows.push_back(w->rows);
      s.bias.insert(s.bias.end(), w->bias.begin(), w->bias.end());
      if (w->file_type != s.file_type) s.file_type = (uint32_t)s.type;
    }
    for (Weight* w : parts) {
      take(f_.require_tensor(w->name));
      *w = Weight{};  // releases a re-quantized copy: the stack holds its rows
    }
    into = std::move(s);
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


// The tensors every layer's graph reads: the residual stream and the RoPE
// tables (a second pair for the sliding-window layers when their RoPE
// differs: Gemma 3's local base).
struct Stream {
  int x = -1, cos = -1, sin = -1, cos_swa = -1, sin_swa = -1;
};

// What a family's layer builder works with.
struct LayerGraph {
  graph::Graph& g;
  const BuildOptions& opt;
  const Model& m;
  Stream s;
};

std::string at(const char* what, int l);
// A matmul of w and its lora nodes (when the options ask for them).
int projection(LayerGraph& lg, const Weight& w, int in, const std::string& name);
void projection(LayerGraph& lg, const Weight& w, int in, int out);
// Attention of layer l over h: Q, K, V (one fused projection or three),
// per-head Q/K RMSNorm when the layer has them, RoPE on Q and K (the layer's
// tables), the new K/V rows staged for the cache, attention (the layer's
// window and scale), the output projection.  Returns the projection's output.
int attention(LayerGraph& lg, int l, int h);
// w_down(act(gate) * up), gate and up from two weights or one [gate; up];
// act silu (SwiGLU) or tanh GELU (GeGLU).
int swiglu_mlp(LayerGraph& lg, int l, int h);
int geglu_mlp(LayerGraph& lg, int l, int h);

// Tensors that families read alike.
// Separate Q, K, V projections (biases when the file has them all), stacked
// into wqkv when the reader can (Reader::stack).
void read_qkv(Reader& r, Model& m, Layer& L, const std::string& p, bool bias);
// ffn_gate and ffn_up, stacked into w_up when the reader can; ffn_down.
void read_gated_ffn(Reader& r, Model& m, Layer& L, const std::string& p);
// llama's block: attn_norm, Q/K/V (read_qkv), attn_output, ffn_norm, the
// gated MLP; `between` (may be null) reads what a family adds after Q/K/V.
void read_llama_block(Reader& r, Model& m, Layer& L, const std::string& p, bool qkv_bias,
                      void (*between)(Reader&, Model&, Layer&, const std::string&) = nullptr);

}  // namespace lilims::models
