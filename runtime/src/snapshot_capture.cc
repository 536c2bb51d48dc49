#include "phos/driver/context_scope.h"
#include "phos/runtime/snapshot_capture.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "phos/driver/cuda_check.h"
#include "phos/base/log.h"

namespace phos::runtime {
namespace {

std::string BufferName(size_t index, const CaptureBuffer& buffer) {
  return buffer.label.empty() ? fmt::format("buffer {} at {:#x}", index, buffer.address)
                              : fmt::format("buffer {} '{}' at {:#x}", index, buffer.label, buffer.address);
}

Status Validate(const CaptureRequest& request) {
  if (request.driver == nullptr) return Status::InvalidArgument("capture: no driver table");
  if (request.context == nullptr) return Status::InvalidArgument("capture: no context");
  if (request.function.empty()) return Status::InvalidArgument("capture: no function name");
  std::vector<std::pair<CUdeviceptr, size_t>> by_address;
  for (size_t i = 0; i < request.buffers.size(); ++i) {
    const CaptureBuffer& b = request.buffers[i];
    if (b.size == 0) return Status::InvalidArgument(fmt::format("capture: {} has size 0", BufferName(i, b)));
    if (b.address + b.size < b.address) {
      return Status::InvalidArgument(fmt::format("capture: {} wraps the address space", BufferName(i, b)));
    }
    by_address.emplace_back(b.address, i);
  }
  std::sort(by_address.begin(), by_address.end());
  for (size_t k = 1; k < by_address.size(); ++k) {
    const CaptureBuffer& prev = request.buffers[by_address[k - 1].second];
    const CaptureBuffer& next = request.buffers[by_address[k].second];
    if (prev.address + prev.size > next.address) {
      return Status::InvalidArgument(fmt::format("capture: {} overlaps {}", BufferName(by_address[k - 1].second, prev),
                                                 BufferName(by_address[k].second, next)));
    }
  }
  uint64_t global_bytes = 0;
  for (size_t i = 0; i < request.modules.size(); ++i) {
    const CaptureModule& m = request.modules[i];
    if (m.image.empty()) return Status::InvalidArgument(fmt::format("capture: module {} has no bytes", i));
    if (m.kind != "simgpu" && m.kind != "fatbin") {
      return Status::InvalidArgument(
          fmt::format("capture: module {} has kind '{}' (expected \"simgpu\" or \"fatbin\")", i, m.kind));
    }
    for (const CaptureGlobal& g : m.globals) {
      if (g.name.empty() || g.size == 0) {
        return Status::InvalidArgument(fmt::format("capture: module {} has a global without a name or bytes", i));
      }
      if (!g.contents.empty() && g.contents.size() != g.size) {
        return Status::InvalidArgument(fmt::format("capture: module {} global '{}' holds {} bytes read, not {}", i,
                                                   g.name, g.contents.size(), g.size));
      }
      global_bytes += g.size;
    }
  }
  if (global_bytes > store::kMaxGlobalBytes) {
    return Status::FailedPrecondition(fmt::format(
        "capture: the module globals the function named hold {} bytes, more than the {} a snapshot keeps", global_bytes,
        store::kMaxGlobalBytes));
  }
  return Status::Ok();
}

// InvalidArgument unless [address, address + size) lies inside one device allocation.
Status CheckDeviceRange(driver::DriverTable* d, size_t index, const CaptureBuffer& b) {
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = d->cuMemGetAddressRange(&base, &size, b.address);
  if (r != CUDA_SUCCESS) {
    return Status::InvalidArgument(fmt::format("{} is not device memory of the context ({})", BufferName(index, b),
                                               driver::CuStatus(r, "cuMemGetAddressRange", d->error_text()).message()));
  }
  if (b.address + b.size > base + size) {
    return Status::InvalidArgument(fmt::format("{} ({} bytes) runs past the end of its allocation [{:#x}, {:#x})",
                                               BufferName(index, b), b.size, base, base + size));
  }
  return Status::Ok();
}
// One chunk of pinned host memory reused for every device-to-host copy of the capture.
class PinnedStaging {
 public:
  PinnedStaging(driver::DriverTable* driver, size_t bytes) : driver_(driver), bytes_(bytes) {}
  ~PinnedStaging() {
    if (data_ != nullptr) driver_->cuMemFreeHost(data_);
  }
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  Status Allocate() {
    return driver::CuStatus(driver_->cuMemHostAlloc(&data_, bytes_, 0), "cuMemHostAlloc(staging)", driver_->error_text());
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  driver::DriverTable* driver_;
  size_t bytes_;
  void* data_ = nullptr;
};

store::Buffer BufferMeta(const CaptureBuffer& b) {
  store::Buffer meta;
  meta.device_address = b.address;
  meta.size = b.size;
  meta.alignment = b.alignment;
  meta.first_touch_rank = b.first_touch_rank;
  meta.device = b.device;
  meta.access_class = b.access_class;
  meta.label = b.label;
  return meta;
}

// Streams buffer `i` of `request` into `writer`: through request.read, or from the quiesced device
// through `staging`. The writer asks for at most one chunk at a time, so one staging chunk serves
// every read; the synchronous copy has finished with it before the writer hashes and stores it.
Status AddCapturedBuffer(const CaptureRequest& request, size_t i, PinnedStaging* staging,
                         store::SnapshotWriter& writer) {
  const CaptureBuffer& b = request.buffers[i];
  driver::DriverTable* d = request.driver;
  auto read = [&](uint64_t offset, void* dst, size_t size) -> Status {
    if (request.read) return request.read(i, offset, dst, size);
    if (staging == nullptr || size > staging->bytes()) {
      return Status::Internal(fmt::format("writer asked for {} bytes, staging holds {}", size,
                                          staging == nullptr ? 0 : staging->bytes()));
    }
    PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuMemcpyDtoH(staging->data(), b.address + offset, size),
                                          fmt::format("cuMemcpyDtoH at offset {}", offset), d->error_text()));
    std::memcpy(dst, staging->data(), size);
    return Status::Ok();
  };
  Result<int> added = writer.AddBuffer(BufferMeta(b), read);
  return added.status().WithContext(fmt::format("capture {}: {} ({} bytes)", request.function, BufferName(i, b), b.size));
}

}  // namespace

Result<Precopy> PrecopyBuffers(const CaptureRequest& request, store::Store& store) {
  PHOS_RETURN_IF_ERROR(Validate(request));
  if (!request.read) return Status::InvalidArgument("precopy: the request must say where its buffers' bytes come from");
  Precopy out;
  PHOS_ASSIGN_OR_RETURN(out.writer, store.NewWriter(request.function));
  for (size_t i = 0; i < request.buffers.size(); ++i) {
    PHOS_RETURN_IF_ERROR(AddCapturedBuffer(request, i, nullptr, *out.writer));
  }
  // Durable before the final stop: the commit after it then syncs only what the stop wrote.
  PHOS_RETURN_IF_ERROR(out.writer->Sync().WithContext("precopy"));
  out.buffers = out.writer->TakeBuffers();
  return out;
}

Result<std::unique_ptr<store::SnapshotWriter>> WriteCapture(const CaptureRequest& request, store::Store& store,
                                                            Precopy* ahead) {
  PHOS_RETURN_IF_ERROR(Validate(request));
  driver::DriverTable* d = request.driver;
  const driver::CuErrorText& text = d->error_text();

  driver::ContextScope scope(*d, request.context);
  if (!scope.ok()) return Status::DeviceError("capture: cuCtxPushCurrent of the function's context failed");
  // Quiesce: every kernel and async copy the function issued has finished before a byte is read.
  // A capture whose bytes `request.read` serves took its point already.
  if (!request.read) {
    PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuCtxSynchronize(), "capture: cuCtxSynchronize", text));
  }

  PinnedStaging staging(d, store.options().chunk_bytes);
  PHOS_RETURN_IF_ERROR(staging.Allocate().WithContext("capture"));

  std::unique_ptr<store::SnapshotWriter> writer;
  if (ahead != nullptr && ahead->writer != nullptr) {
    writer = std::move(ahead->writer);
  } else {
    PHOS_ASSIGN_OR_RETURN(writer, store.NewWriter(request.function));
  }
  store::Manifest& manifest = writer->manifest();
  manifest.device_profile = request.device_profile;
  manifest.compute_capability = request.compute_capability;
  manifest.streams = request.streams;
  manifest.events = request.events;
  manifest.library_handles = request.library_handles;
  manifest.va_base = request.va_base;
  manifest.va_bytes = request.va_bytes;
  manifest.next_handle = request.next_handle;
  manifest.gpus = request.gpus;
  manifest.nccl_comms = request.nccl_comms;
  manifest.graphs = request.graphs;
  if (request.cpu_state.has_value()) manifest.cpu_state = *request.cpu_state;

  // Every buffer must be device memory of the context before anything is read: a host or stale
  // address would otherwise be copied as if it were device memory (simgpu's copies accept any
  // address, as unified addressing does). A capture whose bytes `request.read` serves copied them
  // from the session's live buffers at its point: the session may have freed some since.
  for (size_t i = 0; i < request.buffers.size() && !request.read; ++i) {
    PHOS_RETURN_IF_ERROR(CheckDeviceRange(d, i, request.buffers[i]).WithContext("capture " + request.function));
  }

  for (size_t i = 0; i < request.buffers.size(); ++i) {
    const CaptureBuffer& b = request.buffers[i];
    if (b.precopied >= 0) {
      // Copied ahead by a soft recopy, and not written since: its chunks as they are.
      if (ahead == nullptr || static_cast<size_t>(b.precopied) >= ahead->buffers.size() ||
          ahead->buffers[b.precopied].size != b.size) {
        return Status::Internal(fmt::format("capture {}: {} names a copy made ahead that does not match it",
                                            request.function, BufferName(i, b)));
      }
      store::Buffer kept = BufferMeta(b);
      kept.chunks = ahead->buffers[b.precopied].chunks;
      PHOS_RETURN_IF_ERROR(writer->AddStoredBuffer(std::move(kept)).status().WithContext(
          fmt::format("capture {}: {}", request.function, BufferName(i, b))));
      continue;
    }
    PHOS_RETURN_IF_ERROR(AddCapturedBuffer(request, i, &staging, *writer));
  }
  for (size_t i = 0; i < request.modules.size(); ++i) {
    const CaptureModule& m = request.modules[i];
    store::Module meta;
    meta.kind = m.kind;
    for (const CaptureGlobal& g : m.globals) {
      store::ModuleGlobal& global = meta.globals.emplace_back();
      global.name = g.name;
      if (!g.contents.empty()) {
        global.contents = g.contents;
        continue;
      }
      global.contents.resize(g.size);
      PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuMemcpyDtoH(global.contents.data(), g.address, g.size),
                                            fmt::format("capture {}: module {} global '{}': cuMemcpyDtoH",
                                                        request.function, i, g.name),
                                            text));
    }
    auto added = writer->AddModule(meta, m.image.data(), m.image.size());
    if (!added.ok()) {
      return added.status().WithContext(fmt::format("capture {}: module {} ({})", request.function, i, m.kind));
    }
  }
  return writer;
}

Result<uint64_t> CommitCapture(std::unique_ptr<store::SnapshotWriter> writer, store::Store& store,
                               const std::string& function) {
  uint64_t bytes = 0;
  for (const store::Buffer& b : writer->manifest().buffers) bytes += b.size;
  const size_t buffers = writer->manifest().buffers.size();
  const size_t modules = writer->manifest().modules.size();
  auto version = store.Commit(std::move(writer));
  if (!version.ok()) return version.status().WithContext(fmt::format("capture {}: commit", function));
  PHOS_LOG(Info, "capture", "{} v{}: {} buffers ({} bytes), {} modules committed", function, *version, buffers, bytes,
           modules);
  return *version;
}

Result<uint64_t> CaptureGpuState(const CaptureRequest& request, store::Store& store) {
  PHOS_ASSIGN_OR_RETURN(std::unique_ptr<store::SnapshotWriter> writer, WriteCapture(request, store));
  return CommitCapture(std::move(writer), store, request.function);
}

}  // namespace phos::runtime
