#include "tests/support/demo_server.h"

#include "storage/manifest.h"
#include "tests/support/map_reader.h"

namespace blockread::testing {

void DemoServerTest::SetUp() {
  auto server =
      ServerProcess::Start({"--data_dir=" + dir_.path() + "/data"}, dir_.path() + "/server.log");
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  client_ = client::BlockReadClient::Connect(server_->target());
  ASSERT_TRUE(storage::LoadManifest(dir_.path() + "/data/demo.manifest", reference_).ok());
}

void DemoServerTest::TearDown() {
  if (server_ != nullptr) {
    EXPECT_EQ(server_->Stop(), 0) << server_->Log();
  }
}

std::string DemoServerTest::Expected(const std::string& file, uint64_t offset, uint64_t length) {
  auto map = reference_.Resolve(file);
  if (!map.ok()) return "<unreadable>";
  auto bytes = ReadThroughMap(reference_, **map, offset, length);
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
}

}  // namespace blockread::testing
