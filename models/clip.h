// A CLIP vision tower with a LLaVA projector, as llama.cpp's multimodal
// projector GGUF describes it (general.architecture "clip"; clip.* and
// clip.vision.* keys; v.* and mm.* tensors), and its graph: a ViT whose
// patch embedding is a matmul over unfolded patches, then the class token and
// position embeddings, a pre-LayerNorm, pre-norm blocks (LayerNorm, attention
// over every row, LayerNorm, quick-GELU or GELU MLP), an optional post-norm,
// the class row dropped, and the two-layer MLP projector (LLaVA-1.5).
//
// As llama.cpp's LLaVA converter writes a projector file, the layers after the
// one LLaVA takes its features from are left out and clip.vision.block_count
// counts those that remain: the graph runs all of them, and its output rows
// are the image embeddings the text model reads, one per patch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/executor.h"
#include "graph/ir.h"
#include "graph/plan.h"
#include "graph/thread_pool.h"
#include "models/clip_image.h"
#include "models/gguf.h"
#include "models/model.h"

namespace lilims::models {

struct ClipHParams {
  int32_t image_size = 0, patch_size = 0;
  int32_t n_embd = 0;   // the tower's width
  int32_t n_ff = 0;
  int32_t n_head = 0, head_dim = 0;
  int32_t n_layer = 0;  // layers the file holds and the graph runs
  float eps = 1e-5f;
  bool gelu = false;    // clip.use_gelu: GELU (erf form); else quick-GELU
  int32_t n_out = 0;    // projector output width (the text model's n_embd)

  int32_t patches_per_side() const { return image_size / patch_size; }
  int32_t n_patches() const { return patches_per_side() * patches_per_side(); }
  int32_t n_pos() const { return n_patches() + 1; }  // the class token first
  int64_t patch_cols() const { return 3LL * patch_size * patch_size; }
};

struct ClipLayer {
  Norm ln1, ln2;
  Weight wq, wk, wv, wo;  // (n_embd, n_embd), with biases
  Weight ffn_up;          // (n_ff, n_embd)  HF fc1
  Weight ffn_down;        // (n_embd, n_ff)  HF fc2
};

struct ClipModel {
  ClipHParams hp;
  ClipImageParams image;
  Weight patch_embd;               // (n_embd, 3 * patch * patch), cols in (channel, y, x) order
  std::vector<float> embd_table;   // (n_pos, n_embd): position embeddings, row 0 plus the
                                   // class embedding (less any patch bias, which row 0 gets)
  Norm pre_ln;
  std::vector<ClipLayer> layers;
  Norm post_ln;                    // empty when the file has none
  Weight mm0;                      // (n_out, n_embd), with bias
  Weight mm2;                      // (n_out, n_out), with bias
  uint64_t n_params = 0;
  uint64_t weights_mapped = 0;  // matrix bytes the kernels read from the file
  uint64_t weights_heap = 0;    // matrix bytes repacked into copies
  uint64_t host_bytes = 0;      // vectors and the embedding table, as floats
  std::unique_ptr<gguf::File> file;  // owns the bytes the weights point into
};

// Throws lilims::Error ("[clip] ..."): LILIMS_ERR_UNSUPPORTED for another
// architecture, projector type or a tensor it does not know, LILIMS_ERR_MISSING
// for an absent key or tensor, LILIMS_ERR_BAD_FORMAT for bad shapes or values.
// Matrices may be F32, F16, Q8_0, Q4_0 or Q4_1 (the patch embedding F32/F16
// unless its width is whole blocks); vectors F32 or F16.  Of the options,
// repack and n_threads apply as they do to load_model; the encoder's
// projections are never fused and no progress is reported.
std::unique_ptr<ClipModel> load_clip(std::unique_ptr<gguf::File> file, const LoadOptions& opt = {});

// The encoder graph: input rows are the unfolded patches, output rows the
// projected image embeddings (n_patches rows of n_out).
graph::Graph build_clip_graph(const ClipModel& m, int chunk_layers = 4);

// Pixels (3, S, S) channel-major (clip_preprocess) -> (n_pos, patch_cols)
// rows: row 0 zeros (the class token's slot), row 1 + py * side + px the patch
// at (py, px), its values in (channel, y, x) order as the conv kernel's.
std::vector<float> unfold_patches(const ClipHParams& hp, const float* pixels);

// A planned encoder: its plan and memory are known when it is built.
class ClipEncoder {
 public:
  ClipEncoder(const ClipModel& m, graph::ExecMode mode, graph::ThreadPool& pool, int chunk_layers = 4);
  const graph::Plan& plan() const { return exec_.plan(); }
  std::string describe() const { return exec_.plan().describe(exec_.graph()); }
  int32_t n_rows() const { return hp_.n_patches(); }
  int32_t n_cols() const { return hp_.n_out; }
  // pixels: (3, S, S) as clip_preprocess gives; out: n_rows() x n_cols() floats.
  void encode(const float* pixels, float* out);

 private:
  ClipHParams hp_;
  graph::Executor exec_;
};

}  // namespace lilims::models
