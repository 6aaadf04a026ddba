// A test fixture with a real blockread-server on the embedded default (no source given: the demo
// device and manifest it creates under --data-dir), and the reference for what its files hold.
#ifndef BLOCKREAD_TESTS_SUPPORT_DEMO_SERVER_H_
#define BLOCKREAD_TESTS_SUPPORT_DEMO_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread::testing {

class DemoServerTest : public ::testing::Test {
 protected:
  // Starts the server on dir_/data and loads the demo manifest it wrote into reference_.
  void SetUp() override;
  // Stops the server (if the test has not) and expects exit status 0.
  void TearDown() override;

  // Bytes [offset, offset + length) of demo file `file` (short at EOF), read straight from the
  // demo device at the offsets of the demo manifest; "<unreadable>" if that fails.
  std::string Expected(const std::string& file, uint64_t offset, uint64_t length);

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::BlockReadClient> client_;
  storage::Catalog reference_;
};

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_DEMO_SERVER_H_
