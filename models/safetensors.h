// Hugging Face safetensors checkpoints, read in place from a mapping.
//
// A .safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON ({"name": {"dtype": "F16", "shape": [..], "data_offsets": [b, e]},
// "__metadata__": {..}}), then the data; offsets are relative to the end of
// the header.  A sharded checkpoint adds model.safetensors.index.json, whose
// "weight_map" names the shard of every tensor.  The files are hostile until
// proven otherwise: every bound is checked and every error names the file
// and the tensor ("[safetensors] model.safetensors: tensor x: ...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lilims::models {

enum class StDtype { F32, F16, BF16, other };

struct StTensor {
  std::string name;
  std::string dtype_name;          // as in the header ("F32", "BF16", "I64", ...)
  StDtype dtype = StDtype::other;  // other: a dtype lilims does not convert
  std::vector<uint64_t> shape;     // outermost first, as PyTorch
  uint64_t n_elements = 0;
  const uint8_t* data = nullptr;   // into the file's mapping
  uint64_t n_bytes = 0;
  std::string file;                // the file name, for messages
};

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  // Throws lilims::Error: LILIMS_ERR_IO when the file cannot be opened or
  // mapped, LILIMS_ERR_BAD_FORMAT for a header that is truncated, not JSON,
  // or describes tensors that overlap the header, run past the end, or
  // whose byte count does not match dtype and shape.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Parses an image the caller keeps alive (tests); `name` stands for the path.
  static std::unique_ptr<SafetensorsFile> from_image(const uint8_t* data, size_t size,
                                                     const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, StTensor>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  void parse(const std::string& name);

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // munmap'd on destruction when set
  std::map<std::string, StTensor> tensors_;
};

// All the tensors of a model directory: model.safetensors, or the shards
// listed by model.safetensors.index.json.
class SafetensorsSet {
 public:
  // Throws LILIMS_ERR_MISSING when the directory has neither file (or the
  // index names a tensor its shard lacks), LILIMS_ERR_BAD_FORMAT for a bad
  // index (a shard name with a '/', a tensor in two files), else as open().
  static SafetensorsSet open_dir(const std::string& dir);

  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  const StTensor* find(const std::string& name) const;
  size_t n_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, StTensor> tensors_;
};

// The tensor's values as float32 (F32, F16 and BF16 exactly); throws
// LILIMS_ERR_UNSUPPORTED for any other dtype, naming the tensor.
std::vector<float> st_to_f32(const StTensor& t);

}  // namespace lilims::models
