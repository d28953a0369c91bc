// `lilims quantize`: re-quantize a GGUF model's weights.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/memory_info.h"
#include "models/gguf.h"
#include "models/imatrix.h"
#include "models/layout_file.h"
#include "models/requantize.h"
#include "runtime/engine.h"
#include "runtime/eval/imatrix.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/progress.h"

namespace {

const char kUsage[] =
    "usage: lilims quantize IN.gguf OUT.gguf TYPE [--method search|plain] [--layout TARGET]\n"
    "       [--tensor-type PATTERN=TYPE]... [--no-progress]\n"
    "  TYPE      Q4_0, Q4_1, Q8_0 or F16 (also F32, and Q5_0: GGML's plain rounding only,\n"
    "            whatever --method, --imatrix or --calibrate say)\n"
    "  --tensor-type PATTERN=TYPE  (repeatable) the 2-D weights whose name matches the glob\n"
    "            PATTERN ('*' any run, '?' one character, [0-9] a class; the whole name) take\n"
    "            TYPE instead; the first matching rule wins. E.g. token_embd.weight=Q8_0,\n"
    "            'blk.*.ffn_down.weight=Q8_0'. A pattern that matches no weight, an unknown\n"
    "            TYPE or a weight whose rows do not split into TYPE's blocks is an error.\n"
    "  --method  search (default): per block, the scale with the least squared error\n"
    "            (Q4_0: each weight's error weighted by sqrt(row mean of x^2 + x^2));\n"
    "            plain: GGML's reference round-to-nearest (llama.cpp's reference bytes)\n"
    "  --imatrix FILE  weight each column's squared error by its importance (the mean\n"
    "            squared activation `lilims imatrix` collects) in the scale search; weights\n"
    "            without an entry are quantized unweighted (needs --method search)\n"
    "  --calibrate TEXT  run IN over the text file TEXT first and compensate each\n"
    "            column's rounding error on the columns still to round, along the\n"
    "            inputs' second moments (GPTQ-style; Q4_0/Q4_1/Q8_0 weights; the block\n"
    "            scales are weighted as by --imatrix). Needs --method search, replaces\n"
    "            --imatrix; slower, and memory grows by 2 x columns^2 floats per\n"
    "            distinct input, the moments and their factors (measured for\n"
    "            SmolLM2-135M: peak RSS 1.22 GB instead of 0.49 GB, 46 s instead of 10 s)\n"
    "  --scale-columns  with --calibrate: first fold activation-aware column scales into\n"
    "            the weights that read a norm's output and into the norm (exact in floats;\n"
    "            per layer the scale exponent with the least output error on the text)\n"
    "  --calibrate-ctx N     tokens per calibration chunk (default 512)\n"
    "  --calibrate-chunks N  chunks of TEXT used (default 8; 0: all)\n"
    "  --layout TARGET  store the matmul weights already in the layout TARGET's kernels\n"
    "            read, so a load maps them read-only and copies none: native (this CPU),\n"
    "            avx2, avx512vnni, neon, or gguf (default: plain GGUF, what llama.cpp\n"
    "            reads; a laid-out file is lilims' own). TYPE the input's own type\n"
    "            (general.file_type; for a llama.cpp mix such as Q4_K_M its name): only the\n"
    "            layout changes, every tensor keeps its bytes but those of a type the\n"
    "            target has no layout for (K-quants ...), converted as a load would convert them\n"
    "  -t N      threads (default: all cores); the output does not depend on it\n"
    "  --no-progress  no progress on stderr (by default: a live line on a terminal, else a\n"
    "                 line every 5 seconds)\n"
    "Every 2-D weight whose rows split into whole blocks is re-quantized (token_embd\n"
    "included), 1-D tensors are stored as F32, other tensors and all metadata are kept.\n"
    "IN may hold types lilims has no kernels for (Q2_K..Q6_K, Q5_1, IQ4_NL, BF16):\n"
    "they are dequantized exactly first, so OUT loads without re-quantizing each time.\n";

// llama.cpp's names of its mixed file types (general.file_type, LLAMA_FTYPE_*)
// that lilims reads but does not quantize to: with --layout, TYPE may name
// the input's own to lay it out as it is.
int mix_file_type(const std::string& name) {
  static const std::pair<const char*, int> kMixes[] = {
      {"Q5_1", 9},     {"Q2_K", 10},    {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q4_K_S", 14},
      {"Q4_K_M", 15},  {"Q5_K_S", 16},  {"Q5_K_M", 17}, {"Q6_K", 18},   {"IQ4_NL", 25}, {"BF16", 32}};
  for (const auto& [n, ft] : kMixes) {
    if (name == n) return ft;
  }
  return -1;
}

// Writes `in` laid out for `layout`, saying what was converted.
int write_laid_out(const lilims::gguf::File& in, const std::string& out, const std::string& layout,
                   bool progress) {
  lilims::gguf::LayOutStats stats;
  const lilims::gguf::Writer w = lilims::gguf::lay_out(in, layout, &stats);
  w.write(out);
  if (progress) {
    std::string conv;
    for (const auto& [what, n] : stats.converted) conv += (conv.empty() ? "; converted as a load would: " : ", ") +
                                                         std::to_string(n) + " " + what;
    std::fprintf(stderr, "lilims quantize: wrote %s (laid out for %s%s)\n", out.c_str(), layout.c_str(),
                 conv.c_str());
  }
  return 0;
}

int cmd_quantize(int argc, char** argv) {
  using lilims::quant::Type;
  std::string pos[3];
  int n_pos = 0;
  lilims::gguf::RequantizeOptions opt;
  opt.n_threads = lilims::threads_or_cores(0);
  bool progress = true;
  std::string imatrix_path, calibrate_path, layout = "gguf";
  std::map<std::string, std::vector<float>> importance;
  lilims::gguf::SecondMoments moments;
  long calibrate_ctx = 512, calibrate_chunks = 8;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(a, "--scale-columns")) {
      opt.activation_scaling = true;
    } else if (!std::strcmp(a, "--no-progress")) {
      progress = false;
    } else if (!std::strcmp(a, "--method")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--method needs a value");
      const std::string m = argv[++k];
      if (m == "plain") opt.method = lilims::quant::QuantMethod::plain;
      else if (m == "search") opt.method = lilims::quant::QuantMethod::search;
      else return lilims::cli::fail("quantize", "--method expects search or plain, got '" + m + "'");
    } else if (!std::strcmp(a, "-t") || !std::strcmp(a, "--threads")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", std::string(a) + " needs a value");
      try {
        opt.n_threads = (int)lilims::cli::parse_int(a, argv[++k], 1, 1024);
      } catch (const std::exception& e) {
        return lilims::cli::fail("quantize", e.what());
      }
    } else if (!std::strcmp(a, "--layout")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--layout needs a target");
      try {
        layout = lilims::gguf::layout_target(argv[++k]);
      } catch (const std::exception& e) {
        return lilims::cli::fail("quantize", e.what());
      }
    } else if (!std::strcmp(a, "--imatrix")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--imatrix needs a file");
      imatrix_path = argv[++k];
    } else if (!std::strcmp(a, "--calibrate")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--calibrate needs a text file");
      calibrate_path = argv[++k];
    } else if (!std::strcmp(a, "--calibrate-ctx") || !std::strcmp(a, "--calibrate-chunks")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", std::string(a) + " needs a value");
      try {
        const bool ctx = !std::strcmp(a, "--calibrate-ctx");
        (ctx ? calibrate_ctx : calibrate_chunks) = lilims::cli::parse_int(a, argv[++k], ctx ? 4 : 0, INT32_MAX);
      } catch (const std::exception& e) {
        return lilims::cli::fail("quantize", e.what());
      }
    } else if (!std::strcmp(a, "--tensor-type")) {
      if (k + 1 >= argc) return lilims::cli::fail("quantize", "--tensor-type needs PATTERN=TYPE");
      try {
        opt.tensor_types.push_back(lilims::gguf::parse_tensor_type_rule(argv[++k]));
      } catch (const std::exception& e) {
        return lilims::cli::fail("quantize", e.what());
      }
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
  if (!tt && layout != "gguf" && mix_file_type(pos[2]) >= 0) {
    try {
      auto in = lilims::gguf::File::open(pos[0]);
      const int64_t ft = in->get_int_or("general.file_type", -1);
      if (ft != mix_file_type(pos[2])) {
        return lilims::cli::fail("quantize", pos[2] + " is not a type lilims quantizes to; with --layout it may "
                                             "name the input's own file type, and " + pos[0] + " has general.file_type " +
                                             std::to_string(ft) + ", not " + std::to_string(mix_file_type(pos[2])));
      }
      return write_laid_out(*in, pos[1], layout, progress);
    } catch (const std::exception& e) {
      return lilims::cli::fail("quantize", e.what());
    }
  }
  if (!tt) {
    return lilims::cli::fail("quantize", "unknown type '" + pos[2] + "' (" +
                                             lilims::quant::type_names(lilims::quant::kQuantPlain) + ")");
  }
  const Type type = tt->type;
  const std::string tn = tt->name;
  if (!calibrate_path.empty() && !imatrix_path.empty()) {
    return lilims::cli::fail("quantize", "--calibrate and --imatrix exclude each other (--calibrate collects its own)");
  }
  if (opt.activation_scaling && calibrate_path.empty()) {
    return lilims::cli::fail("quantize", "--scale-columns needs --calibrate");
  }
  if (!calibrate_path.empty() && opt.method != lilims::quant::QuantMethod::search) {
    return lilims::cli::fail("quantize", "--calibrate needs the search method");
  }

  if (!calibrate_path.empty()) {
    try {
      const std::string text = lilims::tools::read_scored_text(calibrate_path);
      lilims::tools::CommonArgs common;
      common.model_path = pos[0];
      common.n_ctx = (int32_t)calibrate_ctx;
      auto model = lilims::tools::open_model(common);
      const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
      lilims::runtime::ImatrixOptions io;
      io.n_ctx = (int32_t)calibrate_ctx;
      io.max_chunks = (int32_t)calibrate_chunks;
      io.n_threads = opt.n_threads;
      io.second_moments = true;
      lilims::tools::ProgressLine cal_line("calibrate", progress);
      lilims::runtime::Calibration cal = lilims::runtime::calibrate(
          *model, tokens, io,
          [&](int32_t done, int32_t n) { cal_line.update((uint64_t)done, (uint64_t)n, ""); });
      cal_line.finish();
      importance = cal.imatrix.importance();
      moments = std::move(cal.moments);
      opt.importance = &importance;
      opt.second_moments = &moments;
    } catch (const std::exception& e) {
      return lilims::cli::fail("quantize", e.what());
    }
  }
  lilims::tools::ProgressLine line("quantize", progress);
  opt.progress = [&line](size_t i, size_t n, const lilims::gguf::TensorInfo& t) {
    line.update(i + 1, n, t.name);
  };
  try {
    if (!imatrix_path.empty()) {
      importance = lilims::models::read_imatrix(imatrix_path).importance();
      opt.importance = &importance;
    }
    auto in = lilims::gguf::File::open(pos[0]);
    // TYPE the file's own (general.file_type): only the layout changes,
    // every tensor keeps its type and bytes.
    const bool layout_only = layout != "gguf" && opt.tensor_types.empty() && importance.empty() &&
                             in->get_int_or("general.file_type", -1) == tt->file_type;
    if (layout_only) {
      line.finish();
      return write_laid_out(*in, pos[1], layout, progress);
    }
    lilims::gguf::Writer w = lilims::gguf::requantize(*in, type, opt);
    line.finish();
    if (layout != "gguf") {
      in.reset();
      const std::vector<uint8_t> bytes = w.to_bytes();
      w = lilims::gguf::Writer();
      auto plain = lilims::gguf::File::from_borrowed(bytes.data(), bytes.size(), pos[1]);
      w = lilims::gguf::lay_out(*plain, layout);
    }
    w.write(pos[1]);
    if (progress) {
      std::fprintf(stderr, "lilims quantize: wrote %s (%s%s)\n", pos[1].c_str(), tn.c_str(),
                   layout == "gguf" ? "" : (", laid out for " + layout).c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    line.finish();
    return lilims::cli::fail("quantize", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(quantize, "quantize", "re-quantize a GGUF model (Q4_0, Q4_1, Q8_0, F16)",
                        cmd_quantize);
