#include "client/load_cli.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/units.h"

namespace blockread::client {
namespace {

absl::StatusOr<double> ParseSeconds(const std::string& text, const std::string& option) {
  std::string number = text;
  double scale = 1;
  if (!number.empty() && (number.back() == 's' || number.back() == 'S')) number.pop_back();
  if (!number.empty() && (number.back() == 'm' || number.back() == 'M')) {
    number.pop_back();
    scale = 60;
  }
  try {
    size_t used = 0;
    const double value = std::stod(number, &used);
    if (used != number.size() || value < 0) throw std::invalid_argument(text);
    return value * scale;
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": '", text, "' is not a duration (e.g. 10, 10s, 2m)"));
  }
}

}  // namespace

void LoadCommandLine::AddTo(CLI::App* command) {
  LoadOptions* o = &options;
  LoadCommandLine& raw = *this;
  command
      ->add_option("--target", o->targets,
                   "Server(s): host:port, dns:///name:port (every address) or @FILE; "
                   "comma-separated or repeated. Reads go to servers that hold their file and "
                   "fail over to another on UNAVAILABLE")
      ->delimiter(',');
  command->add_option("--file", o->files, "File(s) to read; default: every file listed")
      ->delimiter(',');
  command->add_option("--rw", raw.rw, "randread or read (sequential)")->capture_default_str();
  command->add_option("--bs", raw.bs, "Read size, units allowed (4k, 128k, 1m)")
      ->capture_default_str();
  command->add_option("--qd", o->queue_depth, "Reads in flight per thread (fio's iodepth)")
      ->capture_default_str();
  command->add_option("--threads", o->threads, "Load threads")->capture_default_str();
  command->add_option("--channels", o->channels,
                      "gRPC channels (connections) in all; default: one per thread");
  command->add_option("--mode", raw.mode, "unary (ReadBlock) or stream (ReadBlocks)")
      ->capture_default_str();
  command->add_option("--streams", o->streams,
                      "Streams per thread, --qd split over them (stream mode); default: derived "
                      "from --qd and --bs");
  command->add_option(
      "--batch", o->batch,
      "Reads per stream message (stream mode); default: derived from --qd and --bs");
  command->add_option("--runtime", raw.runtime, "Measured time (10, 10s, 2m)")
      ->capture_default_str();
  command->add_option("--number", o->number, "Stop after this many counted reads instead");
  command->add_option("--ramp", raw.ramp, "Warm-up time, not counted")->capture_default_str();
  command->add_option("--rate", o->rate, "Total IOPS cap (0: none), as fio's rate_iops");
  command->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  command->add_flag("--verify", o->verify,
                    "Check every byte: against --verify-file, else the server's CRC32C");
  command->add_option("--verify-file", o->verify_file, "Local copy of the (single) --file");
  command->add_option("--hedge-after", raw.hedge_after,
                      "Unary mode: also send a read to a second replica once it has waited past "
                      "this percentile of its server's recent latencies (or all servers', if "
                      "lower), e.g. p95; the first answer wins (default: off)");
  command
      ->add_option("--hedge-max-share", o->hedge_max_share, "Hedge at most this share of the reads")
      ->capture_default_str();
  command->add_option("--output", raw.output, "text or json")->capture_default_str();
  command->add_option("--report", raw.report,
                      "Also write the run as a self-contained HTML page (charts) to this file");
}

absl::Status LoadCommandLine::Finish() {
  LoadOptions* o = &options;
  LoadCommandLine& raw = *this;
  if (raw.rw != "randread" && raw.rw != "read") {
    return absl::InvalidArgumentError(absl::StrCat("--rw: '", raw.rw, "' (randread or read)"));
  }
  o->sequential = raw.rw == "read";
  if (raw.mode != "unary" && raw.mode != "stream") {
    return absl::InvalidArgumentError(absl::StrCat("--mode: '", raw.mode, "' (unary or stream)"));
  }
  o->stream = raw.mode == "stream";
  auto bs = ParseByteCount(raw.bs);
  if (!bs.ok()) return absl::InvalidArgumentError(absl::StrCat("--bs: ", bs.status().message()));
  o->block_size = *bs;
  auto runtime = ParseSeconds(raw.runtime, "--runtime");
  if (!runtime.ok()) return runtime.status();
  o->runtime_s = *runtime;
  auto ramp = ParseSeconds(raw.ramp, "--ramp");
  if (!ramp.ok()) return ramp.status();
  o->ramp_s = *ramp;
  if (raw.output != "text" && raw.output != "json") {
    return absl::InvalidArgumentError(absl::StrCat("--output: '", raw.output, "' (text or json)"));
  }
  o->json = raw.output == "json";
  if (!raw.hedge_after.empty()) {
    const std::string& text = raw.hedge_after;
    try {
      size_t used = 0;
      if (text.size() < 2 || (text[0] != 'p' && text[0] != 'P')) throw std::invalid_argument(text);
      o->hedge_after_percentile = std::stod(text.substr(1), &used);
      if (used != text.size() - 1) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hedge-after: '", text, "' is not a percentile such as p95"));
    }
  }
  return ValidateLoadOptions(*o);
}

absl::StatusOr<LoadOptions> ParseLoadArguments(const std::vector<std::string>& args) {
  LoadCommandLine line;
  CLI::App command{"load"};
  line.AddTo(&command);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    command.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (absl::Status s = line.Finish(); !s.ok()) return s;
  return line.options;
}

}  // namespace blockread::client
