// `lilims tokenize` and `lilims detokenize`: a model's tokenizer from the
// command line.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tools/cli.h"
#include "tools/common.h"

namespace {

const char kTokenizeUsage[] =
    "usage: lilims tokenize -m MODEL.gguf [--no-bos] [--parse-special] [--ids] (TEXT | -f FILE)\n"
    "  --no-bos          do not add BOS even if the model's metadata asks for it\n"
    "  --parse-special   match special-token text (\"<|im_start|>\") as single tokens\n"
    "  --ids             print the ids on one line, separated by spaces\n"
    "                    (default: one `id 'piece'` per line)\n";
const char kDetokenizeUsage[] = "usage: lilims detokenize -m MODEL.gguf ID...\n";

std::string default_model() {
  if (const char* m = std::getenv("LILIMS_MODEL")) return m;
  const std::string file = "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* d = std::getenv("LILIMS_MODEL_DIR")) return std::string(d) + "/" + file;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/lilims/models/" + file;
}

// A piece for display: printable UTF-8 as is, everything else escaped.
std::string display(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    size_t len;
    const uint32_t cp = lilims::tok::utf8_decode(piece, i, &len);
    const auto c = static_cast<unsigned char>(piece[i]);
    if (cp == 0xFFFD && len == 1) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (len == 1 && (c < 0x20 || c == 0x7f)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.append(piece, i, len);
    }
    i += len;
  }
  return out;
}

std::unique_ptr<lilims::tok::Tokenizer> load(const std::string& path) {
  auto f = lilims::gguf::File::open(path);
  return lilims::tok::Tokenizer::from_gguf(*f);
}

int tokenize_main(int argc, char** argv) {
  std::string model, text, file;
  bool have_text = false, no_bos = false, parse_special = false, ids_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kTokenizeUsage, stdout);
        return 0;
      } else if (a == "-m" || a == "--model") {
        model = lilims::tools::model_arg(a, next());
      } else if (a == "-f" || a == "--file") {
        file = next();
      } else if (a == "--no-bos") {
        no_bos = true;
      } else if (a == "--parse-special") {
        parse_special = true;
      } else if (a == "--ids") {
        ids_only = true;
      } else if (a.size() > 1 && a[0] == '-' && !have_text) {
        return lilims::cli::fail("tokenize", "unknown option " + a + " (try --help)");
      } else if (!have_text) {
        text = a;
        have_text = true;
      } else {
        return lilims::cli::fail("tokenize", "unexpected argument " + a + " (quote the text)");
      }
    } catch (const std::exception& e) {
      return lilims::cli::fail("tokenize", e.what());
    }
  }
  if (have_text == !file.empty()) return lilims::cli::fail("tokenize", "expects TEXT or -f FILE (try --help)");
  if (model.empty()) model = default_model();
  try {
    if (!file.empty()) text = lilims::tools::read_text_file(file);
    auto tok = load(model);
    const std::vector<int32_t> ids = tok->encode(text, !no_bos, parse_special);
    if (ids_only) {
      for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
    } else {
      for (int32_t id : ids) std::printf("%d '%s'\n", id, display(tok->token_to_piece(id)).c_str());
    }
  } catch (const std::exception& e) {
    return lilims::cli::fail("tokenize", e.what());
  }
  return 0;
}

int detokenize_main(int argc, char** argv) {
  std::string model;
  std::vector<int32_t> ids;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    try {
      if (a == "-h" || a == "--help") {
        std::fputs(kDetokenizeUsage, stdout);
        return 0;
      } else if (a == "-m" || a == "--model") {
        if (i + 1 >= argc) throw std::invalid_argument("-m needs a value");
        model = lilims::tools::model_arg(a, argv[++i]);
      } else {
        ids.push_back(static_cast<int32_t>(lilims::cli::parse_int("ID", a.c_str(), 0, INT32_MAX)));
      }
    } catch (const std::exception& e) {
      return lilims::cli::fail("detokenize", e.what());
    }
  }
  if (model.empty()) model = default_model();
  try {
    auto tok = load(model);
    const std::string text = tok->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  } catch (const std::exception& e) {
    return lilims::cli::fail("detokenize", e.what());
  }
  return 0;
}

}  // namespace

LILIMS_REGISTER_COMMAND(tokenize, "tokenize", "print the token ids (and pieces) of a text", tokenize_main);
LILIMS_REGISTER_COMMAND(detokenize, "detokenize", "print the text of token ids", detokenize_main);
