// A session's CUDA graphs and stream captures as phosd keeps them (docs/decisions.md, "CUDA
// graphs"): a graph is its list of checked nodes, each the wire's GraphNode with its kernel's
// parameter buffer and the nodes it depends on; an executable graph copies that list and owns the
// driver's graph and executable graph built from it. Private to the API server.
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

struct GraphExecRecord {
  int device = 0;
  std::vector<GraphNodeRecord> nodes;
  // The driver's, built from `nodes`; null for one restored from a snapshot until first used.
  CUgraph graph = nullptr;
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
