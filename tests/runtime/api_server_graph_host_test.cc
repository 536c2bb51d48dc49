// Host nodes of CUDA graphs at the protocol level, the test playing the function process: phosd
// runs the device nodes before a host node, posts the host node's slot (the path of a
// cudaLaunchHostFunc), and runs the nodes after it only once the slot came back; a launch whose
// slots do not match the executable graph's host nodes (a wrong count, a slot out of range,
// repeated or still pending) is refused, runs nothing and hands its slots back; a host function
// queued on a capturing stream becomes a host node only when it carries no slot.
#include <optional>

#include "../testing/wait_until.h"
#include "api_server_graph_fixture.h"

namespace phos::runtime {
namespace {

using ipc::HostFnQueueId;

class ApiServerGraphHostTest : public ApiServerGraphTest {
 protected:
  std::optional<ipc::HostFnEvent> NextHostFnEvent() {
    const auto deadline = std::chrono::steady_clock::now() + ::phos::testing::kPatience;
    ipc::HostFnEvent event{};
    while (std::chrono::steady_clock::now() < deadline) {
      if (client_.ring().TakeHostFnEvents(HostFnQueueId::kToFrontend, &event, 1) == 1) return event;
      client_.ring().WaitHostFnEvents(HostFnQueueId::kToFrontend, 100);
    }
    return std::nullopt;
  }
  int32_t Launch(uint64_t stream, uint64_t exec, const std::vector<uint32_t>& slots) {
    return client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{stream, exec}, slots.data(),
                        slots.size() * sizeof(uint32_t));
  }
  // `bytes` of `src` read on `stream` (not the launch's: it may be held).
  std::vector<float> FloatsOn(uint64_t stream, uint64_t src) {
    EXPECT_EQ(client_.Call(Op::kMemcpyDtoH, ipc::CopyArgs{0, src, kBytes, stream}), CUDA_SUCCESS);
    std::vector<float> out(kCount);
    std::memcpy(out.data(), client_.reply().data(), std::min<size_t>(kBytes, client_.reply().size()));
    return out;
  }
  static ipc::GraphNode HostNode() {
    ipc::GraphNode n{};
    n.type = CU_GRAPH_NODE_TYPE_HOST;
    return n;
  }
};

TEST_F(ApiServerGraphHostTest, AHostNodeRunsAfterTheNodesBeforeItAndHoldsTheNodesAfterIt) {
  const uint64_t a = client_.Alloc(kBytes), c = client_.Alloc(kBytes), d = client_.Alloc(kBytes);
  const uint64_t s = NewStream(CU_STREAM_NON_BLOCKING), reader = NewStream(CU_STREAM_NON_BLOCKING);
  const uint64_t held = NewStream(CU_STREAM_NON_BLOCKING);
  // a = 3.0f; c = a + a; host; d = c + c. The host node is added before the kernel it follows and
  // linked to it by an edge: phosd orders by the edges, not the indices.
  const uint64_t graph = NewGraph();
  uint32_t set = 0, first = 0, host = 0, second = 0;
  ASSERT_EQ(Add(graph, MemsetNode(a, 0x40400000, 4, kCount), {}, {}, &set), CUDA_SUCCESS);
  ASSERT_EQ(Add(graph, HostNode(), {}, {}, &host), CUDA_SUCCESS);
  ASSERT_EQ(Add(graph, KernelNode(VecAdd()), {set}, VecAddParams(a, a, c), &first), CUDA_SUCCESS);
  const ipc::GraphEdge edge{first, host};
  ASSERT_EQ(client_.Call(Op::kGraphAddDependencies, ipc::GraphEdgesArgs{graph, 1, 0}, &edge, sizeof(edge)),
            CUDA_SUCCESS);
  ASSERT_EQ(Add(graph, KernelNode(VecAdd()), {host}, VecAddParams(c, c, d), &second), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kGraphNodeGetParams, ipc::GraphNodeRef{graph, host, 0}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::GraphNode>().type, static_cast<uint32_t>(CU_GRAPH_NODE_TYPE_HOST));
  ASSERT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  const uint64_t exec = client_.Reply<uint64_t>();

  // A slot a host function of the session holds already.
  ASSERT_EQ(client_.Call(Op::kLaunchHostFunc, ipc::HostFnArgs{held, 9, 0}), CUDA_SUCCESS);
  std::optional<ipc::HostFnEvent> event = NextHostFnEvent();
  ASSERT_TRUE(event.has_value());
  ASSERT_EQ(event->slot, 9u);

  // Hostile launches: no slot, two for one host node, one out of range, the pending one. Each is
  // refused, hands its slots back as refused, and runs nothing.
  EXPECT_EQ(Launch(s, exec, {}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch(s, exec, {3, 4}), CUDA_ERROR_INVALID_VALUE);
  for (uint32_t slot : {3u, 4u}) {
    event = NextHostFnEvent();
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(event->slot, slot);
    EXPECT_EQ(event->result, CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(Launch(s, exec, {ipc::kMaxHostFnSlots}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch(s, exec, {9}), CUDA_ERROR_INVALID_VALUE);
  event = NextHostFnEvent();
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->slot, 9u);
  EXPECT_EQ(event->result, CUDA_ERROR_INVALID_VALUE);
  const uint8_t ragged[6] = {};
  EXPECT_EQ(client_.Call(Op::kGraphLaunch, ipc::StreamEventArgs{s, exec}, ragged, sizeof(ragged)),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kStreamSynchronize, ipc::HandleArgs{s}), CUDA_SUCCESS);
  for (float v : FloatsOn(reader, a)) ASSERT_EQ(v, 0.0f);
  client_.ring().PostHostFnEvent(HostFnQueueId::kToServer, {9, 0});

  // Two launches, each with its own slot: the first kernel ran when the host node is reached, the
  // second has not, and does once the slot came back.
  for (uint32_t slot : {5u, 6u}) {
    ASSERT_EQ(Launch(s, exec, {slot}), CUDA_SUCCESS);
    event = NextHostFnEvent();
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(event->slot, slot);
    EXPECT_EQ(event->result, 0);
    for (float v : FloatsOn(reader, c)) ASSERT_EQ(v, 6.0f);
    for (float v : FloatsOn(reader, d)) ASSERT_EQ(v, 0.0f);
    EXPECT_EQ(client_.Call(Op::kStreamQuery, ipc::HandleArgs{s}), CUDA_ERROR_NOT_READY);
    client_.ring().PostHostFnEvent(HostFnQueueId::kToServer, {slot, 0});
    ASSERT_EQ(client_.Call(Op::kStreamSynchronize, ipc::HandleArgs{s}), CUDA_SUCCESS);
    for (float v : FloatsOn(reader, d)) ASSERT_EQ(v, 12.0f);
    ASSERT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{d, kBytes, s, 0, 0}), CUDA_SUCCESS);
  }

  // A host node has no parameters phosd sets, in the graph or in the executable graph; an update
  // of a graph with host nodes is refused as not supported.
  EXPECT_EQ(client_.Call(Op::kGraphNodeSetParams, ipc::GraphNodeArgs{graph, host, 0, KernelNode(VecAdd())},
                         VecAddParams(a, a, c).data(), 28),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(client_.Call(Op::kGraphExecNodeSetParams, ipc::GraphNodeArgs{exec, host, 0, KernelNode(VecAdd())},
                         VecAddParams(a, a, c).data(), 28),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kGraphExecUpdate, ipc::GraphUpdateArgs{exec, graph}), CUDA_SUCCESS);
  EXPECT_EQ(client_.Reply<ipc::GraphUpdateInfo>().result, CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(client_.Reply<ipc::GraphUpdateInfo>().error_node, host);
}

TEST_F(ApiServerGraphHostTest, AHostFunctionOnACapturingStreamBecomesAHostNodeOnlyWithoutASlot) {
  const uint64_t a = client_.Alloc(kBytes), c = client_.Alloc(kBytes);
  const uint64_t s = NewStream(CU_STREAM_NON_BLOCKING);
  // Without a capture, a host function without a slot is refused.
  EXPECT_EQ(client_.Call(Op::kLaunchHostFunc, ipc::HostFnArgs{s, ipc::kCapturedHostFnSlot, 0}),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kMemset, ipc::MemsetArgs{a, kBytes, s, 0x40, 0}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kLaunchHostFunc, ipc::HostFnArgs{s, ipc::kCapturedHostFnSlot, 0}), CUDA_SUCCESS);
  const uint32_t host = client_.Reply<uint32_t>();
  ASSERT_EQ(client_.Call(Op::kLaunch, VecAdd(s), VecAddParams(a, a, c).data(), 28), CUDA_SUCCESS);
  ASSERT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s, 0, 0}), CUDA_SUCCESS);
  const uint64_t graph = client_.Reply<uint64_t>();
  EXPECT_EQ(host, 1u);
  ASSERT_EQ(client_.Call(Op::kGraphGetNodes, ipc::HandleArgs{graph}), CUDA_SUCCESS);
  ASSERT_EQ(client_.Reply<uint32_t>(), 3u);
  ipc::GraphNodeInfo info{};
  std::memcpy(&info, client_.reply().data() + 2 * sizeof(uint32_t) + host * sizeof(info), sizeof(info));
  EXPECT_EQ(info.type, static_cast<uint32_t>(CU_GRAPH_NODE_TYPE_HOST));
  // Nothing was posted: the function runs at the graph's launches, with their slots.
  ipc::HostFnEvent none{};
  EXPECT_EQ(client_.ring().TakeHostFnEvents(HostFnQueueId::kToFrontend, &none, 1), 0u);

  ASSERT_EQ(client_.Call(Op::kGraphInstantiate, ipc::GraphInstantiateArgs{graph, 0}), CUDA_SUCCESS);
  const uint64_t exec = client_.Reply<uint64_t>();
  std::vector<float> expected(kCount);
  std::memset(expected.data(), 0x40, kBytes);
  for (float& v : expected) v += v;
  for (uint32_t slot = 0; slot < 3; ++slot) {
    ASSERT_EQ(Launch(s, exec, {slot}), CUDA_SUCCESS);
    std::optional<ipc::HostFnEvent> reached = NextHostFnEvent();
    ASSERT_TRUE(reached.has_value());
    EXPECT_EQ(reached->slot, slot);
    client_.ring().PostHostFnEvent(HostFnQueueId::kToServer, {slot, 0});
  }
  ASSERT_EQ(client_.Call(Op::kStreamSynchronize, ipc::HandleArgs{s}), CUDA_SUCCESS);
  EXPECT_EQ(Floats(c), expected);

  // A host function with a slot would run at once, outside the graph: refused, the capture
  // invalidated, the slot handed back.
  ASSERT_EQ(client_.Call(Op::kStreamBeginCapture, ipc::CaptureArgs{s, CU_STREAM_CAPTURE_MODE_GLOBAL, 0}),
            CUDA_SUCCESS);
  EXPECT_EQ(client_.Call(Op::kLaunchHostFunc, ipc::HostFnArgs{s, 11, 0}),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  std::optional<ipc::HostFnEvent> refused = NextHostFnEvent();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->slot, 11u);
  EXPECT_EQ(refused->result, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(client_.Call(Op::kStreamEndCapture, ipc::CaptureArgs{s, 0, 0}),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

}  // namespace
}  // namespace phos::runtime
