// Throughput of blockscale's MX / NVFP4 GEMM (gemm/gemm.h with a block-scaled recipe pair; on Hopper
// the sm90a exact kernel) against its peers, timed in the same process on the same GPU. Operands
// are random codes and scales written on the device (E4M3 never NaN, E2M1 any, E8M0 scales in
// 2^[-4, 4], UE4M3 scales in [0.5, 8], NVFP4 S_dec = 1/2688), in quant/'s layouts. Peers:
//   - cuBLAS BF16 (cublasGemmEx, fp32 compute, bench_common.cuh's helper as gemm_bench uses it) on
//     bf16 operands of the same shape: the dequantized copies of our operands, i.e. the values our
//     kernel feeds its own bf16 tensor cores;
//   - dequantize + cuBLAS BF16, timed end to end: this file's dequantize kernels turn both operands
//     (codes x block scale [x S_dec for NVFP4], scales read in the swizzled layout) into K-major
//     bf16, then the same cuBLAS BF16 GEMM. What a user without a block-scaled GEMM would build for
//     operands quantized afresh each step (a cached bf16 weight would save B's dequantize).
// D is bf16 for all (alpha 1, beta 0). Times: median of --iters launches (CUDA events per launch,
// after warm-up). TFLOP/s = 2 M N K / time for all three. The small-M cases are reported, not
// claimed: they are latency bound, and with one event pair per launch their times can include host
// launch overheads (gemm::run's checks; three launches for the dequantize peer). Cross-check: our D
// against the dequantize + cuBLAS D (same codes): max |ours - peer| / max |peer| and the relative
// Frobenius difference. Both are fp32 sums rounded to bf16 (one bf16 ulp apart at most: max-rel
// up to 2^-7); the peer's NVFP4 inputs also round x * S_dec to bf16 (Frobenius ~3e-3, against
// ~5e-5 for MX, whose dequantized values are exact). Above 1e-2 the line says MISMATCH (this
// also checks the dequantize kernels).
//
// Usage: gemm_block_scaled_bench [--iters N] [--only I,J,...] [--recipes mxfp8.mxfp8,nvfp4.nvfp4,...]
// [--list]. Case indices are the same whatever --recipes selects. One line per case, then a
// markdown table (last).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/bench_common.cuh"     // defines: CHECK_CUDA, hash32, cublas_bf16_gemm
#include "formats/recipe.h"           // defines: Recipe, recipe_name
#include "formats/scalar_codecs.h"    // defines: decode_e8m0, decode_ue4m3
#include "formats/scale_layout.h"     // defines: swizzled_scale_offset, swizzled_scale_bytes
#include "gemm/gemm.h"

namespace {

namespace bf = blockscale::formats;
namespace bg = blockscale::gemm;
using bf::Recipe;
using bench::hash32;

constexpr float kNvfp4ScaleDec = 1.0f / 2688.0f;  // S_dec of a tensor with amax 1 (448 * 6 / amax)
constexpr double kMismatch = 1e-2;

// ---- Device buffers and random operands -----------------------------------------------------

// A cudaMalloc'd array freed at scope exit, so a skipped case frees what it allocated.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(int64_t count) {
    CHECK_CUDA(cudaMalloc(&ptr, static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T)));
  }
  ~DeviceBuffer() { CHECK_CUDA(cudaFree(ptr)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

enum class Fill { kE4M3, kE2M1Pair, kE8M0, kUE4M3 };

// Random bytes of one kind from a hash of (seed, index).
__global__ void fill_bytes(uint8_t* x, int64_t n, Fill kind, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(seed + static_cast<uint64_t>(i));
    uint8_t c = static_cast<uint8_t>(h);
    switch (kind) {
      case Fill::kE4M3:  // never NaN (S.1111.111 -> S.1111.110)
        if ((c & 0x7F) == 0x7F) c ^= 1;
        break;
      case Fill::kE2M1Pair:  // two nibbles; every E2M1 code is finite
        break;
      case Fill::kE8M0:  // 2^-4 .. 2^4
        c = static_cast<uint8_t>(123 + h % 9);
        break;
      case Fill::kUE4M3:  // 0x30 .. 0x50: 0.5 .. 8, positive normal
        c = static_cast<uint8_t>(0x30 + h % 33);
        break;
    }
    x[i] = c;
  }
}

bool is_e2m1(Recipe r) { return r == Recipe::kMxfp4 || r == Recipe::kNvfp4; }
int scale_block(Recipe r) { return r == Recipe::kNvfp4 ? 16 : 32; }

// One quantized K-major operand (rows x k) on the device, as quant/ writes it.
struct Operand {
  Recipe recipe;
  int64_t rows, k;
  DeviceBuffer<uint8_t> data;     // rows x k codes (E2M1: k / 2 bytes per row, low nibble first)
  DeviceBuffer<uint8_t> scales;   // swizzled 128x4 over rows x (k / block)
  DeviceBuffer<float> scale_dec;  // NVFP4's S_dec (allocated for every recipe, read only for NVFP4)

  Operand(Recipe r, int64_t rows_, int64_t k_, uint64_t seed)
      : recipe(r),
        rows(rows_),
        k(k_),
        data(data_bytes()),
        scales(scale_bytes()),
        scale_dec(1) {
    fill_bytes<<<1024, 256>>>(data.ptr, data_bytes(), is_e2m1(r) ? Fill::kE2M1Pair : Fill::kE4M3, seed);
    fill_bytes<<<256, 256>>>(scales.ptr, scale_bytes(), r == Recipe::kNvfp4 ? Fill::kUE4M3 : Fill::kE8M0,
                             seed + (1ull << 40));
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpy(scale_dec.ptr, &kNvfp4ScaleDec, sizeof(float), cudaMemcpyHostToDevice));
  }
  int64_t data_bytes() const { return is_e2m1(recipe) ? rows * k / 2 : rows * k; }
  int64_t scale_bytes() const { return bf::swizzled_scale_bytes(rows, k / scale_block(recipe)); }
  const float* scale_dec_or_null() const { return recipe == Recipe::kNvfp4 ? scale_dec.ptr : nullptr; }
};

// ---- The peer's dequantize kernels ------------------------------------------------------------

__device__ __forceinline__ uint32_t bf16x2_bits(float2 f) {
  const __nv_bfloat162 r = __float22bfloat162_rn(f);
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ __half2 half2_from_bits(uint32_t u) {
  __half2_raw raw;
  raw.x = static_cast<unsigned short>(u), raw.y = static_cast<unsigned short>(u >> 16);
  return __half2(raw);
}

// Two E4M3 codes (low byte first) times the E8M0 scale s, as two bf16 (low half first). The hardware
// E4M3 -> f16 conversion is exact, and so is the product with a power of two in fp32 and in bf16.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t codes, float s) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3));
  const float2 f = __half22float2(h);
  return bf16x2_bits(make_float2(f.x * s, f.y * s));
}

// One byte of two E2M1 codes (low nibble first) times scale s, as two bf16. The 3 magnitude bits
// placed at f16 bits 11..9 (exponent low 2 bits, mantissa top bit) read as f16 2^-14 times the E2M1
// value (code 1, 0.5, becomes the f16 subnormal 2^-15), so one exact multiply by 2^14 decodes both.
// Half arithmetic keeps subnormals, unlike fp32 under -ftz.
__device__ __forceinline__ uint32_t e2m1x2_to_bf16x2(uint32_t byte, float s) {
  const uint32_t bits = (byte & 0x7u) << 9 | (byte & 0x8u) << 12 | (byte & 0x70u) << 21 | (byte & 0x80u) << 24;
  const __half2 h = __hmul2(half2_from_bits(bits), half2_from_bits(0x74007400u));  // 2^14 in f16
  const float2 f = __half22float2(h);
  return bf16x2_bits(make_float2(f.x * s, f.y * s));
}

// A quantized operand (rows x k, K-major) to bf16 (rows x k, K-major), in chunks of 8 values (16
// bytes of bf16 from 4 bytes of E2M1 or 8 of E4M3 codes). A thread takes kDequantChunks chunks of a
// row kDequantThreads apart, so each of its loads and 16-byte stores is one contiguous span per
// warp (fully used sectors); it issues all its loads before converting. Block x covers
// kDequantThreads * kDequantChunks chunks of a row, block y a row (grid-stride over rows).
constexpr int kDequantThreads = 128;
constexpr int kDequantChunks = 4;

template <Recipe kRecipe>
__global__ void __launch_bounds__(kDequantThreads)
    dequantize_bf16(const uint8_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                    const float* __restrict__ scale_dec, int64_t rows, int64_t k, __nv_bfloat16* __restrict__ out) {
  constexpr bool kFp4 = kRecipe == Recipe::kMxfp4 || kRecipe == Recipe::kNvfp4;
  constexpr int kBlock = kRecipe == Recipe::kNvfp4 ? 16 : 32;
  using Codes = std::conditional_t<kFp4, uint32_t, uint2>;  // the 8 codes of a chunk
  const int64_t chunks = k / 8, scale_cols = k / kBlock, row_bytes = kFp4 ? k / 2 : k;
  const int64_t first = blockIdx.x * int64_t{kDequantThreads * kDequantChunks} + threadIdx.x;
  const float dec = kRecipe == Recipe::kNvfp4 ? __ldg(scale_dec) : 1.0f;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Codes* src = reinterpret_cast<const Codes*>(codes + row * row_bytes);
    Codes v[kDequantChunks] = {};
    float s[kDequantChunks] = {};
    for (int i = 0; i < kDequantChunks; ++i) {
      const int64_t c = first + i * kDequantThreads;
      if (c >= chunks) break;
      v[i] = __ldg(src + c);
      const uint8_t code = __ldg(scales + bf::swizzled_scale_offset(row, c * 8 / kBlock, scale_cols));
      s[i] = kRecipe == Recipe::kNvfp4 ? bf::decode_ue4m3(code) * dec : bf::decode_e8m0(code);
    }
    uint4* dst = reinterpret_cast<uint4*>(out + row * k);
    for (int i = 0; i < kDequantChunks; ++i) {
      const int64_t c = first + i * kDequantThreads;
      if (c >= chunks) break;
      if constexpr (kFp4) {
        dst[c] = make_uint4(e2m1x2_to_bf16x2(v[i], s[i]), e2m1x2_to_bf16x2(v[i] >> 8, s[i]),
                            e2m1x2_to_bf16x2(v[i] >> 16, s[i]), e2m1x2_to_bf16x2(v[i] >> 24, s[i]));
      } else {
        dst[c] = make_uint4(e4m3x2_to_bf16x2(v[i].x, s[i]), e4m3x2_to_bf16x2(v[i].x >> 16, s[i]),
                            e4m3x2_to_bf16x2(v[i].y, s[i]), e4m3x2_to_bf16x2(v[i].y >> 16, s[i]));
      }
    }
  }
}

template <Recipe kRecipe>
void launch_dequantize(const Operand& op, __nv_bfloat16* out) {
  const int64_t per_block = kDequantThreads * kDequantChunks;
  const dim3 grid(static_cast<unsigned>((op.k / 8 + per_block - 1) / per_block),
                  static_cast<unsigned>(std::min<int64_t>(op.rows, 65535)));
  dequantize_bf16<kRecipe><<<grid, kDequantThreads>>>(op.data.ptr, op.scales.ptr, op.scale_dec.ptr, op.rows, op.k, out);
}

// Launches only (asynchronous, default stream); launch errors surface at the caller's check.
void dequantize(const Operand& op, __nv_bfloat16* out) {
  switch (op.recipe) {
    case Recipe::kMxfp8E4M3:
      return launch_dequantize<Recipe::kMxfp8E4M3>(op, out);
    case Recipe::kMxfp4:
      return launch_dequantize<Recipe::kMxfp4>(op, out);
    case Recipe::kNvfp4:
      return launch_dequantize<Recipe::kNvfp4>(op, out);
    default:
      std::fprintf(stderr, "dequantize: recipe %s not supported by this benchmark\n", bf::recipe_name(op.recipe));
      std::exit(1);
  }
}

// ---- Cross-check ---------------------------------------------------------------------------------

// acc[0] = max |x - y|, acc[1] = max |y|, acc[2] = sum (x - y)^2, acc[3] = sum y^2 (acc zeroed by
// the caller). Maxima go through atomicMax on the bits: non-negative doubles order as integers. A
// non-finite x or y counts as an infinite difference (an unwritten, NaN-poisoned output shows).
__global__ void compare_bf16(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* acc) {
  double max_diff = 0, max_y = 0, diff2 = 0, y2 = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
    const double d = isfinite(a) && isfinite(b) ? fabs(a - b) : INFINITY;
    max_diff = fmax(max_diff, d), max_y = isfinite(b) ? fmax(max_y, fabs(b)) : max_y;
    diff2 += d * d, y2 += isfinite(b) ? b * b : 0.0;
  }
  for (int off = 16; off > 0; off /= 2) {
    max_diff = fmax(max_diff, __shfl_down_sync(0xFFFFFFFFu, max_diff, off));
    max_y = fmax(max_y, __shfl_down_sync(0xFFFFFFFFu, max_y, off));
    diff2 += __shfl_down_sync(0xFFFFFFFFu, diff2, off);
    y2 += __shfl_down_sync(0xFFFFFFFFu, y2, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(reinterpret_cast<unsigned long long*>(&acc[0]), static_cast<unsigned long long>(__double_as_longlong(max_diff)));
    atomicMax(reinterpret_cast<unsigned long long*>(&acc[1]), static_cast<unsigned long long>(__double_as_longlong(max_y)));
    atomicAdd(&acc[2], diff2);
    atomicAdd(&acc[3], y2);
  }
}

// max |x - y| / max |y| and ||x - y|| / ||y|| over two device bf16 matrices of n elements.
void compare(const __nv_bfloat16* x, const __nv_bfloat16* y, int64_t n, double* max_rel, double* frob_rel) {
  DeviceBuffer<double> acc(4);
  CHECK_CUDA(cudaMemset(acc.ptr, 0, 4 * sizeof(double)));
  compare_bf16<<<1024, 256>>>(x, y, n, acc.ptr);
  CHECK_CUDA(cudaGetLastError());
  double h[4];
  CHECK_CUDA(cudaMemcpy(h, acc.ptr, sizeof h, cudaMemcpyDeviceToHost));
  *max_rel = h[0] / h[1];
  *frob_rel = std::sqrt(h[2] / h[3]);
}

// ---- Cases ---------------------------------------------------------------------------------------

struct RecipePair {
  Recipe a, b;
};

std::string pair_name(const RecipePair& r) { return std::string(bf::recipe_name(r.a)) + "." + bf::recipe_name(r.b); }

std::vector<RecipePair> all_pairs() {
  return {{Recipe::kMxfp8E4M3, Recipe::kMxfp8E4M3},
          {Recipe::kNvfp4, Recipe::kNvfp4},
          {Recipe::kMxfp8E4M3, Recipe::kNvfp4},
          {Recipe::kMxfp8E4M3, Recipe::kMxfp4}};
}

struct Case {
  int index;
  const char* kind;  // "square", "train", "small M" (report only)
  int64_t m, n, k;
  RecipePair recipes;
};

std::string label(const Case& c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %s", static_cast<long long>(c.m), static_cast<long long>(c.n),
                static_cast<long long>(c.k), pair_name(c.recipes).c_str());
  return buf;
}

// Shape-major: each shape's recipe pairs are adjacent, so the lines compare recipes at a shape.
std::vector<Case> all_cases() {
  struct Shape {
    const char* kind;
    int64_t m, n, k;
  };
  const Shape shapes[] = {{"square", 8192, 8192, 8192},   {"train", 16384, 4096, 4096},
                          {"train", 16384, 14336, 4096},  {"train", 16384, 4096, 14336},
                          {"small M", 128, 4096, 4096},   {"small M", 512, 4096, 4096},
                          {"small M", 2048, 4096, 4096}};
  std::vector<Case> cases;
  for (const Shape& s : shapes)
    for (const RecipePair& r : all_pairs())
      cases.push_back({static_cast<int>(cases.size()), s.kind, s.m, s.n, s.k, r});
  return cases;
}

// TFLOP/s of each (0: failed, the case's line says why), the cross-check, and the dequantize alone.
struct Row {
  Case c;
  double ours = 0, bf16 = 0, peer = 0;
  double max_rel = NAN, frob_rel = NAN;
  double dequant_ms = 0, dequant_gbs = 0;
};

double ratio(double x, double y) { return y > 0 ? x / y : 0.0; }

// Runs and times one case; false (after saying why) when blockscale's GEMM refuses it.
bool run_case(const Case& c, int iters, cublasHandle_t blas, Row* row) {
  row->c = c;
  const std::string name = label(c);
  const double flop = 2.0 * c.m * c.n * c.k;
  const Operand a(c.recipes.a, c.m, c.k, static_cast<uint64_t>(2 * c.index + 1) << 44);
  const Operand b(c.recipes.b, c.n, c.k, static_cast<uint64_t>(2 * c.index + 2) << 44);
  DeviceBuffer<__nv_bfloat16> d_ours(c.m * c.n), d_peer(c.m * c.n);

  // 1. Ours.
  bg::GemmProblem p;
  p.m = c.m, p.n = c.n, p.k = c.k;
  p.a_recipe = c.recipes.a, p.b_recipe = c.recipes.b;
  p.d_type = bg::MatrixType::kBf16, p.ldd = c.n;
  p.alpha = 1.0f, p.beta = 0.0f;
  bg::GemmArguments args;
  args.a_data = a.data.ptr, args.a_scales = a.scales.ptr, args.a_scale_dec = a.scale_dec_or_null();
  args.b_data = b.data.ptr, args.b_scales = b.scales.ptr, args.b_scale_dec = b.scale_dec_or_null();
  args.d = d_ours.ptr;
  const size_t ws_bytes = bg::workspace_size(p);
  DeviceBuffer<uint8_t> ws(static_cast<int64_t>(ws_bytes));
  CHECK_CUDA(cudaMemset(d_ours.ptr, 0xFF, static_cast<size_t>(c.m * c.n) * 2));  // NaN: unwritten shows
  const blockscale::Status s = bg::run(p, args, ws.ptr, ws_bytes, nullptr);
  if (!s.is_ok()) {
    std::printf("case %d %s: blockscale gemm: %s (case skipped)\n", c.index, name.c_str(), s.message().c_str());
    std::fflush(stdout);
    return false;
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  row->ours = flop / (bench::median_ms([&] { (void)bg::run(p, args, ws.ptr, ws_bytes, nullptr); }, iters) * 1e9);

  // 3. Dequantize + cuBLAS BF16, first once for the cross-check.
  DeviceBuffer<__nv_bfloat16> a16(c.m * c.k), b16(c.n * c.k);
  const auto dequant_both = [&] {
    dequantize(a, a16.ptr);
    dequantize(b, b16.ptr);
  };
  const auto peer = [&] {
    dequant_both();
    return bench::cublas_bf16_gemm(blas, c.m, c.n, c.k, a16.ptr, b16.ptr, d_peer.ptr);
  };
  CHECK_CUDA(cudaMemset(d_peer.ptr, 0xFF, static_cast<size_t>(c.m * c.n) * 2));
  const cublasStatus_t peer_status = peer();
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  if (peer_status != CUBLAS_STATUS_SUCCESS) {
    std::printf("case %d %s: cuBLAS BF16 failed: %s\n", c.index, name.c_str(), cublasGetStatusString(peer_status));
  } else {
    compare(d_ours.ptr, d_peer.ptr, c.m * c.n, &row->max_rel, &row->frob_rel);
    row->peer = flop / (bench::median_ms([&] { (void)peer(); }, iters) * 1e9);
    // 2. cuBLAS BF16 alone, on the dequantized operands.
    row->bf16 = flop / (bench::median_ms([&] { (void)bench::cublas_bf16_gemm(blas, c.m, c.n, c.k, a16.ptr, b16.ptr, d_peer.ptr); },
                                  iters) * 1e9);
  }
  // The dequantize alone: its share of the peer, and its bandwidth (codes + scales in, bf16 out).
  row->dequant_ms = bench::median_ms(dequant_both, iters);
  CHECK_CUDA(cudaGetLastError());
  const double bytes = static_cast<double>(a.data_bytes() + a.scale_bytes() + b.data_bytes() + b.scale_bytes()) +
                       2.0 * (c.m + c.n) * c.k;
  row->dequant_gbs = bytes / (row->dequant_ms * 1e6);

  const bool bad = !(row->max_rel <= kMismatch && row->frob_rel <= kMismatch);
  std::printf("case %2d %-34s ours %7.1f  cublas-bf16 %7.1f  dequant+cublas %7.1f TFLOP/s  ours/bf16 %.3f"
              "  ours/(deq+bf16) %.3f  dequant %.3f ms %5.0f GB/s  vs-peer max-rel %.2e frob-rel %.2e%s\n",
              c.index, name.c_str(), row->ours, row->bf16, row->peer, ratio(row->ours, row->bf16),
              ratio(row->ours, row->peer), row->dequant_ms, row->dequant_gbs, row->max_rel, row->frob_rel,
              bad ? "  MISMATCH" : "");
  std::fflush(stdout);
  return true;
}

bool parse_pairs(const char* list, std::vector<std::string>* out) {
  std::vector<std::string> known;
  for (const RecipePair& r : all_pairs()) known.push_back(pair_name(r));
  std::string s = list;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string name = s.substr(pos, comma - pos);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string all;
      for (const std::string& k : known) all += (all.empty() ? "" : ", ") + k;
      std::fprintf(stderr, "--recipes: unknown pair '%s' (known: %s)\n", name.c_str(), all.c_str());
      return false;
    }
    out->push_back(name);
    pos = comma + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::vector<int> only;
  std::vector<std::string> pairs;  // empty: all
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::max(3, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) only.push_back(std::atoi(t));
    } else if (!std::strcmp(argv[i], "--recipes") && i + 1 < argc) {
      if (!parse_pairs(argv[++i], &pairs)) return 2;
    } else if (!std::strcmp(argv[i], "--list")) {
      list = true;
    } else {
      std::fprintf(stderr,
                   "usage: gemm_block_scaled_bench [--iters N] [--only I,J,...] "
                   "[--recipes mxfp8.mxfp8,nvfp4.nvfp4,mxfp8.nvfp4,mxfp8.mxfp4] [--list]\n");
      return 2;
    }
  }
  std::vector<Case> cases;
  for (const Case& c : all_cases()) {
    const bool pair_ok = pairs.empty() || std::find(pairs.begin(), pairs.end(), pair_name(c.recipes)) != pairs.end();
    const bool index_ok = only.empty() || std::find(only.begin(), only.end(), c.index) != only.end();
    if (pair_ok && index_ok) cases.push_back(c);
  }
  if (list) {
    for (const Case& c : cases) std::printf("%d %s (%s)\n", c.index, label(c).c_str(), c.kind);
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs), cuBLAS %d, iters %d\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, CUBLAS_VERSION, iters);
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  std::vector<Row> rows;
  int skipped = 0;
  for (const Case& c : cases) {
    Row row;
    if (run_case(c, iters, blas, &row)) {
      rows.push_back(row);
    } else {
      ++skipped;
    }
  }
  cublasDestroy(blas);
  if (skipped) std::printf("%d case(s) skipped: blockscale gemm refused them (lines above)\n", skipped);

  // TFLOP/s 0.0 and ratio 0.000: that peer failed (its line above says why). Small M: report only.
  std::printf("\n| case | recipes | M | N | K | ours TFLOP/s | cuBLAS BF16 TFLOP/s | dequant+cuBLAS TFLOP/s |"
              " ours/BF16 | ours/(deq+BF16) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %d %s | %s | %lld | %lld | %lld | %.1f | %.1f | %.1f | %.3f | %.3f |\n", r.c.index, r.c.kind,
                pair_name(r.c.recipes).c_str(), static_cast<long long>(r.c.m), static_cast<long long>(r.c.n),
                static_cast<long long>(r.c.k), r.ours, r.bf16, r.peer, ratio(r.ours, r.bf16), ratio(r.ours, r.peer));
  return 0;
}
