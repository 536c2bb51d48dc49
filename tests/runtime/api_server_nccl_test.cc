// The API server's NCCL records from a hand-written client on the ring, on a session of simgpu's
// two devices: sends and receives meeting in a group, reduce, pre-multiplied sums, splits made by
// separate records, finalize / destroy / abort and the asynchronous error; and every refusal of a
// record a hostile function may write, each answered without running anything of its group; a
// collective left half-entered while the session waits in it, ended by the session's end or by
// the collective timeout.
#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../testing/wait_until.h"
#include "phos/ipc/control.h"
#include "phos/runtime/api_server.h"

namespace phos::runtime {
namespace {

constexpr int kRanks = 2;
constexpr size_t kCount = 64;

class ApiServerNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = driver::DriverTable::Open({.gpu = driver::GpuKind::kSim});
    ASSERT_TRUE(table.ok()) << table.status().ToString();
    table_ = std::move(*table);
    path_ = "/tmp/phos-api-nccl-test-" + std::to_string(getpid()) + ".sock";
    ApiServerOptions options{.socket_path = path_, .ring_bytes = 1u << 20, .reply_bytes = 256u << 10};
    options.collective_timeout = collective_timeout_;
    auto server = ApiServer::Start(options, table_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    ASSERT_EQ(server_->device_count(), kRanks);  // PHOS_SIMGPU_DEVICES=2
    OpenGroupSession();
  }
  void TearDown() override {
    ring_.reset();
    if (!token_.empty()) server_->EndSession(token_);
    if (sock_ >= 0) close(sock_);
    server_.reset();
  }

  // A session of both devices, their communicator (comm_[r]: rank r on device r) and a buffer of
  // kCount int32 on each device holding rank r's input.
  void OpenGroupSession() {
    token_ = server_->IssueToken(kRanks);
    ipc::Hello hello = ipc::MakeHello(token_, getpid(), ipc::kWireVersion);
    auto sock = ipc::ConnectSeqpacket(path_);
    ASSERT_TRUE(sock.ok()) << sock.status().ToString();
    sock_ = *sock;
    ASSERT_TRUE(ipc::SendDatagram(sock_, &hello, sizeof(hello)).ok());
    ipc::Answer answer;
    int fd = -1;
    auto n = ipc::ReceiveDatagram(sock_, &answer, sizeof(answer), &fd);
    ASSERT_TRUE(n.ok() && ipc::CheckAnswer(&answer, *n).ok());
    auto ring = ipc::Ring::Attach(fd);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    ring_ = std::move(*ring);
    ipc::NcclInitAllArgs init{};
    init.ndev = kRanks;
    for (int r = 0; r < kRanks; ++r) init.devices[r] = r;
    ASSERT_EQ(Call(ipc::Op::kNcclCommInitAll, &init, sizeof(init)), ncclSuccess);
    std::memcpy(comm_, ring_->reply_payload(), sizeof(comm_));
    for (int r = 0; r < kRanks; ++r) {
      buf_[r] = Alloc(r, kCount * sizeof(int32_t));
      Upload(r, buf_[r], Input(r));
    }
  }

  // One call and its answer: the result, and the first 8 bytes of the reply into `reply`.
  int32_t Call(ipc::Op op, const void* payload, size_t bytes, uint64_t* reply = nullptr) {
    auto alive = [] { return true; };
    const uint64_t seq = ++seq_;
    EXPECT_TRUE(ring_->Write(op, ipc::kFlagReply, seq, payload, bytes, nullptr, 0, alive).ok());
    EXPECT_TRUE(ring_->WaitCompleted(seq, alive).ok());
    if (reply != nullptr) std::memcpy(reply, ring_->reply_payload(), sizeof(*reply));
    return ring_->reply_header().result;
  }
  void SetDevice(int d) {
    ipc::DeviceArgs device{d, 0};
    ASSERT_EQ(Call(ipc::Op::kSetDevice, &device, sizeof(device)), CUDA_SUCCESS);
  }
  uint64_t Alloc(int d, uint64_t bytes) {
    SetDevice(d);
    ipc::SizeArgs alloc{bytes};
    uint64_t ptr = 0;
    EXPECT_EQ(Call(ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &ptr), CUDA_SUCCESS);
    return ptr;
  }
  void Upload(int d, uint64_t dst, const std::vector<int32_t>& values) {
    SetDevice(d);
    ipc::CopyArgs copy{.dst = dst, .src = 0, .bytes = values.size() * sizeof(int32_t), .stream = 0};
    auto alive = [] { return true; };
    const uint64_t seq = ++seq_;
    ASSERT_TRUE(ring_
                    ->Write(ipc::Op::kMemcpyHtoD, ipc::kFlagReply, seq, &copy, sizeof(copy), values.data(),
                            copy.bytes, alive)
                    .ok());
    ASSERT_TRUE(ring_->WaitCompleted(seq, alive).ok());
    ASSERT_EQ(ring_->reply_header().result, CUDA_SUCCESS);
  }
  std::vector<int32_t> Download(int d, uint64_t src, size_t count = kCount) {
    SetDevice(d);
    ipc::CopyArgs copy{.dst = 0, .src = src, .bytes = count * sizeof(int32_t), .stream = 0};
    EXPECT_EQ(Call(ipc::Op::kMemcpyDtoH, &copy, sizeof(copy)), CUDA_SUCCESS);
    std::vector<int32_t> out(count);
    std::memcpy(out.data(), ring_->reply_payload(), copy.bytes);
    return out;
  }
  static std::vector<int32_t> Input(int r) {
    std::vector<int32_t> v(kCount);
    for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<int32_t>(i * 3 + r * 1000 + 1);
    return v;
  }

  int32_t GroupStart() { return Call(ipc::Op::kNcclGroupStart, nullptr, 0); }
  int32_t GroupEnd(int32_t refused = ncclSuccess) {
    ipc::NcclGroupEndArgs a{.refused = refused};
    return Call(ipc::Op::kNcclGroupEndSync, &a, sizeof(a));
  }
  int32_t P2p(bool send, uint64_t comm, uint64_t buffer, uint64_t count, int peer, int32_t type = ncclInt32,
              uint64_t stream = 0) {
    ipc::NcclP2pArgs a{comm, stream, buffer, count, type, peer};
    return Call(send ? ipc::Op::kNcclSend : ipc::Op::kNcclRecv, &a, sizeof(a));
  }
  int32_t Collective(ipc::NcclCollectiveKind kind, uint64_t comm, uint64_t send, uint64_t recv,
                     int32_t op = ncclSum, int32_t root = 0, uint64_t count = kCount) {
    ipc::NcclCollectiveArgs a{.comm = comm,
                              .stream = 0,
                              .send = send,
                              .recv = recv,
                              .count = count,
                              .kind = static_cast<int32_t>(kind),
                              .datatype = ncclInt32,
                              .op = op,
                              .root = root};
    return Call(ipc::Op::kNcclCollective, &a, sizeof(a));
  }
  // Writes a call and returns its sequence number without waiting for its answer.
  uint64_t Post(ipc::Op op, const void* payload, size_t bytes) {
    auto alive = [] { return true; };
    const uint64_t seq = ++seq_;
    EXPECT_TRUE(ring_->Write(op, ipc::kFlagReply, seq, payload, bytes, nullptr, 0, alive).ok());
    return seq;
  }
  ipc::NcclCollectiveArgs AllReduce(int rank) const {
    return {.comm = comm_[rank], .stream = 0, .send = buf_[rank], .recv = buf_[rank], .count = kCount,
            .kind = static_cast<int32_t>(ipc::NcclCollectiveKind::kAllReduce), .datatype = ncclInt32,
            .op = ncclSum, .root = 0};
  }
  int32_t HandleCall(ipc::Op op, uint64_t comm, uint64_t* reply = nullptr) {
    ipc::HandleArgs a{comm};
    return Call(op, &a, sizeof(a), reply);
  }
  // Both ranks exchange buf_ into `into` (a buffer per rank) in one group: the group's answer.
  int32_t Exchange(const uint64_t into[kRanks]) {
    EXPECT_EQ(GroupStart(), CUDA_SUCCESS);
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(P2p(true, comm_[r], buf_[r], kCount, 1 - r), CUDA_SUCCESS);
      EXPECT_EQ(P2p(false, comm_[r], into[r], kCount, 1 - r), CUDA_SUCCESS);
    }
    return GroupEnd();
  }

  std::chrono::milliseconds collective_timeout_ = ApiServerOptions{}.collective_timeout;
  std::shared_ptr<driver::DriverTable> table_;
  std::unique_ptr<ApiServer> server_;
  std::string path_;
  std::string token_;
  int sock_ = -1;
  std::unique_ptr<ipc::Ring> ring_;
  uint64_t seq_ = 0;
  uint64_t comm_[kRanks] = {};
  uint64_t buf_[kRanks] = {};
};

TEST_F(ApiServerNcclTest, SendsAndReceivesOfAGroupMeet) {
  const uint64_t into[kRanks] = {Alloc(0, kCount * 4), Alloc(1, kCount * 4)};
  ASSERT_EQ(Exchange(into), ncclSuccess);
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Download(r, into[r]), Input(1 - r)) << "rank " << r;
}

// A group phosd cannot run whole is refused whole at its end: nothing of it runs (the receive
// buffers keep their bytes), and the session serves the next group.
TEST_F(ApiServerNcclTest, AGroupWhoseSendsAndReceivesDoNotMeetRunsNothing) {
  const uint64_t into[kRanks] = {Alloc(0, kCount * 4), Alloc(1, kCount * 4)};
  const std::vector<int32_t> marker(kCount, -5);
  for (int r = 0; r < kRanks; ++r) Upload(r, into[r], marker);
  struct Case {
    const char* what;
    int peer_receives;  // what rank 1 receives from rank 0 (-1: nothing)
    uint64_t count;
    int32_t type;
  };
  for (const Case& c : {Case{"a send nobody receives", -1, kCount, ncclInt32},
                        Case{"counts that differ", 0, kCount / 2, ncclInt32},
                        Case{"datatypes that differ", 0, kCount, ncclFloat32}}) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
    // A collective of both ranks in the group must not run either.
    ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[0], buf_[0], buf_[0]), CUDA_SUCCESS);
    ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[1], buf_[1], buf_[1]), CUDA_SUCCESS);
    ASSERT_EQ(P2p(true, comm_[0], buf_[0], kCount, 1), CUDA_SUCCESS);
    if (c.peer_receives == 0) {
      ASSERT_EQ(P2p(false, comm_[1], into[1], c.count, 0, c.type), CUDA_SUCCESS);
    }
    EXPECT_EQ(GroupEnd(), ncclInvalidUsage);
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(Download(r, into[r]), marker);
      EXPECT_EQ(Download(r, buf_[r]), Input(r)) << "the all-reduce ran";
    }
  }
  // A receive without its send, and a send to oneself without its receive.
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(P2p(false, comm_[0], into[0], kCount, 1), CUDA_SUCCESS);
  ASSERT_EQ(P2p(true, comm_[1], buf_[1], kCount, 1), CUDA_SUCCESS);
  EXPECT_EQ(GroupEnd(), ncclInvalidUsage);
  ASSERT_EQ(Exchange(into), ncclSuccess);
  EXPECT_EQ(Download(0, into[0]), Input(1));
}

// Every send or receive phosd refuses is refused at its record (CUresult) and refuses its group.
TEST_F(ApiServerNcclTest, RefusedSendsAndReceives) {
  const uint64_t into = Alloc(1, kCount * 4);
  uint64_t stream_on_1 = 0;
  SetDevice(1);
  ipc::FlagsArgs flags{0, 0};
  ASSERT_EQ(Call(ipc::Op::kStreamCreate, &flags, sizeof(flags), &stream_on_1), CUDA_SUCCESS);
  // Outside a group: the receive could only be in the same group.
  EXPECT_EQ(P2p(true, comm_[0], buf_[0], kCount, 1), CUDA_ERROR_INVALID_VALUE);
  struct Case {
    const char* what;
    uint64_t comm, buffer, count;
    int peer;
    int32_t type;
    uint64_t stream;
    int32_t want;
  };
  for (const Case& c : {
           Case{"an unknown communicator", 0x12340, buf_[0], kCount, 1, ncclInt32, 0,
                CUDA_ERROR_INVALID_HANDLE},
           Case{"a peer outside it", comm_[0], buf_[0], kCount, 2, ncclInt32, 0, CUDA_ERROR_INVALID_VALUE},
           Case{"a negative peer", comm_[0], buf_[0], kCount, -1, ncclInt32, 0, CUDA_ERROR_INVALID_VALUE},
           Case{"no datatype", comm_[0], buf_[0], kCount, 1, 99, 0, CUDA_ERROR_INVALID_VALUE},
           Case{"a count past the buffer", comm_[0], buf_[0], kCount + 1, 1, ncclInt32, 0,
                CUDA_ERROR_INVALID_VALUE},
           Case{"a count whose bytes wrap", comm_[0], buf_[0], UINT64_MAX / 2, 1, ncclInt32, 0,
                CUDA_ERROR_INVALID_VALUE},
           Case{"memory of no buffer", comm_[0], 0x1000, 1, 1, ncclInt32, 0, CUDA_ERROR_INVALID_VALUE},
           Case{"a stream of another device", comm_[0], buf_[0], kCount, 1, ncclInt32, stream_on_1,
                CUDA_ERROR_INVALID_HANDLE},
       }) {
    SCOPED_TRACE(c.what);
    ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
    EXPECT_EQ(P2p(true, c.comm, c.buffer, c.count, c.peer, c.type, c.stream), c.want);
    ASSERT_EQ(P2p(false, comm_[1], into, kCount, 0), CUDA_SUCCESS);
    EXPECT_EQ(GroupEnd(), ncclInvalidArgument);  // the refused call's group runs nothing
  }
  // A call the frontend refused (its answer in the group's end) refuses the group too.
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(P2p(true, comm_[0], buf_[0], kCount, 1), CUDA_SUCCESS);
  ASSERT_EQ(P2p(false, comm_[1], into, kCount, 0), CUDA_SUCCESS);
  EXPECT_EQ(GroupEnd(ncclInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(GroupEnd(), ncclInvalidUsage);  // no group is open
  // A buffer freed between the call and the group's end.
  const uint64_t doomed = Alloc(0, kCount * 4);
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(P2p(true, comm_[0], doomed, kCount, 1), CUDA_SUCCESS);
  ASSERT_EQ(P2p(false, comm_[1], into, kCount, 0), CUDA_SUCCESS);
  SetDevice(0);
  ipc::PointerArgs freed{doomed};
  ASSERT_EQ(Call(ipc::Op::kMemFree, &freed, sizeof(freed)), CUDA_SUCCESS);
  EXPECT_EQ(GroupEnd(), ncclInvalidUsage);
  EXPECT_NE(Download(1, into), Input(0));
}

TEST_F(ApiServerNcclTest, ReduceWritesTheRootAndRefusesARootOutsideTheCommunicator) {
  const uint64_t out = Alloc(1, kCount * 4);
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kReduce, comm_[0], buf_[0], 0, ncclSum, 1), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kReduce, comm_[1], buf_[1], out, ncclSum, 1), CUDA_SUCCESS);
  ASSERT_EQ(GroupEnd(), ncclSuccess);
  std::vector<int32_t> want(kCount);
  for (size_t i = 0; i < kCount; ++i) want[i] = Input(0)[i] + Input(1)[i];
  EXPECT_EQ(Download(1, out), want);
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kReduce, comm_[0], buf_[0], 0, ncclSum, 2),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kReduce, comm_[1], buf_[1], 0, ncclSum, 1),
            CUDA_ERROR_INVALID_VALUE)
      << "the root's receive buffer is needed";
  ipc::NcclCollectiveArgs no_kind{.comm = comm_[0],
                                  .stream = 0,
                                  .send = buf_[0],
                                  .recv = buf_[0],
                                  .count = kCount,
                                  .kind = 5,
                                  .datatype = ncclInt32,
                                  .op = ncclSum,
                                  .root = 0};
  EXPECT_EQ(Call(ipc::Op::kNcclCollective, &no_kind, sizeof(no_kind)), CUDA_ERROR_INVALID_VALUE);
}

// Rank 0's input times 3 plus rank 1's times its device scalar (2, in device memory).
TEST_F(ApiServerNcclTest, PreMulSumsAreTheRanksOwnAndChecked) {
  const uint64_t scalar = Alloc(1, sizeof(int32_t));
  Upload(1, scalar, {2});
  uint64_t op[kRanks] = {};
  ipc::NcclRedOpArgs immediate{
      .comm = comm_[0], .scalar = 3, .datatype = ncclInt32, .residence = ncclScalarHostImmediate};
  ASSERT_EQ(Call(ipc::Op::kNcclRedOpCreate, &immediate, sizeof(immediate), &op[0]), ncclSuccess);
  ipc::NcclRedOpArgs device{
      .comm = comm_[1], .scalar = scalar, .datatype = ncclInt32, .residence = ncclScalarDevice};
  ASSERT_EQ(Call(ipc::Op::kNcclRedOpCreate, &device, sizeof(device), &op[1]), ncclSuccess);
  const auto op0 = static_cast<int32_t>(op[0]), op1 = static_cast<int32_t>(op[1]);
  EXPECT_GE(op0, ncclNumOps);
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[0], buf_[0], buf_[0], op0), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[1], buf_[1], buf_[1], op1), CUDA_SUCCESS);
  ASSERT_EQ(GroupEnd(), ncclSuccess);
  std::vector<int32_t> want(kCount);
  for (size_t i = 0; i < kCount; ++i) want[i] = 3 * Input(0)[i] + 2 * Input(1)[i];
  EXPECT_EQ(Download(0, buf_[0]), want);
  EXPECT_EQ(Download(1, buf_[1]), want);
  // An op of another rank, and an op after its destroy, are refused.
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[0], buf_[0], buf_[0], op1 + 7),
            CUDA_ERROR_INVALID_VALUE);
  ipc::NcclRedOpArgs destroy{.comm = comm_[0], .op = op0};
  ASSERT_EQ(Call(ipc::Op::kNcclRedOpDestroy, &destroy, sizeof(destroy)), ncclSuccess);
  EXPECT_EQ(Call(ipc::Op::kNcclRedOpDestroy, &destroy, sizeof(destroy)), ncclInvalidArgument);
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[0], buf_[0], buf_[0], op0),
            CUDA_ERROR_INVALID_VALUE);
  ipc::NcclRedOpArgs bad = device;
  bad.scalar = 0x1000;  // no buffer of the session
  EXPECT_EQ(Call(ipc::Op::kNcclRedOpCreate, &bad, sizeof(bad)), ncclInvalidArgument);
  bad = immediate;
  bad.residence = 7;
  EXPECT_EQ(Call(ipc::Op::kNcclRedOpCreate, &bad, sizeof(bad)), ncclInvalidArgument);
  bad = immediate;
  bad.datatype = 99;
  EXPECT_EQ(Call(ipc::Op::kNcclRedOpCreate, &bad, sizeof(bad)), ncclInvalidArgument);
  bad = immediate;
  bad.comm = 0x777;
  EXPECT_EQ(Call(ipc::Op::kNcclRedOpCreate, &bad, sizeof(bad)), ncclInvalidArgument);
}

// ncclCommSplit is collective: each rank's record returns at once, and the communicators are made
// once the last rank's arrived, outside a group too (a driver split of one rank would wait for
// the others, which only later records bring).
TEST_F(ApiServerNcclTest, SplitsMadeBySeparateRecords) {
  uint64_t split[kRanks] = {};
  for (int r = 0; r < kRanks; ++r) {
    ipc::NcclSplitArgs a{comm_[r], 5, kRanks - r};
    ASSERT_EQ(Call(ipc::Op::kNcclCommSplit, &a, sizeof(a), &split[r]), ncclSuccess);
    uint64_t state = 0;
    ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, split[0], &state), ncclSuccess);
    EXPECT_EQ(static_cast<int32_t>(state), r == 0 ? ncclInProgress : ncclSuccess);
  }
  uint64_t rank = 0;
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommUserRank, split[0], &rank), ncclSuccess);
  EXPECT_EQ(static_cast<int32_t>(rank), 1) << "keys order the new ranks";
  // The split gathers in its own order: device 1's input first.
  const uint64_t gathered = Alloc(0, kRanks * kCount * 4), other = Alloc(1, kRanks * kCount * 4);
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllGather, split[0], buf_[0], gathered), CUDA_SUCCESS);
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllGather, split[1], buf_[1], other), CUDA_SUCCESS);
  ASSERT_EQ(GroupEnd(), ncclSuccess);
  std::vector<int32_t> want = Input(1);
  const std::vector<int32_t> second = Input(0);
  want.insert(want.end(), second.begin(), second.end());
  EXPECT_EQ(Download(0, gathered, kRanks * kCount), want);
  for (uint64_t c : split) EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, c), ncclSuccess);
}

TEST_F(ApiServerNcclTest, FinalizeDestroyAbortAndTheirRefusals) {
  uint64_t device = 9;
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommCuDevice, comm_[1], &device), ncclSuccess);
  EXPECT_EQ(static_cast<int32_t>(device), 1);
  uint64_t state = 9;
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, comm_[0], &state), ncclSuccess);
  EXPECT_EQ(static_cast<int32_t>(state), ncclSuccess);
  for (ipc::Op op : {ipc::Op::kNcclCommCuDevice, ipc::Op::kNcclCommGetAsyncError, ipc::Op::kNcclCommFinalize,
                     ipc::Op::kNcclCommDestroy, ipc::Op::kNcclCommAbort}) {
    EXPECT_EQ(HandleCall(op, 0x4440), ncclInvalidArgument) << "op " << static_cast<int>(op);
  }
  // A rank of ncclCommInitRank whose other rank has not called: still being created.
  ipc::NcclInitRankArgs init{.nranks = kRanks, .rank = 0, .id = {7}};
  uint64_t pending = 0;
  ASSERT_EQ(Call(ipc::Op::kNcclCommInitRank, &init, sizeof(init), &pending), ncclSuccess);
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, pending, &state), ncclSuccess);
  EXPECT_EQ(static_cast<int32_t>(state), ncclInProgress);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, pending), ncclInvalidUsage);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommFinalize, pending), ncclInvalidUsage);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommAbort, pending), ncclSuccess);  // gives the creation up
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, pending), ncclInvalidArgument);

  // More ranks of the group's communicator, to watch them be lost below.
  ipc::NcclInitAllArgs all{};
  all.ndev = kRanks;
  for (int r = 0; r < kRanks; ++r) all.devices[r] = r;
  ASSERT_EQ(Call(ipc::Op::kNcclCommInitAll, &all, sizeof(all)), ncclSuccess);
  uint64_t again[kRanks];
  std::memcpy(again, ring_->reply_payload(), sizeof(again));

  // Rank 0 enters an all-reduce rank 1 has not: finalizing rank 0 would wait for rank 1.
  ASSERT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[0], buf_[0], buf_[0]), CUDA_SUCCESS);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommFinalize, comm_[0]), ncclInvalidUsage);
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommFinalize, comm_[1]), ncclSuccess);  // nothing of rank 1 waits
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommFinalize, comm_[1]), ncclInvalidArgument);  // twice
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, comm_[1], buf_[1], buf_[1]),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, comm_[1]), ncclSuccess);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, comm_[1]), ncclInvalidArgument);

  // Aborting rank 0 with its all-reduce half-entered aborts the group's communicator: its other
  // ranks are lost, and no new rank of it is handed out.
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommAbort, comm_[0]), ncclSuccess);
  ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, again[1], &state), ncclSuccess);
  EXPECT_EQ(static_cast<int32_t>(state), ncclInvalidUsage);
  EXPECT_EQ(Collective(ipc::NcclCollectiveKind::kAllReduce, again[1], buf_[1], buf_[1]),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Call(ipc::Op::kNcclCommInitAll, &all, sizeof(all)), ncclInvalidUsage);
  EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, again[1]), ncclSuccess);
  // Rank 0's stream went on past the aborted all-reduce: the device synchronises.
  SetDevice(0);
  EXPECT_EQ(Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
}

// Rank 0 enters an all-reduce rank 1 never will, and the session synchronises device 0: its one
// executor waits in the collective, and rank 1's call could only come after the wait. The process
// goes (its socket and ring close, as a SIGKILL closes them); ending the session aborts the
// collective before joining the executor, so the end returns. The device group's communicator is
// made anew, and the next tenant's all-reduce over both devices adds up.
TEST_F(ApiServerNcclTest, EndingASessionWaitingInAHalfEnteredCollectiveAbortsIt) {
  const ipc::NcclCollectiveArgs half = AllReduce(0);
  SetDevice(0);
  const uint64_t entered = Post(ipc::Op::kNcclCollective, &half, sizeof(half));
  const uint64_t waiting = Post(ipc::Op::kDeviceSynchronize, nullptr, 0);
  // The synchronise is the executor's next record once the all-reduce completed.
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return ring_->header()->completed_seq.load() >= entered; }));
  EXPECT_LT(ring_->header()->completed_seq.load(), waiting);
  ring_.reset();
  close(sock_);
  sock_ = -1;
  server_->EndSession(token_);
  token_.clear();
  EXPECT_EQ(server_->session_count(), 0u);

  OpenGroupSession();
  for (int r = 0; r < kRanks; ++r) {
    const ipc::NcclCollectiveArgs all = AllReduce(r);
    ASSERT_EQ(Call(ipc::Op::kNcclCollective, &all, sizeof(all)), CUDA_SUCCESS);
  }
  std::vector<int32_t> sum(kCount);
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; ++i) sum[i] += Input(r)[i];
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Download(r, buf_[r]), sum) << "rank " << r;
}

// A collective timeout short enough for a test: any call that waits with a collective
// half-entered ends it.
class ApiServerNcclTimeoutTest : public ApiServerNcclTest {
 protected:
  ApiServerNcclTimeoutTest() { collective_timeout_ = std::chrono::milliseconds(20); }

  // After `enter` left rank 0's all-reduce half-entered, device 0 synchronises: the wait ends
  // (the timeout aborted the group's communicator), nothing was moved, every rank's asynchronous
  // error is ncclSystemError, the communicator takes no more work, and the session serves on.
  void ExpectTheWaitEndsWithAnError() {
    SetDevice(0);
    EXPECT_EQ(Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
    for (int r = 0; r < kRanks; ++r) {
      uint64_t state = 0;
      ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, comm_[r], &state), ncclSuccess);
      EXPECT_EQ(static_cast<int32_t>(state), ncclSystemError) << "rank " << r;
    }
    EXPECT_EQ(Download(0, buf_[0]), Input(0));
    const ipc::NcclCollectiveArgs again = AllReduce(1);
    EXPECT_EQ(Call(ipc::Op::kNcclCollective, &again, sizeof(again)), CUDA_ERROR_INVALID_HANDLE);
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(HandleCall(ipc::Op::kNcclCommDestroy, comm_[r]), ncclSuccess);
    EXPECT_EQ(Download(1, buf_[1]), Input(1));
  }
};

TEST_F(ApiServerNcclTimeoutTest, AWaitOnAHalfEnteredCollectiveEndsWithAnError) {
  const ipc::NcclCollectiveArgs half = AllReduce(0);
  ASSERT_EQ(Call(ipc::Op::kNcclCollective, &half, sizeof(half)), CUDA_SUCCESS);
  ExpectTheWaitEndsWithAnError();
}

// A group whose end holds the all-reduce of rank 0 only (rank 1's would be in a group that never
// ends) runs it as NCCL does: the group ends, and the wait after it ends with errors, not a hang.
TEST_F(ApiServerNcclTimeoutTest, AGroupEndedOnSomeRanksEndsWithErrors) {
  ASSERT_EQ(GroupStart(), CUDA_SUCCESS);
  const ipc::NcclCollectiveArgs half = AllReduce(0);
  ASSERT_EQ(Call(ipc::Op::kNcclCollective, &half, sizeof(half)), CUDA_SUCCESS);
  ASSERT_EQ(GroupEnd(), ncclSuccess);
  ExpectTheWaitEndsWithAnError();
}

// Collectives every rank entered are never aborted, however long a call waits.
TEST_F(ApiServerNcclTimeoutTest, CollectivesEveryRankEnteredAreNotAborted) {
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < kRanks; ++r) {
      const ipc::NcclCollectiveArgs all = AllReduce(r);
      ASSERT_EQ(Call(ipc::Op::kNcclCollective, &all, sizeof(all)), CUDA_SUCCESS);
    }
    SetDevice(0);
    ASSERT_EQ(Call(ipc::Op::kDeviceSynchronize, nullptr, 0), CUDA_SUCCESS);
  }
  std::vector<int32_t> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) expected[i] = (Input(0)[i] + Input(1)[i]) * 4;  // doubled twice more
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(Download(r, buf_[r]), expected) << "rank " << r;
    uint64_t state = 0;
    ASSERT_EQ(HandleCall(ipc::Op::kNcclCommGetAsyncError, comm_[r], &state), ncclSuccess);
    EXPECT_EQ(static_cast<int32_t>(state), ncclSuccess);
  }
}

}  // namespace
}  // namespace phos::runtime
