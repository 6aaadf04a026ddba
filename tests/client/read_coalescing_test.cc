// BlockReadClient::Read() from many threads: concurrent calls are coalesced onto shared
// ReadBlocks streams, and each caller still gets exactly its own answer: bytes, error, deadline
// and cancellation are per call. A real server on the demo device.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "tests/support/demo_server.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using client::ClientOptions;
using client::ReadCallOptions;
using client::ReadCancellation;
using testing::DemoServerTest;

class ReadCoalescingTest : public DemoServerTest {
 protected:
  // Finished RPCs of `method` on the server, by status code name.
  std::map<std::string, uint64_t> Rpcs(const std::string& method) {
    std::map<std::string, uint64_t> counts;
    auto stats = client_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok()) return counts;
    for (const v1::RpcCount& r : stats->rpcs()) {
      if (r.method() == method) counts[r.code()] += r.count();
    }
    return counts;
  }
  uint64_t Total(const std::map<std::string, uint64_t>& counts) {
    uint64_t total = 0;
    for (const auto& [code, n] : counts) total += n;
    return total;
  }
};

TEST_F(ReadCoalescingTest, ManyThreadsReadByteForByte) {
  constexpr int kThreads = 32, kReadsPerThread = 150;
  const uint64_t unary_before = Total(Rpcs("ReadBlock"));
  auto shared = BlockReadClient::Connect(server_->target());
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      const char* files[] = {"random-4m", "large", "fragmented", "sparse", "hello.txt"};
      for (int i = 0; i < kReadsPerThread; ++i) {
        const std::string file = files[rng() % 5];
        // Aligned 4 KiB reads (simple path) and odd ranges (generic path), some past EOF.
        const uint64_t offset = rng() % 2 ? (rng() % 1024) * 4096 : rng() % (4 << 20);
        const uint64_t length = rng() % 2 ? 4096 : 1 + rng() % (256 * 1024);
        const bool crc = rng() % 2;
        auto read = shared->Read(file, offset, length, crc);
        const std::string expected = Expected(file, offset, length);
        if (!read.ok()) {
          // Past EOF is OUT_OF_RANGE, like ReadBlock; nothing else may fail.
          if (read.status().code() != absl::StatusCode::kOutOfRange || !expected.empty()) {
            ++failed;
            ADD_FAILURE() << file << "@" << offset << "+" << length << ": " << read.status();
          }
          continue;
        }
        if (read->data() != expected) ++wrong;
        if (crc != read->has_crc32c()) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  shared.reset();  // ends the shared streams, so the server counts them
  const uint64_t unary = Total(Rpcs("ReadBlock")) - unary_before;
  // A stream ended by the client's side going away is counted when the server sees that, which
  // may be a moment after the client is gone.
  uint64_t streams = Total(Rpcs("ReadBlocks"));
  for (int i = 0; i < 100 && streams == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    streams = Total(Rpcs("ReadBlocks"));
  }
  EXPECT_GE(streams, 1u) << "concurrent reads went over shared streams";
  EXPECT_LE(streams, 4u) << "a few shared streams, not one per read";
  EXPECT_LT(unary, kThreads * kReadsPerThread / 2u) << "most reads were coalesced";
}

TEST_F(ReadCoalescingTest, ErrorsArePerRead) {
  // Good and bad reads interleaved from many threads, so they share messages: each bad read
  // fails alone, with the code and message ReadBlock gives it; the good ones succeed.
  auto shared = BlockReadClient::Connect(server_->target());
  auto direct = BlockReadClient::Connect(server_->target());  // one call at a time: ReadBlock
  struct Case {
    std::string file;
    uint64_t offset, length;
  };
  const std::vector<Case> cases = {{"random-4m", 4096, 4096},  {"nope", 0, 4096},
                                   {"hello.txt", 1 << 20, 10}, {"large", 0, (1 << 20) + 1},
                                   {"hello.txt", 0, 0},        {"random-4m", (4 << 20) - 100, 4096},
                                   {"fragmented", 1000, 70000}};
  std::vector<absl::StatusOr<v1::ReadBlockResponse>> reference;
  for (const Case& c : cases) reference.push_back(direct->Read(c.file, c.offset, c.length));
  ASSERT_EQ(reference[1].status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(reference[2].status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_EQ(reference[3].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(reference[4].status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(reference[5]->data().size(), 100u) << "short at EOF";
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const size_t k = (t + i) % cases.size();
        const Case& c = cases[k];
        auto read = shared->Read(c.file, c.offset, c.length);
        if (read.status() != reference[k].status() ||
            (read.ok() && read->data() != reference[k]->data())) {
          ++mismatches;
          ADD_FAILURE() << c.file << "@" << c.offset << ": " << read.status() << " vs "
                        << reference[k].status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(ReadCoalescingTest, DeadlineAndCancellationArePerCall) {
  ClientOptions options;
  options.timeout = std::chrono::seconds(60);
  auto shared = BlockReadClient::Connect(server_->target(), options);
  ASSERT_TRUE(shared->Read("hello.txt", 0, 10).ok());  // connected
  // A stopped server answers nothing: every read waits until its own deadline or cancellation.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  // The first read runs alone (a ReadBlock call); the ones below, made while it runs, are
  // coalesced.
  absl::StatusOr<v1::ReadBlockResponse> first, patient, expiring, cancelled;
  std::thread first_thread([&] { first = shared->Read("random-4m", 0, 4096); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread patient_thread([&] { patient = shared->Read("random-4m", 8192, 4096); });
  ReadCallOptions short_deadline;
  short_deadline.deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(300);
  std::thread expiring_thread([&] { expiring = shared->Read("large", 0, 4096, short_deadline); });
  ReadCancellation cancellation;
  ReadCallOptions cancellable;
  cancellable.cancellation = &cancellation;
  std::thread cancelled_thread([&] { cancelled = shared->Read("large", 4096, 4096, cancellable); });
  expiring_thread.join();
  EXPECT_EQ(expiring.status().code(), absl::StatusCode::kDeadlineExceeded) << expiring.status();
  cancellation.Cancel();
  cancelled_thread.join();
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();
  // A call cancelled before it starts does not start.
  EXPECT_EQ(shared->Read("large", 0, 4096, cancellable).status().code(),
            absl::StatusCode::kCancelled);
  // The others still wait, and get their bytes once the server runs again.
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  first_thread.join();
  patient_thread.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(patient.ok()) << patient.status();
  EXPECT_EQ(first->data(), Expected("random-4m", 0, 4096));
  EXPECT_EQ(patient->data(), Expected("random-4m", 8192, 4096));
  // A ReadBlock call (alone) is cancelled the same way.
  ReadCancellation before;
  before.Cancel();
  ReadCallOptions cancelled_unary;
  cancelled_unary.cancellation = &before;
  EXPECT_EQ(shared->Read("large", 0, 4096, cancelled_unary).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(ReadCoalescingTest, UnreachableServerFailsEveryRead) {
  // Nothing listens there: concurrent reads fail with UNAVAILABLE, as ReadBlock calls would,
  // instead of waiting for a stream that never starts.
  ClientOptions options;
  options.timeout = std::chrono::seconds(30);
  auto nowhere = BlockReadClient::Connect("127.0.0.1:1", options);
  std::vector<std::thread> threads;
  std::atomic<int> unavailable{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        if (nowhere->Read("large", 0, 4096).status().code() == absl::StatusCode::kUnavailable) {
          ++unavailable;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(unavailable.load(), 8 * 20);
}

TEST_F(ReadCoalescingTest, CoalescingOff) {
  ClientOptions options;
  options.coalescing.enabled = false;
  auto shared = BlockReadClient::Connect(server_->target(), options);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) EXPECT_TRUE(shared->Read("random-4m", i * 4096, 4096).ok());
    });
  }
  for (auto& t : threads) t.join();
  shared.reset();
  EXPECT_EQ(Total(Rpcs("ReadBlocks")), 0u);
  EXPECT_GE(Total(Rpcs("ReadBlock")), 400u);
}

}  // namespace
}  // namespace blockread
