// What leaves the server in a status message: the client's terms (file, offset, length, limit),
// never device paths, device names or server paths; the details are in the server log under an
// incident number the message quotes. Names echoed back are cut to 256 bytes.
#include <fstream>
#include <regex>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/file_shapes.h"
#include "tests/support/loop_device.h"
#include "tests/support/nbd_device.h"
#include "tests/support/server_process.h"

namespace blockread::testing {
namespace {

using client::BlockReadClient;

TEST(ErrorMessageTest, ADeviceErrorNamesTheFileAndOffsetAndTheLogHasTheDevice) {
  if (std::string why = NbdDevicesUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string image = dir.path() + "/image";
  const std::vector<char> bytes = RandomBytes(8 << 20, 3);
  std::ofstream(image, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  NbdDevice::Options options;
  options.image = image;
  options.error_trigger_file = dir.path() + "/fail";
  auto device = NbdDevice::Create(dir.path(), options);
  ASSERT_TRUE(device.ok()) << device.status();
  auto server =
      ServerProcess::Start({"--device=flaky=" + (*device)->path()}, dir.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = BlockReadClient::Connect((*server)->target());
  ASSERT_TRUE(client->Read("flaky", 8192, 4096).ok());

  std::ofstream(options.error_trigger_file) << "on";
  for (uint64_t length : {uint64_t{4096}, uint64_t{300000}}) {  // simple and generic paths
    auto failed = client->Read("flaky", 1 << 20, length);
    ASSERT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
    const std::string message(failed.status().message());
    EXPECT_NE(message.find("reading file flaky at offset 1048576: device I/O error: "
                           "Input/output error (incident "),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("/dev/"), std::string::npos) << message;
    EXPECT_EQ(message.find((*device)->path()), std::string::npos) << message;
    std::smatch incident;
    ASSERT_TRUE(std::regex_search(message, incident, std::regex("incident ([0-9]+)"))) << message;
    // The operator finds the device, its path and the physical offset under that number.
    const std::string log = (*server)->Log();
    EXPECT_NE(log.find("incident " + incident[1].str() + ": reading device flaky (" +
                       (*device)->path() + ") at offset "),
              std::string::npos)
        << log;
  }
  std::remove(options.error_trigger_file.c_str());
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Log();
}

TEST(ErrorMessageTest, AHugeNameIsNotEchoedBackWhole) {
  TempDir dir;
  auto server =
      ServerProcess::Start({"--data_dir=" + dir.path() + "/data"}, dir.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = BlockReadClient::Connect((*server)->target());
  const std::string huge(100 * 1000, 'x');
  std::vector<absl::Status> refusals = {client->Read(huge, 0, 4096).status(),
                                        client->Stat(huge).status(),
                                        client->Explain(huge, 0, 4096).status()};
  auto stream = client->OpenStream();
  v1::ReadBlocksRequest request;
  v1::ReadItem* item = request.add_reads();
  item->set_file(huge);
  item->set_length(4096);
  ASSERT_TRUE(stream->Send(request));
  stream->CloseSend();
  v1::ReadBlocksResponse response;
  ASSERT_TRUE(stream->Receive(&response));
  ASSERT_EQ(response.results_size(), 1);
  refusals.push_back(absl::Status(static_cast<absl::StatusCode>(response.results(0).code()),
                                  response.results(0).error_message()));
  while (stream->Receive(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  for (const absl::Status& refusal : refusals) {
    EXPECT_EQ(refusal.code(), absl::StatusCode::kNotFound) << refusal;
    EXPECT_LT(refusal.message().size(), 400u) << refusal.message().substr(0, 400);
    EXPECT_NE(refusal.message().find("(100000 bytes)"), std::string::npos)
        << refusal.message().substr(0, 400);
  }
  EXPECT_EQ((*server)->Stop(), 0) << (*server)->Log();
}

}  // namespace
}  // namespace blockread::testing
