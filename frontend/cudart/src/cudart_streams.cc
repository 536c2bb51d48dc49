// Streams with priorities, what a stream says about itself, and the per-thread default stream:
// cudaStreamPerThread anywhere, and stream 0 in the _ptds / _ptsz entry points (cudart_ptds.cc).
// Each thread's default stream is a stream of the session like any other (so it is captured into
// a snapshot and checked by phosd like any other), made on the thread's first use of it on a
// device and destroyed after the thread exits.
#include <array>
#include <atomic>
#include <unordered_map>

#include "cudart_internal.h"
#include "phos/frontend/remote_call.h"

using phos::frontend::Client;
using phos::frontend::Return;
using phos::frontend::StreamId;
namespace ipc = phos::ipc;

namespace phos::frontend {
namespace {

// Per device, how many times cudaDeviceReset destroyed its streams, the threads' default streams
// among them. Ordinals past the array have no resets counted: no node has that many devices.
constexpr int kCountedDevices = 256;
std::array<std::atomic<uint64_t>, kCountedDevices> g_resets{};

uint64_t ResetsOf(int device) {
  return device >= 0 && device < kCountedDevices ? g_resets[device].load() : 0;
}

// The calling thread's default streams, by device.
struct ThreadStreams {
  struct Stream {
    uint64_t vid;
    uint64_t resets;  // ResetsOf(device) when it was made: a later reset destroyed it
  };
  uint64_t generation = 0;  // the session their ids belong to (Client::session_generation)
  std::unordered_map<int, Stream> by_device;

  // The next call of any thread destroys them: an exiting thread must not wait for the client's
  // mutex, which another thread may hold across a synchronous call.
  ~ThreadStreams() {
    if (by_device.empty()) return;
    Client& c = Client::Get();
    if (c.session_generation() != generation) return;
    for (const auto& [device, stream] : by_device) {
      if (stream.resets == ResetsOf(device)) c.DestroyStreamLater(stream.vid);
    }
  }
};

thread_local ThreadStreams t_streams;

}  // namespace

void ForgetDefaultStreams(int device) {
  if (device >= 0 && device < kCountedDevices) g_resets[device].fetch_add(1);
}

CUresult StreamId(cudaStream_t stream, uint64_t* out) {
  if (stream != cudaStreamPerThread) {
    *out = reinterpret_cast<uintptr_t>(stream);
    return CUDA_SUCCESS;
  }
  Client& c = Client::Get();
  if (const uint64_t generation = c.session_generation(); t_streams.generation != generation) {
    t_streams.by_device.clear();  // a forked child's: they named streams of the template's session
    t_streams.generation = generation;
  }
  const int device = ThreadDevice();
  const uint64_t resets = ResetsOf(device);
  if (auto it = t_streams.by_device.find(device);
      it != t_streams.by_device.end() && it->second.resets == resets) {
    *out = it->second.vid;
    return CUDA_SUCCESS;
  }
  // Blocking, as CUDA's per-thread default stream is: it does not wait for the session's other
  // streams, but it does wait for the legacy stream's work, and the legacy stream for its. The
  // pending asynchronous error is left for the call that needed the stream to report.
  ipc::FlagsArgs a{cudaStreamDefault, 0};
  uint64_t vid = 0;
  CUresult r = c.Call(ipc::Op::kStreamCreate, &a, sizeof(a), nullptr, 0, true, &vid, sizeof(vid), nullptr,
                      /*take_async_error=*/false);
  if (r != CUDA_SUCCESS) return r;
  t_streams.by_device[device] = {vid, resets};
  *out = vid;
  return CUDA_SUCCESS;
}

}  // namespace phos::frontend

namespace {

CUresult StreamInfoOf(cudaStream_t stream, ipc::StreamInfo* info) {
  ipc::HandleArgs a{0};
  if (CUresult r = StreamId(stream, &a.handle); r != CUDA_SUCCESS) return r;
  return Client::Get().Call(ipc::Op::kStreamGetInfo, &a, sizeof(a), nullptr, 0, true, info, sizeof(*info));
}

}  // namespace

extern "C" {

// phosd clamps the priority to the device's range, as the driver does, and checks the flags.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamCreateArgs a{flags, priority};
  uint64_t vid = 0;
  CUresult r = Client::Get().Call(ipc::Op::kStreamCreateWithPriority, &a, sizeof(a), nullptr, 0, true, &vid,
                                  sizeof(vid));
  *stream = reinterpret_cast<cudaStream_t>(vid);
  return Return(r);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  ipc::StreamPriorityRange range{};
  CUresult r =
      Client::Get().Call(ipc::Op::kStreamPriorityRange, nullptr, 0, nullptr, 0, true, &range, sizeof(range));
  if (r != CUDA_SUCCESS) return Return(r);
  if (leastPriority != nullptr) *leastPriority = range.least;
  if (greatestPriority != nullptr) *greatestPriority = range.greatest;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (priority == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamInfo info{};
  if (CUresult r = StreamInfoOf(stream, &info); r != CUDA_SUCCESS) return Return(r);
  *priority = info.priority;
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (flags == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamInfo info{};
  if (CUresult r = StreamInfoOf(stream, &info); r != CUDA_SUCCESS) return Return(r);
  *flags = info.flags;
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamInfo info{};
  if (CUresult r = StreamInfoOf(stream, &info); r != CUDA_SUCCESS) return Return(r);
  *device = info.device;
  return cudaSuccess;
}

// The id is phosd's handle of the stream: unique in the session and the same after a restore.
cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  if (id == nullptr) return Return(cudaErrorInvalidValue);
  ipc::StreamInfo info{};
  if (CUresult r = StreamInfoOf(stream, &info); r != CUDA_SUCCESS) return Return(r);
  *id = info.id;
  return cudaSuccess;
}

}  // extern "C"

extern "C" int __phosStreamId(const void* stream, uint64_t* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return StreamId(static_cast<cudaStream_t>(const_cast<void*>(stream)), id);
}
