/* gateway: a program embedding phos through its C API (phos.h, libphos.so) in client mode. It
 * connects to a running phosd, deploys the mlp function, invokes it once blocking and once
 * streamed, prints both answers and removes the function.
 *
 *   PHOS_TOKEN=$(cat /tmp/phos/admin.token) build/bin/capi_gateway http://127.0.0.1:7070 \
 *       build/bin/functions/mlp 7
 *
 * The executable must lie under one of phosd's --functions-dir (set upload = 1 to send it instead).
 * Exit code 0 when every call succeeded; 1 otherwise, with the failed call's status and message on
 * standard error; 2 for a wrong command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phos.h"

static int fail(const char* call, phos_status status) {
  fprintf(stderr, "gateway: %s: %s: %s\n", call, phos_status_name(status), phos_last_error());
  return 1;
}

/* Called with each piece of the streamed answer as it arrives; 0: keep them coming. */
static int print_piece(void* user, const void* data, size_t len) {
  (void)user;
  fwrite(data, 1, len, stdout);
  return 0;
}

/* Invokes mlp twice with `request`: blocking, then streamed. */
static int invoke_both(phos_client* client, const char* request) {
  void* answer = NULL;
  size_t answer_len = 0;
  phos_invoke_info info;
  phos_status s;

  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  s = phos_invoke(client, "mlp", request, strlen(request), NULL, &answer, &answer_len, &info);
  if (s != PHOS_OK) return fail("invoke", s);
  printf("blocking (served %s): %.*s\n", info.restore_mode, (int)answer_len, (const char*)answer);
  phos_free(answer);

  printf("streamed: ");
  s = phos_invoke_stream(client, "mlp", request, strlen(request), NULL, print_piece, NULL, NULL);
  printf("\n");
  if (s != PHOS_OK) return fail("invoke_stream", s);
  return 0;
}

int main(int argc, char** argv) {
  const char* args[] = {"--size-mib", "16", "--layers", "4"};
  phos_deploy_options deploy;
  phos_client* client = NULL;
  char request[64];
  phos_status s;
  int rc;

  if (argc != 4) {
    fprintf(stderr, "usage: %s ENDPOINT MLP_EXECUTABLE SEED  (token from $PHOS_TOKEN)\n", argv[0]);
    return 2;
  }
  snprintf(request, sizeof request, "{\"seed\": %d}", atoi(argv[3]));

  s = phos_connect(argv[1], getenv("PHOS_TOKEN"), &client);
  if (s != PHOS_OK) return fail("connect", s);

  /* Fields left zero take their defaults. */
  memset(&deploy, 0, sizeof deploy);
  deploy.struct_size = sizeof deploy;
  deploy.name = "mlp";
  deploy.executable = argv[2];
  deploy.args = args;
  deploy.arg_count = sizeof args / sizeof args[0];
  deploy.instances = 1;
  s = phos_deploy(client, &deploy, NULL);
  if (s != PHOS_OK) {
    rc = fail("deploy", s);
    phos_close(client);
    return rc;
  }
  printf("deployed mlp\n");

  rc = invoke_both(client, request);

  s = phos_remove(client, "mlp");
  if (s != PHOS_OK) {
    rc = fail("remove", s);
  } else {
    printf("removed mlp\n");
  }
  phos_close(client);
  return rc;
}
