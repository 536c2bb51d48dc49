// CUDA graphs and stream capture at the protocol level, the test playing the function process:
// an explicit graph runs its nodes in order and gives what a CPU computes; a capture records a
// stream's work (two streams forked and joined by events) without running it; every hostile
// record — a node outside the session's buffers, unknown handles and indices, a short record, a
// node kind phosd does not serve or a host node carrying data, a buffer freed under an executable
// graph, work a capture cannot hold — is refused with the driver's error and runs nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "api_server_graph_fixture.h"

namespace phos::runtime {
namespace {

using ipc::Op;

TEST_F(ApiServerGraphTest, AnExplicitGraphRunsItsNodesInOrderAndEachLaunchChecksThemAgain) {
  const uint64_t a = client_.Alloc(kBytes), c = client_.Alloc(kBytes), d = client_.Alloc(kBytes);
  const uint64_t graph = NewGraph();
  uint32_t set = 0, add = 0, copy = 0;
  ASSERT_EQ(Add(graph, MemsetNode(a, 0x40400000, 4, kCount), {}, {}, &set), CUDA_SUCCESS);  // 3.0f
  ASSERT_EQ(Add(graph, KernelNode(VecAdd()), {set}, VecAddParams(a, a, c), &add), CUDA_SUCCESS);
  ASSERT_EQ(Add(graph, CopyNode(d, c, kBytes), {add}, {}, &copy), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kGraphGetNodes, ipc::HandleArgs{graph}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<uint32_t>(), 3u);

  ASSERT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  const uint64_t exec = client_.Reply<uint64_t>();
  // Nothing ran before the launch.
  for (float v : Floats(d)) ASSERT_EQ(v, 0.0f);
  ASSERT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec}), CUDA_SUCCESS);
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  for (float v : Floats(d)) ASSERT_EQ(v, 3.0f + 3.0f);

  // A launch naming an executable graph the session does not have, or on another stream's device.
  EXPECT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec + 16}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{12345, exec}), CUDA_ERROR_INVALID_HANDLE);
  // A buffer the graph names freed under the executable graph: the launch is refused.
  ASSERT_EQ(client_.Call(Op::kMemFree, ipc::PointerArgs{d}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec}), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphExecDestroy, ipc::HandleArgs{exec}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphExecDestroy, ipc::HandleArgs{exec}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec}), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphDestroy, ipc::HandleArgs{graph}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphDestroy, ipc::HandleArgs{graph}), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(ApiServerGraphTest, HostileNodesAreRefusedWhenAdded) {
  const uint64_t a = client_.Alloc(kBytes);
  const uint64_t graph = NewGraph();
  uint32_t first = 0;
  ASSERT_EQ(Add(graph, MemsetNode(a, 0, 1, kBytes), {}, {}, &first), CUDA_SUCCESS);
  // Ranges outside the session's buffers, or that wrap.
  EXPECT_EQ(Add(graph, MemsetNode(a, 0, 1, kBytes + 1), {}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Add(graph, CopyNode(a, a + 4096 * 1024, 16), {}), CUDA_ERROR_INVALID_VALUE);
  ipc::GraphNode wraps = MemsetNode(a, 0, 4, ~0ull / 2);
  EXPECT_EQ(Add(graph, wraps, {}), CUDA_ERROR_INVALID_VALUE);
  ipc::GraphNode pitched = CopyNode(a, a, 64);
  pitched.height = 2;
  pitched.src_pitch = 32;  // below the width: rows overlap
  EXPECT_EQ(Add(graph, pitched, {}), CUDA_ERROR_INVALID_VALUE);
  // An element size a memset does not have; a kind phosd does not serve; host nodes.
  EXPECT_EQ(Add(graph, MemsetNode(a, 0, 3, 4), {}), CUDA_ERROR_INVALID_VALUE);
  ipc::GraphNode odd{};
  odd.type = 99;
  EXPECT_EQ(Add(graph, odd, {}), CUDA_ERROR_INVALID_VALUE);
  // A host node that carries anything: its function stays in the function process.
  ipc::GraphNode host{};
  host.type = CU_GRAPH_NODE_TYPE_HOST;
  host.dst = a;
  EXPECT_EQ(Add(graph, host, {}), CUDA_ERROR_INVALID_VALUE);
  host.dst = 0;
  EXPECT_EQ(Add(graph, host, {}, {1, 2, 3, 4}), CUDA_ERROR_INVALID_VALUE);
  // A kernel whose parameters name memory of another owner (phosd's own allocation), a function
  // the session does not have, or parameters of the wrong size.
  CUdeviceptr other = 0;
  ASSERT_EQ(table_->cuMemAlloc(&other, 4096), CUDA_SUCCESS);  // phosd's own memory: another owner's
  EXPECT_EQ(Add(graph, KernelNode(VecAdd()), {}, VecAddParams(a, a, other)), CUDA_ERROR_INVALID_VALUE);
  ipc::LaunchArgs unknown = VecAdd();
  unknown.function += 16;
  EXPECT_EQ(Add(graph, KernelNode(unknown), {}, VecAddParams(a, a, a)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Add(graph, KernelNode(VecAdd()), {}, std::vector<uint8_t>(20, 0)), CUDA_ERROR_INVALID_VALUE);
  // Events the session does not have.
  ipc::GraphNode wait{};
  wait.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  wait.event = 0x7777770;
  EXPECT_EQ(Add(graph, wait, {}), CUDA_ERROR_INVALID_VALUE);
  // Dependencies: out of range, repeated, more than the record carries.
  EXPECT_EQ(Add(graph, MemsetNode(a, 0, 1, 4), {first + 5}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Add(graph, MemsetNode(a, 0, 1, 4), {first, first}), CUDA_ERROR_INVALID_VALUE);
  ipc::GraphNodeArgs lying{graph, 0, 1000, MemsetNode(a, 0, 1, 4)};
  EXPECT_EQ(client_.Call(Op::kGraphAddNode, lying), CUDA_ERROR_INVALID_VALUE);
  // Graphs the session does not have; a record shorter than its arguments.
  EXPECT_EQ(Add(graph + 16, MemsetNode(a, 0, 1, 4), {}), CUDA_ERROR_INVALID_VALUE);
  ipc::GraphNodeArgs short_record{graph, 0, 0, MemsetNode(a, 0, 1, 4)};
  EXPECT_EQ(client_.Call(Op::kGraphAddNode, &short_record, sizeof(short_record) - 8),
            CUDA_ERROR_INVALID_VALUE);
  // Edges: to itself, twice, to a node that does not exist; nothing of a refused call is added.
  uint32_t second = 0;
  ASSERT_EQ(Add(graph, MemsetNode(a, 0, 1, 4), {}, {}, &second), CUDA_SUCCESS);
  const std::vector<ipc::GraphEdge> bad = {{first, second}, {second, second}};
  EXPECT_EQ(client_.Call(Op::kGraphAddDependencies, ipc::GraphEdgesArgs{graph, 2, 0}, bad.data(), 16),
            CUDA_ERROR_INVALID_VALUE);
  const std::vector<ipc::GraphEdge> beyond = {{first, 77}};
  EXPECT_EQ(client_.Call(Op::kGraphAddDependencies, ipc::GraphEdgesArgs{graph, 1, 0}, beyond.data(), 8),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphAddDependencies, ipc::GraphEdgesArgs{graph, 2, 0}, beyond.data(), 8),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphGetNodes, ipc::HandleArgs{graph}), CUDA_SUCCESS);
  ipc::GraphNodeInfo infos[2];
  ASSERT_EQ(client_.reply().size(), 8 + sizeof(infos));
  std::memcpy(infos, client_.reply().data() + 8, sizeof(infos));
  EXPECT_EQ(infos[1].dependency_count, 0u);
  // A cycle is the driver's to refuse, at instantiation.
  const std::vector<ipc::GraphEdge> cycle = {{first, second}, {second, first}};
  ASSERT_EQ(client_.Call(Op::kGraphAddDependencies, ipc::GraphEdgesArgs{graph, 2, 0}, cycle.data(), 16),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 1ull << 40}),
            CUDA_ERROR_INVALID_VALUE);
  // Destroyed nodes are gone for good; their index is not reused.
  ASSERT_EQ(client_.Call(Op::kGraphDestroyNode, ipc::GraphNodeRef{graph, second, 0}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphDestroyNode, ipc::GraphNodeRef{graph, second, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphNodeGetParams, ipc::GraphNodeRef{graph, second, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  table_->cuMemFree(other);
}

TEST_F(ApiServerGraphTest, ExecUpdateAndKernelParametersFollowTheDriversRules) {
  const uint64_t a = client_.Alloc(kBytes), b = client_.Alloc(kBytes), c = client_.Alloc(kBytes);
  std::vector<float> ones(kCount, 1.0f), twos(kCount, 2.0f);
  ASSERT_EQ(client_.Upload(a, ones.data(), kBytes), CUDA_SUCCESS);
  ASSERT_EQ(client_.Upload(b, twos.data(), kBytes), CUDA_SUCCESS);
  const uint64_t graph = NewGraph();
  uint32_t k = 0;
  ASSERT_EQ(Add(graph, KernelNode(VecAdd()), {}, VecAddParams(a, a, c), &k), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  const uint64_t exec = client_.Reply<uint64_t>();

  // The same shape with other arguments: the update is taken; the launch computes b + b.
  const uint64_t same = NewGraph();
  ASSERT_EQ(Add(same, KernelNode(VecAdd()), {}, VecAddParams(b, b, c)), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kGraphExecUpdate, ipc::GraphUpdateArgs{exec, same}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::GraphUpdateInfo>().result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphExecUpdate, ipc::GraphUpdateArgs{exec, same + 16}),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec}), CUDA_SUCCESS);
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  for (float v : Floats(c)) ASSERT_EQ(v, 4.0f);

  // Another kind of node: refused with the node named; the executable graph is unchanged.
  const uint64_t other = NewGraph();
  ASSERT_EQ(Add(other, MemsetNode(c, 0, 4, kCount), {}), CUDA_SUCCESS);
  // A refused update is an answer: the reason and node come back with success.
  ASSERT_EQ(client_.Call(Op::kGraphExecUpdate, ipc::GraphUpdateArgs{exec, other}), CUDA_SUCCESS);
  const auto info = client_.Reply<ipc::GraphUpdateInfo>();
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  EXPECT_EQ(info.error_node, 0u);
  // An update naming a buffer the session does not own is refused before the driver sees it.
  CUdeviceptr phosd_memory = 0;
  ASSERT_EQ(table_->cuMemAlloc(&phosd_memory, 4096), CUDA_SUCCESS);
  const uint64_t hostile = NewGraph();
  ASSERT_EQ(client_.Call(Op::kGraphAddNode, ipc::GraphNodeArgs{hostile, 0, 0, KernelNode(VecAdd())},
                         VecAddParams(a, a, b).data(), 28),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kGraphNodeSetParams, ipc::GraphNodeArgs{hostile, 0, 0, KernelNode(VecAdd())},
                         VecAddParams(a, a, phosd_memory).data(), 28),
            CUDA_ERROR_INVALID_VALUE);

  // The executable graph's kernel node takes new arguments (a + b) without the graph.
  ASSERT_EQ(client_.Call(Op::kGraphExecNodeSetParams, ipc::GraphNodeArgs{exec, k, 0, KernelNode(VecAdd())},
                         VecAddParams(a, b, c).data(), 28),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kGraphExecNodeSetParams, ipc::GraphNodeArgs{exec, k, 0, KernelNode(VecAdd())},
                         VecAddParams(a, b, phosd_memory).data(), 28),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
      client_.Call(Op::kGraphExecNodeSetParams, ipc::GraphNodeArgs{exec, k + 9, 0, KernelNode(VecAdd())},
                   VecAddParams(a, b, c).data(), 28),
      CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{0, exec}), CUDA_SUCCESS);
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  for (float v : Floats(c)) ASSERT_EQ(v, 3.0f);
  table_->cuMemFree(phosd_memory);
}

TEST_F(ApiServerGraphTest, ACaptureRecordsForkedAndJoinedStreamsWithoutRunningThem) {
  const uint64_t a = client_.Alloc(kBytes), b = client_.Alloc(kBytes), c = client_.Alloc(kBytes);
  const uint64_t d = client_.Alloc(kBytes), e = client_.Alloc(kBytes);
  const uint64_t s1 = NewStream(CU_STREAM_NON_BLOCKING), s2 = NewStream(CU_STREAM_NON_BLOCKING);
  const uint64_t forked = NewEvent(), joined = NewEvent();
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_ERROR_ILLEGAL_STATE);
  // s1: a's bytes = 0x40, b = a; fork to s2: c = a + b; s1: e = b + b; join; s1: d = c.
  ASSERT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, kBytes, s1, 0x40, 0}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kMemcpyDtoD, ipc::CopyArgs{b, a, kBytes, s1}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kEventRecord, ipc::StreamEventArgs{s1, forked}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamWaitEvent, ipc::StreamEventArgs{s2, forked}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s2}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().dependency_count, 1u);
  ASSERT_EQ(client_.Call(Op::kLaunch, VecAdd(s2), VecAddParams(a, b, c).data(), 28), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kEventRecord, ipc::StreamEventArgs{s2, joined}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kLaunch, VecAdd(s1), VecAddParams(b, b, e).data(), 28), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamWaitEvent, ipc::StreamEventArgs{s1, joined}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kMemcpyDtoD, ipc::CopyArgs{d, c, kBytes, s1}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}), CUDA_SUCCESS);
  const uint64_t graph = client_.Reply<uint64_t>();
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s2}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_NONE);
  // Nothing ran: the capture only recorded.
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  for (float v : Floats(a)) ASSERT_EQ(v, 0.0f);
  ASSERT_EQ(client_.Call(Op::kGraphGetNodes, ipc::HandleArgs{graph}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<uint32_t>(), 5u);  // memset, copy, two kernels, copy

  ASSERT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  const uint64_t exec = client_.Reply<uint64_t>();
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{s1, exec}), CUDA_SUCCESS);
  }
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  // The same steps on the CPU.
  std::vector<float> ha(kCount), hb(kCount), hc(kCount), he(kCount);
  std::memset(ha.data(), 0x40, kBytes);
  hb = ha;
  for (int i = 0; i < kCount; ++i) hc[i] = ha[i] + hb[i];
  for (int i = 0; i < kCount; ++i) he[i] = hb[i] + hb[i];
  EXPECT_EQ(Floats(d), hc);
  EXPECT_EQ(Floats(e), he);
}

TEST_F(ApiServerGraphTest, WhatACaptureCannotHoldIsRefusedAndInvalidatesIt) {
  const uint64_t a = client_.Alloc(kBytes);
  const uint64_t s1 = NewStream(CU_STREAM_DEFAULT), s2 = NewStream(CU_STREAM_NON_BLOCKING);
  // The legacy stream cannot be captured; ending what never began is an illegal state.
  EXPECT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{0, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, 7, 0}), CUDA_ERROR_INVALID_VALUE);

  // A copy from host memory on a capturing stream: refused, and the capture is invalidated.
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  std::vector<uint8_t> bytes(64, 1);
  EXPECT_EQ(client_.Call(Op::kMemcpyHtoD, ipc::CopyArgs{a, 0, 64, s1}, bytes.data(), bytes.size()),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s1}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(client_.Call(Op::kStreamSynchronize, ipc::HandleArgs{s1}), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // The host bytes were never copied.
  for (uint8_t v : client_.Download(a, 64)) ASSERT_EQ(v, 0);

  // Work on the legacy stream while a blocking stream captures would wait for it: refused.
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_RELAXED, 0}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, 64, 0, 9, 0}), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // A stream forked into the capture and never joined back.
  const uint64_t fork = NewEvent();
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kEventRecord, ipc::StreamEventArgs{s1, fork}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamWaitEvent, ipc::StreamEventArgs{s2, fork}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, 64, s2, 9, 0}), CUDA_SUCCESS);
  // Ending from the forked stream is not the capture's origin.
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s2, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  // The capture is over for both streams; the memset never ran.
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s2}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(Synchronize(), CUDA_SUCCESS);
  for (uint8_t v : client_.Download(a, 64)) ASSERT_EQ(v, 0);

  // The frontend said its mode prohibited a call (another thread's cudaMalloc, say).
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 1}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // A device synchronisation during a capture.
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s2, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  EXPECT_EQ(Synchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s2, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

// A fuzzed input's (corpus/ring_records/regression-device-reset-during-a-capture): a reset
// destroyed the capturing stream under the capture, and the next work on the legacy stream,
// looking for that stream's flags, ended phosd.
TEST_F(ApiServerGraphTest, ADeviceResetDuringACaptureIsRefusedAndLeavesTheStreams) {
  const uint64_t a = client_.Alloc(kBytes);
  const uint64_t s1 = NewStream(CU_STREAM_DEFAULT);
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_RELAXED, 0}),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kDeviceReset, nullptr, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  // The capturing stream is still there, blocking, and the capture still holds it.
  EXPECT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, 64, 0, 9, 0}), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  // Nor can the tenant destroy it under the capture.
  EXPECT_EQ(client_.Call(Op::kStreamDestroy, ipc::HandleArgs{s1}), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s1}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // The refused reset freed nothing: the buffer takes work on the legacy stream.
  ASSERT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, 64, 0, 9, 0}), CUDA_SUCCESS);
  for (uint8_t v : client_.Download(a, 64)) ASSERT_EQ(v, 9);
  // With the capture over, the reset runs and the stream is gone.
  EXPECT_EQ(client_.Call(Op::kDeviceReset, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kStreamSynchronize, ipc::HandleArgs{s1}), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(ApiServerGraphTest, AnEventRecordedAgainOutsideTheCaptureNoLongerForksIt) {
  const uint64_t s1 = NewStream(CU_STREAM_NON_BLOCKING), s2 = NewStream(CU_STREAM_NON_BLOCKING);
  const uint64_t s3 = NewStream(CU_STREAM_NON_BLOCKING);
  const uint64_t event = NewEvent();
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s1, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kEventRecord, ipc::StreamEventArgs{s1, event}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kEventRecord, ipc::StreamEventArgs{s3, event}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamWaitEvent, ipc::StreamEventArgs{s2, event}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamCaptureInfo, ipc::HandleArgs{s2}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::CaptureInfo>().status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s1, 0, 0}), CUDA_SUCCESS);
}

}  // namespace
}  // namespace phos::runtime
