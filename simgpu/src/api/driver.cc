#include "api/driver.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "blas/blas_handle.h"
#include "blas/lt.h"
#include "nccl/comm.h"
#include "phos/base/log.h"

namespace phos::sim {

std::atomic<Driver*> Driver::instance_{nullptr};

namespace {

std::mutex g_init_mu;
bool g_init_done = false;
CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;
bool g_configured = false;
SimConfig g_configured_config;

// A stable UUID per (profile, ordinal): the same simulated device has the same identity in
// every process, as a physical GPU does.
CUuuid MakeUuid(std::string_view profile, int ordinal) {
  CUuuid uuid{};
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
  for (char c : profile) mix(static_cast<unsigned char>(c));
  mix(static_cast<unsigned char>(ordinal));
  for (int i = 0; i < 16; ++i) {
    mix(static_cast<unsigned char>(i));
    uuid.bytes[i] = static_cast<char>(h >> 56);
  }
  uuid.bytes[6] = static_cast<char>((uuid.bytes[6] & 0x0f) | 0x40);  // RFC 4122 version 4 layout
  return uuid;
}

// A library's view of a context: it shares the context object's ownership but sees only its
// execution state.
ContextRef RefOf(CUcontext handle, const std::shared_ptr<Context>& ctx) {
  ContextRef ref;
  ref.handle = handle;
  ref.id = ctx->id;
  ref.device = ctx->device->ordinal;
  ref.profile = ctx->device->profile;
  ref.exec = std::shared_ptr<ExecContext>(ctx, ctx->exec.get());
  return ref;
}

}  // namespace

// Never run for the process's driver (it lives until exit), only for one whose Start failed.
Driver::~Driver() = default;

CUresult Driver::Configure(const SimConfig& config) {
  std::lock_guard lock(g_init_mu);
  if (g_init_done) return CUDA_ERROR_ILLEGAL_STATE;
  g_configured_config = config;
  g_configured = true;
  return CUDA_SUCCESS;
}

CUresult Driver::Init() {
  std::lock_guard lock(g_init_mu);
  if (g_init_done) return g_init_result;
  g_init_done = true;

  SimConfig config = g_configured_config;
  std::string error;
  if (!g_configured && !ConfigFromEnvironment(&config, &error)) {
    PHOS_LOG(Error, "simgpu", "cuInit: {}", error);
    g_init_result = CUDA_ERROR_INVALID_VALUE;
    return g_init_result;
  }
  auto driver = std::unique_ptr<Driver>(new Driver());
  g_init_result = driver->Start(config);
  if (g_init_result == CUDA_SUCCESS) {
    // The driver lives until the process exits, as NVIDIA's does: handles may be used from
    // static destructors and detached threads.
    instance_.store(driver.release(), std::memory_order_release);
  }
  return g_init_result;
}

CUresult Driver::Start(const SimConfig& config) {
  config_ = config;
  clock_ = std::make_unique<ModelClock>(config.time_scale);

  DeviceMemoryOptions memory_options;
  memory_options.device_capacity.assign(config.device_count, config.device_memory());
  // No more than the devices hold.
  memory_options.prefault_bytes = std::min<uint64_t>(config.prefault_bytes, config.device_memory() * config.device_count);
  memory_options.retained_bytes = std::max(memory_options.retained_bytes, memory_options.prefault_bytes);
  if (CUresult r = DeviceMemory::Create(memory_options, &memory_); r != CUDA_SUCCESS) {
    PHOS_LOG(Error, "simgpu", "cuInit: cannot reserve the device address space");
    return r;
  }
  host_memory_ = std::make_unique<HostMemory>();

  for (int i = 0; i < config.device_count; ++i) {
    auto device = std::make_unique<Device>();
    device->ordinal = i;
    device->profile = config.profile;
    device->capacity = config.device_memory();
    device->uuid = MakeUuid(config.profile->name, i);
    device->executor =
        std::make_unique<Executor>(i, *clock_, ExecutorOptions{.kernel_timeout_seconds = config.kernel_timeout_seconds});
    devices_.push_back(std::move(device));
  }
  blas_handles_ = std::make_unique<blas::HandleRegistry>(*this);
  blas_lt_ = std::make_unique<blas::LtRegistry>(*this);
  nccl_comms_ = std::make_unique<nccl::CommRegistry>(*this);
  PHOS_LOG(Info, "simgpu", "simgpu ready: {}; device memory at {:#x}", config.ToString(), memory_->base());
  return CUDA_SUCCESS;
}

CUresult Driver::CreateContext(Device* device, bool primary, CUcontext* out) {
  auto ctx = std::make_shared<Context>();
  ctx->id = ++next_context_id_;
  ctx->device = device;
  ctx->primary = primary;
  ctx->exec = device->executor->CreateContext();
  // Creating a context costs what it costs on the modelled device; this is the cost a pool of
  // contexts takes off the invocation path (docs/design.md D11).
  clock_->Pay(device->profile->context_create_s);
  *out = contexts.Insert(std::move(ctx));
  return CUDA_SUCCESS;
}

CUresult Driver::DestroyContext(CUcontext handle) {
  std::shared_ptr<Context> ctx = contexts.Remove(handle);
  if (!ctx) return contexts.WasIssued(handle) ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_CONTEXT;

  // CUDA destroys a context only after its work completed; errors of that work die with it.
  (void)ctx->exec->Synchronize();
  const Context* raw = ctx.get();
  for (CUfunction f : functions.Select([raw](const FunctionObject& o) { return o.ctx.get() == raw; })) {
    functions.Remove(f);
  }
  for (CUmodule m : modules.Select([raw](const ModuleObject& o) { return o.ctx.get() == raw; })) {
    modules.Remove(m);
  }
  for (CUevent e : events.Select([raw](const EventObject& o) { return o.ctx.get() == raw; })) {
    events.Remove(e);
  }
  for (CUstream s : streams.Select([raw](const StreamObject& o) { return o.ctx.get() == raw; })) {
    streams.Remove(s);
  }
  memory_->FreeAllOwnedBy(ctx->id);

  auto& stack = ThreadContextStack();
  stack.erase(std::remove(stack.begin(), stack.end(), handle), stack.end());
  return CUDA_SUCCESS;
}

CUresult Driver::RetainPrimary(Device* device, CUcontext* out) {
  std::lock_guard lock(device->primary_mu);
  if (device->primary_refs == 0) {
    if (CUresult r = CreateContext(device, /*primary=*/true, &device->primary); r != CUDA_SUCCESS) return r;
  }
  ++device->primary_refs;
  *out = device->primary;
  return CUDA_SUCCESS;
}

CUresult Driver::ReleasePrimary(Device* device) {
  std::lock_guard lock(device->primary_mu);
  if (device->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--device->primary_refs == 0) {
    CUresult r = DestroyContext(device->primary);
    device->primary = nullptr;
    return r;
  }
  return CUDA_SUCCESS;
}

CUresult Driver::FindStream(const ExecContext& exec, CUstream handle, std::shared_ptr<Stream>* out) const {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    // Departure (simgpu/README.md): the per-thread default stream is served by the legacy NULL
    // stream, which synchronises more, never less.
    *out = exec.null_stream();
    return CUDA_SUCCESS;
  }
  std::shared_ptr<StreamObject> s = streams.Find(handle);
  if (!s || s->ctx->exec.get() != &exec) return CUDA_ERROR_INVALID_HANDLE;
  *out = s->stream;
  return CUDA_SUCCESS;
}

bool Driver::HasCurrentContext() const {
  return !ThreadContextStack().empty();
}

CUresult Driver::FindCurrentContext(std::shared_ptr<Context>* ctx) const {
  const auto& stack = ThreadContextStack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = contexts.Find(stack.back());
  if (!*ctx) {
    return contexts.WasIssued(stack.back()) ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_ERROR_INVALID_CONTEXT;
  }
  return (*ctx)->exec->sticky_error();
}

CUresult Driver::CurrentContext(ContextRef* out) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = FindCurrentContext(&ctx); r != CUDA_SUCCESS) return r;
  *out = RefOf(ThreadContextStack().back(), ctx);
  return CUDA_SUCCESS;
}

bool Driver::IsLive(const ContextRef& ctx) const {
  std::shared_ptr<Context> found = contexts.Find(ctx.handle);
  return found && found->exec.get() == ctx.exec.get();
}

CUresult Driver::RetainPrimaryContext(int ordinal, ContextRef* out) {
  Device* d = device(ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext handle = nullptr;
  if (CUresult r = RetainPrimary(d, &handle); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Context> ctx = contexts.Find(handle);
  if (!ctx) {
    // A retained primary context cannot be destroyed (cuCtxDestroy refuses it); a failed lookup
    // would be a driver bug, reported rather than dereferenced.
    (void)ReleasePrimary(d);
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *out = RefOf(handle, ctx);
  return CUDA_SUCCESS;
}

CUresult Driver::ReleasePrimaryContext(int ordinal) {
  Device* d = device(ordinal);
  return d == nullptr ? CUDA_ERROR_INVALID_DEVICE : ReleasePrimary(d);
}

CUresult Driver::ResolveStream(const ContextRef& ctx, CUstream handle, std::shared_ptr<Stream>* out) {
  return FindStream(*ctx.exec, handle, out);
}

bool Driver::CheckRange(CUdeviceptr ptr, uint64_t bytes, Access needed, int* device) const {
  return memory_->CheckRange(ptr, bytes, needed, device);
}

void Driver::PayModelledCost(double device_seconds) {
  clock_->Pay(device_seconds);
}

std::vector<CUcontext>& ThreadContextStack() {
  thread_local std::vector<CUcontext> stack;
  return stack;
}

CUresult RequireDriver(Driver** out) {
  *out = Driver::Get();
  return *out ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult RequireContext(Driver** driver, std::shared_ptr<Context>* ctx) {
  if (CUresult r = RequireDriver(driver); r != CUDA_SUCCESS) return r;
  return (*driver)->FindCurrentContext(ctx);
}

CUresult ResolveStream(const std::shared_ptr<Context>& ctx, CUstream handle, std::shared_ptr<Stream>* out) {
  return Driver::Get()->FindStream(*ctx->exec, handle, out);
}

CUresult RequireStream(CUstream handle, Driver** driver, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream) {
  if (CUresult r = RequireContext(driver, ctx); r != CUDA_SUCCESS) return r;
  return ResolveStream(*ctx, handle, stream);
}

}  // namespace phos::sim
