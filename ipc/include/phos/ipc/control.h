// The control socket: a Unix SOCK_SEQPACKET connection per GPU session, carrying the versioned
// hello and answer, and file descriptors (SCM_RIGHTS). Message boundaries are the datagrams'.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "phos/base/status.h"
#include "phos/ipc/wire.h"

namespace phos::ipc {

// Binds and listens on `path` (an existing socket file there is replaced).
Result<int> ListenSeqpacket(const std::string& path);
Result<int> ConnectSeqpacket(const std::string& path);

// Sends one datagram, with `pass_fd` attached when it is >= 0.
Status SendDatagram(int sock, const void* data, size_t len, int pass_fd = -1);
// Receives one datagram of at most `cap` bytes; a longer one is refused as truncated, not cut.
// A received descriptor is stored in *received_fd (else -1). NotFound when the peer closed.
Result<size_t> ReceiveDatagram(int sock, void* buf, size_t cap, int* received_fd);

Hello MakeHello(std::string_view token, int pid, uint32_t version = kWireVersion);
// Checks a received hello: exact size, magic, version (a mismatch names both), token syntax.
Status CheckHello(const void* data, size_t len, std::string* token);
Answer MakeAnswer(int32_t status, std::string_view message, uint64_t ring_bytes, uint32_t version = kWireVersion);
// Checks a received answer's size, magic and version; returns the server's refusal as an error.
Status CheckAnswer(const void* data, size_t len);

// A fresh token of `bytes` random bytes (128 bits by default) in hex, from getrandom(2).
std::string NewToken(size_t bytes = 16);

}  // namespace phos::ipc
