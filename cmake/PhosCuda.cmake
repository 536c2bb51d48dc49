# The CUDA toolkit: its headers define the C ABI that simgpu implements and that the runtime
# calls, so they are required. nvcc is optional: with it, kernels also get their GPU variant.
#
# CUDA 13 exactly: the frontend libraries claim to be CUDA 13's (sonames and symbol versions
# libcudart.so.13 and libcublas.so.13, fixed in frontend/cudart/libcudart.map and
# frontend/cublas/libcublas.map) and simgpu implements CUDA 13's cuda.h. Deriving the sonames from
# whatever toolkit is found instead would let a CUDA 12 build export 12's names over an ABI
# written against 13's headers, and nothing tests that pairing. scripts/setup.sh checks the same.
set(PHOS_CUDA_MAJOR 13)
find_package(CUDAToolkit REQUIRED)
if(NOT CUDAToolkit_VERSION_MAJOR EQUAL PHOS_CUDA_MAJOR)
  message(FATAL_ERROR "phos needs the CUDA ${PHOS_CUDA_MAJOR} toolkit headers (its frontend libraries are "
                      "libcudart.so.${PHOS_CUDA_MAJOR} and libcublas.so.${PHOS_CUDA_MAJOR}); found "
                      "${CUDAToolkit_VERSION} at ${CUDAToolkit_INCLUDE_DIRS}. Set CUDAToolkit_ROOT to a CUDA "
                      "${PHOS_CUDA_MAJOR} toolkit.")
endif()
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
  message(STATUS "phos: nvcc not used (PHOS_WITH_CUDA=OFF or no nvcc found); kernels build for simgpu only")
endif()
