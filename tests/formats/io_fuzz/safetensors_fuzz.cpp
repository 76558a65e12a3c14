// libFuzzer target: io::SafetensorsFile::parse on arbitrary bytes (BLOCKSCALE_FUZZ=ON, clang;
// docs/file-io.md). Beyond "no crash, no sanitizer report": every view of an accepted file lies
// inside the input, the views tile the byte buffer, and the float tensors widen.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/io/safetensors.h"

namespace io = blockscale::io;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::SafetensorsFile f;
  if (!io::SafetensorsFile::parse(data, size, &f)) return 0;
  uint64_t header = 0;
  std::memcpy(&header, data, 8);
  uint64_t total = 0;
  for (const std::string& name : f.names()) {
    io::TensorView t;
    if (!f.tensor(name, &t) || !io::check_view(t, name)) std::abort();
    if (t.nbytes && (t.data < data + 8 + header || t.data + t.nbytes > data + size)) std::abort();
    total += t.nbytes;
    if (blockscale::formats::dtype_is_float(t.dtype)) {
      std::vector<float> v;
      if (!f.tensor_as_float(name, &v)) std::abort();
    }
  }
  if (8 + header + total != size) std::abort();
  return 0;
}
