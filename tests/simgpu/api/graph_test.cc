// simgpu's CUDA graphs: nodes run in their dependencies' order whatever order they were made in,
// a node's parameters are copied when it is added, every node kind does what its stream call
// does, launches of one executable graph follow each other, and cuGraphExecUpdate takes what
// CUDA 13 allows and refuses the rest with the reason and node it reports.
#include <cuda.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "phos/simgpu/simgpu.h"

namespace {

constexpr const char* kScaleAdd = "_Z9scale_addPfffi";
constexpr const char* kAppendId = "_Z9append_idPiS_i";

class SimgpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    PhosSimConfig config{"ci", 1.0, 1, 1ull << 30};
    ASSERT_EQ(phosSimConfigure(&config), CUDA_SUCCESS);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new SimgpuEnvironment);

class SimgpuGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuCtxCreate(&ctx_, nullptr, 0, 0), CUDA_SUCCESS);
    std::ifstream f(PHOS_GRAPH_OPS_MODULE, std::ios::binary);
    image_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    ASSERT_FALSE(image_.empty());
    ASSERT_EQ(cuModuleLoadData(&module_, image_.data()), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&scale_add_, module_, kScaleAdd), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&append_id_, module_, kAppendId), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&log_, 64 * sizeof(int)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&cursor_, sizeof(int)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8(log_, 0xff, 64 * sizeof(int)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8(cursor_, 0, sizeof(int)), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphCreate(&graph_, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    if (graph_ != nullptr) {
      EXPECT_EQ(cuGraphDestroy(graph_), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
  }

  // A kernel node of append_id(log, cursor, id) after `deps`.
  CUgraphNode AppendNode(int id, std::vector<CUgraphNode> deps = {}) {
    void* args[] = {&log_, &cursor_, &id};
    CUDA_KERNEL_NODE_PARAMS p = Launch1(append_id_, args);
    CUgraphNode node = nullptr;
    EXPECT_EQ(cuGraphAddKernelNode(&node, graph_, deps.data(), deps.size(), &p), CUDA_SUCCESS);
    return node;
  }
  static CUDA_KERNEL_NODE_PARAMS Launch1(CUfunction f, void** args) {
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 64;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
  }
  // The ids logged so far, in order.
  std::vector<int> Logged() {
    int count = 0;
    EXPECT_EQ(cuMemcpyDtoH(&count, cursor_, sizeof(count)), CUDA_SUCCESS);
    std::vector<int> ids(static_cast<size_t>(count));
    if (count > 0) {
      EXPECT_EQ(cuMemcpyDtoH(ids.data(), log_, ids.size() * sizeof(int)), CUDA_SUCCESS);
    }
    return ids;
  }
  CUgraphExec Instantiate() {
    CUgraphExec exec = nullptr;
    EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, graph_, 0), CUDA_SUCCESS);
    return exec;
  }

  CUcontext ctx_ = nullptr;
  std::vector<char> image_;
  CUmodule module_ = nullptr;
  CUfunction scale_add_ = nullptr;
  CUfunction append_id_ = nullptr;
  CUdeviceptr log_ = 0;
  CUdeviceptr cursor_ = 0;
  CUgraph graph_ = nullptr;
};

TEST_F(SimgpuGraphTest, NodesRunInDependencyOrderNotCreationOrder) {
  // Made 4, 3, 2, 1; then 1 -> 2 -> 3 -> 4 by edges added afterwards.
  CUgraphNode n4 = AppendNode(4);
  CUgraphNode n3 = AppendNode(3);
  CUgraphNode n2 = AppendNode(2);
  CUgraphNode n1 = AppendNode(1);
  CUgraphNode from[] = {n1, n2, n3};
  CUgraphNode to[] = {n2, n3, n4};
  ASSERT_EQ(cuGraphAddDependencies(graph_, from, to, nullptr, 3), CUDA_SUCCESS);
  CUgraphExec exec = Instantiate();
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Logged(), (std::vector<int>{1, 2, 3, 4, 1, 2, 3, 4}));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
}

TEST_F(SimgpuGraphTest, ACycleIsRefusedAtInstantiation) {
  CUgraphNode a = AppendNode(1);
  CUgraphNode b = AppendNode(2, {a});
  ASSERT_EQ(cuGraphAddDependencies(graph_, &b, &a, nullptr, 1), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, graph_, 0), CUDA_ERROR_INVALID_VALUE);
  // An edge twice, an edge to itself, and a node of another graph are refused when added.
  EXPECT_EQ(cuGraphAddDependencies(graph_, &a, &b, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddDependencies(graph_, &a, &a, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  CUgraph other = nullptr;
  ASSERT_EQ(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  CUgraphNode foreign = nullptr;
  EXPECT_EQ(cuGraphAddEmptyNode(&foreign, other, &a, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuGraphDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphAddEmptyNode(&foreign, other, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimgpuGraphTest, KernelParametersAreCopiedWhenTheNodeIsAdded) {
  CUdeviceptr x = 0;
  ASSERT_EQ(cuMemAlloc(&x, 16 * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32(x, 0, 16), CUDA_SUCCESS);  // 0.0f
  float a = 2.0f, b = 1.0f;
  int n = 16;
  void* args[] = {&x, &a, &b, &n};
  CUDA_KERNEL_NODE_PARAMS p = Launch1(scale_add_, args);
  CUgraphNode node = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode(&node, graph_, nullptr, 0, &p), CUDA_SUCCESS);
  a = 100.0f;  // after the add: not the node's
  b = 100.0f;
  CUDA_KERNEL_NODE_PARAMS got{};
  ASSERT_EQ(cuGraphKernelNodeGetParams(node, &got), CUDA_SUCCESS);
  EXPECT_EQ(got.func, scale_add_);
  EXPECT_EQ(*static_cast<float*>(got.kernelParams[1]), 2.0f);
  EXPECT_EQ(*static_cast<int*>(got.kernelParams[3]), 16);
  CUgraphExec exec = Instantiate();
  // Ten launches of x = 2x + 1 from 0: 2^10 - 1, which only launches in order give.
  for (int i = 0; i < 10; ++i) ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  std::vector<float> host(16);
  ASSERT_EQ(cuMemcpyDtoH(host.data(), x, 16 * sizeof(float)), CUDA_SUCCESS);
  for (float v : host) EXPECT_EQ(v, 1023.0f);
  // Setting the graph node's parameters changes the graph, not the executable graph made from it.
  float a2 = 0.0f, b2 = 7.0f;
  void* args2[] = {&x, &a2, &b2, &n};
  CUDA_KERNEL_NODE_PARAMS p2 = Launch1(scale_add_, args2);
  ASSERT_EQ(cuGraphKernelNodeSetParams(node, &p2), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host.data(), x, 16 * sizeof(float)), CUDA_SUCCESS);
  EXPECT_EQ(host[0], 2047.0f);
  // cuGraphExecKernelNodeSetParams changes the executable graph.
  ASSERT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &p2), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host.data(), x, 16 * sizeof(float)), CUDA_SUCCESS);
  EXPECT_EQ(host[0], 7.0f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(exec, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFree(x), CUDA_SUCCESS);
}

void CountCall(void* counter) {
  ++*static_cast<int*>(counter);
}

TEST_F(SimgpuGraphTest, MemsetMemcpyHostAndEventNodesDoWhatTheirCallsDo) {
  constexpr size_t kCount = 256;
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, kCount * sizeof(float)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, kCount * sizeof(float)), CUDA_SUCCESS);
  CUDA_MEMSET_NODE_PARAMS set{};
  set.dst = a;
  set.value = 0x3f800000;  // 1.0f
  set.elementSize = 4;
  set.width = kCount;
  set.height = 1;
  CUgraphNode memset = nullptr;
  ASSERT_EQ(cuGraphAddMemsetNode(&memset, graph_, nullptr, 0, &set, ctx_), CUDA_SUCCESS);
  float s = 3.0f, o = 0.5f;
  int n = static_cast<int>(kCount);
  void* args[] = {&a, &s, &o, &n};
  CUDA_KERNEL_NODE_PARAMS k = Launch1(scale_add_, args);
  CUgraphNode kernel = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode(&kernel, graph_, &memset, 1, &k), CUDA_SUCCESS);
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = a;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = b;
  copy.WidthInBytes = kCount * sizeof(float);
  copy.Height = 1;
  copy.Depth = 1;
  CUgraphNode memcpy = nullptr;
  ASSERT_EQ(cuGraphAddMemcpyNode(&memcpy, graph_, &kernel, 1, &copy, ctx_), CUDA_SUCCESS);
  int calls = 0;
  CUDA_HOST_NODE_PARAMS host{&CountCall, &calls};
  CUgraphNode host_node = nullptr;
  ASSERT_EQ(cuGraphAddHostNode(&host_node, graph_, &memcpy, 1, &host), CUDA_SUCCESS);
  CUevent done = nullptr;
  ASSERT_EQ(cuEventCreate(&done, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  CUgraphNode record = nullptr;
  ASSERT_EQ(cuGraphAddEventRecordNode(&record, graph_, &host_node, 1, done), CUDA_SUCCESS);

  CUgraphNodeType type{};
  ASSERT_EQ(cuGraphNodeGetType(memcpy, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEMCPY);
  ASSERT_EQ(cuGraphNodeGetType(record, &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_EVENT_RECORD);

  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraphExec exec = Instantiate();
  ASSERT_EQ(cuGraphUpload(exec, stream), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cuGraphLaunch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(done), CUDA_SUCCESS);
  EXPECT_EQ(calls, 3);
  std::vector<float> got(kCount);
  ASSERT_EQ(cuMemcpyDtoH(got.data(), b, kCount * sizeof(float)), CUDA_SUCCESS);
  for (float v : got) EXPECT_EQ(v, 1.0f * 3.0f + 0.5f);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(done), CUDA_SUCCESS);
  // A memset node outside device memory or of a bad element size is refused when added.
  set.dst = reinterpret_cast<CUdeviceptr>(&calls);
  EXPECT_EQ(cuGraphAddMemsetNode(&memset, graph_, nullptr, 0, &set, ctx_), CUDA_ERROR_INVALID_VALUE);
  set.dst = a;
  set.elementSize = 3;
  EXPECT_EQ(cuGraphAddMemsetNode(&memset, graph_, nullptr, 0, &set, ctx_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFree(a), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(SimgpuGraphTest, QueriesClonesAndDestroyedNodes) {
  CUgraphNode a = AppendNode(1);
  CUgraphNode b = AppendNode(2, {a});
  CUgraphNode c = AppendNode(3);
  size_t count = 0;
  ASSERT_EQ(cuGraphGetNodes(graph_, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3u);
  std::vector<CUgraphNode> roots(4, reinterpret_cast<CUgraphNode>(1));
  count = roots.size();
  ASSERT_EQ(cuGraphGetRootNodes(graph_, roots.data(), &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(roots, (std::vector<CUgraphNode>{a, c, nullptr, nullptr}));

  CUgraph clone = nullptr;
  ASSERT_EQ(cuGraphClone(&clone, graph_), CUDA_SUCCESS);
  // Destroying b in the original leaves the clone's copy of it.
  ASSERT_EQ(cuGraphDestroyNode(b), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroyNode(b), CUDA_ERROR_INVALID_VALUE);
  CUgraphNodeType type{};
  EXPECT_EQ(cuGraphNodeGetType(b, &type), CUDA_ERROR_INVALID_VALUE);
  count = 0;
  ASSERT_EQ(cuGraphGetNodes(clone, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3u);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, clone, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<int> ids = Logged();
  ASSERT_EQ(ids.size(), 3u);
  // The clone keeps the edge 1 -> 2.
  EXPECT_LT(std::find(ids.begin(), ids.end(), 1), std::find(ids.begin(), ids.end(), 2));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(clone), CUDA_SUCCESS);
  // Instantiation flags simgpu cannot honour.
  EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, graph_, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuGraphInstantiateWithFlags(&exec, graph_, 1ull << 40), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimgpuGraphTest, ExecUpdateTakesNewParametersAndRefusesAnotherShape) {
  CUgraphNode a = AppendNode(1);
  AppendNode(2, {a});
  CUgraphExec exec = Instantiate();

  // The same shape with other ids: accepted; the next launch logs the new ones.
  CUgraph same = nullptr;
  ASSERT_EQ(cuGraphCreate(&same, 0), CUDA_SUCCESS);
  std::swap(same, graph_);
  CUgraphNode a2 = AppendNode(10);
  AppendNode(20, {a2});
  std::swap(same, graph_);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_EQ(cuGraphExecUpdate(exec, same, &info), CUDA_SUCCESS);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Logged(), (std::vector<int>{10, 20}));

  // Another edge: the topology changed, the edge's ends reported.
  CUgraph rewired = nullptr;
  ASSERT_EQ(cuGraphCreate(&rewired, 0), CUDA_SUCCESS);
  std::swap(rewired, graph_);
  CUgraphNode r1 = AppendNode(1);
  CUgraphNode r2 = AppendNode(2);
  std::swap(rewired, graph_);
  ASSERT_EQ(cuGraphAddDependencies(rewired, &r2, &r1, nullptr, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecUpdate(exec, rewired, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  EXPECT_EQ(info.errorNode, r1);

  // A kernel node where there was an empty one: the node's type changed.
  CUgraph retyped = nullptr;
  ASSERT_EQ(cuGraphCreate(&retyped, 0), CUDA_SUCCESS);
  CUgraphNode e = nullptr;
  ASSERT_EQ(cuGraphAddEmptyNode(&e, retyped, nullptr, 0), CUDA_SUCCESS);
  std::swap(retyped, graph_);
  CUgraphNode t2 = AppendNode(2, {e});
  std::swap(retyped, graph_);
  EXPECT_EQ(cuGraphExecUpdate(exec, retyped, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  EXPECT_EQ(info.errorNode, e);
  (void)t2;

  // One node more: the topology changed. A refused update leaves the executable graph as it was.
  AppendNode(3);
  EXPECT_EQ(cuGraphExecUpdate(exec, graph_, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(Logged(), (std::vector<int>{10, 20, 10, 20}));
  EXPECT_EQ(cuGraphExecUpdate(exec, same, nullptr), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  for (CUgraph g : {same, rewired, retyped}) EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

}  // namespace
