// A session's CUDA graphs and stream captures as phosd keeps them (docs/decisions.md, "CUDA
// graphs"): a graph is its list of checked nodes, each the wire's GraphNode with its kernel's
// parameter buffer and the nodes it depends on; an executable graph copies that list and owns the
// driver's graphs and executable graphs built from it (one per stage: host nodes split it). Private
// to the API server.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "phos/ipc/wire.h"

namespace phos::runtime {

struct GraphNodeRecord {
  ipc::GraphNode params{};
  std::vector<uint8_t> kernel_params;  // kernel nodes: the packed parameter buffer
  std::vector<uint32_t> depends;       // node indices of its graph
  bool live = true;                    // false once destroyed (cudaGraphDestroyNode): indices stay
  // A kernel node restored from a snapshot before its function is found again in this session
  // (params.launch.function is 0 until then): the kernel's mangled name.
  std::string kernel;
};

struct GraphRecord {
  int device = 0;  // the session device its nodes run on (current at cudaGraphCreate)
  std::vector<GraphNodeRecord> nodes;
};

// A part of an executable graph the driver runs as one graph: the device nodes of a topological
// order between two host nodes, then the host node's function (session_graph_stages.cc). A graph
// without host nodes is one stage. `graph` and `exec` are null for a stage without device nodes.
struct GraphStage {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  uint32_t host = ipc::kNoGraphNode;  // the host node run after the stage's graph, if any
};

struct GraphExecRecord {
  int device = 0;
  std::vector<GraphNodeRecord> nodes;
  // The driver's, built from `nodes`; empty for one restored from a snapshot until first used.
  std::vector<GraphStage> stages;
  std::vector<CUgraphNode> driver_nodes;  // by node index; null for a destroyed or host node
  std::vector<uint32_t> stage_of;         // by node index: the stage whose graph holds it
  uint32_t host_nodes = 0;                // live host nodes: the slots a launch carries
};

// A stream capture in progress (session_capture.cc): the graph it records into, the stream that
// began it, its mode, and whether a refused call invalidated it.
struct CaptureRecord {
  uint64_t graph = 0;
  uint64_t origin = 0;
  uint32_t mode = 0;  // CUstreamCaptureMode
  bool invalidated = false;
};

// A stream taking part in a capture: the capture, and the nodes its next captured work depends on.
struct CapturingStream {
  uint64_t capture = 0;
  std::vector<uint32_t> depends;
};

}  // namespace phos::runtime
