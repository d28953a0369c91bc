#include "quant/prelaid.h"

#include "base/error.h"
#include "quant/repack.h"

namespace lilims::quant {
namespace {

// id = kPrelaidTypeBase + 4 * (GGML id of the block format) + code: code
// kLayoutX4 (1) or kLayoutX16 (2) for one layout's bytes as x86 builds write
// them, kCodeX4Arm for 4-row groups as aarch64 builds write them where that
// differs (the ids leave room for one such layout).
constexpr uint32_t kCodeX4Arm = 3;
static_assert(kLayoutX4 == 1 && kLayoutX16 == 2 && kLayoutCount == 3, "codes 1-2 are the layouts");

#if defined(__aarch64__)
constexpr bool kArmBuild = true;
#else
constexpr bool kArmBuild = false;
#endif

bool valid(const PrelaidType& p) {
  if (p.layout <= kLayoutGguf || p.layout >= kLayoutCount) return false;
  if (p.arm_variant && (p.layout != kLayoutX4 || variant_xor(p.type, p.layout) == 0)) return false;
  const TypeTraits* t = type_traits(static_cast<uint32_t>(p.type));
  return t && t->type == p.type && repackable(p.type, p.layout);
}

}  // namespace

bool prelaid_type(uint32_t id, PrelaidType* out) {
  if (id < kPrelaidTypeBase || id >= kPrelaidTypeBase + 4 * 64) return false;
  const uint32_t type = (id - kPrelaidTypeBase) / 4, code = (id - kPrelaidTypeBase) % 4;
  if (code == 0 || !type_traits(type)) return false;
  PrelaidType p;
  p.type = static_cast<Type>(type);
  p.layout = code == kCodeX4Arm ? kLayoutX4 : static_cast<int>(code);
  p.arm_variant = code == kCodeX4Arm;
  if (!valid(p)) return false;
  if (out) *out = p;
  return true;
}

uint32_t prelaid_type_id(const PrelaidType& p) {
  if (!valid(p)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[quant] no pre-laid layout holds ") +
                                                 traits(p.type).name + " in " +
                                                 std::to_string(layout_group_rows(p.layout)) + "-row groups");
  }
  const uint32_t code = p.arm_variant ? kCodeX4Arm : static_cast<uint32_t>(p.layout);
  return kPrelaidTypeBase + 4 * static_cast<uint32_t>(p.type) + code;
}

PrelaidType prelaid_for(Type type, int layout, bool arm) {
  PrelaidType p;
  p.type = type;
  p.layout = layout;
  p.arm_variant = arm && variant_xor(type, layout) != 0;
  return p;
}

PrelaidType native_prelaid(Type type, int layout) { return prelaid_for(type, layout, kArmBuild); }

std::string prelaid_type_name(uint32_t id) {
  PrelaidType p;
  if (!prelaid_type(id, &p)) return "type " + std::to_string(id);
  return std::string(traits(p.type).name) + layout_traits(p.layout).name + (p.arm_variant ? "a" : "");
}

size_t prelaid_bytes(const PrelaidType& p, int64_t rows, int64_t cols) {
  return repacked_bytes(p.type, p.layout, rows, cols);
}

uint8_t variant_xor(Type type, int layout) {
  const Packing& k = traits(type).packing[layout_traits(layout).layout];
  return static_cast<uint8_t>(k.quant_xor ^ k.quant_xor_arm);
}

void flip_variant(const PrelaidType& p, void* bytes, int64_t rows, int64_t cols) {
  // Each block column of a group: G rows' scales, then their quant bytes.
  const TypeTraits& t = traits(p.type);
  const uint8_t x = variant_xor(p.type, p.layout);
  const size_t g = (size_t)layout_group_rows(p.layout);
  const size_t blocks = (size_t)((rows + (int64_t)g - 1) / (int64_t)g) * (size_t)(cols / t.block_size);
  uint8_t* b = static_cast<uint8_t*>(bytes);
  for (size_t i = 0; i < blocks; ++i, b += g * t.block_bytes) {
    for (size_t k = g * t.scale_bytes; k < g * t.block_bytes; ++k) b[k] ^= x;
  }
}

}  // namespace lilims::quant
