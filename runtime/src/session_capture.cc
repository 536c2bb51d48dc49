// Stream capture (docs/remoting.md "Graphs and stream capture"): phosd sees every record of the
// session, so it captures itself. Work sent to a capturing stream is checked as the call would be
// and becomes a node of the capture's graph, after the stream's capture dependencies, instead of
// running; an event recorded in a capture carries the recording stream's dependencies to the
// streams that wait for it, which join the capture. What a capture cannot hold is refused with the
// driver's error and invalidates the capture, as NVIDIA's driver does. The mode rules that depend
// on the calling thread are the frontend's (it knows the threads; cudart_capture.cc).
#include <algorithm>
#include <cstring>

#include "phos/base/log.h"
#include "session.h"

namespace phos::runtime {
namespace {

using ipc::Op;

template <typename T>
T Args(const ipc::RecordView& record) {
  T args{};
  std::memcpy(&args, record.payload, sizeof(T));
  return args;
}

bool LegacyStream(uint64_t vid) {
  return vid == 0 || vid == 1;
}

}  // namespace

CUresult Session::InvalidateCapture(uint64_t capture, CUresult why, const char* call) {
  auto it = captures_.find(capture);
  if (it != captures_.end() && !it->second.invalidated) {
    it->second.invalidated = true;
    PHOS_LOG_EVERY_SEC(Info, "runtime", 1,
                       "pid {}: {} during stream capture: refused, the capture is invalidated", pid_, call);
  }
  return why;
}

void Session::EndCaptureOf(uint64_t capture) {
  std::erase_if(capturing_, [capture](const auto& s) { return s.second.capture == capture; });
  std::erase_if(captured_events_, [capture](const auto& e) { return e.second.capture == capture; });
  captures_.erase(capture);
}

CUresult Session::StreamBeginCapture(const ipc::CaptureArgs& a, const Call&) {
  // The legacy stream cannot be captured: it synchronises with every blocking stream.
  if (LegacyStream(a.stream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto stream = streams_.find(a.stream);
  if (stream == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (a.mode > CU_STREAM_CAPTURE_MODE_RELAXED || a.invalidated != 0) return CUDA_ERROR_INVALID_VALUE;
  if (capturing_.contains(a.stream)) return CUDA_ERROR_ILLEGAL_STATE;
  if (!HandleRoom("cudaStreamBeginCapture")) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t graph = NewHandle();
  graphs_[graph] = GraphRecord{.device = stream->second.device};
  const uint64_t capture = ++last_capture_;
  captures_[capture] = CaptureRecord{.graph = graph, .origin = a.stream, .mode = a.mode};
  capturing_[a.stream] = CapturingStream{.capture = capture};
  return CUDA_SUCCESS;
}

CUresult Session::StreamEndCapture(const ipc::CaptureArgs& a, const Call& call) {
  auto stream = capturing_.find(a.stream);
  if (stream == capturing_.end()) return CUDA_ERROR_ILLEGAL_STATE;
  const uint64_t id = stream->second.capture;
  CaptureRecord& capture = captures_.at(id);
  // Only the stream that began a capture ends it.
  if (capture.origin != a.stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  const uint64_t graph = capture.graph;
  CUresult result =
      capture.invalidated || a.invalidated != 0 ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  if (result == CUDA_SUCCESS) {
    // Every stream that joined must have been joined back: its last work an ancestor of what the
    // origin stream's next work would wait for.
    const std::vector<GraphNodeRecord>& nodes = graphs_.at(graph).nodes;
    std::vector<bool> reached(nodes.size(), false);
    std::vector<uint32_t> walk = stream->second.depends;
    while (!walk.empty()) {
      const uint32_t n = walk.back();
      walk.pop_back();
      if (reached[n]) continue;
      reached[n] = true;
      walk.insert(walk.end(), nodes[n].depends.begin(), nodes[n].depends.end());
    }
    for (const auto& [vid, other] : capturing_) {
      if (other.capture != id || vid == a.stream) continue;
      for (uint32_t n : other.depends) {
        if (!reached[n]) result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
      }
    }
  }
  EndCaptureOf(id);
  if (result != CUDA_SUCCESS) {
    graphs_.erase(graph);
    return result;
  }
  call.Reply(graph);
  return CUDA_SUCCESS;
}

CUresult Session::StreamCaptureInfo(const ipc::HandleArgs& a, const Call& call) {
  if (!LegacyStream(a.handle) && a.handle != 2 && !streams_.contains(a.handle))
    return CUDA_ERROR_INVALID_HANDLE;
  ipc::CaptureInfo info{CU_STREAM_CAPTURE_STATUS_NONE, 0, 0, 0};
  auto it = capturing_.find(a.handle);
  if (it != capturing_.end()) {
    const CaptureRecord& capture = captures_.at(it->second.capture);
    info.status =
        capture.invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    info.id = it->second.capture;
    info.graph = capture.graph;
    info.dependency_count = static_cast<uint32_t>(it->second.depends.size());
    if (sizeof(info) + it->second.depends.size() * sizeof(uint32_t) > ring_->reply_capacity()) {
      return CUDA_ERROR_INVALID_VALUE;  // more dependencies than the reply area holds
    }
    if (!it->second.depends.empty()) {
      std::memcpy(call.reply + sizeof(info), it->second.depends.data(),
                  it->second.depends.size() * sizeof(uint32_t));
    }
  }
  std::memcpy(call.reply, &info, sizeof(info));
  *call.reply_len = sizeof(info) + size_t{info.dependency_count} * sizeof(uint32_t);
  return CUDA_SUCCESS;
}

bool Session::Capture(const OpHandler& handler, const ipc::RecordView& record, const Call& call,
                      CUresult* result) {
  const auto op = static_cast<Op>(record.header.opcode);
  // Calls about a capture, or that ask a capturing stream about itself, run as usual.
  if (op == Op::kStreamBeginCapture || op == Op::kStreamEndCapture || op == Op::kStreamCaptureInfo ||
      op == Op::kStreamGetInfo) {
    return false;
  }
  // Synchronising the device waits for work a capture holds back: refused, as the driver does.
  // So is resetting it, which synchronises first and would destroy the capturing streams.
  if (op == Op::kDeviceSynchronize || op == Op::kDeviceReset) {
    for (auto& [id, capture] : captures_)
      *result = InvalidateCapture(id, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, handler.name);
    return true;
  }
  // The virtual stream the record's work goes to, for the records that name one.
  uint64_t stream = 0;
  const bool names_stream =
      handler.placement == Placement::kHandleDevice || handler.placement == Placement::kNcclStream;
  if (!names_stream || record.header.length < handler.handle_offset + sizeof(uint64_t)) return false;
  std::memcpy(&stream, record.payload + handler.handle_offset, sizeof(stream));
  if (handler.library == Library::kCublas) {
    // A cuBLAS call's stream is its handle's.
    auto blas = blas_.find(stream);
    stream = blas == blas_.end() ? 0 : blas->second.stream;
    if (op == Op::kBlasDestroy || op == Op::kBlasSetStream || op == Op::kBlasSetMathMode) return false;
  }
  if (op == Op::kEventSynchronize || op == Op::kEventQuery) {
    // An event recorded in a capture has no work to wait for outside its graph.
    auto ev = captured_events_.find(stream);
    if (ev == captured_events_.end()) return false;
    *result = InvalidateCapture(ev->second.capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, handler.name);
    return true;
  }
  if (op == Op::kStreamWaitEvent) {
    const auto args = Args<ipc::StreamEventArgs>(record);
    auto ev = captured_events_.find(args.event);
    auto waiting = capturing_.find(args.stream);
    if (ev == captured_events_.end()) {
      if (waiting == capturing_.end()) return false;
      // A capture waits only for work of its own graph.
      *result = InvalidateCapture(waiting->second.capture, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, handler.name);
      return true;
    }
    if (LegacyStream(args.stream) || !streams_.contains(args.stream) ||
        graphs_.at(captures_.at(ev->second.capture).graph).device != streams_.at(args.stream).device) {
      *result = InvalidateCapture(ev->second.capture, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, handler.name);
      return true;
    }
    if (waiting == capturing_.end()) {
      // The stream joins the capture (a fork): its next work depends on the event's.
      capturing_[args.stream] = CapturingStream{.capture = ev->second.capture, .depends = ev->second.depends};
    } else if (waiting->second.capture != ev->second.capture) {
      *result = InvalidateCapture(waiting->second.capture, CUDA_ERROR_STREAM_CAPTURE_MERGE, handler.name);
      return true;
    } else {
      for (uint32_t n : ev->second.depends) {
        std::vector<uint32_t>& deps = waiting->second.depends;
        if (std::find(deps.begin(), deps.end(), n) == deps.end()) deps.push_back(n);
      }
    }
    *result = CUDA_SUCCESS;
    return true;
  }
  // An event recorded again outside the capture stands for that work from now on.
  if (op == Op::kEventRecord && !capturing_.contains(stream)) {
    captured_events_.erase(Args<ipc::StreamEventArgs>(record).event);
  }
  if (LegacyStream(stream)) {
    // Work on the legacy stream would wait for the capturing blocking streams' work, which does
    // not run: an implicit dependency the driver refuses.
    for (auto& [vid, s] : capturing_) {
      // Every capturing stream is the session's (what destroys a stream is refused during a
      // capture); one that is not reads as blocking, refusing the work rather than ending phosd.
      auto captured = streams_.find(vid);
      if (captured == streams_.end() || (captured->second.flags & CU_STREAM_NON_BLOCKING) == 0) {
        *result = InvalidateCapture(s.capture, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, handler.name);
        return true;
      }
    }
    return false;
  }
  auto capturing = capturing_.find(stream);
  if (capturing == capturing_.end()) return false;
  CapturingStream& s = capturing->second;
  GraphRecord& graph = graphs_.at(captures_.at(s.capture).graph);
  GraphNodeRecord node;
  node.depends = s.depends;
  ipc::GraphNode& p = node.params;
  switch (op) {
    case Op::kLaunch: {
      p.type = CU_GRAPH_NODE_TYPE_KERNEL;
      p.launch = Args<ipc::LaunchArgs>(record);
      p.launch.stream = 0;
      node.kernel_params.assign(call.tail.begin(), call.tail.end());
      break;
    }
    case Op::kMemcpyDtoD: {
      const auto c = Args<ipc::CopyArgs>(record);
      p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
      p.dst = c.dst, p.src = c.src, p.width = c.bytes, p.height = 1, p.dst_pitch = p.src_pitch = c.bytes;
      if (c.bytes == 0) p.type = CU_GRAPH_NODE_TYPE_EMPTY;
      break;
    }
    case Op::kMemcpy2D: {
      const auto c = Args<ipc::Copy2DArgs>(record);
      if (c.kind != static_cast<uint32_t>(ipc::Copy2DKind::kDeviceToDevice)) {
        *result = InvalidateCapture(s.capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, handler.name);
        return true;
      }
      p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
      p.dst = c.dst, p.dst_pitch = c.dst_pitch, p.src = c.src, p.src_pitch = c.src_pitch;
      p.width = c.width, p.height = c.height;
      break;
    }
    case Op::kMemset: {
      const auto m = Args<ipc::MemsetArgs>(record);
      p.type = m.bytes == 0 ? CU_GRAPH_NODE_TYPE_EMPTY : CU_GRAPH_NODE_TYPE_MEMSET;
      p.dst = m.dst, p.value = m.value & 0xff, p.element_size = 1, p.width = m.bytes, p.height = 1;
      p.dst_pitch = m.bytes;
      break;
    }
    case Op::kMemset2D: {
      const auto m = Args<ipc::Memset2DArgs>(record);
      p.type = CU_GRAPH_NODE_TYPE_MEMSET;
      p.dst = m.dst, p.dst_pitch = m.pitch, p.value = m.value & 0xff, p.element_size = 1;
      p.width = m.width, p.height = m.height;
      break;
    }
    case Op::kLaunchHostFunc: {
      // A host node: the frontend keeps the function and takes a slot for it at each launch. A
      // host function that already has a slot would run now, outside the graph.
      if (Args<ipc::HostFnArgs>(record).slot != ipc::kCapturedHostFnSlot) {
        *result = InvalidateCapture(s.capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, handler.name);
        return true;
      }
      p.type = CU_GRAPH_NODE_TYPE_HOST;
      break;
    }
    case Op::kEventRecord: {
      // No node: the event stands for the stream's work so far inside the capture.
      const auto e = Args<ipc::StreamEventArgs>(record);
      auto event = events_.find(e.event);
      if (event == events_.end() || event->second.device != graph.device) {
        *result = CUDA_ERROR_INVALID_HANDLE;
        return true;
      }
      captured_events_[e.event] = CapturingStream{.capture = s.capture, .depends = s.depends};
      *result = CUDA_SUCCESS;
      return true;
    }
    default:
      // Copies with a host side, launches with attributes, cuBLAS and NCCL work,
      // frees, queries and synchronisations of the stream cannot be captured here.
      *result = InvalidateCapture(s.capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, handler.name);
      return true;
  }
  uint32_t index = 0;
  if (CUresult r = AppendGraphNode(graph, std::move(node), &index); r != CUDA_SUCCESS) {
    *result = InvalidateCapture(s.capture, r, handler.name);
    return true;
  }
  s.depends = {index};
  if (op == Op::kLaunchHostFunc) call.Reply(index);
  *result = CUDA_SUCCESS;
  return true;
}

}  // namespace phos::runtime
