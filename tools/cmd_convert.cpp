// `lilims convert`: Hugging Face model directories, PEFT LoRA adapters and
// llama2.c checkpoints to GGUF.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/convert_hf.h"
#include "models/convert_llama2c.h"
#include "models/convert_peft.h"
#include "runtime/constrain/tool_format.h"
#include "tools/cli.h"
#include "tools/progress.h"

namespace {

const char kUsage[] =
    "usage: lilims convert HF_DIR OUT.gguf [--type F16|F32|Q8_0|Q4_0|Q4_1] [--name NAME]\n"
    "       lilims convert PEFT_DIR OUT.gguf --base BASE.gguf [--type F32|F16] [--name NAME]\n"
    "                      [--tool-format NAME] [--rank K]\n"
    "       lilims convert IN.bin OUT.gguf [--tokenizer tok.bin] [--tied-output] [--name NAME]\n"
    "  HF_DIR         a Hugging Face model directory: config.json (LlamaForCausalLM incl.\n"
    "                 Llama 3's rope scaling, Qwen2ForCausalLM, Qwen3ForCausalLM,\n"
    "                 Gemma3ForCausalLM, PhiForCausalLM or Phi3ForCausalLM), model.safetensors\n"
    "                 or shards with model.safetensors.index.json (F32/F16/BF16),\n"
    "                 tokenizer.json (Gemma 3: tokenizer.model) and tokenizer_config.json;\n"
    "                 laid out as llama.cpp's convert_hf_to_gguf.py\n"
    "  --type T       HF_DIR: F16 (default: 2-D weights F16, 1-D F32), F32, or Q8_0,\n"
    "                 Q4_0, Q4_1 (2-D weights quantized as `lilims quantize` does);\n"
    "                 PEFT_DIR: F32 (default) or F16\n"
    "  PEFT_DIR       a Hugging Face PEFT LoRA adapter: adapter_config.json and\n"
    "                 adapter_model.safetensors; written as llama.cpp's GGUF LoRA adapter\n"
    "                 (convert_lora_to_gguf.py), for use with --lora\n"
    "  --base B.gguf  PEFT_DIR only, required: the model the adapter is for (its\n"
    "                 architecture and tensor shapes are read)\n"
    "  --tool-format NAME  PEFT_DIR only: the tool format the adapter was trained with\n"
    "                 (generic, hermes, smollm2, llama3, phi4), stored as lilims.tool_format;\n"
    "                 `lilims run --tools --lora` then uses it\n"
    "  --rank K       PEFT_DIR only: write each module's B A as its best rank-K approximation\n"
    "                 (largest singular values kept; a smaller file; the share of each\n"
    "                 product's squared norm kept is printed), PEFT's scales folded in\n"
    "  IN.bin         a llama2.c checkpoint (legacy version 0 or fp32 version 1)\n"
    "  --tokenizer    llama2.c tokenizer.bin for its vocabulary (without it the GGUF has no\n"
    "                 tokenizer.ggml.* metadata)\n"
    "  --tied-output  write output.weight even when it is the token embedding (as llama.cpp does)\n"
    "  --name NAME    general.name (default: the directory's name; llama for IN.bin)\n"
    "  --no-progress  no progress on stderr (by default: a live line on a terminal, else a\n"
    "                 line every 5 seconds)\n";

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int convert_hf(const std::string& in, const std::string& out, const std::string& type_name,
               const std::string& name, bool progress) {
  lilims::models::HfConvertOptions opt;
  opt.name = name;
  if (!type_name.empty()) {
    const lilims::quant::TypeTraits* tt = lilims::quant::type_traits_by_name(type_name);
    if (!tt || !lilims::quant::can_quantize(tt->type, lilims::quant::kQuantPlain)) {
      return lilims::cli::fail("convert", "unknown type '" + type_name + "' (" +
                                              lilims::quant::type_names(lilims::quant::kQuantPlain) + ")");
    }
    opt.type = tt->type;
  }
  try {
    lilims::tools::ProgressLine line("convert", progress);
    opt.progress = [&line](size_t done, size_t total, const std::string& what) {
      line.update(done, total, what);
    };
    std::vector<std::string> notes;
    const lilims::gguf::Writer w = lilims::models::convert_hf_dir(in, opt, &notes);
    line.finish();
    for (const std::string& n : notes) {
      std::fprintf(stderr, "lilims convert: note: %s\n", n.c_str());
    }
    w.write(out);
    std::fprintf(stderr, "lilims convert: wrote %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    return lilims::cli::fail("convert", e.what());
  }
}

int convert_peft(const std::string& in, const std::string& out, const std::string& base,
                 const std::string& type_name, const std::string& name, const std::string& tool_format,
                 int64_t rank) {
  lilims::models::PeftConvertOptions opt;
  opt.name = name;
  opt.rank = rank;
  opt.tool_format = tool_format;
  if (!type_name.empty()) {
    const lilims::quant::TypeTraits* tt = lilims::quant::type_traits_by_name(type_name);
    if (!tt || (tt->type != lilims::quant::Type::F32 && tt->type != lilims::quant::Type::F16)) {
      return lilims::cli::fail("convert",
                               "unknown type '" + type_name + "' for a PEFT adapter (F32, F16)");
    }
    opt.type = tt->type;
  }
  try {
    std::vector<std::string> notes;
    const lilims::gguf::Writer w = lilims::models::convert_peft_dir(in, base, opt, &notes);
    for (const std::string& n : notes) {
      std::fprintf(stderr, "lilims convert: note: %s\n", n.c_str());
    }
    w.write(out);
    std::fprintf(stderr, "lilims convert: wrote %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    return lilims::cli::fail("convert", e.what());
  }
}

int cmd_convert(int argc, char** argv) {
  std::string in, out, tok, type_name, base, tool_format;
  int64_t rank = 0;
  lilims::models::Llama2cOptions opt;
  bool progress = true, name_set = false;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(a, "--tokenizer") || !std::strcmp(a, "--name")) {
      if (k + 1 >= argc) return lilims::cli::fail("convert", std::string(a) + " needs a value");
      (a[2] == 't' ? tok : opt.name) = argv[++k];
      name_set |= a[2] == 'n';
    } else if (!std::strcmp(a, "--type") || !std::strcmp(a, "--base")) {
      if (k + 1 >= argc) return lilims::cli::fail("convert", std::string(a) + " needs a value");
      (a[2] == 't' ? type_name : base) = argv[++k];
    } else if (!std::strcmp(a, "--tool-format")) {
      if (k + 1 >= argc) return lilims::cli::fail("convert", "--tool-format needs a value");
      tool_format = argv[++k];
      try {
        lilims::runtime::tool_format_from_name(tool_format);
      } catch (const std::exception& e) {
        return lilims::cli::fail("convert", e.what());
      }
    } else if (!std::strcmp(a, "--rank")) {
      if (k + 1 >= argc) return lilims::cli::fail("convert", "--rank needs a value");
      char* end = nullptr;
      const long long v = std::strtoll(argv[++k], &end, 10);
      if (!*argv[k] || *end || v < 1 || v > 65536) {
        return lilims::cli::fail("convert", std::string("--rank ") + argv[k] + ": expected a whole number >= 1");
      }
      rank = v;
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
    return lilims::cli::fail("convert",
                             "expects HF_DIR, PEFT_DIR or IN.bin, then OUT.gguf (try --help)");
  }
  if (is_directory(in)) {
    if (!tok.empty() || opt.write_tied_output) {
      return lilims::cli::fail("convert", "--tokenizer and --tied-output are for llama2.c checkpoints");
    }
    if (lilims::models::is_peft_dir(in)) {
      if (base.empty()) {
        return lilims::cli::fail("convert", in + " is a PEFT adapter (it has adapter_config.json): "
                                            "name the model it adapts with --base BASE.gguf");
      }
      return convert_peft(in, out, base, type_name, name_set ? opt.name : "", tool_format, rank);
    }
    if (!tool_format.empty() || rank) {
      return lilims::cli::fail("convert", "--tool-format and --rank are for PEFT adapter directories");
    }
    if (!base.empty()) {
      return lilims::cli::fail("convert", "--base is for PEFT adapter directories (" + in +
                                              " has no adapter_config.json)");
    }
    return convert_hf(in, out, type_name, name_set ? opt.name : "", progress);
  }
  if (!base.empty() || !tool_format.empty() || rank) {
    return lilims::cli::fail("convert", "--base, --tool-format and --rank are for PEFT adapter directories");
  }
  if (!type_name.empty()) {
    return lilims::cli::fail("convert",
                             "--type is for Hugging Face directories (llama2.c converts to F32)");
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

LILIMS_REGISTER_COMMAND(convert, "convert",
                        "convert a Hugging Face model directory, a PEFT LoRA adapter or a llama2.c "
                        "checkpoint to GGUF",
                        cmd_convert);
