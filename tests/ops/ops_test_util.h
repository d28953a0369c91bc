// Shared by the ops tests: the ISA parameter (every variant this binary
// contains; the ones the host cannot run are skipped by name), seeded data.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu.h"
#include "kernels/ops.h"

namespace lilims::test {

constexpr double kEps = 5.9604644775390625e-8;  // 2^-24, unit roundoff of f32

// LILIMS_TEST_SEED overrides; the seed is printed with every failure.
inline uint32_t test_seed() {
  const char* s = std::getenv("LILIMS_TEST_SEED");
  return s ? (uint32_t)std::strtoul(s, nullptr, 10) : 20240611u;
}

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = u(rng);
  return v;
}

// The ISAs of kernels::Isa, in the order tests list them.
inline std::vector<kernels::Isa> all_isas() {
  return {kernels::Isa::ref, kernels::Isa::avx2, kernels::Isa::neon};
}

class OpsIsaTest : public ::testing::TestWithParam<kernels::Isa> {
 protected:
  void SetUp() override {
    const kernels::Isa isa = GetParam();
    if (!kernels::ops_isa_built(isa)) {
      GTEST_SKIP() << "skipped: " << kernels::isa_name(isa) << " is not built into this binary";
    }
    if (!kernels::ops_isa_runnable(isa)) {
      GTEST_SKIP() << "skipped: this host cannot run " << kernels::isa_name(isa);
    }
    ops_ = &kernels::ops_table(isa);
    seed_ = test_seed();
    rng_.seed(seed_);
  }
  const kernels::OpsTable& ops() const { return *ops_; }
  std::string trace() const {
    return std::string("isa=") + kernels::isa_name(GetParam()) +
           " seed=" + std::to_string(seed_) + " (LILIMS_TEST_SEED)";
  }
  const kernels::OpsTable* ops_ = nullptr;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<kernels::Isa>& info) {
  return kernels::isa_name(info.param);
}

}  // namespace lilims::test
