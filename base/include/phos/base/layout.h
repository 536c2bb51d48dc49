// Where phos's own files lie, in the build tree as in an install (cmake/PhosInstall.cmake): the
// same layout under one directory, found from the running program, so neither refers to the other.
// (What only a build has, or only an install, differs: the build keeps the example functions in
// bin/functions and has no cmake/ or pkgconfig/ in lib/.)
//
//   bin/            phosd, phos-fn, phos-snapshot
//   lib/            libphos.so.1 (the C API), the function SDK's static libraries, cmake/phos/,
//                   pkgconfig/phos.pc
//   lib/phos/       libphos-simgpu.so, and:
//     frontend/     the CUDA libraries' stand-ins under NVIDIA's sonames (libcudart.so.13, ...)
//     modules/      the simgpu module images phosd trusts (*.simgpu.so)
//     functions/    the example functions (an install; the build keeps them in bin/functions)
//
//   std::filesystem::path modules = phos::layout::LibDirOfExecutable() / phos::layout::kModules;
#pragma once

#include <filesystem>

namespace phos::layout {

inline constexpr const char* kFrontend = "frontend";
inline constexpr const char* kModules = "modules";
inline constexpr const char* kSimgpuLibrary = "libphos-simgpu.so";

// lib/phos of the running executable's tree: <its directory>/../lib/phos. Empty when
// /proc/self/exe cannot be read.
std::filesystem::path LibDirOfExecutable();
// lib/phos beside a library in lib/ (libphos.so.1): `lib_dir`/phos.
std::filesystem::path LibDirBeside(const std::filesystem::path& lib_dir);

}  // namespace phos::layout
