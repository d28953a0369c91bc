// Text <-> token ids for llama-family models.
//
// Three vocabulary kinds, read from GGUF metadata or a Hugging Face
// tokenizer.json:
//   - SentencePiece BPE (tokenizer.ggml.model "llama": Llama 1/2, TinyLlama,
//     Mistral, Phi-3, Gemma 2/3, stories260K): score-driven merges over code
//     points, spaces as U+2581 with an optional leading one (Gemma: none),
//     <0xNN> byte fallback.
//   - byte-level BPE ("gpt2": GPT-2, Phi-2, SmolLM2, Llama 3, Qwen2/2.5/3,
//     StarCoder, DeepSeek, Falcon, MPT ...): a hand-written pre-tokenizer per
//     model family, chosen by tokenizer.ggml.pre as llama.cpp chooses it
//     (tokenizer/pretokenize.h), bytes mapped to printable code points,
//     merges applied in rank order.
//   - WordPiece ("bert"): BERT normalization, greedy longest match.
//
// Control tokens ("<|im_start|>", "</s>") are recognised in text only when
// parse_special is set; user-defined (added, non-special) tokens always are.
// A GGUF vocabulary's tokens spelled like an end of turn ("<|im_end|>",
// "<end_of_turn>", "</s>", ...) are control tokens and end generation
// whatever type the file gives them, as llama.cpp reads them (Gemma 3's
// "</s>" is user-defined there).  Either way a recognised token is emitted whole, never split.  A recognised
// token may strip the ASCII whitespace before it (lstrip) or after it
// (rstrip): from a tokenizer.json's added_tokens, or in a GGUF by
// llama.cpp's rules, which key on names because GGUF stores no such flag
// (general.name containing "phi-3"/"phi3": every special token but <unk>,
// <s> and <|endoftext|> strips after itself; jina-v2 pre-tokenizers,
// nomic-bert-moe / jina-bert-v3 architectures: <mask> strips before;
// "modern-bert": [MASK] strips before).
//
// Invalid UTF-8 input: every byte that is not part of a well-formed UTF-8
// sequence is replaced by U+FFFD before tokenizing (so encode never fails
// and decode(encode(s)) == s for valid UTF-8 s whenever the vocabulary can
// represent every character, as byte-level BPE and byte-fallback SPM can).
//
// A Tokenizer is immutable after construction: any number of threads may
// use one at the same time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace lilims::gguf {
class File;
}

namespace lilims::tok {

enum class VocabType { kSpm, kBpe, kWordPiece };

// GGUF tokenizer.ggml.token_type values.
enum TokenType : uint8_t {
  kTokenUndefined = 0,
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

enum class PreTokenizer;

// Open-addressing map from token text to id (lookups by string_view, no
// allocation).  Keys point into the owner's token strings.
class TokenIndex {
 public:
  void build(const std::vector<std::string>& tokens, const std::vector<uint8_t>& include);
  int32_t find(std::string_view s) const;
  size_t memory_bytes() const { return slots_.capacity() * sizeof(int32_t); }

 private:
  std::vector<int32_t> slots_;  // token id or -1
  const std::vector<std::string>* tokens_ = nullptr;
  uint64_t mask_ = 0;
};

class Tokenizer {
 public:
  // Throws lilims::Error: LILIMS_ERR_UNSUPPORTED (unknown model or
  // pre-tokenizer; the message names it), LILIMS_ERR_BAD_FORMAT
  // (inconsistent arrays, a bad merge).
  static std::unique_ptr<Tokenizer> from_vocab(const Vocab& v);
  // from_vocab(models::vocab_from_gguf(f)); defined in models/vocab_gguf.cpp
  // so that tokenizer/ never reads GGUF itself.  Also LILIMS_ERR_MISSING
  // (no tokenizer.ggml.model / tokens), LILIMS_ERR_BAD_FORMAT (a key of the
  // wrong type, arrays of the wrong length: the message names the key).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  // A Hugging Face tokenizer.json: the BPE model (byte-level, or
  // SentencePiece-style with byte_fallback), vocab, merges, added_tokens,
  // the pre-tokenizer; or a WordPiece model.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& json_text);

  ~Tokenizer();
  // Heap bytes the vocabulary, merges and tables take (an estimate: the
  // allocator's own overhead per block is not seen).
  size_t memory_bytes() const;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_bos: add BOS (EOS) only if the vocabulary's add_bos (add_eos) says
  // so and add_bos is true.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // The concatenated text, encoded as encode() would, but special tokens are
  // matched only where they lie wholly inside a segment that allows them.
  struct Segment {
    std::string_view text;
    bool parse_special;
  };
  std::vector<int32_t> encode_segments(const std::vector<Segment>& segments, bool add_bos) const;
  const std::string& token_text(int32_t id) const;  // the vocab string as stored
  // The bytes this token decodes to: byte fallback -> the raw byte, byte-level
  // BPE -> the unmapped bytes, U+2581 -> space, control tokens -> their text.
  std::string token_to_piece(int32_t id) const;
  // The full text.  A BOS at the start is dropped when the vocabulary adds
  // one (encode put it there); with
  // SentencePiece's space prefix (and WordPiece) the first piece's leading
  // space is removed.  Other control tokens appear as their text.  Always
  // valid UTF-8: bytes that form no character become U+FFFD, one each.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  // -1 if none
  int32_t eos() const { return eos_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;

  VocabType vocab_type() const { return type_; }
  PreTokenizer pre_tokenizer() const { return pre_; }  // byte-level BPE only
  // Whether special token `id` eats the whitespace before / after it.
  bool strips_left(int32_t id) const { return id >= 0 && (size_t)id < strip_.size() && (strip_[id] & kStripLeft); }
  bool strips_right(int32_t id) const { return id >= 0 && (size_t)id < strip_.size() && (strip_[id] & kStripRight); }
  // Every byte has a token (byte-level BPE alphabet, or SentencePiece <0xNN>
  // fallback), so decode(encode(s)) == s for any valid UTF-8 s (SentencePiece:
  // without parse_special).  Not so for some real vocabularies: Falcon's lacks
  // 28 byte tokens (ASCII controls among them), StarCoder's 0xF1 -- HF drops
  // such bytes (no unk token), and so does lilims.
  bool covers_all_bytes() const;
  uint8_t token_type(int32_t id) const;
  int32_t find_token(std::string_view text) const;  // exact vocab string, -1 if absent
  // tokenizer.chat_template from the GGUF ("" when absent).
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer();
  void finalize();  // builds indexes, byte tables, the special-token trie, the EOG set
  void check_id(int32_t id) const;
  void encode_fragment(std::string_view text, bool first, std::vector<int32_t>* out) const;
  struct Symbol {
    uint32_t start, len;  // bytes in the chunk
    int32_t prev, next;   // neighbours in the linked list (-1: none)
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
    bool operator<(const Bigram& o) const {  // max-heap: best score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  void encode_spm(std::string_view text, bool prefix_space, std::vector<int32_t>* out) const;
  void encode_spm_chunk(std::string_view s, std::vector<Symbol>* sym, std::vector<Bigram>* heap,
                        std::vector<int32_t>* out) const;
  void encode_bpe_piece(std::string_view piece, std::vector<int32_t>* out) const;
  void encode_wordpiece(std::string_view text, std::vector<int32_t>* out) const;
  // Longest special/added token starting at text[pos]: its id and length.
  int32_t match_special(std::string_view text, size_t pos, bool parse_special, size_t* len) const;
  void add_merge(const std::string& left, const std::string& right, int32_t rank);
  // llama.cpp's lstrip/rstrip rules for GGUF vocabularies (see the top of
  // this file); after finalize().
  void set_strip_by_name(std::string name, const std::string& arch, const std::string& pre);

  VocabType type_ = VocabType::kSpm;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<uint8_t> types_;
  enum : uint8_t { kStripLeft = 1, kStripRight = 2 };
  std::vector<uint8_t> strip_;  // per id: kStripLeft | kStripRight (empty: none)
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, eot_ = -1, eom_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  bool add_space_prefix_ = true;  // SentencePiece: prepend U+2581
  bool spm_split_words_ = false;  // SentencePiece: no piece has U+2581 after another character
  bool ignore_merges_ = false;    // BPE: a piece that is a token is taken whole (llama3)
  bool wp_lowercase_ = true;      // WordPiece normalizer
  bool gguf_token_rules_ = false; // llama.cpp's type overrides for GGUF vocabularies (finalize)
  PreTokenizer pre_{};
  std::string chat_template_;

  TokenIndex index_;                    // every token
  TokenIndex merge_index_;              // SPM: tokens merges may produce
  std::array<int32_t, 256> byte_token_;  // SPM: <0xNN>; BPE: the token of byte b's code point
  std::array<int16_t, 0x144> cp_to_byte_;  // BPE: byte-level code point -> byte, or -1
  struct MergeInfo {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, MergeInfo> merges_;  // (left id << 32 | right id)
  std::vector<uint8_t> eog_;                         // per id

  struct TrieNode {
    int32_t token = -1;
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  std::vector<TrieNode> trie_;
  std::array<bool, 256> trie_first_{};  // bytes that may start a special token
};

// Streaming-safe decoding for one generation: push() returns only complete
// UTF-8 characters and holds back an incomplete trailing sequence until
// later tokens complete it.  Bytes that can never become valid UTF-8 are
// emitted as U+FFFD.  Pieces are token_to_piece() (no space stripping).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t);
  std::string push(int32_t id);  // possibly empty
  std::string flush();           // whatever is held back (invalid bytes as U+FFFD)

 private:
  std::string drain(bool final);
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace lilims::tok
