// Re-quantization (`lilims quantize`): GGUF in, GGUF out through gguf::Writer.
#include "models/requantize.h"

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "quant/dequant_ref.h"
#include "quant/quantize.h"

namespace lilims::gguf {

int file_type_of(quant::Type type) { return quant::traits(type).file_type; }

Writer requantize(const File& in, quant::Type type, const RequantizeOptions& opt) {
  const int ftype = file_type_of(type);
  if (ftype < 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[quantize] cannot quantize to ") +
                                                 quant::ggml_type_name(static_cast<uint32_t>(type)));
  }
  in.require_readable_types();
  const quant::TypeTraits* target = quant::type_traits(static_cast<uint32_t>(type));
  const quant::TypeTraits* f32 = quant::type_traits(0);

  Writer out;
  if (in.find("general.alignment")) out.set_alignment(static_cast<uint32_t>(in.alignment()));
  for (const KeyValue& kv : in.metadata()) out.add(kv.key, kv.value);
  out.add_u32("general.file_type", static_cast<uint32_t>(ftype));
  if (target->block_size > 1) out.add_u32("general.quantization_version", 2);

  auto ends_with = [](const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  std::vector<float> row;
  std::vector<uint8_t> data;
  for (size_t k = 0; k < in.tensors().size(); ++k) {
    const TensorInfo& t = in.tensors()[k];
    if (opt.progress) opt.progress(k, in.tensors().size(), t);
    quant::ReadableType src;
    quant::readable_type(t.type, &src);  // require_readable_types() vouched for it
    const quant::TypeTraits* dst = nullptr;
    if (t.ne.size() == 2 && ends_with(t.name, ".weight") &&
        t.ne[0] % static_cast<uint64_t>(target->block_size) == 0) {
      dst = target;
    } else if (t.ne.size() == 1) {
      dst = f32;
    }
    if (!dst || static_cast<uint32_t>(dst->type) == t.type || t.n_elements == 0) {
      out.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
      continue;
    }
    const uint64_t ne0 = t.ne[0], rows = t.n_elements / ne0;
    const uint64_t src_row = ne0 / src.block_size * src.block_bytes;
    const uint64_t dst_row = ne0 / dst->block_size * dst->block_bytes;
    row.resize(ne0);
    data.resize(rows * dst_row);
    // Q4_K -> Q4_1 has an exact path (quant/dequant_ref.h); floats would
    // round every element again.
    const quant::DequantTraits* dq = quant::dequant_traits(t.type);
    const bool transcode = dq && dq->transcode && dq->load_as == dst->type;
    for (uint64_t r = 0; r < rows; ++r) {
      if (transcode) {
        dq->transcode(t.data + r * src_row, data.data() + r * dst_row, static_cast<int64_t>(ne0));
        continue;
      }
      src.to_float(t.data + r * src_row, row.data(), static_cast<int64_t>(ne0));
      quant::quantize_row(dst->type, row.data(), data.data() + r * dst_row,
                          static_cast<int64_t>(ne0), opt.method);
    }
    out.add_tensor(t.name, t.ne, static_cast<uint32_t>(dst->type), data.data(), data.size());
  }
  return out;
}

}  // namespace lilims::gguf
