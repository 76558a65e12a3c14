#include "tools/gpu_gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "gemm/device_operand.h"   // defines: DeviceOperand
#include "gemm/gemm.h"             // defines: the four-call GEMM API
#include "gemm/grouped.h"          // defines: the grouped (MoE) GEMM API
#include "runtime/cuda_status.h"
#include "runtime/device.h"

namespace blockscale::tools {
namespace {

using runtime::DeviceBuffer;

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// D (count elements of bf16 or fp32) widened to fp32 on the host.
Status fetch(const void* d, int64_t count, bool fp32_d, std::vector<float>* out) {
  std::vector<uint8_t> raw(static_cast<size_t>(count) * (fp32_d ? 4 : 2));
  BS_RETURN_IF_ERROR(runtime::cuda_status(cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost), "copy D back"));
  out->resize(static_cast<size_t>(count));
  for (size_t i = 0; i < out->size(); ++i) {
    if (fp32_d) {
      std::memcpy(&(*out)[i], &raw[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[2 * i], 2);
      (*out)[i] = bf16_to_float(h);
    }
  }
  return Status::ok();
}

// Median time in us of `iters` runs of launch (each bracketed by events).
template <typename Launch>
Status median_us(int iters, const Launch& launch, double* us) {
  Events ev;
  BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventCreate(&ev.start), "cudaEventCreate"));
  BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventCreate(&ev.stop), "cudaEventCreate"));
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventRecord(ev.start), "cudaEventRecord"));
    BS_RETURN_IF_ERROR(launch());
    BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventRecord(ev.stop), "cudaEventRecord"));
    BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventSynchronize(ev.stop), "the GEMM kernel"));
    float ms = 0;
    BS_RETURN_IF_ERROR(runtime::cuda_status(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime"));
    times.push_back(ms);
  }
  if (!times.empty()) {
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    *us = 1000.0 * times[times.size() / 2];
  }
  return Status::ok();
}

}  // namespace

Status gpu_gemm(const formats::QuantizedMatrix& a, const formats::QuantizedMatrix& b, bool fp32_d, int iters,
                bool fetch_d, GpuGemmResult* result) {
  gemm::GemmProblem p;
  p.m = a.rows, p.n = b.rows, p.k = a.cols;
  p.a_recipe = a.recipe, p.b_recipe = b.recipe;
  p.d_type = fp32_d ? formats::DType::kF32 : formats::DType::kBf16;
  p.ldd = p.n;
  p.ldc = p.n;
  BS_RETURN_IF_ERROR(gemm::can_implement(p));
  gemm::DeviceOperand da, db;
  BS_RETURN_IF_ERROR(da.upload(a));
  BS_RETURN_IF_ERROR(db.upload(b));
  DeviceBuffer dd;
  const size_t d_bytes = static_cast<size_t>(p.m * p.n) * (fp32_d ? 4 : 2);
  BS_RETURN_IF_ERROR(dd.alloc(d_bytes, "allocate D"));
  gemm::GemmArguments args;
  args.a_data = da.data(), args.a_scales = da.scales(), args.a_scale_dec = da.scale_dec();
  args.b_data = db.data(), args.b_scales = db.scales(), args.b_scale_dec = db.scale_dec();
  args.d = dd.data();
  BS_RETURN_IF_ERROR(gemm::can_implement(p, args));
  const size_t ws_bytes = gemm::workspace_size(p);
  DeviceBuffer ws;
  BS_RETURN_IF_ERROR(ws.alloc(ws_bytes, "allocate the workspace"));
  BS_RETURN_IF_ERROR(gemm::run(p, args, ws.data(), ws_bytes, nullptr));
  BS_RETURN_IF_ERROR(runtime::cuda_status(cudaDeviceSynchronize(), "the GEMM kernel"));
  if (fetch_d) BS_RETURN_IF_ERROR(fetch(dd.data(), p.m * p.n, fp32_d, &result->d));
  return median_us(iters, [&] { return gemm::run(p, args, ws.data(), ws_bytes, nullptr); }, &result->median_us);
}

Status gpu_grouped_gemm(bool k_grouped, const formats::QuantizedMatrix& a, const std::vector<formats::QuantizedMatrix>& b,
                        const std::vector<int64_t>& ends, bool fp32_d, int iters, bool fetch_d, GpuGemmResult* result) {
  if (b.empty() || ends.empty()) return Status::error("b, ends: need at least one expert");
  gemm::GroupedGemmProblem p;
  p.mode = k_grouped ? gemm::GroupMode::kK : gemm::GroupMode::kM;
  p.num_groups = static_cast<int>(ends.size());
  p.m = a.rows, p.n = b[0].rows, p.k = a.cols;
  p.a_recipe = a.recipe, p.b_recipe = b[0].recipe;
  p.d_type = fp32_d ? formats::DType::kF32 : formats::DType::kBf16;
  p.ldd = p.ldc = p.n;
  BS_RETURN_IF_ERROR(gemm::can_implement(p));
  gemm::DeviceOperand da, db;
  BS_RETURN_IF_ERROR(da.upload(a));
  BS_RETURN_IF_ERROR(db.upload(b));
  const std::vector<int32_t> ends32(ends.begin(), ends.end());
  DeviceBuffer dd, dends;
  BS_RETURN_IF_ERROR(dends.upload(ends32, "copy the expert ends to the GPU"));
  const int64_t d_count = (k_grouped ? p.num_groups : 1) * p.m * p.n;
  BS_RETURN_IF_ERROR(dd.alloc(static_cast<size_t>(d_count) * (fp32_d ? 4 : 2), "allocate D"));
  gemm::GroupedGemmArguments args;
  args.a_data = da.data(), args.a_scales = da.scales(), args.a_scale_dec = da.scale_dec();
  args.b_data = db.data(), args.b_scales = db.scales(), args.b_scale_dec = db.scale_dec();
  args.group_ends = dends.as<const int32_t>();
  args.d = dd.data();
  BS_RETURN_IF_ERROR(gemm::can_implement(p, args));
  BS_RETURN_IF_ERROR(gemm::run(p, args, nullptr, 0, nullptr));
  BS_RETURN_IF_ERROR(runtime::cuda_status(cudaDeviceSynchronize(), "the grouped GEMM kernel"));
  if (fetch_d) BS_RETURN_IF_ERROR(fetch(dd.data(), d_count, fp32_d, &result->d));
  return median_us(iters, [&] { return gemm::run(p, args, nullptr, 0, nullptr); }, &result->median_us);
}

}  // namespace blockscale::tools
