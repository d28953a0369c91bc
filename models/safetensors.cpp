// safetensors reader: mapping, header validation, sharded index.
#include "models/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/error.h"
#include "base/file.h"
#include "base/fp16.h"
#include "base/nlohmann_json.h"

namespace lilims::models {
namespace {

using nlohmann::json;

// A header beyond this is not a checkpoint (real ones are a few hundred kB).
constexpr uint64_t kMaxHeader = 100ull << 20;

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[safetensors] " + file + ": " + msg);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

uint64_t element_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

StDtype dtype_of(const std::string& dtype) {
  if (dtype == "F32") return StDtype::F32;
  if (dtype == "F16") return StDtype::F16;
  if (dtype == "BF16") return StDtype::BF16;
  return StDtype::other;
}

uint64_t as_u64(const json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_unsigned()) bad(file, what + " is not a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) munmap(mapping_, size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  unsigned long long size = 0;
  const int fd = open_regular_file(path, "safetensors", &size);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) {
      throw Error(LILIMS_ERR_IO, "[safetensors] " + path + ": cannot map the file");
    }
    f->mapping_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
  } else {
    ::close(fd);
  }
  f->size_ = static_cast<size_t>(size);
  f->parse(base_name(path));
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_image(const uint8_t* data, size_t size,
                                                             const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->base_ = data;
  f->size_ = size;
  f->parse(name);
  return f;
}

void SafetensorsFile::parse(const std::string& name) {
  if (size_ < 8) bad(name, "truncated: " + std::to_string(size_) + " bytes, no header length");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | base_[k];
  if (n > size_ - 8 || n > kMaxHeader) {
    bad(name, "header length " + std::to_string(n) + " does not fit the file's " +
                  std::to_string(size_) + " bytes");
  }
  json header;
  try {
    header = json::parse(base_ + 8, base_ + 8 + n);
  } catch (const json::exception& e) {
    bad(name, std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) bad(name, "header is not a JSON object");
  const uint8_t* data = base_ + 8 + n;
  const uint64_t data_size = size_ - 8 - n;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") continue;
    const std::string tn = "tensor " + item.key();
    const json& v = item.value();
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2) {
      bad(name, tn + ": expected {\"dtype\": string, \"shape\": [..], \"data_offsets\": [b, e]}");
    }
    StTensor t;
    t.name = item.key();
    t.file = name;
    t.dtype_name = v["dtype"].get<std::string>();
    t.dtype = dtype_of(t.dtype_name);
    const uint64_t esize = element_bytes(t.dtype_name);
    if (esize == 0) bad(name, tn + ": unknown dtype " + t.dtype_name);
    t.n_elements = 1;
    for (const json& d : v["shape"]) {
      const uint64_t dim = as_u64(d, name, tn + " shape entry");
      t.shape.push_back(dim);
      if (__builtin_mul_overflow(t.n_elements, dim, &t.n_elements)) bad(name, tn + ": shape overflows");
    }
    const uint64_t begin = as_u64(v["data_offsets"][0], name, tn + " data_offsets[0]");
    const uint64_t end = as_u64(v["data_offsets"][1], name, tn + " data_offsets[1]");
    if (begin > end || end > data_size) {
      bad(name, tn + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") outside the " + std::to_string(data_size) + " data bytes");
    }
    uint64_t want = 0;
    if (__builtin_mul_overflow(t.n_elements, esize, &want) || want != end - begin) {
      bad(name, tn + ": " + std::to_string(end - begin) + " bytes for " +
                    std::to_string(t.n_elements) + " " + t.dtype_name + " elements");
    }
    t.data = data + begin;
    t.n_bytes = want;
    tensors_.emplace(t.name, std::move(t));
  }
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  SafetensorsSet set;
  auto add_file = [&set](const std::string& path) {
    set.files_.push_back(SafetensorsFile::open(path));
    return set.files_.back().get();
  };
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  unsigned long long ignored = 0;
  bool have_index = false;
  try {
    ::close(open_regular_file(index_path, "safetensors", &ignored));
    have_index = true;
  } catch (const Error&) {
  }
  if (!have_index) {
    try {
      ::close(open_regular_file(single_path, "safetensors", &ignored));
    } catch (const Error&) {
      throw Error(LILIMS_ERR_MISSING, "[safetensors] " + dir +
                                          " has neither model.safetensors nor "
                                          "model.safetensors.index.json");
    }
    set.tensors_ = add_file(single_path)->tensors();
    return set;
  }

  const std::string index_name = "model.safetensors.index.json";
  json index;
  try {
    index = json::parse(read_regular_file(index_path, "safetensors"));
  } catch (const json::exception& e) {
    bad(index_name, std::string("not JSON: ") + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    bad(index_name, "no \"weight_map\" object");
  }
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string()) bad(index_name, "weight_map[" + item.key() + "] is not a file name");
    const std::string shard = item.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      bad(index_name, "weight_map[" + item.key() + "] = '" + shard + "' is not a file name");
    }
    auto it = shards.find(shard);
    if (it == shards.end()) it = shards.emplace(shard, add_file(dir + "/" + shard)).first;
    const auto& in_shard = it->second->tensors();
    const auto t = in_shard.find(item.key());
    if (t == in_shard.end()) {
      throw Error(LILIMS_ERR_MISSING, "[safetensors] " + index_name + " puts tensor " +
                                          item.key() + " in " + shard + ", which lacks it");
    }
    set.tensors_.emplace(t->first, t->second);
  }
  for (const auto& s : shards) {
    for (const auto& t : s.second->tensors()) {
      if (!set.tensors_.count(t.first)) {
        bad(index_name, "tensor " + t.first + " of " + s.first + " is missing from weight_map");
      } else if (set.tensors_.at(t.first).file != s.first) {
        bad(index_name, "tensor " + t.first + " is in both " + set.tensors_.at(t.first).file +
                            " and " + s.first);
      }
    }
  }
  return set;
}

const StTensor* SafetensorsSet::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<float> st_to_f32(const StTensor& t) {
  std::vector<float> out(t.n_elements);
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case StDtype::F32:
      if (t.n_bytes) std::memcpy(out.data(), p, t.n_bytes);
      break;
    case StDtype::F16:
      for (uint64_t k = 0; k < t.n_elements; ++k) {
        uint16_t h;
        std::memcpy(&h, p + 2 * k, 2);
        out[k] = fp16_to_fp32(h);
      }
      break;
    case StDtype::BF16:
      for (uint64_t k = 0; k < t.n_elements; ++k) {
        uint16_t h;
        std::memcpy(&h, p + 2 * k, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;  // bf16 is float32's top half
        std::memcpy(&out[k], &bits, 4);
      }
      break;
    case StDtype::other:
      throw Error(LILIMS_ERR_UNSUPPORTED, "[convert] tensor " + t.name + " in " + t.file +
                                              " has dtype " + t.dtype_name +
                                              " (only F32, F16 and BF16 convert)");
  }
  return out;
}

}  // namespace lilims::models
