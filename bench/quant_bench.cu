// Bandwidth of blockscale's GPU quantize (quant/quantize.h), every recipe and the grouped (MoE)
// mode, against the device's own copy: for each case, the median time of the kernel and of a device-to-device cudaMemcpyAsync moving the
// same number of bytes (read + written), with CUDA events, after warm-up; the L2 is flushed
// before every timed launch by a kernel that reads four times its size (clean lines: no write-back
// of the flush lands in the timed region; the flush also keeps the GPU busy while the host runs
// run()'s checks), so every shape is timed from DRAM.
//
//   effective bandwidth = (input bytes once + every output byte: data, scales, tensor scales,
//                          amax) / time of run() (NVFP4's measured amax: both of its kernels)
//   copy bandwidth      = (bytes read + bytes written by the memcpy) / time
//
// Usage: quant_bench [--iters N] [--only I,J,...] [--filter SUBSTR] [--list]: N timed launches per
// case (default 30, at least 20); --only runs the listed case indices (for profilers); --filter
// the cases whose label contains SUBSTR (labels start with the recipe name, "grouped ..." for the
// MoE mode); --list prints the cases. Prints one line per case, then a markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"  // defines: CHECK_CUDA, hash32, l2_flush, time_against_copy
#include "quant/mx_bf16.h"
#include "quant/mx_quantize.h"
#include "quant/quantize.h"

namespace {

namespace bq = blockscale::quant;
using blockscale::formats::Direction;
using blockscale::formats::DType;


// Pseudo-random inputs (never zeros): a hashed normal-ish value times a per-row magnitude.
using bench::hash32;

__global__ void fill_kernel(void* x, int64_t n, int64_t cols, int elem_bytes) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint64_t>(i));
    const float u = ((h & 0xFFFF) + ((h >> 16) & 0xFFFF)) / 65536.0f - 1.0f;  // triangular in (-1, 1)
    const float mag = exp2f(static_cast<float>(static_cast<int>(hash32(i / cols + (1ull << 40)) % 40) - 20));
    const float v = u * mag;
    if (elem_bytes == 4) {
      static_cast<float*>(x)[i] = v;
    } else {
      static_cast<uint16_t*>(x)[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);  // bf16 (trunc)
    }
  }
}

// fp16 bench input: reinterpret the same hashed values as fp16 in range.
__global__ void fill_fp16_kernel(uint16_t* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint64_t>(i) * 3 + 1);
    x[i] = static_cast<uint16_t>((h & 0x83FF) | ((5 + (h >> 16) % 20) << 10));  // exponent 5..24
  }
}

// One benchmark case: the problem (rows, cols, input type, directions, recipe options), the
// grid policy for MX (other than the default: through detail::run_mx or run_mx_grouped), a grouped run
// over `groups` experts with uneven token counts when groups > 0, `batches` > 0 stacked matrices
// (one batched run, or with batch_loop one run() per matrix), and whether run() also
// writes amax.
struct Case {
  std::string label;
  bq::QuantizeProblem p;
  int groups = 0;
  int64_t batches = 0;
  bool batch_loop = false;
  bq::detail::GridPolicy grid = bq::detail::GridPolicy::kAuto;
  bool with_amax = false;
  bool mx_bf16 = false;  // quant/mx_bf16.h: both copies as bf16 values (fp32 input; groups: gathered)
  // quant::nvfp4_block_values_bf16 of both copies a quantize run wrote (the nvfp4 training recipe's
  // route on Hopper): codes and scales in, two bf16 copies out (dense, one matrix).
  bool nvfp4_values = false;
};

struct Result {
  Case c;
  double bytes, kernel_us, copy_us;
};

const char* name(Direction d) { return d == Direction::kRowwise ? "row" : d == Direction::kColumnwise ? "col" : "row+col"; }

std::string describe(const Case& c) {
  char buf[256];
  const std::string count = c.batches > 0 ? std::to_string(c.batches) + " x " : "";
  std::snprintf(buf, sizeof(buf), "%s %s %s%lldx%lld %s%s", c.label.c_str(), dtype_name(c.p.input_type), count.c_str(),
                static_cast<long long>(c.p.rows), static_cast<long long>(c.p.cols), name(c.p.directions),
                c.with_amax ? " +amax" : "");
  return buf;
}

// A case's device memory, zeroed, freed at the end of the case; no bytes: a null pointer (an output
// not asked for).
struct Buffers {
  std::vector<bench::DeviceBuffer> owned;
  template <typename T>
  T* alloc(int64_t n_bytes) {
    if (n_bytes <= 0) return nullptr;
    owned.push_back(bench::device_array<uint8_t>(n_bytes, "a quantize buffer"));
    CHECK_CUDA(cudaMemset(owned.back().data(), 0, owned.back().size()));
    return static_cast<T*>(static_cast<void*>(owned.back().data()));
  }
};

// Uneven expert token counts summing to rows (a fixed, skewed split; some counts not multiples of
// the block), as cumulative ends.
std::vector<int32_t> uneven_group_ends(int64_t rows, int groups) {
  std::vector<int32_t> ends(static_cast<size_t>(groups));
  int64_t at = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t weight = 1 + (g * 7 + 3) % 11;  // 4, 11, 7, 3, 10, 6, 2, 9, ... of 11
    int64_t share = rows * weight / (groups * 6) + (g % 3 == 0 ? 5 : 0);
    if (g == groups - 1 || at + share > rows) share = rows - at;
    at += share;
    ends[static_cast<size_t>(g)] = static_cast<int32_t>(at);
  }
  return ends;
}

// A case whose run() fails (e.g. a recipe without a kernel in this build) is reported, not timed.
bool skipped(const Case& c, const blockscale::Status& s) {
  std::printf("case %-56s skipped: %s\n", describe(c).c_str(), s.message().c_str());
  return false;
}

bool run_case(const Case& c, int iters, void* flush, size_t flush_bytes, Result* result) {
  const bq::QuantizeProblem& p = c.p;
  const bq::GroupedQuantizeProblem gp{p, c.groups};
  const bool grouped = c.groups > 0;
  const bool nvfp4 = p.recipe == blockscale::formats::Format::kNvfp4;
  const int64_t copies = std::max<int64_t>(c.batches, 1);  // stacked matrices
  const int64_t n = copies * p.rows * p.cols;
  Buffers buf;
  void* x = buf.alloc<void>(n * dtype_size(p.input_type));
  if (p.input_type == DType::kF16)
    fill_fp16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(x), n);
  else
    fill_kernel<<<1024, 256>>>(x, n, p.cols, static_cast<int>(dtype_size(p.input_type)));
  CHECK_CUDA(cudaGetLastError());

  double bytes = static_cast<double>(n) * dtype_size(p.input_type);
  auto counted = [&](int64_t b) {
    bytes += static_cast<double>(std::max<int64_t>(b, 0));
    return b;
  };
  bq::QuantizeOutputs out;
  const bool row = p.directions != Direction::kColumnwise, col = p.directions != Direction::kRowwise;
  out.rowwise_data = buf.alloc<uint8_t>(counted(copies * bq::rowwise_data_bytes(p)));
  out.rowwise_scales = buf.alloc<void>(counted(copies * bq::rowwise_scale_bytes(p)));
  out.columnwise_data = buf.alloc<uint8_t>(
      counted(grouped ? bq::grouped_columnwise_data_bytes(gp) : copies * bq::columnwise_data_bytes(p)));
  out.columnwise_scales = buf.alloc<void>(
      counted(grouped ? bq::grouped_columnwise_scale_bytes(gp) : copies * bq::columnwise_scale_bytes(p)));
  if (nvfp4 && row) out.rowwise_scale_dec = buf.alloc<float>(counted(4 * copies));  // batched: one per matrix
  if (nvfp4 && col) out.columnwise_scale_dec = buf.alloc<float>(counted(4));
  if (c.with_amax) out.amax = buf.alloc<float>(counted(4));
  if (c.with_amax && p.hadamard_columnwise) out.columnwise_amax = buf.alloc<float>(counted(4));
  out.nonfinite = buf.alloc<int>(4);
  bq::QuantizeInputs in;
  in.x = x;
  if (p.tensor_amax == bq::TensorAmax::kGiven) {  // the amax a previous step would have measured
    float* given = buf.alloc<float>(8);
    bq::QuantizeProblem measure = p;
    measure.tensor_amax = bq::TensorAmax::kMeasure;
    bq::QuantizeOutputs m = out;
    m.amax = given, m.columnwise_amax = p.hadamard_columnwise ? given + 1 : nullptr;
    const size_t ws_bytes = bq::workspace_size(measure);
    void* ws = buf.alloc<void>(static_cast<int64_t>(ws_bytes));
    const auto st = bq::run(measure, in, m, ws, ws_bytes, nullptr);
    if (!st.is_ok()) return skipped(c, st);
    in.rowwise_tensor_amax = given;
    in.columnwise_tensor_amax = p.hadamard_columnwise ? given + 1 : given;
  }
  // Grouped, given amax: the dense measure's (for the RHT copy not quite the padded experts' amax,
  // which changes a scale, not the work).
  bq::GroupedQuantizeInputs gin{x, nullptr, in.rowwise_tensor_amax, in.columnwise_tensor_amax};
  bq::GroupedQuantizeOutputs gout{out, nullptr};
  if (grouped) {
    const std::vector<int32_t> ends = uneven_group_ends(p.rows, c.groups);
    int32_t* d_ends = buf.alloc<int32_t>(4 * c.groups);
    CHECK_CUDA(cudaMemcpy(d_ends, ends.data(), 4 * ends.size(), cudaMemcpyHostToDevice));
    gin.group_ends = d_ends;
    gout.padded_group_ends = buf.alloc<int32_t>(counted(4 * c.groups));
  }
  // MX values as bf16 (the mxfp8 training recipe's route on Hopper): every written byte is the two
  // bf16 copies; grouped cases gather their rows from x through a permutation.
  bq::MxBf16Problem vp{p.recipe, p.rounding, copies * p.rows, p.cols, copies, c.groups, p.rows};
  bq::MxBf16Inputs vin{static_cast<const float*>(x), gin.group_ends, nullptr};
  uint16_t *vrow = nullptr, *vcol = nullptr;
  if (c.mx_bf16) {
    bytes = static_cast<double>(n) * dtype_size(p.input_type);
    vrow = buf.alloc<uint16_t>(counted(2 * n));
    vcol = buf.alloc<uint16_t>(counted(2 * n));
    if (grouped) {
      std::vector<int32_t> index(static_cast<size_t>(p.rows));
      for (int64_t r = 0; r < p.rows; ++r) index[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7919) % p.rows);
      int32_t* d_index = buf.alloc<int32_t>(4 * p.rows);
      CHECK_CUDA(cudaMemcpy(d_index, index.data(), 4 * index.size(), cudaMemcpyHostToDevice));
      vin.row_index = d_index;
    }
  }
  const bq::BatchedQuantizeProblem bp{p, copies};
  const size_t ws_bytes = grouped               ? bq::workspace_size(gp)
                          : c.batches > 0 && !c.batch_loop ? bq::workspace_size(bp)
                                                           : bq::workspace_size(p);
  void* ws = buf.alloc<void>(static_cast<int64_t>(ws_bytes));
  const bool mx_knobs = c.grid != bq::detail::GridPolicy::kAuto;
  uint16_t *nv_row = nullptr, *nv_col = nullptr;
  if (c.nvfp4_values) {
    const auto st = bq::run(p, in, out, ws, ws_bytes, nullptr);
    if (!st.is_ok()) return skipped(c, st);
    bytes = static_cast<double>(bq::rowwise_data_bytes(p) + bq::rowwise_scale_bytes(p) +
                                bq::columnwise_data_bytes(p) + bq::columnwise_scale_bytes(p)) + 4.0 * n;
    nv_row = buf.alloc<uint16_t>(2 * n);
    nv_col = buf.alloc<uint16_t>(2 * n);
  }
  auto nvfp4_values = [&] {
    bq::DequantizeProblem dp{blockscale::formats::Format::kNvfp4, p.rows, p.cols};
    auto st = bq::nvfp4_block_values_bf16(dp, 1, {out.rowwise_data, out.rowwise_scales, nullptr}, nv_row, nullptr);
    if (!st.is_ok()) return st;
    dp.rows = p.cols, dp.cols = p.rows;
    return bq::nvfp4_block_values_bf16(dp, 1, {out.columnwise_data, out.columnwise_scales, nullptr}, nv_col,
                                       nullptr);
  };
  // One run() per stacked matrix, at its offset in the input and in every output.
  auto run_each = [&] {
    for (int64_t b = 0; b < c.batches; ++b) {
      bq::QuantizeInputs one_in = in;
      one_in.x = static_cast<const char*>(x) + b * p.rows * p.cols * dtype_size(p.input_type);
      bq::QuantizeOutputs one = out;
      one.rowwise_data += b * bq::rowwise_data_bytes(p);
      one.rowwise_scales = static_cast<char*>(out.rowwise_scales) + b * bq::rowwise_scale_bytes(p);
      one.columnwise_data += b * bq::columnwise_data_bytes(p);
      one.columnwise_scales = static_cast<char*>(out.columnwise_scales) + b * bq::columnwise_scale_bytes(p);
      const auto st = bq::run(p, one_in, one, ws, ws_bytes, nullptr);
      if (!st.is_ok()) return st;
    }
    return blockscale::Status::ok();
  };
  auto launch = [&] {
    if (c.mx_bf16) return bq::run(vp, vin, bq::MxBf16Outputs{vrow, vcol}, nullptr);
    if (c.nvfp4_values) return nvfp4_values();
    if (grouped && mx_knobs) return bq::detail::run_mx_grouped(gp, gin, gout, nullptr, c.grid);
    if (grouped) return bq::run(gp, gin, gout, ws, ws_bytes, nullptr);
    if (c.batches > 0 && c.batch_loop) return run_each();
    if (c.batches > 0) return bq::run(bp, in, out, ws, ws_bytes, nullptr);
    if (mx_knobs) return bq::detail::run_mx(p, in, out, nullptr, c.grid);
    return bq::run(p, in, out, ws, ws_bytes, nullptr);
  };
  const auto probe = launch();  // a recipe whose kernel is missing is reported, not timed
  if (!probe.is_ok()) return skipped(c, probe);
  const bench::AgainstCopy t = bench::time_against_copy(
      describe(c), [&] { bench::check(launch(), "run"); }, bytes, iters, flush, flush_bytes);
  CHECK_CUDA(cudaGetLastError());
  *result = Result{c, bytes, t.us, t.copy_us};
  return true;
}

// The cases: the headline shape first (16384 x 8192 bf16), then shapes, dtypes and a size sweep.
std::vector<Case> all_cases() {
  using blockscale::formats::Format;
  std::vector<Case> cases;
  auto add = [&](std::string label, Format r, int64_t rows, int64_t cols, DType t, Direction d) -> Case& {
    Case c;
    c.label = std::move(label);
    c.p.recipe = r, c.p.rows = rows, c.p.cols = cols, c.p.ld = cols, c.p.input_type = t, c.p.directions = d;
    cases.push_back(c);
    return cases.back();
  };
  const auto bf16 = DType::kBf16;
  const auto row = Direction::kRowwise, both = Direction::kBoth, colw = Direction::kColumnwise;
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, bf16, row);
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, bf16, both);
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, bf16, colw);
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, bf16, both).with_amax = true;
  add("fp8_block128", Format::kFp8Block1x128, 16384, 8192, bf16, both);
  add("fp8_block128", Format::kFp8Block1x128, 16384, 8192, bf16, row);
  add("fp8_block128 pow2", Format::kFp8Block1x128, 16384, 8192, bf16, both).p.pow2_scales = true;
  add("fp8_block128x128", Format::kFp8Block128x128, 16384, 8192, bf16, both);
  {
    Case& c = add("nvfp4 rht given", Format::kNvfp4, 16384, 8192, bf16, both);
    c.p.hadamard_columnwise = true, c.p.tensor_amax = bq::TensorAmax::kGiven, c.with_amax = true;
  }
  add("nvfp4 two-pass", Format::kNvfp4, 16384, 8192, bf16, both);
  add("nvfp4 two-pass", Format::kNvfp4, 16384, 8192, bf16, row);
  add("nvfp4 given", Format::kNvfp4, 16384, 8192, bf16, both).p.tensor_amax = bq::TensorAmax::kGiven;
  add("nvfp4 2d (weights)", Format::kNvfp4, 16384, 8192, bf16, both).p.nvfp4_2d = true;
  {
    Case& c = add("nvfp4 sr rht given", Format::kNvfp4, 16384, 8192, bf16, both);
    c.p.stochastic_rounding = true, c.p.sr_seed = 7;
    c.p.hadamard_columnwise = true, c.p.tensor_amax = bq::TensorAmax::kGiven;
  }
  add("mxfp4", Format::kMxfp4, 16384, 8192, bf16, both);
  add("grouped mxfp8 8 experts", Format::kMxfp8E4M3, 16384, 8192, bf16, both).groups = 8;
  add("grouped mxfp8 8 experts", Format::kMxfp8E4M3, 16384, 8192, bf16, colw).groups = 8;
  add("grouped mxfp8 64 experts", Format::kMxfp8E4M3, 16384, 8192, bf16, both).groups = 64;
  add("grouped fp8_block128 8 experts", Format::kFp8Block1x128, 16384, 8192, bf16, both).groups = 8;
  add("grouped nvfp4 two-pass 8 experts", Format::kNvfp4, 16384, 8192, bf16, both).groups = 8;
  {
    Case& c = add("grouped nvfp4 rht given 8 experts", Format::kNvfp4, 16384, 8192, bf16, both);
    c.groups = 8, c.p.hadamard_columnwise = true, c.p.tensor_amax = bq::TensorAmax::kGiven;
  }
  // A MoE layer's expert weights (the width-2048 training step's w13 and w2, fp32 masters), all 8
  // in one batched launch against one run() per expert.
  const auto fp32 = DType::kF32;
  add("fp8_block128x128 experts batched", Format::kFp8Block128x128, 2816, 2048, fp32, both).batches = 8;
  {
    Case& c = add("fp8_block128x128 experts per-expert runs", Format::kFp8Block128x128, 2816, 2048, fp32, both);
    c.batches = 8, c.batch_loop = true;
  }
  add("fp8_block128x128 experts batched", Format::kFp8Block128x128, 2048, 1408, fp32, both).batches = 8;
  {
    Case& c = add("fp8_block128x128 experts per-expert runs", Format::kFp8Block128x128, 2048, 1408, fp32, both);
    c.batches = 8, c.batch_loop = true;
  }
  // Shapes of real layers and other input types.
  add("mxfp8", Format::kMxfp8E4M3, 4096, 14336, bf16, both);
  add("mxfp8", Format::kMxfp8E4M3, 128000, 7168, bf16, both);
  add("fp8_block128", Format::kFp8Block1x128, 128000, 7168, bf16, both);
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, DType::kF16, both);
  add("mxfp8", Format::kMxfp8E4M3, 16384, 8192, DType::kF32, both);
  // Size sweep, 1 MiB .. 1 GiB of bf16 input, MXFP8 rowwise + columnwise: the grid run() picks
  // (detail::tile_grid), then always persistent, then always one CTA per 128x128 tile.
  const std::vector<std::pair<int64_t, int64_t>> sweep = {{512, 1024},   {1024, 2048},  {2048, 4096},
                                                          {4096, 8192},  {8192, 16384}, {32768, 16384}};
  for (const auto& [rows, cols] : sweep) add("mxfp8 sweep", Format::kMxfp8E4M3, rows, cols, bf16, both);
  for (const auto& [rows, cols] : sweep)
    add("mxfp8 sweep persistent", Format::kMxfp8E4M3, rows, cols, bf16, both).grid = bq::detail::GridPolicy::kPersistent;
  for (const auto& [rows, cols] : sweep)
    add("mxfp8 sweep one-tile-per-CTA", Format::kMxfp8E4M3, rows, cols, bf16, both).grid =
        bq::detail::GridPolicy::kOneTilePerCta;
  // The experts' weights of cases 22-25 in the mxfp8 recipe (batched MX: whole 128-row tiles per
  // expert) against one run() per expert.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2816, 2048}, {2048, 1408}}) {
    add("mxfp8 experts batched", Format::kMxfp8E4M3, rows, cols, fp32, both).batches = 8;
    Case& c = add("mxfp8 experts per-expert runs", Format::kMxfp8E4M3, rows, cols, fp32, both);
    c.batches = 8, c.batch_loop = true;
  }
  // The mxfp8 training recipe's operands on Hopper (quant/mx_bf16.h): the width-2048 step's
  // activations (4096 tokens), its routed tokens (8192 rows gathered, 8 experts), its experts'
  // weights, and the large case above, all fp32 to two bf16 copies.
  add("mx_bf16", Format::kMxfp8E4M3, 4096, 2048, fp32, both).mx_bf16 = true;
  add("mx_bf16", Format::kMxfp8E4M3, 4096, 6144, fp32, both).mx_bf16 = true;
  {
    Case& c = add("mx_bf16 grouped gathered 8 experts", Format::kMxfp8E4M3, 8192, 2048, fp32, both);
    c.mx_bf16 = true, c.groups = 8;
  }
  {
    Case& c = add("mx_bf16 experts", Format::kMxfp8E4M3, 2816, 2048, fp32, both);
    c.mx_bf16 = true, c.batches = 8;
  }
  add("mx_bf16", Format::kMxfp8E4M3, 16384, 8192, fp32, both).mx_bf16 = true;
  // The nvfp4 training recipe's bf16 values on Hopper, from its quantized copies (the width-2048
  // step's activations, and the large case).
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4096, 2048}, {16384, 8192}}) {
    Case& c = add("nvfp4 values as bf16", Format::kNvfp4, rows, cols, fp32, both);
    c.nvfp4_values = true, c.p.hadamard_columnwise = true;
  }
  // MXFP4's grid: the E2M1 encode makes it bound by instruction issue rather than bandwidth, so the
  // per-tile setup that a persistent grid amortises matters more than for MXFP8.
  add("mxfp4 persistent", Format::kMxfp4, 16384, 8192, bf16, both).grid = bq::detail::GridPolicy::kPersistent;
  // The nvfp4 recipe's expert weights on Hopper's values route (2D blocks, the rowwise copy, each
  // expert's amax measured): one batched amax pass and launch against one two-pass run() per expert.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{2816, 2048}, {2048, 1408}}) {
    Case& b = add("nvfp4 2d experts batched", Format::kNvfp4, rows, cols, fp32, row);
    b.batches = 8, b.p.nvfp4_2d = true;
    Case& c = add("nvfp4 2d experts per-expert runs", Format::kNvfp4, rows, cols, fp32, row);
    c.batches = 8, c.batch_loop = true, c.p.nvfp4_2d = true;
  }
  // The grouped MX cases above (one CTA per tile) on a persistent grid, each tile looked up by the
  // same per-warp scan.
  for (const auto& [experts, d] : {std::pair<int, Direction>{8, both}, {8, colw}, {64, both}}) {
    Case& c = add("grouped mxfp8 " + std::to_string(experts) + " experts persistent", Format::kMxfp8E4M3, 16384,
                  8192, bf16, d);
    c.groups = experts, c.grid = bq::detail::GridPolicy::kPersistent;
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  std::string only, filter;  // only: comma-separated case indices; empty: all
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::max(20, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = std::string(",") + argv[++i] + ",";
    else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
    else if (std::strcmp(argv[i], "--list") == 0) list = true;
    else {
      std::fprintf(stderr, "usage: quant_bench [--iters N] [--only I,J,...] [--filter SUBSTR] [--list]\n");
      return 2;
    }
  }
  const std::vector<Case> cases = all_cases();
  if (list) {
    for (size_t i = 0; i < cases.size(); ++i) std::printf("%2zu  %s\n", i, describe(cases[i]).c_str());
    return 0;
  }
  const bench::L2Flush l2 = bench::l2_flush("quant_bench", iters);
  void* flush = l2.buffer.data();
  const size_t flush_bytes = l2.bytes;

  std::vector<Result> results;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!only.empty() && only.find("," + std::to_string(i) + ",") == std::string::npos) continue;
    if (!filter.empty() && cases[i].label.find(filter) == std::string::npos) continue;
    Result r;
    if (run_case(cases[i], iters, flush, flush_bytes, &r)) results.push_back(r);
  }

  std::printf("\n| case | input | shape | copies | MB moved | kernel us | GB/s | copy GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    const double gbs = r.bytes / (r.kernel_us * 1e3), copy_gbs = 2.0 * static_cast<size_t>(r.bytes / 2) / (r.copy_us * 1e3);
    const std::string count = r.c.batches > 0 ? std::to_string(r.c.batches) + " x " : "";
    std::printf("| %s | %s | %s%lldx%lld | %s%s | %.1f | %.1f | %.0f | %.0f | %.1f |\n", r.c.label.c_str(),
                dtype_name(r.c.p.input_type), count.c_str(), static_cast<long long>(r.c.p.rows),
                static_cast<long long>(r.c.p.cols),
                name(r.c.p.directions), r.c.with_amax ? " +amax" : "", r.bytes / 1e6, r.kernel_us, gbs, copy_gbs,
                100.0 * gbs / copy_gbs);
  }
  return 0;
}
