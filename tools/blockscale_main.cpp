// The `blockscale` command line: a table of contents of its subcommands.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "tools/cli.h"  // defines: the subcommands' registration, fail(), CommandFailed

namespace blockscale::tools {

void fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "blockscale %s: %s\n", command.c_str(), message.c_str());
  throw CommandFailed{};
}

CLI::Validator recipe_validator() {
  std::string names;
  for (formats::Recipe r : formats::all_recipes()) names += std::string(names.empty() ? "" : ", ") + formats::recipe_name(r);
  return CLI::Validator(
      [names](std::string& value) -> std::string {
        formats::Recipe r;
        return formats::parse_recipe(value, &r) ? "" : "unknown recipe '" + value + "' (one of: " + names + ")";
      },
      "", "recipe");
}

CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        // Unsigned 64-bit, decimal: a sign or a value past 2^64 - 1 would otherwise wrap into
        // another seed silently.
        const bool digits = !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        if (digits) std::strtoull(value.c_str(), nullptr, 10);
        return digits && errno == 0 ? "" : "'" + value + "' is not a seed (a whole number from 0 to 2^64 - 1)";
      },
      "", "seed");
}

}  // namespace blockscale::tools

int main(int argc, char** argv) {
  namespace t = blockscale::tools;
  CLI::App app{"blockscale: block-scaled low-precision formats (MXFP8, MXFP4, NVFP4, FP8 blockwise)"};
  app.name("blockscale");
  app.require_subcommand(1);
  t::add_quantize_command(app);    // quantize tensors of a .npy/.safetensors file
  t::add_dequantize_command(app);  // the exact inverse
  t::add_study_command(app);       // accuracy of every recipe on real or synthetic tensors
  t::add_gemm_command(app);        // one GPU GEMM of gemm/ on random operands, timed and checked
  t::add_train_command(app);       // the MoE transformer of train/ in a precision recipe
  // CLI11 would call an unknown word a missing subcommand; name it instead.
  std::string names;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "blockscale: unknown command '%s' (commands: %s)\nRun 'blockscale --help' for usage.\n",
                 argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    std::fprintf(stderr, "blockscale%s%s: %s\nRun 'blockscale%s%s --help' for usage.\n",
                 sub ? " " : "", sub ? sub->get_name().c_str() : "", e.what(),
                 sub ? " " : "", sub ? sub->get_name().c_str() : "");
    return 2;
  } catch (const t::CommandFailed&) {
    return 1;
  }
  return 0;
}
