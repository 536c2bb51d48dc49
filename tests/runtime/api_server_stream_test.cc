// Streams and host functions at the protocol level, the test playing the function process: what
// phosd checks in the records (flags, priorities, handles, host-function slots) and how it holds a
// stream behind a host function until the function process posts the slot back.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "../testing/wait_until.h"
#include "api_server_fixture.h"
#include "phos/store/store.h"

namespace phos::runtime {
namespace {

using ipc::HostFnQueueId;

class ApiServerStreamTest : public ApiServerSessionTest {
 protected:
  uint64_t NewStream(uint32_t flags, int32_t priority) {
    ipc::StreamCreateArgs a{flags, priority};
    uint64_t vid = 0;
    EXPECT_EQ(Call(ipc::Op::kStreamCreateWithPriority, &a, sizeof(a), &vid), CUDA_SUCCESS);
    return vid;
  }
  ipc::StreamInfo Info(uint64_t stream, int32_t* result) {
    ipc::HandleArgs a{stream};
    *result = Call(ipc::Op::kStreamGetInfo, &a, sizeof(a));
    ipc::StreamInfo info{};
    std::memcpy(&info, ring_->reply_payload(), sizeof(info));
    return info;
  }
  // The next event phosd posts to the function process; nothing after kPatience. Waits on the
  // queue's own wake-up rather than polling (WaitUntil).
  std::optional<ipc::HostFnEvent> NextHostFnEvent() {
    const auto deadline = std::chrono::steady_clock::now() + ::phos::testing::kPatience;
    ipc::HostFnEvent event{};
    while (std::chrono::steady_clock::now() < deadline) {
      if (ring_->TakeHostFnEvents(HostFnQueueId::kToFrontend, &event, 1) == 1) return event;
      ring_->WaitHostFnEvents(HostFnQueueId::kToFrontend, 100);
    }
    return std::nullopt;
  }
  // The session's pending asynchronous error, taken.
  int32_t AsyncError() { return ring_->header()->async_error.exchange(0); }
};

TEST_F(ApiServerStreamTest, StreamsAreCreatedWithCheckedFlagsAndClampedPriorities) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ipc::StreamPriorityRange range{1, 1};
  ASSERT_EQ(Call(ipc::Op::kStreamPriorityRange, nullptr, 0), CUDA_SUCCESS);
  std::memcpy(&range, ring_->reply_payload(), sizeof(range));
  EXPECT_EQ(range.least, 0);
  EXPECT_EQ(range.greatest, -5);

  const uint64_t high = NewStream(CU_STREAM_NON_BLOCKING, -100);
  const uint64_t low = NewStream(CU_STREAM_DEFAULT, 100);
  int32_t result = -1;
  ipc::StreamInfo info = Info(high, &result);
  ASSERT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(info.priority, range.greatest);
  EXPECT_EQ(info.flags, static_cast<uint32_t>(CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.id, high);
  info = Info(low, &result);
  ASSERT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(info.priority, range.least);
  EXPECT_EQ(info.flags, static_cast<uint32_t>(CU_STREAM_DEFAULT));
  info = Info(0, &result);  // the legacy stream
  ASSERT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(info.id, 1u);
  EXPECT_EQ(info.priority, 0);

  // Refusals: unknown flags, a stream the session does not have, records of the wrong size.
  ipc::StreamCreateArgs bad{0x10, 0};
  EXPECT_EQ(Call(ipc::Op::kStreamCreateWithPriority, &bad, sizeof(bad)), CUDA_ERROR_INVALID_VALUE);
  ipc::FlagsArgs bad_flags{0x6, 0};
  EXPECT_EQ(Call(ipc::Op::kStreamCreate, &bad_flags, sizeof(bad_flags)), CUDA_ERROR_INVALID_VALUE);
  Info(12345, &result);
  EXPECT_EQ(result, CUDA_ERROR_INVALID_HANDLE);
  ipc::StreamCreateArgs good{0, 0};
  EXPECT_EQ(Call(ipc::Op::kStreamCreateWithPriority, &good, sizeof(good) - 1), CUDA_ERROR_INVALID_VALUE);
  uint64_t handle = high;
  EXPECT_EQ(Call(ipc::Op::kStreamGetInfo, &handle, sizeof(handle) - 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Call(ipc::Op::kStreamPriorityRange, &handle, sizeof(handle)), CUDA_ERROR_INVALID_VALUE);
  ipc::HandleArgs destroy{high};
  EXPECT_EQ(Call(ipc::Op::kStreamDestroy, &destroy, sizeof(destroy)), CUDA_SUCCESS);
  Info(high, &result);
  EXPECT_EQ(result, CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(ApiServerStreamTest, AHostFunctionHoldsItsStreamUntilItsSlotComesBack) {
  ASSERT_NO_FATAL_FAILURE(Open());
  uint64_t buf = 0;
  ipc::SizeArgs alloc{256};
  ASSERT_EQ(Call(ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &buf), CUDA_SUCCESS);
  const uint64_t held = NewStream(CU_STREAM_NON_BLOCKING, 0);
  const uint64_t other = NewStream(CU_STREAM_NON_BLOCKING, 0);

  ipc::HostFnArgs launch{.stream = held, .slot = 5, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  ipc::MemsetArgs behind{.dst = buf, .bytes = 256, .stream = held, .value = 0x5e, .element_bytes = 0};
  Queue(ipc::Op::kMemset, &behind, sizeof(behind));
  std::optional<ipc::HostFnEvent> reached = NextHostFnEvent();
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->slot, 5u);
  EXPECT_EQ(reached->result, 0);
  ipc::HandleArgs held_handle{held}, other_handle{other};
  EXPECT_EQ(Call(ipc::Op::kStreamQuery, &held_handle, sizeof(held_handle)), CUDA_ERROR_NOT_READY);
  // Another stream's work goes on meanwhile.
  ipc::MemsetArgs aside{.dst = buf, .bytes = 8, .stream = other, .value = 1, .element_bytes = 0};
  ASSERT_EQ(Call(ipc::Op::kMemset, &aside, sizeof(aside)), CUDA_SUCCESS);
  ASSERT_EQ(Call(ipc::Op::kStreamSynchronize, &other_handle, sizeof(other_handle)), CUDA_SUCCESS);

  // What a hostile function process posts back or queues is checked: a slot out of range, one
  // never queued, one still pending, a stream it does not have.
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {ipc::kMaxHostFnSlots + 3, 0});
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {6, 0});
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  std::optional<ipc::HostFnEvent> refused = NextHostFnEvent();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->slot, 5u);
  EXPECT_EQ(refused->result, CUDA_ERROR_INVALID_VALUE);
  ipc::HostFnArgs beyond{.stream = other, .slot = ipc::kMaxHostFnSlots, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &beyond, sizeof(beyond));
  refused = NextHostFnEvent();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->slot, ipc::kMaxHostFnSlots);
  EXPECT_EQ(refused->result, CUDA_ERROR_INVALID_VALUE);
  ipc::HostFnArgs nowhere{.stream = 999, .slot = 7, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &nowhere, sizeof(nowhere));
  refused = NextHostFnEvent();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->slot, 7u);
  EXPECT_EQ(refused->result, CUDA_ERROR_INVALID_HANDLE);
  // Each refusal is the session's asynchronous error too (the first one stays).
  EXPECT_EQ(Call(ipc::Op::kStreamQuery, &held_handle, sizeof(held_handle)), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(AsyncError(), CUDA_ERROR_INVALID_VALUE);
  // A record too short to name a slot is refused with nothing posted.
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch) - 4);
  EXPECT_EQ(Call(ipc::Op::kStreamQuery, &held_handle, sizeof(held_handle)), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(AsyncError(), CUDA_ERROR_INVALID_VALUE);
  ipc::HostFnEvent none{};
  EXPECT_EQ(ring_->TakeHostFnEvents(HostFnQueueId::kToFrontend, &none, 1), 0u);
  // Nothing of it opened the gate: the memset behind it has not run.
  ipc::CopyArgs read{.dst = 0, .src = buf + 8, .bytes = 8, .stream = other};
  ASSERT_EQ(Call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(ring_->reply_payload(), std::vector<uint8_t>(8, 0x5e).data(), 8), 0);

  // The slot comes back: the stream goes on, the memset lands, and the slot may be queued again.
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {5, 0});
  ASSERT_EQ(Call(ipc::Op::kStreamSynchronize, &held_handle, sizeof(held_handle)), CUDA_SUCCESS);
  read = {.dst = 0, .src = buf, .bytes = 256, .stream = 0};
  ASSERT_EQ(Call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(ring_->reply_payload(), std::vector<uint8_t>(256, 0x5e).data(), 256), 0);
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  reached = NextHostFnEvent();
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->slot, 5u);
  EXPECT_EQ(reached->result, 0);
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {5, 0});
  EXPECT_EQ(Call(ipc::Op::kStreamSynchronize, &held_handle, sizeof(held_handle)), CUDA_SUCCESS);
}

// A slot never posted back: ending the session opens the gate, waits for the stream and frees
// what the gates held; phosd serves the next session on the same pooled context.
TEST_F(ApiServerStreamTest, ASessionEndingWithAHeldStreamReleasesIt) {
  ASSERT_NO_FATAL_FAILURE(Open());
  const uint64_t held = NewStream(CU_STREAM_DEFAULT, 0);
  ipc::HostFnArgs launch{.stream = held, .slot = 0, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  ipc::HostFnArgs legacy{.stream = 0, .slot = 1, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &legacy, sizeof(legacy));
  ASSERT_TRUE(NextHostFnEvent().has_value());
  server_->EndSession(token_);
  token_.clear();
  EXPECT_EQ(server_->session_count(), 0u);
  ASSERT_NO_FATAL_FAILURE(Open());
  const uint64_t again = NewStream(CU_STREAM_DEFAULT, 0);
  launch.stream = again;
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  std::optional<ipc::HostFnEvent> reached = NextHostFnEvent();
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->result, 0);
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {0, 0});
  ipc::HandleArgs sync{again};
  EXPECT_EQ(Call(ipc::Op::kStreamSynchronize, &sync, sizeof(sync)), CUDA_SUCCESS);
}

// A session with a host function pending is not captured (the function process's side of it is
// not in a snapshot); once it returned, the snapshot keeps each stream's priority, and the
// restored session holds its streams behind host functions as any other.
TEST_F(ApiServerStreamTest, SnapshotsKeepPrioritiesAndRestoredSessionsServeHostFunctions) {
  Result<int> slot = server_->ClaimVaSlot();
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  const std::string dir = "/tmp/phos-api-stream-store-" + std::to_string(getpid());
  auto store = store::Store::Open({.path = dir});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SessionPlan deploy;
  deploy.va_slot = *slot;
  deploy.function = "fn";
  ASSERT_NO_FATAL_FAILURE(Open(server_->IssueToken(std::move(deploy))));
  uint64_t buf = 0;
  ipc::SizeArgs alloc{4096};
  ASSERT_EQ(Call(ipc::Op::kMemAlloc, &alloc, sizeof(alloc), &buf), CUDA_SUCCESS);
  const uint64_t stream = NewStream(CU_STREAM_NON_BLOCKING, -3);
  ipc::HostFnArgs launch{.stream = stream, .slot = 2, .pad = 0};
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  ASSERT_TRUE(NextHostFnEvent().has_value());
  Result<uint64_t> refused = server_->CaptureSession(token_, **store, "fn", "ci", std::chrono::seconds(60));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("host functions are still pending"), std::string::npos)
      << refused.status().ToString();
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {2, 0});
  ipc::HandleArgs sync{stream};
  ASSERT_EQ(Call(ipc::Op::kStreamSynchronize, &sync, sizeof(sync)), CUDA_SUCCESS);
  Result<uint64_t> version = server_->CaptureSession(token_, **store, "fn", "ci", std::chrono::seconds(60));
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  server_->EndSession(token_);
  close(sock_);
  sock_ = -1;

  Result<store::Manifest> manifest = (*store)->LoadManifest("fn", *version);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  SessionPlan restore;
  restore.manifest = std::make_shared<store::Manifest>(std::move(*manifest));
  restore.source = store->get();
  restore.stop_the_world = true;
  restore.va_slot = *slot;
  restore.function = "fn";
  std::string token = server_->IssueToken(std::move(restore));
  ASSERT_TRUE(server_->WaitPrepared(token, std::chrono::seconds(60)).ok());
  ASSERT_NO_FATAL_FAILURE(Open(token));
  int32_t result = -1;
  ipc::StreamInfo info = Info(stream, &result);
  ASSERT_EQ(result, CUDA_SUCCESS);
  EXPECT_EQ(info.priority, -3);
  EXPECT_EQ(info.flags, static_cast<uint32_t>(CU_STREAM_NON_BLOCKING));
  Queue(ipc::Op::kLaunchHostFunc, &launch, sizeof(launch));
  ipc::MemsetArgs behind{.dst = buf, .bytes = 4096, .stream = stream, .value = 0x3c, .element_bytes = 0};
  Queue(ipc::Op::kMemset, &behind, sizeof(behind));
  std::optional<ipc::HostFnEvent> reached = NextHostFnEvent();
  ASSERT_TRUE(reached.has_value());
  EXPECT_EQ(reached->result, 0);
  EXPECT_EQ(Call(ipc::Op::kStreamQuery, &sync, sizeof(sync)), CUDA_ERROR_NOT_READY);
  ring_->PostHostFnEvent(HostFnQueueId::kToServer, {2, 0});
  ASSERT_EQ(Call(ipc::Op::kStreamSynchronize, &sync, sizeof(sync)), CUDA_SUCCESS);
  ipc::CopyArgs read{.dst = 0, .src = buf, .bytes = 4096, .stream = 0};
  ASSERT_EQ(Call(ipc::Op::kMemcpyDtoH, &read, sizeof(read)), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(ring_->reply_payload(), std::vector<uint8_t>(4096, 0x3c).data(), 4096), 0);
  server_->EndSession(token_);
  token_.clear();
  store->reset();
  server_->ReleaseVaSlot(*slot);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phos::runtime
