// Server configuration: defaults, the config file, flags over the file, and the errors.
#include "server/config.h"

#include <sched.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/exposure.h"
#include "tests/support/loop_device.h"

ABSL_DECLARE_FLAG(std::optional<std::string>, config);
ABSL_DECLARE_FLAG(std::optional<std::string>, check_config);
ABSL_DECLARE_FLAG(std::optional<std::string>, listen);
ABSL_DECLARE_FLAG(std::optional<uint64_t>, simple_max_bytes);
ABSL_DECLARE_FLAG(std::optional<std::vector<std::string>>, device);

namespace blockread::server {
namespace {

TEST(ServerConfigTest, DefaultsAreFilledIn) {
  auto config = FinalizeServerConfig(v1::ServerConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen(), "127.0.0.1:7420");
  EXPECT_EQ(config->data_dir(), "./blockread-data");
  EXPECT_EQ(config->simple_max_bytes(), 4096u);
  EXPECT_EQ(config->max_read_bytes(), 1u << 20);
  EXPECT_EQ(config->idle_spin_us(), 50u);
  EXPECT_EQ(config->metrics_listen(), "127.0.0.1:7421");
  // Empty is a real value for metrics_listen (metrics off), not "unset".
  v1::ServerConfig no_metrics;
  no_metrics.set_metrics_listen("");
  EXPECT_EQ(FinalizeServerConfig(no_metrics)->metrics_listen(), "");
  // 0 is a real value for simple_max_bytes (simple path off), not "unset".
  v1::ServerConfig off;
  off.set_simple_max_bytes(0);
  EXPECT_EQ(FinalizeServerConfig(off)->simple_max_bytes(), 0u);
}

// The engine settings default to the engine's own defaults, not to a copy of them.
TEST(ServerConfigTest, EngineDefaultsAreTheEngines) {
  auto config = FinalizeServerConfig(v1::ServerConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  const storage::EngineConfig engine = EngineConfigFrom(*config);
  const storage::EngineConfig defaults;
  EXPECT_EQ(engine.simple_max_bytes, defaults.simple_max_bytes);
  EXPECT_EQ(engine.max_read_bytes, defaults.max_read_bytes);
  EXPECT_EQ(engine.max_io_bytes, defaults.max_io_bytes);
  EXPECT_EQ(engine.simple_slots, defaults.simple_slots);
  EXPECT_EQ(engine.generic_slots, defaults.generic_slots);
  EXPECT_EQ(engine.io_engine, defaults.io_engine);
}

// Every setting with a non-empty default has a flag whose --help states the value the server
// really uses (or, for a plain flag, has it as the flag's own default).
TEST(ServerConfigTest, HelpStatesTheDefaultsTheServerUses) {
  auto config = FinalizeServerConfig(v1::ServerConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  const google::protobuf::Descriptor* descriptor = config->GetDescriptor();
  const google::protobuf::Reflection* reflection = config->GetReflection();
  int checked = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(field->name());
    ASSERT_NE(flag, nullptr) << "no flag for " << field->name();
    if (field->is_repeated()) continue;
    std::string value;
    switch (field->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        value = absl::StrCat(reflection->GetUInt32(*config, field));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        value = absl::StrCat(reflection->GetUInt64(*config, field));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        value = reflection->GetString(*config, field);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        EXPECT_FALSE(reflection->GetBool(*config, field)) << field->name() << ": default on?";
        continue;
      default:
        ADD_FAILURE() << field->name() << ": a field type this test does not know";
        continue;
    }
    if (value.empty() || value == "0") continue;  // no default: unset means none
    const std::string help = flag->Help();
    EXPECT_TRUE(help.find(absl::StrCat("(default ", value)) != std::string::npos ||
                flag->DefaultValue() == value)
        << "--" << field->name() << " defaults to " << value << "; its help says: " << help;
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// server_config.proto states no default value: a number there would be a second definition that
// can drift from the code (the header says where to find them).
TEST(ServerConfigTest, TheProtoLeavesDefaultsToHelp) {
  std::ifstream proto(
      absl::StrCat(BLOCKREAD_SOURCE_DIR, "/proto/blockread/v1/server_config.proto"));
  ASSERT_TRUE(proto.good());
  bool in_message = false;
  int line_number = 0;
  for (std::string line; std::getline(proto, line);) {
    ++line_number;
    if (line.starts_with("message ServerConfig")) in_message = true;
    if (in_message) {
      EXPECT_EQ(absl::AsciiStrToLower(line).find("default"), std::string::npos)
          << "server_config.proto:" << line_number << " states a default: " << line;
    }
  }
  EXPECT_TRUE(in_message);
}

TEST(ServerConfigTest, FileThenFlagsOnTop) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/server.textproto";
  std::ofstream(path) << "listen: \"127.0.0.1:9999\"\nsimple_max_bytes: 8192\n"
                         "device: \"a=/dev/null\"\nmax_read_bytes: 2097152\n";
  absl::SetFlag(&FLAGS_config, path);
  absl::SetFlag(&FLAGS_simple_max_bytes, 0);  // the flag wins over the file
  absl::SetFlag(&FLAGS_device, std::vector<std::string>{"b=/dev/zero"});
  auto config = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, std::nullopt);
  absl::SetFlag(&FLAGS_simple_max_bytes, std::nullopt);
  absl::SetFlag(&FLAGS_device, std::nullopt);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen(), "127.0.0.1:9999");
  EXPECT_EQ(config->simple_max_bytes(), 0u);
  EXPECT_EQ(config->max_read_bytes(), 2u << 20);
  ASSERT_EQ(config->device_size(), 1);
  EXPECT_EQ(config->device(0), "b=/dev/zero");
}

TEST(ServerConfigTest, ErrorsNameTheProblem) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/bad.textproto";
  std::ofstream(path) << "listen: 7\n";
  absl::SetFlag(&FLAGS_config, path);
  auto bad_file = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, dir.path() + "/missing");
  auto missing = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, std::nullopt);
  EXPECT_EQ(bad_file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_file.status().message().find(path + ":1:"), std::string::npos) << bad_file.status();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  v1::ServerConfig config;
  config.add_device("no-equals-sign");
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("is not NAME=PATH"),
            std::string::npos);
  config.Clear();
  config.set_max_read_bytes(100);
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("max_read_bytes"),
            std::string::npos);
  config.Clear();
  config.set_listen("nocolon");
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("not ADDR:PORT"),
            std::string::npos);
  config.Clear();
  config.set_metrics_listen("7421");
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("--metrics_listen: '7421'"),
            std::string::npos);
}

// --check-config=FILE reads FILE exactly as --config would (flags on top), so what it accepts is
// what the server starts with; naming two different files is an error, not a silent pick.
TEST(ServerConfigTest, CheckConfigReadsTheFileAsConfig) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/server.textproto";
  std::ofstream(path) << "listen: \"0.0.0.0:7420\"\ndevice: \"nvme0=/dev/does-not-exist\"\n"
                         "tls_cert: \"/does-not-exist/cert.pem\"\n"
                         "tls_key: \"/does-not-exist/key.pem\"\n"
                         "auth: \"/does-not-exist/access.textproto\"\n";
  absl::SetFlag(&FLAGS_check_config, path);
  EXPECT_EQ(CheckConfigFile(), path);
  auto config = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, path);  // the same file twice is fine
  auto same = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, dir.path() + "/other.textproto");
  auto different = LoadServerConfig();
  absl::SetFlag(&FLAGS_config, std::nullopt);
  absl::SetFlag(&FLAGS_check_config, dir.path() + "/missing");
  auto missing = LoadServerConfig();
  absl::SetFlag(&FLAGS_check_config, std::nullopt);
  EXPECT_EQ(CheckConfigFile(), std::nullopt);

  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->listen(), "0.0.0.0:7420");
  EXPECT_EQ(config->device(0), "nvme0=/dev/does-not-exist");  // not opened by the check
  EXPECT_EQ(config->tls_cert(), "/does-not-exist/cert.pem");  // nor are the TLS files
  EXPECT_EQ(config->auth(), "/does-not-exist/access.textproto");
  EXPECT_TRUE(same.ok()) << same.status();
  EXPECT_NE(different.status().message().find("name different files"), std::string::npos)
      << different.status();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--check-config: cannot read"), std::string::npos)
      << missing.status();
}

// Every boolean setting: the bare flag, =true, =false, the --no form, and the config file; a flag
// given (even =false) wins over the file. Found by type, so a new boolean flag is covered too.
TEST(ServerConfigTest, EveryBooleanFlagTakesEveryForm) {
  const google::protobuf::Descriptor* descriptor = v1::ServerConfig::descriptor();
  int checked = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_BOOL) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(field->name());
    ASSERT_NE(flag, nullptr) << field->name();
    ASSERT_TRUE(flag->IsOfType<std::optional<bool>>()) << field->name();
    std::string dashed = field->name();
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const struct {
      std::string arg;
      bool file_says;
      bool want;
    } forms[] = {
        {"--" + dashed, false, true},           {"--" + field->name(), false, true},
        {"--" + dashed + "=true", false, true}, {"--" + dashed + "=false", true, false},
        {"--no" + dashed, true, false},         {"", true, true},
    };
    testing::TempDir dir;
    const std::string path = dir.path() + "/server.textproto";
    for (const auto& form : forms) {
      SCOPED_TRACE(form.arg.empty() ? "config file only" : form.arg);
      std::ofstream(path) << field->name() << ": " << (form.file_says ? "true" : "false") << "\n";
      if (!form.arg.empty()) {
        std::string program = "blockread-server", arg = form.arg;
        char* argv[] = {program.data(), arg.data()};
        const std::vector<std::string> normalized = NormalizeFlagArgs(2, argv);
        ASSERT_EQ(normalized.size(), 2u);
        // What absl::ParseCommandLine does with "--name=value".
        std::pair<absl::string_view, absl::string_view> name_value =
            absl::StrSplit(absl::string_view(normalized[1]).substr(2), absl::MaxSplits('=', 1));
        ASSERT_EQ(name_value.first, field->name()) << normalized[1];
        std::string error;
        ASSERT_TRUE(flag->ParseFrom(name_value.second, &error)) << normalized[1] << ": " << error;
      }
      absl::SetFlag(&FLAGS_config, path);
      auto config = LoadServerConfig();
      absl::SetFlag(&FLAGS_config, std::nullopt);
      std::string error;
      ASSERT_TRUE(flag->ParseFrom("", &error)) << error;  // unset again
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(config->GetReflection()->GetBool(*config, field), form.want);
    }
    ++checked;
  }
  EXPECT_GE(checked, 2);  // reflection, allow_insecure
}

// Runs the server binary with `args` (through the shell): its exit status, stdout and stderr.
std::pair<int, std::string> RunServer(const std::string& args) {
  const std::string command = absl::StrCat(BLOCKREAD_SERVER_BINARY, " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string output;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof(chunk), pipe)) > 0;) output.append(chunk, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// The README's command line, as the user types it, validated by the real binary.
TEST(ServerConfigTest, TheBinaryTakesTheDocumentedBooleanForms) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/server.textproto";
  std::ofstream(path) << "listen: \"0.0.0.0:7420\"\n";
  const std::string check = "--check-config=" + path;
  EXPECT_EQ(RunServer(check + " --allow-insecure").first, 0);
  EXPECT_EQ(RunServer(check + " --allow_insecure").first, 0);
  EXPECT_EQ(RunServer(check + " --allow-insecure=true").first, 0);
  const auto refused = RunServer(check + " --allow-insecure=false");
  EXPECT_EQ(refused.first, 2) << refused.second;
  EXPECT_NE(refused.second.find("--allow-insecure"), std::string::npos) << refused.second;
  EXPECT_EQ(RunServer(check + " --noallow-insecure").first, 2);
  EXPECT_EQ(RunServer(check + " --reflection --allow-insecure").first, 0);
  std::ofstream(path) << "listen: \"0.0.0.0:7420\"\nallow_insecure: true\n";
  EXPECT_EQ(RunServer(check).first, 0);
  EXPECT_EQ(RunServer(check + " --allow-insecure=false").first, 2);
}

TEST(ServerConfigTest, HelpListsEveryFlagAndVersionTheProjects) {
  const auto [help_status, help] = RunServer("--help");
  EXPECT_EQ(help.find("No flags matched"), std::string::npos) << help;
  const google::protobuf::Descriptor* descriptor = v1::ServerConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    EXPECT_NE(help.find("--" + descriptor->field(i)->name() + " ("), std::string::npos)
        << "--help does not list --" << descriptor->field(i)->name();
  }
  EXPECT_NE(help.find("Flags from server/config.cc"), std::string::npos) << help;
  const auto [version_status, version] = RunServer("--version");
  EXPECT_EQ(version, absl::StrCat("blockread-server ", BLOCKREAD_VERSION, "\n"));
}

TEST(ServerConfigTest, LoopbackAddresses) {
  for (const char* local :
       {"127.0.0.1:7420", "127.9.8.7:0", "localhost:7420", "[::1]:7420", "ipv4:127.0.0.1:1",
        "unix:/run/blockread.sock", "[::ffff:127.0.0.1]:7420"}) {
    EXPECT_TRUE(IsLocalOnlyAddress(local)) << local;
  }
  for (const char* exposed : {"0.0.0.0:7420", "[::]:7420", ":7420", "10.1.2.3:7420",
                              "storage-1.example:7420", "128.0.0.1:7420", "[::1:7420"}) {
    EXPECT_FALSE(IsLocalOnlyAddress(exposed)) << exposed;
  }
}

TEST(ServerConfigTest, PlaintextOffLoopbackNeedsTlsOrAllowInsecure) {
  v1::ServerConfig config;
  config.set_listen("0.0.0.0:7420");
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("--allow-insecure"),
            std::string::npos);
  config.set_tls_cert("/etc/blockread/tls/server.pem");
  config.set_tls_key("/etc/blockread/tls/server.key");
  // TLS alone is not enough: any client with a certificate could read everything.
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("without --auth"),
            std::string::npos);
  config.set_auth("/etc/blockread/access.textproto");
  EXPECT_TRUE(FinalizeServerConfig(config).ok());  // opens nothing: --check-config works anywhere
  config.set_metrics_listen("0.0.0.0:7421");
  EXPECT_NE(FinalizeServerConfig(config).status().message().find("/metrics is plaintext"),
            std::string::npos);
  config.clear_tls_cert();
  config.clear_tls_key();
  config.clear_auth();
  config.set_allow_insecure(true);
  EXPECT_TRUE(FinalizeServerConfig(config).ok());
  config.set_allow_insecure(false);
  config.set_listen("127.0.0.1:7420");
  config.set_metrics_listen("127.0.0.1:7421");
  config.set_health_listen("0.0.0.0:7422");  // health only: allowed anywhere
  EXPECT_TRUE(FinalizeServerConfig(config).ok());
}

TEST(ServerConfigTest, CpuLists) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  auto all = ParseCpuList("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(static_cast<int>(all->size()), CPU_COUNT(&set));
  auto first = ParseCpuList(std::to_string((*all)[0]));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, std::vector<int>{(*all)[0]});
  EXPECT_NE(ParseCpuList("3-1").status().message().find("bad element '3-1'"), std::string::npos);
  EXPECT_NE(ParseCpuList("x").status().message().find("bad element"), std::string::npos);
  EXPECT_NE(ParseCpuList("1000").status().message().find("not in this process's affinity mask"),
            std::string::npos);
}

}  // namespace
}  // namespace blockread::server
