// `blockscale quantize`: every floating-point tensor of a .npy/.safetensors file through
// formats::quantize, written in the quantized-tensor schema (docs/file-format.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/io/input_file.h"  // defines: io::InputFile (.npy or mmapped .safetensors)
#include "formats/io/quantized_file.h"  // defines: QuantizedTensor, add_quantized_tensor, matrix_view
#include "tools/cli.h"
#ifdef BLOCKSCALE_HAVE_CUDA
#include "tools/gpu_quantize.h"  // defines: gpu_quantize (quant/'s kernels)
#endif

namespace blockscale::tools {
namespace {

struct QuantizeArgs {
  std::string recipe;
  std::string rounding = "ceil";
  std::string direction = "rowwise";
  uint64_t sr_seed = 0;
  bool rht = false;
  bool nvfp4_2d = false;
  bool pow2 = false;
  std::string in, out;
  std::string device = "cpu";
  bool json = false;
  bool quiet = false;
};

// The options, checked against each other and named as the user typed them, before any file is
// read.
Status make_options(const QuantizeArgs& a, bool sr, formats::QuantizeOptions* o) {
  formats::parse_format(a.recipe, &o->recipe);  // recipe_validator() accepted it
  const bool mx = formats::is_mx(o->recipe), nvfp4 = o->recipe == formats::Format::kNvfp4;
  if (a.rounding == "floor" && !mx)
    return Status::error("--rounding floor: applies to MX recipes only (" + a.recipe + " rounds to nearest)");
  o->rounding = a.rounding == "floor" ? formats::ScaleRounding::kFloor : formats::ScaleRounding::kCeil;
  if (sr && !nvfp4) return Status::error("--sr-seed: stochastic rounding applies to nvfp4 only");
  o->stochastic_rounding = sr;
  o->sr_seed = a.sr_seed;
  if (a.rht && !nvfp4) return Status::error("--rht: the Hadamard transform applies to nvfp4 only");
  if (a.rht && a.direction == "rowwise")
    return Status::error("--rht: the transform is applied to the columnwise copy (the wgrad operand); "
                         "use --direction columnwise or both");
  if (a.rht && a.nvfp4_2d) return Status::error("--rht: cannot be combined with --2d (16x16 weight blocks)");
  if (a.nvfp4_2d && !nvfp4) return Status::error("--2d: 16x16 blocks apply to nvfp4 only");
  o->nvfp4_2d = a.nvfp4_2d;
  if (a.pow2 && !formats::is_fp8_block(o->recipe))
    return Status::error("--pow2: power-of-two scales apply to fp8_block128 and fp8_block128x128 only");
  o->pow2_scales = a.pow2;
  if (a.out == a.in) return Status::error("--out: must differ from --in");
  return Status::ok();
}

// Quantizes one input tensor into `entries` (one entry, or two for --direction both), on the CPU
// (formats::quantize) or the GPU (quant/), which give the same bytes.
Status quantize_tensor(const io::InputTensor& t, const QuantizeArgs& a, const formats::QuantizeOptions& base,
                       std::vector<std::unique_ptr<io::QuantizedTensor>>* entries) {
  int64_t rows = 0, cols = 0;
  BS_RETURN_IF_ERROR(io::matrix_view(t.view.shape, &rows, &cols));
  std::vector<std::unique_ptr<io::QuantizedTensor>> made;
  [[maybe_unused]] io::QuantizedTensor* by_direction[2] = {nullptr, nullptr};  // the GPU path's outputs
  for (formats::Direction d : {formats::Direction::kRowwise, formats::Direction::kColumnwise}) {
    const bool rowwise = d == formats::Direction::kRowwise;
    if ((rowwise && a.direction == "columnwise") || (!rowwise && a.direction == "rowwise")) continue;
    auto e = std::make_unique<io::QuantizedTensor>();
    e->name = (!rowwise && a.direction == "both") ? t.name + ".columnwise" : t.name;
    e->shape = t.view.shape;
    e->direction = d;
    e->rounding = base.rounding;
    e->hadamard = a.rht && !rowwise;
    if (e->hadamard && rows % 16 != 0)
      return Status::error(t.name + ": --rht needs a row count (the columnwise block dimension) that is a "
                           "multiple of 16, not " + std::to_string(rows));
    by_direction[rowwise ? 0 : 1] = e.get();
    made.push_back(std::move(e));
  }
  if (a.device == "gpu") {
#ifdef BLOCKSCALE_HAVE_CUDA
    Status s = gpu_quantize(t.view, rows, cols, base, a.rht, by_direction[0] ? &by_direction[0]->q : nullptr,
                            by_direction[1] ? &by_direction[1]->q : nullptr);
    if (!s) return Status::error(t.name + ": " + s.message());
#endif
  } else {
    std::vector<float> x;
    BS_RETURN_IF_ERROR(io::to_float(t.view, &x));
    for (auto& e : made) {
      formats::QuantizeOptions o = base;
      o.hadamard = e->hadamard;
      Status s = formats::quantize(x.data(), rows, cols, cols, o, e->direction, &e->q);
      if (!s) return Status::error(t.name + ": " + s.message());
    }
  }
  for (auto& e : made) entries->push_back(std::move(e));
  return Status::ok();
}

// --device gpu with a recipe that has no GPU kernel: bad usage, in every build.
Status check_device_recipe(const QuantizeArgs& a) {
  if (a.device == "gpu" && (a.recipe == "mxfp6_e2m3" || a.recipe == "mxfp6_e3m2"))
    return Status::error("--device gpu: " + a.recipe + " is a study format with no GPU kernel (use --device cpu)");
  return Status::ok();
}

// --device gpu where this build or machine cannot run it: a failure, not bad usage.
Status check_device_available(const QuantizeArgs& a) {
  if (a.device != "gpu") return Status::ok();
#ifdef BLOCKSCALE_HAVE_CUDA
  return gpu_available();
#else
  return Status::error("--device gpu: this build has no CUDA parts (configure with -DBLOCKSCALE_CUDA=ON)");
#endif
}

void run_quantize(const QuantizeArgs& a, bool sr) {
  formats::QuantizeOptions base;
  check_usage("quantize", make_options(a, sr, &base));
  check_usage("quantize", check_device_recipe(a));
  check("quantize", check_device_available(a));
  io::InputFile in;
  check("quantize", io::InputFile::open(a.in, "--in", &in));
  // Which tensors are skipped, and why, before any work: a file with nothing to quantize is one
  // error naming the first of them, not a warning per tensor and then the error.
  const size_t n = in.tensors().size();
  std::vector<std::string> skipped;
  std::vector<std::string> why(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t rows = 0, cols = 0;
    if (Status s = io::matrix_of(in.tensors()[i], &rows, &cols); !s) {
      skipped.push_back(in.tensors()[i].name);
      why[i] = s.message();
    }
  }
  if (n == 0) fail("quantize", "--in '" + a.in + "': the file holds no tensor to quantize");
  if (skipped.size() == n) {
    const std::string others = n > 1 ? " (and " + std::to_string(n - 1) + " other tensors)" : "";
    fail("quantize", "--in '" + a.in + "': no floating-point tensor to quantize: '" + skipped[0] + "': " + why[0] +
                         others);
  }
  std::vector<std::unique_ptr<io::QuantizedTensor>> entries;
  for (size_t i = 0; i < n; ++i) {
    const io::InputTensor& t = in.tensors()[i];
    if (!why[i].empty()) {
      std::fprintf(stderr, "blockscale quantize: skipping %s: %s\n", io::detail::printable(t.name).c_str(),
                   why[i].c_str());
      continue;
    }
    int64_t rows = 0, cols = 0;
    io::matrix_of(t, &rows, &cols);  // checked above
    if (!a.quiet) std::fprintf(stderr, "[%zu/%zu] %s %lldx%lld\n", i + 1, n, t.name.c_str(),
                               static_cast<long long>(rows), static_cast<long long>(cols));
    check("quantize", quantize_tensor(t, a, base, &entries));
  }

  std::vector<std::pair<std::string, io::TensorView>> tensors;
  std::map<std::string, std::string> metadata;
  for (const auto& e : entries) check("quantize", io::add_quantized_tensor(*e, &tensors, &metadata));
  check("quantize", io::write_safetensors(a.out, tensors, metadata));

  nlohmann::json report = {{"in", a.in}, {"out", a.out}, {"recipe", a.recipe}, {"device", a.device}, {"skipped", skipped}};
  for (const auto& e : entries) {
    report["tensors"].push_back({{"name", e->name},
                                 {"shape", e->shape},
                                 {"direction", e->direction == formats::Direction::kRowwise ? "rowwise" : "columnwise"},
                                 {"stored", {e->q.rows, e->q.cols}},
                                 {"bytes", e->q.data.size() + e->q.scales.size() + 4 * e->q.scales_f32.size()},
                                 {"nonfinite_seen", e->q.nonfinite_seen}});
  }
  if (a.json) {
    std::printf("%s\n", report.dump(2).c_str());
    return;
  }
  std::printf("%-40s %-11s %-16s %12s %s\n", "tensor", "direction", "stored", "bytes", "");
  for (const auto& t : report["tensors"]) {
    const std::string stored = std::to_string(t["stored"][0].get<int64_t>()) + "x" +
                               std::to_string(t["stored"][1].get<int64_t>());
    std::printf("%-40s %-11s %-16s %12llu %s\n", t["name"].get<std::string>().c_str(),
                t["direction"].get<std::string>().c_str(), stored.c_str(),
                static_cast<unsigned long long>(t["bytes"].get<uint64_t>()),
                t["nonfinite_seen"].get<bool>() ? "(NaN/Inf in input)" : "");
  }
  std::printf("wrote %s (%s, %zu entries)\n", a.out.c_str(), a.recipe.c_str(), entries.size());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize the tensors of a .npy/.safetensors file with one recipe");
  cmd->footer(
      "Quantizes every floating-point tensor of a .npy or .safetensors file with one recipe, exactly as the\n"
      "GPU kernels do, into a .safetensors file in blockscale's quantized-tensor schema\n"
      "(docs/file-format.md). Tensors of rank != 2 use the 2D view [prod(shape[:-1]), shape[-1]];\n"
      "scalars, empty and integer tensors are skipped with a warning. The output is written to a\n"
      "temporary file and renamed at the end: an error never leaves a partial file.\n"
      "Exit codes: 0 done, 1 failed (nothing written), 2 bad usage.");
  cmd->add_option("--recipe", a->recipe, "mxfp8, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4, fp8_block128, fp8_block128x128")
      ->required()->check(recipe_validator())->type_name("RECIPE");
  cmd->add_option("--rounding", a->rounding, "MX scale rounding (default ceil)")
      ->check(CLI::IsMember({"ceil", "floor"}));
  cmd->add_option("--direction", a->direction,
                  "rowwise (blocks along the last dimension), columnwise (blocks along rows, stored\n"
                  "transposed) or both (the columnwise copy is entry NAME.columnwise); default rowwise")
      ->check(CLI::IsMember({"rowwise", "columnwise", "both"}));
  CLI::Option* sr = cmd->add_option("--sr-seed", a->sr_seed, "nvfp4: stochastic rounding with this Philox seed")
                        ->check(seed_validator());
  cmd->add_flag("--rht", a->rht, "nvfp4: 16-point random Hadamard transform on the columnwise copy");
  cmd->add_flag("--2d", a->nvfp4_2d, "nvfp4: one scale per 16x16 tile (weights)");
  cmd->add_flag("--pow2", a->pow2, "fp8_block*: power-of-two scales");
  cmd->add_option("--in", a->in, "input .npy (one tensor, named \"x\") or .safetensors")
      ->required()
      ->check(extension_validator({".npy", ".safetensors"}))
      ->type_name("FILE");
  cmd->add_option("--out", a->out, "output .safetensors")
      ->required()
      ->check(extension_validator({".safetensors"}))
      ->type_name("FILE");
  cmd->add_option("--device", a->device,
                  "cpu (formats/, the emulator; default) or gpu (quant/'s kernels: every recipe but mxfp6);\n"
                  "both write the same bytes")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  cmd->add_flag("--json", a->json, "print the summary as JSON instead of a table");
  cmd->add_flag("--quiet", a->quiet, "no progress on stderr");
  cmd->callback([a, sr] { run_quantize(*a, sr->count() > 0); });
}

}  // namespace blockscale::tools
