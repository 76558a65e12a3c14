// train/gpu/gpu_ops.h, the element-wise and row-wise parts: embedding, SwiGLU, cross-entropy,
// deterministic sums, AdamW, clipping scale, bf16 conversion. fp32 throughout; each mirrors the
// train/cpu/cpu_ops.cpp function of the same name (RMSNorm: gpu_norm.cu; attention:
// gpu_attention.cu; router and MoE: gpu_router.cu). Row kernels give a warp (cross-entropy's short
// rows) or a block (long vocab rows) to a row; reductions over rows use fixed-order per-chunk
// partials and the ordered sum of gpu_ops_common.cuh, never atomics.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <limits>

#include "formats/scalar_codecs.h"  // defines: float_to_bf16_bits_rn
#include "train/gpu/gpu_ops.h"
#include "train/gpu/gpu_ops_common.cuh"
#include "train/model/optimizer.h"        // clip_factor

namespace blockscale::train::gpu {
namespace detail {

__global__ void column_finish_kernel(const float* partials, int64_t chunks, int cols, bool accumulate, float* out) {
  __shared__ float part[kColumnFinishRows][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t k = threadIdx.y; k < chunks; k += kColumnFinishRows) acc += partials[k * cols + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = part[0][threadIdx.x];
    for (int i = 1; i < kColumnFinishRows; ++i) total += part[i][threadIdx.x];
    out[c] = accumulate ? out[c] + total : total;
  }
}

}  // namespace detail

using namespace detail;

namespace {

__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7FC00000u); }

// ---- Embedding ---------------------------------------------------------------------------------

// Both directions split rows into chunks of kWarp * V columns, lane l taking the V floats at the
// chunk's start + V l (the forward: a warp per row, its chunks in turn; the backward: a warp per
// chunk): V = 4 (16-byte accesses) where d % 4 == 0 and every pointer is 16-byte aligned, else 1.
// A scalar access per thread keeps too few bytes in flight (gpu_ops_common.cuh).
template <int V>
struct Slice {  // V consecutive floats of a row
  float v[V];
  __device__ static Slice load(const float* p) {
    Slice s;
    if constexpr (V == 4) {
      const float4 q = load4(p);
      s.v[0] = q.x, s.v[1] = q.y, s.v[2] = q.z, s.v[3] = q.w;
    } else {
      s.v[0] = *p;
    }
    return s;
  }
  __device__ void store(float* p) const {
    if constexpr (V == 4) *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else *p = v[0];
  }
  __device__ void add(const Slice& o) {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] += o.v[i];
  }
};

template <int V>
__host__ __device__ int64_t embedding_chunks(int d) { return (d + kWarp * V - 1) / (kWarp * V); }

template <int V>
__global__ void __launch_bounds__(kThreads) embedding_forward_kernel(const int32_t* tokens, int64_t n_tokens,
                                                                     int seq_len, int d, int vocab, const float* embed,
                                                                     const float* pos_embed, float* x) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t t = warp_index(); t < n_tokens; t += warp_stride()) {  // a warp per row, its chunks in turn
    const int32_t id = tokens[t];
    const bool valid = id >= 0 && id < vocab;
    const float* e = embed + int64_t{valid ? id : 0} * d;  // row 0 read and dropped: one path, no branch
    const float* p = pos_embed + (t % seq_len) * d;
#pragma unroll 4
    for (int64_t c = V * lane; c < d; c += kWarp * V) {
      Slice<V> v = Slice<V>::load(e + c);
      v.add(Slice<V>::load(p + c));  // e + p: the CPU's sum (a + b == b + a)
      if (!valid)
#pragma unroll
        for (int i = 0; i < V; ++i) v.v[i] = quiet_nan();
      v.store(x + t * d + c);
    }
  }
}

// Sort keys: the token id, or vocab (sorts last, skipped) when out of range; values: positions.
__global__ void embedding_sort_keys_kernel(const int32_t* tokens, int64_t n_tokens, int vocab, uint32_t* keys,
                                           int32_t* positions) {
  for (int64_t t = thread_index(); t < n_tokens; t += thread_stride()) {
    const int32_t id = tokens[t];
    keys[t] = id >= 0 && id < vocab ? static_cast<uint32_t>(id) : static_cast<uint32_t>(vocab);
    positions[t] = static_cast<int32_t>(t);
  }
}

// The backward's dx rows a warp keeps in flight: its adds are a chain (the CPU's order), its
// loads are not, so they are issued a batch at a time.
constexpr int kEmbedRowsInFlight = 8;

// d_embed[id] += dx rows of the runs of equal sorted keys that start in sorted entries [32 g,
// 32 g + 32), each run in position order (the stable sort kept it), at one chunk of columns: the
// warp walks the entries from the group's first run start to the end of its last run (past the
// group if that run is), 32 keys at a time, and loads each batch's dx rows, and the d_embed rows of
// the runs starting in it, before adding: a run of one entry costs no more latency than a long one.
template <int V>
__device__ __forceinline__ void embedding_token_runs(const uint32_t* keys, const int32_t* positions, int64_t n_tokens,
                                                     int d, int vocab, const float* dx, float* d_embed, int64_t g,
                                                     int64_t c, int lane) {
  const int64_t group_end = (g + 1) * kWarp;
  const bool valid = c < d;
  Slice<V> acc;
  int64_t acc_row = -1;  // the d_embed row acc belongs to; -1: none yet
  bool started = false;  // past the first run start of the group
  for (int64_t i0 = g * kWarp; i0 < n_tokens; i0 += kWarp) {
    const int64_t i = i0 + lane;
    const uint32_t key = i < n_tokens ? keys[i] : static_cast<uint32_t>(vocab);
    const bool head = key < static_cast<uint32_t>(vocab) && (i == 0 || keys[i - 1] != key);
    const int32_t position = i < n_tokens ? positions[i] : 0;
    // Entries from the first head on, up to (not including) the first out-of-range key or the
    // first head past the group.
    const bool stop = key >= static_cast<uint32_t>(vocab) || (i >= group_end && head);
    const unsigned heads = __ballot_sync(0xFFFFFFFFu, head), stops = __ballot_sync(0xFFFFFFFFu, stop);
    const int first = started ? 0 : (heads == 0 ? kWarp : __ffs(heads) - 1);
    const int last = stops == 0 ? kWarp : __ffs(stops) - 1;  // entries [first, last) of this window
    if (first >= last) break;  // no run starts here (started: the run ended at the window's start)
    started = true;
    for (int j0 = first; j0 < last; j0 += kEmbedRowsInFlight) {
      Slice<V> rows[kEmbedRowsInFlight], starts[kEmbedRowsInFlight];
      uint32_t ids[kEmbedRowsInFlight];
#pragma unroll
      for (int j = 0; j < kEmbedRowsInFlight; ++j) {  // every lane takes part in the shuffles
        const int e = j0 + j;
        const int64_t row = __shfl_sync(0xFFFFFFFFu, position, e % kWarp);
        ids[j] = __shfl_sync(0xFFFFFFFFu, key, e % kWarp);
        if (e < last && valid) {
          rows[j] = Slice<V>::load(dx + row * d + c);
          if ((heads >> e) & 1u) starts[j] = Slice<V>::load(d_embed + int64_t{ids[j]} * d + c);
        }
      }
#pragma unroll
      for (int j = 0; j < kEmbedRowsInFlight; ++j) {
        const int e = j0 + j;
        if (e >= last || !valid) continue;
        if ((heads >> e) & 1u) {  // a run starts: the previous one is done
          if (acc_row >= 0) acc.store(d_embed + acc_row * d + c);
          acc = starts[j];
          acc_row = ids[j];
        }
        acc.add(rows[j]);
      }
    }
    if (last < kWarp) break;
  }
  if (acc_row >= 0) acc.store(d_embed + acc_row * d + c);
}

// d_pos_embed[p] += dx[t] for t = p, p + seq_len, ... in order, at one chunk of columns.
template <int V>
__device__ __forceinline__ void embedding_position_rows(int64_t n_tokens, int seq_len, int d, const float* dx,
                                                        float* d_pos_embed, int64_t p, int64_t c) {
  if (c >= d) return;
  Slice<V> acc = Slice<V>::load(d_pos_embed + p * d + c);
  for (int64_t t0 = p; t0 < n_tokens; t0 += int64_t{kEmbedRowsInFlight} * seq_len) {
    Slice<V> rows[kEmbedRowsInFlight];
#pragma unroll
    for (int j = 0; j < kEmbedRowsInFlight; ++j)
      if (t0 + int64_t{j} * seq_len < n_tokens) rows[j] = Slice<V>::load(dx + (t0 + int64_t{j} * seq_len) * d + c);
#pragma unroll
    for (int j = 0; j < kEmbedRowsInFlight; ++j)
      if (t0 + int64_t{j} * seq_len < n_tokens) acc.add(rows[j]);
  }
  acc.store(d_pos_embed + p * d + c);
}

// Both gradients in one launch: warp items (group of 32 sorted entries, chunk), then (position,
// chunk); consecutive warps take consecutive chunks of the same rows.
template <int V>
__global__ void __launch_bounds__(kThreads) embedding_backward_kernel(const uint32_t* keys, const int32_t* positions,
                                                                      int64_t n_tokens, int seq_len, int d, int vocab,
                                                                      const float* dx, float* d_embed,
                                                                      float* d_pos_embed) {
  const int64_t chunks = embedding_chunks<V>(d);
  const int64_t token_items = (n_tokens + kWarp - 1) / kWarp * chunks;
  const int64_t items = token_items + (n_tokens < seq_len ? n_tokens : seq_len) * chunks;
  const int lane = threadIdx.x % kWarp;
  for (int64_t w = warp_index(); w < items; w += warp_stride()) {  // warp-uniform: the branches are too
    const int64_t k = w < token_items ? w : w - token_items;
    const int64_t row = k / chunks;
    const int64_t c = (k - row * chunks) * (kWarp * V) + V * lane;
    if (w < token_items)
      embedding_token_runs<V>(keys, positions, n_tokens, d, vocab, dx, d_embed, row, c, lane);
    else
      embedding_position_rows<V>(n_tokens, seq_len, d, dx, d_pos_embed, row, c);
  }
}

int sort_bits(int vocab) {  // bits holding every key in [0, vocab]
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

struct EmbeddingSortBuffers {
  uint32_t *keys_in, *keys_out;
  int32_t *positions_in, *positions_out;
  void* cub_temp;
  size_t cub_bytes;
};

Status carve_embedding_workspace(int64_t n_tokens, int vocab, void* base, EmbeddingSortBuffers* b, size_t* total) {
  WorkspaceCarver ws(base);
  b->keys_in = ws.take<uint32_t>(n_tokens);
  b->keys_out = ws.take<uint32_t>(n_tokens);
  b->positions_in = ws.take<int32_t>(n_tokens);
  b->positions_out = ws.take<int32_t>(n_tokens);
  b->cub_bytes = 0;
  const cudaError_t err = cub::DeviceRadixSort::SortPairs(
      nullptr, b->cub_bytes, b->keys_in, b->keys_out, b->positions_in, b->positions_out,
      static_cast<int>(n_tokens), 0, sort_bits(vocab));
  BS_RETURN_IF_ERROR(cuda_status(err, "embedding_backward_workspace_bytes (cub)"));
  b->cub_temp = ws.take<char>(static_cast<int64_t>(b->cub_bytes));
  *total = ws.used();
  return Status::ok();
}

Status check_embedding(const char* fn, int64_t n_tokens, int seq_len, int d, int vocab) {
  BS_RETURN_IF_ERROR(check_range(fn, "n_tokens", n_tokens, 0, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "seq_len", seq_len, 1, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "d", d, 1, std::numeric_limits<int32_t>::max()));
  return check_range(fn, "vocab", vocab, 1, std::numeric_limits<int32_t>::max() - 1);
}

// ---- SwiGLU ------------------------------------------------------------------------------------

// Both directions walk a = rows x f; with f % 4 == 0 four consecutive elements share a row.
__device__ __forceinline__ float swiglu(float g, float up) { return g / (1.0f + expf(-g)) * up; }

struct SwigluForward {
  const float* u;
  int f;
  float* a;
  __device__ void one(int64_t i) const {
    const int64_t r = i / f, c = i - r * f;
    a[i] = swiglu(u[r * 2 * f + c], u[r * 2 * f + f + c]);
  }
  __device__ void four(int64_t i) const {
    const int64_t r = i / f, c = i - r * f;
    const float4 g = load4(u + r * 2 * f + c);
    const float4 up = load4(u + r * 2 * f + f + c);
    *reinterpret_cast<float4*>(a + i) =
        make_float4(swiglu(g.x, up.x), swiglu(g.y, up.y), swiglu(g.z, up.z), swiglu(g.w, up.w));
  }
};

// d/dgate and d/dup of swiglu(g, up) times d.
__device__ __forceinline__ void swiglu_grad(float g, float up, float d, float* dg, float* dup) {
  const float sig = 1.0f / (1.0f + expf(-g));
  *dg = d * up * sig * (1.0f + g * (1.0f - sig));
  *dup = d * (g * sig);
}

struct SwigluBackward {
  const float *u, *da;
  int f;
  float* du;
  __device__ void one(int64_t i) const {
    const int64_t r = i / f, c = i - r * f;
    swiglu_grad(u[r * 2 * f + c], u[r * 2 * f + f + c], da[i], &du[r * 2 * f + c], &du[r * 2 * f + f + c]);
  }
  __device__ void four(int64_t i) const {
    const int64_t r = i / f, c = i - r * f;
    const float4 g = load4(u + r * 2 * f + c);
    const float4 up = load4(u + r * 2 * f + f + c);
    const float4 d = load4(da + i);
    float4 dg, dup;
    swiglu_grad(g.x, up.x, d.x, &dg.x, &dup.x);
    swiglu_grad(g.y, up.y, d.y, &dg.y, &dup.y);
    swiglu_grad(g.z, up.z, d.z, &dg.z, &dup.z);
    swiglu_grad(g.w, up.w, d.w, &dg.w, &dup.w);
    *reinterpret_cast<float4*>(du + r * 2 * f + c) = dg;
    *reinterpret_cast<float4*>(du + r * 2 * f + f + c) = dup;
  }
};

// ---- Cross-entropy -----------------------------------------------------------------------------

// Rows of at most kCrossEntropyWarpVocab logits (vocab % 4 == 0, 16-byte aligned): a warp per row,
// held in registers (lane l takes float4s l, l + 32, ...), so the row is read once and no block
// barrier is needed; the step's vocabulary of 256 is two float4s a lane. Every read of the row
// happens before the __syncwarp, every write after it: dlogits may alias.
constexpr int kCrossEntropyWarpQuads = 8;  // float4s per lane
constexpr int kCrossEntropyWarpVocab = 4 * kWarp * kCrossEntropyWarpQuads;  // 1024

__global__ void __launch_bounds__(kThreads) cross_entropy_rows_kernel(const float* logits, const int32_t* targets,
                                                                      int64_t rows, int vocab, float grad_scale,
                                                                      float* losses, float* dlogits) {
  const int lane = threadIdx.x % kWarp, vocab4 = vocab / 4;
  for (int64_t r = warp_index(); r < rows; r += warp_stride()) {
    const float* z = logits + r * vocab;
    const int32_t target = targets[r];
    const bool valid = target >= 0 && target < vocab;
    const float z_target = valid ? z[target] : quiet_nan();
    float4 v[kCrossEntropyWarpQuads];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kCrossEntropyWarpQuads; ++i) {
      const int q = lane + i * kWarp;
      v[i] = q < vocab4 ? load4(z + 4 * q) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      mx = fmaxf(fmaxf(mx, fmaxf(v[i].x, v[i].y)), fmaxf(v[i].z, v[i].w));
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kCrossEntropyWarpQuads; ++i)
      if (lane + i * kWarp < vocab4) {
        sum += expf(v[i].x - mx), sum += expf(v[i].y - mx);
        sum += expf(v[i].z - mx), sum += expf(v[i].w - mx);
      }
    sum = warp_sum(sum);
    const float log_sum = logf(sum) + mx;
    if (lane == 0) losses[r] = log_sum - z_target;
    if (dlogits == nullptr) continue;
    __syncwarp();
    auto grad = [&](float zv, int col) { return (expf(zv - log_sum) - (col == target ? 1.0f : 0.0f)) * grad_scale; };
#pragma unroll
    for (int i = 0; i < kCrossEntropyWarpQuads; ++i) {
      const int q = lane + i * kWarp;
      if (q < vocab4)
        *reinterpret_cast<float4*>(dlogits + r * vocab + 4 * q) =
            make_float4(grad(v[i].x, 4 * q), grad(v[i].y, 4 * q + 1), grad(v[i].z, 4 * q + 2), grad(v[i].w, 4 * q + 3));
    }
  }
}

// The fallback, one block per row: max, sum of exp, loss; then dlogits. Every read of the row (the target's
// logit included) happens before the barrier in block_sum, every write after it: dlogits may alias.
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(const float* logits, const int32_t* targets,
                                                                 int64_t rows, int vocab, float grad_scale,
                                                                 float* losses, float* dlogits) {
  __shared__ float scratch[kWarpsPerBlock];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* z = logits + r * vocab;
    const int32_t target = targets[r];
    const bool valid = target >= 0 && target < vocab;
    const float z_target = valid ? z[target] : quiet_nan();
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < vocab; v += kThreads) mx = fmaxf(mx, z[v]);
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < vocab; v += kThreads) sum += expf(z[v] - mx);
    sum = block_sum(sum, scratch);
    const float log_sum = logf(sum) + mx;
    if (threadIdx.x == 0) losses[r] = log_sum - z_target;
    if (dlogits == nullptr) continue;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const float p = expf(z[v] - log_sum);
      dlogits[r * vocab + v] = (p - (v == target ? 1.0f : 0.0f)) * grad_scale;
    }
  }
}

// ---- Sums: a grid fixed by n alone (never by the device), block sums, then one ordered pass ------

constexpr int64_t kReduceMaxBlocks = 1024;
constexpr int64_t kReducePerThread = 16;

int64_t reduce_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kThreads * kReducePerThread - 1) / (kThreads * kReducePerThread), 1,
                             kReduceMaxBlocks);
}

template <bool kSquares>
__global__ void __launch_bounds__(kThreads) reduce_partials_kernel(const float* x, int64_t n, float* partials) {
  __shared__ float scratch[kWarpsPerBlock];
  float acc = 0.0f;
  for (int64_t i = thread_index(); i < n; i += thread_stride()) acc += kSquares ? x[i] * x[i] : x[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc + 0.0f;  // + 0: reduce_finish's bits for one block (-0 -> +0)
}

__global__ void __launch_bounds__(kThreads) reduce_finish_kernel(const float* partials, int64_t count, float* out) {
  __shared__ float scratch[kWarpsPerBlock];
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

template <bool kSquares>
Status reduce(const char* fn, const float* x, int64_t n, float* out, void* workspace, size_t workspace_bytes,
              cudaStream_t stream) {
  BS_RETURN_IF_ERROR(check_range(fn, "n", n, 0, std::numeric_limits<int64_t>::max() / 2));
  if (n > 0) BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  BS_RETURN_IF_ERROR(check_ptr(fn, "out_device", out));
  BS_RETURN_IF_ERROR(check_workspace(fn, reduction_workspace_bytes(n), workspace, workspace_bytes));
  float* partials = static_cast<float*>(workspace);
  const int64_t blocks = reduce_blocks(n);
  if (blocks == 1) {  // n <= 4096 (the step's row losses): the block's sum is the result, one launch
    reduce_partials_kernel<kSquares><<<1, kThreads, 0, stream>>>(x, n, out);
    return launch_status(fn);
  }
  reduce_partials_kernel<kSquares><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
  reduce_finish_kernel<<<1, kThreads, 0, stream>>>(partials, blocks, out);
  return launch_status(fn);
}

// ---- Optimizer and conversion ------------------------------------------------------------------

struct AdamWScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, bias1, bias2, eps, weight_decay;
};

// Each operation rounded once (the _rn intrinsics are never fused into an fma).
__device__ __forceinline__ void adamw_update(const AdamWScalars& k, float grad, float grad_scale, bool decay,
                                             float* p, float* m, float* v) {
  const float g = __fmul_rn(grad, grad_scale);
  const float mi = __fadd_rn(__fmul_rn(k.beta1, *m), __fmul_rn(k.one_minus_beta1, g));
  const float vi = __fadd_rn(__fmul_rn(k.beta2, *v), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
  const float mhat = __fdiv_rn(mi, k.bias1), vhat = __fdiv_rn(vi, k.bias2);
  float u = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps));
  if (decay) u = __fadd_rn(u, __fmul_rn(k.weight_decay, *p));
  *p = __fsub_rn(*p, __fmul_rn(k.lr, u));
  *m = mi;
  *v = vi;
}

struct AdamWStep {
  float *params, *m, *v;
  const float* grads;
  AdamWScalars k;
  GradScale scale;
  const uint8_t* decay_mask;  // null: every element decays
  uint16_t* params_bf16;      // null: no bf16 copy
  __device__ float grad_scale() const { return scale.device != nullptr ? *scale.device : scale.value; }
  __device__ void one(int64_t i) const {
    adamw_update(k, grads[i], grad_scale(), decay_mask == nullptr || decay_mask[i] != 0, &params[i], &m[i], &v[i]);
    if (params_bf16 != nullptr) params_bf16[i] = formats::float_to_bf16_bits_rn(params[i]);
  }
  __device__ void four(int64_t i) const {
    float4 p = load4(params + i), mi = load4(m + i);
    float4 vi = load4(v + i);
    const float4 g = load4(grads + i);
    const uchar4 decay = decay_mask ? *reinterpret_cast<const uchar4*>(decay_mask + i) : make_uchar4(1, 1, 1, 1);
    const float s = grad_scale();
    adamw_update(k, g.x, s, decay.x != 0, &p.x, &mi.x, &vi.x);
    adamw_update(k, g.y, s, decay.y != 0, &p.y, &mi.y, &vi.y);
    adamw_update(k, g.z, s, decay.z != 0, &p.z, &mi.z, &vi.z);
    adamw_update(k, g.w, s, decay.w != 0, &p.w, &mi.w, &vi.w);
    *reinterpret_cast<float4*>(params + i) = p;
    *reinterpret_cast<float4*>(m + i) = mi;
    *reinterpret_cast<float4*>(v + i) = vi;
    if (params_bf16 != nullptr)
      *reinterpret_cast<uint2*>(params_bf16 + i) = make_uint2(bf16_pair(p.x, p.y), bf16_pair(p.z, p.w));
  }
};

__global__ void clip_factor_kernel(const float* sum_sq, float clip_norm, float* factor) {
  *factor = clip_factor(sqrt(double(*sum_sq)), clip_norm);
}

struct ToBf16 {
  const float* x;
  uint16_t* y;
  __device__ void one(int64_t i) const { y[i] = formats::float_to_bf16_bits_rn(x[i]); }
  __device__ void four(int64_t i) const {
    const float4 f = load4(x + i);
    *reinterpret_cast<uint2*>(y + i) = make_uint2(bf16_pair(f.x, f.y), bf16_pair(f.z, f.w));
  }
};

struct FromBf16 {
  const uint16_t* x;
  float* y;
  __device__ void one(int64_t i) const { y[i] = formats::bf16_bits_to_float(x[i]); }
  __device__ void four(int64_t i) const {
    const uint2 b = *reinterpret_cast<const uint2*>(x + i);
    *reinterpret_cast<float4*>(y + i) = make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xFFFF0000u),
                                                    __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xFFFF0000u));
  }
};

}  // namespace

// ---- Embedding -------------------------------------------------------------------------------------

Status embedding_forward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, int vocab,
                         const float* embed, const float* pos_embed, float* x, cudaStream_t stream) {
  constexpr const char* fn = "embedding_forward";
  BS_RETURN_IF_ERROR(check_embedding(fn, n_tokens, seq_len, d, vocab));
  if (n_tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "tokens", tokens));
  BS_RETURN_IF_ERROR(check_ptr(fn, "embed", embed));
  BS_RETURN_IF_ERROR(check_ptr(fn, "pos_embed", pos_embed));
  BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  const bool vector = d % 4 == 0 && aligned_to(embed, 16) && aligned_to(pos_embed, 16) && aligned_to(x, 16);
  if (vector)
    embedding_forward_kernel<4><<<blocks_for(n_tokens * kWarp, kThreads), kThreads, 0, stream>>>(
        tokens, n_tokens, seq_len, d, vocab, embed, pos_embed, x);
  else
    embedding_forward_kernel<1><<<blocks_for(n_tokens * kWarp, kThreads), kThreads, 0, stream>>>(
        tokens, n_tokens, seq_len, d, vocab, embed, pos_embed, x);
  return launch_status(fn);
}

Status embedding_backward_workspace_bytes(int64_t n_tokens, int vocab, size_t* bytes) {
  constexpr const char* fn = "embedding_backward_workspace_bytes";
  BS_RETURN_IF_ERROR(check_ptr(fn, "bytes", bytes));
  BS_RETURN_IF_ERROR(check_range(fn, "n_tokens", n_tokens, 0, std::numeric_limits<int32_t>::max()));
  BS_RETURN_IF_ERROR(check_range(fn, "vocab", vocab, 1, std::numeric_limits<int32_t>::max() - 1));
  EmbeddingSortBuffers b{};
  return carve_embedding_workspace(n_tokens, vocab, nullptr, &b, bytes);
}

Status embedding_backward(const int32_t* tokens, int64_t n_tokens, int seq_len, int d, int vocab,
                          const float* dx, float* d_embed, float* d_pos_embed, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* fn = "embedding_backward";
  BS_RETURN_IF_ERROR(check_embedding(fn, n_tokens, seq_len, d, vocab));
  if (n_tokens == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "tokens", tokens));
  BS_RETURN_IF_ERROR(check_ptr(fn, "dx", dx));
  BS_RETURN_IF_ERROR(check_ptr(fn, "d_embed", d_embed));
  BS_RETURN_IF_ERROR(check_ptr(fn, "d_pos_embed", d_pos_embed));
  BS_RETURN_IF_ERROR(check_ptr(fn, "workspace", workspace));
  EmbeddingSortBuffers b{};
  size_t need = 0;
  BS_RETURN_IF_ERROR(carve_embedding_workspace(n_tokens, vocab, workspace, &b, &need));
  BS_RETURN_IF_ERROR(check_workspace(fn, need, workspace, workspace_bytes));

  embedding_sort_keys_kernel<<<blocks_for(n_tokens, kThreads), kThreads, 0, stream>>>(tokens, n_tokens, vocab,
                                                                                    b.keys_in, b.positions_in);
  BS_RETURN_IF_ERROR(launch_status(fn));
  BS_RETURN_IF_ERROR(cuda_status(cub::DeviceRadixSort::SortPairs(b.cub_temp, b.cub_bytes, b.keys_in, b.keys_out,
                                                                 b.positions_in, b.positions_out,
                                                                 static_cast<int>(n_tokens), 0, sort_bits(vocab), stream),
                                 fn));
  const int64_t groups = (n_tokens + kWarp - 1) / kWarp, positions = std::min<int64_t>(n_tokens, seq_len);
  const bool vector = d % 4 == 0 && aligned_to(dx, 16) && aligned_to(d_embed, 16) && aligned_to(d_pos_embed, 16);
  if (vector)
    embedding_backward_kernel<4><<<blocks_for((groups + positions) * embedding_chunks<4>(d) * kWarp, kThreads),
                                   kThreads, 0, stream>>>(b.keys_out, b.positions_out, n_tokens, seq_len, d, vocab, dx,
                                                          d_embed, d_pos_embed);
  else
    embedding_backward_kernel<1><<<blocks_for((groups + positions) * embedding_chunks<1>(d) * kWarp, kThreads),
                                   kThreads, 0, stream>>>(b.keys_out, b.positions_out, n_tokens, seq_len, d, vocab, dx,
                                                          d_embed, d_pos_embed);
  return launch_status(fn);
}

// ---- SwiGLU ----------------------------------------------------------------------------------------

Status swiglu_forward(const float* u, int64_t rows, int f, float* a, cudaStream_t stream) {
  constexpr const char* fn = "swiglu_forward";
  BS_RETURN_IF_ERROR(check_elements(fn, rows, f, "f"));
  if (rows == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "u", u));
  BS_RETURN_IF_ERROR(check_ptr(fn, "a", a));
  const bool vector = f % 4 == 0 && aligned_to(u, 16) && aligned_to(a, 16);
  launch_elementwise(SwigluForward{u, f, a}, rows * f, vector, stream);
  return launch_status(fn);
}

Status swiglu_backward(const float* u, const float* da, int64_t rows, int f, float* du, cudaStream_t stream) {
  constexpr const char* fn = "swiglu_backward";
  BS_RETURN_IF_ERROR(check_elements(fn, rows, f, "f"));
  if (rows == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "u", u));
  BS_RETURN_IF_ERROR(check_ptr(fn, "da", da));
  BS_RETURN_IF_ERROR(check_ptr(fn, "du", du));
  const bool vector = f % 4 == 0 && aligned_to(u, 16) && aligned_to(da, 16) && aligned_to(du, 16);
  launch_elementwise(SwigluBackward{u, da, f, du}, rows * f, vector, stream);
  return launch_status(fn);
}

// ---- Cross-entropy ---------------------------------------------------------------------------------

Status cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                     float* losses, float* dlogits, cudaStream_t stream) {
  constexpr const char* fn = "cross_entropy";
  BS_RETURN_IF_ERROR(check_elements(fn, rows, vocab, "vocab"));
  if (rows == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "logits", logits));
  BS_RETURN_IF_ERROR(check_ptr(fn, "targets", targets));
  BS_RETURN_IF_ERROR(check_ptr(fn, "losses", losses));
  if (vocab % 4 == 0 && vocab <= kCrossEntropyWarpVocab && aligned_to(logits, 16) && aligned_to(dlogits, 16))
    cross_entropy_rows_kernel<<<blocks_for(rows * kWarp, kThreads), kThreads, 0, stream>>>(
        logits, targets, rows, vocab, grad_scale, losses, dlogits);
  else
    cross_entropy_kernel<<<blocks_for(rows, 1), kThreads, 0, stream>>>(logits, targets, rows, vocab, grad_scale,
                                                                       losses, dlogits);
  return launch_status(fn);
}

// ---- Reductions ------------------------------------------------------------------------------------

size_t reduction_workspace_bytes(int64_t n) { return align_up(sizeof(float) * reduce_blocks(n < 0 ? 0 : n)); }

Status sum(const float* x, int64_t n, float* out_device, void* workspace, size_t workspace_bytes,
           cudaStream_t stream) {
  return reduce<false>("sum", x, n, out_device, workspace, workspace_bytes, stream);
}

Status sum_of_squares(const float* x, int64_t n, float* out_device, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  return reduce<true>("sum_of_squares", x, n, out_device, workspace, workspace_bytes, stream);
}

// ---- Optimizer -------------------------------------------------------------------------------------

Status adamw_step(float* params, const float* grads, GradScale scale, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  const uint8_t* decay_mask_or_null, cudaStream_t stream, uint16_t* params_bf16) {
  constexpr const char* fn = "adamw_step";
  BS_RETURN_IF_ERROR(check_range(fn, "n", n, 0, std::numeric_limits<int64_t>::max() / 2));
  BS_RETURN_IF_ERROR(check_range(fn, "step", step, 1, std::numeric_limits<int64_t>::max()));
  if (!(beta1 >= 0.0f && beta1 < 1.0f)) return Status::error("adamw_step: beta1 must be in [0, 1)");
  if (!(beta2 >= 0.0f && beta2 < 1.0f)) return Status::error("adamw_step: beta2 must be in [0, 1)");
  if (!(eps > 0.0f)) return Status::error("adamw_step: eps must be > 0");
  if (!std::isfinite(lr) || !std::isfinite(weight_decay))
    return Status::error("adamw_step: lr and weight_decay must be finite");
  if (scale.device == nullptr && !(scale.value >= 0.0f && scale.value <= 1.0f))
    return Status::error("adamw_step: scale.value must be in [0, 1]");
  if (n == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "params", params));
  BS_RETURN_IF_ERROR(check_ptr(fn, "grads", grads));
  BS_RETURN_IF_ERROR(check_ptr(fn, "m", m));
  BS_RETURN_IF_ERROR(check_ptr(fn, "v", v));
  AdamWScalars k{};
  k.lr = lr, k.beta1 = beta1, k.beta2 = beta2, k.eps = eps, k.weight_decay = weight_decay;
  k.one_minus_beta1 = 1.0f - beta1;
  k.one_minus_beta2 = 1.0f - beta2;
  k.bias1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  k.bias2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(step)));
  const bool vector = aligned_to(params, 16) && aligned_to(grads, 16) && aligned_to(m, 16) && aligned_to(v, 16) &&
                      aligned_to(decay_mask_or_null, 4) && aligned_to(params_bf16, 8);
  launch_elementwise(AdamWStep{params, m, v, grads, k, scale, decay_mask_or_null, params_bf16}, n, vector, stream);
  return launch_status(fn);
}

Status clip_factor_on_device(const float* sum_sq, float clip_norm, float* factor, cudaStream_t stream) {
  constexpr const char* fn = "clip_factor_on_device";
  BS_RETURN_IF_ERROR(check_ptr(fn, "sum_sq", sum_sq));
  BS_RETURN_IF_ERROR(check_ptr(fn, "factor", factor));
  if (!std::isfinite(clip_norm)) return Status::error("clip_factor_on_device: clip_norm must be finite");
  clip_factor_kernel<<<1, 1, 0, stream>>>(sum_sq, clip_norm, factor);
  return launch_status(fn);
}

// ---- Conversion ------------------------------------------------------------------------------------

Status to_bf16(const float* x, int64_t n, uint16_t* y, cudaStream_t stream) {
  constexpr const char* fn = "to_bf16";
  BS_RETURN_IF_ERROR(check_range(fn, "n", n, 0, std::numeric_limits<int64_t>::max() / 2));
  if (n == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  BS_RETURN_IF_ERROR(check_ptr(fn, "y", y));
  launch_elementwise(ToBf16{x, y}, n, aligned_to(x, 16) && aligned_to(y, 8), stream);
  return launch_status(fn);
}

Status from_bf16(const uint16_t* x, int64_t n, float* y, cudaStream_t stream) {
  constexpr const char* fn = "from_bf16";
  BS_RETURN_IF_ERROR(check_range(fn, "n", n, 0, std::numeric_limits<int64_t>::max() / 2));
  if (n == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "x", x));
  BS_RETURN_IF_ERROR(check_ptr(fn, "y", y));
  launch_elementwise(FromBf16{x, y}, n, aligned_to(x, 8) && aligned_to(y, 16), stream);
  return launch_status(fn);
}

__global__ void scale_products_kernel(const float* a, const float* b, int count, float* out) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) out[i] = __fmul_rn(a[0], b[i]);
}

Status scale_products(const float* a, const float* b, int count, float* out, cudaStream_t stream) {
  constexpr const char* fn = "scale_products";
  BS_RETURN_IF_ERROR(check_range(fn, "count", count, 0, std::numeric_limits<int32_t>::max()));
  if (count == 0) return Status::ok();
  BS_RETURN_IF_ERROR(check_ptr(fn, "a", a));
  BS_RETURN_IF_ERROR(check_ptr(fn, "b", b));
  BS_RETURN_IF_ERROR(check_ptr(fn, "out", out));
  scale_products_kernel<<<1, 256, 0, stream>>>(a, b, count, out);
  return launch_status(fn);
}

}  // namespace blockscale::train::gpu
