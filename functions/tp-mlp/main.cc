// tp-mlp: the mlp function's model, tensor-parallel across 2 devices (Megatron-style row-parallel
// layers): device d holds columns [d*w/2, (d+1)*w/2) of every W_l — contiguous in cuBLAS's
// column-major layout — and computes the partial product W_l[:, cols_d] * X[cols_d, :]; one NCCL
// all-reduce (sum) per layer gives both devices the full W_l * X, then each applies the bias and
// activation. The weights are mlp's (functions/mlp/mlp_model.h), so for the same seed and request
// the output is mlp's, up to the order of the fp32 sums.
//
// Written against the CUDA runtime, cuBLAS and NCCL APIs only: in phos those calls are executed
// by phosd (docs/design.md D1). Deployed with `phos-fn deploy --gpus 2`, its instance's session holds a
// device group: a pooled context per device and a communicator created over them ahead of time,
// which ncclCommInitAll returns.
//
//   tp-mlp [--width W] [--layers L] [--batch B] [--weight-seed S]
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "../mlp/kernels.cuh"
#include "mlp_model.h"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"

namespace {

using phos::Result;
using phos::Status;
using phos::mlp::Shape;

constexpr int kDevices = 2;

Status Nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::DeviceError(std::string(what) + ": " + ncclGetErrorString(r));
}

#define RETURN_IF_NCCL(call) PHOS_RETURN_IF_ERROR(Nccl((call), #call))

// What one device holds.
struct Rank {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  ncclComm_t comm = nullptr;
  std::vector<float*> weights;  // width x width/2: this rank's columns of W_l
  std::vector<float*> biases;   // the whole bias of each layer
  float* x = nullptr;           // layer input, width x batch (every rank holds all of it)
  float* partial = nullptr;     // this rank's partial product
  float* y = nullptr;           // the all-reduced product
};

class TpMlp {
 public:
  TpMlp(Shape shape, uint64_t weight_seed) : shape_(shape), weight_seed_(weight_seed) {}

  Status Init() {
    int count = 0;
    PHOS_FN_RETURN_IF_CUDA(cudaGetDeviceCount(&count));
    if (count < kDevices) return Status::FailedPrecondition("tp-mlp needs 2 devices, the node has " + std::to_string(count));
    const int devices[kDevices] = {0, 1};
    ncclComm_t comms[kDevices];
    RETURN_IF_NCCL(ncclCommInitAll(comms, kDevices, devices));
    const size_t w = static_cast<size_t>(shape_.width), half = w / kDevices;
    const size_t io_bytes = shape_.io_elements() * sizeof(float);
    std::vector<float> staging(w * half);
    for (int d = 0; d < kDevices; ++d) {
      Rank& r = ranks_[d];
      r.comm = comms[d];
      PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
      PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
      PHOS_FN_RETURN_IF_BLAS(cublasCreate(&r.blas));
      PHOS_FN_RETURN_IF_BLAS(cublasSetStream(r.blas, r.stream));
      r.weights.resize(shape_.layers);
      r.biases.resize(shape_.layers);
      for (int l = 0; l < shape_.layers; ++l) {
        PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&r.weights[l]), w * half * sizeof(float)));
        PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&r.biases[l]), w * sizeof(float)));
        phos::mlp::GenerateWeightColumns(weight_seed_, l, shape_, d * half, half, staging.data());
        PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(r.weights[l], staging.data(), w * half * sizeof(float), cudaMemcpyHostToDevice));
        phos::mlp::GenerateBias(weight_seed_, l, shape_, staging.data());
        PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(r.biases[l], staging.data(), w * sizeof(float), cudaMemcpyHostToDevice));
      }
      for (float** buf : {&r.x, &r.partial, &r.y}) PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(buf), io_bytes));
    }
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view body) {
    PHOS_ASSIGN_OR_RETURN(phos::mlp::Request request, phos::mlp::ParseRequest(body, shape_));
    const size_t n = shape_.io_elements();
    const float one = 1.0f, zero = 0.0f;
    int rows = shape_.width, cols = shape_.batch, half = shape_.width / kDevices;
    for (int d = 0; d < kDevices; ++d) {
      PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
      PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(ranks_[d].x, request.input.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                                     ranks_[d].stream));
    }
    for (int l = 0; l < shape_.layers; ++l) {
      for (int d = 0; d < kDevices; ++d) {
        Rank& r = ranks_[d];
        PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
        // Rows [d*half, (d+1)*half) of X meet this rank's columns of W_l.
        PHOS_FN_RETURN_IF_BLAS(cublasSgemm(r.blas, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, half, &one, r.weights[l], rows,
                                   r.x + static_cast<size_t>(d) * half, rows, &zero, r.partial, rows));
      }
      RETURN_IF_NCCL(ncclGroupStart());
      for (Rank& r : ranks_) RETURN_IF_NCCL(ncclAllReduce(r.partial, r.y, n, ncclFloat, ncclSum, r.comm, r.stream));
      RETURN_IF_NCCL(ncclGroupEnd());
      int relu = l + 1 < shape_.layers ? 1 : 0;
      unsigned blocks = static_cast<unsigned>((n + 255) / 256);
      for (int d = 0; d < kDevices; ++d) {
        Rank& r = ranks_[d];
        PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(d));
        void* args[] = {&r.y, &r.biases[l], &rows, &cols, &relu};
        PHOS_FN_RETURN_IF_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(&bias_activation), dim3(blocks), dim3(256), args, 0,
                                        r.stream));
        std::swap(r.x, r.y);
      }
    }
    std::vector<float> output(n);
    PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(0));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(output.data(), ranks_[0].x, n * sizeof(float), cudaMemcpyDeviceToHost, ranks_[0].stream));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(ranks_[0].stream));
    // Device 1 finished too before the next request overwrites its input.
    PHOS_FN_RETURN_IF_CUDA(cudaSetDevice(1));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(ranks_[1].stream));
    return phos::mlp::FormatResponse(output, shape_, request.full);
  }

 private:
  Shape shape_;
  uint64_t weight_seed_;
  Rank ranks_[kDevices];
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp-mlp: tensor-parallel multi-layer perceptron inference on 2 devices (a phos function)"};
  Shape shape;
  uint64_t weight_seed = 42;
  app.add_option("--width", shape.width, "Rows and columns of each weight matrix (even)")->check(CLI::Range(16, 65536));
  app.add_option("--layers", shape.layers, "Number of layers")->check(CLI::Range(1, 1024));
  app.add_option("--batch", shape.batch, "Input columns per request")->check(CLI::Range(1, 4096));
  app.add_option("--weight-seed", weight_seed, "Seed of the generated weights");
  CLI11_PARSE(app, argc, argv);
  if (shape.width % kDevices != 0) {
    PHOS_LOG(Error, "tp-mlp", "--width {} does not split across {} devices", shape.width, kDevices);
    return 2;
  }
  TpMlp mlp(shape, weight_seed);
  if (Status s = mlp.Init(); !s.ok()) {
    PHOS_LOG(Error, "tp-mlp", "initialisation failed: {}", s.ToString());
    return 1;
  }
  PHOS_LOG(Info, "tp-mlp", "ready: width {} x {} layers, batch {}, split across {} devices", shape.width, shape.layers,
           shape.batch, kDevices);
  return phos::fn::Serve([&mlp](std::string_view request) { return mlp.Handle(request); });
}
