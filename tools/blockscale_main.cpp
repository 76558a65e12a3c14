// The `blockscale` command line: a table of contents of its subcommands.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cli.h"  // defines: the subcommands' registration, fail(), usage_error(), CommandFailed

namespace blockscale::tools {

namespace {

// One line: a message that spans lines (a library's, CLI11's) has its line breaks made "; ".
[[noreturn]] void report(const std::string& command, const std::string& message, int exit_code) {
  std::string line;
  for (char ch : message) line += ch == '\n' ? std::string("; ") : std::string(1, ch);
  while (!line.empty() && (line.back() == ' ' || line.back() == ';')) line.pop_back();
  std::fprintf(stderr, "blockscale%s%s: %s\n", command.empty() ? "" : " ", command.c_str(), line.c_str());
  throw CommandFailed{exit_code};
}

}  // namespace

void fail(const std::string& command, const std::string& message) { report(command, message, kExitFailed); }
void usage_error(const std::string& command, const std::string& message) { report(command, message, kExitUsage); }

const char* version() { return BLOCKSCALE_VERSION; }

CLI::Validator recipe_validator() {
  std::string names;
  for (formats::Format r : formats::all_formats()) names += std::string(names.empty() ? "" : ", ") + formats::format_name(r);
  return CLI::Validator(
      [names](std::string& value) -> std::string {
        formats::Format r;
        return formats::parse_format(value, &r) ? "" : "unknown recipe '" + value + "' (one of: " + names + ")";
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

CLI::Validator extension_validator(const std::vector<std::string>& extensions) {
  std::string names;
  for (size_t i = 0; i < extensions.size(); ++i)
    names += (i == 0 ? "" : i + 1 == extensions.size() ? " or " : ", ") + extensions[i];
  return CLI::Validator(
      [extensions, names](std::string& value) -> std::string {
        for (const std::string& e : extensions)
          if (value.size() > e.size() && value.compare(value.size() - e.size(), e.size(), e) == 0) return "";
        return "'" + value + "': the file name must end in " + names;
      },
      "", "extension");
}

CLI::Validator finite_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        return end != value.c_str() && std::isfinite(v) ? "" : "'" + value + "' is not a finite number";
      },
      "", "finite");
}

void add_version_command(CLI::App& app) {
  app.add_subcommand("version", "Print the version of blockscale")->callback([] { std::printf("blockscale %s\n", version()); });
}

}  // namespace blockscale::tools

int main(int argc, char** argv) {
  namespace t = blockscale::tools;
  CLI::App app{"blockscale: block-scaled low-precision formats (MXFP8, MXFP4, NVFP4, FP8 blockwise)"};
  app.name("blockscale");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("blockscale ") + t::version());
  t::add_quantize_command(app);    // quantize tensors of a .npy/.safetensors file
  t::add_dequantize_command(app);  // the exact inverse
  t::add_study_command(app);       // accuracy of every recipe on real or synthetic tensors
  t::add_gemm_command(app);        // one GPU GEMM of gemm/ on random operands, timed and checked
  t::add_train_command(app);       // the MoE transformer of train/ in a precision recipe
  t::add_version_command(app);     // the project's version, as --version prints it
  try {
    // CLI11 would call an unknown word a missing subcommand; name it instead.
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || (argc > 1 && sub->get_name() == argv[1]);
    }
    if (argc < 2) t::usage_error("", "a command is required (commands: " + names + ")");
    if (argv[1][0] != '-' && !known)
      t::usage_error("", std::string("unknown command '") + argv[1] + "' (commands: " + names + ")");
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
      t::usage_error(sub ? sub->get_name() : "", e.what());
    }
  } catch (const t::CommandFailed& e) {
    return e.exit_code;
  }
  return 0;
}
