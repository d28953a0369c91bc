// Fused attention of every ISA against a naive softmax(q K^T scale) V in
// double (Eigen) over the cache's own (dequantized) values, and against the
// scalar ref; plus what the cache type costs: F16's and Q8_0's error against
// the unquantized f32 K/V, printed side by side; and the staged rows
// (k_new / v_new) against the same values held in a cache.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/fp16.h"
#include "kernels/ops.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/ops_ref.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace lilims::test {
namespace {

using kernels::AttentionArgs;
using kernels::Isa;
using quant::Type;

struct Case {
  int n_ctx;  // positions in the cache = pos0 + n_q
  int n_q;
  int n_head, n_head_kv, head_dim;
  int32_t window;
};

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "ctx=%d n_q=%d heads=%d/%d dim=%d window=%d", c.n_ctx, c.n_q,
                c.n_head, c.n_head_kv, c.head_dim, c.window);
  return buf;
}

const char* type_name(Type t) {
  return t == Type::F16 ? "F16" : t == Type::Q8_0 ? "Q8_0" : "F32";
}

// A KV cache holding f32 values v (n_ctx, n_head_kv, head_dim) as type t,
// with 64 bytes of padding per position so the stride is not the row size.
struct Cache {
  std::vector<uint8_t> bytes;
  int64_t stride = 0;
  std::vector<double> deq;  // what the cache holds, back in double
};

Cache make_cache(const std::vector<float>& v, int n_ctx, int n_kv, int d, Type t) {
  Cache c;
  const int64_t head_bytes = t == Type::F32   ? d * 4
                             : t == Type::F16 ? d * 2
                                              : (d / 32) * (int64_t)sizeof(quant::BlockQ8_0);
  c.stride = n_kv * head_bytes + 64;
  c.bytes.assign((size_t)(c.stride * n_ctx), 0xff);
  c.deq.resize(v.size());
  for (int p = 0; p < n_ctx; ++p) {
    for (int g = 0; g < n_kv; ++g) {
      const float* src = v.data() + ((int64_t)p * n_kv + g) * d;
      double* dq = c.deq.data() + ((int64_t)p * n_kv + g) * d;
      uint8_t* dst = c.bytes.data() + p * c.stride + g * head_bytes;
      if (t == Type::F32) {
        std::memcpy(dst, src, d * 4);
        for (int i = 0; i < d; ++i) dq[i] = src[i];
      } else if (t == Type::F16) {
        for (int i = 0; i < d; ++i) {
          const uint16_t h = fp32_to_fp16(src[i]);
          std::memcpy(dst + 2 * i, &h, 2);
          dq[i] = fp16_to_fp32(h);
        }
      } else {
        kernels::quantize_row_q8_0__ref(src, dst, d);
        const quant::BlockQ8_0* b = reinterpret_cast<const quant::BlockQ8_0*>(dst);
        for (int i = 0; i < d; ++i) dq[i] = (double)fp16_to_fp32(b[i / 32].d) * b[i / 32].q[i % 32];
      }
    }
  }
  return c;
}

// The oracle: per query row and head, softmax(K q scale) V in double over
// the visible positions, with K, V taken from kv (n_ctx, n_kv, d) doubles.
// Also returns, per (row, head), the bound terms: S = max_j sum_d |q_d k_jd|
// and max |v| over the visible rows.
struct Oracle {
  std::vector<double> out, s_abs, v_abs;
};

Oracle naive(const Case& c, const std::vector<float>& q, const std::vector<double>& k,
             const std::vector<double>& v, float scale) {
  Oracle o;
  const int d = c.head_dim, group = c.n_head / c.n_head_kv;
  const int pos0 = c.n_ctx - c.n_q;
  o.out.resize((size_t)c.n_q * c.n_head * d);
  o.s_abs.resize((size_t)c.n_q * c.n_head);
  o.v_abs.resize((size_t)c.n_q * c.n_head);
  for (int i = 0; i < c.n_q; ++i) {
    const int hi = pos0 + i;
    const int lo = c.window > 0 ? std::max(0, hi - c.window + 1) : 0;
    const int n = hi - lo + 1;
    for (int h = 0; h < c.n_head; ++h) {
      const int g = h / group;
      Eigen::MatrixXd K(n, d), V(n, d);
      for (int t = 0; t < n; ++t) {
        for (int j = 0; j < d; ++j) {
          K(t, j) = k[((int64_t)(lo + t) * c.n_head_kv + g) * d + j];
          V(t, j) = v[((int64_t)(lo + t) * c.n_head_kv + g) * d + j];
        }
      }
      Eigen::VectorXd qv(d);
      for (int j = 0; j < d; ++j) qv[j] = q[((int64_t)i * c.n_head + h) * d + j];
      Eigen::VectorXd s = K * qv * (double)scale;
      s = (s.array() - s.maxCoeff()).exp().matrix();
      s /= s.sum();
      const Eigen::VectorXd out = V.transpose() * s;
      for (int j = 0; j < d; ++j) o.out[((int64_t)i * c.n_head + h) * d + j] = out[j];
      o.s_abs[(size_t)i * c.n_head + h] = (K.cwiseAbs() * qv.cwiseAbs()).maxCoeff();
      o.v_abs[(size_t)i * c.n_head + h] = V.cwiseAbs().maxCoeff();
    }
  }
  return o;
}

// The error bound of a float attention against the double oracle over the
// same cache values.  Each score is a float dot product of d terms, scaled:
// |ds| <= (d + 2) u scale S = delta.  Perturbing the scores by <= delta moves
// each softmax weight by <= 2 delta relative (to first order), so the output
// by <= 2 delta max|v|.  exp (<= 4u), the float sums of n weights and of n
// weighted values (gamma_n each) and the final division add <= (2n + 16) u
// max|v|.  tol = max|v| (2.2 delta + (2n + 16) u).
double bound(const Case& c, const Oracle& o, size_t row_head, float scale) {
  const double delta = (c.head_dim + 2) * kEps * scale * o.s_abs[row_head];
  return o.v_abs[row_head] * (2.2 * delta + (2.0 * c.n_ctx + 16) * kEps);
}

// The arguments of case c's queries (q rows q_stride floats apart) over a
// cache at k / v of type t, rows stride bytes apart; out and staging unset.
AttentionArgs case_args(const Case& c, const float* q, int64_t q_stride, const void* k,
                        const void* v, Type t, int64_t stride, float scale) {
  AttentionArgs a{};
  a.q = q;
  a.q_stride = q_stride;
  a.n_q = c.n_q;
  a.pos0 = c.n_ctx - c.n_q;
  a.k = k;
  a.v = v;
  a.kv_type = t;
  a.kv_stride_bytes = stride;
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.scale = scale;
  a.window = c.window;
  return a;
}

class ops_attention : public OpsIsaTest {};

std::vector<Case> cases() {
  return {
      // decode (n_q = 1) over contexts 1 .. 8192, GQA ratios 1/3/4/8, dims 64/80/96/128
      {1, 1, 4, 4, 64, 0},       {2, 1, 9, 3, 64, 0},        {33, 1, 32, 4, 64, 0},
      {100, 1, 32, 32, 80, 0},   {515, 1, 24, 8, 96, 0},     {2048, 1, 32, 4, 64, 0},
      {1031, 1, 8, 1, 128, 0},   {8192, 1, 9, 3, 64, 0},     {8192, 1, 32, 8, 128, 4096},
      // decode with groups of more than 8 heads (the SIMD decode takes 8 at a time)
      {300, 1, 24, 2, 64, 0},    {97, 1, 16, 1, 80, 0},      {45, 1, 14, 1, 64, 40},
      // small dims (stories260K: 8 heads / 4 kv heads of dim 8), generic-dim code
      {150, 1, 8, 4, 8, 0},      {150, 30, 8, 4, 8, 0},      {77, 1, 12, 2, 16, 0},
      {77, 1, 12, 2, 32, 0},     {40, 1, 6, 2, 40, 0},
      // prefill blocks (many query rows, causal inside the block)
      {7, 7, 9, 3, 64, 0},       {64, 64, 8, 2, 64, 0},      {300, 45, 12, 4, 96, 0},
      {173, 37, 32, 32, 80, 0},  {90, 20, 16, 2, 128, 0},
      // sliding windows smaller and larger than a key block, window 1
      {200, 1, 6, 3, 64, 50},    {200, 17, 6, 2, 64, 5},     {129, 9, 4, 4, 128, 1},
      {600, 33, 8, 8, 80, 100},  {70, 70, 8, 1, 96, 16},
  };
}

TEST_P(ops_attention, vs_naive_double_and_ref) {
  SCOPED_TRACE(trace());
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const int d = c.head_dim;
    const float scale = 1.0f / std::sqrt((float)d);
    const int64_t row = (int64_t)c.n_head * d;
    const auto q = random_floats(rng_, c.n_q * row, -1, 1);
    const auto kf = random_floats(rng_, (int64_t)c.n_ctx * c.n_head_kv * d, -1, 1);
    const auto vf = random_floats(rng_, (int64_t)c.n_ctx * c.n_head_kv * d, -1, 1);
    std::vector<double> kd(kf.begin(), kf.end()), vd(vf.begin(), vf.end());
    const Oracle exact = naive(c, q, kd, vd, scale);  // unquantized K/V
    double err_by_type[3] = {0, 0, 0};
    for (Type t : {Type::F32, Type::F16, Type::Q8_0}) {
      if (t == Type::Q8_0 && d % 32 != 0) continue;  // Q8_0 needs whole blocks per head
      SCOPED_TRACE(type_name(t));
      const Cache kc = make_cache(kf, c.n_ctx, c.n_head_kv, d, t);
      const Cache vc = make_cache(vf, c.n_ctx, c.n_head_kv, d, t);
      const Oracle o = naive(c, q, kc.deq, vc.deq, scale);
      // q rows with a stride larger than a row; out likewise.
      std::vector<float> qs((size_t)(c.n_q * (row + 8)));
      for (int i = 0; i < c.n_q; ++i) std::copy_n(q.data() + i * row, row, qs.data() + i * (row + 8));
      AttentionArgs a = case_args(c, qs.data(), row + 8, kc.bytes.data(), vc.bytes.data(), t, kc.stride, scale);
      std::vector<float> out((size_t)(c.n_q * (row + 4)), -7.0f), ref(out.size(), -7.0f);
      a.out = out.data();
      a.out_stride = row + 4;
      std::vector<float> scratch(kernels::attention_scratch_floats(a) + 1);
      // Heads in two calls split inside a kv group, as two threads would.
      const int split = c.n_head > 2 ? c.n_head / 2 + 1 : c.n_head;
      ops().attention(a, 0, split, scratch.data() + 1);
      if (split < c.n_head) ops().attention(a, split, c.n_head, scratch.data() + 1);
      a.out = ref.data();
      kernels::attention__ref(a, 0, c.n_head, scratch.data());
      // The same cache with each kv head's positions together (the
      // runtime's layout; planes 64 bytes apart): the same bits.
      {
        const int64_t hb = (kc.stride - 64) / c.n_head_kv;  // make_cache pads each row by 64
        const int64_t plane = (int64_t)c.n_ctx * hb + 64;
        std::vector<uint8_t> kh((size_t)(plane * c.n_head_kv), 0xff), vh(kh);
        for (int g = 0; g < c.n_head_kv; ++g) {
          for (int p = 0; p < c.n_ctx; ++p) {
            std::memcpy(kh.data() + g * plane + p * hb, kc.bytes.data() + p * kc.stride + g * hb, (size_t)hb);
            std::memcpy(vh.data() + g * plane + p * hb, vc.bytes.data() + p * vc.stride + g * hb, (size_t)hb);
          }
        }
        AttentionArgs hm = a;
        hm.k = kh.data();
        hm.v = vh.data();
        hm.kv_stride_bytes = hb;
        hm.kv_head_stride_bytes = plane;
        std::vector<float> out_hm(out.size(), -7.0f), ref_hm(out.size(), -7.0f);
        hm.out = out_hm.data();
        ops().attention(hm, 0, split, scratch.data() + 1);
        if (split < c.n_head) ops().attention(hm, split, c.n_head, scratch.data() + 1);
        hm.out = ref_hm.data();
        kernels::attention__ref(hm, 0, c.n_head, scratch.data());
        ASSERT_EQ(std::memcmp(out_hm.data(), out.data(), out.size() * sizeof(float)), 0)
            << "head-major cache vs heads side by side";
        ASSERT_EQ(std::memcmp(ref_hm.data(), ref.data(), ref.size() * sizeof(float)), 0)
            << "ref: head-major cache vs heads side by side";
      }
      double max_err = 0;
      for (int i = 0; i < c.n_q; ++i) {
        for (int h = 0; h < c.n_head; ++h) {
          const size_t rh = (size_t)i * c.n_head + h;
          const double tol = bound(c, o, rh, scale);
          for (int j = 0; j < d; ++j) {
            const float y = out[i * (row + 4) + h * d + j];
            const double want = o.out[rh * d + j];
            ASSERT_NEAR(y, want, tol) << "query " << i << " head " << h << " dim " << j;
            ASSERT_NEAR(y, ref[i * (row + 4) + h * d + j], 2 * tol)
                << "vs ref: query " << i << " head " << h << " dim " << j;
            max_err = std::max(max_err, std::fabs(y - exact.out[rh * d + j]));
          }
        }
        for (int j = 0; j < 4; ++j) {
          ASSERT_EQ(out[i * (row + 4) + row + j], -7.0f) << "wrote past a row";
        }
      }
      err_by_type[(int)(t == Type::F16) + 2 * (int)(t == Type::Q8_0)] = max_err;
    }
    // What the cache type costs, beside each other (max abs error of the
    // output against attention over the unquantized f32 K/V; |v| <= 1).
    char q8[32] = "n/a (dim % 32)";
    if (d % 32 == 0) std::snprintf(q8, sizeof q8, "%.2e", err_by_type[2]);
    std::printf("[attention %s] %s: max |err| vs f32 cache: F32 %.2e  F16 %.2e  Q8_0 %s\n",
                kernels::isa_name(GetParam()), describe(c).c_str(), err_by_type[0],
                err_by_type[1], q8);
    // F16 rounds K/V to 2^-11 relative, Q8_0 to max|x|/254 absolute per
    // block; both errors stay far below the values' scale of 1.
    EXPECT_LT(err_by_type[1], 2e-3);
    if (d % 32 == 0) {
      EXPECT_LT(err_by_type[2], 2e-2);
    }
  }
}

// --- staged rows (AttentionArgs::k_new / v_new) ----------------------------

// Rows [from, n_ctx) of a cache set to 0xff bytes: NaN in every cache type
// (F32 and F16 all-ones are NaNs, Q8_0 gets a NaN scale).
std::vector<uint8_t> poisoned(const Cache& c, int from, int n_ctx) {
  std::vector<uint8_t> b = c.bytes;
  std::fill(b.begin() + (int64_t)from * c.stride, b.begin() + (int64_t)n_ctx * c.stride, 0xff);
  return b;
}

struct StagedCase {
  int n_q, pos0, group, head_dim;
  int32_t window;
  Type t;
};

// The sweep: every (n_q, pos0, cache type) with head dim, GQA group and
// window rotating through their values, so each value meets every n_q and
// pos0 class without the full product's run time.  Group 8 reaches the
// SIMD decode paths that start at 6 heads.
std::vector<StagedCase> staged_cases() {
  const int n_qs[] = {1, 2, 31, 32, 33, 64, 65, 200};
  const int pos0s[] = {0, 1, 63, 64, 300};
  const int dims[] = {8, 64, 80, 96, 128, 136};
  const int groups[] = {1, 3, 4, 8};
  std::vector<StagedCase> v;
  int k = 0;
  for (int n_q : n_qs) {
    for (int pos0 : pos0s) {
      for (Type t : {Type::F32, Type::F16, Type::Q8_0}) {
        StagedCase c;
        c.n_q = n_q;
        c.pos0 = pos0;
        c.t = t;
        c.head_dim = dims[k % 6];
        if (t == Type::Q8_0 && c.head_dim % 32 != 0) c.head_dim = dims[1 + k % 2 * 2];  // 64, 96
        c.group = groups[(k / 3 + k / 15) % 4];  // one per (n_q, pos0), all types
        const int32_t windows[] = {0, std::max(1, n_q / 3), n_q + 37};
        c.window = windows[(k / 2) % 3];
        v.push_back(c);
        ++k;
      }
    }
  }
  return v;
}

// One call of `attention` over every head in two calls split inside a kv
// group, as two threads would; out rows row + 4 floats apart.
std::vector<float> run_attention(void (*attention)(const AttentionArgs&, int, int, float*),
                                 AttentionArgs a) {
  const int64_t row = (int64_t)a.n_head * a.head_dim;
  std::vector<float> out((size_t)(a.n_q * (row + 4)), -7.0f);
  a.out = out.data();
  a.out_stride = row + 4;
  std::vector<float> scratch(kernels::attention_scratch_floats(a) + 1);
  const int split = a.n_head > 2 ? a.n_head / 2 + 1 : a.n_head;
  attention(a, 0, split, scratch.data() + 1);
  if (split < a.n_head) attention(a, split, a.n_head, scratch.data() + 1);
  return out;
}

bool same_bits(float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; }

class ops_attention_staged : public OpsIsaTest {};

// Staged rows against the same values all in a cache: the ref with staging
// equals the ref over an F32 cache holding the dequantized cache rows below
// pos0 and the exact staged rows from pos0 (bit for bit); an ISA with an
// F32 cache equals its own all-in-cache call bit for bit; any ISA and cache
// type is within the error bound of the double oracle over those values and
// of the ref; and cache rows from pos0 on, poisoned with NaN, change nothing.
TEST_P(ops_attention_staged, equals_all_in_cache_and_ignores_rows_past_pos0) {
  SCOPED_TRACE(trace());
  for (const StagedCase& sc : staged_cases()) {
    const int n_kv = sc.n_q >= 100 ? 1 : 2;  // the longest blocks, one kv head: run time
    const int d = sc.head_dim, n_head = n_kv * sc.group, n_ctx = sc.pos0 + sc.n_q;
    char what[160];
    std::snprintf(what, sizeof what, "%s n_q=%d pos0=%d heads=%d/%d dim=%d window=%d",
                  type_name(sc.t), sc.n_q, sc.pos0, n_head, n_kv, d, sc.window);
    SCOPED_TRACE(what);
    const float scale = 1.0f / std::sqrt((float)d);
    const int64_t row = (int64_t)n_head * d, kv_row = (int64_t)n_kv * d;
    const auto q = random_floats(rng_, sc.n_q * row, -1, 1);
    const auto kf = random_floats(rng_, n_ctx * kv_row, -1, 1);
    const auto vf = random_floats(rng_, n_ctx * kv_row, -1, 1);
    const Cache kc = make_cache(kf, n_ctx, n_kv, d, sc.t);
    const Cache vc = make_cache(vf, n_ctx, n_kv, d, sc.t);
    // The staged rows: the exact f32 values of positions [pos0, n_ctx), rows
    // kv_row + 3 floats apart.
    const int64_t new_stride = kv_row + 3;
    std::vector<float> k_new((size_t)(sc.n_q * new_stride), -3.0f), v_new(k_new);
    for (int i = 0; i < sc.n_q; ++i) {
      std::copy_n(kf.data() + (sc.pos0 + i) * kv_row, kv_row, k_new.data() + i * new_stride);
      std::copy_n(vf.data() + (sc.pos0 + i) * kv_row, kv_row, v_new.data() + i * new_stride);
    }
    // What attention should see: the cache's values below pos0, the staged
    // ones from there; as an F32 cache and in double for the oracle.
    std::vector<float> k_mix(kf), v_mix(vf);
    for (int64_t j = 0; j < sc.pos0 * kv_row; ++j) {
      k_mix[j] = (float)kc.deq[j];
      v_mix[j] = (float)vc.deq[j];
    }
    const Cache kmc = make_cache(k_mix, n_ctx, n_kv, d, Type::F32);
    const Cache vmc = make_cache(v_mix, n_ctx, n_kv, d, Type::F32);
    const std::vector<uint8_t> k_bad = poisoned(kc, sc.pos0, n_ctx);
    const std::vector<uint8_t> v_bad = poisoned(vc, sc.pos0, n_ctx);

    AttentionArgs a{};
    a.q = q.data();
    a.q_stride = row;
    a.n_q = sc.n_q;
    a.pos0 = sc.pos0;
    a.kv_type = sc.t;
    a.kv_stride_bytes = kc.stride;
    a.n_head = n_head;
    a.n_head_kv = n_kv;
    a.head_dim = d;
    a.scale = scale;
    a.window = sc.window;
    AttentionArgs mixed = a;  // everything in an F32 cache
    mixed.k = kmc.bytes.data();
    mixed.v = vmc.bytes.data();
    mixed.kv_type = Type::F32;
    mixed.kv_stride_bytes = kmc.stride;
    AttentionArgs staged = a;  // rows from pos0 staged, NaN in the cache there
    staged.k = k_bad.data();
    staged.v = v_bad.data();
    staged.k_new = k_new.data();
    staged.v_new = v_new.data();
    staged.new_stride = new_stride;
    AttentionArgs clean = staged;  // the same with the cache rows intact
    clean.k = kc.bytes.data();
    clean.v = vc.bytes.data();

    const std::vector<float> ref_mixed = run_attention(kernels::attention__ref, mixed);
    const std::vector<float> ref_staged = run_attention(kernels::attention__ref, staged);
    const bool is_ref = GetParam() == Isa::ref;
    const std::vector<float> out = is_ref ? ref_staged : run_attention(ops().attention, staged);
    const std::vector<float> out_clean = run_attention(ops().attention, clean);
    std::vector<float> own_mixed;
    if (sc.t == Type::F32) own_mixed = is_ref ? ref_mixed : run_attention(ops().attention, mixed);

    // Query tiles of 32, as the executor splits a block over threads: a later
    // tile sees the block's earlier staged rows through n_new_before.
    std::vector<float> tiled(out.size(), -7.0f);
    for (int t0 = 0; t0 < sc.n_q; t0 += 32) {
      AttentionArgs t = staged;
      t.n_q = std::min(32, sc.n_q - t0);
      t.pos0 = sc.pos0 + t0;
      t.n_new_before = t0;
      t.q = q.data() + (int64_t)t0 * row;
      const std::vector<float> part =
          run_attention(is_ref ? kernels::attention__ref : ops().attention, t);
      std::copy(part.begin(), part.end(), tiled.begin() + (int64_t)t0 * (row + 4));
    }

    Case c{n_ctx, sc.n_q, n_head, n_kv, d, sc.window};
    const std::vector<double> kd(k_mix.begin(), k_mix.end()), vd(v_mix.begin(), v_mix.end());
    const Oracle o = naive(c, q, kd, vd, scale);
    for (int i = 0; i < sc.n_q; ++i) {
      for (int h = 0; h < n_head; ++h) {
        const size_t rh = (size_t)i * n_head + h;
        const double tol = bound(c, o, rh, scale);
        for (int j = 0; j < d; ++j) {
          const int64_t at = i * (row + 4) + h * d + j;
          ASSERT_TRUE(same_bits(ref_staged[at], ref_mixed[at]))
              << "ref staged " << ref_staged[at] << " vs ref on the F32 cache " << ref_mixed[at]
              << ": query " << i << " head " << h << " dim " << j;
          ASSERT_TRUE(same_bits(out[at], out_clean[at]))
              << "NaN cache rows from pos0 changed the output: " << out[at] << " vs "
              << out_clean[at] << ": query " << i << " head " << h << " dim " << j;
          if (sc.t == Type::F32) {
            ASSERT_TRUE(same_bits(out[at], own_mixed[at]))
                << "staged " << out[at] << " vs all in the cache " << own_mixed[at]
                << ": query " << i << " head " << h << " dim " << j;
          }
          ASSERT_NEAR(out[at], o.out[rh * d + j], tol)
              << "query " << i << " head " << h << " dim " << j;
          ASSERT_NEAR(out[at], ref_staged[at], 2 * tol)
              << "vs ref: query " << i << " head " << h << " dim " << j;
          ASSERT_NEAR(tiled[at], o.out[rh * d + j], tol)
              << "query tiles: query " << i << " head " << h << " dim " << j;
        }
      }
      for (int j = 0; j < 4; ++j) {
        ASSERT_EQ(out[i * (row + 4) + row + j], -7.0f) << "wrote past a row";
      }
    }
  }
}

// --- key ranges (AttentionArgs::lse, kernels::attention_combine) -----------

// Decode cut into key ranges, as the executor cuts it (every split count
// from 1 to kAttnMaxSplits, whether the ranges are a key block long or a
// handful of keys, some empty): each range's lse against log(sum(exp)) of
// the double scores over it, and the combined output against the double
// oracle and against the same ISA's uncut call.  With staged rows, the last
// one or two positions come from k_new / v_new (the cache there is NaN), as
// in decode and forward_as_decode.
TEST_P(ops_attention, key_ranges_combine_to_the_whole) {
  SCOPED_TRACE(trace());
  for (const Case& c : cases()) {
    if (c.n_q != 1 || c.n_ctx > 1100) continue;  // run time (qemu): up to 1031 keys
    SCOPED_TRACE(describe(c));
    const int d = c.head_dim, group = c.n_head / c.n_head_kv;
    const float scale = 1.0f / std::sqrt((float)d);
    const int64_t row = (int64_t)c.n_head * d, kv_row = (int64_t)c.n_head_kv * d;
    const auto q = random_floats(rng_, row, -1, 1);
    const auto kf = random_floats(rng_, (int64_t)c.n_ctx * kv_row, -1, 1);
    const auto vf = random_floats(rng_, (int64_t)c.n_ctx * kv_row, -1, 1);
    const int64_t hi = c.n_ctx - 1;
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
    for (Type t : {Type::F32, Type::F16, Type::Q8_0}) {
      if (t == Type::Q8_0 && d % 32 != 0) continue;
      for (int n_staged : {0, 1, 2}) {
        if (n_staged > c.n_ctx) continue;
        char what[64];
        std::snprintf(what, sizeof what, "%s, %d staged", type_name(t), n_staged);
        SCOPED_TRACE(what);
        const Cache kc = make_cache(kf, c.n_ctx, c.n_head_kv, d, t);
        const Cache vc = make_cache(vf, c.n_ctx, c.n_head_kv, d, t);
        // What attention sees: the cache's values, exact f32 where staged.
        std::vector<double> kd(kc.deq), vd(vc.deq);
        const int64_t s0 = c.n_ctx - n_staged;
        for (int64_t j = s0 * kv_row; j < c.n_ctx * kv_row; ++j) {
          kd[j] = kf[j];
          vd[j] = vf[j];
        }
        const Oracle o = naive(c, q, kd, vd, scale);
        const std::vector<uint8_t> k_bad = poisoned(kc, (int)s0, c.n_ctx);
        const std::vector<uint8_t> v_bad = poisoned(vc, (int)s0, c.n_ctx);
        AttentionArgs a = case_args(c, q.data(), row, n_staged ? k_bad.data() : kc.bytes.data(),
                                    n_staged ? v_bad.data() : vc.bytes.data(), t, kc.stride, scale);
        if (n_staged) {
          a.k_new = kf.data() + s0 * kv_row;
          a.v_new = vf.data() + s0 * kv_row;
          a.new_stride = kv_row;
          a.n_new_before = n_staged - 1;
        }
        const std::vector<float> whole = run_attention(ops().attention, a);
        for (int n : {2, 3, kernels::attention_splits(hi - lo + 1), kernels::kAttnMaxSplits}) {
          std::vector<float> parts((size_t)(n * row), -7.0f), lse((size_t)(n * c.n_head), 7.0f);
          std::vector<float> scratch(kernels::attention_scratch_floats(a) + 1);
          for (int s = 0; s < n; ++s) {
            AttentionArgs p = a;
            kernels::attention_split_range(lo, hi, s, n, &p.key_lo, &p.key_hi);
            p.out = parts.data() + s * row;
            p.lse = lse.data() + s * c.n_head;
            // One call per kv group, as the executor's tasks are.
            for (int g = 0; g < c.n_head_kv; ++g) {
              ops().attention(p, g * group, (g + 1) * group, scratch.data() + 1);
            }
            // lse of each head against the double scores over the range.
            for (int h = 0; h < c.n_head; ++h) {
              const int gk = h / group;
              double m = -INFINITY;
              std::vector<double> sc;
              for (int64_t j = p.key_lo; j <= p.key_hi; ++j) {
                double dot = 0;
                for (int i = 0; i < d; ++i) dot += (double)q[h * d + i] * kd[(j * c.n_head_kv + gk) * d + i];
                sc.push_back(dot * scale);
                m = std::max(m, sc.back());
              }
              const float got = lse[(size_t)(s * c.n_head + h)];
              if (sc.empty()) {
                ASSERT_EQ(got, -INFINITY) << "split " << s << " of " << n << " head " << h;
                for (int i = 0; i < d; ++i) ASSERT_EQ(parts[s * row + h * d + i], 0.0f);
                continue;
              }
              double sum = 0;
              for (double x : sc) sum += std::exp(x - m);
              const double want = m + std::log(sum);
              // The scores' error (bound(): delta) plus the float sum of the
              // exponentials and the log.
              const double delta = (d + 2) * kEps * scale * o.s_abs[(size_t)h];
              ASSERT_NEAR(got, want, 2 * delta + (sc.size() + 16) * kEps * (1 + std::fabs(want)))
                  << "split " << s << " of " << n << " head " << h;
            }
          }
          // The same ranges in runs of consecutive ones, a call per run and
          // kv group (AttentionArgs::n_ranges), as the executor's tasks make
          // them: bit for bit what the calls over one range each gave.
          for (int run_len : {n, 2, 3}) {
            std::vector<float> parts2(parts.size(), -7.0f), lse2(lse.size(), 7.0f);
            for (int s0 = 0; s0 < n; s0 += run_len) {
              const int s1 = std::min(n, s0 + run_len);
              int64_t bounds[kernels::kAttnMaxSplits + 1];
              kernels::attention_split_bounds(lo, hi, s0, s1, n, bounds);
              AttentionArgs p = a;
              p.n_ranges = s1 - s0;
              p.key_bounds = bounds;
              p.key_lo = bounds[0];
              p.key_hi = bounds[s1 - s0] - 1;
              p.out = parts2.data() + s0 * row;
              p.lse = lse2.data() + s0 * c.n_head;
              p.range_out_stride = row;
              p.range_lse_stride = c.n_head;
              for (int g = 0; g < c.n_head_kv; ++g) {
                ops().attention(p, g * group, (g + 1) * group, scratch.data() + 1);
              }
            }
            for (size_t i = 0; i < parts.size(); ++i) {
              ASSERT_TRUE(same_bits(parts2[i], parts[i]))
                  << "runs of " << run_len << " of " << n << " ranges: output " << i << ": "
                  << parts2[i] << " vs " << parts[i];
            }
            for (size_t i = 0; i < lse.size(); ++i) {
              ASSERT_TRUE(same_bits(lse2[i], lse[i]))
                  << "runs of " << run_len << " of " << n << " ranges: lse " << i << ": " << lse2[i]
                  << " vs " << lse[i];
            }
          }
          std::vector<float> out((size_t)row);
          for (int h = 0; h < c.n_head; ++h) {
            kernels::attention_combine(parts.data() + h * d, row, lse.data() + h, c.n_head, n, d,
                                       out.data() + h * d);
            const double tol = bound(c, o, (size_t)h, scale);
            for (int i = 0; i < d; ++i) {
              // Each range's output carries the uncut call's error, and the
              // weights exp(lse_s - max) the lse error (<= 2 tol relative).
              ASSERT_NEAR(out[h * d + i], o.out[(size_t)h * d + i], 3 * tol + 8 * n * kEps)
                  << n << " splits, head " << h << " dim " << i;
              ASSERT_NEAR(out[h * d + i], whole[h * d + i], 4 * tol + 8 * n * kEps)
                  << n << " splits vs uncut, head " << h << " dim " << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(isa, ops_attention_staged, ::testing::ValuesIn(all_isas()),
                         isa_param_name);

INSTANTIATE_TEST_SUITE_P(isa, ops_attention, ::testing::ValuesIn(all_isas()), isa_param_name);

}  // namespace
}  // namespace lilims::test
