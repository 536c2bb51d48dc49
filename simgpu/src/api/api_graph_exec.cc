// CUDA graphs, running them: instantiation (a copy of the graph's nodes in a topological order),
// launches (each node enqueued on the launch stream in that order, as the stream call it stands
// for), updates of an executable graph in place.
#include <algorithm>
#include <cstring>

#include "api/copy.h"
#include "api/graph.h"

using namespace phos::sim;

namespace {

constexpr unsigned long long kServedInstantiateFlags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

// A topological order of `depends` (positions), stable: among ready nodes the earliest made
// first. False when the edges make a cycle.
bool TopologicalOrder(const std::vector<std::vector<size_t>>& depends, std::vector<size_t>* order) {
  const size_t n = depends.size();
  std::vector<size_t> waiting(n);
  std::vector<std::vector<size_t>> successors(n);
  for (size_t i = 0; i < n; ++i) {
    waiting[i] = depends[i].size();
    for (size_t dep : depends[i]) successors[dep].push_back(i);
  }
  std::vector<bool> done(n, false);
  order->clear();
  while (order->size() < n) {
    size_t next = n;
    for (size_t i = 0; i < n && next == n; ++i) {
      if (!done[i] && waiting[i] == 0) next = i;
    }
    if (next == n) return false;
    done[next] = true;
    order->push_back(next);
    for (size_t s : successors[next]) --waiting[s];
  }
  return true;
}

// Enqueues one node on `stream` as the call it stands for.
CUresult EnqueueNode(Driver& d, const GraphNodeParams& p, const std::shared_ptr<Context>& ctx,
                     CUstream handle, Stream& stream) {
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return EnqueueLaunch(ctx, *p.function, p.geometry, p.shared_bytes, handle,
                           const_cast<void**>(p.args->pointers()), nullptr);
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      // A 3D copy is a 2D copy per slice, each slice srcHeight (dstHeight) rows further.
      const CUDA_MEMCPY3D& c = p.copy;
      for (size_t z = 0; z < c.Depth; ++z) {
        CUDA_MEMCPY2D slice{};
        slice.srcXInBytes = c.srcXInBytes;
        slice.srcY = c.srcY + (c.srcZ + z) * c.srcHeight;
        slice.srcMemoryType = c.srcMemoryType;
        slice.srcHost = c.srcHost;
        slice.srcDevice = c.srcDevice;
        slice.srcPitch = c.srcPitch;
        slice.dstXInBytes = c.dstXInBytes;
        slice.dstY = c.dstY + (c.dstZ + z) * c.dstHeight;
        slice.dstMemoryType = c.dstMemoryType;
        slice.dstHost = c.dstHost;
        slice.dstDevice = c.dstDevice;
        slice.dstPitch = c.dstPitch;
        slice.WidthInBytes = c.WidthInBytes;
        slice.Height = c.Height;
        if (CUresult r = EnqueueMemcpy2D(d, stream, slice, CallKind::kAsync); r != CUDA_SUCCESS) return r;
      }
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS& m = p.memset;
      const size_t pitch = m.height > 1 ? m.pitch : m.width * m.elementSize;
      return EnqueueMemset2D(d, stream, m.dst, pitch, m.value, m.elementSize, m.width, m.height);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
      Op op;
      op.engine = Engine::kHost;
      op.work = [fn = p.host.fn, data = p.host.userData] {
        fn(data);
        return CUDA_SUCCESS;
      };
      stream.Enqueue(std::move(op));
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return p.event->event->Record(stream);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return stream.WaitEvent(*p.event->event);
    default:  // empty: a point of the order only
      return CUDA_SUCCESS;
  }
}

// The node of `exec` a graph node names, or nodes.size().
size_t ExecPosition(const GraphExecObject& exec, CUgraphNode node) {
  for (const auto& [handle, at] : exec.handles) {
    if (handle == node) return at;
  }
  return exec.nodes.size();
}

// Copies `graph`'s nodes, their edges as positions, and a topological order. Requires graph_mu.
CUresult Snapshot(Driver& d, CUgraph graph, GraphExecObject* out) {
  std::shared_ptr<GraphObject> g = d.graphs.Find(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  out->nodes.clear();
  out->depends.clear();
  out->handles.clear();
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const GraphNodeObject& node = *d.graph_nodes.Find(g->nodes[i]);
    out->nodes.push_back(node.params);
    std::vector<size_t> deps;
    for (CUgraphNode dep : node.depends) {
      deps.push_back(
          static_cast<size_t>(std::find(g->nodes.begin(), g->nodes.end(), dep) - g->nodes.begin()));
    }
    out->depends.push_back(std::move(deps));
    out->handles.emplace_back(g->nodes[i], i);
  }
  return TopologicalOrder(out->depends, &out->order) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Whether cuGraphExecUpdate may replace `was` by `now` (the same position in both graphs), and
// why not.
CUgraphExecUpdateResult UpdateVerdict(const GraphNodeParams& was, const GraphNodeParams& now) {
  if (was.type != now.type) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
  switch (now.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      // Another function of the same context is allowed; a function of another context is not.
      return was.ctx == now.ctx ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                                : CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      // The operands' memory types and context must stay.
      return was.ctx == now.ctx && was.copy.srcMemoryType == now.copy.srcMemoryType &&
                     was.copy.dstMemoryType == now.copy.dstMemoryType
                 ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                 : CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      // A memset's shape and context must stay; its address and value may change.
      return was.ctx == now.ctx && was.memset.elementSize == now.memset.elementSize &&
                     was.memset.width == now.memset.width && was.memset.height == now.memset.height
                 ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                 : CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    default:
      return CU_GRAPH_EXEC_UPDATE_SUCCESS;
  }
}

}  // namespace

extern "C" {

PHOS_SIM_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                          unsigned long long flags) {
  if (phGraphExec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Device launches need graphs launched by kernels, which simgpu's kernels cannot do.
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  // Upload at instantiation takes a stream, which only cuGraphInstantiateWithParams gives.
  if ((flags & ~kServedInstantiateFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  std::shared_ptr<Context> current;
  if (CUresult r = RequireContext(&d, &current); r != CUDA_SUCCESS) return r;
  auto exec = std::make_shared<GraphExecObject>();
  exec->flags = flags;
  {
    std::lock_guard lock(d->graph_mu);
    if (CUresult r = Snapshot(*d, hGraph, exec.get()); r != CUDA_SUCCESS) return r;
  }
  // simgpu runs a graph in one context: nodes of two contexts (devices) are not served.
  for (const GraphNodeParams& p : exec->nodes) {
    if (p.ctx == nullptr) continue;
    if (exec->ctx != nullptr && exec->ctx != p.ctx) return CUDA_ERROR_NOT_SUPPORTED;
    exec->ctx = p.ctx;
  }
  if (exec->ctx == nullptr) exec->ctx = current;
  *phGraphExec = d->graph_execs.Insert(std::move(exec));
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::shared_ptr<GraphExecObject> exec = d->graph_execs.Find(hGraphExec);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  // Nothing to upload: a launch reads its nodes from host memory, which the device shares.
  std::shared_ptr<Stream> stream;
  return ResolveStream(exec->ctx, hStream, &stream);
}

PHOS_SIM_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::shared_ptr<GraphExecObject> exec = d->graph_execs.Find(hGraphExec);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = exec->ctx->exec->sticky_error(); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(exec->ctx, hStream, &stream); r != CUDA_SUCCESS) return r;
  // The nodes' parameters as of this launch: a later update does not change what is queued.
  std::vector<GraphNodeParams> nodes;
  std::vector<size_t> order;
  {
    std::lock_guard lock(d->graph_mu);
    nodes = exec->nodes;
    order = exec->order;
  }
  // One node after another on the launch stream: every dependency holds, and a later launch of
  // the same graph runs after this one, as CUDA orders launches of one executable graph.
  for (size_t i : order) {
    if (CUresult r = EnqueueNode(*d, nodes[i], exec->ctx, hStream, *stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  // Launches already queued hold their own copies of the nodes.
  return d->graph_execs.Remove(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PHOS_SIM_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                             const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  GraphNodeParams params;
  if (CUresult r = KernelNodeParams(*d, *nodeParams, &params); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphExecObject> exec = d->graph_execs.Find(hGraphExec);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  const size_t at = ExecPosition(*exec, hNode);
  if (at == exec->nodes.size() || exec->nodes[at].type != CU_GRAPH_NODE_TYPE_KERNEL)
    return CUDA_ERROR_INVALID_VALUE;
  // The function may change within the node's context only.
  if (params.ctx != exec->nodes[at].ctx) return CUDA_ERROR_INVALID_VALUE;
  exec->nodes[at] = std::move(params);
  return CUDA_SUCCESS;
}

// CUDA 13's form: the nodes are paired in creation order; the topology (count, types, edges) must
// be the same, and each node's new parameters acceptable to its kind (UpdateVerdict). On success
// every node takes its new parameters; on failure none does.
PHOS_SIM_API CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                                CUgraphExecUpdateResultInfo* resultInfo) {
  if (resultInfo == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *resultInfo = {CU_GRAPH_EXEC_UPDATE_ERROR, nullptr, nullptr};
  Driver* d = nullptr;
  if (CUresult r = RequireDriver(&d); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(d->graph_mu);
  std::shared_ptr<GraphExecObject> exec = d->graph_execs.Find(hGraphExec);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  GraphExecObject next;
  if (CUresult r = Snapshot(*d, hGraph, &next); r != CUDA_SUCCESS) return r;
  auto fail = [&](CUgraphExecUpdateResult why, size_t at, CUgraphNode from) {
    resultInfo->result = why;
    resultInfo->errorNode = at < next.handles.size() ? next.handles[at].first : nullptr;
    resultInfo->errorFromNode = from;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  };
  if (next.nodes.size() != exec->nodes.size())
    return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, next.nodes.size(), nullptr);
  for (size_t i = 0; i < next.nodes.size(); ++i) {
    std::vector<size_t> was = exec->depends[i];
    std::vector<size_t> now = next.depends[i];
    std::sort(was.begin(), was.end());
    std::sort(now.begin(), now.end());
    if (was != now) {
      // The edge that differs: the first one of either side the other lacks.
      std::vector<size_t> differ;
      std::set_symmetric_difference(was.begin(), was.end(), now.begin(), now.end(),
                                    std::back_inserter(differ));
      return fail(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, i, next.handles[differ.front()].first);
    }
    if (CUgraphExecUpdateResult v = UpdateVerdict(exec->nodes[i], next.nodes[i]);
        v != CU_GRAPH_EXEC_UPDATE_SUCCESS)
      return fail(v, i, nullptr);
  }
  exec->nodes = std::move(next.nodes);
  // The updating graph's nodes name the same positions as the original's from now on.
  for (const auto& h : next.handles) exec->handles.push_back(h);
  *resultInfo = {CU_GRAPH_EXEC_UPDATE_SUCCESS, nullptr, nullptr};
  return CUDA_SUCCESS;
}

}  // extern "C"
