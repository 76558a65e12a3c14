// cublaslt_block_scaled: the GEMMs of Blackwell (sm_100) through cuBLASLt's block-scaled
// matmul, fp32 accumulation: CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 for MX operands (E8M0
// scales, blocks of 32), VEC16_UE4M3 for NVFP4 (UE4M3 scales, blocks of 16), VEC128_32F and
// BLK128x128_32F for FP8 blockwise (fp32 scales of 1x128 and 128x128 blocks).
// Compiled on every build, never run on a Blackwell GPU (none was available); its semantics follow
// the cuBLASLt documentation. Values must match formats::reference_gemm. The FP8 blockwise call
// is the same on Hopper, where cuBLASLt also takes those scale modes: tests/gemm/gemm_test.cpp runs
// it there (GemmCublasLt) against the reference and the sm_90 kernel.
//
// Operands: A (M x K) and B (N x K) K-major codes as quant/ writes them (E4M3 / E5M2 one per
// byte, E2M1 two per byte), scales in the layouts of formats/scale_layout.h: the swizzled 128x4
// layout for MX / NVFP4 (cuBLAS's "1D block scaling factors layout"), vec128_* / blk128_* for FP8
// blockwise (cuBLAS's VEC128_32F / BLK128x128_32F layouts): passed unchanged.
//
// Row-major to cuBLASLt's column-major: a row-major R x C matrix with row stride ld is the
// column-major C x R matrix with leading dimension ld. So our D (M x N, ldd) is cuBLASLt's
// D^T (N x M, ld ldd), and D^T = B · A^T. cuBLASLt computes op(A_lt) · op(B_lt) with
//   A_lt = our B: column-major K x N (ld K elements), op T -> N x K;
//   B_lt = our A: column-major K x M (ld K elements), op N -> K x M;
// m_lt = N, n_lt = M, k = K: the TN layout, the one where FP8 / FP4 cuBLASLt wants both operands
// K-major, which ours are. Each scale tensor follows its operand: A_lt's is our b_scales, B_lt's
// our a_scales. C (row-major, ldc) is likewise C^T (N x M, ld ldc).
//
// Operand row strides (lda / ldb, elements) default to K; the grouped route (cublaslt_grouped.cu)
// passes longer ones to multiply one expert's token columns out of the whole columnwise copy.
//
// alpha and the NVFP4 tensor scales: D = alpha * S_dec_a * S_dec_b * A B^T + beta * C, with
// S_dec device floats. In the block-scaled modes cuBLASLt's A / B scale pointers hold the block
// scales, so S_dec can only enter through alpha; reading it on the host would need a sync. So a
// one-thread kernel writes {alpha * S_dec_a * S_dec_b, beta} into 8 stream-ordered bytes
// (cudaMallocAsync / cudaFreeAsync: private to this call, so concurrent calls on other streams
// and graph capture stay correct) and cuBLASLt reads both through CUBLASLT_POINTER_MODE_DEVICE.
// (The ALPHA_DEVICE_VECTOR modes would need an N-long alpha vector; D_SCALE_POINTER is for FP8
// outputs.) Pairs without an NVFP4 operand pass alpha and beta from the host.
//
// cuBLASLt is opened on first use (runtime/cuda_libraries.h), not linked: linked, it would load
// (~200 MB, its initialisation) in every program that links gemm/, though only this path calls it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "formats/recipe.h"
#include "gemm/launchers.h"
#include "runtime/cuda_libraries.h"

namespace blockscale::gemm::detail {
namespace {

using formats::Format;

// Writes {alpha * S_dec_a * S_dec_b, beta}; a null S_dec (a non-NVFP4 operand) counts as 1.
__global__ void fold_tensor_scales(float* scalars, float alpha, float beta, const float* a_scale_dec,
                                   const float* b_scale_dec) {
  float s = alpha;
  if (a_scale_dec != nullptr) s *= *a_scale_dec;
  if (b_scale_dec != nullptr) s *= *b_scale_dec;
  scalars[0] = s;
  scalars[1] = beta;
}

// cuBLASLt's entry point `fn` (runtime/cuda_libraries.h: opened on first use, not linked).
#define LT(fn) BS_CUDA_LIB(kCublasLt, fn)

Status lt_status(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::error(std::string("device: ") + call + " failed: " + LT(cublasLtGetStatusName)(s) + " (" +
                       LT(cublasLtGetStatusString)(s) + ")");
}

// One cuBLASLt handle per device (a handle belongs to the device current at its creation),
// created on first use. Never destroyed: they live as long as the process, and destroying them
// from a static destructor could run after the CUDA runtime has shut down.
Status lt_handle(cublasLtHandle_t* out) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  int dev = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "device: cudaGetDevice"));
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cublasLtHandle_t h = nullptr;
    BS_RETURN_IF_ERROR(lt_status(LT(cublasLtCreate)(&h), "cublasLtCreate"));
    it = handles.emplace(dev, h).first;
  }
  *out = it->second;
  return Status::ok();
}

// An operand's cuBLASLt element type and scale mode.
struct LtOperand {
  cudaDataType_t type;
  cublasLtMatmulMatrixScale_t scale_mode;
};

bool lt_operand(Format r, LtOperand* out) {
  switch (r) {
    case Format::kMxfp8E4M3: *out = {CUDA_R_8F_E4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0}; return true;
    case Format::kMxfp8E5M2: *out = {CUDA_R_8F_E5M2, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0}; return true;
    case Format::kMxfp4: *out = {CUDA_R_4F_E2M1, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0}; return true;
    case Format::kNvfp4: *out = {CUDA_R_4F_E2M1, CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3}; return true;
    case Format::kFp8Block1x128: *out = {CUDA_R_8F_E4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F}; return true;
    case Format::kFp8Block128x128: *out = {CUDA_R_8F_E4M3, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F}; return true;
    default: return false;
  }
}

cudaDataType_t lt_matrix_type(formats::DType t) { return t == formats::DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }

// The largest power of two (up to cuBLASLt's default 256) dividing the address: the heuristic
// otherwise assumes 256-byte aligned buffers and may pick an algorithm ours do not satisfy.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// The descriptors of one call, destroyed on every path.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) LT(cublasLtMatmulPreferenceDestroy)(pref);
    if (d) LT(cublasLtMatrixLayoutDestroy)(d);
    if (c) LT(cublasLtMatrixLayoutDestroy)(c);
    if (b) LT(cublasLtMatrixLayoutDestroy)(b);
    if (a) LT(cublasLtMatrixLayoutDestroy)(a);
    if (op) LT(cublasLtMatmulDescDestroy)(op);
  }
};

// The stream-ordered {alpha', beta} pair; freed on `stream` after the work enqueued before.
struct DeviceScalars {
  float* ptr = nullptr;
  cudaStream_t stream = nullptr;
  DeviceScalars() = default;
  DeviceScalars(const DeviceScalars&) = delete;
  DeviceScalars& operator=(const DeviceScalars&) = delete;
  ~DeviceScalars() {
    if (ptr) cudaFreeAsync(ptr, stream);
  }
};

template <typename T>
Status set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value, const char* call) {
  return lt_status(LT(cublasLtMatmulDescSetAttribute)(op, attr, &value, sizeof(value)), call);
}

template <typename T>
Status set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value,
                const char* call) {
  return lt_status(LT(cublasLtMatmulPreferenceSetAttribute)(pref, attr, &value, sizeof(value)), call);
}

// The descriptors of one problem description and the heuristic's pick for it, made on a thread's
// first call with that description and kept: building them and querying the heuristic cost tens
// of microseconds of host time, which a training step's repeated shapes would pay on every GEMM.
// Per thread, because the scale pointers are set on the descriptor at each call.
struct LtPlan {
  LtDescriptors desc;
  bool found = false;  // false: cuBLASLt has no algorithm for it
  cublasLtMatmulAlgo_t algo{};
};
// device, m, n, k, lda, ldb, ldc, ldd, recipes, C and D types, C read, the four alignments, workspace
using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, bool,
                           uint32_t, uint32_t, uint32_t, uint32_t, size_t>;
constexpr size_t kMaxPlans = 4096;  // expert sizes change every step: bound the map

std::string problem_text(const GemmProblem& p) {
  return "m=" + std::to_string(p.m) + ", n=" + std::to_string(p.n) + ", k=" + std::to_string(p.k) + ", " +
         formats::format_name(p.a_recipe) + " x " + formats::format_name(p.b_recipe) + ", d_type " +
         formats::dtype_name(p.d_type) + ", ldd=" + std::to_string(p.ldd) +
         (p.beta != 0.0f ? ", c_type " + std::string(formats::dtype_name(p.c_type)) + ", ldc=" + std::to_string(p.ldc)
                         : std::string());
}

// The descriptors of D^T = B · A^T in cuBLASLt's column-major terms (see the banner: A_lt = our
// B, B_lt = our A), and the heuristic's pick under the key's alignments and workspace.
struct LtPrefs {
  uint32_t align_a, align_b, align_c, align_d;  // of cuBLASLt's A, B, C, D (A_lt = our B)
  uint64_t workspace_bytes;
};

// Block-scaled modes need the scale pointers set for the heuristic too (null ones are an invalid
// value): the first call's go in, and every call sets its own before its matmul.
Status set_scale_pointers(cublasLtMatmulDesc_t op, const GemmArguments& args) {
  BS_RETURN_IF_ERROR(set_op(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, args.b_scales,
                            "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)"));
  return set_op(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, args.a_scales,
                "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
}

Status make_plan(cublasLtHandle_t handle, const GemmProblem& p, const GemmArguments& args, const LtOperand& a,
                 const LtOperand& b, int64_t lda, int64_t ldb, formats::DType c_type, int64_t ldc, const LtPrefs& prefs,
                 LtPlan* plan) {
  LtDescriptors& desc = plan->desc;
  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatmulDescCreate)(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                               "cublasLtMatmulDescCreate"));
  const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  BS_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "cublasLtMatmulDescSetAttribute(TRANSA)"));
  BS_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "cublasLtMatmulDescSetAttribute(TRANSB)"));
  const int32_t scale_mode_a = b.scale_mode, scale_mode_b = a.scale_mode;
  BS_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, scale_mode_a,
                            "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)"));
  BS_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, scale_mode_b,
                            "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)"));
  BS_RETURN_IF_ERROR(set_scale_pointers(desc.op, args));
  const bool device_scalars = p.a_recipe == Format::kNvfp4 || p.b_recipe == Format::kNvfp4;
  const int32_t pointer_mode = device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
  BS_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, pointer_mode,
                            "cublasLtMatmulDescSetAttribute(POINTER_MODE)"));

  // Leading dimensions are in elements, also for E2M1 (K elements = K / 2 bytes per row).
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatrixLayoutCreate)(&desc.a, b.type, k, n, ldb), "cublasLtMatrixLayoutCreate(A)"));
  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatrixLayoutCreate)(&desc.b, a.type, k, m, lda), "cublasLtMatrixLayoutCreate(B)"));
  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatrixLayoutCreate)(&desc.d, lt_matrix_type(p.d_type), n, m, p.ldd),
                               "cublasLtMatrixLayoutCreate(D)"));
  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatrixLayoutCreate)(&desc.c, lt_matrix_type(c_type), n, m, ldc),
                               "cublasLtMatrixLayoutCreate(C)"));

  BS_RETURN_IF_ERROR(lt_status(LT(cublasLtMatmulPreferenceCreate)(&desc.pref), "cublasLtMatmulPreferenceCreate"));
  BS_RETURN_IF_ERROR(set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, prefs.workspace_bytes,
                              "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  BS_RETURN_IF_ERROR(set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, prefs.align_a,
                              "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)"));
  BS_RETURN_IF_ERROR(set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, prefs.align_b,
                              "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)"));
  BS_RETURN_IF_ERROR(set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, prefs.align_c,
                              "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)"));
  BS_RETURN_IF_ERROR(set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, prefs.align_d,
                              "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)"));

  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t hs =
      LT(cublasLtMatmulAlgoGetHeuristic)(handle, desc.op, desc.a, desc.b, desc.c, desc.d, desc.pref, 1, &heuristic, &found);
  if (hs != CUBLAS_STATUS_NOT_SUPPORTED) BS_RETURN_IF_ERROR(lt_status(hs, "cublasLtMatmulAlgoGetHeuristic"));
  plan->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  plan->algo = heuristic.algo;
  return Status::ok();
}

}  // namespace

Status launch_cublaslt_block_scaled(const GemmProblem& p, const GemmArguments& args, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream, const LtStrides& strides,
                                    bool* no_algorithm) {
  if (no_algorithm) *no_algorithm = false;
  const int64_t lda = strides.lda ? strides.lda : p.k, ldb = strides.ldb ? strides.ldb : p.k;
  LtOperand a{}, b{};
  if (!lt_operand(p.a_recipe, &a))
    return Status::error(std::string("a_recipe: must be an MX, NVFP4 or FP8 blockwise recipe on sm_100, got ") +
                         formats::format_name(p.a_recipe));
  if (!lt_operand(p.b_recipe, &b))
    return Status::error(std::string("b_recipe: must be an MX, NVFP4 or FP8 blockwise recipe on sm_100, got ") +
                         formats::format_name(p.b_recipe));
  const bool read_c = p.beta != 0.0f;
  if (read_c && p.c_type != p.d_type)
    return Status::error(std::string("c_type: must equal d_type when beta != 0 on sm_100 (cuBLASLt's block-scaled "
                                     "matmul takes C in D's type), got c_type ") +
                         formats::dtype_name(p.c_type) + " with d_type " + formats::dtype_name(p.d_type));
  const bool a_nvfp4 = p.a_recipe == Format::kNvfp4, b_nvfp4 = p.b_recipe == Format::kNvfp4;
  const bool device_scalars = a_nvfp4 || b_nvfp4;
  if (workspace == nullptr) workspace_bytes = 0;

  BS_RETURN_IF_ERROR(runtime::open_cuda_library(runtime::CudaLibrary::kCublasLt));
  cublasLtHandle_t handle = nullptr;
  BS_RETURN_IF_ERROR(lt_handle(&handle));

  // With beta == 0, C is not read: it is described as D (the in-place form cuBLASLt accepts). In
  // device pointer mode cuBLASLt sees beta only on the GPU; on an H100 (FP8, cuBLASLt 13.0) a
  // device beta of 0 with a NaN-filled C == D left no NaN in D, for all 8 heuristic algorithms.
  const void* c = read_c ? args.c : args.d;
  const formats::DType c_type = read_c ? p.c_type : p.d_type;
  const int64_t ldc = read_c ? p.ldc : p.ldd;
  int device = 0;
  BS_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "device: cudaGetDevice"));
  const PlanKey key{device, p.m, p.n, p.k, lda, ldb, ldc, p.ldd, int(p.a_recipe), int(p.b_recipe), int(c_type),
                    int(p.d_type), read_c, alignment_of(args.b_data), alignment_of(args.a_data), alignment_of(c),
                    alignment_of(args.d), workspace_bytes};
  thread_local std::map<PlanKey, std::unique_ptr<LtPlan>> plans;
  auto it = plans.find(key);
  if (it == plans.end()) {
    auto plan = std::make_unique<LtPlan>();
    const LtPrefs prefs{alignment_of(args.b_data), alignment_of(args.a_data), alignment_of(c), alignment_of(args.d),
                        workspace_bytes};
    BS_RETURN_IF_ERROR(make_plan(handle, p, args, a, b, lda, ldb, c_type, ldc, prefs, plan.get()));
    if (plans.size() >= kMaxPlans) plans.clear();
    it = plans.emplace(key, std::move(plan)).first;
  }
  LtPlan& plan = *it->second;
  if (!plan.found) {
    if (no_algorithm) {
      *no_algorithm = true;
      return Status::ok();
    }
    return Status::error("a_recipe, b_recipe: cuBLASLt found no algorithm for " + problem_text(p) + ", workspace " +
                         std::to_string(workspace_bytes) + " bytes");
  }
  BS_RETURN_IF_ERROR(set_scale_pointers(plan.desc.op, args));  // A_lt's scales are our b_scales

  // Host scalars are read during the cublasLtMatmul call; device ones when the GEMM runs.
  const float host_scalars[2] = {p.alpha, p.beta};
  const float* scalars = host_scalars;
  DeviceScalars dev;
  if (device_scalars) {
    dev.stream = stream;
    BS_RETURN_IF_ERROR(cuda_status(cudaMallocAsync(reinterpret_cast<void**>(&dev.ptr), 2 * sizeof(float), stream),
                                   "device: cudaMallocAsync (alpha, beta)"));
    fold_tensor_scales<<<1, 1, 0, stream>>>(dev.ptr, p.alpha, p.beta, a_nvfp4 ? args.a_scale_dec : nullptr,
                                            b_nvfp4 ? args.b_scale_dec : nullptr);
    BS_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "device: fold_tensor_scales launch"));
    scalars = dev.ptr;
  }
  const LtDescriptors& d = plan.desc;
  return lt_status(LT(cublasLtMatmul)(handle, d.op, &scalars[0], args.b_data, d.a, args.a_data, d.b, &scalars[1], c, d.c,
                                args.d, d.d, &plan.algo, workspace, workspace_bytes, stream),
                   "cublasLtMatmul");
}

}  // namespace blockscale::gemm::detail
