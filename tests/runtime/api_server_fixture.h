// The API server test fixture: a server on simgpu whose token clock moves only when a test moves
// it, and a hand-written client on the ring (the hello, one call and its answer) — the fixture of
// the protocol-level tests (api_server_test.cc, api_server_stream_test.cc, session_blas_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "phos/driver/driver_table.h"
#include "phos/ipc/control.h"
#include "phos/ipc/ring.h"
#include "phos/runtime/api_server.h"

namespace phos::runtime {

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-server-test-" + std::to_string(getpid()) + ".sock";
    ApiServerOptions options{.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10};
    options.clock = [this] { return now_.load(); };
    Configure(options);
    auto server = ApiServer::Start(options, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  // A fixture's changes to the server's options, before it starts.
  virtual void Configure(ApiServerOptions& /*options*/) {}

  // Says hello with `token` and `version`; returns the answer's status and the ring fd.
  Status Hello(const std::string& token, uint32_t version, int* sock_out, int* ring_fd) {
    auto sock = ipc::ConnectSeqpacket(path_);
    if (!sock.ok()) return sock.status();
    ipc::Hello h = ipc::MakeHello(token, getpid(), version);
    PHOS_RETURN_IF_ERROR(ipc::SendDatagram(*sock, &h, sizeof(h)));
    ipc::Answer a;
    auto n = ipc::ReceiveDatagram(*sock, &a, sizeof(a), ring_fd);
    *sock_out = *sock;
    if (!n.ok()) return n.status();
    // The server's answer to an old frontend still names both versions.
    if (a.wire_version == ipc::kWireVersion && a.status != 0) return Status::FailedPrecondition(a.message);
    return ipc::CheckAnswer(&a, *n);
  }

  // Queues one asynchronous call on `ring`: no answer; a refusal is the session's sticky error.
  void Queue(ipc::Ring& ring, ipc::Op op, const void* payload, size_t bytes) {
    EXPECT_TRUE(ring.Write(op, 0, ++seq_, payload, bytes, nullptr, 0, [] { return true; }).ok());
  }

  // Sends one call on `ring` and waits for its answer: the result, and the first 8 bytes of the
  // reply into `reply` when given.
  int32_t Call(ipc::Ring& ring, ipc::Op op, const void* payload, size_t bytes, uint64_t* reply = nullptr) {
    auto alive = [] { return true; };
    const uint64_t seq = ++seq_;
    EXPECT_TRUE(ring.Write(op, ipc::kFlagReply, seq, payload, bytes, nullptr, 0, alive).ok());
    EXPECT_TRUE(ring.WaitCompleted(seq, alive).ok());
    if (reply != nullptr) std::memcpy(reply, ring.reply_payload(), sizeof(*reply));
    return ring.reply_header().result;
  }

  // The server's clock for token expiry: moves only when a test moves it.
  std::atomic<std::chrono::steady_clock::time_point> now_{std::chrono::steady_clock::time_point{} +
                                                          std::chrono::hours(1)};
  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
  uint64_t seq_ = 0;  // of the calls Call sent (one ring per test)
};

// One session of the server, driven through its ring by the test.
class ApiServerSessionTest : public ApiServerTest {
 protected:
  // A session for `token` (a fresh one by default).
  void Open(std::string token = "") {
    token_ = token.empty() ? server_->IssueToken() : std::move(token);
    int fd = -1;
    ASSERT_TRUE(Hello(token_, ipc::kWireVersion, &sock_, &fd).ok());
    auto ring = ipc::Ring::Attach(fd);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    ring_ = std::move(*ring);
  }
  void TearDown() override {
    if (!token_.empty()) server_->EndSession(token_);
    if (sock_ >= 0) close(sock_);
  }

  int32_t Call(ipc::Op op, const void* payload, size_t bytes, uint64_t* reply = nullptr) {
    return ApiServerTest::Call(*ring_, op, payload, bytes, reply);
  }
  void Queue(ipc::Op op, const void* payload, size_t bytes) { ApiServerTest::Queue(*ring_, op, payload, bytes); }

  std::string token_;
  int sock_ = -1;
  std::unique_ptr<ipc::Ring> ring_;
};

}  // namespace phos::runtime
