// Image preprocessing for CLIP vision encoders, as Hugging Face's
// CLIPImageProcessor (PIL backend) does it: resize the shortest side to the
// encoder's image size with PIL's bicubic filter, center crop a square,
// rescale to [0, 1] and normalise per channel with the file's mean and std.
//
// The resize reproduces PIL's Resample.c arithmetic for 8-bit images, so its
// output bytes equal PIL's: a separable convolution whose filter support
// grows with the downscale factor (antialiasing), coefficients normalised to
// sum 1 and then rounded to 22-bit fixed point, a horizontal pass then a
// vertical one, each rounded and clamped to 0..255.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/gguf.h"

namespace lilims::models {

// RGB8 pixels as a camera or a decoder hands them over: row y starts at
// data + y * stride, pixel x of it at + 3 * x (R, G, B).
struct RgbImage {
  const uint8_t* data = nullptr;
  int width = 0, height = 0;
  size_t stride = 0;  // bytes per row, >= 3 * width
};

// The largest side an image may have (larger ones are refused, not scaled:
// a 16k x 16k RGB image is already 768 MiB).
constexpr int kMaxImageSide = 16384;
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;  // 64 Mpx, 192 MiB of RGB8

struct ClipImageParams {
  int image_size = 0;  // the encoder's square input side
  float mean[3] = {0, 0, 0};
  float std[3] = {1, 1, 1};
};

// clip.vision.image_size, clip.vision.image_mean / image_std of a projector
// GGUF.  Throws lilims::Error ("[clip] ...") for a missing or bad value.
ClipImageParams clip_image_params(const gguf::File& f);

// Throws lilims::Error LILIMS_ERR_INVALID_ARGUMENT ("[image] ...") for a null
// pointer, a zero or negative size, a side above kMaxImageSide, more than
// kMaxImagePixels pixels or a stride
// below 3 * width.
void check_image(const RgbImage& img);

// PIL's Image.resize(..., BICUBIC) of an RGB8 image to (out_w, out_h);
// returns packed RGB8 rows (stride 3 * out_w).
std::vector<uint8_t> resize_bicubic(const RgbImage& img, int out_w, int out_h);

// The size HF resizes an image to: the shortest side becomes `size`, the
// other int(size * long / short) (truncated, as HF does).
void shortest_side_size(int width, int height, int size, int* out_w, int* out_h);

// The encoder's input: (3, image_size, image_size) floats, channel-major,
// ((u / 255) - mean[c]) / std[c] of the resized and center-cropped bytes u,
// rounded as HF does (u / 255 in double, then float32 arithmetic).
std::vector<float> clip_preprocess(const RgbImage& img, const ClipImageParams& p);

}  // namespace lilims::models
