// bench_ops: throughput of the non-matmul ops of every ISA this binary
// holds (GB/s of bytes read + written, beside a STREAM-style triad run in the
// same process at the same sizes), and fused attention time per decoded
// token over all layers of SmolLM2-135M and TinyLlama-1.1B at contexts
// 512/2048/8192, F16 vs Q8_0 cache, 1 and 2 threads; and of a 64-token
// prefill block (the row tiles rather than the decode path), 1 thread.
//
//   bench_ops --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// See bench/README.md ("Ops and attention") for figures.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/fp16.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "quant/quant.h"

namespace {

using lilims::kernels::AttentionArgs;
using lilims::kernels::Isa;
using lilims::kernels::OpsTable;
using lilims::quant::Type;

// Sizes: one that lives in L1/L2 (a model-width row) and one far past the
// last-level cache (16 Mi floats = 64 MiB per array).
constexpr int64_t kSmall = 4096;
constexpr int64_t kLarge = int64_t(1) << 24;

std::vector<float> random_vec(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = u(rng);
  return v;
}

// The triad a = b + s c: 2 arrays read, 1 written (12 bytes per element,
// STREAM's count, no write-allocate traffic).
void BM_triad(benchmark::State& st) {
  const int64_t n = st.range(0);
  std::vector<float> a(n), b = random_vec(n, -1, 1, 1), c = random_vec(n, -1, 1, 2);
  const float s = 0.5f;
  for (auto _ : st) {
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::DoNotOptimize(pa);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * n * 12);
}

// One element-wise op: a runner over preallocated buffers and the bytes it
// moves per element (reads + writes).
struct OpCase {
  const char* name;
  double bytes_per_elem;
  std::function<void(const OpsTable&, int64_t, float*, float*, float*, float*)> run;
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {"rmsnorm", 12, [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float*) {
         t.rmsnorm(x, w, y, n, 1e-5f);
       }},
      {"add_rmsnorm", 20,
       [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float* d) {
         t.add_rmsnorm(x, d, w, y, n, 1e-5f);
       }},
      {"layernorm", 16, [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float* b) {
         t.layernorm(x, w, b, y, n, 1e-5f);
       }},
      {"softmax", 8, [](const OpsTable& t, int64_t n, float* x, float*, float*, float*) {
         t.softmax(x, n);
       }},
      {"swiglu", 12, [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float*) {
         t.swiglu(x, w, y, n);
       }},
      {"silu", 8, [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.silu(x, y, n);
       }},
      {"gelu", 8, [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.gelu(x, y, n);
       }},
      {"gelu_erf", 8, [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.gelu_erf(x, y, n);
       }},
      {"add", 12, [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float*) {
         t.add(x, w, y, n);
       }},
      {"mul", 12, [](const OpsTable& t, int64_t n, float* x, float* w, float* y, float*) {
         t.mul(x, w, y, n);
       }},
      {"fp32_to_fp16", 6, [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.fp32_to_fp16(x, reinterpret_cast<uint16_t*>(y), n);
       }},
      {"fp16_to_fp32", 6, [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.fp16_to_fp32(reinterpret_cast<const uint16_t*>(x), y, n);
       }},
      {"quantize_row_q8_0", 4 + 34.0 / 32,
       [](const OpsTable& t, int64_t n, float* x, float*, float* y, float*) {
         t.quantize_row_q8_0(x, y, n);
       }},
      // RoPE on rows of 32 heads x 64 dims, adjacent pairs (llama GGUF Q).
      {"rope_adjacent", 8, [](const OpsTable& t, int64_t n, float* x, float* c, float*, float* s) {
         for (int64_t i = 0; i + 2048 <= n; i += 2048) t.rope(x + i, 32, 64, 64, c, s, true);
       }},
  };
  return cases;
}

void BM_op(benchmark::State& st, Isa isa, const OpCase* op) {
  const OpsTable& t = lilims::kernels::ops_table(isa);
  const int64_t n = st.range(0);
  std::vector<float> x = random_vec(n, -2, 2, 3), w = random_vec(n, -1, 1, 4);
  std::vector<float> y(n), d = random_vec(n, -0.01f, 0.01f, 5);
  if (std::strcmp(op->name, "fp16_to_fp32") == 0) {  // valid halves in x
    t.fp32_to_fp16(w.data(), reinterpret_cast<uint16_t*>(x.data()), n);
  }
  if (std::strcmp(op->name, "rope_adjacent") == 0) {
    lilims::kernels::RopeParams p;
    p.n_rot = 64;
    lilims::kernels::rope_table_f32(p, 1234, w.data(), d.data());
  }
  // In-place ops (softmax, add_rmsnorm's residual, rope) keep their values
  // finite when repeated, which is all the timing needs.
  for (auto _ : st) {
    op->run(t, n, x.data(), w.data(), y.data(), d.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed((int64_t)(st.iterations() * n * op->bytes_per_elem));
}

// --- attention -------------------------------------------------------------

struct Model {
  const char* name;
  int n_head, n_head_kv, head_dim, n_layer;
};
constexpr Model kModels[] = {{"SmolLM2-135M", 9, 3, 64, 30}, {"TinyLlama-1.1B", 32, 4, 64, 22}};

// One layer's K and V cache of ctx positions, filled with finite values.
struct LayerCache {
  std::vector<uint8_t> k, v;
};

void fill_cache(std::vector<uint8_t>& buf, Type t, uint32_t seed) {
  std::mt19937 rng(seed);
  if (t == Type::F16) {  // halves in +-[0.125, 0.25)
    uint16_t* h = reinterpret_cast<uint16_t*>(buf.data());
    for (size_t i = 0; i < buf.size() / 2; ++i) {
      const uint32_t r = rng();
      h[i] = (uint16_t)(0x3000u | (r & 0x3ffu) | ((r >> 16) & 0x8000u));
    }
  } else {  // Q8_0 blocks: scale 1/127, random int8
    lilims::quant::BlockQ8_0* b = reinterpret_cast<lilims::quant::BlockQ8_0*>(buf.data());
    const uint16_t d = lilims::fp32_to_fp16(1.0f / 127);
    for (size_t i = 0; i < buf.size() / sizeof(*b); ++i) {
      b[i].d = d;
      for (int j = 0; j < 32; ++j) b[i].q[j] = (int8_t)(rng() % 255 - 127);
    }
  }
}

// Decode of one token (n_q = 1 at position ctx - 1) through every layer, or
// of a prefill block (n_q tokens at [ctx - n_q, ctx));
// threads split the query heads in two halves (at n_head / 2, which may
// fall inside a kv group: that group's K/V is then read by both threads).
// The 2-thread variant starts one std::thread per token and has no per-layer
// barrier, so it is the kernel's best case, not a full runtime's.
void BM_attention(benchmark::State& st, const Model* m, Type t, int ctx, int n_q,
                  int threads) {
  const int d = m->head_dim;
  const int64_t head_bytes = (int64_t)lilims::quant::row_bytes(t, d);
  const int64_t stride = m->n_head_kv * head_bytes;
  std::vector<LayerCache> layers(m->n_layer);
  for (int l = 0; l < m->n_layer; ++l) {
    layers[l].k.resize((size_t)(stride * ctx));
    layers[l].v.resize((size_t)(stride * ctx));
    fill_cache(layers[l].k, t, 2 * l + 1);
    fill_cache(layers[l].v, t, 2 * l + 2);
  }
  const std::vector<float> q = random_vec((int64_t)n_q * m->n_head * d, -1, 1, 7);
  std::vector<float> out((size_t)n_q * m->n_head * d);
  AttentionArgs a{};
  a.q = q.data();
  a.q_stride = (int64_t)m->n_head * d;
  a.n_q = n_q;
  a.pos0 = ctx - n_q;
  a.kv_type = t;
  a.kv_stride_bytes = stride;
  a.n_head = m->n_head;
  a.n_head_kv = m->n_head_kv;
  a.head_dim = d;
  a.scale = 0.125f;
  a.window = 0;
  a.out = out.data();
  a.out_stride = a.q_stride;
  const size_t scratch_n = lilims::kernels::attention_scratch_floats(a);
  std::vector<float> scratch0(scratch_n), scratch1(scratch_n);
  const OpsTable& ops = lilims::kernels::ops();
  auto run = [&](int h0, int h1, float* scratch) {
    AttentionArgs la = a;
    for (int l = 0; l < m->n_layer; ++l) {
      la.k = layers[l].k.data();
      la.v = layers[l].v.data();
      ops.attention(la, h0, h1, scratch);
    }
  };
  const int split = threads > 1 ? m->n_head / 2 : m->n_head;
  for (auto _ : st) {
    if (threads > 1) {
      std::thread worker(run, split, m->n_head, scratch1.data());
      run(0, split, scratch0.data());
      worker.join();
    } else {
      run(0, m->n_head, scratch0.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Bytes of K and V read per call, all layers.
  const double kv_bytes = 2.0 * stride * ctx * m->n_layer;
  st.SetBytesProcessed((int64_t)(st.iterations() * kv_bytes));
  // Share of a TinyLlama Q4_0 decode step of llama.cpp on this machine
  // (37.3 t/s with 2 threads = 26.8 ms; bench/README.md).
  st.counters["pct_of_26.8ms"] = benchmark::Counter(
      st.iterations() * 26.8e-3 / 100.0, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void register_all() {
  for (int64_t n : {kSmall, kLarge}) {
    benchmark::RegisterBenchmark("triad", BM_triad)->Arg(n)->UseRealTime();
  }
  std::vector<Isa> isas = {Isa::ref};
  if (lilims::kernels::active_isa() != Isa::ref) isas.push_back(lilims::kernels::active_isa());
  for (const OpCase& op : op_cases()) {
    for (Isa isa : isas) {
      const std::string name = std::string(op.name) + "/" + lilims::kernels::isa_name(isa);
      benchmark::RegisterBenchmark(name.c_str(), BM_op, isa, &op)
          ->Arg(kSmall)
          ->Arg(kLarge)
          ->UseRealTime();
    }
  }
  for (const Model& m : kModels) {
    for (int ctx : {512, 2048, 8192}) {
      for (Type t : {Type::F16, Type::Q8_0}) {
        for (int threads : {1, 2}) {
          const std::string name = std::string("attention/") + m.name + "/ctx:" +
                                   std::to_string(ctx) + "/" +
                                   (t == Type::F16 ? "F16" : "Q8_0") + "/threads:" +
                                   std::to_string(threads) + "/" +
                                   lilims::kernels::ops().name;
          benchmark::RegisterBenchmark(name.c_str(), BM_attention, &m, t, ctx, 1, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  const Model& smol = kModels[0];
  for (int ctx : {512, 2048}) {
    for (Type t : {Type::F16, Type::Q8_0}) {
      const std::string name = std::string("attention_prefill64/") + smol.name + "/ctx:" +
                               std::to_string(ctx) + "/" + (t == Type::F16 ? "F16" : "Q8_0") +
                               "/threads:1/" + lilims::kernels::ops().name;
      benchmark::RegisterBenchmark(name.c_str(), BM_attention, &smol, t, ctx, 64, 1)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
