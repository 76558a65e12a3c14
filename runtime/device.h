// The GPU as blockscale's host code sees it: whether one can run the kernels, and device memory
// owned by a scope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/status.h"

namespace blockscale::runtime {

// Ok when a CUDA device is visible and the driver works; otherwise why not, in one line.
Status gpu_available();

// Copies `bytes` (any direction: cudaMemcpyDefault) ordered after the work already queued on
// `stream` and waits for the copy: a plain cudaMemcpy runs on the legacy stream, which a
// non-blocking stream's kernels do not wait for, and an upload from pageable memory may return
// before its data lands. `stream` is a cudaStream_t.
Status copy_and_wait(void* dst, const void* src, size_t bytes, void* stream, const char* what);

// cudaMalloc'd memory freed when the buffer goes out of scope (so an early return frees it).
// Move-only. A buffer of 0 bytes still holds a valid 1-byte allocation: data() is never null after
// a successful alloc, which lets callers pass it where a kernel argument must not be null.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Replaces any earlier allocation; `what` names the buffer in the error.
  Status alloc(size_t bytes, const char* what);
  // alloc(bytes) then a copy of `bytes` from the host.
  Status upload(const void* host, size_t bytes, const char* what);
  // The same for a whole host vector.
  template <typename T>
  Status upload(const std::vector<T>& host, const char* what) {
    return upload(host.data(), host.size() * sizeof(T), what);
  }
  // Copies the first `bytes` (<= size()) to the host.
  Status download(void* host, size_t bytes, const char* what) const;

  uint8_t* data() const { return data_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace blockscale::runtime
