// `blockscale study`: the accuracy of every recipe on the tensors of .npy/.safetensors files or
// on the built-in synthetic suite, as a table (or JSON) on stdout plus CSV, JSON and SVG files.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/io/tensor_view.h"  // defines: detail::printable
#include "tools/cli.h"           // defines: fail, check, recipe_validator
#include "study/study.h"         // defines: the engine (inputs, configs, run_study)
#include "study/study_report.h"  // defines: format_table, format_json, write_reports

namespace blockscale::tools {
namespace {

struct StudyArgs {
  std::vector<std::string> inputs;
  std::vector<std::string> recipes;
  std::string rounding = "both";
  std::vector<std::string> gemms;
  int64_t hidden = 2048;
  uint64_t seed = 1;
  std::string out_dir;
  bool json = false;
  bool quiet = false;
  int threads = 0;
};

constexpr const char* kFooter = R"(
Without --in, the built-in suite: one transformer layer of hidden size H (--hidden) with Gaussian
weights (attn.qkv.weight, mlp.up.weight), activations with outlier channels (mlp.input),
heavy-tailed Student-t(3) activations (attn.output) and small gradients whose rows span six
decades (mlp.down.grad), plus the GEMM pair mlp.input:mlp.up.weight.

Tensors are quantized rowwise (blocks along the last dimension); a tensor of rank > 2 is studied as
[prod(shape[:-1]), shape[-1]], rank 1 as [1, n]. Columns of the table, per tensor and recipe:
  SQNR dB      10 log10(sum x^2 / sum (x - deq)^2); inf: the quantization is exact
  rel err      ||x - deq||_F / ||x||_F
  max abs      max |x - deq|;  max rel: max |x - deq| / |x| over nonzero x
  sat %        elements clipped to the largest element code
  flush %      nonzero inputs that dequantize to 0 (relative error 1), of the nonzero inputs
  scale@min %  blocks with a nonzero value whose scale code is the scale format's smallest:
               E8M0 0x00 (2^-127) for MX; UE4M3 0x00 or 0x01 (0 or 2^-9) for nvfp4
  scale@max %  ... or its largest: E8M0 0xFE (2^127; finite fp32 inputs never need it);
               UE4M3 0x7E (448, where nvfp4's tensor scale puts the block holding the amax)
               "-": FP8 blockwise scales are fp32, with no such limit
NaN and Inf inputs are counted and left out of every metric together with the finite values of
their blocks (which dequantize to NaN); a note under the table says so.
GEMM (--gemm A:B): the error of deq(A) deq(B)^T against A B^T, both in fp64, with both operands
quantized rowwise (blocks along K) in the same recipe. GEMM operands are loaded whole.
Memory: tensors are read in chunks of about 1M elements per worker thread from memory-mapped
safetensors files; .npy files are read whole.
Exit status: 0 success, 1 failure (bad file, I/O error), 2 bad usage.)";

// "A:B" -> the split whose both halves name a tensor (names may hold ':' themselves).
std::pair<std::string, std::string> split_pair(const std::string& arg,
                                               const std::vector<study::StudyInput>& inputs) {
  auto known = [&](const std::string& n) {
    return std::any_of(inputs.begin(), inputs.end(), [&](const study::StudyInput& in) { return in.name == n; });
  };
  size_t last = std::string::npos;
  for (size_t i = arg.find(':'); i != std::string::npos; i = arg.find(':', i + 1)) {
    last = i;
    if (known(arg.substr(0, i)) && known(arg.substr(i + 1))) return {arg.substr(0, i), arg.substr(i + 1)};
  }
  if (last == std::string::npos) usage_error("study", "--gemm '" + arg + "': expected A:B, two tensor names");
  return {arg.substr(0, last), arg.substr(last + 1)};  // run_study names the unknown one
}

void run(const StudyArgs& args) {
  std::vector<formats::Format> recipes;
  for (const std::string& name : args.recipes) {
    formats::Format r;
    if (!formats::parse_format(name, &r)) usage_error("study", "--recipes: unknown recipe '" + name + "'");
    recipes.push_back(r);
  }
  if (recipes.empty()) recipes = formats::all_formats();
  const formats::ScaleRounding mx = args.rounding == "ceil"    ? formats::ScaleRounding::kCeil
                                    : args.rounding == "floor" ? formats::ScaleRounding::kFloor
                                                               : formats::ScaleRounding::kBoth;
  study::StudyOptions options;
  options.configs = study::study_configs(recipes, mx);
  options.threads = args.threads;
  options.progress = args.quiet ? nullptr : stderr;

  std::vector<study::StudyInput> inputs;
  std::vector<study::Skipped> skipped;
  study::StudyProvenance provenance;
  if (args.inputs.empty()) {
    check_usage("study", study::synthetic_suite(args.hidden, args.seed, &inputs));  // fails on --hidden only
    if (args.gemms.empty()) options.gemms = study::synthetic_gemms();
    provenance.hidden = args.hidden;
    provenance.seed = args.seed;
  } else {
    check("study", study::open_study_files(args.inputs, "--in", &inputs, &skipped));
    if (inputs.empty())  // one error naming the first skipped tensor, not a warning per tensor first
      fail("study", "--in: no floating-point tensor with a 2D view to study" +
                        (skipped.empty() ? std::string()
                                         : ": " + skipped[0].name + ": " + skipped[0].reason +
                                               (skipped.size() > 1 ? " (and " + std::to_string(skipped.size() - 1) +
                                                                         " other tensors)"
                                                                   : "")));
    for (const study::Skipped& s : skipped)
      std::fprintf(stderr, "blockscale study: skipping %s: %s\n", blockscale::io::detail::printable(s.name).c_str(), s.reason.c_str());
    provenance.inputs = args.inputs;
  }
  for (const std::string& g : args.gemms) options.gemms.push_back(split_pair(g, inputs));
  check("study", study::gemm_pairs(inputs, options.gemms, nullptr));

  if (!args.out_dir.empty()) {  // fail before the long part, not after it
    std::error_code ec;
    std::filesystem::create_directories(args.out_dir, ec);
    if (ec || !std::filesystem::is_directory(args.out_dir))
      fail("study", "--out-dir '" + args.out_dir + "': cannot create the directory" +
                        (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
  }
  study::StudyResult result;
  check("study", study::run_study(inputs, options, &result));
  for (const study::Skipped& s : result.skipped)  // GEMM pairs run_study left out
    std::fprintf(stderr, "blockscale study: skipping %s: %s\n", blockscale::io::detail::printable(s.name).c_str(), s.reason.c_str());
  result.skipped.insert(result.skipped.begin(), skipped.begin(), skipped.end());

  // Files first: a reader of stdout that stops early (| head) must not cost them.
  if (!args.out_dir.empty()) {
    std::vector<std::string> written;
    check("study", study::write_reports(result, provenance, args.out_dir, &written));
    if (!args.quiet) {
      std::string list;
      for (const std::string& w : written) list += (list.empty() ? "" : ", ") + w;
      std::fprintf(stderr, "blockscale study: wrote %s\n", list.c_str());
    }
  }
  const std::string text = args.json ? study::format_json(result, provenance) : study::format_table(result);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_study_command(CLI::App& app) {
  auto args = std::make_shared<StudyArgs>();
  CLI::App* sub = app.add_subcommand(
      "study", "Quantization error of every recipe on tensors of files or a synthetic layer");
  sub->footer(kFooter);
  CLI::Option* in = sub->add_option(
      "-i,--in", args->inputs,
      "Input file (repeatable): .npy, one tensor named x, or .safetensors, every float tensor "
      "(others are skipped with a warning). With 2+ files names become FILE_STEM/NAME")
      ->check(extension_validator({".npy", ".safetensors"}))
      ->type_name("FILE");
  std::string names;
  for (formats::Format r : formats::all_formats())
    names += std::string(names.empty() ? "" : ", ") + formats::format_name(r);
  sub->add_option("-r,--recipes", args->recipes,
                  "Recipes to study, comma-separated or repeated (default: all): " + names)
      ->delimiter(',')
      ->check(recipe_validator())
      ->type_name("LIST");
  sub->add_option("--rounding", args->rounding,
                  "MX scale rounding: ceil, floor (OCP MX v1.0; shown as RECIPE/floor) or both")
      ->check(CLI::IsMember({"ceil", "floor", "both"}))
      ->capture_default_str()
      ->type_name("MODE");
  sub->add_option("--gemm", args->gemms,
                  "GEMM pair (repeatable): tensors A [M, K] and B [N, K]; the block-scaled A B^T "
                  "against fp64. Replaces the suite's pair")
      ->type_name("A:B");
  sub->add_option("--hidden", args->hidden,
                  "Built-in suite: hidden size H, a multiple of 16; ffn = 2.75 H rounded to a "
                  "multiple of 256, tokens = H/2")
      ->check(CLI::Range(int64_t{16}, int64_t{65536}))
      ->capture_default_str()
      ->type_name("H")
      ->excludes(in);
  sub->add_option("--seed", args->seed, "Built-in suite: random seed")
      ->check(seed_validator())
      ->capture_default_str()
      ->type_name("N")
      ->excludes(in);
  sub->add_option("-o,--out-dir", args->out_dir,
                  "Write study.csv, study_gemm.csv, study.json and study.svg (a chart for a "
                  "browser) here, created if missing (default: no files)")
      ->type_name("DIR");
  sub->add_flag("--json", args->json, "Print the JSON document on stdout instead of the table");
  sub->add_flag("-q,--quiet", args->quiet, "No progress lines on stderr");
  sub->add_option("--threads", args->threads, "Worker threads, one recipe each; 0: all cores")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str()
      ->type_name("N");
  sub->callback([args] { run(*args); });
}

}  // namespace blockscale::tools
