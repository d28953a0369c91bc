// The instruction sets of the per-ISA kernel files, for a build that cannot
// give one file compiler flags of its own.
//
// CMake compiles only the target architecture's files of kernels/x86 or
// kernels/arm, each with its ISA's flags (kernels/CMakeLists.txt: -mavx2
// -mfma -mf16c; those and AVX-512 F/BW/VL/VNNI; -march=armv8.2-a+dotprod,
// +i8mm), and says which with -DLILIMS_HAVE_AVX2 etc.  The Swift package
// (Package.swift) compiles every file of kernels/ with one set of flags, for
// each architecture it builds, and defines LILIMS_KERNELS_BY_ARCH.  Then
// this header
//   - defines LILIMS_HAVE_* and LILIMS_OPS_* from the target architecture,
//     as CMake would have, so that a file of the other architecture
//     compiles to nothing and dispatch (kernels/cpu.cpp) lists what is built;
//   - makes LILIMS_TARGET_<ISA>_BEGIN ... LILIMS_TARGET_<ISA>_END give every
//     function declared between them the ISA, as the flags would (clang:
//     `#pragma clang attribute` with target(...); g++: `#pragma GCC target`).
// Where the flags already enable an ISA (the CMake build) its macros expand
// to nothing: that build's code is what its flags make.  Either way a
// function of an ISA runs only where cpu_features() found the ISA.
//
// A per-ISA file reads:
//   #include "kernels/isa_target.h"
//   #if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
//   LILIMS_TARGET_AVX2_BEGIN
//   #include <immintrin.h>
//   ... its other includes and its kernels ...
//   LILIMS_TARGET_AVX2_END
//   #endif
// The region opens before the first include, as a flag would apply to the
// whole file: a header first included outside it and again inside (the
// standard library's redeclare templates they define) would take the target
// only in part.  A baseline NEON file needs no region: NEON is part of
// every aarch64.  On aarch64, clang needs an arm_neon.h that declares the
// dotprod and i8mm intrinsics with target attributes rather than behind
// __ARM_FEATURE_* (LLVM 16 on, reviews.llvm.org/D132034; Xcode 16's clang,
// which the package's swift-tools-version 6.0 requires, is later).
#pragma once

#if defined(LILIMS_KERNELS_BY_ARCH)
#if defined(__x86_64__) || defined(_M_X64)
#define LILIMS_HAVE_AVX2 1
#define LILIMS_HAVE_AVX512VNNI 1
#define LILIMS_OPS_AVX2 1
#elif defined(__aarch64__)
#define LILIMS_HAVE_NEON 1
#define LILIMS_OPS_NEON 1
#endif
#endif

#define LILIMS_PRAGMA_(text) _Pragma(#text)

// A target region: FEATURES for clang's target attribute, GCC_FEATURES for
// `#pragma GCC target` (on AArch64 g++'s arm_neon.h wants the -march
// spelling).
#if defined(__clang__)
#define LILIMS_TARGET_BEGIN_(features, gcc_features)                                     \
  LILIMS_PRAGMA_(clang attribute push(__attribute__((target(features))), apply_to = function))
#define LILIMS_TARGET_END_ LILIMS_PRAGMA_(clang attribute pop)
#elif defined(__GNUC__)
// g++ warns (-Wpsabi) that a captureless lambda's conversion to a function
// pointer, compiled without the region's ISA, returns a vector of it in
// other registers; only the region's own code calls such lambdas.
#define LILIMS_TARGET_BEGIN_(features, gcc_features) \
  LILIMS_PRAGMA_(GCC push_options)                   \
  LILIMS_PRAGMA_(GCC target(gcc_features))           \
  LILIMS_PRAGMA_(GCC diagnostic push)                \
  LILIMS_PRAGMA_(GCC diagnostic ignored "-Wpsabi")
#define LILIMS_TARGET_END_                \
  LILIMS_PRAGMA_(GCC diagnostic pop)      \
  LILIMS_PRAGMA_(GCC pop_options)
#else
#error "kernels/isa_target.h: per-function targets need clang or g++"
#endif

// x86: AVX2 with FMA and F16C (Isa::avx2).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LILIMS_TARGET_AVX2_BEGIN
#define LILIMS_TARGET_AVX2_END
#else
#define LILIMS_TARGET_AVX2_BEGIN LILIMS_TARGET_BEGIN_("avx2,fma,f16c", "avx2,fma,f16c")
#define LILIMS_TARGET_AVX2_END LILIMS_TARGET_END_
#endif

// x86: those and AVX-512 F/BW/VL/VNNI (the avx512vnni matmul kernels).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define LILIMS_TARGET_AVX512VNNI_BEGIN
#define LILIMS_TARGET_AVX512VNNI_END
#else
#define LILIMS_TARGET_AVX512VNNI_BEGIN                                          \
  LILIMS_TARGET_BEGIN_("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", \
                       "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define LILIMS_TARGET_AVX512VNNI_END LILIMS_TARGET_END_
#endif

// aarch64: SDOT/UDOT (the neon_dotprod kernels).
#if defined(__ARM_FEATURE_DOTPROD)
#define LILIMS_TARGET_DOTPROD_BEGIN
#define LILIMS_TARGET_DOTPROD_END
#else
#define LILIMS_TARGET_DOTPROD_BEGIN LILIMS_TARGET_BEGIN_("dotprod", "arch=armv8.2-a+dotprod")
#define LILIMS_TARGET_DOTPROD_END LILIMS_TARGET_END_
#endif

// aarch64: dotprod and the int8 matrix multiply (the neon_i8mm kernels).
#if defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_MATMUL_INT8)
#define LILIMS_TARGET_I8MM_BEGIN
#define LILIMS_TARGET_I8MM_END
#else
#define LILIMS_TARGET_I8MM_BEGIN LILIMS_TARGET_BEGIN_("dotprod,i8mm", "arch=armv8.2-a+dotprod+i8mm")
#define LILIMS_TARGET_I8MM_END LILIMS_TARGET_END_
#endif
