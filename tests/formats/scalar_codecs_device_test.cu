// formats/scalar_codecs.h on the GPU vs the same functions on the host, byte for byte: every
// encoder (and the MX scale exponent, fp32 -> bf16) on every bf16 and every fp16 pattern, and
// every decoder on every code. The host side is the CPU emulator's behaviour; the device side is
// what kernels that include the header will compute. Skips without a GPU.
#include "formats/scalar_codecs.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu_test.h"  // defines: SKIP_WITHOUT_GPU, ASSERT_CUDA, ASSERT_OK

namespace {

namespace bf = blockscale::formats;
using blockscale::runtime::DeviceBuffer;

// ---- Results per input value. Each is < 2^32, so the poison 0xFF..FF marks an unwritten slot.
enum EncodeOut {
  kE4M3, kE5M2, kE2M1, kE2M3, kE3M2, kUE4M3, kE8M0Rz, kE8M0Ru,
  kMxE4M3Floor, kMxE4M3Ceil, kMxE5M2Floor, kMxE5M2Ceil, kMxE2M1Floor, kMxE2M1Ceil,
  kBf16Rn, kInputBits, kNumEncodeOut
};
const char* const kEncodeNames[kNumEncodeOut] = {
    "E4M3", "E5M2", "E2M1", "E2M3", "E3M2", "UE4M3", "E8M0 rz", "E8M0 ru",
    "MX exp E4M3 floor", "MX exp E4M3 ceil", "MX exp E5M2 floor", "MX exp E5M2 ceil",
    "MX exp E2M1 floor", "MX exp E2M1 ceil", "fp32->bf16 rn", "input decode"};

enum DecodeOut { kDecE4M3, kDecE5M2, kDecUE4M3, kDecE8M0, kDecE2M3, kDecE3M2, kDecE2M1, kNumDecodeOut };
const char* const kDecodeNames[kNumDecodeOut] = {"E4M3", "E5M2", "UE4M3", "E8M0", "E2M3", "E3M2", "E2M1"};
const uint32_t kDecodeCodes[kNumDecodeOut] = {256, 256, 256, 256, 64, 64, 16};

constexpr uint32_t kPatterns = 2 * 65536;  // every bf16, then every fp16
constexpr uint64_t kPoison = ~uint64_t{0};

// Input i: bf16 pattern i, or fp16 pattern i - 65536, decoded exactly.
__host__ __device__ float input_value(uint32_t i) {
  return i < 65536 ? bf::bf16_bits_to_float(static_cast<uint16_t>(i))
                   : bf::fp16_bits_to_float(static_cast<uint16_t>(i - 65536));
}

// The MX scale exponent takes a finite amax >= 0: use |x| of finite inputs; 0 marks the others.
__host__ __device__ uint64_t mx_exp(float x, float maxnorm, bool ceil_rounding) {
  const uint32_t a = bf::float_bits(x) & 0x7FFFFFFFu;
  if (!bf::is_finite_bits(a)) return 0;
  return static_cast<uint64_t>(bf::mx_scale_exponent(bf::bits_float(a), maxnorm, ceil_rounding) + 1000);
}

__host__ __device__ void encode_all(uint32_t i, uint64_t* out) {
  const float x = input_value(i);
  out[kE4M3] = bf::encode_e4m3(x);
  out[kE5M2] = bf::encode_e5m2(x);
  out[kE2M1] = bf::encode_e2m1(x);
  out[kE2M3] = bf::encode_e2m3(x);
  out[kE3M2] = bf::encode_e3m2(x);
  out[kUE4M3] = bf::encode_ue4m3(x);
  out[kE8M0Rz] = bf::encode_e8m0(x, false);
  out[kE8M0Ru] = bf::encode_e8m0(x, true);
  out[kMxE4M3Floor] = mx_exp(x, 448.0f, false);
  out[kMxE4M3Ceil] = mx_exp(x, 448.0f, true);
  out[kMxE5M2Floor] = mx_exp(x, 57344.0f, false);
  out[kMxE5M2Ceil] = mx_exp(x, 57344.0f, true);
  out[kMxE2M1Floor] = mx_exp(x, 6.0f, false);
  out[kMxE2M1Ceil] = mx_exp(x, 6.0f, true);
  out[kBf16Rn] = bf::float_to_bf16_bits_rn(x);
  out[kInputBits] = bf::float_bits(x);
}

// Codes a format does not have (c >= its code count) hold 0 on both sides.
__host__ __device__ void decode_all(uint32_t c, uint64_t* out) {
  out[kDecE4M3] = bf::float_bits(bf::decode_e4m3(c));
  out[kDecE5M2] = bf::float_bits(bf::decode_e5m2(c));
  out[kDecUE4M3] = bf::float_bits(bf::decode_ue4m3(c));
  out[kDecE8M0] = bf::float_bits(bf::decode_e8m0(c));
  out[kDecE2M3] = c < 64 ? bf::float_bits(bf::decode_e2m3(c)) : 0;
  out[kDecE3M2] = c < 64 ? bf::float_bits(bf::decode_e3m2(c)) : 0;
  out[kDecE2M1] = c < 16 ? bf::float_bits(bf::decode_e2m1(c)) : 0;
}

__global__ void encode_kernel(uint64_t* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kPatterns) encode_all(i, out + static_cast<size_t>(i) * kNumEncodeOut);
}

__global__ void decode_kernel(uint64_t* out) {
  const uint32_t c = threadIdx.x;
  decode_all(c, out + static_cast<size_t>(c) * kNumDecodeOut);
}

// Compares device results with the host's, per column; returns the total mismatch count.
uint64_t compare(const std::vector<uint64_t>& dev, const std::vector<uint64_t>& host, int cols,
                 const char* const* names, const char* what, uint64_t* unwritten) {
  uint64_t total = 0;
  for (int k = 0; k < cols; ++k) {
    uint64_t bad = 0;
    for (size_t row = 0; row * cols < dev.size(); ++row) {
      const uint64_t d = dev[row * cols + k], h = host[row * cols + k];
      if (d == kPoison) ++*unwritten;
      if (d != h && bad++ < 3) {
        const bool enc = cols == kNumEncodeOut;  // encode rows: bf16 patterns, then fp16
        ADD_FAILURE() << what << " " << names[k] << " of "
                      << (enc ? (row < 65536 ? "bf16 0x" : "fp16 0x") : "code 0x") << std::hex
                      << (enc ? row % 65536 : row) << ": device 0x" << d << ", host 0x" << h;
      }
    }
    EXPECT_EQ(bad, 0u) << what << " " << names[k] << " mismatches";
    total += bad;
  }
  return total;
}

TEST(ScalarCodecsDevice, EveryBf16AndFp16PatternAndEveryCodeMatchTheHost) {
  SKIP_WITHOUT_GPU();
  int dev_id = 0;
  cudaDeviceProp prop;
  ASSERT_CUDA(cudaGetDevice(&dev_id));
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, dev_id));

  const size_t n_enc = size_t{kPatterns} * kNumEncodeOut, n_dec = size_t{256} * kNumDecodeOut;
  DeviceBuffer d_enc, d_dec;
  ASSERT_OK(d_enc.alloc(n_enc * sizeof(uint64_t), "encode results"));
  ASSERT_OK(d_dec.alloc(n_dec * sizeof(uint64_t), "decode results"));
  ASSERT_CUDA(cudaMemset(d_enc.data(), 0xFF, d_enc.size()));  // poison
  ASSERT_CUDA(cudaMemset(d_dec.data(), 0xFF, d_dec.size()));

  encode_kernel<<<kPatterns / 256, 256>>>(d_enc.as<uint64_t>());
  ASSERT_CUDA(cudaGetLastError());  // e.g. no kernel image: cuda_status names the build's architectures
  decode_kernel<<<1, 256>>>(d_dec.as<uint64_t>());
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());

  std::vector<uint64_t> dev_enc(n_enc), dev_dec(n_dec), host_enc(n_enc), host_dec(n_dec);
  ASSERT_OK(d_enc.download(dev_enc.data(), d_enc.size(), "encode results"));
  ASSERT_OK(d_dec.download(dev_dec.data(), d_dec.size(), "decode results"));
  for (uint32_t i = 0; i < kPatterns; ++i) encode_all(i, &host_enc[size_t{i} * kNumEncodeOut]);
  for (uint32_t c = 0; c < 256; ++c) decode_all(c, &host_dec[size_t{c} * kNumDecodeOut]);

  uint64_t unwritten = 0;
  const uint64_t bad = compare(dev_enc, host_enc, kNumEncodeOut, kEncodeNames, "encode", &unwritten) +
                       compare(dev_dec, host_dec, kNumDecodeOut, kDecodeNames, "decode", &unwritten);
  EXPECT_EQ(unwritten, 0u) << "device results left unwritten (poison 0xFF..FF)";

  std::string decoded;
  for (int k = 0; k < kNumDecodeOut; ++k) {
    decoded += std::string(k ? ", " : "") + kDecodeNames[k] + " " + std::to_string(kDecodeCodes[k]);
  }
  std::printf("scalar_codecs_device_test: %s (sm_%d%d): encode %u patterns (65536 bf16 + 65536 fp16) "
              "x %d results each; decode codes %s; mismatches %llu, unwritten %llu\n",
              prop.name, prop.major, prop.minor, kPatterns, kNumEncodeOut, decoded.c_str(),
              static_cast<unsigned long long>(bad), static_cast<unsigned long long>(unwritten));
}

}  // namespace
