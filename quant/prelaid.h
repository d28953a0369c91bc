// Pre-laid weights: tensors stored in a GGUF file already in a kernel
// layout (quant/repack.h), so that a load reads them in place from a
// read-only mapping instead of repacking them into memory of its own.
// `lilims quantize IN OUT TYPE --layout TARGET` writes them.
//
// Such a tensor has a type id of lilims' own (kPrelaidTypeBase and up,
// beyond every GGML type, so llama.cpp refuses the file with its "invalid
// ggml type" error instead of misreading it) naming the block format, the
// layout and the byte variant; its bytes are exactly quant::repack's
// output (rows padded to whole groups), at an offset that is a multiple of
// kPrelaidAlignment.  A file holding any records kLayoutVersionKey =
// kLayoutVersion; a reader refuses another version.
//
// The variant: where a format's packing XORs its quant bytes one way in
// x86 builds and another in aarch64 builds (TypeTraits::packing: Q4_0 in
// 4-row groups, GGUF's nibbles on x86 and XOR 0x88 on aarch64), both are
// listed so a file can be laid out on one machine for the other.  Every
// other (type, layout) has one variant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "quant/quant.h"

namespace lilims::quant {

constexpr uint32_t kPrelaidTypeBase = 1000;
constexpr const char* kLayoutVersionKey = "lilims.layout.version";
constexpr uint32_t kLayoutVersion = 1;
// Which CPUs the file was laid out for ("avx2", "avx512vnni", "neon"); for messages.
constexpr const char* kLayoutTargetKey = "lilims.layout.target";
constexpr size_t kPrelaidAlignment = 64;

struct PrelaidType {
  Type type = Type::F32;     // the block format
  int layout = 0;            // kLayoutX4 or kLayoutX16
  bool arm_variant = false;  // the bytes aarch64 builds write, where they differ from x86's
};

// The pre-laid type an id stands for, or false (GGML ids and unknown ones).
bool prelaid_type(uint32_t id, PrelaidType* out);
// The id of a pre-laid type; throws lilims::Error LILIMS_ERR_INVALID_ARGUMENT
// for a combination no kernel reads.
uint32_t prelaid_type_id(const PrelaidType& p);
// The variant of (type, layout) aarch64 builds' repack() writes (arm), or
// x86 builds'.
PrelaidType prelaid_for(Type type, int layout, bool arm);
// The variant this build's repack() writes for (type, layout).
PrelaidType native_prelaid(Type type, int layout);
// "Q4_1x16", "Q4_0x4", "Q4_0x4a" (the aarch64 variant).
std::string prelaid_type_name(uint32_t id);
// Bytes of a rows x cols pre-laid tensor (rows rounded up to whole groups).
size_t prelaid_bytes(const PrelaidType& p, int64_t rows, int64_t cols);
// What turns one variant's quant bytes of (type, layout) into the other's
// (0: a single variant).
uint8_t variant_xor(Type type, int layout);
// Converts in place between the x86 and aarch64 variants of p's type and
// layout (bytes: a repacked rows x cols matrix); XOR is its own inverse.
void flip_variant(const PrelaidType& p, void* bytes, int64_t rows, int64_t cols);

}  // namespace lilims::quant
