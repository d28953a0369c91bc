#include "models/clip_image.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace lilims::models {
namespace {

// PIL keeps 8-bit resampling coefficients in fixed point with this many
// fractional bits (32 bits - 8 for the pixel - 2 of headroom for the sum of
// the negative and positive lobes).
constexpr int kPrecisionBits = 22;

// Keys's cubic with a = -0.5, PIL's "bicubic"; support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The taps of one output pixel: source pixels [first, first + weights.size()).
struct Taps {
  int first = 0;
  std::vector<int32_t> weights;  // fixed point, kPrecisionBits
};

// PIL's precompute_coeffs + normalize_coeffs_8bpc for an axis of in_size
// source pixels mapped onto out_size pixels.
std::vector<Taps> coefficients(int in_size, int out_size) {
  const double scale = (double)in_size / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the filter when shrinking
  const double support = 2.0 * filter_scale;
  std::vector<Taps> out((size_t)out_size);
  std::vector<double> k;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    // (int) truncates toward zero, as in C; negative values clamp to 0 anyway.
    const int xmin = std::max(0, (int)(center - support + 0.5));
    const int xmax = std::min(in_size, (int)(center + support + 0.5));
    k.assign((size_t)std::max(0, xmax - xmin), 0.0);
    double sum = 0.0;
    for (int x = xmin; x < xmax; ++x) {
      const double w = bicubic((x - center + 0.5) / filter_scale);
      k[(size_t)(x - xmin)] = w;
      sum += w;
    }
    Taps& t = out[(size_t)xx];
    t.first = xmin;
    t.weights.resize(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
      const double w = (sum != 0.0 ? k[i] / sum : k[i]) * (double)(1 << kPrecisionBits);
      t.weights[i] = (int32_t)(w < 0 ? w - 0.5 : w + 0.5);
    }
  }
  return out;
}

uint8_t clamp_u8(int32_t fixed) {
  const int32_t v = fixed >> kPrecisionBits;  // arithmetic shift: floor, as PIL
  return (uint8_t)std::clamp(v, 0, 255);
}

// One pass along rows (step = 3 bytes, one pixel) or columns (step = a row).
// `src_at(o, c)` is channel c of source pixel o along the axis; the sum starts
// at one half in fixed point, so the shift rounds to nearest.
template <class SrcAt>
void filter_line(const std::vector<Taps>& taps, SrcAt src_at, uint8_t* dst, size_t dst_step) {
  for (size_t o = 0; o < taps.size(); ++o) {
    const Taps& t = taps[o];
    for (int c = 0; c < 3; ++c) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      for (size_t i = 0; i < t.weights.size(); ++i) {
        acc += (int32_t)src_at(t.first + (int)i, c) * t.weights[i];
      }
      dst[o * dst_step + (size_t)c] = clamp_u8(acc);
    }
  }
}

std::vector<float> f32_array(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) throw Error(LILIMS_ERR_MISSING, "[clip] missing key " + key);
  if (v->type != gguf::ValueType::ARRAY || v->size() != 3) {
    throw Error(LILIMS_ERR_BAD_FORMAT, "[clip] " + key + " must be an array of 3 numbers");
  }
  std::vector<float> out;
  for (size_t i = 0; i < 3; ++i) {
    const gguf::Value e = v->at(i);
    const double x = e.type == gguf::ValueType::FLOAT32 || e.type == gguf::ValueType::FLOAT64
                         ? e.f
                         : (e.is_integer() ? (double)e.i : NAN);
    if (!std::isfinite(x)) {
      throw Error(LILIMS_ERR_BAD_FORMAT, "[clip] " + key + " must be an array of 3 finite numbers");
    }
    out.push_back((float)x);
  }
  return out;
}

}  // namespace

ClipImageParams clip_image_params(const gguf::File& f) {
  ClipImageParams p;
  const int64_t size = f.get_int("clip.vision.image_size");
  if (size < 1 || size > 4096) {
    throw Error(LILIMS_ERR_BAD_FORMAT,
                "[clip] clip.vision.image_size " + std::to_string(size) + " is outside 1..4096");
  }
  p.image_size = (int)size;
  const std::vector<float> mean = f32_array(f, "clip.vision.image_mean");
  const std::vector<float> std_dev = f32_array(f, "clip.vision.image_std");
  for (int c = 0; c < 3; ++c) {
    if (!(std_dev[(size_t)c] > 0.0f)) {
      throw Error(LILIMS_ERR_BAD_FORMAT, "[clip] clip.vision.image_std must be positive");
    }
    p.mean[c] = mean[(size_t)c];
    p.std[c] = std_dev[(size_t)c];
  }
  return p;
}

void check_image(const RgbImage& img) {
  if (img.data == nullptr) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[image] pixels are null");
  if (img.width <= 0 || img.height <= 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[image] size " + std::to_string(img.width) + "x" +
                                                 std::to_string(img.height) + " is empty");
  }
  if (img.width > kMaxImageSide || img.height > kMaxImageSide) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[image] size " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " exceeds the largest side allowed, " + std::to_string(kMaxImageSide));
  }
  if ((int64_t)img.width * img.height > kMaxImagePixels) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[image] size " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " exceeds the most pixels allowed, " + std::to_string(kMaxImagePixels));
  }
  if (img.stride < 3 * (size_t)img.width) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[image] stride " + std::to_string(img.stride) +
                                                 " is below 3 * width = " +
                                                 std::to_string(3 * (size_t)img.width));
  }
}

std::vector<uint8_t> resize_bicubic(const RgbImage& img, int out_w, int out_h) {
  check_image(img);
  if (out_w <= 0 || out_h <= 0 || out_w > kMaxImageSide || out_h > kMaxImageSide) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[image] resize target " + std::to_string(out_w) + "x" +
                                                 std::to_string(out_h) + " is out of range");
  }
  const std::vector<Taps> th = coefficients(img.width, out_w);
  const std::vector<Taps> tv = coefficients(img.height, out_h);

  // Horizontal pass over the source rows the vertical pass reads (PIL skips a
  // pass whose size does not change; at scale 1 the filter is the identity).
  const int y0 = tv.front().first;
  const int y1 = tv.back().first + (int)tv.back().weights.size();
  const bool horizontal = out_w != img.width;
  const int mid_w = horizontal ? out_w : img.width;
  std::vector<uint8_t> mid((size_t)mid_w * 3 * (size_t)(y1 - y0));
  for (int y = y0; y < y1; ++y) {
    const uint8_t* row = img.data + (size_t)y * img.stride;
    uint8_t* dst = mid.data() + (size_t)(y - y0) * 3 * (size_t)mid_w;
    if (horizontal) {
      filter_line(th, [row](int x, int c) { return row[3 * (size_t)x + (size_t)c]; }, dst, 3);
    } else {
      std::copy(row, row + 3 * (size_t)mid_w, dst);
    }
  }
  std::vector<uint8_t> out((size_t)out_w * 3 * (size_t)out_h);
  const size_t mid_stride = 3 * (size_t)mid_w;
  if (out_h == img.height) {
    std::copy(mid.begin(), mid.end(), out.begin());
    return out;
  }
  for (int x = 0; x < out_w; ++x) {
    const uint8_t* col = mid.data() + 3 * (size_t)x;
    filter_line(
        tv, [col, mid_stride, y0](int y, int c) { return col[(size_t)(y - y0) * mid_stride + (size_t)c]; },
        out.data() + 3 * (size_t)x, 3 * (size_t)out_w);
  }
  return out;
}

void shortest_side_size(int width, int height, int size, int* out_w, int* out_h) {
  const int s = std::min(width, height), l = std::max(width, height);
  // int(size * long / short) in Python: a double quotient, truncated.
  const int other = (int)((double)size * l / s);
  *out_w = width <= height ? size : other;
  *out_h = width <= height ? other : size;
}

std::vector<float> clip_preprocess(const RgbImage& img, const ClipImageParams& p) {
  check_image(img);
  if (p.image_size < 1) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[image] encoder image size is not set");
  const int n = p.image_size;
  int rw = 0, rh = 0;
  shortest_side_size(img.width, img.height, n, &rw, &rh);
  if (rw > kMaxImageSide || rh > kMaxImageSide) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[image] aspect ratio " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " is too extreme to resize to a side of " + std::to_string(n));
  }
  const std::vector<uint8_t> r = resize_bicubic(img, rw, rh);
  const int top = (rh - n) / 2, left = (rw - n) / 2;  // both >= 0: the short side is n
  std::vector<float> out((size_t)3 * (size_t)n * (size_t)n);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < n; ++y) {
      const uint8_t* row = r.data() + ((size_t)(top + y) * (size_t)rw + (size_t)left) * 3;
      float* dst = out.data() + ((size_t)c * (size_t)n + (size_t)y) * (size_t)n;
      for (int x = 0; x < n; ++x) {
        const float v = (float)(row[3 * (size_t)x + (size_t)c] * (1.0 / 255.0));
        dst[x] = (v - p.mean[c]) / p.std[c];
      }
    }
  }
  return out;
}

}  // namespace lilims::models
