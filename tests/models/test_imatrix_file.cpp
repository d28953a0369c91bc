// The imatrix file (models/imatrix.h): round trip, refusal of bad files, and
// gguf::requantize's checks of the importance it is given.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "models/gguf.h"
#include "models/imatrix.h"
#include "models/requantize.h"
#include "test_util.h"

namespace lilims::models {
namespace {

Imatrix sample() {
  Imatrix m;
  m.n_ctx = 256;
  m.n_chunks = 3;
  m.entries["blk.0.attn_q.weight"] = {768, {0.5f, 1.25f, 0.0f, 3.0f}};
  m.entries["output.weight"] = {512, {2.0f, 4.0f}};
  return m;
}

TEST(ImatrixFile, RoundTrips) {
  const std::string path = test::temp_path("rt.imatrix");
  const Imatrix m = sample();
  write_imatrix(path, m);
  const Imatrix r = read_imatrix(path);
  EXPECT_EQ(r.n_ctx, 256);
  EXPECT_EQ(r.n_chunks, 3);
  ASSERT_EQ(r.entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    ASSERT_TRUE(r.entries.count(name)) << name;
    EXPECT_EQ(r.entries.at(name).n_rows, e.n_rows);
    EXPECT_EQ(r.entries.at(name).mean_sq, e.mean_sq);
  }
  EXPECT_EQ(r.importance().at("output.weight"), (std::vector<float>{2.0f, 4.0f}));
  std::remove(path.c_str());
}

void expect_refused(const std::string& path, lilims_status status, const std::string& needle) {
  try {
    read_imatrix(path);
    ADD_FAILURE() << "accepted: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[imatrix] ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ImatrixFile, RefusesBadFiles) {
  const std::string path = test::temp_path("bad.imatrix");
  write_imatrix(path, sample());
  const std::string good = test::read_file(path);
  auto put = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; };
  expect_refused(test::temp_path("missing.imatrix"), LILIMS_ERR_IO, "cannot open");
  put("");
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "not an imatrix file");
  put("GGUF" + good.substr(4));
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "not an imatrix file");
  std::string b = good;
  b[8] = 7;
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "format version 7");
  for (size_t cut : {size_t(10), size_t(22), size_t(30), good.size() - 1}) {
    put(good.substr(0, cut));
    expect_refused(path, LILIMS_ERR_BAD_FORMAT, "truncated");
  }
  put(good + "x");
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "bytes after its last entry");
  // The first entry ("blk.0.attn_q.weight", 19 bytes) starts at 24: its
  // length, name, column count (at 47), row count (at 51), values (at 59).
  b = good;
  b[24] = 0;
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "has a name of 0 bytes");
  b = good;
  b[47] = 0;
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "has 0 columns");
  b = good;
  std::memset(&b[51], 0, 8);
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "averages 0 rows");
  b = good;
  const float neg = -1.0f, nan = std::nanf("");
  std::memcpy(&b[59 + 4], &neg, 4);
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "column 1 holds an impossible value");
  std::memcpy(&b[59 + 4], &nan, 4);
  put(b);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "column 1 holds an impossible value");
  // The same name twice.
  Imatrix one;
  one.entries["a.weight"] = {1, {1.0f}};
  write_imatrix(path, one);
  std::string twice = test::read_file(path);
  const std::string entry = twice.substr(24);
  twice[20] = 2;  // two entries
  put(twice + entry);
  expect_refused(path, LILIMS_ERR_BAD_FORMAT, "has a.weight twice");
  std::remove(path.c_str());
}

TEST(ImatrixFile, RequantizeChecksTheImportance) {
  auto in = gguf::File::open(test::source_path("tests/data/tiny/llama.gguf"));
  std::map<std::string, std::vector<float>> imp;
  imp["blk.0.attn_q.weight"] = std::vector<float>(63, 1.0f);  // the tensor has 64 columns
  gguf::RequantizeOptions opt;
  opt.importance = &imp;
  try {
    gguf::requantize(*in, quant::Type::Q4_0, opt);
    ADD_FAILURE() << "accepted 63 columns for 64";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("63 columns for blk.0.attn_q.weight, which has 64"),
              std::string::npos)
        << e.what();
  }
  imp["blk.0.attn_q.weight"] = std::vector<float>(64, 1.0f);
  opt.method = quant::QuantMethod::plain;
  try {
    gguf::requantize(*in, quant::Type::Q4_0, opt);
    ADD_FAILURE() << "accepted an imatrix with the plain method";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the search method"), std::string::npos) << e.what();
  }
  // Uniform importance gives the unweighted search's bytes or better under
  // the (uniform) error, tensor by tensor; here: it runs and keeps the types.
  opt.method = quant::QuantMethod::search;
  EXPECT_NO_THROW(gguf::requantize(*in, quant::Type::Q4_0, opt));
}

// Second moments (error compensation): a matrix of the wrong size and the
// plain method are refused, each with its own message; a right one runs.
TEST(ImatrixFile, RequantizeChecksTheSecondMoments) {
  auto in = gguf::File::open(test::source_path("tests/data/tiny/llama.gguf"));
  gguf::SecondMoments moments;
  std::vector<float> identity(64 * 64, 0.0f);
  for (int i = 0; i < 64; ++i) identity[(size_t)i * 64 + i] = 1.0f;
  moments["blk.0.attn_q.weight"] = std::make_shared<const std::vector<float>>(63 * 63, 1.0f);
  gguf::RequantizeOptions opt;
  opt.second_moments = &moments;
  const auto refused = [&](const std::string& want) {
    try {
      gguf::requantize(*in, quant::Type::Q4_0, opt);
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("the second moments of blk.0.attn_q.weight hold 3969 values; its 64 columns need 4096");
  moments["blk.0.attn_q.weight"] = std::make_shared<const std::vector<float>>(identity);
  opt.method = quant::QuantMethod::plain;
  refused("error compensation (second moments) needs the search method");
  opt.method = quant::QuantMethod::search;
  EXPECT_NO_THROW(gguf::requantize(*in, quant::Type::Q4_0, opt));
}

}  // namespace
}  // namespace lilims::models
