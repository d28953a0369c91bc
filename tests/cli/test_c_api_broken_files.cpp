// The C API's view of the broken model files the command-line tests use:
// lilims_model_open returns the documented status (lilims.h) and a message
// that says what is wrong, for both the mmap and the read-into-memory paths.
#include "cli_util.h"
#include "lilims/lilims.h"

namespace lilims::test::cli {
namespace {

// Opens `path` with and without mmap; expects `want` and a message holding `needle`.
void expect_open_fails(const std::string& path, lilims_status want, const std::string& needle) {
  for (int mmap : {1, 0}) {
    SCOPED_TRACE(path + (mmap ? " (mmap)" : " (read)"));
    lilims_model_params p = lilims_model_default_params();
    p.use_mmap = mmap;
    lilims_model* model = nullptr;
    const lilims_status st = lilims_model_open(path.c_str(), &p, &model);
    EXPECT_EQ(st, want) << lilims_status_name(st) << ": " << lilims_last_error();
    const std::string msg = lilims_last_error();
    EXPECT_FALSE(msg.empty());
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    if (st == LILIMS_OK) lilims_model_free(model);
    else EXPECT_EQ(model, nullptr) << "no handle on failure";
  }
}

TEST(CliCApi, MissingFiles) {
  expect_open_fails(tmp_path("does_not_exist.gguf"), LILIMS_ERR_IO, "does_not_exist.gguf");
  expect_open_fails(tmp_dir(), LILIMS_ERR_IO, tmp_dir());
}

TEST(CliCApi, NotGguf) {
  const std::string empty = tmp_path("empty.gguf");
  write_bytes(empty, "");
  expect_open_fails(empty, LILIMS_ERR_BAD_FORMAT, "[gguf]");
  const std::string text = tmp_path("text.gguf");
  write_bytes(text, "this is not a model file at all\n");
  expect_open_fails(text, LILIMS_ERR_BAD_FORMAT, "magic");
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  expect_open_fails(stories_dir() + "/stories260K.bin", LILIMS_ERR_BAD_FORMAT, "magic");
}

TEST(CliCApi, Truncated) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  std::vector<size_t> lens = truncation_lengths(stories_gguf());
  // And a dense sweep through the header, metadata and tensor infos.
  auto f = gguf::File::open(stories_gguf());
  for (size_t len = 0; len < f->data_offset(); len += 61) lens.push_back(len);
  for (size_t len : lens) {
    SCOPED_TRACE("cut at " + std::to_string(len));
    expect_open_fails(write_truncated(stories_gguf(), len, "cut.gguf"), LILIMS_ERR_BAD_FORMAT,
                      "[gguf]");
    if (HasFailure()) break;  // one cut is enough to read
  }
}

TEST(CliCApi, Unsupported) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  expect_open_fails(write_unreadable_type_model(), LILIMS_ERR_UNSUPPORTED, "IQ2_XXS");
  expect_open_fails(write_unsupported_arch_model(), LILIMS_ERR_UNSUPPORTED, "mamba");
  // A tensor the architecture has no use for (a bias llama does not have)
  // is refused, not ignored: ignoring it would run a different model.
  expect_open_fails(
      write_variant(stories_gguf(), "extra_bias.gguf",
                    [](auto&, std::vector<EditableTensor>& ts) {
                      std::vector<uint8_t> zeros(48 * 4, 0);
                      ts.push_back({"blk.0.attn_q.bias", {48}, 0u, zeros});
                    }),
      LILIMS_ERR_UNSUPPORTED, "blk.0.attn_q.bias");
  // A RoPE scaling lilims does not implement.
  expect_open_fails(write_variant(stories_gguf(), "yarn.gguf",
                                  [](std::vector<gguf::KeyValue>& kv, auto&) {
                                    gguf::Value v;
                                    v.type = gguf::ValueType::STRING;
                                    v.s = "yarn";
                                    kv.push_back({"llama.rope.scaling.type", v});
                                  }),
                    LILIMS_ERR_UNSUPPORTED, "yarn");
}

TEST(CliCApi, Missing) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  expect_open_fails(write_without_tensor("blk.3.attn_k.weight"), LILIMS_ERR_MISSING,
                    "blk.3.attn_k.weight");
  expect_open_fails(write_without_key("llama.block_count"), LILIMS_ERR_MISSING,
                    "llama.block_count");
}

TEST(CliCApi, GoodFileStillOpensAfterFailures) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  lilims_model* model = nullptr;
  ASSERT_NE(lilims_model_open(tmp_path("nope.gguf").c_str(), nullptr, &model), LILIMS_OK);
  ASSERT_EQ(lilims_model_open(stories_gguf().c_str(), nullptr, &model), LILIMS_OK)
      << lilims_last_error();
  lilims_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(lilims_model_get_info(model, &info), LILIMS_OK);
  EXPECT_EQ(info.n_vocab, 512);
  EXPECT_EQ(info.n_layer, 5);
  lilims_model_free(model);
}

}  // namespace
}  // namespace lilims::test::cli
