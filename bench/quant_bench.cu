// Bandwidth of blockscale's GPU quantize (quant/quantize.h) against the device's own copy: for
// each shape, the median time of the kernel and of a device-to-device cudaMemcpyAsync moving the
// same number of bytes (read + written), with CUDA events, after warm-up; the L2 is flushed
// before every timed launch by a kernel that reads four times its size (clean lines: no write-back
// of the flush lands in the timed region; the flush also keeps the GPU busy while the host runs
// run()'s checks), so every shape is timed from DRAM.
//
//   effective bandwidth = (input bytes + every output byte: data, swizzled scales) / time
//   copy bandwidth      = (bytes read + bytes written by the memcpy) / time
//
// Usage: quant_bench [--iters N] [--only I,J,...]: N timed launches per case (default 30, at least
// 20); --only runs the listed cases alone (for profilers). Prints one line per case, then a
// markdown table.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "quant/mx_quantize.h"
#include "quant/quantize.h"

namespace {

namespace bq = blockscale::quant;
using bq::Directions;
using bq::InputType;
using bq::detail::ElementEncoder;

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// Pseudo-random inputs (never zeros): a hashed normal-ish value times a per-row magnitude.
__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

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

// Reads n 16-byte words; the (never taken) store keeps the loads.
__global__ void flush_read_kernel(const uint4* buf, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

// fp16 bench input: reinterpret the same hashed values as fp16 in range.
__global__ void fill_fp16_kernel(uint16_t* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint64_t>(i) * 3 + 1);
    x[i] = static_cast<uint16_t>((h & 0x83FF) | ((5 + (h >> 16) % 20) << 10));  // exponent 5..24
  }
}

struct Case {
  const char* label;
  int64_t rows, cols;
  InputType type;
  Directions dirs;
  ElementEncoder enc;
  bool with_amax;
};

struct Result {
  Case c;
  double bytes, kernel_us, copy_us;
};

int elem_bytes(InputType t) { return t == InputType::kFp32 ? 4 : 2; }
const char* name(InputType t) { return t == InputType::kBf16 ? "bf16" : t == InputType::kFp16 ? "fp16" : "fp32"; }
const char* name(Directions d) { return d == Directions::kRowwise ? "row" : d == Directions::kColumnwise ? "col" : "row+col"; }

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Times `launch` `iters` times after warm-up, flushing the L2 before each; returns the median
// in microseconds.
template <typename F>
double time_us(F launch, int iters, void* flush, size_t flush_bytes, cudaEvent_t a, cudaEvent_t b) {
  for (int i = 0; i < 3; ++i) launch();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    flush_read_kernel<<<1024, 512>>>(static_cast<const uint4*>(flush), static_cast<int64_t>(flush_bytes / 16),
                                     reinterpret_cast<unsigned*>(flush));
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaEventRecord(a));
    launch();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  return median(ms) * 1000.0;
}

Result run_case(const Case& c, int iters, void* flush, size_t flush_bytes) {
  bq::QuantizeProblem p;
  p.recipe = blockscale::formats::Recipe::kMxfp8E4M3;
  p.input_type = c.type;
  p.rows = c.rows, p.cols = c.cols, p.ld = c.cols;
  p.directions = c.dirs;
  const int64_t n = c.rows * c.cols;
  void* x = nullptr;
  uint8_t *rd = nullptr, *rs = nullptr, *cd = nullptr, *cs = nullptr;
  float* amax = nullptr;
  int* flag = nullptr;
  CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(n * elem_bytes(c.type))));
  if (c.type == InputType::kFp16)
    fill_fp16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(x), n);
  else
    fill_kernel<<<1024, 256>>>(x, n, c.cols, elem_bytes(c.type));
  CHECK_CUDA(cudaGetLastError());
  const int64_t out_bytes[4] = {bq::rowwise_data_bytes(p), bq::rowwise_scale_bytes(p),
                                bq::columnwise_data_bytes(p), bq::columnwise_scale_bytes(p)};
  uint8_t** outs[4] = {&rd, &rs, &cd, &cs};
  double bytes = static_cast<double>(n) * elem_bytes(c.type);
  for (int i = 0; i < 4; ++i) {
    if (out_bytes[i] > 0) CHECK_CUDA(cudaMalloc(outs[i], static_cast<size_t>(out_bytes[i])));
    bytes += static_cast<double>(out_bytes[i]);
  }
  CHECK_CUDA(cudaMalloc(&flag, sizeof(int)));
  CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
  if (c.with_amax) CHECK_CUDA(cudaMalloc(&amax, sizeof(float)));

  bq::QuantizeInputs in;
  in.x = x;
  bq::QuantizeOutputs out;
  out.rowwise_data = rd, out.rowwise_scales = rs, out.columnwise_data = cd, out.columnwise_scales = cs;
  out.amax = amax, out.nonfinite = flag;
  const auto check = bq::can_implement(p, in, out);
  if (!check.is_ok()) {
    std::fprintf(stderr, "can_implement: %s\n", check.message().c_str());
    std::exit(1);
  }
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  const double kernel_us = time_us(
      [&] {
        const auto s = bq::detail::run_mxfp8(p, in, out, c.enc, nullptr);
        if (!s.is_ok()) {
          std::fprintf(stderr, "run: %s\n", s.message().c_str());
          std::exit(1);
        }
      },
      iters, flush, flush_bytes, a, b);
  CHECK_CUDA(cudaGetLastError());

  // The copy moves the same bytes: half read, half written.
  const size_t copy_bytes = static_cast<size_t>(bytes / 2);
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  CHECK_CUDA(cudaMemset(src, 0x5A, copy_bytes));
  const double copy_us = time_us(
      [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); },
      iters, flush, flush_bytes, a, b);

  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  for (void* ptr : {x, static_cast<void*>(rd), static_cast<void*>(rs), static_cast<void*>(cd),
                    static_cast<void*>(cs), static_cast<void*>(amax), static_cast<void*>(flag), src, dst})
    if (ptr) CHECK_CUDA(cudaFree(ptr));
  const Result r{c, bytes, kernel_us, copy_us};
  std::printf("case %-28s %6lldx%-6lld %s %-7s %-9s%s: %9.1f us kernel, %9.1f us copy\n", c.label,
              static_cast<long long>(c.rows), static_cast<long long>(c.cols), name(c.type), name(c.dirs),
              c.enc == ElementEncoder::kHardware ? "hw-cvt" : "sw-encode", c.with_amax ? " +amax" : "",
              kernel_us, copy_us);
  std::fflush(stdout);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  std::string only;  // comma-separated case indices; empty: all
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::max(20, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = std::string(",") + argv[++i] + ",";
    else {
      std::fprintf(stderr, "usage: quant_bench [--iters N] [--only I,J,...]\n");
      return 2;
    }
  }
  int dev = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("quant_bench: %s (sm_%d%d), %d SMs, L2 %d MB; median of %d timed launches, L2 flushed (read) before each\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, iters);
  const size_t flush_bytes = static_cast<size_t>(prop.l2CacheSize) * 4;  // also covers the host time of run()
  void* flush = nullptr;
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  CHECK_CUDA(cudaMemset(flush, 0, flush_bytes));

  const ElementEncoder hw = ElementEncoder::kHardware, sw = ElementEncoder::kSoftware;
  const Case cases[] = {
      {"mxfp8 e4m3", 16384, 8192, InputType::kBf16, Directions::kRowwise, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kBf16, Directions::kBoth, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kBf16, Directions::kColumnwise, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kBf16, Directions::kBoth, hw, true},
      {"mxfp8 e4m3 (software encode)", 16384, 8192, InputType::kBf16, Directions::kRowwise, sw, false},
      {"mxfp8 e4m3 (software encode)", 16384, 8192, InputType::kBf16, Directions::kBoth, sw, false},
      {"mxfp8 e4m3", 4096, 14336, InputType::kBf16, Directions::kRowwise, hw, false},
      {"mxfp8 e4m3", 4096, 14336, InputType::kBf16, Directions::kBoth, hw, false},
      {"mxfp8 e4m3", 128000, 7168, InputType::kBf16, Directions::kBoth, hw, false},
      {"mxfp8 e4m3 (1 MiB)", 512, 1024, InputType::kBf16, Directions::kRowwise, hw, false},
      {"mxfp8 e4m3 (1 MiB)", 512, 1024, InputType::kBf16, Directions::kBoth, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kFp16, Directions::kBoth, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kFp32, Directions::kRowwise, hw, false},
      {"mxfp8 e4m3", 16384, 8192, InputType::kFp32, Directions::kBoth, hw, false},
  };
  std::vector<Result> results;
  const int n_cases = static_cast<int>(sizeof(cases) / sizeof(cases[0]));
  for (int i = 0; i < n_cases; ++i)
    if (only.empty() || only.find("," + std::to_string(i) + ",") != std::string::npos)
      results.push_back(run_case(cases[i], iters, flush, flush_bytes));
  CHECK_CUDA(cudaFree(flush));

  std::printf("\n| shape | input | copies | encoder | MB moved | kernel us | GB/s | copy GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    const double gbs = r.bytes / (r.kernel_us * 1e3), copy_gbs = 2.0 * static_cast<size_t>(r.bytes / 2) / (r.copy_us * 1e3);
    std::printf("| %lldx%lld | %s | %s%s | %s | %.1f | %.1f | %.0f | %.0f | %.1f |\n",
                static_cast<long long>(r.c.rows), static_cast<long long>(r.c.cols), name(r.c.type),
                name(r.c.dirs), r.c.with_amax ? " +amax" : "",
                r.c.enc == ElementEncoder::kHardware ? "hw-cvt" : "sw-encode", r.bytes / 1e6,
                r.kernel_us, gbs, copy_gbs, 100.0 * gbs / copy_gbs);
  }
  return 0;
}
