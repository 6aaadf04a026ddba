// blockread: the command-line client. Subcommands: read, stat, ls, stats, explain, health, load.
//
// Exit codes: 0 ok; 1 other error; 2 usage; 3 server unreachable (UNAVAILABLE, deadline);
// 4 not found (NOT_FOUND); 5 bad range or argument (OUT_OF_RANGE, INVALID_ARGUMENT);
// for `health`, 1 when the server answers but is not SERVING.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/blockread_client.h"
#include "client/cluster_client.h"
#include "client/load.h"
#include "client/load_cli.h"
#include "client/load_report.h"
#include "client/stats_view.h"
#include "client/units.h"
#include "proto/wire/crc32c.h"
#include "proto/wire/labels.h"
#include "proto/wire/process_tuning.h"

namespace blockread::client {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnavailable = 3;
constexpr int kExitNotFound = 4;
constexpr int kExitBadRange = 5;

// One line on stderr, and the exit code for the status.
int Fail(const absl::Status& status, const std::string& target) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      fprintf(stderr, "blockread: cannot reach the server at %s: %s\n", target.c_str(),
              std::string(status.message()).c_str());
      return kExitUnavailable;
    case absl::StatusCode::kNotFound:
      fprintf(stderr, "blockread: not found: %s\n", std::string(status.message()).c_str());
      return kExitNotFound;
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kInvalidArgument:
      fprintf(stderr, "blockread: bad request: %s\n", std::string(status.message()).c_str());
      return kExitBadRange;
    default:
      fprintf(stderr, "blockread: %s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
              std::string(status.message()).c_str());
      return kExitError;
  }
}

// CLI11 validator for byte counts with units.
struct ByteCountValidator : CLI::Validator {
  ByteCountValidator() {
    name_ = "BYTES";
    func_ = [](std::string& text) {
      auto value = ParseByteCount(text);
      if (!value.ok()) return std::string(value.status().message());
      text = std::to_string(*value);
      return std::string();
    };
  }
};

// argv as a shell would take it back: words with anything but [A-Za-z0-9_./=:,+-] single-quoted.
std::string QuotedCommandLine(int argc, char** argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    std::string word = argv[i];
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                            "0123456789_./=:,+-") == std::string::npos;
    if (!plain) word = absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
    words.push_back(std::move(word));
  }
  return absl::StrJoin(words, " ");
}

std::string SourceName(v1::FileSource source) {
  std::string name = v1::FileSource_Name(source);
  for (char& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return name;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "blockread: read files from a blockread server, and look at how it serves them.\n"
      "Exit codes: 0 ok, 1 error, 2 usage, 3 server unreachable, 4 not found, 5 bad range."};
  app.require_subcommand(1);
  app.fallthrough();  // --target and --timeout-ms also after the subcommand
  std::string target = "127.0.0.1:7420";
  int timeout_ms = 10000;
  app.add_option("--target", target,
                 "Server address host:port; several servers: a comma-separated list, "
                 "dns:///name:port (every address the name resolves to) or @FILE (the addresses "
                 "in FILE). read, stat and ls then see one namespace: each read goes to a server "
                 "holding its file, and fails over to another on UNAVAILABLE")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "Deadline of each call")->capture_default_str();
  TransportSecurity security;
  app.add_option("--ca", security.ca,
                 "PEM CA bundle that signed the server's certificate: connect over TLS");
  app.add_option("--cert", security.cert,
                 "PEM client certificate, for servers that require one (with --key)");
  app.add_option("--key", security.key, "PEM private key of --cert");
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "File holding the access token for servers with --auth (default: the "
                 "BLOCKREAD_TOKEN environment variable)");
  app.add_option("--tls-server-name", security.server_name,
                 "Verify the server's certificate against this name instead of the target's host");
  const ByteCountValidator bytes;

  std::string file, output;
  uint64_t offset = 0, length = 0;
  bool want_crc = false, json = false;

  CLI::App* read = app.add_subcommand("read", "Read LENGTH bytes at OFFSET of FILE");
  read->add_option("file", file, "File name (see `blockread ls`)")->required();
  read->add_option("offset", offset, "Byte offset (units allowed: 4k, 1m)")
      ->required()
      ->transform(bytes);
  read->add_option("length", length, "Bytes to read (units allowed)")->required()->transform(bytes);
  read->add_option("-o,--output", output, "Write the bytes here (default: stdout)");
  read->add_flag("--crc32c", want_crc, "Ask the server for the CRC32C and check it");

  CLI::App* stat = app.add_subcommand("stat", "Size, block size, extents and source of FILE");
  stat->add_option("file", file, "File name")->required();

  CLI::App* ls = app.add_subcommand("ls", "List the files the server serves");
  std::string ls_prefix;
  ls->add_option("prefix", ls_prefix,
                 "Only names that start with this (\"ds/v/\" for what a directory holds)");
  ls->add_flag("--json", json, "Print JSON");

  CLI::App* stats = app.add_subcommand("stats", "Per-path statistics of the server");
  stats->add_flag("--json", json, "Print JSON (with --watch: one object per line)");
  double watch_s = 0;
  int watch_count = 0;
  stats
      ->add_option("--watch", watch_s,
                   "Refresh every N seconds (N may be fractional), with IOPS, MiB/s and "
                   "percentiles over each interval; Ctrl-C stops")
      ->check(CLI::PositiveNumber);
  stats->add_option("--count", watch_count, "With --watch: stop after this many refreshes")
      ->check(CLI::PositiveNumber);

  CLI::App* explain = app.add_subcommand(
      "explain", "Which extents cover a range, and which path a read of it takes, and why");
  explain->add_option("file", file, "File name")->required();
  explain->add_option("offset", offset, "Byte offset")->required()->transform(bytes);
  explain->add_option("length", length, "Bytes")->required()->transform(bytes);

  CLI::App* health =
      app.add_subcommand("health", "Is the server SERVING? (exit 0 if so, 1 if not)");

  LoadCommandLine load_line;
  CLI::App* load = app.add_subcommand(
      "load", "Load-test servers, fio-like: IOPS, bandwidth, latency, server path counts");
  load_line.AddTo(load);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  ClientOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.server_name = security.server_name;
  if (auto token = LoadToken(token_file); token.ok()) {
    options.token = *std::move(token);
  } else {
    fprintf(stderr, "blockread: %s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  if (auto credentials = ChannelCredentialsFor(security); credentials.ok()) {
    options.credentials = *std::move(credentials);
  } else {
    fprintf(stderr, "blockread: %s\n", std::string(credentials.status().message()).c_str());
    return kExitUsage;
  }

  if (*load) {
    load_line.options.connection = options;
    // `--target` given after `load` is the load's own (repeatable); before it, the global one.
    if (load_line.options.targets.empty() || load->count("--target") == 0) {
      load_line.options.targets = {target};
    }
    if (absl::Status valid = load_line.Finish(); !valid.ok()) {
      fprintf(stderr, "blockread load: %s\n", std::string(valid.message()).c_str());
      return kExitUsage;
    }
    auto result = RunLoad(load_line.options);
    if (!result.ok()) return Fail(result.status(), absl::StrJoin(load_line.options.targets, ","));
    const std::string report = load_line.options.json ? LoadResultJson(load_line.options, *result)
                                                      : LoadResultText(load_line.options, *result);
    printf("%s\n", report.c_str());
    if (!load_line.report.empty()) {
      std::ofstream page(load_line.report, std::ios::binary | std::ios::trunc);
      page << LoadReportHtml(load_line.options, *result, QuotedCommandLine(argc, argv));
      page.close();
      if (!page) {
        fprintf(stderr, "blockread load: cannot write the report to %s\n",
                load_line.report.c_str());
        return kExitError;
      }
    }
    if (!result->verify_failure.empty()) {
      fprintf(stderr, "blockread load: %s\n", result->verify_failure.c_str());
      return kExitError;
    }
    return 0;
  }

  ClusterOptions cluster_options;
  cluster_options.connection = options;
  auto cluster = ClusterClient::Connect(target, cluster_options);
  if (!cluster.ok()) return Fail(cluster.status(), target);
  // Calls about one server (stats, explain, health) go to the first.
  const std::shared_ptr<BlockReadClient> client = (*cluster)->first();

  if (*read) {
    ReadCallOptions call;
    call.want_crc32c = want_crc;
    auto response = (*cluster)->Read(file, offset, length, call);
    if (!response.ok()) return Fail(response.status(), target);
    if (want_crc) {
      const uint32_t crc = wire::Crc32c(response->data().data(), response->data().size());
      if (!response->has_crc32c() || response->crc32c() != crc) {
        fprintf(stderr, "blockread: CRC32C mismatch: server %08x, received data %08x\n",
                response->crc32c(), crc);
        return kExitError;
      }
    }
    if (output.empty()) {
      fwrite(response->data().data(), 1, response->data().size(), stdout);
      fflush(stdout);
    } else {
      std::ofstream out(output, std::ios::binary);
      out.write(response->data().data(), static_cast<std::streamsize>(response->data().size()));
      if (!out) {
        fprintf(stderr, "blockread: cannot write %s\n", output.c_str());
        return kExitError;
      }
    }
    fprintf(stderr, "read %zu bytes via the %s path (server %.1f us: queue %.1f, device %.1f)%s\n",
            response->data().size(), wire::PathLabel(response->path()),
            response->timing().total_ns() / 1e3, response->timing().queue_ns() / 1e3,
            response->timing().device_ns() / 1e3,
            response->fallback() != v1::FALLBACK_NONE
                ? absl::StrCat(" fallback ", wire::FallbackLabel(response->fallback())).c_str()
                : "");
    return 0;
  }
  if (*stat) {
    auto info = (*cluster)->Stat(file);
    if (!info.ok()) return Fail(info.status(), target);
    printf(
        "name:        %s\nsize:        %lu\nblock size:  %u\nextents:     %lu\nsource:      "
        "%s\ndevices:    ",
        info->name().c_str(), info->size(), info->block_size(), info->extent_count(),
        SourceName(info->source()).c_str());
    for (const std::string& d : info->devices()) printf(" %s", d.c_str());
    printf("\n");
    if (!info->version().empty()) printf("version:     %s\n", info->version().c_str());
    if (!info->route_note().empty()) printf("why:         %s\n", info->route_note().c_str());
    return 0;
  }
  if (*ls) {
    auto files = (*cluster)->List(ls_prefix);
    if (!files.ok()) return Fail(files.status(), target);
    const bool several = (*cluster)->servers().size() > 1;
    if (json) {
      nlohmann::json out = nlohmann::json::array();
      for (const ClusterClient::ListedFile& listed : *files) {
        const v1::FileInfo& f = listed.info;
        out.push_back({{"name", f.name()},
                       {"size", f.size()},
                       {"block_size", f.block_size()},
                       {"extents", f.extent_count()},
                       {"source", SourceName(f.source())},
                       {"version", f.version()},
                       {"servers", listed.servers}});
      }
      printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    printf("%-40s %14s %8s %-12s%s\n", "name", "size", "extents", "source",
           several ? " servers" : "");
    for (const ClusterClient::ListedFile& listed : *files) {
      const v1::FileInfo& f = listed.info;
      printf("%-40s %14lu %8lu %-12s%s\n", f.name().c_str(), f.size(), f.extent_count(),
             SourceName(f.source()).c_str(),
             several ? absl::StrCat(" ", absl::StrJoin(listed.servers, ",")).c_str() : "");
    }
    return 0;
  }
  if (*stats) {
    // Without --watch: one sample, rates since the server started. With it: a sample every
    // watch_s seconds, rates over the interval since the previous one.
    std::optional<v1::GetStatsResponse> previous;
    const bool terminal = isatty(STDOUT_FILENO) != 0;
    for (int shown = 0;; ++shown) {
      auto response = client->Stats();
      if (!response.ok()) return Fail(response.status(), target);
      const v1::GetStatsResponse* before = previous ? &*previous : nullptr;
      if (json) {
        printf("%s\n", StatsViewJson(*response, before).dump(watch_s > 0 ? -1 : 2).c_str());
      } else {
        if (watch_s > 0 && terminal) printf("\033[H\033[2J");  // redraw in place
        printf("%s", StatsViewText(*response, before).c_str());
        if (watch_s > 0) printf("\n");
      }
      fflush(stdout);
      if (watch_s <= 0 || (watch_count > 0 && shown + 1 >= watch_count)) return 0;
      previous = std::move(*response);
      std::this_thread::sleep_for(std::chrono::duration<double>(watch_s));
    }
  }
  if (*explain) {
    auto response = client->Explain(file, offset, length);
    if (!response.ok()) return Fail(response.status(), target);
    printf("%s: %lu bytes, block size %u, %s\n", response->file().name().c_str(),
           response->file().size(), response->file().block_size(),
           SourceName(response->file().source()).c_str());
    printf("%-14s %-14s %-10s %-12s %s\n", "offset", "length", "type", "device", "physical");
    for (const v1::ExtentInfo& e : response->extents()) {
      printf("%-14lu %-14lu %-10s %-12s %s\n", e.logical_offset(), e.length(),
             v1::ExtentType_Name(e.type()).c_str(), e.device().empty() ? "-" : e.device().c_str(),
             e.device().empty() ? "-" : std::to_string(e.physical_offset()).c_str());
    }
    printf("path: %s\n", response->reason().c_str());
    return 0;
  }
  if (*health) {
    auto status = client->Health();
    if (!status.ok()) return Fail(status.status(), target);
    printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status).c_str());
    return *status == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : kExitError;
  }
  return kExitUsage;
}

}  // namespace
}  // namespace blockread::client

int main(int argc, char** argv) {
  blockread::wire::TuneProcess();
  return blockread::client::Main(argc, argv);
}
