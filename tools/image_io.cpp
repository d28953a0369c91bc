#include "tools/image_io.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include <jpeglib.h>
#include <png.h>

#include "base/error.h"
#include "models/clip_image.h"

namespace lilims::tools {
namespace {

// Image files larger than this are refused before they are read (a
// kMaxImagePixels PNG of noise compresses to about its raw size).
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

[[noreturn]] void fail(lilims_status status, const std::string& name, const std::string& what) {
  throw Error(status, "[image] " + name + ": " + what);
}

void check_size(uint64_t width, uint64_t height, const std::string& name) {
  const std::string dims = std::to_string(width) + "x" + std::to_string(height);
  if (width == 0 || height == 0) fail(LILIMS_ERR_BAD_FORMAT, name, "the image is empty (" + dims + ")");
  if (width > (uint64_t)models::kMaxImageSide || height > (uint64_t)models::kMaxImageSide ||
      width * height > (uint64_t)models::kMaxImagePixels) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, name,
         dims + " is too large (at most " + std::to_string(models::kMaxImageSide) + " a side and " +
             std::to_string(models::kMaxImagePixels) + " pixels)");
  }
}

DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    fail(LILIMS_ERR_BAD_FORMAT, name, std::string("bad PNG: ") + img.message);
  }
  try {
    check_size(img.width, img.height, name);
  } catch (...) {
    png_image_free(&img);
    throw;
  }
  // RGBA then drop A: the colour values as stored, as PIL's convert("RGB")
  // gives them (libpng's RGB output would compose the image on black).
  img.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, rgba.data(), 0, nullptr)) {
    fail(LILIMS_ERR_BAD_FORMAT, name, std::string("bad PNG: ") + img.message);
  }
  DecodedImage out;
  out.width = (int)img.width;
  out.height = (int)img.height;
  out.rgb.resize((size_t)out.width * out.height * 3);
  for (size_t p = 0, n = (size_t)out.width * out.height; p < n; ++p) {
    std::memcpy(&out.rgb[3 * p], &rgba[4 * p], 3);
  }
  return out;
}

// libjpeg reports errors through a callback that must not return: it jumps
// back here.  Warnings (corrupt data, a premature end of the file, which
// libjpeg would otherwise pad with grey) are errors too.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  JpegError* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);  // a warning; trace messages (level >= 0) are ignored
}

enum class JpegOutcome { decoded, failed, bad_size, cmyk };

// The part of the decoding a libjpeg error may jump out of.  It keeps no
// automatic object that changes after setjmp (their values would be
// indeterminate after the jump) and none with a destructor the jump would
// skip: the pixels go to *out, on the heap.
JpegOutcome run_jpeg(jpeg_decompress_struct* cinfo, JpegError* err, const uint8_t* data, size_t size,
                     DecodedImage* out) {
  if (setjmp(err->jump)) return JpegOutcome::failed;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, (unsigned long)size);
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->image_width == 0 || cinfo->image_height == 0 ||
      cinfo->image_width > (JDIMENSION)models::kMaxImageSide ||
      cinfo->image_height > (JDIMENSION)models::kMaxImageSide ||
      (uint64_t)cinfo->image_width * cinfo->image_height > (uint64_t)models::kMaxImagePixels) {
    return JpegOutcome::bad_size;
  }
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    return JpegOutcome::cmyk;
  }
  cinfo->out_color_space = JCS_RGB;
  jpeg_start_decompress(cinfo);
  out->width = (int)cinfo->output_width;
  out->height = (int)cinfo->output_height;
  out->rgb.resize((size_t)out->width * out->height * 3);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out->rgb.data() + (size_t)cinfo->output_scanline * out->width * 3;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return JpegOutcome::decoded;
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_message;
  err.message[0] = '\0';
  auto out = std::make_unique<DecodedImage>();
  const JpegOutcome outcome = run_jpeg(&cinfo, &err, data, size, out.get());
  const uint64_t w = cinfo.image_width, h = cinfo.image_height;
  jpeg_destroy_decompress(&cinfo);
  switch (outcome) {
    case JpegOutcome::decoded:
      return std::move(*out);
    case JpegOutcome::failed:
      fail(LILIMS_ERR_BAD_FORMAT, name, std::string("bad JPEG: ") + err.message);
    case JpegOutcome::bad_size:
      check_size(w, h, name);
      break;
    case JpegOutcome::cmyk:
      fail(LILIMS_ERR_UNSUPPORTED, name, "CMYK JPEG images are not supported");
  }
  fail(LILIMS_ERR_INTERNAL, name, "JPEG size check passed a refused size");
}

}  // namespace

DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) fail(LILIMS_ERR_BAD_FORMAT, name, "the file is empty");
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return decode_png(data, size, name);
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    return decode_jpeg(data, size, name);
  }
  fail(LILIMS_ERR_UNSUPPORTED, name, "not a PNG or JPEG file");
}

DecodedImage decode_image_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) fail(LILIMS_ERR_IO, path, std::string("cannot open: ") + std::strerror(errno));
  const std::streamoff n = f.tellg();
  if (n < 0) fail(LILIMS_ERR_IO, path, "cannot read");
  if ((uint64_t)n > kMaxFileBytes) {
    fail(LILIMS_ERR_INVALID_ARGUMENT, path,
         "the file is " + std::to_string(n) + " bytes, more than the " +
             std::to_string(kMaxFileBytes >> 20) + " MiB an image may have");
  }
  std::vector<uint8_t> bytes((size_t)n);
  f.seekg(0);
  if (n > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), n)) fail(LILIMS_ERR_IO, path, "cannot read");
  return decode_image(bytes.data(), bytes.size(), path);
}

}  // namespace lilims::tools
