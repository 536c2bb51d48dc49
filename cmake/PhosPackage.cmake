# The Debian package (CPack): `cpack -G DEB` in the build directory writes phos_<version>_amd64.deb.
# It holds the install (cmake/PhosInstall.cmake) under /usr, stripped, and the files only a system
# install has (component "system", left out of `cmake --install`): /etc/phos/phosd.toml (a
# conffile) and the systemd unit. Its maintainer scripts (packaging/debian/) make the phos account
# and /var/lib/phos, and enable the unit where systemd runs. Depends is computed by dpkg-shlibdeps
# from the libraries phos's programs link, so it names the Debian packages that hold them.
# For a release, package a tree configured with -DPHOS_BUILD_TESTS=OFF: with the tests, phos's
# programs carry fault points (phos/base/fault_point.h), inert unless PHOS_FAULT_PAUSE_AT is set.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/phosd.toml DESTINATION /etc/phos COMPONENT system EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/phosd.service DESTINATION /lib/systemd/system
        COMPONENT system EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME phos)
set(CPACK_PACKAGE_VENDOR "phos")
set(CPACK_PACKAGE_CONTACT "phos developers <phos@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "serverless GPU cold-start runtime: a daemon restoring GPU functions from snapshots")
set(CPACK_PACKAGE_DESCRIPTION "phosd keeps pools of CUDA contexts, cuBLAS handles and NCCL communicators and a
snapshot store; a GPU function deployed once starts again by restoring its pre-entry snapshot
into a pooled context, its kernels running while its buffers load on demand. With phos-fn, the
function SDK, the C API (libphos) and simgpu, a simulated GPU.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# The whole install, then the system component (EXCLUDE_FROM_ALL: only asked for by name).
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};phos;ALL;/" "${CMAKE_BINARY_DIR};phos;system;/")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# (phos's own libraries, which functions and the CUDA stand-ins need, are found in the package by
# their RUNPATH, $ORIGIN-relative.) The maintainer scripts use adduser and init-system-helpers.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, init-system-helpers")
# Function sandboxes (bubblewrap); and what building a function against the package takes beside
# it (find_package(phos): a compiler, CMake, the headers of fmt, spdlog and nlohmann-json; the
# CUDA 13 toolkit's headers come from NVIDIA, not Debian).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bubblewrap, cmake, g++, libfmt-dev, libspdlog-dev, nlohmann-json3-dev")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "criu")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
    ${PROJECT_SOURCE_DIR}/packaging/debian/postrm ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_COMPRESSION_TYPE zstd)
include(CPack)
