// `lilims quantize`: re-quantize a GGUF model's weights.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "models/gguf.h"
#include "models/requantize.h"
#include "tools/cli.h"

namespace {

const char kUsage[] =
    "usage: lilims quantize IN.gguf OUT.gguf TYPE [--method search|plain]\n"
    "  TYPE      Q4_0, Q4_1, Q8_0 or F16 (also F32)\n"
    "  --method  search (default): per block, the scale with the least squared error;\n"
    "            plain: GGML's reference round-to-nearest (llama.cpp's reference bytes)\n"
    "Every 2-D weight whose rows split into whole blocks is re-quantized (token_embd\n"
    "included), 1-D tensors are stored as F32, other tensors and all metadata are kept.\n";

int cmd_quantize(int argc, char** argv) {
  using lilims::quant::Type;
  std::string pos[3];
  int n_pos = 0;
  lilims::gguf::RequantizeOptions opt;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(a, "--method")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--method needs a value");
      const std::string m = argv[++k];
      if (m == "plain") opt.method = lilims::quant::QuantMethod::plain;
      else if (m == "search") opt.method = lilims::quant::QuantMethod::search;
      else return lilims::cli::fail("quantize", "--method expects search or plain, got '" + m + "'");
    } else if (a[0] == '-' && a[1]) {
      return lilims::cli::fail("quantize", std::string("unknown option ") + a + " (try --help)");
    } else if (n_pos < 3) {
      pos[n_pos++] = a;
    } else {
      return lilims::cli::fail("quantize", std::string("unexpected argument ") + a);
    }
  }
  if (n_pos != 3) return lilims::cli::fail("quantize", "expects IN.gguf OUT.gguf TYPE (try --help)");
  const lilims::quant::TypeTraits* tt = lilims::quant::type_traits_by_name(pos[2]);
  if (!tt) {
    return lilims::cli::fail("quantize", "unknown type '" + pos[2] + "' (Q4_0, Q4_1, Q8_0, F16, F32)");
  }
  const Type type = tt->type;
  const std::string tn = tt->name;

  const bool tty = isatty(STDERR_FILENO);
  if (tty) {
    opt.progress = [](size_t i, size_t n, const lilims::gguf::TensorInfo& t) {
      std::fprintf(stderr, "\r[%zu/%zu] %-40.40s", i + 1, n, t.name.c_str());
      std::fflush(stderr);
    };
  }
  try {
    auto in = lilims::gguf::File::open(pos[0]);
    const lilims::gguf::Writer w = lilims::gguf::requantize(*in, type, opt);
    if (tty) std::fprintf(stderr, "\r%-60s\r", "");
    w.write(pos[1]);
    if (tty) std::fprintf(stderr, "lilims quantize: wrote %s (%s)\n", pos[1].c_str(), tn.c_str());
    return 0;
  } catch (const std::exception& e) {
    if (tty) std::fprintf(stderr, "\n");
    return lilims::cli::fail("quantize", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(quantize, "quantize", "re-quantize a GGUF model (Q4_0, Q4_1, Q8_0, F16)",
                        cmd_quantize);
