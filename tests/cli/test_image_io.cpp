// PNG/JPEG decoding (tools/image_io.h) and CLIP preprocessing
// (models/clip_image.h) against HF transformers: the committed test images of
// tests/data/llava, decoded here, preprocessed with the projector file's
// image size, mean and std, must give CLIPImageProcessorPil's pixel tensors
// (scripts/goldens/gen_tiny_llava.py).  Broken files fail with clear errors.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/clip_image.h"
#include "models/gguf.h"
#include "test_util.h"
#include "tools/image_io.h"

namespace lilims::test {
namespace {

using json = nlohmann::json;

std::string llava(const std::string& f) { return source_path("tests/data/llava/" + f); }

std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::vector<uint8_t> bytes_of(const std::string& path) {
  const std::string s = read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Decoding `data` throws lilims::Error with `status` and a message holding `needle`.
void expect_decode_fails(const std::vector<uint8_t>& data, lilims_status status,
                         const std::string& needle) {
  try {
    tools::decode_image(data.data(), data.size(), "broken.img");
    ADD_FAILURE() << "decoded without an error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[image] broken.img: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(ClipPreprocess, MatchesTransformersPixels) {
  const json g = json::parse(read_file(llava("goldens.json")));
  const auto mmproj = gguf::File::open(llava("mmproj.gguf"));
  const models::ClipImageParams p = models::clip_image_params(*mmproj);
  ASSERT_EQ(p.image_size, g["image_size"].get<int>());
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(p.mean[c], g["image_mean"][c].get<float>());
    EXPECT_EQ(p.std[c], g["image_std"][c].get<float>());
  }
  for (const json& im : g["images"]) {
    SCOPED_TRACE(im["name"].get<std::string>());
    const tools::DecodedImage d = tools::decode_image_file(llava(im["png"]));
    ASSERT_EQ(d.width, im["width"].get<int>());
    ASSERT_EQ(d.height, im["height"].get<int>());
    const std::vector<float> got =
        models::clip_preprocess({d.rgb.data(), d.width, d.height, 3 * (size_t)d.width}, p);
    const std::vector<float> want = read_f32(llava(im["pixels"]));
    ASSERT_EQ(got.size(), want.size());
    // The resize is PIL's integer arithmetic, so the bytes are PIL's; the
    // rest is the same float32 operations HF runs (u * (1/255) in double,
    // rounded to float, minus mean, over std), so the values are equal.  One
    // byte off would move a value by 1 / 255 / std >= 0.0142.
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
    EXPECT_EQ(diff, 0u) << "of " << got.size() << " values";
  }
}

TEST(ClipPreprocess, StrideAndOddSizes) {
  // A padded stride reads the same pixels as packed rows.
  const int w = 37, h = 23;
  std::vector<uint8_t> packed((size_t)w * h * 3), padded((size_t)(3 * w + 5) * h, 0xAB);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = (uint8_t)(i * 7919 % 251);
  for (int y = 0; y < h; ++y) {
    std::memcpy(&padded[(size_t)y * (3 * w + 5)], &packed[(size_t)y * 3 * w], 3 * (size_t)w);
  }
  models::ClipImageParams p;
  p.image_size = 14;
  const auto a = models::clip_preprocess({packed.data(), w, h, 3 * (size_t)w}, p);
  const auto b = models::clip_preprocess({padded.data(), w, h, 3 * (size_t)w + 5}, p);
  EXPECT_EQ(a, b);
  // A flat colour stays that colour whatever the scale (the taps sum to 1).
  std::vector<uint8_t> flat((size_t)w * h * 3);
  for (size_t i = 0; i < flat.size(); i += 3) flat[i] = 200, flat[i + 1] = 3, flat[i + 2] = 255;
  for (auto [ow, oh] : {std::pair{5, 300}, std::pair{1, 1}, std::pair{100, 7}}) {
    const auto r = models::resize_bicubic({flat.data(), w, h, 3 * (size_t)w}, ow, oh);
    for (size_t i = 0; i < r.size(); i += 3) {
      ASSERT_EQ(r[i], 200);
      ASSERT_EQ(r[i + 1], 3);
      ASSERT_EQ(r[i + 2], 255);
    }
  }
  int rw = 0, rh = 0;
  models::shortest_side_size(72, 48, 56, &rw, &rh);
  EXPECT_EQ(rw, 84);
  EXPECT_EQ(rh, 56);
  models::shortest_side_size(40, 90, 56, &rw, &rh);
  EXPECT_EQ(rw, 56);
  EXPECT_EQ(rh, 126);
  models::shortest_side_size(3, 100, 7, &rw, &rh);  // 7 * 100 / 3 = 233.3 -> 233
  EXPECT_EQ(rh, 233);
}

TEST(ClipPreprocess, BadPixelsAreRefused) {
  const std::vector<uint8_t> px(64 * 3);
  models::ClipImageParams p;
  p.image_size = 8;
  auto fails = [&](models::RgbImage img, const std::string& needle) {
    try {
      models::clip_preprocess(img, p);
      ADD_FAILURE() << "no error; wanted " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
      EXPECT_EQ(std::string(e.what()).rfind("[image] ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails({nullptr, 8, 8, 24}, "null");
  fails({px.data(), 0, 8, 24}, "empty");
  fails({px.data(), 8, -1, 24}, "empty");
  fails({px.data(), 8, 8, 23}, "stride");
  fails({px.data(), models::kMaxImageSide + 1, 1, 3 * (size_t)models::kMaxImageSide + 3}, "largest side");
  fails({px.data(), 10000, 10000, 30000}, "most pixels");
  fails({px.data(), 1, 16000, 3}, "too extreme");  // 8 x 128000 after the resize
}

TEST(ClipPreprocess, ParamsFromFileErrors) {
  gguf::Writer w;
  w.add_u32("clip.vision.image_size", 56);
  w.add_f32_array("clip.vision.image_mean", {0.5f, 0.5f, 0.5f});
  auto expect_error = [](const gguf::Writer& w, lilims_status st, const std::string& needle) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    const auto f = gguf::File::from_bytes(bytes.data(), bytes.size());
    try {
      models::clip_image_params(*f);
      ADD_FAILURE() << "no error; wanted " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), st) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(w, LILIMS_ERR_MISSING, "clip.vision.image_std");
  w.add_f32_array("clip.vision.image_std", {0.5f, 0.0f, 0.5f});
  expect_error(w, LILIMS_ERR_BAD_FORMAT, "positive");
  w.add_f32_array("clip.vision.image_std", {0.5f, 0.5f});
  expect_error(w, LILIMS_ERR_BAD_FORMAT, "3 numbers");
  w.add_f32_array("clip.vision.image_std", {0.5f, 0.5f, 0.5f});
  w.add_u32("clip.vision.image_size", 0);
  expect_error(w, LILIMS_ERR_BAD_FORMAT, "image_size");
}

// A JPEG of a w x h gradient, written with libjpeg.
std::vector<uint8_t> encode_jpeg(int w, int h) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row((size_t)w * 3);
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < w; ++x) {
      row[3 * (size_t)x] = (uint8_t)(x * 255 / (w - 1));
      row[3 * (size_t)x + 1] = (uint8_t)(c.next_scanline * 255 / (h - 1));
      row[3 * (size_t)x + 2] = 128;
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  free(buf);
  return out;
}

// The offset of the SOF0 marker's height field in a JPEG.
size_t sof_height_at(const std::vector<uint8_t>& j) {
  for (size_t i = 2; i + 8 < j.size(); ++i) {
    if (j[i] == 0xFF && j[i + 1] == 0xC0) return i + 5;
  }
  ADD_FAILURE() << "no SOF0";
  return 0;
}

TEST(ImageIo, JpegDecodes) {
  const std::vector<uint8_t> j = encode_jpeg(33, 20);
  const tools::DecodedImage d = tools::decode_image(j.data(), j.size(), "gradient.jpg");
  ASSERT_EQ(d.width, 33);
  ASSERT_EQ(d.height, 20);
  // Quality 95 with 4:2:0 chroma: a smooth gradient comes back within a few levels.
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 33; ++x) {
      const uint8_t* px = &d.rgb[((size_t)y * 33 + (size_t)x) * 3];
      EXPECT_NEAR(px[0], x * 255 / 32, 12) << x << "," << y;
      EXPECT_NEAR(px[1], y * 255 / 19, 12) << x << "," << y;
      EXPECT_NEAR(px[2], 128, 12) << x << "," << y;
    }
  }
}

TEST(ImageIo, BrokenJpegs) {
  const std::vector<uint8_t> j = encode_jpeg(64, 48);
  expect_decode_fails(std::vector<uint8_t>(j.begin(), j.begin() + (long)j.size() / 2),
                      LILIMS_ERR_BAD_FORMAT, "bad JPEG");
  expect_decode_fails(std::vector<uint8_t>(j.begin(), j.begin() + 20), LILIMS_ERR_BAD_FORMAT, "bad JPEG");
  std::vector<uint8_t> zero = j;
  const size_t at = sof_height_at(zero);
  zero[at] = zero[at + 1] = 0;  // height 0
  expect_decode_fails(zero, LILIMS_ERR_BAD_FORMAT, "bad JPEG");
  std::vector<uint8_t> huge = j;
  huge[at] = 0x4E, huge[at + 1] = 0x20, huge[at + 2] = 0x4E, huge[at + 3] = 0x20;  // 20000 x 20000
  expect_decode_fails(huge, LILIMS_ERR_INVALID_ARGUMENT, "20000x20000 is too large");
}

// CRC-32 of PNG chunks (ISO 3309, reflected 0xEDB88320).
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

// The PNG with its IHDR width and height replaced (and the chunk's CRC fixed).
std::vector<uint8_t> with_png_size(std::vector<uint8_t> png, uint32_t w, uint32_t h) {
  // signature (8), length (4), "IHDR" (4), width, height, ...; CRC after the 13 data bytes
  auto put = [&](size_t at, uint32_t v) {
    png[at] = (uint8_t)(v >> 24), png[at + 1] = (uint8_t)(v >> 16);
    png[at + 2] = (uint8_t)(v >> 8), png[at + 3] = (uint8_t)v;
  };
  EXPECT_EQ(std::memcmp(&png[12], "IHDR", 4), 0);
  put(16, w);
  put(20, h);
  put(29, crc32(&png[12], 17));
  return png;
}

TEST(ImageIo, BrokenPngs) {
  const std::vector<uint8_t> png = bytes_of(llava("img_square.png"));
  ASSERT_GT(png.size(), 100u);
  expect_decode_fails(std::vector<uint8_t>(png.begin(), png.begin() + (long)png.size() / 2),
                      LILIMS_ERR_BAD_FORMAT, "bad PNG");
  expect_decode_fails(std::vector<uint8_t>(png.begin(), png.begin() + 30), LILIMS_ERR_BAD_FORMAT, "bad PNG");
  std::vector<uint8_t> crc = png;
  crc[png.size() / 2] ^= 0x55;  // inside the image data: a CRC (or zlib) error
  expect_decode_fails(crc, LILIMS_ERR_BAD_FORMAT, "bad PNG");
  expect_decode_fails(with_png_size(png, 0, 150), LILIMS_ERR_BAD_FORMAT, "bad PNG");
  expect_decode_fails(with_png_size(png, 20000, 20000), LILIMS_ERR_INVALID_ARGUMENT,
                      "20000x20000 is too large");
  // The same header fixed back decodes: the test edits what it means to.
  const std::vector<uint8_t> same = with_png_size(png, 150, 150);
  EXPECT_EQ(tools::decode_image(same.data(), same.size(), "same.png").width, 150);
}

TEST(ImageIo, NotImages) {
  expect_decode_fails({}, LILIMS_ERR_BAD_FORMAT, "empty");
  const std::string text = "GIF89a not supported";
  expect_decode_fails(std::vector<uint8_t>(text.begin(), text.end()), LILIMS_ERR_UNSUPPORTED,
                      "not a PNG or JPEG");
  try {
    tools::decode_image_file(llava("no_such_image.png"));
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_IO);
    EXPECT_NE(std::string(e.what()).find("no_such_image.png: cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lilims::test
