// llama.cpp's logits and greedy tokens for one prompt with a LoRA adapter, for
// gen_lora_goldens.py. Not part of lilims: it is compiled against a llama.cpp
// build made by scripts/build_llamacpp.sh (a copy of llamacpp_logits.cpp that
// attaches an adapter).
//
//   llamacpp_lora_logits MODEL N_CTX f32|f16 LORA|- SCALE N_GEN < prompt_text
//
// Tokenizes the prompt text read from stdin (the model's BOS added, special
// tokens not parsed), attaches the adapter LORA at user scale SCALE ("-": no
// adapter; llama.cpp's scale is then SCALE * alpha / rank, or SCALE when alpha
// is 0), runs the prompt as one batch from position 0 (one thread, KV cache of
// the given type, flash attention at llama.cpp's default) and prints:
//   prompt_ids ID...
//   top20 ID:LOGIT...      the last prompt position's 20 largest logits
//   gen_ids ID...          up to N_GEN greedy tokens (argmax, lowest id on a
//                          tie), stopping before an end-of-generation token
//   gen_pieces HEX...      each generated token's text, hex-encoded bytes
//   stopped_at_eog 0|1
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

static int argmax(const float *row, int n) {
  int best = 0;
  for (int v = 1; v < n; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

static bool decode(llama_context *ctx, const std::vector<llama_token> &ids, int pos0) {
  const int n = (int)ids.size();
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = pos0 + i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i + 1 == n;  // only the last position's logits are read
  }
  batch.n_tokens = n;
  const bool ok = llama_decode(ctx, batch) == 0;
  llama_batch_free(batch);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL N_CTX f32|f16 LORA|- SCALE N_GEN < prompt_text\n",
                 argv[0]);
    return 2;
  }
  const char *lora_path = argv[4];
  float scale = std::strtof(argv[5], nullptr);
  const int n_gen = std::atoi(argv[6]);

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
  llama_context *ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  if (std::strcmp(lora_path, "-") != 0) {
    llama_adapter_lora *adapter = llama_adapter_lora_init(model, lora_path);
    if (adapter == nullptr) {
      std::fprintf(stderr, "%s: cannot load the adapter\n", lora_path);
      return 1;
    }
    if (llama_set_adapters_lora(ctx, &adapter, 1, &scale) != 0) {
      std::fprintf(stderr, "llama_set_adapters_lora failed\n");
      return 1;
    }
  }

  const llama_vocab *vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::vector<llama_token> ids(text.size() + 8);
  const int n_prompt = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(),
                                      (int32_t)ids.size(), true, false);
  if (n_prompt <= 0 || n_prompt + n_gen > (int)cp.n_ctx) {
    std::fprintf(stderr, "prompt of %d tokens does not fit\n", n_prompt);
    return 1;
  }
  ids.resize(n_prompt);
  std::printf("prompt_ids");
  for (llama_token t : ids) std::printf(" %d", t);
  std::printf("\n");

  if (!decode(ctx, ids, 0)) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  const float *row = llama_get_logits_ith(ctx, -1);
  std::vector<int> order(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  std::printf("top20");
  for (int i = 0; i < 20 && i < n_vocab; ++i) std::printf(" %d:%.9g", order[i], row[order[i]]);
  std::printf("\n");

  std::vector<llama_token> gen;
  bool eog = false;
  int pos = n_prompt;
  for (int i = 0; i < n_gen; ++i) {
    const llama_token t = argmax(row, n_vocab);
    if (llama_vocab_is_eog(vocab, t)) {
      eog = true;
      break;
    }
    gen.push_back(t);
    if (i + 1 == n_gen) break;
    if (!decode(ctx, {t}, pos++)) {
      std::fprintf(stderr, "llama_decode failed\n");
      return 1;
    }
    row = llama_get_logits_ith(ctx, -1);
  }
  std::printf("gen_ids");
  for (llama_token t : gen) std::printf(" %d", t);
  std::printf("\ngen_pieces");
  for (llama_token t : gen) {
    char buf[256];
    const int n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, false);
    std::printf(" ");
    if (n <= 0) std::printf("-");
    for (int k = 0; k < n; ++k) std::printf("%02x", (unsigned char)buf[k]);
  }
  std::printf("\nstopped_at_eog %d\n", eog ? 1 : 0);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
