// `lilims bench` as bench/race.sh and CI read it: every --json line is one
// JSON object with the configuration and positive, finite figures; the table
// form has one row per configuration; every bad option is a one-line error,
// a nonzero exit and nothing on stdout.  No figure is compared with a
// threshold: the values depend on the machine and its load.
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>
#include <sstream>
#include <tuple>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const char* const kNumericKeys[] = {"threads",    "n_prompt",   "n_gen",      "n_ctx",
                                    "runs",       "pp_tps",     "pp_tps_min", "pp_tps_max",
                                    "tg_tps",     "tg_tps_min", "tg_tps_max", "ttft_ms",
                                    "ttft_ms_min", "ttft_ms_max", "load_ms",  "peak_rss_mb",
                                    "n_params",   "decode_weight_bytes", "rss_anon_load_mb",
                                    "rss_file_load_mb", "rss_anon_mb", "rss_file_mb",
                                    "weight_bytes_mapped"};

// Parses every stdout line; fails the test on a line that is not an object
// with the keys scripts read, each figure a positive finite number.
std::vector<nlohmann::json> parse_json_lines(const Result& r) {
  std::vector<nlohmann::json> rows;
  for (const std::string& line : lines_of(r.out)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ADD_FAILURE() << "not JSON: " << line << "\n" << e.what();
      continue;
    }
    EXPECT_TRUE(j.is_object()) << line;
    for (const char* k : {"model", "isa"}) {
      EXPECT_TRUE(j.contains(k) && j[k].is_string() && !j[k].get<std::string>().empty())
          << k << " in " << line;
    }
    for (const char* k : kNumericKeys) {
      if (!j.contains(k) || !j[k].is_number()) {
        ADD_FAILURE() << "no number " << k << " in " << line;
        continue;
      }
      const double v = j[k].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " = " << v << " in " << line;
    }
    if (j.contains("pp_tps_min") && j.contains("pp_tps_max") && j.contains("pp_tps")) {
      EXPECT_LE(j["pp_tps_min"].get<double>(), j["pp_tps"].get<double>()) << line;
      EXPECT_LE(j["pp_tps"].get<double>(), j["pp_tps_max"].get<double>()) << line;
      EXPECT_LE(j["tg_tps_min"].get<double>(), j["tg_tps"].get<double>()) << line;
      EXPECT_LE(j["tg_tps"].get<double>(), j["tg_tps_max"].get<double>()) << line;
    }
    rows.push_back(j);
  }
  return rows;
}

TEST(CliBench, JsonLineHasEveryKeyWithPositiveFiniteFigures) {
  REQUIRE_STORIES();
  const Result r =
      run({"bench", "-m", stories_gguf(), "-p", "16", "-n", "8", "-t", "1", "-r", "2", "--json"});
  ASSERT_TRUE(r.exited()) << r.describe();
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<nlohmann::json> rows = parse_json_lines(r);
  ASSERT_EQ(rows.size(), 1u) << r.describe();
  const nlohmann::json& j = rows[0];
  EXPECT_EQ(j["model"], stories_gguf());
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["n_prompt"], 16);
  EXPECT_EQ(j["n_gen"], 8);
  EXPECT_EQ(j["runs"], 2);
  EXPECT_GE(j["n_ctx"].get<int>(), 24);
  // The weights one decode step reads are part of the file (a tied head is
  // counted once, through the embedding table).
  EXPECT_LE(j["decode_weight_bytes"].get<double>(),
            (double)std::filesystem::file_size(stories_gguf()));
  // stories260K is F32: read in place, nothing stacked
  EXPECT_EQ(j["fused_weights"], 0);
}

TEST(CliBench, OneJsonLinePerConfiguration) {
  REQUIRE_STORIES();
  const Result r = run({"bench", "-m", stories_gguf(), "-p", "8,16", "-n", "4", "-t", "1,2", "-r",
                        "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<nlohmann::json> rows = parse_json_lines(r);
  std::set<std::tuple<int, int, int>> seen;
  for (const auto& j : rows) {
    seen.insert({j["threads"].get<int>(), j["n_prompt"].get<int>(), j["n_gen"].get<int>()});
  }
  const std::set<std::tuple<int, int, int>> want = {{1, 8, 4}, {1, 16, 4}, {2, 8, 4}, {2, 16, 4}};
  EXPECT_EQ(rows.size(), 4u) << r.describe();
  EXPECT_EQ(seen, want) << r.describe();
}

// llama-bench's defaults: a 512-token prompt, 128 decoded tokens.
TEST(CliBench, DefaultLengthsAreLlamaBenchs) {
  REQUIRE_STORIES();
  const Result r = run({"bench", "-m", stories_gguf(), "-r", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<nlohmann::json> rows = parse_json_lines(r);
  ASSERT_EQ(rows.size(), 1u) << r.describe();
  EXPECT_EQ(rows[0]["n_prompt"], 512);
  EXPECT_EQ(rows[0]["n_gen"], 128);
}

TEST(CliBench, TableHasOneRowPerConfiguration) {
  REQUIRE_STORIES();
  const Result r = run({"bench", "-m", stories_gguf(), "-p", "8", "-n", "4,6", "-t", "1", "-r", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  size_t rows = 0;
  for (const std::string& line : lines_of(r.out)) {
    if (line.rfind("|       1 |        8 |     4 |", 0) == 0 ||
        line.rfind("|       1 |        8 |     6 |", 0) == 0) {
      ++rows;
    }
  }
  EXPECT_EQ(rows, 2u) << r.describe();
  EXPECT_EQ(r.out.find('{'), std::string::npos) << "no JSON without --json:\n" << r.out;
}

class CliBenchBadOption : public ::testing::TestWithParam<Args> {};

TEST_P(CliBenchBadOption, OneLineErrorNothingOnStdout) {
  REQUIRE_STORIES();
  Args a = {"bench", "-m", stories_gguf()};
  a.insert(a.end(), GetParam().begin(), GetParam().end());
  const Result r = run(a);
  ASSERT_TRUE(r.exited()) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "") << r.describe();
  EXPECT_EQ(r.err.rfind("lilims bench: ", 0), 0u) << r.describe();
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.describe();
}

const Args kBadOptions[] = {
    {"-p", "0"},        {"-p", "abc"},      {"-p", "8,,16"}, {"-p", "8,"},
    {"-p", "65537"},    {"-n", "-1"},       {"-n", "0"},     {"-t", "0"},
    {"-t", "257"},      {"-t", "1,x"},      {"-r", "0"},     {"-r", "1001"},
    {"-r", "2.5"},      {"--seed", "-3"},   {"--bogus"},     {"-p"},
    {"-p", "2000", "-n", "100"},  // past stories260K's 2048-token context
};
INSTANTIATE_TEST_SUITE_P(Options, CliBenchBadOption, ::testing::ValuesIn(kBadOptions));

TEST(CliBench, MissingOrUnrunnableModelIsAnError) {
  REQUIRE_STORIES();
  for (const std::string& path : {tmp_path("absent.gguf"), write_unsupported_arch_model()}) {
    const Result r = run({"bench", "-m", path, "-p", "8", "-n", "4", "-r", "1", "--json"});
    ASSERT_TRUE(r.exited()) << r.describe();
    EXPECT_NE(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, "") << r.describe();
    EXPECT_EQ(r.err.rfind("lilims bench: ", 0), 0u) << r.describe();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.describe();
  }
}

TEST(CliBench, HelpGoesToStdout) {
  const Result r = run({"bench", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.rfind("usage: lilims bench", 0), 0u) << r.describe();
}

}  // namespace
}  // namespace lilims::test::cli
