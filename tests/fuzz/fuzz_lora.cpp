// libFuzzer target for LoRA adapter files (models/lora.h) against a fixed
// base, the tiny llama of tests/data/tiny (2 layers; its ffn has 128 rows,
// so B's pieces take the 64- and 32-column paths; a tensor of 172 rows would
// need another base, stories260K, which the unit tests cover).  For any input
// bytes: parsing and load_lora either succeed or throw lilims::Error; an
// adapter that loads is set on a session, which evaluates a few tokens (a
// prefill block and a decode step), and is merged into the base in F32.
// Any other exception, a crash or a sanitizer report is a finding.
//
// Run: scripts/fuzz.sh lora SECONDS (seeds in tests/fuzz/corpus/lora/).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "base/error.h"
#include "models/gguf.h"
#include "models/lora.h"
#include "runtime/engine.h"

namespace {

[[noreturn]] void finding(const char* what, const char* detail = "") {
  std::fprintf(stderr, "fuzz_lora: %s %s\n", what, detail);
  std::abort();
}

const std::string kBase = std::string(LILIMS_SOURCE_DIR) + "/tests/data/tiny/llama.gguf";

const lilims::runtime::Model& base() {
  static const std::unique_ptr<lilims::runtime::Model> m = lilims::runtime::Model::open(kBase);
  return *m;
}

const lilims::gguf::File& base_file() {
  static const std::unique_ptr<lilims::gguf::File> f = lilims::gguf::File::open(kBase);
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const lilims::runtime::Model& model = base();
  try {
    const auto f = lilims::gguf::File::from_bytes(data, size);
    const auto adapter = lilims::runtime::Adapter::from_file(model, *f);
    lilims::runtime::SessionOptions so;
    so.n_ctx = 16;
    so.n_threads = 2;
    so.n_batch = 8;
    lilims::runtime::Session s(model, so);
    s.set_adapters({{adapter.get(), 0.75f}});
    s.eval({1, 5, 9, 300, 42, 7});
    s.eval({11});
    // An adapter that loads merges (same checks, then float arithmetic).
    lilims::models::merge_lora(base_file(), model.weights(), *f, 1.0f, lilims::quant::Type::F32);
  } catch (const lilims::Error&) {
  } catch (const std::exception& e) {
    finding("an exception that is not lilims::Error:", e.what());
  }
  return 0;
}
