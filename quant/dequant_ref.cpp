#include "quant/dequant_ref.h"

#include <cstring>

#include "base/fp16.h"

namespace lilims::quant {

const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};

namespace {

uint32_t load_u32le(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

}  // namespace

void bf16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = (uint32_t)s[i] << 16;
    std::memcpy(&dst[i], &bits, sizeof bits);
  }
}

void q5_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, dst += kBlock) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    const uint32_t qh = load_u32le(b[i].qh);
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
      dst[j] = d * (float)lo + m;
      dst[j + kBlock / 2] = d * (float)hi + m;
    }
  }
}

void iq4_nl_to_float(const void* src, float* dst, int64_t n) {
  const BlockIQ4_NL* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, dst += kBlock) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kBlock / 2; ++j) {
      dst[j] = d * (float)kIq4nlValues[b[i].qs[j] & 0x0f];
      dst[j + kBlock / 2] = d * (float)kIq4nlValues[b[i].qs[j] >> 4];
    }
  }
}

void q2_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ2_K* b = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kBlockK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    // Each half of 128 elements reads 32 bytes of qs four times, two bits
    // further each pass; a pass covers two sub-blocks of 16.
    int sub = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b[i].qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * (float)(b[i].scales[sub] & 0x0f);
          const float ml = dmin * (float)(b[i].scales[sub] >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * (float)((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

namespace {

// Q3_K's 16 signed 6-bit scales: the low nibbles are bytes 0-7 (sub-blocks
// 0-7 low nibble, 8-15 high nibble), the top two bits are bytes 8-11.
int q3_k_scale(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | high << 4) - 32;
}

}  // namespace

void q3_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ3_K* b = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kBlockK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    int sub = 0;
    uint8_t mask = 1;  // hmask holds bit 2 of the quants, one bit plane per 32 elements
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b[i].qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, mask = (uint8_t)(mask << 1)) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * (float)q3_k_scale(b[i].scales, sub);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((b[i].hmask[l] & mask) ? 0 : 4);
            *dst++ = dl * (float)v;
          }
        }
      }
    }
  }
}


// Q4_K/Q5_K's eight 6-bit (scale, min) pairs in 12 bytes: pairs 0-3 in the
// low 6 bits of bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 take their low
// nibbles from bytes 8-11 and their top two bits from the spare bits 6-7 of
// bytes 0-7.
void k_scale_min(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
    *min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

namespace {

// One super-block of Q4_K (qh nullptr) or Q5_K (qh: the fifth bits, sub-block
// j's in bit j of the 32 bytes).  Each 64 elements take 32 bytes of qs: low
// nibbles first (sub-block 2 * chunk), then high nibbles (2 * chunk + 1).
void q4_5_k_block_to_float(uint16_t d16, uint16_t dmin16, const uint8_t* scales,
                           const uint8_t* qs, const uint8_t* qh, float* dst) {
  const float d = fp16_to_fp32(d16);
  const float dmin = fp16_to_fp32(dmin16);
  for (int chunk = 0; chunk < 4; ++chunk) {
    const uint8_t* q = qs + 32 * chunk;
    for (int part = 0; part < 2; ++part) {
      const int j = 2 * chunk + part;
      int sc, m;
      k_scale_min(scales, j, &sc, &m);
      const float dl = d * (float)sc, ml = dmin * (float)m;
      for (int l = 0; l < 32; ++l) {
        const int high = qh ? ((qh[l] >> j) & 1) << 4 : 0;
        *dst++ = dl * (float)(((q[l] >> (4 * part)) & 0x0f) | high) - ml;
      }
    }
  }
}

}  // namespace

void q4_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kBlockK; ++i, dst += kBlockK)
    q4_5_k_block_to_float(b[i].d, b[i].dmin, b[i].scales, b[i].qs, nullptr, dst);
}

void q5_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_K* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kBlockK; ++i, dst += kBlockK)
    q4_5_k_block_to_float(b[i].d, b[i].dmin, b[i].scales, b[i].qs, b[i].qh, dst);
}

void q6_k_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kBlockK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    // Each half of 128 elements: 64 ql bytes (elements l and l+64 share the
    // byte l's nibbles, l+32 and l+96 byte l+32's) and 32 qh bytes (two bits
    // for each of the four quarters).
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b[i].ql + 64 * half;
      const uint8_t* qh = b[i].qh + 32 * half;
      const int8_t* sc = b[i].scales + 8 * half;
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * (float)sc[s] * (float)q0;
        y[l + 32] = d * (float)sc[s + 2] * (float)q1;
        y[l + 64] = d * (float)sc[s + 4] * (float)q2;
        y[l + 96] = d * (float)sc[s + 6] * (float)q3;
      }
    }
    dst += kBlockK;
  }
}

void transcode_q4_k_to_q4_1(const void* src, void* dst, int64_t n) {
  const BlockQ4_K* b = static_cast<const BlockQ4_K*>(src);
  BlockQ4_1* out = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kBlockK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const uint8_t* q = b[i].qs + 32 * chunk;
      for (int part = 0; part < 2; ++part) {
        int sc, m;
        k_scale_min(b[i].scales, 2 * chunk + part, &sc, &m);
        BlockQ4_1& o = *out++;
        o.d = fp32_to_fp16(d * (float)sc);
        o.m = fp32_to_fp16(-(dmin * (float)m));
        // Q4_K keeps sub-block element l in byte l (this part's nibble);
        // Q4_1 keeps elements j and j + 16 in byte j's low and high nibbles.
        for (int j = 0; j < kBlock / 2; ++j) {
          const int lo = (q[j] >> (4 * part)) & 0x0f, hi = (q[j + 16] >> (4 * part)) & 0x0f;
          o.qs[j] = (uint8_t)(lo | hi << 4);
        }
      }
    }
  }
}

}  // namespace lilims::quant
