// `blockscale dequantize`: the exact inverse of `blockscale quantize`. Every entry of a file in
// the quantized-tensor schema goes through formats::dequantize (fp32, docs/numerics.md) and back
// to its input shape (columnwise copies are transposed back).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "formats/io/input_file.h"  // defines: io::InputFile, io::has_extension
#include "formats/io/npy.h"
#include "formats/io/quantized_file.h"  // defines: read_quantized_tensor, quantized_tensor_names
#include "tools/cli.h"

namespace blockscale::tools {
namespace {

struct DequantizeArgs {
  std::string in, out, tensor;
  bool quiet = false;
};

// The fp32 values of entry `e` in the input tensor's shape.
Status dequantize_entry(const io::QuantizedTensor& e, std::vector<float>* values) {
  std::vector<float> stored;
  BS_RETURN_IF_ERROR(formats::dequantize(e.q, &stored));
  if (e.direction == formats::Direction::kRowwise) {
    *values = std::move(stored);
    return Status::ok();
  }
  // Stored as cols x rows of the input's 2D view: transpose back.
  const int64_t rows = e.q.cols, cols = e.q.rows;
  values->resize(stored.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (*values)[r * cols + c] = stored[c * rows + r];
  return Status::ok();
}

void run_dequantize(const DequantizeArgs& a) {
  if (a.out == a.in) usage_error("dequantize", "--out: must differ from --in");
  const bool to_npy = io::has_extension(a.out, ".npy");  // else .safetensors: the option's validator
  io::InputFile in;
  check("dequantize", io::InputFile::open(a.in, "--in", &in));
  std::vector<std::string> names = io::quantized_tensor_names(*in.safetensors());
  if (names.empty()) fail("dequantize", "--in '" + a.in + "': holds no quantized tensor (no NAME.recipe metadata key)");
  if (!a.tensor.empty()) {
    if (std::find(names.begin(), names.end(), a.tensor) == names.end())
      fail("dequantize", "--tensor '" + a.tensor + "': no such quantized tensor in '" + a.in + "'");
    names = {a.tensor};
  }
  if (to_npy && names.size() != 1)
    fail("dequantize", "--out '" + a.out + "': a .npy file holds one tensor but '" + a.in + "' has " +
                           std::to_string(names.size()) + " (write .safetensors or pick one with --tensor)");

  // All values are held until the write: the output file is written once, atomically.
  std::vector<std::vector<float>> values(names.size());
  std::vector<std::pair<std::string, io::TensorView>> views;
  for (size_t i = 0; i < names.size(); ++i) {
    io::QuantizedTensor e;
    if (Status s = io::read_quantized_tensor(*in.safetensors(), names[i], &e); !s)
      fail("dequantize", "--in '" + a.in + "': " + s.message());
    if (!a.quiet) std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, names.size(), names[i].c_str());
    if (e.hadamard)
      std::fprintf(stderr, "blockscale dequantize: '%s' was quantized after a Hadamard transform; its "
                           "values stay in the transformed domain\n", names[i].c_str());
    Status s = dequantize_entry(e, &values[i]);
    if (!s) fail("dequantize", names[i] + ": " + s.message());
    views.push_back({names[i], io::TensorView{formats::DType::kF32, e.shape,
                                              reinterpret_cast<const uint8_t*>(values[i].data()),
                                              values[i].size() * sizeof(float)}});
  }
  check("dequantize", to_npy ? io::write_npy(a.out, views[0].second) : io::write_safetensors(a.out, views));
  std::printf("wrote %s (%zu tensors, fp32)\n", a.out.c_str(), views.size());
}

}  // namespace

void add_dequantize_command(CLI::App& app) {
  auto a = std::make_shared<DequantizeArgs>();
  CLI::App* cmd = app.add_subcommand("dequantize", "Dequantize a file written by 'quantize' to fp32 (the exact inverse)");
  cmd->footer(
      "Dequantizes a file written by 'blockscale quantize' to fp32, exactly as docs/numerics.md defines\n"
      "it, each tensor in its input shape (columnwise copies transposed back). Nvfp4 copies made\n"
      "with --rht stay in the Hadamard-transformed domain.\n"
      "Exit codes: 0 done, 1 failed (nothing written), 2 bad usage.");
  cmd->add_option("--in", a->in, "quantized .safetensors file")
      ->required()
      ->check(extension_validator({".safetensors"}))
      ->type_name("FILE");
  cmd->add_option("--out", a->out, "output .safetensors (every tensor) or .npy (one tensor)")
      ->required()
      ->check(extension_validator({".safetensors", ".npy"}))
      ->type_name("FILE");
  cmd->add_option("--tensor", a->tensor, "only this quantized tensor (entry name)")->type_name("NAME");
  cmd->add_flag("--quiet", a->quiet, "no progress on stderr");
  cmd->callback([a] { run_dequantize(*a); });
}

}  // namespace blockscale::tools
