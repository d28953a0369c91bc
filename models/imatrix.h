// Importance matrix: for each matmul weight, the mean over the tokens of a
// text of each input column's squared activation (what llama.cpp's imatrix
// collects), written by `lilims imatrix` and read by `lilims quantize
// --imatrix` as per-column weights of the quantizers' error.
//
// File format, version 1, little-endian:
//   char    magic[8] = "LLMSIMAT"
//   uint32  version = 1
//   int32   n_ctx, n_chunks          how it was collected (informative)
//   uint32  n_entries
//   per entry:
//     uint32  name_len; char name[name_len]   the GGUF tensor name
//     uint32  n_cols
//     int64   n_rows                 activation rows (tokens) averaged
//     float   mean_sq[n_cols]        finite, >= 0
// Names are unique; nothing follows the last entry.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lilims::models {

struct ImatrixEntry {
  int64_t n_rows = 0;
  std::vector<float> mean_sq;  // (n_cols)
};

struct Imatrix {
  int32_t n_ctx = 0;
  int32_t n_chunks = 0;
  std::map<std::string, ImatrixEntry> entries;
  // name -> mean_sq, as gguf::RequantizeOptions::importance takes it.
  std::map<std::string, std::vector<float>> importance() const;
};

// Throws lilims::Error "[imatrix] ...": LILIMS_ERR_IO when the file cannot
// be written or read, LILIMS_ERR_BAD_FORMAT when it is not an imatrix file,
// has another version, is truncated, has trailing bytes, repeats a name or
// holds a negative or non-finite value.
void write_imatrix(const std::string& path, const Imatrix& m);
Imatrix read_imatrix(const std::string& path);

}  // namespace lilims::models
