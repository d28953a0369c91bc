// llama2.c .bin (+ tokenizer.bin) -> GGUF.  Formats: LLAMA2C_NOTES.md.
#include "models/convert_llama2c.h"

#include <climits>
#include <cstring>

#include "base/error.h"
#include "base/file.h"

namespace lilims::models {
namespace {

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42"
constexpr size_t kHeaderV0 = 7 * 4;
constexpr size_t kHeaderV1 = 256;
constexpr int kMaxParam = 1 << 24;  // bounds every header field; keeps products in range

[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[convert] " + msg);
}

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) bad("checkpoint header: sizes overflow");
  return r;
}

// Float offsets of every array in the checkpoint, in file order.
struct Layout {
  uint64_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;
  uint64_t end_floats;  // floats after the header
};

Layout layout_of(const Llama2cConfig& c) {
  const uint64_t L = c.n_layers, dim = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const uint64_t kv_dim = dim * c.n_kv_heads / c.n_heads;
  const uint64_t head_size = dim / c.n_heads;
  uint64_t at = 0;
  auto take = [&at](uint64_t n) {
    const uint64_t here = at;
    if (__builtin_add_overflow(at, n, &at)) bad("checkpoint header: sizes overflow");
    return here;
  };
  Layout l{};
  if (c.version == 0) {
    l.emb = take(mul(vocab, dim));
    l.rms_att = take(mul(L, dim));
    l.wq = take(mul(L, dim * dim));
    l.wk = take(mul(L, kv_dim * dim));
    l.wv = take(mul(L, kv_dim * dim));
    l.wo = take(mul(L, dim * dim));
    l.rms_ffn = take(mul(L, dim));
    l.w1 = take(mul(L, hid * dim));
    l.w2 = take(mul(L, dim * hid));
    l.w3 = take(mul(L, hid * dim));
    l.rms_final = take(dim);
    take(mul(c.seq_len, head_size / 2));  // freq_cis_real (unused: RoPE is recomputed)
    take(mul(c.seq_len, head_size / 2));  // freq_cis_imag
  } else {
    l.rms_att = take(mul(L, dim));
    l.rms_ffn = take(mul(L, dim));
    l.rms_final = take(dim);
    l.emb = take(mul(vocab, dim));
    l.wq = take(mul(L, dim * dim));
    l.wk = take(mul(L, kv_dim * dim));
    l.wv = take(mul(L, kv_dim * dim));
    l.wo = take(mul(L, dim * dim));
    l.w1 = take(mul(L, hid * dim));
    l.w2 = take(mul(L, dim * hid));
    l.w3 = take(mul(L, hid * dim));
  }
  l.wcls = c.shared_classifier ? l.emb : take(mul(vocab, dim));
  l.end_floats = at;
  return l;
}

std::string describe(const Llama2cConfig& c) {
  return "dim " + std::to_string(c.dim) + ", hidden_dim " + std::to_string(c.hidden_dim) +
         ", n_layers " + std::to_string(c.n_layers) + ", n_heads " + std::to_string(c.n_heads) +
         ", n_kv_heads " + std::to_string(c.n_kv_heads) + ", vocab_size " +
         std::to_string(c.vocab_size) + ", seq_len " + std::to_string(c.seq_len);
}

size_t header_bytes(const Llama2cConfig& c) { return c.version == 0 ? kHeaderV0 : kHeaderV1; }

struct Token {
  std::string text;
  float score;
};

// tokenizer.bin: int32 max_token_length, then per token float score, int32
// length, bytes.  Strings are SentencePiece pieces with U+2581 turned into
// spaces and BOS/EOS wrapped in newlines (llama2.c tokenizer.py); undo both.
std::vector<Token> parse_tokenizer(const uint8_t* p, size_t size, int vocab_size) {
  size_t at = 0;
  auto need = [&](size_t n, const char* what, int id) {
    if (n > size - at) {
      bad("tokenizer truncated at offset " + std::to_string(at) + " reading " + what +
          " of token " + std::to_string(id) + " (the checkpoint has " +
          std::to_string(vocab_size) + " tokens)");
    }
  };
  need(4, "max_token_length", -1);
  at += 4;
  std::vector<Token> tokens;
  tokens.reserve(static_cast<size_t>(vocab_size));
  for (int id = 0; id < vocab_size; ++id) {
    need(8, "score and length", id);
    Token t;
    std::memcpy(&t.score, p + at, 4);
    const int32_t len = read_i32(p + at + 4);
    at += 8;
    if (len < 0) bad("tokenizer: token " + std::to_string(id) + " has negative length");
    need(static_cast<size_t>(len), "bytes", id);
    std::string raw(reinterpret_cast<const char*>(p + at), static_cast<size_t>(len));
    at += static_cast<size_t>(len);
    if (raw == "\n<s>\n") raw = "<s>";
    if (raw == "\n</s>\n") raw = "</s>";
    for (char ch : raw) {
      if (ch == ' ') t.text += "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK
      else t.text += ch;
    }
    tokens.push_back(std::move(t));
  }
  if (at != size) {
    bad("tokenizer has " + std::to_string(size - at) + " bytes left after the " +
        std::to_string(vocab_size) +
        " tokens the checkpoint asks for (a tokenizer for another model?)");
  }
  return tokens;
}

bool is_byte_token(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

std::vector<uint8_t> read_all(const std::string& path) {
  const std::string s = read_regular_file(path, "convert");  // refuses FIFOs and devices
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace

Llama2cConfig parse_llama2c_config(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  Llama2cConfig c;
  size_t params_at = 0;
  if (size >= 8 && static_cast<uint32_t>(read_i32(p)) == kMagicV1) {
    c.version = read_i32(p + 4);
    if (c.version != 1) {
      bad("llama2.c checkpoint version " + std::to_string(c.version) +
          " is not supported (only the fp32 versions 0 and 1; version 2 is int8)");
    }
    if (size < kHeaderV1) bad("checkpoint truncated inside its 256-byte header");
    params_at = 8;
    c.shared_classifier = p[8 + 7 * 4] != 0;
  } else if (size < kHeaderV0) {
    bad("checkpoint truncated inside its 28-byte header (" + std::to_string(size) + " bytes)");
  }
  int* const fields[] = {&c.dim, &c.hidden_dim, &c.n_layers, &c.n_heads,
                         &c.n_kv_heads, &c.vocab_size, &c.seq_len};
  for (int k = 0; k < 7; ++k) *fields[k] = read_i32(p + params_at + 4 * k);
  if (c.version == 0) {
    c.shared_classifier = c.vocab_size > 0;
    if (c.vocab_size < 0 && c.vocab_size != INT_MIN) c.vocab_size = -c.vocab_size;
  }
  const bool plausible = c.dim > 0 && c.dim <= kMaxParam && c.hidden_dim > 0 &&
                         c.hidden_dim <= kMaxParam && c.n_layers > 0 && c.n_layers <= 4096 &&
                         c.n_heads > 0 && c.n_heads <= c.dim && c.n_kv_heads > 0 &&
                         c.n_kv_heads <= c.n_heads && c.vocab_size > 0 &&
                         c.vocab_size <= kMaxParam && c.seq_len > 0 && c.seq_len <= kMaxParam;
  if (!plausible) bad("not a llama2.c checkpoint: implausible header (" + describe(c) + ")");
  if (c.dim % c.n_heads != 0 || (c.dim / c.n_heads) % 2 != 0 || c.n_heads % c.n_kv_heads != 0) {
    bad("not a llama2.c checkpoint: dim must split into n_heads heads of even size and n_heads "
        "into n_kv_heads groups (" + describe(c) + ")");
  }
  const Layout l = layout_of(c);
  const uint64_t expect = header_bytes(c) + mul(l.end_floats, 4);
  if (expect != size) {
    bad(std::string("checkpoint ") + (size < expect ? "truncated" : "has trailing bytes") +
        ": a version " + std::to_string(c.version) + " file with " + describe(c) +
        (c.shared_classifier ? " (shared classifier)" : " (separate classifier)") + " has " +
        std::to_string(expect) + " bytes, this one " + std::to_string(size));
  }
  return c;
}

gguf::Writer convert_llama2c(const void* checkpoint, size_t checkpoint_size,
                             const void* tokenizer, size_t tokenizer_size,
                             const Llama2cOptions& opt) {
  const Llama2cConfig c = parse_llama2c_config(checkpoint, checkpoint_size);
  const Layout l = layout_of(c);
  const uint8_t* w = static_cast<const uint8_t*>(checkpoint) + header_bytes(c);
  std::vector<Token> tokens;
  if (tokenizer) {
    tokens = parse_tokenizer(static_cast<const uint8_t*>(tokenizer), tokenizer_size, c.vocab_size);
  }

  gguf::Writer out;
  out.add_string("general.architecture", "llama");
  out.add_string("general.name", opt.name);
  out.add_u32("general.file_type", 0);  // ALL_F32
  out.add_u32("llama.context_length", static_cast<uint32_t>(c.seq_len));
  out.add_u32("llama.embedding_length", static_cast<uint32_t>(c.dim));
  out.add_u32("llama.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  out.add_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  out.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  out.add_u32("llama.block_count", static_cast<uint32_t>(c.n_layers));
  out.add_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.dim / c.n_heads));
  out.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);  // run.c rmsnorm
  if (!tokens.empty()) {
    std::vector<std::string> text;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (size_t id = 0; id < tokens.size(); ++id) {
      const std::string& s = tokens[id].text;
      text.push_back(s);
      scores.push_back(tokens[id].score);
      if (id == 0) types.push_back(2);                          // unknown
      else if (id == 1 || id == 2) types.push_back(3);          // control: <s>, </s>
      else if (is_byte_token(s)) types.push_back(6);            // byte fallback
      else types.push_back(1);                                  // normal
    }
    out.add_string("tokenizer.ggml.model", "llama");
    out.add_string_array("tokenizer.ggml.tokens", text);
    out.add_f32_array("tokenizer.ggml.scores", scores);
    out.add_i32_array("tokenizer.ggml.token_type", types);
    out.add_u32("tokenizer.ggml.unknown_token_id", 0);
    out.add_u32("tokenizer.ggml.bos_token_id", 1);
    out.add_u32("tokenizer.ggml.eos_token_id", 2);
    // As llama.cpp writes them for stories260K: "none" (and its spelling).
    out.add_u32("tokenizer.ggml.seperator_token_id", 0xffffffffu);
    out.add_u32("tokenizer.ggml.padding_token_id", 0xffffffffu);
  }

  const uint64_t L = c.n_layers, dim = c.dim, hid = c.hidden_dim, vocab = c.vocab_size;
  const uint64_t kv_dim = dim * c.n_kv_heads / c.n_heads;
  const bool write_output = !c.shared_classifier || opt.write_tied_output;
  const size_t n_tensors = 2 + (write_output ? 1 : 0) + 9 * (size_t)L;
  size_t n_done = 0;
  auto add = [&](const std::string& name, uint64_t at, uint64_t ne0, uint64_t ne1) {
    if (ne1 == 0) out.add_tensor(name, {ne0}, 0, w + 4 * at, ne0 * 4);
    else out.add_tensor(name, {ne0, ne1}, 0, w + 4 * at, ne0 * ne1 * 4);
    if (opt.progress) opt.progress(++n_done, n_tensors, name);
  };
  // Same order as llama.cpp's stories260K.gguf.  Matrices are [out, in]
  // row-major, i.e. GGUF ne = {in, out}.
  add("token_embd.weight", l.emb, dim, vocab);
  add("output_norm.weight", l.rms_final, dim, 0);
  if (write_output) add("output.weight", l.wcls, dim, vocab);
  for (uint64_t i = 0; i < L; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_q.weight", l.wq + i * dim * dim, dim, dim);
    add(b + "attn_k.weight", l.wk + i * kv_dim * dim, dim, kv_dim);
    add(b + "attn_v.weight", l.wv + i * kv_dim * dim, dim, kv_dim);
    add(b + "attn_output.weight", l.wo + i * dim * dim, dim, dim);
    add(b + "attn_norm.weight", l.rms_att + i * dim, dim, 0);
    add(b + "ffn_gate.weight", l.w1 + i * hid * dim, dim, hid);
    add(b + "ffn_down.weight", l.w2 + i * dim * hid, hid, dim);
    add(b + "ffn_up.weight", l.w3 + i * hid * dim, dim, hid);
    add(b + "ffn_norm.weight", l.rms_ffn + i * dim, dim, 0);
  }
  return out;
}

gguf::Writer convert_llama2c_files(const std::string& checkpoint_path,
                                   const std::string& tokenizer_path, const Llama2cOptions& opt) {
  const std::vector<uint8_t> ckpt = read_all(checkpoint_path);
  std::vector<uint8_t> tok;
  if (!tokenizer_path.empty()) tok = read_all(tokenizer_path);
  static const uint8_t empty = 0;  // an empty tokenizer file is still a (truncated) tokenizer
  const void* tok_data = tokenizer_path.empty() ? nullptr : tok.empty() ? &empty : tok.data();
  return convert_llama2c(ckpt.data(), ckpt.size(), tok_data, tok.size(), opt);
}

}  // namespace lilims::models
