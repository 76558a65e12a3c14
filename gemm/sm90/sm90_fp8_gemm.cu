// Host side of the sm_90a FP8 blockwise GEMM (sm90_fp8_gemm.cuh): tensor maps for the operands,
// scales and D, the epilogue (TMA stores where D allows, the threads' stores otherwise), the tile
// width, the persistent cluster grid sized by the device's occupancy, the launch; dense,
// M-grouped or K-grouped. Compiled for sm_90a only (gemm/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "formats/scale_layout.h"
#include "gemm/common/tensor_map.h"
#include "gemm/launchers.h"
#include "gemm/sm90/sm90_fp8_gemm.cuh"

namespace blockscale::gemm::detail {
namespace {

using formats::Format;
using sm90::Fp8GemmConfig;
using sm90::Fp8GemmParams;

std::atomic<Sm90Fp8Tile> g_tile{Sm90Fp8Tile::kAuto};

// Whether TMA writes D: 16-byte aligned D, rows and N 16-byte multiples (TMA writes the innermost
// dimension in 16-byte units: a row end inside one would be overwritten past N; measured with
// n = 127 and fp32 D), and C not read, or read only as the fp32 D it accumulates into (beta 1,
// in place: TMA reduce-add). Otherwise the threads write D from registers.
bool tma_stores_d(const GemmProblem& p, const GemmArguments& args) {
  const int64_t d_elem = static_cast<int64_t>(formats::dtype_size(p.d_type));
  const bool d_tma = reinterpret_cast<uintptr_t>(args.d) % 16 == 0 && (p.ldd * d_elem) % 16 == 0 &&
                     (p.n * d_elem) % 16 == 0;
  const bool accumulate_in_place = p.beta == 1.0f && p.d_type == formats::DType::kF32 &&
                                   p.c_type == formats::DType::kF32 && args.c == args.d && p.ldc == p.ldd;
  return d_tma && (p.beta == 0.0f || accumulate_in_place);
}

template <int kTileN, bool kBScalePerRow, int kCluster, GroupMode kMode = GroupMode::kDense, int kTileM = 128,
          bool kDirect = false>
const void* kernel_symbol() {
  return reinterpret_cast<const void*>(&sm90::sm90_fp8_gemm_kernel<kTileN, kBScalePerRow, kCluster, kMode, kTileM, kDirect>);
}

template <int kTileN, bool kBScalePerRow, int kCluster, GroupMode kMode = GroupMode::kDense, int kTileM = 128,
          bool kDirect = false>
Status prepare(int* sm_count) {
  using Cfg = Fp8GemmConfig<kTileN, kBScalePerRow, kCluster, kMode, kTileM>;
  return prepare_kernel(kernel_symbol<kTileN, kBScalePerRow, kCluster, kMode, kTileM, kDirect>(), Cfg::kSmemBytes,
                        "sm90_fp8_gemm_kernel", sm_count);
}

// How many clusters of the kernel the device holds at once (the persistent grid's size): a GPC
// whose SM count is odd leaves an SM idle, so this is not sm_count / kCluster in general. Asked
// once per (kernel, device).
Status max_active_clusters(const void* kernel, const cudaLaunchConfig_t& config, int* clusters) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> known;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find({kernel, dev});
  if (it != known.end()) {
    *clusters = it->second;
    return Status::ok();
  }
  int n = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveClusters(&n, kernel, &config),
                                 "cudaOccupancyMaxActiveClusters(sm90_fp8_gemm_kernel)"));
  if (n <= 0) return Status::error("sm90_fp8_gemm_kernel: the device holds no cluster of this kernel");
  known[{kernel, dev}] = n;
  *clusters = n;
  return Status::ok();
}

template <int kTileN, bool kBScalePerRow, int kCluster, GroupMode kMode = GroupMode::kDense, int kTileM = 128,
          bool kDirect = false>
Status launch(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream, const Grouping* grouping) {
  using Cfg = Fp8GemmConfig<kTileN, kBScalePerRow, kCluster, kMode, kTileM>;
  constexpr bool kMGrouped = kMode == GroupMode::kM;
  constexpr bool kKGrouped = kMode == GroupMode::kK;
  int sm_count = 0;
  BS_RETURN_IF_ERROR((prepare<kTileN, kBScalePerRow, kCluster, kMode, kTileM, kDirect>(&sm_count)));
  const int64_t b_rows = kMGrouped ? p.n * grouping->num_groups : p.n;  // every expert's B, back to back
  const int64_t k_blocks = p.k / 128;
  // Operand tiles: each CTA's rows of A and B (a share of the one its cluster shares) x 128 bytes of K,
  // 128-byte swizzle (the wgmma K-major layout). Rows past M or N arrive as zeros.
  TensorMap2d a{args.a_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kAShareRows, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  TensorMap2d b{args.b_data, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<uint64_t>(b_rows), static_cast<uint64_t>(p.k),
                static_cast<uint64_t>(p.k), Cfg::kBShareRows, Cfg::kTileK, CU_TENSOR_MAP_SWIZZLE_128B};
  // VEC128 scales: k_blocks rows of round_up(rows, 4) floats; a box is one K block's scales of
  // a wave's 128 rows (A) or the tile's columns (1x128 B).
  const int64_t a_scale_ld = formats::vec128_scale_ld(p.m);
  TensorMap2d a_scale{args.a_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
                      static_cast<uint64_t>(a_scale_ld), static_cast<uint64_t>(a_scale_ld * 4), 1, Cfg::kScaleABoxFloats,
                      CU_TENSOR_MAP_SWIZZLE_NONE};
  // B scales: 1x128 as A's (a box of the tile's columns); 128x128 (BLK128x128: ceil(n / 128)
  // rows per expert of k_blocks floats, rows padded to 4 floats, experts back to back) in boxes of
  // 2 column blocks x 4 K blocks (TMA's smallest row: 16 bytes).
  TensorMap2d b_scale;
  if (kBScalePerRow) {
    const int64_t b_scale_ld = formats::vec128_scale_ld(p.n);
    b_scale = {args.b_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(k_blocks),
               static_cast<uint64_t>(b_scale_ld), static_cast<uint64_t>(b_scale_ld * 4), 1, kTileN,
               CU_TENSOR_MAP_SWIZZLE_NONE};
  } else {
    const int64_t rows = (p.n + 127) / 128 * (kMGrouped ? grouping->num_groups : 1);
    if (kMGrouped && grouping->b_scale_stride_bytes != formats::blk128_scale_floats((p.n + 127) / 128, k_blocks) * 4)
      return Status::error("sm90_fp8_gemm: the experts' B scales must lie back to back (internal)");
    b_scale = {args.b_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, static_cast<uint64_t>(rows), static_cast<uint64_t>(k_blocks),
               static_cast<uint64_t>(formats::blk128_scale_ld(k_blocks) * 4), 2, 4, CU_TENSOR_MAP_SWIZZLE_NONE};
  }
  // D in boxes of 64 rows x 128 bytes (64 bf16 or 32 fp32 columns), 128-byte swizzled.
  const bool d_bf16 = p.d_type == formats::DType::kBf16;
  const int64_t d_elem = d_bf16 ? 2 : 4;
  // K-grouped: a 3-D view (columns, rows of one expert, experts), so TMA clips each box at its
  // expert's last row as well as at N.
  const auto d_type = d_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  TensorMap2d d{args.d, d_type, static_cast<uint64_t>(p.m), static_cast<uint64_t>(p.n),
                static_cast<uint64_t>(p.ldd * d_elem), 64, static_cast<uint32_t>(128 / d_elem), CU_TENSOR_MAP_SWIZZLE_128B};
  CUtensorMap a_map, b_map, a_scale_map, b_scale_map, d_map;
  const bool direct = !tma_stores_d(p, args);
  if (direct != kDirect) return Status::error("sm90_fp8_gemm: the epilogue instantiation does not match D (internal)");
  if (direct) {
    d_map = CUtensorMap{};  // unused: the threads write D
  } else if (kKGrouped) {
    TensorMap3d d3{args.d,
                   d_type,
                   {static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.m), static_cast<uint64_t>(grouping->num_groups)},
                   {static_cast<uint64_t>(p.ldd * d_elem), static_cast<uint64_t>(p.m * p.ldd * d_elem)},
                   {static_cast<uint32_t>(128 / d_elem), 64, 1},
                   CU_TENSOR_MAP_SWIZZLE_128B};
    BS_RETURN_IF_ERROR(encode_tensor_map(d3, "d", &d_map));
  } else {
    BS_RETURN_IF_ERROR(encode_tensor_map(d, "d", &d_map));
  }
  BS_RETURN_IF_ERROR(encode_tensor_map(a, "a_data", &a_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b, "b_data", &b_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(a_scale, "a_scales", &a_scale_map));
  BS_RETURN_IF_ERROR(encode_tensor_map(b_scale, "b_scales", &b_scale_map));

  Fp8GemmParams params;
  params.m = static_cast<int32_t>(p.m);
  params.n = static_cast<int32_t>(p.n);
  params.k_blocks = static_cast<int32_t>(k_blocks);
  const int64_t tiles_m = (p.m + Cfg::kTileM - 1) / Cfg::kTileM;
  const int64_t tiles_n = (p.n + kTileN - 1) / kTileN;
  // Cluster tiles: kCluster tiles stacked (sharing B) or side by side (sharing A).
  constexpr bool kShareA = Cfg::kShareA;
  params.order.tiles_m = static_cast<int32_t>(kShareA ? tiles_m : (tiles_m + kCluster - 1) / kCluster);
  params.order.tiles_n = static_cast<int32_t>(kShareA ? (tiles_n + kCluster - 1) / kCluster : tiles_n);
  params.order.group_m = 16 / kCluster;  // bands of 16 tile rows (8 and 32 measured the same)
  params.b_scale_blocks = static_cast<int32_t>((p.n + 127) / 128);
  params.alpha = p.alpha;
  params.d_bf16 = d_bf16;
  params.accumulate = !direct && p.beta != 0.0f;  // tma_stores_d: beta 1 in place
  params.epilogue = sm90::make_epilogue(p, args);
  params.d = args.d;
  params.ldd = p.ldd;
  params.k_limit = static_cast<int32_t>(p.k);
  if (kMode != GroupMode::kDense) params.groups = {grouping->group_ends, grouping->num_groups};

  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = kCluster, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kSmemBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  config.gridDim = dim3(static_cast<unsigned>(kCluster * std::max(1, sm_count / kCluster)));
  int clusters = 0;
  BS_RETURN_IF_ERROR(
      max_active_clusters(kernel_symbol<kTileN, kBScalePerRow, kCluster, kMode, kTileM, kDirect>(), config, &clusters));
  // M-grouped: the tile count lives on the device, so one CTA per SM (the extra ones exit at once).
  const int64_t units = kMGrouped   ? int64_t{clusters}
                       : kKGrouped ? int64_t{grouping->num_groups} * params.order.num_tiles()
                                   : int64_t{params.order.num_tiles()};
  config.gridDim = dim3(static_cast<unsigned>(kCluster * std::max<int64_t>(1, std::min<int64_t>(units, clusters))));
  return cuda_status(cudaLaunchKernelEx(&config, sm90::sm90_fp8_gemm_kernel<kTileN, kBScalePerRow, kCluster, kMode, kTileM, kDirect>, a_map,
                                        b_map, a_scale_map, b_scale_map, d_map, params),
                     "sm90_fp8_gemm_kernel launch");
}

// Clusters of 128-row tiles pair tile rows (sharing B): a single row of tiles would leave half of
// every cluster idle. The grouped modes' 128-row tiles run without (sm90_fp8_gemm.cuh; M-grouped
// 256-row tiles pair columns instead: launch_tall).
int cluster_size(const GemmProblem& p, const Grouping* grouping) { return grouping == nullptr && p.m > 128 ? 2 : 1; }

template <int kTileN, bool kBScalePerRow>
Status launch_width(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream, const Grouping* grouping) {
  if constexpr (kBScalePerRow) {
    if (grouping != nullptr) return launch<kTileN, true, 1, GroupMode::kK>(p, args, stream, grouping);
  } else {
    if (grouping != nullptr) return launch<kTileN, false, 1, GroupMode::kM>(p, args, stream, grouping);
  }
  return cluster_size(p, grouping) == 2 ? launch<kTileN, kBScalePerRow, 2>(p, args, stream, nullptr)
                                             : launch<kTileN, kBScalePerRow, 1>(p, args, stream, nullptr);
}

// D that TMA cannot write, or C read other than as the fp32 D accumulated into (tma_stores_d): the
// threads write D from registers, on the 128 x 128 tile (the direct epilogue's only instantiations).
Status launch_direct(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream, const Grouping* grouping,
                     bool b_scale_per_row) {
  if (grouping != nullptr)
    return b_scale_per_row ? launch<128, true, 1, GroupMode::kK, 128, true>(p, args, stream, grouping)
                           : launch<128, false, 1, GroupMode::kM, 128, true>(p, args, stream, grouping);
  const bool pair = cluster_size(p, grouping) == 2;
  if (b_scale_per_row)
    return pair ? launch<128, true, 2, GroupMode::kDense, 128, true>(p, args, stream, nullptr)
                : launch<128, true, 1, GroupMode::kDense, 128, true>(p, args, stream, nullptr);
  return pair ? launch<128, false, 2, GroupMode::kDense, 128, true>(p, args, stream, nullptr)
              : launch<128, false, 1, GroupMode::kDense, 128, true>(p, args, stream, nullptr);
}

// 256 x 128 tiles (Fp8GemmConfig), every mode: K-grouped in CTAs of their own. Dense clusters
// pair tiles side by side and share A, twice B's bytes (2-6% faster than sharing B). M-grouped
// pairs them too (`pair`) where experts average kPairedExpertRows rows or more: sharing A measured
// 3% faster on 4096-row experts, up to 8% slower on the training shapes' 1024-row experts.
constexpr int64_t kPairedExpertRows = 4096;
Status launch_tall(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream, const Grouping* grouping,
                   bool pair, bool b_scale_per_row) {
  if (grouping != nullptr && grouping->mode == GroupMode::kK)
    return launch<128, true, 1, GroupMode::kK, 256>(p, args, stream, grouping);
  if (grouping != nullptr)
    return pair ? launch<128, false, 2, GroupMode::kM, 256>(p, args, stream, grouping)
                : launch<128, false, 1, GroupMode::kM, 256>(p, args, stream, grouping);
  if (b_scale_per_row)
    return p.n > 128 ? launch<128, true, 2, GroupMode::kDense, 256>(p, args, stream, nullptr)
                     : launch<128, true, 1, GroupMode::kDense, 256>(p, args, stream, nullptr);
  return p.n > 128 ? launch<128, false, 2, GroupMode::kDense, 256>(p, args, stream, nullptr)
                   : launch<128, false, 1, GroupMode::kDense, 256>(p, args, stream, nullptr);
}

// The tile with the smaller modelled time: waves of cluster units (the persistent grid runs
// ceil(units / clusters) rounds) times a unit's cost in 128 x 128 tiles, the work over the rate
// measured against 128 x 128 at large shapes on the H200: 1.375 for 128 x 192; for 256 x 128
// kTallCost with 128x128 B, kTallWgradCost with 1x128 B (its promotion multiplies by a scale per
// column, so the taller tile saves less). No autotuning at run time.
// M-grouped: the rows of all experts as one problem (per-expert rows are on the device; a
// half-empty last tile per expert in the model picked 128 x 192 where 256 x 128 measured 7% faster,
// 32 experts of 512 rows); K-grouped: every expert's m x n output. Accumulating over a short K:
// kShortAccumulateK.
constexpr double kWideCost = 1.375;
constexpr double kTallCost = 1.75;
constexpr double kTallWgradCost = 1.9;
// At or below this K per tile (K-grouped: per expert, on average), accumulating problems take
// 128 x 128: 3% faster at 28672 x 4096 x 1024 and 4096 x 14336 x 1024 on the H200 (than 128 x 192,
// and than 256 x 128), 1-4% on K-grouped experts of 1024 tokens; from 2048 on 128 x 192 wins (5-15%).
constexpr int64_t kShortAccumulateK = 1024;
Sm90Fp8Tile pick_tile(const GemmProblem& p, const Grouping* grouping, int sm_count) {
  const int64_t experts = grouping != nullptr && grouping->mode == GroupMode::kK ? grouping->num_groups : 1;
  // D += the product over a short K loop (a step's expert wgrad): a wider or taller tile's larger
  // reduce-add epilogue is not hidden behind its few K blocks.
  if (p.beta != 0.0f && p.k <= kShortAccumulateK * experts) return Sm90Fp8Tile::kN128;
  // cluster_m x cluster_n tiles per unit.
  const auto waves = [&](int64_t tile_m, int64_t tile_n, int64_t cluster_m, int64_t cluster_n) {
    const int64_t clusters = std::max<int64_t>(1, sm_count / (cluster_m * cluster_n));
    const int64_t units = experts * (((p.m + tile_m - 1) / tile_m + cluster_m - 1) / cluster_m) *
                          (((p.n + tile_n - 1) / tile_n + cluster_n - 1) / cluster_n);
    return static_cast<double>((units + clusters - 1) / clusters);
  };
  const int64_t pair_m = cluster_size(p, grouping);
  const double narrow = waves(128, 128, pair_m, 1), wide = waves(128, 192, pair_m, 1) * kWideCost;
  const double tall_cost = p.b_recipe == Format::kFp8Block1x128 ? kTallWgradCost : kTallCost;
  const double tall = waves(256, 128, 1, grouping == nullptr && p.n > 128 ? 2 : 1) * tall_cost;
  if (tall < narrow && tall < wide) return Sm90Fp8Tile::kM256;
  return wide < narrow ? Sm90Fp8Tile::kN192 : Sm90Fp8Tile::kN128;
}

}  // namespace

void set_sm90_fp8_tile(Sm90Fp8Tile tile) { g_tile.store(tile); }
Sm90Fp8Tile sm90_fp8_tile() { return g_tile.load(); }

Status sm90_fp8_gemm_loadable() {
  int sms = 0;
  BS_RETURN_IF_ERROR((prepare<128, false, 1>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 2>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 1>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 2>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, false, 1>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, false, 2>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, true, 1>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, true, 2>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 1, GroupMode::kDense, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 2, GroupMode::kDense, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 1, GroupMode::kDense, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 2, GroupMode::kDense, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 1, GroupMode::kM, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 2, GroupMode::kM, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 1, GroupMode::kM>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, false, 1, GroupMode::kM>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 1, GroupMode::kK>(&sms)));
  BS_RETURN_IF_ERROR((prepare<192, true, 1, GroupMode::kK>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 1, GroupMode::kK, 256>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 1, GroupMode::kDense, 128, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 2, GroupMode::kDense, 128, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 1, GroupMode::kDense, 128, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, true, 2, GroupMode::kDense, 128, true>(&sms)));
  BS_RETURN_IF_ERROR((prepare<128, false, 1, GroupMode::kM, 128, true>(&sms)));
  return prepare<128, true, 1, GroupMode::kK, 128, true>(&sms);
}

Status launch_sm90_fp8_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                           const Grouping* grouping) {
  // gemm/grouped.cpp checks the recipes: 128x128 B when M-grouped, 1x128 B when K-grouped.
  const bool b_scale_per_row = p.b_recipe == Format::kFp8Block1x128;
  if (!tma_stores_d(p, args)) return launch_direct(p, args, stream, grouping, b_scale_per_row);
  const Sm90Fp8Tile forced = sm90_fp8_tile();
  Sm90Fp8Tile tile = forced;
  if (tile == Sm90Fp8Tile::kAuto) {
    int sms = 0;
    BS_RETURN_IF_ERROR((prepare<128, false, 1>(&sms)));
    tile = pick_tile(p, grouping, sms);
  }
  if (tile == Sm90Fp8Tile::kM256 || tile == Sm90Fp8Tile::kM256Pair) {
    const bool large_experts = grouping != nullptr && p.m >= kPairedExpertRows * grouping->num_groups;
    return launch_tall(p, args, stream, grouping,
                       tile == Sm90Fp8Tile::kM256Pair || (forced == Sm90Fp8Tile::kAuto && large_experts),
                       b_scale_per_row);
  }
  if (tile == Sm90Fp8Tile::kN192)
    return b_scale_per_row ? launch_width<192, true>(p, args, stream, grouping)
                           : launch_width<192, false>(p, args, stream, grouping);
  return b_scale_per_row ? launch_width<128, true>(p, args, stream, grouping)
                         : launch_width<128, false>(p, args, stream, grouping);
}

}  // namespace blockscale::gemm::detail
