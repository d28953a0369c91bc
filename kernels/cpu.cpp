#include "kernels/cpu.h"

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "kernels/isa_target.h"  // LILIMS_HAVE_*: the paths this build holds

namespace lilims::kernels {
namespace {

#if defined(__aarch64__) && defined(__APPLE__)
// A12 and earlier lack dotprod, and i8mm arrived with M2/A15.  The
// hw.optional.arm.FEAT_* keys exist from macOS 12 / iOS 15: on an older
// system the feature reads as absent and the plain NEON kernels run.
bool apple_has(const char* key) {
  int value = 0;
  size_t size = sizeof value;
  return sysctlbyname(key, &value, &size, nullptr, 0) == 0 && value != 0;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27),
               avx = c & (1u << 28);
    bool ymm_enabled = false, zmm_enabled = false;
    if (osxsave) {
      unsigned lo, hi;
      __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      ymm_enabled = (lo & 6u) == 6u;
      zmm_enabled = (lo & 0xe6u) == 0xe6u;  // + opmask, ZMM_Hi256, Hi16_ZMM
    }
    if (avx && fma && f16c && ymm_enabled && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = b & (1u << 5);
      const bool f512 = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31),
                 vnni = c & (1u << 11);
      f.avx512vnni = f.avx2 && zmm_enabled && f512 && bw && vl && vnni;
    }
  }
#elif defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.dotprod = hw & (1ul << 20);  // HWCAP_ASIMDDP
  f.i8mm = hw2 & (1ul << 13);    // HWCAP2_I8MM
#elif defined(__APPLE__)
  f.dotprod = apple_has("hw.optional.arm.FEAT_DotProd");
  f.i8mm = apple_has("hw.optional.arm.FEAT_I8MM");
#endif
#endif
  return f;
}

// The kernel path: the ISA, and whether its matmuls use AVX-512 VNNI.
struct Path {
  Isa isa;
  bool vnni;
};

Path choose() {
  const CpuFeatures& f = cpu_features();
  Path best{Isa::ref, false};
#if defined(LILIMS_HAVE_AVX2)
  if (f.avx2) best.isa = Isa::avx2;
#endif
#if defined(LILIMS_HAVE_AVX512VNNI)
  best.vnni = best.isa == Isa::avx2 && f.avx512vnni;
#endif
#if defined(LILIMS_HAVE_NEON)
  if (f.neon) best.isa = Isa::neon;
#endif
  const char* forced = std::getenv("LILIMS_ISA");
  if (forced && *forced) {  // set and not empty
    if (std::strcmp(forced, "avx2") == 0 && best.isa == Isa::avx2) return {Isa::avx2, false};
    if (std::strcmp(forced, "avx512vnni") == 0 && best.vnni) return best;
    if (std::strcmp(forced, "neon") == 0 && best.isa == Isa::neon) return best;
    return {Isa::ref, false};  // "ref", or a path this build or CPU cannot run
  }
  return best;
}

const Path& active_path() {
  static const Path path = choose();
  return path;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

Isa active_isa() { return active_path().isa; }

bool vnni_enabled() { return active_path().vnni; }

const char* kernel_path_name() {
  if (vnni_enabled()) return "avx2+avx512vnni";
  return isa_name(active_isa());
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::ref: return "ref";
    case Isa::avx2: return "avx2";
    case Isa::neon: return "neon";
  }
  return "?";
}

}  // namespace lilims::kernels
