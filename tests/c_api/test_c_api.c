/* Uses lilims from C: open a model, inspect it, tokenize, evaluate, generate
 * with a callback that stops, and check that each kind of misuse gives its
 * status and a message.  argv[1]: stories260K.gguf (../shared/data). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lilims/lilims.h"

static int failures = 0;

#define CHECK(cond)                                                       \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n",       \
              __FILE__, __LINE__, #cond, lilims_last_error());            \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

struct collected {
  int calls;
  int stop_after;
  char text[4096];
  size_t len;
};

static int on_token(void *user_data, lilims_token token, const char *text, size_t len) {
  struct collected *c = (struct collected *)user_data;
  (void)token;
  if (c->len + len < sizeof c->text) {
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = '\0';
  }
  return ++c->calls >= c->stop_after;
}

struct engine_done {
  int calls;
  lilims_status status;
  size_t n_tokens;
};

/* On the engine's thread; read after lilims_engine_free, which joins it. */
static void on_engine_done(void *user_data, const lilims_engine_result *result) {
  struct engine_done *d = (struct engine_done *)user_data;
  ++d->calls;
  d->status = result->status;
  d->n_tokens = result->n_tokens;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_c_api stories260K.gguf\n");
    return 2;
  }
  FILE *probe = fopen(argv[1], "rb");
  if (!probe) {
    fprintf(stderr, "missing %s (../shared/data/stories260K, see SOURCES.md)\n", argv[1]);
    return getenv("LILIMS_REQUIRE_DATA") ? 1 : 77;
  }
  fclose(probe);

  /* misuse first: each gives its status and a message */
  lilims_model *model = NULL;
  CHECK(lilims_model_open("/nonexistent/model.gguf", NULL, &model) == LILIMS_ERR_IO);
  CHECK(model == NULL);
  CHECK(strlen(lilims_last_error()) > 0);
  CHECK(lilims_model_open(NULL, NULL, &model) == LILIMS_ERR_INVALID_ARGUMENT);
  CHECK(lilims_session_create(NULL, NULL, NULL) == LILIMS_ERR_INVALID_ARGUMENT);

  lilims_model_params mp = lilims_model_default_params();
  CHECK(lilims_model_open(argv[1], &mp, &model) == LILIMS_OK);
  if (!model) return 1;

  lilims_model_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(lilims_model_get_info(model, &info) == LILIMS_OK);
  CHECK(strcmp(info.architecture, "llama") == 0);
  CHECK(info.n_vocab == 512);
  CHECK(info.n_layer == 5);
  CHECK(info.n_embd == 64);
  CHECK(info.bos_token == 1);

  /* tokenize: the capacity rule */
  const char *text = "Once upon a time";
  size_t n = 0;
  CHECK(lilims_tokenize(model, text, strlen(text), 1, 0, NULL, 0, &n) ==
        LILIMS_ERR_INVALID_ARGUMENT);
  CHECK(n > 1);
  lilims_token toks[64];
  CHECK(lilims_tokenize(model, text, strlen(text), 1, 0, toks, 64, &n) == LILIMS_OK);
  CHECK(toks[0] == 1);
  char buf[256];
  size_t len = 0;
  CHECK(lilims_detokenize(model, toks + 1, n - 1, buf, sizeof buf, &len) == LILIMS_OK);
  CHECK(len == strlen(text) && memcmp(buf, text, len) == 0);

  /* a session: eval, logits */
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = 64;
  sp.n_threads = 2;
  lilims_session *session = NULL;
  CHECK(lilims_session_create(model, &sp, &session) == LILIMS_OK);
  if (!session) return 1;
  CHECK(lilims_session_logits(session) == NULL);
  CHECK(lilims_session_eval(session, toks, n) == LILIMS_OK);
  CHECK(lilims_session_n_past(session) == (int32_t)n);
  const float *logits = lilims_session_logits(session);
  CHECK(logits != NULL);

  /* a bad token id and an overfull context are refused, nothing evaluated */
  lilims_token bad = 100000;
  CHECK(lilims_session_eval(session, &bad, 1) == LILIMS_ERR_INVALID_ARGUMENT);
  lilims_token many[100];
  for (int i = 0; i < 100; ++i) many[i] = 300;
  CHECK(lilims_session_eval(session, many, 100) == LILIMS_ERR_CONTEXT_FULL);
  CHECK(strstr(lilims_last_error(), "do not fit") != NULL);
  CHECK(lilims_session_n_past(session) == (int32_t)n);

  /* generate from BOS, greedy; the callback stops after 10 pieces */
  CHECK(lilims_session_reset(session) == LILIMS_OK);
  struct collected col;
  memset(&col, 0, sizeof col);
  col.stop_after = 10;
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 40;
  gp.sampling.temperature = 0.0f;
  gp.on_token = on_token;
  gp.user_data = &col;
  lilims_generate_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  /* an empty prompt on an empty session starts from BOS, as llama2.c does */
  CHECK(lilims_generate(session, "", &gp, &stats) == LILIMS_OK);
  CHECK(stats.n_prompt_tokens == 1);
  CHECK(stats.stop_reason == 2);
  CHECK(stats.n_generated_tokens == 10);
  CHECK(col.calls == 10);
  /* llama2.c's greedy output for stories260K begins with this */
  CHECK(strncmp(col.text, "Once upon a time", 16) == 0);
  printf("generated: %s\n", col.text);

  /* the same with a stop string across tokens: " a ti" ends the text */
  CHECK(lilims_session_reset(session) == LILIMS_OK);
  memset(&col, 0, sizeof col);
  col.stop_after = 100;
  const char *stops[] = {" a ti"};
  gp.stop = stops;
  gp.n_stop = 1;
  CHECK(lilims_generate(session, "", &gp, &stats) == LILIMS_OK);
  CHECK(stats.stop_reason == 5);
  CHECK(strcmp(col.text, "Once upon") == 0);
  CHECK(stats.decode_tokens_per_second > 0.0);

  /* an engine: a request submitted and the engine freed at once; its done
   * callback runs exactly once, finished or cancelled */
  lilims_engine_params ep = lilims_engine_default_params();
  ep.n_seq = 2;
  ep.n_ctx = 64;
  ep.n_threads = 1;
  lilims_engine *engine = NULL;
  CHECK(lilims_engine_create(NULL, &ep, &engine) == LILIMS_ERR_INVALID_ARGUMENT);
  CHECK(lilims_engine_create(model, &ep, &engine) == LILIMS_OK);
  struct engine_done done;
  memset(&done, 0, sizeof done);
  uint64_t request_id = 0;
  gp.n_stop = 0;
  gp.on_token = NULL;
  gp.user_data = NULL;
  CHECK(lilims_engine_submit(engine, NULL, 1, &gp, NULL, on_engine_done, &done, &request_id) ==
        LILIMS_ERR_INVALID_ARGUMENT);
  CHECK(lilims_engine_submit(engine, toks, n, &gp, NULL, on_engine_done, &done, &request_id) ==
        LILIMS_OK);
  CHECK(request_id != 0);
  lilims_engine_free(engine);
  CHECK(done.calls == 1);
  CHECK(done.status == LILIMS_OK || done.status == LILIMS_ERR_CANCELLED);

  lilims_session_free(session);
  lilims_model_free(model);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
