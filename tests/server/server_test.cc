// A real blockread-server process on 127.0.0.1 over real ext4 and XFS loop devices, driven through
// the client library: byte-for-byte reads through both RPCs from many channels and streams at
// once, per-read errors inside a stream, Explain against the path taken, health, and a graceful
// SIGTERM (exit 0) at the end of every test.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/blockread_client.h"
#include "gtest/gtest.h"
#include "proto/wire/crc32c.h"
#include "tests/support/file_shapes.h"
#include "tests/support/loop_device.h"
#include "tests/support/server_process.h"

namespace blockread {
namespace {

using client::BlockReadClient;
using testing::FsType;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

struct Range {
  std::string name;  // as served
  std::string path;  // through the filesystem
  uint64_t offset;
  uint64_t length;
};

// The served name -> filesystem path of every file, and random ranges over them.
std::vector<Range> RandomRanges(const std::map<std::string, std::string>& files,
                                const std::map<std::string, uint64_t>& sizes, int count,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (const auto& [name, path] : files) names.push_back(name);
  std::vector<Range> ranges;
  while (static_cast<int>(ranges.size()) < count) {
    const std::string& name = names[rng() % names.size()];
    const uint64_t size = sizes.at(name);
    if (size == 0) continue;
    Range r{name, files.at(name), 0, 0};
    switch (rng() % 4) {
      case 0:
      case 1:
        r.offset = (rng() % size) / 4096 * 4096;
        r.length = 4096;
        break;
      case 2:
        r.offset = rng() % size;
        r.length = 1 + rng() % 20000;
        break;
      case 3:
        r.offset = rng() % size;
        r.length = 1 + rng() % kMiB;
        break;
    }
    ranges.push_back(r);
  }
  return ranges;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::LoopDevicesUnavailableReason().empty()) return;
    dir_ = new TempDir();
    for (FsType type : {FsType::kExt4, FsType::kXfs}) {
      // Each filesystem's files in a directory named after it: served as "ext4/...", "xfs/...".
      auto fs = testing::MakeShapesFilesystem(type, dir_->path(), static_cast<uint64_t>(type) + 21,
                                              testing::FsTypeName(type));
      ASSERT_TRUE(fs.ok()) << fs.status();
      const std::string sub = absl::StrCat((*fs)->root(), "/", testing::FsTypeName(type));
      for (const std::string& shape : testing::kShapes) {
        files_[absl::StrCat(testing::FsTypeName(type), "/", shape)] = sub + "/" + shape;
      }
      roots_.push_back((*fs)->root());
      filesystems_.push_back(*std::move(fs));
    }
  }
  static void TearDownTestSuite() {
    filesystems_.clear();
    delete dir_;
  }

  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    ASSERT_EQ(filesystems_.size(), 2u) << "suite setup failed";
    // A grace far above what shutdown needs: GracefulShutdownFinishesReadsInFlight checks that
    // reads in flight at SIGTERM are finished, not how fast. Its 400 reads (about 50 MiB) took
    // 1.5 s in the release build and 9.7 s of the default 10 s under ASan on a busy machine.
    auto server = ServerProcess::Start({absl::StrCat("--serve_files=", roots_[0], ",", roots_[1]),
                                        "--idle_spin_us=20", "--shutdown_grace_ms=120000"},
                                       dir_->path() + "/server.log");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = BlockReadClient::Connect(server_->target());
    for (const auto& [name, path] : files_) {
      auto info = client_->Stat(name);
      ASSERT_TRUE(info.ok()) << name << ": " << info.status();
      sizes_[name] = info->size();
    }
  }

  void TearDown() override {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << "server log:\n" << server_->Log();
    }
  }

  static TempDir* dir_;
  static std::vector<std::unique_ptr<testing::LoopFilesystem>> filesystems_;
  static std::vector<std::string> roots_;
  static std::map<std::string, std::string> files_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<BlockReadClient> client_;
  std::map<std::string, uint64_t> sizes_;
};
TempDir* ServerTest::dir_ = nullptr;
std::vector<std::unique_ptr<testing::LoopFilesystem>> ServerTest::filesystems_;
std::vector<std::string> ServerTest::roots_;
std::map<std::string, std::string> ServerTest::files_;

std::string Expected(const Range& r) {
  auto bytes = testing::ReadFileRange(r.path, r.offset, r.length);
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "<unreadable>";
}

TEST_F(ServerTest, ManyChannelsAndStreamsReadByteForByte) {
  const std::vector<Range> ranges = RandomRanges(files_, sizes_, 2400, 7);
  constexpr int kThreads = 6;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Every thread its own channel; even threads unary, odd threads one stream each.
      auto client = BlockReadClient::Connect(server_->target());
      std::vector<const Range*> mine;
      for (size_t i = t; i < ranges.size(); i += kThreads) mine.push_back(&ranges[i]);
      if (t % 2 == 0) {
        for (const Range* r : mine) {
          auto response = client->Read(r->name, r->offset, r->length, /*want_crc32c=*/true);
          if (!response.ok()) {
            ++errors;
            ADD_FAILURE() << r->name << "@" << r->offset << ": " << response.status();
            continue;
          }
          if (response->data() != Expected(*r)) ++mismatches;
          if (response->crc32c() !=
              wire::Crc32c(response->data().data(), response->data().size())) {
            ++mismatches;
          }
        }
        return;
      }
      auto stream = client->OpenStream();
      std::thread sender([&] {
        // Several reads per message.
        for (size_t i = 0; i < mine.size(); i += 8) {
          v1::ReadBlocksRequest request;
          for (size_t j = i; j < std::min(mine.size(), i + 8); ++j) {
            v1::ReadItem* item = request.add_reads();
            item->set_tag(j);
            item->set_file(mine[j]->name);
            item->set_offset(mine[j]->offset);
            item->set_length(mine[j]->length);
          }
          if (!stream->Send(request)) break;
        }
        stream->CloseSend();
      });
      size_t received = 0;
      v1::ReadBlocksResponse response;
      std::vector<bool> seen(mine.size(), false);
      while (stream->Receive(&response)) {
        for (const v1::ReadResult& result : response.results()) {
          ++received;
          const Range& r = *mine[result.tag()];
          EXPECT_FALSE(seen[result.tag()]) << "tag answered twice";
          seen[result.tag()] = true;
          if (result.code() != 0) {
            ++errors;
            ADD_FAILURE() << r.name << "@" << r.offset << ": " << result.error_message();
          } else if (result.data() != Expected(r)) {
            ++mismatches;
          }
        }
      }
      sender.join();
      EXPECT_TRUE(stream->Finish().ok());
      EXPECT_EQ(received, mine.size()) << "reads lost on a stream";
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  uint64_t reads = 0;
  for (const v1::PathStats& p : stats->paths()) {
    EXPECT_GT(p.reads(), 0u) << v1::ReadPath_Name(p.path()) << " path unused";
    reads += p.reads();
  }
  EXPECT_EQ(reads, ranges.size());
}

TEST_F(ServerTest, PerReadErrorsInsideAStreamDoNotEndIt) {
  auto stream = client_->OpenStream();
  v1::ReadBlocksRequest request;
  auto add = [&](uint64_t tag, const std::string& file, uint64_t offset, uint64_t length) {
    v1::ReadItem* item = request.add_reads();
    item->set_tag(tag);
    item->set_file(file);
    item->set_offset(offset);
    item->set_length(length);
  };
  add(1, "ext4/big", 0, 4096);
  add(2, "no/such/file", 0, 4096);
  add(3, "ext4/tail", 6000, 10);    // beyond EOF (5000 bytes)
  add(4, "ext4/big", 0, 0);         // zero length
  add(5, "ext4/big", 0, 2 * kMiB);  // over max_read_bytes
  add(6, "xfs/big", 8192, 100);
  ASSERT_TRUE(stream->Send(request));
  stream->CloseSend();
  std::map<uint64_t, v1::ReadResult> results;
  v1::ReadBlocksResponse response;
  while (stream->Receive(&response)) {
    for (const v1::ReadResult& r : response.results()) results[r.tag()] = r;
  }
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(results[1].code(), 0);
  EXPECT_EQ(results[1].data(), Expected({"", files_["ext4/big"], 0, 4096}));
  EXPECT_EQ(results[2].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(results[3].code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(results[4].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(results[5].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(results[5].error_message().find("max_read_bytes = 1048576"), std::string::npos);
  EXPECT_EQ(results[6].code(), 0);
  EXPECT_EQ(results[6].data(), Expected({"", files_["xfs/big"], 8192, 100}));
}

TEST_F(ServerTest, UnaryErrorsCarryTheDocumentedCodes) {
  EXPECT_EQ(client_->Read("nope", 0, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Read("ext4/tail", 5001, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Read("ext4/tail", 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto at_eof = client_->Read("ext4/tail", 5000, 10);
  ASSERT_TRUE(at_eof.ok()) << at_eof.status();
  EXPECT_EQ(at_eof->data().size(), 0u);
  EXPECT_EQ(client_->Stat("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Explain("ext4/tail", 9999, 1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(ServerTest, ExplainMatchesThePathTheReadTakes) {
  auto before = client_->Stats();
  ASSERT_TRUE(before.ok());
  std::map<v1::ReadPath, uint64_t> expected_paths;
  std::map<v1::FallbackReason, uint64_t> expected_fallbacks;
  const std::vector<Range> ranges = RandomRanges(files_, sizes_, 300, 99);
  for (const Range& r : ranges) {
    auto explain = client_->Explain(r.name, r.offset, r.length);
    ASSERT_TRUE(explain.ok()) << explain.status();
    EXPECT_FALSE(explain->extents().empty());
    EXPECT_FALSE(explain->reason().empty());
    auto read = client_->Read(r.name, r.offset, r.length);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->path(), explain->path())
        << r.name << "@" << r.offset << "+" << r.length << ": " << explain->reason();
    EXPECT_EQ(read->fallback(), explain->fallback());
    ++expected_paths[explain->path()];
    if (explain->fallback() != v1::FALLBACK_NONE) ++expected_fallbacks[explain->fallback()];
  }
  auto after = client_->Stats();
  ASSERT_TRUE(after.ok());
  for (int i = 0; i < after->paths_size(); ++i) {
    EXPECT_EQ(after->paths(i).reads() - before->paths(i).reads(),
              expected_paths[after->paths(i).path()])
        << v1::ReadPath_Name(after->paths(i).path());
  }
  for (int i = 0; i < after->fallbacks_size(); ++i) {
    EXPECT_EQ(after->fallbacks(i).count() - before->fallbacks(i).count(),
              expected_fallbacks[after->fallbacks(i).reason()])
        << v1::FallbackReason_Name(after->fallbacks(i).reason());
  }
}

// Every imported file is read through a device of its own; GetStats (and so /metrics, which is
// built from it) sums those into one "file-route" entry: no series per served file, and no file
// name in a device label.
TEST_F(ServerTest, StatsHaveOneDeviceEntryForAllImportedFiles) {
  for (const auto& [name, size] : sizes_) {
    const auto read = client_->Read(name, 0, std::clamp<uint64_t>(size, 1, 4096));
    ASSERT_TRUE(read.ok()) << name << ": " << read.status();
  }
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  int file_route_entries = 0;
  for (const v1::DeviceStats& device : stats->devices()) {
    for (const auto& [name, path] : files_) {
      const std::string base = name.substr(name.rfind('/') + 1);
      EXPECT_EQ(device.name().find(base), std::string::npos) << device.name();
      EXPECT_EQ(device.path().find(base), std::string::npos) << device.path();
    }
    if (device.name() != "file-route") continue;
    ++file_route_entries;
    // The open-file cache's slots, whatever the number of files.
    EXPECT_NE(device.path().find("open-file slots"), std::string::npos) << device.path();
    EXPECT_GE(stats->files().open_slots(), 1u);
    EXPECT_GE(stats->files().opens(), 1u);
  }
  EXPECT_EQ(file_route_entries, 1);
  // One per filesystem's disk, and the file routes.
  EXPECT_EQ(stats->devices_size(), static_cast<int>(filesystems_.size()) + 1);
}

TEST_F(ServerTest, ListAndStat) {
  auto files = client_->List();
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), files_.size());
  auto tiny = client_->Stat("ext4/tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->size(), 40u);
  auto punched = client_->Stat("xfs/punched");
  ASSERT_TRUE(punched.ok());
  EXPECT_EQ(punched->source(), v1::FIEMAP);
  EXPECT_EQ(punched->extent_count(), 128u);
}

// ListFiles by prefix, page by page; a file created in a served tree after startup is listed
// (under a larger generation) and read byte for byte, and its removal is seen by the next read.
TEST_F(ServerTest, ListFilesByPrefixAndAFileCreatedAfterStartupIsListedAndServed) {
  auto stub = v1::BlockRead::NewStub(client_->channel());
  const auto list = [&](const std::string& prefix, uint32_t page_size, const std::string& token,
                        v1::ListFilesResponse* response) {
    grpc::ClientContext context;
    v1::ListFilesRequest request;
    request.set_prefix(prefix);
    request.set_page_size(page_size);
    request.set_page_token(token);
    return stub->ListFiles(&context, request, response);
  };
  std::vector<std::string> expected;
  for (const auto& [name, path] : files_) {
    if (absl::StartsWith(name, "xfs/")) expected.push_back(name);
  }
  std::vector<std::string> paged;
  std::string token;
  uint64_t generation = 0;
  do {  // two names a page: the prefix holds across page tokens
    v1::ListFilesResponse page;
    ASSERT_TRUE(list("xfs/", 2, token, &page).ok());
    for (const v1::FileInfo& f : page.files()) paged.push_back(f.name());
    generation = page.generation();
    token = page.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(paged, expected);
  EXPECT_GT(generation, 0u);

  const std::string path = roots_[0] + "/ext4/created-after-startup.bin";
  absl::Cleanup remove = [&] { unlink(path.c_str()); };
  const std::vector<char> bytes = testing::RandomBytes(12345, 77);
  ASSERT_TRUE(testing::WriteAt(path, 0, bytes, false).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!client_->Stat("ext4/created-after-startup.bin").ok() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto read = client_->Read("ext4/created-after-startup.bin", 0, bytes.size());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->data(), std::string(bytes.begin(), bytes.end()));
  v1::ListFilesResponse listed;
  ASSERT_TRUE(list("ext4/created", 100, "", &listed).ok());
  ASSERT_EQ(listed.files_size(), 1);
  EXPECT_EQ(listed.files(0).name(), "ext4/created-after-startup.bin");
  EXPECT_EQ(listed.files(0).size(), bytes.size());
  EXPECT_GT(listed.generation(), generation);

  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_EQ(client_->Read("ext4/created-after-startup.bin", 0, 4096).status().code(),
            absl::StatusCode::kNotFound);
  auto files = client_->List();
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->size(), files_.size());
}

// Reads in flight on a stream when SIGTERM arrives are all answered in full; the server exits 0.
TEST_F(ServerTest, GracefulShutdownFinishesReadsInFlight) {
  auto stream = client_->OpenStream();
  const std::vector<Range> ranges = RandomRanges(files_, sizes_, 400, 3);
  v1::ReadBlocksRequest request;
  for (size_t i = 0; i < ranges.size(); ++i) {
    v1::ReadItem* item = request.add_reads();
    item->set_tag(i);
    item->set_file(ranges[i].name);
    item->set_offset(ranges[i].offset);
    item->set_length(ranges[i].length);
    if (request.reads_size() == 50) {
      ASSERT_TRUE(stream->Send(request));
      request.Clear();
    }
  }
  // Health Watch sees the shutdown.
  grpc::ClientContext watch_context;
  auto health = grpc::health::v1::Health::NewStub(client_->channel());
  auto watch = health->Watch(&watch_context, grpc::health::v1::HealthCheckRequest());
  grpc::health::v1::HealthCheckResponse status;
  ASSERT_TRUE(watch->Read(&status));
  EXPECT_EQ(status.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  kill(server_->pid(), SIGTERM);
  stream->CloseSend();
  size_t received = 0;
  v1::ReadBlocksResponse response;
  while (stream->Receive(&response)) {
    for (const v1::ReadResult& r : response.results()) {
      ++received;
      EXPECT_EQ(r.code(), 0) << r.error_message();
      EXPECT_EQ(r.data(), Expected(ranges[r.tag()])) << "a read was cut";
    }
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(received, ranges.size()) << "reads lost at shutdown";
  bool saw_not_serving = false;
  while (watch->Read(&status)) {
    saw_not_serving |= status.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }
  EXPECT_TRUE(saw_not_serving);
  watch->Finish();
  EXPECT_EQ(server_->Stop(), 0) << server_->Log();
  server_.reset();
}

// SIGTERM while six clients keep the server full: streams of 40 reads that are read to the end,
// cancelled at once or cancelled after their first response, and unary reads with deadlines of
// 0-3 ms, most of which expire. Every read answered OK is exact, every other answer is a status a
// client must expect at shutdown or under cancellation, and the server exits 0 (under TSan: with
// no report). Run in every build; in the TSan one it is the shutdown and cancellation race test.
TEST_F(ServerTest, ShutdownUnderFullLoadInACancellationStormExitsCleanlyAndNeverReturnsWrongBytes) {
  const std::vector<Range> ranges = RandomRanges(files_, sizes_, 500, 11);
  std::vector<std::string> expected;
  for (const Range& r : ranges) expected.push_back(Expected(r));
  std::atomic<bool> stop{false};
  std::atomic<int> exact{0}, wrong{0}, failed{0}, streams{0}, unary{0};
  std::mutex mu;
  std::set<std::string> unexpected;
  const auto expect_code = [&](absl::StatusCode code, const std::string& what) {
    static const std::set<absl::StatusCode> kExpected = {
        absl::StatusCode::kOk, absl::StatusCode::kCancelled, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kUnavailable, absl::StatusCode::kResourceExhausted};
    if (code != absl::StatusCode::kOk) ++failed;
    if (kExpected.count(code) == 0) {
      std::lock_guard lock(mu);
      unexpected.insert(what);
    }
  };
  const auto check = [&](uint64_t tag, const std::string& data) {
    ++(data == expected[tag] ? exact : wrong);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto client = BlockReadClient::Connect(server_->target());  // a connection each
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      while (!stop) {
        auto stream = client->OpenStream();
        v1::ReadBlocksRequest request;
        for (int i = 0; i < 40; ++i) {
          const uint64_t k = rng() % ranges.size();
          v1::ReadItem* item = request.add_reads();
          item->set_tag(k);
          item->set_file(ranges[k].name);
          item->set_offset(ranges[k].offset);
          item->set_length(ranges[k].length);
        }
        const int mode = static_cast<int>(rng() % 3);  // 0: to the end, 1: cancel now, 2: later
        stream->Send(request);
        if (mode == 1) {
          stream->Cancel();
        } else {
          stream->CloseSend();
        }
        v1::ReadBlocksResponse response;
        while (stream->Receive(&response)) {
          for (const v1::ReadResult& r : response.results()) {
            if (r.code() == 0) {
              check(r.tag(), r.data());
            } else {
              expect_code(static_cast<absl::StatusCode>(r.code()),
                          "stream read: " + r.error_message());
            }
          }
          if (mode == 2) stream->Cancel();
        }
        const absl::Status end = stream->Finish();
        expect_code(end.code(), "stream: " + end.ToString());
        ++streams;
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto client = BlockReadClient::Connect(server_->target());
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
      while (!stop) {
        const uint64_t k = rng() % ranges.size();
        client::ReadCallOptions call;
        call.deadline = std::chrono::system_clock::now() + std::chrono::microseconds(rng() % 3000);
        auto read = client->Read(ranges[k].name, ranges[k].offset, ranges[k].length, call);
        if (read.ok()) {
          check(k, read->data());
        } else {
          expect_code(read.status().code(), "unary: " + read.status().ToString());
        }
        ++unary;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int exact_before_shutdown = exact.load();
  const int exit_code = server_->Stop(/*timeout_s=*/120);  // SIGTERM, under full load
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(exit_code, 0) << server_->Log();
  server_.reset();
  std::printf(
      "shutdown under load: %d streams, %d unary calls; %d reads exact (%d before SIGTERM), %d "
      "wrong, %d answered with an error status\n",
      streams.load(), unary.load(), exact.load(), exact_before_shutdown, wrong.load(),
      failed.load());
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(exact_before_shutdown, 0);
  for (const std::string& what : unexpected) ADD_FAILURE() << "unexpected answer: " << what;
}

}  // namespace
}  // namespace blockread
