// GGUF reader (versions 2 and 3) and writer.
//
// The reader maps the file (or reads it into memory, or borrows bytes an app
// holds), parses the header, all metadata and the tensor infos, checks every
// bound, and hands out pointers into the data section.  Any defect throws lilims::Error with a distinct
// status and a message that starts with "[gguf]" and says what is wrong and
// where (key or tensor name, offset).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "quant/quant.h"

namespace lilims::gguf {

// Metadata value types, numbered as in the GGUF spec.
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

const char* value_type_name(ValueType t);

struct ArrayCodec;  // models/gguf.cpp: reads, checks and decodes arrays

// One metadata value.  Scalars are widened into i/u/f (integers: both i and u
// hold the value when it fits; floats: f); strings in s.  An array keeps its
// elements encoded as in the file and decodes one on access, so metadata
// costs no more than the bytes it came from (plus 4 bytes of index per
// string or nested-array element).  A parsed array points into its File's
// image: it and its copies are valid while the File lives (Writer::add
// takes its own copy); arrays made with Value::array own their bytes.
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  ValueType elem_type = ValueType::UINT8;  // for ARRAY; arrays may nest

  bool is_integer() const;  // any of the (u)int types or BOOL

  // Arrays only: size() is 0 and at() throws for any other type.
  size_t size() const { return static_cast<size_t>(count_); }
  bool empty() const { return count_ == 0; }
  // Element k, decoded (a nested array comes back as an ARRAY Value).
  // Throws lilims::Error LILIMS_ERR_INVALID_ARGUMENT for k >= size().
  Value at(size_t k) const;
  // Element k of a STRING array, without a copy; valid as long as the array's
  // bytes are.  Throws LILIMS_ERR_INVALID_ARGUMENT for another element type.
  std::string_view string_at(size_t k) const;
  // An array that owns its encoding of `items` (each of type elem_type;
  // throws LILIMS_ERR_INVALID_ARGUMENT otherwise).
  static Value array(ValueType elem_type, const std::vector<Value>& items);

 private:
  friend struct ArrayCodec;  // models/gguf.cpp: reads, checks and decodes arrays
  uint64_t count_ = 0;
  const uint8_t* data_ = nullptr;  // the encoded elements
  uint64_t data_bytes_ = 0;
  std::vector<uint32_t> offsets_;  // STRING/ARRAY elements: where element k starts in data_
  std::shared_ptr<const std::vector<uint8_t>> owned_;  // data_ points into it when set
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // dimensions, ne[0] the innermost (contiguous) one
  uint32_t type = 0;         // GGML type id (see quant/quant.h)
  uint64_t offset = 0;       // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;      // 0 for a type lilims cannot read (size unknown)
  const uint8_t* data = nullptr;  // into the mapping; nullptr for unreadable types
};

struct OpenOptions {
  bool use_mmap = true;
};

class File {
 public:
  // Throws lilims::Error: LILIMS_ERR_IO (cannot open/read), LILIMS_ERR_BAD_FORMAT
  // (bad magic, unsupported version, truncation, offsets out of range, size
  // overflow, duplicated key or tensor name, misaligned offset, bad string),
  // LILIMS_ERR_UNSUPPORTED only from require_readable_types().
  static std::unique_ptr<File> open(const std::string& path, const OpenOptions& opt = {});
  // Parses an in-memory image (tests); the bytes are copied.
  static std::unique_ptr<File> from_bytes(const void* data, size_t size);
  // Parses `size` bytes the caller owns, without a copy: they must stay
  // valid and unchanged for the life of the File and of every pointer it
  // hands out.  The image must start at a multiple of kImageAlignment (the
  // weights are read in place as floats and blocks); throws
  // LILIMS_ERR_INVALID_ARGUMENT otherwise.  `name` stands for the path in
  // messages.
  static std::unique_ptr<File> from_borrowed(const void* data, size_t size,
                                             const std::string& name);
  // Parses the GGUF image at bytes [offset, offset + size) of an open file
  // (a model inside an Android APK or a bigger bundle).  size 0 means up to
  // the end of the file.  The descriptor is not kept: the caller may close
  // it once this returns.  Mapped with the offset rounded down to a page;
  // when use_mmap is off, or when the offset leaves the image misaligned
  // (offset % kImageAlignment != 0), the bytes are read into memory instead.
  // Throws LILIMS_ERR_IO when the range is not inside the file or cannot be
  // mapped or read, else as open().
  static std::unique_ptr<File> open_fd(int fd, uint64_t offset, uint64_t size,
                                       const OpenOptions& opt = {});
  // Weights are read in place as floats, halves and blocks of them: the
  // image starts at an address with this alignment (malloc's; a mapping's is
  // a page) so that every tensor, aligned within the file, is aligned in memory.
  static constexpr uint64_t kImageAlignment = 16;
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  // The image is lilims' own copy on the heap (read, not mapped or borrowed).
  bool image_on_heap() const { return !owned_.empty(); }
  const std::string& path() const { return path_; }
  // The whole image, file_size() bytes.
  const uint8_t* image() const { return base_; }
  // Offset of the data section (tensor offsets are relative to it).
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const Value* find(const std::string& key) const;
  const TensorInfo* find_tensor(const std::string& name) const;

  // Typed getters.  The *_or forms return the fallback when the key is
  // absent; the required forms throw LILIMS_ERR_MISSING ("[gguf] missing
  // required key llama.block_count").  Both throw LILIMS_ERR_BAD_FORMAT when
  // the key is present with the wrong type or an out-of-range value.
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;  // accepts float or integer values
  double get_float_or(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;

  // Throws LILIMS_ERR_MISSING for an absent tensor, LILIMS_ERR_UNSUPPORTED
  // for a type lilims can neither run nor dequantize ("[gguf] tensor
  // blk.0.ffn_down.weight has type IQ2_XXS, which lilims does not support yet").
  const TensorInfo& require_tensor(const std::string& name) const;
  // Throws LILIMS_ERR_UNSUPPORTED naming the first tensor of an unreadable type.
  void require_readable_types() const;

  // Bytes [p, p + n) of the mapping will not be read soon (their data was
  // copied elsewhere, e.g. repacked): the whole pages among them leave the
  // process's resident memory (read again from the file if touched).  No-op
  // when the file is not mapped.
  void drop_pages(const void* p, size_t n) const;

 private:
  File() = default;
  void load_image(int fd, uint64_t offset, uint64_t size, bool use_mmap);
  void parse();

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  const uint8_t* base_ = nullptr;  // whole file
  uint64_t size_ = 0;
  void* mapping_ = nullptr;        // munmap on destruction when non-null
  size_t mapping_bytes_ = 0;       // from mapping_, which may start before base_ (page rounding)
  std::vector<uint8_t> owned_;     // when not mapped
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_offset_ = 0;
  std::unordered_map<std::string, size_t> key_index_;     // key -> index in kv_
  std::unordered_map<std::string, size_t> tensor_index_;  // name -> index in tensors_
};

// Builds a GGUF v3 file in memory: for converters, quantize and tests.
class Writer {
 public:
  void set_alignment(uint32_t alignment);  // a power of two >= 8; also writes general.alignment
  // Keeps insertion order; adding an existing key replaces its value in place.
  void add(const std::string& key, const Value& value);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // data: n_bytes of the tensor in GGML layout for `type`; copied.  Throws
  // LILIMS_ERR_INVALID_ARGUMENT for a duplicated name, a type id unknown to
  // GGML, or (for types lilims reads) n_bytes not matching the shape.
  void add_tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                  const void* data, uint64_t n_bytes);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws LILIMS_ERR_IO

 private:
  struct PendingTensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_ = 32;
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace lilims::gguf
