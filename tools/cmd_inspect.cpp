// `lilims inspect`: what a GGUF file holds, or what this CPU offers.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>

#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "models/gguf.h"
#include "quant/prelaid.h"
#include "quant/quant.h"
#include "tools/cli.h"
#include "tools/common.h"

namespace {

using lilims::gguf::Value;
using lilims::gguf::ValueType;

const char kUsage[] =
    "usage: lilims inspect MODEL.gguf [--all]   version, metadata, tensor table\n"
    "       lilims inspect MODEL.gguf --plan [-c N] [-t N] [--chunk-layers K] [--kv-type T]\n"
    "                      [--exec MODE] [--kv-commit MODE] [--ctx-beyond-train]\n"
    "                                          the execution plan of a session: chunks and\n"
    "                                          their ops, buffers, memory (arena, KV cache,\n"
    "                                          weights resident, peak)\n"
    "       lilims inspect --cpu                CPU features and the kernel path in use\n"
    "  --all   print every array item instead of the first few\n";

int inspect_plan(const lilims::tools::CommonArgs& common) {
  const auto model = lilims::tools::open_model(common);
  const lilims::runtime::PlannedSession ps =
      lilims::runtime::plan_session(*model, common.session_options(*model));
  std::printf("model: %s (%s, %d layers)\n", common.model_path.c_str(),
              lilims::models::arch_name(model->hparams().arch), model->hparams().n_layer);
  std::fputs(ps.plan.describe(ps.graph).c_str(), stdout);
  const lilims::models::Model& w = model->weights();
  const std::string copies = lilims::models::describe_copies(w);
  std::printf("weights: %.1f MiB read in place from the file, %.1f MiB copied%s%s\n",
              (double)w.mapped_weight_bytes() / (1 << 20),
              (double)(w.repacked_bytes + w.requantized_bytes) / (1 << 20), copies.empty() ? "" : " (",
              copies.empty() ? "" : (copies + ")").c_str());
  return 0;
}

// Strings are printed quoted, with control and non-printable bytes escaped.
std::string quoted(const std::string& s, size_t max_len) {
  std::string out = "\"";
  for (size_t k = 0; k < s.size(); ++k) {
    if (k == max_len) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string scalar_text(const Value& v) {
  char buf[64];
  switch (v.type) {
    case ValueType::BOOL: return v.u ? "true" : "false";
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: std::snprintf(buf, sizeof buf, "%.9g", v.f); return buf;
    case ValueType::STRING: return quoted(v.s, 60);
    case ValueType::UINT64: return std::to_string(v.u);
    case ValueType::ARRAY: return "[...]";
    default:
      if (v.i < 0 || v.type == ValueType::INT8 || v.type == ValueType::INT16 ||
          v.type == ValueType::INT32 || v.type == ValueType::INT64) {
        return std::to_string(v.i);
      }
      return std::to_string(v.u);
  }
}

std::string value_text(const Value& v, size_t max_items) {
  if (v.type != ValueType::ARRAY) return scalar_text(v);
  std::string s = std::string("ARRAY of ") + lilims::gguf::value_type_name(v.elem_type) + "[" +
                  std::to_string(v.size()) + "] [";
  for (size_t k = 0; k < v.size(); ++k) {
    if (k == max_items) {
      s += ", ...";
      break;
    }
    if (k) s += ", ";
    s += value_text(v.at(k), max_items);
  }
  return s + "]";
}

// Keys and tensor names are as untrusted as values: escaped the same way,
// without the quotes (they are the row labels).
std::string name_text(const std::string& s) {
  const std::string q = quoted(s, SIZE_MAX);
  return q.substr(1, q.size() - 2);
}

std::string shape_text(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

int inspect_cpu() {
  namespace k = lilims::kernels;
  const k::CpuFeatures& f = k::cpu_features();
  std::printf("cpu features:\n");
  std::printf("  avx2+fma+f16c  %s\n", f.avx2 ? "yes" : "no");
  std::printf("  avx512 vnni    %s\n", f.avx512vnni ? "yes" : "no");
  std::printf("  neon           %s\n", f.neon ? "yes" : "no");
  std::printf("  dotprod        %s\n", f.dotprod ? "yes" : "no");
  std::printf("  i8mm           %s\n", f.i8mm ? "yes" : "no");
  const char* forced = std::getenv("LILIMS_ISA");
  std::printf("kernel path: %s%s%s\n", k::kernel_path_name(),
              forced ? " (LILIMS_ISA=" : "", forced ? (std::string(forced) + ")").c_str() : "");
  return 0;
}

int inspect_file(const std::string& path, bool all) {
  auto f = lilims::gguf::File::open(path);
  std::printf("%s: GGUF v%u, %" PRIu64 " bytes, alignment %" PRIu64 ", data at offset %" PRIu64
              "\n",
              path.c_str(), f->version(), f->file_size(), f->alignment(), f->data_offset());
  std::printf("\nmetadata (%zu keys):\n", f->metadata().size());
  size_t key_w = 0;
  for (const auto& kv : f->metadata()) key_w = std::max(key_w, name_text(kv.key).size());
  for (const auto& kv : f->metadata()) {
    const std::string type = kv.value.type == ValueType::ARRAY
                                 ? ""
                                 : std::string(lilims::gguf::value_type_name(kv.value.type)) + " ";
    std::printf("  %-*s %s%s\n", static_cast<int>(key_w), name_text(kv.key).c_str(), type.c_str(),
                value_text(kv.value, all ? SIZE_MAX : 8).c_str());
  }
  std::printf("\ntensors (%zu):\n", f->tensors().size());
  size_t name_w = 4;
  for (const auto& t : f->tensors()) name_w = std::max(name_w, name_text(t.name).size());
  std::printf("  %-*s %-6s %-22s %14s %14s\n", static_cast<int>(name_w), "name", "type", "shape",
              "offset", "bytes");
  uint64_t total_bytes = 0, total_el = 0, unreadable = 0, requantized = 0;
  std::map<std::string, uint64_t> requantized_types;
  for (const auto& t : f->tensors()) {
    const bool prelaid = lilims::quant::prelaid_type(t.type, nullptr);
    const lilims::quant::TypeTraits* rt = lilims::quant::readable_traits(t.type);
    const bool readable = prelaid || rt;
    const std::string type_name =
        prelaid ? lilims::quant::prelaid_type_name(t.type) : lilims::quant::ggml_type_name(t.type);
    if (rt && !lilims::kernels::kept_at_load(rt->type)) {  // converted to its load_as
      ++requantized;
      ++requantized_types[std::string(rt->name) + " -> " + lilims::quant::traits(rt->load_as).name];
    }
    std::printf("  %-*s %-6s %-22s %14" PRIu64 " %14s\n", static_cast<int>(name_w),
                name_text(t.name).c_str(), type_name.c_str(), shape_text(t.ne).c_str(),
                t.offset, readable ? std::to_string(t.n_bytes).c_str() : "?");
    total_bytes += t.n_bytes;
    total_el += t.n_elements;
    unreadable += readable ? 0 : 1;
  }
  std::printf("\ntotal: %zu tensors, %" PRIu64 " parameters, %" PRIu64 " bytes (%.2f MiB)",
              f->tensors().size(), total_el, total_bytes, total_bytes / 1048576.0);
  if (total_el && !unreadable) std::printf(", %.2f bits/parameter", 8.0 * total_bytes / total_el);
  std::printf("\n");
  if (requantized) {
    std::string what;
    for (const auto& [conv, n] : requantized_types) {
      what += (what.empty() ? "" : ", ") + std::to_string(n) + " " + conv;
    }
    std::printf("%" PRIu64 " tensor(s) of types lilims has no kernels for on this CPU, re-quantized at load (%s)\n",
                requantized, what.c_str());
  }
  if (unreadable) {
    std::printf("%" PRIu64 " tensor(s) of types lilims cannot read yet (bytes not counted)\n",
                unreadable);
  }
  return 0;
}

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool cpu = false, all = false, plan = false;
  lilims::tools::CommonArgs common;
  for (int k = 1; k < argc; ++k) {
    const char* a = argv[k];
    bool taken = false;
    if (a[0] == '-' && std::strcmp(a, "-m") != 0 && std::strcmp(a, "--model") != 0) {
      try {
        taken = common.parse(a, [&]() -> const char* {
          if (k + 1 >= argc) throw std::invalid_argument(std::string(a) + " needs a value");
          return argv[++k];
        });
      } catch (const std::exception& e) {
        lilims::cli::fail("inspect", e.what());
        return 2;  // a usage error
      }
    }
    if (taken) {
      plan = plan || std::strcmp(a, "--no-mmap") != 0;
      continue;
    }
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(a, "--cpu")) {
      cpu = true;
    } else if (!std::strcmp(a, "--all")) {
      all = true;
    } else if (!std::strcmp(a, "--plan")) {
      plan = true;
    } else if (a[0] == '-' && a[1]) {
      return lilims::cli::fail("inspect", std::string("unknown option ") + a + " (try --help)");
    } else if (path.empty()) {
      path = a;
    } else {
      return lilims::cli::fail("inspect", std::string("unexpected argument ") + a);
    }
  }
  if (cpu) return path.empty() ? inspect_cpu() : lilims::cli::fail("inspect", "--cpu takes no file");
  if (path.empty()) return lilims::cli::fail("inspect", "expects MODEL.gguf or --cpu (try --help)");
  try {
    if (plan) {
      common.model_path = path;
      return inspect_plan(common);
    }
    return inspect_file(path, all);
  } catch (const std::exception& e) {
    return lilims::cli::fail("inspect", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(inspect, "inspect", "print a GGUF file's metadata and tensors, or CPU features",
                        cmd_inspect);
