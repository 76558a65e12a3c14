// quant/quantize.h: argument checks, output sizes, and the one dispatch from a problem to the
// recipe's launcher (quant/launchers.h).
#include "quant/quantize.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/scale_layout.h"
#include "quant/launchers.h"

namespace blockscale::quant {
namespace {

using formats::Direction;
using formats::DType;
using formats::Format;

constexpr int64_t kMaxDim = int64_t{1} << 31;  // as formats/: keeps every offset far from overflow

bool wants_rowwise(const QuantizeProblem& p) { return p.directions != Direction::kColumnwise; }
bool wants_columnwise(const QuantizeProblem& p) { return p.directions != Direction::kRowwise; }
bool empty(const QuantizeProblem& p) { return p.rows == 0 || p.cols == 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_nvfp4(Format r) { return r == Format::kNvfp4; }
bool has_gpu_kernel(Format r) {
  return r == Format::kMxfp8E4M3 || r == Format::kMxfp8E5M2 || r == Format::kMxfp4 ||
         r == Format::kNvfp4 || formats::is_fp8_block(r);
}
bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

// Bytes of one stored row of `cols` element codes (E2M1: two per byte).
int64_t row_bytes(Format r, int64_t cols) { return formats::is_fp4(r) ? ceil_div(cols, 2) : cols; }

// Bytes of the scales of a stored matrix (rows x cols, blocks along cols) in the GEMM's layout.
int64_t scale_bytes(Format r, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t k_blocks = ceil_div(cols, formats::default_block_cols(r));
  if (r == Format::kFp8Block1x128) return formats::vec128_scale_floats(rows, k_blocks) * 4;
  if (r == Format::kFp8Block128x128) return formats::blk128_scale_floats(ceil_div(rows, 128), k_blocks) * 4;
  return formats::swizzled_scale_bytes(rows, k_blocks);  // NVFP4 2D too: one scale per row
}

Status check_dim(const char* name, int64_t v) {
  if (v < 0 || v > kMaxDim)
    return Status::error(std::string(name) + ": must be in [0, 2^31] (got " + std::to_string(v) + ")");
  return Status::ok();
}

using detail::check_no_overlap;
using detail::range;
using detail::Range;

// grouped: the columnwise copy's blocks run over each expert's zero-padded tokens, so the RHT
// needs no particular row count.
Status check_options(const QuantizeProblem& p, bool grouped) {
  const std::string name = formats::format_name(p.recipe);
  if (name == "unknown") return Status::error("problem.recipe: unknown value");
  if (!has_gpu_kernel(p.recipe))
    return Status::error("problem.recipe: " + name + " has no GPU quantize kernel (a study format: use formats::quantize)");
  if (p.rounding != formats::ScaleRounding::kCeil && p.rounding != formats::ScaleRounding::kFloor)
    return Status::error("problem.rounding: kCeil or kFloor (one rule per run)");
  if (p.rounding == formats::ScaleRounding::kFloor && !formats::is_mx(p.recipe))
    return Status::error("problem.rounding: floor scale rounding applies to MX recipes only, not " + name);
  if (p.input_type != DType::kBf16 && p.input_type != DType::kF16 && p.input_type != DType::kF32)
    return Status::error(std::string("problem.input_type: x's dtype must be BF16, F16 or F32, got ") +
                         formats::dtype_name(p.input_type));
  if (p.directions != Direction::kRowwise && p.directions != Direction::kColumnwise &&
      p.directions != Direction::kBoth)
    return Status::error("problem.directions: unknown value");
  if (p.pow2_scales && !formats::is_fp8_block(p.recipe))
    return Status::error("problem.pow2_scales: applies to FP8 blockwise recipes only, not " + name);
  const bool nvfp4 = is_nvfp4(p.recipe);
  if (p.nvfp4_2d && !nvfp4) return Status::error("problem.nvfp4_2d: applies to nvfp4 only, not " + name);
  if (p.stochastic_rounding && !nvfp4)
    return Status::error("problem.stochastic_rounding: applies to nvfp4 only, not " + name);
  if (p.hadamard_columnwise && !nvfp4)
    return Status::error("problem.hadamard_columnwise: applies to nvfp4 only, not " + name);
  if (p.tensor_amax != TensorAmax::kMeasure && p.tensor_amax != TensorAmax::kGiven)
    return Status::error("problem.tensor_amax: unknown value");
  if (p.tensor_amax == TensorAmax::kGiven && !nvfp4)
    return Status::error("problem.tensor_amax: a given amax applies to nvfp4 only, not " + name);
  if (p.hadamard_columnwise) {
    if (p.nvfp4_2d)
      return Status::error("problem.hadamard_columnwise: the Hadamard transform is for 1D (wgrad) blocks, not nvfp4_2d");
    if (!wants_columnwise(p))
      return Status::error("problem.hadamard_columnwise: needs the columnwise copy (directions columnwise or both)");
    if (!grouped && p.rows % 16 != 0)
      return Status::error("problem.hadamard_columnwise: rows (the columnwise block dimension, " +
                           std::to_string(p.rows) + ") must be a multiple of 16");
  }
  return Status::ok();
}

Status check_shape(const QuantizeProblem& p) {
  BS_RETURN_IF_ERROR(check_dim("problem.rows", p.rows));
  BS_RETURN_IF_ERROR(check_dim("problem.cols", p.cols));
  if (p.ld < p.cols || p.ld > kMaxDim)
    return Status::error("problem.ld: row stride (" + std::to_string(p.ld) + ") must be >= cols (" +
                         std::to_string(p.cols) + ") and <= 2^31");
  return Status::ok();
}

Status check_float_ptr(const char* name, const void* ptr, bool required) {
  if (ptr == nullptr) return required ? Status::error(std::string(name) + ": must not be null") : Status::ok();
  if (!aligned(ptr, 4)) return Status::error(std::string(name) + ": must be 4-byte aligned");
  return Status::ok();
}

// Pointer checks shared by the dense and grouped calls; the columnwise sizes are passed in.
// x_rows: rows of the input x (the problem's rows, or a gather's input rows).
Status check_pointers(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
                      int64_t col_data_bytes, int64_t col_scale_bytes, std::vector<Range>* ranges,
                      int64_t x_rows, int64_t row_copies = 1) {
  BS_RETURN_IF_ERROR(check_float_ptr("outputs.amax", out.amax, false));
  BS_RETURN_IF_ERROR(check_float_ptr("outputs.columnwise_amax", out.columnwise_amax, false));
  if (out.nonfinite != nullptr && !aligned(out.nonfinite, 4))
    return Status::error("outputs.nonfinite: must be 4-byte aligned");
  if (out.columnwise_amax != nullptr && !p.hadamard_columnwise)
    return Status::error("outputs.columnwise_amax: only the nvfp4 RHT columnwise copy has its own amax "
                         "(set problem.hadamard_columnwise, or leave it null)");
  if (empty(p)) return Status::ok();
  const int64_t esize = static_cast<int64_t>(formats::dtype_size(p.input_type));
  if (in.x == nullptr) return Status::error("inputs.x: must not be null");
  if (!aligned(in.x, esize))
    return Status::error("inputs.x: must be aligned to its element size (" + std::to_string(esize) + " bytes)");
  ranges->push_back(range("inputs.x", in.x, x_rows > 0 ? ((x_rows - 1) * p.ld + p.cols) * esize : 0));
  const bool nvfp4 = is_nvfp4(p.recipe);
  const bool given = p.tensor_amax == TensorAmax::kGiven;
  const bool f32_scales = formats::is_fp8_block(p.recipe);
  if (wants_rowwise(p)) {
    if (out.rowwise_data == nullptr) return Status::error("outputs.rowwise_data: must not be null (rowwise requested)");
    if (out.rowwise_scales == nullptr) return Status::error("outputs.rowwise_scales: must not be null (rowwise requested)");
    if (f32_scales && !aligned(out.rowwise_scales, 4))
      return Status::error("outputs.rowwise_scales: fp32 scales must be 4-byte aligned");
    BS_RETURN_IF_ERROR(check_float_ptr("outputs.rowwise_scale_dec", out.rowwise_scale_dec, nvfp4));
    BS_RETURN_IF_ERROR(check_float_ptr("inputs.rowwise_tensor_amax", in.rowwise_tensor_amax, given));
    ranges->push_back(range("outputs.rowwise_data", out.rowwise_data, row_copies * rowwise_data_bytes(p)));
    ranges->push_back(range("outputs.rowwise_scales", out.rowwise_scales, row_copies * rowwise_scale_bytes(p)));
    if (nvfp4) ranges->push_back(range("outputs.rowwise_scale_dec", out.rowwise_scale_dec, 4 * row_copies));
  }
  if (wants_columnwise(p)) {
    if (out.columnwise_data == nullptr) return Status::error("outputs.columnwise_data: must not be null (columnwise requested)");
    if (out.columnwise_scales == nullptr) return Status::error("outputs.columnwise_scales: must not be null (columnwise requested)");
    if (f32_scales && !aligned(out.columnwise_scales, 4))
      return Status::error("outputs.columnwise_scales: fp32 scales must be 4-byte aligned");
    BS_RETURN_IF_ERROR(check_float_ptr("outputs.columnwise_scale_dec", out.columnwise_scale_dec, nvfp4));
    BS_RETURN_IF_ERROR(check_float_ptr("inputs.columnwise_tensor_amax", in.columnwise_tensor_amax, given));
    ranges->push_back(range("outputs.columnwise_data", out.columnwise_data, col_data_bytes));
    ranges->push_back(range("outputs.columnwise_scales", out.columnwise_scales, col_scale_bytes));
    if (nvfp4) ranges->push_back(range("outputs.columnwise_scale_dec", out.columnwise_scale_dec, 4));
  }
  // The given amax values are read, never written: they may alias each other, not an output.
  if (out.amax != nullptr) ranges->push_back(range("outputs.amax", out.amax, 4));
  if (out.columnwise_amax != nullptr) ranges->push_back(range("outputs.columnwise_amax", out.columnwise_amax, 4));
  if (out.nonfinite != nullptr) ranges->push_back(range("outputs.nonfinite", out.nonfinite, 4));
  return Status::ok();
}

Status check_given_amax_apart(const QuantizeInputs& in, const std::vector<Range>& outputs) {
  for (const auto& [name, ptr] : {std::pair{"inputs.rowwise_tensor_amax", in.rowwise_tensor_amax},
                                  std::pair{"inputs.columnwise_tensor_amax", in.columnwise_tensor_amax}}) {
    if (ptr == nullptr) continue;
    std::vector<Range> r = outputs;
    r.push_back(range(name, ptr, 4));
    BS_RETURN_IF_ERROR(check_no_overlap(r));
  }
  return Status::ok();
}

// Zeroes the amax outputs the kernels accumulate into with atomicMax.
Status reset_amax(const QuantizeOutputs& out, cudaStream_t stream) {
  for (const auto& [name, ptr] : {std::pair{"outputs.amax", out.amax},
                                  std::pair{"outputs.columnwise_amax", out.columnwise_amax}}) {
    if (ptr == nullptr) continue;
    BS_RETURN_IF_ERROR(detail::cuda_status(cudaMemsetAsync(ptr, 0, sizeof(float), stream),
                                           (std::string(name) + ": cudaMemsetAsync").c_str()));
  }
  return Status::ok();
}

Status check_workspace(size_t need, const void* workspace, size_t workspace_bytes) {
  if (need > 0 && (workspace == nullptr || workspace_bytes < need))
    return Status::error("workspace: needs " + std::to_string(need) + " bytes (workspace_size), got " +
                         (workspace == nullptr ? std::string("null") : std::to_string(workspace_bytes)));
  if (need > 0 && !aligned(workspace, 16)) return Status::error("workspace: must be 16-byte aligned");
  return Status::ok();
}

int columnwise_block(Format r) {  // block length along the input's rows of a columnwise copy
  return formats::default_block_cols(r);
}

}  // namespace

namespace detail {

Status check_no_overlap(const std::vector<Range>& ranges) {
  for (size_t a = 0; a < ranges.size(); ++a)
    for (size_t b = a + 1; b < ranges.size(); ++b)
      if (ranges[a].begin < ranges[b].end && ranges[b].begin < ranges[a].end)
        return Status::error(std::string(ranges[b].name) + ": overlaps " + ranges[a].name);
  return Status::ok();
}

Range range(const char* name, const void* p, int64_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(p);
  return {name, b, b + static_cast<uintptr_t>(bytes)};
}

Status resident_ctas(const void* kernel, int threads, int smem, const char* what, int* resident, int smem_limit) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> prepared;               // (kernel, device)
  static std::map<std::tuple<const void*, int, int>, int> cache;       // (kernel, device, smem)
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find({kernel, dev, smem});
  if (it != cache.end()) {
    *resident = it->second;
    return Status::ok();
  }
  if (prepared.count({kernel, dev}) == 0) {
    // Once per kernel: the image check, and the shared-memory limit raised to the most any launch
    // of it asks for (a grouped kernel's grows with the expert count; lowering it later would make
    // an earlier, larger size fail to launch).
    cudaFuncAttributes attr;
    BS_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&attr, kernel), what));
    const int limit = std::max(smem, smem_limit);
    if (limit > 48 * 1024)
      BS_RETURN_IF_ERROR(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
                                     "cudaFuncSetAttribute"));
    prepared.insert({kernel, dev});
  }
  int sms = 0, per_sm = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute"));
  BS_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
                                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  *resident = sms * std::max(per_sm, 1);
  cache[{kernel, dev, smem}] = *resident;
  return Status::ok();
}

int64_t even_grid(int64_t work, int64_t resident) {
  resident = std::max<int64_t>(resident, 1);
  const int64_t rounds = std::max<int64_t>(1, (work + resident - 1) / resident);
  return std::max<int64_t>(1, (work + rounds - 1) / rounds);
}

int64_t tile_grid(int64_t tiles, int64_t resident) {
  if (tiles > 2 * std::max<int64_t>(resident, 1)) return std::min<int64_t>(tiles, 0x7FFFFFFF);
  return even_grid(tiles, resident);
}

}  // namespace detail

QuantizeProblem problem_from_options(const formats::QuantizeOptions& o, formats::DType input_type, int64_t rows,
                                     int64_t cols, formats::Direction directions) {
  QuantizeProblem p;
  p.recipe = o.recipe;
  p.rounding = o.rounding;
  p.input_type = input_type;
  p.rows = rows;
  p.cols = cols;
  p.ld = cols;
  p.directions = directions;
  p.pow2_scales = o.pow2_scales;
  p.nvfp4_2d = o.nvfp4_2d;
  p.stochastic_rounding = o.stochastic_rounding;
  p.sr_seed = o.sr_seed;
  p.sr_offset = o.sr_offset;
  p.hadamard_columnwise = o.hadamard;
  return p;
}

int64_t rowwise_data_bytes(const QuantizeProblem& p) {
  return wants_rowwise(p) && !empty(p) ? p.rows * row_bytes(p.recipe, p.cols) : 0;
}
int64_t rowwise_scale_bytes(const QuantizeProblem& p) {
  return wants_rowwise(p) ? scale_bytes(p.recipe, p.rows, p.cols) : 0;
}
int64_t columnwise_data_bytes(const QuantizeProblem& p) {
  return wants_columnwise(p) && !empty(p) ? p.cols * row_bytes(p.recipe, p.rows) : 0;
}
int64_t columnwise_scale_bytes(const QuantizeProblem& p) {
  return wants_columnwise(p) ? scale_bytes(p.recipe, p.cols, p.rows) : 0;
}

Status can_implement(const QuantizeProblem& p) {
  BS_RETURN_IF_ERROR(check_options(p, false));
  return check_shape(p);
}

Status can_implement(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  std::vector<Range> ranges;
  BS_RETURN_IF_ERROR(check_pointers(p, in, out, columnwise_data_bytes(p), columnwise_scale_bytes(p), &ranges, p.rows));
  BS_RETURN_IF_ERROR(check_no_overlap(ranges));
  return check_given_amax_apart(in, ranges);
}

size_t workspace_size(const QuantizeProblem& p) {
  return is_nvfp4(p.recipe) ? detail::nvfp4_workspace_size(p) : 0;
}

Status run(const QuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  BS_RETURN_IF_ERROR(check_workspace(workspace_size(p), workspace, workspace_bytes));
  BS_RETURN_IF_ERROR(reset_amax(out, stream));
  if (empty(p)) return Status::ok();
  if (formats::is_mx(p.recipe)) return detail::launch_mx_quantize(p, in, out, stream);
  if (is_nvfp4(p.recipe)) return detail::launch_nvfp4_quantize(p, in, out, workspace, stream);
  return detail::launch_fp8_block_quantize(p, in, out, stream);
}

// ---- Batched -----------------------------------------------------------------------------------

Status can_implement(const BatchedQuantizeProblem& p) {
  BS_RETURN_IF_ERROR(can_implement(p.matrix));
  const bool mx = formats::is_mx(p.matrix.recipe), nvfp4 = is_nvfp4(p.matrix.recipe);
  if (p.matrix.recipe != Format::kFp8Block128x128 && !mx && !nvfp4)
    return Status::error("problem.matrix.recipe: batched quantize takes fp8_block128x128, the MX recipes and nvfp4 "
                         "(the weights' recipes); quantize other recipes one matrix per run()");
  if ((mx || nvfp4) && p.matrix.rows % 128 != 0)
    return Status::error("problem.matrix.rows: batched MX and NVFP4 quantize need a multiple of 128 (got " +
                         std::to_string(p.matrix.rows) + "), so that no 128-row tile spans two matrices");
  if (nvfp4 && (p.matrix.directions != Direction::kRowwise || p.matrix.tensor_amax != TensorAmax::kMeasure ||
                p.matrix.stochastic_rounding))
    return Status::error("problem.matrix: batched NVFP4 quantize makes the rowwise copy with each matrix's amax "
                         "measured, without stochastic rounding (directions kRowwise, tensor_amax kMeasure); "
                         "quantize other NVFP4 problems one matrix per run()");
  if (nvfp4 && p.batches > 65535)
    return Status::error("problem.batches: batched NVFP4 quantize takes at most 65535 matrices (got " +
                         std::to_string(p.batches) + ")");
  if (p.batches < 1) return Status::error("problem.batches: must be >= 1 (got " + std::to_string(p.batches) + ")");
  if (p.batches * std::max<int64_t>(p.matrix.rows, 1) > kMaxDim)
    return Status::error("problem: batches * matrix.rows must be <= 2^31");
  return Status::ok();
}

Status can_implement(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  std::vector<Range> ranges;
  BS_RETURN_IF_ERROR(check_pointers(p.matrix, in, out, p.batches * columnwise_data_bytes(p.matrix),
                                    p.batches * columnwise_scale_bytes(p.matrix), &ranges,
                                    p.batches * p.matrix.rows, p.batches));
  return check_no_overlap(ranges);
}

size_t workspace_size(const BatchedQuantizeProblem& p) {
  return is_nvfp4(p.matrix.recipe) && p.batches > 0 ? p.batches * workspace_size(p.matrix) : 0;
}

Status run(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  BS_RETURN_IF_ERROR(check_workspace(workspace_size(p), workspace, workspace_bytes));
  BS_RETURN_IF_ERROR(reset_amax(out, stream));
  if (empty(p.matrix)) return Status::ok();
  if (formats::is_mx(p.matrix.recipe)) return detail::launch_mx_batched_quantize(p, in, out, stream);
  if (is_nvfp4(p.matrix.recipe)) return detail::launch_nvfp4_batched_quantize(p, in, out, workspace, stream);
  return detail::launch_fp8_block_batched_quantize(p, in, out, stream);
}

Status run(const BatchedQuantizeProblem& p, const QuantizeInputs& in, const QuantizeOutputs& out,
           cudaStream_t stream) {
  return run(p, in, out, nullptr, 0, stream);
}

// ---- Grouped ----------------------------------------------------------------------------------

int64_t grouped_capacity(const GroupedQuantizeProblem& p) {
  const int64_t b = columnwise_block(p.dense.recipe);
  if (p.dense.rows <= 0 || p.num_groups <= 0) return 0;
  // The padded total is at most rows + G (b - 1), a multiple of b; then a multiple of 32 too: the
  // K-grouped GEMM's K rule (NVFP4's packed rows are 16-byte aligned).
  const int64_t bound = (p.dense.rows + int64_t{p.num_groups} * (b - 1)) / b * b;
  return (bound + 31) / 32 * 32;
}
int64_t grouped_columnwise_data_bytes(const GroupedQuantizeProblem& p) {
  return wants_columnwise(p.dense) && p.dense.cols > 0 ? p.dense.cols * row_bytes(p.dense.recipe, grouped_capacity(p)) : 0;
}
int64_t grouped_columnwise_scale_bytes(const GroupedQuantizeProblem& p) {
  return wants_columnwise(p.dense) ? scale_bytes(p.dense.recipe, p.dense.cols, grouped_capacity(p)) : 0;
}

Status can_implement(const GroupedQuantizeProblem& p) {
  BS_RETURN_IF_ERROR(check_options(p.dense, true));
  BS_RETURN_IF_ERROR(check_shape(p.dense));
  if (p.dense.recipe == Format::kFp8Block128x128)
    return Status::error("problem.dense.recipe: fp8_block128x128 is the weights' recipe; grouped (token) "
                         "quantize takes the activations' and gradients' fp8_block128 (1x128)");
  if (p.dense.nvfp4_2d)
    return Status::error("problem.dense.nvfp4_2d: 16x16 blocks are the weights' recipe; grouped (token) "
                         "quantize takes 1D blocks");
  if (p.num_groups < 1 || p.num_groups > 4096)
    return Status::error("problem.num_groups: must be in [1, 4096] (got " + std::to_string(p.num_groups) + ")");
  if (grouped_capacity(p) > kMaxDim)
    return Status::error("problem: rows + num_groups * (block - 1) must be <= 2^31");
  return check_dim("problem.input_rows", p.input_rows);
}

Status can_implement(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in,
                     const GroupedQuantizeOutputs& out) {
  BS_RETURN_IF_ERROR(can_implement(p));
  std::vector<Range> ranges;
  const bool gather = in.row_index != nullptr;
  if (gather && is_nvfp4(p.dense.recipe))
    return Status::error("inputs.row_index: the gathered grouped quantize supports mxfp8, mxfp8_e5m2, mxfp4 and "
                         "fp8_block128, not nvfp4 (gather the rows first, or pass row_index = null)");
  if (gather && !aligned(in.row_index, 4)) return Status::error("inputs.row_index: must be 4-byte aligned");
  BS_RETURN_IF_ERROR(check_pointers(p.dense, QuantizeInputs{in.x, in.rowwise_tensor_amax, in.columnwise_tensor_amax}, out.dense, grouped_columnwise_data_bytes(p),
                                    grouped_columnwise_scale_bytes(p), &ranges, gather ? p.input_rows : p.dense.rows));
  if (gather && !empty(p.dense)) ranges.push_back(range("inputs.row_index", in.row_index, 4 * p.dense.rows));
  if (in.group_ends == nullptr) return Status::error("inputs.group_ends: must not be null");
  if (!aligned(in.group_ends, 4)) return Status::error("inputs.group_ends: must be 4-byte aligned");
  if (out.padded_group_ends == nullptr) return Status::error("outputs.padded_group_ends: must not be null");
  if (!aligned(out.padded_group_ends, 4)) return Status::error("outputs.padded_group_ends: must be 4-byte aligned");
  ranges.push_back(range("inputs.group_ends", in.group_ends, 4 * int64_t{p.num_groups}));
  ranges.push_back(range("outputs.padded_group_ends", out.padded_group_ends, 4 * int64_t{p.num_groups}));
  return check_no_overlap(ranges);
}

size_t workspace_size(const GroupedQuantizeProblem& p) {
  return is_nvfp4(p.dense.recipe) ? detail::nvfp4_grouped_workspace_size(p) : 0;
}

Status run(const GroupedQuantizeProblem& p, const GroupedQuantizeInputs& in, const GroupedQuantizeOutputs& out,
           void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  BS_RETURN_IF_ERROR(can_implement(p, in, out));
  BS_RETURN_IF_ERROR(check_workspace(workspace_size(p), workspace, workspace_bytes));
  BS_RETURN_IF_ERROR(reset_amax(out.dense, stream));
  // An empty matrix still gets its padded ends (all zero when rows == 0) written by the kernel.
  if (formats::is_mx(p.dense.recipe)) return detail::launch_mx_grouped_quantize(p, in, out, stream);
  if (is_nvfp4(p.dense.recipe)) return detail::launch_nvfp4_grouped_quantize(p, in, out, workspace, stream);
  return detail::launch_fp8_block_grouped_quantize(p, in, out, stream);
}

// ---- Dequantize -------------------------------------------------------------------------------

Status dequantize(const DequantizeProblem& p, const DequantizeInputs& in, float* out, cudaStream_t stream) {
  const std::string name = formats::format_name(p.recipe);
  if (name == "unknown") return Status::error("problem.recipe: unknown value");
  if (!has_gpu_kernel(p.recipe))
    return Status::error("problem.recipe: " + name + " has no GPU dequantize kernel (a study format: use formats::dequantize)");
  BS_RETURN_IF_ERROR(check_dim("problem.rows", p.rows));
  BS_RETURN_IF_ERROR(check_dim("problem.cols", p.cols));
  if (p.rows == 0 || p.cols == 0) return Status::ok();
  if (in.data == nullptr) return Status::error("inputs.data: must not be null");
  if (in.scales == nullptr) return Status::error("inputs.scales: must not be null");
  if (formats::is_fp8_block(p.recipe) && !aligned(in.scales, 4))
    return Status::error("inputs.scales: fp32 scales must be 4-byte aligned");
  const bool nvfp4 = is_nvfp4(p.recipe);
  BS_RETURN_IF_ERROR(check_float_ptr("inputs.scale_dec", in.scale_dec, nvfp4));
  if (out == nullptr) return Status::error("out: must not be null");
  if (!aligned(out, 4)) return Status::error("out: must be 4-byte aligned");
  std::vector<Range> ranges = {range("inputs.data", in.data, p.rows * row_bytes(p.recipe, p.cols)),
                               range("inputs.scales", in.scales, scale_bytes(p.recipe, p.rows, p.cols)),
                               range("out", out, p.rows * p.cols * 4)};
  if (nvfp4) ranges.push_back(range("inputs.scale_dec", in.scale_dec, 4));
  BS_RETURN_IF_ERROR(check_no_overlap(ranges));
  return detail::launch_dequantize(p, in, out, stream);
}

Status nvfp4_block_values_bf16(const DequantizeProblem& p, int64_t batches, const DequantizeInputs& in,
                               uint16_t* out, cudaStream_t stream) {
  if (!is_nvfp4(p.recipe)) return Status::error("problem.recipe: must be nvfp4 (NVFP4's block values)");
  BS_RETURN_IF_ERROR(check_dim("problem.rows", p.rows));
  BS_RETURN_IF_ERROR(check_dim("problem.cols", p.cols));
  BS_RETURN_IF_ERROR(check_dim("batches", batches));
  if (p.rows == 0 || p.cols == 0 || batches == 0) return Status::ok();
  if (in.data == nullptr) return Status::error("inputs.data: must not be null");
  if (in.scales == nullptr) return Status::error("inputs.scales: must not be null");
  if (out == nullptr) return Status::error("out: must not be null");
  if (!aligned(out, 2)) return Status::error("out: must be 2-byte aligned");
  const std::vector<Range> ranges = {
      range("inputs.data", in.data, batches * p.rows * row_bytes(p.recipe, p.cols)),
      range("inputs.scales", in.scales, batches * scale_bytes(p.recipe, p.rows, p.cols)),
      range("out", out, batches * p.rows * p.cols * 2)};
  BS_RETURN_IF_ERROR(check_no_overlap(ranges));
  return detail::launch_nvfp4_block_values_bf16(p, batches, in, out, stream);
}

}  // namespace blockscale::quant
