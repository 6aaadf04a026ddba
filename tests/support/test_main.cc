// main() for every test binary: when root, move into a private mount namespace first, so that
// filesystems a test mounts vanish with the process even if it crashes (see loop_device.h).
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      perror("blockread tests: private mount namespace");
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
