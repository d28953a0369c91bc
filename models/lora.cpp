#include "models/lora.h"

#include "graph/executor.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <new>

#include "base/error.h"
#include "base/fp16.h"
#include "base/strings.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace lilims::models {
namespace {

[[noreturn]] void fail(lilims_status s, const std::string& what) { throw Error(s, "[lora] " + what); }

// Tensor t (rows x cols as its ne says: ne[0] = cols) as floats, refusing
// types without a reference conversion and values that are not finite.
std::vector<float> floats_of(const gguf::TensorInfo& t) {
  const quant::TypeTraits* tr = quant::type_traits(t.type);
  if (!tr || !tr->to_float || !t.data) {
    fail(LILIMS_ERR_UNSUPPORTED, t.name + ": tensor type " + quant::ggml_type_name(t.type) +
                                     " is not supported for adapters (F32, F16, Q8_0, Q4_0, Q4_1)");
  }
  const int64_t cols = (int64_t)t.ne[0], rows = (int64_t)t.n_elements / std::max<int64_t>(1, cols);
  if (cols % tr->block_size != 0) {
    fail(LILIMS_ERR_BAD_FORMAT, t.name + ": " + std::to_string(cols) + " columns are not whole " +
                                    tr->name + " blocks");
  }
  std::vector<float> out((size_t)t.n_elements);
  const size_t rb = quant::row_bytes(tr->type, cols);
  for (int64_t r = 0; r < rows; ++r) tr->to_float(t.data + (size_t)r * rb, out.data() + (size_t)r * cols, cols);
  for (float v : out) {
    if (!std::isfinite(v)) fail(LILIMS_ERR_BAD_FORMAT, t.name + ": holds a value that is not finite");
  }
  return out;
}

}  // namespace

const LoraWeight* LoraAdapter::find(const std::string& target) const {
  for (const LoraWeight& w : weights) {
    if (w.target == target) return &w;
  }
  return nullptr;
}

std::vector<AdaptableWeight> adaptable_weights(const Model& m) {
  std::vector<AdaptableWeight> out;
  auto add = [&](const Weight& w) {
    if (!w.present()) return;
    if (w.parts.empty()) {
      out.push_back({w.name, w.cols, w.rows});
      return;
    }
    for (size_t p = 0; p < w.parts.size(); ++p) out.push_back({w.parts[p], w.cols, w.part_rows[p]});
  };
  for (const Layer& L : m.layers) {
    for (const Weight* w : L.weights()) add(*w);
  }
  if (!m.tied_output) add(m.output);
  out.push_back({m.tok_embd.name, m.tok_embd.rows, m.tok_embd.cols, true});
  return out;
}

std::unique_ptr<LoraAdapter> load_lora(const gguf::File& f, const Model& base) {
  const std::string type = f.get_string_or("general.type", "");
  if (type != "adapter") {
    fail(LILIMS_ERR_BAD_FORMAT, "general.type is '" + type + "', not 'adapter': not a LoRA adapter file");
  }
  const std::string atype = f.get_string_or("adapter.type", "");
  if (atype != "lora") fail(LILIMS_ERR_BAD_FORMAT, "adapter.type is '" + atype + "', not 'lora'");
  auto ad = std::make_unique<LoraAdapter>();
  ad->arch = f.get_string_or("general.architecture", "");
  ad->name = f.get_string_or("general.name", "");
  ad->tool_format = f.get_string_or("lilims.tool_format", "");
  const char* base_arch = arch_name(base.hp.arch);
  if (ad->arch != base_arch) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, "general.architecture: the adapter is for '" + ad->arch +
                                          "', the model is '" + base_arch + "'");
  }
  const double alpha = f.get_float_or("adapter.lora.alpha", 0.0);
  if (!std::isfinite(alpha)) fail(LILIMS_ERR_BAD_FORMAT, "adapter.lora.alpha is not finite");
  ad->alpha = (float)alpha;

  std::map<std::string, AdaptableWeight> targets;
  for (const AdaptableWeight& w : adaptable_weights(base)) targets[w.name] = w;

  // Pair X.lora_a with X.lora_b, in file order of the first seen.
  std::vector<std::string> order;
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const bool is_a = ends_with(t.name, ".lora_a"), is_b = ends_with(t.name, ".lora_b");
    if (!is_a && !is_b) fail(LILIMS_ERR_BAD_FORMAT, t.name + ": not a .lora_a or .lora_b tensor");
    const std::string target = t.name.substr(0, t.name.size() - 7);
    auto& p = pairs[target];
    if (!p.first && !p.second) order.push_back(target);
    (is_a ? p.first : p.second) = &t;
  }
  if (order.empty()) fail(LILIMS_ERR_BAD_FORMAT, "the adapter holds no tensors");
  // The graph's order (a name that names no weight sorts last, to be refused below).
  std::map<std::string, size_t> rank_of;
  for (const AdaptableWeight& w : adaptable_weights(base)) rank_of.emplace(w.name, rank_of.size());
  std::stable_sort(order.begin(), order.end(), [&](const std::string& x, const std::string& y) {
    const auto ix = rank_of.find(x), iy = rank_of.find(y);
    return (ix == rank_of.end() ? SIZE_MAX : ix->second) < (iy == rank_of.end() ? SIZE_MAX : iy->second);
  });
  kernels::WeightArena arena;

  ad->weights.reserve(order.size());
  for (const std::string& target : order) {
    const gguf::TensorInfo* ta = pairs[target].first;
    const gguf::TensorInfo* tb = pairs[target].second;
    if (!ta) fail(LILIMS_ERR_BAD_FORMAT, target + ".lora_b has no " + target + ".lora_a");
    if (!tb) fail(LILIMS_ERR_BAD_FORMAT, target + ".lora_a has no " + target + ".lora_b");
    const auto it = targets.find(target);
    if (it == targets.end()) {
      fail(LILIMS_ERR_INVALID_ARGUMENT, ta->name + ": the model has no weight '" + target +
                                            "' that an adapter can adapt (an adapter for another model?)");
    }
    const AdaptableWeight& tw = it->second;
    if (ta->ne.size() != 2 || tb->ne.size() != 2) {
      fail(LILIMS_ERR_BAD_FORMAT, target + ": lora_a and lora_b must be 2-D");
    }
    // (n_in, n_out): A ne [n_in, rank], B ne [rank, n_out]; the embedding's
    // A ne [rank, n_vocab].
    const uint64_t rank = tw.embedding ? ta->ne[0] : ta->ne[1];
    const uint64_t a_in = tw.embedding ? ta->ne[1] : ta->ne[0];
    if (a_in != (uint64_t)tw.n_in) {
      fail(LILIMS_ERR_INVALID_ARGUMENT, ta->name + ": " + std::to_string(a_in) + (tw.embedding ? " rows" : " inputs") +
                                            ", the model's weight has " + std::to_string(tw.n_in));
    }
    if (tb->ne[1] != (uint64_t)tw.n_out) {
      fail(LILIMS_ERR_INVALID_ARGUMENT, tb->name + ": " + std::to_string(tb->ne[1]) +
                                            " outputs, the model's weight has " + std::to_string(tw.n_out));
    }
    if (tb->ne[0] != rank) {
      fail(LILIMS_ERR_BAD_FORMAT, target + ": lora_a has rank " + std::to_string(rank) +
                                      ", lora_b rank " + std::to_string(tb->ne[0]));
    }
    if (rank == 0 || rank > 4096) {
      fail(LILIMS_ERR_BAD_FORMAT, ta->name + ": rank " + std::to_string(rank) + " is out of range (1..4096)");
    }
    LoraWeight w;
    w.target = target;
    w.rank = (int32_t)rank;
    w.n_in = tw.n_in;
    w.n_out = tw.n_out;
    w.embedding = tw.embedding;
    try {
      std::vector<float> a = floats_of(*ta);  // (rank, n_in); the embedding's (n_vocab, rank)
      const std::vector<float> b = floats_of(*tb);  // (n_out, rank)
      if (w.embedding) {
        w.a_rows = std::move(a);
      } else {
      const quant::Type at = w.n_in % quant::kBlock == 0 ? quant::Type::Q8_0 : quant::Type::F32;
      const size_t rb = quant::row_bytes(at, w.n_in);
      w.a_bytes.resize(rb * rank);
      for (uint64_t r = 0; r < rank; ++r) {
        quant::quantize_row(at, a.data() + r * (size_t)w.n_in, w.a_bytes.data() + r * rb, w.n_in);
      }
      w.a = kernels::pack_weight(at, w.a_bytes.data(), w.rank, w.n_in, /*allow_repack=*/true, {}, 1, &arena);
      if (!w.a.storage.empty()) std::vector<uint8_t>().swap(w.a_bytes);  // repacked: the copy is enough
      }
      // Row k of B^T, one piece of columns at a time, quantized in 32-blocks
      // (zeros past n_out in the last block).
      const int64_t padded = (w.n_out + quant::kBlock - 1) / quant::kBlock * quant::kBlock;
      w.b = arena.take((size_t)padded / quant::kBlock * rank * sizeof(quant::BlockQ8_0));
      std::vector<float> col(graph::kLoraPiece);
      for (int64_t c0 = 0; c0 < padded; c0 += graph::kLoraPiece) {
        const int64_t width = std::min<int64_t>(graph::kLoraPiece, padded - c0);
        uint8_t* piece = w.b.data() + (size_t)(c0 / quant::kBlock) * rank * sizeof(quant::BlockQ8_0);
        for (uint64_t k = 0; k < rank; ++k) {
          for (int64_t c = 0; c < width; ++c) {
            col[(size_t)c] = c0 + c < w.n_out ? b[(size_t)(c0 + c) * rank + k] : 0.0f;
          }
          quant::quantize_row(quant::Type::Q8_0, col.data(),
                              piece + k * (size_t)(width / quant::kBlock) * sizeof(quant::BlockQ8_0), width);
        }
      }
    } catch (const std::bad_alloc&) {
      fail(LILIMS_ERR_OUT_OF_MEMORY, target + ": no memory for the adapter's weights");
    }
    ad->bytes += w.a.storage.size() + w.a_bytes.size() + w.b.size() + w.a_rows.size() * sizeof(float);
    ad->weights.push_back(std::move(w));
  }
  return ad;
}

gguf::Writer merge_lora(const gguf::File& base_file, const Model& model, const gguf::File& adapter,
                        float user_scale, quant::Type type) {
  const quant::TypeTraits& tt = quant::traits(type);
  if (!(tt.quantizers & quant::kQuantPlain)) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, std::string("cannot write merged weights as ") + tt.name);
  }
  const std::unique_ptr<LoraAdapter> ad = load_lora(adapter, model);  // the checks
  gguf::Writer out;
  if (base_file.find("general.alignment")) out.set_alignment((uint32_t)base_file.alignment());
  for (const gguf::KeyValue& kv : base_file.metadata()) out.add(kv.key, kv.value);
  for (const gguf::TensorInfo& t : base_file.tensors()) {
    const LoraWeight* w = ad->find(t.name);
    if (!w) {
      out.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
      continue;
    }
    if (w->embedding && model.tied_output) {
      fail(LILIMS_ERR_INVALID_ARGUMENT, t.name + ": the model's LM head is this table; merged, the adapter "
                                                 "would change the head too, which applied unmerged it does not");
    }
    const quant::TypeTraits* rt = quant::readable_traits(t.type);
    if (!t.data || !rt) {
      fail(LILIMS_ERR_UNSUPPORTED, t.name + ": cannot read its type " + quant::ggml_type_name(t.type));
    }
    const int64_t cols = (int64_t)t.ne[0], rows = (int64_t)t.ne[1];  // the embedding's: n_embd, n_vocab
    if (cols % tt.block_size != 0) {
      fail(LILIMS_ERR_INVALID_ARGUMENT, t.name + ": " + std::to_string(cols) +
                                            " columns are not whole " + tt.name + " blocks");
    }
    const std::vector<float> a = floats_of(*adapter.find_tensor(t.name + ".lora_a"));  // (rank, n_in)
    const std::vector<float> b = floats_of(*adapter.find_tensor(t.name + ".lora_b"));  // (n_out, rank)
    const float s = ad->scale(*w, user_scale);
    const size_t in_rb = quant::row_bytes(rt->type, cols);
    const size_t out_rb = quant::row_bytes(type, cols);
    std::vector<float> row((size_t)cols);
    std::vector<uint8_t> bytes(out_rb * (size_t)rows);
    for (int64_t o = 0; o < rows; ++o) {
      rt->to_float(t.data + (size_t)o * in_rb, row.data(), cols);
      for (int32_t k = 0; k < w->rank && !w->embedding; ++k) {
        const float c = s * b[(size_t)o * (size_t)w->rank + (size_t)k];
        const float* ak = a.data() + (size_t)k * (size_t)cols;
        for (int64_t i = 0; i < cols; ++i) row[(size_t)i] += c * ak[i];
      }
      for (int32_t k = 0; k < w->rank && w->embedding; ++k) {  // row o is token o's: += s B a_row(o)
        const float c = s * a[(size_t)o * (size_t)w->rank + (size_t)k];
        for (int64_t i = 0; i < cols; ++i) row[(size_t)i] += c * b[(size_t)i * (size_t)w->rank + (size_t)k];
      }
      quant::quantize_row(type, row.data(), bytes.data() + (size_t)o * out_rb, cols);
    }
    out.add_tensor(t.name, t.ne, (uint32_t)type, bytes.data(), bytes.size());
  }
  return out;
}

}  // namespace lilims::models
