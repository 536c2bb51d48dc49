// CUDA graphs (docs/remoting.md "Graphs and stream capture", docs/decisions.md "CUDA graphs"):
// phosd keeps each graph as its list of checked nodes and builds the driver's graph from it when
// the function instantiates one. A launch checks every node again, as the calls they stand for
// are checked when they run: a buffer freed since names another owner's memory.
#include <algorithm>
#include <cstring>

#include "phos/base/log.h"
#include "phos/driver/context_scope.h"
#include "session.h"

namespace phos::runtime {
namespace {

// Graph records carry the kernel's parameter buffer after their dependencies.
std::span<const uint8_t> KernelParams(std::span<const uint8_t> tail, uint32_t dependencies) {
  const size_t skip = size_t{dependencies} * sizeof(uint32_t);
  return tail.size() < skip ? std::span<const uint8_t>{} : tail.subspan(skip);
}

}  // namespace

CUresult Session::CheckGraphNode(const GraphNodeRecord& node, int device) {
  const ipc::GraphNode& p = node.params;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      if (p.launch.stream != 0) return CUDA_ERROR_INVALID_VALUE;
      alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
      void* args[ipc::kMaxParams];
      CUfunction function = nullptr;
      CUstream stream = nullptr;
      return PrepareLaunch(p.launch, node.kernel_params, params, args, &function, &stream);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      uint64_t src_span = 0, dst_span = 0;
      if (p.width == 0 || p.height == 0 || !PitchedSpan(p.src_pitch, p.width, p.height, &src_span) ||
          !PitchedSpan(p.dst_pitch, p.width, p.height, &dst_span)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return Owns(p.src, src_span, "graph memcpy node source") &&
                     Owns(p.dst, dst_span, "graph memcpy node destination")
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      uint64_t row = 0, span = 0;
      if ((p.element_size != 1 && p.element_size != 2 && p.element_size != 4) || p.width == 0 ||
          p.height == 0 || __builtin_mul_overflow(p.width, uint64_t{p.element_size}, &row) ||
          !PitchedSpan(p.dst_pitch, row, p.height, &span)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return Owns(p.dst, span, "graph memset node") ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      auto it = events_.find(p.event);
      return it != events_.end() && it->second.device == device ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_HOST: {
      // The function and its argument stay in the function process: the node carries nothing.
      ipc::GraphNode none{};
      none.type = CU_GRAPH_NODE_TYPE_HOST;
      return std::memcmp(&p, &none, sizeof(none)) == 0 && node.kernel_params.empty() ? CUDA_SUCCESS
                                                                                     : CUDA_ERROR_INVALID_VALUE;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult Session::AppendGraphNode(GraphRecord& graph, GraphNodeRecord node, uint32_t* index) {
  if (graph.nodes.size() >= ipc::kMaxGraphNodes) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: graph node refused: a graph holds at most {} nodes", pid_,
                       ipc::kMaxGraphNodes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < node.depends.size(); ++i) {
    const uint32_t dep = node.depends[i];
    if (dep >= graph.nodes.size() || !graph.nodes[dep].live) return CUDA_ERROR_INVALID_VALUE;
    if (std::find(node.depends.begin(), node.depends.begin() + static_cast<ptrdiff_t>(i), dep) !=
        node.depends.begin() + static_cast<ptrdiff_t>(i)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (CUresult r = CheckGraphNode(node, graph.device); r != CUDA_SUCCESS) return r;
  *index = static_cast<uint32_t>(graph.nodes.size());
  graph.nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

CUresult Session::GraphCreate(const NoArgs&, const Call& call) {
  if (!HandleRoom("cudaGraphCreate")) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t vid = NewHandle();
  graphs_[vid] = GraphRecord{.device = route_device_};
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::GraphDestroy(const ipc::HandleArgs& a, const Call&) {
  // A graph a capture is recording into belongs to the capture until it ends.
  for (const auto& [id, capture] : captures_) {
    if (capture.graph == a.handle) return CUDA_ERROR_INVALID_VALUE;
  }
  return graphs_.erase(a.handle) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult Session::GraphAddNode(const ipc::GraphNodeArgs& a, const Call& call) {
  auto it = graphs_.find(a.owner);
  if (it == graphs_.end() || a.dependency_count > ipc::kMaxGraphNodeDependencies ||
      call.tail.size() < size_t{a.dependency_count} * sizeof(uint32_t)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphNodeRecord node{.params = a.params};
  node.depends.resize(a.dependency_count);
  if (!node.depends.empty()) std::memcpy(node.depends.data(), call.tail.data(), node.depends.size() * sizeof(uint32_t));
  const std::span<const uint8_t> params = KernelParams(call.tail, a.dependency_count);
  node.kernel_params.assign(params.begin(), params.end());
  uint32_t index = 0;
  if (CUresult r = AppendGraphNode(it->second, std::move(node), &index); r != CUDA_SUCCESS) return r;
  call.Reply(index);
  return CUDA_SUCCESS;
}

CUresult Session::GraphAddDependencies(const ipc::GraphEdgesArgs& a, const Call& call) {
  auto it = graphs_.find(a.graph);
  if (it == graphs_.end() || a.count > ipc::kMaxGraphNodeDependencies ||
      call.tail.size() != size_t{a.count} * sizeof(ipc::GraphEdge)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<ipc::GraphEdge> edges(a.count);
  if (!edges.empty()) std::memcpy(edges.data(), call.tail.data(), call.tail.size());
  std::vector<GraphNodeRecord>& nodes = it->second.nodes;
  // Every edge is checked before any is added: a refused call changes nothing. A cycle is the
  // driver's to refuse, at instantiation.
  for (size_t i = 0; i < edges.size(); ++i) {
    const auto [from, to] = edges[i];
    if (from >= nodes.size() || to >= nodes.size() || from == to || !nodes[from].live || !nodes[to].live) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const std::vector<uint32_t>& deps = nodes[to].depends;
    if (std::find(deps.begin(), deps.end(), from) != deps.end() ||
        deps.size() >= ipc::kMaxGraphNodeDependencies)
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; ++j) {
      if (edges[j].from == from && edges[j].to == to) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (const ipc::GraphEdge& e : edges) nodes[e.to].depends.push_back(e.from);
  return CUDA_SUCCESS;
}

CUresult Session::GraphDestroyNode(const ipc::GraphNodeRef& a, const Call&) {
  auto it = graphs_.find(a.owner);
  if (it == graphs_.end() || a.node >= it->second.nodes.size() || !it->second.nodes[a.node].live)
    return CUDA_ERROR_INVALID_VALUE;
  it->second.nodes[a.node].live = false;
  it->second.nodes[a.node].depends.clear();
  for (GraphNodeRecord& n : it->second.nodes) std::erase(n.depends, a.node);
  return CUDA_SUCCESS;
}

CUresult Session::GraphGetNodes(const ipc::HandleArgs& a, const Call& call) {
  auto it = graphs_.find(a.handle);
  if (it == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  // The reply area bounds the answer: a graph with more live nodes than it holds is not listed.
  size_t live = 0;
  for (const GraphNodeRecord& n : it->second.nodes) live += n.live ? 1 : 0;
  if (2 * sizeof(uint32_t) + live * sizeof(ipc::GraphNodeInfo) > ring_->reply_capacity()) {
    PHOS_LOG_EVERY_SEC(Warn, "runtime", 1, "pid {}: cudaGraphGetNodes refused: {} nodes exceed the reply area", pid_,
                       live);
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint32_t count = 0;
  auto* infos = reinterpret_cast<ipc::GraphNodeInfo*>(call.reply + 2 * sizeof(uint32_t));
  const std::vector<GraphNodeRecord>& nodes = it->second.nodes;
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].live) continue;
    ipc::GraphNodeInfo info{i, nodes[i].params.type, static_cast<uint32_t>(nodes[i].depends.size()), 0};
    std::memcpy(&infos[count++], &info, sizeof(info));
  }
  const uint32_t head[2] = {count, 0};
  std::memcpy(call.reply, head, sizeof(head));
  *call.reply_len = sizeof(head) + size_t{count} * sizeof(ipc::GraphNodeInfo);
  return CUDA_SUCCESS;
}

CUresult Session::GraphNodeGetParams(const ipc::GraphNodeRef& a, const Call& call) {
  auto it = graphs_.find(a.owner);
  if (it == graphs_.end() || a.node >= it->second.nodes.size() || !it->second.nodes[a.node].live)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ResolveGraphKernels(it->second.nodes); r != CUDA_SUCCESS) return r;
  const GraphNodeRecord& n = it->second.nodes[a.node];
  std::memcpy(call.reply, &n.params, sizeof(n.params));
  if (!n.kernel_params.empty()) {
    std::memcpy(call.reply + sizeof(n.params), n.kernel_params.data(), n.kernel_params.size());
  }
  *call.reply_len = sizeof(n.params) + n.kernel_params.size();
  return CUDA_SUCCESS;
}

CUresult Session::GraphNodeSetParams(const ipc::GraphNodeArgs& a, const Call& call) {
  auto it = graphs_.find(a.owner);
  if (it == graphs_.end() || a.node >= it->second.nodes.size() || !it->second.nodes[a.node].live ||
      a.dependency_count != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphNodeRecord& n = it->second.nodes[a.node];
  // A node keeps its kind (cudaGraphKernelNodeSetParams sets a kernel node's).
  if (a.params.type != n.params.type) return CUDA_ERROR_INVALID_VALUE;
  GraphNodeRecord next{
      .params = a.params, .kernel_params = {call.tail.begin(), call.tail.end()}, .depends = n.depends};
  if (CUresult r = CheckGraphNode(next, it->second.device); r != CUDA_SUCCESS) return r;
  n = std::move(next);
  return CUDA_SUCCESS;
}

CUresult Session::GraphClone(const ipc::HandleArgs& a, const Call& call) {
  auto it = graphs_.find(a.handle);
  if (it == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (!HandleRoom("cudaGraphClone")) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t vid = NewHandle();
  GraphRecord copy = it->second;  // indices stay: the frontend names the clone's nodes as the original's
  graphs_[vid] = std::move(copy);
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::GraphInstantiate(const ipc::GraphInstantiateArgs& a, const Call& call) {
  auto it = graphs_.find(a.graph);
  if (it == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  // Auto-free and node priorities only: uploads need a stream (cudaGraphInstantiateWithParams),
  // device launches a device-side launch phos does not remote.
  constexpr unsigned long long kServed =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if ((a.flags & ~kServed) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!HandleRoom("cudaGraphInstantiate")) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = ResolveGraphKernels(it->second.nodes); r != CUDA_SUCCESS) return r;
  GraphExecRecord exec{.device = it->second.device, .nodes = it->second.nodes};
  // Checked again: a buffer or event the graph names may be gone since its node was added.
  for (const GraphNodeRecord& n : exec.nodes) {
    if (!n.live) continue;
    if (CUresult r = CheckGraphNode(n, exec.device); r != CUDA_SUCCESS) return r;
  }
  if (CUresult r = BuildDriverGraph(exec, a.flags); r != CUDA_SUCCESS) return r;
  const uint64_t vid = NewHandle();
  graph_execs_[vid] = std::move(exec);
  call.Reply(vid);
  return CUDA_SUCCESS;
}

CUresult Session::GraphExecUpdate(const ipc::GraphUpdateArgs& a, const Call& call) {
  auto exec_it = graph_execs_.find(a.exec);
  auto graph_it = graphs_.find(a.graph);
  if (exec_it == graph_execs_.end() || graph_it == graphs_.end()) return CUDA_ERROR_INVALID_VALUE;
  GraphExecRecord& exec = exec_it->second;
  if (CUresult r = EnsureDriverGraph(exec); r != CUDA_SUCCESS) return r;
  if (CUresult r = ResolveGraphKernels(graph_it->second.nodes); r != CUDA_SUCCESS) return r;
  // A refused update is an answer, not a failed call: the reply carries the reason and nodes
  // (a failed call's reply would not reach the frontend).
  ipc::GraphUpdateInfo info{CU_GRAPH_EXEC_UPDATE_ERROR, ipc::kNoGraphNode, ipc::kNoGraphNode, 0};
  auto refuse = [&](CUgraphExecUpdateResult why, uint32_t node) {
    info.result = why;
    info.error_node = node;
    call.Reply(info);
    return CUDA_SUCCESS;
  };
  if (graph_it->second.device != exec.device)
    return refuse(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, ipc::kNoGraphNode);
  // A graph with host nodes runs as stages (session_graph_stages.cc), which the driver cannot
  // update as one graph.
  for (uint32_t i = 0; i < graph_it->second.nodes.size(); ++i) {
    const GraphNodeRecord& n = graph_it->second.nodes[i];
    if (n.live && n.params.type == CU_GRAPH_NODE_TYPE_HOST) return refuse(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, i);
  }
  if (exec.host_nodes != 0) return refuse(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, ipc::kNoGraphNode);
  GraphExecRecord next{.device = exec.device, .nodes = graph_it->second.nodes};
  for (uint32_t i = 0; i < next.nodes.size(); ++i) {
    if (!next.nodes[i].live) continue;
    if (CheckGraphNode(next.nodes[i], exec.device) != CUDA_SUCCESS)
      return refuse(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, i);
  }
  // The driver's rules decide, on a driver graph of the new nodes; the executable graph keeps the
  // driver nodes of the graph it was made from, which cudaGraphExecKernelNodeSetParams names.
  if (CUresult r = BuildDriverGraph(next, 0); r != CUDA_SUCCESS) return r;
  CUgraphExecUpdateResultInfo driver_info{};
  const CUresult r = driver_->cuGraphExecUpdate(exec.stages[0].exec, next.stages[0].graph, &driver_info);
  info.result = driver_info.result;
  for (uint32_t i = 0; i < next.driver_nodes.size(); ++i) {
    if (next.driver_nodes[i] == nullptr) continue;
    if (next.driver_nodes[i] == driver_info.errorNode) info.error_node = i;
    if (next.driver_nodes[i] == driver_info.errorFromNode) info.error_from_node = i;
  }
  DestroyDriverGraph(next);
  if (r == CUDA_SUCCESS) {
    exec.nodes = std::move(next.nodes);
  } else if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    return r;
  }
  call.Reply(info);
  return CUDA_SUCCESS;
}

CUresult Session::GraphExecNodeSetParams(const ipc::GraphNodeArgs& a, const Call& call) {
  auto it = graph_execs_.find(a.owner);
  if (it == graph_execs_.end() || a.dependency_count != 0) return CUDA_ERROR_INVALID_VALUE;
  GraphExecRecord& exec = it->second;
  if (CUresult r = EnsureDriverGraph(exec); r != CUDA_SUCCESS) return r;
  if (a.node >= exec.nodes.size() || !exec.nodes[a.node].live || exec.driver_nodes[a.node] == nullptr ||
      exec.nodes[a.node].params.type != CU_GRAPH_NODE_TYPE_KERNEL ||
      a.params.type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphNodeRecord next{.params = a.params,
                       .kernel_params = {call.tail.begin(), call.tail.end()},
                       .depends = exec.nodes[a.node].depends};
  alignas(16) uint8_t params[ipc::kMaxParamBytes + 8];
  void* args[ipc::kMaxParams];
  CUDA_KERNEL_NODE_PARAMS k{};
  CUstream stream = nullptr;
  if (a.params.launch.stream != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = PrepareLaunch(a.params.launch, next.kernel_params, params, args, &k.func, &stream);
      r != CUDA_SUCCESS) {
    return r;
  }
  const ipc::LaunchArgs& l = a.params.launch;
  k.gridDimX = l.grid[0], k.gridDimY = l.grid[1], k.gridDimZ = l.grid[2];
  k.blockDimX = l.block[0], k.blockDimY = l.block[1], k.blockDimZ = l.block[2];
  k.sharedMemBytes = l.shared_bytes;
  k.kernelParams = args;
  if (CUresult r = driver_->cuGraphExecKernelNodeSetParams(exec.stages[exec.stage_of[a.node]].exec,
                                                            exec.driver_nodes[a.node], &k);
      r != CUDA_SUCCESS) {
    return r;
  }
  exec.nodes[a.node] = std::move(next);
  return CUDA_SUCCESS;
}

CUresult Session::GraphExecDestroy(const ipc::HandleArgs& a, const Call&) {
  auto it = graph_execs_.find(a.handle);
  if (it == graph_execs_.end()) return CUDA_ERROR_INVALID_VALUE;
  // Launches already queued run to their end: the driver keeps what they need.
  DestroyDriverGraph(it->second);
  graph_execs_.erase(it);
  return CUDA_SUCCESS;
}

CUresult Session::ResolveGraphKernels(std::vector<GraphNodeRecord>& nodes) {
  for (GraphNodeRecord& n : nodes) {
    if (n.kernel.empty()) continue;
    uint64_t function = 0;
    if (CUresult r = ResolveFunction(0, n.kernel, &function); r != CUDA_SUCCESS) return r;
    n.params.launch.function = function;
    n.kernel.clear();
  }
  return CUDA_SUCCESS;
}

Status Session::CaptureGraphs(std::vector<store::GraphState>* out) const {
  if (!captures_.empty()) return Status::FailedPrecondition("a stream capture is in progress");
  auto state = [this](uint64_t vid, int device, bool executable, const std::vector<GraphNodeRecord>& nodes) {
    store::GraphState g{.handle = vid, .device = device, .executable = executable, .nodes = {}};
    for (const GraphNodeRecord& n : nodes) {
      const ipc::GraphNode& p = n.params;
      store::GraphNodeState s{.type = static_cast<int32_t>(p.type), .live = n.live, .depends = n.depends};
      if (p.type == CU_GRAPH_NODE_TYPE_KERNEL && n.live) {
        auto fn = functions_.find(p.launch.function);
        s.kernel = fn != functions_.end() ? fn->second.name : n.kernel;
        s.params.assign(n.kernel_params.begin(), n.kernel_params.end());
        s.grid = {p.launch.grid[0], p.launch.grid[1], p.launch.grid[2]};
        s.block = {p.launch.block[0], p.launch.block[1], p.launch.block[2]};
        s.shared_bytes = p.launch.shared_bytes;
      }
      s.dst = p.dst, s.dst_pitch = p.dst_pitch, s.src = p.src, s.src_pitch = p.src_pitch;
      s.width = p.width, s.height = p.height, s.value = p.value, s.element_size = p.element_size;
      s.event = p.event;
      g.nodes.push_back(std::move(s));
    }
    return g;
  };
  for (const auto& [vid, g] : graphs_) out->push_back(state(vid, g.device, false, g.nodes));
  for (const auto& [vid, e] : graph_execs_) out->push_back(state(vid, e.device, true, e.nodes));
  return Status::Ok();
}

void Session::AdoptGraphs(const std::vector<store::GraphState>& graphs) {
  for (const store::GraphState& g : graphs) {
    std::vector<GraphNodeRecord> nodes;
    for (const store::GraphNodeState& s : g.nodes) {
      GraphNodeRecord n{.depends = s.depends, .live = s.live};
      ipc::GraphNode& p = n.params;
      p.type = static_cast<uint32_t>(s.type);
      if (s.type == CU_GRAPH_NODE_TYPE_KERNEL && s.live) {
        n.kernel = s.kernel;  // found again in this session's modules when first needed
        n.kernel_params.assign(s.params.begin(), s.params.end());
        for (size_t i = 0; i < 3 && i < s.grid.size(); ++i) {
          p.launch.grid[i] = s.grid[i];
          p.launch.block[i] = s.block[i];
        }
        p.launch.shared_bytes = s.shared_bytes;
        p.launch.param_bytes = static_cast<uint32_t>(s.params.size());
      }
      p.dst = s.dst, p.dst_pitch = s.dst_pitch, p.src = s.src, p.src_pitch = s.src_pitch;
      p.width = s.width, p.height = s.height, p.value = s.value, p.element_size = s.element_size;
      p.event = s.event;
      nodes.push_back(std::move(n));
    }
    if (g.executable) {
      graph_execs_[g.handle] = GraphExecRecord{.device = g.device, .nodes = std::move(nodes)};
    } else {
      graphs_[g.handle] = GraphRecord{.device = g.device, .nodes = std::move(nodes)};
    }
  }
}

void Session::ReleaseGraphs() {
  for (auto& [vid, exec] : graph_execs_) {
    Result<CUcontext> context = ContextOn(exec.device);
    if (!context.ok()) continue;
    driver::ContextScope scope(*driver_, *context);
    DestroyDriverGraph(exec);
  }
  graph_execs_.clear();
  graphs_.clear();
  captures_.clear();
  capturing_.clear();
  captured_events_.clear();
}

}  // namespace phos::runtime
