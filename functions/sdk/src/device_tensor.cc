#include "phos/fn/device_tensor.h"
#include "phos/fn/cuda_status.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

namespace phos::fn {

Result<DeviceTensor> DeviceTensor::Upload(const SafetensorsFile& file, const TensorInfo& tensor) {
  DeviceTensor out;
  out.element_count_ = tensor.element_count();
  out.shape_ = tensor.shape;
  const std::string what = "upload tensor '" + tensor.name + "'";
  if (out.byte_size() == 0) return out;
  PHOS_RETURN_IF_ERROR(
      fn::CudaStatus(cudaMalloc(reinterpret_cast<void**>(&out.data_), out.byte_size()), what + ": cudaMalloc"));
  const std::span<const std::byte> bytes = file.Bytes(tensor);
  if (tensor.dtype == Dtype::kF32) {
    // Straight from the mapping: no host copy of an fp32 checkpoint.
    PHOS_RETURN_IF_ERROR(fn::CudaStatus(cudaMemcpy(out.data_, bytes.data(), out.byte_size(), cudaMemcpyHostToDevice),
                              what + ": cudaMemcpy"));
    return out;
  }
  std::vector<float> host(out.element_count_);
  ConvertToFloat32(tensor.dtype, bytes, host);
  PHOS_RETURN_IF_ERROR(fn::CudaStatus(cudaMemcpy(out.data_, host.data(), out.byte_size(), cudaMemcpyHostToDevice),
                            what + ": cudaMemcpy"));
  return out;
}

Result<DeviceTensor> DeviceTensor::Upload(const Checkpoint& checkpoint, std::string_view name) {
  PHOS_ASSIGN_OR_RETURN(const SafetensorsFile* file, checkpoint.FileOf(name));
  PHOS_ASSIGN_OR_RETURN(const TensorInfo* tensor, file->Tensor(name));
  return Upload(*file, *tensor);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      element_count_(std::exchange(other.element_count_, 0)),
      shape_(std::move(other.shape_)) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    element_count_ = std::exchange(other.element_count_, 0);
    shape_ = std::move(other.shape_);
  }
  return *this;
}

DeviceTensor::~DeviceTensor() {
  if (data_ != nullptr) cudaFree(data_);
}

}  // namespace phos::fn
