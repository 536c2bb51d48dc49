// A session's CUDA graphs and stream captures as phosd keeps them (docs/decisions.md, "CUDA
// graphs"): a graph is its list of checked nodes, each the wire's GraphNode with its kernel's
// parameter buffer and the nodes it depends on; an executable graph copies that list and owns the
// driver's graph and executable graph built from it. Private to the API server.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "phos/ipc/wire.h"

namespace phos::runtime {

struct GraphNodeRecord {
  ipc::GraphNode params{};
  std::vector<uint8_t> kernel_params;  // kernel nodes: the packed parameter buffer
  std::vector<uint32_t> depends;       // node indices of its graph
  bool live = true;                    // false once destroyed (cudaGraphDestroyNode): indices stay
};

struct GraphRecord {
  int device = 0;  // the session device its nodes run on (current at cudaGraphCreate)
  std::vector<GraphNodeRecord> nodes;
};

struct GraphExecRecord {
  int device = 0;
  // The graphs whose node indices name this one's nodes: the one it was made from, and those
  // cudaGraphExecUpdate took parameters from.
  std::vector<uint64_t> sources;
  std::vector<GraphNodeRecord> nodes;
  CUgraph graph = nullptr;  // the driver's, built from `nodes`
  CUgraphExec exec = nullptr;
  std::vector<CUgraphNode> driver_nodes;  // by node index; null for a destroyed node
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
