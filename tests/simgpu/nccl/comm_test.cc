// NCCL communicators and a collective over a fake DeviceAccess
// (tests/simgpu/device/fake_device_access.h): what src/nccl asks of the devices (primary
// contexts, the current context, memory ownership, creation cost), tested without the driver.
#include "nccl/comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "../../testing/wait_until.h"
#include "device/fake_device_access.h"
#include "nccl/collective.h"

namespace phos::sim::nccl {
namespace {

using phos::sim::testing::FakeDeviceAccess;

constexpr int kDevices = 2;

DeviceProfile TestProfile() {
  DeviceProfile profile;
  profile.name = "fake";
  profile.nccl_comm_init_s = 0.25;
  return profile;
}

class CommTest : public ::testing::Test {
 protected:
  // A communicator of one rank, created by ncclCommInitRank's path.
  ncclResult_t InitOneRank(ncclComm_t* comm) {
    ncclUniqueId id;
    if (ncclResult_t r = comms_.NewUniqueId(&id); r != ncclSuccess) return r;
    PendingJoin join;
    if (ncclResult_t r = comms_.JoinInit(id, 1, 0, comm, &join); r != ncclSuccess) return r;
    return comms_.FinishJoins({join});
  }
  std::shared_ptr<RankComm> Rank(ncclComm_t comm) {
    std::shared_ptr<RankComm> rank;
    EXPECT_EQ(comms_.FindAny(comm, &rank), ncclSuccess);
    return rank;
  }

  const DeviceProfile profile_ = TestProfile();
  FakeDeviceAccess device_{kDevices, profile_};
  CommRegistry comms_{device_};
};

TEST_F(CommTest, InitAllBindsEachRankToItsDevicesPrimaryContextAndPaysOnce) {
  ncclComm_t comms[kDevices] = {};
  ASSERT_EQ(comms_.InitAll(comms, kDevices, nullptr), ncclSuccess);
  EXPECT_EQ(device_.paid(), (std::vector<double>{0.25}));
  for (int r = 0; r < kDevices; ++r) {
    EXPECT_EQ(device_.primary_refs(r), 1);
    EXPECT_EQ(Rank(comms[r])->rank, r);
    EXPECT_EQ(Rank(comms[r])->device(), r);
  }
  for (ncclComm_t comm : comms) EXPECT_EQ(comms_.Destroy(comm), ncclSuccess);
  for (int r = 0; r < kDevices; ++r) EXPECT_EQ(device_.primary_refs(r), 0);
}

TEST_F(CommTest, InitAllRefusesDevicesTheDeviceAccessDoesNotHave) {
  ncclComm_t comms[kDevices] = {};
  const int missing[kDevices] = {0, kDevices};
  EXPECT_EQ(comms_.InitAll(comms, kDevices, missing), ncclInvalidArgument);
  const int twice[kDevices] = {1, 1};
  EXPECT_EQ(comms_.InitAll(comms, kDevices, twice), ncclInvalidUsage);
  EXPECT_EQ(comms_.InitAll(comms, 0, nullptr), ncclInvalidArgument);
  for (int r = 0; r < kDevices; ++r) EXPECT_EQ(device_.primary_refs(r), 0);
  EXPECT_TRUE(device_.paid().empty());
}

TEST_F(CommTest, InitRankWithoutACurrentContextBindsDevice0sPrimaryContext) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(InitOneRank(&comm), ncclSuccess);
  EXPECT_EQ(device_.primary_refs(0), 1);
  EXPECT_EQ(Rank(comm)->device(), 0);
  EXPECT_EQ(device_.paid(), (std::vector<double>{0.25}));
  EXPECT_EQ(comms_.Destroy(comm), ncclSuccess);
  EXPECT_EQ(device_.primary_refs(0), 0);
}

TEST_F(CommTest, CommunicatorOfADestroyedContextIsAnUnhandledCudaError) {
  const ContextRef ctx = device_.CreateCurrentContext(1);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(InitOneRank(&comm), ncclSuccess);
  EXPECT_EQ(Rank(comm)->device(), 1);
  EXPECT_EQ(device_.primary_refs(1), 0);

  device_.DestroyContext(ctx);
  std::shared_ptr<RankComm> rank;
  EXPECT_EQ(comms_.Find(comm, &rank), ncclUnhandledCudaError);
  EXPECT_EQ(comms_.FindAny(comm, &rank), ncclSuccess);  // queries and destroy still work
  EXPECT_EQ(comms_.Destroy(comm), ncclSuccess);
}

TEST_F(CommTest, AllReduceSumsTheBuffersOfEveryRank) {
  ncclComm_t comms[kDevices] = {};
  ASSERT_EQ(comms_.InitAll(comms, kDevices, nullptr), ncclSuccess);
  std::vector<float> send[kDevices] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  std::vector<float> recv[kDevices] = {std::vector<float>(4), std::vector<float>(4)};
  for (int r = 0; r < kDevices; ++r) {
    device_.AddMemory(send[r].data(), send[r].size() * sizeof(float), r);
    device_.AddMemory(recv[r].data(), recv[r].size() * sizeof(float), r);
  }
  for (int r = 0; r < kDevices; ++r) {
    const CollectiveArgs args{
        CollectiveKind::kAllReduce, send[r].data(), recv[r].data(), 4, ncclFloat32, ncclSum, 0};
    ASSERT_EQ(EnqueueCollective(comms_, comms[r], args, nullptr), ncclSuccess);
  }
  for (int r = 0; r < kDevices; ++r) {
    ASSERT_EQ(Rank(comms[r])->binding.ctx.exec->Synchronize(), CUDA_SUCCESS);
    EXPECT_EQ(recv[r], (std::vector<float>{11, 22, 33, 44}));
  }
}

TEST_F(CommTest, BufferOfAnotherDeviceOrOfNoDeviceIsRefused) {
  ncclComm_t comms[kDevices] = {};
  ASSERT_EQ(comms_.InitAll(comms, kDevices, nullptr), ncclSuccess);
  std::vector<float> on_device1(4);
  std::vector<float> on_no_device(4);
  device_.AddMemory(on_device1.data(), on_device1.size() * sizeof(float), 1);
  const CollectiveArgs foreign{
      CollectiveKind::kAllReduce, on_device1.data(), on_device1.data(), 4, ncclFloat32, ncclSum, 0};
  EXPECT_EQ(EnqueueCollective(comms_, comms[0], foreign, nullptr), ncclInvalidArgument);
  const CollectiveArgs host{
      CollectiveKind::kAllReduce, on_no_device.data(), on_no_device.data(), 4, ncclFloat32, ncclSum, 0};
  EXPECT_EQ(EnqueueCollective(comms_, comms[1], host, nullptr), ncclInvalidArgument);
}

// A rank waiting for the others to join a creation wakes when one that joined is aborted (its
// peers will never complete it), with ncclSystemError rather than after kJoinTimeout; a rank
// that comes later with the same id is refused the same way.
TEST_F(CommTest, AbortingARankWakesAPeerWaitingForTheCreation) {
  ncclUniqueId id;
  ASSERT_EQ(comms_.NewUniqueId(&id), ncclSuccess);
  ncclComm_t comms[3] = {};
  PendingJoin joins[3];
  ASSERT_EQ(comms_.JoinInit(id, 3, 0, &comms[0], &joins[0]), ncclSuccess);
  ASSERT_EQ(comms_.JoinInit(id, 3, 1, &comms[1], &joins[1]), ncclSuccess);
  std::atomic<int> waited{-1};
  std::thread waiter([&] { waited = comms_.FinishJoins({joins[0]}); });
  ASSERT_TRUE(phos::testing::WaitUntil([&] { return comms_.join_waiters() == 1; }));
  ASSERT_EQ(comms_.Abort(comms[1]), ncclSuccess);
  waiter.join();
  EXPECT_EQ(waited.load(), ncclSystemError);
  EXPECT_EQ(comms_.JoinInit(id, 3, 2, &comms[2], &joins[2]), ncclSystemError);
  EXPECT_EQ(comms_.Destroy(comms[0]), ncclSuccess);
  EXPECT_EQ(device_.paid(), std::vector<double>{});  // nothing was created
}

// A collective rank 0 entered and rank 1 never will: rank 0's stream waits in it (a thread
// synchronising it is blocked) until rank 1 is aborted. Then the wait ends, nothing was moved,
// and rank 0 sees the error NCCL reports when a peer goes away, ncclRemoteError, as its
// asynchronous error, sticky.
TEST_F(CommTest, AbortingARankWakesAPeerWaitingInACollectiveWithAnError) {
  ncclComm_t comms[kDevices] = {};
  ASSERT_EQ(comms_.InitAll(comms, kDevices, nullptr), ncclSuccess);
  std::vector<float> send{1, 2, 3, 4};
  std::vector<float> recv(4, -1);
  device_.AddMemory(send.data(), send.size() * sizeof(float), 0);
  device_.AddMemory(recv.data(), recv.size() * sizeof(float), 0);
  const CollectiveArgs args{CollectiveKind::kAllReduce, send.data(), recv.data(), 4, ncclFloat32, ncclSum, 0};
  ASSERT_EQ(EnqueueCollective(comms_, comms[0], args, nullptr), ncclSuccess);
  std::shared_ptr<RankComm> rank0 = Rank(comms[0]);
  std::atomic<int> synced{-1};
  std::thread waiter([&] { synced = rank0->binding.ctx.exec->Synchronize(); });
  EXPECT_EQ(rank0->binding.ctx.exec->null_stream()->Query(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(rank0->group->async_error.load(), ncclSuccess);
  ASSERT_EQ(comms_.Abort(comms[1]), ncclSuccess);
  waiter.join();
  EXPECT_EQ(synced.load(), CUDA_SUCCESS);  // the CUDA context is not failed: only the collective
  EXPECT_EQ(recv, std::vector<float>(4, -1));
  EXPECT_EQ(rank0->group->async_error.load(), ncclRemoteError);
  // An abort with nothing in flight leaves the error as it was.
  ASSERT_EQ(comms_.Abort(comms[0]), ncclSuccess);
  EXPECT_EQ(rank0->group->async_error.load(), ncclRemoteError);
}

// Aborting a rank of an idle communicator is no error for the others: nothing of theirs waited.
TEST_F(CommTest, AbortingARankWithNothingInFlightLeavesThePeersWithoutError) {
  ncclComm_t comms[kDevices] = {};
  ASSERT_EQ(comms_.InitAll(comms, kDevices, nullptr), ncclSuccess);
  std::shared_ptr<RankComm> rank0 = Rank(comms[0]);
  ASSERT_EQ(comms_.Abort(comms[1]), ncclSuccess);
  EXPECT_EQ(rank0->group->async_error.load(), ncclSuccess);
  EXPECT_EQ(comms_.Destroy(comms[0]), ncclSuccess);
}

}  // namespace
}  // namespace phos::sim::nccl
