// What every `blockscale` subcommand shares: how it registers itself on the CLI11 app, how it
// reports a failure, and the option spellings used across subcommands.
//
// Exit codes (docs/cli.md): 0 done; 1 the command failed (a bad or missing input file, I/O, a
// run that diverged, a GPU or build that cannot run it); 2 bad usage (an unknown or missing
// option, a value out of range or not finite, options that exclude each other), found before any
// work. An error is one line on stderr, "blockscale <command>: <message>", naming the option or
// file and the rule; results go to stdout; progress goes to stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::tools {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Thrown by a subcommand's callback after it printed its error; main() returns exit_code.
struct CommandFailed {
  int exit_code = kExitFailed;
};

// Print "blockscale <command>: <message>" (one line) to stderr and throw CommandFailed: fail()
// for a failure (exit 1), usage_error() for bad usage (exit 2).
[[noreturn]] void fail(const std::string& command, const std::string& message);
[[noreturn]] void usage_error(const std::string& command, const std::string& message);
inline void check(const std::string& command, const Status& s) {
  if (!s) fail(command, s.message());
}
inline void check_usage(const std::string& command, const Status& s) {
  if (!s) usage_error(command, s.message());
}

// Each registers one subcommand (options and a callback that runs it).
void add_quantize_command(CLI::App& app);
void add_dequantize_command(CLI::App& app);
void add_study_command(CLI::App& app);
void add_gemm_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_version_command(CLI::App& app);

// --recipe values: formats::format_name() spellings, checked by parse_format().
CLI::Validator recipe_validator();
// --seed / --sr-seed values: 0 .. 2^64 - 1 in decimal digits (no sign, no wrap-around).
CLI::Validator seed_validator();
// File options whose name must end in one of `extensions` (e.g. {".npy", ".safetensors"}).
CLI::Validator extension_validator(const std::vector<std::string>& extensions);
// Floating-point options that must be finite (CLI11 reads "nan" and "inf" as numbers).
CLI::Validator finite_validator();

// The version of the project (CMake's project(VERSION)), as `blockscale --version` prints it.
const char* version();

}  // namespace blockscale::tools
