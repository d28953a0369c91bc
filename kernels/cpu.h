// CPU features and the kernel path ("ISA") chosen once at start-up.
// x86: cpuid (AVX2+FMA+F16C). aarch64: NEON is baseline, dotprod and i8mm
// come from the auxiliary vector (hwcaps) on Linux and Android, from sysctl
// (hw.optional.arm.FEAT_*) on Apple systems.  LILIMS_ISA=ref|avx2|neon forces
// a path (an unavailable one falls back to ref).
#pragma once

namespace lilims::kernels {

enum class Isa { ref, avx2, neon };

struct CpuFeatures {
  bool avx2 = false;  // with FMA and F16C
  bool neon = false;
  bool dotprod = false;  // aarch64 SDOT/UDOT
  bool i8mm = false;     // aarch64 SMMLA
};

// Detected once (thread-safe static), never written afterwards.
const CpuFeatures& cpu_features();
// The path in use: the best available, or the one LILIMS_ISA names.
Isa active_isa();
const char* isa_name(Isa isa);

}  // namespace lilims::kernels
