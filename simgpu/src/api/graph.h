// CUDA graphs on simgpu: a graph is a list of nodes in creation order, each with its parameters
// copied at add time and the nodes it depends on; an executable graph is a copy of them in a
// topological order that cuGraphLaunch enqueues on the launch stream, one after another (see
// simgpu/README.md, "Departures from NVIDIA's driver"). Every graph structure is guarded by Driver::graph_mu:
// CUDA's graph objects are not internally synchronised, but simgpu must not fault when a program races on
// one.
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "api/driver.h"
#include "module/module.h"

namespace phos::sim {

// A node's parameters as they were when added or last set: what an executable graph copies.
struct GraphNodeParams {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::shared_ptr<Context> ctx;  // kernel, memcpy, memset: the context the node runs in
  // Kernel.
  std::shared_ptr<FunctionObject> function;
  CUfunction function_handle = nullptr;
  LaunchGeometry geometry{};
  unsigned shared_bytes = 0;
  std::shared_ptr<const KernelArgs> args;  // immutable once captured: a new one on every set
  // Memcpy (device and host pointers only, no arrays).
  CUDA_MEMCPY3D copy{};
  // Memset.
  CUDA_MEMSET_NODE_PARAMS memset{};
  // Host.
  CUDA_HOST_NODE_PARAMS host{};
  // Event record and wait.
  std::shared_ptr<EventObject> event;
  CUevent event_handle = nullptr;
};

struct GraphNodeObject {
  CUgraph graph = nullptr;           // the graph the node belongs to
  std::vector<CUgraphNode> depends;  // the nodes it waits for, in the order the edges were added
  GraphNodeParams params;
};

struct GraphObject {
  std::vector<CUgraphNode> nodes;  // creation order
};

struct GraphExecObject {
  std::shared_ptr<Context> ctx;  // every node's; launches run in it
  // Creation order (for cuGraphExecUpdate's pairing) and, per node, the positions it depends on.
  std::vector<GraphNodeParams> nodes;
  std::vector<std::vector<size_t>> depends;
  std::vector<size_t> order;                            // a topological order of `nodes`
  std::vector<std::pair<CUgraphNode, size_t>> handles;  // graph nodes that name a position
  unsigned long long flags = 0;
};

// Checks `p` as cuGraphAddKernelNode / SetParams do and fills `out` (the arguments copied).
CUresult KernelNodeParams(Driver& d, const CUDA_KERNEL_NODE_PARAMS& p, GraphNodeParams* out);

}  // namespace phos::sim
