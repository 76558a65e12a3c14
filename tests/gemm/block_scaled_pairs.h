// Shared by the block-scaled GEMM tests (gemm_block_scaled_test.cpp and the other sources of
// gemm_block_scaled_test: the GPU runs and premises; gemm_block_scaled_checks_test.cpp: the
// argument checks and the dispatch rule): the ten supported recipe pairs, their labels and test
// names, and a GemmProblem for a pair.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "formats/recipe.h"
#include "gemm/gemm.h"

namespace blockscale_test {

struct Pair {
  blockscale::formats::Format a, b;
};

inline std::vector<Pair> supported_pairs() {
  using blockscale::formats::Format;
  std::vector<Pair> pairs;
  for (Format a : {Format::kMxfp8E4M3, Format::kMxfp8E5M2})
    for (Format b : {Format::kMxfp8E4M3, Format::kMxfp8E5M2, Format::kMxfp4, Format::kNvfp4}) pairs.push_back({a, b});
  pairs.push_back({Format::kMxfp4, Format::kMxfp4});
  pairs.push_back({Format::kNvfp4, Format::kNvfp4});
  return pairs;
}

inline std::string pair_label(const Pair& p) {
  return std::string(blockscale::formats::format_name(p.a)) + " x " + blockscale::formats::format_name(p.b);
}
inline std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  return std::string(blockscale::formats::format_name(info.param.a)) + "_x_" +
         blockscale::formats::format_name(info.param.b);
}

// m x n x k with D of d_type (row stride ldd, also C's), alpha, beta.
inline blockscale::gemm::GemmProblem problem(
    const Pair& pair, int64_t m, int64_t n, int64_t k, blockscale::formats::DType d_type, int64_t ldd, float alpha,
    float beta, blockscale::formats::DType c_type = blockscale::formats::DType::kF32) {
  blockscale::gemm::GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_recipe = pair.a, p.b_recipe = pair.b;
  p.d_type = d_type, p.c_type = c_type;
  p.ldd = ldd, p.ldc = ldd;
  p.alpha = alpha, p.beta = beta;
  return p;
}

}  // namespace blockscale_test
