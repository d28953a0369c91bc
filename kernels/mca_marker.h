// llvm-mca marker (bench/mca_neon.sh, bench/mca_kquant.sh): an empty asm
// comment at the top of a block-loop body that names the loop and what one
// iteration does: rows x tokens x kblocks blocks of K (a block is the weight
// type's: 32 elements, or 256 for the K-quants' super-blocks).  The scripts
// analyse the loop around it as compiled.  Only the -S builds of those
// scripts define LILIMS_MCA_MARKERS; otherwise the macro is nothing.  GCC
// may order or allocate a loop a little differently around the asm, so
// bench/mca_kquant.sh takes the same loop from a build without markers.
#pragma once

#if defined(LILIMS_MCA_MARKERS)
#if defined(__x86_64__) || defined(__i386__)
#define LILIMS_MCA_COMMENT "#"
#else
#define LILIMS_MCA_COMMENT "//"
#endif
// %c: the bare constant (no '#' on aarch64, no '$' on x86).
#define LILIMS_MCA_LOOP(name, rows, tokens, kblocks)                                    \
  __asm__ volatile(LILIMS_MCA_COMMENT " LILIMS-MCA-LOOP " name                          \
                   " rows=%c0 tokens=%c1 kblocks=%c2" ::"i"(rows), "i"(tokens), "i"(kblocks))
#else
#define LILIMS_MCA_LOOP(name, rows, tokens, kblocks) ((void)0)
#endif
