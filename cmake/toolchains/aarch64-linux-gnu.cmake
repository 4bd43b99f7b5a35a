# Cross-compiles for arm64 robots with Debian's cross toolchain
# (crossbuild-essential-arm64) against an arm64 Debian root that holds the
# libraries' -dev packages: scripts/package.sh makes it with mmdebstrap and
# passes it as K8S4R_SYSROOT (a cache variable, or the environment).
#
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
#         -DK8S4R_SYSROOT=/path/to/arm64-root
#
# Debian 12's libyaml-cpp-dev is not Multi-Arch: same, so the arm64 -dev
# packages cannot be installed beside the amd64 ones the tests need; a
# separate root keeps the build machine untouched.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT K8S4R_SYSROOT AND DEFINED ENV{K8S4R_SYSROOT})
  set(K8S4R_SYSROOT "$ENV{K8S4R_SYSROOT}")
endif()
if(NOT K8S4R_SYSROOT OR NOT EXISTS "${K8S4R_SYSROOT}/usr/include/aarch64-linux-gnu")
  message(FATAL_ERROR "K8S4R_SYSROOT must name an arm64 Debian root with the -dev packages (scripts/package.sh makes one)")
endif()
# try_compile projects run this file again; they need the root too.
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES K8S4R_SYSROOT)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_SYSROOT "${K8S4R_SYSROOT}")

# Libraries, headers and CMake packages from the root only; programs (cmake,
# ninja) from the build machine.
set(CMAKE_FIND_ROOT_PATH "${K8S4R_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the root's .pc files and prefixes their paths with it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${K8S4R_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${K8S4R_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${K8S4R_SYSROOT}/usr/share/pkgconfig:${K8S4R_SYSROOT}/usr/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
