# Non-matmul ops (norms, RoPE, activations, conversions, attention): the
# scalar refs and the dispatch table always, one ISA variant per file.
# LILIMS_OPS_<ISA> tells kernels/ops_dispatch.cpp which tables exist.
list(APPEND LILIMS_KERNEL_SOURCES
  ref/ops_ref.cpp
  ref/attention_ref.cpp
  ops_dispatch.cpp)
list(APPEND LILIMS_AVX2_SOURCES
  x86/ops_avx2.cpp
  x86/attention_avx2.cpp)
list(APPEND LILIMS_NEON_SOURCES
  arm/ops_neon.cpp
  arm/attention_neon.cpp)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set_property(SOURCE ops_dispatch.cpp TARGET_DIRECTORY lilims APPEND PROPERTY
    COMPILE_DEFINITIONS LILIMS_OPS_AVX2=1)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set_property(SOURCE ops_dispatch.cpp TARGET_DIRECTORY lilims APPEND PROPERTY
    COMPILE_DEFINITIONS LILIMS_OPS_NEON=1)
endif()
