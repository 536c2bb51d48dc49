/* phos_go.h: what the Go binding calls in place of phos.h's functions. Each wrapper makes its call
 * and, when it fails, copies phos_last_error() into *message (malloc'd, freed by Go) before it
 * returns. The message is per OS thread and a goroutine may move to another thread between two cgo
 * calls, so reading it in a second call could read some other call's message; inside one C call
 * the thread cannot change. *message is NULL on PHOS_OK (and if the copy could not be allocated). */
#ifndef PHOS_GO_H_
#define PHOS_GO_H_

#include <stddef.h>
#include <stdint.h>

#include "phos.h"

phos_status phos_go_connect(const char* endpoint, const char* token, phos_client** out, char** message);
phos_status phos_go_close(phos_client* client, char** message);
phos_status phos_go_deploy(phos_client* client, const phos_deploy_options* options, char** answer_json,
                           char** message);
phos_status phos_go_list(phos_client* client, char** json, char** message);
phos_status phos_go_describe(phos_client* client, const char* name, char** json, char** message);
phos_status phos_go_remove(phos_client* client, const char* name, char** message);
phos_status phos_go_invoke(phos_client* client, const char* name, const void* request, size_t request_len,
                           const phos_invoke_options* options, void** response, size_t* response_len,
                           phos_invoke_info* info, char** message);
/* phos_invoke_stream with each piece handed to the Go function phosGoPiece along with `stream`, a
 * runtime/cgo.Handle: cgo's rules keep Go pointers out of the `user` pointer C holds. */
phos_status phos_go_invoke_stream(phos_client* client, const char* name, const void* request,
                                  size_t request_len, const phos_invoke_options* options, uintptr_t stream,
                                  phos_invoke_info* info, char** message);
phos_status phos_go_checkpoint(phos_client* client, const char* name, uint64_t instance, const char* mode,
                               char** answer_json, char** message);
phos_status phos_go_stats(phos_client* client, char** text, char** message);
phos_status phos_go_runtime_open(const phos_runtime_options* options, phos_runtime** out, char** message);
phos_status phos_go_runtime_connect(phos_runtime* runtime, phos_client** out, char** message);
phos_status phos_go_runtime_close(phos_runtime* runtime, char** message);

#endif /* PHOS_GO_H_ */
