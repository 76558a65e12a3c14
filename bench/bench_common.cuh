// What the benchmark programs share: runtime/'s errors and device memory made fatal (a benchmark has
// nothing left to measure after a failed call), the counter hash their input fills use, the cuBLAS
// BF16 GEMM the GEMM benchmarks compare against, and the timings (queued or isolated; from DRAM
// with the L2 flushed before each launch).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/status.h"
#include "runtime/cuda_status.h"
#include "runtime/device.h"

// A CUDA runtime call that must succeed: runtime::cuda_status's message, then exit.
#define CHECK_CUDA(call) ::bench::check(::blockscale::runtime::cuda_status((call), #call))

namespace bench {

using blockscale::runtime::DeviceBuffer;

// Prints an error ("what: message") and ends the program.
inline void check(const blockscale::Status& s, const char* what = nullptr) {
  if (s) return;
  std::fprintf(stderr, "%s%s%s\n", what ? what : "", what ? ": " : "", s.message().c_str());
  std::exit(1);
}

// `count` elements of T in device memory, named `what` in an error (which ends the program).
template <typename T>
DeviceBuffer device_array(int64_t count, const char* what) {
  DeviceBuffer b;
  check(b.alloc(static_cast<size_t>(std::max<int64_t>(count, 0)) * sizeof(T), what));
  return b;
}

// A 64-bit mix (splitmix64's finaliser), low 32 bits.
__device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Input fills of the GEMM benches (grid-stride, a counter hash per element):
// E4M3 codes, never NaN (S.1111.111 -> S.1111.110).
__global__ inline void fill_e4m3(uint8_t* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint8_t c = static_cast<uint8_t>(hash32(seed + static_cast<uint64_t>(i)));
    if ((c & 0x7F) == 0x7F) c ^= 1;
    x[i] = c;
  }
}
// fp32 scales in [2^-4, 2^4), log-uniform.
__global__ inline void fill_scales(float* s, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    s[i] = exp2f((hash32(seed + static_cast<uint64_t>(i)) % 8192) / 1024.0f - 4.0f);
}
// bf16 values of a standard normal distribution (Box-Muller on two counter hashes).
__global__ inline void fill_bf16_normal(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t key = (seed << 40) + 2 * static_cast<uint64_t>(i);  // seeds' streams apart
    const float u1 = (hash32(key) + 1.0f) * 0x1p-32f;                    // (0, 1]
    const float u2 = hash32(key + 1) * 0x1p-32f;
    x[i] = __float2bfloat16_rn(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}
// fp32 center + spread * a triangular value in (-1, 1) from a counter hash.
__global__ inline void fill_f32(float* x, int64_t n, uint64_t seed, float center, float spread) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash32((seed << 40) + static_cast<uint64_t>(i));
    x[i] = center + spread * (((h & 0xFFFF) + (h >> 16)) / 65536.0f - 1.0f);
  }
}
// bf16 values in [-1, 1).
__global__ inline void fill_bf16(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __float2bfloat16_rn((hash32(seed + static_cast<uint64_t>(i)) % 65536) / 32768.0f - 1.0f);
}

// The cuBLAS BF16 peer: row-major D (m x n) = A (m x k) . B (n x k)^T, A and B K-major bf16, D bf16,
// fp32 compute, alpha 1, beta 0, on the handle's stream. cuBLAS is column-major, so it is asked for
// D^T (n x m, ld n) = B^T (B read as a transposed k x n matrix) . A^T (A read as k x m).
inline cublasStatus_t cublas_bf16_gemm(cublasHandle_t blas, int64_t m, int64_t n, int64_t k,
                                       const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* d) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                      &one, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF, static_cast<int>(k), &zero, d,
                      CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// The command line of a benchmark whose options are --iters N (at least 3; default 20) and
// --only I,J,... (case indices, 0-based; empty: every case): false after printing the usage line
// for anything else.
inline bool parse_iters_and_cases(int argc, char** argv, const char* program, int* iters, std::vector<int>* only) {
  *iters = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--iters" && i + 1 < argc) {
      *iters = std::max(3, std::atoi(argv[++i]));
    } else if (std::string(argv[i]) == "--only" && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) only->push_back(std::atoi(t));
    } else {
      std::fprintf(stderr, "usage: %s [--iters N] [--only I,J,...]\n", program);
      return false;
    }
  }
  return true;
}

// How median_ms times a launch:
//   kSustained: launches queued back to back behind a ~5 ms spin kernel (the host runs ahead of the
//               GPU during the spin, so no host launch cost shows), an event pair around each: the
//               GPU stays loaded, at the clocks its power limit allows under sustained work (a
//               training step's case);
//   kIsolated : each launch alone: a device synchronisation, a ~0.5 ms spin kernel queued ahead (so
//               the host's launch cost stays hidden), the event pair, a synchronisation. The GPU
//               starts each launch after an idle moment, as in DeepGEMM's harness's event timing
//               (its profiler timing also flushes L2 before each call; neither mode here does).
enum class Timing { kSustained, kIsolated };
inline Timing& timing() {
  static Timing t = Timing::kSustained;
  return t;
}
// The --timing option's value, "sustained" or "isolated", into timing(); false (after saying why
// on stderr) for anything else.
inline bool set_timing(const char* name) {
  if (std::string(name) == "sustained") {
    timing() = Timing::kSustained;
  } else if (std::string(name) == "isolated") {
    timing() = Timing::kIsolated;
  } else {
    std::fprintf(stderr, "--timing: sustained or isolated, got %s\n", name);
    return false;
  }
  return true;
}
inline const char* timing_name() { return timing() == Timing::kSustained ? "sustained" : "isolated"; }

__global__ inline void spin_kernel(int64_t cycles) {
  const int64_t t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Median time in ms of `iters` launches of fn (after 3 warm-up launches), one event pair each,
// timed as timing() says. Nothing else may run on the GPU meanwhile.
template <typename Fn>
float median_ms(Fn fn, int iters) {
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(iters));
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  const bool isolated = timing() == Timing::kIsolated;
  CHECK_CUDA(cudaDeviceSynchronize());
  if (!isolated) spin_kernel<<<1, 1>>>(10000000);
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  if (isolated) CHECK_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < iters; ++i) {
    if (isolated) spin_kernel<<<1, 1>>>(1000000);
    CHECK_CUDA(cudaEventRecord(ev[2 * i]));
    fn();
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1]));
    if (isolated) CHECK_CUDA(cudaDeviceSynchronize());
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Reads n 16-byte words; the (never taken) store keeps the loads.
__global__ inline void flush_read_kernel(const uint4* buf, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

// What median_us_flushed reads before each launch: a zeroed buffer of four times the device's L2
// (which also covers the host time of a launch). Prints the benchmark's device line first.
struct L2Flush {
  DeviceBuffer buffer;
  size_t bytes = 0;
};
inline L2Flush l2_flush(const char* program, int iters) {
  int dev = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s: %s (sm_%d%d), %d SMs, L2 %d MB; median of %d timed launches, L2 flushed (read) before each\n",
              program, prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, iters);
  L2Flush f;
  f.bytes = static_cast<size_t>(prop.l2CacheSize) * 4;
  f.buffer = device_array<uint8_t>(static_cast<int64_t>(f.bytes), "L2 flush");
  CHECK_CUDA(cudaMemset(f.buffer.data(), 0, f.bytes));
  return f;
}

// Median time in microseconds of `iters` launches (after 3 warm-up launches), timed from DRAM: the
// L2 flushed before each by flush_read_kernel reading `flush` (flush_bytes: a few times the L2; clean
// lines, so no write-back of the flush lands in the timed region), an event pair (a, b) around
// each launch. Nothing else may run on the GPU meanwhile.
template <typename F>
double median_us_flushed(F launch, int iters, void* flush, size_t flush_bytes, cudaEvent_t a, cudaEvent_t b) {
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
  std::sort(ms.begin(), ms.end());
  const size_t h = ms.size() / 2;
  return (ms.size() % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h])) * 1000.0;
}

// `launch` and the device's own copy of `bytes` (half read, half written: a device-to-device
// cudaMemcpyAsync of bytes / 2, what "% of copy" divides by), each timed by median_us_flushed;
// prints the case's line (`label`).
struct AgainstCopy {
  double us, copy_us;
};
template <typename F>
AgainstCopy time_against_copy(const std::string& label, F launch, double bytes, int iters, void* flush,
                              size_t flush_bytes) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  AgainstCopy t;
  t.us = median_us_flushed(launch, iters, flush, flush_bytes, a, b);
  const size_t half = static_cast<size_t>(bytes / 2);
  const DeviceBuffer src = device_array<uint8_t>(static_cast<int64_t>(half), "copy source");
  const DeviceBuffer dst = device_array<uint8_t>(static_cast<int64_t>(half), "copy destination");
  CHECK_CUDA(cudaMemset(src.data(), 0, half));
  t.copy_us = median_us_flushed(
      [&] { CHECK_CUDA(cudaMemcpyAsync(dst.data(), src.data(), half, cudaMemcpyDeviceToDevice)); }, iters, flush,
      flush_bytes, a, b);
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::printf("case %-40s: %9.1f us, %9.1f us copy, %5.1f%% of copy\n", label.c_str(), t.us, t.copy_us,
              100.0 * t.copy_us / t.us);
  std::fflush(stdout);
  return t;
}

// Whether case `index` runs: every case when `only` (--only) is empty.
inline bool selected(const std::vector<int>& only, size_t index) {
  return only.empty() || std::find(only.begin(), only.end(), static_cast<int>(index)) != only.end();
}

}  // namespace bench
