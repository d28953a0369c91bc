// CPU features and the kernel path ("ISA") chosen once at start-up.
// x86: cpuid (AVX2+FMA+F16C; AVX-512 F/BW/VL/VNNI with the OS saving the
// zmm state, read from XCR0).  aarch64: NEON is baseline, dotprod and i8mm
// come from the auxiliary vector (hwcaps) on Linux and Android, from sysctl
// (hw.optional.arm.FEAT_*) on Apple systems.
//   LILIMS_ISA=ref|avx2|avx512vnni|neon forces a path: "avx2" keeps the x86
// kernels to AVX2 on a CPU that has AVX-512 VNNI, "avx512vnni" is the x86
// default where the CPU has it; a path the build or CPU cannot run falls
// back to ref.
#pragma once

namespace lilims::kernels {

enum class Isa { ref, avx2, neon };

struct CpuFeatures {
  bool avx2 = false;  // with FMA and F16C
  bool avx512vnni = false;  // AVX-512 F, BW, VL and VNNI, zmm state enabled
  bool neon = false;
  bool dotprod = false;  // aarch64 SDOT/UDOT
  bool i8mm = false;     // aarch64 SMMLA
};

// Detected once (thread-safe static), never written afterwards.
const CpuFeatures& cpu_features();
// The path in use: the best available, or the one LILIMS_ISA names.
Isa active_isa();
const char* isa_name(Isa isa);
// True when the x86 path uses its AVX-512 VNNI matmul kernels (the CPU has
// them and LILIMS_ISA does not keep the path to AVX2).  The other ops stay
// AVX2.
bool vnni_enabled();
// The kernel path in words: isa_name(active_isa()), "+avx512vnni" when
// vnni_enabled().
const char* kernel_path_name();

}  // namespace lilims::kernels
