// What every `blockscale` subcommand shares: how it registers itself on the CLI11 app, how it
// reports a failure, and the option spellings used across subcommands.
//
// Exit codes: 0 success, 1 the command failed (bad input file, I/O error, a formats/ error),
// 2 bad usage (unknown or missing option, invalid value). Errors are one line on stderr,
// "blockscale <command>: <message>"; results go to stdout; progress goes to stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "formats/recipe.h"
#include "formats/status.h"

namespace blockscale::tools {

// Thrown by a subcommand's callback after it printed its error; main() maps it to exit code 1.
struct CommandFailed {};

// Prints "blockscale <command>: <message>" to stderr and throws CommandFailed.
[[noreturn]] void fail(const std::string& command, const std::string& message);
inline void check(const std::string& command, const Status& s) {
  if (!s) fail(command, s.message());
}

// Each registers one subcommand (options and a callback that runs it).
void add_quantize_command(CLI::App& app);
void add_dequantize_command(CLI::App& app);
void add_study_command(CLI::App& app);
void add_gemm_command(CLI::App& app);
void add_train_command(CLI::App& app);

// --recipe values: formats::recipe_name() spellings, checked by parse_recipe().
CLI::Validator recipe_validator();
// --seed / --sr-seed values: 0 .. 2^64 - 1 in decimal digits (no sign, no wrap-around).
CLI::Validator seed_validator();

}  // namespace blockscale::tools
