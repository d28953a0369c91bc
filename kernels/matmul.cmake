# Matmul kernels (one list: kernels/matmul_kernels.inc).
list(APPEND LILIMS_KERNEL_SOURCES
  matmul_dispatch.cpp
  ref/matmul_ref.cpp
  ref/matmul_kquant_ref.cpp
  ref/quantize_q8_ref.cpp)
list(APPEND LILIMS_AVX2_SOURCES
  x86/matmul_gemm_x4_avx2.cpp
  x86/matmul_q5_0_gemm_avx2.cpp
  x86/matmul_kquant_gemm_avx2.cpp
  x86/matmul_f32_gemm_avx2.cpp
  x86/quantize_q8_avx2.cpp)
list(APPEND LILIMS_AVX512VNNI_SOURCES
  x86/matmul_gemm_x16_avx512vnni.cpp
  x86/matmul_kquant_gemm_avx512vnni.cpp)
list(APPEND LILIMS_NEON_SOURCES
  arm/matmul_gemm_x4_neon.cpp
  arm/matmul_kquant_gemm_neon.cpp
  arm/matmul_f32_gemm_neon.cpp
  arm/quantize_q8_neon.cpp)
list(APPEND LILIMS_DOTPROD_SOURCES
  arm/matmul_gemm_x4_neon_dotprod.cpp
  arm/matmul_kquant_gemm_neon_dotprod.cpp)
list(APPEND LILIMS_I8MM_SOURCES
  arm/matmul_gemm_x4_neon_i8mm.cpp)
