// IEEE binary16 <-> binary32 conversion, portable and exact (round to
// nearest even), the scalar oracle for the F16C / NEON conversions.
#pragma once

#include <cstdint>

namespace lilims {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

}  // namespace lilims
