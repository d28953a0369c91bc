#include "runtime/manifest.h"

#include <cstdio>

#include "base/error.h"
#include "base/file.h"
#include "base/xxh3.h"
#include "lilims/lilims.h"
#include "quant/quant.h"
#include "base/nlohmann_json.h"

namespace lilims::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "lilims-manifest";
constexpr int kFormatVersion = 1;

[[noreturn]] void bad(const std::string& what) {
  throw Error(LILIMS_ERR_BAD_FORMAT, "[manifest] " + what);
}

// The canonical text: the high half, then the low one, most significant
// digit first (as XXH128_canonicalFromHash orders the bytes).
std::string hex128(Hash128 h) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (uint64_t half : {h.high, h.low}) {
    for (int shift = 60; shift >= 0; shift -= 4) s += digits[(half >> shift) & 15];
  }
  return s;
}

// Hashes [p, p + n) of `file`, giving each stretch's pages back once read
// when the file is mapped (a no-op otherwise), so that checking a model
// does not leave all of it resident.
std::string hash_range(const gguf::File& file, const uint8_t* p, uint64_t n) {
  constexpr uint64_t kStretch = 8u << 20;
  Xxh3Stream st;
  for (uint64_t at = 0; at < n; at += kStretch) {
    const size_t len = (size_t)(n - at < kStretch ? n - at : kStretch);
    st.update(p + at, len);
    file.drop_pages(p + at, len);
  }
  return hex128(st.digest_128());
}

struct Semver {
  long major = 0, minor = 0, patch = 0;
};

// Strict MAJOR.MINOR.PATCH (decimal, no sign, no pre-release tag).
bool parse_semver(const std::string& s, Semver* v) {
  long parts[3];
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    if (at >= s.size() || s[at] < '0' || s[at] > '9') return false;
    long x = 0;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
      if (x > 100000000) return false;
      x = x * 10 + (s[at++] - '0');
    }
    parts[i] = x;
    if (i < 2) {
      if (at >= s.size() || s[at] != '.') return false;
      ++at;
    }
  }
  if (at != s.size()) return false;
  *v = {parts[0], parts[1], parts[2]};
  return true;
}

bool older(const Semver& a, const Semver& b) {
  if (a.major != b.major) return a.major < b.major;
  if (a.minor != b.minor) return a.minor < b.minor;
  return a.patch < b.patch;
}

const Json& field(const Json& j, const char* key, Json::value_t type, const char* what) {
  auto it = j.find(key);
  if (it == j.end()) bad(std::string("missing \"") + key + "\"" + what);
  const bool ok = it->type() == type ||
                  (type == Json::value_t::number_unsigned && it->is_number_integer() &&
                   it->get<int64_t>() >= 0);
  if (!ok) bad(std::string("\"") + key + "\"" + what + " has the wrong type");
  return *it;
}

uint64_t n_params(const gguf::File& file) {
  uint64_t n = 0;
  for (const gguf::TensorInfo& t : file.tensors()) n += t.n_elements;
  return n;
}

}  // namespace

std::string lilims_version_semver() {
  return std::to_string(LILIMS_VERSION_MAJOR) + "." + std::to_string(LILIMS_VERSION_MINOR) + "." +
         std::to_string(LILIMS_VERSION_PATCH);
}

std::string make_manifest(const gguf::File& file, const ManifestInfo& info) {
  Semver v;
  if (!parse_semver(info.model_version, &v)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[manifest] model version \"" + info.model_version + "\" is not MAJOR.MINOR.PATCH");
  }
  const std::string requires_v =
      info.requires_lilims.empty() ? lilims_version_semver() : info.requires_lilims;
  if (!parse_semver(requires_v, &v)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[manifest] lilims version \"" + requires_v + "\" is not MAJOR.MINOR.PATCH");
  }
  Json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["name"] = file.get_string_or("general.name", "");
  j["architecture"] = file.get_string_or("general.architecture", "");
  j["parameters"] = n_params(file);
  j["model_version"] = info.model_version;
  j["requires_lilims"] = requires_v;
  j["file_size"] = file.file_size();
  j["file_xxh3_128"] = hash_range(file, file.image(), file.file_size());
  Json tensors = Json::array();
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!t.data) {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[manifest] tensor " + t.name + " has type " +
                                              quant::ggml_type_name(t.type) +
                                              ", whose size lilims does not know");
    }
    tensors.push_back({{"name", t.name},
                       {"type", quant::ggml_type_name(t.type)},
                       {"shape", t.ne},
                       {"xxh3_128", hash_range(file, t.data, t.n_bytes)}});
  }
  j["tensors"] = std::move(tensors);
  return j.dump(2) + "\n";
}

void check_manifest(const gguf::File& file, const std::string& manifest_text,
                    const ManifestCheck& check) {
  Json j;
  try {
    j = Json::parse(manifest_text);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) bad("not a JSON object");
  if (field(j, "format", Json::value_t::string, "").get<std::string>() != kFormat) {
    bad(std::string("\"format\" is not \"") + kFormat + "\"");
  }
  const uint64_t format_version =
      field(j, "format_version", Json::value_t::number_unsigned, "").get<uint64_t>();
  if (format_version > (uint64_t)kFormatVersion) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "[manifest] format version " +
                                            std::to_string(format_version) +
                                            " is newer than this lilims reads (" +
                                            std::to_string(kFormatVersion) + ")");
  }
  const std::string need = field(j, "requires_lilims", Json::value_t::string, "").get<std::string>();
  Semver need_v, have_v;
  if (!parse_semver(need, &need_v)) bad("\"requires_lilims\" \"" + need + "\" is not MAJOR.MINOR.PATCH");
  parse_semver(lilims_version_semver(), &have_v);
  if (older(have_v, need_v)) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "[manifest] the model needs lilims " + need +
                                            " or newer; this is " + lilims_version_semver());
  }
  Semver model_v;
  const std::string mv = field(j, "model_version", Json::value_t::string, "").get<std::string>();
  if (!parse_semver(mv, &model_v)) bad("\"model_version\" \"" + mv + "\" is not MAJOR.MINOR.PATCH");

  const uint64_t size = field(j, "file_size", Json::value_t::number_unsigned, "").get<uint64_t>();
  if (size != file.file_size()) {
    bad("the file has " + std::to_string(file.file_size()) + " bytes, the manifest says " +
        std::to_string(size));
  }
  const std::string file_hash = field(j, "file_xxh3_128", Json::value_t::string, "").get<std::string>();
  const Json& tensors = field(j, "tensors", Json::value_t::array, "");
  if (tensors.size() != file.tensors().size()) {
    bad("the file has " + std::to_string(file.tensors().size()) + " tensors, the manifest lists " +
        std::to_string(tensors.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Json& e = tensors[i];
    const std::string at = " of tensor entry " + std::to_string(i);
    if (!e.is_object()) bad("tensor entry " + std::to_string(i) + " is not an object");
    const gguf::TensorInfo& t = file.tensors()[i];
    const std::string name = field(e, "name", Json::value_t::string, at.c_str()).get<std::string>();
    if (name != t.name) bad("tensor " + std::to_string(i) + " is " + t.name + ", the manifest says " + name);
    const std::string type = field(e, "type", Json::value_t::string, at.c_str()).get<std::string>();
    if (type != quant::ggml_type_name(t.type)) {
      bad("tensor " + t.name + " has type " + quant::ggml_type_name(t.type) +
          ", the manifest says " + type);
    }
    const Json& shape = field(e, "shape", Json::value_t::array, at.c_str());
    bool same = shape.size() == t.ne.size();
    for (size_t k = 0; same && k < shape.size(); ++k) {
      same = shape[k].is_number_unsigned() && shape[k].get<uint64_t>() == t.ne[k];
    }
    if (!same) bad("tensor " + t.name + " has another shape than the manifest's " + shape.dump());
    const std::string h = field(e, "xxh3_128", Json::value_t::string, at.c_str()).get<std::string>();
    if (!t.data) {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[manifest] tensor " + t.name + " has type " + type +
                                              ", whose size lilims does not know");
    }
    if (hash_range(file, t.data, t.n_bytes) != h) {
      bad("tensor " + t.name + " differs from the manifest (XXH3-128 " + h + ")");
    }
  }
  if (check.file_hash && hash_range(file, file.image(), file.file_size()) != file_hash) {
    bad("the file differs from the manifest (XXH3-128 " + file_hash + ")");
  }
}

std::string read_manifest_file(const std::string& path) {
  return read_regular_file(path, "manifest");
}

}  // namespace lilims::runtime
