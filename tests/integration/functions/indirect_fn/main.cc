// indirect_fn: a function whose kernel reads device memory through a pointer stored in device
// memory, for validating phos's speculated read sets (docs/design.md D8): a restore that loads only the
// buffers a launch's parameters name must still give this function the right answer.
//
// Initialisation (before the pre-entry point): N data buffers of M floats, buffer j element k
// holding j * 1000 + k; a table buffer holding the N buffers' device addresses; an output buffer.
// A request is two decimals, "J COUNT" (0 <= J < N, 1 <= COUNT <= M): the gather kernel copies
// the first COUNT elements of buffer J, found through the table, into the output, and the answer
// is "sum S first A B C D" (S their sum, then up to four of them, each as %.1f). "direct J COUNT"
// answers the same, its kernel given buffer J itself; "bump J COUNT" first adds 1 to those
// elements through the table (a write speculation cannot see), "add J COUNT" with buffer J as
// its kernel's parameter (a write speculation sees), "renew J COUNT" frees buffer J, allocates it
// again (the same size: the address space hands the same address back) and zeroes it, then each
// answers as "direct" does.
//
//   indirect_fn [--buffers N] [--elements M]
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kernels.cuh"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;

struct Request {
  enum class Kind { kGather, kDirect, kBump, kAdd, kRenew } kind = Kind::kGather;
  int index = 0;
  int count = 0;
};

// "J COUNT": two decimals separated by one or more spaces, nothing else (a trailing newline is
// allowed, as `echo` adds one).
Result<Request> ParseRequest(std::string_view body, int buffers, int elements) {
  std::string text(body);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  Request r;
  for (auto [word, kind] :
       {std::pair{"direct ", Request::Kind::kDirect}, std::pair{"bump ", Request::Kind::kBump},
        std::pair{"add ", Request::Kind::kAdd}, std::pair{"renew ", Request::Kind::kRenew}}) {
    if (text.rfind(word, 0) == 0) {
      text.erase(0, std::string(word).size());
      r.kind = kind;
    }
  }
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%d %d%n", &r.index, &r.count, &consumed) != 2 ||
      static_cast<size_t>(consumed) != text.size() || text.empty() || text[0] == ' ') {
    return Status::InvalidArgument("request must be two decimals, \"INDEX COUNT\"; got '" + text + "'");
  }
  if (r.index < 0 || r.index >= buffers) {
    return Status::InvalidArgument("index " + std::to_string(r.index) + " outside [0, " + std::to_string(buffers) +
                                   ")");
  }
  if (r.count < 1 || r.count > elements) {
    return Status::InvalidArgument("count " + std::to_string(r.count) + " outside [1, " + std::to_string(elements) +
                                   "]");
  }
  return r;
}

class IndirectFn {
 public:
  IndirectFn(int buffers, int elements) : buffers_(buffers), elements_(elements) {}
  // Pinned host memory is the process's own: released at exit like any allocation.
  ~IndirectFn() { cudaFreeHost(host_out_); }
  IndirectFn(const IndirectFn&) = delete;
  IndirectFn& operator=(const IndirectFn&) = delete;

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const size_t bytes = static_cast<size_t>(elements_) * sizeof(float);
    std::vector<float> values(static_cast<size_t>(elements_));
    data_.resize(static_cast<size_t>(buffers_));
    for (int j = 0; j < buffers_; ++j) {
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_[j]), bytes));
      for (int k = 0; k < elements_; ++k) values[k] = static_cast<float>(j * 1000 + k);
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(data_[j], values.data(), bytes, cudaMemcpyHostToDevice));
    }
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&table_), data_.size() * sizeof(float*)));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(table_, data_.data(), data_.size() * sizeof(float*), cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&out_), bytes));
    PHOS_FN_RETURN_IF_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_out_), bytes));
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view body) {
    PHOS_ASSIGN_OR_RETURN(Request request, ParseRequest(body, buffers_, elements_));
    int index = request.index;
    int count = request.count;
    float* out = out_;
    const unsigned blocks = static_cast<unsigned>((count + 255) / 256);
    if (request.kind == Request::Kind::kGather) {
      const float* const* table = table_;
      void* args[] = {&table, &index, &count, &out};
      PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&gather), dim3(blocks), dim3(256), args,
                                      0, stream_));
    } else {
      if (request.kind == Request::Kind::kBump) {
        float* const* table = table_;
        void* args[] = {&table, &index, &count};
        PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&bump), dim3(blocks), dim3(256), args,
                                        0, stream_));
      } else if (request.kind == Request::Kind::kRenew) {
        const size_t bytes = static_cast<size_t>(elements_) * sizeof(float);
        float*& data = data_[static_cast<size_t>(index)];
        PHOS_FN_RETURN_IF_CUDA(cudaFree(data));
        PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&data), bytes));
        PHOS_FN_RETURN_IF_CUDA(cudaMemsetAsync(data, 0, bytes, stream_));
        PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(table_ + index, &data, sizeof(float*), cudaMemcpyHostToDevice, stream_));
      } else if (request.kind == Request::Kind::kAdd) {
        float* data = data_[static_cast<size_t>(index)];
        void* args[] = {&data, &count};
        PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&add_one), dim3(blocks), dim3(256),
                                        args, 0, stream_));
      }
      const float* data = data_[static_cast<size_t>(index)];
      void* args[] = {&data, &count, &out};
      PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&copy_direct), dim3(blocks), dim3(256),
                                      args, 0, stream_));
    }
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(host_out_, out_, static_cast<size_t>(count) * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    // Every element is an integer below 2^24 and the sum stays far below 2^53: exact in double.
    double sum = 0;
    for (int k = 0; k < count; ++k) sum += host_out_[k];
    std::string response = Format("sum %.1f first", sum);
    for (int k = 0; k < count && k < 4; ++k) response += Format(" %.1f", static_cast<double>(host_out_[k]));
    return response;
  }

 private:
  static std::string Format(const char* format, double value) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, value);
    return buf;
  }

  const int buffers_;
  const int elements_;
  cudaStream_t stream_ = nullptr;
  std::vector<float*> data_;
  float** table_ = nullptr;
  float* out_ = nullptr;
  float* host_out_ = nullptr;  // pinned
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"indirect_fn: a kernel reading through pointers stored in device memory (a phos test function)"};
  int buffers = 8;
  int elements = 65536;
  app.add_option("--buffers", buffers, "Data buffers behind the table")->check(CLI::Range(1, 1024));
  // j * 1000 + k must stay an exact float: below 2^24.
  app.add_option("--elements", elements, "Floats per data buffer")->check(CLI::Range(1, 1 << 23));
  CLI11_PARSE(app, argc, argv);

  IndirectFn fn(buffers, elements);
  if (Status s = fn.Init(); !s.ok()) {
    PHOS_LOG(Error, "indirect_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  PHOS_LOG(Info, "indirect_fn", "ready: {} buffers of {} floats behind a table", buffers, elements);
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
