// GGUF v2/v3 reader and v3 writer.  Layout and rules: GGUF_NOTES.md (ggml
// docs/gguf.md).  The file is hostile until proven otherwise: every read is
// checked against the bytes left, every count against what those bytes could
// hold at the smallest element size, every product for overflow.
#include "models/gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "quant/prelaid.h"
#include "quant/quant.h"

namespace lilims::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxNesting = 16;  // arrays of arrays ...; bounds the recursion
constexpr uint32_t kGgmlTypeCount = 40;  // ids >= this are unknown to GGML
// Real models have tens of keys and at most a few thousand tensors; each
// parsed entry costs a few hundred bytes, so the counts bound what a small
// hostile file can make the parser allocate.
constexpr uint64_t kMaxKeys = 1 << 16;
constexpr uint64_t kMaxTensors = 1 << 16;

[[noreturn]] void bad(const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[gguf] " + msg);
}

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Smallest encoded size of one value of type t (for bounding array counts).
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
    case ValueType::STRING:
      return 8;
    case ValueType::ARRAY:
      return 12;  // uint32 elem type + uint64 count
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// A bounds-checked little-endian cursor over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* here() const { return base_ + pos_; }
  void skip(uint64_t n) {
    need(n, "skipped bytes");
    pos_ += n;
  }

  void need(uint64_t n, const char* what) const {
    if (n > left()) {
      bad(std::string("truncated file: ") + what + " needs " + std::to_string(n) +
          " bytes at offset " + std::to_string(pos_) + ", only " + std::to_string(left()) +
          " left");
    }
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // hosts are little-endian (asserted below)
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > left()) {
      bad(std::string(what) + ": string length " + std::to_string(len) + " at offset " +
          std::to_string(at) + " exceeds the " + std::to_string(left()) + " bytes left");
    }
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "lilims reads GGUF on little-endian hosts");

// Fixed encoded size of one element, 0 for STRING and ARRAY (variable).
uint64_t fixed_size(ValueType t) {
  return t == ValueType::STRING || t == ValueType::ARRAY ? 0 : min_encoded_size(t);
}

}  // namespace

// Reads and checks arrays; the one place that knows Value's array storage.
struct ArrayCodec {
  // Reads the array whose element type comes next in c (its payload, after
  // the ARRAY type id), checking every element; v refers to the bytes read
  // and gets an index of where each variable-size element starts.
  static void read(Cursor& c, Value& v, const std::string& key, int depth) {
    if (depth >= kMaxNesting) {
      bad("key " + key + ": arrays nested deeper than " + std::to_string(kMaxNesting) +
          " levels at offset " + std::to_string(c.pos()));
    }
    const uint64_t at = c.pos();
    const uint32_t et = c.read<uint32_t>("array element type");
    if (!valid_value_type(et)) {
      bad("key " + key + ": array element type " + std::to_string(et) + " at offset " +
          std::to_string(at) + " is not a GGUF value type");
    }
    v.type = ValueType::ARRAY;
    v.elem_type = static_cast<ValueType>(et);
    const uint64_t n = c.read<uint64_t>("array count");
    if (n > c.left() / min_encoded_size(v.elem_type)) {
      bad("key " + key + ": array count " + std::to_string(n) + " of " +
          value_type_name(v.elem_type) + " at offset " + std::to_string(at) +
          " cannot fit in the " + std::to_string(c.left()) + " bytes left");
    }
    v.count_ = n;
    v.data_ = c.here();
    v.offsets_.clear();
    const uint64_t start = c.pos();
    if (const uint64_t size = fixed_size(v.elem_type)) {
      if (v.elem_type == ValueType::BOOL) {
        for (uint64_t k = 0; k < n; ++k) check_bool(c, key);
      } else {
        c.skip(n * size);  // n * size <= left, checked above
      }
    } else {
      v.offsets_.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) {
        const uint64_t off = c.pos() - start;
        if (off > std::numeric_limits<uint32_t>::max()) {
          bad("key " + key + ": array at offset " + std::to_string(at) +
              " holds more than 4 GiB of strings or arrays");
        }
        v.offsets_.push_back(static_cast<uint32_t>(off));
        skip_element(c, v.elem_type, key, depth);
      }
    }
    v.data_bytes_ = c.pos() - start;
  }

  // Checks one element of a variable-size type and moves past it.
  static void skip_element(Cursor& c, ValueType t, const std::string& key, int depth) {
    if (t == ValueType::STRING) {
      const uint64_t at = c.pos();
      const uint64_t len = c.read<uint64_t>("string length");
      if (len > c.left()) {
        bad("key " + key + ": string length " + std::to_string(len) + " at offset " +
            std::to_string(at) + " exceeds the " + std::to_string(c.left()) + " bytes left");
      }
      c.skip(len);
      return;
    }
    Value nested;  // checks without an index: only the top-level array keeps one
    read_shallow(c, nested, key, depth + 1);
  }

  // Like read(), but the index is not kept (validation of nested arrays).
  static void read_shallow(Cursor& c, Value& v, const std::string& key, int depth) {
    read(c, v, key, depth);
    std::vector<uint32_t>().swap(v.offsets_);
  }

  static void check_bool(Cursor& c, const std::string& key) {
    const uint64_t at = c.pos();
    const uint8_t b = c.read<uint8_t>("bool value");
    if (b > 1) {
      bad("key " + key + ": bool value " + std::to_string(b) + " at offset " +
          std::to_string(at) + " is neither 0 nor 1");
    }
  }

  // The bytes of element k (to the end of the array).
  static Cursor element(const Value& v, size_t k) {
    if (v.type != ValueType::ARRAY || k >= v.count_) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[gguf] element " + std::to_string(k) + " of a " + value_type_name(v.type) +
                      " value with " + std::to_string(v.count_) + " elements");
    }
    const uint64_t size = fixed_size(v.elem_type);
    const uint64_t off = size ? k * size : v.offsets_[k];
    return Cursor(v.data_ + off, v.data_bytes_ - off);
  }

  // v's elements become bytes[at, at + data_bytes).
  static void set_bytes(Value& v, std::shared_ptr<const std::vector<uint8_t>> bytes, size_t at) {
    v.data_ = bytes->data() + at;
    v.owned_ = std::move(bytes);
  }
  static void share_owner(const Value& from, Value& to) { to.owned_ = from.owned_; }
  static bool owns(const Value& v) { return v.owned_ != nullptr || v.count_ == 0; }
  static const uint8_t* data(const Value& v) { return v.data_; }
  static uint64_t data_bytes(const Value& v) { return v.data_bytes_; }
};

namespace {

void set_unsigned(Value& v, uint64_t x) {
  v.u = x;
  v.i = x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? static_cast<int64_t>(x)
                                                                       : 0;
}
void set_signed(Value& v, int64_t x) {
  v.i = x;
  v.u = x >= 0 ? static_cast<uint64_t>(x) : 0;
}

void read_payload(Cursor& c, ValueType t, Value& v, const std::string& key, int depth) {
  v.type = t;
  switch (t) {
    case ValueType::UINT8: set_unsigned(v, c.read<uint8_t>("uint8 value")); break;
    case ValueType::INT8: set_signed(v, c.read<int8_t>("int8 value")); break;
    case ValueType::UINT16: set_unsigned(v, c.read<uint16_t>("uint16 value")); break;
    case ValueType::INT16: set_signed(v, c.read<int16_t>("int16 value")); break;
    case ValueType::UINT32: set_unsigned(v, c.read<uint32_t>("uint32 value")); break;
    case ValueType::INT32: set_signed(v, c.read<int32_t>("int32 value")); break;
    case ValueType::UINT64: set_unsigned(v, c.read<uint64_t>("uint64 value")); break;
    case ValueType::INT64: set_signed(v, c.read<int64_t>("int64 value")); break;
    case ValueType::FLOAT32: v.f = c.read<float>("float32 value"); break;
    case ValueType::FLOAT64: v.f = c.read<double>("float64 value"); break;
    case ValueType::BOOL: {
      const uint64_t at = c.pos();
      const uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) {
        bad("key " + key + ": bool value " + std::to_string(b) + " at offset " +
            std::to_string(at) + " is neither 0 nor 1");
      }
      set_unsigned(v, b);
      break;
    }
    case ValueType::STRING: v.s = c.read_string(("value of key " + key).c_str()); break;
    case ValueType::ARRAY: ArrayCodec::read(c, v, key, depth); break;
  }
}

std::string type_desc(const Value& v) {
  std::string s = value_type_name(v.type);
  if (v.type == ValueType::ARRAY) s += std::string(" of ") + value_type_name(v.elem_type);
  return s;
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "unknown value type";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::BOOL:
      return true;
    default:
      return false;
  }
}

Value Value::at(size_t k) const {
  Cursor c = ArrayCodec::element(*this, k);
  Value v;
  read_payload(c, elem_type, v, "<array element>", 1);
  if (v.type == ValueType::ARRAY) ArrayCodec::share_owner(*this, v);
  return v;
}

std::string_view Value::string_at(size_t k) const {
  if (type != ValueType::ARRAY || elem_type != ValueType::STRING) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                std::string("[gguf] string_at on a ") + value_type_name(type) + " value");
  }
  Cursor c = ArrayCodec::element(*this, k);
  const uint64_t len = c.read<uint64_t>("string length");
  c.need(len, "string");  // checked when the array was read
  return std::string_view(reinterpret_cast<const char*>(c.here()), static_cast<size_t>(len));
}

// ---------------------------------------------------------------------------
// File (its image is brought in by gguf_image.cpp)

void File::parse() {
  Cursor c(base_, size_);
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x (expected \"GGUF\")", magic);
    bad(buf);
  }
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) bad("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    bad("unsupported GGUF version " + std::to_string(version_) +
        " (only versions 2 and 3; a huge number may mean a big-endian file)");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A KV pair takes at least 8 (key length) + 4 (type) + 1 bytes.
  if (n_kv > c.left() / 13) {
    bad("metadata count " + std::to_string(n_kv) + " cannot fit in the " +
        std::to_string(c.left()) + " bytes left");
  }
  if (n_kv > kMaxKeys) {
    bad("metadata count " + std::to_string(n_kv) + " exceeds the limit of " +
        std::to_string(kMaxKeys) + " keys");
  }
  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = c.pos();
    KeyValue kv;
    kv.key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_value_type(t)) {
      bad("key " + kv.key + " has value type " + std::to_string(t) +
          ", which is not a GGUF value type");
    }
    read_payload(c, static_cast<ValueType>(t), kv.value, kv.key, 0);
    if (!key_index_.emplace(kv.key, kv_.size()).second) {
      bad("duplicated key " + kv.key + " at offset " + std::to_string(at));
    }
    kv_.push_back(std::move(kv));
  }

  if (const Value* a = find("general.alignment")) {
    // Tensor data is read in place as floats and quant blocks: an alignment
    // below 8 would let offsets misalign them.
    if (!a->is_integer() || a->type == ValueType::BOOL || !is_pow2(a->u) || a->u < 8 ||
        a->u > (1u << 30)) {
      bad("general.alignment must be a power of two from 8 to 2^30, got " +
          (a->is_integer() ? std::to_string(a->i) : type_desc(*a)));
    }
    alignment_ = a->u;
  }

  // name (8) + n_dims (4) + type (4) + offset (8) at least.
  if (n_tensors > c.left() / 24) {
    bad("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
        std::to_string(c.left()) + " bytes left");
  }
  if (n_tensors > kMaxTensors) {
    bad("tensor count " + std::to_string(n_tensors) + " exceeds the limit of " +
        std::to_string(kMaxTensors) + " tensors");
  }
  tensors_.reserve(static_cast<size_t>(n_tensors));
  size_t n_prelaid = 0;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = c.pos();
    TensorInfo ti;
    ti.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      bad("tensor " + ti.name + " has " + std::to_string(n_dims) +
          " dimensions (1 to 4 supported)");
    }
    ti.ne.resize(n_dims);
    uint64_t n_el = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ti.ne[d] = c.read<uint64_t>("tensor dimension");
      if (ti.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      if (__builtin_mul_overflow(n_el, ti.ne[d], &n_el)) overflow = true;
    }
    if (overflow || n_el > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad("tensor " + ti.name + ": element count overflows (dimensions too large)");
    }
    ti.n_elements = n_el;
    ti.type = c.read<uint32_t>("tensor type");
    quant::PrelaidType pl;
    const bool prelaid = quant::prelaid_type(ti.type, &pl);
    if (ti.type >= kGgmlTypeCount && !prelaid) {
      bad("tensor " + ti.name + " has type id " + std::to_string(ti.type) +
          (ti.type >= quant::kPrelaidTypeBase && ti.type < quant::kPrelaidTypeBase + 256
               ? ", which is not a GGML type nor a lilims layout this version reads"
               : ", which is not a GGML type"));
    }
    ti.offset = c.read<uint64_t>("tensor offset");
    const quant::TypeTraits* rt = quant::readable_traits(ti.type);
    if (prelaid) {
      // 2-D, whole blocks per row; rows and columns small enough that the
      // padded byte count cannot overflow.
      const uint64_t bs = static_cast<uint64_t>(quant::traits(pl.type).block_size);
      if (n_dims != 2 || ti.ne[0] % bs != 0 || ti.ne[0] == 0 || ti.ne[1] == 0 ||
          ti.ne[0] > (1ull << 32) || ti.ne[1] > (1ull << 32)) {
        bad("tensor " + ti.name + " (" + quant::prelaid_type_name(ti.type) +
            ", laid out for lilims' kernels) must be 2-D with rows of whole " + std::to_string(bs) +
            "-element blocks");
      }
      ti.n_bytes = quant::prelaid_bytes(pl, (int64_t)ti.ne[1], (int64_t)ti.ne[0]);
      ++n_prelaid;
    } else if (rt) {
      const uint64_t bs = static_cast<uint64_t>(rt->block_size);
      if (ti.ne[0] % bs != 0) {
        bad("tensor " + ti.name + ": row length " + std::to_string(ti.ne[0]) +
            " is not a multiple of the " + rt->name + " block size " + std::to_string(bs));
      }
      if (__builtin_mul_overflow(n_el / bs, static_cast<uint64_t>(rt->block_bytes), &ti.n_bytes)) {
        bad("tensor " + ti.name + ": byte size overflows");
      }
    }
    if (!tensor_index_.emplace(ti.name, tensors_.size()).second) {
      bad("duplicated tensor name " + ti.name + " at offset " + std::to_string(at));
    }
    tensors_.push_back(std::move(ti));
  }

  // Data section: aligned start after the infos (only meaningful with tensors).
  const uint64_t end_infos = c.pos();
  uint64_t data_start = end_infos;
  if (!tensors_.empty()) {
    const uint64_t pad = (alignment_ - end_infos % alignment_) % alignment_;
    data_start = end_infos + pad;  // cannot overflow: end_infos <= size_ < 2^63
    if (data_start > size_) {
      bad("truncated file: data section would start at offset " + std::to_string(data_start) +
          ", past the end of the file (" + std::to_string(size_) + " bytes)");
    }
  }
  data_offset_ = data_start;
  const uint64_t data_size = size_ - data_start;
  for (TensorInfo& ti : tensors_) {
    if (ti.offset % alignment_ != 0) {
      bad("tensor " + ti.name + " has offset " + std::to_string(ti.offset) +
          ", not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (ti.offset > data_size || ti.n_bytes > data_size - ti.offset) {
      bad("tensor " + ti.name + " data [" + std::to_string(ti.offset) + ", +" +
          std::to_string(ti.n_bytes) + ") runs past the end of the data section (" +
          std::to_string(data_size) + " bytes)");
    }
    const bool prelaid = quant::prelaid_type(ti.type, nullptr);
    if (prelaid && ti.offset % quant::kPrelaidAlignment != 0) {
      bad("tensor " + ti.name + " (" + quant::prelaid_type_name(ti.type) + ") has offset " +
          std::to_string(ti.offset) + ", not a multiple of " + std::to_string(quant::kPrelaidAlignment) +
          " as lilims' layouts need");
    }
    if (prelaid || quant::readable_traits(ti.type)) ti.data = base_ + data_start + ti.offset;
  }
  // A file with pre-laid tensors says which layout version wrote them.
  if (n_prelaid > 0) {
    const Value* v = find(quant::kLayoutVersionKey);
    if (!v || !v->is_integer() || v->type == ValueType::BOOL) {
      bad(std::to_string(n_prelaid) + " tensors are laid out for lilims' kernels but the file has no integer " +
          quant::kLayoutVersionKey);
    }
    if (v->u != quant::kLayoutVersion) {
      bad(std::string("the tensors are laid out in lilims layout version ") + std::to_string(v->u) +
          "; this lilims reads version " + std::to_string(quant::kLayoutVersion) +
          " (lay the model out again with `lilims quantize --layout`)");
    }
  }
}

const Value* File::find(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &kv_[it->second].value;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void missing_key(const std::string& key) {
  throw Error(LILIMS_ERR_MISSING, "[gguf] missing required key " + key);
}

int64_t as_int(const std::string& key, const Value& v) {
  if (!v.is_integer()) bad("key " + key + " has type " + type_desc(v) + ", expected an integer");
  if (v.type == ValueType::UINT64 &&
      v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    bad("key " + key + " value " + std::to_string(v.u) + " is out of range");
  }
  return v.i;
}

double as_float(const std::string& key, const Value& v) {
  if (v.type == ValueType::FLOAT32 || v.type == ValueType::FLOAT64) return v.f;
  if (v.is_integer() && v.type != ValueType::BOOL) {
    return v.type == ValueType::UINT64 ? static_cast<double>(v.u) : static_cast<double>(v.i);
  }
  bad("key " + key + " has type " + type_desc(v) + ", expected a number");
}

const std::string& as_string(const std::string& key, const Value& v) {
  if (v.type != ValueType::STRING) {
    bad("key " + key + " has type " + type_desc(v) + ", expected a string");
  }
  return v.s;
}

}  // namespace

int64_t File::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) missing_key(key);
  return as_int(key, *v);
}
int64_t File::get_int_or(const std::string& key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? as_int(key, *v) : fallback;
}
double File::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) missing_key(key);
  return as_float(key, *v);
}
double File::get_float_or(const std::string& key, double fallback) const {
  const Value* v = find(key);
  return v ? as_float(key, *v) : fallback;
}
std::string File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) missing_key(key);
  return as_string(key, *v);
}
std::string File::get_string_or(const std::string& key, const std::string& fallback) const {
  const Value* v = find(key);
  return v ? as_string(key, *v) : fallback;
}
bool File::get_bool_or(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::BOOL) bad("key " + key + " has type " + type_desc(*v) + ", expected a bool");
  return v->u != 0;
}

namespace {
[[noreturn]] void unsupported_type(const TensorInfo& t) {
  if (quant::prelaid_type(t.type, nullptr)) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "[gguf] tensor " + t.name + " is laid out for lilims' kernels (" +
                                            quant::prelaid_type_name(t.type) +
                                            "); this reads plain GGUF tensors only (start from the file it was laid out from)");
  }
  throw Error(LILIMS_ERR_UNSUPPORTED, "[gguf] tensor " + t.name + " has type " +
                                          quant::ggml_type_name(t.type) +
                                          ", which lilims does not support yet");
}
}  // namespace

const TensorInfo& File::require_tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(LILIMS_ERR_MISSING, "[gguf] missing required tensor " + name);
  if (!quant::readable_traits(t->type) && !quant::prelaid_type(t->type, nullptr)) {
    unsupported_type(*t);
  }
  return *t;
}

void File::require_readable_types() const {
  for (const TensorInfo& t : tensors_) {
    if (!quant::readable_traits(t.type)) unsupported_type(t);
  }
}

// ---------------------------------------------------------------------------
// Writer

void Writer::set_alignment(uint32_t alignment) {
  if (!is_pow2(alignment) || alignment < 8) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gguf] alignment " + std::to_string(alignment) +
                                                 " is not a power of two of at least 8");
  }
  alignment_ = alignment;
  add_u32("general.alignment", alignment);
}

void Writer::add(const std::string& key, const Value& value) {
  Value own = value;
  if (own.type == ValueType::ARRAY && !ArrayCodec::owns(own)) {
    // A parsed array points into its File, which may go before this writer.
    const uint8_t* p = ArrayCodec::data(own);
    ArrayCodec::set_bytes(own, std::make_shared<const std::vector<uint8_t>>(
                                   p, p + ArrayCodec::data_bytes(own)), 0);
  }
  for (KeyValue& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(own);
      return;
    }
  }
  kv_.push_back({key, std::move(own)});
}

void Writer::add_u32(const std::string& key, uint32_t v) {
  Value x;
  x.type = ValueType::UINT32;
  x.u = v;
  x.i = v;
  add(key, x);
}
void Writer::add_i32(const std::string& key, int32_t v) {
  Value x;
  x.type = ValueType::INT32;
  set_signed(x, v);
  add(key, x);
}
void Writer::add_f32(const std::string& key, float v) {
  Value x;
  x.type = ValueType::FLOAT32;
  x.f = v;
  add(key, x);
}
void Writer::add_bool(const std::string& key, bool v) {
  Value x;
  x.type = ValueType::BOOL;
  x.u = x.i = v ? 1 : 0;
  add(key, x);
}
void Writer::add_string(const std::string& key, const std::string& v) {
  Value x;
  x.type = ValueType::STRING;
  x.s = v;
  add(key, x);
}
void Writer::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> items(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    items[k].type = ValueType::STRING;
    items[k].s = v[k];
  }
  add(key, Value::array(ValueType::STRING, items));
}
void Writer::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> items(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    items[k].type = ValueType::FLOAT32;
    items[k].f = v[k];
  }
  add(key, Value::array(ValueType::FLOAT32, items));
}
void Writer::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> items(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    items[k].type = ValueType::INT32;
    set_signed(items[k], v[k]);
  }
  add(key, Value::array(ValueType::INT32, items));
}

void Writer::add_tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                        const void* data, uint64_t n_bytes) {
  auto invalid = [&](const std::string& m) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gguf] tensor " + name + ": " + m);
  };
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) invalid("added twice");
  }
  if (ne.empty() || ne.size() > kMaxDims) invalid("needs 1 to 4 dimensions");
  quant::PrelaidType pl;
  const bool prelaid = quant::prelaid_type(type, &pl);
  if (type >= kGgmlTypeCount && !prelaid) invalid("type id " + std::to_string(type) + " is not a GGML type");
  const quant::TypeTraits* tr = quant::readable_traits(type);
  if (prelaid) {
    const uint64_t bs = static_cast<uint64_t>(quant::traits(pl.type).block_size);
    if (ne.size() != 2 || ne[0] % bs != 0 || ne[0] == 0 || ne[1] == 0 || ne[0] > (1ull << 32) ||
        ne[1] > (1ull << 32)) {
      invalid("a pre-laid tensor must be 2-D with rows of whole blocks");
    }
    const uint64_t expect = quant::prelaid_bytes(pl, (int64_t)ne[1], (int64_t)ne[0]);
    if (expect != n_bytes) {
      invalid(std::to_string(n_bytes) + " bytes given, " + std::to_string(expect) + " expected");
    }
  } else if (tr) {
    uint64_t n = 1;
    for (uint64_t d : ne) {
      if (__builtin_mul_overflow(n, d, &n)) invalid("element count overflows");
    }
    if (ne[0] % static_cast<uint64_t>(tr->block_size) != 0) {
      invalid("row length is not a multiple of the block size");
    }
    const uint64_t expect = n / static_cast<uint64_t>(tr->block_size) * tr->block_bytes;
    if (expect != n_bytes) {
      invalid(std::to_string(n_bytes) + " bytes given, " + std::to_string(expect) + " expected");
    }
  }
  PendingTensor t;
  t.name = name;
  t.ne = ne;
  t.type = type;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + n_bytes);
  tensors_.push_back(std::move(t));
}

namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  void put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    std::memcpy(b_.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (b_.size() % alignment) b_.push_back(0);
  }

  void payload(ValueType t, const Value& v) {
    switch (t) {
      case ValueType::UINT8: put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case ValueType::INT8: put<int8_t>(static_cast<int8_t>(v.i)); break;
      case ValueType::UINT16: put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case ValueType::INT16: put<int16_t>(static_cast<int16_t>(v.i)); break;
      case ValueType::UINT32: put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case ValueType::INT32: put<int32_t>(static_cast<int32_t>(v.i)); break;
      case ValueType::UINT64: put<uint64_t>(v.u); break;
      case ValueType::INT64: put<int64_t>(v.i); break;
      case ValueType::FLOAT32: put<float>(static_cast<float>(v.f)); break;
      case ValueType::FLOAT64: put<double>(v.f); break;
      case ValueType::BOOL: put<uint8_t>(v.u || v.i ? 1 : 0); break;
      case ValueType::STRING: str(v.s); break;
      case ValueType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.size());
        b_.insert(b_.end(), ArrayCodec::data(v), ArrayCodec::data(v) + ArrayCodec::data_bytes(v));
        break;
    }
  }

 private:
  std::vector<uint8_t>& b_;
};

}  // namespace

Value Value::array(ValueType elem_type, const std::vector<Value>& items) {
  std::vector<uint8_t> b;
  Out o(b);
  o.put<uint32_t>(static_cast<uint32_t>(elem_type));
  o.put<uint64_t>(items.size());
  for (const Value& e : items) {
    if (e.type != elem_type) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  std::string("[gguf] array of ") + value_type_name(elem_type) + " given a " +
                      value_type_name(e.type) + " element");
    }
    o.payload(elem_type, e);
  }
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(b));
  Value v;
  Cursor c(bytes->data(), bytes->size());
  ArrayCodec::read(c, v, "<new array>", 0);
  ArrayCodec::set_bytes(v, bytes, 12);  // after the element type and the count
  return v;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> b;
  Out o(b);
  o.put<uint32_t>(kMagic);
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kv_.size());
  for (const KeyValue& kv : kv_) {
    o.str(kv.key);
    o.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    o.payload(kv.value.type, kv.value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) o.put<uint64_t>(d);
    o.put<uint32_t>(t.type);
    o.put<uint64_t>(offset);
    offset += t.data.size();
    offset += (alignment_ - offset % alignment_) % alignment_;
  }
  if (!tensors_.empty()) {
    o.pad_to(alignment_);
    for (const PendingTensor& t : tensors_) {
      b.insert(b.end(), t.data.begin(), t.data.end());
      o.pad_to(alignment_);
    }
  }
  return b;
}

void Writer::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(LILIMS_ERR_IO, "[gguf] cannot create " + path + ": " + std::strerror(errno));
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    throw Error(LILIMS_ERR_IO, "[gguf] cannot write " + path + ": " + std::strerror(err));
  }
}

}  // namespace lilims::gguf
