# Apple platforms with Xcode's clang, one architecture per build (each build
# holds the kernel files of its own architecture; scripts/build_apple.sh
# joins them into an xcframework):
#   cmake -S . -B build-ios -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/ios.toolchain.cmake \
#         [-DLILIMS_APPLE_PLATFORM=iphoneos|iphonesimulator|macosx] [-DLILIMS_APPLE_ARCH=arm64|x86_64] \
#         [-DLILIMS_APPLE_DEPLOYMENT_TARGET=15.0] [-Dnlohmann_json_DIR=...]
# iOS 15 / macOS 12 are the first with sysctl hw.optional.arm.FEAT_DotProd,
# which kernels/cpu.cpp reads; on older systems the plain NEON kernels run.
set(LILIMS_APPLE_PLATFORM "iphoneos" CACHE STRING "iphoneos, iphonesimulator or macosx")
set(LILIMS_APPLE_ARCH "arm64" CACHE STRING "arm64 or x86_64 (simulator and macOS only)")

if(LILIMS_APPLE_PLATFORM STREQUAL "macosx")
  set(CMAKE_SYSTEM_NAME Darwin)
  set(lilims_default_target 12.0)
elseif(LILIMS_APPLE_PLATFORM MATCHES "^iphone(os|simulator)$")
  set(CMAKE_SYSTEM_NAME iOS)
  set(lilims_default_target 15.0)
else()
  message(FATAL_ERROR "LILIMS_APPLE_PLATFORM must be iphoneos, iphonesimulator or macosx")
endif()
if(LILIMS_APPLE_PLATFORM STREQUAL "iphoneos" AND NOT LILIMS_APPLE_ARCH STREQUAL "arm64")
  message(FATAL_ERROR "iOS devices are arm64")
endif()
set(LILIMS_APPLE_DEPLOYMENT_TARGET ${lilims_default_target} CACHE STRING "minimum OS version")

set(CMAKE_OSX_SYSROOT ${LILIMS_APPLE_PLATFORM})
set(CMAKE_OSX_ARCHITECTURES ${LILIMS_APPLE_ARCH})
set(CMAKE_OSX_DEPLOYMENT_TARGET ${LILIMS_APPLE_DEPLOYMENT_TARGET})
# The root CMakeLists.txt picks the kernel files from the processor.
set(CMAKE_SYSTEM_PROCESSOR ${LILIMS_APPLE_ARCH})
# A device build cannot run what it links: probe the compiler with a library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_XCODE_ATTRIBUTE_ONLY_ACTIVE_ARCH NO)
# nlohmann_json is header-only: the host's copy (Homebrew, MacPorts) serves.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
