// CUDA graphs, building them: nodes with their parameters copied at add time, edges, queries,
// clones. Instantiating and launching: api_graph_exec.cc.
#include <algorithm>
#include <cstring>

#include "api/graph.h"

using namespace phos::sim;

namespace phos::sim {

CUresult KernelNodeParams(Driver& d, const CUDA_KERNEL_NODE_PARAMS& p, GraphNodeParams* out) {
  // A CUkernel (p.kern) is a library's kernel, which simgpu does not load.
  if (p.func == nullptr) return p.kern == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
  std::shared_ptr<FunctionObject> function = d.functions.Find(p.func);
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  const LaunchGeometry geometry{{p.gridDimX, p.gridDimY, p.gridDimZ},
                                {p.blockDimX, p.blockDimY, p.blockDimZ}};
  if (CUresult r = CheckLaunchGeometry(geometry); r != CUDA_SUCCESS) return r;
  if (p.sharedMemBytes > static_cast<unsigned>(function->max_dynamic_shared_bytes.load()))
    return CUDA_ERROR_INVALID_VALUE;
  auto args = std::make_shared<KernelArgs>();
  if (CUresult r = function->kernel->CaptureArgs(p.kernelParams, p.extra, args.get()); r != CUDA_SUCCESS)
    return r;
  out->type = CU_GRAPH_NODE_TYPE_KERNEL;
  out->ctx = function->ctx;
  out->function = std::move(function);
  out->function_handle = p.func;
  out->geometry = geometry;
  out->shared_bytes = p.sharedMemBytes;
  out->args = std::move(args);
  return CUDA_SUCCESS;
}

}  // namespace phos::sim

namespace {

// The context a memcpy or memset node names: `ctx`, or the current one when it is null.
CUresult NodeContext(Driver& d, CUcontext handle, std::shared_ptr<Context>* out) {
  if (handle == nullptr) {
    Driver* ignored = nullptr;
    return RequireContext(&ignored, out);
  }
  *out = d.contexts.Find(handle);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

bool PlainMemory(CUmemorytype type) {
  return type == CU_MEMORYTYPE_HOST || type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

// Checks and adds a node of `params` to `graph` after `deps` (numDeps of them, each a node of
// that graph, no repeats). Requires graph_mu.
CUresult AddNode(Driver& d, CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                 GraphNodeParams params) {
  if (out == nullptr || (count != 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphObject> g = d.graphs.Find(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_shared<GraphNodeObject>();
  node->graph = graph;
  for (size_t i = 0; i < count; ++i) {
    std::shared_ptr<GraphNodeObject> dep = d.graph_nodes.Find(deps[i]);
    if (!dep || dep->graph != graph) return CUDA_ERROR_INVALID_VALUE;
    if (std::find(node->depends.begin(), node->depends.end(), deps[i]) != node->depends.end())
      return CUDA_ERROR_INVALID_VALUE;
    node->depends.push_back(deps[i]);
  }
  node->params = std::move(params);
  *out = d.graph_nodes.Insert(std::move(node));
  g->nodes.push_back(*out);
  return CUDA_SUCCESS;
}

// The node `handle` names, with graph_mu held by the caller.
std::shared_ptr<GraphNodeObject> FindNode(Driver& d, CUgraphNode handle) {
  return d.graph_nodes.Find(handle);
}

CUresult EventNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, CUevent event,
                   CUgraphNodeType type) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  params.type = type;
  params.event = d->events.Find(event);
  if (!params.event) return CUDA_ERROR_INVALID_VALUE;
  params.event_handle = event;
  params.ctx = params.event->ctx;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, out, graph, deps, count, std::move(params));
}

// cuGraphGetNodes and cuGraphGetRootNodes: `nodes` null asks for the count; otherwise up to
// *count are written, the rest of the array nulled, and *count set to how many there are.
CUresult ListNodes(CUgraph graph, CUgraphNode* nodes, size_t* count, bool roots_only) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphObject> g = d->graphs.Find(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> listed;
  for (CUgraphNode n : g->nodes) {
    if (!roots_only || FindNode(*d, n)->depends.empty()) listed.push_back(n);
  }
  if (nodes != nullptr) {
    for (size_t i = 0; i < *count; ++i) nodes[i] = i < listed.size() ? listed[i] : nullptr;
  }
  *count = listed.size();
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  *phGraph = d->graphs.Insert(std::make_shared<GraphObject>());
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphObject> g = d->graphs.Remove(hGraph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // Executable graphs made from it keep their own copies.
  for (CUgraphNode n : g->nodes) d->graph_nodes.Remove(n);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode* dependencies, size_t numDependencies,
                                                   const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  if (CUresult r = KernelNodeParams(*d, *nodeParams, &params); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, phGraphNode, hGraph, dependencies, numDependencies, std::move(params));
}

PHOS_SIM_API CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                                         CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphNodeObject> node = FindNode(*d, hNode);
  if (!node || node->params.type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  const GraphNodeParams& p = node->params;
  std::memset(nodeParams, 0, sizeof(*nodeParams));
  nodeParams->func = p.function_handle;
  nodeParams->gridDimX = p.geometry.grid[0];
  nodeParams->gridDimY = p.geometry.grid[1];
  nodeParams->gridDimZ = p.geometry.grid[2];
  nodeParams->blockDimX = p.geometry.block[0];
  nodeParams->blockDimY = p.geometry.block[1];
  nodeParams->blockDimZ = p.geometry.block[2];
  nodeParams->sharedMemBytes = p.shared_bytes;
  // The node's own copy, valid while the node keeps these parameters (as the driver's is).
  nodeParams->kernelParams = const_cast<void**>(p.args->pointers());
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                                         const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  if (CUresult r = KernelNodeParams(*d, *nodeParams, &params); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphNodeObject> node = FindNode(*d, hNode);
  if (!node || node->params.type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  node->params = std::move(params);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode* dependencies, size_t numDependencies,
                                                   const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  if (copyParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D& c = *copyParams;
  // CUDA arrays are not served by simgpu at all; levels of detail and the reserved fields must be 0.
  if (c.srcMemoryType == CU_MEMORYTYPE_ARRAY || c.dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (!PlainMemory(c.srcMemoryType) || !PlainMemory(c.dstMemoryType) || c.srcLOD != 0 || c.dstLOD != 0 ||
      c.reserved0 != nullptr || c.reserved1 != nullptr || c.WidthInBytes == 0 || c.Height == 0 ||
      c.Depth == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  params.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  if (CUresult r = NodeContext(*d, ctx, &params.ctx); r != CUDA_SUCCESS) return r;
  params.copy = c;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, phGraphNode, hGraph, dependencies, numDependencies, std::move(params));
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                   const CUgraphNode* dependencies, size_t numDependencies,
                                                   const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                                   CUcontext ctx) {
  if (memsetParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMSET_NODE_PARAMS& m = *memsetParams;
  if ((m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) || m.width == 0 || m.height == 0 ||
      (m.height > 1 && m.pitch < m.width * m.elementSize)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  params.type = CU_GRAPH_NODE_TYPE_MEMSET;
  if (CUresult r = NodeContext(*d, ctx, &params.ctx); r != CUDA_SUCCESS) return r;
  // The destination must be device memory the context can reach, as the driver checks at add time.
  const uint64_t rows = m.height - 1;
  const uint64_t span = rows * (m.height > 1 ? m.pitch : 0) + m.width * m.elementSize;
  if (!d->CheckRange(m.dst, span, Access::kReadWrite, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  params.memset = m;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, phGraphNode, hGraph, dependencies, numDependencies, std::move(params));
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode* dependencies, size_t numDependencies,
                                                 const CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr || nodeParams->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  params.type = CU_GRAPH_NODE_TYPE_HOST;
  params.host = *nodeParams;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, phGraphNode, hGraph, dependencies, numDependencies, std::move(params));
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                  const CUgraphNode* dependencies, size_t numDependencies) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  return AddNode(*d, phGraphNode, hGraph, dependencies, numDependencies, GraphNodeParams{});
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                        const CUgraphNode* dependencies,
                                                        size_t numDependencies, CUevent event) {
  return EventNode(phGraphNode, hGraph, dependencies, numDependencies, event,
                   CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

PHOS_SIM_API CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                      const CUgraphNode* dependencies, size_t numDependencies,
                                                      CUevent event) {
  return EventNode(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

// Edge data (ports, types) is a Hopper feature of programmatic dependent launch: only the default,
// all zeros, is served.
PHOS_SIM_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from,
                                                     const CUgraphNode* to, const CUgraphEdgeData* edgeData,
                                                     size_t numDependencies) {
  if (numDependencies != 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (edgeData != nullptr) {
    const CUgraphEdgeData zero{};
    for (size_t i = 0; i < numDependencies; ++i) {
      if (std::memcmp(&edgeData[i], &zero, sizeof(zero)) != 0) return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  if (!d->graphs.Find(hGraph)) return CUDA_ERROR_INVALID_VALUE;
  // Every edge is checked before any is added: a refused call changes nothing.
  std::vector<std::shared_ptr<GraphNodeObject>> targets;
  for (size_t i = 0; i < numDependencies; ++i) {
    std::shared_ptr<GraphNodeObject> f = FindNode(*d, from[i]);
    std::shared_ptr<GraphNodeObject> t = FindNode(*d, to[i]);
    if (!f || !t || f->graph != hGraph || t->graph != hGraph || from[i] == to[i])
      return CUDA_ERROR_INVALID_VALUE;
    if (std::find(t->depends.begin(), t->depends.end(), from[i]) != t->depends.end())
      return CUDA_ERROR_INVALID_VALUE;
    for (size_t j = 0; j < i; ++j) {
      if (from[j] == from[i] && to[j] == to[i]) return CUDA_ERROR_INVALID_VALUE;
    }
    targets.push_back(std::move(t));
  }
  for (size_t i = 0; i < numDependencies; ++i) targets[i]->depends.push_back(from[i]);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  return ListNodes(hGraph, nodes, numNodes, /*roots_only=*/false);
}

PHOS_SIM_API CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode* rootNodes,
                                                  size_t* numRootNodes) {
  return ListNodes(hGraph, rootNodes, numRootNodes, /*roots_only=*/true);
}

PHOS_SIM_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphNodeObject> node = FindNode(*d, hNode);
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  *type = node->params.type;
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphNodeObject> node = d->graph_nodes.Remove(hNode);
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  // Its edges go with it, both ways.
  std::shared_ptr<GraphObject> g = d->graphs.Find(node->graph);
  std::erase(g->nodes, hNode);
  for (CUgraphNode n : g->nodes) std::erase(FindNode(*d, n)->depends, hNode);
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  if (phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphObject> original = d->graphs.Find(originalGraph);
  if (!original) return CUDA_ERROR_INVALID_VALUE;
  auto clone = std::make_shared<GraphObject>();
  const CUgraph handle = d->graphs.Insert(clone);
  // Copies first, edges renamed after: an edge added later may point at a node made later.
  std::vector<std::shared_ptr<GraphNodeObject>> copies;
  for (CUgraphNode n : original->nodes) {
    copies.push_back(std::make_shared<GraphNodeObject>(*FindNode(*d, n)));
    copies.back()->graph = handle;
    clone->nodes.push_back(d->graph_nodes.Insert(copies.back()));
  }
  for (const auto& copy : copies) {
    for (CUgraphNode& dep : copy->depends) {
      const auto at =
          std::find(original->nodes.begin(), original->nodes.end(), dep) - original->nodes.begin();
      dep = clone->nodes[static_cast<size_t>(at)];
    }
  }
  *phGraphClone = handle;
  return CUDA_SUCCESS;
}

}  // extern "C"
