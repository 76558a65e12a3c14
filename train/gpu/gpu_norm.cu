// train/gpu/gpu_ops.h's RMSNorm, forward and backward (d_gain included), mirroring
// train/cpu/cpu_ops.cpp's rmsnorm_forward / rmsnorm_backward. fp32; reductions over rows use
// fixed-order per-chunk partials and column_finish (gpu_ops_common.cuh), never atomics.
#include <algorithm>

#include "train/cpu/cpu_ops.h"  // kRmsNormEps
#include "train/gpu/gpu_ops.h"
#include "train/gpu/gpu_ops_common.cuh"

namespace blockscale::train::gpu {

using namespace detail;

namespace {

// ---- RMSNorm -----------------------------------------------------------------------------------
// The fast path (d % 4 == 0, every row 16-byte aligned, d <= kNormMaxD) reads x, dy and dx once:
// each row stays in registers between its sum and its write. A row group of G threads (whole
// warps) takes a row, thread t its float4s t, t + G, t + 2G, t + 3G (zeros past d); a block runs
// kNormBlockThreads / G groups (at least one) side by side on consecutive rows. Four float4s per
// tensor and thread keep 64 KB (forward: four blocks of 256 threads per SM at <= 64 registers) or
// 96 KB (backward: dy, x and dx; two blocks at <= 128) of loads in flight per SM, in blocks small
// enough that one's loads overlap another's barrier. The backward also keeps each thread's d_gain
// columns in registers over a chunk of rows and writes one partial row per chunk; column_finish
// adds the chunks in order. Other shapes take the fallback: a warp per row that reads it twice,
// d_gain through column_sum.
constexpr int kNormBlockThreads = 256;
constexpr int kNormMaxThreads = 512;                       // the largest block: one group of d = kNormMaxD
constexpr int kNormMaxWarps = kNormMaxThreads / kWarp;
constexpr int kNormVec = 4;                                // float4s per thread and row
constexpr int kNormMaxD = 4 * kNormVec * kNormMaxThreads;  // 8192

// A thread's float4s of a row: q = t + i * group, zeros where q >= d4 or !valid.
__device__ __forceinline__ void load_slice(const float* row, int d4, int t, int group, bool valid,
                                           float4 (&v)[kNormVec]) {
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int q = t + i * group;
    v[i] = valid && q < d4 ? load4(row + 4 * q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}
__device__ __forceinline__ void store_slice(float* row, int d4, int t, int group, const float4 (&v)[kNormVec]) {
#pragma unroll
  for (int i = 0; i < kNormVec; ++i)
    if (t + i * group < d4) *reinterpret_cast<float4*>(row + 4 * (t + i * group)) = v[i];
}

// The sum of v over a row group's `warps` warps from `first`, in warp order, to every thread of
// the group. Every thread of the block calls it together (one barrier); the calls alternate
// between red's two halves, so a call's writes never meet the previous call's reads.
__device__ __forceinline__ float row_group_sum(float v, float (&red)[2][kNormMaxWarps], int* parity, int first,
                                               int warps) {
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) red[*parity][threadIdx.x / kWarp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < warps; ++w) t += red[*parity][first + w];
  *parity ^= 1;
  return t;
}

// Where a thread of a row-group block sits: row group k of `groups`, thread t of `group`.
struct RowGroupThread {
  int group, groups, k, t, first_warp, warps;
  __device__ explicit RowGroupThread(int group_threads)
      : group(group_threads),
        groups(blockDim.x / group_threads),
        k(threadIdx.x / group_threads),
        t(threadIdx.x % group_threads),
        first_warp(threadIdx.x / group_threads * group_threads / kWarp),
        warps(group_threads / kWarp) {}
};

__global__ void __launch_bounds__(kNormMaxThreads, 2)
    rmsnorm_forward_rows_kernel(const float* x, const float* gain, int64_t rows, int d, int group_threads, float* y,
                                float* rstd) {
  __shared__ float red[2][kNormMaxWarps];
  const RowGroupThread g(group_threads);
  const int d4 = d / 4;
  float4 gn[kNormVec];
  load_slice(gain, d4, g.t, g.group, true, gn);
  int parity = 0;
  for (int64_t base = blockIdx.x * int64_t{g.groups}; base < rows; base += int64_t{gridDim.x} * g.groups) {
    const int64_t r = base + g.k;
    const bool valid = r < rows;
    float4 v[kNormVec];
    load_slice(x + r * d, d4, g.t, g.group, valid, v);
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < kNormVec; ++i) {
      ss += v[i].x * v[i].x, ss += v[i].y * v[i].y;
      ss += v[i].z * v[i].z, ss += v[i].w * v[i].w;
    }
    ss = row_group_sum(ss, red, &parity, g.first_warp, g.warps);
    if (!valid) continue;
    const float s = 1.0f / sqrtf(ss / static_cast<float>(d) + kRmsNormEps);
    if (g.t == 0) rstd[r] = s;
#pragma unroll
    for (int i = 0; i < kNormVec; ++i)
      v[i] = make_float4(v[i].x * s * gn[i].x, v[i].y * s * gn[i].y, v[i].z * s * gn[i].z, v[i].w * s * gn[i].w);
    store_slice(y + r * d, d4, g.t, g.group, v);
  }
}

// Block b takes rows [b chunk_rows, (b + 1) chunk_rows): dx += s * (gain*dy - x * s^2 * mean(gain*dy*x))
// per row, and partials[b] = the chunk's sum of dy * x * s (each group over its rows in order, then
// the groups in order).
__global__ void __launch_bounds__(kNormMaxThreads, 1) rmsnorm_backward_rows_kernel(
    const float* dy, const float* x, const float* gain, const float* rstd, int64_t rows, int d, int group_threads,
    int64_t chunk_rows, float* dx, float* partials) {
  __shared__ float red[2][kNormMaxWarps];
  __shared__ float4 sums[kNormMaxThreads];
  const RowGroupThread g(group_threads);
  const int d4 = d / 4;
  float4 gn[kNormVec], acc[kNormVec];
  load_slice(gain, d4, g.t, g.group, true, gn);
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const int64_t r0 = blockIdx.x * chunk_rows, r1 = rows < r0 + chunk_rows ? rows : r0 + chunk_rows;
  int parity = 0;
  for (int64_t base = r0; base < r1; base += g.groups) {
    const int64_t r = base + g.k;
    const bool valid = r < r1;
    float4 dyv[kNormVec], xv[kNormVec], dxv[kNormVec];  // all three rows' loads in flight before the barrier
    load_slice(dy + r * d, d4, g.t, g.group, valid, dyv);
    load_slice(x + r * d, d4, g.t, g.group, valid, xv);
    load_slice(dx + r * d, d4, g.t, g.group, valid, dxv);
    const float s = valid ? rstd[r] : 0.0f;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kNormVec; ++i) {
      dot += gn[i].x * dyv[i].x * xv[i].x, dot += gn[i].y * dyv[i].y * xv[i].y;
      dot += gn[i].z * dyv[i].z * xv[i].z, dot += gn[i].w * dyv[i].w * xv[i].w;
    }
    dot = row_group_sum(dot, red, &parity, g.first_warp, g.warps);
    if (!valid) continue;
    const float m = dot / static_cast<float>(d) * s * s;
    auto term = [&](float gi, float dyi, float xi) { return s * (gi * dyi - xi * m); };
#pragma unroll
    for (int i = 0; i < kNormVec; ++i) {
      dxv[i].x += term(gn[i].x, dyv[i].x, xv[i].x), dxv[i].y += term(gn[i].y, dyv[i].y, xv[i].y);
      dxv[i].z += term(gn[i].z, dyv[i].z, xv[i].z), dxv[i].w += term(gn[i].w, dyv[i].w, xv[i].w);
      acc[i].x += dyv[i].x * xv[i].x * s, acc[i].y += dyv[i].y * xv[i].y * s;
      acc[i].z += dyv[i].z * xv[i].z * s, acc[i].w += dyv[i].w * xv[i].w * s;
    }
    store_slice(dx + r * d, d4, g.t, g.group, dxv);
  }
  // The groups' sums in group order, one float4 of each thread at a time.
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    sums[threadIdx.x] = acc[i];
    __syncthreads();
    if (g.k == 0 && g.t + i * g.group < d4) {
      float4 total = sums[g.t];
      for (int k = 1; k < g.groups; ++k) {
        const float4 p = sums[k * g.group + g.t];
        total.x += p.x, total.y += p.y, total.z += p.z, total.w += p.w;
      }
      *reinterpret_cast<float4*>(partials + blockIdx.x * int64_t{d} + 4 * (g.t + i * g.group)) = total;
    }
    __syncthreads();
  }
}

// The fallback's element-wise pass, each lane on float4s when `vector` (d % 4 == 0, rows 16-byte
// aligned): the per-element arithmetic is the scalar loop's, so the bits are too. The reductions
// before it keep their scalar order (lane l sums columns l, l + 32, ...).
template <class Body>
__device__ __forceinline__ void for_row_columns(int d, int lane, bool vector, const Body& body) {
  if (vector) {
    for (int c = 4 * lane; c < d; c += 4 * kWarp) body.four(c);
  } else {
    for (int c = lane; c < d; c += kWarp) body.one(c);
  }
}

// Fallback, one warp per row: the sum of squares, then y.
__global__ void rmsnorm_forward_kernel(const float* x, const float* gain, int64_t rows, int d, float* y, float* rstd,
                                       bool vector) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const float* xr = x + r * d;
    float ss = 0.0f;
    for (int c = lane; c < d; c += kWarp) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    const float s = 1.0f / sqrtf(ss / static_cast<float>(d) + kRmsNormEps);
    if (lane == 0) rstd[r] = s;
    float* yr = y + r * d;
    struct {
      const float *xr, *gain;
      float* yr;
      float s;
      __device__ void one(int c) const { yr[c] = xr[c] * s * gain[c]; }
      __device__ void four(int c) const {
        const float4 v = load4(xr + c), g = load4(gain + c);
        *reinterpret_cast<float4*>(yr + c) =
            make_float4(v.x * s * g.x, v.y * s * g.y, v.z * s * g.z, v.w * s * g.w);
      }
    } body{xr, gain, yr, s};
    for_row_columns(d, lane, vector, body);
  }
}

// Fallback: dx += s * (gain*dy - x * s^2 * mean(gain*dy*x)), one warp per row; d_gain through column_sum.
__global__ void rmsnorm_backward_dx_kernel(const float* dy, const float* x, const float* gain, const float* rstd,
                                           int64_t rows, int d, float* dx, bool vector) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const float* xr = x + r * d;
    const float* dyr = dy + r * d;
    float dot = 0.0f;
    for (int c = lane; c < d; c += kWarp) dot += gain[c] * dyr[c] * xr[c];
    dot = warp_sum(dot);
    const float s = rstd[r];
    const float m = dot / static_cast<float>(d) * s * s;
    struct {
      const float *xr, *dyr, *gain;
      float* dxr;
      float s, m;
      __device__ float term(float g, float dy, float x) const { return s * (g * dy - x * m); }
      __device__ void one(int c) const { dxr[c] += term(gain[c], dyr[c], xr[c]); }
      __device__ void four(int c) const {
        const float4 g = load4(gain + c), dy = load4(dyr + c), x = load4(xr + c);
        float4 o = load4(dxr + c);
        o.x += term(g.x, dy.x, x.x), o.y += term(g.y, dy.y, x.y), o.z += term(g.z, dy.z, x.z);
        o.w += term(g.w, dy.w, x.w);
        *reinterpret_cast<float4*>(dxr + c) = o;
      }
    } body{xr, dyr, gain, dx + r * d, s, m};
    for_row_columns(d, lane, vector, body);
  }
}

struct RmsNormGainTerm {  // dy * x * rstd, the CPU's order
  const float *dy, *x, *rstd;
  int d;
  __device__ float operator()(int64_t r, int c) const { return dy[r * d + c] * x[r * d + c] * rstd[r]; }
};

// The fast path's threads per row group for d (whole warps, kNormVec float4s each); 0 when d or
// the pointers need the fallback.
int norm_group_threads(int d, bool aligned) {
  if (d % 4 != 0 || d > kNormMaxD || !aligned) return 0;
  return (d / 4 + kNormVec * kWarp - 1) / (kNormVec * kWarp) * kWarp;
}
int norm_groups(int group_threads) { return std::max(1, kNormBlockThreads / group_threads); }  // per block

// The backward's chunks of rows (a block and a partial row each): at least 16 rows, at most 256
// chunks; fixed by `rows` alone, so the sums' order is too. 256 blocks, two per SM at a time (d <=
// 4096), fill an H200's 132 SMs in one wave, and the partials (written, then read by
// column_finish) stay at 2 x 256 rows of traffic.
int64_t norm_chunk_rows(int64_t rows) { return std::max<int64_t>(16, (rows + 255) / 256); }
int64_t norm_chunks(int64_t rows) { return (rows + norm_chunk_rows(rows) - 1) / norm_chunk_rows(rows); }

}  // namespace

// ---- RMSNorm ---------------------------------------------------------------------------------------

Status rmsnorm_forward(const float* x, const float* gain, int64_t rows, int d, float* y, float* rstd,
                       cudaStream_t stream) {
  constexpr const char* fn = "rmsnorm_forward";
  BS_RETURN_IF_ERROR(check_elements(fn, rows, d, "d"));
  if (rows == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  BS_RETURN_IF_ERROR(check_ptr(fn, "gain", gain));
  BS_RETURN_IF_ERROR(check_ptr(fn, "y", y));
  BS_RETURN_IF_ERROR(check_ptr(fn, "rstd", rstd));
  const bool aligned = aligned_to(x, 16) && aligned_to(gain, 16) && aligned_to(y, 16);
  const int group = norm_group_threads(d, aligned);
  if (group == 0) {
    rmsnorm_forward_kernel<<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(x, gain, rows, d, y, rstd,
                                                                                      d % 4 == 0 && aligned);
    return launch_status(fn);
  }
  const int groups = norm_groups(group);  // a row per group, grid-stride past kMaxBlocks
  rmsnorm_forward_rows_kernel<<<blocks_for(rows, groups), groups * group, 0, stream>>>(x, gain, rows, d, group, y,
                                                                                        rstd);
  return launch_status(fn);
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int d) {
  if (rows < 0 || d < 1) return 0;
  const size_t fast = align_up(sizeof(float) * static_cast<size_t>(norm_chunks(rows)) * static_cast<size_t>(d));
  return std::max(fast, column_sum_workspace_bytes(rows, d));  // either path, whatever the pointers
}

Status rmsnorm_backward(const float* dy, const float* x, const float* gain, const float* rstd, int64_t rows,
                        int d, float* dx, float* d_gain, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  constexpr const char* fn = "rmsnorm_backward";
  BS_RETURN_IF_ERROR(check_elements(fn, rows, d, "d"));
  if (rows == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "dy", dy));
  BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  BS_RETURN_IF_ERROR(check_ptr(fn, "gain", gain));
  BS_RETURN_IF_ERROR(check_ptr(fn, "rstd", rstd));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dx", dx));
  BS_RETURN_IF_ERROR(check_ptr(fn, "d_gain", d_gain));
  BS_RETURN_IF_ERROR(check_workspace(fn, rmsnorm_backward_workspace_bytes(rows, d), workspace, workspace_bytes));
  const bool aligned = aligned_to(dy, 16) && aligned_to(x, 16) && aligned_to(gain, 16) && aligned_to(dx, 16);
  const int group = norm_group_threads(d, aligned);
  float* partials = static_cast<float*>(workspace);
  if (group == 0) {
    rmsnorm_backward_dx_kernel<<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(
        dy, x, gain, rstd, rows, d, dx, d % 4 == 0 && aligned);
    column_sum(RmsNormGainTerm{dy, x, rstd, d}, rows, d, /*accumulate=*/true, partials, d_gain, stream);
    return launch_status(fn);
  }
  const int64_t chunks = norm_chunks(rows);
  rmsnorm_backward_rows_kernel<<<static_cast<unsigned>(chunks), norm_groups(group) * group, 0, stream>>>(
      dy, x, gain, rstd, rows, d, group, norm_chunk_rows(rows), dx, partials);
  column_finish(partials, chunks, d, /*accumulate=*/true, d_gain, stream);
  return launch_status(fn);
}

}  // namespace blockscale::train::gpu
