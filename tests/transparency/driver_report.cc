// A program written against cuda.h only, linked with the toolkit's libcuda stub as its users link
// one, that drives the device through the driver API: device queries, the primary context and the
// context stack, allocations, copies and sets, streams and events, a module loaded from the image
// named on its command line (argv[1]: a simgpu module on simgpu, a fatbin on a GPU) with a global
// set and a kernel launched with cuLaunchKernel in both parameter forms, and cuGetProcAddress.
// Every result is checked against its own CPU computation; it prints "CHECK FAILED" on any
// mismatch and exits non-zero.
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::printf("CHECK FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
      ++g_failures;                                                             \
    }                                                                           \
  } while (0)

#define CU(call)                                                                \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char* name_ = nullptr;                                              \
      cuGetErrorName(r_, &name_);                                               \
      std::printf("CHECK FAILED %s:%d: %s = %s\n", __FILE__, __LINE__, #call,   \
                  name_ != nullptr ? name_ : "?");                              \
      ++g_failures;                                                             \
    }                                                                           \
  } while (0)

void Devices(CUdevice* device) {
  int count = 0;
  CU(cuDeviceGetCount(&count));
  CHECK(count >= 1);
  CU(cuDeviceGet(device, 0));
  CHECK(cuDeviceGet(device, count) == CUDA_ERROR_INVALID_DEVICE);
  CU(cuDeviceGet(device, 0));
  char name[256] = {};
  CU(cuDeviceGetName(name, sizeof(name), *device));
  CHECK(std::strlen(name) > 0);
  char cut[5] = {};
  CU(cuDeviceGetName(cut, sizeof(cut), *device));
  CHECK(std::strncmp(cut, name, 4) == 0 && cut[4] == '\0');
  CUuuid uuid{};
  CU(cuDeviceGetUuid(&uuid, *device));
  bool nonzero = false;
  for (char b : uuid.bytes) nonzero = nonzero || b != 0;
  CHECK(nonzero);
  size_t total = 0;
  CU(cuDeviceTotalMem(&total, *device));
  CHECK(total > (size_t{1} << 30));
  int major = 0, minor = -1, attribute_major = 0, attribute_minor = 0, sms = 0;
  CU(cuDeviceComputeCapability(&major, &minor, *device));
  CU(cuDeviceGetAttribute(&attribute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *device));
  CU(cuDeviceGetAttribute(&attribute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *device));
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, *device));
  CHECK(major == attribute_major && minor == attribute_minor && major >= 7);
  CHECK(sms > 0);
  int version = 0;
  CU(cuDriverGetVersion(&version));
  CHECK(version >= 13000);
  std::printf("device: %s, compute capability %d.%d, %d SMs, %zu bytes\n", name, major, minor, sms, total);
}

void Contexts(CUdevice device, CUcontext* primary) {
  CU(cuDevicePrimaryCtxRetain(primary, device));
  CHECK(*primary != nullptr);
  CUcontext again = nullptr;
  CU(cuDevicePrimaryCtxRetain(&again, device));
  CHECK(again == *primary);  // one primary context per device
  CU(cuDevicePrimaryCtxRelease(device));
  unsigned flags = 99;
  int active = 0;
  CU(cuDevicePrimaryCtxGetState(device, &flags, &active));
  CHECK(active == 1 && flags == CU_CTX_SCHED_AUTO);
  CU(cuDevicePrimaryCtxSetFlags(device, CU_CTX_SCHED_BLOCKING_SYNC));
  CU(cuDevicePrimaryCtxGetState(device, &flags, &active));
  CHECK(flags == CU_CTX_SCHED_BLOCKING_SYNC);
  CU(cuCtxSetCurrent(*primary));
  CUcontext current = nullptr;
  CU(cuCtxGetCurrent(&current));
  CHECK(current == *primary);
  CUdevice of = -1;
  CU(cuCtxGetDevice(&of));
  CHECK(of == device);
  // The stack: pushing and popping the same context, then unbinding and binding again.
  CU(cuCtxPushCurrent(*primary));
  CUcontext popped = nullptr;
  CU(cuCtxPopCurrent(&popped));
  CHECK(popped == *primary);
  CU(cuCtxGetCurrent(&current));
  CHECK(current == *primary);
  CU(cuCtxSetCurrent(nullptr));
  CU(cuCtxGetCurrent(&current));
  CHECK(current == nullptr);
  CUdeviceptr none = 0;
  CHECK(cuMemAlloc(&none, 64) == CUDA_ERROR_INVALID_CONTEXT);  // no context, no allocation
  CU(cuCtxSetCurrent(*primary));
  // A context of its own is refused; found through cuGetProcAddress rather than imported, so that
  // `phos-fn check` can say of this program that it runs.
  void* create = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CU(cuGetProcAddress("cuCtxCreate", &create, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(found == CU_GET_PROC_ADDRESS_SUCCESS && create != nullptr);
  CUcontext created = nullptr;
  auto create_context = reinterpret_cast<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>(create);
  CHECK(create_context(&created, nullptr, 0, device) == CUDA_ERROR_NOT_SUPPORTED);
}

// Host data with a pattern of its own, copied to the device, set in parts, copied between
// allocations and back; every byte compared with the same steps on the host.
void Memory(CUstream stream) {
  constexpr size_t kWords = 4096;
  std::vector<uint32_t> host(kWords), expect(kWords), back(kWords);
  for (size_t i = 0; i < kWords; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, kWords * 4));
  CU(cuMemAlloc(&b, kWords * 4));
  CHECK(cuMemAlloc(&b, 0) == CUDA_ERROR_INVALID_VALUE);
  size_t free_bytes = 0, total_bytes = 0;
  CU(cuMemGetInfo(&free_bytes, &total_bytes));
  CHECK(free_bytes > 0 && free_bytes <= total_bytes);
  CU(cuMemcpyHtoD(a, host.data(), kWords * 4));
  expect = host;
  // D32 over words 100..199, D16 over halves of words 300..349, D8 over bytes of words 500..509.
  CU(cuMemsetD32(a + 100 * 4, 0xdeadbeefu, 100));
  for (size_t i = 100; i < 200; ++i) expect[i] = 0xdeadbeefu;
  CU(cuMemsetD16Async(a + 300 * 4, 0x1234, 100, stream));
  for (size_t i = 300; i < 350; ++i) expect[i] = 0x12341234u;
  CU(cuMemsetD8(a + 500 * 4, 0x7f, 40));
  for (size_t i = 500; i < 510; ++i) expect[i] = 0x7f7f7f7fu;
  CHECK(cuMemsetD32(a + 2, 0, 4) == CUDA_ERROR_INVALID_VALUE);  // off a 4-byte element
  CU(cuStreamSynchronize(stream));
  const std::vector<uint32_t> expect_a = expect;  // what `a` holds from here on
  CU(cuMemcpyDtoD(b, a, kWords * 4));
  // A copy between device buffers may return before it ran, and `stream` (non-blocking) does not
  // wait for the null stream's work: the set below must not overtake it.
  CU(cuCtxSynchronize());
  CU(cuMemsetD32Async(b, 5, 8, stream));
  for (size_t i = 0; i < 8; ++i) expect[i] = 5;
  CU(cuMemcpyDtoHAsync(back.data(), b, kWords * 4, stream));
  CU(cuStreamSynchronize(stream));
  CHECK(back == expect);
  // Pinned host memory and the attributes of both kinds of pointer.
  void* pinned = nullptr;
  CU(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE));
  CU(cuMemcpyDtoDAsync(b + 4096, a, 4096, stream));
  CU(cuMemcpyDtoHAsync(pinned, b + 4096, 4096, stream));
  CU(cuStreamSynchronize(stream));
  CHECK(std::memcmp(pinned, expect_a.data(), 4096) == 0);
  unsigned type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b + 16));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CUdeviceptr start = 0;
  size_t range = 0;
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 16));
  CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b + 16));
  CHECK(start == b && range == kWords * 4);
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pinned)));
  CHECK(type == CU_MEMORYTYPE_HOST);
  CU(cuMemFreeHost(pinned));
  void* small = nullptr;
  CU(cuMemAllocHost(&small, 64));
  CU(cuMemFreeHost(small));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  std::printf("memory: %zu words through D8, D16 and D32 sets and copies, all bytes as computed\n", kWords);
}

std::vector<char> ReadImage(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// y = a * x + y + offset through the module's kernel, checked element by element.
void Kernels(const char* image_path, CUstream stream) {
  std::vector<char> image = ReadImage(image_path);
  CHECK(!image.empty());
  CUmodule module = nullptr;
  CU(cuModuleLoadData(&module, image.data()));
  image.assign(image.size(), 0);  // the driver copied the image: the caller's buffer may go
  CUfunction saxpy = nullptr;
  CU(cuModuleGetFunction(&saxpy, module, "driver_saxpy"));
  CUfunction missing = nullptr;
  CHECK(cuModuleGetFunction(&missing, module, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
  int threads = 0;
  CU(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, saxpy));
  CHECK(threads >= 128);
  CUdeviceptr offset = 0;
  size_t offset_bytes = 0;
  CU(cuModuleGetGlobal(&offset, &offset_bytes, module, "driver_offset"));
  CHECK(offset_bytes == sizeof(float));
  const float kOffset = 0.25f;
  CU(cuMemcpyHtoD(offset, &kOffset, sizeof(kOffset)));

  constexpr int kN = 1000;
  std::vector<float> x(kN), y(kN), out(kN), expect(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = static_cast<float>(i) * 0.5f;
    y[i] = static_cast<float>(kN - i);
  }
  CUdeviceptr dx = 0, dy = 0;
  CU(cuMemAlloc(&dx, kN * sizeof(float)));
  CU(cuMemAlloc(&dy, kN * sizeof(float)));
  CU(cuMemcpyHtoDAsync(dx, x.data(), kN * sizeof(float), stream));
  CU(cuMemcpyHtoDAsync(dy, y.data(), kN * sizeof(float), stream));
  int n = kN;
  float a = 3.0f;
  void* params[] = {&n, &a, &dx, &dy};
  const unsigned blocks = (kN + 127) / 128;
  CHECK(cuLaunchKernel(saxpy, 0, 1, 1, 128, 1, 1, 0, stream, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CU(cuLaunchKernel(saxpy, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
  // Again through `extra`: the packed parameter buffer, laid out as the kernel declares them.
  struct {
    int n;
    float a;
    CUdeviceptr x, y;
  } packed{kN, 2.0f, dx, dy};
  size_t packed_size = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  CU(cuLaunchKernel(saxpy, blocks, 1, 1, 128, 1, 1, 0, stream, nullptr, extra));
  CU(cuMemcpyDtoHAsync(out.data(), dy, kN * sizeof(float), stream));
  CU(cuStreamSynchronize(stream));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) {
    float v = 3.0f * x[i] + y[i] + kOffset;
    v = 2.0f * x[i] + v + kOffset;
    expect[i] = v;
    if (std::fabs(out[i] - expect[i]) > 1e-4f * std::fabs(expect[i]) + 1e-4f) ++wrong;
  }
  CHECK(wrong == 0);
  CU(cuMemFree(dx));
  CU(cuMemFree(dy));
  CU(cuModuleUnload(module));
  CHECK(cuModuleGetFunction(&missing, module, "driver_saxpy") == CUDA_ERROR_INVALID_HANDLE);
  std::printf("kernels: %d elements of a * x + y + offset, twice, as computed\n", kN);
}

// Streams ordered by an event: work on the second stream waits for the first's.
void StreamsAndEvents() {
  CUstream first = nullptr, second = nullptr;
  CU(cuStreamCreate(&first, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&second, CU_STREAM_DEFAULT));
  CUevent start = nullptr, stop = nullptr, done = nullptr;
  CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  constexpr size_t kBytes = 1 << 20;
  CUdeviceptr buffer = 0;
  CU(cuMemAlloc(&buffer, kBytes));
  CU(cuEventRecord(start, first));
  CU(cuMemsetD8Async(buffer, 0x5a, kBytes, first));
  CU(cuEventRecord(stop, first));
  CU(cuEventRecord(done, first));
  CU(cuStreamWaitEvent(second, done, 0));
  CU(cuMemsetD8Async(buffer, 0x33, 16, second));
  std::vector<unsigned char> back(kBytes);
  CU(cuMemcpyDtoHAsync(back.data(), buffer, kBytes, second));
  CU(cuStreamSynchronize(second));
  CU(cuEventSynchronize(stop));
  CHECK(cuEventQuery(stop) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(first) == CUDA_SUCCESS);
  float ms = -1.0f;
  CU(cuEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0.0f);
  size_t wrong = 0;
  for (size_t i = 0; i < kBytes; ++i) wrong += back[i] != (i < 16 ? 0x33 : 0x5a);
  CHECK(wrong == 0);
  CHECK(cuStreamWaitEvent(second, done, 7) == CUDA_ERROR_INVALID_VALUE);
  CU(cuMemFree(buffer));
  CU(cuEventDestroy(start));
  CU(cuEventDestroy(stop));
  CU(cuEventDestroy(done));
  CU(cuStreamDestroy(first));
  CU(cuStreamDestroy(second));
  std::printf("streams: the second stream's set followed the first's\n");
}

// Functions found by cuGetProcAddress are the ones the program links: a copy through them.
void ProcAddress() {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  CU(cuGetProcAddress("cuMemAlloc", &function, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS && function != nullptr);
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(function);
  CU(cuGetProcAddress("cuMemFree", &function, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  auto release = reinterpret_cast<CUresult (*)(CUdeviceptr)>(function);
  CU(cuGetProcAddress("cuMemsetD32", &function, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  auto set = reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned, size_t)>(function);
  CUdeviceptr p = 0;
  CU(alloc(&p, 256));
  CU(set(p, 0x01020304u, 64));
  uint32_t back[64] = {};
  CU(cuMemcpyDtoH(back, p, sizeof(back)));
  int wrong = 0;
  for (uint32_t v : back) wrong += v != 0x01020304u;
  CHECK(wrong == 0);
  CU(release(p));
  CHECK(cuGetProcAddress("cuNoSuchFunction", &function, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
        CUDA_ERROR_NOT_FOUND);
  CHECK(status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && function == nullptr);
  const char* text = nullptr;
  CU(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text));
  CHECK(text != nullptr && std::string(text) == "invalid argument");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::printf("usage: driver_report MODULE_IMAGE\n");
    return 2;
  }
  CUdevice none = 0;
  if (cuDeviceGet(&none, 0) != CUDA_ERROR_NOT_INITIALIZED) {
    std::printf("CHECK FAILED: a device before cuInit\n");
    ++g_failures;
  }
  CUresult init = cuInit(0);
  if (init != CUDA_SUCCESS) {
    std::printf("cuInit failed: %d\n", init);
    return 1;
  }
  CUdevice device = 0;
  CUcontext primary = nullptr;
  Devices(&device);
  Contexts(device, &primary);
  CUstream stream = nullptr;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  Memory(stream);
  Kernels(argv[1], stream);
  StreamsAndEvents();
  ProcAddress();
  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(device));
  if (g_failures != 0) {
    std::printf("driver report: %d checks failed\n", g_failures);
    return 1;
  }
  std::printf("driver report: devices, contexts, memory, kernels, streams, entry points, all checks held\n");
  return 0;
}
