// The server config loader's gRPC-free part: a config file's text through ParseServerConfig and
// FinalizeServerConfig, as LoadServerConfig and --check-config take it (the flags on top are
// absl's). Checks: errors are INVALID_ARGUMENT and name the file; a config that passes has every
// default filled in, engine settings the engine accepts, and finalizing it again changes nothing.
#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace blockread::server {
namespace {

constexpr char kSource[] = "fuzz.textproto";

void FuzzOne(const std::string& text) {
  absl::StatusOr<v1::ServerConfig> parsed = ParseServerConfig(text, kSource);
  if (!parsed.ok()) {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(absl::StartsWith(parsed.status().message(), absl::StrCat(kSource, ":")));
    return;
  }
  absl::StatusOr<v1::ServerConfig> config = FinalizeServerConfig(*parsed);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(absl::StrContains(config->listen(), ":"));
  FUZZ_CHECK(config->metrics_listen().empty() || absl::StrContains(config->metrics_listen(), ":"));
  FUZZ_CHECK(!config->data_dir().empty());
  FUZZ_CHECK(config->max_queued_reads() > 0 && config->shutdown_grace_ms() > 0 &&
             config->keepalive_time_ms() > 0);
  FUZZ_CHECK(EngineConfigFrom(*config).Validate().ok());
  FUZZ_CHECK(ParseCpuList(config->cpus()).ok());
  absl::StatusOr<v1::ServerConfig> again = FinalizeServerConfig(*config);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*again, *config));
}

}  // namespace
}  // namespace blockread::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  blockread::server::FuzzOne(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
