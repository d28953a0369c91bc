// Re-quantization (`lilims quantize`): GGUF in, GGUF out through gguf::Writer.
#include "models/requantize.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/for_each_index.h"
#include "base/strings.h"
#include "models/awq.h"
#include "models/gptq.h"
#include "quant/quantize.h"

namespace lilims::gguf {

int file_type_of(quant::Type type) { return quant::traits(type).file_type; }

namespace {

// One character class starting at p[i] == '['; sets *end past its ']'.
// Returns false (and *end = i) when there is no closing ']'.
bool class_matches(const std::string& p, size_t i, char c, size_t* end, bool* matched) {
  size_t j = i + 1;
  const bool negate = j < p.size() && (p[j] == '!' || p[j] == '^');
  if (negate) ++j;
  bool any = false;
  const size_t first = j;
  for (; j < p.size() && (p[j] != ']' || j == first); ++j) {
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      any = any || (p[j] <= c && c <= p[j + 2]);
      j += 2;
    } else {
      any = any || p[j] == c;
    }
  }
  if (j >= p.size()) {
    *end = i;
    return false;
  }
  *end = j + 1;
  *matched = any != negate;
  return true;
}

bool glob_at(const std::string& p, size_t pi, const std::string& s, size_t si) {
  while (pi < p.size()) {
    const char c = p[pi];
    if (c == '*') {
      while (pi < p.size() && p[pi] == '*') ++pi;
      if (pi == p.size()) return true;
      for (size_t k = si; k <= s.size(); ++k) {
        if (glob_at(p, pi, s, k)) return true;
      }
      return false;
    }
    if (si == s.size()) return false;
    if (c == '?') {
      ++pi;
      ++si;
      continue;
    }
    if (c == '[') {
      size_t end = 0;
      bool matched = false;
      if (class_matches(p, pi, s[si], &end, &matched)) {
        if (!matched) return false;
        pi = end;
        ++si;
        continue;
      }
    }
    if (c != s[si]) return false;
    ++pi;
    ++si;
  }
  return si == s.size();
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return glob_at(pattern, 0, name, 0);
}

TensorTypeRule parse_tensor_type_rule(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[quantize] --tensor-type expects PATTERN=TYPE (e.g. token_embd.weight=Q8_0), got '" +
                    text + "'");
  }
  const std::string type_name = text.substr(eq + 1);
  const quant::TypeTraits* tt = quant::type_traits_by_name(type_name);
  if (!tt || !quant::can_quantize(tt->type, quant::kQuantPlain)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] --tensor-type " + text + ": unknown type '" +
                                                 type_name + "' (" + quant::type_names(quant::kQuantPlain) + ")");
  }
  return {text.substr(0, eq), tt->type};
}

Writer requantize(const File& in, quant::Type type, const RequantizeOptions& opt) {
  const int ftype = file_type_of(type);
  if (!quant::can_quantize(type, quant::kQuantPlain)) {
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

  auto is_weight = [&](const TensorInfo& t) { return t.ne.size() == 2 && ends_with(t.name, ".weight"); };
  // The rule each tensor takes (-1: none); every rule must take one.
  std::vector<int> rule_of(in.tensors().size(), -1);
  for (size_t r = 0; r < opt.tensor_types.size(); ++r) {
    const TensorTypeRule& rule = opt.tensor_types[r];
    if (!quant::can_quantize(rule.type, quant::kQuantPlain)) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] --tensor-type " + rule.pattern + ": cannot quantize to " +
                                                   quant::ggml_type_name(static_cast<uint32_t>(rule.type)));
    }
    bool used = false;
    for (size_t k = 0; k < in.tensors().size(); ++k) {
      const TensorInfo& t = in.tensors()[k];
      if (!is_weight(t) || !glob_match(rule.pattern, t.name)) continue;
      used = true;
      if (rule_of[k] >= 0) continue;  // an earlier rule wins
      rule_of[k] = static_cast<int>(r);
      const int64_t block = quant::traits(rule.type).block_size;
      if (t.ne[0] % static_cast<uint64_t>(block) != 0) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                    "[quantize] --tensor-type " + rule.pattern + "=" + quant::traits(rule.type).name + ": " +
                        t.name + " has rows of " + std::to_string(t.ne[0]) + ", not a multiple of " +
                        std::to_string(block));
      }
    }
    if (!used) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] --tensor-type pattern '" + rule.pattern +
                                                   "' matches no 2-D weight of the model");
    }
  }
  if (opt.importance && opt.method != quant::QuantMethod::search) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] an imatrix needs the search method");
  }
  if (opt.second_moments && opt.method != quant::QuantMethod::search) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[quantize] error compensation (second moments) needs the search method");
  }
  // Error-compensation factors, one per distinct matrix, kept while a
  // tensor still to come needs it.
  struct FactorUse {
    std::shared_ptr<const models::GptqFactor> factor;
    int remaining = 0;
  };
  std::map<const std::vector<float>*, FactorUse> factors;
  const SecondMoments* second_moments = opt.second_moments;
  auto moments_for = [&](const TensorInfo& t, quant::Type type) -> const std::vector<float>* {
    if (!second_moments || !quant::can_quantize(type, quant::kQuantGptq)) return nullptr;
    const auto it = second_moments->find(t.name);
    if (it == second_moments->end() || !it->second) return nullptr;
    const uint64_t n = t.ne[0];
    if (it->second->size() != n * n) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                  "[quantize] the second moments of " + t.name + " hold " + std::to_string(it->second->size()) +
                      " values; its " + std::to_string(n) + " columns need " + std::to_string(n * n));
    }
    return it->second.get();
  };
  // The type each tensor becomes (null: copied as it is).
  auto dst_of = [&](size_t k) -> const quant::TypeTraits* {
    const TensorInfo& t = in.tensors()[k];
    const quant::TypeTraits* dst = nullptr;
    if (rule_of[k] >= 0) {
      dst = &quant::traits(opt.tensor_types[(size_t)rule_of[k]].type);
    } else if (is_weight(t) && t.ne[0] % static_cast<uint64_t>(target->block_size) == 0) {
      dst = target;
    } else if (t.ne.size() == 1) {
      dst = f32;
    }
    if (!dst || static_cast<uint32_t>(dst->type) == t.type || t.n_elements == 0) return nullptr;
    return dst;
  };
  // The folded tensors (float), which replace the file's.
  models::AwqFold fold;
  if (opt.activation_scaling && opt.second_moments) {
    std::map<std::string, size_t> index;
    for (size_t k = 0; k < in.tensors().size(); ++k) index[in.tensors()[k].name] = k;
    models::AwqOptions ao;
    ao.n_threads = opt.n_threads;
    if (opt.scaling_grid) ao.alphas = *opt.scaling_grid;
    fold = models::awq_fold(
        in, *opt.second_moments,
        [&](const std::string& name) {
          const auto it = index.find(name);
          const quant::TypeTraits* d = it == index.end() ? nullptr : dst_of(it->second);
          return d ? d->type : quant::Type::F32;
        },
        ao);
    second_moments = &fold.moments;
    if (opt.scaling_alphas) {
      for (const models::AwqGroupChoice& c : fold.choices) (*opt.scaling_alphas)[c.norm] = c.alpha;
    }
  }
  auto folded = [&](const TensorInfo& t) -> const std::vector<float>* {
    const auto it = fold.tensors.find(t.name);
    return it == fold.tensors.end() ? nullptr : &it->second;
  };
  // A folded tensor that would otherwise be copied keeps its type.
  auto dst_or_folded = [&](size_t k) -> const quant::TypeTraits* {
    const quant::TypeTraits* d = dst_of(k);
    if (d || !folded(in.tensors()[k])) return d;
    d = quant::type_traits(in.tensors()[k].type);
    if (!d || !(d->quantizers & quant::kQuantPlain)) {  // the K-quants are read, not written
      throw Error(LILIMS_ERR_UNSUPPORTED, "[quantize] cannot write the scaled " + in.tensors()[k].name);
    }
    return d;
  };
  std::vector<std::pair<const std::vector<float>*, int64_t>> to_factor;  // (matrix, n)
  for (size_t k = 0; k < in.tensors().size(); ++k) {
    const quant::TypeTraits* dst = dst_or_folded(k);
    if (!dst) continue;
    if (const std::vector<float>* m = moments_for(in.tensors()[k], dst->type)) {
      if (factors[m].remaining++ == 0) to_factor.emplace_back(m, static_cast<int64_t>(in.tensors()[k].ne[0]));
    }
  }
  // The factorisations (O(n^3) each) run first, one per thread at a time.
  for_each_index(to_factor.size(), opt.n_threads, [&](size_t i) {
    factors.at(to_factor[i].first).factor =
        std::make_shared<const models::GptqFactor>(models::gptq_factor(to_factor[i].first->data(), to_factor[i].second));
  });
  std::vector<uint8_t> data;
  for (size_t k = 0; k < in.tensors().size(); ++k) {
    const TensorInfo& t = in.tensors()[k];
    if (opt.progress) opt.progress(k, in.tensors().size(), t);
    // require_readable_types() vouched for it
    const quant::TypeTraits& src = *quant::readable_traits(t.type);
    const quant::TypeTraits* dst = dst_or_folded(k);
    const std::vector<float>* scaled = folded(t);
    if (!dst) {
      out.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
      continue;
    }
    std::shared_ptr<const models::GptqFactor> factor;
    if (const std::vector<float>* m = moments_for(t, dst->type)) {
      FactorUse& use = factors.at(m);
      factor = use.factor;
      if (--use.remaining == 0) factors.erase(m);
    }
    const uint64_t ne0 = t.ne[0], rows = t.n_elements / ne0;
    const uint64_t src_row = ne0 / src.block_size * src.block_bytes;
    const uint64_t dst_row = ne0 / dst->block_size * dst->block_bytes;
    data.resize(rows * dst_row);
    // Q4_K -> Q4_1 has an exact path (its traits' transcode); floats would
    // round every element again.
    const bool transcode = !scaled && src.transcode && src.load_as == dst->type;
    const float* importance = nullptr;
    if (opt.importance && dst->block_size > 1) {
      const auto it = opt.importance->find(t.name);
      if (it != opt.importance->end()) {
        if (it->second.size() != ne0) {
          throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                      "[quantize] the imatrix has " + std::to_string(it->second.size()) + " columns for " +
                          t.name + ", which has " + std::to_string(ne0));
        }
        importance = it->second.data();
      }
    }
    auto convert = [&](uint64_t r0, uint64_t r1) {
      std::vector<float> buf(ne0), scratch;
      for (uint64_t r = r0; r < r1; ++r) {
        if (transcode) {
          src.transcode(t.data + r * src_row, data.data() + r * dst_row, static_cast<int64_t>(ne0));
          continue;
        }
        if (scaled) {
          std::copy(scaled->begin() + (long)(r * ne0), scaled->begin() + (long)((r + 1) * ne0), buf.begin());
        } else {
          src.to_float(t.data + r * src_row, buf.data(), static_cast<int64_t>(ne0));
        }
        if (factor) {
          if (scratch.empty()) scratch.resize(ne0);
          models::quantize_row_gptq(dst->type, buf.data(), data.data() + r * dst_row,
                                   static_cast<int64_t>(ne0), *factor, scratch.data());
        } else if (importance) {
          quant::quantize_row_weighted(dst->type, buf.data(), data.data() + r * dst_row,
                                       static_cast<int64_t>(ne0), importance);
        } else {
          quant::quantize_row(dst->type, buf.data(), data.data() + r * dst_row,
                              static_cast<int64_t>(ne0), opt.method);
        }
      }
    };
    const uint64_t n_threads = std::min<uint64_t>(rows, static_cast<uint64_t>(std::max(1, opt.n_threads)));
    for_each_index(n_threads, opt.n_threads,
                 [&](size_t k) { convert(rows * k / n_threads, rows * (k + 1) / n_threads); });
    out.add_tensor(t.name, t.ne, static_cast<uint32_t>(dst->type), data.data(), data.size());
  }
  return out;
}

}  // namespace lilims::gguf
