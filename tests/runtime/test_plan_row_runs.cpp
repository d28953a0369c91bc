// The executor runs consecutive row-wise nodes of a chunk as one job, each
// task taking all of them for its rows (graph::row_wise).  A tensor that
// dies inside such a run and one born in it must not share arena bytes:
// a task would write its rows of the new one over rows of the old one that
// another task has not read yet (Gemma 3's [norm, add, norm] between two
// layers did, with unfused projections, until the planner kept them apart).
// Checked on every family's graph, fused and unfused, at several block
// sizes, and by the logits: one layer per chunk (runs cut at every layer)
// against several.
#include <algorithm>
#include <cmath>

#include "graph/executor.h"
#include "graph/plan.h"
#include "graph/thread_pool.h"
#include "models/builders.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

const char* const kFamilies[] = {"gemma3", "qwen2", "qwen3", "llama3", "phi2", "phi3"};

std::unique_ptr<runtime::Model> open_family(const std::string& name, bool fuse) {
  runtime::ModelOptions mo;
  mo.fuse_projections = fuse;
  return runtime::Model::open(test::source_path("tests/data/families/" + name + ".q8_0.gguf"), mo);
}

TEST(PlanRowRuns, TensorsOfOneRunNeverShareBytes) {
  for (const char* fam : kFamilies) {
    for (const bool fuse : {true, false}) {
      const auto model = open_family(fam, fuse);
      for (const int chunk_layers : {1, 3}) {
        models::BuildOptions bo;
        bo.n_ctx = 64;
        bo.chunk_layers = chunk_layers;
        const graph::Graph g = models::build_graph(model->weights(), bo);
        for (const int32_t n_batch : {1, 7, 32, 64}) {
          graph::PlanOptions po;
          po.n_ctx = 64;
          po.n_batch = n_batch;
          po.n_threads = 2;
          const graph::Plan p = graph::make_plan(g, po, model->memory(64));
          const auto& nodes = g.nodes();
          for (const graph::Chunk& ch : g.chunks()) {
            for (int i = ch.node_begin; i < ch.node_end;) {
              int j = i + 1;
              if (graph::row_wise(nodes[(size_t)i].op)) {
                while (j < ch.node_end && graph::row_wise(nodes[(size_t)j].op)) ++j;
              }
              // Every arena root the run [i, j) touches, with its bytes.
              std::vector<int> roots;
              for (int k = i; k < j; ++k) {
                for (int t : {nodes[(size_t)k].out, nodes[(size_t)k].a, nodes[(size_t)k].b, nodes[(size_t)k].c}) {
                  if (t < 0) continue;
                  const int r = g.root(t);
                  if (p.offset[(size_t)r] >= 0 && std::find(roots.begin(), roots.end(), r) == roots.end()) {
                    roots.push_back(r);
                  }
                }
              }
              for (size_t x = 0; x < roots.size(); ++x) {
                for (size_t y = x + 1; y < roots.size(); ++y) {
                  const int64_t ox = p.offset[(size_t)roots[x]], oy = p.offset[(size_t)roots[y]];
                  const int64_t ex = ox + (int64_t)n_batch * g.tensors()[(size_t)roots[x]].cols * 4;
                  const int64_t ey = oy + (int64_t)n_batch * g.tensors()[(size_t)roots[y]].cols * 4;
                  EXPECT_TRUE(ex <= oy || ey <= ox)
                      << fam << (fuse ? " fused" : " unfused") << " batch " << n_batch << ": "
                      << g.tensors()[(size_t)roots[x]].name << " and " << g.tensors()[(size_t)roots[y]].name
                      << " share bytes in the run at node " << i;
                }
              }
              i = j;
            }
          }
        }
      }
    }
  }
}

TEST(PlanRowRuns, OneLayerPerChunkGivesTheSameLogits) {
  for (const char* fam : kFamilies) {
    const auto model = open_family(fam, false);
    std::vector<int32_t> toks;
    for (int i = 0; i < 40; ++i) toks.push_back(1 + (i * 37) % (model->hparams().n_vocab - 1));
    std::vector<float> want;
    for (const int chunk_layers : {1, 2, 3}) {
      runtime::SessionOptions so;
      so.n_ctx = so.n_batch = 64;
      so.n_threads = 2;
      so.chunk_layers = chunk_layers;
      runtime::Session s(*model, so);
      std::vector<float> all;
      s.eval_all_logits(toks, all);
      if (want.empty()) {
        want = all;
        continue;
      }
      ASSERT_EQ(all.size(), want.size());
      float worst = 0;
      for (size_t k = 0; k < all.size(); ++k) worst = std::max(worst, std::fabs(all[k] - want[k]));
      EXPECT_EQ(worst, 0.0f) << fam << " with " << chunk_layers << " layers a chunk";
    }
  }
}

}  // namespace
}  // namespace lilims
