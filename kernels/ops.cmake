# Non-matmul ops (norms, RoPE, activations, attention).
list(APPEND LILIMS_KERNEL_SOURCES ref/ops_ref.cpp)
