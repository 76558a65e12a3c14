// io_dump: formats/io's readers and writers on the command line, for io_reference_test.py.
//   io_dump convert IN OUT      read IN (.npy or .safetensors) and write it to OUT, same format
//   io_dump floats FILE [NAME]  the fp32 bit patterns (hex, one per line) of FILE's array, or
//                               of tensor NAME of a .safetensors FILE, as io::to_float gives them
// Exits 1 with the Status message on stderr on any error.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/io/npy.h"
#include "formats/io/safetensors.h"

namespace io = blockscale::io;
using blockscale::Status;

namespace {

bool is_npy(const std::string& path) { return path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0; }

Status convert(const std::string& in, const std::string& out) {
  if (is_npy(in)) {
    io::NpyArray a;
    BS_RETURN_IF_ERROR(io::read_npy(in, &a));
    return io::write_npy(out, a.view());
  }
  io::SafetensorsFile f;
  BS_RETURN_IF_ERROR(io::SafetensorsFile::open(in, &f));
  std::vector<std::pair<std::string, io::TensorView>> tensors;
  for (const std::string& name : f.names()) {
    io::TensorView t;
    BS_RETURN_IF_ERROR(f.tensor(name, &t));
    tensors.emplace_back(name, t);
  }
  return io::write_safetensors(out, tensors, f.metadata());
}

Status floats(const std::string& path, const std::string& name) {
  std::vector<float> v;
  if (is_npy(path)) {
    io::NpyArray a;
    BS_RETURN_IF_ERROR(io::read_npy(path, &a));
    BS_RETURN_IF_ERROR(io::to_float(a.view(), &v));
  } else {
    io::SafetensorsFile f;
    BS_RETURN_IF_ERROR(io::SafetensorsFile::open(path, &f));
    BS_RETURN_IF_ERROR(f.tensor_as_float(name, &v));
  }
  for (float x : v) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    std::printf("%08x\n", u);
  }
  return Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  Status s = Status::error("usage: io_dump convert IN OUT | io_dump floats FILE [NAME]");
  if (cmd == "convert" && argc == 4) s = convert(argv[2], argv[3]);
  if (cmd == "floats" && (argc == 3 || argc == 4)) s = floats(argv[2], argc == 4 ? argv[3] : "");
  if (!s) {
    std::fprintf(stderr, "io_dump: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
