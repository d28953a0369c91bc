// Writes the seed corpus of fuzz_gguf (tests/fuzz/corpus/gguf/) with
// gguf::Writer: small files that reach every part of the reader and of what
// is built from it.
//   build/tests/fuzz/make_gguf_corpus tests/fuzz/corpus/gguf
//   tiny_llama_<type>.gguf  a 1-layer llama (n_embd 32, 2 heads, 1 KV head,
//                           n_ff 32) with an 8-token SentencePiece
//                           vocabulary, weights in F32, F16, Q8_0, Q4_0, Q4_1;
//                           q4_k_m: n_embd 256, n_ff 256, Q4_K with a Q5_K
//                           attn_v and a Q6_K ffn_down (as Q4_K_M files mix)
//   tiny_llama_<type>_<target>.gguf  the Q8_0/Q4_0/Q4_1 ones laid out for
//                           the kernels (`quantize --layout`)
//   vocab_bpe.gguf          a byte-level BPE vocabulary with merges, no tensors
//   every_value.gguf        one key of each value type, nested arrays
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "models/layout_file.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace {

using lilims::gguf::Value;
using lilims::gguf::ValueType;
using lilims::gguf::Writer;

// Deterministic small weights: no RNG state to keep in step.
std::vector<float> weights(size_t n, float scale, int salt) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = scale * static_cast<float>(((k * 37 + salt * 11) % 17)) / 17.0f - scale / 2;
  return v;
}

void add(Writer& w, const std::string& name, uint64_t cols, uint64_t rows, lilims::quant::Type type, int salt) {
  const std::vector<float> x = weights(cols * rows, 0.2f, salt);
  const lilims::quant::TypeTraits* tr = lilims::quant::type_traits(static_cast<uint32_t>(type));
  const size_t row_bytes = cols / tr->block_size * tr->block_bytes;
  std::vector<uint8_t> data(row_bytes * rows);
  if (!tr->from_float) {
    // The K-quants (read, never written by lilims): deterministic bytes, then
    // finite fp16 scales where each super-block keeps them (d, dmin first;
    // Q6_K's d last).
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>((k * 37 + salt * 11) % 251);
    const uint16_t d = 0x1400, dmin = 0x1000;  // 2^-10, 2^-11
    for (size_t o = 0; o < data.size(); o += tr->block_bytes) {
      if (type == lilims::quant::Type::Q6_K) {
        std::memcpy(&data[o + tr->block_bytes - 2], &d, 2);
      } else {
        std::memcpy(&data[o], &d, 2);
        std::memcpy(&data[o + 2], &dmin, 2);
      }
    }
  }
  for (uint64_t r = 0; r < rows && tr->from_float; ++r) {
    lilims::quant::quantize_row(type, x.data() + r * cols, data.data() + r * row_bytes,
                                static_cast<int64_t>(cols), lilims::quant::QuantMethod::search);
  }
  std::vector<uint64_t> ne = {cols};
  if (rows > 1) ne.push_back(rows);
  w.add_tensor(name, ne, static_cast<uint32_t>(type), data.data(), data.size());
}

Writer tiny_llama(lilims::quant::Type wtype) {
  using lilims::quant::Type;
  // K-quant files (Q4_K_M-like: Q5_K attn_v, Q6_K ffn_down) need rows of 256.
  const bool kq = lilims::quant::traits(wtype).block_size == 256;
  const uint64_t d = kq ? 256 : 32, ff = d, kv = d / 2, vocab = 8;
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "tiny");
  w.add_u32("llama.block_count", 1);
  w.add_u32("llama.embedding_length", d);
  w.add_u32("llama.feed_forward_length", ff);
  w.add_u32("llama.attention.head_count", 2);
  w.add_u32("llama.attention.head_count_kv", 1);
  w.add_u32("llama.context_length", 64);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens",
                     {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "<|im_start|>"});
  w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3, -1.5f, 0});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 4});
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}");
  add(w, "token_embd.weight", d, vocab, Type::F32, 1);
  add(w, "blk.0.attn_norm.weight", d, 1, Type::F32, 2);
  add(w, "blk.0.attn_q.weight", d, d, wtype, 3);
  add(w, "blk.0.attn_k.weight", d, kv, wtype, 4);
  add(w, "blk.0.attn_v.weight", d, kv, kq ? Type::Q5_K : wtype, 5);
  add(w, "blk.0.attn_output.weight", d, d, wtype, 6);
  add(w, "blk.0.ffn_norm.weight", d, 1, Type::F32, 7);
  add(w, "blk.0.ffn_gate.weight", d, ff, wtype, 8);
  add(w, "blk.0.ffn_up.weight", d, ff, wtype, 9);
  add(w, "blk.0.ffn_down.weight", ff, d, kq ? Type::Q6_K : wtype, 10);
  add(w, "output_norm.weight", d, 1, Type::F32, 11);
  return w;
}

Writer vocab_bpe() {
  Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "smollm");
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'h'; ++c) tokens.push_back(std::string(1, c));
  tokens.push_back("\xc4\xa0");  // the byte-level BPE code point of ' '
  tokens.push_back("ab");
  tokens.push_back("\xc4\xa0" "a");
  tokens.push_back("<|endoftext|>");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", {"a b", "\xc4\xa0 a"});
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
  return w;
}

Value scalar(ValueType t, int64_t i, double f = 0) {
  Value v;
  v.type = t;
  v.i = i;
  v.u = i < 0 ? 0 : static_cast<uint64_t>(i);
  v.f = f;
  return v;
}

Writer every_value() {
  Writer w;
  w.set_alignment(64);
  w.add("v.u8", scalar(ValueType::UINT8, 200));
  w.add("v.i8", scalar(ValueType::INT8, -100));
  w.add("v.u16", scalar(ValueType::UINT16, 60000));
  w.add("v.i16", scalar(ValueType::INT16, -30000));
  w.add_u32("v.u32", 4000000000u);
  w.add_i32("v.i32", -2000000000);
  w.add_f32("v.f32", 1.5f);
  w.add_bool("v.bool", true);
  w.add_string("v.str", "h\xc3\xa9llo");
  w.add("v.u64", scalar(ValueType::UINT64, 1234567890123));
  w.add("v.i64", scalar(ValueType::INT64, -1234567890123));
  w.add("v.f64", scalar(ValueType::FLOAT64, 0, 2.5));
  w.add("v.arr_bool", Value::array(ValueType::BOOL, {scalar(ValueType::BOOL, 0), scalar(ValueType::BOOL, 1)}));
  w.add_string_array("v.arr_str", {"", "one", "two"});
  Value s;
  s.type = ValueType::STRING;
  s.s = "x";
  w.add("v.nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING, {s, s}),
                                                   Value::array(ValueType::UINT16, {scalar(ValueType::UINT16, 9)})}));
  const std::vector<float> t(8, 0.5f);
  w.add_tensor("t", {8}, 0, t.data(), t.size() * 4);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_gguf_corpus DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    using lilims::quant::Type;
    const std::pair<const char*, Type> types[] = {
        {"f32", Type::F32}, {"f16", Type::F16}, {"q8_0", Type::Q8_0}, {"q4_0", Type::Q4_0}, {"q4_1", Type::Q4_1},
        {"q4_k_m", Type::Q4_K}};
    for (const auto& [name, type] : types) tiny_llama(type).write(dir + "/tiny_llama_" + name + ".gguf");
    // Laid out for the kernels (quant/prelaid.h): 4-row groups (x86 and
    // aarch64 Q4_0 nibbles) and 16-row groups.
    const std::pair<const char*, Type> laid[] = {{"q4_0", Type::Q4_0}, {"q4_1", Type::Q4_1}, {"q8_0", Type::Q8_0}};
    for (const auto& [name, type] : laid) {
      const std::vector<uint8_t> plain = tiny_llama(type).to_bytes();
      auto f = lilims::gguf::File::from_bytes(plain.data(), plain.size());
      for (const char* target : {"avx2", "avx512vnni", "neon"}) {
        if (std::string(target) == "neon" && type != Type::Q4_0) continue;  // the same bytes as avx2
        lilims::gguf::lay_out(*f, target).write(dir + "/tiny_llama_" + name + "_" + target + ".gguf");
      }
    }
    vocab_bpe().write(dir + "/vocab_bpe.gguf");
    every_value().write(dir + "/every_value.gguf");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_gguf_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
