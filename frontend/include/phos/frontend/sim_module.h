/* Registration of a function's simgpu kernel module with the frontend CUDA runtime
 * (libphos-cudart.so). phos_add_function() generates the call; it runs before main(). The image
 * must stay valid for the life of the process (it is embedded in the executable). The module is
 * sent to phosd with the session's first CUDA call; kernels are then found by the mangled name of
 * the host-side function passed to cudaLaunchKernel (dladdr). Returns 0. */
#ifndef PHOS_FRONTEND_SIM_MODULE_H_
#define PHOS_FRONTEND_SIM_MODULE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int __phosRegisterSimModule(const void* image, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* PHOS_FRONTEND_SIM_MODULE_H_ */
