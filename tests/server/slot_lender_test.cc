// The slot lender on a real engine: its bounds, slots coming home from gRPC's threads, and
// buffers that outlive the worker's engine while gRPC still holds them.
#include "server/slot_lender.h"

#include <grpcpp/support/byte_buffer.h>

#include <optional>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"

namespace blockread::server {
namespace {

using storage::ReadPathKind;
using storage::ReadResult;

constexpr uint64_t kDiskBytes = 8 << 20;

class SlotLenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    content_ = testing::RandomBytes(kDiskBytes, 7);
    ASSERT_TRUE(testing::WriteAt(dir_.path() + "/disk.img", 0, content_, true).ok());
    ASSERT_TRUE(catalog_.AddWholeDevice("disk", dir_.path() + "/disk.img").ok());
    config_.simple_slots = 8;
    config_.generic_slots = 4;
    auto engine = storage::EngineContext::Create(catalog_, config_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    lender_.emplace(*engine_, config_, held_gauge_);
  }

  // Reads [offset, offset + length) and keeps the slot, as a zero-copy response does.
  HeldSlot ReadAndKeep(uint64_t offset, uint64_t length) {
    const ReadResult result = testing::ReadAndKeep(*engine_, "disk", offset, length);
    EXPECT_TRUE(result.status.ok()) << result.status;
    return HeldSlotOf(result);
  }

  std::string Expected(uint64_t offset, uint64_t length) const {
    return std::string(content_.begin() + static_cast<ptrdiff_t>(offset),
                       content_.begin() + static_cast<ptrdiff_t>(offset + length));
  }

  testing::TempDir dir_;
  std::vector<char> content_;
  storage::Catalog catalog_;
  storage::EngineConfig config_;
  std::unique_ptr<storage::EngineContext> engine_;
  storage::Counter held_gauge_;
  std::optional<SlotLender> lender_;
};

TEST_F(SlotLenderTest, BoundsPerCallAndPerWorkerLeaveAQuarterOfTheSlots) {
  // simple: 8 slots, one call holds 2, the worker 6; generic: 4 slots, 1 and 3.
  EXPECT_EQ(lender_->account_limit(ReadPathKind::kSimple), 2u);
  EXPECT_EQ(lender_->worker_limit(ReadPathKind::kSimple), 6u);
  EXPECT_EQ(lender_->account_limit(ReadPathKind::kGeneric), 1u);
  EXPECT_EQ(lender_->worker_limit(ReadPathKind::kGeneric), 3u);

  SlotAccount a, b, c, d;
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, &a));
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, &a));
  EXPECT_FALSE(lender_->TryHold(ReadPathKind::kSimple, &a)) << "past the call's share";
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kGeneric, &a)) << "each path has its own";
  EXPECT_FALSE(lender_->TryHold(ReadPathKind::kGeneric, &a));
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, &b));
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, &b));
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, &c));
  EXPECT_TRUE(lender_->TryHold(ReadPathKind::kSimple, nullptr));  // a unary call
  EXPECT_FALSE(lender_->TryHold(ReadPathKind::kSimple, &d)) << "past the worker's share";
  EXPECT_EQ(lender_->held(), 7u);
  EXPECT_EQ(held_gauge_.Load(), 7u);
  EXPECT_EQ(a.held(ReadPathKind::kSimple), 2u);
}

TEST_F(SlotLenderTest, SlicesReleasedOnAnotherThreadComeHomeOnTheNextTurn) {
  SlotAccount account;
  std::vector<grpc::Slice> slices;
  // Every simple slot the call may hold, each lent as a slice.
  for (int i = 0; i < 2; ++i) {
    HeldSlot slot = ReadAndKeep(4096 * static_cast<uint64_t>(i), 4096);
    ASSERT_EQ(slot.path, ReadPathKind::kSimple);
    ASSERT_TRUE(lender_->TryHold(slot.path, &account));
    slices.push_back(lender_->Lend(slot, &account));
  }
  EXPECT_EQ(lender_->ReturnReleased(), 0);
  EXPECT_EQ(account.held(ReadPathKind::kSimple), 2u);

  // gRPC lets go of them on its own threads; the bytes are intact until then.
  std::thread grpc_thread([&] {
    for (size_t i = 0; i < slices.size(); ++i) {
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[i].begin()), slices[i].size()),
                Expected(4096 * i, 4096));
    }
    slices.clear();
  });
  grpc_thread.join();
  EXPECT_EQ(lender_->ReturnReleased(), 2);
  EXPECT_EQ(account.held(ReadPathKind::kSimple), 0u);
  EXPECT_EQ(lender_->held(), 0u);
  lender_->Close(account);

  // The slots are the engine's again: all 8 can be in flight at once.
  std::vector<testing::ReadRequest> reads;
  for (uint64_t i = 0; i < 8; ++i) reads.push_back({"disk", 65536 + 4096 * i, 4096});
  for (const testing::CompletedRead& read : testing::RunReads(*engine_, reads, 8)) {
    EXPECT_TRUE(read.status.ok()) << read.status;
  }
}

TEST_F(SlotLenderTest, ACallThatEndsLeavesItsLentSlotsToTheWorker) {
  auto account = std::make_unique<SlotAccount>();
  HeldSlot lent = ReadAndKeep(0, 4096);
  HeldSlot gathered = ReadAndKeep(8192, 4096);
  ASSERT_TRUE(lender_->TryHold(lent.path, account.get()));
  ASSERT_TRUE(lender_->TryHold(gathered.path, account.get()));
  std::optional<grpc::Slice> slice(lender_->Lend(lent, account.get()));
  // The call ends: what it had not sent goes back now, what gRPC holds stays lent.
  lender_->Drop(gathered, account.get());
  lender_->Close(*account);
  account.reset();
  EXPECT_EQ(lender_->held(), 1u);
  slice.reset();
  EXPECT_EQ(lender_->ReturnReleased(), 1);
  EXPECT_EQ(lender_->held(), 0u);
}

TEST_F(SlotLenderTest, LentBuffersOutliveTheLenderAndTheEngine) {
  // At shutdown the worker and its engine go before gRPC has let go of every slice.
  HeldSlot simple = ReadAndKeep(12288, 4096);
  HeldSlot generic = ReadAndKeep(100000, 300000);
  ASSERT_EQ(generic.path, ReadPathKind::kGeneric);
  ASSERT_TRUE(lender_->TryHold(simple.path, nullptr));
  ASSERT_TRUE(lender_->TryHold(generic.path, nullptr));
  std::vector<grpc::Slice> slices = {lender_->Lend(simple, nullptr),
                                     lender_->Lend(generic, nullptr)};
  lender_.reset();
  engine_.reset();
  std::thread grpc_thread([&] {
    // Still mapped and unchanged (ASan would report an access to unmapped memory).
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[0].begin()), slices[0].size()),
              Expected(12288, 4096));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(slices[1].begin()), slices[1].size()),
              Expected(100000, 300000));
    slices.clear();  // the last reference frees the ledger and the buffers
  });
  grpc_thread.join();
}

}  // namespace
}  // namespace blockread::server
