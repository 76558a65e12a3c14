// Shared by the tests of quant/: skipping without a GPU, CUDA error assertions, and a device
// buffer that frees itself.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace blockscale_test {

inline bool have_gpu(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    *why = std::string("no CUDA device (cudaGetDeviceCount: ") +
           (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")";
    return false;
  }
  return true;
}

struct DeviceBuffer {
  uint8_t* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  cudaError_t alloc(size_t n) {
    bytes = n;
    return cudaMalloc(&ptr, n ? n : 1);
  }
  // Allocates and copies n bytes from the host.
  cudaError_t upload(const void* host, size_t n) {
    const cudaError_t err = alloc(n);
    return err != cudaSuccess || n == 0 ? err : cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice);
  }
};

}  // namespace blockscale_test

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    std::string why_;                                               \
    if (!blockscale_test::have_gpu(&why_)) GTEST_SKIP() << why_;    \
  } while (0)

#define ASSERT_CUDA(call)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (call);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #call << ": " << cudaGetErrorString(err_); \
  } while (0)
