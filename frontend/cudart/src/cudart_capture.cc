// Stream capture, remoted (docs/remoting.md "Graphs and stream capture"). phosd records what a
// capturing stream is sent into the capture's graph and refuses what a capture cannot hold. The
// rules that depend on the calling thread are kept here, where the threads are known: each
// thread's interaction mode (cudaThreadExchangeStreamCaptureMode; global by default), and which
// thread began each capture in which mode. A call that may be unsafe during a capture (an
// allocation, a free, a synchronous copy or set) is prohibited, as NVIDIA's runtime prohibits it:
// in global mode while the thread captures or any thread holds a global capture, in thread-local
// mode while the thread captures, never in relaxed mode. It returns
// cudaErrorStreamCaptureUnsupported and invalidates the captures that prohibited it; their
// cudaStreamEndCapture says cudaErrorStreamCaptureInvalidated.
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cudart_internal.h"
#include "phos/base/log.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace {

struct CaptureState {
  cudaStreamCaptureMode mode;
  std::thread::id thread;
  uint64_t id = 0;  // phosd's id of the capture sequence
  bool invalidated = false;
  uint64_t graph = 0;  // the capture's graph, once a host function became a node of it
};

std::mutex g_mu;
std::unordered_map<uint64_t, CaptureState> g_captures;  // by the virtual stream that began it
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

cudaError_t CaptureInfo(cudaStream_t stream, ipc::CaptureInfo* info, std::vector<uint32_t>* deps) {
  ipc::HandleArgs a{};
  if (CUresult r = StreamId(stream, &a.handle); r != CUDA_SUCCESS) return Return(r);
  Client& c = Client::Get();
  std::vector<uint8_t> reply(c.reply_capacity());
  size_t len = 0;
  CUresult r =
      c.Call(ipc::Op::kStreamCaptureInfo, &a, sizeof(a), nullptr, 0, true, reply.data(), reply.size(), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  if (len < sizeof(*info)) return Return(cudaErrorUnknown);
  std::memcpy(info, reply.data(), sizeof(*info));
  if (len != sizeof(*info) + size_t{info->dependency_count} * sizeof(uint32_t))
    return Return(cudaErrorUnknown);
  deps->resize(info->dependency_count);
  if (!deps->empty()) std::memcpy(deps->data(), reply.data() + sizeof(*info), deps->size() * sizeof(uint32_t));
  // A call the capture mode prohibited invalidated the capture here; phosd learns it at its end.
  if (info->status == cudaStreamCaptureStatusActive) {
    std::lock_guard lock(g_mu);
    for (const auto& [origin, capture] : g_captures) {
      if (capture.id == info->id && capture.invalidated) info->status = cudaStreamCaptureStatusInvalidated;
    }
  }
  return cudaSuccess;
}

}  // namespace

namespace phos::frontend {

cudaGraphNode_t MakeNode(uint64_t graph, uint32_t index);

cudaError_t CaptureHostFunc(cudaStream_t stream, const cudaHostNodeParams& fn, bool* captured) {
  *captured = false;
  {
    // Every capture begins here: without one no stream captures, and the launch asks nothing.
    std::lock_guard lock(g_mu);
    if (g_captures.empty()) return cudaSuccess;
  }
  ipc::CaptureInfo info{};
  std::vector<uint32_t> deps;
  if (cudaError_t e = CaptureInfo(stream, &info, &deps); e != cudaSuccess) return e;
  if (info.status == cudaStreamCaptureStatusNone) return cudaSuccess;
  *captured = true;
  ipc::HostFnArgs a{0, ipc::kCapturedHostFnSlot, 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  uint32_t node = 0;
  size_t len = 0;
  CUresult r = Client::Get().Call(ipc::Op::kLaunchHostFunc, &a, sizeof(a), nullptr, 0, true, &node,
                                  sizeof(node), &len);
  if (r != CUDA_SUCCESS) return Return(r);
  if (len != sizeof(node)) return Return(cudaErrorUnknown);
  RecordHostNode(info.graph, node, fn);
  std::lock_guard lock(g_mu);
  for (auto& [origin, capture] : g_captures) {
    if (capture.id == info.id) capture.graph = info.graph;
  }
  return cudaSuccess;
}

cudaError_t CaptureProhibits(const char* call) {
  if (t_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  std::lock_guard lock(g_mu);
  bool prohibited = false;
  const std::thread::id self = std::this_thread::get_id();
  for (auto& [stream, capture] : g_captures) {
    const bool own = capture.thread == self && capture.mode != cudaStreamCaptureModeRelaxed;
    const bool others_global = t_mode == cudaStreamCaptureModeGlobal && capture.thread != self &&
                               capture.mode == cudaStreamCaptureModeGlobal;
    if (!own && !others_global) continue;
    capture.invalidated = true;
    prohibited = true;
  }
  if (!prohibited) return cudaSuccess;
  PHOS_LOG_EVERY_SEC(Info, "cudart", 1,
                     "{} during stream capture: prohibited by the capture mode; the capture is invalidated",
                     call);
  return cudaErrorStreamCaptureUnsupported;
}

}  // namespace phos::frontend

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed) {
    return Return(cudaErrorInvalidValue);
  }
  ipc::CaptureArgs a{0, static_cast<uint32_t>(mode), 0};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  CUresult r = Client::Get().Call(ipc::Op::kStreamBeginCapture, &a, sizeof(a), nullptr, 0, true);
  if (r != CUDA_SUCCESS) return Return(r);
  ipc::CaptureInfo info{};
  std::vector<uint32_t> deps;
  if (cudaError_t e = CaptureInfo(stream, &info, &deps); e != cudaSuccess) return e;
  std::lock_guard lock(g_mu);
  g_captures[a.stream] = CaptureState{mode, std::this_thread::get_id(), info.id};
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*,
                                          const cudaGraphEdgeData*, size_t, cudaStreamCaptureMode) {
  return phos::frontend::NotSupported("cudaStreamBeginCaptureToGraph",
                                      "capture into an existing graph is not served");
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return Return(cudaErrorInvalidValue);
  ipc::CaptureArgs a{};
  if (CUresult r = StreamId(stream, &a.stream); r != CUDA_SUCCESS) return Return(r);
  {
    std::lock_guard lock(g_mu);
    auto it = g_captures.find(a.stream);
    // Another thread's capture in global or thread-local mode is its own to end.
    if (it != g_captures.end() && it->second.mode != cudaStreamCaptureModeRelaxed &&
        it->second.thread != std::this_thread::get_id()) {
      return Return(cudaErrorStreamCaptureWrongThread);
    }
    if (it != g_captures.end()) a.invalidated = it->second.invalidated ? 1 : 0;
  }
  uint64_t vid = 0;
  size_t len = 0;
  CUresult r = Client::Get().Call(ipc::Op::kStreamEndCapture, &a, sizeof(a), nullptr, 0, true, &vid,
                                  sizeof(vid), &len);
  if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) {
    std::lock_guard lock(g_mu);
    auto it = g_captures.find(a.stream);
    // A capture that failed took its graph with it, and so the host nodes kept for it.
    if (it != g_captures.end() && r != CUDA_SUCCESS && it->second.graph != 0)
      phos::frontend::ForgetHostNodes(it->second.graph);
    if (it != g_captures.end()) g_captures.erase(it);
  }
  *graph = r == CUDA_SUCCESS ? reinterpret_cast<cudaGraph_t>(static_cast<uintptr_t>(vid)) : nullptr;
  // Ending a capture that never began is cudaErrorIllegalState to the runtime too.
  return Return(r);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return Return(cudaErrorInvalidValue);
  ipc::CaptureInfo info{};
  std::vector<uint32_t> deps;
  if (cudaError_t e = CaptureInfo(stream, &info, &deps); e != cudaSuccess) return e;
  *status = static_cast<cudaStreamCaptureStatus>(info.status);
  return cudaSuccess;
}

// CUDA 13's form: the capture's graph and the stream's current dependencies, which stay valid
// until the thread's next call of it.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                     const cudaGraphEdgeData** edges, size_t* count) {
  if (status == nullptr) return Return(cudaErrorInvalidValue);
  ipc::CaptureInfo info{};
  std::vector<uint32_t> indices;
  if (cudaError_t e = CaptureInfo(stream, &info, &indices); e != cudaSuccess) return e;
  thread_local std::vector<cudaGraphNode_t> t_deps;
  thread_local std::vector<cudaGraphEdgeData> t_edges;
  t_deps.clear();
  for (uint32_t i : indices) t_deps.push_back(phos::frontend::MakeNode(info.graph, i));
  t_edges.assign(t_deps.size(), cudaGraphEdgeData{});
  *status = static_cast<cudaStreamCaptureStatus>(info.status);
  const bool active = info.status != cudaStreamCaptureStatusNone;
  if (id != nullptr && active) *id = info.id;
  if (graph != nullptr)
    *graph = active ? reinterpret_cast<cudaGraph_t>(static_cast<uintptr_t>(info.graph)) : nullptr;
  if (deps != nullptr) *deps = active ? t_deps.data() : nullptr;
  if (edges != nullptr) *edges = active ? t_edges.data() : nullptr;
  if (count != nullptr) *count = active ? t_deps.size() : 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                          *mode != cudaStreamCaptureModeRelaxed)) {
    return Return(cudaErrorInvalidValue);
  }
  std::swap(*mode, t_mode);
  return cudaSuccess;
}

// The per-thread default stream forms (cudart_ptds.cc): stream 0 is the calling thread's.
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return cudaStreamBeginCapture(phos::frontend::PerThreadDefault(stream), mode);
}

cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                               const cudaGraphNode_t* deps, const cudaGraphEdgeData* edges,
                                               size_t count, cudaStreamCaptureMode mode) {
  return cudaStreamBeginCaptureToGraph(phos::frontend::PerThreadDefault(stream), graph, deps, edges, count,
                                       mode);
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return cudaStreamEndCapture(phos::frontend::PerThreadDefault(stream), graph);
}

cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(phos::frontend::PerThreadDefault(stream), status);
}

cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                          unsigned long long* id, cudaGraph_t* graph,
                                          const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                          size_t* count) {
  return cudaStreamGetCaptureInfo(phos::frontend::PerThreadDefault(stream), status, id, graph, deps, edges,
                                  count);
}

}  // extern "C"
