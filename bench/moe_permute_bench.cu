// MoE permute benchmark (quant/moe.h + the fused gather of the grouped quantize), one process:
// T tokens x hidden H bf16, G experts, top_k 2 (random routing). Times (median of 20):
//   route            : expert ids -> group_ends, row_source, slot_row
//   fused gather+quant: grouped quantize with row_index (MXFP8 E4M3, FP8 1x128; rowwise + columnwise)
//   unfused          : a bf16 gather copy kernel + the same grouped quantize without row_index
//   combine          : un-permute + gate-weighted combine (bf16 out)
//   copy             : cudaMemcpy device-to-device of the T * top_k * H bf16 input bytes
// GB/s counts bytes read + written once each (the unfused row counts the fused op's bytes, so its
// GB/s compares directly); "of copy" = GB/s / the copy's GB/s. Ends with a markdown table.
// Usage: moe_permute_bench [tokens] [hidden]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"  // defines: CHECK_CUDA, check, device_array, hash32, median_ms
#include "quant/moe.h"
#include "quant/quantize.h"

namespace {

namespace bq = blockscale::quant;
using bench::check;
using bench::DeviceBuffer;
using bench::device_array;
using blockscale::formats::Format;

__global__ void fill_bf16(uint16_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = (static_cast<float>(bench::hash32(seed ^ i) & 0xFFFF) - 32768.0f) / 8192.0f;
    x[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

__global__ void fill_ids(int32_t* ids, int64_t n, int g, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    ids[i] = static_cast<int32_t>(bench::hash32(seed * 0x9E3779B97F4A7C15ull + i) % static_cast<uint32_t>(g));
}

__global__ void fill_gates(float* g, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    g[i] = 0.5f;
}

// The unfused alternative's first step: out row r = x row row_index[r] (16-byte vectors; -1: zeros).
__global__ void gather_rows_bf16(const uint4* x, const int32_t* row_index, int64_t rows, int64_t vecs_per_row,
                                 uint4* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t src = row_index[r];
    for (int64_t v = threadIdx.x; v < vecs_per_row; v += blockDim.x)
      out[r * vecs_per_row + v] = src >= 0 ? x[src * vecs_per_row + v] : make_uint4(0, 0, 0, 0);
  }
}

struct Row {
  std::string name;
  double ms, gbps;
};

void bench_shape(int64_t tokens, int64_t hidden, int groups, int top_k, std::vector<Row>* rows_out) {
  const int iters = 20;
  const int64_t slots = tokens * top_k;
  const DeviceBuffer x_buf = device_array<uint16_t>(tokens * hidden, "x");
  const DeviceBuffer ids_buf = device_array<int32_t>(slots, "expert ids");
  const DeviceBuffer ends_buf = device_array<int32_t>(groups, "group ends");
  const DeviceBuffer row_source_buf = device_array<int32_t>(slots, "row source");
  const DeviceBuffer slot_row_buf = device_array<int32_t>(slots, "slot row");
  const DeviceBuffer gates_buf = device_array<float>(slots, "gates");
  const DeviceBuffer gathered_buf = device_array<uint16_t>(slots * hidden, "gathered rows");
  uint16_t *x = x_buf.as<uint16_t>(), *gathered = gathered_buf.as<uint16_t>();
  int32_t *ids = ids_buf.as<int32_t>(), *ends = ends_buf.as<int32_t>();
  int32_t *row_source = row_source_buf.as<int32_t>(), *slot_row = slot_row_buf.as<int32_t>();
  float* gates = gates_buf.as<float>();
  fill_bf16<<<1024, 256>>>(x, tokens * hidden, 1);
  fill_ids<<<1024, 256>>>(ids, slots, groups, 2);
  fill_gates<<<1024, 256>>>(gates, slots);
  CHECK_CUDA(cudaGetLastError());

  bq::RoutingProblem rp{tokens, top_k, groups};
  const size_t ws_bytes = bq::workspace_size(rp);
  const DeviceBuffer ws_buf = device_array<uint8_t>(static_cast<int64_t>(ws_bytes), "workspace");
  void* ws = ws_buf.data();
  auto route = [&] { check(bq::run(rp, {ids}, {ends, row_source, slot_row}, ws, ws_bytes, nullptr), "route"); };
  route();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double route_ms = bench::median_ms(route, iters);
  const double route_bytes = slots * 4.0 + groups * 4.0 + 2.0 * slots * 4.0;
  char label[160];
  auto add = [&](const char* what, double ms, double bytes) {
    std::snprintf(label, sizeof label, "T%lld H%lld G%d: %s", static_cast<long long>(tokens),
                  static_cast<long long>(hidden), groups, what);
    rows_out->push_back({label, ms, bytes / (ms * 1e6)});
  };
  add("route", route_ms, route_bytes);

  // The copy reference: the gathered input's bytes (T * top_k rows), device to device.
  const size_t in_bytes = static_cast<size_t>(slots * hidden * 2);
  {
    const DeviceBuffer dst = device_array<uint8_t>(static_cast<int64_t>(in_bytes), "copy destination");
    const DeviceBuffer src = device_array<uint8_t>(static_cast<int64_t>(in_bytes), "copy source");
    const double memcpy_ms = bench::median_ms(
        [&] { CHECK_CUDA(cudaMemcpyAsync(dst.data(), src.data(), in_bytes, cudaMemcpyDeviceToDevice)); }, iters);
    add("cudaMemcpy D2D (copy reference)", memcpy_ms, 2.0 * in_bytes);
  }

  for (Format recipe : {Format::kMxfp8E4M3, Format::kFp8Block1x128}) {
    bq::GroupedQuantizeProblem p;
    p.dense.recipe = recipe;
    p.dense.rows = slots, p.dense.cols = hidden, p.dense.ld = hidden;
    p.dense.directions = blockscale::formats::Direction::kBoth;
    p.num_groups = groups;
    p.input_rows = tokens;
    const DeviceBuffer row_data = device_array<uint8_t>(bq::rowwise_data_bytes(p.dense), "rowwise data");
    const DeviceBuffer row_scales = device_array<uint8_t>(bq::rowwise_scale_bytes(p.dense), "rowwise scales");
    const DeviceBuffer col_data = device_array<uint8_t>(bq::grouped_columnwise_data_bytes(p), "columnwise data");
    const DeviceBuffer col_scales = device_array<uint8_t>(bq::grouped_columnwise_scale_bytes(p), "columnwise scales");
    const DeviceBuffer padded_ends = device_array<int32_t>(groups, "padded group ends");
    bq::GroupedQuantizeOutputs out;
    out.dense.rowwise_data = row_data.data(), out.dense.rowwise_scales = row_scales.data();
    out.dense.columnwise_data = col_data.data(), out.dense.columnwise_scales = col_scales.data();
    out.padded_group_ends = padded_ends.as<int32_t>();
    const double out_bytes = static_cast<double>(bq::rowwise_data_bytes(p.dense) + bq::rowwise_scale_bytes(p.dense) +
                                                 bq::grouped_columnwise_data_bytes(p) +
                                                 bq::grouped_columnwise_scale_bytes(p));
    const double bytes = in_bytes + slots * 4.0 + out_bytes;  // read x once per routed row, the index, the outputs
    bq::GroupedQuantizeInputs fused_in;
    fused_in.x = x, fused_in.group_ends = ends, fused_in.row_index = row_source;
    const double fused_ms = bench::median_ms([&] { check(bq::run(p, fused_in, out, nullptr, 0, nullptr), "fused"); }, iters);
    bq::GroupedQuantizeInputs plain_in;
    plain_in.x = gathered, plain_in.group_ends = ends;
    const int64_t vecs = hidden * 2 / 16;
    const double unfused_ms = bench::median_ms(
        [&] {
          gather_rows_bf16<<<static_cast<unsigned>(std::min<int64_t>(slots, 65535)), 256>>>(
              reinterpret_cast<const uint4*>(x), row_source, slots, vecs, reinterpret_cast<uint4*>(gathered));
          check(bq::run(p, plain_in, out, nullptr, 0, nullptr), "unfused");
        },
        iters);
    const std::string r = recipe == Format::kMxfp8E4M3 ? "MXFP8 row+col" : "FP8 1x128 row+col";
    add(("fused gather+quantize " + r).c_str(), fused_ms, bytes);
    add(("unfused gather copy + grouped quantize " + r).c_str(), unfused_ms, bytes);
  }

  bq::CombineProblem cp{tokens, top_k, hidden, slots, hidden, hidden, bq::CombineOutputType::kBf16};
  const DeviceBuffer out_buf = device_array<uint16_t>(tokens * hidden, "combined output");
  void* out = out_buf.data();
  const double combine_ms =
      bench::median_ms([&] { check(bq::run(cp, {gathered, gates, slot_row}, {out}, nullptr, 0, nullptr), "combine"); }, iters);
  add("unpermute + combine (bf16 out)", combine_ms, in_bytes + slots * 8.0 + tokens * hidden * 2.0);
  CHECK_CUDA(cudaDeviceSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 32768;
  const int64_t hidden = argc > 2 ? std::atoll(argv[2]) : 7168;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("moe_permute_bench on %s: %lld tokens x %lld bf16, top_k 2\n", prop.name, static_cast<long long>(tokens),
              static_cast<long long>(hidden));
  std::vector<Row> rows;
  for (int g : {8, 32}) {
    const size_t first = rows.size();
    bench_shape(tokens, hidden, g, 2, &rows);
    double copy = 0;
    for (size_t i = first; i < rows.size(); ++i)
      if (rows[i].name.find("cudaMemcpy") != std::string::npos) copy = rows[i].gbps;
    for (size_t i = first; i < rows.size(); ++i)
      std::printf("%-72s %9.3f ms %8.1f GB/s %6.1f%% of copy\n", rows[i].name.c_str(), rows[i].ms, rows[i].gbps,
                  100.0 * rows[i].gbps / copy);
  }
  std::printf("\n| op | ms | GB/s | of copy |\n|---|---:|---:|---:|\n");
  double copy = 0;
  for (const Row& r : rows) {
    if (r.name.find("cudaMemcpy") != std::string::npos) copy = r.gbps;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    // each shape's copy row precedes its quantize rows; find the copy of this row's shape
    const std::string shape = rows[i].name.substr(0, rows[i].name.find(':'));
    for (const Row& r : rows)
      if (r.name.rfind(shape, 0) == 0 && r.name.find("cudaMemcpy") != std::string::npos) copy = r.gbps;
    std::printf("| %s | %.3f | %.1f | %.0f%% |\n", rows[i].name.c_str(), rows[i].ms, rows[i].gbps, 100.0 * rows[i].gbps / copy);
  }
  return 0;
}
