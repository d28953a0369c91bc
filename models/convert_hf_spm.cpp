// tokenizer.model (a SentencePiece ModelProto) + tokenizer_config.json ->
// tokenizer.ggml.* metadata, as llama.cpp's convert_hf_to_gguf.py writes a
// SentencePiece vocabulary (TextModel._create_vocab_sentencepiece, then
// gguf.SpecialVocab).
//
// The ModelProto is read with a protobuf reader of its own: field 1 holds the
// pieces, each a message {1: piece (bytes), 2: score (float), 3: type
// (enum, NORMAL when absent)}; every other field (trainer and normalizer
// specs) is skipped.  The file is hostile: every length is checked against
// what is left of its enclosing message.
#include <unistd.h>

#include <cstring>
#include <string_view>

#include "base/error.h"
#include "base/file.h"
#include "base/nlohmann_json.h"
#include "models/convert_hf.h"
#include "models/convert_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::models {
namespace {

using nlohmann::json;
using hf::kByte;
using hf::kControl;
using hf::kNormal;
using hf::kUnknown;
using hf::kUnused;
using hf::kUserDefined;


[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[convert] " + msg);
}



// One protobuf message: fields read in order, each bounded by the message.
class Proto {
 public:
  Proto(std::string_view bytes, const std::string& what) : p_(bytes), what_(what) {}
  // The next field's number and wire type; false at the end of the message.
  bool next(uint32_t* field, uint32_t* wire) {
    if (at_ == p_.size()) return false;
    const uint64_t tag = varint();
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    if (*field == 0) fail("field number 0");
    return true;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ == p_.size()) fail("a varint runs past the end");
      const uint8_t b = static_cast<uint8_t>(p_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > p_.size() - at_) fail("a length of " + std::to_string(n) + " runs past the end");
    const std::string_view s = p_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  float fixed32_float() {
    if (p_.size() - at_ < 4) fail("a fixed32 runs past the end");
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(static_cast<uint8_t>(p_[at_ + k])) << (8 * k);
    at_ += 4;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1:
        if (p_.size() - at_ < 8) fail("a fixed64 runs past the end");
        at_ += 8;
        return;
      case 2: bytes(); return;
      case 5: fixed32_float(); return;
      default: fail("wire type " + std::to_string(wire) + " (groups are not used by SentencePiece)");
    }
  }
  [[noreturn]] void fail(const std::string& msg) const {
    bad("tokenizer.model: " + what_ + ": " + msg + " (at byte " + std::to_string(at_) +
        "); not a SentencePiece model");
  }

 private:
  std::string_view p_;
  size_t at_ = 0;
  std::string what_;
};

struct Piece {
  std::string text;
  float score = 0.0f;
  int32_t type = kNormal;
};

std::vector<Piece> read_pieces(const std::string& bytes) {
  std::vector<Piece> pieces;
  Proto model(bytes, "ModelProto");
  uint32_t field = 0, wire = 0;
  while (model.next(&field, &wire)) {
    if (field != 1) {
      model.skip(wire);
      continue;
    }
    if (wire != 2) model.fail("pieces (field 1) with wire type " + std::to_string(wire));
    Proto msg(model.bytes(), "piece " + std::to_string(pieces.size()));
    Piece p;
    bool has_text = false;
    while (msg.next(&field, &wire)) {
      if (field == 1 && wire == 2) {
        p.text = std::string(msg.bytes());
        has_text = true;
      } else if (field == 2 && wire == 5) {
        p.score = msg.fixed32_float();
      } else if (field == 3 && wire == 0) {
        const uint64_t t = msg.varint();
        if (t < 1 || t > 6) msg.fail("piece type " + std::to_string(t));
        p.type = static_cast<int32_t>(t);
      } else {
        msg.skip(wire);
      }
    }
    if (!has_text) msg.fail("a piece without its text");
    pieces.push_back(std::move(p));
    if (pieces.size() > (size_t{1} << 24)) model.fail("more than 2^24 pieces");
  }
  if (pieces.empty()) bad("tokenizer.model has no pieces (not a SentencePiece model)");
  return pieces;
}

// llama.cpp's TextModel.does_token_look_special: added tokens some models
// leave unmarked that are control tokens all the same.
bool looks_special(const std::string& t) {
  auto wraps = [&t](const char* open, const char* close) {
    const size_t a = std::strlen(open), b = std::strlen(close);
    return t.size() >= a + b && t.compare(0, a, open) == 0 && t.compare(t.size() - b, b, close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wraps("<unused", ">");
}



// add_bos / add_eos from tokenizer.json's TemplateProcessing, as
// gguf.SpecialVocab reads it (its single-sequence template: a leading special
// token that is BOS, a trailing one that is EOS); unset (-1) when there is none.
void template_flags(const std::string& dir, const std::string& bos, const std::string& eos,
                    int* add_bos, int* add_eos) {
  const std::string path = dir + "/tokenizer.json";
  if (!hf::regular_file_exists(path)) return;
  const json root = hf::parse_json_file(path, "tokenizer.json");
  if (!root.is_object() || !root.contains("post_processor") || !root["post_processor"].is_object()) return;
  const json& pp = root["post_processor"];
  const json procs = pp.contains("processors") && pp["processors"].is_array() ? pp["processors"]
                                                                              : json::array({pp});
  for (const json& p : procs) {
    if (!p.is_object() || p.value("type", "") != "TemplateProcessing") continue;
    const json single = p.value("single", json::array());
    if (!single.is_array() || single.size() < 2) continue;
    auto special = [](const json& e) {
      return e.is_object() && e.contains("SpecialToken") && e["SpecialToken"].is_object()
                 ? e["SpecialToken"].value("id", "")
                 : std::string();
    };
    const std::string first = special(single.front()), last = special(single.back());
    if (!first.empty()) *add_bos = first == bos;
    if (!last.empty()) *add_eos = last == eos;
  }
}

}  // namespace

int64_t add_sentencepiece_tokenizer(const std::string& dir, int64_t n_vocab, gguf::Writer* out,
                                    std::vector<std::string>* notes) {
  const std::string path = dir + "/tokenizer.model";
  if (!hf::regular_file_exists(path)) {
    throw Error(LILIMS_ERR_MISSING, "[convert] " + dir + " has no tokenizer.model");
  }
  const std::vector<Piece> pieces = read_pieces(read_regular_file(path, "convert"));
  const int64_t n = n_vocab > 0 ? n_vocab : static_cast<int64_t>(pieces.size());
  if (static_cast<int64_t>(pieces.size()) > n) {
    notes->push_back("tokenizer.model has " + std::to_string(pieces.size()) +
                     " pieces; those from id " + std::to_string(n) +
                     " are past config.json's vocab_size and left out");
  }
  // Ids up to vocab_size with no piece: "[PAD<id>]", unused, as llama.cpp.
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<float> scores(static_cast<size_t>(n), -10000.0f);
  std::vector<int32_t> types(static_cast<size_t>(n), kUnused);
  for (int64_t id = 0; id < n; ++id) {
    if (id < static_cast<int64_t>(pieces.size())) {
      const Piece& p = pieces[static_cast<size_t>(id)];
      tokens[id] = p.text;
      scores[id] = p.score;
      // llama.cpp asks IsUnknown, IsControl, IsUnused, IsByte: a
      // USER_DEFINED piece is NORMAL unless an added token below says otherwise.
      types[id] = p.type == kUserDefined ? kNormal : p.type;
    } else {
      tokens[id] = "[PAD" + std::to_string(id) + "]";
    }
  }

  // Added tokens: added_tokens.json, then tokenizer_config.json's
  // added_tokens_decoder (which wins), each scored -1000.
  auto in_range = [n](int64_t id) { return id >= 0 && id < n; };
  if (hf::regular_file_exists(dir + "/added_tokens.json")) {
    const json added = hf::parse_json_file(dir + "/added_tokens.json", "added_tokens.json");
    if (!added.is_object()) bad("added_tokens.json is not a JSON object");
    for (const auto& kv : added.items()) {
      if (!kv.value().is_number_integer()) bad("added_tokens.json: '" + kv.key() + "' has no integer id");
      const int64_t id = kv.value().get<int64_t>();
      if (!in_range(id)) continue;  // llama.cpp ignores it too
      tokens[id] = kv.key();
      scores[id] = -1000.0f;
      types[id] = kUserDefined;
    }
  }
  const json cfg = hf::regular_file_exists(dir + "/tokenizer_config.json")
                       ? hf::parse_json_file(dir + "/tokenizer_config.json", "tokenizer_config.json")
                       : json::object();
  if (!cfg.is_object()) bad("tokenizer_config.json is not a JSON object");
  struct Strip {
    int64_t id;
    bool left, right;
  };
  std::vector<Strip> strips;
  if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
    for (const auto& kv : cfg["added_tokens_decoder"].items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(kv.key(), &used);
        if (used != kv.key().size()) id = -1;
      } catch (const std::exception&) {
      }
      const json& t = kv.value();
      if (id < 0 || !t.is_object() || !t.contains("content") || !t["content"].is_string()) {
        bad("tokenizer_config.json added_tokens_decoder entry '" + kv.key() +
            "' is not {\"content\": ...} under a token id");
      }
      if (!in_range(id)) continue;
      std::string text = t["content"].get<std::string>();
      if (t.value("special", false) || looks_special(text)) {
        types[id] = kControl;
      } else {
        // User-defined spaces written as U+2581 are plain spaces in the GGUF.
        for (size_t at = 0; (at = text.find("\xe2\x96\x81", at)) != std::string::npos;) {
          text.replace(at, 3, " ");
        }
        types[id] = kUserDefined;
      }
      scores[id] = -1000.0f;
      tokens[id] = text;
      strips.push_back({id, t.value("lstrip", false), t.value("rstrip", false)});
    }
  }

  out->add_string("tokenizer.ggml.model", "llama");
  out->add_string("tokenizer.ggml.pre", "default");
  out->add_string_array("tokenizer.ggml.tokens", tokens);
  out->add_f32_array("tokenizer.ggml.scores", scores);
  out->add_i32_array("tokenizer.ggml.token_type", types);

  // Special ids: tokenizer_config.json names the token, else config.json
  // gives the id (gguf.SpecialVocab's two sources, in its order).
  const json model_cfg = hf::parse_json_file(dir + "/config.json", "config.json");
  auto find_id = [&](const std::string& content) -> int64_t {
    if (content.empty()) return -1;
    for (int64_t id = 0; id < n; ++id) {
      if (tokens[id] == content) return id;
    }
    return -1;
  };
  struct Special {
    const char* typ;
    const char* key;
  };
  const Special specials[] = {{"bos", "bos_token_id"},       {"eos", "eos_token_id"},
                              {"unk", "unknown_token_id"},   {"sep", "seperator_token_id"},
                              {"pad", "padding_token_id"},   {"cls", "cls_token_id"},
                              {"mask", "mask_token_id"}};
  for (const Special& s : specials) {
    const std::string typ = s.typ;
    int64_t id = cfg.contains(typ + "_token") ? find_id(hf::token_content(cfg[typ + "_token"])) : -1;
    if (id < 0 && model_cfg.is_object() && model_cfg.contains(typ + "_token_id") &&
        model_cfg[typ + "_token_id"].is_number_integer()) {
      id = model_cfg[typ + "_token_id"].get<int64_t>();
    }
    if (in_range(id)) out->add_u32(std::string("tokenizer.ggml.") + s.key, static_cast<uint32_t>(id));
  }

  // add_bos / add_eos: the post-processor's template, else tokenizer_config.json.
  int add_bos = -1, add_eos = -1;
  template_flags(dir, cfg.contains("bos_token") ? hf::token_content(cfg["bos_token"]) : "",
                 cfg.contains("eos_token") ? hf::token_content(cfg["eos_token"]) : "", &add_bos, &add_eos);
  auto flag = [&cfg](const char* k, int* v) {
    if (*v < 0 && cfg.contains(k) && cfg[k].is_boolean()) *v = cfg[k].get<bool>();
  };
  flag("add_bos_token", &add_bos);
  flag("add_eos_token", &add_eos);
  if (add_bos >= 0) out->add_bool("tokenizer.ggml.add_bos_token", add_bos == 1);
  if (add_eos >= 0) out->add_bool("tokenizer.ggml.add_eos_token", add_eos == 1);
  const std::string tmpl = hf::chat_template(dir, cfg);
  if (!tmpl.empty()) out->add_string("tokenizer.chat_template", tmpl);

  // lilims must run what it writes; and GGUF has no key for lstrip/rstrip
  // (readers derive them from the text and the model's name and
  // architecture, which `out` holds already): name each added token where
  // that differs from tokenizer_config.json.
  const std::vector<uint8_t> image = out->to_bytes();
  const auto as_read = tok::Tokenizer::from_gguf(*gguf::File::from_bytes(image.data(), image.size()));
  for (const Strip& s : strips) {
    const int32_t id = static_cast<int32_t>(s.id);
    if (s.left == as_read->strips_left(id) && s.right == as_read->strips_right(id)) continue;
    auto flags = [](bool l, bool r) {
      return std::string(l && r ? "lstrip and rstrip"
                         : l    ? "lstrip"
                         : r    ? "rstrip"
                                : "neither lstrip nor rstrip");
    };
    notes->push_back("added token '" + tokens[id] + "' has " + flags(s.left, s.right) +
                     " in tokenizer_config.json, but GGUF readers give it " +
                     flags(as_read->strips_left(id), as_read->strips_right(id)) +
                     " (derived from its text and the model's name and architecture; GGUF has no "
                     "key for them)");
  }
  return n;
}

}  // namespace lilims::models
