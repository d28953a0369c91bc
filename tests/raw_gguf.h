// A GGUF v3 image written byte by byte, independent of gguf::Writer: for
// tests that need metadata the writer would not produce (wrong element
// types, nested arrays, huge arrays) or that must build the same way on
// every version of the reader.  Metadata only, no tensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lilims::test {

class RawGguf {
 public:
  // GGUF value type ids, as in the spec.
  enum : uint32_t { U8 = 0, I8 = 1, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STR = 8, ARR = 9, U64 = 10 };

  // Starts a key/value pair; the caller appends the payload with the
  // helpers below.
  RawGguf& key(const std::string& k, uint32_t type) {
    str(k);
    u32(type);
    ++n_kv_;
    return *this;
  }
  RawGguf& u8(uint8_t v) { return put(v); }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& i32(int32_t v) { return put(v); }
  RawGguf& f32(float v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& str(const std::string& s) {
    u64(s.size());
    body_ += s;
    return *this;
  }
  RawGguf& array_header(uint32_t elem_type, uint64_t count) {
    u32(elem_type);
    return u64(count);
  }
  RawGguf& bytes(size_t n, char fill) {
    body_.append(n, fill);
    return *this;
  }

  // Shortcuts for whole key/value pairs.
  RawGguf& kv_string(const std::string& k, const std::string& v) { return key(k, STR).str(v); }
  RawGguf& kv_u32(const std::string& k, uint32_t v) { return key(k, U32).u32(v); }
  RawGguf& kv_u64(const std::string& k, uint64_t v) { return key(k, U64).u64(v); }
  RawGguf& kv_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, ARR).array_header(STR, v.size());
    for (const std::string& s : v) str(s);
    return *this;
  }

  std::string image() const {
    std::string out;
    auto put_raw = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    const uint32_t magic = 0x46554747, version = 3;
    const uint64_t n_tensors = 0;
    put_raw(&magic, 4);
    put_raw(&version, 4);
    put_raw(&n_tensors, 8);
    put_raw(&n_kv_, 8);
    return out + body_;
  }

 private:
  template <typename T>
  RawGguf& put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    body_.append(b, sizeof(T));
    return *this;
  }
  std::string body_;
  uint64_t n_kv_ = 0;
};

}  // namespace lilims::test
