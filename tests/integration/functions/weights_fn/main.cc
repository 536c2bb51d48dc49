// weights_fn: uploads every tensor of a checkpoint with the SDK's DeviceTensor before the
// pre-entry point, then answers a tensor's name with what its device buffer holds, read back
// with cudaMemcpy: "<element count> <value> <value> ..." (values as %.9g, exact for a float).
//
//   weights_fn --model DIR
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "phos/base/log.h"
#include "phos/fn.h"
#include "phos/fn/checkpoint.h"
#include "phos/fn/device_tensor.h"

namespace {

using phos::Result;
using phos::Status;
using phos::fn::Checkpoint;
using phos::fn::DeviceTensor;

class WeightsFn {
 public:
  Status Init(const std::string& model_dir) {
    PHOS_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(model_dir));
    for (const std::string& name : checkpoint->TensorNames()) {
      PHOS_ASSIGN_OR_RETURN(DeviceTensor tensor, DeviceTensor::Upload(*checkpoint, name));
      tensors_.emplace(name, std::move(tensor));
    }
    return Status::Ok();
  }

  Result<std::string> Handle(std::string_view body) {
    std::string name(body);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return Status::NotFound("no tensor '" + name + "'");
    const DeviceTensor& tensor = it->second;
    std::vector<float> host(tensor.element_count());
    if (cudaError_t e = cudaMemcpy(host.data(), tensor.data(), tensor.byte_size(), cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return Status::DeviceError(std::string("cudaMemcpy: ") + cudaGetErrorName(e));
    }
    std::string response = std::to_string(host.size());
    for (float v : host) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.9g", static_cast<double>(v));
      response += buf;
    }
    return response;
  }

 private:
  std::map<std::string, DeviceTensor> tensors_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weights_fn: a checkpoint's tensors uploaded with DeviceTensor (a phos test function)"};
  std::string model_dir;
  app.add_option("--model", model_dir, "Checkpoint directory")->required();
  CLI11_PARSE(app, argc, argv);

  WeightsFn fn;
  if (Status s = fn.Init(model_dir); !s.ok()) {
    PHOS_LOG(Error, "weights_fn", "initialisation failed: {}", s.ToString());
    return 1;
  }
  return phos::fn::Serve([&fn](std::string_view request) { return fn.Handle(request); });
}
