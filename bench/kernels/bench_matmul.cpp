// Matmul kernels on the shapes of real models (bench_kernels).
//
//   matvec (decode, 1 token): GB/s of weight bytes read, beside a STREAM
//     triad measured by this binary just before, with the same thread count
//     (counter pct_triad = weight GB/s / triad GB/s).
//   gemm (prefill, 512 tokens): GOP/s (2 * rows * K * tokens), beside
//     OpenBLAS SGEMM on the same shape and threads (BM_sgemm_openblas), and
//     pct_int8_peak against the int8 peak of the instruction the kernel
//     multiplies with, measured by this binary on one core (BM_int8_peak:
//     12 independent chains of vpmaddubsw ymm, 32 u8 x s8 multiply-adds =
//     64 ops each, for the AVX2 kernels; of vpdpbusd zmm, 64 multiply-adds
//     = 128 ops, for the AVX-512 VNNI ones) times the thread count.  (An
//     AVX2 Q8 block also needs one vpmaddwd per vpmaddubsw on the same
//     ports, so ~50% of that peak is its practical ceiling; Q4 sums 4
//     maddubs before one madd.  A VNNI block needs nothing but vpdpbusd.)
//     Elsewhere (aarch64) the figure is against a nominal 313.6 GOP/s.
// Every kernel of kernels/matmul_kernels.inc that this CPU runs is
// benchmarked; activations are quantized outside the timed loop (that pass
// is benchmarked separately as BM_graph_matmul, the whole entry point).
// Run with --benchmark_repetitions=N --benchmark_report_aggregates_only=true
// for medians.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "graph/matmul.h"
#include "kernels/matmul.h"
#include "quant/repack.h"

#if defined(LILIMS_HAVE_OPENBLAS)
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {

using lilims::kernels::PackedWeight;
using lilims::quant::Type;
namespace kernels = lilims::kernels;
namespace graph = lilims::graph;

struct ModelShape {
  const char* model;
  int64_t rows, cols;
};
const ModelShape kShapes[] = {
    {"TinyLlama", 2048, 2048}, {"TinyLlama", 2048, 5632}, {"TinyLlama", 5632, 2048},
    {"TinyLlama", 32000, 2048}, {"SmolLM2", 576, 576},     {"SmolLM2", 576, 1536},
    {"SmolLM2", 1536, 576},    {"SmolLM2", 49152, 576},   {"Phi3", 3072, 3072},
    {"Phi3", 3072, 8192}};
constexpr int64_t kPrefillTokens = 512;
constexpr double kNominalInt8PeakPerCore = 2 * 32 * 2 * 2.45e9;

#if defined(__x86_64__)
// This thread's CPU time (a peak is a property of the core while it runs:
// time the thread spends descheduled on a shared machine does not count).
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// int8 multiply-add ops per second of one core: 12 independent chains of
// `iters` instructions each, timed.
__attribute__((target("avx2"))) double peak_maddubs(int64_t iters) {
  __m256i x[12];
  const __m256i b = _mm256_set1_epi8(1);
  for (int i = 0; i < 12; ++i) x[i] = _mm256_set1_epi8((char)(i + 1));
  const double t0 = thread_seconds();
  for (int64_t n = 0; n < iters; ++n) {
    for (int i = 0; i < 12; ++i) x[i] = _mm256_maddubs_epi16(x[i], b);
  }
  const double sec = thread_seconds() - t0;
  __m256i s = x[0];
  for (int i = 1; i < 12; ++i) s = _mm256_xor_si256(s, x[i]);
  benchmark::DoNotOptimize(s);
  return 12.0 * iters * 64 / sec;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double peak_dpbusd(int64_t iters) {
  __m512i x[12];
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int i = 0; i < 12; ++i) x[i] = _mm512_set1_epi32(i);
  const double t0 = thread_seconds();
  for (int64_t n = 0; n < iters; ++n) {
    for (int i = 0; i < 12; ++i) x[i] = _mm512_dpbusd_epi32(x[i], a, b);
  }
  const double sec = thread_seconds() - t0;
  __m512i s = x[0];
  for (int i = 1; i < 12; ++i) s = _mm512_xor_si512(s, x[i]);
  benchmark::DoNotOptimize(s);
  return 12.0 * iters * 128 / sec;
}
#endif

// The best of 5 timings (a descheduled run only lowers a figure).
double measured_peak(bool vnni) {
  static double cached[2] = {0, 0};
  double& c = cached[vnni ? 1 : 0];
  if (c > 0) return c;
#if defined(__x86_64__)
  for (int rep = 0; rep < 5; ++rep) {
    c = std::max(c, vnni ? peak_dpbusd(2'000'000) : peak_maddubs(2'000'000));
  }
#else
  c = kNominalInt8PeakPerCore;
#endif
  return c;
}

double int8_peak_per_core(const kernels::MatmulKernel& k) {
#if defined(__x86_64__)
  if (k.needs == kernels::Feature::avx512vnni) return measured_peak(true);
  if (k.isa == kernels::Isa::avx2) return measured_peak(false);
#endif
  (void)k;
  return kNominalInt8PeakPerCore;
}

// Fast deterministic bytes (weights need not be realistic, only valid).
void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    p[i] = (uint8_t)s;
  }
}

std::vector<uint8_t> random_weights(Type t, int64_t rows, int64_t cols) {
  std::vector<uint8_t> w(lilims::quant::row_bytes(t, cols) * rows);
  fill_random(w.data(), w.size(), rows * 7 + cols);
  // Valid, finite scales (d in [2^-10, 2^-6]), and finite F16/F32 values.
  const uint16_t d = lilims::fp32_to_fp16(0.01f);
  if (t == Type::F32) {
    float* f = reinterpret_cast<float*>(w.data());
    for (int64_t i = 0; i < rows * cols; ++i) f[i] = (float)((int8_t)w[i * 4]) / 128.0f;
  } else if (t == Type::F16) {
    uint16_t* h = reinterpret_cast<uint16_t*>(w.data());
    for (int64_t i = 0; i < rows * cols; ++i) h[i] = lilims::fp32_to_fp16((float)((int8_t)(h[i] & 0xff)) / 128.0f);
  } else {
    const size_t bb = lilims::quant::traits(t).block_bytes;
    // The fp16 scales: d first (Q6_K: last), then Q4_1's m, Q4_K/Q5_K's dmin.
    const size_t at = t == Type::Q6_K ? bb - 2 : 0;
    for (size_t o = 0; o < w.size(); o += bb) {
      std::memcpy(&w[o + at], &d, 2);
      if (t == Type::Q4_1 || t == Type::Q4_K || t == Type::Q5_K) std::memcpy(&w[o + 2], &d, 2);
    }
  }
  return w;
}

// STREAM triad a = b + s * c over 3 x 64 MiB, median of 5, on `threads`.
// Measured again by every matvec benchmark just before its timed loop (the
// machine is shared: a triad from minutes earlier says little); the arrays
// are allocated and written once (b and c must be written: untouched pages
// all map the zero page and read from cache).
double triad_gbps(int threads) {
  const int64_t n = (64 << 20) / 4;
  static std::unique_ptr<float[]> a, b, c;
  if (!a) {
    a.reset(new float[n]), b.reset(new float[n]), c.reset(new float[n]);
    for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = (float)(i & 1023), c[i] = 1.0f;
  }
  graph::ThreadPool pool(threads);
  const int64_t chunk = n / (threads * 16);
  auto run = [&](float s) {
    pool.parallel_for(n / chunk, [&](int64_t t, int) {
      float* __restrict pa = a.get() + t * chunk;
      const float* __restrict pb = b.get() + t * chunk;
      const float* __restrict pc = c.get() + t * chunk;
      for (int64_t i = 0; i < chunk; ++i) pa[i] = pb[i] + s * pc[i];
    });
  };
  run(1.0f);  // warm-up
  std::vector<double> v;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    run(0.5f + rep);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    v.push_back(3.0 * n * 4 / sec / 1e9);
  }
  std::sort(v.begin(), v.end());
  return v[2];
}

// Shared state of one (kernel, shape): packed weight, quantized activations.
struct Setup {
  std::vector<uint8_t> gguf;
  PackedWeight w;
  std::vector<uint8_t> act;
  size_t act_stride;
  std::vector<float> y;
};

std::unique_ptr<Setup> make_setup(const kernels::MatmulKernel& k, const ModelShape& s, int64_t n) {
  auto st = std::make_unique<Setup>();
  st->gguf = random_weights(k.wtype, s.rows, s.cols);
  st->w.type = k.wtype;
  st->w.rows = s.rows;
  st->w.cols = s.cols;
  st->w.data = st->gguf.data();
  if (k.layout > kernels::kLayoutGguf) {
    st->w.storage =
        lilims::kernels::WeightArena::own(lilims::quant::repacked_bytes(k.wtype, k.layout, s.rows, s.cols));
    lilims::quant::repack(k.wtype, k.layout, st->gguf.data(), s.rows, s.cols, st->w.storage.data());
    st->w.data = st->w.storage.data();
    st->w.layout = k.layout;
    std::vector<uint8_t>().swap(st->gguf);  // the repacked copy is all the kernel reads
  }
  st->act_stride = kernels::act_row_bytes(k.wtype, s.cols);
  std::vector<float> x(s.cols * n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  st->act.resize(st->act_stride * n);
  if (const kernels::QuantizeKernel* q = kernels::select_quantize_kernel(kernels::Isa::ref, k.wtype)) {
    for (int64_t j = 0; j < n; ++j) q->fn(x.data() + j * s.cols, st->act.data() + j * st->act_stride, s.cols);
  } else {
    std::memcpy(st->act.data(), x.data(), st->act.size());
  }
  st->y.resize(s.rows * n);
  return st;
}

// The same (row chunk x token chunk) split as graph::matmul.
void run_kernel(const kernels::MatmulKernel& k, Setup& st, int64_t n, graph::ThreadPool& pool) {
  const int64_t rows = st.w.rows;
  const int64_t per_thread = (rows + 4 * pool.size() - 1) / (4 * pool.size());
  const int64_t by_bytes = (int64_t)((128u << 10) / lilims::quant::row_bytes(st.w.type, st.w.cols));
  const int64_t rc = n <= 4 ? std::max<int64_t>(16, (std::min(per_thread, by_bytes) + 3) / 4 * 4) : 32;
  const int64_t tc = n <= 4 ? n : 64;
  const int64_t nr = (rows + rc - 1) / rc, nt = (n + tc - 1) / tc;
  pool.parallel_for(nr * nt, [&](int64_t task, int) {
    const int64_t r0 = task / nt * rc, r1 = std::min(rows, r0 + rc);
    const int64_t j0 = task % nt * tc, j1 = std::min(n, j0 + tc);
    k.fn(st.w, r0, r1, st.act.data() + j0 * st.act_stride, st.act_stride, j1 - j0,
         st.y.data() + j0 * rows, rows);
  });
}

size_t weight_bytes(const PackedWeight& w) {
  return w.layout == kernels::kLayoutX4 ? w.storage.size() : lilims::quant::row_bytes(w.type, w.cols) * w.rows;
}

// Weights of more than 4 MB are meant to come from DRAM, but the L3 holds
// 32 MB (a 37 MB Q4_0 32000x2048 stayed partly cached): such a matvec
// rotates over copies of the weight totalling >= 160 MB (counter `copies`).
void BM_matvec(benchmark::State& state, const kernels::MatmulKernel* k, ModelShape s, int threads) {
  auto st = make_setup(*k, s, 1);
  const double triad = triad_gbps(threads);
  const size_t wbytes = weight_bytes(st->w);
  const size_t copies = wbytes > (4u << 20) ? (160u << 20) / wbytes + 1 : 1;
  std::vector<std::vector<uint8_t>> extra(copies - 1);
  std::vector<PackedWeight> ws(copies);
  ws[0].type = st->w.type, ws[0].rows = st->w.rows, ws[0].cols = st->w.cols;
  ws[0].layout = st->w.layout, ws[0].data = st->w.data;
  for (size_t i = 1; i < copies; ++i) {
    const uint8_t* src = static_cast<const uint8_t*>(st->w.data);
    extra[i - 1].assign(src, src + wbytes);
    ws[i] = ws[0];
    ws[i].data = extra[i - 1].data();
  }
  graph::ThreadPool pool(threads);
  size_t next = 0;
  for (auto _ : state) {
    std::swap(st->w.data, ws[next].data);  // st->w (owner of storage) reads copy `next`
    run_kernel(*k, *st, 1, pool);
    std::swap(st->w.data, ws[next].data);
    next = (next + 1) % copies;
    benchmark::ClobberMemory();
  }
  state.counters["copies"] = (double)copies;
  const double bytes = (double)wbytes;
  state.SetBytesProcessed((int64_t)(bytes * state.iterations()));
  state.counters["weight_GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["triad_GBps"] = triad;
  state.counters["pct_triad"] = benchmark::Counter(100.0 * bytes / 1e9 / triad,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void BM_gemm(benchmark::State& state, const kernels::MatmulKernel* k, ModelShape s, int threads) {
  auto st = make_setup(*k, s, kPrefillTokens);
  graph::ThreadPool pool(threads);
  for (auto _ : state) {
    run_kernel(*k, *st, kPrefillTokens, pool);
    benchmark::ClobberMemory();
  }
  const double ops = 2.0 * s.rows * s.cols * kPrefillTokens;
  state.counters["GOPs"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["int8_peak_GOPs"] = int8_peak_per_core(*k) * threads / 1e9;
  state.counters["pct_int8_peak"] = benchmark::Counter(100.0 * ops / (int8_peak_per_core(*k) * threads),
                                                       benchmark::Counter::kIsIterationInvariantRate);
}

// The whole entry point (activation quantization + kernel), decode.
void BM_graph_matmul(benchmark::State& state, Type t, ModelShape s, int threads, int64_t n) {
  const std::vector<uint8_t> g = random_weights(t, s.rows, s.cols);
  const auto t0 = std::chrono::steady_clock::now();
  const PackedWeight w = kernels::pack_weight(t, g.data(), s.rows, s.cols, true);
  const double repack_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> x(s.cols * n, 0.5f), y(s.rows * n);
  graph::ThreadPool pool(threads);
  graph::MatmulScratch scratch;
  for (auto _ : state) {
    graph::matmul(w, x.data(), s.cols, n, y.data(), s.rows, pool, scratch);
    benchmark::ClobberMemory();
  }
  state.counters["repack_ms"] = repack_ms;
  state.counters["repacked_MB"] = w.storage.size() / 1e6;
  state.counters["gguf_MB"] = g.size() / 1e6;
  if (n == 1) {
    state.counters["weight_GBps"] = benchmark::Counter((double)weight_bytes(w) / 1e9,
                                                       benchmark::Counter::kIsIterationInvariantRate);
  } else {
    state.counters["GOPs"] = benchmark::Counter(2.0 * s.rows * s.cols * n / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  }
}

#if defined(LILIMS_HAVE_OPENBLAS)
void BM_sgemm_openblas(benchmark::State& state, ModelShape s, int threads) {
  openblas_set_num_threads(threads);
  std::vector<float> w(s.rows * s.cols, 0.01f), x(s.cols * kPrefillTokens, 0.5f), y(s.rows * kPrefillTokens);
  for (auto _ : state) {
    // Y (tokens x rows) = X (tokens x K) * W^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)kPrefillTokens, (int)s.rows, (int)s.cols,
                1.0f, x.data(), (int)s.cols, w.data(), (int)s.cols, 0.0f, y.data(), (int)s.rows);
    benchmark::ClobberMemory();
  }
  const double ops = 2.0 * s.rows * s.cols * kPrefillTokens;
  state.counters["GOPs"] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

void BM_int8_peak(benchmark::State& state, bool vnni) {
  for (auto _ : state) state.counters["GOPs_per_core"] = measured_peak(vnni) / 1e9;
}

void BM_triad(benchmark::State& state, int threads) {
  for (auto _ : state) state.counters["triad_GBps"] = triad_gbps(threads);
}

std::string shape_name(const ModelShape& s) {
  return std::string(s.model) + "_" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

}  // namespace

int main(int argc, char** argv) {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("triad/t" + std::to_string(threads)).c_str(), BM_triad, threads)
        ->Iterations(1)->Unit(benchmark::kMillisecond);
  }
#if defined(__x86_64__)
  if (kernels::feature_available(kernels::Feature::avx2)) {
    benchmark::RegisterBenchmark("int8_peak/vpmaddubsw_ymm", BM_int8_peak, false)->Iterations(1);
  }
  if (kernels::feature_available(kernels::Feature::avx512vnni)) {
    benchmark::RegisterBenchmark("int8_peak/vpdpbusd_zmm", BM_int8_peak, true)->Iterations(1);
  }
#endif
  for (const kernels::MatmulKernel& k : kernels::matmul_kernels()) {
    if (!kernels::feature_available(k.needs)) continue;
    for (const ModelShape& s : kShapes) {
      if (s.cols % lilims::quant::traits(k.wtype).block_size != 0) continue;  // K-quants: 256
      for (int threads : {1, 2}) {
        const std::string suffix = "/" + shape_name(s) + "/t" + std::to_string(threads);
        if (k.isa != kernels::Isa::ref) {
          benchmark::RegisterBenchmark((std::string("matvec/") + k.name + suffix).c_str(), BM_matvec, &k, s, threads)
              ->Unit(benchmark::kMicrosecond)->UseRealTime();
          benchmark::RegisterBenchmark((std::string("gemm512/") + k.name + suffix).c_str(), BM_gemm, &k, s, threads)
              ->Unit(benchmark::kMillisecond)->UseRealTime();
        }
      }
    }
  }
  for (const ModelShape& s : kShapes) {
    for (int threads : {1, 2}) {
      const std::string suffix = "/" + shape_name(s) + "/t" + std::to_string(threads);
      for (Type t : {Type::Q4_0, Type::Q8_0, Type::Q4_1}) {
        const char* tn = t == Type::Q4_0 ? "Q4_0" : t == Type::Q8_0 ? "Q8_0" : "Q4_1";
        benchmark::RegisterBenchmark((std::string("graph_matvec/") + tn + suffix).c_str(), BM_graph_matmul, t, s, threads, 1)
            ->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
#if defined(LILIMS_HAVE_OPENBLAS)
      benchmark::RegisterBenchmark(("gemm512/sgemm_openblas" + suffix).c_str(), BM_sgemm_openblas, s, threads)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
#endif
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
