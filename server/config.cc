#include "server/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/exposure.h"
#include "storage/catalog.h"

// Every flag is optional: unset means "whatever the config file says, else the default", so a
// flag given on the command line always wins over the file.
ABSL_FLAG(std::optional<std::string>, config, std::nullopt,
          "Config file (textproto, blockread.v1.ServerConfig) with any of the settings below; "
          "flags given on the command line override it.");
ABSL_FLAG(std::optional<std::string>, check_config, std::nullopt,
          "Validate this config file (textproto, as --config reads it, with any other flags on "
          "top) and exit: 0 and one OK line, or 2 and the error. Checks what startup checks "
          "before it opens sources or binds ports (CPUs against this process's affinity mask).");
ABSL_FLAG(std::optional<std::string>, listen, std::nullopt,
          absl::StrCat("ADDR:PORT (or unix:PATH) to serve on (default ",
                       blockread::server::kDefaultListen,
                       "; port 0 picks a free port, printed at startup)."));
ABSL_FLAG(std::optional<std::vector<std::string>>, serve_files, std::nullopt,
          "Comma-separated files or directories on mounted ext4/XFS filesystems, imported with "
          "FIEMAP and served under their path relative to the given root (a file: its base "
          "name). Files FIEMAP cannot describe are served through the file itself.");
ABSL_FLAG(std::optional<uint32_t>, max_open_files, std::nullopt,
          absl::StrCat("The most --serve-files files open at once, each holding a descriptor and, "
                       "while read from the raw device, a read lease (default ",
                       blockread::storage::kDefaultMaxOpenFiles,
                       ", and at most RLIMIT_NOFILE less ",
                       blockread::storage::kReservedDescriptors,
                       "). Served names are not bounded by it: a file is opened on its first "
                       "read, and the least recently read open file is closed to make room."));
ABSL_FLAG(std::optional<std::string>, manifest, std::nullopt,
          "Manifest (blockread.v1.Manifest textproto) of devices and per-file extents for layouts "
          "written straight to raw devices.");
ABSL_FLAG(std::optional<std::vector<std::string>>, device, std::nullopt,
          "Comma-separated NAME=PATH: a whole block device or regular file served as file NAME.");
ABSL_FLAG(std::optional<std::vector<std::string>>, file_version, std::nullopt,
          "Comma-separated NAME=VERSION: the content version of served file NAME, reported to "
          "clients (overrides a manifest's); NAME * gives every file without one a version. "
          "Clients use files of one name on several servers as replicas only when sizes and "
          "versions agree.");
ABSL_FLAG(std::optional<std::string>, cpus, std::nullopt,
          "CPUs for the workers, one pinned worker each, e.g. 0-3,6 (default: every CPU in the "
          "process's affinity mask, so a container's cpuset just works).");
ABSL_FLAG(std::optional<uint64_t>, simple_max_bytes, std::nullopt,
          absl::StrCat("Largest read on the simple path (default ",
                       blockread::server::kEngineDefaults.simple_max_bytes,
                       "); 0 turns the simple path off."));
ABSL_FLAG(std::optional<uint64_t>, max_read_bytes, std::nullopt,
          absl::StrCat("Largest read accepted (default ",
                       blockread::server::kEngineDefaults.max_read_bytes,
                       "); larger ones get INVALID_ARGUMENT."));
ABSL_FLAG(std::optional<uint64_t>, max_io_bytes, std::nullopt,
          absl::StrCat("Largest single device I/O of the generic path (default ",
                       blockread::server::kEngineDefaults.max_io_bytes, ")."));
ABSL_FLAG(std::optional<std::string>, data_dir, std::nullopt,
          absl::StrCat("Where the embedded demo device is created when no source is given "
                       "(default ",
                       blockread::server::kDefaultDataDir, ")."));
ABSL_FLAG(std::optional<uint32_t>, idle_spin_us, std::nullopt,
          absl::StrCat("With no reads in flight, a worker spins this many microseconds before it "
                       "blocks on its queue (default ",
                       blockread::server::kDefaultIdleSpinUs,
                       "). Workers always spin while reads are in flight."));
ABSL_FLAG(std::optional<bool>, reflection, std::nullopt,
          "Serve gRPC server reflection, so grpcurl-style tools can list the API (default off).");
ABSL_FLAG(std::optional<uint32_t>, simple_slots, std::nullopt,
          absl::StrCat("Simple-path reads in flight per worker (default ",
                       blockread::server::kEngineDefaults.simple_slots, ")."));
ABSL_FLAG(std::optional<uint32_t>, generic_slots, std::nullopt,
          absl::StrCat("Generic-path reads in flight per worker; each pins a max_read_bytes "
                       "buffer (default ",
                       blockread::server::kEngineDefaults.generic_slots, ")."));
ABSL_FLAG(std::optional<uint32_t>, max_queued_reads, std::nullopt,
          absl::StrCat("Reads a worker holds while its slots are busy before answering "
                       "RESOURCE_EXHAUSTED (default ",
                       blockread::server::kDefaultMaxQueuedReads, ")."));
ABSL_FLAG(std::optional<uint32_t>, max_concurrent_streams, std::nullopt,
          absl::StrCat("Concurrent RPCs per client connection (HTTP/2 max concurrent streams); "
                       "a client's further calls wait in its own transport (default ",
                       blockread::server::kDefaultMaxConcurrentStreams, ")."));
ABSL_FLAG(std::optional<uint32_t>, grpc_memory_mb, std::nullopt,
          absl::StrCat("Memory gRPC may use for connections and calls, in MiB (its resource "
                       "quota) (default ",
                       blockread::server::kDefaultGrpcMemoryMb, ")."));
ABSL_FLAG(std::optional<uint32_t>, max_connection_idle_ms, std::nullopt,
          absl::StrCat("Close a connection that has had no RPC for this long; clients reconnect "
                       "on their next call (default ",
                       blockread::server::kDefaultMaxConnectionIdleMs, ")."));
ABSL_FLAG(std::optional<uint32_t>, max_connection_age_ms, std::nullopt,
          absl::StrCat("Send GOAWAY to a connection this old: its calls go on, the client's next "
                       "ones open a new connection, so clients resolving a name find servers "
                       "that joined since (default ",
                       blockread::server::kDefaultMaxConnectionAgeMs, ")."));
ABSL_FLAG(std::optional<uint32_t>, max_connection_age_grace_ms, std::nullopt,
          "How long calls open when their connection reaches --max_connection_age_ms may still "
          "run before they are cut; 0: until they end (default 0).");
ABSL_FLAG(std::optional<uint32_t>, max_unary_in_flight, std::nullopt,
          absl::StrCat("Unary ReadBlock calls a worker holds open at once; beyond it new ones "
                       "get RESOURCE_EXHAUSTED at once (default ",
                       blockread::server::kDefaultMaxUnaryInFlight, ")."));
ABSL_FLAG(std::optional<uint32_t>, shutdown_grace_ms, std::nullopt,
          absl::StrCat("On SIGTERM/SIGINT, how long in-flight RPCs may take to finish (default ",
                       blockread::server::kDefaultShutdownGraceMs, ")."));
ABSL_FLAG(std::string, metrics_listen, blockread::server::kDefaultMetricsListen,
          "ADDR:PORT for the Prometheus /metrics endpoint over HTTP; empty turns it off; port 0 "
          "picks a free port, printed at startup.");
ABSL_FLAG(
    std::optional<std::string>, io_engine, std::nullopt,
    absl::StrCat("I/O engine: auto, io_uring or psync (default ",
                 blockread::storage::IoEngineName(blockread::server::kEngineDefaults.io_engine),
                 "). auto uses io_uring, or pool threads doing pread (psync) when io_uring "
                 "is blocked (container seccomp profiles), logging one line with the cause "
                 "and the fix; io_uring makes that a startup error."));
ABSL_FLAG(std::optional<uint32_t>, keepalive_time_ms, std::nullopt,
          absl::StrCat("HTTP/2 keepalive ping interval on idle connections (default ",
                       blockread::server::kDefaultKeepaliveTimeMs, ")."));

ABSL_FLAG(std::optional<std::string>, tls_cert, std::nullopt,
          "PEM certificate chain to serve gRPC over TLS (with --tls-key). Re-read every "
          "--tls-refresh-interval-s: rotate by swapping certificate and key together.");
ABSL_FLAG(std::optional<std::string>, tls_key, std::nullopt, "PEM private key of --tls-cert.");
ABSL_FLAG(std::optional<std::string>, tls_client_ca, std::nullopt,
          "PEM CA bundle: require a client certificate signed by it (mutual TLS).");
ABSL_FLAG(std::optional<uint32_t>, tls_refresh_interval_s, std::nullopt,
          absl::StrCat("How often the TLS files are re-read, in seconds (default ",
                       blockread::server::kDefaultTlsRefreshIntervalS, ")."));
ABSL_FLAG(std::optional<bool>, allow_insecure, std::nullopt,
          "Allow plaintext gRPC or /metrics on an address that is not loopback (refused "
          "otherwise: anyone who reaches the port could read every served file); logs a "
          "warning.");
ABSL_FLAG(std::optional<std::string>, listen_socket_mode, std::nullopt,
          absl::StrCat("With --listen=unix:PATH: the socket file's permission bits in octal "
                       "(default ",
                       blockread::server::kDefaultListenSocketMode,
                       "), its access control: connecting needs write permission on it."));
ABSL_FLAG(std::optional<std::string>, listen_socket_group, std::nullopt,
          "With --listen=unix:PATH: the socket file's group, a name or a number (default: the "
          "server's own).");
ABSL_FLAG(std::optional<std::string>, health_listen, std::nullopt,
          "ADDR:PORT of a plaintext endpoint serving only grpc.health.v1, for kubelet and "
          "container health checks; allowed off loopback (default: none).");
ABSL_FLAG(std::optional<std::string>, auth, std::nullopt,
          "Access file (textproto, blockread.v1.AccessConfig): identities by token or TLS client "
          "certificate, and the files each may read; re-read on SIGHUP. Without it every client "
          "may read everything, so the server then stays on loopback unless --allow-insecure.");

ABSL_FLAG(std::optional<std::string>, user, std::nullopt,
          "Run as this user once devices, files and ports are open: its uid, gid and groups, "
          "with no capabilities left but CAP_LEASE on the file-watcher thread (default: stay "
          "as started). Files replaced later, the --auth file and TLS files must be readable "
          "by it.");

namespace blockread::server {
namespace {

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error.empty()) error = absl::StrFormat("%d:%d: %s", line + 1, column + 1, message);
  }
  std::string error;
};

std::vector<int> AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// Every spec is NAME=VALUE with both sides non-empty.
absl::Status CheckNamePairs(absl::string_view flag, absl::string_view form,
                            const google::protobuf::RepeatedPtrField<std::string>& specs) {
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", spec, "' is not ", form));
    }
  }
  return absl::OkStatus();
}

// The flag named `name` (underscores) if it is a tri-state boolean: std::optional<bool>.
bool IsOptionalBoolFlag(absl::string_view name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->IsOfType<std::optional<bool>>();
}

}  // namespace

std::vector<std::string> NormalizeFlagArgs(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;  // the rest are not flags
    if (arg.size() <= 2 || arg.compare(0, 2, "--") != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<ptrdiff_t>(end), '-', '_');
    if (end != arg.size()) continue;  // has a value
    const std::string name = arg.substr(2);
    if (IsOptionalBoolFlag(name)) {
      arg = absl::StrCat("--", name, "=true");
    } else if (absl::StartsWith(name, "no") &&
               IsOptionalBoolFlag(absl::string_view(name).substr(2))) {
      arg = absl::StrCat("--", name.substr(2), "=false");
    }
  }
  return args;
}

void ConfigureFlagsUsage() {
  absl::FlagsUsageConfig usage;
  // Every flag but absl's own (--flagfile, --fromenv...): the server's are all in this file
  // today, and a flag added elsewhere must show up too.
  usage.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/flags/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  // __FILE__ is relative to the build directory ("../../server/config.cc"): show the source path.
  usage.normalize_filename = [](absl::string_view file) {
    while (absl::ConsumePrefix(&file, "../")) {
    }
    return std::string(file);
  };
  usage.version_string = [] { return absl::StrCat("blockread-server ", BLOCKREAD_VERSION, "\n"); };
  absl::SetFlagsUsageConfig(std::move(usage));
}

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& list) {
  const std::vector<int> allowed = AffinityCpus();
  if (list.empty()) return allowed;
  std::set<int> cpus;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> range = absl::StrSplit(part, '-');
    int first = 0, last = 0;
    if (!absl::SimpleAtoi(range.first, &first) ||
        !absl::SimpleAtoi(range.second.empty() ? range.first : range.second, &last) || first < 0 ||
        last < first || last >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpus: bad element '", part, "' in '", list, "' (expected e.g. 0-3,6)"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  for (int cpu : cpus) {
    if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--cpus: CPU %d is not in this process's affinity mask (%s)", cpu,
                          absl::StrJoin(allowed, ",")));
    }
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

absl::StatusOr<v1::ServerConfig> FinalizeServerConfig(v1::ServerConfig config) {
  if (config.listen().empty()) config.set_listen(kDefaultListen);
  if (config.data_dir().empty()) config.set_data_dir(kDefaultDataDir);
  if (!config.has_simple_max_bytes()) config.set_simple_max_bytes(kEngineDefaults.simple_max_bytes);
  if (config.max_read_bytes() == 0) config.set_max_read_bytes(kEngineDefaults.max_read_bytes);
  if (config.max_io_bytes() == 0) config.set_max_io_bytes(kEngineDefaults.max_io_bytes);
  if (!config.has_idle_spin_us()) config.set_idle_spin_us(kDefaultIdleSpinUs);
  if (!config.has_max_open_files()) {
    config.set_max_open_files(static_cast<uint32_t>(storage::kDefaultMaxOpenFiles));
  }
  if (config.simple_slots() == 0) config.set_simple_slots(kEngineDefaults.simple_slots);
  if (config.generic_slots() == 0) config.set_generic_slots(kEngineDefaults.generic_slots);
  if (config.max_queued_reads() == 0) config.set_max_queued_reads(kDefaultMaxQueuedReads);
  if (config.shutdown_grace_ms() == 0) config.set_shutdown_grace_ms(kDefaultShutdownGraceMs);
  if (config.keepalive_time_ms() == 0) config.set_keepalive_time_ms(kDefaultKeepaliveTimeMs);
  if (config.max_concurrent_streams() == 0) {
    config.set_max_concurrent_streams(kDefaultMaxConcurrentStreams);
  }
  if (config.grpc_memory_mb() == 0) config.set_grpc_memory_mb(kDefaultGrpcMemoryMb);
  if (config.max_connection_idle_ms() == 0) {
    config.set_max_connection_idle_ms(kDefaultMaxConnectionIdleMs);
  }
  if (config.max_unary_in_flight() == 0) config.set_max_unary_in_flight(kDefaultMaxUnaryInFlight);
  if (config.max_connection_age_ms() == 0) {
    config.set_max_connection_age_ms(kDefaultMaxConnectionAgeMs);
  }
  if (config.tls_refresh_interval_s() == 0) {
    config.set_tls_refresh_interval_s(kDefaultTlsRefreshIntervalS);
  }
  if (!config.has_metrics_listen()) config.set_metrics_listen(kDefaultMetricsListen);
  if (config.io_engine().empty()) {
    config.set_io_engine(storage::IoEngineName(kEngineDefaults.io_engine));
  }
  if (!storage::ParseIoEngine(config.io_engine())) {
    return absl::InvalidArgumentError(absl::StrCat("--io_engine: '", config.io_engine(),
                                                   "' is not one of auto, io_uring, psync"));
  }
  if (config.listen().find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen: '", config.listen(), "' is not ADDR:PORT"));
  }
  if (!config.metrics_listen().empty() && config.metrics_listen().find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_listen: '", config.metrics_listen(),
                                                   "' is not ADDR:PORT (empty: off)"));
  }
  if (!config.health_listen().empty() && config.health_listen().find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-listen: '", config.health_listen(), "' is not ADDR:PORT"));
  }
  if (absl::Status exposure = CheckExposure(config); !exposure.ok()) return exposure;
  if (absl::Status socket = ListenSocketAccess(config).status(); !socket.ok()) return socket;
  if (absl::Status devices = CheckNamePairs("--device", "NAME=PATH", config.device());
      !devices.ok()) {
    return devices;
  }
  if (absl::Status versions =
          CheckNamePairs("--file-version", "NAME=VERSION", config.file_version());
      !versions.ok()) {
    return versions;
  }
  if (absl::Status cpus = ParseCpuList(config.cpus()).status(); !cpus.ok()) return cpus;
  if (absl::Status engine = EngineConfigFrom(config).Validate(); !engine.ok()) return engine;
  return config;
}

absl::Status ParseTextProto(const std::string& text, const std::string& source,
                            google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", errors.error));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ServerConfig> ParseServerConfig(const std::string& text,
                                                   const std::string& source) {
  v1::ServerConfig config;
  if (absl::Status parsed = ParseTextProto(text, source, &config); !parsed.ok()) return parsed;
  return config;
}

std::optional<std::string> CheckConfigFile() { return absl::GetFlag(FLAGS_check_config); }

absl::StatusOr<v1::ServerConfig> LoadServerConfig() {
  v1::ServerConfig config;
  std::optional<std::string> path = absl::GetFlag(FLAGS_config);
  const char* path_flag = "--config";
  if (std::optional<std::string> check = CheckConfigFile()) {
    if (path.has_value() && *path != *check) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--check-config=", *check, " and --config=", *path, " name different files; give one"));
    }
    path = check;
    path_flag = "--check-config";
  }
  if (path.has_value()) {
    std::ifstream in(*path);
    if (!in) return absl::NotFoundError(absl::StrCat(path_flag, ": cannot read ", *path));
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::ServerConfig> parsed = ParseServerConfig(text.str(), *path);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  if (auto v = absl::GetFlag(FLAGS_listen)) config.set_listen(*v);
  if (auto v = absl::GetFlag(FLAGS_serve_files)) {
    config.clear_serve_files();
    for (const std::string& f : *v) config.add_serve_files(f);
  }
  if (auto v = absl::GetFlag(FLAGS_manifest)) config.set_manifest(*v);
  if (auto v = absl::GetFlag(FLAGS_device)) {
    config.clear_device();
    for (const std::string& d : *v) config.add_device(d);
  }
  if (auto v = absl::GetFlag(FLAGS_file_version)) {
    config.clear_file_version();
    for (const std::string& d : *v) config.add_file_version(d);
  }
  if (auto v = absl::GetFlag(FLAGS_cpus)) config.set_cpus(*v);
  if (auto v = absl::GetFlag(FLAGS_simple_max_bytes)) config.set_simple_max_bytes(*v);
  if (auto v = absl::GetFlag(FLAGS_max_read_bytes)) config.set_max_read_bytes(*v);
  if (auto v = absl::GetFlag(FLAGS_max_io_bytes)) config.set_max_io_bytes(*v);
  if (auto v = absl::GetFlag(FLAGS_data_dir)) config.set_data_dir(*v);
  if (auto v = absl::GetFlag(FLAGS_idle_spin_us)) config.set_idle_spin_us(*v);
  if (auto v = absl::GetFlag(FLAGS_max_open_files)) config.set_max_open_files(*v);
  if (auto v = absl::GetFlag(FLAGS_reflection)) config.set_reflection(*v);
  if (auto v = absl::GetFlag(FLAGS_simple_slots)) config.set_simple_slots(*v);
  if (auto v = absl::GetFlag(FLAGS_generic_slots)) config.set_generic_slots(*v);
  if (auto v = absl::GetFlag(FLAGS_max_queued_reads)) config.set_max_queued_reads(*v);
  if (auto v = absl::GetFlag(FLAGS_shutdown_grace_ms)) config.set_shutdown_grace_ms(*v);
  if (auto v = absl::GetFlag(FLAGS_max_concurrent_streams)) config.set_max_concurrent_streams(*v);
  if (auto v = absl::GetFlag(FLAGS_grpc_memory_mb)) config.set_grpc_memory_mb(*v);
  if (auto v = absl::GetFlag(FLAGS_max_connection_idle_ms)) config.set_max_connection_idle_ms(*v);
  if (auto v = absl::GetFlag(FLAGS_max_connection_age_ms)) config.set_max_connection_age_ms(*v);
  if (auto v = absl::GetFlag(FLAGS_max_connection_age_grace_ms)) {
    config.set_max_connection_age_grace_ms(*v);
  }
  if (auto v = absl::GetFlag(FLAGS_max_unary_in_flight)) config.set_max_unary_in_flight(*v);
  // A plain string flag, not an optional one, because absl parses an empty optional flag as
  // "unset" and empty must mean "off". So a value equal to the default counts as not given
  // (the config file, if it says otherwise, wins).
  if (std::string v = absl::GetFlag(FLAGS_metrics_listen); v != kDefaultMetricsListen) {
    config.set_metrics_listen(v);
  }
  if (auto v = absl::GetFlag(FLAGS_keepalive_time_ms)) config.set_keepalive_time_ms(*v);
  if (auto v = absl::GetFlag(FLAGS_io_engine)) config.set_io_engine(*v);
  if (auto v = absl::GetFlag(FLAGS_tls_cert)) config.set_tls_cert(*v);
  if (auto v = absl::GetFlag(FLAGS_tls_key)) config.set_tls_key(*v);
  if (auto v = absl::GetFlag(FLAGS_tls_client_ca)) config.set_tls_client_ca(*v);
  if (auto v = absl::GetFlag(FLAGS_tls_refresh_interval_s)) config.set_tls_refresh_interval_s(*v);
  if (auto v = absl::GetFlag(FLAGS_allow_insecure)) config.set_allow_insecure(*v);
  if (auto v = absl::GetFlag(FLAGS_health_listen)) config.set_health_listen(*v);
  if (auto v = absl::GetFlag(FLAGS_listen_socket_mode)) config.set_listen_socket_mode(*v);
  if (auto v = absl::GetFlag(FLAGS_listen_socket_group)) config.set_listen_socket_group(*v);
  if (auto v = absl::GetFlag(FLAGS_auth)) config.set_auth(*v);
  if (auto v = absl::GetFlag(FLAGS_user)) config.set_user(*v);
  return FinalizeServerConfig(std::move(config));
}

storage::EngineConfig EngineConfigFrom(const v1::ServerConfig& config) {
  storage::EngineConfig engine;
  engine.simple_max_bytes = config.simple_max_bytes();
  engine.max_read_bytes = config.max_read_bytes();
  engine.max_io_bytes = config.max_io_bytes();
  engine.simple_slots = config.simple_slots();
  engine.generic_slots = config.generic_slots();
  engine.io_engine = storage::ParseIoEngine(config.io_engine()).value_or(kEngineDefaults.io_engine);
  return engine;
}

}  // namespace blockread::server
