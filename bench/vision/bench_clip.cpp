// bench_clip: encoder time per image and peak memory of a CLIP vision tower
// with a LLaVA MLP projector, random weights, the shape given on the command
// line (default: ViT-B/16 - 768 wide, 12 layers, 12 heads, ffn 3072, patch 16
// - projecting to 2048, a 1B text model's width).
//
//   bench_clip --write FILE --size 224 [--type F16|Q8_0]   # the projector GGUF
//   bench_clip --file FILE [--threads 2] [--runs 5]         # one JSON line
//
// Measure in a process of its own (bench/vision/clip_encoder.sh does): the
// peak RSS it reports is getrusage's process-wide maximum, which then covers
// exactly the load (mmap), the plan and the encodes.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/clip.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace {

using namespace lilims;

struct Shape {
  int image = 224, patch = 16, embd = 768, ff = 3072, heads = 12, layers = 12, out = 2048;
};

// Seeded normal values rounded to the file type, one tensor at a time.
void add_matrix(gguf::Writer& w, std::mt19937& rng, const std::string& name,
                const std::vector<uint64_t>& ne, quant::Type type, float std_dev) {
  const int64_t cols = (int64_t)ne[0];
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  const int64_t rows = (int64_t)(n / (uint64_t)cols);
  std::normal_distribution<float> dist(0.0f, std_dev);
  std::vector<float> row((size_t)cols);
  const size_t rb = quant::row_bytes(type, cols);
  std::vector<uint8_t> bytes(rb * (size_t)rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quant::quantize_row(type, row.data(), bytes.data() + (size_t)r * rb, cols);
  }
  w.add_tensor(name, ne, (uint32_t)type, bytes.data(), bytes.size());
}

void add_vector(gguf::Writer& w, std::mt19937& rng, const std::string& name, int64_t n, float mean,
                float std_dev) {
  std::normal_distribution<float> dist(mean, std_dev);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = dist(rng);
  w.add_tensor(name, {(uint64_t)n}, (uint32_t)quant::Type::F32, v.data(), v.size() * sizeof(float));
}

void write_model(const std::string& path, const Shape& s, quant::Type type) {
  std::mt19937 rng(20261126);
  gguf::Writer w;
  w.add_string("general.architecture", "clip");
  w.add_bool("clip.has_vision_encoder", true);
  w.add_bool("clip.has_llava_projector", true);
  w.add_string("clip.projector_type", "mlp");
  w.add_bool("clip.use_gelu", false);
  w.add_u32("clip.vision.image_size", (uint32_t)s.image);
  w.add_u32("clip.vision.patch_size", (uint32_t)s.patch);
  w.add_u32("clip.vision.embedding_length", (uint32_t)s.embd);
  w.add_u32("clip.vision.feed_forward_length", (uint32_t)s.ff);
  w.add_u32("clip.vision.projection_dim", (uint32_t)s.out);
  w.add_u32("clip.vision.attention.head_count", (uint32_t)s.heads);
  w.add_f32("clip.vision.attention.layer_norm_epsilon", 1e-5f);
  w.add_u32("clip.vision.block_count", (uint32_t)s.layers);
  w.add_f32_array("clip.vision.image_mean", {0.48145466f, 0.4578275f, 0.40821073f});
  w.add_f32_array("clip.vision.image_std", {0.26862954f, 0.26130258f, 0.27577711f});
  const uint64_t d = (uint64_t)s.embd, ff = (uint64_t)s.ff, p = (uint64_t)s.patch;
  const uint64_t n_pos = (uint64_t)(s.image / s.patch) * (uint64_t)(s.image / s.patch) + 1;
  // The 4-D patch kernel stays F16 (its rows, one patch row of 16 values,
  // are not whole Q8_0 blocks; llama.cpp's quantizer leaves it F16 too).
  add_matrix(w, rng, "v.patch_embd.weight", {p, p, 3, d}, quant::Type::F16, 0.02f);
  add_vector(w, rng, "v.class_embd", (int64_t)d, 0.0f, 0.02f);
  add_matrix(w, rng, "v.position_embd.weight", {d, n_pos}, quant::Type::F16, 0.02f);
  add_vector(w, rng, "v.pre_ln.weight", (int64_t)d, 1.0f, 0.1f);
  add_vector(w, rng, "v.pre_ln.bias", (int64_t)d, 0.0f, 0.02f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "v.blk." + std::to_string(l) + ".";
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      add_matrix(w, rng, b + t + ".weight", {d, d}, type, 0.02f);
      add_vector(w, rng, b + t + ".bias", (int64_t)d, 0.0f, 0.02f);
    }
    add_matrix(w, rng, b + "ffn_up.weight", {d, ff}, type, 0.02f);
    add_vector(w, rng, b + "ffn_up.bias", (int64_t)ff, 0.0f, 0.02f);
    add_matrix(w, rng, b + "ffn_down.weight", {ff, d}, type, 0.02f);
    add_vector(w, rng, b + "ffn_down.bias", (int64_t)d, 0.0f, 0.02f);
    for (const char* t : {"ln1", "ln2"}) {
      add_vector(w, rng, b + t + ".weight", (int64_t)d, 1.0f, 0.1f);
      add_vector(w, rng, b + t + ".bias", (int64_t)d, 0.0f, 0.02f);
    }
  }
  add_matrix(w, rng, "mm.0.weight", {d, (uint64_t)s.out}, type, 0.02f);
  add_vector(w, rng, "mm.0.bias", s.out, 0.0f, 0.02f);
  add_matrix(w, rng, "mm.2.weight", {(uint64_t)s.out, (uint64_t)s.out}, type, 0.02f);
  add_vector(w, rng, "mm.2.bias", s.out, 0.0f, 0.02f);
  w.write(path);
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;  // Linux: KiB
}

int measure(const std::string& path, int threads, int runs) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = models::load_clip(gguf::File::open(path));
  graph::ThreadPool pool(threads);
  models::ClipEncoder enc(*m, graph::ExecMode::fast, pool);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int n = m->hp.image_size;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> pixels((size_t)3 * n * n);
  for (float& v : pixels) v = dist(rng);
  std::vector<float> out((size_t)enc.n_rows() * enc.n_cols());
  std::vector<double> ms;
  for (int r = 0; r <= runs; ++r) {  // run 0 warms up
    const auto a = std::chrono::steady_clock::now();
    enc.encode(pixels.data(), out.data());
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    if (r > 0) ms.push_back(t);
  }
  for (float v : out) {
    if (!std::isfinite(v)) {
      std::fprintf(stderr, "bench_clip: non-finite output\n");
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  const graph::MemoryPlan& mem = enc.plan().mem;
  std::printf(
      "{\"file\": \"%s\", \"image_size\": %d, \"rows\": %d, \"type\": \"%s\", \"n_params\": %llu, "
      "\"threads\": %d, \"runs\": %d, \"median_ms\": %.1f, \"min_ms\": %.1f, \"max_ms\": %.1f, "
      "\"load_s\": %.2f, \"plan_arena_mib\": %.2f, \"plan_act_scratch_mib\": %.2f, "
      "\"plan_weights_mib\": %.1f, \"plan_total_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
      path.c_str(), n, m->hp.n_pos(), quant::ggml_type_name(m->layers[0].wq.file_type),
      (unsigned long long)m->n_params, threads, runs, ms[ms.size() / 2], ms.front(), ms.back(), load_s,
      (double)mem.arena / 1048576.0, (double)(mem.matmul_act + mem.attn_scratch) / 1048576.0,
      (double)(mem.weights_mapped + mem.weights_heap) / 1048576.0, (double)mem.total() / 1048576.0,
      peak_rss_mib());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string write_path, file;
  Shape s;
  quant::Type type = quant::Type::F16;
  int threads = 2, runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!v) {
      std::fprintf(stderr, "bench_clip: %s needs a value\n", a.c_str());
      return 2;
    }
    ++i;
    if (a == "--write") write_path = v;
    else if (a == "--file") file = v;
    else if (a == "--size") s.image = std::atoi(v);
    else if (a == "--type") type = std::string(v) == "Q8_0" ? quant::Type::Q8_0 : quant::Type::F16;
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--runs") runs = std::atoi(v);
    else {
      std::fprintf(stderr, "bench_clip: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    if (!write_path.empty()) {
      write_model(write_path, s, type);
      return 0;
    }
    if (file.empty() || threads < 1 || runs < 1) {
      std::fprintf(stderr, "usage: bench_clip --write FILE [--size N] [--type F16|Q8_0] | "
                           "--file FILE [--threads N] [--runs N]\n");
      return 2;
    }
    return measure(file, threads, runs);
  } catch (const lilims::Error& e) {
    std::fprintf(stderr, "bench_clip: %s\n", e.what());
    return 1;
  }
}
