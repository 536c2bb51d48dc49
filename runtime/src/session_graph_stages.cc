// Executable graphs as the driver runs them (docs/decisions.md "CUDA graphs"). A host node is the
// tenant's code, which runs in the function process, never from the driver's graph: an executable
// graph with host nodes is split, along a topological order of its nodes, at each host node into
// stages; each stage's device nodes are one driver graph, and between two stages the host node's
// function goes through the path a cudaLaunchHostFunc takes (host_fn_gates.h), with the slot the
// launch record carries for it. The stages run one after the other on the launch stream, so every
// edge of the graph holds. A graph without host nodes is one driver graph.
#include <algorithm>
#include <cstring>
#include <deque>

#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {
namespace {

// The live nodes in an order where each comes after its dependencies (Kahn's, by index among the
// ready); false when the edges make a cycle.
bool TopologicalOrder(const std::vector<GraphNodeRecord>& nodes, std::vector<uint32_t>* order) {
  std::vector<uint32_t> waiting(nodes.size(), 0);
  std::vector<std::vector<uint32_t>> next(nodes.size());
  size_t live = 0;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].live) continue;
    ++live;
    waiting[i] = static_cast<uint32_t>(nodes[i].depends.size());
    for (uint32_t d : nodes[i].depends) next[d].push_back(i);
  }
  std::deque<uint32_t> ready;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].live && waiting[i] == 0) ready.push_back(i);
  }
  order->clear();
  while (!ready.empty()) {
    const uint32_t n = ready.front();
    ready.pop_front();
    order->push_back(n);
    for (uint32_t s : next[n]) {
      if (--waiting[s] == 0) ready.push_back(s);
    }
  }
  return order->size() == live;
}

}  // namespace

CUresult Session::AddDriverNode(const GraphNodeRecord& n, CUgraph graph, const std::vector<CUgraphNode>& deps,
                                CUcontext context, CUgraphNode* out) {
  const ipc::GraphNode& p = n.params;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
      void* args[ipc::kMaxParams];
      CUDA_KERNEL_NODE_PARAMS k{};
      CUstream stream = nullptr;
      if (CUresult r = PrepareLaunch(p.launch, n.kernel_params, params, args, &k.func, &stream);
          r != CUDA_SUCCESS)
        return r;
      k.gridDimX = p.launch.grid[0], k.gridDimY = p.launch.grid[1], k.gridDimZ = p.launch.grid[2];
      k.blockDimX = p.launch.block[0], k.blockDimY = p.launch.block[1], k.blockDimZ = p.launch.block[2];
      k.sharedMemBytes = p.launch.shared_bytes;
      k.kernelParams = args;
      return driver_->cuGraphAddKernelNode(out, graph, deps.data(), deps.size(), &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      CUDA_MEMCPY3D c{};
      c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      c.srcDevice = p.src;
      c.srcPitch = p.src_pitch;
      c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      c.dstDevice = p.dst;
      c.dstPitch = p.dst_pitch;
      c.WidthInBytes = p.width;
      c.Height = p.height;
      c.Depth = 1;
      return driver_->cuGraphAddMemcpyNode(out, graph, deps.data(), deps.size(), &c, context);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS m{p.dst, p.dst_pitch, p.value, p.element_size, p.width, p.height};
      return driver_->cuGraphAddMemsetNode(out, graph, deps.data(), deps.size(), &m, context);
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return driver_->cuGraphAddEventRecordNode(out, graph, deps.data(), deps.size(),
                                                events_.at(p.event).event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return driver_->cuGraphAddEventWaitNode(out, graph, deps.data(), deps.size(),
                                              events_.at(p.event).event);
    default:
      return driver_->cuGraphAddEmptyNode(out, graph, deps.data(), deps.size());
  }
}

CUresult Session::BuildDriverGraph(GraphExecRecord& exec, unsigned long long flags) {
  Result<CUcontext> context = ContextOn(exec.device);
  if (!context.ok()) return CUDA_ERROR_INVALID_CONTEXT;
  // An edge may point to a later index (added by cudaGraphAddDependencies): the order, not the
  // indices, puts each node after its dependencies.
  std::vector<uint32_t> order;
  if (!TopologicalOrder(exec.nodes, &order)) return CUDA_ERROR_INVALID_VALUE;  // the edges make a cycle
  exec.driver_nodes.assign(exec.nodes.size(), nullptr);
  exec.stage_of.assign(exec.nodes.size(), 0);
  exec.host_nodes = 0;
  exec.stages.assign(1, GraphStage{});
  auto fail = [&](CUresult r) {
    DestroyDriverGraph(exec);
    return r;
  };
  for (uint32_t i : order) {
    const GraphNodeRecord& n = exec.nodes[i];
    const auto stage = static_cast<uint32_t>(exec.stages.size() - 1);
    exec.stage_of[i] = stage;
    if (n.params.type == CU_GRAPH_NODE_TYPE_HOST) {
      exec.stages.back().host = i;
      exec.stages.emplace_back();
      ++exec.host_nodes;
      continue;
    }
    GraphStage& s = exec.stages.back();
    if (s.graph == nullptr) {
      if (CUresult r = driver_->cuGraphCreate(&s.graph, 0); r != CUDA_SUCCESS) return fail(r);
    }
    // Dependencies in earlier stages hold by the stream's order.
    std::vector<CUgraphNode> deps;
    for (uint32_t d : n.depends) {
      if (exec.stage_of[d] == stage && exec.driver_nodes[d] != nullptr) deps.push_back(exec.driver_nodes[d]);
    }
    if (CUresult r = AddDriverNode(n, s.graph, deps, *context, &exec.driver_nodes[i]); r != CUDA_SUCCESS)
      return fail(r);
  }
  // A graph without host nodes is one driver graph, even an empty one; after the last host node,
  // a stage without device nodes has nothing to run.
  if (exec.host_nodes == 0 && exec.stages[0].graph == nullptr) {
    if (CUresult r = driver_->cuGraphCreate(&exec.stages[0].graph, 0); r != CUDA_SUCCESS) return fail(r);
  }
  if (exec.host_nodes != 0 && exec.stages.back().graph == nullptr) exec.stages.pop_back();
  for (GraphStage& s : exec.stages) {
    if (s.graph == nullptr) continue;
    if (CUresult r = driver_->cuGraphInstantiate(&s.exec, s.graph, flags); r != CUDA_SUCCESS) return fail(r);
  }
  return CUDA_SUCCESS;
}

void Session::DestroyDriverGraph(GraphExecRecord& exec) {
  for (GraphStage& s : exec.stages) {
    if (s.exec != nullptr) driver_->cuGraphExecDestroy(s.exec);
    if (s.graph != nullptr) driver_->cuGraphDestroy(s.graph);
  }
  exec.stages.clear();
  exec.driver_nodes.clear();
  exec.stage_of.clear();
}

CUresult Session::EnsureDriverGraph(GraphExecRecord& exec) {
  if (!exec.stages.empty()) return CUDA_SUCCESS;
  if (CUresult r = ResolveGraphKernels(exec.nodes); r != CUDA_SUCCESS) return r;
  for (const GraphNodeRecord& n : exec.nodes) {
    if (!n.live) continue;
    if (CUresult r = CheckGraphNode(n, exec.device); r != CUDA_SUCCESS) return r;
  }
  return BuildDriverGraph(exec, 0);
}

CUresult Session::GraphUpload(const ipc::StreamEventArgs& a, const Call&) {
  auto it = graph_execs_.find(a.event);
  if (it == graph_execs_.end()) return CUDA_ERROR_INVALID_VALUE;
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return CUDA_ERROR_INVALID_HANDLE;
  if (route_device_ != it->second.device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = EnsureDriverGraph(it->second); r != CUDA_SUCCESS) return r;
  for (const GraphStage& s : it->second.stages) {
    if (s.exec == nullptr) continue;
    if (CUresult r = driver_->cuGraphUpload(s.exec, *stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult Session::GraphLaunch(const ipc::StreamEventArgs& a, const Call& call) {
  // The slots, one per host node: copied before they are checked (the ring's bytes may change).
  // A tail that is not whole slots names none to hand back.
  if (call.tail.size() % sizeof(uint32_t) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint32_t> slots(call.tail.size() / sizeof(uint32_t));
  if (!slots.empty()) std::memcpy(slots.data(), call.tail.data(), slots.size() * sizeof(uint32_t));
  // A launch that is refused, or fails before a slot's function was queued, hands the slot back
  // to the frontend as a refused kLaunchHostFunc would. No legitimate launch carries more slots
  // than a session may have pending.
  size_t queued = 0;
  auto refuse = [&](CUresult r) {
    if (slots.size() <= ipc::kMaxHostFnSlots) {
      for (size_t i = queued; i < slots.size(); ++i) {
        if (slots[i] < ipc::kMaxHostFnSlots &&
            std::find(slots.begin() + static_cast<ptrdiff_t>(queued),
                      slots.begin() + static_cast<ptrdiff_t>(i),
                      slots[i]) == slots.begin() + static_cast<ptrdiff_t>(i)) {
          host_fns_->Refuse(slots[i], r);
        }
      }
    }
    return r;
  };
  auto it = graph_execs_.find(a.event);
  if (it == graph_execs_.end()) return refuse(CUDA_ERROR_INVALID_VALUE);
  Result<CUstream> stream = StreamOf(a.stream);
  if (!stream.ok()) return refuse(CUDA_ERROR_INVALID_HANDLE);
  GraphExecRecord& exec = it->second;
  if (route_device_ != exec.device) return refuse(CUDA_ERROR_INVALID_VALUE);
  if (CUresult r = EnsureDriverGraph(exec); r != CUDA_SUCCESS) return refuse(r);
  for (const GraphNodeRecord& n : exec.nodes) {
    if (!n.live) continue;
    if (CUresult r = CheckGraphNode(n, exec.device); r != CUDA_SUCCESS) {
      PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                         "pid {}: cudaGraphLaunch refused: a node no longer passes its checks", pid_);
      return refuse(r);
    }
  }
  if (slots.size() != exec.host_nodes) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1,
                       "pid {}: cudaGraphLaunch refused: {} host-function slots for {} host nodes", pid_,
                       slots.size(), exec.host_nodes);
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  // Every slot is checked before any stage runs: a refused launch runs nothing.
  CUcontext context = nullptr;
  if (exec.host_nodes != 0) {
    Result<CUcontext> c = ContextOn(exec.device);
    if (!c.ok()) return refuse(CUDA_ERROR_INVALID_CONTEXT);
    context = *c;
    if (!host_fns_->Available(slots)) return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  // Node index -> its slot: the frontend lists them in index order.
  std::vector<uint32_t> slot_of(exec.nodes.size(), ipc::kNoGraphNode);
  for (size_t i = 0, k = 0; i < exec.nodes.size(); ++i) {
    if (exec.nodes[i].live && exec.nodes[i].params.type == CU_GRAPH_NODE_TYPE_HOST) slot_of[i] = slots[k++];
  }
  // The order the stages queue their host functions is the order of `slots` the refusal skips.
  std::vector<uint32_t> launch_order;
  for (const GraphStage& s : exec.stages) {
    if (s.host != ipc::kNoGraphNode) launch_order.push_back(slot_of[s.host]);
  }
  slots = std::move(launch_order);
  for (const GraphStage& s : exec.stages) {
    if (s.exec != nullptr) {
      if (CUresult r = driver_->cuGraphLaunch(s.exec, *stream); r != CUDA_SUCCESS) return refuse(r);
    }
    if (s.host == ipc::kNoGraphNode) continue;
    if (CUresult r = host_fns_->Launch(*stream, exec.device, context, slots[queued]); r != CUDA_SUCCESS)
      return refuse(r);
    ++queued;
  }
  return CUDA_SUCCESS;
}

}  // namespace phos::runtime
