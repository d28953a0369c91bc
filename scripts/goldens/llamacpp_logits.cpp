// Prints llama.cpp's logits at every position of one prompt, for
// compare_tiny_llamacpp.py. Not part of lilims: it is compiled against a llama.cpp
// build made by scripts/build_llamacpp.sh.
//
//   llamacpp_logits MODEL N_CTX f32|f16 < token_ids > logits
//
// Reads whitespace-separated token ids on stdin, runs them as one batch from
// position 0 (one thread, flash attention off, KV cache of the given type) and
// prints one line of n_vocab logits per position.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL N_CTX f32|f16 < ids\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "%s: cannot load\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)std::atoi(argv[2]);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = std::strcmp(argv[3], "f32") == 0 ? GGML_TYPE_F32 : GGML_TYPE_F16;
  cp.type_v = cp.type_k;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }

  std::vector<llama_token> ids;
  int id = 0;
  while (std::scanf("%d", &id) == 1) ids.push_back(id);
  const int n = (int)ids.size();
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (int i = 0; i < n; ++i) {
    const float *row = llama_get_logits_ith(ctx, i);
    for (int v = 0; v < n_vocab; ++v) std::printf("%.9g%c", row[v], v + 1 == n_vocab ? '\n' : ' ');
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
