#include "runtime/device.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "runtime/cuda_status.h"

namespace blockscale::runtime {

Status copy_and_wait(void* dst, const void* src, size_t bytes, void* stream, const char* what) {
  const auto s = static_cast<cudaStream_t>(stream);
  BS_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), what));
  return cuda_status(cudaStreamSynchronize(s), what);
}

Status gpu_available() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::error(std::string("no usable GPU: ") + cudaGetErrorString(err));
  }
  if (n == 0) return Status::error("no usable GPU: no CUDA device is visible");
  return Status::ok();
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::alloc(size_t bytes, const char* what) {
  release();
  void* p = nullptr;
  BS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, bytes ? bytes : 1), what));
  data_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  return Status::ok();
}

Status DeviceBuffer::upload(const void* host, size_t bytes, const char* what) {
  BS_RETURN_IF_ERROR(alloc(bytes, what));
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), what);
}

Status DeviceBuffer::download(void* host, size_t bytes, const char* what) const {
  if (bytes > bytes_) {
    return Status::error(std::string(what) + ": " + std::to_string(bytes) + " bytes asked of a " +
                         std::to_string(bytes_) + "-byte buffer");
  }
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), what);
}

}  // namespace blockscale::runtime
