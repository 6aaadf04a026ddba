// The engine's completion accounting when a backend misbehaves: short reads re-queued, pieces the
// kernel pushes back, pieces that fail after a short read. The faults are injected by wrapping
// the real backend, io_uring or psync (reads still go to a real loop device); the wrapper only
// changes what a completion reports or when a queued piece reaches the device.
#include <cerrno>
#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "storage/catalog.h"
#include "storage/io_backend.h"
#include "storage/read_path.h"
#include "tests/support/engine_driver.h"
#include "tests/support/loop_device.h"

namespace blockread::storage {
namespace {

constexpr uint64_t kDeviceBytes = 8 << 20;

// What the wrapper does; one plan per test (the wrapper factory is a plain function).
struct FaultPlan {
  // The first completion of each fresh piece reports only half its bytes (block-aligned), as a
  // device that ends a transfer early would: the engine must ask for the rest.
  bool halve_first_completion = false;
  // Pieces queued after a short read (the re-queued rests) are held back, as if the kernel kept
  // pushing back, until the test lets them go.
  bool hold_requeued = false;
  std::deque<IoPiece*> held;
  std::vector<const IoPiece*> halved;
};
FaultPlan* plan = nullptr;

class FaultyBackend final : public IoBackend {
 public:
  explicit FaultyBackend(std::unique_ptr<IoBackend> inner) : inner_(std::move(inner)) {}
  BackendKind kind() const override { return inner_->kind(); }
  void Queue(IoPiece& piece) override {
    if (plan->hold_requeued && piece.short_read_retries > 0) {
      plan->held.push_back(&piece);
      return;
    }
    inner_->Queue(piece);
  }
  void Submit() override { inner_->Submit(); }
  unsigned Reap(PieceDoneFn done, void* context) override {
    done_ = done;
    context_ = context;
    return inner_->Reap(&Trampoline, this);
  }
  void WaitForCompletion() override { inner_->WaitForCompletion(); }
  void DeviceReopened(uint32_t id, int fd) override { inner_->DeviceReopened(id, fd); }
  unsigned inflight() const override {
    return inner_->inflight() + static_cast<unsigned>(plan->held.size());
  }

  // Lets the held pieces go: to the ring, or back to the engine as failed with `error`.
  void ReleaseHeld(int error) {
    while (!plan->held.empty()) {
      IoPiece* piece = plan->held.front();
      plan->held.pop_front();
      if (error == 0) {
        inner_->Queue(*piece);
      } else {
        done_(context_, *piece, -error);
      }
    }
  }

 private:
  static void Trampoline(void* self, IoPiece& piece, int result) {
    auto& backend = *static_cast<FaultyBackend*>(self);
    if (plan->halve_first_completion && piece.short_read_retries == 0 && result > 1024) {
      plan->halved.push_back(&piece);
      result = result / 2 / 512 * 512;
    }
    backend.done_(backend.context_, piece, result);
  }

  std::unique_ptr<IoBackend> inner_;
  PieceDoneFn done_ = nullptr;
  void* context_ = nullptr;
};

FaultyBackend* last_backend = nullptr;
std::unique_ptr<IoBackend> Wrap(std::unique_ptr<IoBackend> backend) {
  auto faulty = std::make_unique<FaultyBackend>(std::move(backend));
  last_backend = faulty.get();
  return faulty;
}

struct Delivery {
  int count = 0;
  absl::Status status;
  std::vector<char> data;
};
bool Record(void* context, const ReadResult& result) {
  auto& d = *static_cast<Delivery*>(context);
  ++d.count;
  d.status = result.status;
  if (result.status.ok()) d.data.assign(result.data, result.data + result.length);
  return false;
}

class BackendFaultTest : public ::testing::TestWithParam<IoEngine> {
 protected:
  void SetUp() override {
    if (std::string why = testing::LoopDevicesUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    content_ = testing::RandomBytes(kDeviceBytes, 77);
    const std::string image = dir_.path() + "/disk.img";
    ASSERT_TRUE(testing::WriteAt(image, 0, content_, true).ok());
    auto device = testing::LoopDevice::Create(image, kDeviceBytes);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    ASSERT_TRUE(catalog_.AddWholeDevice("disk", device_->path()).ok());
    plan = &plan_;
  }
  void TearDown() override { plan = nullptr; }

  std::unique_ptr<EngineContext> MakeEngine(EngineConfig config) {
    config.io_engine = GetParam();
    auto engine = EngineContext::Create(catalog_, config, &Wrap);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }
  std::vector<char> Expected(uint64_t offset, uint64_t length) const {
    return std::vector<char>(content_.begin() + static_cast<ptrdiff_t>(offset),
                             content_.begin() + static_cast<ptrdiff_t>(offset + length));
  }
  // Polls until `condition` holds (the backend may be a thread pool: how soon a piece completes
  // is up to the scheduler, slow under a sanitizer on a busy machine), at most 20 s.
  template <typename Condition>
  bool PollUntil(EngineContext& engine, Condition condition) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!condition() && std::chrono::steady_clock::now() < end) {
      engine.PollOnce();
      usleep(100);
    }
    return condition();
  }
  // Polls `turns` more times; the read must stay undelivered and in flight throughout.
  void ExpectStaysInFlight(EngineContext& engine, const Delivery& delivery, int turns) {
    for (int i = 0; i < turns; ++i) {
      engine.PollOnce();
      usleep(200);
    }
    EXPECT_EQ(delivery.count, 0);
    EXPECT_EQ(engine.reads_in_flight(), 1u);
  }
  void PollUntilDelivered(EngineContext& engine, const Delivery& delivery) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (delivery.count == 0 && std::chrono::steady_clock::now() < end) engine.PollOnce();
    ASSERT_EQ(delivery.count, 1);
    EXPECT_EQ(engine.reads_in_flight(), 0u);
  }
  // Exactly `slots` simple reads fit at once: a slot freed twice would let one more in.
  void ExpectSimpleSlotsIntact(EngineContext& engine, uint32_t slots) {
    std::vector<Delivery> d(slots + 1);
    plan_.halve_first_completion = false;
    for (uint32_t i = 0; i < slots; ++i) {
      EXPECT_EQ(testing::StartRead(engine, "disk", i * 4096, 4096, &Record, &d[i]),
                StartOutcome::kQueued);
    }
    EXPECT_EQ(testing::StartRead(engine, "disk", 0, 4096, &Record, &d[slots]), StartOutcome::kBusy);
    // Drained before `d` goes: every read started above delivers into it.
    while (engine.reads_in_flight() > 0) engine.PollOnce();
    for (uint32_t i = 0; i < slots; ++i) {
      EXPECT_EQ(d[i].count, 1);
      EXPECT_TRUE(d[i].data == Expected(i * 4096, 4096));
    }
  }

  std::unique_ptr<EngineContext> MakeEngineWithTwoSimpleSlots() {
    EngineConfig config;
    config.simple_slots = 2;
    return MakeEngine(config);
  }
  // A 4 KiB simple read whose first completion comes back half done and whose re-queued rest
  // is held back: it must stay in flight, undelivered.
  void StartShortReadWithItsRestHeld(EngineContext& engine, uint64_t offset, Delivery& delivery) {
    plan_.halve_first_completion = true;
    plan_.hold_requeued = true;
    ASSERT_EQ(testing::StartRead(engine, "disk", offset, 4096, &Record, &delivery),
              StartOutcome::kQueued);
    // The first half arrives and the rest, re-queued, is pushed back.
    ASSERT_TRUE(PollUntil(engine, [&] { return plan_.held.size() == 1; }));
    EXPECT_EQ(plan_.halved.size(), 1u);
    ExpectStaysInFlight(engine, delivery, 50);
    ASSERT_EQ(plan_.held.size(), 1u);
  }

  testing::TempDir dir_;
  std::vector<char> content_;
  std::unique_ptr<testing::LoopDevice> device_;
  Catalog catalog_;
  FaultPlan plan_;
};

TEST_P(BackendFaultTest, AShortReadWhoseRestIsPushedBackIsDeliveredOnceWhenTheRestArrives) {
  Delivery delivery;  // outlives the engine, which delivers into it until it is gone
  auto engine = MakeEngineWithTwoSimpleSlots();
  ASSERT_NE(engine, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartShortReadWithItsRestHeld(*engine, 65536, delivery));
  last_backend->ReleaseHeld(0);
  PollUntilDelivered(*engine, delivery);
  ASSERT_TRUE(delivery.status.ok()) << delivery.status;
  EXPECT_TRUE(delivery.data == Expected(65536, 4096));
  ExpectSimpleSlotsIntact(*engine, 2);
}

TEST_P(BackendFaultTest, AShortReadWhoseRestFailsIsOneDataLossAndFreesItsSlotOnce) {
  Delivery delivery;  // outlives the engine, which delivers into it until it is gone
  auto engine = MakeEngineWithTwoSimpleSlots();
  ASSERT_NE(engine, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartShortReadWithItsRestHeld(*engine, 8192, delivery));
  last_backend->ReleaseHeld(EIO);
  PollUntilDelivered(*engine, delivery);
  EXPECT_EQ(delivery.status.code(), absl::StatusCode::kDataLoss) << delivery.status;
  ExpectSimpleSlotsIntact(*engine, 2);
}

// The case that used to count a piece twice: a generic read of many pieces, one of which comes
// back short and has its rest held while the others complete. The read must not be delivered
// (nor its slot reused) while that rest can still write into the buffer.
TEST_P(BackendFaultTest, AGenericReadWaitsForEveryPieceIncludingARequeuedRest) {
  EngineConfig config;
  config.generic_slots = 1;
  config.max_io_bytes = 4096;  // 64 KiB = 16 pieces
  Delivery delivery, other;    // outlive the engine, which delivers into them until it is gone
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  plan_.halve_first_completion = true;
  plan_.hold_requeued = true;
  ASSERT_EQ(testing::StartRead(*engine, "disk", 1 << 20, 65536 + 512, &Record, &delivery),
            StartOutcome::kQueued);
  // Every piece comes back short and has its rest held.
  ASSERT_TRUE(PollUntil(*engine, [&] { return plan_.held.size() >= 16; })) << plan_.held.size();
  ExpectStaysInFlight(*engine, delivery, 50);
  EXPECT_EQ(plan_.held.size(), plan_.halved.size());
  // The only generic slot is still taken.
  EXPECT_EQ(testing::StartRead(*engine, "disk", 0, 65536, &Record, &other), StartOutcome::kBusy);
  last_backend->ReleaseHeld(0);
  PollUntilDelivered(*engine, delivery);
  ASSERT_TRUE(delivery.status.ok()) << delivery.status;
  EXPECT_TRUE(delivery.data == Expected(1 << 20, 65536 + 512));
  plan_.halve_first_completion = false;
  EXPECT_EQ(testing::StartRead(*engine, "disk", 0, 65536, &Record, &other), StartOutcome::kQueued);
  while (engine->reads_in_flight() > 0) engine->PollOnce();
  EXPECT_EQ(other.count, 1);
  EXPECT_TRUE(other.data == Expected(0, 65536));
}

// Many pieces in flight at once: eight generic reads of 257 pieces each. The completion queue is
// sized for the most pieces the slots can have in flight, so none is lost.
TEST_P(BackendFaultTest, EveryPieceOfManyLargeFragmentedReadsCompletes) {
  EngineConfig config;
  config.generic_slots = 8;
  config.max_io_bytes = 4096;
  std::vector<Delivery> d(8);  // outlives the engine, which delivers into it until it is gone
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  for (int i = 0; i < 8; ++i) {
    // Unaligned by 100 bytes: generic path, 257 pieces each.
    ASSERT_EQ(
        testing::StartRead(*engine, "disk", i * (1 << 20) + 100, (1 << 20) - 100, &Record, &d[i]),
        StartOutcome::kQueued);
  }
  while (engine->reads_in_flight() > 0) engine->PollOnce();
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(d[i].count, 1);
    ASSERT_TRUE(d[i].status.ok()) << d[i].status;
    EXPECT_TRUE(d[i].data == Expected(i * (1 << 20) + 100, (1 << 20) - 100)) << i;
  }
}

// With two devices, neither may hold more than three quarters of a path's slots (at least one is
// left for the other): reads of a device that holds its share answer kDeviceBusy, and the other
// device's reads still start, until every slot is taken (kBusy).
TEST_P(BackendFaultTest, ADeviceHoldsAtMostItsShareOfEachPathsSlots) {
  const std::string other_path = dir_.path() + "/other.img";
  ASSERT_TRUE(testing::WriteAt(other_path, 0, content_, true).ok());
  ASSERT_TRUE(catalog_.AddWholeDevice("other", other_path).ok());
  EngineConfig config;
  config.simple_slots = 4;
  config.generic_slots = 4;
  std::vector<Delivery> d(16);  // outlives the engine, which delivers into it until it is gone
  auto engine = MakeEngine(config);
  ASSERT_NE(engine, nullptr);
  // Nothing is delivered, so no slot is freed, until the engine is polled.
  for (const uint64_t length : {uint64_t{4096}, uint64_t{65536}}) {  // simple, then generic
    size_t next = length == 4096 ? 0 : 8;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(testing::StartRead(*engine, "disk", i * length, length, &Record, &d[next++]),
                StartOutcome::kQueued);
    }
    EXPECT_EQ(testing::StartRead(*engine, "disk", 0, length, &Record, &d[next]),
              StartOutcome::kDeviceBusy);
    EXPECT_EQ(testing::StartRead(*engine, "other", 0, length, &Record, &d[next++]),
              StartOutcome::kQueued);
    EXPECT_EQ(testing::StartRead(*engine, "other", length, length, &Record, &d[next]),
              StartOutcome::kBusy);
    while (engine->reads_in_flight() > 0) engine->PollOnce();
    // Delivered: the shares are free again.
    EXPECT_EQ(testing::StartRead(*engine, "disk", 0, length, &Record, &d[next++]),
              StartOutcome::kQueued);
    while (engine->reads_in_flight() > 0) engine->PollOnce();
  }
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{8}, size_t{9}, size_t{10}}) {
    EXPECT_EQ(d[i].count, 1) << i;
    EXPECT_TRUE(d[i].status.ok()) << d[i].status;
  }
  EXPECT_TRUE(d[3].data == Expected(0, 4096));  // "other" holds the same bytes
  EXPECT_TRUE(d[11].data == Expected(0, 65536));
}

INSTANTIATE_TEST_SUITE_P(Engines, BackendFaultTest,
                         ::testing::Values(IoEngine::kIoUring, IoEngine::kPsync),
                         [](const auto& info) { return std::string(IoEngineName(info.param)); });

}  // namespace
}  // namespace blockread::storage
