# The CUDA toolkit: its headers define the C ABI that simgpu implements and that the runtime
# calls, so they are required. nvcc is optional: with it, kernels also get their GPU variant.
find_package(CUDAToolkit 12.4 REQUIRED)
message(STATUS "phos: CUDA headers ${CUDAToolkit_VERSION} at ${CUDAToolkit_INCLUDE_DIRS}")

# CUDA headers only, without linking any NVIDIA library (the driver is resolved at run time or
# replaced by simgpu).
add_library(phos-cuda-headers INTERFACE)
target_include_directories(phos-cuda-headers SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS})

if(PHOS_WITH_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(PHOS_WITH_CUDA ON)
  else()
    set(PHOS_WITH_CUDA OFF)
  endif()
endif()
if(PHOS_WITH_CUDA)
  # Never 'native': there is no GPU on build machines. 80 = A100, 90 = H100.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  message(STATUS "phos: nvcc ${CMAKE_CUDA_COMPILER_VERSION}; kernels also build for sm_${CMAKE_CUDA_ARCHITECTURES}")
else()
  message(STATUS "phos: nvcc not used; kernels build for simgpu only")
endif()
