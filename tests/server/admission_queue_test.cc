// The worker's admission queue: bounded, round-robin across calls, FIFO within a call.
#include "server/admission_queue.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blockread::server {
namespace {

// A read that is admitted while the test says there are free slots.
struct FakeRead final : WaitingRead {
  std::string name;
  int* free_slots = nullptr;
  std::vector<std::string>* admitted = nullptr;
  std::vector<std::string>* left = nullptr;
  // The read's device holds its share: it waits, others may start.
  bool device_busy = false;
  Admission TryAdmit() override {
    if (*free_slots == 0) return Admission::kSlotsBusy;
    if (device_busy) return Admission::kDeviceBusy;
    --*free_slots;
    admitted->push_back(name);
    return Admission::kStarted;
  }
  void LeftQueue() override { left->push_back(name); }
};

class AdmissionQueueTest : public ::testing::Test {
 protected:
  FakeRead& Make(const std::string& name) {
    reads_.push_back(std::make_unique<FakeRead>());
    FakeRead& read = *reads_.back();
    read.name = name;
    read.free_slots = &free_slots_;
    read.admitted = &admitted_;
    read.left = &left_;
    return read;
  }
  int free_slots_ = 0;
  std::vector<std::string> admitted_;
  std::vector<std::string> left_;
  std::vector<std::unique_ptr<FakeRead>> reads_;
};

TEST_F(AdmissionQueueTest, AFloodingCallGetsOneSlotPerTurnLikeEveryOtherCall) {
  AdmissionQueue queue(100);
  WaitList flood, a, b;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(queue.Push(flood, Make("f" + std::to_string(i))));
  ASSERT_TRUE(queue.Push(a, Make("a0")));
  ASSERT_TRUE(queue.Push(b, Make("b0")));
  ASSERT_TRUE(queue.Push(a, Make("a1")));
  EXPECT_EQ(queue.size(), 9u);

  free_slots_ = 5;
  EXPECT_EQ(queue.AdmitWaiting(), 5);
  // Round-robin over the calls in the order they started waiting, FIFO within each.
  EXPECT_EQ(admitted_, (std::vector<std::string>{"f0", "a0", "b0", "f1", "a1"}));
  EXPECT_EQ(left_, admitted_);
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(b.empty());

  // No slot: nothing moves, nothing is lost.
  EXPECT_EQ(queue.AdmitWaiting(), 0);
  EXPECT_EQ(queue.size(), 4u);
  free_slots_ = 100;
  EXPECT_EQ(queue.AdmitWaiting(), 4);
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(admitted_.back(), "f5");
}

TEST_F(AdmissionQueueTest, IsBoundedAndRefusesPastItsCapacity) {
  AdmissionQueue queue(3);
  WaitList a, b;
  EXPECT_TRUE(queue.Push(a, Make("a0")));
  EXPECT_TRUE(queue.Push(b, Make("b0")));
  EXPECT_TRUE(queue.Push(a, Make("a1")));
  EXPECT_FALSE(queue.Push(b, Make("b1")));
  EXPECT_EQ(queue.size(), 3u);
  free_slots_ = 1;
  EXPECT_EQ(queue.AdmitWaiting(), 1);
  EXPECT_TRUE(queue.Push(b, Make("b1")));
}

TEST_F(AdmissionQueueTest, RemovingACallDropsOnlyItsReadsAndKeepsTheTurnOrder) {
  AdmissionQueue queue(100);
  WaitList a, b, c;
  ASSERT_TRUE(queue.Push(a, Make("a0")));
  ASSERT_TRUE(queue.Push(b, Make("b0")));
  ASSERT_TRUE(queue.Push(b, Make("b1")));
  ASSERT_TRUE(queue.Push(c, Make("c0")));
  queue.RemoveAll(b);  // b's call was cancelled
  EXPECT_EQ(left_, (std::vector<std::string>{"b0", "b1"}));
  EXPECT_TRUE(admitted_.empty());
  EXPECT_EQ(queue.size(), 2u);
  queue.RemoveAll(b);  // twice is harmless
  left_.clear();
  free_slots_ = 10;
  EXPECT_EQ(queue.AdmitWaiting(), 2);
  EXPECT_EQ(admitted_, (std::vector<std::string>{"a0", "c0"}));
  // A list can wait again after it emptied.
  ASSERT_TRUE(queue.Push(b, Make("b2")));
  ASSERT_TRUE(queue.Push(a, Make("a1")));
  EXPECT_EQ(queue.AdmitWaiting(), 2);
  EXPECT_EQ(admitted_.back(), "a1");
}

TEST_F(AdmissionQueueTest, RemovingTheCallWhoseTurnIsNextPassesTheTurnOn) {
  AdmissionQueue queue(100);
  WaitList a, b;
  ASSERT_TRUE(queue.Push(a, Make("a0")));
  ASSERT_TRUE(queue.Push(a, Make("a1")));
  ASSERT_TRUE(queue.Push(b, Make("b0")));
  free_slots_ = 1;
  EXPECT_EQ(queue.AdmitWaiting(), 1);  // a0; b is next
  queue.RemoveAll(b);
  free_slots_ = 1;
  EXPECT_EQ(queue.AdmitWaiting(), 1);
  EXPECT_EQ(admitted_, (std::vector<std::string>{"a0", "a1"}));
  EXPECT_TRUE(queue.empty());
  queue.RemoveAll(a);
}

TEST_F(AdmissionQueueTest, ACallWaitingForItsDevicesShareIsPassedOverAndHoldsUpNobody) {
  AdmissionQueue queue(100);
  WaitList slow, a, b;
  FakeRead& slow0 = Make("slow0");
  FakeRead& slow1 = Make("slow1");
  slow0.device_busy = slow1.device_busy = true;  // a stalled device holds its share
  ASSERT_TRUE(queue.Push(slow, slow0));
  ASSERT_TRUE(queue.Push(slow, slow1));
  ASSERT_TRUE(queue.Push(a, Make("a0")));
  ASSERT_TRUE(queue.Push(b, Make("b0")));
  ASSERT_TRUE(queue.Push(a, Make("a1")));

  free_slots_ = 10;
  EXPECT_EQ(queue.AdmitWaiting(), 3);
  EXPECT_EQ(admitted_, (std::vector<std::string>{"a0", "b0", "a1"}));
  // Only the stalled device's reads wait, in order; a turn with nothing else to do ends.
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.AdmitWaiting(), 0);

  // The device caught up: its call gets its turns again, first read first.
  slow0.device_busy = slow1.device_busy = false;
  EXPECT_EQ(queue.AdmitWaiting(), 2);
  EXPECT_EQ(admitted_.back(), "slow1");
  EXPECT_TRUE(queue.empty());
}

TEST_F(AdmissionQueueTest, NoFreeSlotEndsTheTurnEvenAfterAPassedOverCall) {
  AdmissionQueue queue(100);
  WaitList slow, a;
  FakeRead& slow0 = Make("slow0");
  slow0.device_busy = true;
  ASSERT_TRUE(queue.Push(slow, slow0));
  ASSERT_TRUE(queue.Push(a, Make("a0")));
  free_slots_ = 0;
  EXPECT_EQ(queue.AdmitWaiting(), 0);
  EXPECT_EQ(queue.size(), 2u);
  free_slots_ = 1;
  EXPECT_EQ(queue.AdmitWaiting(), 1);
  EXPECT_EQ(admitted_, (std::vector<std::string>{"a0"}));
  queue.RemoveAll(slow);
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace blockread::server
