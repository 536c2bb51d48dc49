// The simgpu module of a transparency program's kernels, embedded in the program and handed to
// the CUDA runtime before main() when that runtime is phos's (under `phos-fn run`): the g++ build's
// counterpart of the fatbin nvcc embeds and registers. NVIDIA's runtime has no such entry point,
// and the weak reference is then null. PHOS_SIM_MODULE_IMAGE is the module's path.
#include <cstddef>

extern "C" int __phosRegisterSimModule(const void* image, size_t size) __attribute__((weak));

extern "C" const unsigned char phos_transparency_module_begin[];
extern "C" const unsigned char phos_transparency_module_end[];
asm(".pushsection .rodata\n"
    ".balign 64\n"
    "phos_transparency_module_begin:\n"
    ".incbin \"" PHOS_SIM_MODULE_IMAGE "\"\n"
    "phos_transparency_module_end:\n"
    ".popsection\n");

namespace {
const int kRegistered =
    __phosRegisterSimModule != nullptr
        ? __phosRegisterSimModule(phos_transparency_module_begin,
                                  static_cast<size_t>(phos_transparency_module_end - phos_transparency_module_begin))
        : 0;
}  // namespace
