// libFuzzer target for the safetensors reader (models/safetensors.h), the
// first thing `lilims convert HF_DIR` does with a downloaded checkpoint.
// For any input bytes: parsing either succeeds or throws lilims::Error (any
// other exception, a crash or a sanitizer report is a finding).  A parsed
// file's tensors lie inside the input, their byte counts match dtype and
// shape, and every F32/F16/BF16 tensor converts to floats (others throw
// lilims::Error).
//
// Run: scripts/fuzz.sh safetensors SECONDS (seeds in tests/fuzz/corpus/safetensors/).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "base/error.h"
#include "models/safetensors.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lilims::models::SafetensorsFile;
  using lilims::models::StDtype;
  try {
    const auto f = SafetensorsFile::from_image(data, size, "fuzz.safetensors");
    for (const auto& kv : f->tensors()) {
      const lilims::models::StTensor& t = kv.second;
      check(t.data >= data + 8 && t.data + t.n_bytes <= data + size, "tensor inside the input");
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      check(n == t.n_elements, "n_elements is the product of the shape");
      try {
        const std::vector<float> v = lilims::models::st_to_f32(t);
        check(v.size() == t.n_elements, "one float per element");
      } catch (const lilims::Error&) {
        check(t.dtype == StDtype::other, "only other dtypes refuse to convert");
      }
    }
  } catch (const lilims::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_safetensors: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
