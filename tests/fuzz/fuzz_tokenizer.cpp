// libFuzzer target for the tokenizers.  For any input bytes: encode (with
// and without parse_special) and decode never crash, decode always returns
// valid UTF-8, and streaming decode agrees with decode.  For valid UTF-8
// input, decode(encode(s)) == s on vocabularies that have a token for every
// byte (Tokenizer::covers_all_bytes: byte-level BPE with the full alphabet;
// SentencePiece with byte fallback, without parse_special, whose fragments
// after a special token gain a space, and not for text containing U+2581
// itself, which SentencePiece cannot tell from its space marker).
//
// The first input byte picks the vocabulary.  Run: scripts/fuzz.sh tokenizer SECONDS
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using lilims::tok::Tokenizer;

std::vector<std::unique_ptr<Tokenizer>> load_all() {
  const char* env = std::getenv("LILIMS_SHARED_DATA_DIR");
  const std::string dir = std::string(env ? env : LILIMS_SHARED_DATA_DIR) + "/vocab/";
  std::vector<std::unique_ptr<Tokenizer>> out;
  for (const char* name : {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "starcoder", "mpt", "bert-bge"}) {
    try {
      auto f = lilims::gguf::File::open(dir + "ggml-vocab-" + name + ".gguf");
      out.push_back(Tokenizer::from_gguf(*f));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_tokenizer: skipping %s: %s\n", name, e.what());
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "fuzz_tokenizer: no vocabularies found under %s\n", dir.c_str());
    std::abort();
  }
  return out;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
    std::abort();
  }
}

// Loading seven vocabularies takes seconds under ASan: done before the
// first input, where libFuzzer's per-input timeout does not count it.
const std::vector<std::unique_ptr<Tokenizer>>* g_toks = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const std::vector<std::unique_ptr<Tokenizer>> toks = load_all();
  g_toks = &toks;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::unique_ptr<Tokenizer>>& toks = *g_toks;
  if (size == 0) return 0;
  const Tokenizer& tok = *toks[data[0] % toks.size()];
  const std::string s(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = lilims::tok::utf8_is_valid(s);
  const bool spm = tok.vocab_type() == lilims::tok::VocabType::kSpm;
  const bool lossless = tok.covers_all_bytes() && !(spm && s.find("\xE2\x96\x81") != std::string::npos);

  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.encode(s, true, special);
    for (int32_t id : ids) check(id >= 0 && id < tok.n_vocab(), "id in range");
    const std::string text = tok.decode(ids);
    check(lilims::tok::utf8_is_valid(text), "decode gives valid UTF-8");
    const std::vector<int32_t> plain = tok.encode(s, false, special);
    if (valid && lossless && (!special || tok.vocab_type() == lilims::tok::VocabType::kBpe)) {
      check(tok.decode(plain) == s, "decode(encode(s)) == s");
    }
    lilims::tok::StreamDecoder dec(tok);
    std::string streamed;
    for (int32_t id : plain) streamed += dec.push(id);
    streamed += dec.flush();
    check(lilims::tok::utf8_is_valid(streamed), "streamed text is valid UTF-8");
    if (tok.vocab_type() == lilims::tok::VocabType::kBpe) check(streamed == tok.decode(plain), "stream == decode");
  }
  return 0;
}
