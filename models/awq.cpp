#include "models/awq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/for_each_index.h"
#include "quant/quantize.h"

namespace lilims::models {

namespace {

// A tensor's contents as float (rows * cols).
std::vector<float> to_floats(const gguf::TensorInfo& t) {
  const quant::TypeTraits* src = quant::readable_traits(t.type);
  if (!src) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "[quantize] cannot read " + t.name);
  }
  const uint64_t ne0 = t.ne[0], rows = t.n_elements / ne0;
  const uint64_t src_row = quant::row_bytes(src->type, (int64_t)ne0);
  std::vector<float> out(t.n_elements);
  for (uint64_t r = 0; r < rows; ++r) src->to_float(t.data + r * src_row, out.data() + r * ne0, (int64_t)ne0);
  return out;
}

}  // namespace

std::vector<float> awq_scales(const float* h_diag, int64_t n, double alpha) {
  std::vector<float> s(static_cast<size_t>(n), 1.0f);
  if (alpha == 0.0) return s;
  double r_min = std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::sqrt(std::max(0.0, static_cast<double>(h_diag[j])));
    if (r > 0.0 && r < r_min) r_min = r;
  }
  if (!std::isfinite(r_min)) return s;  // no input seen at all
  std::vector<double> p(static_cast<size_t>(n));
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double r = std::max(r_min, std::sqrt(std::max(0.0, static_cast<double>(h_diag[j]))));
    p[(size_t)j] = std::pow(r, alpha);
    lo = std::min(lo, p[(size_t)j]);
    hi = std::max(hi, p[(size_t)j]);
  }
  const double norm = std::sqrt(lo * hi);
  for (int64_t j = 0; j < n; ++j) s[(size_t)j] = static_cast<float>(p[(size_t)j] / norm);
  return s;
}

double awq_error(quant::Type type, const std::vector<const float*>& rows, int64_t n, const float* h,
                 const float* s) {
  const quant::TypeTraits& tt = quant::traits(type);
  std::vector<float> v(n), y(n), e(n), t(n), imp(n);
  std::vector<uint8_t> q(static_cast<size_t>(n / tt.block_size) * tt.block_bytes);
  for (int64_t j = 0; j < n; ++j) {
    const float sj = s ? s[j] : 1.0f;
    imp[(size_t)j] = h[j * n + j] / (sj * sj);
  }
  double total = 0.0;
  for (const float* w : rows) {
    for (int64_t j = 0; j < n; ++j) v[(size_t)j] = s ? w[j] * s[j] : w[j];
    if (!quant::quantize_row_weighted(type, v.data(), q.data(), n, imp.data())) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[quantize] not a weight type");
    }
    tt.to_float(q.data(), y.data(), n);
    for (int64_t j = 0; j < n; ++j) e[(size_t)j] = w[j] - (s ? y[(size_t)j] / s[j] : y[(size_t)j]);
    std::fill(t.begin(), t.end(), 0.0f);
    for (int64_t j = 0; j < n; ++j) {  // t = H e, row by row of the symmetric H
      const float ej = e[(size_t)j];
      const float* hj = h + j * n;
      for (int64_t c = 0; c < n; ++c) t[(size_t)c] += ej * hj[c];
    }
    double row = 0.0;
    for (int64_t j = 0; j < n; ++j) row += static_cast<double>(e[(size_t)j]) * t[(size_t)j];
    total += row;
  }
  return total;
}

AwqFold awq_fold(const gguf::File& in, const gguf::SecondMoments& moments,
                 const std::function<quant::Type(const std::string&)>& type_of, const AwqOptions& opt) {
  AwqFold out;
  out.moments = moments;
  // A group's s divides the norm's weight and scales the members' columns.
  struct Group {
    std::string norm;
    std::vector<std::string> members;
  };
  std::vector<Group> groups;
  for (int layer = 0;; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    if (!in.find_tensor(p + "attn_norm.weight") && !in.find_tensor(p + "ffn_norm.weight")) break;
    groups.push_back({p + "attn_norm.weight", {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}});
    groups.push_back({p + "ffn_norm.weight", {p + "ffn_gate.weight", p + "ffn_up.weight"}});
  }
  // Keep the groups that can be folded.
  std::vector<Group> usable;
  for (const Group& g : groups) {
    const gguf::TensorInfo* norm = in.find_tensor(g.norm);
    if (!norm || norm->ne.size() != 1 || norm->type != 0 /* F32 */) continue;
    const uint64_t n_cols = norm->ne[0];
    const std::vector<float>* h = nullptr;
    bool ok = true, any_block = false;
    for (const std::string& m : g.members) {
      const gguf::TensorInfo* t = in.find_tensor(m);
      const auto it = moments.find(m);
      if (!t || t->ne.size() != 2 || t->ne[0] != n_cols || it == moments.end() || !it->second ||
          (h && it->second.get() != h) || it->second->size() != t->ne[0] * t->ne[0]) {
        ok = false;
        break;
      }
      h = it->second.get();
      const quant::Type type = type_of(m);
      if (quant::can_quantize(type, quant::kQuantAwq) && t->ne[0] % (uint64_t)quant::traits(type).block_size == 0) {
        any_block = true;
      }
    }
    if (ok && any_block) usable.push_back(g);
  }
  std::vector<AwqGroupChoice> choices(usable.size());
  std::vector<std::vector<float>> scales(usable.size());
  for_each_index(usable.size(), opt.n_threads, [&](size_t gi) {
    const Group& g = usable[gi];
    const std::vector<float>& hl = *moments.at(g.members[0]);
    const int64_t n = static_cast<int64_t>(in.find_tensor(g.members[0])->ne[0]);
    std::vector<float> h(hl.size()), diag(n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) h[i * n + j] = h[j * n + i] = hl[i * n + j];
      diag[i] = hl[i * n + i];
    }
    std::vector<std::vector<float>> weights;
    std::vector<std::pair<quant::Type, std::vector<const float*>>> sampled;
    for (const std::string& m : g.members) {
      const quant::Type type = type_of(m);
      if (!quant::can_quantize(type, quant::kQuantAwq)) continue;
      const gguf::TensorInfo& t = *in.find_tensor(m);
      weights.push_back(to_floats(t));
      const int64_t rows = static_cast<int64_t>(t.n_elements / t.ne[0]);
      const int64_t k = std::min<int64_t>(rows, opt.max_sample_rows);
      std::vector<const float*> r;
      for (int64_t i = 0; i < k; ++i) r.push_back(weights.back().data() + (i * rows / k) * n);
      sampled.emplace_back(type, std::move(r));
    }
    double best = -1.0, best_alpha = 0.0;
    for (double alpha : opt.alphas) {
      const std::vector<float> s = awq_scales(diag.data(), n, alpha);
      double err = 0.0;
      for (const auto& [type, rows] : sampled) err += awq_error(type, rows, n, h.data(), alpha == 0.0 ? nullptr : s.data());
      if (alpha == 0.0) choices[gi].error_unscaled = err;
      if (best < 0.0 || err < best) {
        best = err;
        best_alpha = alpha;
      }
    }
    choices[gi] = {g.norm, best_alpha, choices[gi].error_unscaled, best};
    scales[gi] = awq_scales(diag.data(), n, best_alpha);
  });
  for (size_t gi = 0; gi < usable.size(); ++gi) {
    out.choices.push_back(choices[gi]);
    if (choices[gi].alpha == 0.0) continue;
    const Group& g = usable[gi];
    const std::vector<float>& s = scales[gi];
    const int64_t n = static_cast<int64_t>(s.size());
    std::vector<float> norm = to_floats(*in.find_tensor(g.norm));
    for (int64_t j = 0; j < n; ++j) norm[(size_t)j] /= s[(size_t)j];
    out.tensors[g.norm] = std::move(norm);
    for (const std::string& m : g.members) {
      std::vector<float> w = to_floats(*in.find_tensor(m));
      for (size_t i = 0; i < w.size(); ++i) w[i] *= s[i % (size_t)n];
      out.tensors[m] = std::move(w);
    }
    const std::vector<float>& hl = *moments.at(g.members[0]);
    auto scaled = std::make_shared<std::vector<float>>(hl.size(), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) (*scaled)[i * n + j] = hl[i * n + j] / (s[(size_t)i] * s[(size_t)j]);
    }
    for (const std::string& m : g.members) out.moments[m] = scaled;
  }
  return out;
}

}  // namespace lilims::models
