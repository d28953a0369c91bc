// `lilims merge-lora`: bake a LoRA adapter into a copy of its base model.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "models/lora.h"
#include "quant/quant.h"
#include "runtime/engine.h"
#include "tools/cli.h"

namespace {

const char kUsage[] =
    "usage: lilims merge-lora BASE.gguf ADAPTER.gguf OUT.gguf --type TYPE [--scale S]\n"
    "  writes BASE with each weight the adapter adapts replaced by W + S * alpha / rank * B A,\n"
    "  computed in float from the files' values and stored as TYPE (F32, F16, Q8_0, Q4_0,\n"
    "  Q4_1); every other tensor and key is copied as it is.  --scale S: the user scale\n"
    "  (default 1, as --lora applies it; --lora-scaled FILE:S matches --scale S).\n";

int cmd_merge_lora(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string type_name;
  float scale = 1.0f;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--type" || a == "--scale") {
      if (k + 1 >= argc) return lilims::cli::fail("merge-lora", a + " needs a value");
      const std::string v = argv[++k];
      if (a == "--type") {
        type_name = v;
      } else {
        char* end = nullptr;
        scale = std::strtof(v.c_str(), &end);
        if (end == v.c_str() || *end) return lilims::cli::fail("merge-lora", "--scale expects a number");
      }
    } else if (!a.empty() && a[0] == '-') {
      return lilims::cli::fail("merge-lora", "unknown option " + a + " (try --help)");
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 3) return lilims::cli::fail("merge-lora", "expects BASE.gguf ADAPTER.gguf OUT.gguf (try --help)");
  if (type_name.empty()) return lilims::cli::fail("merge-lora", "--type is required (F32, F16, Q8_0, Q4_0, Q4_1)");
  const lilims::quant::TypeTraits* tt = lilims::quant::type_traits_by_name(type_name);
  if (!tt || !lilims::quant::can_quantize(tt->type, lilims::quant::kQuantPlain)) {
    return lilims::cli::fail("merge-lora", "--type " + type_name + " is not one of " +
                                               lilims::quant::type_names(lilims::quant::kQuantPlain));
  }
  try {
    lilims::runtime::ModelOptions mo;
    mo.repack = false;
    const auto model = lilims::runtime::Model::open(pos[0], mo);
    const auto base = lilims::gguf::File::open(pos[0]);
    const auto adapter = lilims::gguf::File::open(pos[1]);
    const lilims::gguf::Writer w = lilims::models::merge_lora(*base, model->weights(), *adapter, scale, tt->type);
    w.write(pos[2]);
    std::fprintf(stderr, "lilims merge-lora: wrote %s\n", pos[2].c_str());
    return 0;
  } catch (const std::exception& e) {
    return lilims::cli::fail("merge-lora", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(merge_lora, "merge-lora", "bake a LoRA adapter into a copy of its base model",
                        cmd_merge_lora);
