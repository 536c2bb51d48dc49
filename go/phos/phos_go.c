/* phos_go.c: phos_go.h's wrappers, compiled by cgo with the package. */
#include "phos_go.h"

#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"

static phos_status finish(phos_status status, char** message) {
  *message = status == PHOS_OK ? NULL : strdup(phos_last_error());
  return status;
}

phos_status phos_go_connect(const char* endpoint, const char* token, phos_client** out, char** message) {
  return finish(phos_connect(endpoint, token, out), message);
}

phos_status phos_go_close(phos_client* client, char** message) { return finish(phos_close(client), message); }

phos_status phos_go_deploy(phos_client* client, const phos_deploy_options* options, char** answer_json,
                           char** message) {
  return finish(phos_deploy(client, options, answer_json), message);
}

phos_status phos_go_list(phos_client* client, char** json, char** message) {
  return finish(phos_list(client, json), message);
}

phos_status phos_go_describe(phos_client* client, const char* name, char** json, char** message) {
  return finish(phos_describe(client, name, json), message);
}

phos_status phos_go_remove(phos_client* client, const char* name, char** message) {
  return finish(phos_remove(client, name), message);
}

phos_status phos_go_invoke(phos_client* client, const char* name, const void* request, size_t request_len,
                           const phos_invoke_options* options, void** response, size_t* response_len,
                           phos_invoke_info* info, char** message) {
  return finish(phos_invoke(client, name, request, request_len, options, response, response_len, info), message);
}

static int on_piece(void* user, const void* data, size_t len) {
  return phosGoPiece((uintptr_t)user, (void*)data, len);
}

phos_status phos_go_invoke_stream(phos_client* client, const char* name, const void* request,
                                  size_t request_len, const phos_invoke_options* options, uintptr_t stream,
                                  phos_invoke_info* info, char** message) {
  return finish(phos_invoke_stream(client, name, request, request_len, options, on_piece, (void*)stream, info),
                message);
}

phos_status phos_go_checkpoint(phos_client* client, const char* name, uint64_t instance, const char* mode,
                               char** answer_json, char** message) {
  return finish(phos_checkpoint(client, name, instance, mode, answer_json), message);
}

phos_status phos_go_stats(phos_client* client, char** text, char** message) {
  return finish(phos_stats(client, text), message);
}

phos_status phos_go_runtime_open(const phos_runtime_options* options, phos_runtime** out, char** message) {
  return finish(phos_runtime_open(options, out), message);
}

phos_status phos_go_runtime_connect(phos_runtime* runtime, phos_client** out, char** message) {
  return finish(phos_runtime_connect(runtime, out), message);
}

phos_status phos_go_runtime_close(phos_runtime* runtime, char** message) {
  return finish(phos_runtime_close(runtime), message);
}
