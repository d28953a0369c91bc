// The token loop the x86 quantized matmul kernels share: per chunk of
// tokens, a table of per-(token, block) activation values (the kernel's
// Info: scale, offset term) is decoded once, then the chunk is multiplied.
// The table lives on the stack (4096 entries); a chunk is as many tokens as
// fit, a multiple of the kernel's token tile when it can be, so a group's
// weights are re-read from L1/L2 per tile and from memory once per chunk.
// Rows of more than 131072 elements take one token at a time, with the
// table on the heap.
#pragma once

#include <cstdint>
#include <vector>

namespace lilims::kernels {

// fn(j0, m, info): tokens [j0, j0 + m), their table at info (token stride nb).
// decode(j0, m, info) fills the table first.
template <class Info, class Decode, class Fn>
void for_token_chunks(int64_t n, int64_t nb, int64_t tile, Decode decode, Fn fn) {
  constexpr int64_t kInfo = 4096;
  Info stack_info[kInfo];
  std::vector<Info> heap_info;
  Info* info = stack_info;
  int64_t chunk = kInfo / nb;
  if (chunk == 0) {
    heap_info.resize(nb);
    info = heap_info.data();
    chunk = 1;
  }
  if (chunk >= tile) chunk -= chunk % tile;
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t m = n - j0 < chunk ? n - j0 : chunk;
    decode(j0, m, info);
    fn(j0, m, info);
  }
}

}  // namespace lilims::kernels
