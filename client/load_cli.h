// The `blockread load` command line: options in fio's spirit, parsed with CLI11.
#ifndef BLOCKREAD_CLIENT_LOAD_CLI_H_
#define BLOCKREAD_CLIENT_LOAD_CLI_H_

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/load.h"

namespace blockread::client {

// The options and the raw text of those that take words or units. Usage: AddTo() a CLI11
// (sub)command, parse, then Finish() to convert and validate. Must outlive the parse.
struct LoadCommandLine {
  LoadOptions options;
  std::string rw = "randread";
  std::string bs = "4k";
  std::string mode = "unary";
  std::string runtime = "10";
  std::string ramp = "0";
  std::string output = "text";
  std::string report;       // --report=FILE.html: also write the run as an HTML page there
  std::string hedge_after;  // --hedge-after=p95

  void AddTo(CLI::App* command);
  // Units, --rw/--mode/--output words, then ValidateLoadOptions; errors name the option.
  absl::Status Finish();
};

// Parses `args` (the words after `load`) into options: what the tests use.
absl::StatusOr<LoadOptions> ParseLoadArguments(const std::vector<std::string>& args);

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_LOAD_CLI_H_
