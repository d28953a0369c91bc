# Cross build for aarch64 Linux with Debian's cross compiler; tests run under
# qemu-aarch64 (ctest uses CMAKE_CROSSCOMPILING_EMULATOR).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         [-DLILIMS_QEMU_CPU=cortex-a53|cortex-a76|max]
# qemu 7.2 CPU models: max (dotprod + i8mm), cortex-a76 / neoverse-n1
# (dotprod, no i8mm), cortex-a53 / cortex-a72 (neither).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Header-only packages are the same for every architecture: take the host's.
foreach(dir /usr/share/cmake/nlohmann_json /usr/lib/cmake/nlohmann_json)
  if(EXISTS ${dir}/nlohmann_jsonConfig.cmake)
    set(nlohmann_json_DIR ${dir} CACHE PATH "host nlohmann_json (header-only)")
  endif()
endforeach()

# Empty: no -cpu flag, so qemu takes the QEMU_CPU environment variable
# (scripts/cross_test.sh runs ctest once per model that way).
set(LILIMS_QEMU_CPU "max" CACHE STRING "qemu-aarch64 -cpu model the tests run on")
if(LILIMS_QEMU_CPU)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;${LILIMS_QEMU_CPU};-L;/usr/aarch64-linux-gnu)
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
endif()
