# What `cmake --install` puts under its prefix, in the layout of phos/base/layout.h (the build tree
# has the same one):
#   bin/                      phosd, phos-fn, phos-snapshot
#   include/                  phos/fn.h, phos/kernel.h (and phos/kernel/), phos/fn/ (the SDK and
#                             its kernel library), phos/base/, phos/frontend/sim_module.h, phos.h
#   lib/                      libphos.so.1 (the C API), the SDK's static libraries,
#                             cmake/phos/ (find_package(phos)), pkgconfig/phos.pc
#   lib/phos/                 libphos-simgpu.so; frontend/ (libcudart.so.13 and the other
#                             stand-ins, where phos-fn run and functions find them); modules/ (the
#                             simgpu modules of the functions below, which phosd trusts);
#                             functions/ (the example functions: mlp, tp-mlp, train, llama, moe)
#   share/doc/phos/           README.md, CHANGELOG.md, the guide
#   share/phos/               phosd.toml as a sample, function-template/
#   share/bash-completion/    completions/phos-fn
# lib/ is lib/ whatever the platform's libdir (the programs find lib/phos from bin/ by that path).
#
# phos_export(<target> <name>) makes one library part of the CMake package: phos::<name> in the
# build (an alias, so that phos_add_function() names the same targets in and out of the tree) and
# in an install (phos-targets.cmake). Include directories inside the source or build tree become
# build-only; an install's are <prefix>/include.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# PHOS_INSTALL_LIBDIR (lib) and PHOS_INSTALL_PKGLIBDIR (lib/phos) are set beside the build
# layout in the top CMakeLists.txt.
set(PHOS_INSTALL_CMAKEDIR ${PHOS_INSTALL_LIBDIR}/cmake/phos)

function(phos_export target name)
  foreach(property INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
    get_target_property(dirs ${target} ${property})
    if(dirs)
      set(wrapped "")
      foreach(dir IN LISTS dirs)
        if(dir MATCHES "^\\$<")
          list(APPEND wrapped "${dir}")
        else()
          list(APPEND wrapped "$<BUILD_INTERFACE:${dir}>")
        endif()
      endforeach()
      set_target_properties(${target} PROPERTIES ${property} "${wrapped}")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(phos::${name} ALIAS ${target})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY" AND target MATCHES "^phos-(cudart|cublas|cublasLt|cuda|nccl)$")
    set(destination ${PHOS_INSTALL_PKGLIBDIR}/frontend)
  else()
    set(destination ${PHOS_INSTALL_LIBDIR})
  endif()
  install(TARGETS ${target} EXPORT phos-targets
          LIBRARY DESTINATION ${destination}
          ARCHIVE DESTINATION ${PHOS_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# ---- The package: libraries, in dependency order ----
phos_export(phos-base base)
phos_export(phos-cuda-headers cuda-headers)
phos_export(phos-kernel kernel)
phos_export(phos-ipc ipc)
foreach(lib cudart cublas cublasLt cuda nccl)
  phos_export(phos-${lib} ${lib})
  # NVIDIA's soname beside each (libcudart.so.13 -> libphos-cudart.so), as in the build.
  get_target_property(soname_link phos-${lib} PHOS_SONAME)
  install(FILES ${PHOS_FRONTEND_LIB_DIR}/${soname_link} DESTINATION ${PHOS_INSTALL_PKGLIBDIR}/frontend)
endforeach()
phos_export(phos-fn-sdk fn-sdk)
phos_export(phos-fn-kernels fn-kernels)
phos_export(phos-fn-weights fn-weights)
phos_export(phos-fn-device-weights fn-device-weights)
phos_export(phos-capi phos)

# ---- Programs and what only they load ----
install(TARGETS phosd phos-fn phos-snapshot EXPORT phos-targets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS phos-simgpu LIBRARY DESTINATION ${PHOS_INSTALL_PKGLIBDIR})

# ---- Headers: the SDK's, the kernel library's, the kernel-writing ones, the C API ----
install(DIRECTORY ${PROJECT_SOURCE_DIR}/base/include/ ${PROJECT_SOURCE_DIR}/simgpu/include/
                  ${PROJECT_SOURCE_DIR}/functions/sdk/include/ ${PROJECT_SOURCE_DIR}/functions/sdk/kernels/include/
                  ${PROJECT_SOURCE_DIR}/frontend/capi/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        PATTERN "*.in" EXCLUDE)
install(FILES ${CMAKE_BINARY_DIR}/include/phos/base/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/phos/base)
install(FILES ${PROJECT_SOURCE_DIR}/frontend/include/phos/frontend/sim_module.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/phos/frontend)

# ---- The CMake package and phos.pc ----
install(EXPORT phos-targets NAMESPACE phos:: DESTINATION ${PHOS_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/phos-config.cmake.in
  ${CMAKE_BINARY_DIR}/install/phos-config.cmake
  INSTALL_DESTINATION ${PHOS_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/phos-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/phos-config.cmake ${CMAKE_BINARY_DIR}/install/phos-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/PhosModules.cmake ${PROJECT_SOURCE_DIR}/cmake/PhosFunctions.cmake
        DESTINATION ${PHOS_INSTALL_CMAKEDIR})
configure_file(${PROJECT_SOURCE_DIR}/packaging/phos.pc.in ${CMAKE_BINARY_DIR}/install/phos.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install/phos.pc DESTINATION ${PHOS_INSTALL_LIBDIR}/pkgconfig)

# ---- Documentation, samples and the function template ----
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md ${PROJECT_SOURCE_DIR}/docs/guide.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/packaging/phosd.toml DESTINATION ${CMAKE_INSTALL_DATADIR}/phos)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/phos-fn.bash-completion
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME phos-fn)
foreach(file IN LISTS PHOS_TEMPLATE_FILES)
  get_filename_component(subdir ${file} DIRECTORY)
  install(FILES ${PHOS_TEMPLATE_DIR}/${file} DESTINATION ${CMAKE_INSTALL_DATADIR}/phos/function-template/${subdir})
endforeach()
