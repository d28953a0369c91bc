#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_info.h"
#include "models/arch_support.h"
#include "models/model.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace lilims::models {
namespace {

void read_common(Reader& r, const gguf::File& f, const ArchDesc& desc, HParams& hp) {
  hp.n_layer = r.positive_int("block_count", 4096);
  hp.n_embd = r.positive_int("embedding_length", 1 << 16);
  hp.n_ff = r.positive_int("feed_forward_length", 1 << 18);
  hp.n_head = r.positive_int("attention.head_count", 4096);
  hp.n_head_kv = r.positive_int_or("attention.head_count_kv", 4096, hp.n_head);
  hp.n_ctx_train = r.positive_int_or("context_length", 1 << 24, 2048);
  if (hp.n_head % hp.n_head_kv != 0) {
    bad(LILIMS_ERR_BAD_FORMAT, "head count " + std::to_string(hp.n_head) +
                                   " is not a multiple of the KV head count " +
                                   std::to_string(hp.n_head_kv));
  }
  // The head size: key_length when the file says (Gemma 3, Qwen3: not
  // n_embd / n_head), which value_length must equal.
  if (r.has("attention.key_length")) {
    hp.head_dim = r.positive_int("attention.key_length", 1 << 12);
    const int32_t v = r.positive_int_or("attention.value_length", 1 << 12, hp.head_dim);
    if (v != hp.head_dim) {
      bad(LILIMS_ERR_UNSUPPORTED, r.key("attention.value_length") + " = " + std::to_string(v) +
                                      " differs from " + r.key("attention.key_length") + " = " +
                                      std::to_string(hp.head_dim) + "; lilims needs them equal");
    }
  } else {
    if (r.has("attention.value_length")) {
      bad(LILIMS_ERR_BAD_FORMAT, r.key("attention.value_length") + " without " + r.key("attention.key_length"));
    }
    if (hp.n_embd % hp.n_head != 0) {
      bad(LILIMS_ERR_BAD_FORMAT, "embedding length " + std::to_string(hp.n_embd) +
                                     " is not a multiple of the head count " +
                                     std::to_string(hp.n_head));
    }
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  hp.n_rot = r.positive_int_or("rope.dimension_count", hp.head_dim, hp.head_dim);
  if (hp.n_rot % 2 != 0) bad(LILIMS_ERR_BAD_FORMAT, r.key("rope.dimension_count") + " must be even");
  hp.rope_freq_base = r.positive_float_or("rope.freq_base", 10000.0, 1e12);
  hp.rope_neox = desc.rope_neox;
  hp.norm_eps = r.positive_float_or(
      desc.layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon", 1e-5, 1.0);
  // Scalings lilims does not implement would give a model that runs and
  // says the wrong things: refuse them.  Linear scaling divides positions
  // by the factor (Gemma 3 4B and up: its global layers); phi3's longrope
  // is read by the family.
  const std::string scaling = f.get_string_or(r.key("rope.scaling.type"), "none");
  const bool longrope = hp.arch == Arch::phi3 && (scaling == "longrope" || scaling == "su");
  if (scaling != "none" && scaling != "linear" && !longrope) {
    bad(LILIMS_ERR_UNSUPPORTED, r.key("rope.scaling.type") + " '" + scaling + "' is not supported");
  }
  const float factor = r.positive_float_or("rope.scaling.factor", 1.0, 1e6);
  if (scaling == "linear") {
    hp.rope_freq_scale = 1.0f / factor;
  } else if (factor != 1.0f && !longrope) {
    bad(LILIMS_ERR_UNSUPPORTED, r.key("rope.scaling.factor") + " other than 1 needs a rope.scaling.type lilims implements");
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
    if (r.has_tensor("output.bias")) bad(LILIMS_ERR_BAD_FORMAT, "output.bias without output.weight");
    m.output = r.weight("token_embd.weight", hp.n_vocab, hp.n_embd);
    m.tied_output = true;
  }
}

}  // namespace

const kernels::PackedWeight& embedding_table(const Model& m) {
  const bool packed_copy = m.tied_output && m.output.packed.layout != kernels::kLayoutGguf &&
                           m.output.packed.type == m.tok_embd.type;
  return packed_copy ? m.output.packed : m.tok_embd.packed;
}

void dequantize_row(const Weight& w, int64_t row, float* out) {
  quant::row_to_float(w.packed.type, w.packed.layout, w.packed.data, w.cols, row, out);
}

std::string describe_copies(const Model& m) {
  std::vector<std::pair<uint64_t, std::string>> by_size;
  for (const auto& [why, n] : m.copied) by_size.emplace_back(n, why);
  std::sort(by_size.begin(), by_size.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (const auto& [n, why] : by_size) {
    char size[32];
    std::snprintf(size, sizeof size, "%.1f MiB: ", (double)n / (1 << 20));
    out += (out.empty() ? "" : "; ") + std::string(size) + why;
  }
  return out;
}

uint64_t Model::mapped_weight_bytes() const {
  uint64_t n = 0;
  auto count = [&](const Weight& w) {
    if (!w.present() || !w.packed.storage.empty() || w.requantized) return;
    n += w.prelaid.layout != kernels::kLayoutGguf ? quant::prelaid_bytes(w.prelaid, w.rows, w.cols)
                                                  : quant::row_bytes(w.type, w.cols) * w.rows;
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
  const ArchDesc* desc = find_arch(arch);
  if (!desc) {
    bad(LILIMS_ERR_UNSUPPORTED, "architecture '" + arch + "' is not supported (lilims runs " + arch_list() + ")");
  }
  auto m = std::make_unique<Model>();
  HParams& hp = m->hp;
  hp.arch = desc->arch;
  Reader r(f, arch, opt);
  read_common(r, f, *desc, hp);
  desc->read_hparams(r, hp);
  if (hp.sliding_window > hp.n_ctx_train) {
    bad(LILIMS_ERR_BAD_FORMAT, r.key("attention.sliding_window") + " = " + std::to_string(hp.sliding_window) +
                                   " is larger than the context length " + std::to_string(hp.n_ctx_train));
  }

  const auto t0 = std::chrono::steady_clock::now();
  // The embedding table is only ever read row by row: never repacked.
  m->tok_embd = r.weight("token_embd.weight", hp.n_vocab, hp.n_embd, false);
  m->layers.resize((size_t)hp.n_layer);
  desc->load_layers(r, *m);
  read_output(r, *m, desc->layer_norm);
  r.check_all_taken();
  m->n_params = r.n_params();
  m->repack_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto count = [&](const Weight& w) {
    m->repacked_bytes += w.packed.storage.size();
    if (w.requantized) m->requantized_bytes += w.requantized->size();
    const uint64_t copy = w.packed.storage.size() + (w.requantized ? w.requantized->size() : 0);
    if (copy > 0) m->copied[w.copy_reason] += copy;
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
