// `lilims manifest`: writes the manifest of a model (runtime/manifest.h), or
// checks a model against one.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/error.h"
#include "models/gguf.h"
#include "runtime/manifest.h"
#include "tools/cli.h"

namespace {

const char kUsage[] =
    "usage: lilims manifest MODEL.gguf [-o OUT] [--model-version X.Y.Z] [--requires X.Y.Z]\n"
    "       lilims manifest MODEL.gguf --check MANIFEST [--file-hash]\n"
    "  writes MODEL's manifest (JSON: name, architecture, parameter count, file size,\n"
    "  XXH3-128 of the file and of each tensor, the model's version and the lilims\n"
    "  version it needs) to OUT, by default MODEL with .gguf replaced by .manifest.json;\n"
    "  -o - writes it to stdout\n"
    "  --model-version X.Y.Z  the model's semantic version (default 1.0.0)\n"
    "  --requires X.Y.Z       the oldest lilims that may run it (default: this one)\n"
    "  --check MANIFEST       check MODEL against MANIFEST instead (every tensor's hash);\n"
    "                         prints \"ok\" on stdout, or the difference on stderr, exit 1\n"
    "  --file-hash            with --check: also the whole file's hash\n";

std::string default_out(const std::string& model) {
  const std::string ext = ".gguf";
  const bool has_ext = model.size() > ext.size() &&
                       model.compare(model.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? model.substr(0, model.size() - ext.size()) : model) + ".manifest.json";
}

int cmd_manifest(int argc, char** argv) {
  std::string model, out, check;
  lilims::runtime::ManifestInfo info;
  bool file_hash = false;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    const bool takes_value = !std::strcmp(a, "-o") || !std::strcmp(a, "--model-version") ||
                             !std::strcmp(a, "--requires") || !std::strcmp(a, "--check");
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (takes_value) {
      if (k + 1 >= argc) return lilims::cli::fail("manifest", std::string(a) + " needs a value");
      const char* v = argv[++k];
      if (!std::strcmp(a, "-o")) out = v;
      else if (!std::strcmp(a, "--model-version")) info.model_version = v;
      else if (!std::strcmp(a, "--requires")) info.requires_lilims = v;
      else check = v;
    } else if (!std::strcmp(a, "--file-hash")) {
      file_hash = true;
    } else if (a[0] == '-' && a[1]) {
      return lilims::cli::fail("manifest", std::string("unknown option ") + a + " (try --help)");
    } else if (model.empty()) {
      model = a;
    } else {
      return lilims::cli::fail("manifest", std::string("unexpected argument ") + a);
    }
  }
  if (model.empty()) return lilims::cli::fail("manifest", "expects MODEL.gguf (try --help)");
  if (file_hash && check.empty()) return lilims::cli::fail("manifest", "--file-hash needs --check");
  if (!check.empty() && !out.empty()) return lilims::cli::fail("manifest", "-o and --check exclude each other");
  try {
    const auto file = lilims::gguf::File::open(model);
    if (!check.empty()) {
      lilims::runtime::ManifestCheck c;
      c.file_hash = file_hash;
      lilims::runtime::check_manifest(*file, lilims::runtime::read_manifest_file(check), c);
      std::puts("ok");
      return 0;
    }
    const std::string text = lilims::runtime::make_manifest(*file, info);
    if (out == "-") {
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    if (out.empty()) out = default_out(model);
    FILE* f = std::fopen(out.c_str(), "wb");
    if (!f) return lilims::cli::fail("manifest", "cannot write " + out + ": " + std::strerror(errno));
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) {
      std::remove(out.c_str());
      return lilims::cli::fail("manifest", "cannot write " + out);
    }
    std::fprintf(stderr, "lilims manifest: wrote %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    return lilims::cli::fail("manifest", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(manifest, "manifest", "write or check a model's manifest (hashes, versions)",
                        cmd_manifest);
