// DeviceTensor: one checkpoint tensor in its own fp32 device buffer, allocated and filled with
// the CUDA runtime API (cudaMalloc + cudaMemcpy) before a function's entry point, so the weights
// are part of its snapshot. F16 and BF16 tensors are converted on the host first.
//
//   PHOS_ASSIGN_OR_RETURN(DeviceTensor w, DeviceTensor::Upload(*checkpoint, "model.norm.weight"));
//   kernel<<<...>>>(w.data(), ...);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "phos/base/status.h"
#include "phos/fn/checkpoint.h"
#include "phos/fn/safetensors.h"

namespace phos::fn {

class DeviceTensor {
 public:
  static Result<DeviceTensor> Upload(const SafetensorsFile& file, const TensorInfo& tensor);
  static Result<DeviceTensor> Upload(const Checkpoint& checkpoint, std::string_view name);

  DeviceTensor() = default;
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor();  // cudaFree

  // The device address of the first element.
  float* data() const { return data_; }
  uint64_t element_count() const { return element_count_; }
  uint64_t byte_size() const { return element_count_ * sizeof(float); }
  const std::vector<uint64_t>& shape() const { return shape_; }

 private:
  float* data_ = nullptr;
  uint64_t element_count_ = 0;
  std::vector<uint64_t> shape_;
};

}  // namespace phos::fn
