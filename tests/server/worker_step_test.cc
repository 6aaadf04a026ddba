// The worker loop stepped by the test, one PollOnce() at a time, against a device that stalls on
// demand (nbdkit's pause filter under a loop device): cancellation, deadlines, shutdown and
// half-closed streams while reads are on the device or waiting for a slot. Deterministic: the
// server makes progress only when the test steps it, and the device only when the test resumes
// it. Sanitizer builds check that no call or slot is freed while anything still refers to it.
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "blockread/v1/blockread.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/config.h"
#include "server/server.h"
#include "tests/support/loop_device.h"
#include "tests/support/nbd_device.h"

namespace blockread::server {
namespace {

constexpr uint64_t kImageBytes = 8 << 20;

int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return 0;
}

// A blocking client call on its own thread; the test thread steps the server meanwhile.
class ClientThread {
 public:
  explicit ClientThread(std::function<grpc::Status()> call)
      : thread_([this, call] {
          status_ = call();
          done_.store(true);
        }) {}
  ~ClientThread() { thread_.join(); }
  bool done() const { return done_.load(); }
  const grpc::Status& status() const { return status_; }  // REQUIRES: done()

 private:
  grpc::Status status_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

class WorkerStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::NbdDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    content_ = testing::RandomBytes(kImageBytes, 5);
    const std::string image = dir_.path() + "/image";
    ASSERT_TRUE(testing::WriteAt(image, 0, content_, true).ok());
    testing::NbdDevice::Options options;
    options.image = image;
    options.pausable = true;
    auto device = testing::NbdDevice::Create(dir_.path(), options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
  }

  // One worker, not started: the test thread is its thread.
  void StartServer(uint32_t simple_slots) {
    v1::ServerConfig config;
    config.set_listen("127.0.0.1:0");
    config.set_metrics_listen("");
    config.add_device("disk=" + device_->path());
    config.set_cpus(std::to_string(FirstAllowedCpu()));
    config.set_simple_slots(simple_slots);
    config.set_shutdown_grace_ms(300);
    auto finalized = FinalizeServerConfig(config);
    ASSERT_TRUE(finalized.ok()) << finalized.status();
    auto server = BlockReadServer::Start(*finalized, /*worker_threads=*/false);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    worker_ = &server_->worker(0);
    ASSERT_TRUE(worker_->Setup().ok());
    stub_ = v1::BlockRead::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (device_ != nullptr) (void)device_->Resume();
    if (server_ != nullptr) ShutDownWhileStepping();
  }

  // Steps until `done` holds (true) or 10 s pass (false).
  bool StepUntil(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      if (worker_->PollOnce() == Worker::Turn::kIdle) usleep(100);
    }
    return true;
  }
  void Step(int turns) {
    for (int i = 0; i < turns; ++i) {
      worker_->PollOnce();
      usleep(500);
    }
  }

  // Server::Shutdown blocks until the RPCs are over, which needs the worker: step it meanwhile.
  void ShutDownWhileStepping() {
    std::atomic<bool> shut_down{false};
    std::thread stopper([&] {
      server_->Shutdown();
      shut_down.store(true);
    });
    bool stopped = false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end && !stopped) {
      stopped = worker_->PollOnce() == Worker::Turn::kStopped;
    }
    stopper.join();
    EXPECT_TRUE(stopped) << "the worker did not stop";
    server_.reset();
  }

  v1::ReadBlockRequest Request(uint64_t offset, uint64_t length) {
    v1::ReadBlockRequest request;
    request.set_file("disk");
    request.set_offset(offset);
    request.set_length(length);
    return request;
  }
  std::string Expected(uint64_t offset, uint64_t length) {
    return std::string(content_.data() + offset, length);
  }
  uint64_t Rpcs(RpcMethod method, grpc::StatusCode code) {
    return worker_->counters().rpcs[static_cast<int>(method)][static_cast<int>(code)].Load();
  }
  uint32_t InFlight() { return worker_->engine().reads_in_flight(); }

  // A read after the storm: the worker, its slots and the device all work.
  void ExpectAFreshReadWorks() {
    grpc::ClientContext context;
    v1::ReadBlockResponse response;
    ClientThread client(
        [&] { return stub_->ReadBlock(&context, Request(12288, 4096), &response); });
    ASSERT_TRUE(StepUntil([&] { return client.done(); }));
    ASSERT_TRUE(client.status().ok()) << client.status().error_message();
    EXPECT_EQ(response.data(), Expected(12288, 4096));
  }

  testing::TempDir dir_;
  std::vector<char> content_;
  std::unique_ptr<testing::NbdDevice> device_;
  std::unique_ptr<BlockReadServer> server_;
  Worker* worker_ = nullptr;
  std::unique_ptr<v1::BlockRead::Stub> stub_;
};

TEST_F(WorkerStepTest, ACallCancelledDuringItsIoLivesUntilTheIoCompletes) {
  StartServer(4);
  ASSERT_TRUE(device_->Pause().ok());
  grpc::ClientContext context;
  v1::ReadBlockResponse response;
  {
    ClientThread client(
        [&] { return stub_->ReadBlock(&context, Request(65536, 4096), &response); });
    ASSERT_TRUE(StepUntil([&] { return InFlight() == 1; }));
    context.TryCancel();
    ASSERT_TRUE(
        StepUntil([&] { return Rpcs(RpcMethod::kReadBlock, grpc::StatusCode::CANCELLED) == 1; }));
    while (!client.done()) usleep(1000);
    EXPECT_EQ(client.status().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The RPC is over but its read is on the device: the call and its slot stay.
  Step(40);
  EXPECT_EQ(InFlight(), 1u);
  ASSERT_TRUE(device_->Resume().ok());
  ASSERT_TRUE(StepUntil([&] { return InFlight() == 0; }));
  EXPECT_EQ(worker_->counters().reads.Load(), 1u);
  EXPECT_EQ(Rpcs(RpcMethod::kReadBlock, grpc::StatusCode::OK), 0u);
  ExpectAFreshReadWorks();
}

TEST_F(WorkerStepTest, ADeadlineThatPassesDuringIoEndsTheRpcAndTheReadStillCompletes) {
  StartServer(4);
  ASSERT_TRUE(device_->Pause().ok());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  v1::ReadBlockResponse response;
  {
    ClientThread client([&] { return stub_->ReadBlock(&context, Request(4096, 4096), &response); });
    ASSERT_TRUE(StepUntil([&] { return InFlight() == 1; }));
    ASSERT_TRUE(StepUntil([&] { return client.done(); }));
    EXPECT_EQ(client.status().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    ASSERT_TRUE(
        StepUntil([&] { return Rpcs(RpcMethod::kReadBlock, grpc::StatusCode::CANCELLED) == 1; }));
  }
  Step(20);
  EXPECT_EQ(InFlight(), 1u);
  ASSERT_TRUE(device_->Resume().ok());
  ASSERT_TRUE(StepUntil([&] { return InFlight() == 0; }));
  ExpectAFreshReadWorks();
}

TEST_F(WorkerStepTest, ShutdownWithReadsWaitingForSlotsDropsTheWaitersAndDrainsTheDevice) {
  StartServer(1);  // one simple slot: the second and third read wait for admission
  ASSERT_TRUE(device_->Pause().ok());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<v1::ReadBlockResponse> responses(3);
  std::vector<std::unique_ptr<ClientThread>> clients;
  for (int i = 0; i < 3; ++i) contexts.push_back(std::make_unique<grpc::ClientContext>());
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<ClientThread>([&, i] {
      return stub_->ReadBlock(contexts[i].get(), Request(i * 4096, 4096), &responses[i]);
    }));
  }
  ASSERT_TRUE(StepUntil([&] { return InFlight() == 1 && worker_->admission().size() == 2; }));

  std::atomic<bool> shut_down{false};
  std::thread stopper([&] {
    server_->Shutdown();
    shut_down.store(true);
  });
  // Past the grace period the RPCs are cancelled: the waiting reads leave the queue, and every
  // client has its answer, while the one read on the device still holds the worker.
  ASSERT_TRUE(StepUntil([&] {
    return worker_->admission().empty() && clients[0]->done() && clients[1]->done() &&
           clients[2]->done();
  }));
  for (const auto& client : clients) EXPECT_FALSE(client->status().ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_NE(worker_->PollOnce(), Worker::Turn::kStopped) << "stopped with a read on the device";
    usleep(1000);
  }
  EXPECT_EQ(InFlight(), 1u);
  ASSERT_TRUE(device_->Resume().ok());
  bool stopped = false;
  ASSERT_TRUE(StepUntil(
      [&] { return stopped || (stopped = worker_->PollOnce() == Worker::Turn::kStopped); }));
  stopper.join();
  EXPECT_TRUE(shut_down.load());
  EXPECT_EQ(worker_->counters().reads.Load(), 1u);  // only the read that reached the device
  server_.reset();
}

TEST_F(WorkerStepTest, AHalfClosedStreamWithReadsWaitingForSlotsAnswersThemAllThenEnds) {
  StartServer(1);
  ASSERT_TRUE(device_->Pause().ok());
  grpc::ClientContext context;
  std::vector<v1::ReadResult> results;
  ClientThread client([&] {
    auto stream = stub_->ReadBlocks(&context);
    v1::ReadBlocksRequest request;
    for (int i = 0; i < 3; ++i) {
      v1::ReadItem* item = request.add_reads();
      item->set_tag(static_cast<uint64_t>(i));
      item->set_file("disk");
      item->set_offset(static_cast<uint64_t>(i) * 8192);
      item->set_length(4096);
    }
    if (!stream->Write(request) || !stream->WritesDone()) return stream->Finish();
    v1::ReadBlocksResponse response;
    while (stream->Read(&response)) {
      for (const v1::ReadResult& result : response.results()) results.push_back(result);
    }
    return stream->Finish();
  });
  ASSERT_TRUE(StepUntil([&] { return InFlight() == 1 && worker_->admission().size() == 2; }));
  Step(20);  // the half-close is not even read while reads wait: nothing ends early
  EXPECT_FALSE(client.done());
  ASSERT_TRUE(device_->Resume().ok());
  ASSERT_TRUE(StepUntil([&] { return client.done(); }));
  ASSERT_TRUE(client.status().ok()) << client.status().error_message();
  ASSERT_EQ(results.size(), 3u);
  for (const v1::ReadResult& result : results) {
    EXPECT_EQ(result.code(), 0) << result.error_message();
    EXPECT_EQ(result.data(), Expected(result.tag() * 8192, 4096)) << result.tag();
  }
  EXPECT_EQ(Rpcs(RpcMethod::kReadBlocks, grpc::StatusCode::OK), 1u);
}

}  // namespace
}  // namespace blockread::server
