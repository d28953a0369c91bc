// `lilims convert`: llama2.c checkpoints to GGUF.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/error.h"
#include "models/convert_llama2c.h"
#include "tools/cli.h"
#include "tools/progress.h"

namespace {

const char kUsage[] =
    "usage: lilims convert IN.bin OUT.gguf [--tokenizer tok.bin] [--tied-output] [--name NAME]\n"
    "  IN.bin         a llama2.c checkpoint (legacy version 0 or fp32 version 1)\n"
    "  --tokenizer    llama2.c tokenizer.bin for its vocabulary (without it the GGUF has no\n"
    "                 tokenizer.ggml.* metadata)\n"
    "  --tied-output  write output.weight even when it is the token embedding (as llama.cpp does)\n"
    "  --name NAME    general.name (default: llama)\n"
    "  --no-progress  no progress on stderr (by default: a live line on a terminal, else a\n"
    "                 line every 5 seconds)\n";

int cmd_convert(int argc, char** argv) {
  std::string in, out, tok;
  lilims::models::Llama2cOptions opt;
  bool progress = true;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(a, "--tokenizer") || !std::strcmp(a, "--name")) {
      if (k + 1 >= argc) return lilims::cli::fail("convert", std::string(a) + " needs a value");
      (a[2] == 't' ? tok : opt.name) = argv[++k];
    } else if (!std::strcmp(a, "--tied-output")) {
      opt.write_tied_output = true;
    } else if (!std::strcmp(a, "--no-progress")) {
      progress = false;
    } else if (a[0] == '-' && a[1]) {
      return lilims::cli::fail("convert", std::string("unknown option ") + a + " (try --help)");
    } else if (in.empty()) {
      in = a;
    } else if (out.empty()) {
      out = a;
    } else {
      return lilims::cli::fail("convert", std::string("unexpected argument ") + a);
    }
  }
  if (in.empty() || out.empty()) {
    return lilims::cli::fail("convert", "expects IN.bin OUT.gguf (try --help)");
  }
  try {
    lilims::tools::ProgressLine line("convert", progress);
    opt.progress = [&line](size_t done, size_t total, const std::string& name) {
      line.update(done, total, name);
    };
    const lilims::gguf::Writer w = lilims::models::convert_llama2c_files(in, tok, opt);
    line.finish();
    w.write(out);
    std::fprintf(stderr, "lilims convert: wrote %s%s\n", out.c_str(),
                 tok.empty() ? " (no tokenizer: pass --tokenizer to include one)" : "");
    return 0;
  } catch (const std::exception& e) {
    return lilims::cli::fail("convert", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(convert, "convert", "convert a llama2.c checkpoint to GGUF", cmd_convert);
