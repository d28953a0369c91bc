// Model manifests (runtime/manifest.h): what they record, and that a model
// that is not the one described, a newer requirement or a broken manifest is
// refused with the error the header promises.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "lilims/lilims.h"
#include "models/gguf.h"
#include "runtime/engine.h"
#include "runtime/manifest.h"
#include "test_util.h"

namespace lilims {
namespace {

using Json = nlohmann::ordered_json;

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }
#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md")

std::string write_tmp(const std::string& name, const std::string& bytes) {
  const std::string path = ::lilims::test::temp_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  if (f) {
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  return path;
}

// The status and message check_manifest throws, or LILIMS_OK.
struct Outcome {
  lilims_status status = LILIMS_OK;
  std::string message;
};
Outcome check(const gguf::File& file, const std::string& text, bool file_hash = false) {
  runtime::ManifestCheck c;
  c.file_hash = file_hash;
  try {
    runtime::check_manifest(file, text, c);
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  return {};
}

std::string manifest_of(const std::string& path) {
  return runtime::make_manifest(*gguf::File::open(path), runtime::ManifestInfo());
}

TEST(Manifest, RecordsTheModel) {
  REQUIRE_STORIES();
  auto file = gguf::File::open(stories_path());
  runtime::ManifestInfo info;
  info.model_version = "2.3.4";
  const Json j = Json::parse(runtime::make_manifest(*file, info));
  EXPECT_EQ(j["format"], "lilims-manifest");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["model_version"], "2.3.4");
  EXPECT_EQ(j["requires_lilims"], runtime::lilims_version_semver());
  EXPECT_EQ(j["file_size"].get<uint64_t>(), file->file_size());
  uint64_t params = 0;
  for (const auto& t : file->tensors()) params += t.n_elements;
  EXPECT_EQ(j["parameters"].get<uint64_t>(), params);
  ASSERT_EQ(j["tensors"].size(), file->tensors().size());
  EXPECT_EQ(j["tensors"][0]["name"], file->tensors()[0].name);
  EXPECT_EQ(j["file_xxh3_128"].get<std::string>().size(), 32u);
  EXPECT_EQ(check(*file, j.dump(), true).status, LILIMS_OK);
  EXPECT_EQ(runtime::lilims_version_semver(), std::to_string(LILIMS_VERSION_MAJOR) + "." +
                                                  std::to_string(LILIMS_VERSION_MINOR) + "." +
                                                  std::to_string(LILIMS_VERSION_PATCH));
}

TEST(Manifest, RefusesBadVersionsWhenWriting) {
  REQUIRE_STORIES();
  auto file = gguf::File::open(stories_path());
  for (const char* v : {"", "1", "1.2", "1.2.3.4", "v1.2.3", "1.2.x", "-1.2.3", "1..3", "1.2.3-rc1"}) {
    runtime::ManifestInfo info;
    info.model_version = v;
    try {
      runtime::make_manifest(*file, info);
      ADD_FAILURE() << "accepted model version '" << v << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT) << v;
    }
  }
}

// One changed byte inside a tensor: the tensor check names it.  One changed
// byte in the metadata (the name's text): the tensors match, the file hash
// does not.
TEST(Manifest, FindsAChangedTensorAndAChangedFile) {
  REQUIRE_STORIES();
  const std::string manifest = manifest_of(stories_path());
  auto orig = gguf::File::open(stories_path());
  const gguf::TensorInfo* t = orig->find_tensor("blk.3.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  std::string bytes = test::read_file(stories_path());
  std::string tensor_changed = bytes;
  tensor_changed[(size_t)(orig->data_offset() + t->offset + t->n_bytes / 2)] ^= 1;
  auto a = gguf::File::open(write_tmp("manifest_tensor.gguf", tensor_changed));
  const Outcome oa = check(*a, manifest);
  EXPECT_EQ(oa.status, LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(oa.message.find("blk.3.ffn_up.weight differs"), std::string::npos) << oa.message;

  std::string meta_changed = bytes;
  // general.architecture "llama" -> "llamb" keeps every size; the tensor
  // check does not read it.
  const size_t value_at = bytes.find("llama", bytes.find("general.architecture"));
  ASSERT_NE(value_at, std::string::npos);
  ASSERT_LT(value_at, orig->data_offset());
  meta_changed[value_at + 4] = 'b';
  auto b = gguf::File::open(write_tmp("manifest_meta.gguf", meta_changed));
  EXPECT_EQ(check(*b, manifest).status, LILIMS_OK);
  const Outcome ob = check(*b, manifest, true);
  EXPECT_EQ(ob.status, LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(ob.message.find("the file differs"), std::string::npos) << ob.message;
}

TEST(Manifest, RefusesWhatItCannotTrust) {
  REQUIRE_STORIES();
  auto file = gguf::File::open(stories_path());
  const Json good = Json::parse(manifest_of(stories_path()));
  const auto edited = [&](const std::function<void(Json&)>& edit) {
    Json j = good;
    edit(j);
    return j.dump();
  };
  struct Case {
    const char* what;
    std::string text;
    lilims_status status;
    const char* says;
  };
  const Case cases[] = {
      {"newer lilims", edited([](Json& j) { j["requires_lilims"] = "999.0.0"; }),
       LILIMS_ERR_UNSUPPORTED, "needs lilims 999.0.0 or newer"},
      {"newer format", edited([](Json& j) { j["format_version"] = 2; }), LILIMS_ERR_UNSUPPORTED,
       "format version 2"},
      {"other format", edited([](Json& j) { j["format"] = "x"; }), LILIMS_ERR_BAD_FORMAT, "\"format\""},
      {"size", edited([](Json& j) { j["file_size"] = j["file_size"].get<uint64_t>() + 1; }),
       LILIMS_ERR_BAD_FORMAT, "bytes, the manifest says"},
      {"tensor count", edited([](Json& j) { j["tensors"].erase(j["tensors"].size() - 1); }),
       LILIMS_ERR_BAD_FORMAT, "tensors, the manifest lists"},
      {"tensor name", edited([](Json& j) { j["tensors"][1]["name"] = "x"; }), LILIMS_ERR_BAD_FORMAT,
       "the manifest says x"},
      {"tensor type", edited([](Json& j) { j["tensors"][1]["type"] = "Q4_0"; }),
       LILIMS_ERR_BAD_FORMAT, "the manifest says Q4_0"},
      {"tensor shape", edited([](Json& j) { j["tensors"][1]["shape"][0] = 3; }),
       LILIMS_ERR_BAD_FORMAT, "another shape"},
      {"tensor hash", edited([](Json& j) { j["tensors"][2]["xxh3_128"] = std::string(32, '0'); }),
       LILIMS_ERR_BAD_FORMAT, "differs from the manifest"},
      {"missing field", edited([](Json& j) { j.erase("model_version"); }), LILIMS_ERR_BAD_FORMAT,
       "missing \"model_version\""},
      {"mistyped field", edited([](Json& j) { j["file_size"] = "12"; }), LILIMS_ERR_BAD_FORMAT,
       "wrong type"},
      {"negative size", edited([](Json& j) { j["file_size"] = -1; }), LILIMS_ERR_BAD_FORMAT,
       "wrong type"},
      {"bad model version", edited([](Json& j) { j["model_version"] = "1.0"; }),
       LILIMS_ERR_BAD_FORMAT, "MAJOR.MINOR.PATCH"},
      {"not an object", "[1, 2]", LILIMS_ERR_BAD_FORMAT, "not a JSON object"},
      {"not JSON", "{\"format\": ", LILIMS_ERR_BAD_FORMAT, "not JSON"},
      {"empty", "", LILIMS_ERR_BAD_FORMAT, "not JSON"},
  };
  for (const Case& c : cases) {
    const Outcome o = check(*file, c.text);
    EXPECT_EQ(o.status, c.status) << c.what << ": " << o.message;
    EXPECT_NE(o.message.find(c.says), std::string::npos) << c.what << ": " << o.message;
    EXPECT_EQ(o.message.rfind("[manifest] ", 0), 0u) << o.message;
  }
  // An older requirement is fine.
  EXPECT_EQ(check(*file, edited([](Json& j) { j["requires_lilims"] = "0.0.1"; })).status, LILIMS_OK);
}

// Every prefix of a manifest is refused (none is a complete manifest), and
// none crashes.
TEST(Manifest, EveryTruncationIsRefused) {
  REQUIRE_STORIES();
  auto file = gguf::File::open(stories_path());
  const std::string text = manifest_of(stories_path());
  for (size_t n = 0; n + 1 < text.size(); ++n) {  // the last byte is a newline
    ASSERT_EQ(check(*file, text.substr(0, n)).status, LILIMS_ERR_BAD_FORMAT) << n;
  }
}

// The hash is XXH3-128 in its canonical hex: the file's equals what
// xxhsum -H2 (Debian's xxhash package) prints, when it is installed.
TEST(Manifest, FileHashIsXxhsumsXxh128) {
  REQUIRE_STORIES();
  FILE* p = popen(("xxhsum -H2 '" + stories_path() + "' 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256] = {0};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  pclose(p);
  if (!got) GTEST_SKIP() << "xxhsum is not installed (Debian: apt-get install xxhash)";
  const Json j = Json::parse(manifest_of(stories_path()));
  EXPECT_EQ(std::string(line).substr(0, 32), j["file_xxh3_128"].get<std::string>());
}

// Given to Model::open, the manifest is checked before the weights are read.
TEST(Manifest, ModelOpenChecksIt) {
  REQUIRE_STORIES();
  const std::string good = write_tmp("manifest_good.json", manifest_of(stories_path()));
  runtime::ModelOptions opt;
  opt.manifest_path = good;
  opt.manifest_file_hash = true;
  EXPECT_NE(runtime::Model::open(stories_path(), opt), nullptr);
  opt.use_mmap = false;
  EXPECT_NE(runtime::Model::open(stories_path(), opt), nullptr);

  Json j = Json::parse(manifest_of(stories_path()));
  j["tensors"][0]["xxh3_128"] = std::string(32, 'f');
  opt.manifest_path = write_tmp("manifest_bad.json", j.dump());
  try {
    runtime::Model::open(stories_path(), opt);
    ADD_FAILURE() << "opened a model that differs from its manifest";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT) << e.what();
  }
  opt.manifest_path = ::lilims::test::temp_path("no_such_manifest.json");
  try {
    runtime::Model::open(stories_path(), opt);
    ADD_FAILURE() << "opened with a missing manifest";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_IO) << e.what();
  }
}

}  // namespace
}  // namespace lilims
