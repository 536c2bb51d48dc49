// Invocations, blocking and streamed: POST /v1/functions/{name}/invoke, its answer taken piece by
// piece as libcurl receives it (ClientRequest::on_body), as phos-fn invoke prints it.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "client.h"
#include "struct_versions.h"

namespace phos::capi {
namespace {

// phosd's restore modes (README, "Restore modes"; runtime::ParseRestoreMode). Checked here because
// phosd answers a bad X-Phos-Restore-Mode with 400, which on invoke reads as the function's error.
constexpr const char* kRestoreModes[] = {"auto",    "cold-boot", "stop-the-world", "eager",
                                         "no-pool", "no-order",  "phos",           "warm"};

phos_status CheckOptions(const phos_invoke_options* options) {
  if (options == nullptr) return PHOS_OK;
  if (phos_status s = CheckStructSize(options->struct_size, sizeof(v1::InvokeOptions), "phos_invoke_options");
      s != PHOS_OK) {
    return s;
  }
  if (options->restore_mode == nullptr) return PHOS_OK;
  for (const char* mode : kRestoreModes) {
    if (std::strcmp(options->restore_mode, mode) == 0) return PHOS_OK;
  }
  return Fail(PHOS_INVALID_ARGUMENT,
              std::string("restore mode '") + options->restore_mode +
                  "': use auto, cold-boot, stop-the-world, eager, no-pool, no-order, phos or warm");
}

// What phosd said about the call, from its X-Phos-* headers.
void FillInfo(const http::ClientResponse& answer, phos_invoke_info* info) {
  if (const std::string* mode = answer.Header("X-Phos-Restore-Mode")) {
    const size_t n = std::min(mode->size(), sizeof(info->restore_mode) - 1);
    std::memcpy(info->restore_mode, mode->data(), n);
    info->restore_mode[n] = '\0';
  }
  if (const std::string* us = answer.Header("X-Phos-Stage-First-Byte-Us")) {
    char* end = nullptr;
    const long long value = std::strtoll(us->c_str(), &end, 10);
    if (end != us->c_str() && *end == '\0' && value >= 0) info->first_byte_us = value;
  }
}

// Sends one invocation for the entry point `caller`, handing each piece of a successful answer to
// `on_piece` as it arrives.
phos_status Invoke(const char* caller, phos_client* client, const char* name, const void* request,
                   size_t request_len, const phos_invoke_options* options,
                   const std::function<void(std::string_view)>& on_piece, phos_invoke_info* info) {
  if (info != nullptr) {
    if (phos_status s = CheckStructSize(info->struct_size, sizeof(v1::InvokeInfo), "phos_invoke_info");
        s != PHOS_OK) {
      return s;
    }
    info->restore_mode[0] = '\0';
    info->first_byte_us = -1;
  }
  if (client == nullptr) return Fail(PHOS_INVALID_ARGUMENT, std::string(caller) + ": client is NULL");
  if (phos_status s = CheckName(name); s != PHOS_OK) return s;
  if (request == nullptr && request_len != 0) {
    return Fail(PHOS_INVALID_ARGUMENT, std::string(caller) + ": request is NULL but request_len is not 0");
  }
  if (phos_status s = CheckOptions(options); s != PHOS_OK) return s;

  http::ClientRequest call{.method = "POST", .url = std::string("/v1/functions/") + name + "/invoke"};
  if (request_len != 0) call.body.assign(static_cast<const char*>(request), request_len);
  if (options != nullptr && options->restore_mode != nullptr) {
    call.headers.emplace_back("X-Phos-Restore-Mode", options->restore_mode);
  }
  if (options != nullptr && options->timeout_ms > 0) {
    call.headers.emplace_back("X-Phos-Timeout-Ms", std::to_string(options->timeout_ms));
  }
  size_t received = 0;
  call.on_body = [&](std::string_view piece) {
    received += piece.size();
    on_piece(piece);
  };
  const std::string what = std::string("invoke '") + name + "'";
  http::ClientResponse answer;
  phos_status s = Call(*client, std::move(call), Route::kInvoke, what, &answer);
  if (s == PHOS_UNAVAILABLE && received > 0) {
    // phosd ends an answer it had begun sending (in pieces) when the instance fails or the
    // deadline passes before the last piece (frontend/phosd/routes.cc, Responder::Abort).
    return Fail(PHOS_INSTANCE_LOST, what + ": the answer was cut short after " + std::to_string(received) +
                                        " bytes (" + phos_last_error() + ")");
  }
  if (s != PHOS_OK) return s;
  if (info != nullptr) FillInfo(answer, info);
  return PHOS_OK;
}

}  // namespace
}  // namespace phos::capi

using phos::capi::CheckNotNull;
using phos::capi::FailStatic;
using phos::capi::Guard;

extern "C" {

phos_status phos_invoke(phos_client* client, const char* name, const void* request, size_t request_len,
                        const phos_invoke_options* options, void** response, size_t* response_len,
                        phos_invoke_info* info) {
  return Guard([&]() -> phos_status {
    if (phos_status s = CheckNotNull(response, "phos_invoke: response"); s != PHOS_OK) return s;
    if (phos_status s = CheckNotNull(response_len, "phos_invoke: response_len"); s != PHOS_OK) return s;
    *response = nullptr;
    *response_len = 0;
    std::string body;
    auto gather = [&](std::string_view piece) { body.append(piece); };
    phos_status s =
        phos::capi::Invoke("phos_invoke", client, name, request, request_len, options, gather, info);
    if (s != PHOS_OK) return s;
    char* copy = phos::capi::CopyString(body);
    if (copy == nullptr) return FailStatic(PHOS_INTERNAL, "out of memory");
    *response = copy;
    *response_len = body.size();
    return PHOS_OK;
  });
}

phos_status phos_invoke_stream(phos_client* client, const char* name, const void* request, size_t request_len,
                               const phos_invoke_options* options, phos_chunk_fn on_chunk, void* user,
                               phos_invoke_info* info) {
  return Guard([&]() -> phos_status {
    if (on_chunk == nullptr) return FailStatic(PHOS_INVALID_ARGUMENT, "phos_invoke_stream: on_chunk is NULL");
    // phos::http::Fetch reads an answer to its end; once the caller has had enough, the rest is
    // dropped here.
    bool stopped = false;
    auto hand_over = [&](std::string_view piece) {
      if (!stopped && !piece.empty()) stopped = on_chunk(user, piece.data(), piece.size()) != 0;
    };
    return phos::capi::Invoke("phos_invoke_stream", client, name, request, request_len, options, hand_over,
                              info);
  });
}

}  // extern "C"
