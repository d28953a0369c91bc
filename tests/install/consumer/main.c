/* Greedy continuation of a raw prompt, the generated text alone on stdout
 * (as `lilims run --raw --temp 0` prints it), so that each way of building
 * against an installed lilims can be checked against the command line.
 *   consumer MODEL.gguf PROMPT N_TOKENS */
#include <stdio.h>
#include <stdlib.h>

#include "lilims/lilims.h"

static int print_piece(void *user_data, lilims_token token, const char *text, size_t len) {
  (void)user_data;
  (void)token;
  fwrite(text, 1, len, stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer MODEL.gguf PROMPT N_TOKENS\n");
    return 2;
  }
  if (lilims_abi_version() != LILIMS_ABI_VERSION) {
    fprintf(stderr, "consumer: lilims.h and the library linked in differ\n");
    return 1;
  }
  lilims_model *model = NULL;
  lilims_session *session = NULL;
  lilims_session_params sp = lilims_session_default_params();
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = atoi(argv[3]);
  gp.sampling.temperature = 0.0f;
  gp.on_token = print_piece;
  if (lilims_model_open(argv[1], NULL, &model) != LILIMS_OK ||
      lilims_session_create(model, &sp, &session) != LILIMS_OK ||
      lilims_generate(session, argv[2], &gp, NULL) != LILIMS_OK) {
    fprintf(stderr, "consumer: %s\n", lilims_last_error());
    return 1;
  }
  printf("\n");
  lilims_session_free(session);
  lilims_model_free(model);
  return 0;
}
