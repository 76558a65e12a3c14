// Hopper (sm_90a) PTX used by the sm90 GEMM kernels, one small wrapper per instruction:
// mbarrier (init / arrive / expect_tx / parity wait), clusters (rank, sync, remote arrive, TMA
// multicast), TMA tensor loads and stores, proxy fences, wgmma
// (fence / FP8 mma m64n128 and m64n192 / bf16 mma m64n128 with A in registers / commit / wait),
// shared-memory matrix descriptors, the async-proxy fence, named barriers and setmaxnreg.
// Operand forms follow the PTX ISA 8.x sections of the same names; every wrapper states its
// instruction so the SASS (QGMMA, UTMALDG, SYNCS) can be matched to the source.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cstdint>

namespace blockscale::gemm::sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier (CTA scope) ---------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t expected_arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(expected_arrivals)
               : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA completes on them) before use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also announces `bytes` of TMA traffic the current phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// One plain arrival (release semantics: this thread's earlier shared-memory reads are done).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Spins until the phase with parity `parity` has completed (acquire). A freshly initialised
// barrier is in phase 0, so waiting for parity 1 returns at once: producers start that way.
// Bring-up aid: a wait that lasts kHangTrapNs (no legitimate wait comes near it) traps, so a
// pipeline bug fails the launch instead of hanging the GPU. -DBLOCKSCALE_GEMM_HANG_TRAP=0 removes it.
#ifndef BLOCKSCALE_GEMM_HANG_TRAP
#define BLOCKSCALE_GEMM_HANG_TRAP 1
#endif
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t addr, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n"
      "  .reg .pred complete;\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
      "  selp.u32 %0, 1, 0, complete;\n"
      "}\n"
      : "=r"(done)
      : "r"(addr), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  if (mbarrier_try_wait(addr, parity)) return;
#if BLOCKSCALE_GEMM_HANG_TRAP
  constexpr uint64_t kHangTrapNs = 20ull * 1000 * 1000 * 1000;
  const uint64_t start = global_timer_ns();
  while (!mbarrier_try_wait(addr, parity))
    if (global_timer_ns() - start > kHangTrapNs) __trap();
#else
  while (!mbarrier_try_wait(addr, parity)) {
  }
#endif
}

// The same wait as one PTX loop whose branches are marked uniform (bra.uni), for waits issued
// while wgmmas are in flight: a C++ spin loop is a divergent path to ptxas, which then makes
// every wgmma of the function wait for its predecessor (warning C7518). No hang trap here.
__device__ __forceinline__ void mbarrier_wait_uniform(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      "  .reg .pred complete;\n"
      "WAIT_AGAIN:\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 complete, [%0], %1;\n"
      "  @complete bra.uni WAIT_DONE;\n"
      "  bra.uni WAIT_AGAIN;\n"
      "WAIT_DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// ---- TMA ----------------------------------------------------------------------------------------

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Loads the box at (inner, outer) element coordinates of a 2-D tensor map into shared memory;
// completion is counted in bytes on `bar`. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t inner,
                                            int32_t outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer)
      : "memory");
}

// The same for a 3-D tensor map (coordinates innermost first).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// ---- Clusters ---------------------------------------------------------------------------------

// This CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every non-exited thread of the cluster arrives (release) and waits (acquire): after it, shared
// memory and barriers initialised before it are visible to the peer CTAs, and a CTA that has
// passed it may exit without a peer still signalling its barriers.
__device__ __forceinline__ void cluster_sync() {
  __syncwarp();  // the .aligned form: the warp reconverged first
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on the barrier at the same shared-memory offset as `bar` in the CTA of rank `cta`
// of this cluster (mapa translates the address). Default semantics (release at CTA scope): it
// hands back a ring stage whose reads (wgmma's, completed by wait_group) are done; a
// release.cluster here compiles to a MEMBAR.ALL.GPU per call, which measured 40% slower.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n"
      "  .reg .b32 remote;\n"
      "  mapa.shared::cluster.u32 remote, %0, %1;\n"
      "  mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(cta)
      : "memory");
}

// tma_load_2d into the same shared-memory offset of every CTA in cta_mask (bit i: rank i), each
// destination's barrier at `bar`'s offset counting the bytes that land there.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t inner,
                                                      int32_t outer, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer), "h"(cta_mask)
      : "memory");
}

// ---- TMA stores ----------------------------------------------------------------------------------

// Stores the box at element coordinates (c0, c1, c2) of a 3-D tensor map from shared memory
// (elements outside the tensor are not written), as part of the issuing thread's bulk group.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1,
                                             int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
// The same for a 2-D tensor map (coordinates innermost first).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int32_t inner, int32_t outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(inner), "r"(outer)
               : "memory");
}
// D += the box (fp32 adds done by the TMA unit; each element once): a store that accumulates.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* src, int32_t inner,
                                                  int32_t outer) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(inner), "r"(outer)
               : "memory");
}
// D += the box, for a 3-D tensor map.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1,
                                                  int32_t c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Until the issuing thread's committed stores have read their shared memory (it may be rewritten).
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Until at most kPending of them have not yet read their shared memory.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Until they have completed (before the CTA exits).
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// ---- Shared memory written by threads, read by wgmma ------------------------------------------

// Makes this thread's ordinary (generic-proxy) shared-memory writes visible to the async proxy
// that wgmma reads shared memory through; needed before a barrier that hands such a tile to wgmma.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A barrier among `threads` threads (a multiple of 32) of the CTA, on hardware barrier `id`
// (1..15; 0 is __syncthreads). bar.sync is barrier.sync.aligned: every participating thread must
// execute this same instruction (the same code path), the warp reconverged.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  __syncwarp();
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- Register budget per warpgroup (needs a register cap at entry: __launch_bounds__(n, 1)) ----

template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_registers_shrink() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <uint32_t kRegisters>
__device__ __forceinline__ void warpgroup_registers_grow() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// ---- wgmma ----------------------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 start
// address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset
// >> 4, 49-51 base offset (0: tiles are 1024-byte aligned), 62-63 swizzle (1 = 128-byte).
// K-major with the 128-byte swizzle: each row of the tile is 128 bytes of K, rows 8 apart are
// 1024 bytes apart (the stride offset); the leading offset is unused for this layout (set to 1
// by convention). Advancing the start address by 32 bytes selects the next k32 slice: the
// hardware applies the swizzle to the computed address, as TMA did when it wrote the tile.
__device__ __forceinline__ uint64_t smem_descriptor_kmajor_sw128(const void* tile) {
  const uint64_t start = (smem_addr(tile) & 0x3FFFF) >> 4;
  const uint64_t leading = 1;
  const uint64_t stride = 1024 >> 4;
  return start | (leading << 16) | (stride << 32) | (uint64_t{1} << 62);
}
// The same descriptor split in halves: the high half is a constant and the low half (start and
// leading offset) takes additions of (bytes >> 4) with no carry out (shared memory < 256 KB), so
// a loop steps stages and k slices in 32-bit arithmetic.
__device__ __forceinline__ uint32_t kmajor_sw128_descriptor_lo(const void* tile) {
  return static_cast<uint32_t>(smem_descriptor_kmajor_sw128(tile));
}
__device__ __forceinline__ uint64_t kmajor_sw128_descriptor(uint32_t lo) {
  return (uint64_t{(1024 >> 4) | (1u << 30)} << 32) | lo;
}

// Orders this thread's register accesses before the next wgmma (required before the first
// wgmma of a batch when its accumulators were touched by ordinary instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPendingGroups>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPendingGroups) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across the asm statements
// above (they are asynchronous to it).
__device__ __forceinline__ void fence_accumulator(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// D(64 x 128, fp32) = A(64 x 32, e4m3, K-major smem) * B(128 x 32, e4m3, K-major smem)^T
// (+ D when accumulate). Fragment of D in thread t of the warpgroup (warp w = t / 32, lane l):
// d[4j + 2h + c] is row 16w + l/4 + 8h, column 8j + 2(l%4) + c.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3\n"
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " %64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int32_t>(accumulate)));
}

// D(64 x 192, fp32) = A(64 x 32) * B(192 x 32)^T, the same fragment rule with j = 0..23.
__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3\n"
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "},"
      " %96, %97, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int32_t>(accumulate)));
}

// D(64 x 128, fp32) += A(64 x 16, bf16, registers) * B(128 x 16, bf16, K-major smem)^T; D = A B^T
// when !accumulate. A fragment in thread t (warp w, lane l, g = l / 4, q = l % 4), bf16 pairs:
// a[0] = row 16w + g, k 2q..2q+1; a[1] = row + 8, same k; a[2] = row, k 2q+8..2q+9; a[3] = row + 8,
// k 2q+8.. (the PTX ISA's m64nNk16 A-fragment figure). D's fragment as in the e4m3 form above.
// The A registers must not change until the wgmma has completed (wgmma_wait_group).
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                         bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "},"
      " {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int32_t>(accumulate)));
}

// The m64nNk32 e4m3 wgmma for a tile of kN columns (kN / 2 accumulators per thread).
template <int kN>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  static_assert(kN == 128 || kN == 192, "wrapped wgmma widths: n128, n192");
  if constexpr (kN == 128) {
    wgmma_m64n128k32_e4m3(d, desc_a, desc_b, accumulate);
  } else {
    wgmma_m64n192k32_e4m3(d, desc_a, desc_b, accumulate);
  }
}

}  // namespace blockscale::gemm::sm90
