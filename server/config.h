// blockread-server's configuration: a textproto file (--config, blockread.v1.ServerConfig) with
// command-line flags of the same names on top, defaults filled in, everything validated.
#ifndef BLOCKREAD_SERVER_CONFIG_H_
#define BLOCKREAD_SERVER_CONFIG_H_

#include <google/protobuf/message.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blockread/v1/server_config.pb.h"
#include "storage/engine_config.h"

namespace blockread::server {

// Defaults for fields left unset by both the file and the flags: the only place they are written
// (the flags' help is formatted from them; server_config.proto refers to --help). The engine's
// settings (simple_max_bytes, max_read_bytes, max_io_bytes, simple_slots, generic_slots) default
// to storage::EngineConfig's own.
inline constexpr storage::EngineConfig kEngineDefaults{};
inline constexpr char kDefaultListen[] = "127.0.0.1:7420";
inline constexpr char kDefaultMetricsListen[] = "127.0.0.1:7421";
inline constexpr char kDefaultDataDir[] = "./blockread-data";
inline constexpr uint32_t kDefaultIdleSpinUs = 50;
inline constexpr uint32_t kDefaultMaxQueuedReads = 4096;
inline constexpr uint32_t kDefaultShutdownGraceMs = 10000;
inline constexpr uint32_t kDefaultKeepaliveTimeMs = 30000;
inline constexpr uint32_t kDefaultTlsRefreshIntervalS = 60;
inline constexpr uint32_t kDefaultMaxConcurrentStreams = 256;
inline constexpr uint32_t kDefaultGrpcMemoryMb = 2048;
inline constexpr uint32_t kDefaultMaxConnectionIdleMs = 600000;  // 10 minutes
inline constexpr uint32_t kDefaultMaxConnectionAgeMs = 1800000;  // 30 minutes
inline constexpr uint32_t kDefaultMaxUnaryInFlight = 4096;
// How often devices are checked for going away and coming back (Catalog::CheckDevices).
inline constexpr uint32_t kDeviceCheckIntervalMs = 2000;
// Open descriptors the server wants (RLIMIT_NOFILE), raised to at startup when the hard limit
// allows: room for at least 2,000 idle connections besides devices and files.
inline constexpr uint64_t kWantedOpenFiles = 65536;

// argv with every flag name written with underscores (users and the docs write --data-dir as
// well as --data_dir), and the bare and negated forms of every std::optional<bool> flag spelled
// out (--allow-insecure -> --allow_insecure=true, --noallow-insecure -> --allow_insecure=false):
// absl accepts those forms only for plain bool flags, and ours are optional so that a flag given
// on the command line, even =false, wins over the config file. Arguments after "--" are left as
// they are. Call before absl::ParseCommandLine, with the flags linked in.
std::vector<std::string> NormalizeFlagArgs(int argc, char** argv);

// Makes --help list every flag of the server (absl's default lists only flags defined in the
// file with main(); ours live in config.cc) and --version print "blockread-server VERSION".
// Call before absl::ParseCommandLine.
void ConfigureFlagsUsage();

// Reads --config (or --check-config; if both are given they must name the same file), applies
// every flag given on the command line, fills defaults and validates. Call after
// absl::ParseCommandLine. Errors name the file, flag or field. Opens nothing but the file.
absl::StatusOr<v1::ServerConfig> LoadServerConfig();

// The file --check-config names, if given: the caller validates it with LoadServerConfig and
// exits instead of serving, so a config can be checked before it is deployed (a Kubernetes
// ConfigMap, /etc/blockread/server.textproto) on a machine without its devices.
std::optional<std::string> CheckConfigFile();

// Parses a config file's text (textproto, blockread.v1.ServerConfig) as LoadServerConfig does,
// without defaults or validation (FinalizeServerConfig). Syntax errors and unknown fields are
// INVALID_ARGUMENT "<source>:<line>:<column>: <problem>".
// Parses textproto `text` into `message` (cleared first). Errors are INVALID_ARGUMENT
// "<source>:<line>:<column>: <what>", for every textproto file the server reads.
absl::Status ParseTextProto(const std::string& text, const std::string& source,
                            google::protobuf::Message* message);

absl::StatusOr<v1::ServerConfig> ParseServerConfig(const std::string& text,
                                                   const std::string& source);

// Fills unset fields with their defaults and validates. Used by LoadServerConfig; public for
// tests and embedders that build a config in code.
absl::StatusOr<v1::ServerConfig> FinalizeServerConfig(v1::ServerConfig config);

// Parses a CPU list like "0-3,6" (sorted, deduplicated). Empty means: the CPUs in this process's
// affinity mask. Errors name the bad element, and CPUs outside the affinity mask.
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& list);

// The engine settings a worker uses, from a finalized config.
storage::EngineConfig EngineConfigFrom(const v1::ServerConfig& config);

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_CONFIG_H_
