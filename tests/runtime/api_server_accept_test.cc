// The API server against peers that do not play along: connections that never say hello, more of
// them than the server keeps, hellos whose session waits for a context (none of them may hold up
// another peer's session), and sessions that ask for more than their limits.
#include "phos/runtime/api_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../testing/wait_until.h"

#include "phos/ctxpool/context_pool.h"
#include "phos/ipc/control.h"

namespace phos::runtime {
namespace {

using ::phos::testing::WaitUntil;

class ApiServerAcceptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-accept-test-" + std::to_string(getpid()) + ".sock";
  }
  void TearDown() override {
    server_.reset();  // before the pool it leases from
    pool_.reset();
  }

  void Start(ApiServerOptions options) {
    options.socket_path = path_;
    options.ring_bytes = 1u << 20;
    options.reply_bytes = 256u << 10;
    auto server = ApiServer::Start(options, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  int Connect() {
    auto sock = ipc::ConnectSeqpacket(path_);
    EXPECT_TRUE(sock.ok()) << sock.status().ToString();
    return sock.ok() ? *sock : -1;
  }

  static Status SendHello(int sock, const std::string& token) {
    ipc::Hello h = ipc::MakeHello(token, getpid());
    return ipc::SendDatagram(sock, &h, sizeof(h));
  }

  // Waits for the server's answer on `sock`; the ring fd, if any, into *ring_fd.
  static Status ReadAnswer(int sock, int* ring_fd) {
    ipc::Answer a;
    auto n = ipc::ReceiveDatagram(sock, &a, sizeof(a), ring_fd);
    if (!n.ok()) return n.status();
    return ipc::CheckAnswer(&a, *n);
  }

  // A session of `token` as its function would open it: the control socket (*sock) and the ring.
  std::unique_ptr<ipc::Ring> OpenSession(const std::string& token, int* sock) {
    *sock = Connect();
    EXPECT_TRUE(SendHello(*sock, token).ok());
    int ring_fd = -1;
    Status answered = ReadAnswer(*sock, &ring_fd);
    EXPECT_TRUE(answered.ok()) << answered.message();
    if (!answered.ok()) return nullptr;
    auto ring = ipc::Ring::Attach(ring_fd);
    EXPECT_TRUE(ring.ok()) << ring.status().ToString();
    return ring.ok() ? std::move(*ring) : nullptr;
  }

  // One call on `ring` and its result; its first reply word into *reply.
  CUresult Call(ipc::Ring& ring, ipc::Op op, const void* args, size_t bytes, const void* tail = nullptr,
                size_t tail_bytes = 0, uint64_t* reply = nullptr) {
    auto alive = [] { return true; };
    const uint64_t s = ++seq_;
    EXPECT_TRUE(ring.Write(op, ipc::kFlagReply, s, args, bytes, tail, tail_bytes, alive).ok());
    EXPECT_TRUE(ring.WaitCompleted(s, alive).ok());
    if (reply != nullptr) std::memcpy(reply, ring.reply_payload(), sizeof(*reply));
    return static_cast<CUresult>(ring.reply_header().result);
  }

  // Nothing has arrived on `sock` yet (and it is still open).
  static bool Unanswered(int sock) {
    char byte;
    return recv(sock, &byte, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && errno == EAGAIN;
  }

  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ctxpool::ContextPool> pool_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
  uint64_t seq_ = 0;
};

TEST_F(ApiServerAcceptTest, SilentConnectionsDoNotDelayAnotherSession) {
  // Deadlines far away: the silent connections are all still waiting when the real hello comes.
  Start({.hello_timeout = std::chrono::minutes(10), .max_pending_hellos = 64});
  std::vector<int> silent;
  for (int i = 0; i < 30; ++i) silent.push_back(Connect());
  const std::string token = server_->IssueToken();
  int sock = Connect();
  ASSERT_TRUE(SendHello(sock, token).ok());
  int ring_fd = -1;
  ASSERT_TRUE(ReadAnswer(sock, &ring_fd).ok());
  EXPECT_GE(ring_fd, 0);
  EXPECT_EQ(server_->session_count(), 1u);
  // Answered while every silent connection is still waiting for its own deadline.
  for (int fd : silent) EXPECT_TRUE(Unanswered(fd));
  for (int fd : silent) close(fd);
  close(ring_fd);
  server_->EndSession(token);
  close(sock);
}

TEST_F(ApiServerAcceptTest, AConnectionWithoutAHelloIsRefusedAtItsDeadline) {
  Start({.hello_timeout = std::chrono::milliseconds(50)});
  int sock = Connect();
  int ring_fd = -1;
  Status s = ReadAnswer(sock, &ring_fd);  // blocks until the server gives up on the hello
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no hello within 50 ms"), std::string::npos) << s.message();
  EXPECT_LT(ring_fd, 0);
  close(sock);
}

TEST_F(ApiServerAcceptTest, ConnectionsBeyondTheCapAreClosed) {
  Start({.hello_timeout = std::chrono::minutes(10), .max_pending_hellos = 4});
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(Connect());
  int extra = Connect();
  // The fifth is closed without an answer; the four keep waiting.
  char byte;
  ASSERT_TRUE(WaitUntil([&] { return recv(extra, &byte, 1, MSG_DONTWAIT) == 0; }));
  for (int fd : silent) EXPECT_TRUE(Unanswered(fd));
  // Once one of them says hello, there is room again.
  const std::string token = server_->IssueToken();
  ASSERT_TRUE(SendHello(silent[0], token).ok());
  int ring_fd = -1;
  ASSERT_TRUE(ReadAnswer(silent[0], &ring_fd).ok());
  int later = Connect();
  EXPECT_TRUE(Unanswered(later));
  close(later);
  close(extra);
  close(ring_fd);
  server_->EndSession(token);
  for (int fd : silent) close(fd);
}

TEST_F(ApiServerAcceptTest, ASessionWaitingForAContextHoldsUpNobodyAndEndsOnRequest) {
  auto pool = ctxpool::ContextPool::Open({.min_ready = 0, .max_contexts = 1}, table_);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  pool_ = std::move(*pool);
  Start({.context_pools = {pool_.get()}});
  // The only context, held by a first session.
  const std::string first = server_->IssueToken();
  int first_sock = Connect();
  ASSERT_TRUE(SendHello(first_sock, first).ok());
  int first_ring = -1;
  ASSERT_TRUE(ReadAnswer(first_sock, &first_ring).ok());
  // A second session waits for it: its lease is a miss that waits.
  const std::string second = server_->IssueToken();
  int second_sock = Connect();
  ASSERT_TRUE(SendHello(second_sock, second).ok());
  ASSERT_TRUE(WaitUntil([&] { return pool_->Stats().miss_waits == 1; }));
  // Meanwhile the acceptor answers others: an unknown token is refused at once.
  int third_sock = Connect();
  ASSERT_TRUE(SendHello(third_sock, ipc::NewToken()).ok());
  int third_ring = -1;
  Status third = ReadAnswer(third_sock, &third_ring);
  EXPECT_NE(third.message().find("unknown instance token"), std::string::npos) << third.message();
  EXPECT_TRUE(Unanswered(second_sock));
  EXPECT_EQ(pool_->Stats().lease_failures, 0u);  // still waiting
  // Ending the waiting session cancels its lease; it gets a refusal, never a session.
  server_->EndSession(second);
  int second_ring = -1;
  Status refused = ReadAnswer(second_sock, &second_ring);
  EXPECT_FALSE(refused.ok());
  EXPECT_LT(second_ring, 0);
  EXPECT_EQ(server_->session_count(), 1u);
  close(first_ring);
  server_->EndSession(first);
  for (int fd : {first_sock, second_sock, third_sock}) close(fd);
}

TEST_F(ApiServerAcceptTest, UnclaimedTokensAreBounded) {
  Start({.max_unclaimed_tokens = 2});
  const std::string oldest = server_->IssueToken(1, std::chrono::minutes(10));
  const std::string older = server_->IssueToken(1, std::chrono::minutes(10));
  const std::string forever = server_->IssueToken(1);  // not one that expires: not counted
  const std::string newest = server_->IssueToken(1, std::chrono::minutes(10));
  for (const std::string& token : {oldest, older, forever, newest}) {
    int sock = Connect();
    ASSERT_TRUE(SendHello(sock, token).ok());
    int ring_fd = -1;
    Status s = ReadAnswer(sock, &ring_fd);
    if (token == oldest) {
      EXPECT_NE(s.message().find("unknown instance token"), std::string::npos) << s.message();
    } else {
      EXPECT_TRUE(s.ok()) << s.message();
      close(ring_fd);
      server_->EndSession(token);
    }
    close(sock);
  }
}

TEST_F(ApiServerAcceptTest, ASessionGetsNoMoreThanItsLimits) {
  Start({.session_limits = {.modules = 1, .device_bytes = 1u << 20, .buffers = 3, .handles = 2}});
  const std::string token = server_->IssueToken();
  int sock = -1;
  std::unique_ptr<ipc::Ring> ring = OpenSession(token, &sock);
  ASSERT_NE(ring, nullptr);
  auto call = [&](ipc::Op op, const void* args, size_t bytes, const void* tail = nullptr, size_t tail_bytes = 0,
                  uint64_t* reply = nullptr) { return Call(*ring, op, args, bytes, tail, tail_bytes, reply); };
  // Device memory: 1 MiB in all, whatever the pieces; a size that would wrap the sum is refused.
  ipc::SizeArgs half{512u << 10};
  uint64_t first = 0;
  ASSERT_EQ(call(ipc::Op::kMemAlloc, &half, sizeof(half), nullptr, 0, &first), CUDA_SUCCESS);
  ASSERT_EQ(call(ipc::Op::kMemAlloc, &half, sizeof(half)), CUDA_SUCCESS);
  ipc::SizeArgs one{1};
  EXPECT_EQ(call(ipc::Op::kMemAlloc, &one, sizeof(one)), CUDA_ERROR_OUT_OF_MEMORY);
  ipc::SizeArgs wrapping{~uint64_t{0}};
  EXPECT_EQ(call(ipc::Op::kMemAlloc, &wrapping, sizeof(wrapping)), CUDA_ERROR_OUT_OF_MEMORY);
  ipc::PointerArgs free_first{first};
  ASSERT_EQ(call(ipc::Op::kMemFree, &free_first, sizeof(free_first)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kMemAlloc, &one, sizeof(one)), CUDA_SUCCESS);  // room again
  // Buffers: three at most, however small.
  EXPECT_EQ(call(ipc::Op::kMemAlloc, &one, sizeof(one)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kMemAlloc, &one, sizeof(one)), CUDA_ERROR_OUT_OF_MEMORY);
  // Handles: two streams and events together.
  ipc::FlagsArgs flags{0, 0};
  uint64_t stream = 0;
  ASSERT_EQ(call(ipc::Op::kStreamCreate, &flags, sizeof(flags), nullptr, 0, &stream), CUDA_SUCCESS);
  ASSERT_EQ(call(ipc::Op::kEventCreate, &flags, sizeof(flags)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kStreamCreate, &flags, sizeof(flags)), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(call(ipc::Op::kEventCreate, &flags, sizeof(flags)), CUDA_ERROR_OUT_OF_MEMORY);
  ipc::HandleArgs destroy{stream};
  ASSERT_EQ(call(ipc::Op::kStreamDestroy, &destroy, sizeof(destroy)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kEventCreate, &flags, sizeof(flags)), CUDA_SUCCESS);
  // Modules: one; the second is refused at its first chunk.
  const uint8_t byte = 0;
  ipc::ModuleChunkArgs module{.module_id = 1, .total_bytes = 1, .offset = 0, .is_fatbin = 0, .pad = 0};
  EXPECT_EQ(call(ipc::Op::kModuleChunk, &module, sizeof(module), &byte, 1), CUDA_SUCCESS);  // loads or not: held
  module.module_id = 2;
  EXPECT_EQ(call(ipc::Op::kModuleChunk, &module, sizeof(module), &byte, 1), CUDA_ERROR_INVALID_VALUE);
  ring.reset();
  server_->EndSession(token);
  close(sock);
}

// A function's quota narrows the server's limits for the sessions that name it, never widens
// them, and leaves other functions' sessions alone.
TEST_F(ApiServerAcceptTest, AFunctionsQuotaNarrowsTheLimitsOfItsSessionsOnly) {
  Start({.session_limits = {.buffers = 3}});
  server_->SetFunctionQuota("small", {.buffers = 1});
  server_->SetFunctionQuota("greedy", {.buffers = 100});
  const ipc::SizeArgs one{1};
  // How many one-byte buffers a session of `function` gets (at most 5 tried), its token issued
  // with a restore plan naming the function or (`planned` false) with the function alone.
  auto buffers_of = [&](const std::string& function, bool planned = true) {
    SessionPlan plan;
    plan.function = function;
    const std::string token = planned ? server_->IssueToken(std::move(plan)) : server_->IssueToken(1, function);
    int sock = -1;
    std::unique_ptr<ipc::Ring> ring = OpenSession(token, &sock);
    int held = 0;
    while (ring != nullptr && held < 5 && Call(*ring, ipc::Op::kMemAlloc, &one, sizeof(one)) == CUDA_SUCCESS) ++held;
    ring.reset();
    server_->EndSession(token);
    close(sock);
    return held;
  };
  EXPECT_EQ(buffers_of("small"), 1);
  EXPECT_EQ(buffers_of("small", /*planned=*/false), 1);
  EXPECT_EQ(buffers_of("greedy"), 3);  // the server's limit still holds
  EXPECT_EQ(buffers_of("other"), 3);
  server_->SetFunctionQuota("small", {});  // forgotten
  EXPECT_EQ(buffers_of("small"), 3);
}

}  // namespace
}  // namespace phos::runtime
