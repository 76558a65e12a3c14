// The `blockscale` command line. Subcommands: study (more arrive with quant/, gemm/, train/).
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/study.h"

namespace {

using blockscale::formats::QuantizeOptions;
using blockscale::formats::Recipe;

int usage(FILE* f) {
  std::fprintf(f,
               "usage: blockscale <command> [options]\n"
               "commands:\n"
               "  study [--seed N]   quantization error of every recipe on the built-in synthetic tensors\n");
  return f == stdout ? 0 : 2;
}

int run_study(int argc, char** argv) {
  uint64_t seed = 1;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--help") == 0) {
      return usage(stdout);
    } else {
      std::fprintf(stderr, "blockscale study: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const auto tensors = blockscale::tools::synthetic_tensors(seed);
  std::printf("blockscale study: %zu synthetic tensors of %lldx%lld (seed %llu), rowwise blocks\n\n",
              tensors.size(), static_cast<long long>(tensors[0].rows),
              static_cast<long long>(tensors[0].cols), static_cast<unsigned long long>(seed));
  std::printf("%-18s %-18s %9s %11s %11s %9s %9s\n", "tensor", "recipe", "SQNR dB", "rel err",
              "max |err|", "flushed", "saturated");
  for (const auto& t : tensors) {
    for (Recipe r : blockscale::formats::all_recipes()) {
      for (bool floor_rounding : {false, true}) {
        if (floor_rounding && !blockscale::formats::is_mx(r)) continue;
        QuantizeOptions o;
        o.recipe = r;
        if (floor_rounding) o.rounding = blockscale::formats::ScaleRounding::kFloor;
        blockscale::tools::RecipeError e;
        const auto st = blockscale::tools::measure_recipe_error(t, o, &e);
        if (!st) {
          std::fprintf(stderr, "blockscale study: %s\n", st.message().c_str());
          return 1;
        }
        const std::string name = std::string(blockscale::formats::recipe_name(r)) +
                                 (floor_rounding ? " (floor)" : "");
        std::printf("%-18s %-18s %9.2f %11.3e %11.3e %8.3f%% %8.3f%%\n", t.name.c_str(),
                    name.c_str(), e.sqnr_db, e.rel_fro_error, e.max_abs_error,
                    100 * e.flushed_to_zero, 100 * e.saturated);
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  if (cmd == "study") return run_study(argc - 2, argv + 2);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
  std::fprintf(stderr, "blockscale: unknown command '%s'\n", cmd.c_str());
  return usage(stderr);
}
