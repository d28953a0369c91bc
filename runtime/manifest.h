// A model's manifest: a JSON file shipped beside the GGUF that says what the
// model is (name, architecture, parameter count, semantic version), which
// lilims it needs, and the XXH3-128 of the file and of every tensor, so an
// app can refuse a model that is not the one it shipped.
//
//   {
//     "format": "lilims-manifest", "format_version": 1,
//     "name": "...", "architecture": "llama", "parameters": 134515008,
//     "model_version": "1.0.0", "requires_lilims": "0.1.0",
//     "file_size": 100..., "file_xxh3_128": "<32 hex digits>",
//     "tensors": [{"name": "...", "type": "Q4_1", "shape": [576, 49152],
//                  "xxh3_128": "<32 hex digits>"}, ...]
//   }
//
// Hashes are XXH3-128 with seed 0, written as the canonical big-endian hex
// (XXH128_canonicalFromHash).
#pragma once

#include <cstdint>
#include <string>

#include "models/gguf.h"

namespace lilims::runtime {

struct ManifestInfo {
  std::string model_version = "1.0.0";  // the app's version of the model (semver)
  std::string requires_lilims;          // empty: the version writing the manifest
};

// The manifest of a parsed file, as pretty-printed JSON text.  Throws
// LILIMS_ERR_INVALID_ARGUMENT for a version that is not MAJOR.MINOR.PATCH.
std::string make_manifest(const gguf::File& file, const ManifestInfo& info);

struct ManifestCheck {
  bool file_hash = false;  // also hash the whole file (reads every byte)
};

// Checks `file` against manifest text.  Every tensor's hash is checked (each
// tensor of a mapped file is read, then its pages are given back); the
// file's hash only when asked.  Throws lilims::Error:
//   LILIMS_ERR_BAD_FORMAT   the text is not a manifest (malformed JSON, a
//                           missing or mistyped field), or the file differs
//                           from it (size, a tensor's name, type, shape or
//                           hash, the file's hash), naming what differs;
//   LILIMS_ERR_UNSUPPORTED  a newer manifest format, or a model that needs a
//                           newer lilims than this one.
void check_manifest(const gguf::File& file, const std::string& manifest_text,
                    const ManifestCheck& check);

// Reads a manifest file (LILIMS_ERR_IO when it cannot be read).
std::string read_manifest_file(const std::string& path);

// "MAJOR.MINOR.PATCH" of this build.
std::string lilims_version_semver();

}  // namespace lilims::runtime
