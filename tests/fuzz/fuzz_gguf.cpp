// libFuzzer target for the GGUF reader and what is built from a parsed file.
// For any input bytes: parsing either succeeds or throws lilims::Error (any
// other exception, a crash or a sanitizer report is a finding).  A parsed
// file then has every metadata value decoded (arrays element by element,
// nested ones too), its tensor data read where the reader says it is,
// its metadata written back out and parsed again to the same values, and a
// tokenizer and a llama model built from it (again: success or
// lilims::Error).
//
// Run: scripts/fuzz.sh gguf SECONDS (seeds in tests/fuzz/corpus/gguf/).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/gguf.h"
#include "models/model.h"
#include "quant/prelaid.h"
#include "quant/quant.h"
#include "quant/repack.h"
#include "tokenizer/tokenizer.h"

namespace {

using lilims::gguf::File;
using lilims::gguf::Value;
using lilims::gguf::ValueType;

[[noreturn]] void finding(const char* what, const char* detail = "") {
  std::fprintf(stderr, "fuzz_gguf: %s %s\n", what, detail);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) finding("property violated:", what);
}

// Decodes every element (bounded so one input cannot take minutes); returns
// a digest so the work cannot be optimised away.
uint64_t walk(const Value& v, int depth) {
  if (v.type != ValueType::ARRAY) return v.u ^ static_cast<uint64_t>(v.s.size());
  uint64_t h = v.size();
  const size_t n = v.size() < 4096 ? v.size() : 4096;
  for (size_t k = 0; k < n; ++k) {
    const Value e = v.at(k);
    check(e.type == v.elem_type, "element type matches the array's");
    if (v.elem_type == ValueType::STRING) check(v.string_at(k) == e.s, "string_at == at().s");
    h = h * 31 + walk(e, depth + 1);
  }
  return h;
}

bool same(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::STRING: return a.s == b.s;
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    case ValueType::ARRAY: {
      if (a.elem_type != b.elem_type || a.size() != b.size()) return false;
      const size_t n = a.size() < 4096 ? a.size() : 4096;
      for (size_t k = 0; k < n; ++k) {
        if (!same(a.at(k), b.at(k))) return false;
      }
      return true;
    }
    default: return a.u == b.u && a.i == b.i;
  }
}

void exercise(const File& f) {
  volatile uint64_t sink = 0;
  for (const auto& kv : f.metadata()) sink = sink + walk(kv.value, 0);

  // Typed getters on the keys models use: a value or lilims::Error.
  for (const char* key : {"general.architecture", "llama.block_count", "llama.context_length",
                          "llama.rope.freq_base", "tokenizer.ggml.bos_token_id", "general.name"}) {
    try { sink = sink + static_cast<uint64_t>(f.get_int_or(key, 0)); } catch (const lilims::Error&) {}
    try { sink = sink + static_cast<uint64_t>(f.get_float_or(key, 0.0)); } catch (const lilims::Error&) {}
    try { sink = sink + f.get_string_or(key, "").size(); } catch (const lilims::Error&) {}
  }

  // Tensor data lies inside the image: touch its first and last bytes and
  // convert the first row (ASan reports any read outside).
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    if (!t.data || t.n_bytes == 0) continue;
    sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    const lilims::quant::TypeTraits* tr = lilims::quant::type_traits(t.type);
    lilims::quant::PrelaidType pl;
    if (tr && t.ne[0] <= 4096) {
      row.resize(static_cast<size_t>(t.ne[0]));
      tr->to_float(t.data, row.data(), static_cast<int64_t>(t.ne[0]));
    } else if (lilims::quant::prelaid_type(t.type, &pl) && t.ne[0] <= 4096) {
      // the last row, which sits in the last (maybe padded) group
      row.resize(static_cast<size_t>(t.ne[0]));
      lilims::quant::row_to_float(pl.type, pl.layout, t.data, static_cast<int64_t>(t.ne[0]),
                                  static_cast<int64_t>(t.ne[1]) - 1, row.data());
    }
  }

  // The metadata written back and read again is the same metadata.
  lilims::gguf::Writer w;
  for (const auto& kv : f.metadata()) {
    if (kv.key != "general.alignment") w.add(kv.key, kv.value);
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  std::unique_ptr<File> again = File::from_bytes(bytes.data(), bytes.size());
  check(again->metadata().size() + (f.find("general.alignment") ? 1 : 0) == f.metadata().size(),
        "round trip keeps every key");
  for (const auto& kv : again->metadata()) {
    const Value* orig = f.find(kv.key);
    check(orig && same(*orig, kv.value), "round trip keeps every value");
  }

  try {
    auto tok = lilims::tok::Tokenizer::from_gguf(f);
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode("Hello <s> world \xE2\x96\x81 12", true, special);
      for (int32_t id : ids) check(id >= 0 && id < tok->n_vocab(), "token id in range");
      sink = sink + tok->decode(ids).size();
    }
  } catch (const lilims::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::unique_ptr<File> f = File::from_bytes(data, size);
    exercise(*f);
    try {
      lilims::models::LoadOptions lo;
      lo.repack = (size & 1) != 0;
      lilims::models::load_model(std::move(f), lo);
    } catch (const lilims::Error&) {
    }
  } catch (const lilims::Error&) {
  } catch (const std::exception& e) {
    finding("unexpected exception:", e.what());
  }
  return 0;
}
