#include "models/layout_file.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "kernels/cpu.h"
#include "models/weight_convert.h"
#include "quant/prelaid.h"
#include "quant/repack.h"

namespace lilims::gguf {
namespace {

// The layout a target stores a type in, or nothing (kLayoutGguf) when none holds it.
quant::PrelaidType layout_for(const std::string& target, quant::Type type) {
  const int layout = target == "avx512vnni" ? quant::kLayoutX16 : quant::kLayoutX4;
  if (!quant::repackable(type, layout)) return quant::PrelaidType{type, quant::kLayoutGguf, false};
  return quant::prelaid_for(type, layout, target == "neon");
}

// A layer's tensors a load stacks into one weight, in their stacking order.
const std::vector<std::vector<std::string>> kStacks = {
    {"attn_q.weight", "attn_k.weight", "attn_v.weight"}, {"ffn_gate.weight", "ffn_up.weight"}};

}  // namespace

std::string layout_target(const std::string& name) {
  if (name == "avx2" || name == "avx512vnni" || name == "neon" || name == "gguf") return name;
  if (name == "avx512") return "avx512vnni";
  if (name == "native") {
    const kernels::Isa isa = kernels::active_isa();
    if (isa == kernels::Isa::neon) return "neon";
    if (isa == kernels::Isa::avx2) return kernels::vnni_enabled() ? "avx512vnni" : "avx2";
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[quantize] --layout native: this CPU runs the reference kernels, which read every layout; "
                "name the CPUs the file is for (avx2, avx512vnni, neon)");
  }
  throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] --layout expects native, avx2, avx512vnni, neon or gguf, got '" +
                                               name + "'");
}

Writer lay_out(const File& in, const std::string& target, LayOutStats* stats) {
  in.require_readable_types();
  const bool tied = in.find_tensor("output.weight") == nullptr;
  Writer out;
  out.set_alignment(static_cast<uint32_t>(std::max<uint64_t>(in.alignment(), quant::kPrelaidAlignment)));
  for (const KeyValue& kv : in.metadata()) {
    if (kv.key != "general.alignment") out.add(kv.key, kv.value);
  }
  out.add_u32(quant::kLayoutVersionKey, quant::kLayoutVersion);
  out.add_string(quant::kLayoutTargetKey, target);

  auto emit = [&](const TensorInfo& t) {
    const quant::TypeTraits* tt = quant::type_traits(t.type);
    // A type a load converts (to its traits' load_as), or nullptr.
    const quant::TypeTraits* conv = quant::readable_traits(t.type);
    if (conv && conv->load_as == conv->type) conv = nullptr;
    const bool weight = t.ne.size() == 2 && ends_with(t.name, ".weight") && (tt || conv);
    // An embedding with its own output beside it is only read row by row:
    // it keeps GGUF rows.
    const bool rows_only = weight && t.name == "token_embd.weight" && !tied;
    quant::PrelaidType p = weight && tt ? layout_for(target, tt->type) : quant::PrelaidType{};
    const int64_t rows = weight ? (int64_t)t.ne[1] : 0, cols = weight ? (int64_t)t.ne[0] : 0;
    // A type the target has no layout for but a load converts (K-quants,
    // Q5_0 without the 16-row kernel, BF16 ...): converted here as the load
    // would, then laid out.
    const uint8_t* data = t.data;
    uint32_t type = t.type;
    uint64_t n_bytes = t.n_bytes;
    std::vector<uint8_t> converted;
    if (weight && conv && p.layout == quant::kLayoutGguf && cols % quant::traits(conv->load_as).block_size == 0) {
      converted = models::convert_for_kernels(*conv, t.data, rows, cols, t.name);
      data = converted.data();
      type = (uint32_t)conv->load_as;
      n_bytes = converted.size();
      p = layout_for(target, conv->load_as);
      if (stats) ++stats->converted[std::string(conv->name) + " -> " + quant::traits(conv->load_as).name];
    }
    if (rows_only || p.layout == quant::kLayoutGguf) {
      out.add_tensor(t.name, t.ne, type, data, n_bytes);
      return;
    }
    std::vector<uint8_t> bytes(quant::prelaid_bytes(p, rows, cols));
    quant::repack(p.type, p.layout, data, rows, cols, bytes.data());
    if (p.arm_variant != quant::native_prelaid(p.type, p.layout).arm_variant) {
      quant::flip_variant(p, bytes.data(), rows, cols);
    }
    out.add_tensor(t.name, t.ne, quant::prelaid_type_id(p), bytes.data(), bytes.size());
  };

  std::set<std::string> done;
  for (const TensorInfo& t : in.tensors()) {
    if (done.count(t.name)) continue;
    // A member of a stack brings the whole stack, in order.
    const std::vector<std::string>* stack = nullptr;
    std::string prefix;
    for (const auto& s : kStacks) {
      for (const std::string& member : s) {
        if (ends_with(t.name, "." + member)) {
          stack = &s;
          prefix = t.name.substr(0, t.name.size() - member.size());
        }
      }
    }
    if (!stack) {
      emit(t);
      done.insert(t.name);
      continue;
    }
    for (const std::string& member : *stack) {
      const TensorInfo* m = in.find_tensor(prefix + member);
      if (m && done.insert(m->name).second) emit(*m);
    }
  }
  return out;
}

}  // namespace lilims::gguf
