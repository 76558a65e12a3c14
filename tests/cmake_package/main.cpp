// Quantizes one MXFP8 block through the installed formats library, checks bytes worked out by
// hand, and round-trips a .npy through the installed io library. Exits non-zero on any mismatch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "formats/io/npy.h"
#include "formats/quantize.h"
#include "formats/recipe.h"

#ifdef CONSUMER_HAS_CUDA
bool check_cuda_parts();  // cuda_parts.cpp
#endif

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %s\n", what);
    ++failures;
  }
}

void check_mxfp8() {
  namespace f = blockscale::formats;
  // One 32-element block: -4.0, -3.75, ..., 3.75 (multiples of 0.25, all exact in MXFP8).
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * static_cast<float>(i - 16);

  f::QuantizeOptions options;
  expect(f::parse_format("mxfp8", &options.recipe), "parse_recipe(\"mxfp8\")");
  f::QuantizedMatrix q;
  blockscale::Status s = f::quantize(x.data(), 1, 32, 32, options, f::Direction::kRowwise, &q);
  if (!s) {
    std::fprintf(stderr, "consumer: quantize: %s\n", s.message().c_str());
    ++failures;
    return;
  }
  // amax 4 = 2^2, E4M3's largest exponent is 8: the block scale is 2^(2-8) = 2^-6, E8M0 code
  // 127 - 6 = 121. Then 1.0 (element 20) is 2^6 in E4M3: biased exponent 6 + 7 = 13, code 13 << 3.
  expect(q.scales.size() == 1 && q.scales[0] == 121, "the block's E8M0 scale is 121 (2^-6)");
  expect(q.data.size() == 32 && q.data[20] == 0x68, "1.0 is E4M3 code 0x68 under scale 2^-6");

  std::vector<float> y;
  s = f::dequantize(q, &y);
  expect(s.is_ok() && y == x, "dequantize returns the exact inputs");
}

void check_npy() {
  namespace io = blockscale::io;
  const std::vector<float> values = {1.5f, -2.0f, 0.0f, 448.0f};
  io::TensorView view{blockscale::formats::DType::kF32, {2, 2}, reinterpret_cast<const uint8_t*>(values.data()),
                      values.size() * sizeof(float)};
  std::vector<uint8_t> bytes;
  io::NpyArray back;
  const bool ok = io::encode_npy(view, &bytes).is_ok() && io::parse_npy(bytes.data(), bytes.size(), &back).is_ok();
  expect(ok && back.shape == view.shape && back.data.size() == view.nbytes &&
             std::equal(back.data.begin(), back.data.end(), view.data),
         ".npy encode then parse returns the tensor");
}

}  // namespace

int main() {
  check_mxfp8();
  check_npy();
#ifdef CONSUMER_HAS_CUDA
  if (!check_cuda_parts()) ++failures;
#endif
  if (failures) return 1;
  std::printf("consumer: ok\n");
  return 0;
}
