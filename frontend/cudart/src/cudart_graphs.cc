// CUDA graphs, remoted (docs/remoting.md "Graphs and stream capture"): phosd keeps each graph as
// its list of checked nodes and builds the driver's graph when the function instantiates it. A
// cudaGraph_t and a cudaGraphExec_t are the session's virtual ids; a cudaGraphNode_t is its
// graph's id and its index there, which the frontend packs into one handle. Host nodes' functions
// stay in this process (cudart_graph_hosts.cc).
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cudart_internal.h"

using phos::frontend::Client;
using phos::frontend::KernelRef;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace phos::frontend {

// A node handle: the graph's id (a multiple of 16) above 24 bits, index + 1 shifted by 4 below,
// so that no handle is null and each looks like an aligned pointer.
cudaGraphNode_t MakeNode(uint64_t graph, uint32_t index) {
  return reinterpret_cast<cudaGraphNode_t>(static_cast<uintptr_t>(graph << 24 | (uint64_t{index} + 1) << 4));
}

bool SplitNode(cudaGraphNode_t node, uint64_t* graph, uint32_t* index) {
  const auto v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(node));
  const uint64_t low = (v & 0xffffff) >> 4;
  if (node == nullptr || (v & 0xf) != 0 || low == 0) return false;
  *graph = v >> 24;
  *index = static_cast<uint32_t>(low - 1);
  return true;
}

}  // namespace phos::frontend

namespace {

using phos::frontend::MakeNode;
using phos::frontend::SplitNode;

uint64_t Vid(const void* handle) {
  return reinterpret_cast<uintptr_t>(handle);
}

// Host stubs by server function id (cudaGraphKernelNodeGetParams answers with the caller's
// function), and the parameter pointers each node's last GetParams handed out.
std::mutex g_mu;
std::unordered_map<uint64_t, const void*> g_stubs;
struct NodeArguments {
  std::vector<uint8_t> buffer;
  std::vector<void*> pointers;
};
std::unordered_map<cudaGraphNode_t, NodeArguments> g_arguments;

// A kernel node's record: the kernel, its launch shape and its packed arguments in `buffer`.
cudaError_t KernelNode(const cudaKernelNodeParams* p, ipc::GraphNode* node, std::vector<uint8_t>* buffer) {
  if (p == nullptr || p->func == nullptr) return cudaErrorInvalidValue;
  if (p->extra != nullptr)
    return phos::frontend::NotSupported("cudaGraphAddKernelNode", "the extra argument form is not served");
  KernelRef k;
  if (cudaError_t e = phos::frontend::ResolveKernel(p->func, &k); e != cudaSuccess) return e;
  buffer->resize(k.param_bytes);
  if (!phos::frontend::PackArguments(k, p->kernelParams, buffer->data())) return cudaErrorInvalidValue;
  {
    std::lock_guard lock(g_mu);
    g_stubs[k.function] = p->func;
  }
  *node = {};
  node->type = CU_GRAPH_NODE_TYPE_KERNEL;
  node->launch = {k.function,
                  0,
                  {p->gridDim.x, p->gridDim.y, p->gridDim.z},
                  {p->blockDim.x, p->blockDim.y, p->blockDim.z},
                  p->sharedMemBytes,
                  k.param_bytes};
  return cudaSuccess;
}

// Adds `node` to `graph` after `deps`, which must be nodes of that graph.
cudaError_t AddNode(cudaGraphNode_t* out, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t count,
                    const ipc::GraphNode& node, const std::vector<uint8_t>& params = {}) {
  if (out == nullptr || (count != 0 && deps == nullptr) || count > ipc::kMaxGraphNodeDependencies)
    return Return(cudaErrorInvalidValue);
  ipc::GraphNodeArgs a{Vid(graph), 0, static_cast<uint32_t>(count), node};
  std::vector<uint8_t> tail(count * sizeof(uint32_t) + params.size());
  for (size_t i = 0; i < count; ++i) {
    uint64_t owner = 0;
    uint32_t index = 0;
    if (!SplitNode(deps[i], &owner, &index) || owner != a.owner) return Return(cudaErrorInvalidValue);
    std::memcpy(tail.data() + i * sizeof(uint32_t), &index, sizeof(index));
  }
  if (!params.empty()) std::memcpy(tail.data() + count * sizeof(uint32_t), params.data(), params.size());
  uint32_t index = 0;
  size_t len = 0;
  CUresult r = Client::Get().Call(ipc::Op::kGraphAddNode, &a, sizeof(a), tail.data(), tail.size(), true,
                                  &index, sizeof(index), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  *out = MakeNode(a.owner, index);
  return cudaSuccess;
}

// What a device-to-device copy's pointers say; other copies are not served in graphs (phosd could
// not read the function's host memory when the graph runs).
bool DeviceToDevice(const void* dst, const void* src, cudaMemcpyKind kind) {
  return phos::frontend::ResolveCopyKind(const_cast<void*>(dst), src, kind) == cudaMemcpyDeviceToDevice;
}

// The live nodes of `graph` as phosd lists them.
cudaError_t ListNodes(cudaGraph_t graph, std::vector<ipc::GraphNodeInfo>* out) {
  Client& c = Client::Get();
  std::vector<uint8_t> reply(c.reply_capacity());
  const ipc::HandleArgs a{Vid(graph)};
  size_t len = 0;
  CUresult r =
      c.Call(ipc::Op::kGraphGetNodes, &a, sizeof(a), nullptr, 0, true, reply.data(), reply.size(), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  uint32_t count = 0;
  if (len < 2 * sizeof(uint32_t)) return Return(cudaErrorUnknown);
  std::memcpy(&count, reply.data(), sizeof(count));
  if (len < 2 * sizeof(uint32_t) + size_t{count} * sizeof(ipc::GraphNodeInfo))
    return Return(cudaErrorUnknown);
  out->resize(count);
  if (count != 0) std::memcpy(out->data(), reply.data() + 2 * sizeof(uint32_t), count * sizeof(ipc::GraphNodeInfo));
  return cudaSuccess;
}

cudaError_t GiveNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count, bool roots_only) {
  if (count == nullptr) return Return(cudaErrorInvalidValue);
  std::vector<ipc::GraphNodeInfo> infos;
  if (cudaError_t e = ListNodes(graph, &infos); e != cudaSuccess) return e;
  std::vector<cudaGraphNode_t> listed;
  for (const ipc::GraphNodeInfo& i : infos) {
    if (!roots_only || i.dependency_count == 0) listed.push_back(MakeNode(Vid(graph), i.node));
  }
  if (nodes != nullptr) {
    for (size_t i = 0; i < *count; ++i) nodes[i] = i < listed.size() ? listed[i] : nullptr;
  }
  *count = listed.size();
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  if (graph == nullptr || flags != 0) return Return(cudaErrorInvalidValue);
  uint64_t vid = 0;
  size_t len = 0;
  CUresult r =
      Client::Get().Call(ipc::Op::kGraphCreate, nullptr, 0, nullptr, 0, true, &vid, sizeof(vid), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  *graph = reinterpret_cast<cudaGraph_t>(static_cast<uintptr_t>(vid));
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const ipc::HandleArgs a{Vid(graph)};
  CUresult r = Client::Get().Call(ipc::Op::kGraphDestroy, &a, sizeof(a), nullptr, 0, true);
  if (r == CUDA_SUCCESS) phos::frontend::ForgetHostNodes(a.handle);
  return Return(r);
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                   size_t count, const cudaKernelNodeParams* params) {
  ipc::GraphNode n{};
  std::vector<uint8_t> buffer;
  if (cudaError_t e = KernelNode(params, &n, &buffer); e != cudaSuccess) return Return(e);
  return AddNode(node, graph, deps, count, n, buffer);
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                   size_t count, const cudaMemcpy3DParms* p) {
  if (p == nullptr) return Return(cudaErrorInvalidValue);
  if (p->srcArray != nullptr || p->dstArray != nullptr || p->extent.depth > 1)
    return phos::frontend::NotSupported("cudaGraphAddMemcpyNode", "CUDA arrays and 3D copies are not served");
  if (!DeviceToDevice(p->dstPtr.ptr, p->srcPtr.ptr, p->kind))
    return phos::frontend::NotSupported("cudaGraphAddMemcpyNode",
                                        "copies with a host side are not served in graphs");
  if (p->srcPos.z != 0 || p->dstPos.z != 0) return Return(cudaErrorInvalidValue);
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  n.src = Vid(p->srcPtr.ptr) + p->srcPos.y * p->srcPtr.pitch + p->srcPos.x;
  n.src_pitch = p->srcPtr.pitch;
  n.dst = Vid(p->dstPtr.ptr) + p->dstPos.y * p->dstPtr.pitch + p->dstPos.x;
  n.dst_pitch = p->dstPtr.pitch;
  n.width = p->extent.width;
  n.height = p->extent.height;
  return AddNode(node, graph, deps, count, n);
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                     size_t count, void* dst, const void* src, size_t bytes,
                                     cudaMemcpyKind kind) {
  if (!DeviceToDevice(dst, src, kind))
    return phos::frontend::NotSupported("cudaGraphAddMemcpyNode1D",
                                        "copies with a host side are not served in graphs");
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  n.src = Vid(src);
  n.dst = Vid(dst);
  n.src_pitch = n.dst_pitch = n.width = bytes;
  n.height = 1;
  return AddNode(node, graph, deps, count, n);
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                   size_t count, const cudaMemsetParams* p) {
  if (p == nullptr) return Return(cudaErrorInvalidValue);
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_MEMSET;
  n.dst = Vid(p->dst);
  n.dst_pitch = p->height > 1 ? p->pitch : p->width * p->elementSize;
  n.value = p->value;
  n.element_size = p->elementSize;
  n.width = p->width;
  n.height = p->height;
  return AddNode(node, graph, deps, count, n);
}

// phosd's node carries nothing: the function and its argument stay here (cudart_graph_hosts.cc).
cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                 size_t count, const cudaHostNodeParams* params) {
  if (params == nullptr || params->fn == nullptr) return Return(cudaErrorInvalidValue);
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_HOST;
  if (cudaError_t e = AddNode(node, graph, deps, count, n); e != cudaSuccess) return e;
  uint32_t index = 0;
  uint64_t owner = 0;
  SplitNode(*node, &owner, &index);
  phos::frontend::RecordHostNode(owner, index, *params);
  return cudaSuccess;
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                  size_t count) {
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_EMPTY;
  return AddNode(node, graph, deps, count, n);
}

cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                        size_t count, cudaEvent_t event) {
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  n.event = Vid(event);
  return AddNode(node, graph, deps, count, n);
}

cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                      size_t count, cudaEvent_t event) {
  ipc::GraphNode n{};
  n.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  n.event = Vid(event);
  return AddNode(node, graph, deps, count, n);
}

cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                     const cudaGraphNode_t* to, const cudaGraphEdgeData* edgeData,
                                     size_t count) {
  if (count != 0 && (from == nullptr || to == nullptr)) return Return(cudaErrorInvalidValue);
  if (count > ipc::kMaxGraphNodeDependencies) return Return(cudaErrorInvalidValue);
  if (edgeData != nullptr) {
    const cudaGraphEdgeData zero{};
    for (size_t i = 0; i < count; ++i) {
      if (std::memcmp(&edgeData[i], &zero, sizeof(zero)) != 0)
        return phos::frontend::NotSupported("cudaGraphAddDependencies",
                                            "edge data (ports, edge types) is not served");
    }
  }
  std::vector<ipc::GraphEdge> edges(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t g1 = 0, g2 = 0;
    if (!SplitNode(from[i], &g1, &edges[i].from) || !SplitNode(to[i], &g2, &edges[i].to) ||
        g1 != Vid(graph) || g2 != Vid(graph)) {
      return Return(cudaErrorInvalidValue);
    }
  }
  const ipc::GraphEdgesArgs a{Vid(graph), static_cast<uint32_t>(count), 0};
  return Return(Client::Get().Call(ipc::Op::kGraphAddDependencies, &a, sizeof(a), edges.data(),
                                   edges.size() * sizeof(ipc::GraphEdge), true));
}

cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) {
  ipc::GraphNodeRef a{};
  if (!SplitNode(node, &a.owner, &a.node)) return Return(cudaErrorInvalidValue);
  CUresult r = Client::Get().Call(ipc::Op::kGraphDestroyNode, &a, sizeof(a), nullptr, 0, true);
  if (r == CUDA_SUCCESS) phos::frontend::ForgetHostNode(a.owner, a.node);
  return Return(r);
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return GiveNodes(graph, nodes, count, /*roots_only=*/false);
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return GiveNodes(graph, nodes, count, /*roots_only=*/true);
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  uint64_t graph = 0;
  uint32_t index = 0;
  if (type == nullptr || !SplitNode(node, &graph, &index)) return Return(cudaErrorInvalidValue);
  std::vector<ipc::GraphNodeInfo> infos;
  if (cudaError_t e = ListNodes(reinterpret_cast<cudaGraph_t>(static_cast<uintptr_t>(graph)), &infos);
      e != cudaSuccess)
    return e;
  for (const ipc::GraphNodeInfo& i : infos) {
    if (i.node != index) continue;
    *type = static_cast<cudaGraphNodeType>(i.type);
    return cudaSuccess;
  }
  return Return(cudaErrorInvalidValue);
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  ipc::GraphNodeRef a{};
  if (params == nullptr || !SplitNode(node, &a.owner, &a.node)) return Return(cudaErrorInvalidValue);
  Client& c = Client::Get();
  std::vector<uint8_t> reply(sizeof(ipc::GraphNode) + ipc::kMaxParamBytes);
  size_t len = 0;
  CUresult r =
      c.Call(ipc::Op::kGraphNodeGetParams, &a, sizeof(a), nullptr, 0, true, reply.data(), reply.size(), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  ipc::GraphNode n{};
  if (len < sizeof(n)) return Return(cudaErrorUnknown);
  std::memcpy(&n, reply.data(), sizeof(n));
  if (n.type != CU_GRAPH_NODE_TYPE_KERNEL || len != sizeof(n) + n.launch.param_bytes)
    return Return(cudaErrorInvalidValue);
  KernelRef k;
  std::lock_guard lock(g_mu);
  auto stub = g_stubs.find(n.launch.function);
  if (stub == g_stubs.end() || phos::frontend::ResolveKernel(stub->second, &k) != cudaSuccess)
    return Return(cudaErrorInvalidValue);
  // The node's arguments, in storage that stays until the next call for this node (the driver's
  // stays while the node keeps its parameters).
  NodeArguments& held = g_arguments[node];
  held.buffer.assign(reply.begin() + sizeof(n), reply.begin() + static_cast<ptrdiff_t>(len));
  held.pointers.clear();
  for (const ipc::ParamSlot& slot : k.params) held.pointers.push_back(held.buffer.data() + slot.offset);
  params->func = const_cast<void*>(stub->second);
  params->gridDim = dim3(n.launch.grid[0], n.launch.grid[1], n.launch.grid[2]);
  params->blockDim = dim3(n.launch.block[0], n.launch.block[1], n.launch.block[2]);
  params->sharedMemBytes = n.launch.shared_bytes;
  params->kernelParams = held.pointers.data();
  params->extra = nullptr;
  return cudaSuccess;
}

cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
  ipc::GraphNodeArgs a{};
  if (!SplitNode(node, &a.owner, &a.node)) return Return(cudaErrorInvalidValue);
  std::vector<uint8_t> buffer;
  if (cudaError_t e = KernelNode(params, &a.params, &buffer); e != cudaSuccess) return Return(e);
  return Return(
      Client::Get().Call(ipc::Op::kGraphNodeSetParams, &a, sizeof(a), buffer.data(), buffer.size(), true));
}

cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t graph) {
  if (clone == nullptr) return Return(cudaErrorInvalidValue);
  const ipc::HandleArgs a{Vid(graph)};
  uint64_t vid = 0;
  size_t len = 0;
  CUresult r =
      Client::Get().Call(ipc::Op::kGraphClone, &a, sizeof(a), nullptr, 0, true, &vid, sizeof(vid), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  phos::frontend::CopyHostNodes(a.handle, vid);
  *clone = reinterpret_cast<cudaGraph_t>(static_cast<uintptr_t>(vid));
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                          unsigned long long flags) {
  if (exec == nullptr) return Return(cudaErrorInvalidValue);
  const ipc::GraphInstantiateArgs a{Vid(graph), flags};
  uint64_t vid = 0;
  size_t len = 0;
  CUresult r = Client::Get().Call(ipc::Op::kGraphInstantiate, &a, sizeof(a), nullptr, 0, true, &vid,
                                  sizeof(vid), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  phos::frontend::CopyHostNodes(a.graph, vid);
  *exec = reinterpret_cast<cudaGraphExec_t>(static_cast<uintptr_t>(vid));
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(exec, graph, flags);
}

cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  ipc::StreamEventArgs a{0, Vid(exec)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  return Return(Client::Get().Call(ipc::Op::kGraphUpload, &a, sizeof(a), nullptr, 0, true));
}

// A slot for each host node, with the function it holds now; phosd queues each between the
// driver graphs it runs the graph as, and hands back the slots of a launch it refused.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  ipc::StreamEventArgs a{0, Vid(exec)};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  const std::vector<cudaHostNodeParams> hosts = phos::frontend::HostNodesOf(a.event);
  std::vector<uint32_t> slots;
  if (!hosts.empty()) {
    if (cudaError_t e = phos::frontend::TakeHostFnSlots(hosts, &slots); e != cudaSuccess) return e;
  }
  CUresult r = Client::Get().Call(ipc::Op::kGraphLaunch, &a, sizeof(a), slots.data(),
                                  slots.size() * sizeof(uint32_t), false);
  if (r != CUDA_SUCCESS) phos::frontend::ReturnHostFnSlots(slots);
  return Return(r);
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                cudaGraphExecUpdateResultInfo* info) {
  if (info == nullptr) return Return(cudaErrorInvalidValue);
  const ipc::GraphUpdateArgs a{Vid(exec), Vid(graph)};
  ipc::GraphUpdateInfo reply{cudaGraphExecUpdateError, ipc::kNoGraphNode, ipc::kNoGraphNode, 0};
  size_t len = 0;
  CUresult r = Client::Get().Call(ipc::Op::kGraphExecUpdate, &a, sizeof(a), nullptr, 0, true, &reply,
                                  sizeof(reply), &len);
  if (r != CUDA_SUCCESS || len != sizeof(reply)) {
    *info = {cudaGraphExecUpdateError, nullptr, nullptr};
    return Return(r != CUDA_SUCCESS ? r : CUDA_ERROR_UNKNOWN);
  }
  info->result = static_cast<cudaGraphExecUpdateResult>(reply.result);
  info->errorNode = reply.error_node == ipc::kNoGraphNode ? nullptr : MakeNode(a.graph, reply.error_node);
  info->errorFromNode =
      reply.error_from_node == ipc::kNoGraphNode ? nullptr : MakeNode(a.graph, reply.error_from_node);
  return reply.result == CU_GRAPH_EXEC_UPDATE_SUCCESS ? cudaSuccess : Return(cudaErrorGraphExecUpdateFailure);
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                             const cudaKernelNodeParams* params) {
  ipc::GraphNodeArgs a{};
  uint64_t graph = 0;
  if (!SplitNode(node, &graph, &a.node)) return Return(cudaErrorInvalidValue);
  a.owner = Vid(exec);
  std::vector<uint8_t> buffer;
  if (cudaError_t e = KernelNode(params, &a.params, &buffer); e != cudaSuccess) return Return(e);
  return Return(Client::Get().Call(ipc::Op::kGraphExecNodeSetParams, &a, sizeof(a), buffer.data(),
                                   buffer.size(), true));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  const ipc::HandleArgs a{Vid(exec)};
  CUresult r = Client::Get().Call(ipc::Op::kGraphExecDestroy, &a, sizeof(a), nullptr, 0, true);
  if (r == CUDA_SUCCESS) phos::frontend::ForgetHostNodes(a.handle);
  return Return(r);
}

// The per-thread default stream forms (cudart_ptds.cc): stream 0 is the calling thread's.
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return cudaGraphLaunch(exec, phos::frontend::PerThreadDefault(stream));
}

cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return cudaGraphUpload(exec, phos::frontend::PerThreadDefault(stream));
}

}  // extern "C"
