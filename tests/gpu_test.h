// runtime/ in GoogleTest terms, for the GPU tests: a test skips where runtime::gpu_available
// finds no GPU, and a failed CUDA call fails it with runtime::cuda_status's message. Device
// memory is runtime::DeviceBuffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "runtime/cuda_status.h"
#include "runtime/device.h"
#include "tests/status_test.h"  // defines: ASSERT_OK, EXPECT_OK, mentions, expect_error

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    const ::blockscale::Status bs_gpu_ = ::blockscale::runtime::gpu_available(); \
    if (!bs_gpu_) GTEST_SKIP() << bs_gpu_.message();                           \
  } while (0)

// ASSERT_OK / EXPECT_OK of a CUDA runtime call: the failure is cuda_status's message, named by the
// call's text.
#define ASSERT_CUDA(call)                                                          \
  do {                                                                             \
    const ::blockscale::Status bs_cuda_ = ::blockscale::runtime::cuda_status((call), #call); \
    ASSERT_TRUE(bs_cuda_.is_ok()) << bs_cuda_.message();                           \
  } while (0)
#define EXPECT_CUDA(call)                                                          \
  do {                                                                             \
    const ::blockscale::Status bs_cuda_ = ::blockscale::runtime::cuda_status((call), #call); \
    EXPECT_TRUE(bs_cuda_.is_ok()) << bs_cuda_.message();                           \
  } while (0)
