/* phos.h: phos's embedding C API (docs/design.md, "Interfaces"), without C++ across the boundary,
 * in two modes behind one API. Client mode: a program talks to a running phosd over its HTTP API.
 *
 *   phos_client* client;
 *   if (phos_connect("http://127.0.0.1:7070", getenv("PHOS_TOKEN"), &client) != PHOS_OK) {
 *     fprintf(stderr, "%s\n", phos_last_error());
 *   }
 *   ...
 *   phos_close(client);
 *
 * Embedded mode: phos_runtime_open runs the daemon itself (pools, store, API server, instances;
 * what phosd runs) inside the calling process, and phos_runtime_connect gives a client of it, on
 * which every call below works as it does on a phosd.
 *
 * The ABI is stable: libphos.so.1 exports these functions under the symbol version PHOS_1, and
 * later versions only add. Handles are opaque. Options and result structs begin with struct_size,
 * which the caller sets to sizeof the struct it was compiled with: a newer library reads and
 * writes only that much of it (fields it does not receive take their zero defaults), and refuses a
 * size smaller than this first version's.
 *
 * Every call returns a phos_status. On failure, phos_last_error() says why, for the calling
 * thread. One client may be used from many threads at once; phos_close must come after every
 * other call on it has returned. Memory this library hands out (JSON answers, response bytes) is
 * released with phos_free. Nothing here throws, and callbacks must not throw or longjmp out. */
#ifndef PHOS_PHOS_H_
#define PHOS_PHOS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API version this header describes; phos_api_version() says the library's. */
#define PHOS_API_VERSION 1

/* Marks what libphos.so exports; everything else in it is hidden. */
#if defined(__GNUC__)
#define PHOS_EXPORT __attribute__((visibility("default")))
#else
#define PHOS_EXPORT
#endif

/* What a call came to. The values never change; later versions may add codes, which a caller
 * treats as failures it does not know. */
typedef enum phos_status {
  PHOS_OK = 0,
  PHOS_INVALID_ARGUMENT = 1,    /* the caller's arguments, or the request phosd was given (HTTP 400) */
  PHOS_NOT_FOUND = 2,           /* no such function, instance or artifact (404) */
  PHOS_ALREADY_EXISTS = 3,      /* a function of that name is deployed (409 on deploy) */
  PHOS_FAILED_PRECONDITION = 4, /* phosd is not in a state where the call can run (409, 412) */
  PHOS_UNAVAILABLE = 5,         /* phosd unreachable, or stopping (503) */
  PHOS_UNAUTHENTICATED = 6,     /* the call needs a token and bore none (401) */
  PHOS_PERMISSION_DENIED = 7,   /* the token is not the one the call needs (403) */
  PHOS_TIMEOUT = 8,             /* a deadline passed (504) */
  PHOS_FUNCTION_ERROR = 9,      /* the function itself failed the request (invoke: 400, 500) */
  PHOS_INSTANCE_LOST = 10,      /* the instance serving the request ended (502) */
  PHOS_TOO_MANY_REQUESTS = 11,  /* phosd refused more work for now (429) */
  PHOS_NOT_SUPPORTED = 12,      /* not built, or not in this version (501) */
  PHOS_INTERNAL = 13            /* phosd or this library broke an invariant (500) */
} phos_status;

typedef struct phos_client phos_client;

/* The library's API version (PHOS_API_VERSION it was built with). */
PHOS_EXPORT int phos_api_version(void);

/* "PHOS_OK", "PHOS_NOT_FOUND", ...; "PHOS_UNKNOWN_STATUS" for a value this version does not know.
 * The string is static. */
PHOS_EXPORT const char* phos_status_name(phos_status status);

/* Why the calling thread's last failed call failed ("" before any failure). Valid until the
 * thread's next failing call. */
PHOS_EXPORT const char* phos_last_error(void);

/* This library's version, phos's ("0.1.0"): a static string. */
PHOS_EXPORT const char* phos_version(void);

/* Releases memory a call of this library returned. NULL is ignored. */
PHOS_EXPORT void phos_free(void* memory);

/* Opens a client of the phosd at `endpoint`, "http://HOST:PORT", or "unix:///PATH" for the Unix
 * socket phosd listens on (phosd --listen-unix PATH), and checks that it answers (GET /healthz).
 * Calls bear `token` (Authorization: Bearer): the admin token for deploys, removals, instances and
 * checkpoints, a function's invoke token (or the admin token) for invoke; NULL or "" for none.
 * Another form is PHOS_INVALID_ARGUMENT; a phosd that cannot be reached PHOS_UNAVAILABLE. */
PHOS_EXPORT phos_status phos_connect(const char* endpoint, const char* token, phos_client** out);

/* Releases the client. NULL is ignored. */
PHOS_EXPORT phos_status phos_close(phos_client* client);

/* A function to deploy. Fields after struct_size left zero take their defaults. */
typedef struct phos_deploy_options {
  size_t struct_size; /* sizeof(phos_deploy_options) */
  /* The function's name: letters, digits, '_', '-' and '.'. Required. */
  const char* name;
  /* Its executable: a path (relative ones from this process's working directory) under one of
   * phosd's --functions-dir, on phosd's machine. Required. */
  const char* executable;
  /* Nonzero: this process reads `executable` and uploads it to phosd (POST /v1/artifacts, kept by
   * its SHA-256), so it may lie anywhere this process can read. Default: 0. */
  int upload;
  /* Its arguments (after the program name), `arg_count` of them. Default: none. */
  const char* const* args;
  size_t arg_count;
  /* Instances phosd keeps running (warm); 0: none until a request comes (scale to zero).
   * Default: 0. */
  int instances;
  /* The most instances at once, warm ones included; 0: `instances` (at least 1). Default: 0. */
  int max_instances;
  /* Devices each instance uses; 0: 1. Default: 0. */
  int gpus;
  /* A request (its text) run once deployed, from which phosd learns the order in which the function
   * first touches its buffers. Default: NULL, none. */
  const char* sample_request;
  /* The sample request's deadline in milliseconds; 0: phosd's. Default: 0. */
  uint32_t sample_timeout_ms;
} phos_deploy_options;

/* Deploys a function; returns once its snapshots are committed. `answer_json` (may be NULL): phosd's
 * answer, the spec with what became of the sample request ("sample": {"ok", "first_touch_learned",
 * "error"}) and "contexts_ready"; NUL-terminated, released with phos_free. */
PHOS_EXPORT phos_status phos_deploy(phos_client* client, const phos_deploy_options* options,
                                    char** answer_json);

/* The deployed functions: GET /v1/functions's JSON, {"functions": [spec + "state", ...]}
 * (environment values redacted unless the client bears the admin token). */
PHOS_EXPORT phos_status phos_list(phos_client* client, char** json);

/* One function: {"function": its entry of phos_list, "instances": [{"id", "state", "pid", "mode",
 * "restored", "device"}, ...]}. Needs the admin token. */
PHOS_EXPORT phos_status phos_describe(phos_client* client, const char* name, char** json);

/* Removes a function and ends its instances. */
PHOS_EXPORT phos_status phos_remove(phos_client* client, const char* name);

/* How one invocation is served. NULL options: the defaults. */
typedef struct phos_invoke_options {
  size_t struct_size; /* sizeof(phos_invoke_options) */
  /* How a new instance is brought up if one is needed: "auto", "cold-boot", "stop-the-world",
   * "eager", "no-pool", "no-order", "phos" or "warm" (README, "Restore modes"). Default: NULL,
   * "auto". */
  const char* restore_mode;
  /* The invocation's deadline in milliseconds; 0: phosd's --invoke-timeout-ms. Default: 0. */
  uint32_t timeout_ms;
} phos_invoke_options;

/* What phosd said about a served invocation (its X-Phos-* headers). */
typedef struct phos_invoke_info {
  size_t struct_size; /* sizeof(phos_invoke_info), set by the caller */
  /* The restore mode that served it ("warm" for an idle instance, "phos", ...); "" if not said. */
  char restore_mode[32];
  /* Microseconds from the request's arrival to the first byte of the answer, for an instance
   * brought up for this request; -1 when not said (a warm instance). */
  int64_t first_byte_us;
} phos_invoke_info;

/* Invokes function `name` with `request_len` bytes of `request`. On PHOS_OK, *response holds the
 * answer's *response_len bytes (followed by a NUL not counted, so text prints as is), released with
 * phos_free. `options` and `info` may be NULL. A function's own refusal or failure is
 * PHOS_FUNCTION_ERROR, its message phos_last_error(). */
PHOS_EXPORT phos_status phos_invoke(phos_client* client, const char* name, const void* request,
                                    size_t request_len, const phos_invoke_options* options, void** response,
                                    size_t* response_len, phos_invoke_info* info);

/* Receives a streamed answer's bytes as they arrive; returns 0 to go on, nonzero to stop. */
typedef int (*phos_chunk_fn)(void* user, const void* data, size_t len);

/* Invokes as phos_invoke does, handing the answer to `on_chunk` piece by piece as it arrives (a
 * function that answers in pieces: each piece as soon as phosd forwards it; one that answers at
 * once: one or more pieces). After `on_chunk` returns nonzero it is not called again and the call
 * returns PHOS_OK once phosd's answer has ended (the rest of it is read and dropped: this version
 * cannot end the transfer early). An answer phosd cuts short after it began is
 * PHOS_INSTANCE_LOST. */
PHOS_EXPORT phos_status phos_invoke_stream(phos_client* client, const char* name, const void* request,
                                           size_t request_len, const phos_invoke_options* options,
                                           phos_chunk_fn on_chunk, void* user, phos_invoke_info* info);

/* Checkpoints a running instance of `name` (docs/design.md D10): `instance` (0: an idle one phosd
 * picks), in `mode` ("stop-the-world", "soft-cow" or "soft-recopy"; NULL: stop-the-world). Returns
 * once the new snapshot is committed. `answer_json` (may be NULL): {"function", "instance", "mode",
 * "version", "stall_us", "total_us", ...}. */
PHOS_EXPORT phos_status phos_checkpoint(phos_client* client, const char* name, uint64_t instance,
                                        const char* mode, char** answer_json);

/* phosd's metrics (GET /metrics): Prometheus text, NUL-terminated. */
PHOS_EXPORT phos_status phos_stats(phos_client* client, char** text);

/* What became of an instance (phos_watch_events). The values never change; later versions may add
 * kinds, which a caller ignores. */
typedef enum phos_event_kind {
  PHOS_EVENT_STARTED = 1,  /* ready: spawned, or forked without GPU state from a snapshot */
  PHOS_EVENT_RESTORED = 2, /* ready: its GPU state restored from a snapshot */
  PHOS_EVENT_EVICTED = 3,  /* asked to end, idle, because a restore needed its place */
  PHOS_EVENT_ENDED = 4     /* its process is gone */
} phos_event_kind;

/* One event; its strings live for the callback's call only. */
typedef struct phos_event {
  size_t struct_size; /* sizeof(phos_event) of the library that made it: fields past it are absent */
  phos_event_kind kind;
  const char* function;
  uint64_t version; /* the function's version the instance is of */
  uint64_t instance;
  const char* mode; /* how it was brought up: a restore mode, or "warm" */
  int64_t time_ms;  /* when, in Unix time */
} phos_event;

typedef void (*phos_event_fn)(void* user, const phos_event* event);
typedef struct phos_watch phos_watch;

/* Calls `on_event` from a thread of the watch's own with each event phosd tells from now on
 * (GET /v1/events), in order, until phos_watch_stop; returns once phosd has begun telling, so no
 * later event is missed. `client` must outlive the watch. When phosd stops or goes away the watch
 * ends by itself: `on_event` is not called again. */
PHOS_EXPORT phos_status phos_watch_events(phos_client* client, phos_event_fn on_event, void* user,
                                          phos_watch** out);

/* Ends the watch (within about a second), waits for its thread and frees it; `on_event` is not
 * called once it returns. PHOS_OK, or why the watch had ended before (PHOS_UNAVAILABLE: phosd
 * stopped or could not be reached), its message phos_last_error(). Not from `on_event`. */
PHOS_EXPORT phos_status phos_watch_stop(phos_watch* watch);

/* ---- Embedded mode ---- */

typedef struct phos_runtime phos_runtime;

/* The daemon run inside this process: phosd's flags of the same names, phosd's defaults. */
typedef struct phos_runtime_options {
  size_t struct_size; /* sizeof(phos_runtime_options) */
  /* Its data directory (functions.json, the snapshot store, logs, gpu.sock, admin.token); made if
   * missing. Required. */
  const char* data_dir;
  /* "sim", "cuda" or "auto" (cuda when NVIDIA's driver loads). Default: NULL, auto. */
  const char* gpu;
  /* Directories whose executables deploys may name, `functions_dir_count` of them. Default: none,
   * <data_dir>/functions. */
  const char* const* functions_dirs;
  size_t functions_dir_count;
  /* Where its HTTP API listens, for other processes ("HOST:PORT"; port 0: a free one). Default: NULL,
   * a free loopback port (phos_runtime_endpoint says which). */
  const char* listen;
  /* "trace", "debug", "info", "warn", "error" or "off": what it logs on standard error. Default: NULL,
   * warn. */
  const char* log_level;
  /* "auto", "on" or "off": whether functions run sandboxed (phosd --sandbox). Default: NULL, auto. */
  const char* sandbox;
  /* Added after the first layout (read only when struct_size reaches them): directories of the
   * simgpu module images its functions may load, `trusted_module_dir_count` of them (phosd
   * --trusted-modules-dir). Default: none, the phos/modules directory beside libphos.so (the
   * example functions'). */
  const char* const* trusted_module_dirs;
  size_t trusted_module_dir_count;
} phos_runtime_options;

/* Starts the daemon in this process; returns once it serves. One process may run several, each on
 * its own data directory. Ignores SIGPIPE when the process has left it at its default (a function
 * that dies mid-answer would otherwise end the host process). The simgpu library and module images
 * are found beside libphos.so (its lib directory, and modules/ there). */
PHOS_EXPORT phos_status phos_runtime_open(const phos_runtime_options* options, phos_runtime** out);
/* A client of `runtime`, bearing its admin token; released with phos_close, before
 * phos_runtime_close. */
PHOS_EXPORT phos_status phos_runtime_connect(phos_runtime* runtime, phos_client** out);
/* Where other processes reach its HTTP API: "http://HOST:PORT". Valid until phos_runtime_close. */
PHOS_EXPORT const char* phos_runtime_endpoint(const phos_runtime* runtime);
/* Ends its instances (invocations under way are answered 503), stops it and frees it. Every other
 * call on it, and every call on its clients, must have returned. */
PHOS_EXPORT phos_status phos_runtime_close(phos_runtime* runtime);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_PHOS_H_ */
