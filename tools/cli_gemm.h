// `blockscale gemm`, shared by its dense (cli_gemm.cpp) and grouped (cli_gemm_grouped.cpp) parts:
// the options, random operands quantized by the emulator, progress lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/recipe.h"

namespace blockscale::tools {

struct GemmArgs {
  std::string recipe = "fp8_block128";
  std::string b_recipe;  // default: the weights' recipe that goes with `recipe` (and the mode)
  int64_t m = 0, n = 0, k = 0;
  std::string grouped;   // "", "m" (fprop / dgrad) or "k" (wgrad)
  int experts = 8;
  int64_t tokens = 0;
  double skew = 0.0;     // share of the tokens on expert 0 (0: balanced)
  bool check = false;
  int check_rows = 64;
  std::string out_type = "bf16";
  int iters = 20;
  uint64_t seed = 1;
  bool quiet = false;
  std::string gemm_route = "auto";  // --gemm-route: auto, kernel or cublaslt (gemm::GemmRoute)
};

// rows x cols random values (see cli_gemm.cpp), seedable.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed);
// random_matrix quantized rowwise by formats::quantize; errors name `what`.
formats::QuantizedMatrix quantize_operand(const std::string& what, int64_t rows, int64_t cols, formats::Format r,
                                          uint64_t seed);
// Rows `rows` of a 1-row-block operand, for a sampled reference.
formats::QuantizedMatrix take_rows(const formats::QuantizedMatrix& q, const std::vector<int64_t>& rows);
// "blockscale gemm: <what>" on stderr unless --quiet.
void progress(const GemmArgs& a, const char* what);
// `s` evenly spread indices of [0, n) (all of them when n <= s).
std::vector<int64_t> sample_indices(int64_t n, int64_t s);

void run_grouped_gemm(const GemmArgs& a);  // cli_gemm_grouped.cpp

}  // namespace blockscale::tools
