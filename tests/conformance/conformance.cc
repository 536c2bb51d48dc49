#include "conformance.h"

#include <cstring>
#include <fstream>

void PrintTo(CUresult result, std::ostream* os) {
  const char* name = nullptr;
  if (cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
    *os << name << " (" << static_cast<int>(result) << ")";
  } else {
    *os << "CUresult " << static_cast<int>(result);
  }
}

namespace phos::conformance {

void DriverTest::SetUp() {
  PHOS_ASSERT_CU(cuInit(0));
  PHOS_ASSERT_CU(cuDeviceGet(&device_, 0));
  PHOS_ASSERT_CU(cuCtxCreate(&context_, nullptr, 0, device_));
}

void DriverTest::TearDown() {
  if (context_ != nullptr) {
    // A test may leave other contexts pushed above this one; the context is destroyed either way
    // and the thread's stack is left empty for the next test in this process.
    EXPECT_EQ(cuCtxDestroy(context_), CUDA_SUCCESS);
    CUcontext popped = nullptr;
    while (cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped != nullptr) {
    }
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) cuMemFree(ptr_);
}

CUresult DeviceBuffer::Allocate(std::size_t bytes) {
  CUresult r = cuMemAlloc(&ptr_, bytes);
  if (r == CUDA_SUCCESS) size_ = bytes;
  return r;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cuMemFreeHost(ptr_);
}

CUresult PinnedBuffer::Allocate(std::size_t bytes) {
  CUresult r = cuMemHostAlloc(&ptr_, bytes, 0);
  if (r == CUDA_SUCCESS) size_ = bytes;
  return r;
}

Stream::~Stream() {
  if (stream_ != nullptr) cuStreamDestroy(stream_);
}

CUresult Stream::Create(unsigned int flags) {
  return cuStreamCreate(&stream_, flags);
}

Event::~Event() {
  if (event_ != nullptr) cuEventDestroy(event_);
}

CUresult Event::Create(unsigned int flags) {
  return cuEventCreate(&event_, flags);
}

CUresult LongCopy::Allocate() {
  if (CUresult r = host_.Allocate(kLongCopyBytes); r != CUDA_SUCCESS) return r;
  return device_.Allocate(kLongCopyBytes);
}

AddressRange::~AddressRange() {
  if (ptr_ != 0) cuMemAddressFree(ptr_, size_);
}

CUresult AddressRange::Reserve(std::size_t bytes, CUdeviceptr requested_address) {
  CUresult r = cuMemAddressReserve(&ptr_, bytes, 0, requested_address, 0);
  if (r == CUDA_SUCCESS) {
    size_ = bytes;
  } else {
    ptr_ = 0;
  }
  return r;
}

CUresult AddressRange::Free() {
  CUresult r = cuMemAddressFree(ptr_, size_);
  ptr_ = 0;
  size_ = 0;
  return r;
}

CUmemAllocationProp DeviceAllocationProp(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUresult MinimumGranularity(CUdevice device, std::size_t* granularity) {
  const CUmemAllocationProp prop = DeviceAllocationProp(device);
  return cuMemGetAllocationGranularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
}

CUresult MapReadWrite(CUdeviceptr ptr, std::size_t bytes, CUmemGenericAllocationHandle handle,
                      CUdevice device) {
  if (CUresult r = cuMemMap(ptr, bytes, 0, handle, 0); r != CUDA_SUCCESS) return r;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(ptr, bytes, &access, 1);
}

CUresult EventTimer::Create() {
  if (CUresult r = start_.Create(CU_EVENT_DEFAULT); r != CUDA_SUCCESS) return r;
  return stop_.Create(CU_EVENT_DEFAULT);
}

CUresult EventTimer::ElapsedMs(float* ms) {
  if (CUresult r = cuEventSynchronize(stop_.get()); r != CUDA_SUCCESS) return r;
  return cuEventElapsedTime(ms, start_.get(), stop_.get());
}

KernelModule::~KernelModule() {
  if (module_ != nullptr) cuModuleUnload(module_);
}

bool KernelModule::Available() {
  return std::strlen(PHOS_CONFORMANCE_MODULE_PATH) > 0;
}

CUresult KernelModule::Load() {
  std::vector<std::uint64_t> words;
  std::size_t bytes = 0;
  if (!ReadFileBytes(PHOS_CONFORMANCE_MODULE_PATH, &words, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  return cuModuleLoadData(&module_, words.data());
}

CUresult KernelModule::Unload() {
  CUresult r = cuModuleUnload(module_);
  module_ = nullptr;
  return r;
}

CUresult KernelModule::Function(const char* mangled_name, CUfunction* function) const {
  return cuModuleGetFunction(function, module_, mangled_name);
}

bool ReadFileBytes(const std::string& path, std::vector<std::uint64_t>* words, std::size_t* bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const std::streamoff size = in.tellg();
  if (size <= 0) return false;
  *bytes = static_cast<std::size_t>(size);
  // One extra zero word: an image passed as text (PTX) must be NUL-terminated.
  words->assign(*bytes / sizeof(std::uint64_t) + 1, 0);
  in.seekg(0);
  return static_cast<bool>(in.read(reinterpret_cast<char*>(words->data()), size));
}

namespace {

// Knuth's multiplicative hash of the word index: neighbouring words differ in every byte.
std::uint32_t PatternWord(std::size_t word_index, std::uint32_t seed) {
  return static_cast<std::uint32_t>(word_index * 2654435761u) ^ seed;
}

}  // namespace

std::uint8_t PatternByte(std::size_t index, std::uint32_t seed) {
  const std::uint32_t word = PatternWord(index / 4, seed);
  return static_cast<std::uint8_t>(word >> (8 * (index % 4)));
}

void FillPattern(void* data, std::size_t bytes, std::uint32_t seed) {
  auto* out = static_cast<unsigned char*>(data);
  const std::size_t words = bytes / 4;
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint32_t value = PatternWord(w, seed);
    std::memcpy(out + 4 * w, &value, 4);
  }
  for (std::size_t i = 4 * words; i < bytes; ++i) out[i] = PatternByte(i, seed);
}

std::size_t FirstPatternMismatch(const void* data, std::size_t bytes, std::uint32_t seed) {
  const auto* in = static_cast<const unsigned char*>(data);
  const std::size_t words = bytes / 4;
  for (std::size_t w = 0; w < words; ++w) {
    std::uint32_t value;
    std::memcpy(&value, in + 4 * w, 4);
    if (value != PatternWord(w, seed)) {
      for (std::size_t i = 4 * w;; ++i) {
        if (in[i] != PatternByte(i, seed)) return i;
      }
    }
  }
  for (std::size_t i = 4 * words; i < bytes; ++i) {
    if (in[i] != PatternByte(i, seed)) return i;
  }
  return bytes;
}

}  // namespace phos::conformance
