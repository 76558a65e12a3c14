// libFuzzer target: io::parse_npy on arbitrary bytes (BLOCKSCALE_FUZZ=ON, clang; docs/file-io.md).
// Beyond "no crash, no sanitizer report": an accepted file must be self-consistent, and writing
// it back and parsing that must give the same array.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "formats/io/npy.h"

namespace io = blockscale::io;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::NpyArray a;
  if (!io::parse_npy(data, size, &a)) return 0;
  uint64_t nbytes = 0;
  if (!io::shape_nbytes(a.shape, a.dtype, &nbytes) || nbytes != a.data.size()) std::abort();
  if (blockscale::formats::dtype_is_float(a.dtype)) {
    std::vector<float> f;
    if (!io::to_float(a.view(), &f)) std::abort();
  }
  std::vector<uint8_t> again;
  if (!io::encode_npy(a.view(), &again)) std::abort();
  io::NpyArray b;
  if (!io::parse_npy(again.data(), again.size(), &b)) std::abort();
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data) std::abort();
  return 0;
}
