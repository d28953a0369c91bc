// llama.cpp's logits, top-k and greedy tokens with their top-2 margins for one prompt, for
// run_family_llamacpp.py and gen_gemma3_270m_goldens.py. Not part of lilims: it is compiled
// against a llama.cpp build made by scripts/build_llamacpp.sh (a copy of llamacpp_logits.cpp
// that also generates).
//
//   llamacpp_family_logits MODEL N_CTX N_THREADS ids|text N_GEN ROWS(0|1) < prompt
//
// "ids": whitespace-separated token ids on stdin, used as they are. "text": the text on stdin,
// tokenized with the model's vocabulary (its BOS added when the vocabulary says so, special
// tokens not parsed). The prompt runs as one batch from position 0 (KV cache F16 and flash
// attention at llama.cpp's defaults), then N_GEN greedy steps of one token each. Prints:
//   prompt_ids ID...
//   row POS LOGIT...       (ROWS=1 only) every prompt position's n_vocab logits
//   top20 ID:LOGIT...      the last prompt position's 20 largest logits
//   gen ID TOP2ID MARGIN   one line per greedy step: the argmax (lowest id on a tie), the
//                          runner-up and logit[argmax] - logit[runner-up], before the step
//   gen_pieces HEX...      each generated token's text, hex-encoded bytes
// Generation does not stop at end-of-generation tokens.
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

static bool decode(llama_context *ctx, const std::vector<llama_token> &ids, int pos0,
                   bool all_logits) {
  const int n = (int)ids.size();
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = pos0 + i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = all_logits || i + 1 == n;
  }
  batch.n_tokens = n;
  const bool ok = llama_decode(ctx, batch) == 0;
  llama_batch_free(batch);
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL N_CTX N_THREADS ids|text N_GEN ROWS < prompt\n",
                 argv[0]);
    return 2;
  }
  const bool from_text = std::strcmp(argv[4], "text") == 0;
  const int n_gen = std::atoi(argv[5]);
  const bool rows = std::atoi(argv[6]) != 0;

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
  cp.n_threads = std::atoi(argv[3]);
  cp.n_threads_batch = cp.n_threads;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  const llama_vocab *vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::vector<llama_token> ids;
  if (from_text) {
    const std::string text((std::istreambuf_iterator<char>(std::cin)),
                           std::istreambuf_iterator<char>());
    ids.resize(text.size() + 8);
    const int n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(),
                                 (int32_t)ids.size(), true, false);
    if (n <= 0) {
      std::fprintf(stderr, "tokenization failed\n");
      return 1;
    }
    ids.resize(n);
  } else {
    int id = 0;
    while (std::scanf("%d", &id) == 1) ids.push_back(id);
  }
  const int n_prompt = (int)ids.size();
  if (n_prompt == 0 || n_prompt + n_gen > (int)cp.n_ctx) {
    std::fprintf(stderr, "prompt of %d tokens does not fit\n", n_prompt);
    return 1;
  }
  std::printf("prompt_ids");
  for (llama_token t : ids) std::printf(" %d", t);
  std::printf("\n");

  if (!decode(ctx, ids, 0, rows)) {
    std::fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  if (rows) {
    for (int i = 0; i < n_prompt; ++i) {
      const float *r = llama_get_logits_ith(ctx, i);
      std::printf("row %d", i);
      for (int v = 0; v < n_vocab; ++v) std::printf(" %.9g", r[v]);
      std::printf("\n");
    }
  }
  const float *row = llama_get_logits_ith(ctx, -1);
  std::vector<int> order(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  std::printf("top20");
  for (int i = 0; i < 20 && i < n_vocab; ++i) std::printf(" %d:%.9g", order[i], row[order[i]]);
  std::printf("\n");

  std::vector<llama_token> gen;
  int pos = n_prompt;
  for (int i = 0; i < n_gen; ++i) {
    int best = 0, second = -1;
    for (int v = 1; v < n_vocab; ++v) {
      if (row[v] > row[best]) {
        second = best;
        best = v;
      } else if (second < 0 || row[v] > row[second]) {
        second = v;
      }
    }
    if (second < 0) second = best == 0 ? 1 : 0;
    std::printf("gen %d %d %.9g\n", best, second, row[best] - row[second]);
    gen.push_back(best);
    if (i + 1 == n_gen) break;
    if (!decode(ctx, {best}, pos++, false)) {
      std::fprintf(stderr, "llama_decode failed\n");
      return 1;
    }
    row = llama_get_logits_ith(ctx, -1);
  }
  std::printf("gen_pieces");
  for (llama_token t : gen) {
    char buf[256];
    const int n = llama_token_to_piece(vocab, t, buf, sizeof buf, 0, false);
    std::printf(" ");
    if (n <= 0) std::printf("-");
    for (int k = 0; k < n; ++k) std::printf("%02x", (unsigned char)buf[k]);
  }
  std::printf("\n");

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
