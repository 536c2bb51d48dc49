// The API server at the protocol level: hellos, tokens, and a hand-written client on the ring.
#include "phos/runtime/api_server.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nccl.h>

#include "../testing/wait_until.h"
#include "api_server_fixture.h"

#include "phos/ctxpool/context_pool.h"
#include "phos/ipc/control.h"

namespace phos::runtime {
namespace {

TEST_F(ApiServerTest, UnknownTokenIsRefused) {
  int sock = -1, fd = -1;
  Status s = Hello(ipc::NewToken(), ipc::kWireVersion, &sock, &fd);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown instance token"), std::string::npos) << s.message();
  EXPECT_LT(fd, 0);
  close(sock);
}

TEST_F(ApiServerTest, UnclaimedTokenExpiresAndAClaimedOneStays) {
  constexpr auto kUnclaimedFor = std::chrono::minutes(10);
  std::string unclaimed = server_->IssueToken(1, kUnclaimedFor);
  std::string claimed = server_->IssueToken(1, kUnclaimedFor);
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(claimed, ipc::kWireVersion, &sock, &fd).ok());
  // One tick before the deadline the unclaimed token is still known.
  now_ = now_.load() + kUnclaimedFor - std::chrono::milliseconds(1);
  server_->ExpireUnclaimedTokens();
  std::string fresh = server_->IssueToken(1, kUnclaimedFor);
  now_ = now_.load() + std::chrono::milliseconds(1);
  server_->ExpireUnclaimedTokens();
  int late_sock = -1, late_fd = -1;
  Status late = Hello(unclaimed, ipc::kWireVersion, &late_sock, &late_fd);
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("unknown instance token"), std::string::npos) << late.message();
  close(late_sock);
  EXPECT_EQ(server_->session_count(), 1u);  // the claimed one's session is untouched
  // A token issued later has its own ten minutes.
  int fresh_sock = -1, fresh_fd = -1;
  EXPECT_TRUE(Hello(fresh, ipc::kWireVersion, &fresh_sock, &fresh_fd).ok());
  EXPECT_EQ(server_->session_count(), 2u);
  close(fresh_fd);
  close(fresh_sock);
  close(fd);
  close(sock);
}

TEST_F(ApiServerTest, VersionMismatchIsRefusedNamingBothVersions) {
  int sock = -1, fd = -1;
  Status s = Hello(server_->IssueToken(), ipc::kWireVersion + 1, &sock, &fd);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("version " + std::to_string(ipc::kWireVersion + 1)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("version " + std::to_string(ipc::kWireVersion)), std::string::npos) << s.message();
  close(sock);
}

TEST_F(ApiServerTest, SessionServesCallsAndEndsOnRequest) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  EXPECT_EQ(server_->session_count(), 1u);
  // A second connection with the same token is refused.
  int sock2 = -1, fd2 = -1;
  EXPECT_FALSE(Hello(token, ipc::kWireVersion, &sock2, &fd2).ok());
  close(sock2);

  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto alive = [] { return true; };
  ipc::SizeArgs alloc{4096};
  ASSERT_TRUE((*ring)->Write(ipc::Op::kMemAlloc, ipc::kFlagReply, 1, &alloc, sizeof(alloc), nullptr, 0, alive).ok());
  ASSERT_TRUE((*ring)->WaitCompleted(1, alive).ok());
  ASSERT_EQ((*ring)->reply_header().result, CUDA_SUCCESS);
  uint64_t ptr;
  std::memcpy(&ptr, (*ring)->reply_payload(), sizeof(ptr));
  EXPECT_NE(ptr, 0u);
  // A malformed payload (wrong size) is an error reply, not a crash.
  ASSERT_TRUE((*ring)->Write(ipc::Op::kMemFree, ipc::kFlagReply, 2, &alloc, 3, nullptr, 0, alive).ok());
  ASSERT_TRUE((*ring)->WaitCompleted(2, alive).ok());
  EXPECT_EQ((*ring)->reply_header().result, CUDA_ERROR_INVALID_VALUE);

  server_->EndSession(token);
  EXPECT_EQ(server_->session_count(), 0u);
  EXPECT_EQ((*ring)->header()->closed.load(), 1u);
  close(sock);
}

TEST_F(ApiServerTest, TruncatedAndOverlongRecordsAreRefusedAndTheSessionGoesOn) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto call = [&](ipc::Op op, const void* payload, size_t bytes) { return Call(**ring, op, payload, bytes); };
  uint8_t junk[64] = {};
  // Shorter than the copy's argument record, though kMemcpyHtoD's data may follow it.
  EXPECT_EQ(call(ipc::Op::kMemcpyHtoD, junk, sizeof(ipc::CopyArgs) - 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kLaunch, junk, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kMemset, junk, 0), CUDA_ERROR_INVALID_VALUE);
  // Longer than an exact record: a cudaMalloc with trailing bytes is not a cudaMalloc.
  EXPECT_EQ(call(ipc::Op::kMemAlloc, junk, sizeof(ipc::SizeArgs) + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceGetCount, junk, 4), CUDA_ERROR_INVALID_VALUE);
  // A copy whose data is shorter than the count it claims.
  ipc::CopyArgs copy{.dst = 0x1000, .src = 0, .bytes = 32, .stream = 0};
  uint8_t short_copy[sizeof(copy) + 8] = {};
  std::memcpy(short_copy, &copy, sizeof(copy));
  EXPECT_EQ(call(ipc::Op::kMemcpyHtoD, short_copy, sizeof(short_copy)), CUDA_ERROR_INVALID_VALUE);
  // Nothing of that reached a handler's state: the session still serves well-formed calls.
  ipc::SizeArgs alloc{4096};
  ASSERT_EQ(call(ipc::Op::kMemAlloc, &alloc, sizeof(alloc)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kDeviceGetCount, nullptr, 0), CUDA_SUCCESS);
  server_->EndSession(token);
  close(sock);
}

TEST_F(ApiServerTest, UnknownOpcodeClosesTheRingWithAnError) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto alive = [] { return true; };
  uint64_t word = 0;
  ASSERT_TRUE((*ring)->Write(ipc::Op::kOpCount, ipc::kFlagReply, 1, &word, sizeof(word), nullptr, 0, alive).ok());
  Status waited = (*ring)->WaitCompleted(1, alive);
  EXPECT_FALSE(waited.ok());
  EXPECT_EQ(waited.code(), StatusCode::kUnavailable) << waited.ToString();
  EXPECT_EQ((*ring)->header()->closed.load(), 1u);
  EXPECT_EQ(server_->session_count(), 1u);  // closed, not destroyed under the frontend
  server_->EndSession(token);
  close(sock);
}

TEST_F(ApiServerTest, SessionsLeaseTheirContextFromThePoolAndReturnItForTheScrub) {
  auto pool = ctxpool::ContextPool::Open({.min_ready = 1, .max_contexts = 2}, table_);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE((*pool)->WaitIdle(std::chrono::seconds(10)));
  server_.reset();
  auto server = ApiServer::Start(
      {.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10, .context_pools = {pool->get()}}, table_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  for (int round = 1; round <= 2; ++round) {
    std::string token = server_->IssueToken();
    int sock = -1, fd = -1;
    ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
    auto ring = ipc::Ring::Attach(fd);
    ASSERT_TRUE(ring.ok());
    auto alive = [] { return true; };
    ipc::SizeArgs alloc{1u << 20};
    ASSERT_TRUE((*ring)->Write(ipc::Op::kMemAlloc, ipc::kFlagReply, 1, &alloc, sizeof(alloc), nullptr, 0, alive).ok());
    ASSERT_TRUE((*ring)->WaitCompleted(1, alive).ok());
    ASSERT_EQ((*ring)->reply_header().result, CUDA_SUCCESS);
    server_->EndSession(token);
    close(sock);
    ASSERT_TRUE((*pool)->WaitIdle(std::chrono::seconds(10)));
    ctxpool::PoolStats m = (*pool)->Stats();
    EXPECT_EQ(m.leases, static_cast<uint64_t>(round));
    EXPECT_EQ(m.hits, static_cast<uint64_t>(round));  // ready before the hello
    EXPECT_EQ(m.returns, static_cast<uint64_t>(round));
    EXPECT_EQ(m.scrubs, static_cast<uint64_t>(round));  // the session's buffer went back with it
    EXPECT_EQ(m.scrub_failures, 0u);
  }
  server_.reset();  // before the pool
}

TEST_F(ApiServerTest, CorruptRingClosesOnlyThatSession) {
  std::string bad_token = server_->IssueToken(), good_token = server_->IssueToken();
  int bad_sock = -1, bad_fd = -1, good_sock = -1, good_fd = -1;
  ASSERT_TRUE(Hello(bad_token, ipc::kWireVersion, &bad_sock, &bad_fd).ok());
  ASSERT_TRUE(Hello(good_token, ipc::kWireVersion, &good_sock, &good_fd).ok());
  auto bad = ipc::Ring::Attach(bad_fd);
  auto good = ipc::Ring::Attach(good_fd);
  ASSERT_TRUE(bad.ok() && good.ok());
  // Publish a producer offset far beyond the ring.
  (*bad)->header()->produced.store(1ull << 40);
  (*bad)->header()->server_futex.fetch_add(1);
  ipc::FutexWakeAll(&(*bad)->header()->server_futex);
  ::phos::testing::WaitUntil([&] { return (*bad)->header()->closed.load() != 0; });
  EXPECT_EQ((*bad)->header()->closed.load(), 1u);
  auto alive = [] { return true; };
  ASSERT_TRUE((*good)->Write(ipc::Op::kDeviceGetCount, ipc::kFlagReply, 1, nullptr, 0, nullptr, 0, alive).ok());
  ASSERT_TRUE((*good)->WaitCompleted(1, alive).ok());
  EXPECT_EQ((*good)->reply_header().result, CUDA_SUCCESS);
  close(bad_sock);
  close(good_sock);
}

// ncclCommInitAll is bounded by the devices of the session's group, which phosd takes from the
// driver, not by a constant of the wire format: the wire carries up to kMaxNcclRanks devices (one
// NVLink domain), more than simgpu's 8, and the session refuses a list its group cannot serve.
TEST_F(ApiServerTest, NcclCommInitAllIsBoundedByTheSessionsDevices) {
  static_assert(ipc::kMaxNcclRanks >= 72);
  ASSERT_EQ(server_->device_count(), 2);  // PHOS_SIMGPU_DEVICES=2
  std::string token = server_->IssueToken(2);
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto alive = [] { return true; };
  auto init_all = [&](uint64_t seq, int ndev) -> int32_t {
    ipc::NcclInitAllArgs a{};
    a.ndev = ndev;
    for (int i = 0; i < ndev && i < ipc::kMaxNcclRanks; ++i) a.devices[i] = i;
    if (!(*ring)->Write(ipc::Op::kNcclCommInitAll, ipc::kFlagReply, seq, &a, sizeof(a), nullptr, 0, alive).ok() ||
        !(*ring)->WaitCompleted(seq, alive).ok()) {
      return -1;
    }
    return (*ring)->reply_header().result;
  };
  EXPECT_EQ(init_all(1, 9), ncclInvalidArgument);   // devices 2..8 are not the session's
  EXPECT_EQ(init_all(2, 3), ncclInvalidArgument);   // device 2 is not the session's
  EXPECT_EQ(init_all(3, ipc::kMaxNcclRanks + 1), ncclInvalidArgument);  // more than a record carries
  ASSERT_EQ(init_all(4, 2), ncclSuccess);
  EXPECT_EQ((*ring)->reply_header().length, 2 * sizeof(uint64_t));
  server_->EndSession(token);
  close(sock);
}

// A tenant that enters an all-reduce on one rank of two and leaves: the rank that entered waits
// for the other for ever, unless ending the session aborts the collective. The session ends, the
// next session on a device group gets correct collectives, and the server stops.
TEST_F(ApiServerTest, AHalfEnteredCollectiveDoesNotOutliveItsSession) {
  constexpr size_t kCount = 256;
  auto group_session = [&](const std::string& token, int* sock, std::unique_ptr<ipc::Ring>* ring,
                           uint64_t comms[2], uint64_t bufs[2]) {
    int fd = -1;
    ASSERT_TRUE(Hello(token, ipc::kWireVersion, sock, &fd).ok());
    auto attached = ipc::Ring::Attach(fd);
    ASSERT_TRUE(attached.ok()) << attached.status().ToString();
    *ring = std::move(*attached);
    seq_ = 0;
    ipc::NcclInitAllArgs init{};
    init.ndev = 2;
    init.devices[0] = 0;
    init.devices[1] = 1;
    ASSERT_EQ(Call(**ring, ipc::Op::kNcclCommInitAll, &init, sizeof(init)), ncclSuccess);
    std::memcpy(comms, (*ring)->reply_payload(), 2 * sizeof(uint64_t));
    for (int d = 0; d < 2; ++d) {
      ipc::DeviceArgs device{d, 0};
      ASSERT_EQ(Call(**ring, ipc::Op::kSetDevice, &device, sizeof(device)), CUDA_SUCCESS);
      ipc::SizeArgs alloc{kCount * sizeof(float)};
      ASSERT_EQ(Call(**ring, ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &bufs[d]), CUDA_SUCCESS);
    }
  };
  auto all_reduce = [&](ipc::Ring& ring, uint64_t comm, uint64_t buf) {
    ipc::NcclCollectiveArgs a{.comm = comm, .stream = 0, .send = buf, .recv = buf, .count = kCount,
                              .kind = static_cast<int32_t>(ipc::NcclCollectiveKind::kAllReduce),
                              .datatype = ncclFloat32, .op = ncclSum, .root = 0};
    return Call(ring, ipc::Op::kNcclCollective, &a, sizeof(a));
  };

  const std::string half = server_->IssueToken(2);
  int half_sock = -1;
  std::unique_ptr<ipc::Ring> half_ring;
  uint64_t comms[2] = {}, bufs[2] = {};
  ASSERT_NO_FATAL_FAILURE(group_session(half, &half_sock, &half_ring, comms, bufs));
  ASSERT_EQ(all_reduce(*half_ring, comms[0], bufs[0]), CUDA_SUCCESS);  // rank 0 only, then gone
  half_ring.reset();
  close(half_sock);
  server_->EndSession(half);  // returns: the collective was aborted
  EXPECT_EQ(server_->session_count(), 0u);

  // A well-behaved tenant on a device group: every rank's all-reduce adds up.
  const std::string good = server_->IssueToken(2);
  int good_sock = -1;
  std::unique_ptr<ipc::Ring> ring;
  ASSERT_NO_FATAL_FAILURE(group_session(good, &good_sock, &ring, comms, bufs));
  for (int d = 0; d < 2; ++d) {
    std::vector<float> values(kCount, static_cast<float>(d + 1));
    ipc::CopyArgs copy{.dst = bufs[d], .src = 0, .bytes = kCount * sizeof(float), .stream = 0};
    const uint64_t seq = ++seq_;
    auto alive = [] { return true; };
    ASSERT_TRUE(ring->Write(ipc::Op::kMemcpyHtoD, ipc::kFlagReply, seq, &copy, sizeof(copy), values.data(),
                            copy.bytes, alive).ok());
    ASSERT_TRUE(ring->WaitCompleted(seq, alive).ok());
    ASSERT_EQ(ring->reply_header().result, CUDA_SUCCESS);
  }
  // A reduction or element type outside NCCL's built-in ones is refused before it reaches NCCL
  // (it would otherwise enter the collective on one rank).
  for (auto [datatype, op] :
       {std::pair{int32_t{ncclFloat32}, int32_t{ncclNumOps}}, std::pair{int32_t{ncclFloat32}, -1},
        std::pair{int32_t{99}, int32_t{ncclSum}}}) {
    ipc::NcclCollectiveArgs bad{.comm = comms[0],
                                .stream = 0,
                                .send = bufs[0],
                                .recv = bufs[0],
                                .count = kCount,
                                .kind = static_cast<int32_t>(ipc::NcclCollectiveKind::kAllReduce),
                                .datatype = datatype,
                                .op = op,
                                .root = 0};
    EXPECT_EQ(Call(*ring, ipc::Op::kNcclCollective, &bad, sizeof(bad)), CUDA_ERROR_INVALID_VALUE)
        << "datatype " << datatype << ", op " << op;
  }
  ASSERT_EQ(all_reduce(*ring, comms[0], bufs[0]), CUDA_SUCCESS);
  ASSERT_EQ(all_reduce(*ring, comms[1], bufs[1]), CUDA_SUCCESS);
  for (int d = 0; d < 2; ++d) {
    ipc::CopyArgs copy{.dst = 0, .src = bufs[d], .bytes = kCount * sizeof(float), .stream = 0};
    ASSERT_EQ(Call(*ring, ipc::Op::kMemcpyDtoH, &copy, sizeof(copy)), CUDA_SUCCESS);
    std::vector<float> out(kCount);
    std::memcpy(out.data(), ring->reply_payload(), copy.bytes);
    EXPECT_EQ(out, std::vector<float>(kCount, 3.0f)) << "device " << d;
  }
  ring.reset();
  server_->EndSession(good);
  close(good_sock);
  server_.reset();  // stops: nothing of the first tenant is left to wait for
}

// kDeviceGetProperties: one record carries every attribute of a device, and records that do not
// name a device of the session, or are not of the call's size, are refused. The ci profile models
// an A100 80GB PCIe: the figures below are NVIDIA's (programming guide for compute capability 8.0,
// A100 whitepaper and product brief).
TEST_F(ApiServerTest, DevicePropertiesComeInOneRecordAndHostileRecordsAreRefused) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto call = [&](ipc::Op op, const void* payload, size_t bytes) { return Call(**ring, op, payload, bytes); };
  auto properties = [&](int device, ipc::DeviceProperties* out) {
    ipc::DeviceArgs a{device, 0};
    int32_t r = call(ipc::Op::kDeviceGetProperties, &a, sizeof(a));
    if (r == CUDA_SUCCESS) {
      EXPECT_EQ((*ring)->reply_header().length, sizeof(*out));
      std::memcpy(out, (*ring)->reply_payload(), sizeof(*out));
    }
    return r;
  };
  ipc::DeviceProperties p{};
  ASSERT_EQ(properties(0, &p), CUDA_SUCCESS);
  EXPECT_STREQ(p.name, "phos simgpu CI device (a100-pcie4 link)");
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) EXPECT_EQ(p.results[a], CUDA_SUCCESS) << "attribute " << a;
  EXPECT_EQ(p.results[0], CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p.results[CU_DEVICE_ATTRIBUTE_MAX], CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR], 8);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT], 108);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK], 48 * 1024);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN], 163 * 1024);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR], 164 * 1024);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE], 40 * 1024 * 1024);
  EXPECT_EQ(p.attributes[CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID], 0x20B510DE);
  // The single attribute calls of the driver say the same.
  size_t total = 0;
  ASSERT_EQ(table_->cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(p.total_memory, total);
  CUuuid uuid{};
  ASSERT_EQ(table_->cuDeviceGetUuid(&uuid, 0), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(p.uuid, uuid.bytes, sizeof(p.uuid)), 0);
  // The second device (this test's node has two) is another slot with its own UUID.
  ipc::DeviceProperties q{};
  ASSERT_EQ(properties(1, &q), CUDA_SUCCESS);
  EXPECT_NE(q.attributes[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], p.attributes[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID]);
  EXPECT_NE(std::memcmp(p.uuid, q.uuid, sizeof(p.uuid)), 0);
  // Devices the session does not have.
  for (int device : {2, -1, INT32_MIN, INT32_MAX}) EXPECT_EQ(properties(device, &q), CUDA_ERROR_INVALID_DEVICE) << device;
  // Records of the wrong size.
  uint8_t junk[64] = {};  // longer than any record below
  static_assert(sizeof(ipc::DeviceArgs) + 8 <= sizeof(junk) && sizeof(ipc::PeerArgs) + 4 <= sizeof(junk));
  EXPECT_EQ(call(ipc::Op::kDeviceGetProperties, junk, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceGetProperties, junk, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceGetProperties, junk, sizeof(ipc::DeviceArgs) + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kMemGetInfo, junk, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceReset, junk, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceCanAccessPeer, junk, sizeof(ipc::PeerArgs) - 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceEnablePeer, junk, sizeof(ipc::PeerArgs) + 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kDeviceDisablePeer, junk, 0), CUDA_ERROR_INVALID_VALUE);
  // The session still serves.
  ASSERT_EQ(properties(0, &q), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(&p, &q, sizeof(p)), 0);
  server_->EndSession(token);
  close(sock);
}

// Peer access between the session's two devices: once per direction, with the runtime's errors for
// a device that is none of the session's, itself, or flags that are not 0.
TEST_F(ApiServerTest, PeerAccessIsCheckedAndEnabledOncePerDirection) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto peer = [&](ipc::Op op, int device, int other, uint32_t flags = 0, uint64_t* reply = nullptr) {
    ipc::PeerArgs a{device, other, flags, 0};
    return Call(**ring, op, &a, sizeof(a), reply);
  };
  uint64_t can = 7;
  ASSERT_EQ(peer(ipc::Op::kDeviceCanAccessPeer, 0, 1, 0, &can), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<int32_t>(can), 1);
  ASSERT_EQ(peer(ipc::Op::kDeviceCanAccessPeer, 1, 1, 0, &can), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<int32_t>(can), 0);
  EXPECT_EQ(peer(ipc::Op::kDeviceCanAccessPeer, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(peer(ipc::Op::kDeviceCanAccessPeer, INT32_MIN, 0), CUDA_ERROR_INVALID_DEVICE);
  // The session's current device is 0.
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 9), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(peer(ipc::Op::kDeviceDisablePeer, 0, 1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 1), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(peer(ipc::Op::kDeviceDisablePeer, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(peer(ipc::Op::kDeviceDisablePeer, 0, 1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(peer(ipc::Op::kDeviceDisablePeer, 0, -3), CUDA_ERROR_INVALID_DEVICE);
  // Left enabled: the session's end disables it before the contexts go back.
  EXPECT_EQ(peer(ipc::Op::kDeviceEnablePeer, 0, 1), CUDA_SUCCESS);
  server_->EndSession(token);
  close(sock);
}

// cudaMemGetInfo is what the session may still allocate; cudaDeviceReset frees what it made on
// the device, after which its old pointers are no longer the session's.
TEST_F(ApiServerTest, MemoryInformationFollowsTheSessionLimitAndResetFreesItsBuffers) {
  server_.reset();
  ApiServerOptions options{.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10};
  options.session_limits.device_bytes = 64ull << 20;
  auto server = ApiServer::Start(options, table_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  server_ = std::move(*server);
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto info = [&]() {
    ipc::MemInfo m{};
    EXPECT_EQ(Call(**ring, ipc::Op::kMemGetInfo, nullptr, 0), CUDA_SUCCESS);
    std::memcpy(&m, (*ring)->reply_payload(), sizeof(m));
    return m;
  };
  EXPECT_EQ(info().total_bytes, 64ull << 20);
  EXPECT_EQ(info().free_bytes, 64ull << 20);
  uint64_t a = 0, b = 0;
  ipc::SizeArgs alloc{16ull << 20};
  ASSERT_EQ(Call(**ring, ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &a), CUDA_SUCCESS);
  ASSERT_EQ(Call(**ring, ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &b), CUDA_SUCCESS);
  EXPECT_EQ(info().free_bytes, 32ull << 20);
  ASSERT_EQ(Call(**ring, ipc::Op::kDeviceReset, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(info().free_bytes, 64ull << 20);
  ipc::PointerArgs old{a};
  EXPECT_EQ(Call(**ring, ipc::Op::kMemFree, &old, sizeof(old)), CUDA_ERROR_INVALID_VALUE);
  ipc::MemsetArgs memset{.dst = b, .bytes = 64, .stream = 0, .value = 1, .element_bytes = 0};
  EXPECT_EQ(Call(**ring, ipc::Op::kMemset, &memset, sizeof(memset)), CUDA_ERROR_INVALID_VALUE);
  // The device is usable again after it.
  ASSERT_EQ(Call(**ring, ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &a), CUDA_SUCCESS);
  EXPECT_EQ(info().free_bytes, 48ull << 20);
  server_->EndSession(token);
  close(sock);
}

}  // namespace
}  // namespace phos::runtime

namespace phos::runtime {
namespace {

// kMemcpy2D, kMemset2D and kMemFreeAsync as a hostile process may write them: spans past the
// buffer, pitches below the width, sizes that wrap, host rows shorter than claimed, foreign
// pointers. Each is refused with CUDA_ERROR_INVALID_VALUE and the buffer keeps its bytes.
TEST_F(ApiServerTest, PitchedCopiesSetsAndAsyncFreesCheckEveryExtent) {
  std::string token = server_->IssueToken();
  int sock = -1, fd = -1;
  ASSERT_TRUE(Hello(token, ipc::kWireVersion, &sock, &fd).ok());
  auto ring = ipc::Ring::Attach(fd);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto call = [&](ipc::Op op, const void* payload, size_t bytes, uint64_t* reply = nullptr) {
    return Call(**ring, op, payload, bytes, reply);
  };
  constexpr uint64_t kPitch = 256, kRows = 4, kWidth = 200;
  uint64_t buf = 0;
  ipc::SizeArgs alloc{kPitch * kRows};
  ASSERT_EQ(call(ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &buf), CUDA_SUCCESS);
  ipc::MemsetArgs clear{.dst = buf, .bytes = kPitch * kRows, .stream = 0, .value = 0x5a, .element_bytes = 0};
  ASSERT_EQ(call(ipc::Op::kMemset, &clear, sizeof(clear)), CUDA_SUCCESS);

  // Host to device: the packed rows follow the arguments.
  auto up = [&](ipc::Copy2DArgs a, size_t data_bytes) {
    std::vector<uint8_t> record(sizeof(a) + data_bytes, 0x77);
    std::memcpy(record.data(), &a, sizeof(a));
    return call(ipc::Op::kMemcpy2D, record.data(), record.size());
  };
  const auto h2d = static_cast<uint32_t>(ipc::Copy2DKind::kHostToDevice);
  const auto d2h = static_cast<uint32_t>(ipc::Copy2DKind::kDeviceToHost);
  const auto d2d = static_cast<uint32_t>(ipc::Copy2DKind::kDeviceToDevice);
  ipc::Copy2DArgs good{.dst = buf, .dst_pitch = kPitch, .src = 0, .src_pitch = kWidth, .width = kWidth,
                       .height = kRows, .stream = 0, .kind = h2d, .pad = 0};
  ipc::Copy2DArgs bad = good;
  bad.height = kRows + 1;  // the last row ends past the buffer
  EXPECT_EQ(up(bad, kWidth * (kRows + 1)), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.dst += 64;  // every row shifted: the last one crosses the end
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(up(good, kWidth * kRows - 1), CUDA_ERROR_INVALID_VALUE);  // fewer bytes than rows
  bad = good;
  bad.dst_pitch = kWidth - 1;  // rows overlap
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.width = uint64_t{1} << 33;
  bad.height = uint64_t{1} << 31;  // width * height wraps to 0
  EXPECT_EQ(up(bad, 0), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.dst_pitch = UINT64_MAX / 2;  // the span wraps
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.dst = 0x1000;  // no buffer of the session
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.kind = 9;
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_VALUE);
  bad = good;
  bad.stream = 12345;  // no such stream
  EXPECT_EQ(up(bad, kWidth * kRows), CUDA_ERROR_INVALID_HANDLE);

  // Device to host: no trailing bytes, and no more than the reply area.
  ipc::Copy2DArgs down{.dst = 0, .dst_pitch = kWidth, .src = buf, .src_pitch = kPitch, .width = kWidth,
                       .height = kRows + 1, .stream = 0, .kind = d2h, .pad = 0};
  EXPECT_EQ(call(ipc::Op::kMemcpy2D, &down, sizeof(down)), CUDA_ERROR_INVALID_VALUE);
  down.height = kRows;
  EXPECT_EQ(up(down, 8), CUDA_ERROR_INVALID_VALUE);
  down.src_pitch = 1;
  down.width = 1;
  down.height = 1u << 20;  // a megabyte of one-byte rows: past the buffer, and past the reply area
  EXPECT_EQ(call(ipc::Op::kMemcpy2D, &down, sizeof(down)), CUDA_ERROR_INVALID_VALUE);
  ipc::Copy2DArgs dd{.dst = buf, .dst_pitch = kPitch, .src = buf + kPitch, .src_pitch = kPitch, .width = kWidth,
                     .height = kRows, .stream = 0, .kind = d2d, .pad = 0};
  EXPECT_EQ(call(ipc::Op::kMemcpy2D, &dd, sizeof(dd)), CUDA_ERROR_INVALID_VALUE);  // the source's last row

  ipc::Memset2DArgs set{.dst = buf, .pitch = kPitch, .width = kWidth, .height = kRows + 1, .stream = 0,
                        .value = 1, .pad = 0};
  EXPECT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set)), CUDA_ERROR_INVALID_VALUE);
  set.height = kRows;
  set.pitch = kWidth - 1;
  EXPECT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set)), CUDA_ERROR_INVALID_VALUE);
  set.pitch = UINT64_MAX / 3;
  EXPECT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set) - 1), CUDA_ERROR_INVALID_VALUE);

  ipc::StreamPointerArgs free_async{.ptr = buf + 8, .stream = 0};  // not a buffer's start
  EXPECT_EQ(call(ipc::Op::kMemFreeAsync, &free_async, sizeof(free_async)), CUDA_ERROR_INVALID_VALUE);
  free_async = {.ptr = buf, .stream = 999};
  EXPECT_EQ(call(ipc::Op::kMemFreeAsync, &free_async, sizeof(free_async)), CUDA_ERROR_INVALID_HANDLE);

  // None of it reached the buffer.
  ipc::CopyArgs read{.dst = 0, .src = buf, .bytes = kPitch * kRows, .stream = 0};
  ASSERT_EQ(call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
  std::vector<uint8_t> bytes(kPitch * kRows);
  std::memcpy(bytes.data(), (*ring)->reply_payload(), bytes.size());
  EXPECT_EQ(bytes, std::vector<uint8_t>(kPitch * kRows, 0x5a));

  // The well-formed calls work: rows land at their pitch, the gaps keep their bytes.
  ASSERT_EQ(up(good, kWidth * kRows), CUDA_SUCCESS);
  set = {.dst = buf + 10, .pitch = kPitch, .width = 5, .height = 2, .stream = 0, .value = 0x33, .pad = 0};
  ASSERT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set)), CUDA_SUCCESS);
  ASSERT_EQ(call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
  std::memcpy(bytes.data(), (*ring)->reply_payload(), bytes.size());
  std::vector<uint8_t> want(kPitch * kRows, 0x5a);
  for (uint64_t r = 0; r < kRows; ++r) std::memset(&want[r * kPitch], 0x77, kWidth);
  for (uint64_t r = 0; r < 2; ++r) std::memset(&want[r * kPitch + 10], 0x33, 5);
  EXPECT_EQ(bytes, want);
  free_async = {.ptr = buf, .stream = 0};
  EXPECT_EQ(call(ipc::Op::kMemFreeAsync, &free_async, sizeof(free_async)), CUDA_SUCCESS);
  EXPECT_EQ(call(ipc::Op::kMemset2D, &set, sizeof(set)), CUDA_ERROR_INVALID_VALUE);  // freed
  server_->EndSession(token);
  close(sock);
}

}  // namespace
}  // namespace phos::runtime
