/* embedded_gateway: a tiny HTTP gateway with phos embedded (phos.h, libphos.so, embedded mode). It
 * runs the phos daemon inside its own process (phos_runtime_open), deploys the mlp function, and
 * answers its own HTTP requests — POST /invoke/<function> with the request as the body — by
 * invoking the function through the C API, the way a FaaS platform's front end would.
 *
 *   build/bin/capi_embedded_gateway /tmp/gw build/bin/functions/mlp 8080 100
 *   curl -d '{"seed": 7}' http://127.0.0.1:8080/invoke/mlp
 *
 * Arguments: the embedded daemon's data directory, the mlp executable (the functions directory is
 * the one it lies in), the port to listen on (0: any; the port is printed), and how many requests
 * to serve before it removes mlp and exits (0: for ever). One request per connection, one at a
 * time: an example, not a server. Exit code 0 when everything went as it should, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "phos.h"

static int fail(const char* call, phos_status status) {
  fprintf(stderr, "embedded_gateway: %s: %s: %s\n", call, phos_status_name(status), phos_last_error());
  return 1;
}

static void send_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n <= 0) return;
    data += n;
    len -= (size_t)n;
  }
}

static void answer(int fd, int status, const char* reason, const void* body, size_t len) {
  char head[160];
  int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
                   reason, len);
  send_all(fd, head, (size_t)n);
  send_all(fd, (const char*)body, len);
}

/* Reads one request (head and a Content-Length body of at most 1 MiB) and answers it. */
static void serve(phos_client* client, int fd) {
  static char buffer[(1 << 20) + 8192];
  size_t got = 0;
  char* body = NULL;
  size_t body_len = 0;
  char function[65];
  for (;;) {
    ssize_t n = recv(fd, buffer + got, sizeof buffer - 1 - got, 0);
    if (n <= 0) return;
    got += (size_t)n;
    buffer[got] = '\0';
    if (body == NULL) {
      char* end = strstr(buffer, "\r\n\r\n");
      const char* length;
      if (end == NULL) continue;
      body = end + 4;
      length = strstr(buffer, "Content-Length:");
      body_len = length != NULL && length < end ? strtoul(length + 15, NULL, 10) : 0;
      if (body_len > (1u << 20)) {
        answer(fd, 413, "Payload Too Large", "", 0);
        return;
      }
    }
    if ((size_t)(buffer + got - body) >= body_len) break;
  }
  if (sscanf(buffer, "POST /invoke/%64[A-Za-z0-9_.-] ", function) != 1) {
    const char* usage = "POST /invoke/<function>\n";
    answer(fd, 404, "Not Found", usage, strlen(usage));
    return;
  }
  {
    void* response = NULL;
    size_t response_len = 0;
    phos_status s = phos_invoke(client, function, body, body_len, NULL, &response, &response_len, NULL);
    if (s == PHOS_OK) {
      answer(fd, 200, "OK", response, response_len);
    } else {
      const char* why = phos_last_error();
      answer(fd, s == PHOS_NOT_FOUND ? 404 : 502, s == PHOS_NOT_FOUND ? "Not Found" : "Bad Gateway", why, strlen(why));
    }
    phos_free(response);
  }
}

int main(int argc, char** argv) {
  phos_runtime_options options;
  phos_deploy_options deploy;
  phos_runtime* runtime = NULL;
  phos_client* client = NULL;
  const char* args[] = {"--size-mib", "16", "--layers", "4"};
  char functions_dir[4096];
  const char* dirs[1];
  char* slash;
  struct sockaddr_in addr;
  socklen_t addr_len = sizeof addr;
  long requests, served = 0;
  int listener, status = 0;
  phos_status s;

  if (argc != 5) {
    fprintf(stderr, "usage: embedded_gateway DATA_DIR MLP_EXECUTABLE PORT REQUESTS\n");
    return 2;
  }
  snprintf(functions_dir, sizeof functions_dir, "%s", argv[2]);
  slash = strrchr(functions_dir, '/');
  if (slash != NULL) *slash = '\0';
  dirs[0] = slash != NULL ? functions_dir : ".";
  requests = strtol(argv[4], NULL, 10);

  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.data_dir = argv[1];
  options.gpu = "sim";
  options.functions_dirs = dirs;
  options.functions_dir_count = 1;
  s = phos_runtime_open(&options, &runtime);
  if (s != PHOS_OK) return fail("runtime_open", s);
  s = phos_runtime_connect(runtime, &client);
  if (s != PHOS_OK) return fail("runtime_connect", s);

  memset(&deploy, 0, sizeof deploy);
  deploy.struct_size = sizeof deploy;
  deploy.name = "mlp";
  deploy.executable = argv[2];
  deploy.args = args;
  deploy.arg_count = 4;
  deploy.instances = 1;
  s = phos_deploy(client, &deploy, NULL);
  if (s != PHOS_OK) return fail("deploy", s);

  listener = socket(AF_INET, SOCK_STREAM, 0);
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((unsigned short)atoi(argv[3]));
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 || listen(listener, 16) != 0 ||
      getsockname(listener, (struct sockaddr*)&addr, &addr_len) != 0) {
    perror("embedded_gateway: listen");
    return 1;
  }
  printf("listening on 127.0.0.1:%d (phos at %s)\n", ntohs(addr.sin_port), phos_runtime_endpoint(runtime));
  fflush(stdout);
  while (requests == 0 || served < requests) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) continue;
    serve(client, fd);
    close(fd);
    ++served;
  }
  close(listener);

  s = phos_remove(client, "mlp");
  if (s != PHOS_OK) status = fail("remove", s);
  phos_close(client);
  s = phos_runtime_close(runtime);
  if (s != PHOS_OK) status = fail("runtime_close", s);
  printf("served %ld requests\n", served);
  return status;
}
