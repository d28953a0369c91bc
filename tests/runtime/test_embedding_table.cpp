// A model whose output is tied to token_embd (SmolLM2) reads its embedding
// rows from the output's repacked copy (models::embedding_table): the same
// values as the file's rows, and after the load the file's pages of
// token_embd are not touched again, so the table is resident once.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "memory_util.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

// Resident bytes of the mapping that holds p (/proc/self/smaps), -1 when
// that cannot be read.
int64_t mapping_rss_bytes(const void* p) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  const unsigned long a = (unsigned long)(uintptr_t)p;
  char line[512];
  bool inside = false;
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3) {
      inside = a >= lo && a < hi;
      continue;
    }
    long long v = 0;
    if (inside && std::strncmp(line, "Rss:", 4) == 0 && std::sscanf(line + 4, "%lld", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

std::unique_ptr<runtime::Model> open_tied_repacked() {
  auto model = runtime::Model::open(test::smollm2_path());
  const models::Model& m = model->weights();
  EXPECT_TRUE(m.tied_output);
  return model;
}

runtime::SessionOptions options() {
  runtime::SessionOptions so;
  so.n_ctx = 512;
  so.n_threads = 2;
  return so;
}

// Tokens over the whole vocabulary: both ends and seeded random ids.
std::vector<int32_t> spread_tokens(int32_t n_vocab, int n) {
  std::vector<int32_t> t = {0, 1, n_vocab / 2, n_vocab - 2, n_vocab - 1};
  std::mt19937 rng(7);
  while ((int)t.size() < n) t.push_back((int32_t)(rng() % (uint32_t)n_vocab));
  return t;
}

// Each token evaluated as a token (the row from the repacked copy) and as
// its file row handed in as an embedding row: the same logits, bit for bit.
TEST(EmbeddingTable, TiedRowsFromTheRepackedCopyEqualTheFileRows) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  auto model = open_tied_repacked();
  const models::Model& m = model->weights();
  if (m.output.packed.layout == kernels::kLayoutGguf) {
    GTEST_SKIP() << "the output is not repacked on this path";
  }
  ASSERT_EQ(&models::embedding_table(m), &m.output.packed);
  runtime::Session a(*model, options()), b(*model, options());
  std::vector<float> row((size_t)m.hp.n_embd);
  for (int32_t tok : spread_tokens(m.hp.n_vocab, 24)) {
    a.eval({tok});
    models::dequantize_row(m.tok_embd, tok, row.data());
    b.eval_embeddings(row.data(), 1);
    ASSERT_EQ(a.logits().size(), b.logits().size());
    ASSERT_EQ(std::memcmp(a.logits().data(), b.logits().data(), a.logits().size() * sizeof(float)), 0)
        << "token " << tok;
  }
}

// Evaluating tokens all over the vocabulary leaves the file's pages of
// token_embd as they were after the load.  Read from the mapping, each
// token faulted in at least a page (the kernel maps up to 64 KiB around a
// fault): 256 tokens added over 1 MiB.
TEST(EmbeddingTable, EvaluatingTokensDoesNotTouchTheFileRows) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  LILIMS_REQUIRE_RSS();
  auto model = open_tied_repacked();
  const models::Model& m = model->weights();
  if (m.output.packed.layout == kernels::kLayoutGguf) {
    GTEST_SKIP() << "the output is not repacked on this path";
  }
  const int64_t before = mapping_rss_bytes(m.tok_embd.data);
  if (before < 0) GTEST_SKIP() << "no /proc/self/smaps on this system";
  runtime::Session s(*model, options());
  for (int32_t tok : spread_tokens(m.hp.n_vocab, 256)) s.eval({tok});
  const int64_t after = mapping_rss_bytes(m.tok_embd.data);
  std::printf("file mapping resident: %lld KiB before, %lld KiB after 256 tokens\n",
              (long long)before / 1024, (long long)after / 1024);
  EXPECT_LE(after - before, 64 * 1024);
}

}  // namespace
}  // namespace lilims
