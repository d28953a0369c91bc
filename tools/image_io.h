// PNG and JPEG files to RGB8 pixels, through Debian's libpng and libjpeg.
// The library takes pixels (models/clip_image.h); reading files is the
// command line's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lilims::tools {

struct DecodedImage {
  std::vector<uint8_t> rgb;  // (height, width, 3), packed rows
  int width = 0, height = 0;
};

// Decodes a PNG (any colour type and depth: palette, grey, alpha, 16-bit are
// converted; alpha is dropped as libpng composes it on black) or a baseline /
// progressive JPEG (grey or colour; CMYK is refused).  The type is told by
// the file's first bytes, not its name.  Throws lilims::Error ("[image] PATH:
// ...") for a file that cannot be read, is empty, is neither format, is
// truncated or corrupt (libjpeg's warnings, such as a premature end of data,
// count as errors), or whose size is zero or beyond models::kMaxImageSide /
// kMaxImagePixels (checked from the header, before the pixels are decoded).
DecodedImage decode_image_file(const std::string& path);

// The same for a file's bytes already in memory; `name` is used in messages.
DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name);

}  // namespace lilims::tools
