// Host nodes of CUDA graphs (docs/remoting.md "Graphs and stream capture"). A host node's function
// is the tenant's code and its argument one of the function's pointers: both stay here, by graph
// (or executable graph) and node index, and phosd's node carries neither. A graph launch takes a
// host-function slot for each host node, with the function the node holds at that moment, and
// phosd queues the slot between the driver graphs it runs the graph as.
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cudart_internal.h"

using phos::frontend::Return;

namespace phos::frontend {

bool SplitNode(cudaGraphNode_t node, uint64_t* graph, uint32_t* index);

namespace {

std::mutex g_mu;
std::map<std::pair<uint64_t, uint32_t>, cudaHostNodeParams> g_hosts;  // ordered: node index within owner

// The entry of (owner, node), or null.
cudaHostNodeParams* Find(uint64_t owner, uint32_t node) {
  auto it = g_hosts.find({owner, node});
  return it == g_hosts.end() ? nullptr : &it->second;
}

auto Range(uint64_t owner) {
  return std::pair{g_hosts.lower_bound({owner, 0}), g_hosts.lower_bound({owner + 1, 0})};
}

}  // namespace

void RecordHostNode(uint64_t owner, uint32_t node, const cudaHostNodeParams& fn) {
  std::lock_guard lock(g_mu);
  g_hosts[{owner, node}] = fn;
}

void CopyHostNodes(uint64_t from, uint64_t to) {
  std::lock_guard lock(g_mu);
  auto [begin, end] = Range(to);
  g_hosts.erase(begin, end);
  std::vector<std::pair<uint32_t, cudaHostNodeParams>> copied;
  for (auto [it, last] = Range(from); it != last; ++it) copied.emplace_back(it->first.second, it->second);
  for (const auto& [node, fn] : copied) g_hosts[{to, node}] = fn;
}

void ForgetHostNodes(uint64_t owner) {
  std::lock_guard lock(g_mu);
  auto [begin, end] = Range(owner);
  g_hosts.erase(begin, end);
}

void ForgetHostNode(uint64_t owner, uint32_t node) {
  std::lock_guard lock(g_mu);
  g_hosts.erase({owner, node});
}

std::vector<cudaHostNodeParams> HostNodesOf(uint64_t owner) {
  std::lock_guard lock(g_mu);
  std::vector<cudaHostNodeParams> fns;
  for (auto [it, last] = Range(owner); it != last; ++it) fns.push_back(it->second);
  return fns;
}

}  // namespace phos::frontend

extern "C" {

cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, cudaHostNodeParams* params) {
  uint64_t graph = 0;
  uint32_t index = 0;
  if (params == nullptr || !phos::frontend::SplitNode(node, &graph, &index))
    return Return(cudaErrorInvalidValue);
  std::lock_guard lock(phos::frontend::g_mu);
  const cudaHostNodeParams* held = phos::frontend::Find(graph, index);
  if (held == nullptr) return Return(cudaErrorInvalidValue);  // not a host node
  *params = *held;
  return cudaSuccess;
}

cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const cudaHostNodeParams* params) {
  uint64_t graph = 0;
  uint32_t index = 0;
  if (params == nullptr || params->fn == nullptr || !phos::frontend::SplitNode(node, &graph, &index))
    return Return(cudaErrorInvalidValue);
  std::lock_guard lock(phos::frontend::g_mu);
  cudaHostNodeParams* held = phos::frontend::Find(graph, index);
  if (held == nullptr) return Return(cudaErrorInvalidValue);
  *held = *params;
  return cudaSuccess;
}

// The executable graph's node of the same index: an executable graph keeps its graph's indices.
cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                           const cudaHostNodeParams* params) {
  uint64_t graph = 0;
  uint32_t index = 0;
  if (params == nullptr || params->fn == nullptr || !phos::frontend::SplitNode(node, &graph, &index))
    return Return(cudaErrorInvalidValue);
  std::lock_guard lock(phos::frontend::g_mu);
  cudaHostNodeParams* held = phos::frontend::Find(reinterpret_cast<uintptr_t>(exec), index);
  if (held == nullptr) return Return(cudaErrorInvalidValue);
  *held = *params;
  return cudaSuccess;
}

}  // extern "C"
