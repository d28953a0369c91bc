#include "quant/prelaid.h"

#include "base/error.h"
#include "quant/repack.h"

namespace lilims::quant {
namespace {

// id = kPrelaidTypeBase + 4 * (GGML id of the block format) + code.
constexpr uint32_t kCodeX4 = 1, kCodeX16 = 2, kCodeX4Xor = 3;

bool valid(const PrelaidType& p) {
  if (p.layout != kLayoutX4 && p.layout != kLayoutX16) return false;
  if (p.q4_0_xor && (p.type != Type::Q4_0 || p.layout != kLayoutX4)) return false;
  const uint32_t t = static_cast<uint32_t>(p.type);
  return type_traits(t) && traits(p.type).weight && repacked_bytes(p.type, p.layout, 1, kBlock) > 0;
}

}  // namespace

bool prelaid_type(uint32_t id, PrelaidType* out) {
  if (id < kPrelaidTypeBase || id >= kPrelaidTypeBase + 4 * 64) return false;
  const uint32_t type = (id - kPrelaidTypeBase) / 4, code = (id - kPrelaidTypeBase) % 4;
  if (code == 0 || !type_traits(type)) return false;
  PrelaidType p;
  p.type = static_cast<Type>(type);
  p.layout = code == kCodeX16 ? kLayoutX16 : kLayoutX4;
  p.q4_0_xor = code == kCodeX4Xor;
  if (!valid(p)) return false;
  if (out) *out = p;
  return true;
}

uint32_t prelaid_type_id(const PrelaidType& p) {
  if (!valid(p)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[quant] no pre-laid layout holds ") +
                                                 traits(p.type).name + " in " +
                                                 (p.layout == kLayoutX16 ? "16" : "4") + "-row groups");
  }
  const uint32_t code = p.layout == kLayoutX16 ? kCodeX16 : p.q4_0_xor ? kCodeX4Xor : kCodeX4;
  return kPrelaidTypeBase + 4 * static_cast<uint32_t>(p.type) + code;
}

PrelaidType native_prelaid(Type type, int layout) {
  PrelaidType p;
  p.type = type;
  p.layout = layout;
  p.q4_0_xor = type == Type::Q4_0 && layout == kLayoutX4 && kQ4_0X4Xor != 0;
  return p;
}

std::string prelaid_type_name(uint32_t id) {
  PrelaidType p;
  if (!prelaid_type(id, &p)) return "type " + std::to_string(id);
  return std::string(traits(p.type).name) + (p.layout == kLayoutX16 ? "x16" : "x4") +
         (p.q4_0_xor ? "a" : "");
}

size_t prelaid_bytes(const PrelaidType& p, int64_t rows, int64_t cols) {
  return repacked_bytes(p.type, p.layout, rows, cols);
}

void flip_q4_0_x4_variant(void* bytes, int64_t rows, int64_t cols) {
  // Each 72-byte block of a group: 4 fp16 scales, then 64 quant bytes.
  const size_t blocks = (size_t)((rows + 3) / 4) * (size_t)(cols / kBlock);
  uint8_t* b = static_cast<uint8_t*>(bytes);
  for (size_t i = 0; i < blocks; ++i, b += sizeof(BlockQ4_0x4)) {
    for (size_t k = sizeof(uint16_t) * 4; k < sizeof(BlockQ4_0x4); ++k) b[k] ^= 0x88;
  }
}

}  // namespace lilims::quant
