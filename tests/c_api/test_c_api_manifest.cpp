// Manifests through the public header: checked at open (manifest_path) and
// on an open model (lilims_model_check_manifest); `lilims manifest` writes
// them, and this test writes its own with the same library call.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "c_api_ptr.h"
#include "lilims/lilims.h"
#include "models/gguf.h"
#include "runtime/manifest.h"
#include "test_util.h"

namespace {

using lilims::test::ModelPtr;

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

std::string write_manifest(const std::string& name, const std::string& text) {
  const std::string path = ::lilims::test::temp_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (f) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  return path;
}

std::string good_manifest() {
  return lilims::runtime::make_manifest(*lilims::gguf::File::open(stories_path()), {});
}

TEST(CApiManifest, CheckedAtOpen) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  const std::string good = write_manifest("capi_good.manifest.json", good_manifest());
  for (int mmap_on : {1, 0}) {
    lilims_model_params mp = lilims_model_default_params();
    mp.use_mmap = mmap_on;
    mp.manifest_path = good.c_str();
    mp.manifest_check_file_hash = 1;
    lilims_model* m = nullptr;
    ASSERT_EQ(lilims_model_open(stories_path().c_str(), &mp, &m), LILIMS_OK) << lilims_last_error();
    ModelPtr owned(m);
    EXPECT_EQ(lilims_model_check_manifest(m, good.c_str(), 1), LILIMS_OK) << lilims_last_error();
  }
  std::string text = good_manifest();
  text.replace(text.find("\"requires_lilims\": \"") + 20, 1, "9");  // 9X.Y.Z
  const std::string newer = write_manifest("capi_newer.manifest.json", text);
  lilims_model_params mp = lilims_model_default_params();
  mp.manifest_path = newer.c_str();
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(stories_path().c_str(), &mp, &m), LILIMS_ERR_UNSUPPORTED);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(lilims_last_error()).find("needs lilims 9"), std::string::npos)
      << lilims_last_error();
}

// A model opened without a manifest, checked afterwards: its repacked
// tensors are read again from the mapping, and a wrong manifest is refused.
TEST(CApiManifest, CheckAnOpenModel) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_model* m = nullptr;
  ASSERT_EQ(lilims_model_open(stories_path().c_str(), nullptr, &m), LILIMS_OK);
  ModelPtr owned(m);
  const std::string good = write_manifest("capi_check_good.manifest.json", good_manifest());
  EXPECT_EQ(lilims_model_check_manifest(m, good.c_str(), 0), LILIMS_OK) << lilims_last_error();
  std::string text = good_manifest();
  const size_t h = text.find("\"xxh3_128\": \"") + 13;
  text[h] = text[h] == '0' ? '1' : '0';
  const std::string bad = write_manifest("capi_check_bad.manifest.json", text);
  EXPECT_EQ(lilims_model_check_manifest(m, bad.c_str(), 0), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(std::string(lilims_last_error()).find("differs from the manifest"), std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(lilims_model_check_manifest(m, "/nonexistent/x.json", 0), LILIMS_ERR_IO);
  EXPECT_EQ(lilims_model_check_manifest(nullptr, good.c_str(), 0), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_model_check_manifest(m, nullptr, 0), LILIMS_ERR_INVALID_ARGUMENT);
}

}  // namespace
