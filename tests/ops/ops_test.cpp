// Norms, RoPE, activations, element-wise ops and conversions of every ISA
// against (a) independent Eigen implementations in double and (b) the scalar
// refs.  Each bound is derived in the comment beside it; u = 2^-24.
#include <Eigen/Dense>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/fp16.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace lilims::test {
namespace {

using kernels::Isa;
using Eigen::ArrayXd;

// Sizes with every tail a SIMD loop can have (0, 1, vector +-1, block +-1,
// model dims, a prime), plus a few seeded random ones.
std::vector<int64_t> sizes(std::mt19937& rng) {
  std::vector<int64_t> s = {0,   1,   3,   7,   8,    9,    15,   16,   17,   31,  32,
                            33,  63,  64,  65,  127,  128,  129,  576,  2048, 2053, 2560,
                            3072, 5632};
  std::uniform_int_distribution<int64_t> u(1, 3000);
  for (int i = 0; i < 4; ++i) s.push_back(u(rng));
  return s;
}

ArrayXd to_d(const float* x, int64_t n) {
  ArrayXd a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = x[i];
  return a;
}

// Inputs at an odd offset so SIMD paths see misaligned pointers.
struct Buf {
  std::vector<float> store;
  float* p;
  explicit Buf(const std::vector<float>& v) : store(v.size() + 1) {
    p = store.data() + 1;
    std::copy(v.begin(), v.end(), p);
  }
  explicit Buf(int64_t n) : store((size_t)n + 1, 0.0f) { p = store.data() + 1; }
};

class ops_elementwise : public OpsIsaTest {};
class ops_norm : public OpsIsaTest {};
class ops_rope : public OpsIsaTest {};
class ops_convert : public OpsIsaTest {};

TEST_P(ops_norm, rmsnorm_and_fused_add) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = random_floats(rng_, n, -2, 2), w = random_floats(rng_, n, -1.5f, 1.5f);
    const auto delta = random_floats(rng_, n, -1, 1);
    const float eps = 1e-5f;
    Buf bx(x), bw(w), by(n), bref(n);
    ops().rmsnorm(bx.p, bw.p, by.p, n, eps);
    kernels::rmsnorm_f32__ref(x.data(), w.data(), bref.p, n, eps);
    // Eigen: y = x / sqrt(mean(x^2) + eps) * w in double.
    const ArrayXd xd = to_d(x.data(), n);
    const double inv = n ? 1.0 / std::sqrt(xd.square().mean() + eps) : 0.0;
    const ArrayXd yd = xd * inv * to_d(w.data(), n);
    // Bound: float sum of squares is off by at most n*u relative (gamma_n),
    // so 1/sqrt by n*u/2 + u; then two products: |dy| <= (n/2 + 4) u |y|.
    for (int64_t i = 0; i < n; ++i) {
      const double tol = (n / 2.0 + 4) * kEps * std::fabs(yd[i]) + 1e-30;
      ASSERT_NEAR(by.p[i], yd[i], tol) << "i=" << i << " vs Eigen";
      ASSERT_NEAR(by.p[i], bref.p[i], 2 * tol) << "i=" << i << " vs ref";
    }
    // Fused residual add: x += delta exactly as a float add, then rmsnorm.
    Buf fx(x), fd(delta), fy(n);
    ops().add_rmsnorm(fx.p, fd.p, bw.p, fy.p, n, eps);
    std::vector<float> rx = x, ry(n);
    kernels::add_rmsnorm_f32__ref(rx.data(), delta.data(), w.data(), ry.data(), n, eps);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(fx.p[i], x[i] + delta[i]) << "i=" << i << " residual";
      ASSERT_EQ(fx.p[i], rx[i]) << "i=" << i;
      ASSERT_NEAR(fy.p[i], ry[i], (n + 8) * kEps * std::fabs(ry[i]) + 1e-30) << "i=" << i;
    }
  }
}

TEST_P(ops_norm, layernorm_and_fused_add) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    if (n == 0) continue;
    SCOPED_TRACE("n=" + std::to_string(n));
    // An offset mean makes the centring matter.
    const auto x = random_floats(rng_, n, -1, 3), w = random_floats(rng_, n, -1.5f, 1.5f);
    const auto b = random_floats(rng_, n, -0.5f, 0.5f), delta = random_floats(rng_, n, -1, 1);
    const float eps = 1e-5f;
    Buf bx(x), bw(w), bb(b), by(n);
    ops().layernorm(bx.p, bw.p, bb.p, by.p, n, eps);
    std::vector<float> ref(n);
    kernels::layernorm_f32__ref(x.data(), w.data(), b.data(), ref.data(), n, eps);
    const ArrayXd xd = to_d(x.data(), n);
    const ArrayXd c = xd - xd.mean();
    const double inv = 1.0 / std::sqrt(c.square().mean() + eps);
    const ArrayXd yd = c * inv * to_d(w.data(), n) + to_d(b.data(), n);
    const double xmax = xd.abs().maxCoeff();
    // Bound: the float mean is off by <= n u max|x|, which moves every
    // centred value by that much; the variance (a sum of n squares) by
    // <= (n + 2) u relative.  |dy_i| <= (|x_i - mean| (n/2 + 4) u + n u max|x|)
    // * inv |w_i| + u |y_i| (the bias add).
    for (int64_t i = 0; i < n; ++i) {
      const double tol =
          ((std::fabs(c[i]) * (n / 2.0 + 4) + n * xmax) * kEps * inv * std::fabs(w[i])) +
          kEps * std::fabs(yd[i]) + 1e-30;
      ASSERT_NEAR(by.p[i], yd[i], tol) << "i=" << i << " vs Eigen";
      ASSERT_NEAR(by.p[i], ref[i], 2 * tol) << "i=" << i << " vs ref";
    }
    Buf fx(x), fd(delta), fy(n);
    ops().add_layernorm(fx.p, fd.p, bw.p, bb.p, fy.p, n, eps);
    std::vector<float> rx = x, ry(n);
    kernels::add_layernorm_f32__ref(rx.data(), delta.data(), w.data(), b.data(), ry.data(), n,
                                    eps);
    const ArrayXd cx = to_d(rx.data(), n) - to_d(rx.data(), n).mean();
    const double inv2 = 1.0 / std::sqrt(cx.square().mean() + eps);
    const double xmax2 = to_d(rx.data(), n).abs().maxCoeff();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(fx.p[i], rx[i]) << "i=" << i << " residual";
      const double tol = 2 * ((std::fabs(cx[i]) * (n / 2.0 + 4) + n * xmax2) * kEps * inv2 *
                              std::fabs(w[i])) + 2 * kEps * std::fabs(ry[i]) + 1e-30;
      ASSERT_NEAR(fy.p[i], ry[i], tol) << "i=" << i;
    }
  }
}

// Element-wise maps: the kernel against Eigen in double with a relative bound
// per op, and against the ref with twice that.
template <typename Kernel, typename Ref, typename Oracle, typename Bound>
void check_map(std::mt19937& rng, float lo, float hi, Kernel kernel, Ref ref, Oracle oracle,
               Bound bound) {
  for (int64_t n : sizes(rng)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = random_floats(rng, n, lo, hi);
    if (n > 4) {  // the far ends of the range and exact zeros
      x[0] = lo;
      x[1] = hi;
      x[2] = 0.0f;
    }
    Buf bx(x), by(n);
    kernel(bx.p, by.p, n);
    std::vector<float> r(n);
    ref(x.data(), r.data(), n);
    const ArrayXd yd = to_d(x.data(), n).unaryExpr(oracle);
    for (int64_t i = 0; i < n; ++i) {
      const double tol = bound((double)x[i], yd[i]);
      ASSERT_NEAR(by.p[i], yd[i], tol) << "i=" << i << " x=" << x[i] << " vs Eigen";
      ASSERT_NEAR(by.p[i], r[i], 2 * tol) << "i=" << i << " x=" << x[i] << " vs ref";
    }
  }
}

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

TEST_P(ops_elementwise, silu) {
  SCOPED_TRACE(trace());
  // exp to a few ulp (<= 4u), 1 + e and the division one rounding each:
  // |dy| <= 8u |y| (+ a denormal floor where exp(-x) overflows the clamp).
  check_map(rng_, -30, 30, ops().silu, kernels::silu_f32__ref, silu_d,
            [](double, double y) { return 8 * kEps * std::fabs(y) + 1e-35; });
}

TEST_P(ops_elementwise, swiglu) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto g = random_floats(rng_, n, -20, 20), u = random_floats(rng_, n, -3, 3);
    Buf bg(g), bu(u), by(n);
    ops().swiglu(bg.p, bu.p, by.p, n);
    std::vector<float> r(n);
    kernels::swiglu_f32__ref(g.data(), u.data(), r.data(), n);
    const ArrayXd yd = to_d(g.data(), n).unaryExpr(&silu_d) * to_d(u.data(), n);
    // silu's 8u plus one product.
    for (int64_t i = 0; i < n; ++i) {
      const double tol = 9 * kEps * std::fabs(yd[i]) + 1e-35;
      ASSERT_NEAR(by.p[i], yd[i], tol) << "i=" << i << " vs Eigen";
      ASSERT_NEAR(by.p[i], r[i], 2 * tol) << "i=" << i << " vs ref";
    }
  }
}

TEST_P(ops_elementwise, gelu_tanh) {
  SCOPED_TRACE(trace());
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  // y = x sigmoid(2t), t = c (x + 0.044715 x^3).  Computing t costs ~4u
  // relative, which moves sigmoid(2t) by 2|t| * 4u relative at most; exp,
  // add and divide ~6u more: |dy| <= (8|t| + 8) u |y|.
  check_map(
      rng_, -12, 12, ops().gelu, kernels::gelu_f32__ref,
      // 0.5 x (1 + tanh t) = x / (1 + e^{-2t}), which keeps its precision for t << 0.
      [c](double x) { return x / (1.0 + std::exp(-2.0 * c * (x + 0.044715 * x * x * x))); },
      [c](double x, double y) {
        const double t = std::fabs(c * (x + 0.044715 * x * x * x));
        return (8 * t + 8) * kEps * std::fabs(y) + 1e-35;
      });
}

TEST_P(ops_elementwise, gelu_erf) {
  SCOPED_TRACE(trace());
  // SIMD erf is Abramowitz & Stegun 7.1.26, |d erf| <= 1.5e-7 absolute, so
  // |dy| <= 0.5 |x| 1.5e-7 + 8u |y| (the ref uses std::erf: tighter).
  check_map(
      rng_, -8, 8, ops().gelu_erf, kernels::gelu_erf_f32__ref,
      [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); },
      [](double x, double y) { return 0.5 * std::fabs(x) * 1.5e-7 + 8 * kEps * std::fabs(y); });
}

TEST_P(ops_elementwise, softmax) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = random_floats(rng_, n, -20, 20);
    if (n > 3) x[n / 2] = 80.0f;  // a large max: exp(x) alone would overflow
    Buf bx(x);
    ops().softmax(bx.p, n);
    std::vector<float> r = x;
    kernels::softmax_f32__ref(r.data(), n);
    if (n == 0) continue;
    const ArrayXd xd = to_d(x.data(), n);
    const ArrayXd e = (xd - xd.maxCoeff()).exp();
    const ArrayXd yd = e / e.sum();
    // x - max rounds by u |x - max| absolute, which exp turns into that much
    // relative error; exp itself 4u; the float sum of n terms gamma_n; the
    // scaling 2u: |dy| <= (n + 8 + |x - max|) u |y|, plus 1.3e-38: the
    // SIMD exp flushes exp(x < -87.3) (< 1.3e-38, the normal range's edge) to 0.
    const double mx = xd.maxCoeff();
    for (int64_t i = 0; i < n; ++i) {
      const double tol = (n + 8 + std::fabs(xd[i] - mx)) * kEps * std::fabs(yd[i]) + 1.3e-38;
      ASSERT_NEAR(bx.p[i], yd[i], tol) << "i=" << i << " vs Eigen";
      ASSERT_NEAR(bx.p[i], r[i], 2 * tol) << "i=" << i << " vs ref";
    }
  }
}

TEST_P(ops_elementwise, add_mul_exact) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto a = random_floats(rng_, n, -5, 5), b = random_floats(rng_, n, -5, 5);
    Buf ba(a), bb(b), ys(n), ym(n);
    ops().add(ba.p, bb.p, ys.p, n);
    ops().mul(ba.p, bb.p, ym.p, n);
    // One correctly rounded float operation each: exactly Eigen's float result.
    const Eigen::ArrayXf ea = Eigen::Map<const Eigen::ArrayXf>(a.data(), n);
    const Eigen::ArrayXf eb = Eigen::Map<const Eigen::ArrayXf>(b.data(), n);
    const Eigen::ArrayXf es = ea + eb, em = ea * eb;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(ys.p[i], es[i]) << "i=" << i;
      ASSERT_EQ(ym.p[i], em[i]) << "i=" << i;
    }
    // In place (y aliases a).
    ops().add(ba.p, bb.p, ba.p, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ba.p[i], es[i]) << "i=" << i << " in place";
  }
}

TEST_P(ops_elementwise, axpy) {
  SCOPED_TRACE(trace());
  for (int64_t n : sizes(rng_)) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = random_floats(rng_, n, -5, 5), y0 = random_floats(rng_, n, -5, 5);
    const float a = random_floats(rng_, 1, -3, 3)[0];
    Buf bx(x), by(y0);
    ops().axpy(a, bx.p, by.p, n);
    std::vector<float> r = y0;
    kernels::axpy_f32__ref(a, x.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // Exact in double; a fused multiply-add rounds once (u |y + a x|), a
      // multiply then an add twice (u |a x| more).
      const double ax = (double)a * x[i], want = (double)y0[i] + ax;
      const double tol = kEps * (std::fabs(want) + std::fabs(ax));
      ASSERT_NEAR(by.p[i], want, tol) << "i=" << i;
      ASSERT_NEAR(r[i], want, tol) << "i=" << i << " ref";
    }
  }
}

// A LoRA B piece (OpsTable::lora_add) against the sum in double, over ranks
// 1..33, widths of 1 and 2 blocks, 1..5 rows and a row stride above w.
TEST_P(ops_elementwise, lora_add_q8_0) {
  SCOPED_TRACE(trace());
  for (int32_t rank : {1, 2, 3, 8, 16, 17, 33}) {
    for (int64_t w : {32, 64}) {
      for (int32_t n : {1, 2, 5}) {
        SCOPED_TRACE("rank=" + std::to_string(rank) + " w=" + std::to_string(w) + " n=" + std::to_string(n));
        const int64_t nb = w / quant::kBlock, ldt = rank + 3, ldy = w + 5;
        std::vector<quant::BlockQ8_0> b((size_t)rank * (size_t)nb);
        std::uniform_int_distribution<int> q(-127, 127);
        const auto scales = random_floats(rng_, (int64_t)b.size(), -0.02f, 0.02f);
        for (size_t i = 0; i < b.size(); ++i) {
          b[i].d = fp32_to_fp16(scales[i]);
          for (int e = 0; e < quant::kBlock; ++e) b[i].q[e] = (int8_t)q(rng_);
        }
        const auto t = random_floats(rng_, (int64_t)n * ldt, -3, 3);
        const auto y0 = random_floats(rng_, (int64_t)n * ldy, -2, 2);
        Buf by(y0);
        std::vector<float> yr = y0;
        ops().lora_add(b.data(), rank, w, t.data(), ldt, n, by.p, ldy);
        kernels::lora_add_q8_0__ref(b.data(), rank, w, t.data(), ldt, n, yr.data(), ldy);
        for (int32_t j = 0; j < n; ++j) {
          for (int64_t c = 0; c < ldy; ++c) {
            const size_t at = (size_t)j * (size_t)ldy + (size_t)c;
            if (c >= w) {  // past the piece: untouched
              ASSERT_EQ(by.p[at], y0[at]) << "j=" << j << " c=" << c;
              continue;
            }
            double want = y0[at], mag = std::fabs(y0[at]);
            for (int32_t k = 0; k < rank; ++k) {
              const quant::BlockQ8_0& blk = b[(size_t)k * (size_t)nb + (size_t)(c / quant::kBlock)];
              const double term = (double)t[(size_t)j * (size_t)ldt + (size_t)k] * fp16_to_fp32(blk.d) *
                                  blk.q[c % quant::kBlock];
              want += term;
              mag += std::fabs(term);
            }
            // t_k d_k rounds once (u), each fused add once (u |partial sum|
            // <= u mag): at most (rank + 2) u mag in all.
            const double tol = (rank + 2) * kEps * mag + 1e-30;
            ASSERT_NEAR(by.p[at], want, tol) << "j=" << j << " c=" << c;
            ASSERT_NEAR(yr[at], want, tol) << "j=" << j << " c=" << c << " ref";
          }
        }
      }
    }
  }
}

TEST_P(ops_rope, adjacent_and_halves_partial) {
  SCOPED_TRACE(trace());
  struct Case { int n_heads, head_dim, n_rot; };
  // llama (64/64, 128/128), phi2 (32 of 80), phi3 (96/96), odd pair counts.
  const Case cases[] = {{9, 64, 64}, {4, 128, 128}, {32, 80, 32}, {3, 96, 96},
                        {2, 24, 14}, {1, 8, 2},      {5, 40, 20}};
  for (const Case& cs : cases) {
    for (bool adjacent : {true, false}) {
      for (int32_t pos : {0, 1, 17, 4095, 100000}) {
        SCOPED_TRACE("heads=" + std::to_string(cs.n_heads) + " dim=" +
                     std::to_string(cs.head_dim) + " rot=" + std::to_string(cs.n_rot) +
                     " adjacent=" + std::to_string(adjacent) + " pos=" + std::to_string(pos));
        kernels::RopeParams p;
        p.n_rot = cs.n_rot;
        p.freq_base = 10000.0f;
        const int half = cs.n_rot / 2;
        std::vector<float> ct(half), st(half);
        kernels::rope_table_f32(p, pos, ct.data(), st.data());
        const int64_t n = (int64_t)cs.n_heads * cs.head_dim;
        const auto x = random_floats(rng_, n, -2, 2);
        Buf bx(x);
        ops().rope(bx.p, cs.n_heads, cs.head_dim, cs.n_rot, ct.data(), st.data(), adjacent);
        std::vector<float> r = x;
        kernels::rope_f32__ref(r.data(), cs.n_heads, cs.head_dim, cs.n_rot, ct.data(),
                               st.data(), adjacent);
        for (int h = 0; h < cs.n_heads; ++h) {
          const float* xh = x.data() + (int64_t)h * cs.head_dim;
          const float* yh = bx.p + (int64_t)h * cs.head_dim;
          for (int i = 0; i < half; ++i) {
            const int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
            // Eigen: a 2x2 rotation of (x_a, x_b) by the table's angle.
            Eigen::Matrix2d rot;
            rot << ct[i], -(double)st[i], st[i], ct[i];
            const Eigen::Vector2d v = rot * Eigen::Vector2d(xh[a], xh[b]);
            // Two products and a sum: |dy| <= 2u (|x_a| + |x_b|) (|c| + |s|).
            const double tol = 2.5 * kEps * (std::fabs(xh[a]) + std::fabs(xh[b])) *
                                   (std::fabs(ct[i]) + std::fabs(st[i])) + 1e-30;
            ASSERT_NEAR(yh[a], v[0], tol) << "h=" << h << " i=" << i;
            ASSERT_NEAR(yh[b], v[1], tol) << "h=" << h << " i=" << i;
            ASSERT_NEAR(yh[a], r[(int64_t)h * cs.head_dim + a], 2 * tol);
            ASSERT_NEAR(yh[b], r[(int64_t)h * cs.head_dim + b], 2 * tol);
          }
          for (int i = cs.n_rot; i < cs.head_dim; ++i) {
            ASSERT_EQ(yh[i], xh[i]) << "dim " << i << " is past n_rot and must not move";
          }
        }
      }
    }
  }
}

TEST(ops_rope_tables, plain_llama3_longrope) {
  // Plain: theta_i = pos * base^(-2i/n).
  kernels::RopeParams p;
  p.n_rot = 64;
  p.freq_base = 10000.0f;
  std::vector<float> c(32), s(32);
  kernels::rope_table_f32(p, 123, c.data(), s.data());
  for (int i = 0; i < 32; ++i) {
    const double th = 123.0 * std::pow(10000.0, -2.0 * i / 64);
    EXPECT_NEAR(c[i], std::cos(th), 1e-7);
    EXPECT_NEAR(s[i], std::sin(th), 1e-7);
  }
  // Llama 3.1 (factor 8, low 1, high 4, original 8192, base 500000, 128 dims):
  // high frequencies (wavelength < 2048) untouched, low (> 8192) divided by 8,
  // a smooth blend in between, monotone.
  std::vector<float> f(64);
  kernels::rope_llama3_freq_factors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192, f.data());
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < 64; ++i) {
    const double wl = 2 * pi * std::pow(500000.0, 2.0 * i / 128);
    if (wl < 2048) {
      EXPECT_EQ(f[i], 1.0f) << i;
    }
    if (wl > 8192) {
      EXPECT_EQ(f[i], 8.0f) << i;
    }
    if (wl >= 2048 && wl <= 8192) {
      const double sm = (8192 / wl - 1.0) / 3.0;
      EXPECT_NEAR(1.0 / f[i], (1 - sm) / 8 + sm, 1e-6) << i;
    }
    if (i) {
      EXPECT_GE(f[i], f[i - 1]) << i;
    }
  }
  p.n_rot = 128;
  p.freq_base = 500000.0f;
  p.freq_factors = f.data();
  std::vector<float> c3(64), s3(64);
  kernels::rope_table_f32(p, 5000, c3.data(), s3.data());
  for (int i = 0; i < 64; ++i) {
    const double th = 5000.0 * std::pow(500000.0, -2.0 * i / 128) / f[i];
    EXPECT_NEAR(c3[i], std::cos(th), 2e-7) << i;
  }
  // Phi-3-mini-128k longrope: s = 131072/4096 = 32, sqrt(1 + ln 32 / ln 4096).
  EXPECT_NEAR(kernels::rope_longrope_attn_factor(131072, 4096),
              std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-6);
  EXPECT_EQ(kernels::rope_longrope_attn_factor(4096, 4096), 1.0f);
  std::vector<float> lf(48);
  for (int i = 0; i < 48; ++i) lf[i] = 1.0f + 0.5f * i;
  kernels::RopeParams q;
  q.n_rot = 96;
  q.freq_factors = lf.data();
  q.attn_factor = 1.19f;
  std::vector<float> cq(48 * 3), sq(48 * 3);
  kernels::rope_tables_f32(q, 7, 3, cq.data(), sq.data());
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 48; ++i) {
      const double th = (7 + t) * std::pow(10000.0, -2.0 * i / 96) / lf[i];
      EXPECT_NEAR(cq[t * 48 + i], 1.19 * std::cos(th), 3e-7);
      EXPECT_NEAR(sq[t * 48 + i], 1.19 * std::sin(th), 3e-7);
    }
  }
}

TEST_P(ops_convert, fp16_to_fp32_every_value) {
  SCOPED_TRACE(trace());
  // All 65536 halves, at an odd offset, bit-exact with base/fp16.h.
  std::vector<uint16_t> h(65536 + 3);
  for (int i = 0; i < 65536; ++i) h[i + 1] = (uint16_t)i;
  std::vector<float> y(65536 + 3);
  ops().fp16_to_fp32(h.data() + 1, y.data() + 1, 65536);
  for (int i = 0; i < 65536; ++i) {
    const float want = fp16_to_fp32((uint16_t)i);
    ASSERT_EQ(std::memcmp(&y[i + 1], &want, 4), 0) << "half 0x" << std::hex << i;
  }
  for (int64_t n : {0, 1, 7, 9, 17}) {  // tails touch nothing past n
    std::vector<float> t(20, -1.0f);
    ops().fp16_to_fp32(h.data() + 1, t.data(), n);
    for (int64_t i = n; i < 20; ++i) ASSERT_EQ(t[i], -1.0f) << n;
  }
}

TEST_P(ops_convert, fp32_to_fp16_round_to_nearest_even) {
  SCOPED_TRACE(trace());
  std::vector<float> x;
  // Specials, boundaries and exact ties (the halfway points of every half
  // near 1, in the subnormal range and near the overflow threshold).
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                            -1e9f, 6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                            2.9802326e-08f, 1e-20f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  for (uint32_t h = 0; h < 0x7c00; h += 7) {  // midpoints between neighbouring halves
    const double a = fp16_to_fp32((uint16_t)h), b = fp16_to_fp32((uint16_t)(h + 1));
    x.push_back((float)((a + b) / 2));
    x.push_back(-(float)((a + b) / 2));
  }
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {  // random bit patterns: every exponent, NaN payloads
    const uint32_t u = bits(rng_);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  Buf bx(x);
  std::vector<uint16_t> y(x.size() + 1);
  ops().fp32_to_fp16(bx.p, y.data() + 1, (int64_t)x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i + 1], fp32_to_fp16(x[i])) << "i=" << i << " x=" << x[i];
  }
}

TEST_P(ops_convert, quantize_row_q8_0) {
  SCOPED_TRACE(trace());
  for (int64_t nb : {1, 2, 3, 4, 7, 64, 129}) {
    const int64_t n = nb * 32;
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = random_floats(rng_, n, -3, 3);
    for (int j = 0; j < 32; ++j) x[j] = 0.0f;  // an all-zero block
    if (nb > 2) {  // exact ties of x/d at +-k.5 (d = 127/127 = 1)
      for (int j = 0; j < 32; ++j) x[64 + j] = (j - 16) * 0.5f;
      x[64 + 31] = 127.0f;
    }
    Buf bx(x);
    std::vector<quant::BlockQ8_0> y(nb), r(nb);
    ops().quantize_row_q8_0(bx.p, y.data(), n);
    kernels::quantize_row_q8_0__ref(x.data(), r.data(), n);
    ASSERT_EQ(std::memcmp(y.data(), r.data(), nb * sizeof(quant::BlockQ8_0)), 0)
        << "bit-exact with the ref";
    // Independent check: |x - d q| <= d/2 + the fp16 rounding of d (2^-11 d
    // relative, times |q| <= 127).
    for (int64_t b = 0; b < nb; ++b) {
      const Eigen::Map<const Eigen::ArrayXf> xb(x.data() + b * 32, 32);
      const double dd = xb.abs().maxCoeff() / 127.0;
      const double d = fp16_to_fp32(y[b].d);
      for (int j = 0; j < 32; ++j) {
        ASSERT_NEAR(d * y[b].q[j], xb[j], dd / 2 + 127 * dd / 2048 + 1e-12)
            << "block " << b << " j=" << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(isa, ops_norm, ::testing::ValuesIn(all_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(isa, ops_elementwise, ::testing::ValuesIn(all_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(isa, ops_rope, ::testing::ValuesIn(all_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(isa, ops_convert, ::testing::ValuesIn(all_isas()), isa_param_name);

TEST(ops_dispatch, tables_are_complete_and_active_is_runnable) {
  for (Isa isa : all_isas()) {
    const kernels::OpsTable& t = kernels::ops_table(isa);
#define LILIMS_CHECK_SET(field, base) \
  EXPECT_NE(t.field, nullptr) << kernels::isa_name(isa) << " " #field;
    LILIMS_OPS_TABLE_ENTRIES(LILIMS_CHECK_SET)
#undef LILIMS_CHECK_SET
    if (kernels::ops_isa_built(isa)) {
      EXPECT_EQ(t.isa, isa);
    }
  }
  EXPECT_TRUE(kernels::ops_isa_runnable(kernels::ops().isa));
  std::printf("[ops] active table: %s\n", kernels::ops().name);
}

}  // namespace
}  // namespace lilims::test
