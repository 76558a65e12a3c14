// Every cuBLAS, cuBLASLt and NCCL entry point the project calls through runtime/cuda_libraries.h
// resolves in the toolkit's libraries (names after cuBLAS's _v2 macros), without a GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <gtest/gtest.h>
#ifdef BLOCKSCALE_HAVE_NCCL
#include <nccl.h>
#endif

#include "runtime/cuda_libraries.h"
#include "tests/status_test.h"  // defines: ASSERT_OK

namespace blockscale::runtime {
namespace {

#define EXPECT_RESOLVES(lib, fn) EXPECT_NE(reinterpret_cast<const void*>(BS_CUDA_LIB(lib, fn)), nullptr) << #fn

TEST(CudaLibraries, CublasEntryPointsResolve) {
  ASSERT_OK(open_cuda_library(CudaLibrary::kCublas));
  EXPECT_RESOLVES(kCublas, cublasCreate);
  EXPECT_RESOLVES(kCublas, cublasDestroy);
  EXPECT_RESOLVES(kCublas, cublasSetStream);
  EXPECT_RESOLVES(kCublas, cublasGetStream);
  EXPECT_RESOLVES(kCublas, cublasSetPointerMode);
  EXPECT_RESOLVES(kCublas, cublasGetPointerMode);
  EXPECT_RESOLVES(kCublas, cublasGetStatusString);
  EXPECT_NE(cuda_library_symbol(CudaLibrary::kCublas, "cublasGemmStridedBatchedEx"), nullptr);  // C++ overloads it
  EXPECT_STREQ(BS_CUDA_LIB_NAME(cublasCreate), "cublasCreate_v2");  // the header's macro expanded
}

TEST(CudaLibraries, CublasLtEntryPointsResolve) {
  ASSERT_OK(open_cuda_library(CudaLibrary::kCublasLt));
  EXPECT_RESOLVES(kCublasLt, cublasLtCreate);
  EXPECT_RESOLVES(kCublasLt, cublasLtDestroy);
  EXPECT_RESOLVES(kCublasLt, cublasLtGetStatusName);
  EXPECT_RESOLVES(kCublasLt, cublasLtGetStatusString);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmul);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulAlgoGetHeuristic);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulDescCreate);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulDescDestroy);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulDescSetAttribute);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulPreferenceCreate);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulPreferenceDestroy);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatmulPreferenceSetAttribute);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatrixLayoutCreate);
  EXPECT_RESOLVES(kCublasLt, cublasLtMatrixLayoutDestroy);
}

#ifdef BLOCKSCALE_HAVE_NCCL
TEST(CudaLibraries, NcclEntryPointsResolve) {
  ASSERT_OK(open_cuda_library(CudaLibrary::kNccl));
  EXPECT_RESOLVES(kNccl, ncclGetErrorString);
  EXPECT_RESOLVES(kNccl, ncclGetUniqueId);
  EXPECT_RESOLVES(kNccl, ncclCommInitRank);
  EXPECT_RESOLVES(kNccl, ncclCommDestroy);
  EXPECT_RESOLVES(kNccl, ncclAllReduce);
  EXPECT_RESOLVES(kNccl, ncclReduceScatter);
  EXPECT_RESOLVES(kNccl, ncclAllGather);
  EXPECT_RESOLVES(kNccl, ncclGroupStart);
  EXPECT_RESOLVES(kNccl, ncclGroupEnd);
  EXPECT_RESOLVES(kNccl, ncclSend);
  EXPECT_RESOLVES(kNccl, ncclRecv);
}
#endif

// A second open returns the first result: the library stays open for the process.
TEST(CudaLibraries, OpenIsCached) {
  ASSERT_OK(open_cuda_library(CudaLibrary::kCublasLt));
  ASSERT_OK(open_cuda_library(CudaLibrary::kCublasLt));
  EXPECT_EQ(cuda_library_symbol(CudaLibrary::kCublasLt, "cublasLtCreate"),
            cuda_library_symbol(CudaLibrary::kCublasLt, "cublasLtCreate"));
}

}  // namespace
}  // namespace blockscale::runtime
