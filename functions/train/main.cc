// train: a long-running job as a phos function (docs/design.md D10): a two-layer perceptron
// trained with Adam on synthetic regression data (train_data.h), fp32 and deterministic. Deployed
// as a job (phos-fn deploy --job), phosd sends it one request per step and checkpoints it every K
// steps while it trains.
//
// Its whole state lives on the device and is allocated before the entry point: the packed
// parameters, gradients and Adam's moments, the batch, and the count of steps taken, from which
// each step's batch is made. The process keeps nothing between steps, so a checkpoint's GPU state
// resumes under any process that ran to the entry point with the same arguments (what phosd does
// after its own restart). Each request (its body is ignored) runs one step and answers
// {"step": N, "loss": L}: N counts the steps taken, L is the loss of step N's batch before its
// update.
//
//   train [--inputs D] [--hidden H] [--outputs O] [--batch B] [--seed S] [--lr LR]
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include "kernels.cuh"
#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/cuda_status.h"
#include "train_data.h"

namespace {

using phos::Result;
using phos::Status;
using phos::train::Shape;

constexpr unsigned kThreads = 128;

unsigned Blocks(int n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename... Args>
Status Launch(void (*kernel)(Args...), int threads, cudaStream_t stream, Args... args) {
  void* params[] = {&args...};
  return phos::fn::CudaStatus(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(Blocks(threads)),
                                               dim3(kThreads), params, 0, stream),
                              "cudaLaunchKernel");
}

class Trainer {
 public:
  Trainer(Shape shape, unsigned seed, phos::train::Adam adam) : s_(shape), seed_(seed), adam_(adam) {}
  ~Trainer() { cudaFreeHost(out_); }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  Status Init() {
    PHOS_FN_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const size_t n = static_cast<size_t>(s_.parameters());
    for (float** buffer : {&params_, &grads_, &m_, &v_}) {
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(buffer), n * sizeof(float)));
    }
    const std::pair<float**, int> activations[] = {{&x_, s_.batch * s_.inputs},   {&y_, s_.batch * s_.outputs},
                                                   {&h_, s_.batch * s_.hidden},   {&dh_, s_.batch * s_.hidden},
                                                   {&dout_, s_.batch * s_.outputs}, {&sq_, s_.batch * s_.outputs},
                                                   {&loss_, 1}};
    for (const auto& [buffer, elements] : activations) {
      PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(buffer), sizeof(float) * elements));
    }
    PHOS_FN_RETURN_IF_CUDA(cudaMalloc(reinterpret_cast<void**>(&step_), sizeof(int)));
    std::vector<float> initial(n);
    for (size_t i = 0; i < n; ++i) initial[i] = phos::train::InitialParameter(s_, seed_, static_cast<int>(i));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpy(params_, initial.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    PHOS_FN_RETURN_IF_CUDA(cudaMemset(m_, 0, n * sizeof(float)));
    PHOS_FN_RETURN_IF_CUDA(cudaMemset(v_, 0, n * sizeof(float)));
    PHOS_FN_RETURN_IF_CUDA(cudaMemset(step_, 0, sizeof(int)));
    PHOS_FN_RETURN_IF_CUDA(cudaMallocHost(reinterpret_cast<void**>(&out_), sizeof(Out)));
    return Status::Ok();
  }

  Result<std::string> Step() {
    const Shape s = s_;
    PHOS_RETURN_IF_ERROR(Launch(make_batch, s.batch, stream_, x_, y_, static_cast<const int*>(step_), s, seed_));
    PHOS_RETURN_IF_ERROR(Launch(forward_hidden, s.batch * s.hidden, stream_, h_, static_cast<const float*>(params_),
                                static_cast<const float*>(x_), s));
    PHOS_RETURN_IF_ERROR(Launch(forward_output, s.batch * s.outputs, stream_, dout_, sq_,
                                static_cast<const float*>(params_), static_cast<const float*>(h_),
                                static_cast<const float*>(y_), s));
    PHOS_RETURN_IF_ERROR(Launch(reduce_loss, 1, stream_, loss_, static_cast<const float*>(sq_), s));
    PHOS_RETURN_IF_ERROR(Launch(backward_hidden, s.batch * s.hidden, stream_, dh_, static_cast<const float*>(params_),
                                static_cast<const float*>(dout_), static_cast<const float*>(h_), s));
    PHOS_RETURN_IF_ERROR(Launch(gradients, s.parameters(), stream_, grads_, static_cast<const float*>(dout_),
                                static_cast<const float*>(dh_), static_cast<const float*>(h_),
                                static_cast<const float*>(x_), s));
    PHOS_RETURN_IF_ERROR(Launch(adam, s.parameters(), stream_, params_, m_, v_, static_cast<const float*>(grads_),
                                static_cast<const int*>(step_), s, adam_.lr, adam_.beta1, adam_.beta2, adam_.eps));
    PHOS_RETURN_IF_ERROR(Launch(advance, 1, stream_, step_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(&out_->loss, loss_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaMemcpyAsync(&out_->step, step_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    PHOS_FN_RETURN_IF_CUDA(cudaStreamSynchronize(stream_));
    // Nine significant digits: the float's exact value comes back from the text.
    char text[96];
    std::snprintf(text, sizeof(text), "{\"step\": %d, \"loss\": %.9g}", out_->step, static_cast<double>(out_->loss));
    return std::string(text);
  }

 private:
  struct Out {
    float loss;
    int step;
  };
  Shape s_;
  unsigned seed_;
  phos::train::Adam adam_;
  cudaStream_t stream_ = nullptr;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* x_ = nullptr;
  float* y_ = nullptr;
  float* h_ = nullptr;
  float* dh_ = nullptr;
  float* dout_ = nullptr;
  float* sq_ = nullptr;
  float* loss_ = nullptr;
  int* step_ = nullptr;
  Out* out_ = nullptr;  // pinned
};

}  // namespace

int main(int argc, char** argv) {
  Shape shape;
  unsigned seed = 7;
  phos::train::Adam adam;
  CLI::App app{"train: a perceptron trained with Adam, one step per request (a phos job)"};
  app.add_option("--inputs", shape.inputs, "Inputs per sample")->check(CLI::Range(1, 4096));
  app.add_option("--hidden", shape.hidden, "Hidden units")->check(CLI::Range(1, 4096));
  app.add_option("--outputs", shape.outputs, "Outputs per sample")->check(CLI::Range(1, 4096));
  app.add_option("--batch", shape.batch, "Samples per step")->check(CLI::Range(1, 4096));
  app.add_option("--seed", seed, "Seed of the initial parameters, the teacher and the batches");
  app.add_option("--lr", adam.lr, "Adam's learning rate")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (static_cast<int64_t>(shape.hidden) * (shape.inputs + shape.outputs + 1) + shape.outputs > (int64_t{1} << 28)) {
    std::fprintf(stderr, "train: the model has more than 2^28 parameters\n");
    return 2;
  }
  Trainer trainer(shape, seed, adam);
  if (Status s = trainer.Init(); !s.ok()) {
    PHOS_LOG(Error, "train", "init failed: {}", s.ToString());
    return 1;
  }
  PHOS_LOG(Info, "train", "ready: {} parameters, batch {}", shape.parameters(), shape.batch);
  return phos::fn::Serve([&](std::string_view) { return trainer.Step(); });
}
