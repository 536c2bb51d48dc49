#include "phos/driver/context_scope.h"
#include "phos/runtime/snapshot_restore.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "phos/driver/cuda_check.h"
#include "phos/base/log.h"
#include "phos/runtime/va_allocator.h"

namespace phos::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

uint64_t AlignDown(uint64_t x, uint64_t a) { return x / a * a; }
uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string SnapshotName(const store::Manifest& m) {
  return fmt::format("{} v{}", m.function, m.version);
}

std::string BufferName(const store::Manifest& m, size_t i) {
  const store::Buffer& b = m.buffers[i];
  return b.label.empty() ? fmt::format("buffer {} at {:#x}", i, b.device_address)
                         : fmt::format("buffer {} '{}' at {:#x}", i, b.label, b.device_address);
}

}  // namespace

Result<CUmodule> LoadSnapshotModule(driver::DriverTable* d, const store::Manifest& m, int index,
                                    store::ChunkSource& source, uint64_t* bytes) {
  if (index < 0 || static_cast<size_t>(index) >= m.modules.size()) {
    return Status::InvalidArgument(
        fmt::format("module {}: the snapshot has {} modules", index, m.modules.size()));
  }
  const store::Module& mod = m.modules[static_cast<size_t>(index)];
  std::string image(mod.size, '\0');
  uint64_t offset = 0;
  for (size_t c = 0; c < mod.chunks.size(); ++c) {
    const store::ChunkRef& ref = mod.chunks[c];
    if (offset + ref.size > image.size()) {
      return Status::Corruption(
          fmt::format("module {}: chunks add up to more than its {} bytes", index, mod.size));
    }
    PHOS_RETURN_IF_ERROR(source.ReadChunk(ref, image.data() + offset)
                             .WithContext(fmt::format("module {} chunk {}", index, c)));
    offset += ref.size;
  }
  if (offset != image.size()) {
    return Status::Corruption(
        fmt::format("module {}: chunks hold {} of its {} bytes", index, offset, mod.size));
  }
  // The chunks verified one by one; the whole-image hash also catches a manifest whose chunk
  // list was put together wrongly.
  if (store::ChunkId::Of(image.data(), image.size()) != mod.content_hash) {
    return Status::Corruption(fmt::format("module {}: image does not match its content hash", index));
  }
  CUmodule module = nullptr;
  PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuModuleLoadData(&module, image.data()),
                                        fmt::format("module {} ({}): cuModuleLoadData", index, mod.kind),
                                        d->error_text()));
  if (Status s = WriteModuleGlobals(d, mod, module); !s.ok()) {
    d->cuModuleUnload(module);
    return s.WithContext(fmt::format("module {}", index));
  }
  *bytes += image.size();
  return module;
}

Status WriteModuleGlobals(driver::DriverTable* d, const store::Module& module, CUmodule loaded) {
  for (const store::ModuleGlobal& g : module.globals) {
    CUdeviceptr address = 0;
    size_t size = 0;
    CUresult r = d->cuModuleGetGlobal(&address, &size, loaded, g.name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND || (r == CUDA_SUCCESS && size != g.contents.size())) {
      return Status::Corruption(fmt::format("global '{}' of {} bytes is not one of the module's", g.name, g.contents.size()));
    }
    PHOS_RETURN_IF_ERROR(driver::CuStatus(r, fmt::format("global '{}': cuModuleGetGlobal", g.name), d->error_text()));
    PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuMemcpyHtoD(address, g.contents.data(), size),
                                          fmt::format("global '{}': cuMemcpyHtoD", g.name), d->error_text()));
  }
  return Status::Ok();
}

Status VmmDeviceMapper::EnsureGranularity() {
  if (granularity_ != 0) return Status::Ok();
  PHOS_ASSIGN_OR_RETURN(granularity_, DeviceMemoryGranularity(*driver_, device_, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return Status::Ok();
}

Status VmmDeviceMapper::MapAt(CUdeviceptr address, uint64_t size) {
  if (size == 0) return Status::InvalidArgument(fmt::format("map at {:#x}: size 0", address));
  PHOS_RETURN_IF_ERROR(EnsureGranularity());
  const uint64_t end = AlignUp(address + size, granularity_);
  uint64_t at = AlignDown(address, granularity_);
  while (at < end) {
    // Skip granules an earlier range of this mapper already covers.
    auto next = mapped_.upper_bound(at);
    if (next != mapped_.begin()) {
      const VmmMapping& prev = std::prev(next)->second;
      if (at < prev.base + prev.bytes) {
        at = prev.base + prev.bytes;
        continue;
      }
    }
    const uint64_t run_end = next == mapped_.end() ? end : std::min<uint64_t>(end, next->first);
    PHOS_RETURN_IF_ERROR(MapSpan(at, run_end - at));
    at = run_end;
  }
  return Status::Ok();
}

Status VmmDeviceMapper::MapSpan(CUdeviceptr base, uint64_t bytes) {
  const driver::CuErrorText& text = driver_->error_text();
  CUdeviceptr got = 0;
  const CUresult reserved = driver_->cuMemAddressReserve(&got, bytes, 0, base, 0);
  if (reserved != CUDA_SUCCESS || got != base) {
    if (reserved == CUDA_SUCCESS) driver_->cuMemAddressFree(got, bytes);
    const Status why = reserved == CUDA_SUCCESS ? Status::Ok() : driver::CuStatus(reserved, "cuMemAddressReserve", text);
    return Status::AlreadyExists(fmt::format("device range [{:#x}, {:#x}) is not free{}", base, base + bytes,
                                             why.ok() ? std::string(" (the driver offered another address)")
                                                      : ": " + why.message()));
  }
  const CUmemAllocationProp prop = DeviceMemoryProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  Status s = driver::CuStatus(driver_->cuMemCreate(&handle, bytes, &prop, 0), "cuMemCreate", text);
  if (s.ok()) {
    s = driver::CuStatus(driver_->cuMemMap(base, bytes, 0, handle, 0), "cuMemMap", text);
    if (s.ok()) {
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      s = driver::CuStatus(driver_->cuMemSetAccess(base, bytes, &access, 1), "cuMemSetAccess", text);
      if (!s.ok()) driver_->cuMemUnmap(base, bytes);
    }
    if (!s.ok()) driver_->cuMemRelease(handle);
  }
  if (!s.ok()) {
    driver_->cuMemAddressFree(base, bytes);
    return s.WithContext(fmt::format("map [{:#x}, {:#x})", base, base + bytes));
  }
  mapped_[base] = {base, bytes, handle};
  return Status::Ok();
}

void VmmDeviceMapper::UnmapAll() {
  for (const auto& [base, m] : mapped_) {
    driver_->cuMemUnmap(m.base, m.bytes);
    driver_->cuMemRelease(m.handle);
    driver_->cuMemAddressFree(m.base, m.bytes);
  }
  mapped_.clear();
}

std::vector<VmmMapping> VmmDeviceMapper::mappings() const {
  std::vector<VmmMapping> out;
  out.reserve(mapped_.size());
  for (const auto& [base, m] : mapped_) out.push_back(m);
  return out;
}

Result<RestoreReport> RestoreStopTheWorld(const RestoreRequest& request, const store::Manifest& manifest,
                                          store::ChunkSource& source) {
  if (request.driver == nullptr || request.context == nullptr || request.mapper == nullptr ||
      request.pool == nullptr) {
    return Status::InvalidArgument("restore: the request needs a driver, a context, a mapper and a reader pool");
  }
  driver::DriverTable* d = request.driver;
  const driver::CuErrorText& text = d->error_text();
  const std::string name = SnapshotName(manifest);
  driver::ContextScope scope(*d, request.context);
  if (!scope.ok()) return Status::DeviceError(fmt::format("restore {}: cuCtxPushCurrent failed", name));

  RestoreReport report;
  // Whatever fails from here on, nothing this restore mapped or loaded survives it.
  auto fail = [&](Status why) -> Status {
    for (CUmodule m : report.modules) d->cuModuleUnload(m);
    request.mapper->UnmapAll();
    PHOS_LOG(Warn, "restore", "{}", why.ToString());
    return why;
  };

  auto start = Clock::now();
  for (size_t i = 0; i < manifest.buffers.size(); ++i) {
    const store::Buffer& b = manifest.buffers[i];
    Status mapped = request.mapper->MapAt(b.device_address, b.size);
    if (!mapped.ok()) return fail(mapped.WithContext(fmt::format("restore {}: {}", name, BufferName(manifest, i))));
  }
  report.map_ms = MsSince(start);
  report.buffers = manifest.buffers.size();

  start = Clock::now();
  store::ReaderOptions options;
  options.snapshot_name = name;
  options.staging_bytes = request.staging_bytes;
  options.staging_allocator = request.staging_allocator;
  // Called on the pool's I/O threads, which have no context current. The copy is synchronised
  // before returning: the staging buffer or tier slot is reused as soon as this returns.
  auto deliver = [&](const store::ChunkDelivery& c) -> Status {
    driver::ContextScope io_scope(*d, request.context);
    if (!io_scope.ok()) return Status::DeviceError("cuCtxPushCurrent on an I/O thread failed");
    const CUdeviceptr dst = manifest.buffers[c.buffer_index].device_address + c.offset;
    PHOS_RETURN_IF_ERROR(driver::CuStatus(d->cuMemcpyHtoDAsync(dst, c.data, c.size, nullptr), "cuMemcpyHtoDAsync", text));
    return driver::CuStatus(d->cuStreamSynchronize(nullptr), "cuStreamSynchronize", text);
  };
  auto reader = store::SnapshotReader::Start(request.pool, manifest, &source, options, deliver);
  if (!reader.ok()) return fail(reader.status().WithContext(fmt::format("restore {}", name)));
  Status copied = (*reader)->Wait();
  report.bytes = (*reader)->delivered_bytes();
  reader->reset();
  if (!copied.ok()) return fail(copied.WithContext("restore"));
  report.copy_ms = MsSince(start);

  start = Clock::now();
  for (size_t i = 0; i < manifest.modules.size(); ++i) {
    auto module = LoadSnapshotModule(d, manifest, static_cast<int>(i), source, &report.module_bytes);
    if (!module.ok()) return fail(module.status().WithContext(fmt::format("restore {}", name)));
    report.modules.push_back(*module);
  }
  report.modules_ms = MsSince(start);
  PHOS_LOG(Info, "restore", "{}: {} buffers, {} bytes (map {:.1f} ms, copy {:.1f} ms), {} modules ({:.1f} ms)", name,
           report.buffers, report.bytes, report.map_ms, report.copy_ms, report.modules.size(), report.modules_ms);
  return report;
}

}  // namespace phos::runtime
