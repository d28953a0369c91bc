// gen_random_gguf: a GGUF model of a real model's shape with random weights,
// for speed comparisons where only the shape and the weight format matter
// (bench/race.sh).  Both lilims and llama.cpp load it: the metadata follows
// llama.cpp's key and tensor names, and the tokenizer is copied from another
// GGUF (padded with placeholder tokens when the shape's vocabulary is larger).
//
//   gen_random_gguf --shape smollm2|tinyllama|phi3 --type f16|q8_0|q4_0|q4_1|q4_k_m
//                   --vocab-from TOKENIZER.gguf -o OUT.gguf [--seed S]
//
// Every 2-D weight (the embedding table and the LM head included, as
// llama-quantize --pure makes them) is in the chosen type, norms in F32.
// q4_k_m mixes types as llama-quantize's Q4_K_M does: Q6_K for the LM head
// and for attn_v / ffn_down of the layers llama.cpp gives more bits (the
// first and last eighth, every third between), Q4_K elsewhere.  lilims
// writes no K-quants, so their blocks are random bytes under fixed finite
// scales (d 2^-10, dmin 2^-11): only the speed of such a file means anything.
// Weights are uniform in [-0.035, 0.035] (standard deviation ~0.02, as
// initialisations use), norms 1.
//
// gguf::Writer builds the metadata; the tensor data is streamed row by row
// after it, so a 7.6 GB F16 Phi-3 never sits in memory.  The file is written
// under a temporary name, reopened with gguf::File (which checks every
// offset and size) and only then renamed into place.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace {

using namespace lilims;

struct Shape {
  const char* name;
  const char* arch;    // general.architecture
  int32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base;
  bool tied;           // LM head shares the embedding table (no output.weight)
  bool fused;          // phi3: attn_qkv and a gate+up ffn_up
  // The model's first token past the copied vocabulary, when llama.cpp looks
  // it up by name (its phi3 vocabulary code needs "<|endoftext|>").
  const char* first_added;
};

// Hyperparameters of the released checkpoints (their config.json).
const Shape kShapes[] = {
    {"smollm2", "llama", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true, false, ""},
    {"tinyllama", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, false, false, ""},
    {"phi3", "phi3", 3072, 32, 32, 32, 8192, 32064, 4096, 10000.0f, false, true, "<|endoftext|>"},
};

struct TensorSpec {
  std::string name;
  int64_t cols, rows;  // GGUF ne = {cols, rows}; rows = 1 for a 1-D tensor
  bool is_norm;
};

std::vector<TensorSpec> tensors_of(const Shape& s) {
  const int64_t head_dim = s.n_embd / s.n_head, kv = (int64_t)s.n_head_kv * head_dim;
  std::vector<TensorSpec> t;
  t.push_back({"token_embd.weight", s.n_embd, s.n_vocab, false});
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "attn_norm.weight", s.n_embd, 1, true});
    if (s.fused) {
      t.push_back({p + "attn_qkv.weight", s.n_embd, s.n_embd + 2 * kv, false});
    } else {
      t.push_back({p + "attn_q.weight", s.n_embd, s.n_embd, false});
      t.push_back({p + "attn_k.weight", s.n_embd, kv, false});
      t.push_back({p + "attn_v.weight", s.n_embd, kv, false});
    }
    t.push_back({p + "attn_output.weight", s.n_embd, s.n_embd, false});
    t.push_back({p + "ffn_norm.weight", s.n_embd, 1, true});
    if (s.fused) {
      t.push_back({p + "ffn_up.weight", s.n_embd, 2 * (int64_t)s.n_ff, false});
    } else {
      t.push_back({p + "ffn_gate.weight", s.n_embd, s.n_ff, false});
      t.push_back({p + "ffn_up.weight", s.n_embd, s.n_ff, false});
    }
    t.push_back({p + "ffn_down.weight", s.n_ff, s.n_embd, false});
  }
  t.push_back({"output_norm.weight", s.n_embd, 1, true});
  if (!s.tied) t.push_back({"output.weight", s.n_embd, s.n_vocab, false});
  return t;
}

// xorshift64*: fast, and the same bytes for the same seed on every machine.
struct Rng {
  uint64_t state;
  float uniform() {  // in [-1, 1)
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    const uint64_t r = state * 0x2545F4914F6CDD1DULL;
    return (float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back((uint8_t)(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back((uint8_t)(v >> (8 * i)));
}

// The shape's metadata and the tokenizer of `vocab_from`, padded to n_vocab.
gguf::Writer metadata(const Shape& s, int file_type, const gguf::File& vocab_from,
                      uint32_t alignment) {
  gguf::Writer w;
  const std::string a = s.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", std::string(s.name) + " shape, random weights");
  w.set_alignment(alignment);
  w.add_u32(a + ".context_length", (uint32_t)s.n_ctx);
  w.add_u32(a + ".embedding_length", (uint32_t)s.n_embd);
  w.add_u32(a + ".block_count", (uint32_t)s.n_layer);
  w.add_u32(a + ".feed_forward_length", (uint32_t)s.n_ff);
  w.add_u32(a + ".attention.head_count", (uint32_t)s.n_head);
  w.add_u32(a + ".attention.head_count_kv", (uint32_t)s.n_head_kv);
  w.add_u32(a + ".rope.dimension_count", (uint32_t)(s.n_embd / s.n_head));
  w.add_f32(a + ".rope.freq_base", s.rope_base);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_u32(a + ".vocab_size", (uint32_t)s.n_vocab);
  w.add_u32("general.file_type", (uint32_t)file_type);
  w.add_u32("general.quantization_version", 2);

  const gguf::Value* tokens = vocab_from.find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::ARRAY) {
    throw std::invalid_argument(vocab_from.path() + " has no tokenizer.ggml.tokens");
  }
  const size_t n_src = tokens->size();
  if (n_src > (size_t)s.n_vocab) {
    throw std::invalid_argument(vocab_from.path() + " has " + std::to_string(n_src) +
                                " tokens, more than the " + s.name + " shape's " +
                                std::to_string(s.n_vocab));
  }
  for (const gguf::KeyValue& kv : vocab_from.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    gguf::Value v = kv.value;
    // Per-token arrays grow to the shape's vocabulary with placeholders that
    // llama.cpp loads as user-defined tokens (type 4), score 0, after the
    // shape's named first token (a control token, type 3) if it has one.
    if (v.type == gguf::ValueType::ARRAY && v.size() == n_src) {
      std::vector<gguf::Value> items;
      items.reserve((size_t)s.n_vocab);
      for (size_t i = 0; i < n_src; ++i) items.push_back(v.at(i));
      for (size_t i = n_src; i < (size_t)s.n_vocab; ++i) {
        gguf::Value e;
        e.type = v.elem_type;
        const bool named = i == n_src && s.first_added[0];
        if (kv.key == "tokenizer.ggml.tokens") {
          e.s = named ? s.first_added : "<|placeholder" + std::to_string(i - n_src) + "|>";
        } else if (kv.key == "tokenizer.ggml.token_type") {
          e.i = e.u = named ? 3 : 4;  // control, user-defined
        }
        items.push_back(e);
      }
      v = gguf::Value::array(v.elem_type, items);
    }
    w.add(kv.key, v);
  }
  return w;
}

void write_all(FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n) {
    throw Error(LILIMS_ERR_IO, "cannot write " + path + ": " + std::strerror(errno));
  }
}

// Layer index of "blk.N.*" (-1 otherwise).
int layer_of(const std::string& name) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  return std::atoi(name.c_str() + 4);
}


// The type of a tensor: `type`, or for kQ4_K_M (type Q4_K) llama.cpp's mix.
quant::Type type_of(const Shape& s, const TensorSpec& t, quant::Type type) {
  if (t.is_norm) return quant::Type::F32;
  if (type != quant::Type::Q4_K) return type;
  if (t.name == "output.weight") return quant::Type::Q6_K;
  const int i = layer_of(t.name), n = (int)s.n_layer;
  const bool more_bits = i >= 0 && (i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2);
  if (more_bits && (ends_with(t.name, "attn_v.weight") || ends_with(t.name, "ffn_down.weight"))) {
    return quant::Type::Q6_K;
  }
  return quant::Type::Q4_K;
}

// A K-quant row: random bytes, then the fp16 scales at their offsets.
void random_k_row(quant::Type t, Rng& rng, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = (uint8_t)(rng.uniform() * 127.0f + 128.0f);
  const size_t bb = quant::traits(t).block_bytes;
  const uint16_t d = 0x1400, dmin = 0x1000;  // 2^-10, 2^-11
  for (size_t o = 0; o < n; o += bb) {
    if (t == quant::Type::Q6_K) {
      std::memcpy(out + o + bb - 2, &d, 2);
    } else {
      std::memcpy(out + o, &d, 2);
      std::memcpy(out + o + 2, &dmin, 2);
    }
  }
}

void generate(const Shape& s, quant::Type type, const std::string& vocab_path,
              const std::string& out_path, uint64_t seed) {
  constexpr uint32_t kAlign = 32;
  auto vocab_from = gguf::File::open(vocab_path);
  const std::vector<TensorSpec> specs = tensors_of(s);

  // LLAMA_FTYPE_MOSTLY_Q4_K_M is 15.
  const int ftype = type == quant::Type::Q4_K ? 15 : gguf::file_type_of(type);
  std::vector<uint8_t> head = metadata(s, ftype, *vocab_from, kAlign).to_bytes();
  // The Writer wrote a file without tensors: set the count (bytes 8..15 of
  // the header) and append the tensor infos it would have written.
  for (int i = 0; i < 8; ++i) head[8 + i] = (uint8_t)((uint64_t)specs.size() >> (8 * i));
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorSpec& t : specs) {
    const quant::Type tt = type_of(s, t, type);
    const uint64_t bytes = (uint64_t)t.rows * quant::row_bytes(tt, t.cols);
    put_u64(head, t.name.size());
    head.insert(head.end(), t.name.begin(), t.name.end());
    put_u32(head, t.is_norm ? 1 : 2);
    put_u64(head, (uint64_t)t.cols);
    if (!t.is_norm) put_u64(head, (uint64_t)t.rows);
    put_u32(head, (uint32_t)tt);
    put_u64(head, offset);
    sizes.push_back(bytes);
    offset += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, 0);

  const std::string tmp = out_path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(LILIMS_ERR_IO, "cannot create " + tmp + ": " + std::strerror(errno));
  try {
    write_all(f, head.data(), head.size(), tmp);
    Rng rng{seed * 0x9E3779B97F4A7C15ULL + 1};
    std::vector<float> row;
    std::vector<uint8_t> packed;
    const uint8_t zeros[kAlign] = {};
    for (size_t k = 0; k < specs.size(); ++k) {
      const TensorSpec& t = specs[k];
      const quant::Type tt = type_of(s, t, type);
      row.resize((size_t)t.cols);
      packed.resize(quant::row_bytes(tt, t.cols));
      for (int64_t r = 0; r < t.rows; ++r) {
        if (!quant::traits(tt).from_float) {
          random_k_row(tt, rng, packed.data(), packed.size());
          write_all(f, packed.data(), packed.size(), tmp);
          continue;
        }
        for (float& x : row) x = t.is_norm ? 1.0f : 0.035f * rng.uniform();
        if (!quant::quantize_row(tt, row.data(), packed.data(), t.cols)) {
          throw std::invalid_argument("cannot write tensors of this type");
        }
        write_all(f, packed.data(), packed.size(), tmp);
      }
      write_all(f, zeros, (kAlign - sizes[k] % kAlign) % kAlign, tmp);
    }
    if (std::fclose(f) != 0) {
      f = nullptr;
      throw Error(LILIMS_ERR_IO, "cannot write " + tmp + ": " + std::strerror(errno));
    }
    f = nullptr;
    auto check = gguf::File::open(tmp);
    if (check->tensors().size() != specs.size()) {
      throw Error(LILIMS_ERR_BAD_FORMAT, tmp + " reads back with a different tensor count");
    }
    if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
      throw Error(LILIMS_ERR_IO, "cannot rename " + tmp + ": " + std::strerror(errno));
    }
  } catch (...) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
}

int usage() {
  std::fprintf(stderr,
               "usage: gen_random_gguf --shape smollm2|tinyllama|phi3 "
               "--type f16|q8_0|q4_0|q4_1|q4_k_m\n"
               "                       --vocab-from TOKENIZER.gguf -o OUT.gguf [--seed S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const Shape* shape = nullptr;
  quant::Type type = quant::Type::F32;
  std::string vocab, out, type_name;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--shape") {
      for (const Shape& s : kShapes) {
        if (v == s.name) shape = &s;
      }
      if (!shape) return usage();
    } else if (a == "--type") {
      type_name = v;
      if (v == "f16") type = quant::Type::F16;
      else if (v == "q8_0") type = quant::Type::Q8_0;
      else if (v == "q4_0") type = quant::Type::Q4_0;
      else if (v == "q4_1") type = quant::Type::Q4_1;
      else if (v == "q4_k_m") type = quant::Type::Q4_K;
      else return usage();
    } else if (a == "--vocab-from") {
      vocab = v;
    } else if (a == "-o") {
      out = v;
    } else if (a == "--seed") {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else {
      return usage();
    }
  }
  if (!shape || type_name.empty() || vocab.empty() || out.empty()) return usage();
  try {
    generate(*shape, type, vocab, out, seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gen_random_gguf: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "gen_random_gguf: wrote %s (%s shape, %s)\n", out.c_str(), shape->name,
               type_name.c_str());
  return 0;
}
