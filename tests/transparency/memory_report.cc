// A CUDA program as its users write one (the toolkit's headers, NVIDIA's libcudart, nothing of
// phos) exercising the memory family: pitched allocation, 2D copies and sets, stream-ordered
// allocation and the default pool's counters. It computes every expected byte itself and exits 0
// only when every check held. transparency_test runs it under `phos-fn run`.
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

namespace {

int g_failures = 0;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::printf("CHECK FAILED: line %d: %s\n", __LINE__, #cond);       \
      ++g_failures;                                                      \
    }                                                                    \
  } while (0)
#define OK(call) CHECK((call) == cudaSuccess)

}  // namespace

int main() {
  const size_t width = 700, height = 50, host_pitch = 701;
  unsigned char* dev = nullptr;
  size_t pitch = 0;
  OK(cudaMallocPitch(reinterpret_cast<void**>(&dev), &pitch, width, height));
  CHECK(pitch >= width && pitch % 256 == 0);
  std::vector<unsigned char> host(host_pitch * height);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 17 + 3);
  std::vector<unsigned char> image(pitch * height, 0x5c);  // the device buffer as it should be
  OK(cudaMemset(dev, 0x5c, pitch * height));
  OK(cudaMemcpy2D(dev, pitch, host.data(), host_pitch, width, height, cudaMemcpyHostToDevice));
  for (size_t r = 0; r < height; ++r) std::memcpy(&image[r * pitch], &host[r * host_pitch], width);

  cudaStream_t stream = nullptr;
  OK(cudaStreamCreate(&stream));
  OK(cudaMemset2DAsync(dev + 7 * pitch + 33, pitch, 0xe1, 111, 20, stream));
  for (size_t r = 7; r < 27; ++r) std::memset(&image[r * pitch + 33], 0xe1, 111);

  // A stream-ordered scratch buffer: a pitched copy into it, back out, then freed on the stream.
  unsigned char* scratch = nullptr;
  OK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), width * height, stream));
  OK(cudaMemcpy2DAsync(scratch, width, dev, pitch, width, height, cudaMemcpyDeviceToDevice, stream));
  std::vector<unsigned char> dense(width * height, 0);
  OK(cudaMemcpyAsync(dense.data(), scratch, dense.size(), cudaMemcpyDeviceToHost, stream));
  cudaMemPool_t pool = nullptr;
  OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  unsigned long long used = 0;
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK(used >= width * height);
  OK(cudaFreeAsync(scratch, stream));
  OK(cudaStreamSynchronize(stream));
  bool rows_match = true;
  for (size_t r = 0; r < height; ++r) rows_match &= std::memcmp(&dense[r * width], &image[r * pitch], width) == 0;
  CHECK(rows_match);
  unsigned long long after = 0;
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &after));
  CHECK(after + width * height == used);

  std::vector<unsigned char> whole(pitch * height, 0);
  OK(cudaMemcpy2D(whole.data(), pitch, dev, pitch, pitch, height, cudaMemcpyDeviceToHost));
  CHECK(whole == image);
  cudaPointerAttributes attr{};
  OK(cudaPointerGetAttributes(&attr, dev));
  CHECK(attr.type == cudaMemoryTypeDevice);
  OK(cudaStreamDestroy(stream));
  OK(cudaFree(dev));
  std::printf("memory report: pitch %zu, %s\n", pitch, g_failures == 0 ? "all checks held" : "checks failed");
  return g_failures == 0 ? 0 : 1;
}
