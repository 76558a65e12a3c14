// Shared by the GPU tests of quant/: input elements as bits of the input type, names for the test
// output, poisoned output buffers with guard bytes and their byte-for-byte check. Skipping without
// a GPU, CUDA assertions and device memory: tests/gpu_test.h (runtime/).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "formats/host_device.h"
#include "formats/scalar_codecs.h"
#include "formats/status.h"
#include "quant/quantize.h"
#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK, expect_error

namespace blockscale_test {

// ---- Names for test output (a dtype's: formats::dtype_name) -----------------------------------

// "rowwise" / "columnwise" / "both"; abbreviated: "row" / "col" / "both".
inline const char* name(blockscale::formats::Direction d, bool abbreviated = false) {
  using blockscale::formats::Direction;
  if (d == Direction::kRowwise) return abbreviated ? "row" : "rowwise";
  if (d == Direction::kColumnwise) return abbreviated ? "col" : "columnwise";
  return "both";
}

// ---- Input elements ----------------------------------------------------------------------------

// Input element bits <-> value (the value, decoded exactly to fp32, is what the emulator quantizes).
inline uint32_t to_bits(float v, blockscale::formats::DType t) {
  namespace bf = blockscale::formats;
  using blockscale::formats::DType;
  if (t == DType::kF32) return bf::float_bits(v);
  if (t == DType::kBf16) return bf::float_to_bf16_bits_rn(v);
  const __half h = __float2half_rn(v);
  uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}
inline float from_bits(uint32_t b, blockscale::formats::DType t) {
  namespace bf = blockscale::formats;
  using blockscale::formats::DType;
  if (t == DType::kF32) return bf::bits_float(b);
  if (t == DType::kBf16) return bf::bf16_bits_to_float(static_cast<uint16_t>(b));
  return bf::fp16_bits_to_float(static_cast<uint16_t>(b));
}

// Bit patterns of the input type: the sign bit, +Inf, the largest finite value and the smallest
// normal (every pattern below it is zero or subnormal).
struct DTypeBits {
  uint32_t sign, inf, max_finite, min_normal;
};
inline DTypeBits type_bits(blockscale::formats::DType t) {
  using blockscale::formats::DType;
  if (t == DType::kF32) return {0x80000000u, 0x7F800000u, 0x7F7FFFFFu, 0x00800000u};
  if (t == DType::kBf16) return {0x8000u, 0x7F80u, 0x7F7Fu, 0x0080u};
  return {0x8000u, 0x7C00u, 0x7BFFu, 0x0400u};
}

// log10 of the magnitudes drawn for the type: 1e-30 .. 1e30 (fp16, which holds 6e-8 .. 65504:
// 1e-6 .. 1e4).
inline void magnitude_range(blockscale::formats::DType t, double* lo, double* hi) {
  if (t == blockscale::formats::DType::kF16) *lo = -6.0, *hi = 4.0;
  else *lo = -30.0, *hi = 30.0;
}

// A test input: its bytes in the input type and the same elements decoded exactly.
struct HostInput {
  std::vector<uint8_t> bytes;  // rows x ld elements of the input type
  std::vector<float> values;   // decoded; the padding columns past cols hold NaN (never read)
};

// The device copy of an input, `offset` bytes into its buffer.
struct DeviceInput {
  blockscale::runtime::DeviceBuffer buf;
  int64_t offset = 0;
  const void* ptr() const { return buf.data() + offset; }
};

// Copies in.bytes (elements of type t) to the device; misaligned: one element off the buffer's
// (256-byte) alignment, which breaks 16-byte vector loads.
inline ::testing::AssertionResult upload_input(const HostInput& in, blockscale::formats::DType t,
                                               bool misaligned, DeviceInput* d) {
  d->offset = misaligned ? static_cast<int64_t>(blockscale::formats::dtype_size(t)) : 0;
  blockscale::Status s = d->buf.alloc(in.bytes.size() + static_cast<size_t>(d->offset), "input");
  if (s) {
    s = blockscale::runtime::cuda_status(
        cudaMemcpy(d->buf.data() + d->offset, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice), "input");
  }
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}

// ---- Poisoned outputs --------------------------------------------------------------------------

constexpr uint8_t kDefaultPoison = 0xAB;
constexpr int64_t kDefaultGuard = 64;

// One output buffer: `bytes` bytes at `offset` (misalignment) after `guard` poisoned bytes, and
// `guard` poisoned bytes after it; every byte holds `poison` until the kernel writes.
struct GuardedOutput {
  blockscale::runtime::DeviceBuffer buf;
  int64_t bytes = 0, offset = 0, guard = kDefaultGuard;
  uint8_t poison = kDefaultPoison;
  uint8_t* ptr() const { return buf.data() + guard + offset; }
};

inline ::testing::AssertionResult alloc_poisoned(GuardedOutput* o, int64_t bytes, int64_t offset,
                                                 uint8_t poison = kDefaultPoison,
                                                 int64_t guard = kDefaultGuard) {
  o->bytes = bytes, o->offset = offset, o->guard = guard, o->poison = poison;
  blockscale::Status s = o->buf.alloc(static_cast<size_t>(bytes + 2 * guard + offset), "output");
  if (s) s = blockscale::runtime::cuda_status(cudaMemset(o->buf.data(), poison, o->buf.size()), "poison the output");
  if (!s) return ::testing::AssertionFailure() << s.message();
  return ::testing::AssertionSuccess();
}

// run()'s outputs: the four guarded buffers, an amax (optional) and the non-finite flag, which
// this zeroes (a device int).
inline ::testing::AssertionResult guarded_outputs(const GuardedOutput& rd, const GuardedOutput& rs,
                                                  const GuardedOutput& cd, const GuardedOutput& cs,
                                                  const GuardedOutput* amax, blockscale::runtime::DeviceBuffer* flag,
                                                  blockscale::quant::QuantizeOutputs* out) {
  blockscale::Status s = flag->alloc(sizeof(int), "non-finite flag");
  if (s) s = blockscale::runtime::cuda_status(cudaMemset(flag->data(), 0, sizeof(int)), "non-finite flag");
  if (!s) return ::testing::AssertionFailure() << s.message();
  *out = blockscale::quant::QuantizeOutputs{};
  out->rowwise_data = rd.ptr(), out->rowwise_scales = rs.ptr();
  out->columnwise_data = cd.ptr(), out->columnwise_scales = cs.ptr();
  out->amax = amax != nullptr ? reinterpret_cast<float*>(amax->ptr()) : nullptr;
  out->nonfinite = flag->as<int>();
  return ::testing::AssertionSuccess();
}

// Compares the buffer's contents with `want` (nullptr: must be untouched, still the poison) and
// its guards with the poison. Returns the number of bad bytes (1 when `want` is not the buffer's
// size or the copy fails); describes the first few in *report (row_len: for the row / column),
// each line of the description starting with `indent`.
inline int64_t check_output(const GuardedOutput& o, const std::vector<uint8_t>* want, int64_t row_len,
                            const char* what, std::string* report, const char* indent = "") {
  std::vector<uint8_t> all(o.buf.size());
  const blockscale::Status s = o.buf.download(all.data(), all.size(), what);
  if (!s) {
    *report += std::string(indent) + s.message() + "\n";
    return 1;
  }
  if (want != nullptr && static_cast<int64_t>(want->size()) != o.bytes) {
    *report += std::string(indent) + what + ": reference holds " + std::to_string(want->size()) +
               " bytes, buffer " + std::to_string(o.bytes) + "\n";
    return 1;
  }
  int64_t bad = 0;
  const int64_t begin = o.guard + o.offset;
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
    const bool inside = i >= begin && i < begin + o.bytes;
    const uint8_t expected = inside && want ? (*want)[static_cast<size_t>(i - begin)] : o.poison;
    if (all[static_cast<size_t>(i)] == expected) continue;
    if (bad++ < 4) {
      char line[256];
      if (inside) {
        const int64_t j = i - begin;
        std::snprintf(line, sizeof line, "%s%s: byte %lld (row %lld, col %lld): got 0x%02X want 0x%02X\n",
                      indent, what, static_cast<long long>(j), static_cast<long long>(j / row_len),
                      static_cast<long long>(j % row_len), all[static_cast<size_t>(i)], expected);
      } else {
        std::snprintf(line, sizeof line, "%s%s: guard byte %lld %s the buffer written (0x%02X)\n", indent,
                      what, static_cast<long long>(i < begin ? begin - i : i - begin - o.bytes),
                      i < begin ? "before" : "after", all[static_cast<size_t>(i)]);
      }
      *report += line;
    }
  }
  return bad;
}

}  // namespace blockscale_test
