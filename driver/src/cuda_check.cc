#include "phos/driver/cuda_check.h"

#include <string>

namespace phos::driver {

Status CuStatus(CUresult result, std::string_view call, const CuErrorText& text) {
  if (result == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  const char* str = nullptr;
  if (text.get_name == nullptr || text.get_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (text.get_string == nullptr || text.get_string(result, &str) != CUDA_SUCCESS) str = nullptr;

  std::string msg(call);
  msg += ": ";
  msg += name ? name : ("CUresult " + std::to_string(static_cast<int>(result)));
  if (str) {
    msg += " (";
    msg += str;
    msg += ")";
  }
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY: return Status::OutOfMemory(std::move(msg));
    case CUDA_ERROR_INVALID_VALUE: return Status::InvalidArgument(std::move(msg));
    default: return Status::DeviceError(std::move(msg));
  }
}

}  // namespace phos::driver
