// The accuracy study: how much each recipe loses on a tensor, and on a GEMM of two tensors,
// measured through formats/ (the emulator is the one reference; nothing here re-implements it).
//
//   defines: TensorSource (a tensor read in chunks), StudyInput (a tensor to open), the synthetic
//            suite, open_study_files, StudyConfig / study_configs, quantize_in_chunks,
//            RecipeError / measure_recipe_error, GemmError / measure_gemm, gemm_pairs, run_study
//
// Memory: a tensor is never converted to fp32 whole. measure_recipe_error reads it in chunks of
// at most kStudyChunkElements elements (rows and columns cut at multiples of the recipe's block,
// so no block is split) and accumulates the metrics; NVFP4's tensor amax comes from a first
// streamed pass and is passed on as options.tensor_amax, which gives the same bytes as quantizing
// the whole tensor at once. GEMM operands are the exception: they are loaded whole (fp32 plus
// fp64 copies and the M x N products).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "formats/quantize.h"
#include "formats/status.h"

namespace blockscale::study {

// The largest chunk measure_recipe_error converts at once (fp32 values plus their quantized and
// dequantized copies: about 10 bytes an element, per worker thread).
inline constexpr int64_t kStudyChunkElements = int64_t{1} << 20;

// A tensor as the study reads it: its 2D view rows x cols ([prod(shape[:-1]), shape[-1]]).
struct TensorSource {
  using ReadFn = std::function<Status(int64_t row0, int64_t nrows, int64_t col0, int64_t ncols,
                                      float* out)>;
  std::string name;
  std::vector<int64_t> shape;  // as stored
  std::string dtype;           // safetensors dtype name, e.g. "BF16"
  int64_t rows = 0;
  int64_t cols = 0;
  // Writes rows [row0, row0 + nrows) x cols [col0, col0 + ncols) widened to fp32 into `out`
  // (row stride ncols). Safe to call from several threads at once.
  ReadFn read;
};

// fp32 values held in memory (shared, so copies of the source are cheap).
TensorSource memory_source(std::string name, std::vector<int64_t> shape, int64_t rows, int64_t cols,
                           std::vector<float> values);

// A tensor to study, opened when its turn comes (a synthetic one is generated then and freed
// after): `open` makes its source.
struct StudyInput {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  std::function<Status(TensorSource*)> open;
};

// A tensor left out of the study, with the reason (printed as a warning, kept in the JSON).
struct Skipped {
  std::string name;
  std::string reason;
};

// The built-in suite: one transformer layer at hidden size `hidden` (a multiple of 16 in
// [16, 65536]):
// ffn = 2.75 * hidden rounded to a multiple of 256, tokens = hidden / 2. Deterministic for a seed.
//   attn.qkv.weight [3H, H]     Gaussian, std 0.02
//   mlp.up.weight   [ffn, H]    Gaussian, std 0.02
//   mlp.input       [tokens, H] Gaussian activations with 8 outlier channels 60-150x
//   attn.output     [tokens, H] heavy-tailed: Student-t with 3 degrees of freedom
//   mlp.down.grad   [tokens, ffn] gradients ~1e-6 whose per-row scale spans 6 decades
Status synthetic_suite(int64_t hidden, uint64_t seed, std::vector<StudyInput>* out);
// The suite's GEMM pairs (activation x weight): mlp.input x mlp.up.weight.
std::vector<std::pair<std::string, std::string>> synthetic_gemms();

// Opens .npy (one tensor, "x") and .safetensors files (memory-mapped; every floating-point
// tensor). With two or more files every name is prefixed "STEM/" (the file name without its
// extension). Integer tensors and those without a 2D view (rank 0, empty) go to `skipped`.
// Errors name `flag` and the file.
Status open_study_files(const std::vector<std::string>& paths, const std::string& flag,
                        std::vector<StudyInput>* out, std::vector<Skipped>* skipped);

// One column of the study: a recipe with its options, e.g. "mxfp8" or "mxfp8/floor".
struct StudyConfig {
  std::string label;
  formats::QuantizeOptions options;
};

// Every recipe in `recipes` (all_formats() order kept); MX recipes once per rounding asked for
// (`mx`: kCeil, kFloor or kBoth).
std::vector<StudyConfig> study_configs(const std::vector<formats::Format>& recipes, formats::ScaleRounding mx);

// The error of one tensor under one config (rowwise quantization, blocks along the last dim).
// Non-finite inputs are counted and excluded, together with the finite elements that share a
// block with one (such a block dequantizes to NaN by the non-finite policy): `excluded` counts
// both. Shares are fractions in [0, 1]. With every element excluded, the metrics are NaN.
struct RecipeError {
  int64_t elements = 0;   // rows x cols
  int64_t nonfinite = 0;  // NaN or +-Inf inputs
  int64_t excluded = 0;   // elements left out of every metric (nonfinite included)
  double sqnr_db = 0;        // 10 log10(sum x^2 / sum (x - deq)^2); +inf when exact
  double rel_fro_error = 0;  // ||x - deq||_F / ||x||_F
  double max_abs_error = 0;  // max |x - deq|
  double max_rel_error = 0;  // max |x - deq| / |x| over nonzero x (a flushed element: 1)
  double saturated = 0;      // measured elements clipped to the largest element code
  double flushed = 0;        // nonzero inputs dequantized to 0, of the nonzero inputs
  // Blocks holding a nonzero finite element whose scale code sits at the bottom / top of the
  // scale format: E8M0 0x00 (2^-127) / 0xFE (2^127); UE4M3 0x00 or 0x01 (zero or 2^-9) / 0x7E
  // (448). FP8 blockwise (fp32 scales) has no such limit: scale_limits is false there.
  bool scale_limits = false;
  int64_t blocks = 0;  // blocks the two shares below are taken over
  double scale_at_min = 0;
  double scale_at_max = 0;
};

// Quantizes `source` rowwise with `options` chunk by chunk, calling fn for each chunk with its
// position, its values (rows x cols of q, contiguous), its quantized copy and q's dequantization.
// Chunks hold whole blocks, so together they hold exactly the bytes of one quantize() of the
// whole tensor (NVFP4: with the tensor amax of a first pass). Refuses the options that depend on
// an element's place in the whole tensor (stochastic rounding, the Hadamard transform).
using ChunkFn = std::function<Status(int64_t row0, int64_t col0, const float* x,
                                     const formats::QuantizedMatrix& q, const std::vector<float>& deq)>;
Status quantize_in_chunks(const TensorSource& source, const formats::QuantizeOptions& options,
                          int64_t chunk_elements, const ChunkFn& fn);

// quantize_in_chunks, accumulating the metrics of RecipeError.
Status measure_recipe_error(const TensorSource& source, const formats::QuantizeOptions& options,
                            RecipeError* out, int64_t chunk_elements = kStudyChunkElements);

// The error of a block-scaled GEMM: A [M, K] and B [N, K] both quantized rowwise (blocks along K)
// with the same options; Q = deq(A) deq(B)^T against E = A B^T, both in fp64 (dequantize_exact).
struct GemmError {
  double rel_fro_error = 0;  // ||Q - E||_F / ||E||_F
  double sqnr_db = 0;        // -20 log10(rel_fro_error)
  double max_abs_error = 0;  // max |Q - E|
};

// E = A B^T in fp64 for a pair, computed once for all configs.
struct GemmReference {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> a, b;  // the operands, row-major
  std::vector<double> e;    // m x n
  double e_fro = 0;         // ||E||_F
  double e_max_abs = 0;     // max |E|
};
Status gemm_reference(std::vector<float> a, int64_t m, std::vector<float> b, int64_t n, int64_t k,
                      GemmReference* out);
Status measure_gemm(const GemmReference& ref, const formats::QuantizeOptions& options,
                    GemmError* out);

struct StudyOptions {
  std::vector<StudyConfig> configs;
  std::vector<std::pair<std::string, std::string>> gemms;  // tensor names, A:B
  int threads = 0;                 // worker threads over configs; 0: the hardware's count
  FILE* progress = nullptr;        // one line per tensor and GEMM, or none
  int64_t chunk_elements = kStudyChunkElements;
};

struct TensorResult {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t rows = 0, cols = 0;
  std::vector<RecipeError> errors;  // one per config, in StudyOptions::configs order
};

struct GemmResult {
  std::string a, b;
  int64_t m = 0, n = 0, k = 0;
  double e_max_abs = 0;           // max |A B^T|, to read max_abs_error against
  std::vector<GemmError> errors;  // one per config
};

struct StudyResult {
  std::vector<StudyConfig> configs;
  std::vector<TensorResult> tensors;
  std::vector<GemmResult> gemms;
  std::vector<Skipped> skipped;  // GEMM pairs with non-finite operands; callers add their inputs'
  double seconds = 0;
};

// Resolves GEMM pairs to input indices: an error names a pair with an unknown tensor or with
// different K (the last dimensions). `out` may be null (just check).
Status gemm_pairs(const std::vector<StudyInput>& inputs,
                  const std::vector<std::pair<std::string, std::string>>& gemms,
                  std::vector<std::pair<size_t, size_t>>* out);

// Studies every input under every config, then every GEMM pair (names must be inputs; K must
// match). Results keep the inputs' order.
Status run_study(const std::vector<StudyInput>& inputs, const StudyOptions& options,
                 StudyResult* out);

}  // namespace blockscale::study
